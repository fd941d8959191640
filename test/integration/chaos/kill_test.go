package chaos_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/inplace-rollout/inplace-rollout/pkg/inplace"
	"github.com/inplace-rollout/inplace-rollout/pkg/workload"
	"github.com/inplace-rollout/inplace-rollout/test/integration/clitest"
	"github.com/inplace-rollout/inplace-rollout/test/integration/cluster"
)

// Settings of the chaos run, from the environment so that `make chaos` and a replay can set them.
const (
	// killsEnv is the number of kill points across all scenarios.
	killsEnv = "INPLACE_ROLLOUT_CHAOS_KILLS"
	// seedEnv seeds the random kill delays; a failure prints its seed, and the same seed (and
	// kill count) replays the same delays.
	seedEnv = "INPLACE_ROLLOUT_CHAOS_SEED"
	// maxDelayEnv is the longest a command runs before it is killed, as a Go duration.
	maxDelayEnv = "INPLACE_ROLLOUT_CHAOS_MAX_DELAY"
)

// Defaults: the short form `make test` runs.
const (
	defaultKills    = 6
	defaultMaxDelay = 4 * time.Second
	// minDelay lets most killed commands get past their start-up and write something.
	minDelay = 150 * time.Millisecond
	// perCommand caps the kills of one command, so that later scenarios, and a rollback after
	// its run, get kill points too.
	perCommand = 3
	replicas   = 30
)

// The scenario's workload and the arguments both directions use; a resumed command repeats them.
const name = "web"

func runArgs(ns string) []string {
	return []string{"run", "-n", ns, "--target", "statefulset/" + name, "--image", "app=" + clitest.AppV2,
		"--batches", "1,10%,50%,100%", "--max-unavailable", "5"}
}

func rollbackArgs(ns string) []string {
	return []string{"rollback", "-n", ns, "--target", "statefulset/" + name}
}

// settings reads the chaos settings from the environment.
func settings(t *testing.T) (kills int, seed uint64, maxDelay time.Duration) {
	t.Helper()
	kills, maxDelay = defaultKills, defaultMaxDelay
	seed = uint64(time.Now().UnixNano())
	var err error
	if v := os.Getenv(killsEnv); v != "" {
		if kills, err = strconv.Atoi(v); err != nil || kills < 1 {
			t.Fatalf("%s=%q: want a positive number of kill points", killsEnv, v)
		}
	}
	if v := os.Getenv(seedEnv); v != "" {
		if seed, err = strconv.ParseUint(v, 10, 64); err != nil {
			t.Fatalf("%s=%q: want an unsigned integer: %v", seedEnv, v, err)
		}
	}
	if v := os.Getenv(maxDelayEnv); v != "" {
		if maxDelay, err = time.ParseDuration(v); err != nil || maxDelay <= minDelay {
			t.Fatalf("%s=%q: want a duration longer than %s", maxDelayEnv, v, minDelay)
		}
	}
	return kills, seed, maxDelay
}

// killPoint is where one SIGKILL found the rollout: the lock's phase and how many pods were in
// each state stage, read right after the kill.
type killPoint struct {
	scenario int
	command  string
	delay    time.Duration
	phase    string
	stages   map[string]int
}

