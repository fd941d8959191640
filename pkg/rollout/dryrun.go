package rollout

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"

	"github.com/inplace-rollout/inplace-rollout/pkg/inplace"
	"github.com/inplace-rollout/inplace-rollout/pkg/workload"
)

// DryRunReport is what the API server said of the writes that would start a rollout of a spec,
// each sent once with dryRun All (DryRun): admission (ValidatingAdmissionPolicies, webhooks such
// as Kyverno's or Gatekeeper's) judged them as it would the writes themselves, and nothing was
// stored.
type DryRunReport struct {
	// Target is the workload.
	Target workload.Ref `json:"-"`
	// Images are the images the pods would be patched to (pinned as the rollout would pin them).
	Images map[string]string `json:"images,omitempty"`
	// Resources are the resources the pods would be resized to, by container.
	Resources map[string]inplace.Resources `json:"resources,omitempty"`
	// Batch is the first batch with pods to update (from 1), and Pods its pods, in update order.
	Batch int      `json:"batch,omitempty"`
	Pods  []string `json:"pods,omitempty"`
	// Writes are the writes tried, the workload's first.
	Writes []DryRunWrite `json:"writes,omitempty"`
	// Message, when nothing was sent, says why: the rollout has nothing to do.
	Message string `json:"message,omitempty"`
}

// DryRunResult is what became of one write of a dry run.
type DryRunResult string

const (
	// DryRunAccepted: the API server, its admission included, accepted the write.
	DryRunAccepted DryRunResult = "Accepted"
	// DryRunRefused: the API server refused it, for good (admission, validation, RBAC).
	DryRunRefused DryRunResult = "Refused"
	// DryRunNotSent: the rollout would not send it now (a pod it cannot update yet, or that
	// needs no image patch); Message says why.
	DryRunNotSent DryRunResult = "NotSent"
)

// DryRunWrite is one write of a dry run, on one object.
type DryRunWrite struct {
	// Kind and Name are the object's (Pod, StatefulSet, ConfigMap...), in the target's namespace.
	Kind string `json:"kind"`
	Name string `json:"name"`
	// Write says what the write does.
	Write  string       `json:"write"`
	Result DryRunResult `json:"result"`
	// Reason and Code are the API's status of a refusal (Invalid 422 for a
	// ValidatingAdmissionPolicy by default, Forbidden 403 for a webhook or RBAC); Message is its
	// message, which names the policy or webhook, or why the write was not sent.
	Reason  metav1.StatusReason `json:"reason,omitempty"`
	Code    int32               `json:"code,omitempty"`
	Message string              `json:"message,omitempty"`
	// Err is the API's error of a refusal, for apierrors.
	Err error `json:"-"`
}

// Refused are the writes the API server refused.
func (r DryRunReport) Refused() []DryRunWrite {
	var out []DryRunWrite
	for _, w := range r.Writes {
		if w.Result == DryRunRefused {
			out = append(out, w)
		}
	}
	return out
}

// Accepted are the pods whose image patch the API server accepted.
func (r DryRunReport) Accepted() []string {
	var out []string
	for _, w := range r.Writes {
		if w.Result == DryRunAccepted && w.Kind == "Pod" {
			out = append(out, w.Name)
		}
	}
	return out
}

// DryRun sends, each once and with dryRun All, the writes a rollout of spec would make first, as
// it would make them: the workload's start (its lock with the freeze: OnDelete and the template's
// images for a StatefulSet or DaemonSet, the pause of a Deployment, the lock ConfigMap of
// label-selected pods), then, for each pod of the first batch (Plan's), the patch that changes
// its images (inplace.ImagePatch: its state annotation with its images and revision labels, as
// the update's image step sends it). Every write keeps its resourceVersion precondition. It runs
// the checks a start runs first, and refuses what a start refuses, sending nothing; it waits, as
// a start does, for the workload's controller, up to the spec's timeout. A rollout in flight on
// the workload is refused: a dry run tries a start. Refusals of the API server are in the
// report; errors are those of Reconcile.
func (e *Engine) DryRun(ctx context.Context, spec Spec) (DryRunReport, error) {
	deadline := e.now().Add(spec.Timeout)
	for {
		r, wait, err := e.dryRun(ctx, spec)
		switch {
		case err != nil || wait == "":
			return r, classify(err, Status{})
		case !e.now().Before(deadline):
			return r, fmt.Errorf("%s, still after %s: %w", wait, spec.Timeout, context.DeadlineExceeded)
		}
		select {
		case <-ctx.Done():
			return r, ctx.Err()
		case <-time.After(busyRequeue):
		}
	}
}

// dryRun is one try of DryRun: the report, or what the start waits for.
func (e *Engine) dryRun(ctx context.Context, spec Spec) (DryRunReport, string, error) {
	if err := spec.Validate(); err != nil {
		return DryRunReport{}, "", err
	}
	w, lock, err := e.load(ctx, spec.Target)
	if err != nil {
		return DryRunReport{}, "", err
	}
	r := DryRunReport{Target: w.Ref()}
	if lock.Active() {
		return r, "", invalid("%s has rollout %s in flight (%s); a dry run tries the writes that start a rollout", w.Ref(), lock.RolloutID, lock.Phase)
	}
	if spec.TemplateOwned {
		if w, err = workload.Owned(w); err != nil {
			return r, "", err
		}
	}
	c, d := e.observeAndDecideStart(ctx, spec, w, lock, spec.Hash())
	switch d.action {
	case startSucceeded:
		r.Message = "rollout " + lock.RolloutID + " to these images succeeded; nothing to send"
		return r, "", nil
	case startRefuse:
		return r, "", d.err
	case startWait:
		return r, d.message, nil
	case startAlreadyThere:
		r.Message = d.message
		return r, "", nil
	}
	err = e.tryStart(ctx, spec, w, c, d.next, &r)
	return r, "", err
}

