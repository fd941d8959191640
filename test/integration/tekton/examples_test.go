package tekton_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/restmapper"
	"sigs.k8s.io/yaml"

	"github.com/inplace-rollout/inplace-rollout/test/integration/cluster"
)

// readObjects reads the objects of a multi-document YAML file, in order.
func readObjects(t *testing.T, path string) []*unstructured.Unstructured {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var objs []*unstructured.Unstructured
	dec := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	for {
		doc, err := dec.Read()
		if errors.Is(err, io.EOF) {
			return objs
		}
		if err != nil {
			t.Fatalf("reading %s: %v", path, err)
		}
		var obj unstructured.Unstructured
		if err := yaml.Unmarshal(doc, &obj.Object); err != nil {
			t.Fatalf("decoding %s: %v", path, err)
		}
		if len(obj.Object) > 0 {
			objs = append(objs, &obj)
		}
	}
}

// pipelineTasks are a Pipeline spec's tasks, finally tasks after them.
func pipelineTasks(spec map[string]any) []map[string]any {
	var tasks []map[string]any
	for _, key := range []string{"tasks", "finally"} {
		list, _, _ := unstructured.NestedSlice(spec, key)
		for _, task := range list {
			if m, ok := task.(map[string]any); ok {
				tasks = append(tasks, m)
			}
		}
	}
	return tasks
}

// customTask reports whether a pipeline task is a custom task: its taskRef or taskSpec has an
// apiVersion, as Tekton decides it.
func customTask(task map[string]any) bool {
	for _, key := range []string{"taskRef", "taskSpec"} {
		if v, _, _ := unstructured.NestedString(task, key, "apiVersion"); v != "" {
			return true
		}
	}
	return false
}

// startsFirst reports whether Tekton runs a pipeline task as soon as the PipelineRun starts:
// it is not a finally task, runs after no task and takes no other task's result.
func startsFirst(spec map[string]any, task map[string]any) bool {
	tasks, _, _ := unstructured.NestedSlice(spec, "tasks")
	if !slices.ContainsFunc(tasks, func(x any) bool { return fmt.Sprint(x) == fmt.Sprint(task) }) {
		return false
	}
	if after, _, _ := unstructured.NestedSlice(task, "runAfter"); len(after) > 0 {
		return false
	}
	params, _ := yaml.Marshal(task["params"])
	return !bytes.Contains(params, []byte("$(tasks."))
}

// catalogTasks returns the Tasks the file's Pipelines reference by name and the file does not
// hold, read from the catalog in tekton/task/NAME/VERSION/NAME.yaml (the newest version), and
// the names missing from the catalog.
func catalogTasks(t *testing.T, root string, objs []*unstructured.Unstructured) (found []*unstructured.Unstructured, missing []string) {
	t.Helper()
	held := map[string]bool{}
	for _, o := range objs {
		if o.GetKind() == "Task" {
			held[o.GetName()] = true
		}
	}
	for _, o := range objs {
		if o.GetKind() != "Pipeline" {
			continue
		}
		spec, _, _ := unstructured.NestedMap(o.Object, "spec")
		for _, task := range pipelineTasks(spec) {
			ref, ok, _ := unstructured.NestedMap(task, "taskRef")
			if !ok || customTask(task) || (ref["kind"] != nil && ref["kind"] != "Task") {
				continue
			}
			name, _ := ref["name"].(string)
			if name == "" || held[name] {
				continue
			}
			held[name] = true
			versions, _ := filepath.Glob(filepath.Join(root, "tekton", "task", name, "*", name+".yaml"))
			if len(versions) == 0 {
				missing = append(missing, name)
				continue
			}
			slices.Sort(versions)
			found = append(found, readObjects(t, versions[len(versions)-1])...)
		}
	}
	return found, missing
}

