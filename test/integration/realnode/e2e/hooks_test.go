package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/inplace-rollout/inplace-rollout/pkg/inplace"
	"github.com/inplace-rollout/inplace-rollout/test/integration/clitest"
	"github.com/inplace-rollout/inplace-rollout/test/integration/cluster"
)

// Lifecycle hooks on the real node. An HTTP hook goes to the pod through the API server's pod
// proxy, so only the real node's pods can answer one: a simulated pod's IP is nowhere. The app
// records every hook call in a file on an emptyDir (realapp's APP_HOOK_LOG), which outlives the
// in-place restart, so the pod's /hooklog lists the calls answered by its old container and by
// its new one, each with the tag that answered.

// registered is the handshake condition of the tests' postUpdate hooks: the engine sets it
// False on the pod, and the tests' handshaker, standing in for a service registry, sets it True.
const registered corev1.PodConditionType = "example.com/registered"

// hookLogPath is where the app of hookTemplate's pods appends its hook calls.
const hookLogPath = "/hooks/calls.log"

// hookTemplate declares the readiness gate on template, and gives the app an emptyDir for its
// hook log.
func hookTemplate(tmpl *corev1.PodTemplateSpec) {
	tmpl.Spec.ReadinessGates = []corev1.PodReadinessGate{{ConditionType: inplace.ReadinessGate}}
	tmpl.Spec.Volumes = append(tmpl.Spec.Volumes, corev1.Volume{Name: "hooks", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}})
	app := &tmpl.Spec.Containers[0]
	app.VolumeMounts = append(app.VolumeMounts, corev1.VolumeMount{Name: "hooks", MountPath: "/hooks"})
	app.Env = append(app.Env, corev1.EnvVar{Name: "APP_HOOK_LOG", Value: hookLogPath})
}

// hookStatefulSet starts the gate controller for ns and creates StatefulSet web of replicas
// hookTemplate pods on v1, Ready through the gate.
func hookStatefulSet(t *testing.T, ns string, replicas int32) {
	t.Helper()
	env.StartGateController(t, ns)
	statefulSetOf(t, ns, "web", replicas, hookTemplate)
}

// hookCall is one line of a pod's /hooklog.
type hookCall struct {
	At   time.Time
	What string // "METHOD NAME TAG"
}

// hookCalls reads the pod's /hooklog through the API server's pod proxy, as the engine calls
// the hooks.
func hookCalls(t *testing.T, ns, pod string) []hookCall {
	t.Helper()
	raw, err := env.Client.CoreV1().Pods(ns).ProxyGet("http", pod, "8080", "hooklog", nil).DoRaw(context.Background())
	must(t, err, "reading /hooklog of %s/%s through the pod proxy", ns, pod)
	var out []hookCall
	for line := range strings.Lines(string(raw)) {
		f := strings.Fields(line)
		if len(f) != 4 {
			t.Fatalf("/hooklog of %s: line %q is not TIME METHOD NAME TAG:\n%s", pod, line, raw)
		}
		at, err := time.Parse(time.RFC3339Nano, f[0])
		must(t, err, "/hooklog of %s: line %q", pod, line)
		out = append(out, hookCall{At: at, What: strings.Join(f[1:], " ")})
	}
	return out
}

// countCalls is how many times each call was made, by pod, for the pods selector selects.
func countCalls(t *testing.T, ns, selector string) map[string]map[string]int {
	t.Helper()
	out := map[string]map[string]int{}
	for _, p := range clitest.ListPods(t, env, ns, selector) {
		out[p.Name] = map[string]int{}
		for _, c := range hookCalls(t, ns, p.Name) {
			out[p.Name][c.What]++
		}
	}
	return out
}

// equalCounts compares call counts by pod, a pod with no calls as one absent.
func equalCounts(a, b map[string]map[string]int) bool {
	for _, name := range slices.Concat(slices.Collect(maps.Keys(a)), slices.Collect(maps.Keys(b))) {
		if !maps.Equal(a[name], b[name]) {
			return false
		}
	}
	return true
}

// runKey names a hook run of a pod: the hook, and whether it ran for a revert.
type runKey struct {
	Hook      inplace.HookName
	Reverting bool
}

func (k runKey) String() string {
	if k.Reverting {
		return string(k.Hook) + "/revert"
	}
	return string(k.Hook) + "/update"
}

