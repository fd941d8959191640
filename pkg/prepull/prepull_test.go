package prepull

import (
	"context"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
	"sigs.k8s.io/yaml"
)

var update = flag.Bool("update", false, "rewrite the golden files of testdata")

const helper = "ghcr.io/inplace-rollout/inplace-rollout@sha256:1111111111111111111111111111111111111111111111111111111111111111"

func restarting(name string, secrets []string, tols ...corev1.Toleration) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: name}}
	for _, s := range secrets {
		p.Spec.ImagePullSecrets = append(p.Spec.ImagePullSecrets, corev1.LocalObjectReference{Name: s})
	}
	p.Spec.Tolerations = tols
	return p
}

// TestPodForGolden compares the puller pod with testdata/pod.golden.yaml;
// `go test ./pkg/prepull -run PodForGolden -update` rewrites it.
func TestPodForGolden(t *testing.T) {
	gpu := corev1.Toleration{Key: "gpu", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}
	spot := corev1.Toleration{Key: "spot", Operator: corev1.TolerationOpEqual, Value: "true", Effect: corev1.TaintEffectNoExecute}
	from := []*corev1.Pod{
		restarting("web-0", []string{"reg-a", "reg-b"}, gpu),
		restarting("web-1", []string{"reg-b", "reg-c"}, gpu, spot),
	}
	pod := PodFor("shop", "web-7f3c", "node-1", []string{"reg.example/app:v2", "reg.example/sidecar:v5", "reg.example/app:v2"}, from,
		Options{HelperImage: helper, Deadline: 90 * time.Second})
	got, err := yaml.Marshal(pod)
	if err != nil {
		t.Fatal(err)
	}
	golden := filepath.Join("testdata", "pod.golden.yaml")
	if *update {
		if err := os.WriteFile(golden, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run with -update to write it)", err)
	}
	if string(got) != string(want) {
		t.Errorf("PodFor:\n--- got\n%s\n--- want (%s)\n%s", got, golden, want)
	}
}

func TestPodForDefaultsAndLabels(t *testing.T) {
	long := strings.Repeat("n", 100) + ".example.com"
	tests := []struct {
		name, node, wantNodeLabel string
		deadline                  time.Duration
		wantDeadline              int64
	}{
		{"short node name is the label", "node-1", "node-1", 0, 600},
		{"long node name is hashed", long, "", 1500 * time.Millisecond, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := PodFor("ns", "r1", tt.node, []string{"a:v1"}, nil, Options{HelperImage: helper, Deadline: tt.deadline})
			if got := *p.Spec.ActiveDeadlineSeconds; got != tt.wantDeadline {
				t.Errorf("activeDeadlineSeconds = %d; want %d", got, tt.wantDeadline)
			}
			label := p.Labels[LabelNode]
			if errs := validation.IsValidLabelValue(label); len(errs) > 0 {
				t.Errorf("node label %q is not a valid label value: %v", label, errs)
			}
			if tt.wantNodeLabel != "" && label != tt.wantNodeLabel {
				t.Errorf("node label = %q; want %q", label, tt.wantNodeLabel)
			}
			if tt.wantNodeLabel == "" && !strings.HasPrefix(label, "sha256-") {
				t.Errorf("node label = %q; want the sha256- form", label)
			}
			if p.Spec.NodeName != tt.node || p.Labels[LabelRollout] != "r1" {
				t.Errorf("nodeName %q, rollout label %q; want %q, r1", p.Spec.NodeName, p.Labels[LabelRollout], tt.node)
			}
		})
	}
}

func TestName(t *testing.T) {
	long := strings.Repeat("x", 253)
	names := map[string]string{}
	for _, in := range [][2]string{{"r1", "node-1"}, {"r1", "node-2"}, {"r2", "node-1"}, {"r1n", "ode-1"}, {long, long}} {
		n := Name(in[0], in[1])
		if n != Name(in[0], in[1]) {
			t.Errorf("Name(%q, %q) is not deterministic", in[0], in[1])
		}
		if errs := validation.IsDNS1123Label(n); len(errs) > 0 {
			t.Errorf("Name(%q, %q) = %q is not a DNS label: %v", in[0], in[1], n, errs)
		}
		if !strings.HasPrefix(n, NamePrefix) {
			t.Errorf("Name(%q, %q) = %q; want the prefix %s", in[0], in[1], n, NamePrefix)
		}
		if prev, dup := names[n]; dup {
			t.Errorf("Name(%q, %q) = %q, the same as for %s", in[0], in[1], n, prev)
		}
		names[n] = in[0] + "/" + in[1]
	}
}