// TestExamplesApply creates every object of each examples/pipelines file, as written, in a fresh
// namespace (with the catalog Task a Pipeline references by name and the file does not hold),
// reads each back, and for each PipelineRun waits until the real Tekton controller has created
// the child of every task that starts first: a CustomRun of our kind for the custom task, a
// TaskRun and its Pod for a Task. The PipelineRun must not fail meanwhile (Tekton validates
// Pipelines only when it runs them, as no webhook runs here). A PipelineRun created pending is
// started once the workload is Ready, as the file's header says. Our controller runs beside
// Tekton's: each CustomRun must succeed with its results, and the tasks that take them must get
// their values.
func TestExamplesApply(t *testing.T) {
	root, err := cluster.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	files, err := filepath.Glob(filepath.Join(root, "examples", "pipelines", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no examples in examples/pipelines (%v)", err)
	}
	// The InPlaceRollout CRD, for an example that references an InPlaceRollout object.
	if err := env.InstallInplaceTekton(context.Background()); err != nil {
		t.Fatal(err)
	}
	disc, err := discovery.NewDiscoveryClientForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(disc))
	client := dynamicClient(t)
	for _, file := range files {
		t.Run(strings.TrimSuffix(filepath.Base(file), ".yaml"), func(t *testing.T) {
			t.Parallel()
			objs := readObjects(t, file)
			catalog, missing := catalogTasks(t, root, objs)
			if len(missing) > 0 {
				t.Skipf("%s references Task %v, not in the catalog tekton/task/ yet", filepath.Base(file), missing)
			}
			ns := env.Namespace(t)
			for _, obj := range append(catalog, objs...) {
				gvk := obj.GroupVersionKind()
				m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
				if err != nil {
					t.Fatalf("%s %s: %v", gvk, obj.GetName(), err)
				}
				created, err := client.Resource(m.Resource).Namespace(ns).Create(context.Background(), obj, metav1.CreateOptions{})
				if err != nil {
					t.Fatalf("creating %s %s/%s: %v", gvk.Kind, ns, obj.GetName(), err)
				}
				if _, err := client.Resource(m.Resource).Namespace(ns).Get(context.Background(), created.GetName(), metav1.GetOptions{}); err != nil {
					t.Errorf("reading back %s %s/%s: %v", gvk.Kind, ns, created.GetName(), err)
				}
			}
			waitWorkloads(t, ns, objs)
			pipelines := map[string]map[string]any{}
			for _, o := range objs {
				if o.GetKind() == "Pipeline" {
					pipelines[o.GetName()], _, _ = unstructured.NestedMap(o.Object, "spec")
				}
			}
			runs := 0
			for _, o := range objs {
				if o.GetKind() != "PipelineRun" {
					continue
				}
				runs++
				spec, ok, _ := unstructured.NestedMap(o.Object, "spec", "pipelineSpec")
				if !ok {
					ref, _, _ := unstructured.NestedString(o.Object, "spec", "pipelineRef", "name")
					if spec = pipelines[ref]; spec == nil {
						t.Fatalf("PipelineRun %s: its Pipeline %q is not in %s", o.GetName(), ref, filepath.Base(file))
					}
				}
				startPending(t, client, ns, o, file)
				checkChildren(t, client, ns, o.GetName(), spec)
			}
			if runs == 0 {
				t.Errorf("%s holds no PipelineRun", filepath.Base(file))
			}
		})
	}
}

