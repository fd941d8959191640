// Package traffic is the Argo Rollouts traffic router plugin inplace-rollout/traffic: a Rollout's
// setWeight steps move its target's pods to the Rollout's new images in place. SetWeight(w)
// means w% of the target's pods run them; VerifyWeight is Verified once they are Updated and
// Ready and their batch passed its analysis; an abort rolls every touched pod back; full
// promotion updates the rest and hands the workload back.
//
// A batch whose analysis is inconclusive pauses (onInconclusive pause): VerifyWeight says so and
// the step waits. Promoting the Rollout past the step accepts the batch when Argo next asks for
// a higher weight, or for full promotion; aborting it rolls back.
//
// Argo calls the plugin on every reconcile of the Rollout, several times a second around a
// transition and periodically once it is Healthy, and the calls have no timeout: they never wait
// for pods. A driver goroutine per Rollout and target runs Engine.Drive up to the weight (the
// engine's hold point, Spec.UpTo), and the calls start, steer or read it. Once a driver settled,
// a repeated call costs one GET of the target, which confirms that its lock is as the driver
// left it. Everything the drivers know is also on the cluster, so a new plugin process picks up
// where the last one was.
//
// # The sentinel
//
// Argo sends a weight other than 0 only when the Rollout's canary ReplicaSet has available pods
// (and 100 only once it has all of them). A Rollout that drives a workload it does not own would
// run no pods and only ever send SetWeight(0), so it keeps a sentinel: a pod of its own, from its
// own pod template, whose only job is to be available. Two ways:
//   - spec.replicas 1 always runs one pod, and a second during a rollout. At the end of the steps
//     Argo sends 100 and promotes only once VerifyWeight(100) is Verified: the Rollout is Healthy
//     when every pod of the target runs the new images.
//   - spec.replicas 0 and a first step setCanaryScale {replicas: 1} runs one canary pod while a
//     revision rolls out and none once it is promoted. But at the end of the steps Argo scales
//     that pod away and promotes without sending 100 (its canary has no available pod), so the
//     Rollout is Healthy while the router is still updating the rest of the target. End the
//     steps with setWeight 100: that step runs while the canary pod is still there, sends 100,
//     and waits until every pod is updated.
//
// The images rolled out are the template's (its containers named as the
// target's), so the sentinel runs the new images and a tiny image such as registry.k8s.io/pause
// cannot stand in for them. Make it cheap: requests and limits as small as the image allows
// (cpu 1m, a few Mi of memory), labels no Service selects so that it gets no traffic, no probes
// that need the app's dependencies, and, when the image has a shell, command and args that keep
// it idle. Set progressDeadlineAbort on the Rollout so that a weight that never verifies (the
// in-place rollout failed and rolled back) aborts it.
//
// The config, spec.strategy.canary.trafficRouting.plugins["inplace-rollout/traffic"], is the step
// plugin's spec (target, batches, maxUnavailable, gracePeriod, soak, timeout, analysis,
// onInconclusive) without images or upTo: the images are the template's (fromRollout), since a
// template change is what starts a revision in Argo, and the weights are the hold points.
package traffic

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"

	argov1alpha1 "github.com/argoproj/argo-rollouts/pkg/apis/rollouts/v1alpha1"
	argorpc "github.com/argoproj/argo-rollouts/rollout/trafficrouting/plugin/rpc"
	"github.com/argoproj/argo-rollouts/utils/plugin/types"
	goplugin "github.com/hashicorp/go-plugin"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/inplace-rollout/inplace-rollout/pkg/rollout"
	"github.com/inplace-rollout/inplace-rollout/pkg/workload"
	"github.com/inplace-rollout/inplace-rollout/plugin/argospec"
)

// Name is the plugin's type, as Type reports it, and its key in the Rollout's
// trafficRouting.plugins.
const Name = "inplace-rollout/traffic"

// configField is where the config is, for messages.
const configField = `trafficRouting.plugins["` + Name + `"]`

