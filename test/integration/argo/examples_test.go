package argo_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	rolloutsv1alpha1 "github.com/argoproj/argo-rollouts/pkg/apis/rollouts/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	"github.com/inplace-rollout/inplace-rollout/test/integration/cluster"
)

// example is what a file of examples/argo holds: the Rollout and the workload it drives, and
// the kubectl argo rollouts commands of its header, in order.
type example struct {
	rollout  string
	kind     string // StatefulSet or DaemonSet
	target   string
	selector map[string]string
	replicas int // the StatefulSet's; 0 for a DaemonSet
	commands [][]string
}

// headerCommand is how a header line gives a command to run.
const headerCommand = "#   kubectl argo rollouts "

// readExample reads an example manifest: its objects, and the commands of its header comment
// (lines "#   kubectl argo rollouts ARGS  # comment", the comment dropped).
func readExample(t *testing.T, path string) example {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var ex example
	for line := range strings.Lines(string(data)) {
		if !strings.HasPrefix(line, "#") {
			break
		}
		if rest, ok := strings.CutPrefix(line, headerCommand); ok {
			rest, _, _ = strings.Cut(rest, "#")
			ex.commands = append(ex.commands, strings.Fields(rest))
		}
	}
	dec := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	for {
		doc, err := dec.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("reading %s: %v", path, err)
		}
		var obj struct {
			Kind     string `json:"kind"`
			Metadata struct {
				Name string `json:"name"`
			} `json:"metadata"`
			Spec struct {
				Replicas *int `json:"replicas"`
				Selector struct {
					MatchLabels map[string]string `json:"matchLabels"`
				} `json:"selector"`
			} `json:"spec"`
		}
		if err := utilyaml.Unmarshal(doc, &obj); err != nil {
			t.Fatalf("decoding %s: %v", path, err)
		}
		switch obj.Kind {
		case "Rollout":
			ex.rollout = obj.Metadata.Name
		case "StatefulSet", "DaemonSet":
			ex.kind, ex.target, ex.selector = obj.Kind, obj.Metadata.Name, obj.Spec.Selector.MatchLabels
			if obj.Spec.Replicas != nil {
				ex.replicas = *obj.Spec.Replicas
			}
		}
	}
	if ex.rollout == "" || ex.target == "" || len(ex.commands) == 0 {
		t.Fatalf("%s: want a Rollout, its StatefulSet or DaemonSet and header commands; have %+v", path, ex)
	}
	return ex
}

// kubectl runs kubectl against the test cluster and fails the test on error.
func kubectl(t *testing.T, args ...string) string {
	t.Helper()
	bins, err := cluster.DefaultBinDir()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(filepath.Join(bins, "kubectl"), append(args, "--kubeconfig", env.Kubeconfig)...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("kubectl %v: %v\n%s", args, err, out.String())
	}
	return out.String()
}

// examplePods lists the pods of the example's target by its selector, failing the test on error.
func examplePods(t *testing.T, ns string, ex example) []corev1.Pod {
	t.Helper()
	list, err := env.Client.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{LabelSelector: labels.SelectorFromSet(ex.selector).String()})
	if err != nil {
		t.Fatalf("listing the pods of %s %s: %v", ex.kind, ex.target, err)
	}
	return list.Items
}

