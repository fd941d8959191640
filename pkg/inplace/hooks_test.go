package inplace

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes/fake"
)

const registered corev1.PodConditionType = "example.com/registered"

func httpHook(path string) *Hook {
	return &Hook{HTTP: &HTTPHook{Port: intstr.FromInt32(8080), Path: path, Method: "POST"}}
}

func handshake() *Hook {
	return &Hook{Handshake: &HandshakeHook{Condition: registered}, Timeout: time.Minute}
}

func TestCheckHooks(t *testing.T) {
	tests := []struct {
		name  string
		hooks *Hooks
		want  string // "" valid, else part of the error
	}{
		{"none", nil, ""},
		{"http and handshake", &Hooks{PreUpdate: httpHook("/pre"), PostUpdate: handshake()}, ""},
		{"named port", &Hooks{PreUpdate: &Hook{HTTP: &HTTPHook{Port: intstr.FromString("http"), Path: "/"}}}, ""},
		{"neither", &Hooks{PreUpdate: &Hook{}}, "hooks.preUpdate: takes exactly one of http and handshake"},
		{"both", &Hooks{PostUpdate: &Hook{HTTP: httpHook("/").HTTP, Handshake: handshake().Handshake}}, "hooks.postUpdate: takes exactly one of http and handshake"},
		{"port 0", &Hooks{PreUpdate: &Hook{HTTP: &HTTPHook{Port: intstr.FromInt32(0), Path: "/"}}}, "http.port 0 is not between 1 and 65535"},
		{"port name with a space", &Hooks{PreUpdate: &Hook{HTTP: &HTTPHook{Port: intstr.FromString("a b"), Path: "/"}}}, `http.port "a b" is neither a number nor a port name`},
		{"relative path", &Hooks{PreUpdate: httpHook("pre")}, `http.path "pre" does not start with /`},
		{"query", &Hooks{PreUpdate: httpHook("/pre?x=1")}, "has a query or fragment"},
		{"method", &Hooks{PreUpdate: &Hook{HTTP: &HTTPHook{Port: intstr.FromInt32(80), Path: "/", Method: "DELETE"}}}, `http.method "DELETE" is neither GET nor POST`},
		{"status", &Hooks{PreUpdate: &Hook{HTTP: &HTTPHook{Port: intstr.FromInt32(80), Path: "/", ExpectStatus: 700}}}, "http.expectStatus 700 is not an HTTP status code"},
		{"negative timeout", &Hooks{PreUpdate: &Hook{HTTP: httpHook("/").HTTP, Timeout: -time.Second}}, "timeout -1s is below 0"},
		{"failure policy", &Hooks{PreUpdate: &Hook{HTTP: httpHook("/").HTTP, OnFailure: "Retry"}}, `onFailure "Retry" is neither Fail nor Continue`},
		{"condition Kubernetes writes", &Hooks{PostUpdate: &Hook{Handshake: &HandshakeHook{Condition: corev1.PodReady}}}, `handshake.condition "Ready" is written by Kubernetes or by the rollout itself`},
		{"the rollout's own gate", &Hooks{PostUpdate: &Hook{Handshake: &HandshakeHook{Condition: ReadinessGate}}}, "is written by Kubernetes or by the rollout itself"},
		{"not a condition type", &Hooks{PostUpdate: &Hook{Handshake: &HandshakeHook{Condition: "no spaces allowed"}}}, `handshake.condition "no spaces allowed" is not a condition type`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := CheckHooks("hooks", tt.hooks)
			switch {
			case tt.want == "" && err != nil:
				t.Errorf("refused: %v", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Errorf("error %v, want one saying %q", err, tt.want)
			}
		})
	}
}

// hookPod is testPod with the readiness gate True and an app container port named http.
func hookPod() *corev1.Pod {
	p := testPod()
	p.Spec.Containers[0].Ports = []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}}
	p.Spec.ReadinessGates = []corev1.PodReadinessGate{{ConditionType: ReadinessGate}}
	p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{Type: ReadinessGate, Status: corev1.ConditionTrue})
	return p
}

