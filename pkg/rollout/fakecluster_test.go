package rollout

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/inplace-rollout/inplace-rollout/analysis"
	"github.com/inplace-rollout/inplace-rollout/pkg/inplace"
	"github.com/inplace-rollout/inplace-rollout/pkg/prepull"
	"github.com/inplace-rollout/inplace-rollout/pkg/workload"
)

// The fake cluster: one namespace, one StatefulSet (or a set of bare pods) whose container "app"
// runs reg.example/app:v1. Nothing runs on it but the engine under test, so the test plays the
// StatefulSet controller and the kubelet between two Reconcile calls (see play).
const (
	testNS    = "shop"
	testName  = "web"
	testApp   = "app"
	imageV1   = "reg.example/app:v1"
	imageV2   = "reg.example/app:v2"
	imageV3   = "reg.example/app:v3"
	testOwner = "cli"
)

// Image tags the kubelet player treats specially.
const (
	// imageCrash starts and then crash-loops.
	imageCrash = "reg.example/app:crash"
	// imageHang never starts: the kubelet reports nothing new for it.
	imageHang = "reg.example/app:hang"
)

// t0 is when every test cluster starts; its pods have run and been Ready since an hour before.
var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// fakeCluster is a fake API server with the objects of one rollout, a clock, and the players of
// the controllers a real cluster would run.
type fakeCluster struct {
	t      testing.TB
	client *fake.Clientset
	now    time.Time
	// kind is the target's kind: StatefulSet, or Pods selected by app=web.
	kind workload.Kind
	// query is what the analysis Prometheus answers.
	query *fakeQuerier
	// failCode, when not 0, fails every write with that HTTP status (see failWrites).
	failCode int
	// crashing are pods whose container crash-loops whatever its image: a fault of the pod,
	// not of an image.
	crashing map[string]bool
	// pulled are the digests the kubelet pulled tags as, by image, when a test says so; other
	// tags pull as imageIDOf derives.
	pulled map[string]string
	// pullers says the kubelets run puller pods: imageMissing fails to pull, others finish,
	// except on the nodes of slowPulls, where they keep pulling.
	pullers   bool
	slowPulls map[string]bool
	// stsVersion is the StatefulSet's last resourceVersion (versionStatefulSet).
	stsVersion int
}

// clusterOpts shape a fake cluster.
type clusterOpts struct {
	kind workload.Kind // StatefulSet when empty
	pods int
	// owned gives bare pods (kind Pods) a controlling owner.
	owned bool
	// image is what the template and the pods run [imageV1].
	image string
	// resources are the app container's, in the template and the pods [none].
	resources corev1.ResourceRequirements
}

// newFakeCluster builds a cluster with n Running, Ready pods on imageV1, all at the
// StatefulSet's current revision.
func newFakeCluster(t testing.TB, o clusterOpts) *fakeCluster {
	t.Helper()
	if o.kind == "" {
		o.kind = workload.StatefulSet
	}
	if o.image == "" {
		o.image = imageV1
	}
	fc := &fakeCluster{t: t, client: fake.NewClientset(), now: t0, kind: o.kind, query: &fakeQuerier{}}
	ctx := context.Background()
	template := corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": testName}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: testApp, Image: o.image, Resources: *o.resources.DeepCopy()}}},
	}
	rev := templateRevision(&template)
	if o.kind == workload.StatefulSet {
		replicas := int32(o.pods)
		sts := &appsv1.StatefulSet{
			// Generation 1, as the API server starts every apps/v1 object, observed by the controller.
			ObjectMeta: metav1.ObjectMeta{Name: testName, Namespace: testNS, UID: "uid-sts-web", Generation: 1},
			Spec: appsv1.StatefulSetSpec{
				Replicas:       &replicas,
				Selector:       &metav1.LabelSelector{MatchLabels: map[string]string{"app": testName}},
				Template:       template,
				UpdateStrategy: appsv1.StatefulSetUpdateStrategy{Type: appsv1.RollingUpdateStatefulSetStrategyType},
			},
			Status: appsv1.StatefulSetStatus{ObservedGeneration: 1, Replicas: replicas, CurrentRevision: rev, UpdateRevision: rev},
		}
		if _, err := fc.client.AppsV1().StatefulSets(testNS).Create(ctx, sts, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range o.pods {
		p := runningPod(fmt.Sprintf("%s-%d", testName, i), o.image)
		if len(o.resources.Requests)+len(o.resources.Limits) > 0 {
			p.Spec.Containers[0].Resources = *o.resources.DeepCopy()
			p.Status.ContainerStatuses[0].Resources = o.resources.DeepCopy()
		}
		if o.kind == workload.StatefulSet || o.owned {
			p.Labels[appsv1.ControllerRevisionHashLabelKey] = rev
			p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "StatefulSet", Name: testName, UID: "uid-sts-web", Controller: ptr(true)}}
		}
		fc.createPod(p)
	}
	fc.versionStatefulSet()
	fc.reactToWrites()
	return fc
}

