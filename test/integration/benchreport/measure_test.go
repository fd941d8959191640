package benchreport

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"testing"

	"github.com/inplace-rollout/inplace-rollout/test/integration/procstat"
)

func TestParseAPICounts(t *testing.T) {
	metrics := `# HELP apiserver_request_total Counter of apiserver requests
apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="pods",scope="resource",subresource="",verb="PATCH",version="v1"} 120
apiserver_request_total{code="409",component="apiserver",dry_run="",group="",resource="pods",scope="resource",subresource="",verb="PATCH",version="v1"} 3
apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="pods",scope="resource",subresource="status",verb="PATCH",version="v1"} 300
apiserver_request_total{code="201",component="apiserver",dry_run="",group="",resource="pods",scope="resource",subresource="binding",verb="POST",version="v1"} 10
apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="pods",scope="namespace",subresource="",verb="LIST",version="v1"} 7
apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="pods",scope="namespace",subresource="",verb="WATCH",version="v1"} 4
apiserver_request_total{code="201",component="apiserver",dry_run="",group="",resource="events",scope="resource",subresource="",verb="POST",version="v1"} 50
apiserver_request_total{code="200",component="apiserver",dry_run="",group="apps",resource="statefulsets",scope="resource",subresource="",verb="GET",version="v1"} 2
apiserver_request_duration_seconds_count{verb="PATCH"} 999
`
	got := parseAPICounts([]byte(metrics))
	want := apiCounts{podWrites: 123, writes: 123 + 300 + 10 + 50, requests: 123 + 300 + 10 + 7 + 50 + 2}
	if got != want {
		t.Errorf("parseAPICounts = %+v; want %+v", got, want)
	}
}

func TestBatchCounts(t *testing.T) {
	tests := []struct {
		pods int
		want []int
	}{
		{100, []int{10, 20, 30, 40, 50, 60, 70, 80, 90, 100}},
		{1000, []int{100, 200, 300, 400, 500, 600, 700, 800, 900, 1000}},
		{15, []int{2, 3, 5, 6, 8, 9, 11, 12, 14, 15}},
	}
	for _, tt := range tests {
		if got := batchCounts(tt.pods); !slices.Equal(got, tt.want) {
			t.Errorf("batchCounts(%d) = %v; want %v", tt.pods, got, tt.want)
		}
	}
}

// TestReadProcOwnProcess reads this test's own CPU time and peak RSS, before and after work
// that allocates.
func TestReadProcOwnProcess(t *testing.T) {
	pid := os.Getpid()
	if err := procstat.ResetPeak(pid); err != nil {
		t.Fatal(err)
	}
	before, err := readProc(pid)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64<<20)
	for i := range buf {
		buf[i] = byte(i)
	}
	after, err := readProc(pid)
	if err != nil {
		t.Fatal(err)
	}
	if after.peakRSSKiB < before.peakRSSKiB+32*1024 {
		t.Errorf("peak RSS %d KiB after touching 64 MiB; want at least 32 MiB above %d KiB", after.peakRSSKiB, before.peakRSSKiB)
	}
	if after.cpuSeconds < before.cpuSeconds {
		t.Errorf("CPU time went back: %.2f s, then %.2f s", before.cpuSeconds, after.cpuSeconds)
	}
	if _, err := readProc(1 << 30); err == nil {
		t.Error("readProc of a process that does not exist: no error")
	}
	_ = buf[len(buf)-1]
}

// TestShuffledOrders: each repetition and size measures every approach once, in an order drawn
// from the seed alone, and the orders vary between repetitions.
func TestShuffledOrders(t *testing.T) {
	const reps, sizes = 5, 3
	got := shuffledOrders(1, reps, sizes)
	if len(got) != reps*sizes {
		t.Fatalf("%d orders for %d repetitions of %d sizes", len(got), reps, sizes)
	}
	distinct := map[string]bool{}
	for i, o := range got {
		sorted, want := slices.Clone(o), slices.Clone(order)
		slices.Sort(sorted)
		slices.Sort(want)
		if !slices.Equal(sorted, want) {
			t.Errorf("order %d is %v, not a permutation of %v", i, o, order)
		}
		distinct[fmt.Sprint(o)] = true
	}
	if len(distinct) < reps {
		t.Errorf("%d distinct orders in %d: %v", len(distinct), len(got), got)
	}
	if again := shuffledOrders(1, reps, sizes); !slices.EqualFunc(got, again, slices.Equal) {
		t.Errorf("seed 1 drew %v, then %v", got, again)
	}
	if other := shuffledOrders(2, reps, sizes); slices.EqualFunc(got, other, slices.Equal) {
		t.Errorf("seeds 1 and 2 drew the same orders %v", got)
	}
}

// TestRunMeasuredSamplesTheChildsOwnPeak: a command's peak resident set is its own, not the
// benchmark process's that the rusage of a child started by fork and exec keeps.
func TestRunMeasuredSamplesTheChildsOwnPeak(t *testing.T) {
	// The test process holds 200 MiB more than a shell ever needs.
	ballast := make([]byte, 200<<20)
	for i := range ballast {
		ballast[i] = 1
	}
	own, err := readProc(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	u, err := (&Bench{}).runMeasured(exec.Command("/bin/sh", "-c", "sleep 0.3"), "sh")
	if err != nil {
		t.Fatal(err)
	}
	if u.peakRSSKiB <= 0 || u.peakRSSKiB >= own.peakRSSKiB/4 {
		t.Errorf("the shell's peak RSS = %d KiB, want above 0 and far below this process's %d KiB", u.peakRSSKiB, own.peakRSSKiB)
	}
	runtime.KeepAlive(ballast)
}
