package rollout

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"

	"github.com/inplace-rollout/inplace-rollout/pkg/inplace"
	"github.com/inplace-rollout/inplace-rollout/pkg/workload"
)

// Record reads a workload's lock with exactly one GET, whatever the kind, and writes nothing.
func TestRecordOneGet(t *testing.T) {
	const lockJSON = `{"holder":"argo:shop/web","rolloutID":"abc-1","specHash":"abc","images":{"app":"reg.example/app:v2"},"previousImages":null,"phase":"Succeeded","startedAt":"2026-03-01T12:00:00Z"}`
	locked := metav1.ObjectMeta{Name: testName, Namespace: testNS, Annotations: map[string]string{workload.LockAnnotation: lockJSON}}
	bare := metav1.ObjectMeta{Name: testName, Namespace: testNS}
	selector := "app=web"
	// The ConfigMap of a selector's lock is found through a Pods workload's own write.
	podsLock := func(t *testing.T) runtime.Object {
		t.Helper()
		client := fake.NewClientset(runningPod("web-0", imageV1))
		w, err := workload.Load(context.Background(), client, workload.Ref{Kind: workload.Pods, Namespace: testNS, Selector: selector})
		if err != nil {
			t.Fatal(err)
		}
		if err := w.Start(context.Background(), (&Record{Holder: "argo:shop/web", RolloutID: "abc-1", Phase: PhaseSucceeded}).encode(), workload.Change{}); err != nil {
			t.Fatal(err)
		}
		cms, err := client.CoreV1().ConfigMaps(testNS).List(context.Background(), metav1.ListOptions{})
		if err != nil || len(cms.Items) != 1 {
			t.Fatalf("the lock ConfigMap: %v, %d ConfigMaps", err, len(cms.Items))
		}
		return &cms.Items[0]
	}
	tests := []struct {
		name    string
		objects func(t *testing.T) []runtime.Object
		ref     workload.Ref
		// rolloutID of the lock read; empty for none.
		rolloutID string
		invalid   bool
	}{
		{"StatefulSet with a lock", func(*testing.T) []runtime.Object { return []runtime.Object{&appsv1.StatefulSet{ObjectMeta: locked}} },
			workload.Ref{Kind: workload.StatefulSet, Namespace: testNS, Name: testName}, "abc-1", false},
		{"StatefulSet without", func(*testing.T) []runtime.Object { return []runtime.Object{&appsv1.StatefulSet{ObjectMeta: bare}} },
			workload.Ref{Kind: workload.StatefulSet, Namespace: testNS, Name: testName}, "", false},
		{"DaemonSet", func(*testing.T) []runtime.Object { return []runtime.Object{&appsv1.DaemonSet{ObjectMeta: locked}} },
			workload.Ref{Kind: workload.DaemonSet, Namespace: testNS, Name: testName}, "abc-1", false},
		{"Deployment", func(*testing.T) []runtime.Object { return []runtime.Object{&appsv1.Deployment{ObjectMeta: locked}} },
			workload.Ref{Kind: workload.Deployment, Namespace: testNS, Name: testName}, "abc-1", false},
		{"Pods with a lock", func(t *testing.T) []runtime.Object { return []runtime.Object{podsLock(t)} },
			workload.Ref{Kind: workload.Pods, Namespace: testNS, Selector: selector}, "abc-1", false},
		{"Pods never rolled out", func(*testing.T) []runtime.Object { return []runtime.Object{runningPod("web-0", imageV1)} },
			workload.Ref{Kind: workload.Pods, Namespace: testNS, Selector: selector}, "", false},
		{"no such StatefulSet", func(*testing.T) []runtime.Object { return []runtime.Object{&corev1.ConfigMap{ObjectMeta: bare}} },
			workload.Ref{Kind: workload.StatefulSet, Namespace: testNS, Name: testName}, "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			client := fake.NewClientset(tt.objects(t)...)
			client.ClearActions()
			rec, err := (&Engine{Client: client}).Record(context.Background(), tt.ref)
			var inv *InvalidError
			switch {
			case tt.invalid && !errors.As(err, &inv):
				t.Fatalf("Record error %v, want an *InvalidError", err)
			case !tt.invalid && err != nil:
				t.Fatalf("Record: %v", err)
			}
			got := ""
			if rec != nil {
				got = rec.RolloutID
				if rec.Target != tt.ref || rec.Holder != "argo:shop/web" || rec.Phase != PhaseSucceeded {
					t.Errorf("record %+v, want the lock of %s held by argo:shop/web, Succeeded", rec, tt.ref)
				}
			}
			if got != tt.rolloutID {
				t.Errorf("lock of rollout %q, want %q", got, tt.rolloutID)
			}
			actions := client.Actions()
			if len(actions) != 1 || actions[0].GetVerb() != "get" {
				var verbs []string
				for _, a := range actions {
					verbs = append(verbs, a.GetVerb()+" "+a.GetResource().Resource)
				}
				t.Errorf("API calls %v, want one get", verbs)
			}
		})
	}
}

