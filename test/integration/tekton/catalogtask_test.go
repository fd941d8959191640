package tekton_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/yaml"

	"github.com/inplace-rollout/inplace-rollout/test/integration/clitest"
	"github.com/inplace-rollout/inplace-rollout/test/integration/cluster"
)

// catalogTaskDir is the catalog Task's directory, from this package's.
const catalogTaskDir = "../../../tekton/task/inplace-rollout/0.1"

// applyFile creates every object of a multi-document YAML file in namespace ns.
func applyFile(t *testing.T, client dynamic.Interface, ns, path string) []*unstructured.Unstructured {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	groups, err := restmapper.GetAPIGroupResources(env.Client.Discovery())
	if err != nil {
		t.Fatalf("discovering the API's resources: %v", err)
	}
	mapper := restmapper.NewDiscoveryRESTMapper(groups)
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	var created []*unstructured.Unstructured
	for {
		var obj unstructured.Unstructured
		if err := dec.Decode(&obj.Object); errors.Is(err, io.EOF) {
			return created
		} else if err != nil {
			t.Fatalf("decoding %s: %v", path, err)
		}
		if len(obj.Object) == 0 {
			continue
		}
		gvk := obj.GroupVersionKind()
		m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			t.Fatalf("%s: no resource for %s: %v", path, gvk, err)
		}
		got, err := client.Resource(m.Resource).Namespace(ns).Create(context.Background(), &obj, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("%s: creating %s %s/%s: %v", path, gvk.Kind, ns, obj.GetName(), err)
		}
		created = append(created, got)
	}
}

// TestCatalogTaskPodRunsTheCommandByDigest applies the catalog Task, its tests' ServiceAccount
// and Role, and a TaskRun of it, and checks the Pod the real Tekton controller makes for it: our
// image by digest, run as the TaskRun's ServiceAccount, the command given every param as a whole
// argument, with the Task's defaults for those the TaskRun leaves out. The simulated cluster runs
// no kubelet for it, so the step itself does not run here.
func TestCatalogTaskPodRunsTheCommandByDigest(t *testing.T) {
	client := dynamicClient(t)
	ns := env.Namespace(t)
	task := applyFile(t, client, ns, filepath.Join(catalogTaskDir, "inplace-rollout.yaml"))
	applyFile(t, client, ns, filepath.Join(catalogTaskDir, "tests", "resources.yaml"))
	steps, _, _ := unstructured.NestedSlice(task[0].Object, "spec", "steps")
	if len(steps) != 1 {
		t.Fatalf("the Task has %d steps, want 1", len(steps))
	}
	image, _ := steps[0].(map[string]any)["image"].(string)
	if !strings.Contains(image, "@sha256:") {
		t.Fatalf("the Task's step image %q is not pinned by digest", image)
	}

	// The analysis text carries what a shell would mangle: it must arrive as written.
	const analysisText = "prometheus: {address: \"http://prometheus:9090\"}\ncount: 2 # $(echo no shell) `x` $HOME\n"
	tests := []struct {
		name   string
		params string
		want   []string
	}{
		{
			name: "defaults",
			params: `
    - {name: target, value: statefulset/web}
    - {name: images, value: ["app=reg.example/app:v2"]}`,
			want: []string{"run", "--namespace=", "--target=statefulset/web", "--selector=", "--resources=", "--hooks=", "--batches=100%", "--max-unavailable=1", "--grace=0s",
				"--allow-unready=false", "--soak=0s", "--timeout=10m",
				"--analysis-config=", "--prometheus=", "--on-inconclusive=fail", "--pin-digests=auto", "--pre-pull=false", "--on-terminate=rollback", "--results-dir=/tekton/results", "--",
				"app=reg.example/app:v2"},
		},
		{
			name: "resources alone",
			params: `
    - {name: target, value: statefulset/web}
    - {name: resources, value: "{app: {requests: {cpu: 200m}, limits: {cpu: 400m}}}"}`,
			want: []string{"run", "--namespace=", "--target=statefulset/web", "--selector=", "--resources={app: {requests: {cpu: 200m}, limits: {cpu: 400m}}}", "--hooks=",
				"--batches=100%", "--max-unavailable=1", "--grace=0s", "--allow-unready=false", "--soak=0s", "--timeout=10m",
				"--analysis-config=", "--prometheus=", "--on-inconclusive=fail", "--pin-digests=auto", "--pre-pull=false", "--on-terminate=rollback", "--results-dir=/tekton/results", "--"},
		},
		{
			name: "every param",
			params: fmt.Sprintf(`
    - {name: namespace, value: %s}
    - {name: target, value: pods}
    - {name: selector, value: "app=agent,tier in (edge)"}
    - {name: images, value: ["app=reg.example/app:v2", "sidecar=reg.example/side@sha256:%s"]}
    - {name: resources, value: "{sidecar: {limits: {memory: 64Mi}}}"}
    - {name: hooks, value: "{postUpdate: {handshake: {condition: example.com/registered}}}"}
    - {name: batches, value: "1,50%%,100%%"}
    - {name: max-unavailable, value: "25%%"}
    - {name: grace, value: 5s}
    - {name: allow-unready, value: "true"}
    - {name: soak, value: 30s}
    - {name: timeout, value: 3m}
    - {name: analysis, value: %q}
    - {name: prometheus-url, value: "http://prom.example:9090"}
    - {name: on-inconclusive, value: pause}
    - {name: pin-digests, value: always}
    - {name: pre-pull, value: "true"}
    - {name: on-terminate, value: leave}`, ns, strings.Repeat("ab", 32), analysisText),
			want: []string{"run", "--namespace=" + ns, "--target=pods", "--selector=app=agent,tier in (edge)", "--resources={sidecar: {limits: {memory: 64Mi}}}",
				"--hooks={postUpdate: {handshake: {condition: example.com/registered}}}", "--batches=1,50%,100%",
				"--max-unavailable=25%", "--grace=5s", "--allow-unready=true", "--soak=30s", "--timeout=3m",
				"--analysis-config=" + analysisText, "--prometheus=http://prom.example:9090", "--on-inconclusive=pause", "--pin-digests=always", "--pre-pull=true",
				"--on-terminate=leave", "--results-dir=/tekton/results", "--", "app=reg.example/app:v2", "sidecar=reg.example/side@sha256:" + strings.Repeat("ab", 32)},
		},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			name := fmt.Sprintf("rollout-%d", i)
			create(t, client, taskRunsGVR, ns, fmt.Sprintf(`
apiVersion: tekton.dev/v1
kind: TaskRun
metadata:
  name: %s
spec:
  taskRef: {name: inplace-rollout}
  serviceAccountName: inplace-rollout
  params:%s
`, name, tt.params))
			pod := taskRunPod(t, client, ns, name)
			if pod.Spec.ServiceAccountName != "inplace-rollout" {
				t.Errorf("pod %s/%s runs as ServiceAccount %q, want inplace-rollout", ns, pod.Name, pod.Spec.ServiceAccountName)
			}
			step := stepContainer(t, pod)
			if step.Image != image {
				t.Errorf("step image %q, want the Task's %q", step.Image, image)
			}
			if sc := step.SecurityContext; sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot {
				t.Errorf("step security context %+v, want runAsNonRoot", sc)
			}
			if got := commandArgs(t, step); !slices.Equal(got, tt.want) {
				t.Errorf("the command's arguments:\n got %q\nwant %q", got, tt.want)
			}
		})
	}
}

