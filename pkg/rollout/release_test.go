package rollout

import (
	"context"
	"errors"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	k8stesting "k8s.io/client-go/testing"

	"github.com/inplace-rollout/inplace-rollout/pkg/inplace"
	"github.com/inplace-rollout/inplace-rollout/pkg/workload"
)

func TestDecideRelease(t *testing.T) {
	lock := func(holder, phase string) *workload.Lock {
		return &workload.Lock{Holder: holder, RolloutID: "r-1", Phase: phase, Reason: "why"}
	}
	tests := []struct {
		name     string
		lock     *workload.Lock
		inflight int
		want     releaseAction
		msg      string
	}{
		{"no lock", nil, 0, releaseNone, "nothing to release"},
		{"another holder's rollout", lock("cli", workload.LockProgressing), 0, releaseNone, "is cli's, not argo:ns/ro's"},
		{"another holder's, pods in flight", lock("cli", workload.LockProgressing), 2, releaseNone, "nothing to release"},
		{"succeeded", lock("argo:ns/ro", workload.LockSucceeded), 0, releaseNone, "is Succeeded"},
		{"rolled back", lock("argo:ns/ro", workload.LockRolledBack), 0, releaseNone, "is RolledBack"},
		{"already released", lock("argo:ns/ro", workload.LockReleased), 0, releaseDone, "already released"},
		{"rolling back", lock("argo:ns/ro", workload.LockRollingBack), 0, releaseRefuse, "the rollback goes on"},
		{"rolling back, pods in flight", lock("argo:ns/ro", workload.LockRollingBack), 3, releaseRefuse, "rolling back"},
		{"progressing, pods in flight", lock("argo:ns/ro", workload.LockProgressing), 1, releaseWait, "1 pods of rollout r-1 are mid-update"},
		{"holding, pods in flight", lock("argo:ns/ro", workload.LockHolding), 1, releaseWait, "mid-update"},
		{"progressing", lock("argo:ns/ro", workload.LockProgressing), 0, releaseNow, ""},
		{"holding", lock("argo:ns/ro", workload.LockHolding), 0, releaseNow, ""},
		{"paused", lock("argo:ns/ro", workload.LockPaused), 0, releaseNow, ""},
		{"halted", lock("argo:ns/ro", workload.LockHalted), 0, releaseNow, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, msg := decideRelease(tt.lock, "argo:ns/ro", tt.inflight)
			if got != tt.want || !strings.Contains(msg, tt.msg) {
				t.Errorf("decideRelease = %d %q, want %d with %q", got, msg, tt.want, tt.msg)
			}
		})
	}
}

// writeActions lists the writes the fake API server received since the last ClearActions.
func (fc *fakeCluster) writeActions() []string {
	var out []string
	for _, a := range fc.client.Actions() {
		switch a.GetVerb() {
		case "get", "list", "watch":
			continue
		}
		out = append(out, a.GetVerb()+" "+a.GetResource().Resource)
	}
	return out
}

// rollRest plays the StatefulSet controller's RollingUpdate once its strategy is back: every pod
// not at the update revision is deleted and created again from the template.
func (fc *fakeCluster) rollRest() {
	fc.t.Helper()
	ctx := context.Background()
	sts := fc.sts()
	for _, p := range fc.pods() {
		if p.Labels[appsv1.ControllerRevisionHashLabelKey] == sts.Status.UpdateRevision {
			continue
		}
		if err := fc.client.CoreV1().Pods(testNS).Delete(ctx, p.Name, metav1.DeleteOptions{}); err != nil {
			fc.t.Fatal(err)
		}
		np := runningPod(p.Name, sts.Spec.Template.Spec.Containers[0].Image)
		np.Labels[appsv1.ControllerRevisionHashLabelKey] = sts.Status.UpdateRevision
		np.OwnerReferences = p.OwnerReferences
		fc.createPod(np)
	}
}