// TestRecordPhase: every phase a lock records is the Phase of the same name, and a Record holds
// the workload exactly when its lock does.
func TestRecordPhase(t *testing.T) {
	tests := []struct {
		lock   string
		phase  Phase
		active bool
	}{
		{"Progressing", PhaseProgressing, true},
		{"Paused", PhasePaused, true},
		{"Holding", PhaseHolding, true},
		{"RollingBack", PhaseRollingBack, true},
		{"Halted", PhaseHalted, true},
		{"Succeeded", PhaseSucceeded, false},
		{"RolledBack", PhaseRolledBack, false},
		{"Released", PhaseReleased, false},
	}
	for _, tt := range tests {
		t.Run(tt.lock, func(t *testing.T) {
			lock := &Record{Holder: "cli", RolloutID: "r1", Phase: Phase(tt.lock), Message: "why", Reason: ReasonPodFailed}
			rec := mustRecordOf(t, workload.Ref{Kind: workload.StatefulSet, Namespace: testNS, Name: testName}, lockOf(lock))
			if rec.Active() != tt.active || lock.Active() != tt.active {
				t.Errorf("Active() = %t (the lock's %t), want %t", rec.Active(), lock.Active(), tt.active)
			}
			if rec.Phase != tt.phase || rec.Reason != ReasonPodFailed || rec.Message != "why" || rec.Holder != "cli" || rec.RolloutID != "r1" {
				t.Errorf("record %+v of lock %+v", rec, lock)
			}
		})
	}
	var none *Record
	if none.Active() || mustRecordOf(t, workload.Ref{}, nil) != nil {
		t.Error("no lock, yet a record that holds the workload")
	}
}

// TestRecordHeldBy judges a holder as the lock does: by name, and by UID when both have one.
func TestRecordHeldBy(t *testing.T) {
	tests := []struct {
		name      string
		recordUID types.UID
		holder    string
		uid       types.UID
		want      bool
	}{
		{"same name and UID", "u1", "argo:shop/web", "u1", true},
		{"another UID", "u1", "argo:shop/web", "u2", false},
		{"record without a UID", "", "argo:shop/web", "u2", true},
		{"caller without a UID", "u1", "argo:shop/web", "", true},
		{"another name", "u1", "argo:shop/api", "u1", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			lock := &Record{Holder: "argo:shop/web", HolderUID: tt.recordUID, Phase: PhaseProgressing}
			rec := mustRecordOf(t, workload.Ref{}, lockOf(lock))
			if got := rec.HeldBy(tt.holder, tt.uid); got != tt.want || lock.HeldBy(tt.holder, tt.uid) != tt.want {
				t.Errorf("HeldBy(%q, %q) = %t, want %t", tt.holder, tt.uid, got, tt.want)
			}
		})
	}
}

