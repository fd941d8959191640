package inplace

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"
)

// Hooks run around each pod's change: PreUpdate before the pod is drained and changed,
// PostUpdate once it is Ready on its new images and before it counts as updated. A revert runs
// them around its own change too. A registry outside Kubernetes (service discovery, a load
// balancer's pool) learns from them when to stop and start sending an instance traffic.
type Hooks struct {
	PreUpdate  *Hook `json:"preUpdate,omitempty"`
	PostUpdate *Hook `json:"postUpdate,omitempty"`
}

// Hook is one of an HTTP call to the pod or a handshake, with how long it may take and what a
// failure does.
type Hook struct {
	HTTP      *HTTPHook      `json:"http,omitempty"`
	Handshake *HandshakeHook `json:"handshake,omitempty"`
	// Timeout bounds the call, or the wait for the handshake [HTTP 10s, handshake 5m].
	Timeout time.Duration `json:"timeout,omitempty"`
	// OnFailure is what a failed, timed-out or interrupted hook does [Fail].
	OnFailure HookFailurePolicy `json:"onFailure,omitempty"`
}

// HTTPHook is a request to a port of the pod, sent through the API server's pod proxy (so it
// takes the caller's RBAC, pods/proxy, and needs no route to the pod network), as a probe's.
type HTTPHook struct {
	// Port is a container port of the pod: a number, or the name of a declared port.
	Port intstr.IntOrString `json:"port"`
	// Path is the request's path, starting with /.
	Path string `json:"path"`
	// Method is GET or POST [GET].
	Method string `json:"method,omitempty"`
	// ExpectStatus is the status code that passes; 0 passes any code from 200 to 399, as a
	// probe does.
	ExpectStatus int `json:"expectStatus,omitempty"`
}

// HandshakeHook marks the pod and waits for another party: the engine sets the pod condition
// Condition False, and the hook passes when something else (a registry's controller) sets it
// True.
type HandshakeHook struct {
	Condition corev1.PodConditionType `json:"condition"`
}

// HookFailurePolicy is what a failed hook does.
type HookFailurePolicy string

const (
	// HookFail fails the pod (failure code HookFailed): its batch rolls back.
	HookFail HookFailurePolicy = "Fail"
	// HookContinue records the failure and goes on with the pod.
	HookContinue HookFailurePolicy = "Continue"
)

// HookName names a hook of Hooks.
type HookName string

const (
	PreUpdate  HookName = "preUpdate"
	PostUpdate HookName = "postUpdate"
)

// Default hook timeouts.
const (
	DefaultHTTPHookTimeout      = 10 * time.Second
	DefaultHandshakeHookTimeout = 5 * time.Minute
)

// hook is the hook named n, nil when not configured.
func (h *Hooks) hook(n HookName) *Hook {
	switch {
	case h == nil:
		return nil
	case n == PreUpdate:
		return h.PreUpdate
	default:
		return h.PostUpdate
	}
}

func (h *Hook) timeout() time.Duration {
	switch {
	case h.Timeout > 0:
		return h.Timeout
	case h.HTTP != nil:
		return DefaultHTTPHookTimeout
	default:
		return DefaultHandshakeHookTimeout
	}
}

func (h *Hook) failPolicy() HookFailurePolicy {
	if h.OnFailure == "" {
		return HookFail
	}
	return h.OnFailure
}

func (h *HTTPHook) method() string {
	if h.Method == "" {
		return http.MethodGet
	}
	return h.Method
}

// passes reports whether code is the status the hook expects.
func (h *HTTPHook) passes(code int) bool {
	if h.ExpectStatus != 0 {
		return code == h.ExpectStatus
	}
	return code >= 200 && code < 400
}

func (h *HTTPHook) describe() string {
	return fmt.Sprintf("%s :%s%s", h.method(), h.Port.String(), h.Path)
}

func (h *Hook) describe(n HookName) string {
	return fmt.Sprintf("%s hook (%s)", n, h.what())
}

// what says what the hook calls or waits for.
func (h *Hook) what() string {
	if h.HTTP != nil {
		return h.HTTP.describe()
	}
	return fmt.Sprintf("handshake on condition %s", h.Handshake.Condition)
}