// wantPods is how many pods the example's target runs: its replicas, or for a DaemonSet one per
// node it schedules on.
func wantPods(t *testing.T, ns string, ex example) int {
	t.Helper()
	if ex.kind == "StatefulSet" {
		return ex.replicas
	}
	var n int
	cluster.WaitFor(t, time.Minute, "DaemonSet "+ex.target+" scheduled", func(ctx context.Context) (bool, error) {
		ds, err := env.Client.AppsV1().DaemonSets(ns).Get(ctx, ex.target, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		n = int(ds.Status.DesiredNumberScheduled)
		return ds.Status.ObservedGeneration == ds.Generation && n > 0, nil
	})
	return n
}

// readyPods waits until the example's target runs want pods, all Ready with container on image,
// and returns their UIDs by name.
func readyPods(t *testing.T, ns string, ex example, container, image string, want int, timeout time.Duration) map[string]string {
	t.Helper()
	uids := map[string]string{}
	cluster.WaitFor(t, timeout, fmt.Sprintf("%d pods of %s %s Ready on %s", want, ex.kind, ex.target, image), func(context.Context) (bool, error) {
		clear(uids)
		var not []string
		for _, p := range examplePods(t, ns, ex) {
			uids[p.Name] = string(p.UID)
			cs := cluster.ContainerStatus(&p, container)
			if cs == nil || cs.Image != image || cs.State.Running == nil || !cluster.PodReady(&p) {
				not = append(not, p.Name)
			}
		}
		if len(uids) != want || len(not) > 0 {
			return false, fmt.Errorf("%d pods, not yet Ready on %s: %v", len(uids), image, not)
		}
		return true, nil
	})
	return uids
}

// TestExamples applies each manifest of examples/argo as written and drives it as its header
// says: kubectl argo rollouts set image, promote where the header promotes (once the Rollout
// pauses), then waits until the Rollout is Healthy on the new revision with every pod of its
// target on the new image and no pod recreated.
func TestExamples(t *testing.T) {
	root, err := cluster.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	files, err := filepath.Glob(filepath.Join(root, "examples", "argo", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no examples in examples/argo (%v)", err)
	}
	for _, file := range files {
		t.Run(strings.TrimSuffix(filepath.Base(file), ".yaml"), func(t *testing.T) {
			t.Parallel()
			runExample(t, file)
		})
	}
}

func runExample(t *testing.T, file string) {
	t.Helper()
	ex := readExample(t, file)
	ns := env.Namespace(t)
	began := time.Now()
	kubectl(t, "apply", "-f", file, "-n", ns)
	first := waitRollout(t, ns, ex.rollout, 2*time.Minute, "its first revision Healthy", func(ro *rolloutsv1alpha1.Rollout) bool {
		return ro.Status.Phase == rolloutsv1alpha1.RolloutPhaseHealthy && ro.Status.StableRS != "" && ro.Status.StableRS == ro.Status.CurrentPodHash
	})
	oldHash := first.Status.CurrentPodHash
	want := wantPods(t, ns, ex)

	var container, image string
	var uids map[string]string
	for _, args := range ex.commands {
		switch {
		case len(args) == 4 && args[0] == "set" && args[1] == "image" && args[2] == ex.rollout:
			var ok bool
			if container, image, ok = strings.Cut(args[3], "="); !ok {
				t.Fatalf("%s: header command %v: want CONTAINER=IMAGE", file, args)
			}
			before := first.Spec.Template.Spec.Containers[0].Image
			uids = readyPods(t, ns, ex, container, before, want, 2*time.Minute)
		case len(args) == 2 && args[0] == "promote" && args[1] == ex.rollout:
			// The header promotes at a pause: wait for it, as a person watching would.
			waitRollout(t, ns, ex.rollout, 3*time.Minute, "paused at a pause step", func(ro *rolloutsv1alpha1.Rollout) bool {
				return onNewRevision(ro, oldHash) && ro.Status.Phase == rolloutsv1alpha1.RolloutPhasePaused && len(ro.Status.PauseConditions) > 0
			})
		case len(args) >= 2 && args[0] == "get" && args[1] == "rollout":
			// A person watches; the test waits below.
			continue
		default:
			t.Fatalf("%s: header command %v is not one this test knows", file, args)
		}
		argoRollouts(t, append(args, "-n", ns)...)
	}
	if image == "" {
		t.Fatalf("%s: no `set image %s` in the header", file, ex.rollout)
	}

	// An aborted Rollout never gets Healthy: the wait ends on either.
	ro := waitRollout(t, ns, ex.rollout, 5*time.Minute, "Healthy on the new revision", func(ro *rolloutsv1alpha1.Rollout) bool {
		return ro.Status.Abort || onNewRevision(ro, oldHash) && ro.Status.Phase == rolloutsv1alpha1.RolloutPhaseHealthy && ro.Status.StableRS == ro.Status.CurrentPodHash
	})
	if ro.Status.Abort {
		t.Fatalf("Rollout %s/%s aborted: %s", ns, ex.rollout, describeRollout(ro))
	}
	after := map[string]string{}
	var not []string
	for _, p := range examplePods(t, ns, ex) {
		after[p.Name] = string(p.UID)
		cs := cluster.ContainerStatus(&p, container)
		if cs == nil || cs.Image != image || cs.State.Running == nil || !cluster.PodReady(&p) {
			not = append(not, p.Name)
		}
	}
	if len(not) > 0 {
		t.Errorf("pods of %s %s not Running and Ready on %s once the Rollout is Healthy: %v\n%s", ex.kind, ex.target, image, not, describeRollout(ro))
	}
	if !maps.Equal(uids, after) {
		t.Errorf("pods of %s %s were recreated: UIDs before %v, after %v", ex.kind, ex.target, uids, after)
	}
	checkAnalysisRuns(t, ns, ro)
	t.Logf("%s: apply to Healthy on %s, %d pods: %s", filepath.Base(file), image, want, time.Since(began).Round(100*time.Millisecond))
}

// checkAnalysisRuns fails the test unless each analysis step of the Rollout ran an AnalysisRun
// that was Successful.
func checkAnalysisRuns(t *testing.T, ns string, ro *rolloutsv1alpha1.Rollout) {
	t.Helper()
	steps := 0
	for _, s := range ro.Spec.Strategy.Canary.Steps {
		if s.Analysis != nil {
			steps++
		}
	}
	runs, err := argoClient(t).ArgoprojV1alpha1().AnalysisRuns(ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatalf("listing AnalysisRuns in %s: %v", ns, err)
	}
	if len(runs.Items) != steps {
		t.Errorf("%d AnalysisRuns for %d analysis steps", len(runs.Items), steps)
	}
	for _, r := range runs.Items {
		if r.Status.Phase != rolloutsv1alpha1.AnalysisPhaseSuccessful {
			t.Errorf("AnalysisRun %s is %s: %s", r.Name, r.Status.Phase, r.Status.Message)
		}
	}
}