// TestRecordEqual: two reads of a lock that says the same are equal; a change to any field of
// the lock, even one a Record does not show, makes them differ.
func TestRecordEqual(t *testing.T) {
	ref := workload.Ref{Kind: workload.StatefulSet, Namespace: testNS, Name: testName}
	lock := func() *Record {
		return &Record{Holder: "cli", RolloutID: "r1", SpecHash: "h", Phase: PhaseHolding, HeldAt: 2,
			Images: map[string]string{testApp: imageV2}, StartedAt: t0}
	}
	if a, b := mustRecordOf(t, ref, lockOf(lock())), mustRecordOf(t, ref, lockOf(lock())); !a.Equal(b) {
		t.Errorf("two reads of one lock differ: %+v, %+v", a, b)
	}
	changes := map[string]func(*Record){
		"hold point": func(l *Record) { l.HeldAt = 3 },
		"touched":    func(l *Record) { l.Touched = []TouchedPod{{Name: "web-0", UID: "p0"}} },
		"phase":      func(l *Record) { l.Phase = PhaseSucceeded },
		"images":     func(l *Record) { l.Images[testApp] = imageV3 },
	}
	for name, change := range changes {
		changed := lock()
		change(changed)
		if a, b := mustRecordOf(t, ref, lockOf(lock())), mustRecordOf(t, ref, lockOf(changed)); a.Equal(b) {
			t.Errorf("%s changed, yet the records are equal", name)
		}
	}
}

// TestListRecords lists the records that hold a workload for holders of a prefix, each naming
// its workload.
func TestListRecords(t *testing.T) {
	lockOn := func(name, holder string, phase Phase) *appsv1.StatefulSet {
		raw, err := json.Marshal(Record{Holder: holder, RolloutID: "r-" + name, Phase: phase, StartedAt: t0})
		if err != nil {
			t.Fatal(err)
		}
		return &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: testNS, Annotations: map[string]string{workload.LockAnnotation: string(raw)}}}
	}
	client := fake.NewClientset(
		lockOn("a", "argo:shop/a", PhaseProgressing),
		lockOn("b", "argo:shop/b", PhaseSucceeded),
		lockOn("c", "tekton:shop/c", PhaseRollingBack),
		lockOn("d", "argo:shop/d", PhaseHalted),
	)
	recs, err := (&Engine{Client: client}).ListRecords(context.Background(), metav1.NamespaceAll, "argo:")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range recs {
		if r.Target != (workload.Ref{Kind: workload.StatefulSet, Namespace: testNS, Name: r.Target.Name}) || r.RolloutID != "r-"+r.Target.Name {
			t.Errorf("record %+v does not name its workload", r)
		}
		got = append(got, r.Target.Name+":"+string(r.Phase))
	}
	slices.Sort(got)
	if want := []string{"a:Progressing", "d:Halted"}; !slices.Equal(got, want) {
		t.Errorf("ListRecords = %v, want %v", got, want)
	}
}

// TestListRecordsOfEveryKind: the holders' prefix and the namespace choose, over every kind of
// workload and label-selected pods; a lock that cannot be read, by the workload or as a record,
// is reported with the others listed.
func TestListRecordsOfEveryKind(t *testing.T) {
	meta := func(ns, name, holder string, phase Phase) metav1.ObjectMeta {
		raw := (&Record{Holder: holder, RolloutID: "r1", Phase: phase, Images: map[string]string{testApp: imageV2}}).encode()
		return metav1.ObjectMeta{Namespace: ns, Name: name, Annotations: map[string]string{workload.LockAnnotation: raw}}
	}
	podLock := func(ns, sel, holder string, phase Phase) *corev1.ConfigMap {
		m := meta(ns, workload.PodLockName(sel), holder, phase)
		m.Annotations[workload.SelectorAnnotation] = sel
		return &corev1.ConfigMap{ObjectMeta: m}
	}
	objects := []runtime.Object{
		&appsv1.StatefulSet{ObjectMeta: meta("a", "web", "argo:a/web", PhaseProgressing)},
		&appsv1.StatefulSet{ObjectMeta: meta("a", "done", "argo:a/done", PhaseSucceeded)},
		&appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "plain"}},
		&appsv1.DaemonSet{ObjectMeta: meta("b", "agent", "argo:b/agent", PhaseRollingBack)},
		&appsv1.Deployment{ObjectMeta: meta("b", "api", "tekton:b/run", PhasePaused)},
		&appsv1.Deployment{ObjectMeta: meta("a", "cli", "cli", PhaseHolding)},
		podLock("a", "app=loose", "argo:a/loose", PhaseHalted),
		&appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Namespace: "b", Name: "bad", Annotations: map[string]string{workload.LockAnnotation: "{"}}},
		&appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Namespace: "c", Name: "edited", Annotations: map[string]string{workload.LockAnnotation: `{"holder":"argo:c/edited","phase":"Done"}`}}},
	}
	tests := []struct {
		name, namespace, prefix string
		want                    []string
		wantErrs                []string // the objects whose locks are reported unreadable
	}{
		{"argo holders everywhere", "", "argo:", []string{"DaemonSet b/agent argo:b/agent", "StatefulSet a/web argo:a/web", "pods in a matching \"app=loose\" argo:a/loose"}, []string{"bad", "edited"}},
		{"argo holders of one namespace", "a", "argo:", []string{"StatefulSet a/web argo:a/web", "pods in a matching \"app=loose\" argo:a/loose"}, nil},
		{"tekton holders", "", "tekton:", []string{"Deployment b/api tekton:b/run"}, []string{"bad", "edited"}},
		{"every holder", "", "", []string{"DaemonSet b/agent argo:b/agent", "Deployment a/cli cli", "Deployment b/api tekton:b/run", "StatefulSet a/web argo:a/web", "pods in a matching \"app=loose\" argo:a/loose"}, []string{"bad", "edited"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			recs, err := (&Engine{Client: fake.NewClientset(objects...)}).ListRecords(context.Background(), tt.namespace, tt.prefix)
			var got []string
			for _, r := range recs {
				got = append(got, r.Target.String()+" "+r.Holder)
			}
			slices.Sort(got)
			if !slices.Equal(got, tt.want) {
				t.Errorf("records:\n got %q\nwant %q", got, tt.want)
			}
			for _, name := range tt.wantErrs {
				if err == nil || !strings.Contains(err.Error(), "/"+name+": annotation") {
					t.Errorf("error %v: want the unreadable lock of %s reported", err, name)
				}
			}
			var le *workload.LockError
			if (len(tt.wantErrs) > 0) != errors.As(err, &le) {
				t.Errorf("error %v, want a *workload.LockError: %t", err, len(tt.wantErrs) > 0)
			}
		})
	}
}