// DescribeHooks says each hook configured, one line each, with the timeout and failure policy
// it runs with, defaults included: "preUpdate: POST :8080/hook/pre (timeout 10s, onFailure
// Fail)". None configured is no line.
func DescribeHooks(h *Hooks) []string {
	var out []string
	for _, n := range []HookName{PreUpdate, PostUpdate} {
		hk := h.hook(n)
		if hk == nil {
			continue
		}
		what := hk.what()
		if hk.HTTP != nil && hk.HTTP.ExpectStatus != 0 {
			what += fmt.Sprintf(", expecting %d", hk.HTTP.ExpectStatus)
		}
		out = append(out, fmt.Sprintf("%s: %s (timeout %s, onFailure %s)", n, what, hk.timeout(), hk.failPolicy()))
	}
	return out
}

// builtinConditions are the pod conditions the kubelet, the scheduler and the engine write: a
// handshake on one of them would race its writer.
var builtinConditions = []corev1.PodConditionType{
	corev1.PodReady, corev1.ContainersReady, corev1.PodScheduled, corev1.PodInitialized,
	corev1.PodReadyToStartContainers, corev1.DisruptionTarget, corev1.PodResizePending,
	corev1.PodResizeInProgress, ReadinessGate,
}

// CheckHooks refuses hooks no pod could run, naming the field (under prefix, e.g. "hooks"): a
// hook that is neither or both of http and handshake, a port out of range, a path without a
// leading /, an unknown method, status or failure policy, a negative timeout, a handshake on a
// condition someone else writes.
func CheckHooks(prefix string, h *Hooks) error {
	if h == nil {
		return nil
	}
	for _, n := range []HookName{PreUpdate, PostUpdate} {
		hk := h.hook(n)
		if hk == nil {
			continue
		}
		if err := checkHook(hk); err != nil {
			return fmt.Errorf("%s.%s: %w", prefix, n, err)
		}
	}
	return nil
}

func checkHook(h *Hook) error {
	switch {
	case (h.HTTP == nil) == (h.Handshake == nil):
		return fmt.Errorf("takes exactly one of http and handshake")
	case h.Timeout < 0:
		return fmt.Errorf("timeout %s is below 0", h.Timeout)
	case h.OnFailure != "" && h.OnFailure != HookFail && h.OnFailure != HookContinue:
		return fmt.Errorf("onFailure %q is neither %s nor %s", h.OnFailure, HookFail, HookContinue)
	case h.Handshake != nil:
		c := h.Handshake.Condition
		if errs := validation.IsQualifiedName(string(c)); len(errs) > 0 {
			return fmt.Errorf("handshake.condition %q is not a condition type: %s", c, strings.Join(errs, "; "))
		}
		if slices.Contains(builtinConditions, c) {
			return fmt.Errorf("handshake.condition %q is written by Kubernetes or by the rollout itself; name a condition of your own", c)
		}
		return nil
	}
	w := h.HTTP
	switch {
	case w.Port.Type == intstr.Int && (w.Port.IntVal < 1 || w.Port.IntVal > 65535):
		return fmt.Errorf("http.port %d is not between 1 and 65535", w.Port.IntVal)
	case w.Port.Type == intstr.String && len(validation.IsValidPortName(w.Port.StrVal)) > 0:
		return fmt.Errorf("http.port %q is neither a number nor a port name", w.Port.StrVal)
	case !strings.HasPrefix(w.Path, "/"):
		return fmt.Errorf("http.path %q does not start with /", w.Path)
	case strings.ContainsAny(w.Path, "?#"):
		return fmt.Errorf("http.path %q has a query or fragment; give a path alone", w.Path)
	case w.Method != "" && w.Method != http.MethodGet && w.Method != http.MethodPost:
		return fmt.Errorf("http.method %q is neither GET nor POST", w.Method)
	case w.ExpectStatus != 0 && (w.ExpectStatus < 100 || w.ExpectStatus > 599):
		return fmt.Errorf("http.expectStatus %d is not an HTTP status code", w.ExpectStatus)
	}
	return nil
}