// TestRelease: a rollout released part way hands its StatefulSet back in one write (strategy
// restored, template and pods as they are, states readable); the same release again writes
// nothing; once the controller has rolled the rest, another holder's rollout starts.
func TestRelease(t *testing.T) {
	fc := newFakeCluster(t, clusterOpts{pods: 3})
	e := fc.engine()
	spec := fc.spec(imageV2, one, all)
	spec.Holder = "argo:shop/web"
	spec.UpTo = &one
	if st := fc.mustDrive(e, spec, Status{}, nil); st.Phase != PhaseHolding {
		t.Fatalf("rollout = %s (%s), want Holding", st.Phase, st.Message)
	}
	fc.client.ClearActions()
	st, err := e.Release(context.Background(), spec.Target, spec.Holder)
	if err != nil || st.Phase != PhaseReleased || st.Updated != 1 || st.Total != 3 {
		t.Fatalf("Release = %+v, %v; want Released with 1/3 updated", st, err)
	}
	if w := fc.writeActions(); len(w) != 1 || w[0] != "patch statefulsets" {
		t.Errorf("Release wrote %v, want one patch of the StatefulSet", w)
	}
	sts := fc.sts()
	if sts.Spec.UpdateStrategy.Type != appsv1.RollingUpdateStatefulSetStrategyType {
		t.Errorf("update strategy %s, want RollingUpdate back", sts.Spec.UpdateStrategy.Type)
	}
	if got := sts.Spec.Template.Spec.Containers[0].Image; got != imageV2 {
		t.Errorf("template image %s, want the rollout's %s kept", got, imageV2)
	}
	l := fc.lock()
	if l.Phase != workload.LockReleased || l.Active() || l.PreviousImages[testApp] != imageV1 {
		t.Errorf("lock = %+v, want Released, inactive, previous images kept", l)
	}
	images := map[string]string{}
	for _, p := range fc.pods() {
		images[p.Name] = p.Spec.Containers[0].Image
		s := fc.state(&p)
		if p.Name == "web-2" && (s == nil || s.Stage != inplace.StageUpdated || p.Labels[appsv1.ControllerRevisionHashLabelKey] != sts.Status.UpdateRevision) {
			t.Errorf("pod web-2: state %+v, revision %s; want Updated at the template's revision", s, p.Labels[appsv1.ControllerRevisionHashLabelKey])
		}
	}
	if want := map[string]string{"web-0": imageV1, "web-1": imageV1, "web-2": imageV2}; mustJSON(images) != mustJSON(want) {
		t.Errorf("pods run %v, want %v: a release touches no pod", images, want)
	}

	before := fc.snapshot()
	if st, err := e.Release(context.Background(), spec.Target, spec.Holder); err != nil || st.Phase != PhaseReleased || fc.snapshot() != before {
		t.Errorf("Release again = %+v, %v, cluster changed %v; want Released with nothing written", st, err, fc.snapshot() != before)
	}

	fc.rollRest()
	next := fc.spec(imageV3, one, all)
	st = fc.mustDrive(e, next, Status{}, nil)
	if st.Phase != PhaseSucceeded {
		t.Fatalf("the next rollout = %s (%s), want Succeeded", st.Phase, st.Message)
	}
	if l := fc.lock(); l.Holder != testOwner || l.PreviousImages[testApp] != imageV2 {
		t.Errorf("the next rollout's lock = %+v, want held by %s from %s", l, testOwner, imageV2)
	}
	if fc.sts().Spec.UpdateStrategy.Type != appsv1.RollingUpdateStatefulSetStrategyType {
		t.Errorf("after the next rollout the strategy is %s, want RollingUpdate", fc.sts().Spec.UpdateStrategy.Type)
	}
	fc.assertOnImage(imageV3)
}

// TestReleaseRefusals: pods mid-update, a rollback, another holder: nothing is written.
func TestReleaseRefusals(t *testing.T) {
	tests := []struct {
		name string
		// setup drives the cluster to the state Release meets.
		setup   func(fc *fakeCluster, e *Engine, spec Spec)
		holder  string
		phase   Phase
		wantErr string
	}{
		{name: "pods mid-update", holder: testOwner, phase: PhaseProgressing,
			setup: func(fc *fakeCluster, e *Engine, spec Spec) {
				spec.Images = map[string]string{testApp: imageHang}
				fc.mustDrive(e, spec, Status{}, func(st Status) bool { return st.Updating > 0 })
				fc.play()
			}},
		{name: "rolling back", holder: testOwner, wantErr: "is rolling back",
			setup: func(fc *fakeCluster, e *Engine, spec Spec) {
				st := fc.mustDrive(e, spec, Status{}, func(st Status) bool { return st.Updated == 1 })
				if _, err := rollBack(fc, e, spec, st); err != nil {
					fc.t.Fatal(err)
				}
			}},
		{name: "another holder", holder: "argo:shop/other",
			setup: func(fc *fakeCluster, e *Engine, spec Spec) {
				fc.mustDrive(e, spec, Status{}, func(st Status) bool { return st.Updated == 1 })
			}},
		{name: "no rollout", holder: testOwner, setup: func(*fakeCluster, *Engine, Spec) {}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fc := newFakeCluster(t, clusterOpts{pods: 3})
			e := fc.engine()
			spec := fc.spec(imageV2, one, all)
			tt.setup(fc, e, spec)
			before := fc.snapshot()
			st, err := e.Release(context.Background(), spec.Target, tt.holder)
			var inv *InvalidError
			switch {
			case tt.wantErr != "":
				if !errors.As(err, &inv) || !strings.Contains(err.Error(), tt.wantErr) {
					t.Errorf("Release = %v, want an *InvalidError with %q", err, tt.wantErr)
				}
			case err != nil || st.Phase != tt.phase:
				t.Errorf("Release = %+v, %v; want phase %q", st, err, tt.phase)
			}
			if fc.snapshot() != before {
				t.Error("Release wrote to the cluster")
			}
			if tt.phase == PhaseProgressing && st.Updating == 0 {
				t.Errorf("Release = %+v, want the pods mid-update counted", st)
			}
		})
	}
}