// kubelet plays the kubelet on a pod between two steps: a patched app container restarts on
// its new image (runsV2) or back on v1, Ready once its readiness gate is True, and a handshake
// partner that sets the registered condition True once it is False.
type kubelet struct {
	release bool // the handshake partner answers
}

func (k kubelet) act(p *corev1.Pod, now time.Time) {
	cs := &p.Status.ContainerStatuses[0]
	switch img := p.Spec.Containers[0].Image; {
	case img == "reg.example/app:v2" && cs.Image != img:
		runsV2(p, now)
	case img != "reg.example/app:v2" && cs.Image == "reg.example/app:v2":
		cs.Image, cs.ImageID = "reg.example/app:v1", "reg.example/app@sha256:"+strings.Repeat("1", 64)
		cs.ContainerID, cs.RestartCount = "containerd://app-v1-again", cs.RestartCount+1
		cs.State = corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.NewTime(now)}}
	}
	ready := corev1.ConditionTrue
	if c := podCondition(p, ReadinessGate); c != nil && c.Status != corev1.ConditionTrue {
		ready = corev1.ConditionFalse
	}
	for i := range p.Status.Conditions {
		c := &p.Status.Conditions[i]
		switch {
		case c.Type == corev1.PodReady && c.Status != ready:
			c.Status, c.LastTransitionTime = ready, metav1.NewTime(now)
		case c.Type == registered && c.Status == corev1.ConditionFalse && k.release:
			c.Status, c.LastTransitionTime = corev1.ConditionTrue, metav1.NewTime(now)
		}
	}
}

// walk steps pod with next until a step is Done or limit steps, playing k between steps and
// answering each HTTP hook call with answer. It returns the pod, the stage of every write in
// order, and the calls made.
func walk(t *testing.T, pod *corev1.Pod, k kubelet, answer HookResult, next func(*corev1.Pod, time.Time, *HookAnswer) (Step, error)) (*corev1.Pod, []Stage, []HookCall, Step) {
	t.Helper()
	now := t0
	var stages []Stage
	var calls []HookCall
	var s Step
	for range 40 {
		var err error
		if s, err = next(pod, now, nil); err != nil {
			t.Fatalf("at %s: %v", now, err)
		}
		if s.Patch != nil {
			pod = apply(t, pod, s)
			stages = append(stages, s.Stage)
		}
		if s.Call != nil {
			calls = append(calls, *s.Call)
			if s, err = next(pod, now, &HookAnswer{Call: *s.Call, Result: answer}); err != nil {
				t.Fatal(err)
			}
			if s.Call != nil {
				t.Fatalf("the answer to a call led to another call: %+v", s)
			}
			pod = apply(t, pod, s)
			stages = append(stages, s.Stage)
		}
		if s.Done {
			return pod, stages, calls, s
		}
		now = now.Add(time.Second)
		k.act(pod, now)
	}
	t.Fatalf("not done after 40 steps; stages %v, last step %+v", stages, s)
	return nil, nil, nil, Step{}
}

func updateWith(target Target, opts Options) func(*corev1.Pod, time.Time, *HookAnswer) (Step, error) {
	return func(p *corev1.Pod, now time.Time, a *HookAnswer) (Step, error) {
		return nextUpdate(p, target, opts, now, a)
	}
}

func revertWith(opts Options) func(*corev1.Pod, time.Time, *HookAnswer) (Step, error) {
	return func(p *corev1.Pod, now time.Time, a *HookAnswer) (Step, error) {
		return nextRevert(p, opts, now, nil, a)
	}
}

func compact(stages []Stage) []Stage {
	var out []Stage
	for _, s := range stages {
		if len(out) == 0 || out[len(out)-1] != s {
			out = append(out, s)
		}
	}
	return out
}

