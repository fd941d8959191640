package traffic

import (
	"errors"
	"fmt"
	"strconv"

	argov1alpha1 "github.com/argoproj/argo-rollouts/pkg/apis/rollouts/v1alpha1"
	"github.com/argoproj/argo-rollouts/utils/plugin/types"

	"github.com/inplace-rollout/inplace-rollout/pkg/rollout"
)

type hashes struct{ canary, stable string }

// opKind is what a driver does.
type opKind int

const (
	// opHold rolls out up to a weight, and holds there.
	opHold opKind = iota + 1
	// opFull rolls out every pod and hands the workload back.
	opFull
	// opAbort rolls back every pod the Rollout's rollout in flight touched.
	opAbort
)

// op is what a call asks of the target.
type op struct {
	kind   opKind
	weight int32 // opHold only
}

func (o op) String() string {
	switch o.kind {
	case opHold:
		return "weight " + strconv.Itoa(int(o.weight)) + "%"
	case opFull:
		return "full promotion"
	}
	return "abort"
}

// UpdateHash records the Rollout's canary and stable ReplicaSet hashes for its next SetWeight:
// equal hashes mean full promotion, other hashes with the Rollout's status.abort an abort. It
// makes no API call.
func (p *Plugin) UpdateHash(ro *argov1alpha1.Rollout, canaryHash, stableHash string, _ []argov1alpha1.WeightDestination) types.RpcError {
	if ro == nil {
		return types.RpcError{}
	}
	p.mu.Lock()
	p.hashes[ro.Namespace+"/"+ro.Name] = hashes{canary: canaryHash, stable: stableHash}
	p.mu.Unlock()
	return types.RpcError{}
}

// opFor says what a weight asks of the target, given the Rollout's hashes; ok is false when it
// asks for nothing: weight 0 of a revision in progress (before its first setWeight step, or
// while its canary has no available pod) changes nothing.
func (p *Plugin) opFor(ro *argov1alpha1.Rollout, weight int32) (op, bool, error) {
	p.mu.Lock()
	h, ok := p.hashes[ro.Namespace+"/"+ro.Name]
	p.mu.Unlock()
	if !ok {
		// UpdateHash comes first in every reconcile; a new plugin process may have missed it.
		h = hashes{canary: ro.Status.CurrentPodHash, stable: ro.Status.StableRS}
	}
	switch {
	case weight < 0 || weight > 100:
		return op{}, false, fmt.Errorf("weight %d for Rollout %s/%s is not between 0 and 100", weight, ro.Namespace, ro.Name)
	case h.canary != "" && h.canary == h.stable:
		// Full promotion, and every reconcile of a Healthy Rollout after it.
		return op{kind: opFull}, true, nil
	case ro.Status.Abort:
		return op{kind: opAbort}, true, nil
	case weight == 100:
		// The end of the steps, once the canary ReplicaSet has all its pods.
		return op{kind: opFull}, true, nil
	case weight == 0:
		return op{}, false, nil
	}
	return op{kind: opHold, weight: weight}, true, nil
}

// call decodes a SetWeight or VerifyWeight. ok is false when there is nothing to do; err is bad
// input, also logged once per Rollout and error.
func (p *Plugin) call(ro *argov1alpha1.Rollout, weight int32) (request, op, bool, error) {
	if ro == nil {
		return request{}, op{}, false, errors.New("the call carries no Rollout")
	}
	req, err := p.decode(ro)
	p.noteConfig(ro, err)
	if err != nil {
		return req, op{}, false, err
	}
	if initial(ro, req) {
		return req, op{}, false, nil
	}
	o, ok, err := p.opFor(ro, weight)
	return req, o, ok, err
}

// noteConfig logs a Rollout's config error once, not on every reconcile.
func (p *Plugin) noteConfig(ro *argov1alpha1.Rollout, err error) {
	name := ro.Namespace + "/" + ro.Name
	msg := ""
	if err != nil {
		msg = err.Error()
	}
	p.mu.Lock()
	changed := p.badConfig[name] != msg
	if msg == "" {
		delete(p.badConfig, name)
	} else {
		p.badConfig[name] = msg
	}
	p.mu.Unlock()
	if changed && msg != "" {
		p.log.Warn("bad config", "rollout", name, "err", msg)
	}
}

