// Package step is the Argo Rollouts step plugin inplace-rollout/step: an adapter from Argo's
// step plugin RPC (Run, Abort, Terminate) to pkg/rollout's Engine.
//
// Argo calls have no timeout and hold a controller worker, so Run never waits for the rollout:
// a driver goroutine per rollout runs Driver.Drive at the engine's pace, and Run starts or finds
// it and reports where it is. The drivers are a cache: the engine reads every fact from the
// cluster, so a new plugin process picks up where the last one was. Argo calls Abort once, and
// nothing for a Rollout that was deleted, so a scan (when the plugin starts, every minute and on
// every Rollout deletion) finishes the rollbacks cut short (the process killed mid-Abort) and
// rolls back the rollouts of Rollouts that no longer exist.
package step

import (
	"context"
	"log/slog"
	"sync"
	"time"

	argoclientset "github.com/argoproj/argo-rollouts/pkg/client/clientset/versioned"
	argorpc "github.com/argoproj/argo-rollouts/rollout/steps/plugin/rpc"
	"github.com/argoproj/argo-rollouts/utils/plugin/types"
	goplugin "github.com/hashicorp/go-plugin"

	"github.com/inplace-rollout/inplace-rollout/pkg/rollout"
	"github.com/inplace-rollout/inplace-rollout/plugin/internal/drivers"
)

// Name is the plugin's type, as Type reports it.
const Name = "inplace-rollout/step"

// Defaults of Options.
const (
	// DefaultScanInterval is how often the plugin looks for rollbacks cut short and rollouts of
	// deleted Rollouts.
	DefaultScanInterval = time.Minute
	// DefaultTerminateWait bounds how long Terminate waits for the promotion: Argo's call holds
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
	Driver *rollout.Driver
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
	// TerminateWait bounds how long Terminate waits for the promotion; 0 means
	// DefaultTerminateWait.
	TerminateWait time.Duration
}

// Plugin implements Argo's rpc.StepPlugin on top of rollout.Engine. Argo serves every Rollout
// from one plugin process, and its RPC server runs each call in its own goroutine: every method
// is safe for concurrent use.
type Plugin struct {
	clients *drivers.Lazy[Clients]
	opts    Options
	log     *slog.Logger
	// ctx ends with Close, and the scan with it.
	ctx     context.Context
	cancel  context.CancelFunc
	drivers drivers.Registry[job]

	mu       sync.Mutex
	scanDone chan struct{} // closed when the scan loop ended; nil until it starts
	// deleted is told when a Rollout is deleted, so that the scan rolls back its rollout at once
	// rather than at the next tick.
	deleted chan struct{}
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
	p := &Plugin{opts: opts, log: log, ctx: ctx, cancel: cancel, deleted: make(chan struct{}, 1)}
	p.clients = drivers.NewLazy(Name, newClients, p.startScan)
	return p
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

// InitPlugin makes the clients and starts the scan. A failure is reported, and every later
// call tries again.
func (p *Plugin) InitPlugin() types.RpcError {
	if _, err := p.clients.Get(); err != nil {
		return types.RpcError{ErrorString: err.Error()}
	}
	return types.RpcError{}
}

// Type names the plugin.
func (p *Plugin) Type() string { return Name }

// startScan starts the scan once the clients are made, unless the plugin was closed.
func (p *Plugin) startScan(c Clients) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if c.Rollouts != nil && p.ctx.Err() == nil {
		p.scanDone = make(chan struct{})
		p.watchDeletions(c)
		go p.scanLoop(c)
	}
}
