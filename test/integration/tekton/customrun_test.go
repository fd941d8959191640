package tekton_test

import (
	"context"
	"fmt"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/yaml"

	"github.com/inplace-rollout/inplace-rollout/test/integration/cluster"
)

var (
	customRunsGVR   = schema.GroupVersionResource{Group: "tekton.dev", Version: "v1beta1", Resource: "customruns"}
	pipelineRunsGVR = schema.GroupVersionResource{Group: "tekton.dev", Version: "v1", Resource: "pipelineruns"}
	taskRunsGVR     = schema.GroupVersionResource{Group: "tekton.dev", Version: "v1", Resource: "taskruns"}
	ourAPIVersion   = "inplace-rollout.io/v1alpha1"
	ourKind         = "InPlaceRollout"
	// A kind no controller here reconciles, to see what Tekton alone does with a custom task.
	otherAPIVersion  = "example.dev/v1alpha1"
	otherKind        = "Report"
	reconcileTimeout = 60 * time.Second
)

func dynamicClient(t testing.TB) dynamic.Interface {
	t.Helper()
	client, err := dynamic.NewForConfig(env.Config)
	if err != nil {
		t.Fatalf("building a dynamic client: %v", err)
	}
	return client
}

// create creates the object manifest describes in namespace ns.
func create(t testing.TB, client dynamic.Interface, gvr schema.GroupVersionResource, ns, manifest string) *unstructured.Unstructured {
	t.Helper()
	var obj unstructured.Unstructured
	if err := yaml.Unmarshal([]byte(manifest), &obj.Object); err != nil {
		t.Fatalf("decoding the %s manifest: %v", gvr.Resource, err)
	}
	created, err := client.Resource(gvr).Namespace(ns).Create(context.Background(), &obj, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating %s %s/%s: %v", gvr.Resource, ns, obj.GetName(), err)
	}
	return created
}

// TestCustomRunOfOurKind shows Tekton's CustomRun CRD accepts a run of our kind and keeps its
// customRef and params as written.
func TestCustomRunOfOurKind(t *testing.T) {
	client := dynamicClient(t)
	ns := env.Namespace(t)
	create(t, client, customRunsGVR, ns, fmt.Sprintf(`
apiVersion: tekton.dev/v1beta1
kind: CustomRun
metadata:
  name: direct
spec:
  customRef:
    apiVersion: %s
    kind: %s
  params:
  - name: target
    value: statefulset/web
`, ourAPIVersion, ourKind))
	got, err := client.Resource(customRunsGVR).Namespace(ns).Get(context.Background(), "direct", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("reading CustomRun %s/direct: %v", ns, err)
	}
	checks := []struct {
		field []string
		want  string
	}{
		{[]string{"spec", "customRef", "apiVersion"}, ourAPIVersion},
		{[]string{"spec", "customRef", "kind"}, ourKind},
	}
	for _, c := range checks {
		if v, _, _ := unstructured.NestedString(got.Object, c.field...); v != c.want {
			t.Errorf("CustomRun %s/direct: %v = %q, want %q", ns, c.field, v, c.want)
		}
	}
	params, _, _ := unstructured.NestedSlice(got.Object, "spec", "params")
	if len(params) != 1 || params[0].(map[string]any)["value"] != "statefulset/web" {
		t.Errorf("CustomRun %s/direct: spec.params = %v, want target=statefulset/web", ns, params)
	}
}

