package workload

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"

	"github.com/inplace-rollout/inplace-rollout/pkg/inplace"
)

// controlledBy is the owner reference a controller sets on what it creates.
func controlledBy(kind string, name string, uid types.UID) []metav1.OwnerReference {
	return []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: kind, Name: name, UID: uid, Controller: ptr.To(true)}}
}

// runningPod is a running pod in namespace ns labelled app=web, with one container "app".
func runningPod(name, image string, labels map[string]string, owners []metav1.OwnerReference) *corev1.Pod {
	l := map[string]string{"app": "web"}
	for k, v := range labels {
		l[k] = v
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", Labels: l, OwnerReferences: owners, ResourceVersion: "1"},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: image}}},
		Status:     corev1.PodStatus{Phase: corev1.PodRunning},
	}
}

// webTemplate is a pod template with an init container "init" and containers "app" and "sidecar".
func webTemplate(app string) corev1.PodTemplateSpec {
	return corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "web"}},
		Spec: corev1.PodSpec{
			InitContainers: []corev1.Container{{Name: "init", Image: "reg/init:v1"}},
			Containers:     []corev1.Container{{Name: "app", Image: app}, {Name: "sidecar", Image: "reg/side:v1"}},
		},
	}
}

func webSelector() *metav1.LabelSelector {
	return &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}
}

// withLock sets the lock annotation on an object's metadata.
func withLock(t *testing.T, meta *metav1.ObjectMeta, lock *testLock) {
	t.Helper()
	if meta.Annotations == nil {
		meta.Annotations = map[string]string{}
	}
	meta.Annotations[LockAnnotation] = lock.encode()
}

func mustLoad(t *testing.T, client *fake.Clientset, ref Ref) Workload {
	t.Helper()
	w, err := Load(context.Background(), client, ref)
	if err != nil {
		t.Fatalf("loading %s: %v", ref, err)
	}
	return w
}

// patchWrite is one patch the fake clientset received, decoded.
type patchWrite struct {
	resource string
	name     string
	body     map[string]any
	// tests are the values a JSON patch tests, by path; nil for a strategic-merge patch.
	tests map[string]any
}

// resourceVersion is the precondition the patch carries.
func (p patchWrite) resourceVersion() string {
	meta, _ := p.body["metadata"].(map[string]any)
	rv, _ := meta["resourceVersion"].(string)
	return rv
}

// lock decodes the lock annotation the patch writes, or nil when it writes none.
func (p patchWrite) lock(t *testing.T) *Lock {
	t.Helper()
	meta, _ := p.body["metadata"].(map[string]any)
	ann, _ := meta["annotations"].(map[string]any)
	raw, ok := ann[LockAnnotation].(string)
	if !ok {
		return nil
	}
	l, err := parseLock(StatefulSet, "ns", p.name, map[string]string{LockAnnotation: raw})
	if err != nil {
		t.Fatalf("patch of %s writes a lock that does not decode: %v", p.name, err)
	}
	return l
}

// spec is the patch's spec as JSON, for comparison with an expected literal.
func (p patchWrite) spec(t *testing.T) string {
	t.Helper()
	s, ok := p.body["spec"]
	if !ok {
		return ""
	}
	data, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// patches returns the patches the client received, in order.
func patches(t *testing.T, client *fake.Clientset) []patchWrite {
	t.Helper()
	var out []patchWrite
	for _, a := range client.Actions() {
		pa, ok := a.(k8stesting.PatchAction)
		if !ok {
			continue
		}
		w := patchWrite{resource: pa.GetResource().Resource, name: pa.GetName()}
		switch pa.GetPatchType() {
		case types.StrategicMergePatchType:
			if err := json.Unmarshal(pa.GetPatch(), &w.body); err != nil {
				t.Fatalf("patch of %s does not decode: %v", pa.GetName(), err)
			}
		case types.JSONPatchType:
			w.body, w.tests = lockOnlyPatch(t, pa.GetName(), pa.GetPatch())
		default:
			t.Errorf("patch of %s %s is %s, want a strategic-merge patch, or a JSON patch of the lock", w.resource, w.name, pa.GetPatchType())
		}
		out = append(out, w)
	}
	return out
}

// lockOnlyPatch reads a JSON patch that may only test values and replace the lock annotation: it
// returns the patch as the strategic-merge body that writes the same lock, and the values tested.
func lockOnlyPatch(t *testing.T, name string, data []byte) (map[string]any, map[string]any) {
	t.Helper()
	var ops []struct {
		Op    string `json:"op"`
		Path  string `json:"path"`
		Value any    `json:"value"`
	}
	if err := json.Unmarshal(data, &ops); err != nil {
		t.Fatalf("JSON patch of %s does not decode: %v", name, err)
	}
	tests, body := map[string]any{}, map[string]any{}
	for _, op := range ops {
		switch {
		case op.Op == "test":
			tests[op.Path] = op.Value
		case op.Op == "replace" && op.Path == lockPath:
			body["metadata"] = map[string]any{"annotations": map[string]any{LockAnnotation: op.Value}}
		default:
			t.Errorf("JSON patch of %s: %s %s; want it to test values and replace %s only", name, op.Op, op.Path, lockPath)
		}
	}
	return body, tests
}

// lockPath is the lock annotation's JSON pointer.
const lockPath = "/metadata/annotations/inplace-rollout.io~1rollout"

// writes counts the client's create, update, patch and delete calls.
func writes(client *fake.Clientset) int {
	n := 0
	for _, a := range client.Actions() {
		switch a.GetVerb() {
		case "create", "update", "patch", "delete":
			n++
		}
	}
	return n
}

// failCalls makes every call of verb on resource fail with err.
func failCalls(client *fake.Clientset, verb, resource string, err error) {
	client.PrependReactor(verb, resource, func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, err
	})
}