// versionStatefulSet gives the StatefulSet a new resourceVersion on every write, as the API
// server does and the fake's tracker does not: the workload's Events name the version they
// regard, which keeps two milestones of a rollout two Events, not one series.
func (fc *fakeCluster) versionStatefulSet() {
	tracker := fc.client.Tracker()
	write := k8stesting.ObjectReaction(tracker)
	fc.client.PrependReactor("*", "statefulsets", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetVerb() != "update" && a.GetVerb() != "patch" {
			return false, nil, nil
		}
		handled, obj, err := write(a)
		if err != nil || !handled {
			return handled, obj, err
		}
		sts := obj.(*appsv1.StatefulSet).DeepCopy()
		fc.stsVersion++
		sts.ResourceVersion = strconv.Itoa(fc.stsVersion)
		if err := tracker.Update(a.GetResource(), sts, a.GetNamespace()); err != nil {
			return true, nil, err
		}
		return true, sts, nil
	})
}

// failWrites makes the API server answer every create, update, patch and delete with the
// status code (409, 403 or 500); 0 lets writes through again.
func (fc *fakeCluster) failWrites(code int) {
	fc.failCode = code
}

func (fc *fakeCluster) reactToWrites() {
	fail := func(a k8stesting.Action) (bool, runtime.Object, error) {
		gr := a.GetResource().GroupResource()
		name := ""
		if n, ok := a.(interface{ GetName() string }); ok {
			name = n.GetName()
		}
		switch fc.failCode {
		case 0:
			return false, nil, nil
		case http.StatusConflict:
			return true, nil, apierrors.NewConflict(gr, name, errors.New("injected: the object has been modified"))
		case http.StatusForbidden:
			return true, nil, apierrors.NewForbidden(gr, name, errors.New("injected: no RBAC rule allows it"))
		default:
			return true, nil, apierrors.NewInternalError(errors.New("injected: etcd unavailable"))
		}
	}
	for _, verb := range []string{"create", "update", "patch", "delete"} {
		fc.client.PrependReactor(verb, "*", fail)
	}
}

func ptr[T any](v T) *T { return &v }

// runningPod is a scheduled pod, Running and Ready since an hour before t0, on image.
func runningPod(name, image string) *corev1.Pod {
	since := metav1.NewTime(t0.Add(-time.Hour))
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: testNS, UID: types.UID("uid-" + name),
			Labels: map[string]string{"app": testName}, CreationTimestamp: since},
		Spec: corev1.PodSpec{NodeName: "node-1", RestartPolicy: corev1.RestartPolicyAlways,
			Containers: []corev1.Container{{Name: testApp, Image: image}}},
		Status: corev1.PodStatus{
			Phase:      corev1.PodRunning,
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: since}},
			ContainerStatuses: []corev1.ContainerStatus{{
				Name: testApp, Image: image, ImageID: imageIDOf(image), Ready: true, Started: ptr(true),
				State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: since}},
			}},
		},
	}
}

