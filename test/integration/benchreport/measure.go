package benchreport

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/inplace-rollout/inplace-rollout/test/integration/procstat"
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

// procUsage is a process's CPU time so far and its peak resident set, from /proc.
type procUsage struct {
	cpuSeconds float64
	peakRSSKiB int
	// command is set when the usage is of a process the bench started and waited for.
	command bool
}

// readProc reads process pid's usage (procstat.Read) in the report's units.
func readProc(pid int) (procUsage, error) {
	u, err := procstat.Read(pid)
	if err != nil {
		return procUsage{}, err
	}
	return procUsage{cpuSeconds: u.CPU.Seconds(), peakRSSKiB: int(u.PeakRSS / 1024)}, nil
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