func conflict(resource, name string) error {
	return apierrors.NewConflict(schema.GroupResource{Group: "apps", Resource: resource}, name, errors.New("the object has been modified"))
}

func TestParseKind(t *testing.T) {
	tests := []struct {
		in      string
		want    Kind
		wantErr string
	}{
		{"StatefulSet", StatefulSet, ""},
		{"sts", StatefulSet, ""},
		{"statefulsets", StatefulSet, ""},
		{"DaemonSet", DaemonSet, ""},
		{"ds", DaemonSet, ""},
		{"DAEMONSETS", DaemonSet, ""},
		{"deployment", Deployment, ""},
		{"deploy", Deployment, ""},
		{"Deployments", Deployment, ""},
		{"pods", Pods, ""},
		{"Pod", Pods, ""},
		{"po", Pods, ""},
		{"replicaset", "", `unknown workload kind "replicaset": use StatefulSet, DaemonSet, Deployment or Pods`},
		{"", "", `unknown workload kind ""`},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseKind(tt.in)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("ParseKind(%q) = %q, %v; want an error saying %q", tt.in, got, err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Errorf("ParseKind(%q) = %q, %v; want %q", tt.in, got, err, tt.want)
			}
		})
	}
}

func TestRefString(t *testing.T) {
	tests := []struct {
		ref  Ref
		want string
	}{
		{Ref{Kind: StatefulSet, Namespace: "ns", Name: "web"}, "StatefulSet ns/web"},
		{Ref{Kind: Deployment, Namespace: "prod", Name: "api"}, "Deployment prod/api"},
		{Ref{Kind: Pods, Namespace: "ns", Selector: "app=web,tier!=db"}, `pods in ns matching "app=web,tier!=db"`},
	}
	for _, tt := range tests {
		if got := tt.ref.String(); got != tt.want {
			t.Errorf("%#v.String() = %q, want %q", tt.ref, got, tt.want)
		}
	}
}

