package benchreport

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// The goals the report checks its numbers against (issue: overhead at most 10% over the floor,
// at most 2 pod writes per pod, cost per pod growing at most 20% from the smallest size to
// the largest).
const (
	goalOverhead   = 0.10
	goalPodWrites  = 2.0
	goalGrowth     = 0.20
	plotWallFile   = "benchmarks/wall-time.png"
	plotCPUFile    = "benchmarks/cpu-seconds.png"
	plotPerPodFile = "benchmarks/wall-per-pod.png"
)

// approaches are the report's rows in order, with what each does.
var approaches = []struct {
	a    Approach
	what string
}{
	{InPlace, "`inplace-rollout run` on a StatefulSet: 10 batches of 10% (`--batches 10%,20%,...,100% --max-unavailable 10%`), each pod's image patched in place, with the lock, the per-pod state and every check"},
	{InPlaceGated, "the same on a StatefulSet whose pods declare the readiness gate `inplace-rollout.io/ready`, set True on each new pod by the project's gate controller (pkg/gate, in the benchmark's process): each pod drained through the gate (False, so it leaves its Service) before its image changes, and Ready through it again after, as the CloneSet drains its pods through its own gate"},
	{InPlaceWindow, "the same in one batch, `--batches 100% --max-unavailable 10%`: a sliding window of at most 10% of the pods updating at once, as the controllers' rolling updates below"},
	{FloorLoop, "the same image patches, in the same 10 batches, by a loop with no safety, on the pods of an identical StatefulSet of their own (OnDelete, as the loop leaves its template behind): patch a batch's pods (32 in flight, at inplace-rollout's rate limit), wait until they are Ready on the image, next batch"},
	{StatefulSetRolling, "the StatefulSet's own RollingUpdate of the same pods, `maxUnavailable: 10%` (Parallel pod management): pods deleted and recreated"},
	{DeploymentRolling, "a Deployment of as many pods, rolling update `maxUnavailable: 10%`, `maxSurge: 0`: pods deleted and recreated"},
	{CloneSetInPlace, "OpenKruise's CloneSet of as many pods, `updateStrategy: {type: InPlaceIfPossible, maxUnavailable: 10%}`: images patched in place by kruise-manager. " +
		"kruise-manager runs for these rows only: started after the other approaches' rollouts, measured once its set-up has ended " +
		"(its discovery of every kind it knows, some 4 minutes of retries for the kinds without a CRD here, and a probe CloneSet reconciled), stopped after"},
}

