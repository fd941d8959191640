package rollout

import (
	"errors"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/intstr"
)

// FuzzBatches checks --batches from the text to the pod counts: ParseBatches keeps each entry
// as written (no count wraps around) and refuses with bad input naming the batches; a list
// CheckBatches accepts resolves, for every total from 0 to 1000, to strictly increasing counts
// ending at the total (or, mixing counts and percentages, to an error saying with how many
// pods); a list it refuses is refused whatever the total.
func FuzzBatches(f *testing.F) {
	for _, seed := range []string{
		"", "100%", "1,100%", "1, 25%, 100%", "10%,20%,50%,100%", "1,2,3,100%", "5,10%,100%",
		"0,100%", "-1,100%", "1,1,100%", "50%,25%,100%", "1,50%", "100.0%", "0%,100%",
		"12.5%,100%", "1e1%,100%", "NaN%,100%", "+3,100%", "007,100%", " 1 ,100%",
		"4294967297,100%", "2147483647,100%", "2147483648,100%", "1,,100%", "x,100%", "100%,100%", "%",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, s string) {
		batches, err := ParseBatches(s)
		if err != nil {
			var ie *InvalidError
			if !errors.As(err, &ie) || !strings.HasPrefix(err.Error(), "batches ") || batches != nil {
				t.Fatalf("ParseBatches(%q) = %v, %T %v; want no batches and bad input naming the batches", s, batches, err, err)
			}
			return
		}
		parts := strings.Split(s, ",")
		if len(parts) != len(batches) {
			t.Fatalf("ParseBatches(%q) = %d batches from %d entries", s, len(batches), len(parts))
		}
		for i, b := range batches {
			part := strings.TrimSpace(parts[i])
			if b.Type == intstr.String {
				if b.StrVal != part {
					t.Fatalf("ParseBatches(%q): entry %q read as %q", s, part, b.StrVal)
				}
				continue
			}
			if n, err := strconv.ParseInt(part, 10, 64); err != nil || n != int64(b.IntVal) {
				t.Fatalf("ParseBatches(%q): entry %q read as the count %d", s, part, b.IntVal)
			}
		}
		again, err := ParseBatches(formatBatches(batches))
		if err != nil || !reflect.DeepEqual(again, batches) {
			t.Fatalf("ParseBatches(%q) = %v; parsing it written out again gives %v, %v", s, batches, again, err)
		}

		if err := CheckBatches(batches); err != nil {
			var ie *InvalidError
			if !errors.As(err, &ie) || !strings.HasPrefix(err.Error(), "batches ") {
				t.Fatalf("CheckBatches(%q) = %T %v; want bad input naming the batches", s, err, err)
			}
			for _, total := range []int{0, 1, 7, 100, 1000} {
				if counts, err := ResolveBatches(batches, total); err == nil {
					t.Fatalf("CheckBatches(%q) refuses them (%v), but for %d pods they resolve to %v", s, err, total, counts)
				}
			}
			return
		}
		for total := 0; total <= 1000; total++ {
			counts, err := ResolveBatches(batches, total)
			if err == nil {
				checkCounts(t, s, total, counts)
				continue
			}
			var ie *InvalidError
			if !errors.As(err, &ie) || !strings.Contains(err.Error(), "with "+strconv.Itoa(total)+" pods") {
				t.Fatalf("ResolveBatches(%q, %d) = %T %v; want bad input saying with how many pods", s, total, err, err)
			}
			// A running rollout whose workload was scaled to this total never stops on its
			// batches: it drops the one that resolves to fewer pods.
			counts, err = batchCounts(batches, total)
			if err != nil {
				t.Fatalf("batchCounts(%q, %d) of checked batches: %v", s, total, err)
			}
			checkCounts(t, s, total, counts)
		}
	})
}

// checkCounts fails t unless counts are strictly increasing, positive (for pods to update) and
// end at total.
func checkCounts(t *testing.T, s string, total int, counts []int) {
	t.Helper()
	if len(counts) == 0 || counts[len(counts)-1] != total {
		t.Fatalf("batches %q for %d pods resolve to %v: not ending at %d", s, total, counts, total)
	}
	for i, n := range counts {
		if (total > 0 && n <= 0) || (i > 0 && n <= counts[i-1]) {
			t.Fatalf("batches %q for %d pods resolve to %v: not strictly increasing from above 0", s, total, counts)
		}
	}
}