// Handshake is Argo Rollouts' handshake for traffic router plugins.
var Handshake = goplugin.HandshakeConfig{
	ProtocolVersion:  1,
	MagicCookieKey:   "ARGO_ROLLOUTS_RPC_PLUGIN",
	MagicCookieValue: "trafficrouter",
}

// PluginMap is what Argo dispenses from a traffic router plugin process.
func PluginMap(p *Plugin) map[string]goplugin.Plugin {
	return map[string]goplugin.Plugin{"RpcTrafficRouterPlugin": &argorpc.RpcTrafficRouterPlugin{Impl: p}}
}

// Serve serves p over go-plugin until Argo closes the connection. Nothing else may write to
// stdout meanwhile: it carries go-plugin's handshake.
func Serve(p *Plugin) {
	goplugin.Serve(&goplugin.ServeConfig{HandshakeConfig: Handshake, Plugins: PluginMap(p)})
}

// Plugin implements Argo's rpc.TrafficRouterPlugin on top of rollout.Engine. Argo serves every
// Rollout from one plugin process and runs each call in its own goroutine: every method is safe
// for concurrent use.
type Plugin struct {
	newEngine func() (*rollout.Engine, error)
	log       *slog.Logger

	mu     sync.Mutex
	engine *rollout.Engine
	// hashes are the last UpdateHash of each Rollout (NS/NAME), for its next SetWeight.
	hashes  map[string]hashes
	drivers map[driverKey]*driver
	// badConfig is the last config error of each Rollout, logged once rather than per call.
	badConfig map[string]string
}

var _ argorpc.TrafficRouterPlugin = (*Plugin)(nil)

// New returns a plugin whose engine newEngine makes on the first call that needs it, and again
// after a failure: Argo never calls InitPlugin twice, so a failed start must not be final. log
// nil discards.
func New(newEngine func() (*rollout.Engine, error), log *slog.Logger) *Plugin {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Plugin{newEngine: newEngine, log: log, hashes: map[string]hashes{}, drivers: map[driverKey]*driver{},
		badConfig: map[string]string{}}
}

type hashes struct{ canary, stable string }

// driverKey names one rollout: its holder (the Argo Rollout) and its target.
type driverKey struct {
	holder, target string
}

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

// driver is one goroutine running an op for a spec.
type driver struct {
	// config is the spec it drives, canonical; with op, what another call must ask for to
	// find this driver rather than replace it.
	config string
	op     op
	cancel context.CancelFunc
	done   chan struct{}

	mu   sync.Mutex
	last rollout.Status

	// Set once done is closed. final and err are the outcome; nothing says an abort found
	// nothing to roll back. lock is the target's lock as the driver left it (lockErr when it
	// could not be read): the outcome stands while the lock is the same.
	final   rollout.Status
	err     error
	nothing bool
	lock    *workload.Lock
	lockErr error
}

func (d *driver) finished() bool {
	select {
	case <-d.done:
		return true
	default:
		return false
	}
}

// InitPlugin makes the engine. A failure is reported, and the next call tries again.
func (p *Plugin) InitPlugin() types.RpcError {
	if _, err := p.getEngine(); err != nil {
		return types.RpcError{ErrorString: err.Error()}
	}
	return types.RpcError{}
}

// Type names the plugin.
func (p *Plugin) Type() string { return Name }

