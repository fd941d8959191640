package rollout_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/inplace-rollout/inplace-rollout/test/integration/cluster"
)

// denyImageChange makes the API server refuse, by a ValidatingAdmissionPolicy as a cluster's
// owner might set, every update of a pod of ns that puts container "app" on to (to set) or takes
// it off from (to empty). It returns once a dry run of such a change on pod is refused, and
// removes the policy when the test ends; remove removes it earlier, and returns once that change
// goes through again.
func denyImageChange(t *testing.T, ns, pod, from, to string) (remove func()) {
	t.Helper()
	name := "deny-" + ns
	image := func(obj string) string {
		return fmt.Sprintf(`%s.spec.containers.filter(c, c.name == "app").map(c, c.image)`, obj)
	}
	var expr string
	if to != "" {
		expr = fmt.Sprintf(`!(%s == [%q] && %s != [%q])`, image("object"), to, image("oldObject"), to)
	} else {
		expr = fmt.Sprintf(`!(%s == [%q] && %s != [%q])`, image("oldObject"), from, image("object"), from)
	}
	bindPodUpdatePolicy(t, name, ns, expr, "image changes of app are frozen by the cluster's policy")
	probe := to
	if probe == "" {
		probe = appV3
	}
	refused := refusesImage(ns, pod, probe)
	del := func() { deletePodUpdatePolicy(t, name) }
	t.Cleanup(del)
	cluster.WaitFor(t, 30*time.Second, "the admission policy to refuse a change of "+pod, refused)
	return func() {
		t.Helper()
		del()
		cluster.WaitFor(t, 30*time.Second, "the admission policy to be gone", func(ctx context.Context) (bool, error) {
			r, err := refused(ctx)
			return !r, err
		})
	}
}

// TestRefusedRequests: a request the API server refuses for good (here an admission policy) is
// not retried, and the exit code says what it left: a rollback refused mid-way is incomplete
// (exit 3), a rollout refused after it updated pods is left in flight (exit 3, not exit 2's
// "nothing changed"), each with how to go on; once the cause is gone, the same command finishes.
func TestRefusedRequests(t *testing.T) {
	for _, tc := range []struct {
		name string
		// prepare takes the StatefulSet web to where the refused command starts, and refuses it.
		prepare func(t *testing.T, ns string) (remove func())
		// args is the refused command, and again the one that finishes once the cause is gone.
		args []string
		want []string
	}{
		{
			name: "rollback",
			prepare: func(t *testing.T, ns string) func() {
				if r := runCLI(t, "run", "-n", ns, "--target", "statefulset/web", "--image", "app="+appV2); r.Code != 0 {
					t.Fatalf("run: %s", r)
				}
				return denyImageChange(t, ns, "web-0", appV2, "")
			},
			args: []string{"rollback", "--target", "statefulset/web"},
			want: []string{"rollback incomplete", "frozen by the cluster's policy", "run `inplace-rollout rollback` again"},
		},
		{
			name: "rollout after it updated a pod",
			prepare: func(t *testing.T, ns string) func() {
				if r := runCLI(t, "run", "-n", ns, "--target", "statefulset/web", "--image", "app="+appV2, "--up-to", "1"); r.Code != 0 {
					t.Fatalf("run --up-to 1: %s", r)
				}
				var onV1 string
				for _, p := range listPods(t, ns, "app=web") {
					if p.Spec.Containers[0].Image == appV1 {
						onV1 = p.Name
					}
				}
				return denyImageChange(t, ns, onV1, "", appV2)
			},
			args: []string{"run", "--target", "statefulset/web", "--image", "app=" + appV2},
			want: []string{"frozen by the cluster's policy", "is left in flight (1 pods updated, StatefulSet NS/web still held)",
				"run the same command again to resume, or `inplace-rollout rollback` to undo"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ns := env.Namespace(t)
			createStatefulSet(t, ns, "web", 3)
			remove := tc.prepare(t, ns)
			r := runCLI(t, append(tc.args, "-n", ns)...)
			if r.Code != 3 || contains(r.Stderr, "nothing changed") || contains(r.Stderr, "msg=retrying") {
				t.Fatalf("%s\nwant exit 3 at once, without retries and not saying nothing changed", r)
			}
			for _, w := range tc.want {
				if w = strings.ReplaceAll(w, "NS", ns); !contains(r.Stderr, w) {
					t.Errorf("stderr does not say %q:\n%s", w, r.Stderr)
				}
			}
			if lock := stsLock(t, ns, "web"); !contains(lock, `"phase":"Progressing"`) && !contains(lock, `"phase":"RollingBack"`) {
				t.Errorf("lock %s; want the rollout or its rollback left in flight", lock)
			}

			remove()
			if r := runCLI(t, append(tc.args, "-n", ns)...); r.Code != 0 {
				t.Fatalf("once the policy is gone: %s", r)
			}
		})
	}
}

// bindPodUpdatePolicy creates the ValidatingAdmissionPolicy name, which refuses with message every
// update of a pod of ns for which the CEL expression expr is false, and binds it with
// validationActions Deny, as a cluster's owner might; deletePodUpdatePolicy removes both.
func bindPodUpdatePolicy(t *testing.T, name, ns, expr, message string) {
	t.Helper()
	policy := &admissionv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: ptr.To(admissionv1.Fail),
			MatchConstraints: &admissionv1.MatchResources{
				NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": ns}},
				ResourceRules: []admissionv1.NamedRuleWithOperations{{RuleWithOperations: admissionv1.RuleWithOperations{
					Operations: []admissionv1.OperationType{admissionv1.Update},
					Rule:       admissionv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"}},
				}}},
			},
			Validations: []admissionv1.Validation{{Expression: expr, Message: message}},
		},
	}
	binding := &admissionv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       admissionv1.ValidatingAdmissionPolicyBindingSpec{PolicyName: name, ValidationActions: []admissionv1.ValidationAction{admissionv1.Deny}},
	}
	ctx := context.Background()
	api := env.Client.AdmissionregistrationV1()
	if _, err := api.ValidatingAdmissionPolicies().Create(ctx, policy, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := api.ValidatingAdmissionPolicyBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// deletePodUpdatePolicy removes the policy and binding of bindPodUpdatePolicy; either gone
// already is fine.
func deletePodUpdatePolicy(t *testing.T, name string) {
	t.Helper()
	ctx := context.Background()
	api := env.Client.AdmissionregistrationV1()
	for _, err := range []error{
		api.ValidatingAdmissionPolicyBindings().Delete(ctx, name, metav1.DeleteOptions{}),
		api.ValidatingAdmissionPolicies().Delete(ctx, name, metav1.DeleteOptions{}),
	} {
		if err != nil && !apierrors.IsNotFound(err) {
			t.Error(err)
		}
	}
}

// refusesImage is a condition for cluster.WaitFor: whether admission refuses a dry run that puts
// container app of pod on image. Policies take effect a moment after they are created.
func refusesImage(ns, pod, image string) func(context.Context) (bool, error) {
	patch := []byte(fmt.Sprintf(`{"spec":{"containers":[{"name":"app","image":%q}]}}`, image))
	return func(ctx context.Context) (bool, error) {
		_, err := env.Client.CoreV1().Pods(ns).Patch(ctx, pod, types.StrategicMergePatchType, patch, metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}})
		return apierrors.IsInvalid(err) || apierrors.IsForbidden(err), nil
	}
}