// TestHooksRunInOrder: the preUpdate hook, the drain, the image patch, Ready, the postUpdate
// handshake, then Updated; each hook once, recorded with its outcome; a revert runs both again
// around its own change, once each.
func TestHooksRunInOrder(t *testing.T) {
	target := Target{Images: map[string]string{"app": "reg.example/app:v2"}, RolloutID: "r1",
		Hooks: &Hooks{PreUpdate: &Hook{HTTP: &HTTPHook{Port: intstr.FromString("http"), Path: "/pre", Method: "POST"}}, PostUpdate: handshake()}}
	opts := Options{GracePeriod: 2 * time.Second}
	pod, stages, calls, last := walk(t, hookPod(), kubelet{release: true}, HookResult{Status: 204}, updateWith(target, opts))
	want := []Stage{StagePreUpdateHook, StageDraining, StageUpdating, StagePostUpdateHook, StageUpdated}
	if got := compact(stages); !equalStages(got, want) || last.Stage != StageUpdated {
		t.Fatalf("stages written %v (last %s), want %v", got, last.Stage, want)
	}
	if len(calls) != 1 || calls[0].Hook != PreUpdate || calls[0].Port != 8080 || calls[0].HTTP.Path != "/pre" || calls[0].Timeout != DefaultHTTPHookTimeout {
		t.Errorf("calls %+v, want one preUpdate POST to port 8080 (the port named http) /pre, with the default timeout", calls)
	}
	st := mustState(t, pod)
	if len(st.HookRuns) != 2 || st.HookRuns[0].Outcome != HookSucceeded || st.HookRuns[1].Outcome != HookSucceeded ||
		!strings.Contains(st.HookRuns[0].Message, "answered 204") || !strings.Contains(st.HookRuns[1].Message, "released") {
		t.Errorf("hook runs %+v, want preUpdate answered 204 and postUpdate released", st.HookRuns)
	}
	if c := podCondition(pod, registered); c == nil || c.Status != corev1.ConditionTrue || c.Reason != "PostUpdate" {
		t.Errorf("condition %s = %+v, want True after the engine set it False with reason PostUpdate", registered, c)
	}
	if Judged(pod, st, t0.Add(time.Hour)) != StageUpdated {
		t.Errorf("a pod past its postUpdate hook is judged %s", Judged(pod, st, t0.Add(time.Hour)))
	}

	pod, stages, calls, last = walk(t, pod, kubelet{release: true}, HookResult{Status: 200}, revertWith(opts))
	if got := compact(stages); !equalStages(got, []Stage{StageRollingBack, StageRolledBack}) || last.Stage != StageRolledBack {
		t.Fatalf("revert stages %v (last %s), want RollingBack then RolledBack", got, last.Stage)
	}
	if len(calls) != 1 || !calls[0].Reverting || calls[0].Hook != PreUpdate {
		t.Errorf("revert calls %+v, want the preUpdate hook once, reverting", calls)
	}
	st = mustState(t, pod)
	if len(st.HookRuns) != 4 {
		t.Fatalf("hook runs %+v, want two of the update and two of the revert", st.HookRuns)
	}
	for _, r := range st.HookRuns[2:] {
		if !r.Reverting || r.Outcome != HookSucceeded {
			t.Errorf("revert hook run %+v, want reverting and succeeded", r)
		}
	}
	if img := pod.Spec.Containers[0].Image; img != "reg.example/app@sha256:"+strings.Repeat("1", 64) {
		t.Errorf("image after the revert %s, want the digest v1 ran (no tag resolver here)", img)
	}
}

func equalStages(a, b []Stage) bool {
	return strings.Join(stageStrings(a), ",") == strings.Join(stageStrings(b), ",")
}

func stageStrings(s []Stage) []string {
	out := make([]string, len(s))
	for i, v := range s {
		out[i] = string(v)
	}
	return out
}

