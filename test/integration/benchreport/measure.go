package benchreport

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"k8s.io/client-go/kubernetes"
)

// apiCounts are the kube-apiserver's request counters (apiserver_request_total) summed the
// ways the report needs.
type apiCounts struct {
	// podWrites are POST, PUT, PATCH and DELETE requests on pods, subresources (status,
	// binding) left out: what every client wrote to the pods' objects.
	podWrites int
	// writes are all mutating requests, on every resource and subresource.
	writes int
	// requests are all requests but WATCH, which are long-lived.
	requests int
}

func (a apiCounts) sub(b apiCounts) apiCounts {
	return apiCounts{podWrites: a.podWrites - b.podWrites, writes: a.writes - b.writes, requests: a.requests - b.requests}
}

// readAPICounts scrapes the apiserver's /metrics.
func readAPICounts(ctx context.Context, client kubernetes.Interface) (apiCounts, error) {
	data, err := client.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return apiCounts{}, fmt.Errorf("reading kube-apiserver /metrics: %w", err)
	}
	return parseAPICounts(data), nil
}

func parseAPICounts(data []byte) apiCounts {
	var c apiCounts
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "apiserver_request_total{") {
			continue
		}
		fields := strings.Fields(line)
		n, err := strconv.ParseFloat(fields[len(fields)-1], 64)
		if err != nil {
			continue
		}
		verb := label(line, "verb")
		switch verb {
		case "WATCH", "WATCHLIST":
			continue
		case "POST", "PUT", "PATCH", "DELETE":
			c.writes += int(n)
			if label(line, "resource") == "pods" && label(line, "subresource") == "" {
				c.podWrites += int(n)
			}
		}
		c.requests += int(n)
	}
	return c
}

// label returns the value of a label in a Prometheus text exposition line.
func label(line, name string) string {
	_, rest, ok := strings.Cut(line, ","+name+`="`)
	if !ok {
		if _, rest, ok = strings.Cut(line, "{"+name+`="`); !ok {
			return ""
		}
	}
	value, _, _ := strings.Cut(rest, `"`)
	return value
}

// clockTicks is USER_HZ, the unit of /proc/PID/stat's CPU times: 100 on every Linux
// architecture Go supports.
const clockTicks = 100

// procUsage is a process's CPU time so far and its peak resident set, from /proc.
type procUsage struct {
	cpuSeconds float64
	peakRSSKiB int
	// command is set when the usage is of a process the bench started and waited for.
	command bool
}

func readProc(pid int) (procUsage, error) {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return procUsage{}, fmt.Errorf("reading CPU time of process %d: %w", pid, err)
	}
	// The command name, in parentheses, may hold spaces: fields count from after it.
	i := bytes.LastIndexByte(stat, ')')
	fields := strings.Fields(string(stat[i+1:]))
	if len(fields) < 13 {
		return procUsage{}, fmt.Errorf("reading CPU time of process %d: /proc/%d/stat has %d fields", pid, pid, len(fields))
	}
	utime, err1 := strconv.ParseInt(fields[11], 10, 64) // field 14 of stat
	stime, err2 := strconv.ParseInt(fields[12], 10, 64) // field 15
	if err1 != nil || err2 != nil {
		return procUsage{}, fmt.Errorf("reading CPU time of process %d: utime %q, stime %q", pid, fields[11], fields[12])
	}
	u := procUsage{cpuSeconds: float64(utime+stime) / clockTicks}
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return procUsage{}, fmt.Errorf("reading memory of process %d: %w", pid, err)
	}
	for _, line := range strings.Split(string(status), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			u.peakRSSKiB, _ = strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
		}
	}
	return u, nil
}

// samplePeakRSS returns the greatest peak resident set (VmHWM) that process pid showed, read
// every 20ms until stop is closed. The growth of its last 20ms before it exits may be missed.
func samplePeakRSS(pid int, stop <-chan struct{}) int {
	peak := 0
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		if u, err := readProc(pid); err == nil {
			peak = max(peak, u.peakRSSKiB)
		}
		select {
		case <-stop:
			return peak
		case <-tick.C:
		}
	}
}

// resetPeakRSS makes the process's peak resident set its current one, so that a later read
// gives the peak of what came after.
func resetPeakRSS(pid int) error {
	if err := os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", pid), []byte("5"), 0); err != nil {
		return fmt.Errorf("resetting the peak RSS of process %d: %w", pid, err)
	}
	return nil
}
