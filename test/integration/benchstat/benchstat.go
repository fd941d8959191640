// Package benchstat is the arithmetic of the benchmarks that repeat runs: percentiles within a
// run, and medians with their spread across runs.
package benchstat

import (
	"cmp"
	"fmt"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Percentile is the nearest-rank p-th percentile (0 < p <= 100) of values (seconds,
// durations): the smallest value that at least p% of the values do not exceed. Zero when there
// are none; values is not changed.
func Percentile[T cmp.Ordered](values []T, p float64) T {
	if len(values) == 0 {
		var zero T
		return zero
	}
	sorted := slices.Sorted(slices.Values(values))
	rank := int(math.Ceil(p / 100 * float64(len(sorted))))
	return sorted[max(rank, 1)-1]
}

// Spread is a statistic's median across runs and its range.
type Spread struct{ Median, Min, Max float64 }

// Of is the median (the mean of the middle two for an even count), minimum and maximum
// of values.
func Of(values []float64) Spread {
	if len(values) == 0 {
		return Spread{}
	}
	s := slices.Sorted(slices.Values(values))
	mid := len(s) / 2
	median := s[mid]
	if len(s)%2 == 0 {
		median = (s[mid-1] + s[mid]) / 2
	}
	return Spread{median, s[0], s[len(s)-1]}
}

// Cell renders a spread with the given decimals: "median (min–max)", or the median alone when
// the runs agree to those decimals.
func (s Spread) Cell(decimals int) string {
	f := func(v float64) string { return fmt.Sprintf("%.*f", decimals, v) }
	if f(s.Min) == f(s.Max) {
		return f(s.Median)
	}
	return fmt.Sprintf("%s (%s–%s)", f(s.Median), f(s.Min), f(s.Max))
}

// Seconds converts durations to seconds.
func Seconds(ds []time.Duration) []float64 {
	out := make([]float64, len(ds))
	for i, d := range ds {
		out[i] = d.Seconds()
	}
	return out
}

// EnvCount is the positive count in the environment variable name, which sets a benchmark's
// size, or def when it is unset; anything else fails the benchmark, naming the variable.
func EnvCount(b testing.TB, name string, def int) int {
	b.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		b.Fatalf("%s=%q: want a positive count", name, v)
	}
	return n
}

// MiB is bytes in mebibytes, as the benchmarks report memory.
func MiB(bytes uint64) float64 { return float64(bytes) / (1 << 20) }

// DriversReportEnv names the environment variable that names the markdown file the drivers'
// benchmarks (concurrent rollouts through one Argo plugin process and through the Tekton
// controller, the Argo path beside the CLI's) append their sections to: `make bench` sets it to
// docs/benchmarks-drivers.md. Unset, they append nothing.
const DriversReportEnv = "INPLACE_ROLLOUT_BENCH_DRIVERS_OUT"

// AppendSection appends to the file $DriversReportEnv names, when set, a markdown section:
// title, what was measured, and a table of rows, each a figure's name and its value.
func AppendSection(b testing.TB, title, what string, rows [][2]string) {
	b.Helper()
	path := os.Getenv(DriversReportEnv)
	if path == "" {
		return
	}
	var s strings.Builder
	fmt.Fprintf(&s, "## %s\n\n%s\n\n| figure | value |\n| --- | --- |\n", title, what)
	for _, r := range rows {
		fmt.Fprintf(&s, "| %s | %s |\n", r[0], r[1])
	}
	s.WriteString("\n")
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		b.Fatalf("appending the section %q to %s: %v", title, path, err)
	}
	if _, err := f.WriteString(s.String()); err != nil {
		f.Close()
		b.Fatalf("appending the section %q to %s: %v", title, path, err)
	}
	if err := f.Close(); err != nil {
		b.Fatalf("appending the section %q to %s: %v", title, path, err)
	}
}