// waitWorkloads waits until every StatefulSet of the file has its replicas Ready, as the
// examples' `kubectl rollout status` does: a rollout refuses to start with pods not Ready.
func waitWorkloads(t *testing.T, ns string, objs []*unstructured.Unstructured) {
	t.Helper()
	for _, o := range objs {
		if o.GetKind() != "StatefulSet" {
			continue
		}
		cluster.WaitFor(t, 2*time.Minute, "StatefulSet "+ns+"/"+o.GetName()+" Ready", func(ctx context.Context) (bool, error) {
			sts, err := env.Client.AppsV1().StatefulSets(ns).Get(ctx, o.GetName(), metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			want := int32(1)
			if sts.Spec.Replicas != nil {
				want = *sts.Spec.Replicas
			}
			if sts.Status.ReadyReplicas != want {
				return false, fmt.Errorf("%d of %d replicas Ready", sts.Status.ReadyReplicas, want)
			}
			return true, nil
		})
	}
}

// startPending clears the pending status of a PipelineRun created pending, as the example's
// header says to (which the test checks), and checks that Tekton started nothing before.
func startPending(t *testing.T, client dynamic.Interface, ns string, run *unstructured.Unstructured, file string) {
	t.Helper()
	if status, _, _ := unstructured.NestedString(run.Object, "spec", "status"); status != "PipelineRunPending" {
		return
	}
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	const patch = `{"spec":{"status":null}}`
	if want := fmt.Sprintf("kubectl patch pipelinerun %s --type merge -p '%s'", run.GetName(), patch); !bytes.Contains(data, []byte(want)) {
		t.Errorf("%s: PipelineRun %s is created pending, and the header does not say how to start it: %s", filepath.Base(file), run.GetName(), want)
	}
	got, err := client.Resource(pipelineRunsGVR).Namespace(ns).Get(context.Background(), run.GetName(), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if refs, _, _ := unstructured.NestedSlice(got.Object, "status", "childReferences"); len(refs) > 0 {
		t.Errorf("PipelineRun %s/%s is pending, yet Tekton started %v", ns, run.GetName(), refs)
	}
	if _, err := client.Resource(pipelineRunsGVR).Namespace(ns).Patch(context.Background(), run.GetName(), types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatalf("starting PipelineRun %s/%s: %v", ns, run.GetName(), err)
	}
}

// checkChildren waits until the PipelineRun has a child of the right kind for every task that
// starts first, and checks each child.
func checkChildren(t *testing.T, client dynamic.Interface, ns, name string, spec map[string]any) {
	t.Helper()
	want := map[string]string{} // pipeline task -> child kind
	for _, task := range pipelineTasks(spec) {
		if !startsFirst(spec, task) {
			continue
		}
		kind := "TaskRun"
		if customTask(task) {
			kind = "CustomRun"
		}
		want[task["name"].(string)] = kind
	}
	if len(want) == 0 {
		t.Fatalf("PipelineRun %s: no task starts first", name)
	}
	children := map[string]string{} // pipeline task -> child name
	var failed string
	cluster.WaitFor(t, reconcileTimeout, fmt.Sprintf("PipelineRun %s/%s with children %v", ns, name, want), func(ctx context.Context) (bool, error) {
		pr, err := client.Resource(pipelineRunsGVR).Namespace(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		conds, _, _ := unstructured.NestedSlice(pr.Object, "status", "conditions")
		for _, c := range conds {
			if c := c.(map[string]any); c["type"] == "Succeeded" && c["status"] == "False" {
				failed = fmt.Sprintf("%v: %v", c["reason"], c["message"])
				return true, nil
			}
		}
		refs, _, _ := unstructured.NestedSlice(pr.Object, "status", "childReferences")
		clear(children)
		for _, r := range refs {
			r := r.(map[string]any)
			task, _ := r["pipelineTaskName"].(string)
			if want[task] == r["kind"] {
				children[task], _ = r["name"].(string)
			}
		}
		if len(children) < len(want) {
			return false, fmt.Errorf("childReferences %v", refs)
		}
		return true, nil
	})
	if failed != "" {
		t.Fatalf("PipelineRun %s/%s failed: %s", ns, name, failed)
	}
	for task, child := range children {
		switch want[task] {
		case "CustomRun":
			run, err := client.Resource(customRunsGVR).Namespace(ns).Get(context.Background(), child, metav1.GetOptions{})
			if err != nil {
				t.Fatalf("reading CustomRun %s/%s: %v", ns, child, err)
			}
			ref, ok, _ := unstructured.NestedMap(run.Object, "spec", "customRef")
			if !ok {
				ref, _, _ = unstructured.NestedMap(run.Object, "spec", "customSpec")
			}
			if ref["apiVersion"] != ourAPIVersion || ref["kind"] != ourKind {
				t.Errorf("CustomRun %s/%s of task %s: customRef/customSpec %v, want apiVersion %s kind %s", ns, child, task, ref, ourAPIVersion, ourKind)
			}
			checkImagesParam(t, "CustomRun "+ns+"/"+child, run)
			results := waitCustomRunSucceeded(t, client, ns, child)
			checkConsumers(t, client, ns, name, spec, task, results)
		case "TaskRun":
			tr, err := client.Resource(taskRunsGVR).Namespace(ns).Get(context.Background(), child, metav1.GetOptions{})
			if err != nil {
				t.Fatalf("reading TaskRun %s/%s: %v", ns, child, err)
			}
			checkImagesParam(t, "TaskRun "+ns+"/"+child, tr)
			cluster.WaitFor(t, reconcileTimeout, "the Pod of TaskRun "+ns+"/"+child, func(ctx context.Context) (bool, error) {
				pods, err := env.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "tekton.dev/taskRun=" + child})
				if err != nil || len(pods.Items) > 0 {
					return err == nil, err
				}
				tr, err := client.Resource(taskRunsGVR).Namespace(ns).Get(ctx, child, metav1.GetOptions{})
				if err != nil {
					return false, err
				}
				conds, _, _ := unstructured.NestedSlice(tr.Object, "status", "conditions")
				for _, c := range conds {
					if c := c.(map[string]any); c["type"] == "Succeeded" && c["status"] == "False" {
						failed = fmt.Sprintf("%v: %v", c["reason"], c["message"])
						return true, nil
					}
				}
				return false, fmt.Errorf("no Pod yet; TaskRun conditions %v", conds)
			})
			if failed != "" {
				t.Fatalf("TaskRun %s/%s of task %s failed before its Pod was created: %s", ns, child, task, failed)
			}
		}
	}
}

// waitCustomRunSucceeded waits until our controller, which runs beside Tekton's, has run the
// CustomRun to success, and returns its results by name.
func waitCustomRunSucceeded(t *testing.T, client dynamic.Interface, ns, name string) map[string]string {
	t.Helper()
	var failed string
	var run *unstructured.Unstructured
	cluster.WaitFor(t, 3*time.Minute, "CustomRun "+ns+"/"+name+" Succeeded", func(ctx context.Context) (bool, error) {
		var err error
		if run, err = client.Resource(customRunsGVR).Namespace(ns).Get(ctx, name, metav1.GetOptions{}); err != nil {
			return false, err
		}
		conds, _, _ := unstructured.NestedSlice(run.Object, "status", "conditions")
		for _, c := range conds {
			if c := c.(map[string]any); c["type"] == "Succeeded" {
				switch c["status"] {
				case "True":
					return true, nil
				case "False":
					failed = fmt.Sprintf("%v: %v", c["reason"], c["message"])
					return true, nil
				}
			}
		}
		return false, fmt.Errorf("conditions %v", conds)
	})
	if failed != "" {
		t.Fatalf("CustomRun %s/%s failed: %s", ns, name, failed)
	}
	results := map[string]string{}
	list, _, _ := unstructured.NestedSlice(run.Object, "status", "results")
	for _, r := range list {
		r := r.(map[string]any)
		results[fmt.Sprint(r["name"])] = fmt.Sprint(r["value"])
	}
	t.Logf("CustomRun %s/%s succeeded with results %v", ns, name, results)
	for _, want := range []string{"phase", "updated-pods", "rolled-back", "message"} {
		if _, ok := results[want]; !ok {
			t.Errorf("CustomRun %s/%s has no result %s: %v", ns, name, want, results)
		}
	}
	return results
}

// checkConsumers waits until the PipelineRun has started each task that takes a result of task
// from, and checks that its params hold the results' values.
func checkConsumers(t *testing.T, client dynamic.Interface, ns, name string, spec map[string]any, from string, results map[string]string) {
	t.Helper()
	for _, task := range pipelineTasks(spec) {
		params, _ := task["params"].([]any)
		want := map[string]string{} // param -> value
		for _, p := range params {
			p := p.(map[string]any)
			v, _ := p["value"].(string)
			for result, value := range results {
				if v == "$(tasks."+from+".results."+result+")" {
					want[fmt.Sprint(p["name"])] = value
				}
			}
		}
		if len(want) == 0 {
			continue
		}
		ptask := task["name"].(string)
		var got map[string]any
		cluster.WaitFor(t, reconcileTimeout, fmt.Sprintf("PipelineRun %s/%s starting task %s", ns, name, ptask), func(ctx context.Context) (bool, error) {
			list, err := client.Resource(taskRunsGVR).Namespace(ns).List(ctx, metav1.ListOptions{LabelSelector: "tekton.dev/pipelineRun=" + name + ",tekton.dev/pipelineTask=" + ptask})
			if err != nil || len(list.Items) == 0 {
				return false, err
			}
			got = list.Items[0].Object
			return true, nil
		})
		params, _, _ = unstructured.NestedSlice(got, "spec", "params")
		have := map[string]string{}
		for _, p := range params {
			p := p.(map[string]any)
			have[fmt.Sprint(p["name"])] = fmt.Sprint(p["value"])
		}
		for param, value := range want {
			if have[param] != value {
				t.Errorf("TaskRun of task %s: param %s = %q, want %q, the result of task %s", ptask, param, have[param], value, from)
			}
		}
	}
}

// checkImagesParam checks that a run got the images param as an array of CONTAINER=IMAGE, as
// the PipelineRun gave it.
func checkImagesParam(t *testing.T, what string, run *unstructured.Unstructured) {
	t.Helper()
	params, _, _ := unstructured.NestedSlice(run.Object, "spec", "params")
	for _, p := range params {
		p := p.(map[string]any)
		if p["name"] != "images" {
			continue
		}
		images, ok := p["value"].([]any)
		if !ok || len(images) != 1 || !strings.Contains(fmt.Sprint(images[0]), "=registry.example/") {
			t.Errorf("%s: param images = %v, want one CONTAINER=IMAGE", what, p["value"])
		}
		return
	}
	t.Errorf("%s: no param images in %v", what, params)
}
