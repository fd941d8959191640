package rollout

import (
	"context"
	"errors"
	"io"
	"log"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	ggcrregistry "github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/inplace-rollout/inplace-rollout/pkg/inplace"
	"github.com/inplace-rollout/inplace-rollout/pkg/registry"
	"github.com/inplace-rollout/inplace-rollout/pkg/workload"
)

// testRegistry serves an in-process OCI registry and returns its host.
func testRegistry(t *testing.T) string {
	t.Helper()
	srv := httptest.NewServer(ggcrregistry.New(ggcrregistry.Logger(log.New(io.Discard, "", 0))))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

// pushRandom pushes new content under ref and returns its digest.
func pushRandom(t *testing.T, ref string) string {
	t.Helper()
	img, err := random.Image(32, 1)
	if err != nil {
		t.Fatal(err)
	}
	r, err := name.ParseReference(ref)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(r, img); err != nil {
		t.Fatalf("pushing %s: %v", ref, err)
	}
	d, _ := img.Digest()
	return d.String()
}

// unreachable is a registry host nothing listens on.
const unreachable = "127.0.0.1:1"

func (fc *fakeCluster) registryEngine() *Engine {
	e := fc.engine()
	e.Registry = &registry.Resolver{Client: fc.client}
	return e
}

// reportDigest makes every pod report digest for its container, as after a pull of the tag
// when it named that digest.
func (fc *fakeCluster) reportDigest(repo, digest string) {
	fc.t.Helper()
	for _, p := range fc.pods() {
		if fc.pulled == nil {
			fc.pulled = map[string]string{}
		}
		fc.pulled[p.Spec.Containers[0].Image] = digest
		p.Status.ContainerStatuses[0].ImageID = repo + "@" + digest
		if _, err := fc.client.CoreV1().Pods(testNS).UpdateStatus(context.Background(), &p, metav1.UpdateOptions{}); err != nil {
			fc.t.Fatal(err)
		}
	}
}

// TestStartPinsTargets checks what a start makes of a target tag: pinned to the digest its
// registry serves, left as given, or refused, with nothing written for a refusal.
func TestStartPinsTargets(t *testing.T) {
	host := testRegistry(t)
	v1 := pushRandom(t, host+"/app:v1")
	v2 := pushRandom(t, host+"/app:v2")
	tests := []struct {
		name string
		// podImage is what the pods run; podDigest, when set, the digest they report for it.
		podImage, podDigest string
		target, mode        string
		// wantImage is the lock's image; wantPhase Progressing or Succeeded; wantErr, when set,
		// an *InvalidError saying each part.
		wantImage string
		wantPhase Phase
		wantErr   []string
	}{
		{name: "a tag is pinned to its digest", podImage: imageV1, target: host + "/app:v2",
			wantImage: host + "/app:v2@" + v2, wantPhase: PhaseProgressing},
		{name: "a tag pushed again since the pods pulled it restarts them", podImage: host + "/app:v1", podDigest: "sha256:" + strings.Repeat("0", 64),
			target: host + "/app:v1", wantImage: host + "/app:v1@" + v1, wantPhase: PhaseProgressing},
		{name: "pods on the content the tag names: nothing to do", podImage: host + "/app:v1", podDigest: v1,
			target: host + "/app:v1", wantPhase: PhaseSucceeded},
		{name: "a digest is left as given", podImage: imageV1, target: host + "/app@" + v2,
			wantImage: host + "/app@" + v2, wantPhase: PhaseProgressing},
		{name: "never leaves the tag", podImage: imageV1, target: host + "/app:v2", mode: PinNever,
			wantImage: host + "/app:v2", wantPhase: PhaseProgressing},
		{name: "an unreachable registry leaves the tag", podImage: imageV1, target: unreachable + "/app:v2",
			wantImage: unreachable + "/app:v2", wantPhase: PhaseProgressing},
		{name: "an unreachable registry with pods on the tag is refused", podImage: unreachable + "/app:v1", podDigest: v1, target: unreachable + "/app:v1",
			wantErr: []string{"pods web-1, web-0 already run app=" + unreachable + "/app:v1", "as " + v1 + " (2 pods)", "could not be resolved", "give the image by digest", "Nothing was changed"}},
		{name: "always refuses an unreachable registry", podImage: imageV1, target: unreachable + "/app:v2", mode: PinAlways,
			wantErr: []string{`container "app"`, "registry " + unreachable, "pin-digests is always", "nothing was changed"}},
		{name: "a tag the registry does not have", podImage: imageV1, target: host + "/app:nope",
			wantErr: []string{"registry " + host, "HTTP 404", "no such image", "Nothing was changed"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fc := newFakeCluster(t, clusterOpts{pods: 2, image: tt.podImage})
			if tt.podDigest != "" {
				repo, _, _ := strings.Cut(tt.podImage, ":v")
				fc.reportDigest(repo, tt.podDigest)
			}
			before := fc.snapshot()
			spec := fc.spec(tt.target)
			spec.PinDigests = tt.mode
			st, _, err := fc.registryEngine().Reconcile(context.Background(), spec, Status{})
			if tt.wantErr != nil {
				var inv *InvalidError
				if !errors.As(err, &inv) {
					t.Fatalf("Reconcile = %+v, %v; want an *InvalidError", st, err)
				}
				for _, w := range tt.wantErr {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("error %q\ndoes not say %q", err, w)
					}
				}
				if fc.snapshot() != before {
					t.Error("a refused start wrote to the cluster")
				}
				return
			}
			if err != nil || st.Phase != tt.wantPhase {
				t.Fatalf("Reconcile = %+v, %v; want phase %s", st, err, tt.wantPhase)
			}
			if tt.wantPhase == PhaseSucceeded {
				if !strings.Contains(st.Message, "as "+v1) || fc.snapshot() != before {
					t.Errorf("message %q, wrote %v; want the digest named and nothing written", st.Message, fc.snapshot() != before)
				}
				return
			}
			if got := fc.lock().Images[testApp]; got != tt.wantImage {
				t.Errorf("lock image %s, want %s", got, tt.wantImage)
			}
		})
	}
}

