package cluster

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"
)

// TestOwnControllerManifestsAreWhatTheHarnessCreates: config/tekton's and config/controller's
// kustomizations list the CRD, the files the harness creates and the Deployment, and nothing
// else, so that a manifest added there is either created by the harness or is the Deployment;
// every binding binds the controller's ServiceAccount, in the namespace the harness uses.
func TestOwnControllerManifestsAreWhatTheHarnessCreates(t *testing.T) {
	for _, k := range []ownControllerKind{inplaceTektonKind, inplaceControllerKind} {
		t.Run(k.config, func(t *testing.T) { checkOwnControllerManifests(t, k) })
	}
}

func checkOwnControllerManifests(t *testing.T, k ownControllerKind) {
	root, err := RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	config := filepath.Join(root, "config", k.config)
	var kustomization struct {
		Resources []string `json:"resources"`
	}
	if err := readYAML(filepath.Join(config, "kustomization.yaml"), &kustomization); err != nil {
		t.Fatal(err)
	}
	want := append([]string{"../crd", "deployment.yaml"}, ownControllerFiles...)
	slices.Sort(want)
	got := slices.Sorted(slices.Values(kustomization.Resources))
	if !slices.Equal(got, want) {
		t.Errorf("config/%s/kustomization.yaml resources %v, want %v", k.config, got, want)
	}
	subject := rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Name: k.serviceAccount, Namespace: InplaceTektonNamespace}
	for _, f := range ownControllerFiles {
		data, err := os.ReadFile(filepath.Join(config, f))
		if err != nil {
			t.Fatal(err)
		}
		for i, doc := range splitYAML(data) {
			var obj struct {
				metav1.TypeMeta   `json:",inline"`
				metav1.ObjectMeta `json:"metadata"`
				Subjects          []rbacv1.Subject `json:"subjects"`
			}
			if err := yaml.Unmarshal(doc, &obj); err != nil {
				t.Fatalf("%s document %d: %v", f, i+1, err)
			}
			if obj.Kind == "" {
				continue
			}
			switch obj.Kind {
			case "Namespace", "ClusterRole":
				if obj.Kind == "Namespace" && obj.Name != InplaceTektonNamespace {
					t.Errorf("%s: namespace %q, want %s", f, obj.Name, InplaceTektonNamespace)
				}
			case "ServiceAccount", "Role":
				if obj.Namespace != InplaceTektonNamespace || obj.Kind == "ServiceAccount" && obj.Name != k.serviceAccount {
					t.Errorf("%s: %s %s/%s, want it in %s", f, obj.Kind, obj.Namespace, obj.Name, InplaceTektonNamespace)
				}
			case "ClusterRoleBinding", "RoleBinding":
				if len(obj.Subjects) != 1 || obj.Subjects[0] != subject {
					t.Errorf("%s: %s %s binds %v, want only %v", f, obj.Kind, obj.Name, obj.Subjects, subject)
				}
				if obj.Kind == "RoleBinding" && obj.Namespace != InplaceTektonNamespace {
					t.Errorf("%s: RoleBinding %s/%s, want it in %s", f, obj.Namespace, obj.Name, InplaceTektonNamespace)
				}
			default:
				t.Errorf("%s: kind %s is not one the harness creates", f, obj.Kind)
			}
		}
	}
}

