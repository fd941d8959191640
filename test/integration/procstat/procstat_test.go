package procstat

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"
)

func TestParseStat(t *testing.T) {
	// A real line's shape: utime 1234 and stime 56 ticks are fields 14 and 15.
	const tail = " S 1 2 3 4 5 6 7 8 9 10 1234 56 0 0 20 0 12 0 100 200 300"
	for _, tt := range []struct {
		name, line string
		want       time.Duration
		wantErr    bool
	}{
		{"plain", "42 (inplace-rollout)" + tail, 12900 * time.Millisecond, false},
		{"spaces and parentheses in the name", "42 (a (b) c)" + tail, 12900 * time.Millisecond, false},
		{"no name", "42 inplace-rollout S 1 2", 0, true},
		{"cut short", "42 (x) S 1 2 3", 0, true},
		{"not a number", "42 (x) S 1 2 3 4 5 6 7 8 9 10 abc 56", 0, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseStat(tt.line)
			if (err != nil) != tt.wantErr || got != tt.want {
				t.Errorf("parseStat = %s, %v; want %s, error %v", got, err, tt.want, tt.wantErr)
			}
		})
	}
}

func TestParseStatus(t *testing.T) {
	for _, tt := range []struct {
		name, status string
		rss, peak    uint64
		wantErr      bool
	}{
		{"both", "Name:\tx\nVmHWM:\t  2048 kB\nVmRSS:\t  1024 kB\nThreads:\t5\n", 1 << 20, 2 << 20, false},
		{"a zombie has neither", "Name:\tx\nState:\tZ (zombie)\n", 0, 0, true},
		{"not a number", "VmHWM:\tlots kB\nVmRSS:\t1 kB\n", 0, 0, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			rss, peak, err := parseStatus(tt.status)
			if (err != nil) != tt.wantErr || rss != tt.rss || peak != tt.peak {
				t.Errorf("parseStatus = %d, %d, %v; want %d, %d, error %v", rss, peak, err, tt.rss, tt.peak, tt.wantErr)
			}
		})
	}
}

func TestGoroutines(t *testing.T) {
	for _, tt := range []struct {
		name, body string
		want       int
		wantErr    bool
	}{
		{"gauge", "# HELP go_goroutines Number of goroutines that currently exist.\n# TYPE go_goroutines gauge\ngo_goroutines 137\n# TYPE process_resident_memory_bytes gauge\nprocess_resident_memory_bytes 7.0e+07\n", 137, false},
		{"absent", "# TYPE process_resident_memory_bytes gauge\nprocess_resident_memory_bytes 7.0e+07\n", 0, true},
		{"not an exposition", "<html>", 0, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, err := goroutines(strings.NewReader(tt.body))
			if (err != nil) != tt.wantErr || got != tt.want {
				t.Errorf("goroutines = %d, %v; want %d, error %v", got, err, tt.want, tt.wantErr)
			}
		})
	}
}

func TestGoroutinesOverHTTP(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/metrics" {
			http.NotFound(w, r)
			return
		}
		fmt.Fprint(w, "# TYPE go_goroutines gauge\ngo_goroutines 9\n")
	}))
	t.Cleanup(srv.Close)
	if n, err := Goroutines(srv.URL + "/metrics"); err != nil || n != 9 {
		t.Errorf("Goroutines(/metrics) = %d, %v; want 9", n, err)
	}
	if _, err := Goroutines(srv.URL + "/nothing"); err == nil {
		t.Error("Goroutines of a 404 succeeded")
	}
}

// TestReadThisProcess reads this process: the CPU it burned shows, and a peak reset and
// allocation after it leave the peak at least the RSS.
func TestReadThisProcess(t *testing.T) {
	before, err := Read(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	for end := time.Now().Add(50 * time.Millisecond); time.Now().Before(end); {
		runtime.Gosched()
	}
	if err := ResetPeak(os.Getpid()); err != nil {
		t.Fatal(err)
	}
	ballast := make([]byte, 32<<20)
	for i := range ballast {
		ballast[i] = byte(i)
	}
	after, err := Read(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	runtime.KeepAlive(ballast)
	if after.CPU <= before.CPU {
		t.Errorf("CPU %s after 50 ms of spinning, %s before", after.CPU, before.CPU)
	}
	if after.RSS < 32<<20 || after.PeakRSS < after.RSS {
		t.Errorf("RSS %d, peak %d after touching 32 MiB", after.RSS, after.PeakRSS)
	}
	if _, err := Read(-1); err == nil {
		t.Error("Read(-1) succeeded")
	}
}
