// Package step is the Argo Rollouts step plugin inplace-rollout/step: an adapter from Argo's
// step plugin RPC (Run, Abort, Terminate) to pkg/rollout's Engine.
//
// Argo calls have no timeout and hold a controller worker, so Run never waits for the rollout:
// a driver goroutine per rollout runs Engine.Drive at the engine's pace, and Run starts or finds
// it and reports where it is. The drivers are a cache: the engine reads every fact from the
// cluster, so a new plugin process picks up where the last one was. Argo calls Abort once, so a
// rollback cut short (the process killed mid-Abort) is found by a scan of the Rollouts, when the
// plugin starts and every minute, and finished.
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
	argoclientset "github.com/argoproj/argo-rollouts/pkg/client/clientset/versioned"
	argorpc "github.com/argoproj/argo-rollouts/rollout/steps/plugin/rpc"
	"github.com/argoproj/argo-rollouts/utils/plugin/types"
	goplugin "github.com/hashicorp/go-plugin"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/inplace-rollout/inplace-rollout/analysis"
	"github.com/inplace-rollout/inplace-rollout/pkg/rollout"
	"github.com/inplace-rollout/inplace-rollout/pkg/workload"
	"github.com/inplace-rollout/inplace-rollout/plugin/argospec"
)

// Name is the plugin's type, as Type reports it.
const Name = "inplace-rollout/step"

// Defaults of Options.
const (
	// DefaultScanInterval is how often the plugin looks for rollbacks cut short.
	DefaultScanInterval = time.Minute
	// DefaultTerminateWait bounds how long Terminate waits for the release: Argo's call holds
	// a controller worker.
	DefaultTerminateWait = 5 * time.Second
)

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

// Clients are what the plugin works with.
type Clients struct {
	Engine *rollout.Engine
	// Rollouts lists Argo Rollouts (all namespaces) for the scan; nil scans nothing.
	Rollouts argoclientset.Interface
}

// Options tune a Plugin; the zero value is ready to use.
type Options struct {
	// Log receives one line per event, naming the Rollout; nil discards.
	Log *slog.Logger
	// ScanInterval is how often the plugin looks for rollbacks cut short; 0 means
	// DefaultScanInterval.
	ScanInterval time.Duration
	// Ticks, when not nil, replaces the scan's ticker: a scan runs on each value received.
	Ticks <-chan time.Time
	// TerminateWait bounds how long Terminate waits for the release; 0 means
	// DefaultTerminateWait.
	TerminateWait time.Duration
}

// Plugin implements Argo's rpc.StepPlugin on top of rollout.Engine. Argo serves every Rollout
// from one plugin process, and its RPC server runs each call in its own goroutine: every method
// is safe for concurrent use.
type Plugin struct {
	newClients func() (Clients, error)
	opts       Options
	log        *slog.Logger
	// ctx ends with Close, and the scan with it.
	ctx    context.Context
	cancel context.CancelFunc

	mu       sync.Mutex
	clients  *Clients
	drivers  map[driverKey]*driver
	scanDone chan struct{} // closed when the scan loop ended; nil until it starts
	// afterScan, when not nil, is told after each scan how many rollbacks it started.
	afterScan func(started int)
}

var _ argorpc.StepPlugin = (*Plugin)(nil)

// New returns a plugin whose clients newClients makes on the first call that needs them, and
// again after a failure: Argo never calls InitPlugin twice, so a failed start must not be final.
// Once they are made, the scan for rollbacks cut short starts, and runs until Close or the end
// of the process.
func New(newClients func() (Clients, error), opts Options) *Plugin {
	log := opts.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Plugin{newClients: newClients, opts: opts, log: log, ctx: ctx, cancel: cancel, drivers: map[driverKey]*driver{}}
}

// Close stops the scan and waits for it to end. Drivers go on: they end with the process.
func (p *Plugin) Close() {
	p.cancel()
	p.mu.Lock()
	done := p.scanDone
	p.mu.Unlock()
	if done != nil {
		<-done
	}
}

// driverKey names one rollout: its holder (the Argo Rollout) and its target. Two Rollouts on one
// workload get two drivers, and the engine's lock lets one of them through.
type driverKey struct {
	holder, target string
}

// driverKind is what a driver does.
type driverKind string