// milestone is a moment of a pod's update: the first watch event at which holds is true.
type milestone struct {
	name  string
	holds func(p *corev1.Pod, st *inplace.State) bool
}

// podWatch follows the pods of a namespace from a watch until the test ends, and keeps for
// each pod when each milestone was first seen, the last version of each hook run its state
// showed, and the stages it went through.
type podWatch struct {
	milestones []milestone

	mu     sync.Mutex
	first  map[string]map[string]time.Time
	runs   map[string]map[runKey]inplace.HookRun
	stages map[string][]inplace.Stage
	closed bool
}

// watchPods starts a podWatch on the pods selector selects in ns.
func watchPods(t *testing.T, ns, selector string, milestones ...milestone) *podWatch {
	t.Helper()
	pw := &podWatch{milestones: milestones, first: map[string]map[string]time.Time{},
		runs: map[string]map[runKey]inplace.HookRun{}, stages: map[string][]inplace.Stage{}}
	ctx, cancel := context.WithCancel(context.Background())
	w, err := env.Client.CoreV1().Pods(ns).Watch(ctx, metav1.ListOptions{LabelSelector: selector})
	must(t, err, "watching the pods %s of %s", selector, ns)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev := range w.ResultChan() {
			if p, ok := ev.Object.(*corev1.Pod); ok {
				pw.observe(p, time.Now())
			}
		}
		pw.mu.Lock()
		pw.closed = ctx.Err() == nil
		pw.mu.Unlock()
	}()
	t.Cleanup(func() { cancel(); w.Stop(); <-done })
	return pw
}

func (pw *podWatch) observe(p *corev1.Pod, at time.Time) {
	// A state that cannot be read counts as none: the milestones that need one are not met.
	st, _ := inplace.ReadState(p)
	pw.mu.Lock()
	defer pw.mu.Unlock()
	if pw.first[p.Name] == nil {
		pw.first[p.Name], pw.runs[p.Name] = map[string]time.Time{}, map[runKey]inplace.HookRun{}
	}
	for _, m := range pw.milestones {
		if _, seen := pw.first[p.Name][m.name]; !seen && m.holds(p, st) {
			pw.first[p.Name][m.name] = at
		}
	}
	if st == nil {
		return
	}
	for _, r := range st.HookRuns {
		pw.runs[p.Name][runKey{r.Hook, r.Reverting}] = r
	}
	if s := pw.stages[p.Name]; len(s) == 0 || s[len(s)-1] != st.Stage {
		pw.stages[p.Name] = append(s, st.Stage)
	}
}

// seen is when the milestone was first seen on pod, zero if never.
func (pw *podWatch) seen(t *testing.T, pod, name string) time.Time {
	t.Helper()
	pw.mu.Lock()
	defer pw.mu.Unlock()
	if pw.closed {
		t.Fatal("the watch of the pods closed early: some versions went unseen")
	}
	return pw.first[pod][name]
}

// hookRuns is every hook run the pod's state showed, as "HOOK/DIRECTION OUTCOME", sorted.
func (pw *podWatch) hookRuns(pod string) []string {
	pw.mu.Lock()
	defer pw.mu.Unlock()
	var out []string
	for k, r := range pw.runs[pod] {
		out = append(out, k.String()+" "+string(r.Outcome))
	}
	sort.Strings(out)
	return out
}

// stagesOf is the stages the pod's state went through, in order.
func (pw *podWatch) stagesOf(pod string) []inplace.Stage {
	pw.mu.Lock()
	defer pw.mu.Unlock()
	return slices.Clone(pw.stages[pod])
}

// handshake is one ask of a handshake hook on a pod: the run the state showed when the
// condition went False, when the handshaker saw it, and when it sent the release (zero if it
// did not).
type handshake struct {
	Run            runKey
	Seen, Released time.Time
}

// handshaker stands in for the party a handshake hook waits for (a service registry): it
// watches the pods of a namespace and, when the condition is False while the pod's state shows
// a hook run in progress, sets the condition True through pods/status if release says so.
type handshaker struct {
	cond    corev1.PodConditionType
	release func(runKey) bool

	mu      sync.Mutex
	asks    map[string][]handshake
	handled map[string]bool // pod and run start
	errs    []error
}

