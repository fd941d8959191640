package chaos_test

import (
	"bytes"
	"context"
	"fmt"
	"hash/fnv"
	"maps"
	"math/rand/v2"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/inplace-rollout/inplace-rollout/pkg/inplace"
	"github.com/inplace-rollout/inplace-rollout/pkg/rollout"
	"github.com/inplace-rollout/inplace-rollout/test/integration/clitest"
)

// Settings of the chaos run, from the environment so that `make chaos` and a replay can set them.
const (
	// killsEnv is the number of kill points across all scenarios of all drivers: each driver's
	// test takes its share (driverShares).
	killsEnv = "INPLACE_ROLLOUT_CHAOS_KILLS"
	// seedEnv seeds the random kill delays; a failure prints its seed, and the same seed (and
	// kill count) replays the same delays.
	seedEnv = "INPLACE_ROLLOUT_CHAOS_SEED"
	// maxDelayEnv is the longest a command runs before it is killed, as a Go duration.
	maxDelayEnv = "INPLACE_ROLLOUT_CHAOS_MAX_DELAY"
)

// Defaults: the short form `make test` runs.
const (
	defaultKills    = 10
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

// The drivers whose processes the suite kills.
const (
	driverCLI    = "cli"
	driverArgo   = "argo"
	driverTekton = "tekton"
	// driverController is inplace-rollout controller, with InPlaceRollout objects.
	driverController = "controller"
)

// driverShares is each driver's part of the kill points, in percent: the CLI, the cheapest to
// restart, takes the rest. 100 kill points are CLI 45, Argo plugin 20, Tekton controller 20,
// InPlaceRollout controller 15; the short form's 10 are 5, 2, 2 and 1.
var driverShares = map[string]int{driverArgo: 20, driverTekton: 20, driverController: 15}

// driverKills is the driver's share of kills, at least one.
func driverKills(kills int, driver string) int {
	if share, ok := driverShares[driver]; ok {
		return max(1, kills*share/100)
	}
	rest := kills
	for d := range driverShares {
		rest -= driverKills(kills, d)
	}
	return max(1, rest)
}

// settings reads the chaos settings from the environment: the driver's kill points, the random
// source of its test's delays and the longest delay.
func settings(t *testing.T, driver string) (kills int, rng *rand.Rand, maxDelay time.Duration) {
	t.Helper()
	kills, seed, maxDelay := runSettings(t)
	kills = driverKills(kills, driver)
	t.Logf("chaos: %s: %d kill points, max delay %s; %s", driver, kills, maxDelay, replay(seed))
	return kills, seededRand(seed, driver), maxDelay
}

// faultSettings reads the random source of a fault's delays, and the longest delay.
func faultSettings(t *testing.T, fault string) (rng *rand.Rand, maxDelay time.Duration) {
	t.Helper()
	_, seed, maxDelay := runSettings(t)
	t.Logf("chaos: %s: max delay %s; %s", fault, maxDelay, replay(seed))
	return seededRand(seed, fault), maxDelay
}

// seededRand is the random source of one test: from the run's seed and the test's own name,
// so that a replay of the run replays each test, whichever of them run.
func seededRand(seed uint64, name string) *rand.Rand {
	h := fnv.New64a()
	h.Write([]byte(name))
	s := seed ^ h.Sum64()
	return rand.New(rand.NewPCG(s, s^0x9e3779b97f4a7c15))
}

// replay says how to run the same delays again.
func replay(seed uint64) string {
	kills := os.Getenv(killsEnv)
	if kills == "" {
		kills = strconv.Itoa(defaultKills)
	}
	return fmt.Sprintf("replay with %s=%d %s=%s", seedEnv, seed, killsEnv, kills)
}

// randomDelay is a delay between minDelay and maxDelay.
func randomDelay(rng *rand.Rand, maxDelay time.Duration) time.Duration {
	return minDelay + time.Duration(rng.Int64N(int64(maxDelay-minDelay)))
}

// runSeed is the run's seed when the environment sets none: one for every test of the run.
var runSeed = sync.OnceValue(func() uint64 { return uint64(time.Now().UnixNano()) })

// runSettings reads the chaos settings of the whole run from the environment.
func runSettings(t *testing.T) (kills int, seed uint64, maxDelay time.Duration) {
	t.Helper()
	kills, maxDelay = defaultKills, defaultMaxDelay
	seed = runSeed()
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
	phase    rollout.Phase
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
	t.Parallel()
	kills, rng, maxDelay := settings(t, driverCLI)
	c := &chaos{rng: rng, budget: kills, maxDelay: maxDelay}
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
			t.Logf("chaos: scenario %d failed; replay with the seed logged above", i)
			break
		}
	}
	report(t, driverCLI, c.points)
	if len(c.points) == 0 {
		t.Errorf("no command was killed before it finished: the test exercised nothing; raise %s", maxDelayEnv)
	}
}

// scenario runs one scenario in a new namespace and checks its invariants.
func (c *chaos) scenario(t *testing.T, i int, rollback bool) {
	ns := env.Namespace(t)
	orig := clitest.CreateStatefulSet(t, env, ns, name, replicas)
	before := snapshot(t, ns)
	want := direction{template: clitest.AppV2, restarts: 1, phase: rollout.PhaseSucceeded}
	if !rollback {
		c.drive(t, i, ns, runArgs(ns), perCommand)
	} else {
		// One kill in the run leaves most kills of the scenario to the rollback.
		c.drive(t, i, ns, runArgs(ns), 1)
		c.drive(t, i, ns, rollbackArgs(ns), perCommand)
		want = direction{template: clitest.AppV1, restarts: 2, phase: rollout.PhaseRolledBack, back: true}
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
			w.phase = rollout.PhaseProgressing
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
		delay := randomDelay(c.rng, c.maxDelay)
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
			kp := observe(t, ns)
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
func observe(t *testing.T, ns string) killPoint {
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
			// Without a readiness gate an update's end is judged from the pod, never written.
			kp.stages[string(inplace.Judged(&p, st, time.Now()))]++
		}
	}
	return kp
}

// report prints a driver's kill points per lock phase and per pod stage.
func report(t *testing.T, driver string, points []killPoint) {
	phases, stages := map[string]int{}, map[string]int{}
	for _, k := range points {
		phases[string(k.phase)]++
		for s := range k.stages {
			stages[s]++
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "chaos: %s: %d kill points\n", driver, len(points))
	fmt.Fprintf(&b, "  by lock phase:%s\n", counts(phases))
	fmt.Fprintf(&b, "  with a pod in stage:%s", counts(stages))
	t.Log(b.String())
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
