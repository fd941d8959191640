package main

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"

	"github.com/inplace-rollout/inplace-rollout/pkg/rollout"
)

// apiServer serves objs to GETs as an API server does, by name and as lists of their collection
// (selectors ignored), and NotFound for the rest. It returns a kubeconfig naming it.
func apiServer(t *testing.T, objs ...runtime.Object) string {
	t.Helper()
	byPath := map[string]runtime.Object{}
	lists := map[string][]runtime.Object{}
	for _, obj := range objs {
		var collection string
		switch o := obj.(type) {
		case *appsv1.StatefulSet:
			o.TypeMeta = metav1.TypeMeta{APIVersion: "apps/v1", Kind: "StatefulSet"}
			collection = "/apis/apps/v1/namespaces/" + o.Namespace + "/statefulsets"
			byPath[collection+"/"+o.Name] = o
		case *corev1.Pod:
			o.TypeMeta = metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"}
			collection = "/api/v1/namespaces/" + o.Namespace + "/pods"
			byPath[collection+"/"+o.Name] = o
		default:
			t.Fatalf("apiServer serves no %T", obj)
		}
		lists[collection] = append(lists[collection], obj)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if obj, ok := byPath[r.URL.Path]; ok && r.Method == http.MethodGet {
			_ = json.NewEncoder(w).Encode(obj)
			return
		}
		if items, ok := lists[r.URL.Path]; ok && r.Method == http.MethodGet {
			raw := make([]json.RawMessage, len(items))
			for i, item := range items {
				raw[i], _ = json.Marshal(item)
			}
			gvk := items[0].GetObjectKind().GroupVersionKind()
			_ = json.NewEncoder(w).Encode(map[string]any{"apiVersion": gvk.GroupVersion().String(), "kind": gvk.Kind + "List",
				"metadata": map[string]any{"resourceVersion": "1"}, "items": raw})
			return
		}
		w.WriteHeader(http.StatusNotFound)
		_ = json.NewEncoder(w).Encode(metav1.Status{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Status"}, Status: metav1.StatusFailure,
			Code: http.StatusNotFound, Reason: metav1.StatusReasonNotFound, Message: r.URL.Path + " not found"})
	}))
	t.Cleanup(srv.Close)
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["test"] = &clientcmdapi.Cluster{Server: srv.URL}
	cfg.AuthInfos["test"] = &clientcmdapi.AuthInfo{}
	cfg.Contexts["test"] = &clientcmdapi.Context{Cluster: "test", AuthInfo: "test", Namespace: "shop"}
	cfg.CurrentContext = "test"
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
	return path
}

// webPods are shop/web's pods, on image.
func webPods(image string, n int) []runtime.Object {
	var pods []runtime.Object
	for i := range n {
		p := statusPod("web-"+string(rune('0'+i)), image, nil)
		p.Labels = map[string]string{"app": "web", "controller-revision-hash": "web-1"}
		p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "StatefulSet", Name: "web", UID: "web-uid", Controller: ptr.To(true)}}
		p.Status.Phase = corev1.PodRunning
		pods = append(pods, p)
	}
	return pods
}

func runRoot(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	cmd := newRootCommand()
	cmd.SetOut(&stdout)
	cmd.SetErr(&stderr)
	cmd.SetArgs(args)
	err := cmd.Execute()
	return stdout.String(), stderr.String(), err
}

// observedWeb is shop/web with 2 pods on reg/app:v1, as its controller left it, served by an
// API server; it returns the kubeconfig naming the server.
func observedWeb(t *testing.T) string {
	t.Helper()
	sts := webStatefulSet(t, nil)
	sts.UID = "web-uid"
	sts.Spec.Replicas = ptr.To[int32](2)
	sts.Status.ObservedGeneration, sts.Status.UpdateRevision = sts.Generation, "web-1"
	return apiServer(t, append(webPods("reg/app:v1", 2), sts)...)
}

// words is out with each line's runs of spaces made one, and no blank lines.
func words(out string) []string {
	var lines []string
	for line := range strings.Lines(out) {
		if f := strings.Fields(line); len(f) > 0 {
			lines = append(lines, strings.Join(f, " "))
		}
	}
	return lines
}

