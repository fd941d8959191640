package rollout

import (
	"context"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/inplace-rollout/inplace-rollout/analysis"
	"github.com/inplace-rollout/inplace-rollout/pkg/workload"
)

// writeUpgrade, when set, writes the clusters of upgradeCases that are not in its directory
// yet, each as the engine of this version leaves it. The files under testdata/upgrade are the
// bytes an earlier version wrote: they are never written again, so that every later version
// proves it reads them.
var writeUpgrade = flag.String("write-upgrade", "", "directory to write missing upgrade golden clusters to")

// upgradeDir holds the clusters earlier versions of the engine left mid-rollout.
const upgradeDir = "testdata/upgrade"

// upgradeCase is a rollout stopped part way (a driver killed, and started again as a newer
// version): how it started, where it stopped, and how the newer engine must finish it.
type upgradeCase struct {
	name string
	opts clusterOpts
	// spec is the rollout; the resumed engine is given the same spec, so its hash must still
	// match the lock's.
	spec func(*fakeCluster) Spec
	// arrange runs before the first call; stop says where the old engine stopped.
	arrange func(*fakeCluster)
	stop    func(*fakeCluster, Status) bool
	// resume finishes the rollout with the new engine and checks the end.
	resume func(*testing.T, *fakeCluster, *Engine, Spec)
}