func (p *Plugin) getEngine() (*rollout.Engine, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.engine != nil {
		return p.engine, nil
	}
	e, err := p.newEngine()
	if err != nil {
		return nil, fmt.Errorf("starting the %s plugin: %w", Name, err)
	}
	p.engine = e
	return e, nil
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

// request is a decoded call: the engine's spec for the Rollout, and its driver's key.
type request struct {
	argospec.Request
	key driverKey
}

// decode reads the Rollout's config. The images are the Rollout's template's; the weights are
// the hold points. Its error is bad input naming the Rollout and the field, and nothing is
// written for it.
func (p *Plugin) decode(ro *argov1alpha1.Rollout) (request, error) {
	var raw json.RawMessage
	if ro != nil && ro.Spec.Strategy.Canary != nil && ro.Spec.Strategy.Canary.TrafficRouting != nil {
		raw = ro.Spec.Strategy.Canary.TrafficRouting.Plugins[Name]
	}
	raw, err := withFromRollout(ro, raw)
	if err != nil {
		return request{}, err
	}
	r, err := argospec.Decode(ro, raw, configField)
	if err != nil {
		return request{Request: r}, err
	}
	// A template change mid-rollout is a new revision for Argo: the newest images win, and the
	// pods keep the last stable images to roll back to.
	r.Spec.Supersede = true
	return request{Request: r, key: driverKey{holder: r.Holder, target: r.Spec.Target.String()}}, nil
}

// withFromRollout refuses the fields the traffic router sets itself and sets fromRollout. A
// config that is not a JSON object is left to argospec.Decode to refuse.
func withFromRollout(ro *argov1alpha1.Rollout, raw json.RawMessage) (json.RawMessage, error) {
	var fields map[string]json.RawMessage
	if len(raw) == 0 || json.Unmarshal(raw, &fields) != nil || fields == nil {
		return raw, nil
	}
	name := ro.Namespace + "/" + ro.Name
	if _, ok := fields["images"]; ok {
		return nil, fmt.Errorf("%s of Rollout %s: images: the traffic router rolls out the images of the Rollout's pod template, since only a template change starts a revision in Argo; remove images and put the new images in spec.template", configField, name)
	}
	if _, ok := fields["upTo"]; ok {
		return nil, fmt.Errorf("%s of Rollout %s: upTo: the weights of the Rollout's setWeight steps are the hold points; remove upTo", configField, name)
	}
	if v, ok := fields["fromRollout"]; ok && string(v) != "true" {
		return nil, fmt.Errorf("%s of Rollout %s: fromRollout: the traffic router always takes the images of the Rollout's pod template; remove fromRollout or set it to true", configField, name)
	}
	fields["fromRollout"] = json.RawMessage("true")
	return json.Marshal(fields)
}

// initial reports a Rollout whose first revision this is: Argo deploys it without steps, as
// what already runs, so there is nothing to roll out in place.
func initial(ro *argov1alpha1.Rollout, req request) bool {
	return req.Initial || ro.Annotations["rollout.argoproj.io/revision"] == "1"
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
	e, err := p.getEngine()
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
	p.mu.Lock()
	d := p.drivers[req.key]
	p.mu.Unlock()
	if d == nil || d.config != req.Canonical || d.op != o || !d.finished() {
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
	target := req.Spec.Target.String()
	if d.err != nil {
		return fmt.Sprintf("Rollout %s: %s of %s: %v", req.Rollout, d.op, target, d.err)
	}
	st := d.final
	switch {
	case d.op.kind == opAbort && (d.nothing || st.Phase == rollout.PhaseRolledBack):
		return ""
	case d.op.kind == opAbort:
		return fmt.Sprintf("Rollout %s: rolling back %s did not finish (%s): %s; a person must look at its pods", req.Rollout, target, st.Phase, st.Message)
	case st.Phase == rollout.PhaseSucceeded, d.op.kind == opHold && st.Phase == rollout.PhaseHolding:
		return ""
	case st.Phase == rollout.PhasePaused:
		return fmt.Sprintf("Rollout %s: %s of %s: %s; to accept the batch, promote the Rollout past this step (kubectl argo rollouts promote): its next higher weight goes on from here; to undo, abort the Rollout",
			req.Rollout, d.op, target, st.Message)
	case st.Phase == rollout.PhaseRolledBack:
		return fmt.Sprintf("Rollout %s: %s of %s failed and was rolled back (%s): %s; abort the Rollout, or put images that work in its template (a new revision)",
			req.Rollout, d.op, target, st.Reason, st.Message)
	}
	return fmt.Sprintf("Rollout %s: %s of %s stopped at %s (%s): %s", req.Rollout, d.op, target, st.Phase, st.Reason, st.Message)
}

// driverFor returns the driver of req for o. A driver of the same spec and op that still runs is
// kept; one that settled is kept while the target's lock is as it left it, which one GET
// confirms; otherwise a new driver replaces it (the old one ends its step first).
func (p *Plugin) driverFor(e *rollout.Engine, req request, o op) *driver {
	p.mu.Lock()
	old := p.drivers[req.key]
	same := old != nil && old.config == req.Canonical && old.op == o
	p.mu.Unlock()
	if same {
		if !old.finished() {
			return old
		}
		if old.lockErr == nil && !retryable(old.err) {
			lock, err := e.Lock(context.Background(), req.Spec.Target)
			if err == nil && sameLock(lock, old.lock) {
				return old
			}
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if cur := p.drivers[req.key]; cur != old {
		// Another call replaced it meanwhile.
		return cur
	}
	ctx, cancel := context.WithCancel(context.Background())
	d := &driver{config: req.Canonical, op: o, cancel: cancel, done: make(chan struct{})}
	p.drivers[req.key] = d
	go p.run(ctx, e, req, d, old)
	return d
}

// run is a driver's goroutine.
func (p *Plugin) run(ctx context.Context, e *rollout.Engine, req request, d, old *driver) {
	defer close(d.done)
	log := p.log.With("rollout", req.Rollout, "target", req.key.target)
	if old != nil {
		// One driver per rollout at a time: the old one ends its step and stops.
		old.cancel()
		<-old.done
	}
	onStatus := func(st rollout.Status) {
		d.mu.Lock()
		d.last = st
		d.mu.Unlock()
	}
	var (
		st      rollout.Status
		err     error
		nothing bool
	)
	switch d.op.kind {
	case opAbort:
		st, nothing, err = p.abort(ctx, e, req, onStatus, log)
	default:
		spec := req.Spec
		if d.op.kind == opHold {
			upTo := intstr.FromString(strconv.Itoa(int(d.op.weight)) + "%")
			spec.UpTo = &upTo
		}
		log.Info("driving", "op", d.op.String())
		if err = p.finishRollback(ctx, e, req, onStatus, log); err == nil {
			st, err = p.drive(ctx, e, spec, d, old, onStatus, log)
		}
	}
	if !errors.Is(err, context.Canceled) {
		log.Info("driver ended", "op", d.op.String(), "phase", st.Phase, "updated", st.Updated, "total", st.Total, "err", err)
	}
	var (
		lock    *workload.Lock
		lockErr error
	)
	if !retryable(err) {
		// The outcome stands while the lock stays as it is now.
		lock, lockErr = e.Lock(context.WithoutCancel(ctx), req.Spec.Target)
	}
	d.mu.Lock()
	d.final, d.err, d.nothing, d.lock, d.lockErr = st, err, nothing, lock, lockErr
	d.mu.Unlock()
}

// abort rolls back the Rollout's rollout in flight: one its holder runs, or one that succeeded
// to the images of this revision (Argo promoted nothing yet). A finished rollout of earlier
// images is not this revision's to undo, and no rollout at all leaves nothing to do.
func (p *Plugin) abort(ctx context.Context, e *rollout.Engine, req request, onStatus func(rollout.Status), log *slog.Logger) (rollout.Status, bool, error) {
	s := req.Spec
	lock, err := e.Lock(ctx, s.Target)
	if err != nil {
		return rollout.Status{}, false, err
	}
	if lock == nil || lock.Holder != s.Holder || !(lock.Active() || lock.Phase == workload.LockSucceeded && lock.SpecHash == s.Hash()) {
		return rollout.Status{}, true, nil
	}
	log.Info("rolling back", "rollout", lock.RolloutID)
	st, err := e.DriveAbort(ctx, rollbackOf(s), onStatus)
	return st, false, err
}

// rollbackOf is the rollback of spec's rollout, at its pace.
func rollbackOf(s rollout.Spec) rollout.RollbackSpec {
	return rollout.RollbackSpec{Target: s.Target, Holder: s.Holder, MaxUnavailable: s.MaxUnavailable, GracePeriod: s.GracePeriod, Timeout: s.Timeout}
}

// drive runs Drive for d. When the driver it replaces paused on an inconclusive analysis and d
// asks for more (a higher weight, or full promotion), a person promoted the Rollout past the
// step that paused, since Argo goes on from a setWeight step only once its weight is verified
// or promoted: that is the accept the pause waits for.
func (p *Plugin) drive(ctx context.Context, e *rollout.Engine, spec rollout.Spec, d, old *driver, onStatus func(rollout.Status), log *slog.Logger) (rollout.Status, error) {
	pause, paused := rollout.Pause{}, false
	if old != nil && old.config == d.config && old.err == nil && beyond(d.op, old.op) {
		pause, paused = rollout.PauseOf(old.final)
	}
	if paused {
		// Accept only the pause that is still there: a late accept must not accept another.
		lock, err := e.Lock(ctx, spec.Target)
		if err == nil && lock != nil && lock.Phase == workload.LockPaused && lock.RolloutID == pause.RolloutID {
			log.Info("accepting the paused batch: the Rollout was promoted past it", "rollout", pause.RolloutID, "batch", pause.Batch, "pods", pause.Pods)
			return e.AcceptAndDrive(ctx, spec, pause, onStatus)
		}
	}
	return e.Drive(ctx, spec, onStatus)
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

// finishRollback finishes a rollback of the Rollout's earlier images that was cut short (the
// abort's driver replaced, or the plugin process killed, before it ended): a rollout cannot
// supersede a rollback, and the aborted revision will not call again.
func (p *Plugin) finishRollback(ctx context.Context, e *rollout.Engine, req request, onStatus func(rollout.Status), log *slog.Logger) error {
	s := req.Spec
	lock, err := e.Lock(ctx, s.Target)
	if err != nil || lock == nil || lock.Holder != s.Holder || lock.Phase != workload.LockRollingBack || lock.SpecHash == s.Hash() {
		// Drive reports a lock it cannot read; a rollback of these very images is Drive's own.
		return nil
	}
	log.Info("finishing a rollback first", "rollout", lock.RolloutID)
	st, err := e.DriveAbort(ctx, rollbackOf(s), onStatus)
	if err != nil {
		return err
	}
	if st.Phase != rollout.PhaseRolledBack {
		return &rollout.BlockedError{Msg: fmt.Sprintf("rollout %s of other images was rolling back and did not finish (%s): %s; a person must look at its pods",
			lock.RolloutID, st.Phase, st.Message)}
	}
	return nil
}

// retryable reports whether a driver's error may pass by itself (the API server in trouble, the
// driver stopped): the next call starts a new driver rather than keep its verdict.
func retryable(err error) bool {
	if err == nil {
		return false
	}
	var (
		inv *rollout.InvalidError
		sup *rollout.SupersededError
		blk *rollout.BlockedError
		per *rollout.PermanentError
	)
	return !errors.As(err, &inv) && !errors.As(err, &sup) && !errors.As(err, &blk) && !errors.As(err, &per)
}

// sameLock reports whether two reads of a lock say the same.
func sameLock(a, b *workload.Lock) bool {
	if a == nil || b == nil {
		return a == b
	}
	ja, errA := json.Marshal(a)
	jb, errB := json.Marshal(b)
	return errA == nil && errB == nil && string(ja) == string(jb)
}

// SetHeaderRoute is refused: the pods are updated in place, so there is no second set of pods a
// header could route to.
func (p *Plugin) SetHeaderRoute(*argov1alpha1.Rollout, *argov1alpha1.SetHeaderRoute) types.RpcError {
	return types.RpcError{ErrorString: Name + " does not support header routes (setHeaderRoute): pods are updated in place, there is no second set of pods to route to"}
}

// SetMirrorRoute is refused, as SetHeaderRoute is.
func (p *Plugin) SetMirrorRoute(*argov1alpha1.Rollout, *argov1alpha1.SetMirrorRoute) types.RpcError {
	return types.RpcError{ErrorString: Name + " does not support mirror routes (setMirrorRoute): pods are updated in place, there is no second set of pods to route to"}
}

// RemoveManagedRoutes has nothing to remove: the plugin manages no routes.
func (p *Plugin) RemoveManagedRoutes(*argov1alpha1.Rollout) types.RpcError {
	return types.RpcError{}
}