// TestWatchPods: a change to the workload's pods leaves a value on the channel; a workload that
// cannot be read is an error, and no watch.
func TestWatchPods(t *testing.T) {
	fc := newFakeCluster(t, clusterOpts{pods: 2})
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	w, err := WatchPods(ctx, fc.client, fc.spec(imageV2).Target)
	if err != nil {
		t.Fatal(err)
	}
	p := fc.pod("web-1")
	p.Labels["touched"] = "yes"
	fc.updatePod(p)
	select {
	case <-w.Changes():
	case <-time.After(10 * time.Second):
		t.Fatal("no change seen")
	}
	if _, err := WatchPods(ctx, fc.client, workload.Ref{Kind: workload.DaemonSet, Namespace: testNS, Name: "none"}); err == nil {
		t.Error("watching the pods of a DaemonSet that does not exist: no error")
	}
}

func TestNativeSidecar(t *testing.T) {
	always := corev1.ContainerRestartPolicyAlways
	if !NativeSidecar(corev1.Container{RestartPolicy: &always}) || NativeSidecar(corev1.Container{}) {
		t.Error("NativeSidecar does not tell an init container with restartPolicy Always from others")
	}
}

// TestRecordJSONNames: a Record encodes each field under the name the lock annotation has
// always used, so annotations written by any version read unchanged, and the Reason code and
// the Message words keep their stored names (reasonCode, reason).
func TestRecordJSONNames(t *testing.T) {
	rec := Record{Target: workload.Ref{Kind: workload.StatefulSet, Namespace: testNS, Name: testName},
		Holder: "argo:shop/web", HolderUID: "u1", RolloutID: "r1", SpecHash: "h",
		Images: map[string]string{testApp: imageV2}, PreviousImages: map[string]string{testApp: imageV1},
		BeforeImages: map[string][]string{testApp: {imageV1}}, PreviousStrategy: json.RawMessage(`{"paused":true}`),
		Superseded: []string{"r0"}, Touched: []TouchedPod{{Name: "web-0", UID: "p0"}}, TouchedMore: 1,
		Phase: PhaseHolding, Message: "why", Reason: ReasonPodFailed, StartedAt: t0, ProgressAt: t0,
		AcceptedPods: 2, AcceptedAll: true, HeldAt: 3, Reported: 4, Analysis: json.RawMessage(`{"batch":1}`),
		Resources:         resourcesJSON(t, `{"app":{"requests":{"cpu":"500m"}}}`),
		PreviousResources: resourcesJSON(t, `{"app":{"limits":{"memory":"64Mi"}}}`),
		stored:            "not encoded"}
	data, err := json.Marshal(rec)
	if err != nil {
		t.Fatal(err)
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(data, &fields); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"holder": `"argo:shop/web"`, "holderUID": `"u1"`, "rolloutID": `"r1"`, "specHash": `"h"`,
		"phase": `"Holding"`, "reason": `"why"`, "reasonCode": `"PodFailed"`, "touchedMore": `1`, "acceptedPods": `2`,
		"acceptedAll": `true`, "heldAt": `3`, "reported": `4`, "analysis": `{"batch":1}`, "previousStrategy": `{"paused":true}`,
		"superseded": `["r0"]`, "touched": `[{"name":"web-0","uid":"p0"}]`,
		"resources": `{"app":{"requests":{"cpu":"500m"}}}`, "previousResources": `{"app":{"limits":{"memory":"64Mi"}}}`}
	for name, value := range want {
		if got := string(fields[name]); got != value {
			t.Errorf("field %s = %s, want %s", name, got, value)
		}
	}
	for _, name := range []string{"images", "previousImages", "beforeImages", "startedAt", "progressAt"} {
		if _, ok := fields[name]; !ok {
			t.Errorf("field %s missing from %s", name, data)
		}
	}
	if len(fields) != len(want)+5 {
		t.Errorf("%d fields, want %d: %s", len(fields), len(want)+5, data)
	}
	var back Record
	if err := json.Unmarshal(data, &back); err != nil {
		t.Fatal(err)
	}
	back.Target, back.stored, rec.stored = rec.Target, "", ""
	if !reflect.DeepEqual(back, rec) {
		t.Errorf("decoded %+v\nwant %+v", back, rec)
	}
}