func (k killPoint) String() string {
	keys := make([]string, 0, len(k.stages))
	for s := range k.stages {
		keys = append(keys, s)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, s := range keys {
		fmt.Fprintf(&b, " %s=%d", s, k.stages[s])
	}
	return fmt.Sprintf("scenario %d %s killed after %s: lock %s, pods%s", k.scenario, k.command, k.delay, k.phase, b.String())
}

// chaos drives the scenarios and keeps the kill points.
type chaos struct {
	t        *testing.T
	rng      *rand.Rand
	budget   int // kill points still to spend
	maxDelay time.Duration
	points   []killPoint
}

// TestKilledCommandsFinishInPlace runs scenarios on a fresh 30-pod StatefulSet each: a rollout
// to a new image, or a rollout then its rollback. Each command is SIGKILLed after a random delay
// and started again with the same arguments until it exits by itself; once the kill points are
// spent, the commands run to their end. After each scenario the invariants are checked.
func TestKilledCommandsFinishInPlace(t *testing.T) {
	kills, seed, maxDelay := settings(t)
	t.Logf("chaos: %d kill points, seed %d (replay with %s=%d %s=%d), max delay %s", kills, seed, seedEnv, seed, killsEnv, kills, maxDelay)
	c := &chaos{t: t, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), budget: kills, maxDelay: maxDelay}
	// Alternate the two kinds, and run at least one of each, until the kill points are spent.
	// The rollbacks come first so that the short form kills a rollback too.
	for i := 0; c.budget > 0 || i < 2; i++ {
		rollback := i%2 == 0
		kind := "run"
		if rollback {
			kind = "run then rollback"
		}
		ok := t.Run(fmt.Sprintf("%d %s", i, kind), func(t *testing.T) { c.scenario(t, i, rollback) })
		if !ok {
			t.Logf("chaos: scenario %d failed; replay with %s=%d %s=%d", i, seedEnv, seed, killsEnv, kills)
			break
		}
	}
	c.report()
	if len(c.points) == 0 {
		t.Errorf("no command was killed before it finished: the test exercised nothing; raise %s", maxDelayEnv)
	}
}

// scenario runs one scenario in a new namespace and checks its invariants.
func (c *chaos) scenario(t *testing.T, i int, rollback bool) {
	ns := env.Namespace(t)
	orig := clitest.CreateStatefulSet(t, env, ns, name, replicas)
	before := snapshot(t, ns)
	want := direction{template: clitest.AppV2, restarts: 1, phase: workload.LockSucceeded}
	if !rollback {
		c.drive(t, i, ns, runArgs(ns), perCommand)
	} else {
		// One kill in the run leaves most kills of the scenario to the rollback.
		c.drive(t, i, ns, runArgs(ns), 1)
		c.drive(t, i, ns, rollbackArgs(ns), perCommand)
		want = direction{template: clitest.AppV1, restarts: 2, phase: workload.LockRolledBack, back: true}
	}
	found := violations(t, ns, orig, before, want)
	for _, v := range found {
		t.Error(v)
	}
	if len(found) == 0 && i < 2 {
		checkerCatches(t, ns, orig, before, want)
	}
}

// checkerCatches proves that violations can fail: the cluster just passed, so each expectation
// made wrong on purpose must be reported, naming the pod.
func checkerCatches(t *testing.T, ns string, orig *appsv1.StatefulSet, before map[string]podBefore, want direction) {
	t.Helper()
	tests := []struct {
		name string
		// back says in which direction the case applies: nil both, else only when equal to want.back.
		back   *bool
		change func(orig *appsv1.StatefulSet, before map[string]podBefore, want *direction)
		report string
	}{
		{"a pod recreated", nil, func(_ *appsv1.StatefulSet, b map[string]podBefore, _ *direction) {
			b["web-0"] = podBefore{uid: "other", image: b["web-0"].image, imageID: b["web-0"].imageID, restarts: b["web-0"].restarts}
		}, "pod web-0: recreated"},
		{"a restart too many", nil, func(_ *appsv1.StatefulSet, b map[string]podBefore, _ *direction) {
			b["web-1"].restarts["app"]--
		}, "pod web-1: app restarted"},
		{"a restart count overwritten", nil, func(_ *appsv1.StatefulSet, b map[string]podBefore, _ *direction) {
			b["web-1"].restarts["app"]--
		}, "pod web-1: state RestartsBefore"},
		{"a before image overwritten", nil, func(_ *appsv1.StatefulSet, b map[string]podBefore, _ *direction) {
			b["web-2"] = podBefore{uid: b["web-2"].uid, image: clitest.AppV3, imageID: b["web-2"].imageID, restarts: b["web-2"].restarts}
		}, "pod web-2: state BeforeImage"},
		{"a strategy not restored", nil, func(o *appsv1.StatefulSet, _ map[string]podBefore, _ *direction) {
			o.Spec.UpdateStrategy = appsv1.StatefulSetUpdateStrategy{Type: appsv1.OnDeleteStatefulSetStrategyType}
		}, "updateStrategy"},
		{"a lock left in another phase", nil, func(_ *appsv1.StatefulSet, _ map[string]podBefore, w *direction) {
			w.phase = workload.LockProgressing
		}, "lock phase"},
		{"pods on another image", ptr.To(false), func(_ *appsv1.StatefulSet, _ map[string]podBefore, w *direction) {
			w.template = clitest.AppV3
		}, "spec app image"},
		// A rollback may put the before image back by its digest, so the digest tells.
		{"a pod back on another digest", ptr.To(true), func(_ *appsv1.StatefulSet, b map[string]podBefore, _ *direction) {
			b["web-4"] = podBefore{uid: b["web-4"].uid, image: b["web-4"].image, imageID: "registry.example/app@sha256:" + strings.Repeat("0", 64), restarts: b["web-4"].restarts}
		}, "pod web-4: app imageID"},
		{"another restart count", nil, func(_ *appsv1.StatefulSet, _ map[string]podBefore, w *direction) {
			w.restarts++
		}, "app restarted"},
	}
	for _, tt := range tests {
		if tt.back != nil && *tt.back != want.back {
			continue
		}
		o, b, w := orig.DeepCopy(), map[string]podBefore{}, want
		for pod, p := range before {
			p.restarts = maps.Clone(p.restarts)
			b[pod] = p
		}
		tt.change(o, b, &w)
		found := violations(t, ns, o, b, w)
		if !slices.ContainsFunc(found, func(v string) bool { return strings.Contains(v, tt.report) }) {
			t.Errorf("the invariant check misses %s: want a violation with %q, got %q", tt.name, tt.report, found)
		}
	}
}

