package main

import (
	"log/slog"

	"github.com/spf13/cobra"

	"github.com/inplace-rollout/inplace-rollout/controller/inplacerollout"
	"github.com/inplace-rollout/inplace-rollout/pkg/rollout"
)

const controllerComponent = "controller"

func newControllerCommand() *cobra.Command {
	var f controllerFlags
	cmd := &cobra.Command{
		Use:   "controller",
		Short: "Run the InPlaceRollout controller: roll out InPlaceRollout objects, for GitOps",
		Long: `controller runs until stopped. It reconciles inplace-rollout.io/v1alpha1 InPlaceRollout
objects: each object rolls its target workload out in place, batch by batch, gated on
analysis, in the object's namespace, and its status says where the rollout is (phase,
reason, batch, updated/total, the last analysis verdict, observedGeneration, and the
conditions Progressing, Succeeded, RolledBack and Paused, with Reconciling, Stalled and
Ready for kstatus):

  kubectl apply -f rollout.yaml
  kubectl wait --for=condition=Succeeded inplacerollout/web --timeout=30m
  kubectl get inplacerollouts

A new spec replaces the rollout in flight. A rollout that rolled back is not tried again
until the spec changes. An object deleted in flight rolls its rollout back before it goes
(a finalizer holds it). Annotations act on a rollout:

  kubectl annotate inplacerollout/web inplace-rollout.io/accept-batch=2   # go on after an inconclusive batch 2
  kubectl annotate inplacerollout/web inplace-rollout.io/abort=true       # roll back, start nothing more

An object annotated inplace-rollout.io/template=true is a spec for Tekton CustomRuns and
is left alone. A wrong spec is said in the status (reason InvalidSpec), with nothing
changed. Analysis credentials come only from Secrets in the object's namespace, never
from files.

With --leader-elect (the default) replicas share one Lease and only its holder reconciles;
the others keep their cache warm and take over when it stops.

Exit codes: 0 stopped by SIGTERM or Ctrl-C, 1 lost its Lease or could not list
InPlaceRollout objects, 2 bad input.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runController(cmd, f)
		},
	}
	f.register(cmd.Flags(), "InPlaceRollout objects", "inplace-rollout-controller", inplacerollout.DefaultWorkers)
	return cmd
}

func runController(cmd *cobra.Command, f controllerFlags) error {
	if err := f.check(); err != nil {
		return err
	}
	cfg, err := f.config()
	if err != nil {
		return err
	}
	c, err := newControllerClients(cfg, controllerComponent, f.qps, f.burst)
	if err != nil {
		return err
	}
	return serveController(cmd, f, c, controllerComponent, "InPlaceRollout objects not listed yet", func(engine *rollout.Engine, log *slog.Logger) watchingReconciler {
		return inplacerollout.New(c.dyn, engine, inplacerollout.Options{Namespace: f.namespace, Workers: f.workers, Log: log})
	})
}