// imageIDOf is the imageID a kubelet reports for image: its own digest when it names one, else
// a digest the fake registry derives from the reference.
func imageIDOf(image string) string {
	repo, digest, ok := strings.Cut(image, "@")
	if !ok {
		sum := sha256.Sum256([]byte(image))
		digest = "sha256:" + hex.EncodeToString(sum[:])
		repo = image
	}
	if i := strings.LastIndexByte(repo, ':'); i > strings.LastIndexByte(repo, '/') {
		repo = repo[:i]
	}
	return repo + "@" + digest
}

// revisionOf is the revision name the StatefulSet player computes for a template's images.
func revisionOf(images map[string]string) string {
	sum := sha256.Sum256([]byte(mustJSON(images)))
	return testName + "-" + hex.EncodeToString(sum[:])[:8]
}

// templateRevision is the revision name the StatefulSet player computes for a template: of its
// app image, and of the app container's resources when it declares any (their JSON spells each
// quantity canonically, as the API server stores it).
func templateRevision(tmpl *corev1.PodTemplateSpec) string {
	images := workload.TemplateImages(tmpl, map[string]string{testApp: ""})
	for _, c := range tmpl.Spec.Containers {
		if c.Name == testApp && len(c.Resources.Requests)+len(c.Resources.Limits) > 0 {
			images["resources"] = mustJSON(c.Resources)
		}
	}
	return revisionOf(images)
}

func (fc *fakeCluster) createPod(p *corev1.Pod) {
	fc.t.Helper()
	if _, err := fc.client.CoreV1().Pods(testNS).Create(context.Background(), p, metav1.CreateOptions{}); err != nil {
		fc.t.Fatal(err)
	}
}

// engine is an Engine on the fake cluster, with its clock and Prometheus.
func (fc *fakeCluster) engine() *Engine {
	return &Engine{Client: fc.client, Now: func() time.Time { return fc.now }, Querier: fc.query}
}

// spec is a rollout of the cluster's target to images, one pod at a time, in batches.
func (fc *fakeCluster) spec(image string, batches ...intstr.IntOrString) Spec {
	target := workload.Ref{Kind: fc.kind, Namespace: testNS, Name: testName}
	if fc.kind == workload.Pods {
		target = workload.Ref{Kind: workload.Pods, Namespace: testNS, Selector: "app=" + testName}
	}
	return Spec{
		Target: target, Images: map[string]string{testApp: image}, Batches: batches,
		MaxUnavailable: intstr.FromInt32(1), Timeout: time.Minute, Holder: testOwner,
	}
}

// sts reads the StatefulSet.
func (fc *fakeCluster) sts() *appsv1.StatefulSet {
	fc.t.Helper()
	s, err := fc.client.AppsV1().StatefulSets(testNS).Get(context.Background(), testName, metav1.GetOptions{})
	if err != nil {
		fc.t.Fatal(err)
	}
	return s
}

// pods reads the pods, by name.
func (fc *fakeCluster) pods() []corev1.Pod {
	fc.t.Helper()
	list, err := fc.client.CoreV1().Pods(testNS).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		fc.t.Fatal(err)
	}
	slices.SortFunc(list.Items, func(a, b corev1.Pod) int { return strings.Compare(a.Name, b.Name) })
	return list.Items
}

func (fc *fakeCluster) pod(name string) *corev1.Pod {
	fc.t.Helper()
	p, err := fc.client.CoreV1().Pods(testNS).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		fc.t.Fatal(err)
	}
	return p
}

func (fc *fakeCluster) updatePod(p *corev1.Pod) {
	fc.t.Helper()
	if _, err := fc.client.CoreV1().Pods(testNS).Update(context.Background(), p, metav1.UpdateOptions{}); err != nil {
		fc.t.Fatal(err)
	}
}

