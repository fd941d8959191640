package rollout

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/inplace-rollout/inplace-rollout/analysis"
	"github.com/inplace-rollout/inplace-rollout/pkg/workload"
)

// TestDecideStart: the start of a rollout, decided from what observeStart and lookFurther saw.
// StatefulSet shop/web of two Ready pods on imageV1, to imageV2, every fact looked at and no
// tag pinned, unless a case says otherwise.
func TestDecideStart(t *testing.T) {
	ref := workload.Ref{Kind: workload.StatefulSet, Namespace: testNS, Name: testName}
	spec := Spec{Target: ref, Images: map[string]string{testApp: imageV2}, Batches: []intstr.IntOrString{one, all},
		MaxUnavailable: intstr.FromInt32(1), Timeout: time.Minute, Holder: testOwner}
	hash := spec.Hash()
	now := t0
	digest := "sha256:" + strings.Repeat("2", 64)
	census := func() *startCensus {
		return &startCensus{ref: ref, total: 2, pods: []*corev1.Pod{runningPod("web-0", imageV1), runningPod("web-1", imageV1)}, canPrePull: true,
			before: map[string][]string{testApp: {imageV1}}, looked: map[startFact]bool{factPinned: true, factPrometheus: true, factPins: true},
			pin: pinning{images: map[string]string{testApp: imageV2}, digests: map[string]string{}, unresolved: map[string]error{}, current: map[string]string{}}}
	}
	ended := func(phase Phase, id string, startedAt time.Time) *Record {
		return &Record{Holder: testOwner, RolloutID: id, SpecHash: hash, Phase: phase, Images: map[string]string{testApp: imageV2}, StartedAt: startedAt}
	}
	succeeded := ended(PhaseSucceeded, "r1", now.Add(-time.Hour))
	rerun := func(s *Spec) { s.Rerun = true }
	analysed := func(s *Spec) { s.Analysis = &analysis.Config{} }
	unready := func(c *startCensus) { c.unready = []string{"web-1"} }
	fresh := rolloutID(hash, now)

	tests := []struct {
		name string
		c    func(*startCensus)
		spec func(*Spec)
		lock *Record
		want startAction
		look startFact
		// says is in the refusal or the message; fix is the refusal's Fix.
		says string
		fix  Fix
		// id is the rollout a start begins.
		id string
	}{
		{name: "a rollout with this spec that succeeded is reported", lock: succeeded, want: startSucceeded},
		{name: "asked anew, the registry says whether its tags moved", c: func(c *startCensus) { c.applied, c.looked[factPinned] = true, false },
			spec: rerun, lock: succeeded, want: startLook, look: factPinned},
		{name: "asked anew, it is done while its pods and its tags are where it left them", c: func(c *startCensus) { c.applied, c.stillPinned = true, true },
			spec: rerun, lock: succeeded, want: startSucceeded},
		{name: "asked anew after a tag moved, it starts again", c: func(c *startCensus) { c.applied = true }, spec: rerun, lock: succeeded, want: startBegin, id: fresh},
		{name: "asked anew after the pods moved on, it starts again, asking no registry of the old tags",
			c: func(c *startCensus) { c.looked[factPinned] = false }, spec: rerun, lock: succeeded, want: startBegin, id: fresh},
		{name: "a rollout of this spec that was rolled back is no reason to refuse", lock: ended(PhaseRolledBack, "r1", now.Add(-time.Hour)), want: startBegin, id: fresh},
		{name: "another holder's rollout that succeeded", lock: func() *Record { l := *succeeded; l.Holder = "argo:shop/web"; return &l }(), want: startBegin, id: fresh},
		{name: "started again within the second the last one did", lock: ended(PhaseRolledBack, fresh, now), want: startBegin, id: rolloutID(hash, now.Add(time.Second))},

		{name: "pre-pull without the puller image", c: func(c *startCensus) { c.canPrePull = false }, spec: func(s *Spec) { s.PrePull = true },
			want: startRefuse, says: "StatefulSet shop/web: pre-pull needs the image holding the puller binary, and this driver has none; run without pre-pull"},
		{name: "the controller has not caught up: wait", c: func(c *startCensus) {
			c.startErr, c.unready = &workload.NotReadyError{Msg: "the controller has not observed generation 2 yet"}, []string{"web-0"}
		}, want: startWait, says: "the controller has not observed generation 2 yet"},
		{name: "a check of the workload refuses", c: func(c *startCensus) { c.startErr = &workload.InvalidError{Msg: `no container named "sidecar"`} },
			want: startRefuse, says: `no container named "sidecar"`},
		{name: "pods a controller owns", c: func(c *startCensus) {
			c.ownedErr = &workload.InvalidError{Msg: "pod web-0 is controlled by StatefulSet/web", Fix: workload.FixAllowOwned}
		}, want: startRefuse, says: "is controlled by StatefulSet/web", fix: FixAllowOwned},
		{name: "an init container to keep that runs another image", c: func(c *startCensus) { c.keepErr = &workload.InvalidError{Msg: `init container "setup" runs`} },
			want: startRefuse, says: `init container "setup" runs`},
		{name: "an unreadable state", c: func(c *startCensus) {
			c.statesErr, c.keepErr = &InvalidError{Msg: "annotation is not valid JSON", Fix: FixStateAnnotation}, nil
		}, want: startRefuse, says: "not valid JSON", fix: FixStateAnnotation},
		{name: "the checks are reported in order", c: func(c *startCensus) {
			c.keepErr, c.statesErr = &workload.InvalidError{Msg: "keep first"}, &InvalidError{Msg: "states after"}
		}, want: startRefuse, says: "keep first"},
		{name: "too many before images", c: func(c *startCensus) { c.beforeErr = invalid("runs more than 16 different images") }, want: startRefuse, says: "more than 16"},

		{name: "the analysis asks Prometheus before the pods are judged", c: func(c *startCensus) { unready(c); c.looked[factPrometheus] = false },
			spec: analysed, want: startLook, look: factPrometheus},
		{name: "no Prometheus to ask is reported before unready pods", c: func(c *startCensus) { unready(c); c.prometheusErr = errors.New("connection refused") },
			spec: analysed, want: startRefuse, says: "analysis cannot query Prometheus, so the rollout did not start: connection refused"},
		{name: "without an analysis, Prometheus is not asked", c: func(c *startCensus) { c.looked[factPrometheus] = false }, want: startBegin, id: fresh},
		{name: "unready pods", c: unready, want: startRefuse, says: "StatefulSet shop/web: 1 pods are not Ready (web-1); fix them first", fix: FixAllowUnready},
		{name: "unready pods allowed", c: unready, spec: func(s *Spec) { s.AllowUnready = true }, want: startBegin, id: fresh},
		{name: "batches that shrink at this pod count", c: func(c *startCensus) { c.total = 4 },
			spec: func(s *Spec) { s.Batches = []intstr.IntOrString{threeOf, half, all} }, want: startRefuse, says: "fewer than the 3 of the batch before it"},

		{name: "the registry is asked once every other check passes", c: func(c *startCensus) { c.looked[factPins] = false }, want: startLook, look: factPins},
		{name: "a start refused asks no registry", c: func(c *startCensus) { unready(c); c.looked[factPins] = false }, want: startRefuse, fix: FixAllowUnready},
		{name: "the registry refuses", c: func(c *startCensus) { c.pinErr = invalid("the registry has no such image") }, want: startRefuse, says: "no such image"},
		{name: "pods and template on the images already", c: func(c *startCensus) { c.onTarget, c.templateOnTarget = 2, true },
			want: startAlreadyThere, says: "StatefulSet shop/web already runs these images; nothing to do"},
		{name: "pods on the images, the template not", c: func(c *startCensus) { c.onTarget = 2 }, want: startBegin, id: fresh},
		{name: "pods and template on the content a tag names", c: func(c *startCensus) {
			c.onTarget, c.onContent, c.templateOnPin = 2, 2, true
			c.pin.images[testApp], c.pin.digests = imageV2+"@"+digest, map[string]string{testApp: digest}
		}, want: startAlreadyThere, says: "StatefulSet shop/web already runs these images, as app=reg.example/app:v2 as " + digest},
		{name: "pods on a tag as other content than it names now", c: func(c *startCensus) {
			c.onTarget, c.templateOnTarget, c.pin.digests = 2, true, map[string]string{testApp: digest}
		}, want: startBegin, id: fresh},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, s := census(), spec
			if tt.c != nil {
				tt.c(c)
			}
			if tt.spec != nil {
				tt.spec(&s)
			}
			d := decideStart(c, s, tt.lock, hash, now)
			if d.action != tt.want || d.look != tt.look {
				t.Fatalf("action %d (fact %d), want %d (fact %d); error %v, message %q", d.action, d.look, tt.want, tt.look, d.err, d.message)
			}
			said := d.message
			if d.err != nil {
				said = d.err.Error()
			}
			if !strings.Contains(said, tt.says) {
				t.Errorf("says %q, want %q", said, tt.says)
			}
			var inv *InvalidError
			if tt.want == startRefuse && (!errors.As(d.err, &inv) || inv.Fix != tt.fix) {
				t.Errorf("refusal %#v, want an InvalidError with fix %q", d.err, tt.fix)
			}
			if tt.want != startBegin {
				return
			}
			if n := d.next; n.RolloutID != tt.id || n.SpecHash != hash || n.Phase != PhaseProgressing || n.Holder != testOwner ||
				n.Images[testApp] != imageV2 || n.BeforeImages[testApp][0] != imageV1 || !n.StartedAt.Equal(now) {
				t.Errorf("lock %+v, want rollout %s of %s, progressing, from %s to %s, started %s", n, tt.id, testOwner, imageV1, imageV2, now)
			}
		})
	}
}

