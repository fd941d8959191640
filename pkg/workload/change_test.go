package workload

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/inplace-rollout/inplace-rollout/pkg/inplace"
)

// cpu is resources requesting q of CPU, and limited to limit when it is not empty.
func cpu(q, limit string) inplace.Resources {
	r := inplace.Resources{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(q)}}
	if limit != "" {
		r.Limits = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(limit)}
	}
	return r
}

// resourcedTemplate is webTemplate with the app container requesting 250m of CPU, limited to 1.
func resourcedTemplate(app string) corev1.PodTemplateSpec {
	tmpl := webTemplate(app)
	tmpl.Spec.Containers[0].Resources = cpu("250m", "1")
	return tmpl
}

// TestTemplatePatchResources: the template patch sets only the values a change names, where they
// differ by quantity, with the image when it changes too.
func TestTemplatePatchResources(t *testing.T) {
	tmpl := resourcedTemplate("reg/app:v1")
	tests := []struct {
		name string
		ch   Change
		want string
	}{
		{"a request", Change{Resources: map[string]inplace.Resources{"app": cpu("500m", "")}},
			`{"spec":{"containers":[{"name":"app","resources":{"requests":{"cpu":"500m"}}}]}}`},
		{"the same value spelled another way", Change{Resources: map[string]inplace.Resources{"app": cpu("0.25", "1000m")}}, `{"spec":{}}`},
		{"with an image", Change{Images: map[string]string{"app": "reg/app:v2"}, Resources: map[string]inplace.Resources{"app": cpu("250m", "2")}},
			`{"spec":{"containers":[{"image":"reg/app:v2","name":"app","resources":{"limits":{"cpu":"2"},"requests":{"cpu":"250m"}}}]}}`},
		{"an unknown container left out", Change{Resources: map[string]inplace.Resources{"db": cpu("1", "")}}, `{"spec":{}}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			data, err := json.Marshal(templatePatch(&tmpl, tt.ch))
			if err != nil {
				t.Fatal(err)
			}
			if string(data) != tt.want {
				t.Errorf("templatePatch = %s\nwant %s", data, tt.want)
			}
		})
	}
}

// TestTemplateHasResources: a template, or a pod, has a change's resources when each value it
// names is the container's by quantity; the values it does not name do not matter.
func TestTemplateHasResources(t *testing.T) {
	tmpl := resourcedTemplate("reg/app:v1")
	pod := runningPod("web-0", "reg/app:v1", nil, nil)
	pod.Spec.Containers[0].Resources = cpu("250m", "1")
	tests := []struct {
		name string
		ch   Change
		want bool
	}{
		{"the values, spelled another way", Change{Resources: map[string]inplace.Resources{"app": cpu("0.25", "1000m")}}, true},
		{"a value named alone", Change{Resources: map[string]inplace.Resources{"app": {Limits: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")}}}}, true},
		{"another value", Change{Resources: map[string]inplace.Resources{"app": cpu("500m", "")}}, false},
		{"the image, and another value", Change{Images: map[string]string{"app": "reg/app:v1"}, Resources: map[string]inplace.Resources{"app": cpu("500m", "")}}, false},
		{"another image, and the values", Change{Images: map[string]string{"app": "reg/app:v2"}, Resources: map[string]inplace.Resources{"app": cpu("250m", "")}}, false},
		{"a value the container does not declare", Change{Resources: map[string]inplace.Resources{"app": {Requests: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("64Mi")}}}}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := TemplateHas(&tmpl, tt.ch); got != tt.want {
				t.Errorf("TemplateHas = %v, want %v", got, tt.want)
			}
			if got := Runs(pod, tt.ch); got != tt.want {
				t.Errorf("Runs = %v, want %v", got, tt.want)
			}
		})
	}
	prev := TemplateChange(&tmpl, Change{Resources: map[string]inplace.Resources{"app": cpu("500m", "")}})
	if r := prev.Resources["app"]; len(prev.Resources) != 1 || len(r.Limits) != 0 || !inplace.HasResources(r, cpu("250m", "")) {
		t.Errorf("TemplateChange = %+v, want the app's CPU request alone, 250m", prev)
	}
}

// TestForeignResources: resources someone else put in the template of a rollout's containers
// halt it as images do; a Deployment's template on the previous resources is the rollout's.
func TestForeignResources(t *testing.T) {
	target := Change{Resources: map[string]inplace.Resources{"app": cpu("500m", "")}}
	lock := &testLock{Resources: target.Resources, PreviousResources: map[string]inplace.Resources{"app": cpu("250m", "")}}
	sts := func(request string) Workload {
		tmpl := resourcedTemplate("reg/app:v1")
		tmpl.Spec.Containers[0].Resources.Requests[corev1.ResourceCPU] = resource.MustParse(request)
		return &statefulSet{onDelete: &onDelete{ref: Ref{Kind: StatefulSet, Namespace: "ns", Name: "web"}, template: &tmpl}}
	}
	dep := func(request string) Workload {
		tmpl := resourcedTemplate("reg/app:v1")
		tmpl.Spec.Containers[0].Resources.Requests[corev1.ResourceCPU] = resource.MustParse(request)
		return &deployment{dep: &appsv1.Deployment{Spec: appsv1.DeploymentSpec{Template: tmpl}}, lock: lock.lock()}
	}
	tests := []struct {
		name string
		w    Workload
		want string // the template's request when foreign, else ""
	}{
		{"statefulset at the target", sts("0.5"), ""},
		{"statefulset changed by someone", sts("750m"), "750m"},
		{"deployment on the previous resources", dep("250m"), ""},
		{"deployment at the target", dep("500m"), ""},
		{"deployment changed by someone", dep("750m"), "750m"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Foreign(tt.w, target)
			switch {
			case tt.want == "" && got != nil:
				t.Errorf("Foreign = %+v, want none", got)
			case tt.want != "" && (got == nil || !inplace.HasResources(got.Resources["app"], cpu(tt.want, ""))):
				t.Errorf("Foreign = %+v, want the app's request %s", got, tt.want)
			}
		})
	}
}

// TestCheckChangeResources: resources are checked against the template, or each label-selected
// pod, as a resize would take them; a change of resources alone checks no images.
func TestCheckChangeResources(t *testing.T) {
	tmpl := resourcedTemplate("reg/app:v1")
	sts := &statefulSet{onDelete: &onDelete{ref: Ref{Kind: StatefulSet, Namespace: "ns", Name: "web"}, template: &tmpl}}
	tests := []struct {
		name string
		ch   Change
		want string
	}{
		{"resources alone", Change{Resources: map[string]inplace.Resources{"app": cpu("500m", "")}}, ""},
		{"with an image", Change{Images: map[string]string{"app": "reg/app:v2"}, Resources: map[string]inplace.Resources{"app": cpu("500m", "")}}, ""},
		{"a request above the limit", Change{Resources: map[string]inplace.Resources{"app": cpu("2", "")}},
			`StatefulSet ns/web: resources of container "app": cpu limit 1 is below its request 2`},
		{"a container without the value", Change{Resources: map[string]inplace.Resources{"sidecar": cpu("1", "")}},
			`StatefulSet ns/web: resources of container "sidecar": requests.cpu: the container declares no cpu request`},
		{"an init container", Change{Resources: map[string]inplace.Resources{"init": cpu("1", "")}},
			`StatefulSet ns/web: resources: "init" is an init container that runs once`},
		{"a bad image beside resources", Change{Images: map[string]string{"app": "Reg/App:v2"}, Resources: map[string]inplace.Resources{"app": cpu("500m", "")}},
			`StatefulSet ns/web: container "app": image "Reg/App:v2" is not a valid reference`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := CheckChange(sts, tt.ch, false)
			if tt.want == "" {
				if err != nil {
					t.Errorf("refused: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("CheckChange = %v, want an error saying %q", err, tt.want)
			}
		})
	}
}

// TestDeploymentResources: a Deployment's rollout of resources is handed back as its images
// are, the ReplicaSet's template first and then the Deployment's with its strategy, so that the
// two stay equal and the controller adopts the ReplicaSet; a rollback puts the previous values
// back on both, in the same order.
func TestDeploymentResources(t *testing.T) {
	ctx := context.Background()
	lock := depLock("Progressing", "reg/app:v1")
	lock.Images, lock.PreviousImages = nil, nil
	lock.Resources = map[string]inplace.Resources{"app": cpu("0.5", "")}
	lock.PreviousResources = map[string]inplace.Resources{"app": cpu("250m", "")}
	dep := newDeployment()
	dep.Spec.Paused = true
	dep.Spec.Template = resourcedTemplate("reg/app:v1")
	withLock(t, &dep.ObjectMeta, lock)
	rs := newReplicaSet("1", 3, "reg/app:v1", "dep-uid")
	rs.Spec.Template.Spec.Containers[0].Resources = cpu("250m", "1")
	client := fake.NewClientset(dep, rs)
	ref := Ref{Kind: Deployment, Namespace: "ns", Name: "api"}
	templates := func() (dep, rs *corev1.PodTemplateSpec) {
		t.Helper()
		d, err := client.AppsV1().Deployments("ns").Get(ctx, "api", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		r, err := client.AppsV1().ReplicaSets("ns").Get(ctx, "api-1", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return &d.Spec.Template, &r.Spec.Template
	}
	step := func(op workloadOp, l *testLock, wantDone bool, depCPU, rsCPU string) {
		t.Helper()
		done, err := op(ctx, mustLoad(t, client, ref), l)
		if err != nil || done != wantDone {
			t.Fatalf("done %v, %v; want %v", done, err, wantDone)
		}
		d, r := templates()
		if !inplace.HasResources(d.Spec.Containers[0].Resources, cpu(depCPU, "1")) || !inplace.HasResources(r.Spec.Containers[0].Resources, cpu(rsCPU, "1")) {
			t.Errorf("templates: Deployment %v, ReplicaSet %v; want cpu requests %s and %s, limits 1", d.Spec.Containers[0].Resources, r.Spec.Containers[0].Resources, depCPU, rsCPU)
		}
	}
	step(opFinalize, lock, false, "250m", "500m")
	succeeded := *lock
	succeeded.Phase = "Succeeded"
	step(opFinalize, &succeeded, true, "500m", "500m")
	if d, r := templates(); !equalIgnoreHash(d, r) {
		t.Errorf("the Deployment's template and its ReplicaSet's differ after the rollout:\n%+v\n%+v", d, r)
	}
	rollingBack := *lock
	rollingBack.Phase = "RollingBack"
	if _, err := opStart(ctx, mustLoad(t, client, ref), &rollingBack); err != nil {
		t.Fatal(err)
	}
	step(opRestore, &rollingBack, false, "500m", "250m")
	rolledBack := *lock
	rolledBack.Phase = "RolledBack"
	step(opRestore, &rolledBack, true, "250m", "250m")
	if d, r := templates(); !equalIgnoreHash(d, r) {
		t.Errorf("the Deployment's template and its ReplicaSet's differ after the rollback:\n%+v\n%+v", d, r)
	}
}

// TestDaemonSetResources: a DaemonSet's rollout of resources freezes it with them in its
// template, so that its controller computes the revision the pods are relabelled with, counts a
// pod as updated once its spec has them, and hands it back with them and its strategy.
func TestDaemonSetResources(t *testing.T) {
	ctx := context.Background()
	ds := newDaemonSet()
	ds.Spec.Template = resourcedTemplate("reg/app:v1")
	ds.Spec.UpdateStrategy = appsv1.DaemonSetUpdateStrategy{Type: appsv1.RollingUpdateDaemonSetStrategyType}
	client := fake.NewClientset(append(dsRevisions(), ds)...)
	ref := Ref{Kind: DaemonSet, Namespace: "ns", Name: "agent"}
	target := Change{Resources: map[string]inplace.Resources{"app": cpu("500m", "")}}
	w := mustLoad(t, client, ref)
	if err := w.CheckStart(target, false); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := w.RevisionLabels(target); ok {
		t.Error("revision labels before the template has the resources")
	}
	prev, _ := w.Previous(target)
	lock := &testLock{Holder: "cli", Phase: "Progressing", Resources: target.Resources, PreviousResources: prev.Resources,
		PreviousStrategy: json.RawMessage(`{"type":"RollingUpdate"}`)}
	if err := w.Start(ctx, lock.encode(), target); err != nil {
		t.Fatal(err)
	}
	stored := func() *appsv1.DaemonSet {
		t.Helper()
		d, err := client.AppsV1().DaemonSets("ns").Get(ctx, "agent", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	if d := stored(); d.Spec.UpdateStrategy.Type != appsv1.OnDeleteDaemonSetStrategyType || !TemplateHas(&d.Spec.Template, target) {
		t.Fatalf("after Start: strategy %s, template resources %v; want OnDelete and cpu 500m", d.Spec.UpdateStrategy.Type, d.Spec.Template.Spec.Containers[0].Resources)
	}
	w = mustLoad(t, client, ref)
	labels, ok, err := w.RevisionLabels(target)
	if err != nil || !ok {
		t.Fatalf("revision labels %v, %v, %v once the template has the resources", labels, ok, err)
	}
	pod := dsPod("agent-a", labels[revisionLabel], "3")
	pod.Spec.Containers[0].Resources = cpu("250m", "1")
	if w.Counted(pod, target, labels) {
		t.Error("a pod on the previous resources counted as updated")
	}
	pod.Spec.Containers[0].Resources = cpu("0.5", "1")
	if !w.Counted(pod, target, labels) {
		t.Error("a pod with the resources, spelled another way, not counted as updated")
	}
	if done, err := w.Finalize(ctx, lock.encode(), target); err != nil || !done {
		t.Fatalf("Finalize = %v, %v", done, err)
	}
	if d := stored(); d.Spec.UpdateStrategy.Type != appsv1.RollingUpdateDaemonSetStrategyType || !TemplateHas(&d.Spec.Template, target) {
		t.Errorf("after Finalize: strategy %s, template resources %v; want RollingUpdate and cpu 500m", d.Spec.UpdateStrategy.Type, d.Spec.Template.Spec.Containers[0].Resources)
	}
	w = mustLoad(t, client, ref)
	if done, err := w.Restore(ctx, lock.encode(), target, false); err != nil || !done {
		t.Fatalf("Restore = %v, %v", done, err)
	}
	if d := stored(); !TemplateHas(&d.Spec.Template, Change{Resources: map[string]inplace.Resources{"app": cpu("250m", "1")}}) {
		t.Errorf("after Restore: template resources %v, want cpu 250m back", d.Spec.Template.Spec.Containers[0].Resources)
	}
}
