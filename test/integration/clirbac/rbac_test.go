package clirbac_test

import (
	"context"
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/inplace-rollout/inplace-rollout/test/integration/clitest"
	"github.com/inplace-rollout/inplace-rollout/test/integration/cluster"
)

// bindCLIRole creates namespace with the ServiceAccount serviceAccount bound only to
// config/cli's Role there, and returns a kubeconfig holding a token of that ServiceAccount
// (TokenRequest) and that Role's rules.
func bindCLIRole(t *testing.T) (kubeconfig string, rules []rbacv1.PolicyRule) {
	t.Helper()
	ctx := context.Background()
	root, err := cluster.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	role, err := cluster.ReadRole(filepath.Join(root, "config", "cli", "role.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := env.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating namespace %s: %v", namespace, err)
	}
	t.Cleanup(func() {
		_ = env.Client.CoreV1().Namespaces().Delete(context.Background(), namespace, metav1.DeleteOptions{})
	})
	if _, err := env.Client.CoreV1().ServiceAccounts(namespace).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: serviceAccount}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating ServiceAccount %s/%s: %v", namespace, serviceAccount, err)
	}
	role.Namespace = namespace
	if _, err := env.Client.RbacV1().Roles(namespace).Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating Role %s/%s: %v", namespace, role.Name, err)
	}
	binding := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: role.Name, Namespace: namespace},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: serviceAccount, Namespace: namespace}},
	}
	if _, err := env.Client.RbacV1().RoleBindings(namespace).Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating RoleBinding %s/%s: %v", namespace, binding.Name, err)
	}
	pullSecret(t)
	kubeconfig, err = env.ServiceAccountKubeconfig(ctx, namespace, serviceAccount, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return kubeconfig, role.Rules
}

// pullSecret gives the namespace's default ServiceAccount, which the pods run as, an
// imagePullSecret, as a private registry needs: digest pinning reads it.
func pullSecret(t *testing.T) {
	t.Helper()
	auth := base64.StdEncoding.EncodeToString([]byte("puller:pw-2b7e"))
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "pull", Namespace: namespace},
		Type:       corev1.SecretTypeDockerConfigJson,
		Data:       map[string][]byte{corev1.DockerConfigJsonKey: []byte(`{"auths":{"registry.example":{"auth":"` + auth + `"}}}`)},
	}
	if _, err := env.Client.CoreV1().Secrets(namespace).Create(context.Background(), secret, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating Secret %s/pull: %v", namespace, err)
	}
	// The ServiceAccount controller creates default shortly after the namespace.
	cluster.WaitFor(t, time.Minute, "ServiceAccount "+namespace+"/default with the imagePullSecret pull", func(ctx context.Context) (bool, error) {
		sa, err := env.Client.CoreV1().ServiceAccounts(namespace).Get(ctx, "default", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		sa.ImagePullSecrets = []corev1.LocalObjectReference{{Name: "pull"}}
		_, err = env.Client.CoreV1().ServiceAccounts(namespace).Update(ctx, sa, metav1.UpdateOptions{})
		return err == nil, nil
	})
}

// promSecret holds the Prometheus password the analysis reads, under the key password.
const promSecret = "prom"