func waiting(name, reason, msg string) corev1.ContainerStatus {
	return corev1.ContainerStatus{Name: name, State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason, Message: msg}}}
}

func running(name string) corev1.ContainerStatus {
	return corev1.ContainerStatus{Name: name, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}
}

func terminated(name string, code int32) corev1.ContainerStatus {
	return corev1.ContainerStatus{Name: name, State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: code}}}
}

func TestJudge(t *testing.T) {
	base := func(phase corev1.PodPhase, init []corev1.ContainerStatus, main ...corev1.ContainerStatus) *corev1.Pod {
		p := PodFor("ns", "r1", "node-1", []string{"reg/app:v2", "reg/side:v1"}, nil, Options{HelperImage: "reg/helper:v1"})
		p.Status.Phase = phase
		p.Status.InitContainerStatuses = init
		p.Status.ContainerStatuses = main
		return p
	}
	installed := []corev1.ContainerStatus{terminated("install", 0)}
	tests := []struct {
		name       string
		pod        *corev1.Pod
		want       Phase
		wantReason []string
	}{
		{"new pod", base("", nil), Pulling, nil},
		{"pending, init running", base(corev1.PodPending, []corev1.ContainerStatus{running("install")}), Pulling, nil},
		{"one container started", base(corev1.PodPending, installed, running("pull-0"), waiting("pull-1", "ContainerCreating", "")), Pulling, nil},
		{"every container running", base(corev1.PodRunning, installed, running("pull-0"), running("pull-1")), Pulled, nil},
		{"one exited 0, one running", base(corev1.PodRunning, installed, terminated("pull-0", 0), running("pull-1")), Pulled, nil},
		{"one exited 1, not failed yet", base(corev1.PodRunning, installed, terminated("pull-0", 1), running("pull-1")), Pulling, nil},
		{"succeeded", base(corev1.PodSucceeded, installed, terminated("pull-0", 0), terminated("pull-1", 0)), Pulled, nil},
		{"ErrImagePull", base(corev1.PodPending, installed, running("pull-0"), waiting("pull-1", "ErrImagePull", "manifest unknown")),
			Failed, []string{"pulling reg/side:v1 on node node-1: ErrImagePull: manifest unknown"}},
		{"ImagePullBackOff", base(corev1.PodPending, installed, waiting("pull-0", "ImagePullBackOff", "Back-off pulling image")),
			Failed, []string{"pulling reg/app:v2 on node node-1: ImagePullBackOff: Back-off pulling image"}},
		{"ImagePullBackOff naming the failed pull's cause, as kubelet v1.34 does", base(corev1.PodPending, installed, running("pull-0"),
			waiting("pull-1", "ImagePullBackOff", `Back-off pulling image "reg/side:v1": ErrImagePull: rpc error: code = NotFound desc = failed to pull and unpack image "reg/side:v1": failed to resolve reference "reg/side:v1": reg/side:v1: not found: manifest unknown`)),
			Failed, []string{`pulling reg/side:v1 on node node-1: ImagePullBackOff: Back-off pulling image "reg/side:v1": ErrImagePull: `, "reg/side:v1: not found: manifest unknown"}},
		{"InvalidImageName", base(corev1.PodPending, installed, waiting("pull-0", "InvalidImageName", "bad")), Failed, []string{"InvalidImageName: bad"}},
		{"ErrImageNeverPull", base(corev1.PodPending, installed, waiting("pull-0", "ErrImageNeverPull", "not present")), Failed, []string{"ErrImageNeverPull"}},
		{"the helper image fails", base(corev1.PodPending, []corev1.ContainerStatus{waiting("install", "ErrImagePull", "401 Unauthorized")}),
			Failed, []string{"pulling reg/helper:v1 on node node-1: ErrImagePull: 401 Unauthorized"}},
		{"deadline exceeded", func() *corev1.Pod {
			p := base(corev1.PodFailed, installed, waiting("pull-0", "ContainerCreating", ""))
			p.Status.Reason, p.Status.Message = "DeadlineExceeded", "Pod was active on the node longer than the specified deadline"
			return p
		}(), Failed, []string{"on node node-1 failed: DeadlineExceeded: Pod was active on the node longer"}},
		{"failed without a reason", base(corev1.PodFailed, installed, terminated("pull-0", 1)), Failed, []string{"failed: Failed"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, reason := Judge(tt.pod)
			if got != tt.want {
				t.Fatalf("Judge = %s (%q); want %s", got, reason, tt.want)
			}
			if tt.want != Failed && reason != "" {
				t.Errorf("reason %q for %s; want none", reason, got)
			}
			for _, w := range tt.wantReason {
				if !strings.Contains(reason, w) {
					t.Errorf("reason %q; want it to contain %q", reason, w)
				}
			}
		})
	}
}

