package chaos_test

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"testing"
	"time"

	"github.com/inplace-rollout/inplace-rollout/test/integration/cluster"
)

// ownChaos drives the scenarios of one of our controllers, killed and started again: the
// process, the kills left and the kill points taken, and how many times a process had taken the
// Lease at the last kill (the process started after it leads once there is one more).
type ownChaos struct {
	proc *cluster.OwnController
	// driver names the controller in the report, process in the kill points.
	driver, process string
	timeout         time.Duration
	rng             *rand.Rand
	budget          int
	maxDelay        time.Duration
	points          []killPoint
	leadings        int
}

// run runs scenarios until the kills are spent, at least one: even ones the first way (first),
// odd ones the other (second), then reports the kill points.
func (c *ownChaos) run(t *testing.T, first, second string, scenario func(t *testing.T, i int, other bool)) {
	for i := 0; c.budget > 0 || i < 1; i++ {
		other := i%2 == 1
		kind := first
		if other {
			kind = second
		}
		if !t.Run(fmt.Sprintf("%d %s", i, kind), func(t *testing.T) { scenario(t, i, other) }) {
			t.Logf("chaos: %s: scenario failed; replay with the seed logged above", c.driver)
			break
		}
	}
	report(t, c.driver, c.points)
	if len(c.points) == 0 {
		t.Errorf("the %s was never killed before its %s finished: the test exercised nothing; raise %s", c.driver, first, maxDelayEnv)
	}
}

// leadingsNow counts the lines of the controller's log, across its restarts, that say a
// process took the Lease and started reconciling.
func (c *ownChaos) leadingsNow(t *testing.T) int {
	t.Helper()
	data, err := os.ReadFile(c.proc.LogPath)
	if err != nil {
		t.Fatalf("reading the controller's log: %v", err)
	}
	return bytes.Count(data, []byte("msg=leading "))
}

// kill SIGKILLs the controller a random delay, up to maxDelay, after it leads, at most n times
// while kill points remain and what is under way is not done, and starts it again each time.
func (c *ownChaos) kill(t *testing.T, i int, ns, what string, n int, maxDelay time.Duration, done func() bool) {
	t.Helper()
	for ; n > 0 && c.budget > 0; n-- {
		// A process that does not lead yet does nothing a kill could cut.
		cluster.WaitFor(t, c.timeout, "the controller leading, or the "+what+" done", func(context.Context) (bool, error) {
			return c.leadingsNow(t) > c.leadings || done(), nil
		})
		delay := randomDelay(c.rng, maxDelay)
		time.Sleep(delay)
		if done() {
			return
		}
		c.leadings = c.leadingsNow(t)
		if err := c.proc.Kill(); err != nil {
			t.Fatal(err)
		}
		c.budget--
		kp := observe(t, ns)
		kp.scenario, kp.command, kp.delay = i, c.process+" ("+what+")", delay
		c.points = append(c.points, kp)
		t.Log(kp)
		if err := c.proc.Restart(); err != nil {
			t.Fatalf("starting the controller again: %v", err)
		}
	}
}
