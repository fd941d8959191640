package task

import (
	"context"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/distribution/reference"
	v1 "github.com/tektoncd/pipeline/pkg/apis/pipeline/v1"
	"sigs.k8s.io/yaml"

	"github.com/inplace-rollout/inplace-rollout/tekton/customrun"
	"github.com/inplace-rollout/inplace-rollout/tekton/results"
)

const (
	taskFile  = "inplace-rollout/0.1/inplace-rollout.yaml"
	imageRepo = "ghcr.io/inplace-rollout/inplace-rollout"
)

// paramRef finds $(params.NAME), $(params.NAME[*]) and $(params["NAME"]) references.
var paramRef = regexp.MustCompile(`\$\(params(?:\.([A-Za-z0-9_-]+)|\[["']([^"']+)["']\])(?:\[\*\])?\)`)

// loadTask decodes the Task strictly: a field Tekton's v1 types lack is an error.
func loadTask(t *testing.T) *v1.Task {
	t.Helper()
	data, err := os.ReadFile(taskFile)
	if err != nil {
		t.Fatal(err)
	}
	var task v1.Task
	if err := yaml.UnmarshalStrict(data, &task); err != nil {
		t.Fatalf("decoding %s strictly as a tekton.dev/v1 Task: %v", taskFile, err)
	}
	return &task
}

// stepStrings are every string of a step Tekton substitutes params into.
func stepStrings(s v1.Step) []string {
	out := []string{s.Image, s.Script, s.WorkingDir}
	out = append(out, s.Command...)
	out = append(out, s.Args...)
	for _, e := range s.Env {
		out = append(out, e.Value)
	}
	return out
}

func TestTaskValidates(t *testing.T) {
	task := loadTask(t)
	if task.APIVersion != "tekton.dev/v1" || task.Kind != "Task" {
		t.Errorf("apiVersion %q kind %q, want tekton.dev/v1 Task", task.APIVersion, task.Kind)
	}
	ctx := context.Background()
	task.SetDefaults(ctx)
	if err := task.Validate(ctx); err != nil {
		t.Fatalf("Validate: %v", err)
	}
}

// TestTaskFollowsTheCatalog checks what the catalog asks of a Task beyond Tekton's validation.
func TestTaskFollowsTheCatalog(t *testing.T) {
	task := loadTask(t)
	if got := task.Labels["app.kubernetes.io/version"]; got != "0.1" {
		t.Errorf("label app.kubernetes.io/version = %q, want 0.1 (the directory's version)", got)
	}
	for _, a := range []string{"tekton.dev/pipelines.minVersion", "tekton.dev/categories", "tekton.dev/tags", "tekton.dev/displayName", "tekton.dev/platforms"} {
		if task.Annotations[a] == "" {
			t.Errorf("annotation %s missing", a)
		}
	}
	if task.Spec.Description == "" {
		t.Error("spec.description missing")
	}
	for _, p := range task.Spec.Params {
		if strings.TrimSpace(p.Description) == "" {
			t.Errorf("param %s has no description", p.Name)
		}
	}
	for _, r := range task.Spec.Results {
		if strings.TrimSpace(r.Description) == "" {
			t.Errorf("result %s has no description", r.Name)
		}
	}
}

// TestTaskUsesItsParams: every param a step names is declared, and every declared param reaches
// the step; none goes into a script.
func TestTaskUsesItsParams(t *testing.T) {
	task := loadTask(t)
	declared := map[string]bool{}
	for _, p := range task.Spec.Params {
		declared[p.Name] = true
	}
	used := map[string]bool{}
	for _, s := range task.Spec.Steps {
		if paramRef.MatchString(s.Script) {
			t.Errorf("step %s: $(params...) inside its script; pass it through env or args", s.Name)
		}
		for _, str := range stepStrings(s) {
			for _, m := range paramRef.FindAllStringSubmatch(str, -1) {
				name := m[1] + m[2]
				used[name] = true
				if !declared[name] {
					t.Errorf("step %s uses param %s, which the Task does not declare", s.Name, name)
				}
			}
		}
	}
	for name := range declared {
		if !used[name] {
			t.Errorf("param %s is declared but no step uses it", name)
		}
	}
	if !used["images"] {
		t.Fatal("the images param reaches no step")
	}
	for _, s := range task.Spec.Steps {
		for _, a := range s.Args {
			if strings.Contains(a, "$(params.images[*])") && a != "$(params.images[*])" {
				t.Errorf("step %s: arg %q: an array param goes in as whole arguments only", s.Name, a)
			}
		}
	}
}