func TestEnsure(t *testing.T) {
	images := []string{"reg/app:v2"}
	opts := Options{HelperImage: helper}
	pulled := PodFor("ns", "r1", "node-a", images, nil, opts)
	pulled.Status.Phase = corev1.PodSucceeded
	failed := PodFor("ns", "r1", "node-b", images, nil, opts)
	failed.Status.ContainerStatuses = []corev1.ContainerStatus{waiting("pull-0", "ErrImagePull", "manifest unknown")}
	other := PodFor("ns", "r0", "node-c", images, nil, opts) // another rollout's puller on node-c
	other.Status.Phase = corev1.PodSucceeded

	client := fake.NewClientset(pulled, failed, other)
	byNode := map[string][]*corev1.Pod{
		"node-a": {restarting("web-0", nil)},
		"node-b": {restarting("web-1", nil)},
		"node-c": {restarting("web-2", []string{"reg-cred"})},
		"node-d": {restarting("web-3", nil)},
	}
	existing := []corev1.Pod{*pulled, *failed}
	phases, reasons, err := Ensure(context.Background(), client, "ns", "r1", images, byNode, existing, opts)
	if err != nil {
		t.Fatalf("Ensure: %v", err)
	}
	want := map[string]Phase{"node-a": Pulled, "node-b": Failed, "node-c": Pulling, "node-d": Pulling}
	for node, w := range want {
		if phases[node] != w {
			t.Errorf("phase of %s = %q; want %s", node, phases[node], w)
		}
	}
	if len(phases) != len(want) {
		t.Errorf("phases %v; want exactly the nodes %v", phases, want)
	}
	if len(reasons) != 1 || !strings.Contains(reasons["node-b"], "pulling reg/app:v2 on node node-b: ErrImagePull: manifest unknown") {
		t.Errorf("reasons %v; want node-b's pull failure only", reasons)
	}
	var created []string
	for _, a := range client.Actions() {
		if a.GetVerb() == "create" {
			created = append(created, a.(clienttesting.CreateAction).GetObject().(*corev1.Pod).Name)
		}
	}
	if wantCreated := []string{Name("r1", "node-c"), Name("r1", "node-d")}; strings.Join(created, ",") != strings.Join(wantCreated, ",") {
		t.Errorf("created %v; want %v (node-c and node-d, in node order)", created, wantCreated)
	}
	p, err := client.CoreV1().Pods("ns").Get(context.Background(), Name("r1", "node-c"), metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the puller of node-c: %v", err)
	}
	if len(p.Spec.ImagePullSecrets) != 1 || p.Spec.ImagePullSecrets[0].Name != "reg-cred" {
		t.Errorf("node-c's puller pull secrets %v; want web-2's reg-cred", p.Spec.ImagePullSecrets)
	}

	// Run again with what the first run left: nothing more is created.
	client.ClearActions()
	list, err := List(context.Background(), client, "ns", "r1")
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 4 {
		t.Errorf("List(r1) = %d pods; want 4", len(list))
	}
	if _, _, err := Ensure(context.Background(), client, "ns", "r1", images, byNode, list, opts); err != nil {
		t.Fatalf("second Ensure: %v", err)
	}
	for _, a := range client.Actions() {
		if a.GetVerb() == "create" {
			t.Errorf("second Ensure created %s; want nothing", a.(clienttesting.CreateAction).GetObject().(*corev1.Pod).Name)
		}
	}
}

func TestEnsureErrors(t *testing.T) {
	byNode := map[string][]*corev1.Pod{"node-a": nil, "node-b": nil}
	tests := []struct {
		name      string
		images    []string
		opts      Options
		createErr error
		wantErr   []string
		wantPhase map[string]Phase
	}{
		{"no helper image", []string{"a:v1"}, Options{}, nil, []string{"no helper image"}, nil},
		{"no images", nil, Options{HelperImage: helper}, nil, []string{"no images"}, nil},
		{"already exists is fine", []string{"a:v1"}, Options{HelperImage: helper},
			apierrors.NewAlreadyExists(schema.GroupResource{Resource: "pods"}, "x"), nil,
			map[string]Phase{"node-a": Pulling, "node-b": Pulling}},
		{"forbidden names the pod and node", []string{"a:v1"}, Options{HelperImage: helper},
			apierrors.NewForbidden(schema.GroupResource{Resource: "pods"}, "x", errors.New("quota exceeded")),
			[]string{"creating puller pod ns/" + Name("r1", "node-a") + " for node node-a", "node-b", "quota exceeded"}, map[string]Phase{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			client := fake.NewClientset()
			if tt.createErr != nil {
				client.PrependReactor("create", "pods", func(clienttesting.Action) (bool, runtime.Object, error) {
					return true, nil, tt.createErr
				})
			}
			phases, _, err := Ensure(context.Background(), client, "ns", "r1", tt.images, byNode, nil, tt.opts)
			if len(tt.wantErr) == 0 && err != nil {
				t.Fatalf("Ensure: %v", err)
			}
			if len(tt.wantErr) > 0 && err == nil {
				t.Fatalf("Ensure succeeded; want an error with %q", tt.wantErr)
			}
			for _, w := range tt.wantErr {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q; want it to contain %q", err, w)
				}
			}
			if tt.wantPhase != nil && len(phases) != len(tt.wantPhase) {
				t.Errorf("phases %v; want %v", phases, tt.wantPhase)
			}
			for n, w := range tt.wantPhase {
				if phases[n] != w {
					t.Errorf("phase of %s = %q; want %s", n, phases[n], w)
				}
			}
		})
	}
}