// TestReleaseAfterWindingDown: pods mid-update finish under a hold point of 1, which starts no
// more; then the release goes through. A conflict on the write is observed afresh and retried.
func TestReleaseAfterWindingDown(t *testing.T) {
	fc := newFakeCluster(t, clusterOpts{pods: 4})
	e := fc.engine()
	spec := fc.spec(imageV2, intstr.FromInt32(2), all)
	spec.MaxUnavailable = intstr.FromInt32(2)
	st := fc.mustDrive(e, spec, Status{}, func(st Status) bool { return st.Updating == 2 })
	if st, err := e.Release(context.Background(), spec.Target, spec.Holder); err != nil || st.Phase != PhaseProgressing || st.Updating != 2 {
		t.Fatalf("Release mid-update = %+v, %v; want Progressing with 2 updating", st, err)
	}
	wind := spec
	wind.UpTo = &one
	fc.play()
	if st = fc.mustDrive(e, wind, st, nil); st.Phase != PhaseHolding || st.Updated != 2 {
		t.Fatalf("winding down = %s with %d updated (%s), want Holding with 2", st.Phase, st.Updated, st.Message)
	}
	conflicts := 2
	fc.client.PrependReactor("patch", "statefulsets", func(k8stesting.Action) (bool, runtime.Object, error) {
		if conflicts == 0 {
			return false, nil, nil
		}
		conflicts--
		return true, nil, apierrors.NewConflict(appsv1.Resource("statefulsets"), testName, errors.New("injected: the object has been modified"))
	})
	if st, err := e.Release(context.Background(), spec.Target, spec.Holder); err != nil || st.Phase != PhaseReleased || st.Updated != 2 {
		t.Fatalf("Release = %+v, %v; want Released with 2 updated", st, err)
	}
	if conflicts != 0 {
		t.Errorf("%d injected conflicts left: the release never met them", conflicts)
	}
	if l := fc.lock(); l.Phase != workload.LockReleased {
		t.Errorf("lock %s, want Released", l.Phase)
	}
	updated := 0
	for _, p := range fc.pods() {
		if p.Spec.Containers[0].Image == imageV2 {
			updated++
		}
	}
	if updated != 2 {
		t.Errorf("%d pods on %s, want the 2 of the first batch", updated, imageV2)
	}
}

// TestReleaseThenRollback: a released rollout is rolled back as a finished one is.
func TestReleaseThenRollback(t *testing.T) {
	for _, kind := range []workload.Kind{workload.StatefulSet, workload.Pods} {
		t.Run(string(kind), func(t *testing.T) {
			fc := newFakeCluster(t, clusterOpts{kind: kind, pods: 3})
			e := fc.engine()
			spec := fc.spec(imageV2, one, all)
			two := intstr.FromInt32(2)
			spec.UpTo = &two
			st := fc.mustDrive(e, spec, Status{}, nil)
			if st, err := e.Release(context.Background(), spec.Target, spec.Holder); err != nil || st.Phase != PhaseReleased {
				t.Fatalf("Release = %+v, %v; want Released", st, err)
			}
			if l := fc.lock(); l.Phase != workload.LockReleased {
				t.Fatalf("lock %s, want Released", l.Phase)
			}
			if st = driveRollback(fc, e, spec, st); st.Phase != PhaseRolledBack || st.RolledBack != 2 {
				t.Fatalf("rollback = %s with %d rolled back (%s), want RolledBack with 2", st.Phase, st.RolledBack, st.Message)
			}
			fc.play()
			fc.assertOnImage(imageV1)
		})
	}
}