// resourcesJSON decodes resources by container from JSON, as a lock's are read back: a
// quantity keeps the spelling it was decoded from, so values compared after a round trip are
// decoded alike.
func resourcesJSON(t testing.TB, data string) map[string]inplace.Resources {
	t.Helper()
	var out map[string]inplace.Resources
	if err := json.Unmarshal([]byte(data), &out); err != nil {
		t.Fatal(err)
	}
	return out
}

// lockOf is the lock a workload reads from the annotation that stores r.
func lockOf(r *Record) *workload.Lock {
	return &workload.Lock{Record: r.encode(), PreviousImages: r.PreviousImages, PreviousResources: r.PreviousResources, PreviousStrategy: r.PreviousStrategy}
}

// mustRecordOf is recordOf of a lock that must decode.
func mustRecordOf(t *testing.T, target Ref, lock *workload.Lock) *Record {
	t.Helper()
	r, err := recordOf(target, lock)
	if err != nil {
		t.Fatalf("decoding the record of %s: %v", target, err)
	}
	return r
}

// TestRecordRoundTrip: a Record with every field set is stored by the workload as it is given,
// and read back Equal and field for field the same; the workload reads its previous images and
// strategy from it.
func TestRecordRoundTrip(t *testing.T) {
	ref := workload.Ref{Kind: workload.StatefulSet, Namespace: testNS, Name: testName}
	rec := &Record{Target: ref, Holder: "argo:shop/web", HolderUID: "u1", RolloutID: "r1", SpecHash: "h",
		Images: map[string]string{testApp: imageV2}, PreviousImages: map[string]string{testApp: imageV1},
		BeforeImages: map[string][]string{testApp: {imageV1}}, PreviousStrategy: json.RawMessage(`{"paused":true}`),
		Superseded: []string{"r0"}, Touched: []TouchedPod{{Name: "web-0", UID: "p0"}}, TouchedMore: 1,
		Phase: PhaseHolding, Message: "why", Reason: ReasonPodFailed, StartedAt: t0, ProgressAt: t0.Add(time.Second),
		AcceptedPods: 2, AcceptedAll: true, HeldAt: 3, Reported: 4, Analysis: json.RawMessage(`{"batch":1}`), TemplateOwned: true, Labels: map[string]string{"l": "1"}, Annotations: map[string]string{"a": "1"},
		Resources:         resourcesJSON(t, `{"app":{"requests":{"cpu":"500m"}}}`),
		PreviousResources: resourcesJSON(t, `{"app":{"requests":{"cpu":"250m"}}}`),
		stored:            "set below"}
	// Every field is set above: a field added to the Record and not round-tripped fails here first.
	v := reflect.ValueOf(*rec)
	for i := range v.NumField() {
		if v.Field(i).IsZero() {
			t.Fatalf("Record field %s is not set in this test", v.Type().Field(i).Name)
		}
	}
	ctx := context.Background()
	client := fake.NewClientset(&appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: testName, Namespace: testNS}})
	w, err := workload.Load(ctx, client, ref)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.SetLock(ctx, rec.encode()); err != nil {
		t.Fatal(err)
	}
	back, err := ReadRecord(ctx, client, ref)
	if err != nil {
		t.Fatal(err)
	}
	if back.stored != rec.encode() {
		t.Errorf("stored %s\nwant %s, as written", back.stored, rec.encode())
	}
	if !back.Equal(mustRecordOf(t, ref, lockOf(rec))) {
		t.Error("the Record read back is not Equal to a read of the Record written")
	}
	rec.stored = back.stored
	if !reflect.DeepEqual(back, rec) {
		t.Errorf("read back %+v\nwant %+v", back, rec)
	}
	again, err := workload.Load(ctx, client, ref)
	if err != nil {
		t.Fatal(err)
	}
	if l := again.Lock(); !reflect.DeepEqual(l.PreviousImages, rec.PreviousImages) || string(l.PreviousStrategy) != string(rec.PreviousStrategy) {
		t.Errorf("the workload reads previous images %v and strategy %s, want %v and %s", l.PreviousImages, l.PreviousStrategy, rec.PreviousImages, rec.PreviousStrategy)
	}
	if l := again.Lock(); !reflect.DeepEqual(l.PreviousResources, rec.PreviousResources) {
		t.Errorf("the workload reads previous resources %v, want %v", l.PreviousResources, rec.PreviousResources)
	}
}