func TestLoadErrorsNameTheObject(t *testing.T) {
	badLock := func(meta *metav1.ObjectMeta) {
		meta.Annotations = map[string]string{LockAnnotation: "{not json"}
	}
	sts := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "ns"}, Spec: appsv1.StatefulSetSpec{Selector: webSelector()}}
	badLock(&sts.ObjectMeta)
	ds := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: "agent", Namespace: "ns"}, Spec: appsv1.DaemonSetSpec{Selector: webSelector()}}
	badLock(&ds.ObjectMeta)
	dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "api", Namespace: "ns"}, Spec: appsv1.DeploymentSpec{Selector: webSelector()}}
	badLock(&dep.ObjectMeta)
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: PodLockName("app=web"), Namespace: "ns"}}
	badLock(&cm.ObjectMeta)
	badSelector := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "odd", Namespace: "ns"},
		Spec: appsv1.DeploymentSpec{Selector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "app", Operator: "Near"}}}}}

	tests := []struct {
		name    string
		objects []runtime.Object
		fail    string // resource whose list or get fails with a server error
		ref     Ref
		want    string
		invalid bool
	}{
		{"unknown kind", nil, "", Ref{Kind: "CronJob", Namespace: "ns", Name: "c"}, `unknown workload kind "CronJob"`, true},
		{"statefulset not found", nil, "", Ref{Kind: StatefulSet, Namespace: "ns", Name: "web"}, "StatefulSet ns/web not found", true},
		{"daemonset not found", nil, "", Ref{Kind: DaemonSet, Namespace: "ns", Name: "agent"}, "DaemonSet ns/agent not found", true},
		{"deployment not found", nil, "", Ref{Kind: Deployment, Namespace: "ns", Name: "api"}, "Deployment ns/api not found", true},
		{"empty selector", nil, "", Ref{Kind: Pods, Namespace: "ns"}, `pods: selector "" is not a valid, non-empty label selector`, true},
		{"bad selector", nil, "", Ref{Kind: Pods, Namespace: "ns", Selector: "app in (web"}, `pods: selector "app in (web" is not a valid`, true},
		{"statefulset lock", []runtime.Object{sts}, "", Ref{Kind: StatefulSet, Namespace: "ns", Name: "web"},
			"reading StatefulSet ns/web: StatefulSet ns/web: annotation inplace-rollout.io/rollout is not valid JSON", false},
		{"daemonset lock", []runtime.Object{ds}, "", Ref{Kind: DaemonSet, Namespace: "ns", Name: "agent"},
			"reading DaemonSet ns/agent: DaemonSet ns/agent: annotation inplace-rollout.io/rollout is not valid JSON", false},
		{"deployment lock", []runtime.Object{dep}, "", Ref{Kind: Deployment, Namespace: "ns", Name: "api"},
			"reading Deployment ns/api: Deployment ns/api: annotation inplace-rollout.io/rollout is not valid JSON", false},
		{"pods lock", []runtime.Object{cm}, "", Ref{Kind: Pods, Namespace: "ns", Selector: "app=web"},
			`reading pods in ns matching "app=web": Pods ns/` + PodLockName("app=web") + ": annotation inplace-rollout.io/rollout is not valid JSON", false},
		{"deployment selector", []runtime.Object{badSelector}, "", Ref{Kind: Deployment, Namespace: "ns", Name: "odd"},
			"reading Deployment ns/odd: parsing selector:", false},
		{"statefulset pods", []runtime.Object{&appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "ns"}, Spec: appsv1.StatefulSetSpec{Selector: webSelector()}}},
			"pods", Ref{Kind: StatefulSet, Namespace: "ns", Name: "web"}, "reading StatefulSet ns/web: listing pods: ", false},
		{"daemonset revisions", []runtime.Object{&appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: "agent", Namespace: "ns"}, Spec: appsv1.DaemonSetSpec{Selector: webSelector()}}},
			"controllerrevisions", Ref{Kind: DaemonSet, Namespace: "ns", Name: "agent"}, "reading DaemonSet ns/agent: listing controller revisions: ", false},
		{"deployment replica sets", []runtime.Object{&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "api", Namespace: "ns"}, Spec: appsv1.DeploymentSpec{Selector: webSelector()}}},
			"replicasets", Ref{Kind: Deployment, Namespace: "ns", Name: "api"}, "reading Deployment ns/api: listing replica sets: ", false},
		{"pods list", nil, "pods", Ref{Kind: Pods, Namespace: "ns", Selector: "app=web"}, `reading pods in ns matching "app=web": listing pods: `, false},
		{"pods lock read", nil, "configmaps", Ref{Kind: Pods, Namespace: "ns", Selector: "app=web"},
			`reading pods in ns matching "app=web": reading the lock of pods in ns matching "app=web": `, false},
		{"statefulset read", nil, "statefulsets", Ref{Kind: StatefulSet, Namespace: "ns", Name: "web"}, "reading StatefulSet ns/web: ", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			client := fake.NewClientset(tt.objects...)
			serverErr := apierrors.NewInternalError(errors.New("etcd is down"))
			if tt.fail != "" {
				failCalls(client, "list", tt.fail, serverErr)
				failCalls(client, "get", tt.fail, serverErr)
			}
			w, err := Load(context.Background(), client, tt.ref)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Load(%s) = %v, %v; want an error saying %q", tt.ref, w, err, tt.want)
			}
			var invalid *InvalidError
			if errors.As(err, &invalid) != tt.invalid {
				t.Errorf("error %T %q: InvalidError %v, want %v", err, err, !tt.invalid, tt.invalid)
			}
			if tt.fail != "" && !errors.Is(err, serverErr) {
				t.Errorf("error %q does not wrap the API error", err)
			}
			if writes(client) != 0 {
				t.Errorf("Load wrote: %v", client.Actions())
			}
		})
	}
}

func TestErrorTypesCarryTheirMessage(t *testing.T) {
	var err error = &NotReadyError{"StatefulSet ns/web: not observed"}
	if err.Error() != "StatefulSet ns/web: not observed" {
		t.Errorf("NotReadyError says %q", err.Error())
	}
	err = &InvalidError{Msg: "no pods match"}
	if err.Error() != "no pods match" {
		t.Errorf("InvalidError says %q", err.Error())
	}
}

// testLock is a lock as a rollout writes one, for these tests: the workload stores it as given
// and reads only its previous images and strategy.
type testLock struct {
	Holder            string                       `json:"holder"`
	RolloutID         string                       `json:"rolloutID,omitempty"`
	Images            map[string]string            `json:"images"`
	Resources         map[string]inplace.Resources `json:"resources,omitempty"`
	PreviousImages    map[string]string            `json:"previousImages"`
	PreviousResources map[string]inplace.Resources `json:"previousResources,omitempty"`
	PreviousStrategy  json.RawMessage              `json:"previousStrategy,omitempty"`
	Phase             string                       `json:"phase"`
	StartedAt         time.Time                    `json:"startedAt"`
}

// change is the rollout's target, as pkg/rollout hands it to the workload.
func (l *testLock) change() Change { return Change{Images: l.Images, Resources: l.Resources} }

func (l *testLock) encode() string {
	data, err := json.Marshal(l)
	if err != nil {
		panic(err)
	}
	return string(data)
}

// lock is the Lock a workload reads from l's annotation; nil for no l.
func (l *testLock) lock() *Lock {
	if l == nil {
		return nil
	}
	return &Lock{Record: l.encode(), PreviousImages: l.PreviousImages, PreviousResources: l.PreviousResources, PreviousStrategy: l.PreviousStrategy}
}