// drive runs the command, killing it after a random delay at most kills times while kill
// points remain, until it exits by itself; it fails the test unless that exit is 0.
func (c *chaos) drive(t *testing.T, scenario int, ns string, args []string, kills int) {
	t.Helper()
	for ; kills > 0 && c.budget > 0; kills-- {
		var stderr bytes.Buffer
		cmd := clitest.Start(t, env, cli, &stderr, args...)
		delay := minDelay + time.Duration(c.rng.Int64N(int64(c.maxDelay-minDelay)))
		exited := make(chan struct{})
		go func() { _ = cmd.Wait(); close(exited) }()
		select {
		case <-exited:
		case <-time.After(delay):
			_ = cmd.Process.Signal(syscall.SIGKILL)
			<-exited
		}
		if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL {
			c.budget--
			kp := c.observe(t, ns)
			kp.scenario, kp.command, kp.delay = scenario, args[0], delay
			c.points = append(c.points, kp)
			t.Log(kp)
			continue
		}
		if code := cmd.ProcessState.ExitCode(); code != 0 {
			t.Fatalf("%s exited %d before its kill:\n%s", strings.Join(args, " "), code, clitest.LastLines(stderr.String(), 20))
		}
		return
	}
	if r := clitest.Run(t, env, cli, args...); r.Code != 0 {
		t.Fatalf("%s, run to its end: %s", strings.Join(args, " "), r)
	}
}

// observe reads where the rollout stands.
func (c *chaos) observe(t *testing.T, ns string) killPoint {
	t.Helper()
	kp := killPoint{phase: "none", stages: map[string]int{}}
	sts, err := env.Client.AppsV1().StatefulSets(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("reading statefulset %s/%s after a kill: %v", ns, name, err)
	}
	if l := readLock(t, sts); l != nil {
		kp.phase = l.Phase
	}
	for _, p := range clitest.ListPods(t, env, ns, "app="+name) {
		st, err := inplace.ReadState(&p)
		switch {
		case err != nil:
			t.Fatalf("after a kill: %v", err)
		case st == nil:
			kp.stages["none"]++
		default:
			kp.stages[string(st.Stage)]++
		}
	}
	return kp
}

// report prints the kill points per lock phase and per pod stage.
func (c *chaos) report() {
	phases, stages := map[string]int{}, map[string]int{}
	for _, k := range c.points {
		phases[k.phase]++
		for s := range k.stages {
			stages[s]++
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "chaos: %d kill points\n", len(c.points))
	fmt.Fprintf(&b, "  by lock phase:%s\n", counts(phases))
	fmt.Fprintf(&b, "  with a pod in stage:%s", counts(stages))
	c.t.Log(b.String())
}

func counts(m map[string]int) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, " %s=%d", k, m[k])
	}
	return b.String()
}

