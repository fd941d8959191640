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
// summary come out one way: overhead missed, writes met, growth met. Its main table ran every
// driver at one rate limit; its table of own defaults ran the controllers at theirs.
func sampleReport() *Report {
	equal := RateLimit{QPS: 100, Burst: 200, Flags: "--qps 100", Note: "one bucket"}
	r := &Report{
		Date:        time.Date(2026, 12, 2, 9, 0, 0, 0, time.UTC),
		Machine:     "2 CPUs, go1.26.8, linux/amd64",
		Settings:    []Setting{{Name: "nodes", Value: "10 simulated kubelets"}},
		ClientQPS:   100,
		ClientBurst: 200,
		Repetitions: 3,
		Seed:        7,
		RateLimits: map[Limits]map[Approach]RateLimit{
			EqualLimits: {InPlace: equal, InPlaceGated: equal, InPlaceWindow: equal, FloorLoop: equal, StatefulSetRolling: equal, DeploymentRolling: equal, CloneSetInPlace: equal},
			DefaultLimits: {
				InPlace:            {QPS: 100, Burst: 200, Note: "two clients"},
				FloorLoop:          {QPS: 100, Burst: 200, Flags: "-qps 100 -burst 200"},
				StatefulSetRolling: {QPS: 20, Burst: 30, Note: "kube-controller-manager's default"},
				DeploymentRolling:  {QPS: 20, Burst: 30, Note: "kube-controller-manager's default"},
				CloneSetInPlace:    {QPS: 30, Burst: 50},
			},
		},
		Profile:     "      flat  flat%   sum%        cum   cum%\n         0     0%     0%      3.04s 57.25%  main.main\n",
		ProfileFile: ".dev/bench/inplace-rollout-cpu.pprof",
	}
	for _, limits := range []Limits{EqualLimits, DefaultLimits} {
		// The controllers at their own defaults take twice as long.
		slow := 1.0
		if limits == DefaultLimits {
			slow = 2
		}
		for rep := 1; rep <= r.Repetitions; rep++ {
			// Each repetition's wall times differ, the floor's less than the others'.
			jitter, floorJitter, kruiseJitter := []float64{1, 0.9, 1.2}[rep-1], []float64{1, 1, 1.1}[rep-1], []float64{1, 1.1, 0.9}[rep-1]
			for _, n := range []int{100, 1000} {
				f := float64(n) / 100
				add := func(a Approach, wall float64, podWrites int, cpu float64, recreated int) {
					j := jitter
					switch a {
					case FloorLoop:
						j = floorJitter
					case CloneSetInPlace:
						j = kruiseJitter
					}
					res := Result{Approach: a, Pods: n, Limits: limits, Rep: rep, Wall: time.Duration(wall * j * float64(time.Second)),
						PodWrites: podWrites, Writes: 3 * podWrites, Requests: 5 * podWrites, Driver: string(a) + " driver",
						DriverCPU: cpu, DriverPeakRSSKiB: 64 * 1024, DriverPeakRSSMeasured: true, APIServerCPU: 2 * cpu, Recreated: recreated,
						CPU:   map[string]float64{CPUAPIServer: 2 * cpu, CPUEtcd: cpu / 2, CPUControllerManager: 0.1 * f, CPUBench: f},
						Calls: map[Call]int{{"kubelet-simulator", "pods/status", "patch"}: 2 * n, {"benchreport", nonResource, "get"}: 2}}
					// Per pod, out for a second per recreated pod, a tenth of one in place;
					// one pod in ten out twice as long; a request in a thousand fails.
					out := time.Duration(float64(time.Second) * j)
					if recreated == 0 {
						out /= 10
					}
					for i := range n {
						d := out
						if i%10 == 9 {
							d *= 2
						}
						res.NotReady, res.OutOfSlice = append(res.NotReady, d), append(res.OutOfSlice, d+out/2)
					}
					res.Sent, res.Failed = int(wall*1000), int(wall*j)
					client := sampleClients[a]
					switch a {
					case StatefulSetRolling, DeploymentRolling:
						res.CPU[CPUControllerManager] = cpu
					case CloneSetInPlace:
						res.CPU[CPUKruise] = cpu
					default:
						res.CPU[CPUCommand] = cpu
					}
					res.Calls[Call{client, "pods", "patch"}] = podWrites
					res.Calls[Call{client, "pods", "list"}] = 10 + rep
					r.Results = append(r.Results, res)
				}
				add(InPlace, 5+1.55*f, 2*n, 0.5*f, 0)
				if limits == EqualLimits {
					add(InPlaceGated, 6+2*f, 4*n, 0.7*f, 0)
					add(InPlaceWindow, 4+1.4*f, 2*n, 0.5*f, 0)
				}
				add(FloorLoop, 4+0.9*f, n, 0.1*f, 0)
				add(StatefulSetRolling, 10*f*slow, 3*n, 2*f, n)
				add(DeploymentRolling, 12.5*f*slow, 3*n, 2.5*f, n)
				add(CloneSetInPlace, (6+f)*slow, 2*n, f, 0)
			}
		}
	}
	return r
}