// tryStart sends the start's writes as a dry run, the workload's and the first batch's pods',
// into r. An error other than a refusal stops it.
func (e *Engine) tryStart(ctx context.Context, spec Spec, w workload.Workload, c *startCensus, next *Record, r *DryRunReport) error {
	r.Images, r.Resources = next.Images, next.Resources
	kind, name := workload.LockObject(w.Ref())
	err := workload.DryRun(w).Start(ctx, next.encode(), next.target())
	if err := r.add(kind, name, startWrite(w.Ref().Kind), err); err != nil {
		return err
	}
	counts, err := ResolveBatches(spec.Batches, w.Replicas())
	if err != nil {
		return err
	}
	plan := planOf(w, spec, counts, c.pin)
	for i, b := range plan.Batches {
		if len(b.Pods) > 0 {
			r.Batch, r.Pods = i+1, b.Pods
			break
		}
	}
	// The revision labels: a StatefulSet's or DaemonSet's controller names the revision only
	// once the template has the images, which a dry run leaves as it is; the patches then keep
	// the pods' labels.
	labels, _, err := w.RevisionLabels(next.target())
	if err != nil {
		return err
	}
	target := inplace.Target{Images: next.Images, Resources: next.Resources, IncludeInit: spec.IncludeInit, RolloutID: next.RolloutID,
		Labels: withLabels(labels, spec.Labels), Annotations: spec.Annotations, Hooks: spec.Hooks}
	byName := map[string]*corev1.Pod{}
	for _, p := range w.Pods() {
		byName[p.Name] = p
	}
	for _, name := range r.Pods {
		if len(target.Resources) > 0 {
			// The resize goes first, through the pod's resize subresource, as the update sends it.
			sent, err := e.dryRunPod(ctx, byName[name], "resize", target, inplace.ResizePatch)
			if sent {
				if err := r.add("Pod", name, resizeWrite, err); err != nil {
					return err
				}
			}
		}
		sent, err := e.dryRunPod(ctx, byName[name], "", target, inplace.ImagePatch)
		if !sent {
			r.Writes = append(r.Writes, DryRunWrite{Kind: "Pod", Name: name, Write: podWrite, Result: DryRunNotSent, Message: err.Error()})
			continue
		}
		if err := r.add("Pod", name, podWrite, err); err != nil {
			return err
		}
	}
	return nil
}

const (
	podWrite    = "image patch (state annotation, images, labels)"
	resizeWrite = "resize (cpu and memory, through the resize subresource)"
)

// startWrite says what the start of a rollout writes on a workload of kind.
func startWrite(kind Kind) string {
	switch kind {
	case workload.StatefulSet, workload.DaemonSet:
		return "hold: lock annotation, updateStrategy OnDelete, template images"
	case workload.Deployment:
		return "hold: lock annotation, paused"
	}
	return "lock ConfigMap"
}

// dryRunPod sends the patch compose makes of pod (inplace.ImagePatch, inplace.ResizePatch) to
// the pod or its subresource, as a dry run, as the updater would: on a conflict (the pod changed
// since it was observed) it reads the pod again and composes the patch anew. sent is false when
// there is no patch to send, with err saying why.
func (e *Engine) dryRunPod(ctx context.Context, pod *corev1.Pod, subresource string, target inplace.Target,
	compose func(*corev1.Pod, inplace.Target, time.Time) ([]byte, error)) (sent bool, err error) {
	var sub []string
	if subresource != "" {
		sub = []string{subresource}
	}
	err = retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		patch, err := compose(pod, target, e.now())
		if err != nil || patch == nil {
			sent = false
			if err == nil {
				err = errors.New("nothing to patch")
				if subresource == "" {
					err = errors.New("no image to patch")
				}
			}
			return err
		}
		sent = true
		_, err = e.Client.CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.StrategicMergePatchType, patch, metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}}, sub...)
		if !apierrors.IsConflict(err) {
			return err
		}
		if fresh, gerr := e.Client.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{}); gerr == nil {
			pod = fresh
		}
		return err
	})
	return sent, err
}

// add records the write of kind/name that got err: accepted, refused for good (an API status no
// retry changes), or, for any other error, returned wrapped for the caller to stop on.
func (r *DryRunReport) add(kind, name, write string, err error) error {
	w := DryRunWrite{Kind: kind, Name: name, Write: write, Result: DryRunAccepted}
	if err != nil {
		var status apierrors.APIStatus
		if !permanentAPIError(err) || !errors.As(err, &status) {
			return fmt.Errorf("dry run of the %s of %s %s: %w", write, kind, name, err)
		}
		w.Result, w.Err = DryRunRefused, err
		w.Reason, w.Code, w.Message = status.Status().Reason, status.Status().Code, status.Status().Message
	}
	r.Writes = append(r.Writes, w)
	return nil
}
