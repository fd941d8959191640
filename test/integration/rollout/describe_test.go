package rollout_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/inplace-rollout/inplace-rollout/pkg/notify"
	"github.com/inplace-rollout/inplace-rollout/pkg/rollout"
	"github.com/inplace-rollout/inplace-rollout/test/integration/cluster"
)

// TestDescribeTellsTheRolloutsStory: `kubectl describe statefulset` lists an Event for each
// milestone of its rollouts, each once (none merged into another's series): a rollout held at
// its first batch, then finished; then one to a crashing image, rolled back. A webhook given
// with --notify-url gets one CloudEvent for each outcome: succeeded, then rolled back.
func TestDescribeTellsTheRolloutsStory(t *testing.T) {
	ns := env.Namespace(t)
	createStatefulSet(t, ns, "web", 3)
	var mu sync.Mutex
	var notified []string
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var ev struct{ Type string }
		if err := json.NewDecoder(r.Body).Decode(&ev); err != nil {
			t.Errorf("the webhook got no CloudEvents JSON document: %v", err)
		}
		mu.Lock()
		defer mu.Unlock()
		notified = append(notified, strings.TrimPrefix(ev.Type, notify.EventTypePrefix))
	}))
	t.Cleanup(hook.Close)
	run := []string{"run", "-n", ns, "--target", "statefulset/web", "--batches", "1,100%", "--notify-url", hook.URL}
	if r := runCLI(t, append(run, "--image", "app="+appV2, "--up-to", "1")...); r.Code != 0 || !contains(r.Stdout, "Holding") {
		t.Fatalf("run --up-to 1: %s; want exit 0, Holding", r)
	}
	if r := runCLI(t, append(run, "--image", "app="+appV2)...); r.Code != 0 || !contains(r.Stdout, "Succeeded") {
		t.Fatalf("run to the end: %s; want exit 0, Succeeded", r)
	}
	if r := runCLI(t, append(run, "--image", "app=registry.example/app:crash-1")...); r.Code != 1 {
		t.Fatalf("run to a crashing image: %s; want exit 1, rolled back", r)
	}

	// The command sends its notifications before it exits.
	mu.Lock()
	if want := []string{"succeeded", "rolledBack"}; !slices.Equal(notified, want) {
		t.Errorf("the webhook was notified of %q, want %q", notified, want)
	}
	mu.Unlock()

	bins, err := cluster.DefaultBinDir()
	if err != nil {
		t.Fatal(err)
	}
	// Wide enough that no Event's line wraps.
	cmd := exec.Command(filepath.Join(bins, "kubectl"), "describe", "statefulset", "web", "-n", ns)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+env.Kubeconfig, "COLUMNS=1000")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("kubectl describe: %v\n%s", err, stderr.String())
	}
	_, events, ok := strings.Cut(string(out), "\nEvents:")
	if !ok {
		t.Fatalf("kubectl describe lists no Events:\n%s", out)
	}
	want := map[string]int{
		rollout.EventRolloutStarted:     2,
		rollout.EventBatchUpdating:      3, // the held batch, the rest, the crashing batch
		rollout.EventRolloutHolding:     1,
		rollout.EventRolloutSucceeded:   1,
		rollout.EventRolloutRollingBack: 1,
		rollout.EventRolloutRolledBack:  1,
	}
	got := map[string]int{}
	for line := range strings.SplitSeq(events, "\n") {
		fields := strings.Fields(line)
		if len(fields) < 2 {
			continue
		}
		if _, ok := want[fields[1]]; ok {
			got[fields[1]]++
			// A series shows in the Age column: "12s (x2 over 20s)".
			if len(fields) > 3 && strings.HasPrefix(fields[3], "(x") {
				t.Errorf("an Event counted as a series of the same milestone: %s", line)
			}
		}
	}
	for reason, n := range want {
		if got[reason] != n {
			t.Errorf("kubectl describe lists %d %s Events, want %d", got[reason], reason, n)
		}
	}
	if t.Failed() {
		t.Logf("kubectl describe's Events:%s", events)
	}
}
