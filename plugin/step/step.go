// Package step is the Argo Rollouts step plugin inplace-rollout/step: an adapter from Argo's
// step plugin RPC (Run, Abort, Terminate) to pkg/rollout's Engine.
//
// Argo calls have no timeout and hold a controller worker, so Run never waits for the rollout:
// a driver goroutine per rollout runs Engine.Drive at the engine's pace, and Run starts or finds
// it and reports where it is. The drivers are a cache: the engine reads every fact from the
// cluster, so a new plugin process picks up where the last one was.
package step

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	argov1alpha1 "github.com/argoproj/argo-rollouts/pkg/apis/rollouts/v1alpha1"
	argorpc "github.com/argoproj/argo-rollouts/rollout/steps/plugin/rpc"
	"github.com/argoproj/argo-rollouts/utils/plugin/types"
	goplugin "github.com/hashicorp/go-plugin"

	"github.com/inplace-rollout/inplace-rollout/pkg/rollout"
	"github.com/inplace-rollout/inplace-rollout/plugin/argospec"
)

// Name is the plugin's type, as Type reports it.
const Name = "inplace-rollout/step"

// RequeueAfter is how soon Argo calls Run again while the rollout moves. Argo turns anything of
// 10s or less into 30s, so it is just above.
const RequeueAfter = 11 * time.Second

// Handshake is Argo Rollouts' handshake for step plugins.
var Handshake = goplugin.HandshakeConfig{
	ProtocolVersion:  1,
	MagicCookieKey:   "ARGO_ROLLOUTS_RPC_PLUGIN",
	MagicCookieValue: "step",
}

// PluginMap is what Argo dispenses from a step plugin process.
func PluginMap(p *Plugin) map[string]goplugin.Plugin {
	return map[string]goplugin.Plugin{"RpcStepPlugin": &argorpc.RpcStepPlugin{Impl: p}}
}

// Serve serves p over go-plugin until Argo closes the connection. Nothing else may write to
// stdout meanwhile: it carries go-plugin's handshake.
func Serve(p *Plugin) {
	goplugin.Serve(&goplugin.ServeConfig{HandshakeConfig: Handshake, Plugins: PluginMap(p)})
}

// Plugin implements Argo's rpc.StepPlugin on top of rollout.Engine. Argo serves every Rollout
// from one plugin process, and its RPC server runs each call in its own goroutine: every method
// is safe for concurrent use.
type Plugin struct {
	newEngine func() (*rollout.Engine, error)
	log       *slog.Logger

	mu      sync.Mutex
	engine  *rollout.Engine
	drivers map[driverKey]*driver
}

var _ argorpc.StepPlugin = (*Plugin)(nil)

// New returns a plugin whose engine newEngine makes on the first call that needs it, and again
// after a failure: Argo never calls InitPlugin twice, so a failed start must not be final. log
// nil discards.
func New(newEngine func() (*rollout.Engine, error), log *slog.Logger) *Plugin {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Plugin{newEngine: newEngine, log: log, drivers: map[driverKey]*driver{}}
}

// driverKey names one rollout: its holder (the Argo Rollout) and its target. Two Rollouts on one
// workload get two drivers, and the engine's lock lets one of them through.
type driverKey struct {
	holder, target string
}

// driver is one goroutine running Engine.Drive for a spec.
type driver struct {
	// config is the step config it drives, canonical: another config needs another driver.
	config string
	cancel context.CancelFunc
	done   chan struct{}

	mu   sync.Mutex
	last rollout.Status
	// final and err are set once done is closed.
	final rollout.Status
	err   error
}

func (d *driver) status() rollout.Status {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.last
}

func (d *driver) finished() bool {
	select {
	case <-d.done:
		return true
	default:
		return false
	}
}

// InitPlugin makes the engine. A failure is reported, and Run tries again.
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

// StepStatus is what Run keeps in the step's status on the Rollout: a few counts, the same size
// whatever the number of pods.
type StepStatus struct {
	RolloutID string         `json:"rolloutID,omitempty"`
	Phase     rollout.Phase  `json:"phase,omitempty"`
	Batch     int            `json:"batch"`
	Batches   int            `json:"batches"`
	Updated   int            `json:"updated"`
	Total     int            `json:"total"`
	Reason    rollout.Reason `json:"reason,omitempty"`
}

func stepStatus(st rollout.Status) json.RawMessage {
	b, err := json.Marshal(StepStatus{RolloutID: st.RolloutID, Phase: st.Phase, Batch: st.Batch, Batches: st.Batches,
		Updated: st.Updated, Total: st.Total, Reason: st.Reason})
	if err != nil {
		// A struct of strings and ints always marshals.
		panic(err)
	}
	return b
}

