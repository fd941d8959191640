package benchreport

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

var update = flag.Bool("update", false, "rewrite the golden files")

// sampleReport is a run with every approach at two sizes, whose numbers make each goal of the
// summary come out one way: overhead missed, writes met, growth met.
func sampleReport() *Report {
	r := &Report{
		Date:        time.Date(2026, 12, 2, 9, 0, 0, 0, time.UTC),
		Machine:     "2 CPUs, go1.26.8, linux/amd64",
		Settings:    []Setting{{Name: "nodes", Value: "10 simulated kubelets"}},
		ClientQPS:   100,
		ClientBurst: 200,
		Profile:     "      flat  flat%   sum%        cum   cum%\n         0     0%     0%      3.04s 57.25%  main.main\n",
		ProfileFile: ".dev/bench/inplace-rollout-cpu.pprof",
	}
	for _, n := range []int{100, 1000} {
		f := float64(n) / 100
		add := func(a Approach, wall float64, podWrites int, cpu float64, recreated int) {
			r.Results = append(r.Results, Result{Approach: a, Pods: n, Wall: time.Duration(wall * float64(time.Second)),
				PodWrites: podWrites, Writes: 3 * podWrites, Requests: 5 * podWrites, Driver: string(a) + " driver",
				DriverCPU: cpu, DriverPeakRSSKiB: 64 * 1024, APIServerCPU: 2 * cpu, Recreated: recreated})
		}
		add(InPlace, 5+1.55*f, 2*n, 0.5*f, 0)
		add(FloorLoop, 4+0.9*f, n, 0.1*f, 0)
		add(StatefulSetRolling, 20*f, 3*n, 2*f, n)
		add(DeploymentRolling, 25*f, 3*n, 2.5*f, n)
		add(CloneSetInPlace, 6+f, 2*n, f, 0)
	}
	return r
}

func TestRenderMatchesGolden(t *testing.T) {
	var buf bytes.Buffer
	if err := Render(&buf, sampleReport()); err != nil {
		t.Fatal(err)
	}
	golden := filepath.Join("testdata", "benchmarks.golden.md")
	if *update {
		if err := os.WriteFile(golden, buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run go test -run TestRenderMatchesGolden -update to write it)", err)
	}
	if buf.String() != string(want) {
		t.Errorf("Render differs from %s (go test -update rewrites it); got:\n%s", golden, buf.String())
	}
}

// TestRenderSummary checks the summary's figures and verdicts against the sample's numbers.
func TestRenderSummary(t *testing.T) {
	tests := []struct {
		name string
		edit func(*Report)
		want []string
		// notWant are texts the report must not hold.
		notWant []string
	}{
		{"sample", func(*Report) {}, []string{
			"At 1000 pods the in-place rollout took 20.5 s; statefulset-rollingupdate took 200.0 s: the in-place rollout was 9.8× as fast.",
			"deployment-rollingupdate took 250.0 s: the in-place rollout was 12.2× as fast.",
			"kruise-cloneset took 16.0 s: kruise-cloneset was 1.3× as fast as the in-place rollout.",
			"Overhead over the floor at 1000 pods: 20.5 s against 13.0 s, +58% (goal: at most 10%, missed).",
			"the in-place rollout's 2000 pod writes cannot take less than 18.0 s, 88% of its 20.5 s, where the floor's 1000 need 8.0 s.",
			"alone puts the least time possible at this rate limit 38% over the floor's 13.0 s.",
			"kube-apiserver took 10.0 s of CPU over the in-place rollout's 20.5 s (0.49 CPUs on average), 2.0 s over the floor's 13.0 s (0.15).",
			"Pod writes per pod at 1000 pods: 2.00 (goal: at most 2 without a readiness gate, met).",
			"Cost per pod at 1000 pods over that at 100: wall time 0.31×, CPU seconds 1.00× (goal: within 20%, met).",
		}, nil},
		{"no CloneSet", func(r *Report) {
			r.CloneSetSkipped = "kruise-manager v1.8.3 did not start here: boom"
			kept := r.Results[:0]
			for _, res := range r.Results {
				if res.Approach != CloneSetInPlace {
					kept = append(kept, res)
				}
			}
			r.Results = kept
		}, []string{"- **kruise-cloneset**: not measured: kruise-manager v1.8.3 did not start here: boom"}, nil},
		{"overhead missed, not by the rate limit", func(r *Report) {
			for i := range r.Results {
				if r.Results[i].Pods == 1000 && r.Results[i].Approach == FloorLoop {
					r.Results[i].Wall = 18 * time.Second
				}
			}
		}, []string{"+14% (goal: at most 10%, missed)", "The rate limit does not account for the overhead"}, []string{"alone puts the least time"}},
		{"overhead met, writes and growth missed", func(r *Report) {
			for i := range r.Results {
				if r.Results[i].Approach == InPlace && r.Results[i].Pods == 1000 {
					r.Results[i].Wall = 14 * time.Second
					r.Results[i].PodWrites = 2500
					r.Results[i].DriverCPU = 7
				}
			}
		}, []string{"+8% (goal: at most 10%, met)", "2.50 (goal: at most 2 without a readiness gate, missed)", "CPU seconds 1.40× (goal: within 20%, missed)"},
			[]string{"at the clients' rate limit"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := sampleReport()
			tt.edit(r)
			var buf bytes.Buffer
			if err := Render(&buf, r); err != nil {
				t.Fatal(err)
			}
			for _, w := range tt.want {
				if !strings.Contains(buf.String(), w) {
					t.Errorf("report lacks %q; got:\n%s", w, buf.String())
				}
			}
			for _, w := range tt.notWant {
				if strings.Contains(buf.String(), w) {
					t.Errorf("report holds %q; got:\n%s", w, buf.String())
				}
			}
		})
	}
}

func TestRenderRefusesNoResults(t *testing.T) {
	if err := Render(&bytes.Buffer{}, &Report{}); err == nil {
		t.Fatal("Render of a report without results: no error")
	}
}

// TestWritePlotsDrawsPNGs: each plot the report links is written, as a PNG.
func TestWritePlotsDrawsPNGs(t *testing.T) {
	dir := t.TempDir()
	if err := WritePlots(dir, sampleReport()); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{plotWallFile, plotPerPodFile, plotCPUFile} {
		data, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.HasPrefix(data, []byte("\x89PNG\r\n\x1a\n")) || len(data) < 1000 {
			t.Errorf("%s: %d bytes, not a PNG plot", f, len(data))
		}
	}
}
