package benchreport

import (
	"slices"
	"strconv"
	"strings"
	"time"
)

// Approach names one way of rolling a new image out.
type Approach string

// The approaches the report compares.
const (
	// InPlace is inplace-rollout's command rolling a StatefulSet in place.
	InPlace Approach = "inplace-rollout"
	// InPlaceGated is InPlace on pods that declare the readiness gate inplace-rollout.io/ready:
	// each pod drained through the gate before its update, as the CloneSet's are through
	// theirs.
	InPlaceGated Approach = "inplace-rollout-gated"
	// InPlaceWindow is InPlace in one batch: a sliding window of pods, as the controllers'
	// rolling updates.
	InPlaceWindow Approach = "inplace-rollout-window"
	// FloorLoop is Floor: the same image patches with no safety.
	FloorLoop Approach = "floor"
	// StatefulSetRolling is the StatefulSet controller's RollingUpdate: pods recreated.
	StatefulSetRolling Approach = "statefulset-rollingupdate"
	// DeploymentRolling is the Deployment controller's rolling update: pods recreated.
	DeploymentRolling Approach = "deployment-rollingupdate"
	// CloneSetInPlace is OpenKruise's CloneSet with updateStrategy InPlaceIfPossible.
	CloneSetInPlace Approach = "kruise-cloneset"
)

// Limits names the client-side rate limits a set of rows ran at.
type Limits string

const (
	// EqualLimits is every driver at one rate limit, the inplace-rollout command's default:
	// the main table, whose wall times compare the approaches.
	EqualLimits Limits = "equal"
	// DefaultLimits is each component at its own default rate limit: what a user who changes
	// none gets.
	DefaultLimits Limits = "default"
	// ScaleLimits is the main table's rate limit again, on a control plane of its own with
	// more simulated kubelets: inplace-rollout and the floor at sizes past the main table's.
	ScaleLimits Limits = "scale"
)

// The processes whose CPU time a Result has (Result.CPU), in the order the report gives them.
const (
	// CPUCommand is the process the bench started for the rollout: inplace-rollout, or the
	// floor loop. The controllers' rollouts have none.
	CPUCommand           = "command"
	CPUAPIServer         = "kube-apiserver"
	CPUEtcd              = "etcd"
	CPUControllerManager = "kube-controller-manager"
	CPUKruise            = "kruise-manager"
	// CPUBench is the benchmark's own process: the kubelet simulator, the gate controller, the
	// watches of the pods and EndpointSlices, and the request load.
	CPUBench = "benchreport"
)

var cpuProcesses = []string{CPUCommand, CPUAPIServer, CPUEtcd, CPUControllerManager, CPUKruise, CPUBench}

// Result is what one rollout of Pods pods by one approach measured.
type Result struct {
	Approach Approach
	Pods     int
	// Limits are the rate limits the rollout ran at, and so the table it is in.
	Limits Limits
	// Rep is the repetition it was measured in, from 1.
	Rep int
	// Wall is from the first write of the rollout until every pod ran the new image, Ready.
	Wall time.Duration
	// PodWrites are the requests that wrote the pods' objects (POST, PUT, PATCH, DELETE on
	// pods, subresources left out), by every client: a recreated pod costs a DELETE by its
	// controller, one by the kubelet and a POST.
	PodWrites int
	// Writes are all mutating requests, every resource and subresource (status included).
	Writes int
	// Requests are all requests but watches.
	Requests int
	// Driver is the process doing the rollout; DriverCPU and DriverPeakRSSKiB are its CPU
	// time and peak resident set over the rollout.
	Driver           string
	DriverCPU        float64
	DriverPeakRSSKiB int
	// DriverPeakRSSMeasured is false in results saved before the command's peak was sampled
	// from /proc (runMeasured): a command's DriverPeakRSSKiB there is the benchmark's own.
	DriverPeakRSSMeasured bool
	// APIServerCPU is kube-apiserver's CPU time over the rollout.
	APIServerCPU float64
	// CPU is the CPU time over the rollout of every process of the run, by name (the CPU...
	// constants); a process that did not run is missing.
	CPU map[string]float64
	// Calls are the requests of the rollout by client, resource and verb, from kube-apiserver's
	// audit log; nil without one.
	Calls map[Call]int
	// Recreated is how many pods ended with a UID they did not start with.
	Recreated int
	// NotReady and OutOfSlice are, per pod and sorted, how long it was not Ready and how long no
	// EndpointSlice of its Service listed it ready, from the rollout's start until the
	// slices listed every pod ready again (outTimes: a Deployment's leaving pods are paired in
	// order with its new ones).
	NotReady, OutOfSlice []time.Duration
	// Sent and Failed count the simulated requests of the load on the workload's Service over
	// that time, and those that reached a pod not serving or found no pod listed (startLoad);
	// none without Bench.Serving.
	Sent, Failed int
}

// RequestsPerSecond is the apiserver's request rate over the rollout.
func (r Result) RequestsPerSecond() float64 { return float64(r.Requests) / r.Wall.Seconds() }