// TestDecideSupersede: whether a rollout replaces the one in flight, decided from what
// observeSupersede saw. Rollout r1 (which superseded r0) is taking StatefulSet shop/web to
// imageV3; the new one takes it to imageV2, the registry already asked and pinning nothing,
// unless a case says otherwise.
func TestDecideSupersede(t *testing.T) {
	ref := workload.Ref{Kind: workload.StatefulSet, Namespace: testNS, Name: testName}
	spec := Spec{Target: ref, Images: map[string]string{testApp: imageV2}, MaxUnavailable: intstr.FromInt32(1), Timeout: time.Minute, Holder: testOwner, Supersede: true}
	hash := spec.Hash()
	now := t0
	inFlight := func(phase Phase) *Record {
		return &Record{Holder: testOwner, RolloutID: "r1", Superseded: []string{"r0"}, SpecHash: "old", Phase: phase, Message: "someone else changed the template",
			Images: map[string]string{testApp: imageV3}, PreviousImages: map[string]string{testApp: imageV1}, BeforeImages: map[string][]string{testApp: {imageV1}},
			Touched: []TouchedPod{{Name: "web-0", UID: "uid-web-0"}}, AcceptedPods: 1, HeldAt: 1, StartedAt: now.Add(-time.Hour)}
	}
	census := func() *supersedeCensus {
		return &supersedeCensus{ref: ref, before: map[string][]string{testApp: {imageV1}, "setup": {"reg.example/setup:v1"}}, pinned: true,
			pin: pinning{images: map[string]string{testApp: imageV2}, digests: map[string]string{}, unresolved: map[string]error{}, current: map[string]string{}}}
	}
	tests := []struct {
		name string
		c    func(*supersedeCensus)
		spec func(*Spec)
		lock *Record
		// needPins: the registry is to be asked; says is in the refusal, fix its Fix; neither:
		// the rollout replaces r1.
		needPins bool
		says     string
		fix      Fix
	}{
		{name: "not asked to supersede", spec: func(s *Spec) { s.Supersede = false }, lock: inFlight(PhaseProgressing),
			says: `StatefulSet shop/web has rollout r1 in progress to other images ({"app":"reg.example/app:v3"})`, fix: FixSupersede},
		{name: "a halted rollout is rolled back first", lock: inFlight(PhaseHalted),
			says: "StatefulSet shop/web: rollout r1 stopped because someone else changed the template (someone else changed the template); roll it back first"},
		{name: "a rollout rolling back ends first", lock: inFlight(PhaseRollingBack), says: "rollout r1 is RollingBack; wait for it to finish before starting another"},
		{name: "a paused rollout is superseded", lock: inFlight(PhasePaused)},
		{name: "a holding rollout is superseded", lock: inFlight(PhaseHolding)},
		{name: "a container the template lacks", c: func(c *supersedeCensus) { c.imagesErr = &workload.InvalidError{Msg: `no container named "db"`} },
			lock: inFlight(PhaseProgressing), says: `no container named "db"`},
		{name: "an init container to keep that runs another image", c: func(c *supersedeCensus) { c.keepErr = &workload.InvalidError{Msg: `init container "setup" runs`} },
			lock: inFlight(PhaseProgressing), says: `init container "setup" runs`},
		{name: "an unreadable state", c: func(c *supersedeCensus) { c.statesErr = &InvalidError{Msg: "not valid JSON", Fix: FixStateAnnotation} },
			lock: inFlight(PhaseProgressing), says: "not valid JSON", fix: FixStateAnnotation},
		{name: "the registry is asked once the checks pass", c: func(c *supersedeCensus) { c.pinned = false }, lock: inFlight(PhaseProgressing), needPins: true},
		{name: "a refused rollout asks no registry", c: func(c *supersedeCensus) { c.pinned, c.keepErr = false, &workload.InvalidError{Msg: "keep"} },
			lock: inFlight(PhaseProgressing), says: "keep"},
		{name: "the registry refuses", c: func(c *supersedeCensus) { c.pinErr = invalid("the registry has no such image") }, lock: inFlight(PhaseProgressing), says: "no such image"},
		{name: "too many before images", c: func(c *supersedeCensus) { c.beforeErr = invalid("runs more than 16 different images") },
			lock: inFlight(PhaseProgressing), says: "more than 16"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, s := census(), spec
			if tt.c != nil {
				tt.c(c)
			}
			if tt.spec != nil {
				tt.spec(&s)
			}
			d := decideSupersede(c, s, tt.lock, hash, now)
			if d.needPins != tt.needPins || (d.err == nil) != (tt.says == "") || (d.err != nil && !strings.Contains(d.err.Error(), tt.says)) {
				t.Fatalf("decision %+v, want needPins %v, a refusal saying %q", d, tt.needPins, tt.says)
			}
			var inv *InvalidError
			if d.err != nil && (!errors.As(d.err, &inv) || inv.Fix != tt.fix) {
				t.Errorf("refusal %#v, want an InvalidError with fix %q", d.err, tt.fix)
			}
			if tt.needPins || tt.says != "" {
				return
			}
			n := d.next
			if n.RolloutID != rolloutID(hash, now) || n.SpecHash != hash || n.Phase != PhaseProgressing || n.Message != "" || n.Reason != "" || !n.StartedAt.Equal(now) ||
				!slices.Equal(n.Superseded, []string{"r0", "r1"}) || n.Images[testApp] != imageV2 || len(n.BeforeImages["setup"]) != 1 ||
				n.AcceptedPods != 0 || n.HeldAt != 0 || len(n.Touched) != 1 || n.PreviousImages[testApp] != imageV1 {
				t.Errorf("lock %+v, want rollout %s superseding r0 and r1, to %s, progressing from now, keeping the touched pods and the previous images", n, rolloutID(hash, now), imageV2)
			}
		})
	}
	t.Run("a lock that records no before images records none", func(t *testing.T) {
		lock := inFlight(PhaseProgressing)
		lock.BeforeImages = nil
		if d := decideSupersede(census(), spec, lock, hash, now); d.err != nil || d.next.BeforeImages != nil {
			t.Errorf("decision %+v, want a lock with no before images", d)
		}
	})
}