var upgradeCases = []upgradeCase{
	{
		name: "statefulset-progressing",
		opts: clusterOpts{pods: 4},
		spec: func(fc *fakeCluster) Spec { return fc.spec(imageV2, one, half, all) },
		stop: func(_ *fakeCluster, st Status) bool { return st.Updated == 2 && st.Updating == 1 },
		resume: func(t *testing.T, fc *fakeCluster, e *Engine, spec Spec) {
			st := fc.mustDrive(e, spec, Status{}, nil)
			wantPhase(t, st, PhaseSucceeded)
			fc.assertOnImage(imageV2)
		},
	},
	{
		name: "pods-progressing",
		opts: clusterOpts{kind: workload.Pods, pods: 3},
		spec: func(fc *fakeCluster) Spec { return fc.spec(imageV2, one, all) },
		stop: func(_ *fakeCluster, st Status) bool { return st.Updated == 1 && st.Updating == 1 },
		resume: func(t *testing.T, fc *fakeCluster, e *Engine, spec Spec) {
			st := fc.mustDrive(e, spec, Status{}, nil)
			wantPhase(t, st, PhaseSucceeded)
			fc.assertOnImage(imageV2)
		},
	},
	{
		name: "analyzing",
		opts: clusterOpts{pods: 2},
		spec: func(fc *fakeCluster) Spec {
			s := fc.spec(imageV2, one, all)
			s.Analysis = testAnalysisOf(fc.t, 3)
			return s
		},
		arrange: func(fc *fakeCluster) { fc.query.set(analysis.Pass) },
		stop: func(_ *fakeCluster, st Status) bool {
			return st.Phase == PhaseAnalyzing && st.Analysis != nil && len(st.Analysis.Last) > 0
		},
		resume: func(t *testing.T, fc *fakeCluster, e *Engine, spec Spec) {
			fc.query.set(analysis.Pass)
			st := fc.mustDrive(e, spec, Status{}, nil)
			wantPhase(t, st, PhaseSucceeded)
			fc.assertOnImage(imageV2)
		},
	},
	{
		name: "paused",
		opts: clusterOpts{pods: 2},
		spec: func(fc *fakeCluster) Spec {
			s := fc.spec(imageV2, one, all)
			s.Analysis = testAnalysis(fc.t)
			return s
		},
		arrange: func(fc *fakeCluster) { fc.query.set(analysis.Inconclusive) },
		resume: func(t *testing.T, fc *fakeCluster, e *Engine, spec Spec) {
			st, _, err := e.Reconcile(context.Background(), spec, Status{})
			if err != nil || st.Phase != PhasePaused || st.Reason != ReasonAnalysisInconclusive {
				t.Fatalf("Reconcile of the paused rollout = %+v, %v; want Paused, AnalysisInconclusive", st, err)
			}
			st, err = acceptPaused(fc, e, spec, st)
			if err != nil {
				t.Fatalf("accepting the paused batch: %v", err)
			}
			fc.query.set(analysis.Pass)
			wantPhase(t, fc.mustDrive(e, spec, st, nil), PhaseSucceeded)
			fc.assertOnImage(imageV2)
		},
	},
	{
		name: "holding",
		opts: clusterOpts{pods: 4},
		spec: func(fc *fakeCluster) Spec {
			s := fc.spec(imageV2, one, all)
			s.UpTo = ptr(intstr.FromString("50%"))
			return s
		},
		resume: func(t *testing.T, fc *fakeCluster, e *Engine, spec Spec) {
			st, _, err := e.Reconcile(context.Background(), spec, Status{})
			if err != nil || st.Phase != PhaseHolding || st.Updated != 2 {
				t.Fatalf("Reconcile of the held rollout = %+v, %v; want Holding at 2 pods", st, err)
			}
			spec.UpTo = nil
			wantPhase(t, fc.mustDrive(e, spec, st, nil), PhaseSucceeded)
			fc.assertOnImage(imageV2)
		},
	},
	{
		name: "rolling-back",
		opts: clusterOpts{pods: 4},
		spec: func(fc *fakeCluster) Spec { return fc.spec(imageCrash, half, all) },
		stop: func(_ *fakeCluster, st Status) bool { return st.Phase == PhaseRollingBack && st.Updating > 0 },
		resume: func(t *testing.T, fc *fakeCluster, e *Engine, spec Spec) {
			st := fc.mustDrive(e, spec, Status{}, nil)
			wantPhase(t, st, PhaseRolledBack)
			if st.Reason != ReasonPodFailed {
				t.Errorf("reason %s, want %s", st.Reason, ReasonPodFailed)
			}
			fc.play() // the StatefulSet controller records the revision of the template put back
			fc.assertOnImage(imageV1)
		},
	},
	{
		name: "halted",
		opts: clusterOpts{pods: 3},
		spec: func(fc *fakeCluster) Spec { return fc.spec(imageV2) },
		stop: func(fc *fakeCluster, st Status) bool {
			if st.Updated == 1 && st.Phase == PhaseProgressing {
				fc.setTemplateImage("reg.example/app:v9")
			}
			return st.Phase == PhaseFailed
		},
		resume: func(t *testing.T, fc *fakeCluster, e *Engine, spec Spec) {
			st, _, err := e.Reconcile(context.Background(), spec, Status{})
			if err != nil || st.Phase != PhaseFailed || st.Reason != ReasonTemplateChanged {
				t.Fatalf("Reconcile of the halted rollout = %+v, %v; want Failed, TemplateChanged", st, err)
			}
			rb := rollbackOf(spec)
			rb.RestoreTemplate = true
			wantPhase(t, driveAbort(fc, e, rb, Status{}), PhaseRolledBack)
			fc.play() // the StatefulSet controller records the revision of the template put back
			fc.assertOnImage(imageV1)
			if img := fc.sts().Spec.Template.Spec.Containers[0].Image; img != imageV1 {
				t.Errorf("template on %s after a rollback restoring it, want %s", img, imageV1)
			}
		},
	},
	{
		name: "superseded",
		opts: clusterOpts{pods: 4},
		// The old engine ran a rollout to v2, then one to v3 superseding it part way; the new
		// engine rolls both back, to the images before the first.
		spec: func(fc *fakeCluster) Spec {
			s := fc.spec(imageV3)
			s.Supersede = true
			return s
		},
		arrange: func(fc *fakeCluster) {
			e := fc.engine()
			fc.mustDrive(e, fc.spec(imageV2), Status{}, func(st Status) bool { return st.Updated == 2 })
			fc.play()
			fc.now = fc.now.Add(tick)
		},
		stop: func(_ *fakeCluster, st Status) bool { return st.Updated == 1 && st.Updating == 1 },
		resume: func(t *testing.T, fc *fakeCluster, e *Engine, spec Spec) {
			wantPhase(t, driveRollback(fc, e, spec, Status{}), PhaseRolledBack)
			fc.play() // the StatefulSet controller records the revision of the template put back
			fc.assertOnImage(imageV1)
		},
	},
	{
		name: "succeeded",
		opts: clusterOpts{pods: 2},
		spec: func(fc *fakeCluster) Spec { return fc.spec(imageV2, one, all) },
		resume: func(t *testing.T, fc *fakeCluster, e *Engine, spec Spec) {
			st, _, err := e.Reconcile(context.Background(), spec, Status{})
			if err != nil || st.Phase != PhaseSucceeded {
				t.Fatalf("Reconcile of the finished rollout = %+v, %v; want Succeeded", st, err)
			}
			wantPhase(t, driveRollback(fc, e, spec, Status{}), PhaseRolledBack)
			fc.play() // the StatefulSet controller records the revision of the template put back
			fc.assertOnImage(imageV1)
		},
	},
}