// lock reads the rollout lock from the target, or nil.
func (fc *fakeCluster) lock() *Record {
	fc.t.Helper()
	var raw string
	if fc.kind == workload.StatefulSet {
		raw = fc.sts().Annotations[workload.LockAnnotation]
	} else {
		cm, err := fc.client.CoreV1().ConfigMaps(testNS).Get(context.Background(), workload.PodLockName("app="+testName), metav1.GetOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			fc.t.Fatal(err)
		}
		if err == nil {
			raw = cm.Annotations[workload.LockAnnotation]
		}
	}
	if raw == "" {
		return nil
	}
	var l Record
	if err := json.Unmarshal([]byte(raw), &l); err != nil {
		fc.t.Fatalf("lock annotation: %v", err)
	}
	return &l
}

// state reads a pod's state annotation, or nil.
func (fc *fakeCluster) state(p *corev1.Pod) *inplace.State {
	fc.t.Helper()
	s, err := inplace.ReadState(p)
	if err != nil {
		fc.t.Fatal(err)
	}
	return s
}

// snapshot is every object of the cluster as JSON, to tell that nothing was written.
func (fc *fakeCluster) snapshot() string {
	fc.t.Helper()
	ctx := context.Background()
	var b strings.Builder
	if fc.kind == workload.StatefulSet {
		b.WriteString(mustJSON(fc.sts()))
	}
	b.WriteString(mustJSON(fc.pods()))
	cms, err := fc.client.CoreV1().ConfigMaps(testNS).List(ctx, metav1.ListOptions{})
	if err != nil {
		fc.t.Fatal(err)
	}
	b.WriteString(mustJSON(cms.Items))
	return b.String()
}

// play does what the cluster's controllers would do after a write: the StatefulSet controller
// records the revision of its template, and the kubelet restarts each container whose spec image
// changed.
func (fc *fakeCluster) play() {
	fc.t.Helper()
	ctx := context.Background()
	if fc.kind == workload.StatefulSet {
		sts := fc.sts()
		if rev := templateRevision(&sts.Spec.Template); sts.Status.UpdateRevision != rev {
			sts.Status.UpdateRevision = rev
			if _, err := fc.client.AppsV1().StatefulSets(testNS).UpdateStatus(ctx, sts, metav1.UpdateOptions{}); err != nil {
				fc.t.Fatal(err)
			}
		}
	}
	for _, p := range fc.pods() {
		if fc.pullers && p.Labels[prepull.LabelRollout] != "" {
			fc.runPuller(&p)
			continue
		}
		if fc.kubelet(&p) {
			if _, err := fc.client.CoreV1().Pods(testNS).UpdateStatus(ctx, &p, metav1.UpdateOptions{}); err != nil {
				fc.t.Fatal(err)
			}
		}
	}
}

// kubeletLag is how long after the step the fake kubelet acts: a kubelet starts a container
// after the write that asks for it, never at the same instant.
const kubeletLag = tick / 2