// analysisConfig writes an analysis config for the cluster's Prometheus whose password comes
// from the Secret promSecret, with extra YAML appended, and returns its path.
func analysisConfig(t *testing.T, extra string) string {
	t.Helper()
	cfg := fmt.Sprintf(`prometheus:
  address: %q
  basicAuth: {username: %q, passwordSecret: {name: %s, key: password}}
interval: 1s
count: 2
window: 5s
%s`, env.PrometheusURL, promUser, promSecret, extra)
	path := filepath.Join(t.TempDir(), "analysis.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestCLIRoleIsLeastPrivilege runs plan, run, status, resume and rollback as a ServiceAccount
// bound only to config/cli's Role, over a StatefulSet, a DaemonSet, a Deployment (with
// --pre-pull), label-selected pods behind the readiness gate and StatefulSets analysed with
// Prometheus credentials from a Secret, every pod written by someone else meanwhile, and checks
// the Role against the calls they made: every command succeeds, every call is granted, and
// every rule is needed by a command the table needs names, which made the call.
func TestCLIRoleIsLeastPrivilege(t *testing.T) {
	kubeconfig, rules := bindCLIRole(t)
	clitest.CreateStatefulSet(t, env, namespace, "web", 2)
	clitest.CreateDaemonSet(t, env, namespace, "agent")
	clitest.CreateDeployment(t, env, namespace, "api", 2)
	clitest.CreatePods(t, env, namespace, "loose", 2, true)
	// Prometheus sees their traffic while the commands before their analyses run.
	clitest.CreateStatefulSet(t, env, namespace, "analysed", 2)
	clitest.CreateStatefulSet(t, env, namespace, "paused", 2)
	clitest.CreateStatefulSetWith(t, env, namespace, "resized", 2, func(tmpl *corev1.PodTemplateSpec) {
		tmpl.Spec.Containers[0].Resources = corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m")},
			Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("200m")},
		}
	})
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: promSecret, Namespace: namespace},
		Data:       map[string][]byte{"password": []byte(promPassword)},
	}
	if _, err := env.Client.CoreV1().Secrets(namespace).Create(context.Background(), secret, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating Secret %s/%s: %v", namespace, promSecret, err)
	}
	v1Digest := cluster.ContainerStatus(&clitest.ListPods(t, env, namespace, "app=web")[0], "app").ImageID
	passes := analysisConfig(t, "")
	// No pod serves a billion requests a second: the traffic check is Inconclusive, and the
	// rollout pauses until resume accepts the batch.
	inconclusive := analysisConfig(t, "initialDelay: 0s\ncount: 1\nchecks: {traffic: {minRate: 1e9}}\n")

	short := []string{"-n", namespace, "--batches", "1,100%", "--soak", "1s", "--timeout", "2m"}
	analysed := func(target, config string) []string {
		return []string{"-n", namespace, "--target", target, "--image", "app=" + clitest.AppV2, "--batches", "100%", "--timeout", "2m", "--analysis", config}
	}
	commands := []struct {
		// op names the command in the table needs.
		op   string
		args []string
		// app is the target's label and image the image its pods run afterwards.
		app, image string
		// code is the command's exit code: 4 when an analysis pauses the rollout.
		code int
	}{
		{"plan web", []string{"plan", "-n", namespace, "--target", "statefulset/web", "--image", "app=" + clitest.AppV2}, "web", clitest.AppV1, 0},
		{"run web", append([]string{"run", "--target", "statefulset/web", "--image", "app=" + clitest.AppV2}, short...), "web", clitest.AppV2, 0},
		{"status web", []string{"status", "-n", namespace, "--target", "statefulset/web"}, "web", clitest.AppV2, 0},
		{"rollback web", []string{"rollback", "-n", namespace, "--target", "statefulset/web", "--timeout", "2m"}, "web", v1Digest, 0},
		{"run agent", append([]string{"run", "--target", "daemonset/agent", "--image", "app=" + clitest.AppV2}, short...), "agent", clitest.AppV2, 0},
		{"run api --pre-pull", append([]string{"run", "--target", "deployment/api", "--image", "app=" + clitest.AppV2, "--pre-pull"}, short...), "api", clitest.AppV2, 0},
		{"run loose", append([]string{"run", "--target", "pods", "-l", "app=loose", "--image", "app=" + clitest.AppV2, "--grace", "1s"}, short...), "loose", clitest.AppV2, 0},
		{"status loose", []string{"status", "-n", namespace, "--target", "pods", "-l", "app=loose"}, "loose", clitest.AppV2, 0},
		// Another selector takes every pod of the first: its run deletes the first one's lock,
		// which records nothing to act on any longer.
		{"run loose,tier=web", append([]string{"run", "--target", "pods", "-l", "app=loose,tier=web", "--image", "app=" + clitest.AppV3, "--grace", "1s"}, short...), "loose", clitest.AppV3, 0},
		{"run analysed --analysis", append([]string{"run"}, analysed("statefulset/analysed", passes)...), "analysed", clitest.AppV2, 0},
		{"run paused --analysis", append([]string{"run"}, analysed("statefulset/paused", inconclusive)...), "paused", clitest.AppV2, 4},
		{"resume paused", append([]string{"resume"}, analysed("statefulset/paused", inconclusive)...), "paused", clitest.AppV2, 0},
		{"run resized --requests", append([]string{"run", "--target", "statefulset/resized", "--requests", "app=cpu=150m"}, short...), "resized", clitest.AppV1, 0},
	}
	// Someone else writes every pod meanwhile, as kubelets do: the command's pod writes, which
	// carry the resourceVersion they were decided on, meet conflicts and read the pod again.
	stop := clitest.ChurnPods(t, env, namespace, "", 20*time.Millisecond)
	// The calls of each command: the audit log, written before each request returns, read
	// after each command, less what it held before.
	opCalls := map[string]map[cluster.APICall]int{}
	before := map[cluster.APICall]int{}
	for _, c := range commands {
		r := clitest.RunAs(t, kubeconfig, cli, c.args...)
		if strings.Contains(r.Stdout+r.Stderr, promPassword) {
			t.Errorf("inplace-rollout %s: the Prometheus password shows in the output", strings.Join(c.args, " "))
		}
		after, err := env.AuditedCalls(cliUser)
		if err != nil {
			t.Fatal(err)
		}
		opCalls[c.op] = map[cluster.APICall]int{}
		for call, n := range after {
			if d := n - before[call]; d > 0 {
				opCalls[c.op][call] = d
			}
		}
		before = after
		if r.Code != c.code {
			t.Errorf("inplace-rollout %s as %s: %s\nwant exit %d", strings.Join(c.args, " "), cliUser, r, c.code)
			continue
		}
		for _, p := range clitest.ListPods(t, env, namespace, "app="+c.app) {
			if img := p.Spec.Containers[0].Image; img != c.image {
				t.Errorf("after inplace-rollout %s: pod %s on %s, want %s", strings.Join(c.args, " "), p.Name, img, c.image)
			}
		}
		// The analyses measured, with the Secret's password: a query Prometheus refused would
		// be an Error, never a Pass nor an Inconclusive.
		switch c.op {
		case "run analysed --analysis":
			if !strings.Contains(r.Stderr, `msg="analysis passed"`) {
				t.Errorf("inplace-rollout %s: no analysis passed:\n%s", strings.Join(c.args, " "), r)
			}
		case "run paused --analysis":
			if !strings.Contains(r.Stdout, "traffic Inconclusive") {
				t.Errorf("inplace-rollout %s: not paused on the traffic check:\n%s", strings.Join(c.args, " "), r)
			}
		}
	}

	stop()

	calls := before
	if len(calls) == 0 {
		t.Fatal("the audit log holds no call of " + cliUser)
	}
	problems := cluster.CompareRole(nil, "", rules, calls)
	problems = append(problems, cluster.CheckNeeds(rules, needs(), opCalls)...)
	var all []string
	for c, n := range calls {
		all = append(all, fmt.Sprintf("%s x%d", c, n))
		// A Role grants nothing cluster-wide, whatever its rules say.
		if !c.Namespaced {
			problems = append(problems, fmt.Sprintf("cluster-wide call: %s was called %d times; a Role cannot grant it", c, n))
		}
	}
	sort.Strings(all)
	var byOp []string
	for _, c := range commands {
		var made []string
		for call, n := range opCalls[c.op] {
			made = append(made, fmt.Sprintf("%s x%d", call, n))
		}
		sort.Strings(made)
		byOp = append(byOp, c.op+":\n    "+strings.Join(made, "\n    "))
	}
	if len(problems) > 0 {
		t.Errorf("config/cli/role.yaml against the calls the command made:\n%s\nevery call of %s, by command:\n  %s",
			strings.Join(problems, "\n"), cliUser, strings.Join(byOp, "\n  "))
		return
	}
	t.Logf("config/cli/role.yaml grants exactly the calls the command made:\n  %s\neach grant, and the commands whose call it allows (forbidden without it):\n%s",
		strings.Join(all, "\n  "), cluster.FormatNeeds(needs()))
}