// TestRecordDecode: a record no version writes is refused with a *workload.LockError naming the
// object and the field, before anything acts on it; the workload's own fields are refused
// when the workload reads them, in the same words.
func TestRecordDecode(t *testing.T) {
	ref := workload.Ref{Kind: workload.StatefulSet, Namespace: testNS, Name: testName}
	const prefix = "StatefulSet " + testNS + "/" + testName + ": annotation inplace-rollout.io/rollout is not a lock this version writes: "
	tests := []struct {
		name, raw, wantErr string
		notJSON            bool
	}{
		{name: "minimal", raw: `{"holder":"cli","phase":"Progressing","startedAt":"2025-03-01T12:00:00Z"}`},
		{name: "older lock without new fields", raw: `{"holder":"cli","rolloutID":"r-9","images":{"app":"reg/app:v2"},"phase":"Succeeded","startedAt":"2025-03-01T12:00:00Z"}`},
		{name: "wrong type", raw: `{"holder":"cli","phase":"Succeeded","images":["reg/app:v2"]}`, notJSON: true,
			wantErr: "StatefulSet " + testNS + "/" + testName + ": annotation inplace-rollout.io/rollout is not valid JSON: json: cannot unmarshal array"},
		{name: "null", raw: `null`, wantErr: prefix + `phase "" is none of`},
		{name: "unknown phase", raw: `{"holder":"cli","phase":"Done"}`, wantErr: prefix + `phase "Done" is none of Progressing, Paused, Holding, Halted, RollingBack, Succeeded, RolledBack, Released`},
		{name: "no holder", raw: `{"phase":"Progressing"}`, wantErr: prefix + "holder is empty"},
		{name: "negative count", raw: `{"holder":"cli","phase":"Holding","heldAt":-1}`, wantErr: prefix + "heldAt is -1, below 0"},
		{name: "negative accepted pods", raw: `{"holder":"cli","phase":"Holding","acceptedPods":-3}`, wantErr: prefix + "acceptedPods is -3, below 0"},
		{name: "image not a reference", raw: `{"holder":"cli","phase":"Succeeded","images":{"app":"reg/app:v2 "}}`,
			wantErr: prefix + `images[app] "reg/app:v2 " is not an image reference`},
		{name: "before image not a reference", raw: `{"holder":"cli","phase":"Succeeded","beforeImages":{"app":["reg/app:v1","A:B"]}}`,
			wantErr: prefix + `beforeImages[app] "A:B" is not an image reference`},
		{name: "previous image, the workload's", raw: `{"holder":"cli","phase":"Succeeded","previousImages":{"":"reg/app:v1"}}`,
			wantErr: prefix + "previousImages has an empty container name"},
		{name: "previous strategy, the workload's", raw: `{"holder":"cli","phase":"RollingBack","previousStrategy":null}`,
			wantErr: prefix + "previousStrategy is null, not an update strategy object"},
		{name: "resources", raw: `{"holder":"cli","phase":"Succeeded","resources":{"app":{"requests":{"cpu":"0.5"},"limits":{"cpu":"1"}}},"previousResources":{"app":{"requests":{"cpu":"250m"},"limits":{"cpu":"1"}}}}`},
		{name: "resources not a quantity", raw: `{"holder":"cli","phase":"Succeeded","resources":{"app":{"requests":{"cpu":"lots"}}}}`, notJSON: true,
			wantErr: "StatefulSet " + testNS + "/" + testName + ": annotation inplace-rollout.io/rollout is not valid JSON: quantities must match"},
		{name: "resources not cpu or memory", raw: `{"holder":"cli","phase":"Succeeded","resources":{"app":{"limits":{"nvidia.com/gpu":"1"}}}}`,
			wantErr: prefix + `resources: resources of container "app": limits.nvidia.com/gpu: only cpu and memory change in place`},
		{name: "resources with a limit below the request", raw: `{"holder":"cli","phase":"Succeeded","resources":{"app":{"requests":{"memory":"1Gi"},"limits":{"memory":"64Mi"}}}}`,
			wantErr: prefix + `resources: resources of container "app": memory limit 64Mi is below its request 1Gi`},
		{name: "previous resources, the workload's", raw: `{"holder":"cli","phase":"Succeeded","previousResources":{"app":{"requests":{"cpu":"-1"}}}}`,
			wantErr: prefix + `previousResources: resources of container "app": requests.cpu -1 is below zero`},
		{name: "previous resources of no container", raw: `{"holder":"cli","phase":"Succeeded","previousResources":{"":{"requests":{"cpu":"1"}}}}`,
			wantErr: prefix + "previousResources has an empty container name"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			client := fake.NewClientset(&appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: testName, Namespace: testNS,
				Annotations: map[string]string{workload.LockAnnotation: tt.raw}}})
			rec, err := ReadRecord(context.Background(), client, ref)
			if tt.wantErr == "" {
				if err != nil || rec == nil || rec.stored != tt.raw {
					t.Fatalf("ReadRecord = %+v, %v; want the record as stored", rec, err)
				}
				return
			}
			var le *workload.LockError
			if rec != nil || !errors.As(err, &le) || le.JSON != tt.notJSON || !strings.HasPrefix(err.Error(), tt.wantErr) {
				t.Fatalf("ReadRecord = %+v, %v; want no record and a *workload.LockError (JSON %t) saying %q", rec, err, tt.notJSON, tt.wantErr)
			}
		})
	}
}