// hookPort is the number of h's port on pod: the number, or the container port of that name.
func hookPort(pod *corev1.Pod, h *HTTPHook) (int32, error) {
	port, err := specPort(pod.Spec, h)
	if err != nil {
		return 0, fmt.Errorf("pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	return port, nil
}

func specPort(spec corev1.PodSpec, h *HTTPHook) (int32, error) {
	if h.Port.Type == intstr.Int {
		return h.Port.IntVal, nil
	}
	for _, c := range spec.Containers {
		for _, p := range c.Ports {
			if p.Name == h.Port.StrVal {
				return p.ContainerPort, nil
			}
		}
	}
	return 0, fmt.Errorf("no container declares the port %q that the HTTP hook names", h.Port.StrVal)
}

// CheckHookPorts refuses hooks whose HTTP port names a port no container of spec (a pod's or a
// template's) declares.
func CheckHookPorts(spec corev1.PodSpec, h *Hooks) error {
	for _, n := range []HookName{PreUpdate, PostUpdate} {
		if hk := h.hook(n); hk != nil && hk.HTTP != nil {
			if _, err := specPort(spec, hk.HTTP); err != nil {
				return fmt.Errorf("hooks.%s: %w", n, err)
			}
		}
	}
	return nil
}

// HookOutcome is how a hook ended.
type HookOutcome string

const (
	HookSucceeded HookOutcome = "Succeeded"
	HookFailed    HookOutcome = "Failed"
	// HookUnknown: the driver stopped between recording an HTTP hook's start and recording its
	// answer. The call is not made again (a hook runs at most once per pod and direction): it
	// counts as failed.
	HookUnknown HookOutcome = "Unknown"
)

// HookRun records one hook run on a pod: started (recorded before an HTTP call is made), then
// ended with its outcome. A hook never runs twice for the same pod in the same direction.
type HookRun struct {
	Hook      HookName    `json:"hook"`
	Reverting bool        `json:"reverting,omitempty"`
	StartedAt time.Time   `json:"startedAt"`
	Outcome   HookOutcome `json:"outcome,omitempty"`
	Message   string      `json:"message,omitempty"`
}

// HookCall is an HTTP hook the updater makes once the step that records its start is written.
type HookCall struct {
	Hook      HookName
	Reverting bool
	StartedAt time.Time
	// Port is the resolved port number.
	Port    int32
	HTTP    HTTPHook
	Timeout time.Duration
}

// HookResult is the answer to a HookCall: the status code, or why there was none. Err is
// phrased for a pod's state and holds no response body.
type HookResult struct {
	Status int
	Err    string
}

// run is the run of hook n in the direction, nil when it never started.
func (s *State) run(n HookName, reverting bool) *HookRun {
	for i := range s.HookRuns {
		if r := &s.HookRuns[i]; r.Hook == n && r.Reverting == reverting {
			return r
		}
	}
	return nil
}

// hookVerdict is what a hook needs now.
type hookVerdict int

const (
	// hookDone: none is configured, or it ended and the pod goes on.
	hookDone hookVerdict = iota
	// hookStart: start it (startHook's write).
	hookStart
	// hookWait: it runs; wait.
	hookWait
	// hookEnded: it ended now (the returned state records how); the pod goes on.
	hookEnded
	// hookFailedPod: it failed and its policy fails the pod.
	hookFailedPod
)

// HookAnswer is the answer to a call the updater just made.
type HookAnswer struct {
	Call   HookCall
	Result HookResult
}

// answers reports whether a is the answer to run r of hook n in the direction.
func (a *HookAnswer) answers(r *HookRun, n HookName, reverting bool) bool {
	return a != nil && a.Call.Hook == n && a.Call.Reverting == reverting && a.Call.StartedAt.Equal(r.StartedAt)
}

// judgeHook decides hook n of st in the direction, from the pod and, for an HTTP hook, the
// answer to the call this caller just made (nil when it made none). It returns the state with
// the run's outcome recorded when the hook ended now, and a reason.
func judgeHook(pod *corev1.Pod, st *State, n HookName, reverting bool, answer *HookAnswer, now time.Time) (hookVerdict, *State, string) {
	hk := st.Hooks.hook(n)
	if hk == nil {
		return hookDone, st, ""
	}
	r := st.run(n, reverting)
	switch {
	case r == nil:
		return hookStart, st, ""
	case r.Outcome == HookSucceeded || r.Outcome != "" && hk.failPolicy() == HookContinue:
		return hookDone, st, ""
	case r.Outcome != "":
		return hookFailedPod, st, r.Message
	}
	var outcome HookOutcome
	var msg string
	switch {
	case hk.Handshake != nil:
		c := podCondition(pod, hk.Handshake.Condition)
		switch {
		case c != nil && c.Status == corev1.ConditionTrue:
			outcome, msg = HookSucceeded, fmt.Sprintf("%s released", hk.describe(n))
		case now.Sub(r.StartedAt) >= hk.timeout():
			outcome, msg = HookFailed, fmt.Sprintf("%s: condition %s not True within %s", hk.describe(n), hk.Handshake.Condition, hk.timeout())
		default:
			left := r.StartedAt.Add(hk.timeout()).Sub(now)
			return hookWait, st, fmt.Sprintf("waiting for %s: condition %s True, %s left", hk.describe(n), hk.Handshake.Condition, left.Round(time.Second))
		}
	case !answer.answers(r, n, reverting):
		outcome, msg = HookUnknown, fmt.Sprintf("%s: started at %s, its answer was never recorded (the driver stopped); not called again", hk.describe(n), r.StartedAt.Format(time.RFC3339))
	case answer.Result.Err != "":
		outcome, msg = HookFailed, fmt.Sprintf("%s: %s", hk.describe(n), answer.Result.Err)
	case !hk.HTTP.passes(answer.Result.Status):
		want := "200-399"
		if hk.HTTP.ExpectStatus != 0 {
			want = fmt.Sprint(hk.HTTP.ExpectStatus)
		}
		outcome, msg = HookFailed, fmt.Sprintf("%s answered %d, want %s", hk.describe(n), answer.Result.Status, want)
		if answer.Result.Status == http.StatusForbidden {
			// The API server refuses pods/proxy with the code an application may answer.
			msg += " (the application's answer, or the API server refusing pods/proxy to this driver: it needs get and create on pods/proxy)"
		}
	default:
		outcome, msg = HookSucceeded, fmt.Sprintf("%s answered %d", hk.describe(n), answer.Result.Status)
	}
	next := st.clone()
	v := hookEnded
	if outcome != HookSucceeded {
		if hk.failPolicy() == HookFail {
			v = hookFailedPod
		} else {
			msg += "; going on (onFailure Continue)"
		}
	}
	nr := next.run(n, reverting)
	nr.Outcome, nr.Message = outcome, truncate(msg, 512)
	return v, next, msg
}

// startHook is the write that starts hook n of st: the run recorded, and for a handshake its
// condition False in the same write (through the status subresource, which keeps the
// annotation), or for an HTTP hook the call the updater makes once the write is in. st is
// moved to stage first. An HTTP hook whose named port the pod lacks starts and ends at once,
// failed, without a call.
func startHook(pod *corev1.Pod, st *State, n HookName, reverting bool, stage Stage, now time.Time) Step {
	hk := st.Hooks.hook(n)
	next := st.clone()
	run := HookRun{Hook: n, Reverting: reverting, StartedAt: stageTime(now)}
	why := "running " + hk.describe(n)
	if reverting {
		why += " of the rollback"
	}
	var call *HookCall
	if hk.HTTP != nil {
		port, err := hookPort(pod, hk.HTTP)
		if err != nil {
			run.Outcome, run.Message, why = HookFailed, truncate(err.Error(), 512), err.Error()
		} else {
			call = &HookCall{Hook: n, Reverting: reverting, StartedAt: run.StartedAt, Port: port, HTTP: *hk.HTTP, Timeout: hk.timeout()}
		}
	}
	next.HookRuns = append(next.HookRuns, run)
	next.moveTo(stage, now, why, "")
	b := newPatch(pod).state(next)
	if hk.Handshake != nil {
		b.hookCondition(hk.Handshake.Condition, n, reverting, now)
	}
	s := b.step(stage, why)
	s.Call, s.RequeueAfter = call, pollInterval
	s.Event = &Event{Type: corev1.EventTypeNormal, Reason: EventHook, Message: why}
	return s
}

// hookCondition sets the handshake's condition False, telling the other party which hook asks.
func (b *patchBuilder) hookCondition(t corev1.PodConditionType, n HookName, reverting bool, now time.Time) *patchBuilder {
	b.status = true
	reason := "PreUpdate"
	if n == PostUpdate {
		reason = "PostUpdate"
	}
	if reverting {
		reason = "Rollback" + reason
	}
	c := b.condition(t, corev1.ConditionFalse, reason, now)
	c.Message = fmt.Sprintf("inplace-rollout waits for this condition to be True (%s hook)", n)
	b.conditions = append(b.conditions, c)
	return b
}