func TestCleanup(t *testing.T) {
	opts := Options{HelperImage: helper}
	mk := func(rollout, node string) *corev1.Pod {
		p := PodFor("ns", rollout, node, []string{"a:v1"}, nil, opts)
		p.UID = types.UID("uid-" + rollout + "-" + node)
		return p
	}
	unrelated := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web-0"}}
	elsewhere := PodFor("other", "r1", "node-a", []string{"a:v1"}, nil, opts)
	tests := []struct {
		name        string
		keep        string
		wantDeleted int
		wantLeft    []string
	}{
		{"all", "", 3, []string{"web-0"}},
		{"keep r2", "r2", 2, []string{Name("r2", "node-a"), "web-0"}},
		{"keep an unknown rollout", "r9", 3, []string{"web-0"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			client := fake.NewClientset(mk("r1", "node-a"), mk("r1", "node-b"), mk("r2", "node-a"), unrelated, elsewhere)
			n, err := Cleanup(context.Background(), client, "ns", tt.keep)
			if err != nil {
				t.Fatalf("Cleanup: %v", err)
			}
			if n != tt.wantDeleted {
				t.Errorf("deleted %d; want %d", n, tt.wantDeleted)
			}
			left, err := client.CoreV1().Pods("ns").List(context.Background(), metav1.ListOptions{})
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, p := range left.Items {
				names = append(names, p.Name)
			}
			sort.Strings(names)
			if strings.Join(names, ",") != strings.Join(tt.wantLeft, ",") {
				t.Errorf("left %v; want %v", names, tt.wantLeft)
			}
			if _, err := client.CoreV1().Pods("other").Get(context.Background(), elsewhere.Name, metav1.GetOptions{}); err != nil {
				t.Errorf("the puller in another namespace: %v; want it kept", err)
			}
			for _, a := range client.Actions() {
				if d, ok := a.(clienttesting.DeleteAction); ok {
					o := d.GetDeleteOptions()
					if o.GracePeriodSeconds == nil || *o.GracePeriodSeconds != 0 || o.Preconditions == nil || o.Preconditions.UID == nil || *o.Preconditions.UID == "" {
						t.Errorf("delete of %s with options %+v; want grace period 0 and a UID precondition", d.GetName(), o)
					}
				}
			}
		})
	}
}

func TestCleanupErrors(t *testing.T) {
	tests := []struct {
		name        string
		err         error
		wantDeleted int
		wantErr     string
	}{
		{"not found is fine", apierrors.NewNotFound(schema.GroupResource{Resource: "pods"}, "x"), 0, ""},
		{"a UID conflict is fine", apierrors.NewConflict(schema.GroupResource{Resource: "pods"}, "x", errors.New("uid")), 0, ""},
		{"forbidden names the pod and node", apierrors.NewForbidden(schema.GroupResource{Resource: "pods"}, "x", errors.New("no")),
			0, "deleting puller pod ns/" + Name("r1", "node-a") + " on node node-a"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			client := fake.NewClientset(PodFor("ns", "r1", "node-a", []string{"a:v1"}, nil, Options{HelperImage: helper}))
			client.PrependReactor("delete", "pods", func(clienttesting.Action) (bool, runtime.Object, error) {
				return true, nil, tt.err
			})
			n, err := Cleanup(context.Background(), client, "ns", "")
			if n != tt.wantDeleted {
				t.Errorf("deleted %d; want %d", n, tt.wantDeleted)
			}
			if tt.wantErr == "" && err != nil {
				t.Errorf("Cleanup: %v; want no error", err)
			}
			if tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
				t.Errorf("Cleanup error %v; want it to contain %q", err, tt.wantErr)
			}
		})
	}
}