// TestRolloutReadsPodsFromTheWatch: with Engine.Pods a watch of the target, a rollout lists the
// pods once, for the watch, and reads them from its cache at every step after; a pod the cache
// shows stale is written with the resourceVersion read, so the rollout ends as one reading the
// API server does, every pod updated once.
func TestRolloutReadsPodsFromTheWatch(t *testing.T) {
	fc := newFakeCluster(t, clusterOpts{pods: 6})
	spec := fc.spec(imageV2, intstr.FromInt32(2), intstr.FromString("100%"))
	e, _, _ := watchedEngine(t, fc, spec)
	fc.client.ClearActions()
	if st := fc.mustDrive(e, spec, Status{}, nil); st.Phase != PhaseSucceeded || st.Updated != 6 {
		t.Fatalf("rollout ended %s with %d/6 pods updated: %s", st.Phase, st.Updated, st.Message)
	}
	lists, started := 0, map[string]int{}
	for _, a := range fc.client.Actions() {
		if a.GetResource().Resource != "pods" {
			continue
		}
		// The workload's pods, by its selector: the fake cluster's own players list every pod,
		// and the end of a rollout lists its puller pods, by theirs.
		if l, ok := a.(k8stesting.ListAction); ok && l.GetListRestrictions().Labels.String() == "app="+testName {
			lists++
		}
		if p, ok := a.(k8stesting.PatchAction); ok && strings.Contains(string(p.GetPatch()), `"containers"`) {
			started[p.GetName()]++
		}
	}
	if lists != 0 {
		t.Errorf("%d pod LISTs during the rollout, want none: the steps read the watch's cache", lists)
	}
	for _, p := range fc.pods() {
		if started[p.Name] != 1 {
			t.Errorf("pod %s had its image patched %d times, want once", p.Name, started[p.Name])
		}
	}
}