// kubelet brings the container statuses of p to its spec, as a kubelet reports a restart on a
// new image, and says whether anything changed. The new container runs and is Ready at once
// (kubeletLag after the step); imageCrash crash-loops instead, and imageHang is never pulled. A
// container's resources, when it declares any, are applied in place at once, without a restart
// (a resize's NotRequired policy).
func (fc *fakeCluster) kubelet(p *corev1.Pod) bool {
	changed := false
	for _, c := range p.Spec.Containers {
		i := slices.IndexFunc(p.Status.ContainerStatuses, func(cs corev1.ContainerStatus) bool { return cs.Name == c.Name })
		if i < 0 || c.Image == imageHang {
			continue
		}
		cs := &p.Status.ContainerStatuses[i]
		if len(c.Resources.Requests)+len(c.Resources.Limits) > 0 && (cs.Resources == nil || !equality.Semantic.DeepEqual(*cs.Resources, c.Resources)) {
			cs.Resources, changed = c.Resources.DeepCopy(), true
		}
		id := imageIDOf(c.Image)
		if d, ok := fc.pulled[c.Image]; ok {
			repo, _, _ := strings.Cut(id, "@")
			id = repo + "@" + d
		}
		if cs.Image == c.Image && cs.ImageID == id {
			continue
		}
		changed = true
		cs.Image, cs.ImageID, cs.RestartCount = c.Image, id, cs.RestartCount+1
		if c.Image == imageCrash || fc.crashing[p.Name] {
			cs.RestartCount++
			cs.Ready, cs.Started = false, ptr(false)
			cs.State = corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff", Message: "back-off 10s restarting failed container"}}
			continue
		}
		cs.Ready, cs.Started = true, ptr(true)
		cs.ContainerID = fmt.Sprintf("containerd://%s-%s-%d", p.Name, c.Name, cs.RestartCount)
		cs.State = corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.NewTime(fc.now.Add(kubeletLag))}}
	}
	{
		// Ready is the kubelet's verdict over every container and readiness gate, recomputed
		// when either changes.
		ready := true
		for _, cs := range p.Status.ContainerStatuses {
			ready = ready && cs.Ready
		}
		for _, g := range p.Spec.ReadinessGates {
			i := slices.IndexFunc(p.Status.Conditions, func(c corev1.PodCondition) bool { return c.Type == g.ConditionType })
			ready = ready && i >= 0 && p.Status.Conditions[i].Status == corev1.ConditionTrue
		}
		status := corev1.ConditionFalse
		if ready {
			status = corev1.ConditionTrue
		}
		i := slices.IndexFunc(p.Status.Conditions, func(c corev1.PodCondition) bool { return c.Type == corev1.PodReady })
		if i < 0 {
			p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{Type: corev1.PodReady})
			i = len(p.Status.Conditions) - 1
		}
		if p.Status.Conditions[i].Status != status {
			p.Status.Conditions[i].Status, p.Status.Conditions[i].LastTransitionTime = status, metav1.NewTime(fc.now.Add(kubeletLag))
			changed = true
		}
	}
	return changed
}

// runPuller runs a puller pod as a kubelet would, over two looks: it pulls, then fails to pull
// imageMissing, or finishes.
func (fc *fakeCluster) runPuller(p *corev1.Pod) {
	fc.t.Helper()
	switch {
	case p.Status.Phase == corev1.PodSucceeded:
		return
	case len(p.Status.ContainerStatuses) == 0:
		// The first look: pulling, which takes a while.
		p.Status.Phase = corev1.PodPending
		for _, c := range p.Spec.Containers {
			p.Status.ContainerStatuses = append(p.Status.ContainerStatuses, corev1.ContainerStatus{Name: c.Name, Image: c.Image,
				State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ContainerCreating"}}})
		}
		if _, err := fc.client.CoreV1().Pods(testNS).UpdateStatus(context.Background(), p, metav1.UpdateOptions{}); err != nil {
			fc.t.Fatal(err)
		}
		return
	case p.Status.ContainerStatuses[0].State.Waiting.Reason != "ContainerCreating", fc.slowPulls[p.Spec.NodeName]:
		return
	}
	p.Status.Phase = corev1.PodSucceeded
	p.Status.ContainerStatuses = nil
	for _, c := range p.Spec.Containers {
		cs := corev1.ContainerStatus{Name: c.Name, Image: c.Image, State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 0}}}
		if c.Image == imageMissing {
			p.Status.Phase = corev1.PodPending
			cs.State = corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ErrImagePull", Message: "manifest unknown"}}
		}
		p.Status.ContainerStatuses = append(p.Status.ContainerStatuses, cs)
	}
	if _, err := fc.client.CoreV1().Pods(testNS).UpdateStatus(context.Background(), p, metav1.UpdateOptions{}); err != nil {
		fc.t.Fatal(err)
	}
}

