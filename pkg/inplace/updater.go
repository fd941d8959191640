package inplace

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
)

// Updater applies NextUpdate and NextRevert to pods on a cluster, one write per call. It keeps
// no state of its own: any Updater, in any process, continues from what is on the pod.
type Updater struct {
	Client  kubernetes.Interface
	Options Options
	// Events receives an Event per stage change; nil records none.
	Events EventRecorder
	// TagMoved tells a revert whether a tag still resolves to the digest a container ran; nil
	// means it cannot be known, so reverts go to the recorded digest.
	TagMoved TagMoved
	// Log receives one line per write; nil discards.
	Log *slog.Logger
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// Wrote, when set, receives each pod as its write returned it: a cache that lags the API
	// server can answer with it (workload.PodWatch.Wrote).
	Wrote func(*corev1.Pod)
	// Hooks makes HTTP hook calls; nil calls through the API server's pod proxy with Client.
	Hooks HookCaller
}

// Result is the outcome of one Update or Revert call.
type Result struct {
	Stage        Stage
	Reason       string
	Done         bool
	RequeueAfter time.Duration
	// Wrote reports whether the call wrote to the pod.
	Wrote bool
}

// Update takes the next step of updating the pod to target.
func (u *Updater) Update(ctx context.Context, namespace, name string, target Target) (Result, error) {
	return u.UpdatePod(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}}, target)
}

// UpdatePod is Update starting from a pod the caller has read, from the API server or from a
// watch's cache: the first decision uses it, saving a read. Its write carries the pod's
// resourceVersion, so a pod that has changed since (a cache that lags) costs a conflict and a
// fresh read, never a write decided on what the pod no longer is. A pod with no
// resourceVersion is read first.
func (u *Updater) UpdatePod(ctx context.Context, pod *corev1.Pod, target Target) (Result, error) {
	return u.do(ctx, pod, "updating", func(pod *corev1.Pod, now time.Time, answer *HookAnswer) (Step, error) {
		return nextUpdate(pod, target, u.Options, now, answer)
	})
}

// Revert takes the next step of putting the pod back on the images it ran before.
func (u *Updater) Revert(ctx context.Context, namespace, name string) (Result, error) {
	return u.RevertPod(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}})
}

// RevertPod is Revert starting from a pod just read, as UpdatePod.
func (u *Updater) RevertPod(ctx context.Context, pod *corev1.Pod) (Result, error) {
	return u.do(ctx, pod, "reverting", func(pod *corev1.Pod, now time.Time, answer *HookAnswer) (Step, error) {
		return nextRevert(pod, u.Options, now, u.TagMoved, answer)
	})
}

// AdoptPod records an adoption on a pod just read (see NextAdopt), so that RevertPod can take
// it back to the previous images.
func (u *Updater) AdoptPod(ctx context.Context, pod *corev1.Pod, a Adoption) (Result, error) {
	return u.do(ctx, pod, "adopting", func(pod *corev1.Pod, now time.Time, _ *HookAnswer) (Step, error) {
		return NextAdopt(pod, a, now)
	})
}

// decide is a pure decision on a pod just read: NextUpdate, NextRevert or NextAdopt, with the
// answer to the HTTP hook call just made, if any.
type decide func(pod *corev1.Pod, now time.Time, answer *HookAnswer) (Step, error)

func (u *Updater) do(ctx context.Context, fresh *corev1.Pod, verb string, next decide) (Result, error) {
	res, written, call, err := u.write(ctx, fresh, verb, next, nil)
	if err != nil || call == nil {
		return res, err
	}
	// The write recorded the hook's start: the call is made once, and its answer is recorded
	// by the next write. A driver stopped in between leaves the start alone on the pod, and the
	// next decision counts the hook's outcome as unknown rather than calling it again.
	answer := &HookAnswer{Call: *call, Result: u.call(ctx, written, *call)}
	u.log().Info("hook called", "pod", fresh.Namespace+"/"+fresh.Name, "hook", call.Hook, "reverting", call.Reverting, "status", answer.Result.Status, "err", answer.Result.Err)
	res, _, _, err = u.write(ctx, written, verb, next, answer)
	return res, err
}

// write makes the one write next decides on the pod (read fresh unless given with its
// resourceVersion), and returns the pod as written and the hook call the step asks for.
func (u *Updater) write(ctx context.Context, fresh *corev1.Pod, verb string, next decide, answer *HookAnswer) (Result, *corev1.Pod, *HookCall, error) {
	namespace, name := fresh.Namespace, fresh.Name
	if fresh.ResourceVersion == "" {
		fresh = nil
	}
	var (
		res     Result
		written *corev1.Pod
		event   *Event
		call    *HookCall
	)
	// Every decision is made on a fresh read and written with that read's resourceVersion; a
	// conflict means the pod moved on, so read and decide again.
	err := retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		pod := fresh
		fresh = nil // a retry after a conflict reads again
		if pod == nil {
			var err error
			if pod, err = u.Client.CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{}); err != nil {
				return fmt.Errorf("reading pod %s/%s: %w", namespace, name, err)
			}
		}
		step, err := next(pod, u.now(), answer)
		if err != nil {
			return err
		}
		res = Result{Stage: step.Stage, Reason: step.Reason, Done: step.Done, RequeueAfter: step.RequeueAfter}
		if step.Patch == nil {
			return nil
		}
		var sub []string
		if step.Subresource != "" {
			sub = []string{step.Subresource}
		}
		written, err = u.Client.CoreV1().Pods(namespace).Patch(ctx, name, types.StrategicMergePatchType, step.Patch, metav1.PatchOptions{}, sub...)
		if err != nil {
			return fmt.Errorf("%s pod %s/%s (writing stage %s): %w", verb, namespace, name, step.Stage, err)
		}
		res.Wrote, event, call = true, step.Event, step.Call
		return nil
	})
	if err != nil {
		return Result{}, nil, nil, err
	}
	if res.Wrote {
		if u.Wrote != nil && written != nil {
			u.Wrote(written)
		}
		u.log().Info("pod written", "pod", namespace+"/"+name, "stage", res.Stage, "reason", res.Reason)
		if event != nil && u.Events != nil {
			if err := u.Events.Record(ctx, PodRef(written), *event); err != nil {
				u.log().Warn("event not recorded", "pod", namespace+"/"+name, "err", err)
			}
		}
	}
	return res, written, call, nil
}

// call makes an HTTP hook call, bounded by its timeout.
func (u *Updater) call(ctx context.Context, pod *corev1.Pod, c HookCall) HookResult {
	ctx, cancel := context.WithTimeout(ctx, c.Timeout)
	defer cancel()
	caller := u.Hooks
	if caller == nil {
		caller = PodProxy{Client: u.Client}
	}
	return caller.Call(ctx, pod, c)
}

func (u *Updater) now() time.Time {
	if u.Now != nil {
		return u.Now()
	}
	return time.Now()
}

func (u *Updater) log() *slog.Logger {
	if u.Log != nil {
		return u.Log
	}
	return slog.New(slog.DiscardHandler)
}