// Report is one run of every scenario on one control plane.
type Report struct {
	// Date is when the run started.
	Date time.Time
	// Machine describes where it ran: CPUs, Go version, OS.
	Machine string
	// Settings are the simulated kubelet's delays and the clients' rate limits, by name.
	Settings []Setting
	// ClientQPS and ClientBurst are the rate limit that inplace-rollout and the floor loop
	// share: the least time their pod writes can take follows from it.
	ClientQPS   float64
	ClientBurst int
	// RateLimits are the client-side API rate limits each approach's driver ran at, for each
	// set of rows. A rollout's wall time is bound by its driver's rate limit, so the report
	// says when the approaches' limits in the main table differ: their times then do not
	// compare the approaches.
	RateLimits map[Limits]map[Approach]RateLimit
	// Repetitions is how many times each approach was measured at each size, interleaved:
	// each repetition measures every approach once, in an order shuffled from Seed.
	Repetitions int
	Seed        uint64
	// Results holds one entry per approach, size, rate limits and repetition.
	Results []Result
	// CloneSetSkipped says why the CloneSet rows are missing, when they are.
	CloneSetSkipped string
	// Conditions, when set, says what else shared the machine during the run, or anything else
	// that bears on its numbers; the report gives it under its header.
	Conditions string
	// Profile is the top of the CPU profile of inplace-rollout at the largest size, as
	// `go tool pprof -top` prints it; ProfileFile is that profile's file name.
	Profile     string
	ProfileFile string
	// ScaleNodes and ScaleDate are the simulated kubelets and the start of the pass at
	// ScaleLimits, when one ran.
	ScaleNodes int
	ScaleDate  time.Time
}

// RateLimit is a client's token bucket: QPS requests per second, Burst above it. Flags are
// the component's flags that set it (empty: none, its default); Note says which clients
// have it.
type RateLimit struct {
	QPS   float64
	Burst int
	Flags string
	Note  string
}

// Short is the limit as "QPS, burst", for a table's column.
func (l RateLimit) Short() string {
	return strconv.FormatFloat(l.QPS, 'f', -1, 64) + ", " + strconv.Itoa(l.Burst)
}

func (l RateLimit) String() string {
	s := strconv.FormatFloat(l.QPS, 'f', -1, 64) + " requests/s, burst " + strconv.Itoa(l.Burst)
	var notes []string
	if l.Flags != "" {
		notes = append(notes, "`"+l.Flags+"`")
	} else {
		notes = append(notes, "its default, no flag")
	}
	if l.Note != "" {
		notes = append(notes, l.Note)
	}
	return s + " (" + strings.Join(notes, "; ") + ")"
}

// rateLimit is approach a's rate limit in the rows of limits, if the report has it.
func (r *Report) rateLimit(limits Limits, a Approach) (RateLimit, bool) {
	l, ok := r.RateLimits[limits][a]
	return l, ok
}

// unequalRateLimits reports whether the approaches measured at limits ran at different rate
// limits, or at one the report does not know: their wall times then do not compare the
// approaches.
func (r *Report) unequalRateLimits(limits Limits) bool {
	var first *RateLimit
	for _, res := range r.Results {
		if res.Limits != limits {
			continue
		}
		l, ok := r.rateLimit(limits, res.Approach)
		if !ok {
			return true
		}
		if first == nil {
			first = &l
			continue
		}
		if l.QPS != first.QPS || l.Burst != first.Burst {
			return true
		}
	}
	return false
}

// Setting is one named parameter of the run.
type Setting struct{ Name, Value string }

// samples are the results of approach a at pods and limits, one per repetition, in the order
// of their repetitions.
func (r *Report) samples(limits Limits, a Approach, pods int) []Result {
	var out []Result
	for _, res := range r.Results {
		if res.Limits == limits && res.Approach == a && res.Pods == pods {
			out = append(out, res)
		}
	}
	slices.SortFunc(out, func(x, y Result) int { return x.Rep - y.Rep })
	return out
}

// spread is the spread of value over the samples of approach a at pods and limits.
func (r *Report) spread(limits Limits, a Approach, pods int, value func(Result) float64) spread {
	var xs []float64
	for _, res := range r.samples(limits, a, pods) {
		xs = append(xs, value(res))
	}
	return spreadOf(xs)
}

// ratio is the spread of value(a) over value(b) at pods and limits, each repetition's a against
// that repetition's b: the repetitions ran interleaved, so a pair shared the machine's state.
func (r *Report) ratio(limits Limits, a, b Approach, pods int, value func(Result) float64) spread {
	bs := map[int]Result{}
	for _, res := range r.samples(limits, b, pods) {
		bs[res.Rep] = res
	}
	var xs []float64
	for _, res := range r.samples(limits, a, pods) {
		if other, ok := bs[res.Rep]; ok && value(other) > 0 {
			xs = append(xs, value(res)/value(other))
		}
	}
	return spreadOf(xs)
}

// wall is a result's wall time in seconds.
func wall(res Result) float64 { return res.Wall.Seconds() }

// sizes are the pod counts measured at limits, in increasing order.
func (r *Report) sizes(limits Limits) []int {
	var out []int
	seen := map[int]bool{}
	for _, res := range r.Results {
		if res.Limits == limits && !seen[res.Pods] {
			seen[res.Pods] = true
			out = append(out, res.Pods)
		}
	}
	slices.Sort(out)
	return out
}