// TestPostUpdateHookWithoutGate: without the readiness gate the update's end is normally never
// written; with a postUpdate hook, it is written after the hook, and until then the pod is not
// counted as updated, nor over for another rollout.
func TestPostUpdateHookWithoutGate(t *testing.T) {
	target := Target{Images: map[string]string{"app": "reg.example/app:v2"}, RolloutID: "r1", Hooks: &Hooks{PostUpdate: handshake()}}
	pod := testPod()
	s, err := NextUpdate(pod, target, Options{}, t0)
	if err != nil || s.Stage != StageUpdating {
		t.Fatalf("first step %+v %v, want the image patch", s, err)
	}
	pod = apply(t, pod, s)
	runsV2(pod, t0.Add(time.Second))
	st := mustState(t, pod)
	if got := Judged(pod, st, t0.Add(2*time.Second)); got != StageUpdating || Over(pod, st, t0.Add(2*time.Second)) {
		t.Errorf("a pod on its new image before its postUpdate hook is judged %s (over %v), want Updating and not over", got, Over(pod, st, t0))
	}
	s, _ = NextUpdate(pod, target, Options{}, t0.Add(2*time.Second))
	if s.Stage != StagePostUpdateHook || s.Subresource != "status" {
		t.Fatalf("step %+v, want the handshake's start through the status subresource", s)
	}
	pod = apply(t, pod, s)
	if c := podCondition(pod, registered); c == nil || c.Status != corev1.ConditionFalse {
		t.Fatalf("condition %s = %+v, want False", registered, c)
	}
	s, _ = NextUpdate(pod, target, Options{}, t0.Add(3*time.Second))
	if s.Patch != nil || s.Done || !strings.Contains(s.Reason, "waiting for postUpdate hook (handshake on condition example.com/registered)") {
		t.Errorf("step before the release %+v, want a wait naming the hook", s)
	}
	kubelet{release: true}.act(pod, t0.Add(4*time.Second))
	s, _ = NextUpdate(pod, target, Options{}, t0.Add(4*time.Second))
	if s.Stage != StageUpdated || !s.Done || s.Patch == nil {
		t.Errorf("step after the release %+v, want Updated written", s)
	}
}

// TestHookFailure: what a hook that fails, times out or was interrupted does, by its policy. A
// hook whose answer was never recorded is not called again.
func TestHookFailure(t *testing.T) {
	tests := []struct {
		name      string
		hook      *Hook
		answer    *HookResult // nil: the driver stopped after recording the start
		after     time.Duration
		wantStage Stage
		wantCode  FailureCode
		outcome   HookOutcome
		reason    string
	}{
		{"500 fails the pod", httpHook("/pre"), &HookResult{Status: 500}, 0, StageFailed, FailureHook, HookFailed, "preUpdate hook (POST :8080/pre) answered 500, want 200-399"},
		{"an exact status", &Hook{HTTP: &HTTPHook{Port: intstr.FromInt32(8080), Path: "/pre", ExpectStatus: 202}}, &HookResult{Status: 200}, 0, StageFailed, FailureHook, HookFailed, "answered 200, want 202"},
		{"no answer", httpHook("/pre"), &HookResult{Err: "no answer within 10s"}, 0, StageFailed, FailureHook, HookFailed, "no answer within 10s"},
		{"403 says who may have refused", httpHook("/pre"), &HookResult{Status: 403}, 0, StageFailed, FailureHook, HookFailed, "get and create on pods/proxy"},
		{"interrupted", httpHook("/pre"), nil, 0, StageFailed, FailureHook, HookUnknown, "its answer was never recorded (the driver stopped); not called again"},
		{"500 with Continue goes on", &Hook{HTTP: httpHook("/pre").HTTP, OnFailure: HookContinue}, &HookResult{Status: 500}, 0, StageUpdating, "", HookFailed, "going on (onFailure Continue)"},
		{"interrupted with Continue goes on", &Hook{HTTP: httpHook("/pre").HTTP, OnFailure: HookContinue}, nil, 0, StageUpdating, "", HookUnknown, "going on"},
		{"handshake timed out", handshake(), nil, time.Minute, StageFailed, FailureHook, HookFailed, "condition example.com/registered not True within 1m0s"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			target := Target{Images: map[string]string{"app": "reg.example/app:v2"}, RolloutID: "r1", Hooks: &Hooks{PreUpdate: tt.hook}}
			pod := testPod()
			s, err := NextUpdate(pod, target, Options{}, t0)
			if err != nil || s.Stage != StagePreUpdateHook {
				t.Fatalf("first step %+v %v, want the preUpdate hook's start", s, err)
			}
			pod = apply(t, pod, s)
			var answer *HookAnswer
			if tt.answer != nil {
				answer = &HookAnswer{Call: *s.Call, Result: *tt.answer}
			}
			s, err = nextUpdate(pod, target, Options{}, t0.Add(tt.after), answer)
			if err != nil {
				t.Fatal(err)
			}
			if s.Call != nil {
				t.Fatalf("step %+v calls the hook again", s)
			}
			pod = apply(t, pod, s)
			st := mustState(t, pod)
			if st.Stage != tt.wantStage || st.Failure != tt.wantCode {
				t.Errorf("stage %s (failure %q), want %s (%q)", st.Stage, st.Failure, tt.wantStage, tt.wantCode)
			}
			if r := st.run(PreUpdate, false); r == nil || r.Outcome != tt.outcome || !strings.Contains(r.Message, tt.reason) {
				t.Errorf("run %+v, want outcome %s saying %q", r, tt.outcome, tt.reason)
			}
			if pod.Spec.Containers[0].Image != map[bool]string{true: "reg.example/app:v1", false: "reg.example/app:v2"}[tt.wantStage == StageFailed] {
				t.Errorf("image %s after stage %s", pod.Spec.Containers[0].Image, st.Stage)
			}
			// Whatever comes next, the hook is not called again in this direction.
			s, _ = NextUpdate(pod, target, Options{}, t0.Add(tt.after+time.Second))
			if s.Call != nil {
				t.Errorf("a later step calls the hook again: %+v", s)
			}
		})
	}
}