// TestStatusAndPlanCommands: status and plan read the workload through the kubeconfig's cluster
// and print what they found, as text or JSON; a workload that is not there is bad input.
func TestStatusAndPlanCommands(t *testing.T) {
	kubeconfig := observedWeb(t)
	planArgs := []string{"plan", "--kubeconfig", kubeconfig, "--target", "statefulset/web", "--image", "app=reg/app:v2", "--batches", "1,100%", "--pin-digests", "never"}
	tests := []struct {
		name string
		args []string
		want []string
	}{
		{"status", []string{"status", "--kubeconfig", kubeconfig, "--target", "statefulset/web"}, []string{
			"StatefulSet shop/web",
			"no in-place rollout recorded",
			"POD READY STAGE CONTAINER BEFORE NOW REASON",
			"web-1 true - app - reg/app:v1",
			"sidecar - reg/sidecar:1",
			"web-0 true - app - reg/app:v1",
			"sidecar - reg/sidecar:1",
		}},
		{"plan", planArgs, []string{
			"StatefulSet shop/web: app=reg/app:v1 -> app=reg/app:v2",
			"batch 1 (up to 1 pods): [web-1]",
			"batch 2 (up to 2 pods): [web-0]",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, stderr, err := runRoot(t, tt.args...)
			if err != nil {
				t.Fatalf("%s: %v\n%s", tt.name, err, stderr)
			}
			if got := words(out); strings.Join(got, "\n") != strings.Join(tt.want, "\n") {
				t.Errorf("printed:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tt.want, "\n"))
			}
		})
	}
	t.Run("status as JSON", func(t *testing.T) {
		out, _, err := runRoot(t, "status", "--kubeconfig", kubeconfig, "--target", "statefulset/web", "-o", "json")
		if err != nil {
			t.Fatal(err)
		}
		var r rollout.Report
		if err := json.Unmarshal([]byte(out), &r); err != nil || r.Target != "StatefulSet shop/web" || len(r.Pods) != 2 || r.Lock != nil {
			t.Errorf("JSON %s (%v), want StatefulSet shop/web's 2 pods and no lock", out, err)
		}
	})
	t.Run("plan as JSON", func(t *testing.T) {
		out, _, err := runRoot(t, append(planArgs, "-o", "json")...)
		if err != nil {
			t.Fatal(err)
		}
		var p planReport
		if err := json.Unmarshal([]byte(out), &p); err != nil || len(p.Batches) != 2 || p.Batches[1].Upto != 2 || p.Current["app"] != "reg/app:v1" {
			t.Errorf("JSON %s (%v), want 2 batches up to 2 pods, from reg/app:v1", out, err)
		}
	})
	for _, args := range [][]string{{"status"}, {"plan", "--image", "app=reg/app:v2"}} {
		t.Run(args[0]+" of a workload not there", func(t *testing.T) {
			_, _, err := runRoot(t, append(args, "--kubeconfig", kubeconfig, "--target", "statefulset/api")...)
			if exitCode(err) != exitBadInput || !strings.Contains(err.Error(), "not found") {
				t.Errorf("%s: %v (exit %d), want bad input saying not found", args[0], err, exitCode(err))
			}
		})
	}
}

// TestClusterFlagsRefuseBeforeAnyRequest: what locates the cluster and the workload is checked
// before a request is sent, each refusal naming the flag.
func TestClusterFlagsRefuseBeforeAnyRequest(t *testing.T) {
	kubeconfig := offlineKubeconfig(t)
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"no kubeconfig", []string{"--kubeconfig", filepath.Join(t.TempDir(), "none"), "--target", "statefulset/web"}, "loading kubeconfig"},
		{"no target", []string{"--kubeconfig", kubeconfig}, "--target is required"},
		{"an unknown kind", []string{"--kubeconfig", kubeconfig, "--target", "cronjob/web"}, `--target "cronjob/web"`},
		{"no name", []string{"--kubeconfig", kubeconfig, "--target", "statefulset"}, "give KIND/NAME"},
		{"a name no object can have", []string{"--kubeconfig", kubeconfig, "--target", "statefulset/web/extra"}, `"web/extra" is not a valid name`},
		{"pods without a selector", []string{"--kubeconfig", kubeconfig, "--target", "pods"}, "--target pods needs --selector"},
		{"a selector of a workload", []string{"--kubeconfig", kubeconfig, "--target", "statefulset/web", "-l", "app=web"}, "--selector goes with --target pods only"},
		{"an unknown output", []string{"--kubeconfig", kubeconfig, "--target", "statefulset/web", "-o", "wide"}, `--output "wide"`},
		{"no rate", []string{"--kubeconfig", kubeconfig, "--target", "statefulset/web", "--kube-api-qps", "0"}, "--kube-api-qps and --kube-api-burst must be positive"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := runRoot(t, append([]string{"status"}, tt.args...)...)
			if exitCode(err) != exitBadInput || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("status %q: %v (exit %d), want bad input containing %q", tt.args, err, exitCode(err), tt.want)
			}
		})
	}
}