// startHandshaker runs a handshaker for cond in ns until the test ends; a failed release fails
// the test at its end.
func startHandshaker(t *testing.T, ns string, cond corev1.PodConditionType, release func(runKey) bool) *handshaker {
	t.Helper()
	h := &handshaker{cond: cond, release: release, asks: map[string][]handshake{}, handled: map[string]bool{}}
	ctx, cancel := context.WithCancel(context.Background())
	w, err := env.Client.CoreV1().Pods(ns).Watch(ctx, metav1.ListOptions{})
	must(t, err, "watching the pods of %s for the handshakes", ns)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev := range w.ResultChan() {
			if p, ok := ev.Object.(*corev1.Pod); ok {
				h.observe(ctx, p)
			}
		}
	}()
	t.Cleanup(func() {
		cancel()
		w.Stop()
		<-done
		for _, err := range h.errs {
			t.Errorf("handshaker: %v", err)
		}
	})
	return h
}

func (h *handshaker) observe(ctx context.Context, p *corev1.Pod) {
	c := condition(p, h.cond)
	st, _ := inplace.ReadState(p)
	if c == nil || c.Status != corev1.ConditionFalse || st == nil {
		return
	}
	// The engine writes the condition False and the hook run's start in one write: the run
	// with no outcome is the one that asks.
	i := slices.IndexFunc(st.HookRuns, func(r inplace.HookRun) bool { return r.Outcome == "" })
	if i < 0 {
		return
	}
	run := st.HookRuns[i]
	id := p.Name + "@" + run.StartedAt.Format(time.RFC3339Nano)
	h.mu.Lock()
	if h.handled[id] {
		h.mu.Unlock()
		return
	}
	h.handled[id] = true
	ask := handshake{Run: runKey{run.Hook, run.Reverting}, Seen: time.Now()}
	release := h.release(ask.Run)
	if release {
		ask.Released = time.Now()
	}
	// Recorded before the release is sent: the rollout may end as soon as it lands.
	h.asks[p.Name] = append(h.asks[p.Name], ask)
	h.mu.Unlock()
	if !release {
		return
	}
	// A strategic-merge patch merges conditions by type; a merge patch would replace them all.
	patch, _ := json.Marshal(map[string]any{"status": map[string]any{"conditions": []corev1.PodCondition{{
		Type: h.cond, Status: corev1.ConditionTrue, Reason: "Registered", LastTransitionTime: metav1.Now(),
	}}}})
	if _, err := env.Client.CoreV1().Pods(p.Namespace).Patch(ctx, p.Name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status"); err != nil && ctx.Err() == nil {
		h.mu.Lock()
		h.errs = append(h.errs, fmt.Errorf("setting %s True on pod %s: %w", h.cond, p.Name, err))
		h.mu.Unlock()
	}
}

// asksOf is the handshakes the pod asked for, in order.
func (h *handshaker) asksOf(pod string) []handshake {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.asks[pod])
}

// finalStates is each selected pod's state, nil when cleared.
func finalStates(t *testing.T, ns, selector string) map[string]*inplace.State {
	t.Helper()
	out := map[string]*inplace.State{}
	for _, p := range clitest.ListPods(t, env, ns, selector) {
		st, err := inplace.ReadState(&p)
		must(t, err, "reading the state of pod %s", p.Name)
		out[p.Name] = st
	}
	return out
}

// The hooks of the tests' --hooks values.
const (
	preHTTP      = "{http: {port: 8080, path: /hook/pre, method: POST}}"
	postHTTP     = "{http: {port: 8080, path: /hook/post, method: POST}}"
	postRegister = "{handshake: {condition: " + string(registered) + "}}"
)