const (
	driveRollout  driverKind = "rollout"
	driveRollback driverKind = "rollback"
	driveRelease  driverKind = "release"
)

// driver is one goroutine driving a target for a holder: its rollout, its rollback or its
// release. One at a time per key: a new one stops the old one first.
type driver struct {
	kind driverKind
	// config is the step config a rollout driver drives, canonical: another config needs
	// another driver.
	config string
	cancel context.CancelFunc
	done   chan struct{}

	mu   sync.Mutex
	last rollout.Status
	// lastAnalysis is the last batch analysis seen, kept for the step's verdict.
	lastAnalysis *analysis.Run
	// final and err are set once done is closed.
	final rollout.Status
	err   error
}

// record keeps a status of the driver's loop, with the last analysis seen when it has none.
func (d *driver) record(st rollout.Status) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.last = d.withAnalysis(st)
}

func (d *driver) withAnalysis(st rollout.Status) rollout.Status {
	if st.Analysis == nil {
		st.Analysis = d.lastAnalysis
	} else {
		d.lastAnalysis = st.Analysis
	}
	return st
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

// InitPlugin makes the clients and starts the scan. A failure is reported, and every later
// call tries again.
func (p *Plugin) InitPlugin() types.RpcError {
	if _, err := p.getClients(); err != nil {
		return types.RpcError{ErrorString: err.Error()}
	}
	return types.RpcError{}
}

// Type names the plugin.
func (p *Plugin) Type() string { return Name }

func (p *Plugin) getClients() (Clients, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.clients != nil {
		return *p.clients, nil
	}
	c, err := p.newClients()
	if err != nil {
		return Clients{}, fmt.Errorf("starting the %s plugin: %w", Name, err)
	}
	p.clients = &c
	if c.Rollouts != nil && p.ctx.Err() == nil {
		p.scanDone = make(chan struct{})
		go p.scanLoop(c)
	}
	return c, nil
}

// StepStatus is what Run keeps in the step's status on the Rollout: a few counts and the last
// verdict, the same size whatever the number of pods.
type StepStatus struct {
	RolloutID string         `json:"rolloutID,omitempty"`
	Phase     rollout.Phase  `json:"phase,omitempty"`
	Batch     int            `json:"batch"`
	Batches   int            `json:"batches"`
	Updated   int            `json:"updated"`
	Total     int            `json:"total"`
	Reason    rollout.Reason `json:"reason,omitempty"`
	Verdict   *Verdict       `json:"verdict,omitempty"`
}

// Verdict is the last batch analysis, in Argo's words: Successful, Failed, Inconclusive, Error,
// or Running while it measures.
type Verdict struct {
	Batch int    `json:"batch"`
	Phase string `json:"phase"`
}

// verdictOf is the verdict of run, or nil.
func verdictOf(run *analysis.Run) *Verdict {
	if run == nil {
		return nil
	}
	v := &Verdict{Batch: run.Batch, Phase: string(run.Verdict)}
	switch run.Verdict {
	case "":
		v.Phase = "Running"
	case analysis.Pass:
		v.Phase = "Successful"
	case analysis.Fail:
		v.Phase = "Failed"
	}
	return v
}

func stepStatus(st rollout.Status) json.RawMessage {
	b, err := json.Marshal(StepStatus{RolloutID: st.RolloutID, Phase: st.Phase, Batch: st.Batch, Batches: st.Batches,
		Updated: st.Updated, Total: st.Total, Reason: st.Reason, Verdict: verdictOf(st.Analysis)})
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
	return decodeAt(ro, raw, configField)
}

// decodeAt reads the config raw found at field of the Rollout ro. A step's rollout supersedes
// the Rollout's rollout in flight: Argo restarts the steps on a template change with no Abort,
// and the newest images win.
func decodeAt(ro *argov1alpha1.Rollout, raw json.RawMessage, field string) (request, error) {
	r, err := argospec.Decode(ro, raw, field)
	if err != nil {
		return request{Request: r}, err
	}
	r.Spec.Supersede = true
	return request{Request: r, key: driverKey{holder: r.Holder, target: r.Spec.Target.String()}}, nil
}

// rollbackSpec is the rollback of req's rollout, at its pace.
func (r request) rollbackSpec() rollout.RollbackSpec {
	s := r.Spec
	return rollout.RollbackSpec{Target: s.Target, Holder: s.Holder, MaxUnavailable: s.MaxUnavailable, GracePeriod: s.GracePeriod, Timeout: s.Timeout}
}

// Run starts the rollout of the step's config, or finds its driver, and reports at once where it
// is: Running while it moves, Successful once it succeeded or holds at its upTo, Failed when it
// rolled back, failed or its config is wrong. Trouble that may pass is an RpcError, which Argo
// retries; never Phase Error, which would wedge the step. While the target's rollback or release
// is under way, Run waits for it (Running) rather than stop it.
func (p *Plugin) Run(ro *argov1alpha1.Rollout, c *types.RpcStepContext) (types.RpcStepResult, types.RpcError) {
	req, err := decode(ro, c)
	if err != nil {
		return types.RpcStepResult{Phase: types.PhaseFailed, Message: err.Error()}, types.RpcError{}
	}
	if req.Initial {
		return types.RpcStepResult{Phase: types.PhaseSuccessful,
			Message: "the Rollout's first revision: there is nothing to roll out in place"}, types.RpcError{}
	}
	cl, err := p.getClients()
	if err != nil {
		return types.RpcStepResult{}, types.RpcError{ErrorString: err.Error()}
	}
	// A step started afresh (Argo resets the step status on a new revision and on a retry)
	// re-observes the cluster rather than trusting a finished driver's verdict.
	fresh := c == nil || len(c.Status) == 0 || string(c.Status) == "null"
	d := p.driverFor(cl.Engine, req, fresh)
	if d.kind != driveRollout {
		st := d.status()
		return types.RpcStepResult{Phase: types.PhaseRunning, RequeueAfter: RequeueAfter, Status: stepStatus(st),
			Message: fmt.Sprintf("waiting for the %s of %s to end first: %s", d.kind, req.key.target, runningMessage(st))}, types.RpcError{}
	}
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

// startLocked starts a driver for key that runs run, in place of the key's driver, which it
// stops first (its step ends). p.mu must be held.
func (p *Plugin) startLocked(key driverKey, kind driverKind, config, rolloutName string,
	run func(ctx context.Context, d *driver) (rollout.Status, error)) *driver {
	old := p.drivers[key]
	ctx, cancel := context.WithCancel(context.Background())
	d := &driver{kind: kind, config: config, cancel: cancel, done: make(chan struct{})}
	p.drivers[key] = d
	log := p.log.With("rollout", rolloutName, "target", key.target)
	go func() {
		defer close(d.done)
		if old != nil {
			old.cancel()
			<-old.done
		}
		log.Info("driving", "for", string(kind))
		st, err := run(ctx, d)
		d.mu.Lock()
		d.final, d.err = d.withAnalysis(st), err
		d.mu.Unlock()
		log.Info("driver ended", "for", string(kind), "phase", st.Phase, "err", err)
	}()
	return d
}

// driverFor returns the driver of req, starting one when there is none, when it drives another
// config (the old one stops first), or when it finished and the step starts afresh. A rollback
// or release under way is returned as it is: it ends first.
func (p *Plugin) driverFor(e *rollout.Engine, req request, fresh bool) *driver {
	p.mu.Lock()
	defer p.mu.Unlock()
	old := p.drivers[req.key]
	switch {
	case old != nil && old.kind != driveRollout && !old.finished():
		return old
	case old != nil && old.kind == driveRollout && old.config == req.Canonical && !(fresh && old.finished()):
		return old
	}
	return p.startLocked(req.key, driveRollout, req.Canonical, req.Rollout, func(ctx context.Context, d *driver) (rollout.Status, error) {
		return e.Drive(ctx, req.Spec, d.record)
	})
}

// rollbackFor returns the driver rolling back req's target, starting one (in place of any other
// driver of the key) unless one is under way.
func (p *Plugin) rollbackFor(e *rollout.Engine, req request) *driver {
	p.mu.Lock()
	defer p.mu.Unlock()
	if old := p.drivers[req.key]; old != nil && old.kind == driveRollback && !old.finished() {
		return old
	}
	rb := req.rollbackSpec()
	return p.startLocked(req.key, driveRollback, "", req.Rollout, func(ctx context.Context, d *driver) (rollout.Status, error) {
		return e.DriveAbort(ctx, rb, d.record)
	})
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
// the reason otherwise. A rollback of the target already under way (the scan's) is joined.
func (p *Plugin) Abort(ro *argov1alpha1.Rollout, c *types.RpcStepContext) (types.RpcStepResult, types.RpcError) {
	req, err := decode(ro, c)
	if err != nil {
		// A config that never decoded never started a rollout: nothing to undo.
		return types.RpcStepResult{Phase: types.PhaseSuccessful, Message: "nothing to roll back: " + err.Error()}, types.RpcError{}
	}
	if req.Initial {
		return types.RpcStepResult{Phase: types.PhaseSuccessful, Message: "the Rollout's first revision: nothing to roll back"}, types.RpcError{}
	}
	cl, err := p.getClients()
	if err != nil {
		return types.RpcStepResult{Phase: types.PhaseFailed, Message: err.Error()}, types.RpcError{}
	}
	d := p.rollbackFor(cl.Engine, req)
	<-d.done
	st, err := d.final, d.err
	target := req.Spec.Target
	if err != nil {
		return types.RpcStepResult{Phase: types.PhaseFailed, Message: fmt.Sprintf("Rollout %s: rolling back %s: %v", req.Rollout, target, err)}, types.RpcError{}
	}
	if st.Phase != rollout.PhaseRolledBack {
		return types.RpcStepResult{Phase: types.PhaseFailed, Message: fmt.Sprintf("Rollout %s: rolling back %s: %s", req.Rollout, target, outcomeMessage(st))}, types.RpcError{}
	}
	return types.RpcStepResult{Phase: types.PhaseSuccessful, Message: outcomeMessage(st)}, types.RpcError{}
}

// Terminate stops the step's rollout where it is and releases the target (Argo calls it on full
// promotion): pods mid-update finish, no other pod starts, and the workload is handed back with
// its update strategy, its template and its pods as they are (rollout.Engine.Release). It waits
// for that at most TerminateWait, then reports Successful with what remains under way, or Failed
// with the reason; a rollback under way goes on.
func (p *Plugin) Terminate(ro *argov1alpha1.Rollout, c *types.RpcStepContext) (types.RpcStepResult, types.RpcError) {
	req, err := decode(ro, c)
	if err != nil || req.Initial {
		return types.RpcStepResult{Phase: types.PhaseSuccessful, Message: "nothing to stop"}, types.RpcError{}
	}
	cl, err := p.getClients()
	if err != nil {
		return types.RpcStepResult{Phase: types.PhaseFailed, Message: err.Error()}, types.RpcError{}
	}
	d := p.releaseFor(cl.Engine, req)
	if d.kind == driveRollback {
		return types.RpcStepResult{Phase: types.PhaseFailed, Message: fmt.Sprintf("Rollout %s: %s is rolling back; the rollback goes on, and %s is handed back when it ends",
			req.Rollout, req.key.target, req.key.target)}, types.RpcError{}
	}
	wait := p.opts.TerminateWait
	if wait <= 0 {
		wait = DefaultTerminateWait
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-d.done:
	case <-t.C:
		st := d.status()
		return types.RpcStepResult{Phase: types.PhaseSuccessful, Message: fmt.Sprintf("stopped: %d pods of %s finish their update, no other starts, and then %s is handed back as it is",
			st.Updating, req.key.target, req.key.target)}, types.RpcError{}
	}
	if d.err != nil {
		return types.RpcStepResult{Phase: types.PhaseFailed, Message: fmt.Sprintf("Rollout %s: releasing %s: %v", req.Rollout, req.key.target, d.err)}, types.RpcError{}
	}
	if d.final.Phase == rollout.PhaseProgressing {
		return types.RpcStepResult{Phase: types.PhaseFailed, Message: fmt.Sprintf("Rollout %s: %s is not released: %s", req.Rollout, req.key.target, d.final.Message)}, types.RpcError{}
	}
	return types.RpcStepResult{Phase: types.PhaseSuccessful, Message: d.final.Message}, types.RpcError{}
}

// releaseFor starts the release of req's target in place of its rollout's driver, or returns the
// rollback under way, which goes on.
func (p *Plugin) releaseFor(e *rollout.Engine, req request) *driver {
	p.mu.Lock()
	defer p.mu.Unlock()
	if old := p.drivers[req.key]; old != nil && old.kind != driveRollout && !old.finished() {
		return old
	}
	target, holder := req.Spec.Target, req.Holder
	return p.startLocked(req.key, driveRelease, "", req.Rollout, func(ctx context.Context, d *driver) (rollout.Status, error) {
		st, err := e.Release(ctx, target, holder)
		if err != nil || st.Phase != rollout.PhaseProgressing {
			return st, err
		}
		// Pods are mid-update: they finish under a hold point of 1, which starts no other pod,
		// with no soak or analysis to wait for; then the release goes through.
		d.record(st)
		wind := req.Spec
		one := intstr.FromInt32(1)
		wind.UpTo, wind.Analysis, wind.Soak, wind.Supersede = &one, nil, 0, false
		if st, err := e.Drive(ctx, wind, d.record); err != nil {
			return st, err
		}
		return e.Release(ctx, target, holder)
	})
}

// scanLoop scans at once, then on every tick, until Close.
func (p *Plugin) scanLoop(c Clients) {
	defer close(p.scanDone)
	ticks := p.opts.Ticks
	if ticks == nil {
		every := p.opts.ScanInterval
		if every <= 0 {
			every = DefaultScanInterval
		}
		t := time.NewTicker(every)
		defer t.Stop()
		ticks = t.C
	}
	for {
		n := p.scan(p.ctx, c)
		if p.afterScan != nil {
			p.afterScan(n)
		}
		select {
		case <-p.ctx.Done():
			return
		case <-ticks:
		}
	}
}

// configAt is a config of ours in a Rollout, and where it is.
type configAt struct {
	field string
	raw   json.RawMessage
}

// ourConfigs are the Rollout's step configs of this plugin. The traffic router's are not: Argo
// calls the router on every reconcile of the Rollout, aborted or not, and the router finishes its
// own rollbacks from there; this process finishing them too would run two rollbacks of one
// target at once, from two processes.
func ourConfigs(ro *argov1alpha1.Rollout) []configAt {
	canary := ro.Spec.Strategy.Canary
	if canary == nil {
		return nil
	}
	var out []configAt
	for i, s := range canary.Steps {
		if s.Plugin != nil && s.Plugin.Name == Name {
			out = append(out, configAt{fmt.Sprintf("steps[%d].plugin.config", i), s.Plugin.Config})
		}
	}
	return out
}

// scan finds the Rollouts with our steps whose target's lock is rolling back for that Rollout,
// and finishes each rollback in a driver, unless a driver of that target is under way: it drives
// the rollback itself. It returns how many rollbacks it started.
func (p *Plugin) scan(ctx context.Context, c Clients) int {
	list, err := c.Rollouts.ArgoprojV1alpha1().Rollouts(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
	if err != nil {
		if ctx.Err() == nil {
			p.log.Warn("listing Rollouts to find rollbacks cut short", "err", err)
		}
		return 0
	}
	seen := map[driverKey]bool{}
	started := 0
	for i := range list.Items {
		ro := &list.Items[i]
		for _, cfg := range ourConfigs(ro) {
			req, err := decodeAt(ro, cfg.raw, cfg.field)
			if err != nil || seen[req.key] {
				// A config that does not decode never started a rollout: Run reports it.
				continue
			}
			seen[req.key] = true
			log := p.log.With("rollout", req.Rollout, "target", req.key.target)
			lock, err := c.Engine.Lock(ctx, req.Spec.Target)
			if err != nil {
				if ctx.Err() == nil {
					log.Warn("reading the rollout lock to find a rollback cut short", "err", err)
				}
				continue
			}
			if lock == nil || lock.Holder != req.Holder || lock.Phase != workload.LockRollingBack {
				continue
			}
			if p.finishRollback(c.Engine, req) {
				log.Info("finishing a rollback cut short", "rolloutID", lock.RolloutID, "reason", lock.Reason)
				started++
			}
		}
	}
	return started
}

// finishRollback starts a rollback driver for req unless a driver of its target is under way,
// and says whether it started one.
func (p *Plugin) finishRollback(e *rollout.Engine, req request) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if d := p.drivers[req.key]; d != nil && !d.finished() {
		return false
	}
	rb := req.rollbackSpec()
	p.startLocked(req.key, driveRollback, "", req.Rollout, func(ctx context.Context, d *driver) (rollout.Status, error) {
		return e.DriveAbort(ctx, rb, d.record)
	})
	return true
}
