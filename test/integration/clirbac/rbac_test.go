package clirbac_test

import (
	"context"
	"encoding/base64"
	"fmt"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
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

// TestCLIRoleIsLeastPrivilege runs plan, run, status and rollback as a ServiceAccount bound
// only to config/cli's Role, over a StatefulSet, a DaemonSet, a Deployment (with --pre-pull)
// and label-selected pods behind the readiness gate, every pod written by someone else
// meanwhile, and checks the Role against the calls they made: every command
// succeeds, every call is granted, and every rule served a call.
func TestCLIRoleIsLeastPrivilege(t *testing.T) {
	kubeconfig, rules := bindCLIRole(t)
	clitest.CreateStatefulSet(t, env, namespace, "web", 2)
	clitest.CreateDaemonSet(t, env, namespace, "agent")
	clitest.CreateDeployment(t, env, namespace, "api", 2)
	clitest.CreatePods(t, env, namespace, "loose", 2, true)
	v1Digest := cluster.ContainerStatus(&clitest.ListPods(t, env, namespace, "app=web")[0], "app").ImageID

	short := []string{"-n", namespace, "--batches", "1,100%", "--soak", "1s", "--timeout", "2m"}
	commands := []struct {
		args []string
		// app is the target's label and image the image its pods run afterwards.
		app, image string
	}{
		{[]string{"plan", "-n", namespace, "--target", "statefulset/web", "--image", "app=" + clitest.AppV2}, "web", clitest.AppV1},
		{append([]string{"run", "--target", "statefulset/web", "--image", "app=" + clitest.AppV2}, short...), "web", clitest.AppV2},
		{[]string{"status", "-n", namespace, "--target", "statefulset/web"}, "web", clitest.AppV2},
		{[]string{"rollback", "-n", namespace, "--target", "statefulset/web", "--timeout", "2m"}, "web", v1Digest},
		{append([]string{"run", "--target", "daemonset/agent", "--image", "app=" + clitest.AppV2}, short...), "agent", clitest.AppV2},
		{append([]string{"run", "--target", "deployment/api", "--image", "app=" + clitest.AppV2, "--pre-pull"}, short...), "api", clitest.AppV2},
		{append([]string{"run", "--target", "pods", "-l", "app=loose", "--image", "app=" + clitest.AppV2, "--grace", "1s"}, short...), "loose", clitest.AppV2},
		{[]string{"status", "-n", namespace, "--target", "pods", "-l", "app=loose"}, "loose", clitest.AppV2},
		// Another selector takes every pod of the first: its run deletes the first one's lock,
		// which records nothing to act on any longer.
		{append([]string{"run", "--target", "pods", "-l", "app=loose,tier=web", "--image", "app=" + clitest.AppV3, "--grace", "1s"}, short...), "loose", clitest.AppV3},
	}
	// Someone else writes every pod meanwhile, as kubelets do: the command's pod writes, which
	// carry the resourceVersion they were decided on, meet conflicts and read the pod again.
	stop := clitest.ChurnPods(t, env, namespace, "", 20*time.Millisecond)
	for _, c := range commands {
		r := clitest.RunAs(t, kubeconfig, cli, c.args...)
		if r.Code != 0 {
			t.Errorf("inplace-rollout %s as %s: %s", strings.Join(c.args, " "), cliUser, r)
			continue
		}
		for _, p := range clitest.ListPods(t, env, namespace, "app="+c.app) {
			if img := p.Spec.Containers[0].Image; img != c.image {
				t.Errorf("after inplace-rollout %s: pod %s on %s, want %s", strings.Join(c.args, " "), p.Name, img, c.image)
			}
		}
	}

	stop()

	calls, err := env.AuditedCalls(cliUser)
	if err != nil {
		t.Fatal(err)
	}
	if len(calls) == 0 {
		t.Fatal("the audit log holds no call of " + cliUser)
	}
	problems := cluster.CompareRole(nil, "", rules, calls)
	var all []string
	for c, n := range calls {
		all = append(all, fmt.Sprintf("%s x%d", c, n))
		// A Role grants nothing cluster-wide, whatever its rules say.
		if !c.Namespaced {
			problems = append(problems, fmt.Sprintf("cluster-wide call: %s was called %d times; a Role cannot grant it", c, n))
		}
	}
	sort.Strings(all)
	if len(problems) > 0 {
		t.Errorf("config/cli/role.yaml against the calls the command made:\n%s\nevery call of %s:\n  %s",
			strings.Join(problems, "\n"), cliUser, strings.Join(all, "\n  "))
		return
	}
	t.Logf("config/cli/role.yaml grants exactly the calls the command made:\n  %s", strings.Join(all, "\n  "))
}