// TestStartInplaceTekton starts the control plane with Tekton's CRDs, then our controller as a
// process: it is ready, authenticated as its ServiceAccount with only config/tekton's rights,
// which are enough to hold its Lease and roll a StatefulSet out for a CustomRun; Kill and
// Restart give a new process that is ready again.
func TestStartInplaceTekton(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "inplace-rollout")
	build := exec.Command("go", "build", "-o", bin, "github.com/inplace-rollout/inplace-rollout/cmd/inplace-rollout")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building inplace-rollout: %v\n%s", err, out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	c, err := Start(ctx, Options{Logger: slog.New(slog.NewTextHandler(t.Output(), nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.Stop(); err != nil {
			t.Error(err)
		}
	})
	root, err := RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	tekton, err := TektonModuleDir(root)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.applyCRDs(ctx, "Tekton", filepath.Join(tekton, "config", "300-crds", "*.yaml")); err != nil {
		t.Fatal(err)
	}
	p, err := c.StartInplaceTekton(ctx, bin)
	if err != nil {
		t.Fatal(err)
	}
	if c.InplaceTekton != p {
		t.Error("Cluster.InplaceTekton is not the controller StartInplaceTekton returned")
	}
	if err := c.InstallInplaceTekton(ctx); err != nil {
		t.Errorf("InstallInplaceTekton after StartInplaceTekton: %v", err)
	}

	// The kubeconfig's user is the ServiceAccount, allowed what config/tekton grants and no more.
	cfg, err := clientcmd.BuildConfigFromFlags("", p.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	sa, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	review, err := sa.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("reviewing the controller's kubeconfig user: %v", err)
	}
	if review.Status.UserInfo.Username != InplaceTektonUser {
		t.Errorf("the controller's kubeconfig authenticates as %q, want %s", review.Status.UserInfo.Username, InplaceTektonUser)
	}
	access := []struct {
		attrs authorizationv1.ResourceAttributes
		want  bool
	}{
		{authorizationv1.ResourceAttributes{Group: "tekton.dev", Resource: "customruns", Verb: "watch"}, true},
		{authorizationv1.ResourceAttributes{Namespace: "team", Group: "tekton.dev", Resource: "customruns", Subresource: "status", Verb: "update"}, true},
		{authorizationv1.ResourceAttributes{Namespace: "team", Group: "inplace-rollout.io", Resource: "inplacerollouts", Verb: "get"}, true},
		{authorizationv1.ResourceAttributes{Namespace: InplaceTektonNamespace, Group: "coordination.k8s.io", Resource: "leases", Verb: "update"}, true},
		{authorizationv1.ResourceAttributes{Namespace: "team", Group: "coordination.k8s.io", Resource: "leases", Verb: "update"}, false},
		// Update for the run's finalizer; it never deletes or creates runs.
		{authorizationv1.ResourceAttributes{Namespace: "team", Group: "tekton.dev", Resource: "customruns", Verb: "update"}, true},
		{authorizationv1.ResourceAttributes{Namespace: "team", Group: "tekton.dev", Resource: "customruns", Verb: "delete"}, false},
		{authorizationv1.ResourceAttributes{Namespace: "team", Group: "tekton.dev", Resource: "customruns", Verb: "create"}, false},
		{authorizationv1.ResourceAttributes{Namespace: "team", Resource: "secrets", Verb: "list"}, false},
		// Pre-pull's puller pods are created and deleted; pods are never updated whole.
		{authorizationv1.ResourceAttributes{Namespace: "team", Resource: "pods", Verb: "create"}, true},
		{authorizationv1.ResourceAttributes{Namespace: "team", Resource: "pods", Verb: "update"}, false},
		{authorizationv1.ResourceAttributes{Namespace: "team", Group: "apps", Resource: "statefulsets", Verb: "delete"}, false},
	}
	for _, a := range access {
		r := &authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &a.attrs}}
		r, err := sa.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, r, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("reviewing %+v: %v", a.attrs, err)
		}
		if r.Status.Allowed != a.want {
			t.Errorf("the controller's ServiceAccount allowed %v for %+v, want %v", r.Status.Allowed, a.attrs, a.want)
		}
	}

	// As that ServiceAccount alone, it holds its Lease and rolls a StatefulSet out for a CustomRun.
	WaitFor(t, time.Minute, "the controller's Lease", func(ctx context.Context) (bool, error) {
		lease, err := c.Client.CoordinationV1().Leases(InplaceTektonNamespace).Get(ctx, "inplace-rollout-tekton-controller", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		return lease.Spec.HolderIdentity != nil && *lease.Spec.HolderIdentity != "", nil
	})
	rollStatefulSet(t, c)

	healthz := func() int {
		t.Helper()
		resp, err := http.Get(p.HealthURL + "/healthz")
		if err != nil {
			t.Fatalf("GET %s/healthz: %v", p.HealthURL, err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := healthz(); code != http.StatusOK {
		t.Errorf("/healthz answered %d, want 200", code)
	}
	first := p.PID()
	if err := p.Kill(); err != nil {
		t.Fatal(err)
	}
	if done, _ := p.proc.exited(); !done {
		t.Fatalf("pid %d runs on after Kill", first)
	}
	if err := p.Restart(); err != nil {
		t.Fatal(err)
	}
	second := p.PID()
	if second == first {
		t.Errorf("Restart after Kill kept pid %d", first)
	}
	if err := p.Restart(); err != nil {
		t.Fatal(err)
	}
	if p.PID() == second {
		t.Errorf("Restart kept pid %d", second)
	}
	if code := healthz(); code != http.StatusOK {
		t.Errorf("/healthz answered %d after two restarts, want 200", code)
	}
	pidFile, err := os.ReadFile(filepath.Join(c.Dir, inplaceTektonKind.process+".pid"))
	if err != nil {
		t.Fatal(err)
	}
	if want := []byte(strconv.Itoa(p.PID()) + "\n"); string(pidFile) != string(want) {
		t.Errorf("%s.pid holds %q, want %q", inplaceTektonKind.process, pidFile, want)
	}
}

// rollStatefulSet creates a 3-pod StatefulSet and a CustomRun of ours that rolls it to a new
// image, and waits until the run has succeeded.
func rollStatefulSet(t *testing.T, c *Cluster) {
	t.Helper()
	ctx := context.Background()
	ns := c.Namespace(t)
	labels := map[string]string{"app": "web"}
	sts := &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns},
		Spec: appsv1.StatefulSetSpec{
			Replicas: ptr.To(int32(3)),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "registry.example/app:v1"}}},
			},
		},
	}
	if _, err := c.Client.AppsV1().StatefulSets(ns).Create(ctx, sts, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	WaitFor(t, 2*time.Minute, "StatefulSet "+ns+"/web Ready", func(ctx context.Context) (bool, error) {
		got, err := c.Client.AppsV1().StatefulSets(ns).Get(ctx, "web", metav1.GetOptions{})
		return err == nil && got.Status.ReadyReplicas == 3, err
	})
	dyn, err := dynamic.NewForConfig(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	runs := dyn.Resource(schema.GroupVersionResource{Group: "tekton.dev", Version: "v1beta1", Resource: "customruns"}).Namespace(ns)
	run := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "tekton.dev/v1beta1",
		"kind":       "CustomRun",
		"metadata":   map[string]any{"name": "roll"},
		"spec": map[string]any{
			"customSpec": map[string]any{
				"apiVersion": "inplace-rollout.io/v1alpha1",
				"kind":       "InPlaceRollout",
				"spec":       map[string]any{"target": map[string]any{"kind": "StatefulSet", "name": "web"}},
			},
			"params": []any{map[string]any{"name": "images", "value": []any{"app=registry.example/app:v2"}}},
		},
	}}
	if _, err := runs.Create(ctx, run, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var cond map[string]any
	WaitFor(t, 2*time.Minute, "CustomRun "+ns+"/roll done", func(ctx context.Context) (bool, error) {
		got, err := runs.Get(ctx, "roll", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		conds, _, _ := unstructured.NestedSlice(got.Object, "status", "conditions")
		for _, x := range conds {
			if x := x.(map[string]any); x["type"] == "Succeeded" && x["status"] != "Unknown" {
				cond = x
				return true, nil
			}
		}
		return false, fmt.Errorf("conditions %v", conds)
	})
	if cond["status"] != "True" {
		t.Fatalf("CustomRun %s/roll, run by the controller as %s, ended %v: %v", ns, InplaceTektonUser, cond["reason"], cond["message"])
	}
}
