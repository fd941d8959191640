package main

import (
	"context"
	"log/slog"
	"sync"

	"github.com/spf13/cobra"

	"github.com/inplace-rollout/inplace-rollout/controller/inplacerollout"
	"github.com/inplace-rollout/inplace-rollout/controller/policy"
	"github.com/inplace-rollout/inplace-rollout/pkg/rollout"
)

const controllerComponent = "controller"

func newControllerCommand() *cobra.Command {
	var f controllerFlags
	cmd := &cobra.Command{
		Use:   "controller",
		Short: "Run the InPlaceRollout controller: roll out InPlaceRollout objects and workloads under a policy, for GitOps",
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

It also rolls out, in place, the template of each StatefulSet and DaemonSet whose manifest
says updateStrategy OnDelete and names an InPlaceRolloutPolicy of its namespace:

  metadata:
    annotations:
      inplace-rollout.io/policy: canary   # an InPlaceRolloutPolicy: batches, analysis, pace

whenever its pods run an older revision of the template than the one applied (by a GitOps
tool, from Git): the pods get the template's images, revision labels, and the labels and
annotations it changed, batch by batch, gated on the policy's analysis, and go back when a
batch fails. The workload's spec is never written, so the GitOps tool sees no drift. A
revision that rolled back is not tried again until the template changes; a revision that
changes any other field (env, command, volumes, probes) is said not to be in place, in the
policy's status, and nothing is changed.

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
	return serveController(cmd, f, c, controllerComponent, "InPlaceRollout objects, policies and their workloads not listed yet", func(engine *rollout.Engine, log *slog.Logger) watchingReconciler {
		return controllers{
			inplacerollout.New(c.dyn, engine, inplacerollout.Options{Namespace: f.namespace, Workers: f.workers, Log: log}),
			policy.New(c.kube, c.dyn, engine, policy.Options{Namespace: f.namespace, Workers: f.workers, Log: log}),
		}
	})
}

// controllers run as one: listed once each has listed its objects, reconciling all of them.
type controllers []watchingReconciler

func (cs controllers) Watch(ctx context.Context) error {
	for _, c := range cs {
		if err := c.Watch(ctx); err != nil {
			return err
		}
	}
	return nil
}

func (cs controllers) Reconcile(ctx context.Context) {
	var wg sync.WaitGroup
	for _, c := range cs {
		wg.Go(func() { c.Reconcile(ctx) })
	}
	wg.Wait()
}

func (cs controllers) Synced() bool {
	for _, c := range cs {
		if !c.Synced() {
			return false
		}
	}
	return true
}