// updateMilestones are the moments of an update of a pod with the gate from v1 to tag.
func updateMilestones(t *testing.T, tag string) []milestone {
	t.Helper()
	d, old := digest(t, tag), image("v1")
	onNew := func(p *corev1.Pod) bool {
		cs := cluster.ContainerStatus(p, "app")
		return cs != nil && cs.State.Running != nil && cs.Ready && strings.HasSuffix(cs.ImageID, "@"+d)
	}
	stage := func(s inplace.Stage) func(*corev1.Pod, *inplace.State) bool {
		return func(_ *corev1.Pod, st *inplace.State) bool { return st != nil && st.Stage == s }
	}
	return []milestone{
		{"pre-hook stage", stage(inplace.StagePreUpdateHook)},
		{"drain", func(p *corev1.Pod, _ *inplace.State) bool {
			c := condition(p, inplace.ReadinessGate)
			return c != nil && c.Status == corev1.ConditionFalse
		}},
		{"patch", func(p *corev1.Pod, _ *inplace.State) bool { return p.Spec.Containers[0].Image != old }},
		{"container Ready", func(p *corev1.Pod, _ *inplace.State) bool { return onNew(p) }},
		{"pod Ready", func(p *corev1.Pod, _ *inplace.State) bool { return onNew(p) && cluster.PodReady(p) }},
		{"post-hook", func(p *corev1.Pod, _ *inplace.State) bool {
			c := condition(p, registered)
			return c != nil && c.Status == corev1.ConditionFalse
		}},
		{"Updated", stage(inplace.StageUpdated)},
	}
}

// TestHooksInPlace rolls a 2-pod StatefulSet with the readiness gate to v2 with a preUpdate
// HTTP hook and a postUpdate handshake, and checks each pod went through them in order: the
// hook call (answered by v1), the drain, the image patch, the new container Ready, the pod
// Ready, the handshake asked, Updated. Each pod is called once and kept.
func TestHooksInPlace(t *testing.T) {
	ns := env.Namespace(t)
	hookStatefulSet(t, ns, 2)
	before := identities(t, ns, "app=web")
	shakes := startHandshaker(t, ns, registered, func(runKey) bool { return true })
	pw := watchPods(t, ns, "app=web", updateMilestones(t, "v2")...)

	hooks := "{preUpdate: " + preHTTP + ", postUpdate: " + postRegister + "}"
	r := run(t, "run", "-n", ns, "--target", "statefulset/web", "--image", "app="+image("v2"),
		"--batches", "1,100%", "--grace", "2s", "--hooks", hooks)
	if r.Code != 0 {
		t.Fatalf("run v2 with hooks: %s", r)
	}
	checkInPlace(t, before, identities(t, ns, "app=web"), 1)
	onDigest(t, ns, "app=web", digest(t, "v2"))
	for name, st := range finalStates(t, ns, "app=web") {
		if st == nil || st.Stage != inplace.StageUpdated {
			t.Errorf("pod %s: state %+v, want stage Updated", name, st)
		}
	}

	order := []string{"drain", "patch", "container Ready", "pod Ready", "post-hook", "Updated"}
	for _, name := range []string{"web-1", "web-0"} {
		calls := hookCalls(t, ns, name)
		if len(calls) != 1 || calls[0].What != "POST pre v1" {
			t.Errorf("pod %s: hook calls %+v, want one POST pre answered by v1", name, calls)
			continue
		}
		at := map[string]time.Time{"hook call": calls[0].At}
		prev := "hook call"
		for _, m := range order {
			at[m] = pw.seen(t, name, m)
			switch {
			case at[m].IsZero():
				t.Errorf("pod %s: %s never seen; stages %v", name, m, pw.stagesOf(name))
			case !at[prev].IsZero() && !at[prev].Before(at[m]):
				t.Errorf("pod %s: %s at %s, not after %s at %s", name, m, at[m].Format(time.StampMicro), prev, at[prev].Format(time.StampMicro))
			}
			prev = m
		}
		if t.Failed() {
			continue
		}
		asks := shakes.asksOf(name)
		if len(asks) != 1 || asks[0].Run != (runKey{inplace.PostUpdate, false}) {
			t.Errorf("pod %s: handshakes %+v, want one, of the update's postUpdate", name, asks)
			continue
		}
		t.Logf("pod %s: call - pre-hook stage seen %s; call -> drain %s, drain -> patch %s (grace 2s), patch -> container Ready %s, -> pod Ready %s, -> handshake asked %s, released (at once) -> Updated %s; call -> Updated %s",
			name, at["hook call"].Sub(pw.seen(t, name, "pre-hook stage")).Round(time.Millisecond),
			at["drain"].Sub(at["hook call"]).Round(time.Millisecond), at["patch"].Sub(at["drain"]).Round(time.Millisecond),
			at["container Ready"].Sub(at["patch"]).Round(time.Millisecond), at["pod Ready"].Sub(at["container Ready"]).Round(time.Millisecond),
			at["post-hook"].Sub(at["pod Ready"]).Round(time.Millisecond),
			at["Updated"].Sub(asks[0].Released).Round(time.Millisecond), at["Updated"].Sub(at["hook call"]).Round(time.Millisecond))
	}
}