// TestPinnedRolloutEndsOnTheDigestResolvedAtStart drives a pinned rollout while the tag is
// pushed again after its first batch: every pod, and the template, end on the digest resolved at
// start. Run again, the rollout that succeeded is done while the tag names that digest, and a
// new one starts once it names another.
func TestPinnedRolloutEndsOnTheDigestResolvedAtStart(t *testing.T) {
	host := testRegistry(t)
	first := pushRandom(t, host+"/app:v2")
	fc := newFakeCluster(t, clusterOpts{pods: 3})
	e := fc.registryEngine()
	spec := fc.spec(host+"/app:v2", one, all)
	pinned := host + "/app:v2@" + first
	pushed := false
	st, err := fc.drive(e, spec, Status{}, nil, func(st Status) {
		if st.Updated >= 1 && !pushed {
			pushRandom(t, host+"/app:v2")
			pushed = true
		}
	})
	if err != nil || st.Phase != PhaseSucceeded || !pushed {
		t.Fatalf("rollout = %+v, %v (pushed again: %v); want Succeeded", st, err, pushed)
	}
	for _, p := range fc.pods() {
		if img, id := p.Spec.Containers[0].Image, p.Status.ContainerStatuses[0].ImageID; img != pinned || inplace.DigestOf(id) != first {
			t.Errorf("pod %s runs %s (%s), want %s", p.Name, img, id, pinned)
		}
	}
	if img := fc.sts().Spec.Template.Spec.Containers[0].Image; img != pinned {
		t.Errorf("template image %s, want %s", img, pinned)
	}

	// The tag names other content now than the rollout pinned. A driver calling again for the
	// rollout it drove gets its end; asked anew, the same spec starts a new rollout.
	if same, _, err := e.Reconcile(context.Background(), spec, Status{}); err != nil || same.Phase != PhaseSucceeded || same.RolloutID != st.RolloutID {
		t.Fatalf("called again = %+v, %v; want rollout %s reported Succeeded", same, err, st.RolloutID)
	}
	spec.Rerun = true
	again, _, err := e.Reconcile(context.Background(), spec, Status{})
	if err != nil || again.Phase != PhaseProgressing || again.RolloutID == st.RolloutID {
		t.Fatalf("run again after the tag moved = %+v, %v; want a new rollout", again, err)
	}
	if got := fc.lock().Images[testApp]; got == pinned || !strings.HasPrefix(got, host+"/app:v2@sha256:") {
		t.Errorf("new rollout's image %s, want the tag pinned to its new digest", got)
	}
}

