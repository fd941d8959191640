package benchreport

import (
	"os"
	"slices"
	"testing"
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
	if err := resetPeakRSS(pid); err != nil {
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