// request is a decoded call: the Rollout's step config as the engine's spec, and the driver
// that runs it.
type request struct {
	argospec.Request
	key driverKey
}

// configField is where a step's config is, for messages.
const configField = "steps[].plugin.config"

// decode reads the call's Rollout and step config. Its error is bad input, named by field, and
// nothing is written for it.
func decode(ro *argov1alpha1.Rollout, c *types.RpcStepContext) (request, error) {
	var raw json.RawMessage
	if c != nil {
		raw = c.Config
	}
	r, err := argospec.Decode(ro, raw, configField)
	if err != nil {
		return request{Request: r}, err
	}
	return request{Request: r, key: driverKey{holder: r.Holder, target: r.Spec.Target.String()}}, nil
}

// Run starts the rollout of the step's config, or finds its driver, and reports at once where it
// is: Running while it moves, Successful once it succeeded or holds at its upTo, Failed when it
// rolled back, failed or its config is wrong. Trouble that may pass is an RpcError, which Argo
// retries; never Phase Error, which would wedge the step.
func (p *Plugin) Run(ro *argov1alpha1.Rollout, c *types.RpcStepContext) (types.RpcStepResult, types.RpcError) {
	req, err := decode(ro, c)
	if err != nil {
		return types.RpcStepResult{Phase: types.PhaseFailed, Message: err.Error()}, types.RpcError{}
	}
	if req.Initial {
		return types.RpcStepResult{Phase: types.PhaseSuccessful,
			Message: "the Rollout's first revision: there is nothing to roll out in place"}, types.RpcError{}
	}
	e, err := p.getEngine()
	if err != nil {
		return types.RpcStepResult{}, types.RpcError{ErrorString: err.Error()}
	}
	// A step started afresh (Argo resets the step status on a new revision and on a retry)
	// re-observes the cluster rather than trusting a finished driver's verdict.
	fresh := c == nil || len(c.Status) == 0 || string(c.Status) == "null"
	d := p.driverFor(e, req, fresh)
	if !d.finished() {
		st := d.status()
		return types.RpcStepResult{Phase: types.PhaseRunning, RequeueAfter: RequeueAfter, Status: stepStatus(st),
			Message: runningMessage(st)}, types.RpcError{}
	}
	return p.verdict(req, d)
}

// verdict maps a finished driver's outcome to Argo's phases.
func (p *Plugin) verdict(req request, d *driver) (types.RpcStepResult, types.RpcError) {
	st, err := d.final, d.err
	if err != nil {
		if retryable(err) {
			// The next Run starts a new driver, which goes on from the cluster.
			p.forget(req.key, d)
			return types.RpcStepResult{}, types.RpcError{ErrorString: fmt.Sprintf("Rollout %s: %v", req.Rollout, err)}
		}
		return types.RpcStepResult{Phase: types.PhaseFailed, Status: stepStatus(st),
			Message: fmt.Sprintf("Rollout %s: %v", req.Rollout, err)}, types.RpcError{}
	}
	res := types.RpcStepResult{Status: stepStatus(st), Message: outcomeMessage(st)}
	switch st.Phase {
	case rollout.PhaseSucceeded, rollout.PhaseHolding:
		res.Phase = types.PhaseSuccessful
	case rollout.PhasePaused:
		// A person accepts the batch or aborts the Rollout; the next Run looks again.
		p.forget(req.key, d)
		res.Phase, res.RequeueAfter = types.PhaseRunning, RequeueAfter
	default:
		res.Phase = types.PhaseFailed
	}
	return res, types.RpcError{}
}

// retryable reports whether a driver's error may pass by itself: the API server in trouble, or
// the driver stopped for a newer one.
func retryable(err error) bool {
	var (
		unavailable *rollout.APIUnavailableError
		inv         *rollout.InvalidError
		sup         *rollout.SupersededError
		blk         *rollout.BlockedError
		per         *rollout.PermanentError
	)
	switch {
	case errors.As(err, &unavailable), errors.Is(err, context.Canceled):
		return true
	case errors.As(err, &inv), errors.As(err, &sup), errors.As(err, &blk), errors.As(err, &per):
		return false
	}
	return true
}

func runningMessage(st rollout.Status) string {
	if st.Phase == "" {
		return "starting"
	}
	return fmt.Sprintf("%s: batch %d of %d, %d of %d pods updated", st.Phase, st.Batch, st.Batches, st.Updated, st.Total)
}

