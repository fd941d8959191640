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
// for pods. A driver goroutine per Rollout and target runs Driver.Drive up to the weight (the
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
	"log/slog"
	"sync"

	argorpc "github.com/argoproj/argo-rollouts/rollout/trafficrouting/plugin/rpc"
	"github.com/argoproj/argo-rollouts/utils/plugin/types"
	goplugin "github.com/hashicorp/go-plugin"

	"github.com/inplace-rollout/inplace-rollout/pkg/rollout"
	"github.com/inplace-rollout/inplace-rollout/plugin/internal/drivers"
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
	engine  *drivers.Lazy[*rollout.Driver]
	log     *slog.Logger
	drivers drivers.Registry[*job]

	mu sync.Mutex
	// hashes are the last UpdateHash of each Rollout (NS/NAME), for its next SetWeight.
	hashes map[string]hashes
	// badConfig is the last config error of each Rollout, logged once rather than per call.
	badConfig map[string]string
}

var _ argorpc.TrafficRouterPlugin = (*Plugin)(nil)

// New returns a plugin whose engine newEngine makes on the first call that needs it, and again
// after a failure: Argo never calls InitPlugin twice, so a failed start must not be final. log
// nil discards.
func New(newEngine func() (*rollout.Driver, error), log *slog.Logger) *Plugin {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Plugin{engine: drivers.NewLazy(Name, newEngine, nil), log: log, hashes: map[string]hashes{}, badConfig: map[string]string{}}
}

// InitPlugin makes the engine. A failure is reported, and the next call tries again.
func (p *Plugin) InitPlugin() types.RpcError {
	if _, err := p.engine.Get(); err != nil {
		return types.RpcError{ErrorString: err.Error()}
	}
	return types.RpcError{}
}

// Type names the plugin.
func (p *Plugin) Type() string { return Name }