// A hook that fails, in each direction: the rollout fails and rolls back (exit 1), or, with
// onFailure Continue, goes on (exit 0). Every pod keeps its UID; each hook is called at most
// once per pod and direction, which the tag that answered tells apart: the update's preUpdate
// is answered by v1, the revert's by v2. The state's hook runs show the directions.
func TestHookFailures(t *testing.T) {
	full(t)
	tests := []struct {
		name  string
		hooks string
		// release decides which handshakes the handshaker releases.
		release func(runKey) bool
		code    int
		tag     string // what every pod runs at the end
		// restarts is each pod's restarts of its app container.
		restarts map[string]int32
		calls    map[string]map[string]int
		runs     map[string][]string
	}{
		{
			name:     "preUpdate fails, rolled back",
			hooks:    "{preUpdate: {http: {port: 8080, path: /hook/fail/pre, method: POST}, onFailure: Fail}}",
			code:     1,
			tag:      "v1",
			restarts: map[string]int32{"web-0": 0, "web-1": 0},
			// The first batch is web-1 alone (highest ordinal first): web-0 is never started.
			calls: map[string]map[string]int{"web-1": {"POST fail/pre v1": 1}},
			runs:  map[string][]string{"web-1": {"preUpdate/update Failed"}},
		},
		{
			name:     "preUpdate fails, onFailure Continue",
			hooks:    "{preUpdate: {http: {port: 8080, path: /hook/fail/pre, method: POST}, onFailure: Continue}}",
			code:     0,
			tag:      "v2",
			restarts: map[string]int32{"web-0": 1, "web-1": 1},
			calls:    map[string]map[string]int{"web-0": {"POST fail/pre v1": 1}, "web-1": {"POST fail/pre v1": 1}},
			runs:     map[string][]string{"web-0": {"preUpdate/update Failed"}, "web-1": {"preUpdate/update Failed"}},
		},
		{
			// The update's handshake is never released and times out once web-1 runs v2; its
			// revert runs preUpdate again (answered by v2) and a handshake of its own, released.
			name:     "postUpdate times out after the change, rolled back",
			hooks:    "{preUpdate: " + preHTTP + ", postUpdate: {handshake: {condition: " + string(registered) + "}, timeout: 3s}}",
			release:  func(k runKey) bool { return k.Reverting },
			code:     1,
			tag:      "v1",
			restarts: map[string]int32{"web-0": 0, "web-1": 2},
			calls:    map[string]map[string]int{"web-1": {"POST pre v1": 1, "POST pre v2": 1}},
			runs: map[string][]string{"web-1": {
				"postUpdate/revert Succeeded", "postUpdate/update Failed", "preUpdate/revert Succeeded", "preUpdate/update Succeeded",
			}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ns := env.Namespace(t)
			hookStatefulSet(t, ns, 2)
			before := identities(t, ns, "app=web")
			if tt.release != nil {
				startHandshaker(t, ns, registered, tt.release)
			}
			pw := watchPods(t, ns, "app=web")
			r := run(t, "run", "-n", ns, "--target", "statefulset/web", "--image", "app="+image("v2"),
				"--batches", "1,100%", "--grace", "1s", "--timeout", "2m", "--hooks", tt.hooks)
			if r.Code != tt.code {
				t.Fatalf("run v2 with hooks %s: want exit %d, got %s", tt.hooks, tt.code, r)
			}
			after := identities(t, ns, "app=web")
			for name, want := range tt.restarts {
				checkInPlace(t, map[string]identity{name: before[name]}, map[string]identity{name: after[name]}, want)
			}
			onDigest(t, ns, "app=web", digest(t, tt.tag))
			for name, st := range finalStates(t, ns, "app=web") {
				want := inplace.StageUpdated
				if tt.code != 0 {
					want = inplace.StageRolledBack
				}
				if st != nil && st.Stage != want {
					t.Errorf("pod %s ends at stage %s (%s), want %s or no state", name, st.Stage, st.Reason, want)
				}
			}
			if got := countCalls(t, ns, "app=web"); !equalCounts(got, tt.calls) {
				t.Errorf("hook calls by pod %v, want %v", got, tt.calls)
			}
			for _, name := range []string{"web-0", "web-1"} {
				if got := pw.hookRuns(name); !slices.Equal(got, tt.runs[name]) {
					t.Errorf("pod %s: hook runs %q, want %q; stages %v", name, got, tt.runs[name], pw.stagesOf(name))
				}
				t.Logf("pod %s: stages %v", name, pw.stagesOf(name))
			}
		})
	}
}