func outcomeMessage(st rollout.Status) string {
	msg := fmt.Sprintf("%s: %d of %d pods updated", st.Phase, st.Updated, st.Total)
	if st.Reason != "" {
		msg += " (" + string(st.Reason) + ")"
	}
	if st.Message != "" {
		msg += ": " + st.Message
	}
	return msg
}

// driverFor returns the driver of req, starting one when there is none, when it drives another
// config (the old one stops first), or when it finished and the step starts afresh.
func (p *Plugin) driverFor(e *rollout.Engine, req request, fresh bool) *driver {
	p.mu.Lock()
	defer p.mu.Unlock()
	old := p.drivers[req.key]
	if old != nil && old.config == req.Canonical && !(fresh && old.finished()) {
		return old
	}
	ctx, cancel := context.WithCancel(context.Background())
	d := &driver{config: req.Canonical, cancel: cancel, done: make(chan struct{})}
	p.drivers[req.key] = d
	log := p.log.With("rollout", req.Rollout, "target", req.key.target)
	go func() {
		defer close(d.done)
		if old != nil {
			// One driver per rollout at a time: the old one ends its step and stops.
			old.cancel()
			<-old.done
		}
		log.Info("driving")
		st, err := e.Drive(ctx, req.Spec, func(st rollout.Status) {
			d.mu.Lock()
			d.last = st
			d.mu.Unlock()
		})
		d.mu.Lock()
		d.final, d.err = st, err
		d.mu.Unlock()
		log.Info("driver ended", "phase", st.Phase, "err", err)
	}()
	return d
}

// forget drops d from the registry, if it is still there.
func (p *Plugin) forget(key driverKey, d *driver) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.drivers[key] == d {
		delete(p.drivers, key)
	}
}

// stop stops the driver of key, if any, and waits for it to end its step.
func (p *Plugin) stop(key driverKey) {
	p.mu.Lock()
	d := p.drivers[key]
	delete(p.drivers, key)
	p.mu.Unlock()
	if d != nil {
		d.cancel()
		<-d.done
	}
}

// Abort rolls back every pod the step's rollout touched, within the call (Argo never calls
// Abort again, and turns a Running answer into Failed): Successful once rolled back, Failed with
// the reason otherwise.
func (p *Plugin) Abort(ro *argov1alpha1.Rollout, c *types.RpcStepContext) (types.RpcStepResult, types.RpcError) {
	req, err := decode(ro, c)
	if err != nil {
		// A config that never decoded never started a rollout: nothing to undo.
		return types.RpcStepResult{Phase: types.PhaseSuccessful, Message: "nothing to roll back: " + err.Error()}, types.RpcError{}
	}
	if req.Initial {
		return types.RpcStepResult{Phase: types.PhaseSuccessful, Message: "the Rollout's first revision: nothing to roll back"}, types.RpcError{}
	}
	e, err := p.getEngine()
	if err != nil {
		return types.RpcStepResult{Phase: types.PhaseFailed, Message: err.Error()}, types.RpcError{}
	}
	p.stop(req.key)
	s := req.Spec
	rb := rollout.RollbackSpec{Target: s.Target, Holder: s.Holder, MaxUnavailable: s.MaxUnavailable, GracePeriod: s.GracePeriod, Timeout: s.Timeout}
	st, err := e.DriveAbort(context.Background(), rb, nil)
	if err != nil {
		return types.RpcStepResult{Phase: types.PhaseFailed, Message: fmt.Sprintf("Rollout %s: rolling back %s: %v", req.Rollout, s.Target, err)}, types.RpcError{}
	}
	if st.Phase != rollout.PhaseRolledBack {
		return types.RpcStepResult{Phase: types.PhaseFailed, Message: fmt.Sprintf("Rollout %s: rolling back %s: %s", req.Rollout, s.Target, outcomeMessage(st))}, types.RpcError{}
	}
	return types.RpcStepResult{Phase: types.PhaseSuccessful, Message: outcomeMessage(st)}, types.RpcError{}
}

// Terminate stops the step's driver and leaves the pods as they are (Argo calls it on full
// promotion). The engine has no call that releases a rollout's lock, so the lock stays: the
// next rollout of the same holder supersedes it.
func (p *Plugin) Terminate(ro *argov1alpha1.Rollout, c *types.RpcStepContext) (types.RpcStepResult, types.RpcError) {
	req, err := decode(ro, c)
	if err != nil || req.Initial {
		return types.RpcStepResult{Phase: types.PhaseSuccessful, Message: "nothing to stop"}, types.RpcError{}
	}
	p.stop(req.key)
	return types.RpcStepResult{Phase: types.PhaseSuccessful, Message: fmt.Sprintf("stopped driving %s; its pods are left as they are", req.key.target)}, types.RpcError{}
}
