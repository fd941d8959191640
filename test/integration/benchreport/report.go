package benchreport

import (
	"cmp"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// The goals the report checks its numbers against (issue: overhead at most 10% over the floor,
// one pod write per pod without a readiness gate, cost per pod growing at most 20% from the
// smallest size to the largest).
const (
	goalOverhead   = 0.10
	goalPodWrites  = 1.0
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
	{InPlaceGated, "the same on a StatefulSet whose pods declare the readiness gate `inplace-rollout.io/ready`, set True on each new pod by the project's gate controller (pkg/gate, in the benchmark's process): each pod drained through the gate (False, so it leaves its Service) before its image changes, and Ready through it again after, as the CloneSet drains its pods through its own gate; with no grace between the drain and the patch (`--grace 0`, the default, as the CloneSet's `gracePeriodSeconds` 0), so the Service's clients may not have seen the pod leave when its container stops"},
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
	fmt.Fprintf(&b, "Written by `make bench` on %s (%s). Every number comes from that one run: %d repetitions of\n", r.Date.UTC().Format("2006-01-02 15:04 MST"), r.Machine, r.Repetitions)
	fmt.Fprintf(&b, "each approach at each size, interleaved (each repetition measures every approach once, in an order shuffled\n")
	fmt.Fprintf(&b, "for each repetition and size from the fixed seed %d; the CloneSet last, see below), on a local control plane\n", r.Seed)
	b.WriteString("per table: etcd, kube-apiserver and kube-controller-manager built from source, and the simulated kubelet of\n")
	b.WriteString("test/integration/kubeletsim. Every figure is the median over the repetitions, followed, when they differ,\n")
	b.WriteString("by the least and the greatest in parentheses. Run `make bench` again to measure anew; it rewrites this file\n")
	b.WriteString("and its plots.\n\n")
	b.WriteString("On the real node (a real kubelet and containerd), the in-place CLI against the StatefulSet RollingUpdate: [benchmarks-realnode.md](benchmarks-realnode.md); " +
		"against a Deployment's RollingUpdate and OpenKruise's CloneSet: [benchmarks-realnode-workloads.md](benchmarks-realnode-workloads.md).\n\n")
	if r.Conditions != "" {
		fmt.Fprintf(&b, "**Conditions of this run.** %s\n\n", r.Conditions)
	}

	b.WriteString("## Summary\n\n")
	writeSummary(&b, r, small, large)

	writeMethod(&b, r)

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
	writeUnavailability(&b, r)
	if len(r.sizes(DefaultLimits)) > 0 {
		b.WriteString("\n## Each component at its own default rate limit\n\n")
		b.WriteString("Labelled as such: each driver at the rate limit it has when no flag sets one (the settings above), on a\n")
		b.WriteString("control plane of its own, started after the main table's. What a user who changes no flag gets; the\n")
		b.WriteString("rate limits differ, so these wall times do not compare the approaches' engines.")
		if reps := r.repetitions(DefaultLimits); reps != r.Repetitions {
			fmt.Fprintf(&b, " %d repetitions of each approach at each size, interleaved as in the main table.", reps)
		}
		b.WriteString("\n\n")
		writeResults(&b, r, DefaultLimits)
	}
	writeScale(&b, r)

	writeCPU(&b, r, large)
	writeCalls(&b, r, large)
	writeGrowth(&b, r, EqualLimits, small, large)
	fmt.Fprintf(&b, "\n![Wall time by number of pods](%s)\n\n![Wall time per pod by number of pods](%s)\n\n![Driver CPU seconds by number of pods](%s)\n",
		plotWallFile, plotPerPodFile, plotCPUFile)

	if r.Profile != "" {
		fmt.Fprintf(&b, "\n## Where inplace-rollout's CPU time goes at %d pods\n\n", large)
		fmt.Fprintf(&b, "The CPU profile (`--profile cpu`, file %s) of one more inplace-rollout rollout at %d pods, after the\n", r.ProfileFile, large)
		b.WriteString("repetitions and in none of the tables, its top functions by cumulative time as `go tool pprof -top -cum`\n")
		b.WriteString("prints them:\n\n```\n")
		b.WriteString(strings.TrimRight(r.Profile, "\n"))
		b.WriteString("\n```\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// writeMethod writes how the rollouts were measured, with the settings.
func writeMethod(b *strings.Builder, r *Report) {
	b.WriteString("\n## How it was measured\n\n")
	b.WriteString("Each approach rolls a new image out to the same number of pods, at each size, one rollout at a time\n")
	b.WriteString("on a quiet control plane, each workload created once and moved to its next image by each rollout:\n\n")
	for _, ap := range approaches {
		if ap.a == CloneSetInPlace && r.CloneSetSkipped != "" {
			fmt.Fprintf(b, "- **%s**: not measured: %s\n", ap.a, r.CloneSetSkipped)
			continue
		}
		fmt.Fprintf(b, "- **%s**: %s.\n", ap.a, ap.what)
	}
	b.WriteString("\nWall time runs from the rollout's first write until every pod runs the new image and is Ready\n")
	b.WriteString("(the command's and the loop's own end; for the controllers, as seen through a watch). Pod writes are\n")
	b.WriteString("the requests that wrote pod objects (create, update, patch, delete; the status and binding\n")
	b.WriteString("subresources left out), by every client: a recreated pod costs its controller's delete, the kubelet's\n")
	b.WriteString("final delete and the controller's create. API requests per second count every request but watches,\n")
	b.WriteString("from kube-apiserver's `apiserver_request_total`. The driver is the process that does the rollout:\n")
	b.WriteString("its CPU seconds and peak resident set over the rollout (from the process's rusage, or /proc for the\n")
	b.WriteString("controllers, whose peak is reset before each rollout). \"× floor\" is each repetition's wall time over\n")
	b.WriteString("that repetition's floor.\n\n")
	b.WriteString("| setting | value |\n|---|---|\n")
	fmt.Fprintf(b, "| repetitions | %d of every approach at each size, interleaved; order shuffled per repetition and size, seed %d |\n", r.Repetitions, r.Seed)
	for _, s := range r.Settings {
		fmt.Fprintf(b, "| %s | %s |\n", s.Name, s.Value)
	}
	for _, set := range []struct {
		limits Limits
		label  string
	}{{EqualLimits, "main table"}, {DefaultLimits, "own-default table"}} {
		for _, ap := range approaches {
			if l, ok := r.rateLimit(set.limits, ap.a); ok {
				fmt.Fprintf(b, "| %s's API rate limit, %s | %s |\n", ap.a, set.label, l)
			}
		}
	}
}

// writeResults writes the table of the rows measured at limits.
func writeResults(b *strings.Builder, r *Report, limits Limits) {
	b.WriteString("| approach | pods | wall s | × floor | pod writes / pod | all writes / pod | API requests/s | driver | rate limit | driver CPU s | driver peak RSS MiB | kube-apiserver CPU s | pods recreated |\n")
	b.WriteString("|---|--:|--:|--:|--:|--:|--:|---|--:|--:|--:|--:|--:|\n")
	unmeasured := false
	for _, n := range r.sizes(limits) {
		for _, ap := range approaches {
			samples := r.samples(limits, ap.a, n)
			if len(samples) == 0 {
				continue
			}
			limit := "–"
			if l, ok := r.rateLimit(limits, ap.a); ok {
				limit = l.Short()
			}
			perPodOf := func(count func(Result) int) func(Result) float64 {
				return func(res Result) float64 { return perPod(count(res), n) }
			}
			rss := r.spread(limits, ap.a, n, func(res Result) float64 { return float64(res.DriverPeakRSSKiB) / 1024 }).format(0)
			if slices.ContainsFunc(samples, rssUnmeasured) {
				rss, unmeasured = "–", true
			}
			fmt.Fprintf(b, "| %s | %d | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", ap.a, n,
				r.spread(limits, ap.a, n, wall).format(1),
				r.ratio(limits, ap.a, FloorLoop, n, wall).format(2),
				r.spread(limits, ap.a, n, perPodOf(func(res Result) int { return res.PodWrites })).format(2),
				r.spread(limits, ap.a, n, perPodOf(func(res Result) int { return res.Writes })).format(2),
				r.spread(limits, ap.a, n, Result.RequestsPerSecond).format(0),
				samples[0].Driver, limit,
				r.spread(limits, ap.a, n, func(res Result) float64 { return res.DriverCPU }).format(2),
				rss,
				r.spread(limits, ap.a, n, func(res Result) float64 { return res.APIServerCPU }).format(1),
				r.spread(limits, ap.a, n, func(res Result) float64 { return float64(res.Recreated) }).format(0))
		}
	}
	if unmeasured {
		b.WriteString("\nA command's peak RSS is – where its runs did not sample it from /proc: what they recorded, the rusage of the\n")
		b.WriteString("finished child, is the benchmark process's own peak, which a child started by fork and exec inherits.\n")
	}
}

// rssUnmeasured reports whether res is a command's rollout whose peak resident set was not
// sampled (DriverPeakRSSMeasured): a controller's was always read from /proc.
func rssUnmeasured(res Result) bool {
	_, command := res.CPU[CPUCommand]
	return command && !res.DriverPeakRSSMeasured
}

// repetitions is how many repetitions the rows measured at limits had: the most of any row.
func (r *Report) repetitions(limits Limits) int {
	n := 0
	for _, res := range r.Results {
		if res.Limits == limits {
			n = max(n, res.Rep)
		}
	}
	return n
}

// writeUnavailability writes, for the rows of the main table, what users of the workload felt:
// the per-pod times out and the failed requests.
func writeUnavailability(b *strings.Builder, r *Report) {
	if !slices.ContainsFunc(r.Results, func(res Result) bool { return res.NotReady != nil }) {
		return
	}
	b.WriteString("\n## What users feel\n\n")
	b.WriteString("Per pod, how long it was not Ready, and how long no EndpointSlice of its Service (a headless Service per\n")
	b.WriteString("workload, its slices kept by kube-controller-manager's EndpointSlice controller) listed it ready, from the\n")
	b.WriteString("rollout's start until the slices listed every pod ready again, as the benchmark's watches saw the\n")
	b.WriteString("changes. A recreated StatefulSet pod counts from its deletion until its successor of the same name is back;\n")
	b.WriteString("a Deployment's new pods have new names, so its pods leaving are paired, in order of time, with its new\n")
	fmt.Fprintf(b, "pods coming in. Meanwhile a load of %d requests/s goes to the Service's pods in turn, as kube-proxy routes\n", loadRPS)
	fmt.Fprintf(b, "them: to the pods the slices listed ready when it last synced (every %s, kube-proxy's least sync\n", proxySync)
	b.WriteString("period). A request fails when it reaches a pod the simulated kubelet does not run Ready at that instant (its\n")
	b.WriteString("container stopped for the new image, or the pod deleted), or when no pod is listed (where the real node's\n")
	b.WriteString("load generator sends nothing). The simulated\n")
	b.WriteString("kubelet stops a container when it sees its image change or its pod deleted, at once, as an app without a\n")
	b.WriteString("preStop hook that stops listening on SIGTERM. Each figure is the median over the repetitions of that\n")
	b.WriteString("rollout's statistic (p50, p99, max over its pods), with the range; seconds.\n\n")
	b.WriteString("| approach | pods | not Ready p50 | p99 | max | out of the slices p50 | p99 | max | requests failed | of those sent |\n")
	b.WriteString("|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n")
	notReady := func(res Result) []time.Duration { return res.NotReady }
	out := func(res Result) []time.Duration { return res.OutOfSlice }
	p50 := func(q Quantiles) time.Duration { return q.P50 }
	p99 := func(q Quantiles) time.Duration { return q.P99 }
	most := func(q Quantiles) time.Duration { return q.Max }
	failedShare := func(res Result) float64 {
		if res.Sent == 0 {
			return 0
		}
		return 100 * float64(res.Failed) / float64(res.Sent)
	}
	for _, n := range r.sizes(EqualLimits) {
		for _, ap := range approaches {
			if len(r.samples(EqualLimits, ap.a, n)) == 0 {
				continue
			}
			q := func(ds func(Result) []time.Duration, pick func(Quantiles) time.Duration) string {
				return r.spread(EqualLimits, ap.a, n, func(res Result) float64 { return pick(quantilesOf(ds(res))).Seconds() }).format(2)
			}
			fmt.Fprintf(b, "| %s | %d | %s | %s | %s | %s | %s | %s | %s | %s%% |\n", ap.a, n,
				q(notReady, p50), q(notReady, p99), q(notReady, most), q(out, p50), q(out, p99), q(out, most),
				r.spread(EqualLimits, ap.a, n, func(res Result) float64 { return float64(res.Failed) }).format(0),
				r.spread(EqualLimits, ap.a, n, failedShare).format(2))
		}
	}
}

// writeCPU writes the table of every process's CPU time over the rollouts of the main table at
// pods.
func writeCPU(b *strings.Builder, r *Report, pods int) {
	if !slices.ContainsFunc(r.Results, func(res Result) bool { return res.CPU != nil }) {
		return
	}
	fmt.Fprintf(b, "\n## CPU seconds by process at %d pods\n\n", pods)
	b.WriteString("Each process's CPU time over each rollout of the main table, from /proc (the command's from its rusage):\n")
	b.WriteString("the machine's cores are shared by all of them. \"command\" is the process the benchmark started for the\n")
	b.WriteString("rollout (inplace-rollout, or the floor loop); \"benchreport\" is the benchmark's own process, which runs the\n")
	b.WriteString("kubelet simulator, the gate controller and the pod watches; kruise-manager runs for the CloneSet's rows only.\n\n")
	b.WriteString("| approach |")
	for _, p := range cpuProcesses {
		fmt.Fprintf(b, " %s |", p)
	}
	b.WriteString(" all |\n|---|")
	b.WriteString(strings.Repeat("--:|", len(cpuProcesses)+1) + "\n")
	for _, ap := range approaches {
		samples := r.samples(EqualLimits, ap.a, pods)
		if len(samples) == 0 {
			continue
		}
		fmt.Fprintf(b, "| %s |", ap.a)
		for _, p := range cpuProcesses {
			var xs []float64
			for _, res := range samples {
				if c, ok := res.CPU[p]; ok {
					xs = append(xs, c)
				}
			}
			fmt.Fprintf(b, " %s |", spreadOf(xs).format(1))
		}
		fmt.Fprintf(b, " %s |\n", r.spread(EqualLimits, ap.a, pods, func(res Result) float64 {
			var all float64
			for _, c := range res.CPU {
				all += c
			}
			return all
		}).format(1))
	}
}

// writeCalls writes, for each approach of the main table, its requests at pods by client,
// resource and verb.
func writeCalls(b *strings.Builder, r *Report, pods int) {
	if !slices.ContainsFunc(r.Results, func(res Result) bool { return res.Calls != nil }) {
		return
	}
	fmt.Fprintf(b, "\n## API requests by client, resource and verb at %d pods\n\n", pods)
	b.WriteString("From kube-apiserver's audit log, which logs every request (Metadata level) during the benchmark: the\n")
	b.WriteString("requests of each rollout of the main table, each counted once (a watch too), by client, named from its\n")
	b.WriteString("User-Agent (kube-controller-manager's with the controller whose client it is), resource\n")
	b.WriteString("(RESOURCE[/SUBRESOURCE][.GROUP]) and verb.\n")
	for _, ap := range approaches {
		samples := r.samples(EqualLimits, ap.a, pods)
		keys := map[Call]bool{}
		for _, res := range samples {
			for c := range res.Calls {
				keys[c] = true
			}
		}
		if len(keys) == 0 {
			continue
		}
		type row struct {
			c Call
			s spread
		}
		rows := make([]row, 0, len(keys))
		for c := range keys {
			rows = append(rows, row{c, r.spread(EqualLimits, ap.a, pods, func(res Result) float64 { return float64(res.Calls[c]) })})
		}
		slices.SortFunc(rows, func(x, y row) int {
			return cmp.Or(strings.Compare(x.c.Client, y.c.Client), cmp.Compare(y.s.median, x.s.median),
				strings.Compare(x.c.Resource, y.c.Resource), strings.Compare(x.c.Verb, y.c.Verb))
		})
		fmt.Fprintf(b, "\n### %s\n\n| client | resource | verb | requests |\n|---|---|---|--:|\n", ap.a)
		for _, row := range rows {
			fmt.Fprintf(b, "| %s | %s | %s | %s |\n", row.c.Client, row.c.Resource, row.c.Verb, row.s.format(0))
		}
		all := r.spread(EqualLimits, ap.a, pods, func(res Result) float64 {
			var n int
			for _, k := range res.Calls {
				n += k
			}
			return float64(n)
		})
		fmt.Fprintf(b, "| all | | | %s |\n", all.format(0))
	}
}

// writeGrowth writes the table of each approach's cost per pod at the smallest and largest
// sizes measured at limits, from the medians.
func writeGrowth(b *strings.Builder, r *Report, limits Limits, small, large int) {
	if small == large {
		return
	}
	fmt.Fprintf(b, "\n## Growth from %d to %d pods\n\n", small, large)
	fmt.Fprintf(b, "Per pod: the median wall time and driver CPU time divided by the number of pods; the ratio is the value at %d\n", large)
	fmt.Fprintf(b, "pods over the value at %d (1.00: linear; below 1: fixed costs spread over more pods).\n\n", small)
	fmt.Fprintf(b, "| approach | wall ms/pod at %d | at %d | ratio | driver CPU ms/pod at %d | at %d | ratio |\n", small, large, small, large)
	b.WriteString("|---|--:|--:|--:|--:|--:|--:|\n")
	for _, ap := range approaches {
		g, ok := r.growth(limits, ap.a, small, large)
		if !ok {
			continue
		}
		fmt.Fprintf(b, "| %s | %.1f | %.1f | %.2f | %.2f | %.2f | %.2f |\n", ap.a, g.wallSmall, g.wallLarge, g.wallLarge/g.wallSmall,
			g.cpuSmall, g.cpuLarge, g.cpuLarge/g.cpuSmall)
	}
}

// growth is an approach's median wall time and driver CPU time per pod, in milliseconds, at two
// sizes.
type growth struct{ wallSmall, wallLarge, cpuSmall, cpuLarge float64 }

// met reports whether the cost per pod at the larger size is within goalGrowth of that at the
// smaller.
func (g growth) met() bool {
	return g.wallLarge/g.wallSmall <= 1+goalGrowth && g.cpuLarge/g.cpuSmall <= 1+goalGrowth
}

// growth is approach a's cost per pod at small and large pods, measured at limits; false when
// either size has no samples.
func (r *Report) growth(limits Limits, a Approach, small, large int) (growth, bool) {
	perPod := func(n int, value func(Result) float64) (float64, bool) {
		s := r.spread(limits, a, n, value)
		return 1000 * s.median / float64(n), s.n > 0
	}
	cpu := func(res Result) float64 { return res.DriverCPU }
	var g growth
	var ok [4]bool
	g.wallSmall, ok[0] = perPod(small, wall)
	g.wallLarge, ok[1] = perPod(large, wall)
	g.cpuSmall, ok[2] = perPod(small, cpu)
	g.cpuLarge, ok[3] = perPod(large, cpu)
	return g, ok == [4]bool{true, true, true, true}
}

// writeScale writes the rows of the pass at ScaleLimits, past the main table's sizes, with the
// growth of each approach's cost per pod from its smallest size to its largest.
func writeScale(b *strings.Builder, r *Report) {
	sizes := r.sizes(ScaleLimits)
	if len(sizes) == 0 {
		return
	}
	small, large := sizes[0], sizes[len(sizes)-1]
	fmt.Fprintf(b, "\n## At %d pods\n\n", large)
	fmt.Fprintf(b, "inplace-rollout and the floor at %s pods, on a control plane of their own with %d simulated kubelets\n", joinSizes(sizes), r.ScaleNodes)
	fmt.Fprintf(b, "(110 pods each at most, as a kubelet's default), started %s, every other setting as in the\n", r.ScaleDate.UTC().Format("2006-01-02 15:04 MST"))
	fmt.Fprintf(b, "main table, its rate limit included; %d repetitions of each at each size, interleaved.\n\n", r.repetitions(ScaleLimits))
	writeResults(b, r, ScaleLimits)
	writeGrowth(b, r, ScaleLimits, small, large)
}

// joinSizes writes pod counts as a list: "1000 and 5000", "100, 300 and 1000".
func joinSizes(sizes []int) string {
	s := make([]string, len(sizes))
	for i, n := range sizes {
		s[i] = strconv.Itoa(n)
	}
	if len(s) == 1 {
		return s[0]
	}
	return strings.Join(s[:len(s)-1], ", ") + " and " + s[len(s)-1]
}

func writeSummary(b *strings.Builder, r *Report, small, large int) {
	med := func(a Approach, n int, value func(Result) float64) spread { return r.spread(EqualLimits, a, n, value) }
	ours := med(InPlace, large, wall)
	if ours.n == 0 {
		fmt.Fprintf(b, "- inplace-rollout was not measured at %d pods.\n", large)
		return
	}
	writeWalls(b, r, large)
	writeOverhead(b, r, large)
	writeWrites(b, r, large)
	var recreated []string
	for _, ap := range approaches {
		if rec := med(ap.a, large, func(res Result) float64 { return float64(res.Recreated) }); rec.n > 0 && ap.a != FloorLoop {
			recreated = append(recreated, fmt.Sprintf("%s %s", ap.a, rec.format(0)))
		}
	}
	fmt.Fprintf(b, "- Pods recreated at %d pods: %s.\n", large, strings.Join(recreated, ", "))
	if g, ok := r.growth(EqualLimits, InPlace, small, large); ok && small != large {
		fmt.Fprintf(b, "- Cost per pod at %d pods over that at %d (medians): wall time %.2f×, CPU seconds %.2f× (goal: within %.0f%%, %s).\n",
			large, small, g.wallLarge/g.wallSmall, g.cpuLarge/g.cpuSmall, 100*goalGrowth, verdict(g.met()))
	}
	if sizes := r.sizes(ScaleLimits); len(sizes) > 1 {
		lo, hi := sizes[0], sizes[len(sizes)-1]
		if g, ok := r.growth(ScaleLimits, InPlace, lo, hi); ok {
			fmt.Fprintf(b, "- At %d pods (a control plane of its own, %d simulated kubelets), inplace-rollout's cost per pod over that at %d (medians): wall time %.2f×, CPU seconds %.2f× (goal: within %.0f%%, %s).\n",
				hi, r.ScaleNodes, lo, g.wallLarge/g.wallSmall, g.cpuLarge/g.cpuSmall, 100*goalGrowth, verdict(g.met()))
		}
	}
}

// writeWalls writes the wall times of the main table at pods and, when its drivers ran at one
// rate limit, inplace-rollout's wall time over each other approach's.
func writeWalls(b *strings.Builder, r *Report, pods int) {
	unequal := r.unequalRateLimits(EqualLimits)
	var walls []string
	for _, ap := range approaches {
		w := r.spread(EqualLimits, ap.a, pods, wall)
		if w.n == 0 || ap.a == FloorLoop {
			continue
		}
		if !unequal {
			walls = append(walls, fmt.Sprintf("%s %s s", ap.a, w.format(1)))
			continue
		}
		limit := "rate limit not recorded"
		if l, ok := r.rateLimit(EqualLimits, ap.a); ok {
			limit = "at " + l.Short()
		}
		walls = append(walls, fmt.Sprintf("%s %s s (%s)", ap.a, w.format(1), limit))
	}
	if unequal {
		fmt.Fprintf(b, "- Wall time at %d pods, with each driver's API rate limit (requests/s, burst): %s. "+
			"The rate limits differ, and each bounds its driver's wall time: these times are not a fair comparison of the approaches.\n", pods, strings.Join(walls, ", "))
		return
	}
	l, _ := r.rateLimit(EqualLimits, InPlace)
	fmt.Fprintf(b, "- Wall time at %d pods, every driver at %s requests/s, burst %d: %s.\n", pods, strconv.FormatFloat(l.QPS, 'f', -1, 64), l.Burst, strings.Join(walls, ", "))
	var ratios []string
	for _, ap := range approaches {
		if ap.a == InPlace || ap.a == FloorLoop {
			continue
		}
		if x := r.ratio(EqualLimits, InPlace, ap.a, pods, wall); x.n > 0 {
			ratios = append(ratios, fmt.Sprintf("%s %s", ap.a, x.format(2)))
		}
	}
	if len(ratios) > 0 {
		fmt.Fprintf(b, "- inplace-rollout's wall time over each other approach's at %d pods, each repetition's pair "+
			"(below 1: inplace-rollout took less time): %s.\n", pods, strings.Join(ratios, ", "))
	}
}

// writeWrites writes the pod writes and all writes per pod of each approach at pods against the
// floor's, with the goal of inplace-rollout's pod writes.
func writeWrites(b *strings.Builder, r *Report, pods int) {
	podWrites := func(res Result) float64 { return perPod(res.PodWrites, pods) }
	writes := func(res Result) float64 { return perPod(res.Writes, pods) }
	pw := r.spread(EqualLimits, InPlace, pods, podWrites)
	fmt.Fprintf(b, "- Pod writes per pod at %d pods: %s (goal: at most %.0f without a readiness gate, %s).\n", pods, pw.format(2), goalPodWrites, verdict(pw.median <= goalPodWrites))
	floorPod, floorAll := r.spread(EqualLimits, FloorLoop, pods, podWrites), r.spread(EqualLimits, FloorLoop, pods, writes)
	if floorPod.n == 0 {
		return
	}
	var each []string
	for _, ap := range approaches {
		if ap.a == FloorLoop {
			continue
		}
		if p := r.spread(EqualLimits, ap.a, pods, podWrites); p.n > 0 {
			each = append(each, fmt.Sprintf("%s %s and %s", ap.a, p.format(2), r.spread(EqualLimits, ap.a, pods, writes).format(2)))
		}
	}
	fmt.Fprintf(b, "- Pod writes and all writes (every resource, status included) per pod at %d pods, against the floor's %s and %s: %s.\n",
		pods, floorPod.format(2), floorAll.format(2), strings.Join(each, "; "))
}

// writeOverhead writes inplace-rollout's overhead over the floor at pods, and what bounds it.
func writeOverhead(b *strings.Builder, r *Report, pods int) {
	over := r.ratio(EqualLimits, InPlace, FloorLoop, pods, wall)
	if over.n == 0 {
		return
	}
	med := func(a Approach, value func(Result) float64) float64 {
		return r.spread(EqualLimits, a, pods, value).median
	}
	ours, floor := med(InPlace, wall), med(FloorLoop, wall)
	fmt.Fprintf(b, "- Overhead over the floor at %d pods, each repetition against its own floor: %s (goal: at most %.0f%%, %s); wall times %.1f s against %.1f s.\n",
		pods, over.percent(), 100*goalOverhead, verdict(over.median-1 <= goalOverhead), ours, floor)
	if over.median-1 <= goalOverhead || r.ClientQPS <= 0 {
		return
	}
	podWrites := int(med(InPlace, func(res Result) float64 { return float64(res.PodWrites) }))
	floorWrites := int(med(FloorLoop, func(res Result) float64 { return float64(res.PodWrites) }))
	least := writeBound(podWrites, r)
	if least == 0 {
		fmt.Fprintf(b, "- Why: the in-place rollout's %d pod writes fit within the clients' burst of %d, so the rate limit does not account for the overhead; "+
			"the profile below shows where the CPU time goes.\n", podWrites, r.ClientBurst)
	}
	if least > 0 {
		writeRateBound(b, r, podWrites, floorWrites, least, ours, floor)
	}
	srv, floorSrv := med(InPlace, func(res Result) float64 { return res.APIServerCPU }), med(FloorLoop, func(res Result) float64 { return res.APIServerCPU })
	fmt.Fprintf(b, "  The control plane shares the machine: kube-apiserver took %.1f s of CPU over the in-place rollout's %.1f s (%.2f CPUs on average), %.1f s over the floor's %.1f s (%.2f).\n",
		srv, ours, srv/ours, floorSrv, floor, floorSrv/floor)
}

// writeRateBound writes the least time the rate limit leaves the in-place rollout's podWrites,
// least, against its wall time ours and the floor's.
func writeRateBound(b *strings.Builder, r *Report, podWrites, floorWrites int, least, ours, floor float64) {
	fmt.Fprintf(b, "- Why: at the clients' rate limit (%.0f requests/s, burst %d) the in-place rollout's %d pod writes cannot take less than %.1f s, %.0f%% of its %.1f s, "+
		"where the floor's %d need %.1f s.", r.ClientQPS, r.ClientBurst, podWrites, least, 100*least/ours, ours, floorWrites, writeBound(floorWrites, r))
	if least > floor {
		fmt.Fprintf(b, " Its second write per pod, which records in the pod's state that the new containers run and are Ready, "+
			"alone puts the least time possible at this rate limit %.0f%% over the floor's %.1f s.\n", 100*(least/floor-1), floor)
	} else {
		b.WriteString(" The rate limit does not account for the overhead; the profile below shows where the CPU time goes.\n")
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
	fmt.Fprintln(tw, "limits\trep\tapproach\tpods\twall s\tpod writes/pod\tAPI req/s\tdriver CPU s\tpeak RSS MiB\trecreated\t")
	for _, res := range results {
		fmt.Fprintf(tw, "%s\t%d\t%s\t%d\t%.1f\t%.2f\t%.0f\t%.2f\t%.0f\t%d\t\n", res.Limits, res.Rep, res.Approach, res.Pods, res.Wall.Seconds(),
			perPod(res.PodWrites, res.Pods), res.RequestsPerSecond(), res.DriverCPU, float64(res.DriverPeakRSSKiB)/1024, res.Recreated)
	}
	return tw.Flush()
}