// TestRevertOfAPodNeverChanged: a pod whose preUpdate hook ran (and failed) but whose images
// never changed has nothing to change back; its revert runs the postUpdate hook, so an instance
// the preUpdate took out of a registry is put back, then clears the state.
func TestRevertOfAPodNeverChanged(t *testing.T) {
	target := Target{Images: map[string]string{"app": "reg.example/app:v2"}, RolloutID: "r1",
		Hooks: &Hooks{PreUpdate: httpHook("/pre"), PostUpdate: httpHook("/post")}}
	pod := testPod()
	s, _ := NextUpdate(pod, target, Options{}, t0)
	pod = apply(t, pod, s)
	s, _ = nextUpdate(pod, target, Options{}, t0, &HookAnswer{Call: *s.Call, Result: HookResult{Status: 500}})
	if pod = apply(t, pod, s); mustState(t, pod).Stage != StageFailed {
		t.Fatalf("stage %s after a failed preUpdate hook", mustState(t, pod).Stage)
	}
	pod, _, calls, last := walk(t, pod, kubelet{}, HookResult{Status: 200}, revertWith(Options{}))
	if len(calls) != 1 || calls[0].Hook != PostUpdate || !calls[0].Reverting {
		t.Errorf("revert calls %+v, want the postUpdate hook once", calls)
	}
	if st, _ := ReadState(pod); st != nil || last.Stage != StageRolledBack {
		t.Errorf("state after the revert %+v (last step %+v), want it cleared", st, last)
	}
}

// TestFailedRevertHookStaysFailed: a hook of a revert that fails leaves the pod Failed for a
// person, and a later revert call neither calls it again nor calls the pod rolled back.
func TestFailedRevertHookStaysFailed(t *testing.T) {
	target := Target{Images: map[string]string{"app": "reg.example/app:v2"}, RolloutID: "r1", Hooks: &Hooks{PostUpdate: httpHook("/post")}}
	pod, _, _, _ := walk(t, testPod(), kubelet{}, HookResult{Status: 200}, updateWith(target, Options{}))
	pod, _, calls, last := walk(t, pod, kubelet{}, HookResult{Status: 503}, revertWith(Options{}))
	st := mustState(t, pod)
	if last.Stage != StageFailed || st.Failure != FailureHook || !st.RevertFailed() || len(calls) != 1 {
		t.Fatalf("revert ended %s (failure %q, revert failed %v) after calls %+v; want Failed, HookFailed, one call", last.Stage, st.Failure, st.RevertFailed(), calls)
	}
	s, err := NextRevert(pod, Options{}, t0.Add(time.Hour), nil)
	if err != nil || s.Patch != nil || s.Call != nil || s.Stage != StageFailed {
		t.Errorf("a later revert call %+v %v, want Failed and nothing written", s, err)
	}
}