// TestStillPinnedWhileTheTagNamesTheDigest checks that a rollout that succeeded is reported as
// such, with nothing written, while its tag still names the digest it pinned.
func TestStillPinnedWhileTheTagNamesTheDigest(t *testing.T) {
	host := testRegistry(t)
	pushRandom(t, host+"/app:v2")
	fc := newFakeCluster(t, clusterOpts{pods: 2})
	e := fc.registryEngine()
	spec := fc.spec(host + "/app:v2")
	spec.Rerun = true
	st := fc.mustDrive(e, spec, Status{}, nil)
	if st.Phase != PhaseSucceeded {
		t.Fatalf("rollout = %+v", st)
	}
	before := fc.snapshot()
	again, _, err := e.Reconcile(context.Background(), spec, Status{})
	if err != nil || again.Phase != PhaseSucceeded || again.RolloutID != st.RolloutID || fc.snapshot() != before {
		t.Fatalf("run again = %+v, %v; want rollout %s reported Succeeded, nothing written", again, err, st.RolloutID)
	}
}

// TestRollbackSpellsOrPinsByTheRegistry rolls back pods whose before image is a tag on a real
// registry: back to the tag while it names what they ran, to the digest once it was pushed again.
func TestRollbackSpellsOrPinsByTheRegistry(t *testing.T) {
	for _, moved := range []bool{false, true} {
		t.Run(map[bool]string{false: "tag unmoved", true: "tag pushed again"}[moved], func(t *testing.T) {
			host := testRegistry(t)
			v1 := pushRandom(t, host+"/app:v1")
			pushRandom(t, host+"/app:v2")
			fc := newFakeCluster(t, clusterOpts{pods: 2, image: host + "/app:v1"})
			fc.reportDigest(host+"/app", v1)
			e := fc.registryEngine()
			spec := fc.spec(host+"/app:v2", one, all)
			spec.Soak = time.Hour
			fc.mustDrive(e, spec, Status{}, func(st Status) bool { return st.Updated == 1 })
			if moved {
				pushRandom(t, host+"/app:v1")
			}
			st := driveRollback(fc, e, spec, Status{})
			if st.Phase != PhaseRolledBack {
				t.Fatalf("rollback = %+v", st)
			}
			want := host + "/app:v1"
			if moved {
				want = host + "/app@" + v1
			}
			for _, p := range fc.pods() {
				s := fc.state(&p)
				if s == nil {
					continue // never touched
				}
				if img := p.Spec.Containers[0].Image; img != want {
					t.Errorf("pod %s back on %s, want %s", p.Name, img, want)
				}
			}
		})
	}
}

// TestUnresolvedTagRefusals checks which pods on a tag that cannot be resolved refuse a start:
// a rollout that would do nothing, or pods split between the tag and other images; not a
// container every pod runs already while another changes.
func TestUnresolvedTagRefusals(t *testing.T) {
	sidecarTag := unreachable + "/sidecar:v1"
	tests := []struct {
		name    string
		images  map[string]string
		sidecar []string // the sidecar image of each pod; none when nil
		app     []string // the app image of each pod
		refused bool
	}{
		{"every pod on every target", map[string]string{"app": unreachable + "/app:v1"}, nil, []string{unreachable + "/app:v1", unreachable + "/app:v1"}, true},
		{"pods split between the tag and another image", map[string]string{"app": unreachable + "/app:v1"}, nil, []string{unreachable + "/app:v1", imageV1}, true},
		{"no pod on the tag", map[string]string{"app": unreachable + "/app:v2"}, nil, []string{imageV1, imageV1}, false},
		{"a sidecar every pod runs while the app changes", map[string]string{"app": imageV2, "sidecar": sidecarTag},
			[]string{sidecarTag, sidecarTag}, []string{imageV1, imageV1}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fc := newFakeCluster(t, clusterOpts{kind: workload.Pods, pods: len(tt.app)})
			for i, p := range fc.pods() {
				p.Spec.Containers[0].Image = tt.app[i]
				if tt.sidecar != nil {
					p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: "sidecar", Image: tt.sidecar[i]})
				}
				fc.updatePod(&p)
			}
			w, err := workload.Load(context.Background(), fc.client, fc.spec(imageV2).Target)
			if err != nil {
				t.Fatal(err)
			}
			unresolved := map[string]error{}
			for name, img := range tt.images {
				if strings.HasPrefix(img, unreachable) {
					unresolved[name] = errors.New("registry " + unreachable + " did not answer")
				}
			}
			err = checkUnresolvedTags(w, tt.images, unresolved)
			var inv *InvalidError
			if refused := errors.As(err, &inv); refused != tt.refused {
				t.Fatalf("checkUnresolvedTags = %v, want refused %v", err, tt.refused)
			}
			if tt.refused && inv.Fix != FixPinNever {
				t.Errorf("fix %q, want %q", inv.Fix, FixPinNever)
			}
		})
	}
}