// Render writes the report as Markdown.
func Render(w io.Writer, r *Report) error {
	var b strings.Builder
	sizes := r.sizes(EqualLimits)
	if len(sizes) == 0 {
		return fmt.Errorf("rendering the benchmark report: no results")
	}
	small, large := sizes[0], sizes[len(sizes)-1]

	b.WriteString("# Benchmarks\n\n")
	fmt.Fprintf(&b, "Written by `make bench` on %s (%s). Every number comes from that one run, on a local\n", r.Date.UTC().Format("2006-01-02 15:04 MST"), r.Machine)
	b.WriteString("control plane per table: etcd, kube-apiserver and kube-controller-manager built from source, and the\n")
	b.WriteString("simulated kubelet of test/integration/kubeletsim. Run `make bench` again to measure anew; it rewrites\n")
	b.WriteString("this file and its plots.\n\n")
	b.WriteString("On the real node (a real kubelet and containerd), the in-place CLI against the StatefulSet RollingUpdate: [benchmarks-realnode.md](benchmarks-realnode.md).\n\n")

	b.WriteString("## Summary\n\n")
	writeSummary(&b, r, small, large)

	b.WriteString("\n## How it was measured\n\n")
	b.WriteString("Each approach rolls a new image out to the same number of pods, at each size, one after the other\n")
	b.WriteString("on a quiet control plane:\n\n")
	for _, ap := range approaches {
		if ap.a == CloneSetInPlace && r.CloneSetSkipped != "" {
			fmt.Fprintf(&b, "- **%s**: not measured: %s\n", ap.a, r.CloneSetSkipped)
			continue
		}
		fmt.Fprintf(&b, "- **%s**: %s.\n", ap.a, ap.what)
	}
	b.WriteString("\nWall time runs from the rollout's first write until every pod runs the new image and is Ready\n")
	b.WriteString("(the command's and the loop's own end; for the controllers, as seen through a watch). Pod writes are\n")
	b.WriteString("the requests that wrote pod objects (create, update, patch, delete; the status and binding\n")
	b.WriteString("subresources left out), by every client: a recreated pod costs its controller's delete, the kubelet's\n")
	b.WriteString("final delete and the controller's create. API requests per second count every request but watches,\n")
	b.WriteString("from kube-apiserver's `apiserver_request_total`. The driver is the process that does the rollout:\n")
	b.WriteString("its CPU seconds and peak resident set over the rollout (from the process's rusage, or /proc for the\n")
	b.WriteString("controllers, whose peak is reset before each rollout).\n\n")
	b.WriteString("| setting | value |\n|---|---|\n")
	for _, s := range r.Settings {
		fmt.Fprintf(&b, "| %s | %s |\n", s.Name, s.Value)
	}
	for _, set := range []struct {
		limits Limits
		label  string
	}{{EqualLimits, "main table"}, {DefaultLimits, "own-default table"}} {
		for _, ap := range approaches {
			if l, ok := r.rateLimit(set.limits, ap.a); ok {
				fmt.Fprintf(&b, "| %s's API rate limit, %s | %s |\n", ap.a, set.label, l)
			}
		}
	}

	b.WriteString("\n## Results\n\n")
	if r.unequalRateLimits(EqualLimits) {
		b.WriteString("**Not a fair comparison.** The drivers ran at different client-side API rate limits (requests/s,\n")
		b.WriteString("burst in the column \"rate limit\"), and a rollout's wall time is bound by its driver's rate limit:\n")
		b.WriteString("the wall times, and the \"× floor\" ratios, of rows at different rate limits do not say which\n")
		b.WriteString("approach is faster. Pod writes and pods recreated do not depend on the rate limit.\n\n")
	} else {
		b.WriteString("Every driver ran at the same client-side API rate limit (requests/s, burst in the column \"rate limit\"; the settings\n")
		b.WriteString("above say which clients each component gives it to).\n\n")
	}
	writeResults(&b, r, EqualLimits)
	if len(r.sizes(DefaultLimits)) > 0 {
		b.WriteString("\n## Each component at its own default rate limit\n\n")
		b.WriteString("Labelled as such: each driver at the rate limit it has when no flag sets one (the settings above), on a\n")
		b.WriteString("control plane of its own, started after the main table's. What a user who changes no flag gets; the\n")
		b.WriteString("rate limits differ, so these wall times do not compare the approaches' engines.\n\n")
		writeResults(&b, r, DefaultLimits)
	}

	fmt.Fprintf(&b, "\n## Growth from %d to %d pods\n\n", small, large)
	fmt.Fprintf(&b, "Per pod: wall time and the driver's CPU time divided by the number of pods; the ratio is the value at %d\n", large)
	fmt.Fprintf(&b, "pods over the value at %d (1.00: linear; below 1: fixed costs spread over more pods).\n\n", small)
	fmt.Fprintf(&b, "| approach | wall ms/pod at %d | at %d | ratio | driver CPU ms/pod at %d | at %d | ratio |\n", small, large, small, large)
	b.WriteString("|---|--:|--:|--:|--:|--:|--:|\n")
	for _, ap := range approaches {
		lo, ok1 := r.result(EqualLimits, ap.a, small)
		hi, ok2 := r.result(EqualLimits, ap.a, large)
		if !ok1 || !ok2 {
			continue
		}
		wl, wh := 1000*lo.Wall.Seconds()/float64(small), 1000*hi.Wall.Seconds()/float64(large)
		cl, ch := 1000*lo.DriverCPU/float64(small), 1000*hi.DriverCPU/float64(large)
		fmt.Fprintf(&b, "| %s | %.1f | %.1f | %.2f | %.2f | %.2f | %.2f |\n", ap.a, wl, wh, wh/wl, cl, ch, ch/cl)
	}
	fmt.Fprintf(&b, "\n![Wall time by number of pods](%s)\n\n![Wall time per pod by number of pods](%s)\n\n![Driver CPU seconds by number of pods](%s)\n",
		plotWallFile, plotPerPodFile, plotCPUFile)

	if r.Profile != "" {
		fmt.Fprintf(&b, "\n## Where inplace-rollout's CPU time goes at %d pods\n\n", large)
		fmt.Fprintf(&b, "The CPU profile of that run (`--profile cpu`, file %s), its top functions by cumulative\n", r.ProfileFile)
		b.WriteString("time as `go tool pprof -top -cum` prints them:\n\n```\n")
		b.WriteString(strings.TrimRight(r.Profile, "\n"))
		b.WriteString("\n```\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// writeResults writes the table of the rows measured at limits.
func writeResults(b *strings.Builder, r *Report, limits Limits) {
	b.WriteString("| approach | pods | wall s | × floor | pod writes / pod | all writes / pod | API requests/s | driver | rate limit | driver CPU s | driver peak RSS MiB | kube-apiserver CPU s | pods recreated |\n")
	b.WriteString("|---|--:|--:|--:|--:|--:|--:|---|--:|--:|--:|--:|--:|\n")
	for _, n := range r.sizes(limits) {
		floor, hasFloor := r.result(limits, FloorLoop, n)
		for _, ap := range approaches {
			res, ok := r.result(limits, ap.a, n)
			if !ok {
				continue
			}
			overFloor := "–"
			if hasFloor {
				overFloor = fmt.Sprintf("%.2f", res.Wall.Seconds()/floor.Wall.Seconds())
			}
			limit := "–"
			if l, ok := r.rateLimit(limits, res.Approach); ok {
				limit = l.Short()
			}
			fmt.Fprintf(b, "| %s | %d | %.1f | %s | %.2f | %.2f | %.0f | %s | %s | %.2f | %.0f | %.1f | %d |\n",
				res.Approach, n, res.Wall.Seconds(), overFloor, perPod(res.PodWrites, n), perPod(res.Writes, n),
				res.RequestsPerSecond(), res.Driver, limit, res.DriverCPU, float64(res.DriverPeakRSSKiB)/1024, res.APIServerCPU, res.Recreated)
		}
	}
}

func writeSummary(b *strings.Builder, r *Report, small, large int) {
	ours, ok := r.result(EqualLimits, InPlace, large)
	if !ok {
		fmt.Fprintf(b, "- inplace-rollout was not measured at %d pods.\n", large)
		return
	}
	// Wall times side by side, each with its rate limit and never as a ratio: a ratio of times
	// taken at different rate limits would measure the limits, not the approaches.
	var walls []string
	for _, a := range []Approach{InPlace, StatefulSetRolling, DeploymentRolling, CloneSetInPlace} {
		res, ok := r.result(EqualLimits, a, large)
		if !ok {
			continue
		}
		limit := "rate limit not recorded"
		if l, ok := r.rateLimit(EqualLimits, a); ok {
			limit = "at " + l.Short()
		}
		walls = append(walls, fmt.Sprintf("%s %.1f s (%s)", a, res.Wall.Seconds(), limit))
	}
	fmt.Fprintf(b, "- Wall time at %d pods, with each driver's API rate limit (requests/s, burst): %s.", large, strings.Join(walls, ", "))
	if r.unequalRateLimits(EqualLimits) {
		b.WriteString(" The rate limits differ, and each bounds its driver's wall time: these times are not a fair comparison of the approaches.\n")
	} else {
		b.WriteString("\n")
	}
	var recreated []string
	for _, a := range []Approach{InPlace, StatefulSetRolling, DeploymentRolling, CloneSetInPlace} {
		if res, ok := r.result(EqualLimits, a, large); ok {
			recreated = append(recreated, fmt.Sprintf("%s %d", a, res.Recreated))
		}
	}
	fmt.Fprintf(b, "- Pods recreated at %d pods: %s.\n", large, strings.Join(recreated, ", "))
	if floor, ok := r.result(EqualLimits, FloorLoop, large); ok {
		over := ours.Wall.Seconds()/floor.Wall.Seconds() - 1
		fmt.Fprintf(b, "- Overhead over the floor at %d pods: %.1f s against %.1f s, %+.0f%% (goal: at most %.0f%%, %s).\n",
			large, ours.Wall.Seconds(), floor.Wall.Seconds(), 100*over, 100*goalOverhead, verdict(over <= goalOverhead))
		if over > goalOverhead && r.ClientQPS > 0 {
			least := writeBound(ours.PodWrites, r)
			fmt.Fprintf(b, "- Why: at the clients' rate limit (%.0f requests/s, burst %d) the in-place rollout's %d pod writes cannot take less than %.1f s, %.0f%% of its %.1f s, "+
				"where the floor's %d need %.1f s.",
				r.ClientQPS, r.ClientBurst, ours.PodWrites, least, 100*least/ours.Wall.Seconds(), ours.Wall.Seconds(), floor.PodWrites, writeBound(floor.PodWrites, r))
			if least > floor.Wall.Seconds() {
				fmt.Fprintf(b, " Its second write per pod, which records in the pod's state that the new containers run and are Ready, "+
					"alone puts the least time possible at this rate limit %.0f%% over the floor's %.1f s.\n", 100*(least/floor.Wall.Seconds()-1), floor.Wall.Seconds())
			} else {
				b.WriteString(" The rate limit does not account for the overhead; the profile below shows where the CPU time goes.\n")
			}
			fmt.Fprintf(b, "  The control plane shares the machine: kube-apiserver took %.1f s of CPU over the in-place rollout's %.1f s (%.2f CPUs on average), %.1f s over the floor's %.1f s (%.2f).\n",
				ours.APIServerCPU, ours.Wall.Seconds(), ours.APIServerCPU/ours.Wall.Seconds(), floor.APIServerCPU, floor.Wall.Seconds(), floor.APIServerCPU/floor.Wall.Seconds())
		}
	}
	pw := perPod(ours.PodWrites, large)
	fmt.Fprintf(b, "- Pod writes per pod at %d pods: %.2f (goal: at most %.0f without a readiness gate, %s).\n", large, pw, goalPodWrites, verdict(pw <= goalPodWrites))
	if lo, ok := r.result(EqualLimits, InPlace, small); ok && small != large {
		wallRatio := (ours.Wall.Seconds() / float64(large)) / (lo.Wall.Seconds() / float64(small))
		cpuRatio := (ours.DriverCPU / float64(large)) / (lo.DriverCPU / float64(small))
		fmt.Fprintf(b, "- Cost per pod at %d pods over that at %d: wall time %.2f×, CPU seconds %.2f× (goal: within %.0f%%, %s).\n",
			large, small, wallRatio, cpuRatio, 100*goalGrowth, verdict(wallRatio <= 1+goalGrowth && cpuRatio <= 1+goalGrowth))
	}
}

// writeBound is the least time n requests take through a token bucket of r's rate limit.
func writeBound(n int, r *Report) float64 {
	return max(0, float64(n-r.ClientBurst)) / r.ClientQPS
}

func verdict(met bool) string {
	if met {
		return "met"
	}
	return "missed"
}

func perPod(n, pods int) float64 { return float64(n) / float64(pods) }

// Table writes the results as aligned plain text, for the command's output.
func Table(w io.Writer, results []Result) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "approach\tpods\twall s\tpod writes/pod\tAPI req/s\tdriver CPU s\tpeak RSS MiB\trecreated\t")
	for _, res := range results {
		fmt.Fprintf(tw, "%s\t%d\t%.1f\t%.2f\t%.0f\t%.2f\t%.0f\t%d\t\n", res.Approach, res.Pods, res.Wall.Seconds(),
			perPod(res.PodWrites, res.Pods), res.RequestsPerSecond(), res.DriverCPU, float64(res.DriverPeakRSSKiB)/1024, res.Recreated)
	}
	return tw.Flush()
}