func TestGateControllerWithoutAKubeconfigIsBadInput(t *testing.T) {
	_, _, err := runRoot(t, "gate-controller", "--kubeconfig", filepath.Join(t.TempDir(), "none"))
	if exitCode(err) != exitBadInput || !strings.Contains(err.Error(), "loading kubeconfig") {
		t.Errorf("gate-controller: %v (exit %d), want bad input loading the kubeconfig", err, exitCode(err))
	}
}

func TestPrintStatus(t *testing.T) {
	st := rollout.Status{Phase: rollout.PhaseRolledBack, Reason: rollout.ReasonPodFailed, Message: "pod web-1 failed", Updated: 1}
	tests := []struct {
		name, format string
		st           rollout.Status
		want         string
	}{
		{"with a reason", "text", st, "RolledBack (PodFailed): pod web-1 failed\n"},
		{"without", "text", rollout.Status{Phase: rollout.PhaseSucceeded, Message: "2 pods updated"}, "Succeeded: 2 pods updated\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out bytes.Buffer
			if err := printStatus(&out, tt.format, tt.st); err != nil || out.String() != tt.want {
				t.Errorf("printed %q (%v), want %q", out.String(), err, tt.want)
			}
		})
	}
	t.Run("JSON", func(t *testing.T) {
		var out bytes.Buffer
		if err := printStatus(&out, "json", st); err != nil {
			t.Fatal(err)
		}
		var got rollout.Status
		if err := json.Unmarshal(out.Bytes(), &got); err != nil || got.Phase != st.Phase || got.Reason != st.Reason || got.Message != st.Message || got.Updated != 1 {
			t.Errorf("printed %s (%v), want %+v", out.String(), err, st)
		}
	})
}

// TestNotifyURLRefusedBeforeAnyRequest: run and rollback refuse a --notify-url that is no http or
// https URL before a request is sent, without quoting it (it may carry a secret).
func TestNotifyURLRefusedBeforeAnyRequest(t *testing.T) {
	kubeconfig := offlineKubeconfig(t)
	for _, command := range [][]string{{"run", "--image", "app=reg/app:v2"}, {"rollback"}} {
		args := append(command, "--kubeconfig", kubeconfig, "--target", "statefulset/web", "--notify-url", "ftp://hooks.example/s3cr3t")
		_, _, err := runRoot(t, args...)
		if exitCode(err) != exitBadInput || !strings.Contains(err.Error(), "--notify-url") || strings.Contains(err.Error(), "s3cr3t") {
			t.Errorf("%v: %v (exit %d), want bad input naming --notify-url, without the URL", args, err, exitCode(err))
		}
	}
}

// TestRunDryRunFlag: run's --dry-run takes kubectl's values, none, client and server; any other
// is bad input before any request (the kubeconfig here names no server); client prints what plan
// prints and sends nothing. resume has no dry run.
func TestRunDryRunFlag(t *testing.T) {
	offline := offlineKubeconfig(t)
	_, _, err := runRoot(t, "run", "--kubeconfig", offline, "--target", "statefulset/web", "--image", "app=reg/app:v2", "--dry-run", "true")
	if exitCode(err) != exitBadInput || !strings.Contains(err.Error(), `--dry-run "true": want none, client or server`) {
		t.Errorf("--dry-run true: %v (exit %d), want bad input naming the values", err, exitCode(err))
	}
	if _, _, err := runRoot(t, "resume", "--kubeconfig", offline, "--target", "statefulset/web", "--dry-run", "server"); exitCode(err) != exitBadInput || !strings.Contains(err.Error(), "unknown flag") {
		t.Errorf("resume --dry-run: %v, want an unknown flag", err)
	}
	// The fake API server answers only reads: a write would fail the command.
	out, stderr, err := runRoot(t, "run", "--kubeconfig", observedWeb(t), "--target", "statefulset/web", "--image", "app=reg/app:v2",
		"--batches", "1,100%", "--pin-digests", "never", "--dry-run=client")
	if err != nil {
		t.Fatalf("--dry-run=client: %v\n%s", err, stderr)
	}
	want := []string{"StatefulSet shop/web: app=reg/app:v1 -> app=reg/app:v2", "batch 1 (up to 1 pods): [web-1]", "batch 2 (up to 2 pods): [web-0]"}
	if got := words(out); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("printed:\n%s\nwant plan's:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