// crash makes a running pod's container crash-loop on the image it runs, as a kubelet reports
// it.
func (fc *fakeCluster) crash(name string) {
	fc.t.Helper()
	p := fc.pod(name)
	cs := &p.Status.ContainerStatuses[0]
	cs.RestartCount += 2
	cs.Ready, cs.Started = false, ptr(false)
	cs.State = corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff", Message: "back-off 20s restarting failed container"}}
	if _, err := fc.client.CoreV1().Pods(testNS).UpdateStatus(context.Background(), p, metav1.UpdateOptions{}); err != nil {
		fc.t.Fatal(err)
	}
}

// tick is how far the clock moves between two Reconcile calls of drive.
const tick = time.Second

// maxSteps bounds a drive: more Reconcile calls than this is a rollout that does not end.
const maxSteps = 400

// drive calls Reconcile with spec until stop says so or the phase is settled, playing the
// cluster and moving the clock by tick after each call. An error ends the drive. every, when
// not nil, is called after each Reconcile, before the cluster plays.
func (fc *fakeCluster) drive(e *Engine, spec Spec, prev Status, stop func(Status) bool, every func(Status)) (Status, error) {
	fc.t.Helper()
	st := prev
	for range maxSteps {
		var err error
		st, _, err = e.Reconcile(context.Background(), spec, st)
		if err != nil {
			return st, err
		}
		if every != nil {
			every(st)
		}
		if (stop != nil && stop(st)) || st.Phase.Settled() {
			return st, nil
		}
		fc.play()
		fc.now = fc.now.Add(tick)
	}
	fc.t.Fatalf("rollout not settled after %d calls: %+v", maxSteps, st)
	return st, nil
}

// mustDrive is drive that fails the test on an error.
func (fc *fakeCluster) mustDrive(e *Engine, spec Spec, prev Status, stop func(Status) bool) Status {
	fc.t.Helper()
	st, err := fc.drive(e, spec, prev, stop, nil)
	if err != nil {
		fc.t.Fatalf("Reconcile: %v (status %+v)", err, st)
	}
	return st
}

// rollbackOf is the rollback of the rollout spec started, with the same pace.
func rollbackOf(spec Spec) RollbackSpec {
	return RollbackSpec{Target: spec.Target, Holder: spec.Holder, MaxUnavailable: spec.MaxUnavailable, GracePeriod: spec.GracePeriod, Timeout: spec.Timeout}
}

// rollBack asks the engine to roll back the rollout spec started, once, from prev. Every
// explicit rollback of these tests goes through here or driveAbort.
func rollBack(fc *fakeCluster, e *Engine, spec Spec, prev Status) (Status, error) {
	fc.t.Helper()
	st, _, err := e.Abort(context.Background(), rollbackOf(spec), prev)
	return st, err
}

// driveRollback rolls back the rollout spec started and drives the rollback to its end.
func driveRollback(fc *fakeCluster, e *Engine, spec Spec, prev Status) Status {
	fc.t.Helper()
	return driveAbort(fc, e, rollbackOf(spec), prev)
}

// driveAbort calls Abort with rb until the rollback settles, playing the cluster and moving
// the clock by tick after each call.
func driveAbort(fc *fakeCluster, e *Engine, rb RollbackSpec, prev Status) Status {
	fc.t.Helper()
	st := prev
	for range maxSteps {
		var err error
		st, _, err = e.Abort(context.Background(), rb, st)
		if err != nil {
			fc.t.Fatalf("rollback: %v (status %+v)", err, st)
		}
		if st.Phase.Settled() {
			return st
		}
		fc.play()
		fc.now = fc.now.Add(tick)
	}
	fc.t.Fatalf("rollback not settled after %d calls: %+v", maxSteps, st)
	return st
}

// acceptPaused accepts the batch the rollout spec started is paused on (prev says which), as
// a person would. Every resume of these tests goes through here.
func acceptPaused(fc *fakeCluster, e *Engine, spec Spec, prev Status) (Status, error) {
	fc.t.Helper()
	p, ok := PauseOf(prev)
	if !ok {
		fc.t.Fatalf("accept: the status reports no pause: %+v", prev)
	}
	return e.Accept(context.Background(), spec.Target, spec.Holder, p)
}