// TestRolloutLeavesTheWatchsPodsAlone: the pods a watch lists are its cache's own, shared with
// every reader (workload.PodWatch), and so are the states it decoded from them: a rollout that
// fails and rolls back, reading them at every step, changes none of them.
func TestRolloutLeavesTheWatchsPodsAlone(t *testing.T) {
	fc := newFakeCluster(t, clusterOpts{pods: 4})
	spec := fc.spec(imageCrash, intstr.FromInt32(2), intstr.FromString("100%"))
	e, w, ctx := watchedEngine(t, fc, spec)
	// Each pod object the watch lists, as it was when first listed.
	seen := map[*corev1.Pod]*corev1.Pod{}
	sel := labels.SelectorFromSet(labels.Set{"app": testName})
	check := func(Status) {
		// Once the watch has caught up with the API server, so that every version of every
		// pod passes through here.
		var pods []*corev1.Pod
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			var err error
			if pods, err = w.ListPods(ctx, testNS, sel); err != nil {
				t.Fatal(err)
			}
			if caughtUp(pods, fc.pods()) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("the watch did not catch up with the API server's pods within 10s")
			}
		}
		for _, p := range pods {
			was, ok := seen[p]
			if !ok {
				seen[p] = p.DeepCopy()
				continue
			}
			if !equality.Semantic.DeepEqual(was, p) {
				t.Errorf("pod %s changed in the watch's cache by a step: was %s, now %s", p.Name, mustJSON(was), mustJSON(p))
			}
		}
		// The states the watch decoded once and shares with every step are as their pods say.
		for _, p := range pods {
			shared, err := w.ReadState(p)
			if err != nil {
				t.Fatal(err)
			}
			if want, _ := inplace.ReadState(p); !reflect.DeepEqual(shared, want) {
				t.Errorf("the state of pod %s the watch shares was changed by a step: %s, its pod says %s", p.Name, mustJSON(shared), mustJSON(want))
			}
		}
	}
	check(Status{})
	st, err := fc.drive(e, spec, Status{}, nil, check)
	if err != nil || st.Phase != PhaseRolledBack {
		t.Fatalf("rollout ended %s: %v (%s); want it rolled back", st.Phase, err, st.Message)
	}
	// The 4 pods as first listed, and at least a new version of each pod of the first batch.
	if len(seen) < 6 {
		t.Errorf("the watch listed %d pod objects over the rollout, want at least 6", len(seen))
	}
}

// caughtUp reports whether listed holds each pod of api as the API server has it (the fake API
// server sets no resourceVersions to compare).
func caughtUp(listed []*corev1.Pod, api []corev1.Pod) bool {
	byName := map[string]*corev1.Pod{}
	for _, p := range listed {
		byName[p.Name] = p
	}
	for i := range api {
		p, ok := byName[api[i].Name]
		if !ok {
			return false
		}
		want := api[i].DeepCopy()
		want.ManagedFields = nil
		if !equality.Semantic.DeepEqual(p, want) {
			return false
		}
	}
	return true
}

// watchedEngine is an engine on fc that reads the pods of spec's target from a watch, synced,
// which ends with the test; ctx is the watch's.
func watchedEngine(t testing.TB, fc *fakeCluster, spec Spec) (*Engine, *PodWatch, context.Context) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	w, err := WatchPods(ctx, fc.client, spec.Target)
	if err != nil {
		t.Fatal(err)
	}
	if !cache.WaitForCacheSync(ctx.Done(), w.HasSynced) {
		t.Fatal("the watch did not sync")
	}
	e := fc.engine()
	e.Pods = w
	return e, w, ctx
}