// TestContainerOnItsContentIsNotRespelled: a container every pod runs as the digest its tag
// names (a sidecar listed with the rest) keeps its tag, so no pod restarts it; the one that
// changes is pinned.
func TestContainerOnItsContentIsNotRespelled(t *testing.T) {
	host := testRegistry(t)
	side := pushRandom(t, host+"/side:v1")
	v2 := pushRandom(t, host+"/app:v2")
	fc := newFakeCluster(t, clusterOpts{kind: workload.Pods, pods: 2})
	for _, p := range fc.pods() {
		p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: "sidecar", Image: host + "/side:v1"})
		fc.updatePod(&p)
		p = *fc.pod(p.Name)
		p.Status.ContainerStatuses = append(p.Status.ContainerStatuses, corev1.ContainerStatus{Name: "sidecar", Image: host + "/side:v1",
			ImageID: host + "/side@" + side, Ready: true, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}})
		if _, err := fc.client.CoreV1().Pods(testNS).UpdateStatus(context.Background(), &p, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	spec := fc.spec(host + "/app:v2")
	spec.Images["sidecar"] = host + "/side:v1"
	st, _, err := fc.registryEngine().Reconcile(context.Background(), spec, Status{})
	if err != nil || st.Phase != PhaseProgressing {
		t.Fatalf("Reconcile = %+v, %v", st, err)
	}
	images := fc.lock().Images
	if images["sidecar"] != host+"/side:v1" || images[testApp] != host+"/app:v2@"+v2 {
		t.Errorf("lock images %v, want the sidecar as given and the app pinned", images)
	}
}

func TestStillApplied(t *testing.T) {
	pod := func(images ...string) *corev1.Pod {
		p := &corev1.Pod{}
		for i, img := range images {
			p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: []string{"app", "sidecar"}[i], Image: img})
		}
		return p
	}
	target := map[string]string{"app": "app:v2"}
	tests := []struct {
		name string
		pods []*corev1.Pod
		want bool
	}{
		{"every pod on the target", []*corev1.Pod{pod("app:v2", "side:v1"), pod("app:v2", "side:v9")}, true},
		{"a pod moved on", []*corev1.Pod{pod("app:v2"), pod("app:v3")}, false},
		{"a pod back on its old image", []*corev1.Pod{pod("app:v1")}, false},
		{"no pods", nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := stillApplied(tt.pods, workload.Images(target)); got != tt.want {
				t.Errorf("stillApplied = %v, want %v", got, tt.want)
			}
		})
	}
}

// TestRunAgainAfterPodsMovedOn: a rollout that succeeded is reported done when asked anew only
// while its pods still have its images; once someone moved them on, the same spec starts a new
// rollout, and a driver calling again for the rollout it drove still gets its end.
func TestRunAgainAfterPodsMovedOn(t *testing.T) {
	fc := newFakeCluster(t, clusterOpts{pods: 2})
	e := fc.engine()
	spec := fc.spec(imageV2)
	spec.Rerun = true
	st := fc.mustDrive(e, spec, Status{}, nil)
	if st.Phase != PhaseSucceeded {
		t.Fatalf("rollout = %+v", st)
	}
	p := fc.pod(fc.pods()[0].Name)
	p.Spec.Containers[0].Image = imageV3
	fc.updatePod(p)

	spec.Rerun = false
	if same, _, err := e.Reconcile(context.Background(), spec, Status{}); err != nil || same.Phase != PhaseSucceeded || same.RolloutID != st.RolloutID {
		t.Fatalf("called again = %+v, %v; want rollout %s reported Succeeded", same, err, st.RolloutID)
	}
	spec.Rerun = true
	again, _, err := e.Reconcile(context.Background(), spec, Status{})
	if err != nil || again.Phase != PhaseProgressing || again.RolloutID == st.RolloutID {
		t.Fatalf("run again after a pod moved to %s = %+v, %v; want a new rollout", imageV3, again, err)
	}
}