// TestPipelineRunCreatesCustomRun shows what the real Tekton controller does alone: for a
// PipelineRun whose one task is a custom task, by reference or embedded, it creates a CustomRun
// owned by the PipelineRun with the task's params, records it as the PipelineRun's child and
// runs no Pod. The task's kind is one no controller here reconciles, so the CustomRun keeps no
// status: Tekton never writes one.
func TestPipelineRunCreatesCustomRun(t *testing.T) {
	tests := []struct {
		name string
		// task is the pipeline task's reference to, or embedding of, our kind.
		task string
		// want* is the CustomRun's customRef, or customSpec, field that names our kind.
		wantField []string
		wantSpec  map[string]any
	}{
		{
			name: "taskRef",
			task: fmt.Sprintf(`
        taskRef:
          apiVersion: %s
          kind: %s
          name: web-rollout`, otherAPIVersion, otherKind),
			wantField: []string{"spec", "customRef"},
		},
		{
			name: "taskSpec",
			task: fmt.Sprintf(`
        taskSpec:
          apiVersion: %s
          kind: %s
          spec:
            target: statefulset/web
            batches: [1, 50, 100]`, otherAPIVersion, otherKind),
			wantField: []string{"spec", "customSpec"},
			wantSpec:  map[string]any{"target": "statefulset/web", "batches": []any{int64(1), int64(50), int64(100)}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			client := dynamicClient(t)
			ns := env.Namespace(t)
			pr := create(t, client, pipelineRunsGVR, ns, fmt.Sprintf(`
apiVersion: tekton.dev/v1
kind: PipelineRun
metadata:
  name: roll
spec:
  pipelineSpec:
    tasks:
      - name: rollout
        params:
          - name: images
            value: ["app=registry.example/app:v2"]
%s
`, tt.task))

			var run *unstructured.Unstructured
			cluster.WaitFor(t, reconcileTimeout, "the CustomRun Tekton creates for PipelineRun "+ns+"/roll", func(ctx context.Context) (bool, error) {
				list, err := client.Resource(customRunsGVR).Namespace(ns).List(ctx, metav1.ListOptions{LabelSelector: "tekton.dev/pipelineRun=roll"})
				if err != nil || len(list.Items) == 0 {
					return false, err
				}
				run = &list.Items[0]
				return true, nil
			})

			ref, _, _ := unstructured.NestedMap(run.Object, tt.wantField...)
			if ref["apiVersion"] != otherAPIVersion || ref["kind"] != otherKind {
				t.Errorf("CustomRun %s: %v = %v, want apiVersion %s kind %s", run.GetName(), tt.wantField, ref, otherAPIVersion, otherKind)
			}
			if tt.wantSpec != nil {
				spec, _, _ := unstructured.NestedMap(run.Object, "spec", "customSpec", "spec")
				if fmt.Sprint(spec) != fmt.Sprint(tt.wantSpec) {
					t.Errorf("CustomRun %s: spec.customSpec.spec = %v, want %v", run.GetName(), spec, tt.wantSpec)
				}
			}
			if got := run.GetLabels()["tekton.dev/pipelineTask"]; got != "rollout" {
				t.Errorf("CustomRun %s: label tekton.dev/pipelineTask = %q, want rollout", run.GetName(), got)
			}
			owner := metav1.GetControllerOf(run)
			if owner == nil || owner.Kind != "PipelineRun" || owner.UID != pr.GetUID() {
				t.Errorf("CustomRun %s: controller owner = %+v, want PipelineRun %s/roll (uid %s)", run.GetName(), owner, ns, pr.GetUID())
			}
			params, _, _ := unstructured.NestedSlice(run.Object, "spec", "params")
			if len(params) != 1 || fmt.Sprint(params[0]) != fmt.Sprint(map[string]any{"name": "images", "value": []any{"app=registry.example/app:v2"}}) {
				t.Errorf("CustomRun %s: spec.params = %v, want images=[app=registry.example/app:v2]", run.GetName(), params)
			}

			// The PipelineRun runs, with the CustomRun as its one child.
			cluster.WaitFor(t, reconcileTimeout, "PipelineRun "+ns+"/roll Running with CustomRun "+run.GetName()+" as its child", func(ctx context.Context) (bool, error) {
				got, err := client.Resource(pipelineRunsGVR).Namespace(ns).Get(ctx, "roll", metav1.GetOptions{})
				if err != nil {
					return false, err
				}
				conds, _, _ := unstructured.NestedSlice(got.Object, "status", "conditions")
				children, _, _ := unstructured.NestedSlice(got.Object, "status", "childReferences")
				if len(conds) != 1 || len(children) != 1 {
					return false, fmt.Errorf("conditions %v, childReferences %v", conds, children)
				}
				cond, child := conds[0].(map[string]any), children[0].(map[string]any)
				if cond["type"] != "Succeeded" || cond["status"] != "Unknown" || cond["reason"] != "Running" ||
					child["kind"] != "CustomRun" || child["name"] != run.GetName() || child["pipelineTaskName"] != "rollout" {
					return false, fmt.Errorf("conditions %v, childReferences %v", conds, children)
				}
				return true, nil
			})

			got, err := client.Resource(customRunsGVR).Namespace(ns).Get(context.Background(), run.GetName(), metav1.GetOptions{})
			if err != nil {
				t.Fatalf("reading CustomRun %s/%s: %v", ns, run.GetName(), err)
			}
			if status, ok := got.Object["status"]; ok {
				t.Errorf("CustomRun %s/%s has a status no controller of ours wrote: %v", ns, run.GetName(), status)
			}
			pods, err := env.Client.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{})
			if err != nil {
				t.Fatalf("listing pods in %s: %v", ns, err)
			}
			if len(pods.Items) != 0 {
				t.Errorf("namespace %s has %d pods, want none for a custom task", ns, len(pods.Items))
			}
			taskRuns, err := client.Resource(taskRunsGVR).Namespace(ns).List(context.Background(), metav1.ListOptions{})
			if err != nil {
				t.Fatalf("listing TaskRuns in %s: %v", ns, err)
			}
			if len(taskRuns.Items) != 0 {
				t.Errorf("namespace %s has %d TaskRuns, want none for a custom task", ns, len(taskRuns.Items))
			}
		})
	}
}

// TestRestartedControllerReconciles restarts the Tekton controller, a new process, and shows
// the new one creates the CustomRun of a PipelineRun.
func TestRestartedControllerReconciles(t *testing.T) {
	client := dynamicClient(t)
	ns := env.Namespace(t)
	before := env.Tekton.PID()
	if err := env.Tekton.Restart(); err != nil {
		t.Fatalf("restarting the Tekton controller: %v", err)
	}
	if after := env.Tekton.PID(); after == before {
		t.Fatalf("the Tekton controller's pid is %d before and after Restart, want a new process", before)
	}
	if err := syscall.Kill(before, 0); err == nil {
		t.Errorf("the Tekton controller's old process %d still runs after Restart", before)
	}
	create(t, client, pipelineRunsGVR, ns, fmt.Sprintf(`
apiVersion: tekton.dev/v1
kind: PipelineRun
metadata:
  name: after-restart
spec:
  pipelineSpec:
    tasks:
      - name: rollout
        taskRef:
          apiVersion: %s
          kind: %s
`, ourAPIVersion, ourKind))
	cluster.WaitFor(t, reconcileTimeout, "the CustomRun the restarted controller creates for PipelineRun "+ns+"/after-restart", func(ctx context.Context) (bool, error) {
		list, err := client.Resource(customRunsGVR).Namespace(ns).List(ctx, metav1.ListOptions{LabelSelector: "tekton.dev/pipelineRun=after-restart"})
		return err == nil && len(list.Items) == 1, err
	})
}
