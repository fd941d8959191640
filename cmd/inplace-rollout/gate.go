package main

import (
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/inplace-rollout/inplace-rollout/pkg/gate"
)

func newGateControllerCommand() *cobra.Command {
	var kubeconfig, namespace, selector, healthAddr string
	cmd := &cobra.Command{
		Use:   "gate-controller",
		Short: "Set the inplace-rollout.io/ready readiness gate on pods that are not being updated",
		Long: `gate-controller runs until stopped. It watches pods and sets the condition
inplace-rollout.io/ready True on every pod that declares it in spec.readinessGates,
has no such condition yet, and is not in the middle of an in-place update (no
inplace-rollout.io/state annotation, or one whose stage is Updated or RolledBack).
A pod whose template declares the gate is never Ready until something sets the
condition: without this controller such pods stay out of their Service, and an
OrderedReady StatefulSet never gets past pod 0. Once the condition exists the
rollout engine owns it (it drains a pod by setting it False); this controller
never changes a condition that is already there.

Exit codes: 0 stopped by SIGTERM or Ctrl-C, 1 not allowed to list pods, 2 bad input.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runGateController(cmd, kubeconfig, namespace, selector, healthAddr)
		},
	}
	cmd.Flags().StringVar(&kubeconfig, "kubeconfig", "", "path of the kubeconfig file (default: in-cluster config, else $KUBECONFIG or ~/.kube/config)")
	cmd.Flags().StringVarP(&namespace, "namespace", "n", "", "watch pods in this namespace only (default: all namespaces)")
	cmd.Flags().StringVarP(&selector, "selector", "l", "", "watch only pods matching this label selector (default: all pods)")
	cmd.Flags().StringVar(&healthAddr, "health-addr", "", "serve /healthz and /readyz (ready once pods are listed) on this address, e.g. :8081 (default: off)")
	return cmd
}

func runGateController(cmd *cobra.Command, kubeconfig, namespace, selector, healthAddr string) error {
	if _, err := labels.Parse(selector); err != nil {
		return badInput("--selector %q is not a label selector: %v", selector, err)
	}
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = kubeconfig
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return badInput("loading kubeconfig (pass --kubeconfig, set $KUBECONFIG, or run in a pod): %v", err)
	}
	cfg.UserAgent = "inplace-rollout-gate-controller/" + version
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return badInput("building a client for %s: %v", cfg.Host, err)
	}
	log := slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), nil))
	ctrl, err := gate.New(client, gate.Options{Namespace: namespace, Selector: selector, Logger: log})
	if err != nil {
		return badInput("%v", err)
	}
	ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	stopHealth, err := serveHealth(healthAddr, healthHandler(ctrl.Synced, "pods not listed yet", nil), log)
	if err != nil {
		return err
	}
	defer stopHealth()
	if err := ctrl.Run(ctx); err != nil {
		return &exitError{code: 1, err: fmt.Errorf("gate controller: %w", err)}
	}
	return nil
}