// TestNamedPortThePodLacks: a hook naming a port the pod does not declare is refused before
// anything is written.
func TestNamedPortThePodLacks(t *testing.T) {
	target := Target{Images: map[string]string{"app": "reg.example/app:v2"}, RolloutID: "r1",
		Hooks: &Hooks{PreUpdate: &Hook{HTTP: &HTTPHook{Port: intstr.FromString("admin"), Path: "/pre"}}}}
	_, err := NextUpdate(hookPod(), target, Options{}, t0)
	if err == nil || !strings.Contains(err.Error(), `pod ns/web-0: hooks.preUpdate: no container declares the port "admin"`) {
		t.Errorf("error %v, want one naming the pod and the port", err)
	}
}

// recordingCaller answers every call with its result and counts them.
type recordingCaller struct {
	result HookResult
	calls  []HookCall
}

func (r *recordingCaller) Call(_ context.Context, _ *corev1.Pod, c HookCall) HookResult {
	r.calls = append(r.calls, c)
	return r.result
}

// TestUpdaterCallsOnceAndRecords: the updater writes the hook's start, calls it, and writes its
// answer in the same Update call; the next call goes on without calling it again.
func TestUpdaterCallsOnceAndRecords(t *testing.T) {
	pod := testPod()
	client := fake.NewSimpleClientset(pod)
	caller := &recordingCaller{result: HookResult{Status: 200}}
	u := &Updater{Client: client, Hooks: caller, Now: func() time.Time { return t0 }}
	target := Target{Images: map[string]string{"app": "reg.example/app:v2"}, RolloutID: "r1", Hooks: &Hooks{PreUpdate: httpHook("/pre")}}
	res, err := u.Update(context.Background(), "ns", "web-0", target)
	if err != nil {
		t.Fatal(err)
	}
	if len(caller.calls) != 1 || res.Stage != StageUpdating {
		t.Fatalf("calls %d, result %+v; want one call, then the image patch", len(caller.calls), res)
	}
	got, _ := client.CoreV1().Pods("ns").Get(context.Background(), "web-0", metav1.GetOptions{})
	st := mustState(t, got)
	if r := st.run(PreUpdate, false); r == nil || r.Outcome != HookSucceeded || got.Spec.Containers[0].Image != "reg.example/app:v2" {
		t.Errorf("state %+v, image %s; want the hook succeeded and the image patched", st, got.Spec.Containers[0].Image)
	}
	if _, err := u.Update(context.Background(), "ns", "web-0", target); err != nil {
		t.Fatal(err)
	}
	if len(caller.calls) != 1 {
		t.Errorf("%d calls after a second Update, want 1", len(caller.calls))
	}
}

// TestDescribeHooks: each hook is one line, saying what it calls or waits for, and the timeout
// and failure policy it runs with, the engine's defaults where the spec gives none.
func TestDescribeHooks(t *testing.T) {
	tests := []struct {
		name  string
		hooks *Hooks
		want  []string
	}{
		{"none", nil, nil},
		{"an HTTP call with its defaults", &Hooks{PreUpdate: &Hook{HTTP: &HTTPHook{Port: intstr.FromString("http"), Path: "/hook/pre"}}},
			[]string{"preUpdate: GET :http/hook/pre (timeout 10s, onFailure Fail)"}},
		{"an HTTP call as given", &Hooks{PostUpdate: &Hook{
			HTTP:    &HTTPHook{Port: intstr.FromInt32(8080), Path: "/hook/post", Method: "POST", ExpectStatus: 204},
			Timeout: 3 * time.Second, OnFailure: HookContinue}},
			[]string{"postUpdate: POST :8080/hook/post, expecting 204 (timeout 3s, onFailure Continue)"}},
		{"handshakes, preUpdate first", &Hooks{
			PostUpdate: &Hook{Handshake: &HandshakeHook{Condition: "example.com/registered"}, Timeout: time.Minute},
			PreUpdate:  &Hook{Handshake: &HandshakeHook{Condition: "example.com/deregistered"}}},
			[]string{"preUpdate: handshake on condition example.com/deregistered (timeout 5m0s, onFailure Fail)",
				"postUpdate: handshake on condition example.com/registered (timeout 1m0s, onFailure Fail)"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := DescribeHooks(tt.hooks); !slices.Equal(got, tt.want) {
				t.Errorf("DescribeHooks = %q, want %q", got, tt.want)
			}
		})
	}
}