// needs names, for each grant of config/cli/role.yaml, the commands of
// TestCLIRoleIsLeastPrivilege that make the call the grant allows, which without it is
// forbidden: the command fails, or, for Events and the reads of digest pinning, goes on
// without them.
func needs() []cluster.Need {
	need := cluster.NeedIn
	// A pod is read again only when a write meets a conflict, which ChurnPods provokes in
	// whichever command writes pods at the time.
	podWriters := []string{"run web", "rollback web", "run agent", "run api --pre-pull", "run loose", "run loose,tier=web", "run analysed --analysis", "run paused --analysis"}
	return []cluster.Need{
		need("get", "apps", "statefulsets", "", "plan web"),
		need("patch", "apps", "statefulsets", "", "run web"),
		// resume accepts the paused batch on the StatefulSet's lock.
		need("patch", "apps", "statefulsets", "", "resume paused"),
		need("get", "apps", "daemonsets", "", "run agent"),
		need("patch", "apps", "daemonsets", "", "run agent"),
		need("list", "apps", "controllerrevisions", "", "run agent"),
		need("get", "apps", "deployments", "", "run api --pre-pull"),
		need("patch", "apps", "deployments", "", "run api --pre-pull"),
		need("list", "apps", "replicasets", "", "run api --pre-pull"),
		need("patch", "apps", "replicasets", "", "run api --pre-pull"),
		need("get", "", "pods", "", podWriters...),
		need("list", "", "pods", "", "plan web"),
		// Without it a command steps at intervals instead of as soon as the pods change.
		need("watch", "", "pods", "", "run web", "rollback web"),
		need("patch", "", "pods", "", "run web"),
		need("create", "", "pods", "", "run api --pre-pull"),
		need("delete", "", "pods", "", "run api --pre-pull"),
		need("patch", "", "pods", "status", "run loose"),
		need("patch", "", "pods", "resize", "run resized --requests"),
		need("get", "", "configmaps", "", "status loose"),
		need("list", "", "configmaps", "", "run loose,tier=web"),
		need("create", "", "configmaps", "", "run loose"),
		need("update", "", "configmaps", "", "run loose"),
		need("delete", "", "configmaps", "", "run loose,tier=web"),
		need("get", "", "serviceaccounts", "", "run web"),
		// The pods' imagePullSecrets, for --pin-digests, and the analysis' Prometheus password.
		need("get", "", "secrets", "", "run web"),
		need("get", "", "secrets", "", "run analysed --analysis"),
		need("create", "events.k8s.io", "events", "", "run web"),
	}
}