// podBefore is what a pod was before the scenario.
type podBefore struct {
	uid      string
	image    string
	imageID  string
	restarts map[string]int32
}

// snapshot records every pod before the scenario, by name.
func snapshot(t *testing.T, ns string) map[string]podBefore {
	t.Helper()
	out := map[string]podBefore{}
	for _, p := range clitest.ListPods(t, env, ns, "app="+name) {
		b := podBefore{uid: string(p.UID), image: p.Spec.Containers[0].Image, restarts: map[string]int32{}}
		for _, cs := range p.Status.ContainerStatuses {
			b.restarts[cs.Name] = cs.RestartCount
			if cs.Name == "app" {
				b.imageID = cs.ImageID
			}
		}
		out[p.Name] = b
	}
	if len(out) != replicas {
		t.Fatalf("%d pods before the scenario, want %d", len(out), replicas)
	}
	return out
}

// direction is where a scenario must end.
type direction struct {
	template string // the app image of the template and every pod
	restarts int32  // app restarts per pod over the scenario
	phase    string // the lock's final phase
	back     bool   // the pods run their first image again
}

// violations checks the invariants after a scenario and names each one broken, with the pod
// and the values.
func violations(t *testing.T, ns string, orig *appsv1.StatefulSet, before map[string]podBefore, want direction) []string {
	t.Helper()
	var out []string
	sts, err := env.Client.AppsV1().StatefulSets(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("reading statefulset %s/%s: %v", ns, name, err)
	}
	if !equality.Semantic.DeepEqual(sts.Spec.UpdateStrategy, orig.Spec.UpdateStrategy) {
		out = append(out, fmt.Sprintf("statefulset %s: updateStrategy %+v, want it restored to %+v", name, sts.Spec.UpdateStrategy, orig.Spec.UpdateStrategy))
	}
	if got := sts.Spec.Template.Spec.Containers[0].Image; got != want.template {
		out = append(out, fmt.Sprintf("statefulset %s: template app image %s, want %s", name, got, want.template))
	}
	switch l := readLock(t, sts); {
	case l == nil:
		out = append(out, fmt.Sprintf("statefulset %s: no lock annotation, want one in phase %s", name, want.phase))
	case l.Active() || l.Phase != want.phase:
		out = append(out, fmt.Sprintf("statefulset %s: lock phase %s (active %v), want %s and released", name, l.Phase, l.Active(), want.phase))
	}

	pods := clitest.ListPods(t, env, ns, "app="+name)
	if len(pods) != len(before) {
		out = append(out, fmt.Sprintf("%d pods after the scenario, %d before", len(pods), len(before)))
	}
	var newIDs []string // the app imageID of each pod, when the pods moved to a new image
	for _, p := range pods {
		b, ok := before[p.Name]
		if !ok {
			out = append(out, fmt.Sprintf("pod %s: not there before the scenario", p.Name))
			continue
		}
		if string(p.UID) != b.uid {
			out = append(out, fmt.Sprintf("pod %s: recreated, UID %s -> %s", p.Name, b.uid, p.UID))
			continue
		}
		app, side := cluster.ContainerStatus(&p, "app"), cluster.ContainerStatus(&p, "sidecar")
		if img := p.Spec.Containers[0].Image; img != want.template && (!want.back || img != pinned(want.template, b.imageID)) {
			out = append(out, fmt.Sprintf("pod %s: spec app image %s, want %s", p.Name, img, want.template))
		}
		if app == nil || app.State.Running == nil || !cluster.PodReady(&p) {
			out = append(out, fmt.Sprintf("pod %s: app status %+v, Ready %v; want Running and Ready", p.Name, app, cluster.PodReady(&p)))
			continue
		}
		if want.back {
			if app.ImageID != b.imageID {
				out = append(out, fmt.Sprintf("pod %s: app imageID %s, want %s as before the scenario", p.Name, app.ImageID, b.imageID))
			}
		} else {
			if app.ImageID == b.imageID {
				out = append(out, fmt.Sprintf("pod %s: app imageID %s, unchanged from before the scenario", p.Name, app.ImageID))
			}
			newIDs = append(newIDs, app.ImageID)
		}
		if got := app.RestartCount - b.restarts["app"]; got != want.restarts {
			out = append(out, fmt.Sprintf("pod %s: app restarted %d times (%d -> %d), want %d", p.Name, got, b.restarts["app"], app.RestartCount, want.restarts))
		}
		if side == nil || side.RestartCount != b.restarts["sidecar"] {
			out = append(out, fmt.Sprintf("pod %s: sidecar status %+v, want it never restarted (%d restarts before)", p.Name, side, b.restarts["sidecar"]))
		}
		out = append(out, stateViolations(&p, b, app.ImageID, want)...)
	}
	slices.Sort(newIDs)
	if len(newIDs) > 0 && newIDs[0] != newIDs[len(newIDs)-1] {
		out = append(out, fmt.Sprintf("pods run %s on different imageIDs: %s and %s", want.template, newIDs[0], newIDs[len(newIDs)-1]))
	}
	return out
}

