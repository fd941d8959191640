package benchstat

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

func TestPercentile(t *testing.T) {
	hundred := make([]float64, 100)
	for i := range hundred {
		hundred[i] = float64(100 - i) // 100 .. 1, unsorted
	}
	for _, c := range []struct {
		name   string
		values []float64
		p      float64
		want   float64
	}{
		{"none", nil, 50, 0},
		{"one", []float64{7}, 99, 7},
		{"p50 of two is the lower", []float64{2, 1}, 50, 1},
		{"p50 of three", []float64{3, 1, 2}, 50, 2},
		{"p99 of three is the max", []float64{3, 1, 2}, 99, 3},
		{"p50 of 1..100", hundred, 50, 50},
		{"p99 of 1..100", hundred, 99, 99},
		{"p100 of 1..100", hundred, 100, 100},
		{"tiny p is the min", hundred, 0.1, 1},
	} {
		if got := Percentile(c.values, c.p); got != c.want {
			t.Errorf("%s: Percentile(%v, %v) = %v, want %v", c.name, c.values, c.p, got, c.want)
		}
	}
	if hundred[0] != 100 {
		t.Errorf("Percentile sorted its argument in place: %v", hundred[:3])
	}
}

func TestSpreadOf(t *testing.T) {
	for _, c := range []struct {
		values []float64
		want   Spread
	}{
		{nil, Spread{}},
		{[]float64{4}, Spread{4, 4, 4}},
		{[]float64{3, 1, 2}, Spread{2, 1, 3}},
		{[]float64{4, 1, 3, 2}, Spread{2.5, 1, 4}},
	} {
		if got := Of(c.values); got != c.want {
			t.Errorf("Of(%v) = %+v, want %+v", c.values, got, c.want)
		}
	}
	for _, c := range []struct {
		s    Spread
		want string
	}{
		{Spread{1.234, 1.1, 1.5}, "1.23 (1.10–1.50)"},
		{Spread{2, 2.001, 1.999}, "2.00"},
	} {
		if got := c.s.Cell(2); got != c.want {
			t.Errorf("%+v.Cell(2) = %q, want %q", c.s, got, c.want)
		}
	}
}

// Durations are measured as such: the same nearest rank, and the input left as it was.
func TestPercentileOfDurations(t *testing.T) {
	hundred := make([]time.Duration, 100)
	for i := range hundred {
		// Reversed, so that Percentile must sort.
		hundred[i] = time.Duration(100-i) * time.Millisecond
	}
	for _, tt := range []struct {
		name string
		ds   []time.Duration
		p    float64
		want time.Duration
	}{
		{"empty", nil, 50, 0},
		{"one", []time.Duration{7}, 99, 7},
		{"median of 100", hundred, 50, 50 * time.Millisecond},
		{"p99 of 100", hundred, 99, 99 * time.Millisecond},
		{"p99 of 3", []time.Duration{3, 1, 2}, 99, 3},
		{"median of 3", []time.Duration{3, 1, 2}, 50, 2},
	} {
		t.Run(tt.name, func(t *testing.T) {
			before := slices.Clone(tt.ds)
			if got := Percentile(tt.ds, tt.p); got != tt.want {
				t.Errorf("Percentile(%v, %v) = %v, want %v", tt.ds, tt.p, got, tt.want)
			}
			if !slices.Equal(before, tt.ds) {
				t.Errorf("Percentile changed its input to %v", tt.ds)
			}
		})
	}
}

func TestAppendSection(t *testing.T) {
	path := filepath.Join(t.TempDir(), "drivers.md")
	t.Setenv(DriversReportEnv, path)
	AppendSection(t, "One", "What one measured.", [][2]string{{"wall time (s)", "12.3"}})
	AppendSection(t, "Two", "What two measured.", nil)
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	want := "## One\n\nWhat one measured.\n\n| figure | value |\n| --- | --- |\n| wall time (s) | 12.3 |\n\n" +
		"## Two\n\nWhat two measured.\n\n| figure | value |\n| --- | --- |\n\n"
	if string(got) != want {
		t.Errorf("file:\n%s\nwant:\n%s", got, want)
	}
	t.Setenv(DriversReportEnv, "")
	AppendSection(t, "Three", "Not written.", nil) // no file named: nothing, no failure
}