// TestTaskResultsAreTheCommandsFiles: the Task declares exactly the results the command's
// --results-dir writes, the custom task's results too, and its step writes them where Tekton
// reads them.
func TestTaskResultsAreTheCommandsFiles(t *testing.T) {
	task := loadTask(t)
	var names []string
	for _, r := range task.Spec.Results {
		names = append(names, r.Name)
	}
	if !slices.Equal(names, results.Names) {
		t.Errorf("results %v, want the command's %v", names, results.Names)
	}
	custom := []string{customrun.ResultPhase, customrun.ResultUpdatedPods, customrun.ResultRolledBack, customrun.ResultMessage}
	if !slices.Equal(custom, results.Names) {
		t.Errorf("the custom task's results %v, want the same as the Task's %v", custom, results.Names)
	}
	for _, s := range task.Spec.Steps {
		if !slices.Contains(s.Args, "--results-dir=/tekton/results") {
			t.Errorf("step %s: args %q lack --results-dir=/tekton/results", s.Name, s.Args)
		}
	}
}

// TestTaskImageIsPinned: the step's image is ours, by digest, and the command is the image's
// binary (given, so that Tekton need not fetch the image to learn its entrypoint).
func TestTaskImageIsPinned(t *testing.T) {
	task := loadTask(t)
	for _, s := range task.Spec.Steps {
		ref, err := reference.ParseNormalizedNamed(s.Image)
		if err != nil {
			t.Fatalf("step %s: image %q: %v", s.Name, s.Image, err)
		}
		d, ok := ref.(reference.Canonical)
		if !ok || ref.Name() != imageRepo {
			t.Errorf("step %s: image %q, want %s@sha256:...", s.Name, s.Image, imageRepo)
			continue
		}
		if _, tagged := ref.(reference.Tagged); tagged {
			t.Errorf("step %s: image %q carries a tag: pin it by digest only (make task-digest)", s.Name, s.Image)
		}
		if err := d.Digest().Validate(); err != nil {
			t.Errorf("step %s: image %q: %v", s.Name, s.Image, err)
		}
		if !slices.Equal(s.Command, []string{"/usr/local/bin/inplace-rollout"}) {
			t.Errorf("step %s: command %q, want [/usr/local/bin/inplace-rollout]", s.Name, s.Command)
		}
	}
}

// TestTaskRunsFitTheTask: the sample and the catalog e2e's TaskRuns decode strictly as
// tekton.dev/v1 TaskRuns, validate, and pass the Task every param it requires, of its type,
// and none it lacks; the e2e's Role is the sample's, so the tested permissions are those documented.
func TestTaskRunsFitTheTask(t *testing.T) {
	task := loadTask(t)
	for _, file := range []string{"inplace-rollout/0.1/samples/taskrun.yaml", "inplace-rollout/0.1/tests/run.yaml"} {
		t.Run(file, func(t *testing.T) {
			data, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			var tr v1.TaskRun
			if err := yaml.UnmarshalStrict(data, &tr); err != nil {
				t.Fatalf("decoding strictly as a tekton.dev/v1 TaskRun: %v", err)
			}
			if tr.Spec.TaskRef == nil || tr.Spec.TaskRef.Name != task.Name {
				t.Errorf("taskRef %+v, want %s", tr.Spec.TaskRef, task.Name)
			}
			if tr.Spec.ServiceAccountName != "inplace-rollout" {
				t.Errorf("serviceAccountName %q, want inplace-rollout (samples/rbac.yaml)", tr.Spec.ServiceAccountName)
			}
			given := map[string]v1.ParamType{}
			for _, p := range tr.Spec.Params {
				given[p.Name] = p.Value.Type
			}
			for _, p := range task.Spec.Params {
				typ, ok := given[p.Name]
				switch {
				case !ok && p.Default == nil:
					t.Errorf("param %s is required and not given", p.Name)
				case ok && typ != p.Type:
					t.Errorf("param %s given as %s, the Task takes %s", p.Name, typ, p.Type)
				}
				delete(given, p.Name)
			}
			for name := range given {
				t.Errorf("param %s is not the Task's", name)
			}
			if tr.Name == "" {
				tr.Name = tr.GenerateName + "x" // as the apiserver names it
			}
			ctx := context.Background()
			tr.SetDefaults(ctx)
			if err := tr.Validate(ctx); err != nil {
				t.Errorf("Validate: %v", err)
			}
		})
	}
	rbac, err := os.ReadFile("inplace-rollout/0.1/samples/rbac.yaml")
	if err != nil {
		t.Fatal(err)
	}
	resources, err := os.ReadFile("inplace-rollout/0.1/tests/resources.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if string(rbac) != string(resources) {
		t.Error("tests/resources.yaml differs from samples/rbac.yaml: the e2e must test the documented permissions")
	}
}