// TestCatalogTaskRolesAreTheCLIs: the Role of the Task's sample and of its tests grants what
// config/cli/role.yaml does, which test/integration/clirbac checks against the calls of every
// command and flag the Task's params reach (pre-pull's puller pods and ServiceAccounts, the
// watch of pods, a selector's lock ConfigMaps), from the audit log; nothing more.
func TestCatalogTaskRolesAreTheCLIs(t *testing.T) {
	root, err := cluster.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	cli, err := cluster.ReadRole(filepath.Join(root, "config", "cli", "role.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{filepath.Join("samples", "rbac.yaml"), filepath.Join("tests", "resources.yaml")} {
		data, err := os.ReadFile(filepath.Join(catalogTaskDir, f))
		if err != nil {
			t.Fatal(err)
		}
		var found bool
		for doc := range strings.SplitSeq(string(data), "\n---\n") {
			var role rbacv1.Role
			if err := yaml.Unmarshal([]byte(doc), &role); err != nil {
				t.Fatalf("reading %s: %v", f, err)
			}
			if role.Kind != "Role" {
				continue
			}
			found = true
			if !reflect.DeepEqual(role.Rules, cli.Rules) {
				t.Errorf("the Role of %s grants\n%v\nwant config/cli/role.yaml's\n%v", f, role.Rules, cli.Rules)
			}
		}
		if !found {
			t.Errorf("%s has no Role", f)
		}
	}
}

// stepContainer is the pod's container of the Task's one step.
func stepContainer(t *testing.T, pod *corev1.Pod) *corev1.Container {
	t.Helper()
	for i := range pod.Spec.Containers {
		if pod.Spec.Containers[i].Name == "step-rollout" {
			return &pod.Spec.Containers[i]
		}
	}
	t.Fatalf("pod %s/%s has no container step-rollout: %v", pod.Namespace, pod.Name, pod.Spec.Containers)
	return nil
}

// commandArgs are the arguments Tekton gives our command. Its entrypoint wraps the step:
// -entrypoint names our command, and what follows the next "--" is the command's arguments,
// params substituted.
func commandArgs(t *testing.T, step *corev1.Container) []string {
	t.Helper()
	args := step.Args
	at := slices.Index(args, "-entrypoint")
	if at < 0 || at+1 >= len(args) || args[at+1] != "/usr/local/bin/inplace-rollout" {
		t.Fatalf("step args %q: want -entrypoint /usr/local/bin/inplace-rollout", args)
	}
	sep := slices.Index(args[at:], "--")
	if sep < 0 {
		t.Fatalf("step args %q: no -- before the command's arguments", args)
	}
	return args[at+sep+1:]
}

// TestCatalogTaskStepRollsAStatefulSet runs the command line Tekton made for the Task's step,
// params substituted by Tekton itself, as the step would: as the TaskRun's ServiceAccount,
// bound only to the Role of the Task's tests, in the TaskRun's namespace. It rolls a
// StatefulSet in place and writes the result files the Task declares.
func TestCatalogTaskStepRollsAStatefulSet(t *testing.T) {
	client := dynamicClient(t)
	ns := env.Namespace(t)
	clitest.CreateStatefulSet(t, env, ns, "web", 3)
	applyFile(t, client, ns, filepath.Join(catalogTaskDir, "inplace-rollout.yaml"))
	applyFile(t, client, ns, filepath.Join(catalogTaskDir, "tests", "resources.yaml"))
	create(t, client, taskRunsGVR, ns, fmt.Sprintf(`
apiVersion: tekton.dev/v1
kind: TaskRun
metadata:
  name: rollout
spec:
  taskRef: {name: inplace-rollout}
  serviceAccountName: inplace-rollout
  params:
    - {name: target, value: statefulset/web}
    - {name: images, value: [%q]}
    - {name: batches, value: "1,100%%"}
`, "app="+clitest.AppV2))
	args := commandArgs(t, stepContainer(t, taskRunPod(t, client, ns, "rollout")))
	resultsDir := filepath.Join(t.TempDir(), "results")
	at := slices.Index(args, "--results-dir=/tekton/results")
	if at < 0 {
		t.Fatalf("the command's arguments %q lack --results-dir=/tekton/results", args)
	}
	args[at] = "--results-dir=" + resultsDir

	bin, err := clitest.Build(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+serviceAccountKubeconfig(t, ns, "inplace-rollout"))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("inplace-rollout %q: %v\n%s", args, err, clitest.LastLines(stderr.String(), 15))
	}
	want := map[string]string{"phase": "Succeeded", "updated-pods": "3", "rolled-back": "0"}
	for name, value := range want {
		got, err := os.ReadFile(filepath.Join(resultsDir, name))
		if err != nil {
			t.Fatalf("result %s: %v", name, err)
		}
		if string(got) != value {
			t.Errorf("result %s = %q, want %q", name, got, value)
		}
	}
	if msg, err := os.ReadFile(filepath.Join(resultsDir, "message")); err != nil || len(msg) == 0 {
		t.Errorf("result message = %q (%v), want a message", msg, err)
	}
	for _, pod := range clitest.ListPods(t, env, ns, "app=web") {
		if img := pod.Spec.Containers[0].Image; !strings.HasPrefix(img, clitest.AppV2) {
			t.Errorf("pod %s runs %s, want %s", pod.Name, img, clitest.AppV2)
		}
	}
}

