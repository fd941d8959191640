package main

import (
	"log/slog"

	"github.com/spf13/cobra"
	tektonclient "github.com/tektoncd/pipeline/pkg/client/clientset/versioned"
	"k8s.io/client-go/rest"

	"github.com/inplace-rollout/inplace-rollout/pkg/rollout"
	"github.com/inplace-rollout/inplace-rollout/tekton/customrun"
)

func newTektonControllerCommand() *cobra.Command {
	var f controllerFlags
	cmd := &cobra.Command{
		Use:   "tekton-controller",
		Short: "Run the Tekton custom task: reconcile CustomRuns of kind InPlaceRollout",
		Long: `tekton-controller runs until stopped. It reconciles tekton.dev/v1beta1 CustomRuns
whose customRef or customSpec is inplace-rollout.io/v1alpha1 InPlaceRollout: each run rolls
its workload out in place, batch by batch, gated on analysis, in the run's namespace, and
no pod is created for it. The run's status shows the progress (extraFields), and on success
the results phase, updated-pods, rolled-back and message. A run that is cancelled (its
PipelineRun cancelled or timed out) or outlives its own timeout is rolled back first, then
fails with reason CustomRunCancelled or CustomRunTimedOut. A rollout that rolls back is
tried again while the run has retries left, each attempt from the rolled-back workload.
A run deleted in flight rolls back before it goes (a finalizer holds it); the rollout of a
run gone without it (its finalizer removed, or force-deleted) is found by a scan, at start,
every few minutes and soon after a run is deleted, and rolled back.
A wrong spec or param fails the run naming the field, with nothing changed. Analysis
credentials come only from Secrets in the run's namespace, never from files.

With --leader-elect (the default) replicas share one Lease and only its holder reconciles;
the others keep their cache warm and take over when it stops.

Exit codes: 0 stopped by SIGTERM or Ctrl-C, 1 lost its Lease or could not list CustomRuns,
2 bad input.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runTektonController(cmd, f)
		},
	}
	f.register(cmd.Flags(), "CustomRuns", "inplace-rollout-tekton-controller", customrun.DefaultWorkers)
	return cmd
}

func runTektonController(cmd *cobra.Command, f controllerFlags) error {
	if err := f.check(); err != nil {
		return err
	}
	cfg, err := f.config()
	if err != nil {
		return err
	}
	c, err := newTektonClients(cfg, f.qps, f.burst)
	if err != nil {
		return err
	}
	return serveController(cmd, f, c.controllerClients, tektonComponent, "CustomRuns not listed yet", func(engine *rollout.Engine, log *slog.Logger) watchingReconciler {
		return customrun.New(c.tekton, engine, customrun.DynamicSpecs{Client: c.dyn}, customrun.Options{Namespace: f.namespace, Workers: f.workers, Log: log})
	})
}

// tektonClients are the controller's clients (controllerClients) and a Tekton client that shares
// their rate limit.
type tektonClients struct {
	*controllerClients
	tekton tektonclient.Interface
}

func newTektonClients(cfg *rest.Config, qps float32, burst int) (*tektonClients, error) {
	c, err := newControllerClients(cfg, tektonComponent, qps, burst)
	if err != nil {
		return nil, err
	}
	t := &tektonClients{controllerClients: c}
	if t.tekton, err = tektonclient.NewForConfig(c.shared); err != nil {
		return nil, badInput("building a Tekton client for %s: %v", cfg.Host, err)
	}
	return t, nil
}
