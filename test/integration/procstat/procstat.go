// Package procstat reads what the benchmarks report of a process running on this machine, such
// as a plugin or controller they drive: its CPU time and resident memory from /proc, and its
// goroutines from its Prometheus /metrics.
package procstat

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// userHZ is the unit of /proc's CPU times: USER_HZ, 100 on every architecture Linux runs Go on,
// whatever the kernel's own tick.
const userHZ = 100

// Usage is a process's resources at one moment.
type Usage struct {
	// CPU is the user and system time the process used since it started.
	CPU time.Duration
	// RSS is its resident memory now; PeakRSS the most it held since it started or since
	// ResetPeak, in bytes.
	RSS, PeakRSS uint64
}

// Read reads the usage of process pid from /proc.
func Read(pid int) (Usage, error) {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return Usage{}, fmt.Errorf("reading the CPU time of process %d: %w", pid, err)
	}
	cpu, err := parseStat(string(stat))
	if err != nil {
		return Usage{}, fmt.Errorf("reading the CPU time of process %d: %w", pid, err)
	}
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return Usage{}, fmt.Errorf("reading the memory of process %d: %w", pid, err)
	}
	rss, peak, err := parseStatus(string(status))
	if err != nil {
		return Usage{}, fmt.Errorf("reading the memory of process %d: %w", pid, err)
	}
	return Usage{CPU: cpu, RSS: rss, PeakRSS: peak}, nil
}

// ResetPeak makes process pid's peak RSS its RSS now, so that the next Read's PeakRSS is the
// peak of what ran in between, not of the process's whole life.
func ResetPeak(pid int) error {
	// 5 resets the peak resident set size (proc(5), /proc/pid/clear_refs).
	if err := os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", pid), []byte("5"), 0); err != nil {
		return fmt.Errorf("resetting the peak RSS of process %d: %w", pid, err)
	}
	return nil
}

// parseStat is the user plus system CPU time of a /proc/pid/stat line.
func parseStat(line string) (time.Duration, error) {
	// The command name, field 2, is in parentheses and may hold spaces and parentheses: the
	// fields are counted from the last ')'.
	i := strings.LastIndexByte(line, ')')
	if i < 0 {
		return 0, fmt.Errorf("no command name in %q", line)
	}
	fields := strings.Fields(line[i+1:])
	// fields[0] is field 3 (state); utime and stime are fields 14 and 15.
	if len(fields) < 13 {
		return 0, fmt.Errorf("%d fields after the command name, want at least 13", len(fields))
	}
	var ticks uint64
	for _, f := range fields[11:13] {
		n, err := strconv.ParseUint(f, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("CPU ticks %q: %w", f, err)
		}
		ticks += n
	}
	return time.Duration(ticks) * time.Second / userHZ, nil
}

// parseStatus is the current and peak resident memory, in bytes, of a /proc/pid/status.
func parseStatus(status string) (rss, peak uint64, err error) {
	var seen int
	for line := range strings.Lines(status) {
		field, value, _ := strings.Cut(line, ":")
		var into *uint64
		switch field {
		case "VmRSS":
			into = &rss
		case "VmHWM":
			into = &peak
		default:
			continue
		}
		kb, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(value), " kB"), 10, 64)
		if err != nil {
			return 0, 0, fmt.Errorf("%s %q: %w", field, strings.TrimSpace(value), err)
		}
		*into = kb * 1024
		seen++
	}
	if seen != 2 {
		return 0, 0, errors.New("no VmRSS and VmHWM: the process is a zombie or a kernel thread")
	}
	return rss, peak, nil
}

// Goroutines is the go_goroutines gauge the Prometheus /metrics at url serves: how many
// goroutines the process runs.
func Goroutines(url string) (int, error) {
	client := &http.Client{Timeout: 10 * time.Second}
	resp, err := client.Get(url)
	if err != nil {
		return 0, fmt.Errorf("reading the goroutines from %s: %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("reading the goroutines from %s: %s", url, resp.Status)
	}
	n, err := goroutines(resp.Body)
	if err != nil {
		return 0, fmt.Errorf("reading the goroutines from %s: %w", url, err)
	}
	return n, nil
}

// goroutines is the go_goroutines gauge of a Prometheus text exposition.
func goroutines(r io.Reader) (int, error) {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(r)
	if err != nil {
		return 0, fmt.Errorf("parsing the metrics: %w", err)
	}
	f, ok := families["go_goroutines"]
	if !ok || len(f.GetMetric()) != 1 || f.GetMetric()[0].GetGauge() == nil {
		return 0, errors.New("no go_goroutines gauge: the process does not serve Go's runtime metrics")
	}
	return int(f.GetMetric()[0].GetGauge().GetValue()), nil
}