// serviceAccountKubeconfig writes a kubeconfig that authenticates as the ServiceAccount, in its
// namespace: what the step's in-cluster config gives it.
func serviceAccountKubeconfig(t *testing.T, ns, name string) string {
	t.Helper()
	tr, err := env.Client.CoreV1().ServiceAccounts(ns).CreateToken(context.Background(), name, &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("requesting a token for ServiceAccount %s/%s: %v", ns, name, err)
	}
	kc := clientcmdapi.NewConfig()
	kc.Clusters["local"] = &clientcmdapi.Cluster{Server: env.Config.Host, CertificateAuthorityData: env.Config.CAData}
	kc.AuthInfos[name] = &clientcmdapi.AuthInfo{Token: tr.Status.Token}
	kc.Contexts["local"] = &clientcmdapi.Context{Cluster: "local", AuthInfo: name, Namespace: ns}
	kc.CurrentContext = "local"
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		t.Fatal(err)
	}
	return path
}

// taskRunPod waits for the Pod Tekton makes for the TaskRun and returns it.
func taskRunPod(t *testing.T, client dynamic.Interface, ns, name string) *corev1.Pod {
	t.Helper()
	var pod *corev1.Pod
	cluster.WaitFor(t, reconcileTimeout, fmt.Sprintf("the pod of TaskRun %s/%s", ns, name), func(ctx context.Context) (bool, error) {
		tr, err := client.Resource(taskRunsGVR).Namespace(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		podName, _, _ := unstructured.NestedString(tr.Object, "status", "podName")
		if podName == "" {
			conds, _, _ := unstructured.NestedSlice(tr.Object, "status", "conditions")
			return false, fmt.Errorf("no status.podName yet; conditions %v", conds)
		}
		pod, err = env.Client.CoreV1().Pods(ns).Get(ctx, podName, metav1.GetOptions{})
		return err == nil, err
	})
	return pod
}