// stateViolations checks the pod's state: it records what the pod ran before the scenario, never
// overwritten by a resumed command, and its final stage.
func stateViolations(p *corev1.Pod, b podBefore, imageID string, want direction) []string {
	st, err := inplace.ReadState(p)
	if err != nil {
		return []string{err.Error()}
	}
	if st == nil {
		return []string{fmt.Sprintf("pod %s: no state annotation after the scenario", p.Name)}
	}
	var out []string
	wantStage := inplace.StageUpdated
	if want.back {
		wantStage = inplace.StageRolledBack
	}
	if st.Stage != wantStage {
		out = append(out, fmt.Sprintf("pod %s: state stage %s, want %s", p.Name, st.Stage, wantStage))
	}
	var app *inplace.ContainerState
	for i := range st.Containers {
		if st.Containers[i].Name == "app" && !st.Containers[i].Init {
			app = &st.Containers[i]
		}
	}
	if app == nil || len(st.Containers) != 1 {
		return append(out, fmt.Sprintf("pod %s: state containers %+v, want app alone", p.Name, st.Containers))
	}
	if app.BeforeImage != b.image || app.BeforeImageID != b.imageID {
		out = append(out, fmt.Sprintf("pod %s: state BeforeImage %s (%s), want %s (%s) as before the scenario", p.Name, app.BeforeImage, app.BeforeImageID, b.image, b.imageID))
	}
	if app.RestartsBefore != b.restarts["app"] {
		out = append(out, fmt.Sprintf("pod %s: state RestartsBefore %d, want %d as before the scenario", p.Name, app.RestartsBefore, b.restarts["app"]))
	}
	if !want.back && app.AfterImageID != imageID {
		out = append(out, fmt.Sprintf("pod %s: state AfterImageID %s, but the app runs %s", p.Name, app.AfterImageID, imageID))
	}
	return out
}

// pinned is image by the digest of imageID: what a rollback puts back when it cannot check
// that the tag still names the content the pod ran (no registry here to ask).
func pinned(image, imageID string) string {
	_, digest, ok := strings.Cut(imageID, "@")
	if !ok {
		return ""
	}
	repo := image
	if i := strings.LastIndex(image, ":"); i > strings.LastIndex(image, "/") {
		repo = image[:i]
	}
	return repo + "@" + digest
}

// readLock decodes the StatefulSet's lock annotation, or returns nil when it has none.
func readLock(t *testing.T, sts *appsv1.StatefulSet) *workload.Lock {
	t.Helper()
	raw, ok := sts.Annotations[workload.LockAnnotation]
	if !ok {
		return nil
	}
	var l workload.Lock
	if err := json.Unmarshal([]byte(raw), &l); err != nil {
		t.Fatalf("statefulset %s/%s: annotation %s: %v", sts.Namespace, sts.Name, workload.LockAnnotation, err)
	}
	return &l
}