// TestUpgradeMidRollout: a rollout an earlier version of the engine left part way (its lock
// annotation and pod states as that version wrote them, byte for byte) is read and finished by
// this one, from what is on the cluster alone.
func TestUpgradeMidRollout(t *testing.T) {
	if *writeUpgrade != "" {
		writeUpgradeClusters(t, *writeUpgrade)
	}
	files, err := filepath.Glob(filepath.Join(upgradeDir, "*", "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < len(upgradeCases) {
		t.Fatalf("%d golden clusters under %s, want one per case at least (%d)", len(files), upgradeDir, len(upgradeCases))
	}
	for _, file := range files {
		name := strings.TrimSuffix(filepath.Base(file), ".json")
		i := slices.IndexFunc(upgradeCases, func(c upgradeCase) bool { return c.name == name })
		if i < 0 {
			t.Fatalf("%s: no upgrade case named %s", file, name)
		}
		tc := upgradeCases[i]
		t.Run(filepath.Base(filepath.Dir(file))+"/"+name, func(t *testing.T) {
			fc := loadFakeCluster(t, file, tc.opts)
			before := podUIDs(fc)
			tc.resume(t, fc, fc.engine(), tc.spec(fc))
			if after := podUIDs(fc); !slices.Equal(before, after) {
				t.Errorf("pods %v after the resumed rollout, want the same pods %v", after, before)
			}
		})
	}
}

func wantPhase(t *testing.T, st Status, want Phase) {
	t.Helper()
	if st.Phase != want {
		t.Fatalf("status = %+v, want %s", st, want)
	}
}

func podUIDs(fc *fakeCluster) []string {
	var out []string
	for _, p := range fc.pods() {
		out = append(out, p.Name+"/"+string(p.UID))
	}
	return out
}

// upgradeCluster is a fake cluster as a file: its clock and its objects, as the engine that
// wrote them left them.
type upgradeCluster struct {
	Now          time.Time            `json:"now"`
	StatefulSets []appsv1.StatefulSet `json:"statefulSets,omitempty"`
	Pods         []corev1.Pod         `json:"pods"`
	ConfigMaps   []corev1.ConfigMap   `json:"configMaps,omitempty"`
}

// writeUpgradeClusters runs each case with this version's engine up to where it stops, and
// writes the cluster to dir, unless a file of that name is there already.
func writeUpgradeClusters(t *testing.T, dir string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tc := range upgradeCases {
		file := filepath.Join(dir, tc.name+".json")
		if _, err := os.Stat(file); err == nil {
			continue
		}
		fc := newFakeCluster(t, tc.opts)
		if tc.arrange != nil {
			tc.arrange(fc)
		}
		var stop func(Status) bool
		if tc.stop != nil {
			stop = func(st Status) bool { return tc.stop(fc, st) }
		}
		st := fc.mustDrive(fc.engine(), tc.spec(fc), Status{}, stop)
		t.Logf("%s: stopped at %+v", tc.name, st)
		uc := upgradeCluster{Now: fc.now, Pods: fc.pods()}
		if fc.kind == workload.StatefulSet {
			uc.StatefulSets = []appsv1.StatefulSet{*fc.sts()}
		}
		cms, err := fc.client.CoreV1().ConfigMaps(testNS).List(context.Background(), metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		uc.ConfigMaps = cms.Items
		b, err := json.MarshalIndent(uc, "", "  ")
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(file, append(b, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// loadFakeCluster is the fake cluster file holds, with its players.
func loadFakeCluster(t *testing.T, file string, o clusterOpts) *fakeCluster {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var uc upgradeCluster
	if err := json.Unmarshal(b, &uc); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	var objs []runtime.Object
	for i := range uc.StatefulSets {
		// The clusters were recorded from a fake that keeps no generation; the API server starts
		// every apps/v1 object at 1, and the lock writes test it.
		if sts := &uc.StatefulSets[i]; sts.Generation == 0 {
			sts.Generation, sts.Status.ObservedGeneration = 1, 1
		}
		objs = append(objs, &uc.StatefulSets[i])
	}
	for i := range uc.Pods {
		objs = append(objs, &uc.Pods[i])
	}
	for i := range uc.ConfigMaps {
		objs = append(objs, &uc.ConfigMaps[i])
	}
	kind := o.kind
	if kind == "" {
		kind = workload.StatefulSet
	}
	fc := &fakeCluster{t: t, client: fake.NewClientset(objs...), now: uc.Now, kind: kind, query: &fakeQuerier{}}
	fc.reactToWrites()
	return fc
}