// SetWeight steers the Rollout's rollout and returns at once: a weight between 0 and 100 rolls
// that share of the target's pods out and holds there; full promotion (equal hashes, or 100)
// rolls out the rest and hands the workload back; an abort rolls every touched pod back. A
// repeated call finds its driver; one whose driver settled costs one GET. Weight 0 of a revision
// in progress, and the Rollout's first revision, change nothing.
func (p *Plugin) SetWeight(ro *argov1alpha1.Rollout, weight int32, _ []argov1alpha1.WeightDestination) types.RpcError {
	req, o, ok, err := p.call(ro, weight)
	if err != nil {
		return types.RpcError{ErrorString: err.Error()}
	}
	if !ok {
		return types.RpcError{}
	}
	e, err := p.engine.Get()
	if err != nil {
		return types.RpcError{ErrorString: err.Error()}
	}
	p.driverFor(e, req, o)
	return types.RpcError{}
}

// VerifyWeight reports whether the weight is reached: Verified once the rollout holds at it (its
// pods Updated and Ready, their batch through its analysis) or succeeded, or once an abort
// rolled back; NotVerified while it moves. A rollout that failed and rolled back, or that waits
// on a person, is an RpcError naming the Rollout, the target and the reason, which Argo shows as
// a Warning Event on the Rollout. It makes no API call.
func (p *Plugin) VerifyWeight(ro *argov1alpha1.Rollout, weight int32, _ []argov1alpha1.WeightDestination) (types.RpcVerified, types.RpcError) {
	req, o, ok, err := p.call(ro, weight)
	if err != nil {
		return types.NotVerified, types.RpcError{ErrorString: err.Error()}
	}
	if !ok {
		return types.Verified, types.RpcError{}
	}
	d := p.drivers.Get(req.key)
	if d == nil || d.Job.config != req.Canonical || d.Job.op != o || !d.Finished() {
		// Moving; or the SetWeight before this call has not reached this process (it starts
		// the driver on the next reconcile).
		return types.NotVerified, types.RpcError{}
	}
	if msg := failure(req, d); msg != "" {
		return types.NotVerified, types.RpcError{ErrorString: msg}
	}
	return types.Verified, types.RpcError{}
}

// failure says why a finished driver did not reach its op, or "" when it did.
func failure(req request, d *driver) string {
	st, _ := d.Result()
	return verdict(req.Rollout, req.Spec.Target.String(), d.Job.op, d.Job.nothing, st, d.Outcome())
}

// verdict says why a driver of Rollout name doing o on target that came to st, as out says,
// did not reach o, or "" when it did. nothing says an abort found nothing to roll back.
func verdict(name, target string, o op, nothing bool, st rollout.Status, out rollout.Outcome) string {
	if out.Err != nil {
		return fmt.Sprintf("Rollout %s: %s of %s: %v", name, o, target, out.Err)
	}
	if o.kind == opAbort {
		if nothing || out.Kind == rollout.RolledBack {
			return ""
		}
		return fmt.Sprintf("Rollout %s: rolling back %s did not finish (%s): %s; a person must look at its pods", name, target, st.Phase, st.Message)
	}
	switch out.Kind {
	case rollout.Succeeded:
		return ""
	case rollout.Holding:
		if o.kind == opHold {
			return ""
		}
	case rollout.Paused:
		return fmt.Sprintf("Rollout %s: %s of %s: %s; to accept the batch, promote the Rollout past this step (kubectl argo rollouts promote): its next higher weight goes on from here; to undo, abort the Rollout",
			name, o, target, st.Message)
	case rollout.RolledBack:
		return fmt.Sprintf("Rollout %s: %s of %s failed and was rolled back (%s): %s; abort the Rollout, or put images that work in its template (a new revision)",
			name, o, target, st.Reason, st.Message)
	}
	return fmt.Sprintf("Rollout %s: %s of %s stopped at %s (%s): %s", name, o, target, st.Phase, st.Reason, st.Message)
}

// beyond reports whether op a asks for more pods than op b.
func beyond(a, b op) bool {
	switch {
	case b.kind != opHold:
		return false
	case a.kind == opFull:
		return true
	}
	return a.kind == opHold && a.weight > b.weight
}