// The CLI killed with SIGKILL after the first pod's preUpdate hook answered and before its
// images changed (stage Draining, a grace period of 5 s holding it there); the same command
// again finishes the rollout, and no hook is called twice: the killed run's call is recorded on
// the pod with its outcome, and the run that resumes goes on from the drain.
func TestHooksResumeAfterSIGKILL(t *testing.T) {
	full(t)
	ns := env.Namespace(t)
	hookStatefulSet(t, ns, 2)
	before := identities(t, ns, "app=web")
	pw := watchPods(t, ns, "app=web", updateMilestones(t, "v2")...)
	args := []string{"run", "-n", ns, "--target", "statefulset/web", "--image", "app=" + image("v2"),
		"--batches", "1,100%", "--grace", "5s", "--timeout", "2m",
		"--hooks", "{preUpdate: " + preHTTP + ", postUpdate: " + postHTTP + "}"}

	var stderr bytes.Buffer
	started := time.Now()
	cmd := clitest.Start(t, env, cli, &stderr, args...)
	// web-1 is the first batch: highest ordinal first.
	env.WaitForPod(t, ns, "web-1", 60*time.Second, "preUpdate answered, draining", func(p *corev1.Pod) bool {
		st, err := inplace.ReadState(p)
		if err != nil || st == nil || st.Stage != inplace.StageDraining {
			return false
		}
		i := slices.IndexFunc(st.HookRuns, func(r inplace.HookRun) bool { return r.Hook == inplace.PreUpdate && !r.Reverting })
		return i >= 0 && st.HookRuns[i].Outcome == inplace.HookSucceeded
	})
	must(t, cmd.Process.Signal(syscall.SIGKILL), "killing the CLI")
	_ = cmd.Wait()
	killed := time.Now()
	// The kill must have landed before the patch, or the test would prove nothing about it.
	p := getPodNamed(t, ns, "web-1")
	if img := p.Spec.Containers[0].Image; img != image("v1") {
		t.Fatalf("web-1 runs %s when the CLI was killed: the kill came after the patch, not between the hook and the patch\nfirst run:\n%s", img, clitest.LastLines(stderr.String(), 10))
	}
	t.Logf("first run killed %s after its start, web-1 draining with its preUpdate answered", killed.Sub(started).Round(time.Millisecond))

	if r := run(t, args...); r.Code != 0 {
		t.Fatalf("run again after SIGKILL: %s\nfirst run:\n%s", r, clitest.LastLines(stderr.String(), 10))
	}
	checkInPlace(t, before, identities(t, ns, "app=web"), 1)
	onDigest(t, ns, "app=web", digest(t, "v2"))
	want := map[string]map[string]int{
		"web-0": {"POST pre v1": 1, "POST post v2": 1},
		"web-1": {"POST pre v1": 1, "POST post v2": 1},
	}
	if got := countCalls(t, ns, "app=web"); !equalCounts(got, want) {
		t.Errorf("hook calls by pod %v, want %v: one per hook, the killed run's not repeated", got, want)
	}
	for name, st := range finalStates(t, ns, "app=web") {
		if st == nil || st.Stage != inplace.StageUpdated {
			t.Errorf("pod %s: state %+v, want stage Updated", name, st)
		}
	}
	drain, patch := pw.seen(t, "web-1", "drain"), pw.seen(t, "web-1", "patch")
	t.Logf("web-1: drain -> patch %s across the kill (grace 5s); stages %v", patch.Sub(drain).Round(time.Millisecond), pw.stagesOf("web-1"))
}

// getPodNamed reads pod ns/name.
func getPodNamed(t *testing.T, ns, name string) *corev1.Pod {
	t.Helper()
	p, err := env.Client.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
	must(t, err, "reading pod %s/%s", ns, name)
	return p
}