// sampleClients are the clients that drive each approach's rollout in sampleReport.
var sampleClients = map[Approach]string{
	InPlace: "inplace-rollout", InPlaceGated: "inplace-rollout", InPlaceWindow: "inplace-rollout", FloorLoop: "floor-loop",
	StatefulSetRolling: "kube-controller-manager/statefulset-controller", DeploymentRolling: "kube-controller-manager/replicaset-controller",
	CloneSetInPlace: "kruise-manager",
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
			"- Wall time at 1000 pods, every driver at 100 requests/s, burst 200: inplace-rollout 20.5 (18.4–24.6) s, inplace-rollout-gated 26.0 (23.4–31.2) s, " +
				"inplace-rollout-window 18.0 (16.2–21.6) s, statefulset-rollingupdate 100.0 (90.0–120.0) s, deployment-rollingupdate 125.0 (112.5–150.0) s, kruise-cloneset 16.0 (14.4–17.6) s.\n",
			// Each repetition's pair: 20.5/16, 18.45/17.6, 24.6/14.4 against the CloneSet.
			"- inplace-rollout's wall time over each other approach's at 1000 pods, each repetition's pair (below 1: inplace-rollout took less time): " +
				"inplace-rollout-gated 0.79, inplace-rollout-window 1.14, statefulset-rollingupdate 0.20, deployment-rollingupdate 0.16, kruise-cloneset 1.28 (1.05–1.71).\n",
			"- Pod writes and all writes (every resource, status included) per pod at 1000 pods, against the floor's 1.00 and 3.00: inplace-rollout 2.00 and 6.00; " +
				"inplace-rollout-gated 4.00 and 12.00; inplace-rollout-window 2.00 and 6.00; statefulset-rollingupdate 3.00 and 9.00; deployment-rollingupdate 3.00 and 9.00; kruise-cloneset 2.00 and 6.00.\n",
			"- Pods recreated at 1000 pods: inplace-rollout 0, inplace-rollout-gated 0, inplace-rollout-window 0, statefulset-rollingupdate 1000, deployment-rollingupdate 1000, kruise-cloneset 0.",
			"3 repetitions of\neach approach at each size, interleaved",
			"| repetitions | 3 of every approach at each size, interleaved; order shuffled per repetition and size, seed 7 |",
			"Every driver ran at the same client-side API rate limit",
			"| statefulset-rollingupdate's API rate limit, main table | 100 requests/s, burst 200 (`--qps 100`; one bucket) |",
			"| statefulset-rollingupdate's API rate limit, own-default table | 20 requests/s, burst 30 (its default, no flag; kube-controller-manager's default) |",
			// Each repetition against its own floor: 100/13, 90/13, 120/14.3.
			"| statefulset-rollingupdate | 1000 | 100.0 (90.0–120.0) | 7.69 (6.92–8.39) | 3.00 | 9.00 | 150 (125–167) | statefulset-rollingupdate driver | 100, 200 |",
			"## Each component at its own default rate limit",
			"| statefulset-rollingupdate | 1000 | 200.0 (180.0–240.0) | 15.38 (13.85–16.78) | 3.00 | 9.00 | 75 (62–83) | statefulset-rollingupdate driver | 20, 30 |",
			// 20.5/13, 18.45/13, 24.6/14.3.
			"Overhead over the floor at 1000 pods, each repetition against its own floor: +58% (+42% to +72%) (goal: at most 10%, missed); wall times 20.5 s against 13.0 s.",
			"the in-place rollout's 2000 pod writes cannot take less than 18.0 s, 88% of its 20.5 s, where the floor's 1000 need 8.0 s.",
			"alone puts the least time possible at this rate limit 38% over the floor's 13.0 s.",
			"kube-apiserver took 10.0 s of CPU over the in-place rollout's 20.5 s (0.49 CPUs on average), 2.0 s over the floor's 13.0 s (0.15).",
			"Pod writes per pod at 1000 pods: 2.00 (goal: at most 1 without a readiness gate, missed).",
			"Cost per pod at 1000 pods over that at 100 (medians): wall time 0.31×, CPU seconds 1.00× (goal: within 20%, met).",
			"| approach | command | kube-apiserver | etcd | kube-controller-manager | kruise-manager | benchreport | all |",
			"| kruise-cloneset | – | 20.0 | 5.0 | 1.0 | 10.0 | 10.0 | 46.0 |",
			"### inplace-rollout\n\n| client | resource | verb | requests |\n|---|---|---|--:|\n| benchreport | (discovery and other non-resource URLs) | get | 2 |\n" +
				"| inplace-rollout | pods | patch | 2000 |\n| inplace-rollout | pods | list | 12 (11–13) |\n",
		}, []string{"as fast", "faster than", "Not a fair comparison", "not a fair comparison", "The rate limits differ", "## At ", "simulated kubelets), inplace-rollout's cost"}},
		{"a pass at 5000 pods", func(r *Report) {
			r.ScaleNodes, r.ScaleDate = 50, time.Date(2026, 12, 3, 9, 0, 0, 0, time.UTC)
			secs := func(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }
			for rep := 1; rep <= 2; rep++ {
				for _, n := range []int{1000, 5000} {
					// inplace-rollout's wall time per pod 10% more at 5000 pods than at 1000, its
					// CPU per pod the same; the floor 25 ms a pod at both.
					perPod := map[int]float64{1000: 0.030, 5000: 0.033}[n]
					r.Results = append(r.Results,
						Result{Approach: InPlace, Pods: n, Limits: ScaleLimits, Rep: rep, Wall: secs(perPod * float64(n)), DriverCPU: 0.005 * float64(n),
							PodWrites: n, Writes: 5 * n, Requests: 6 * n, Driver: "inplace-rollout"},
						Result{Approach: FloorLoop, Pods: n, Limits: ScaleLimits, Rep: rep, Wall: secs(0.025 * float64(n)), DriverCPU: 0.002 * float64(n),
							PodWrites: n, Writes: 5 * n, Requests: 6 * n, Driver: "floor-loop"})
				}
			}
		}, []string{"\n## At 5000 pods\n\ninplace-rollout and the floor at 1000 and 5000 pods, on a control plane of their own with 50 simulated kubelets\n",
			"started 2026-12-03 09:00 UTC", "2 repetitions of each at each size, interleaved",
			"| inplace-rollout | 5000 | 165.0 | 1.32 | 1.00 | 5.00 |",
			"## Growth from 1000 to 5000 pods", "| inplace-rollout | 30.0 | 33.0 | 1.10 | 5.00 | 5.00 | 1.00 |",
			"- At 5000 pods (a control plane of its own, 50 simulated kubelets), inplace-rollout's cost per pod over that at 1000 (medians): wall time 1.10×, CPU seconds 1.00× (goal: within 20%, met).",
			// The main table and its summary stay at its own sizes.
			"Cost per pod at 1000 pods over that at 100 (medians)", "## Growth from 100 to 1000 pods"},
			[]string{"| inplace-rollout-gated | 5000 |", "Wall time at 5000 pods"}},
		{"a command's peak RSS not sampled", func(r *Report) {
			for i := range r.Results {
				if res := &r.Results[i]; res.Approach == InPlace && res.Rep == 2 {
					res.DriverPeakRSSMeasured = false
				}
			}
		}, []string{"| inplace-rollout | 1000 | 20.5 (18.4–24.6) | 1.58 (1.42–1.72) | 2.00 | 6.00 | 488 (407–542) | inplace-rollout driver | 100, 200 | 5.00 | – |",
			"A command's peak RSS is – where its runs did not sample it from /proc"},
			[]string{"| inplace-rollout | 1000 | 20.5 (18.4–24.6) | 1.58 (1.42–1.72) | 2.00 | 6.00 | 488 (407–542) | inplace-rollout driver | 100, 200 | 5.00 | 64 |"}},
		{"unequal rate limits in the main table", func(r *Report) {
			r.RateLimits[EqualLimits][StatefulSetRolling] = RateLimit{QPS: 20, Burst: 30}
		}, []string{"**Not a fair comparison.**", "statefulset-rollingupdate 100.0 (90.0–120.0) s (at 20, 30)",
			"The rate limits differ, and each bounds its driver's wall time: these times are not a fair comparison of the approaches."},
			[]string{"Every driver ran at the same", "inplace-rollout's wall time over each other approach's"}},
		{"conditions stated", func(r *Report) {
			r.Conditions = "Repetition 3 shared the machine with a test run."
		}, []string{"**Conditions of this run.** Repetition 3 shared the machine with a test run.\n"}, nil},
		{"a rate limit not recorded", func(r *Report) {
			delete(r.RateLimits[EqualLimits], DeploymentRolling)
		}, []string{"deployment-rollingupdate 125.0 (112.5–150.0) s (rate limit not recorded)", "not a fair comparison of the approaches",
			"| deployment-rollingupdate | 1000 | 125.0 (112.5–150.0) | 9.62 (8.65–10.49) | 3.00 | 9.00 | 120 (100–133) | deployment-rollingupdate driver | – |"},
			[]string{"deployment-rollingupdate's API rate limit, main table"}},
		{"no table of own defaults", func(r *Report) {
			kept := r.Results[:0]
			for _, res := range r.Results {
				if res.Limits == EqualLimits {
					kept = append(kept, res)
				}
			}
			r.Results = kept
		}, []string{"Every driver ran at the same"}, []string{"## Each component at its own default rate limit"}},
		{"one repetition", func(r *Report) {
			kept := r.Results[:0]
			for _, res := range r.Results {
				if res.Rep == 1 {
					kept = append(kept, res)
				}
			}
			r.Results, r.Repetitions = kept, 1
		}, []string{"inplace-rollout 20.5 s, ", "kruise-cloneset 1.28.\n", "| inplace-rollout | 1000 | 20.5 | 1.58 | 2.00 |", "own floor: +58% (goal"}, []string{"(18.4–24.6)"}},
		{"no audit log, no CPU of every process", func(r *Report) {
			for i := range r.Results {
				r.Results[i].Calls, r.Results[i].CPU = nil, nil
			}
		}, []string{"## Growth from 100 to 1000 pods"}, []string{"## API requests by client", "## CPU seconds by process"}},
		{"one size, whose pod writes fit in the burst", func(r *Report) {
			kept := r.Results[:0]
			for _, res := range r.Results {
				if res.Pods == 100 {
					kept = append(kept, res)
				}
			}
			r.Results = kept
		}, []string{"- Why: the in-place rollout's 200 pod writes fit within the clients' burst of 200, so the rate limit does not account for the overhead",
			"  The control plane shares the machine: kube-apiserver took 1.0 s of CPU"},
			[]string{"## Growth from", "Cost per pod at", "cannot take less than"}},
		{"no CloneSet", func(r *Report) {
			r.CloneSetSkipped = "kruise-manager v1.8.3 did not start here: boom"
			kept := r.Results[:0]
			for _, res := range r.Results {
				if res.Approach != CloneSetInPlace {
					kept = append(kept, res)
				}
			}
			r.Results = kept
		}, []string{"- **kruise-cloneset**: not measured: kruise-manager v1.8.3 did not start here: boom"}, []string{"| kruise-cloneset |"}},
		{"overhead missed, not by the rate limit", func(r *Report) {
			for i := range r.Results {
				if res := &r.Results[i]; res.Pods == 1000 && res.Approach == FloorLoop && res.Limits == EqualLimits {
					res.Wall = res.Wall * 18 / 13
				}
			}
		}, []string{"+14% (+2% to +24%) (goal: at most 10%, missed)", "The rate limit does not account for the overhead"}, []string{"alone puts the least time"}},
		{"overhead met, writes and growth missed", func(r *Report) {
			for i := range r.Results {
				if res := &r.Results[i]; res.Approach == InPlace && res.Pods == 1000 && res.Limits == EqualLimits {
					res.Wall = res.Wall * 28 / 41
					res.PodWrites = 2500
					res.DriverCPU = 7
				}
			}
		}, []string{"+8% (-3% to +17%) (goal: at most 10%, met)", "2.50 (goal: at most 1 without a readiness gate, missed)", "CPU seconds 1.40× (goal: within 20%, missed)"},
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