// assertOnImage checks that every pod runs image's content, Ready, with its spec naming it (a
// revert may name it by digest), and carries the StatefulSet's update revision.
func (fc *fakeCluster) assertOnImage(image string) {
	fc.t.Helper()
	var rev string
	if fc.kind == workload.StatefulSet {
		rev = fc.sts().Status.UpdateRevision
	}
	for _, p := range fc.pods() {
		spec, cs := p.Spec.Containers[0].Image, p.Status.ContainerStatuses[0]
		if imageIDOf(spec) != imageIDOf(image) || cs.ImageID != imageIDOf(image) || !cs.Ready {
			fc.t.Errorf("pod %s: spec image %s, running %s (ready %v), want %s", p.Name, spec, cs.ImageID, cs.Ready, image)
		}
		if rev != "" && p.Labels[appsv1.ControllerRevisionHashLabelKey] != rev {
			fc.t.Errorf("pod %s is at revision %s, the StatefulSet's is %s: its controller would recreate it", p.Name, p.Labels[appsv1.ControllerRevisionHashLabelKey], rev)
		}
	}
}

// restarts is each pod's restart count, by name: one per in-place image change.
func (fc *fakeCluster) restarts() map[string]int32 {
	out := map[string]int32{}
	for _, p := range fc.pods() {
		out[p.Name] = p.Status.ContainerStatuses[0].RestartCount
	}
	return out
}

// fakeQuerier plays Prometheus for the analysis: every query gets the verdict the test set;
// "vector(1)", the reachability check before a rollout starts, always answers.
type fakeQuerier struct {
	mu      sync.Mutex
	verdict analysis.Verdict // Pass when empty
	queries []string
}

func (q *fakeQuerier) set(v analysis.Verdict) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.verdict = v
}

func (q *fakeQuerier) Query(_ context.Context, query string) (float64, bool, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if query == "vector(1)" {
		return 1, true, nil
	}
	q.queries = append(q.queries, query)
	switch q.verdict {
	case analysis.Fail:
		return 0, true, nil
	case analysis.Inconclusive:
		return 0, false, nil
	case analysis.Error:
		return 0, false, errors.New("prometheus: server error: 503")
	}
	return 1, true, nil
}

// measured is how many queries the analysis sent.
func (q *fakeQuerier) measured() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.queries)
}

// crashLoop makes a pod's container crash-loop from now on, on every image.
func (fc *fakeCluster) crashLoop(name string) {
	fc.t.Helper()
	if fc.crashing == nil {
		fc.crashing = map[string]bool{}
	}
	fc.crashing[name] = true
	fc.crash(name)
	p := fc.pod(name)
	p.Status.Conditions[0] = corev1.PodCondition{Type: corev1.PodReady, Status: corev1.ConditionFalse, LastTransitionTime: metav1.NewTime(fc.now.Add(-time.Minute))}
	fc.updatePod(p)
}

// testAnalysis is an analysis of one measurement per batch with one check, "up", that passes
// when the result is above 0 (the golden signals are off); a single Error decides.
func testAnalysis(t testing.TB) *analysis.Config {
	t.Helper()
	return testAnalysisOf(t, 1)
}

// testAnalysisOf is testAnalysis with count measurements per batch.
func testAnalysisOf(t testing.TB, count int) *analysis.Config {
	t.Helper()
	cfg, err := analysis.Decode([]byte("prometheus: {address: 'http://prom.example:9090'}\ncount: " + fmt.Sprint(count) + "\ninterval: 1s\ninitialDelay: 0s\nconsecutiveErrorLimit: 0\n" +
		"checks: {errorRate: {disabled: true}, latency: {disabled: true}, traffic: {disabled: true}, saturation: {disabled: true},\n" +
		"  custom: [{name: up, query: 'min(up{pod=~\"{{.Pods}}\"})', condition: result > 0}]}\n"))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}
