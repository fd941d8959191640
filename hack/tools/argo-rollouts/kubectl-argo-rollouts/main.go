// Command kubectl-argo-rollouts is Argo Rollouts' kubectl plugin without its dashboard: the
// dashboard embeds UI files that the module zip on the Go module proxy lacks, so the stock main
// does not build from it. This main assembles the library's own subcommands the way
// pkg/kubectl-argo-rollouts/cmd.NewCmdArgoRollouts does, with the same options object.
package main

import (
	"flag"
	"os"

	log "github.com/sirupsen/logrus"
	"github.com/spf13/cobra"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/klog/v2"

	"github.com/argoproj/argo-rollouts/pkg/kubectl-argo-rollouts/cmd/abort"
	"github.com/argoproj/argo-rollouts/pkg/kubectl-argo-rollouts/cmd/get"
	"github.com/argoproj/argo-rollouts/pkg/kubectl-argo-rollouts/cmd/lint"
	"github.com/argoproj/argo-rollouts/pkg/kubectl-argo-rollouts/cmd/list"
	"github.com/argoproj/argo-rollouts/pkg/kubectl-argo-rollouts/cmd/pause"
	"github.com/argoproj/argo-rollouts/pkg/kubectl-argo-rollouts/cmd/promote"
	"github.com/argoproj/argo-rollouts/pkg/kubectl-argo-rollouts/cmd/restart"
	"github.com/argoproj/argo-rollouts/pkg/kubectl-argo-rollouts/cmd/retry"
	"github.com/argoproj/argo-rollouts/pkg/kubectl-argo-rollouts/cmd/set"
	"github.com/argoproj/argo-rollouts/pkg/kubectl-argo-rollouts/cmd/status"
	"github.com/argoproj/argo-rollouts/pkg/kubectl-argo-rollouts/cmd/terminate"
	"github.com/argoproj/argo-rollouts/pkg/kubectl-argo-rollouts/cmd/undo"
	"github.com/argoproj/argo-rollouts/pkg/kubectl-argo-rollouts/cmd/version"
	"github.com/argoproj/argo-rollouts/pkg/kubectl-argo-rollouts/options"
	logutil "github.com/argoproj/argo-rollouts/utils/log"
)

func main() {
	klog.InitFlags(nil)
	// As the stock main: klog's fixed stderrthreshold behaviour (kubernetes/klog#212).
	_ = flag.Set("legacy_stderr_threshold_behavior", "false")
	_ = flag.Set("stderrthreshold", "INFO")
	logutil.SetKLogLogger(log.New())
	streams := genericclioptions.IOStreams{In: os.Stdin, Out: os.Stdout, ErrOut: os.Stderr}
	if err := newRoot(options.NewArgoRolloutsOptions(streams)).Execute(); err != nil {
		os.Exit(1)
	}
}

// newRoot is NewCmdArgoRollouts without the dashboard, create, completion and notifications
// subcommands.
func newRoot(o *options.ArgoRolloutsOptions) *cobra.Command {
	root := &cobra.Command{
		Use:               "kubectl-argo-rollouts COMMAND",
		Short:             "Manage argo rollouts",
		Long:              "This command consists of multiple subcommands which can be used to manage Argo Rollouts.",
		SilenceUsage:      true,
		PersistentPreRunE: o.PersistentPreRunE,
		RunE: func(c *cobra.Command, args []string) error {
			return o.UsageErr(c)
		},
	}
	o.AddKubectlFlags(root)
	root.AddCommand(
		abort.NewCmdAbort(o),
		get.NewCmdGet(o),
		lint.NewCmdLint(o),
		list.NewCmdList(o),
		pause.NewCmdPause(o),
		promote.NewCmdPromote(o),
		restart.NewCmdRestart(o),
		retry.NewCmdRetry(o),
		set.NewCmdSet(o),
		status.NewCmdStatus(o),
		terminate.NewCmdTerminate(o),
		undo.NewCmdUndo(o),
		version.NewCmdVersion(o),
	)
	return root
}
