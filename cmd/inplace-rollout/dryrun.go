package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"
	"k8s.io/client-go/kubernetes"

	"github.com/inplace-rollout/inplace-rollout/pkg/inplace"
	"github.com/inplace-rollout/inplace-rollout/pkg/registry"
	"github.com/inplace-rollout/inplace-rollout/pkg/rollout"
)

// The values of run's --dry-run, as kubectl's.
const (
	// dryRunNone runs the rollout.
	dryRunNone = "none"
	// dryRunClient prints what plan prints, the batches, and sends nothing.
	dryRunClient = "client"
	// dryRunServer sends the first writes of the rollout with dryRun All, for the API server's
	// admission to judge, and stores nothing.
	dryRunServer = "server"
)

func registerDryRun(cmd *cobra.Command, mode *string) {
	cmd.Flags().StringVar(mode, "dry-run", dryRunNone, "none runs the rollout; client prints the batches, as plan does, and sends nothing; server sends the workload's hold and the image patch of each pod of the first batch as dry runs (dryRun All), so that the API server's admission (ValidatingAdmissionPolicies, Kyverno, Gatekeeper) judges them, and changes nothing: exit 7 if it refuses any")
}

// checkDryRun refuses a --dry-run value kubectl would not take, before anything is sent.
func checkDryRun(mode string) error {
	switch mode {
	case dryRunNone, dryRunClient, dryRunServer:
		return nil
	}
	return badInput("--dry-run %q: want %s, %s or %s", mode, dryRunNone, dryRunClient, dryRunServer)
}

// dryRunDocument is run --dry-run=server's report, as -o json or yaml print it.
type dryRunDocument struct {
	Target string `json:"target"`
	// Accepted says the API server accepted every write sent.
	Accepted bool `json:"accepted"`
	// Resources are the container resources of the rollout, as given.
	Resources map[string]inplace.Resources `json:"resources,omitempty"`
	// Hooks say each hook run around a pod's change, one line each (inplace.DescribeHooks).
	Hooks []string `json:"hooks,omitempty"`
	rollout.DryRunReport
}

// runDryRun is `run --dry-run=client|server`: with client it prints the plan; with server it
// sends the start's writes as dry runs and prints what the API server said of each, exiting 7
// when it refused any.
func runDryRun(cmd *cobra.Command, client kubernetes.Interface, spec rollout.Spec, mode, output string) error {
	pullerImage, _ := cmd.Flags().GetString("puller-image")
	engine := &rollout.Engine{Client: client, Registry: &registry.Resolver{Client: client}, PullerImage: pullerImage}
	ctx, stop := interruptible()
	defer stop()
	out := cmd.OutOrStdout()
	if mode == dryRunClient {
		return printPlan(ctx, out, engine, spec, output)
	}
	r, err := engine.DryRun(ctx, spec)
	if err != nil {
		return dryRunExit(err)
	}
	refused := r.Refused()
	doc := dryRunDocument{Target: spec.Target.String(), Accepted: len(refused) == 0, Resources: spec.Resources, Hooks: inplace.DescribeHooks(spec.Hooks), DryRunReport: r}
	if done, err := printDocument(out, output, doc); !done {
		printDryRun(out, doc)
	} else if err != nil {
		return err
	}
	if len(refused) == 0 {
		return nil
	}
	var why []string
	for _, w := range refused {
		why = append(why, fmt.Sprintf("%s %s: %s", strings.ToLower(w.Kind), w.Name, w.Message))
	}
	return &exitError{code: exitAPIRefused, err: fmt.Errorf("the API server refused the dry run of %s, and would refuse the rollout: %s; nothing was changed. Fix what it names (the images, or with the cluster's admins the policy), then run the dry run again",
		spec.Target, strings.Join(why, "; "))}
}

// printDryRun prints the report in text: each write with what the API server said, then the
// verdict.
func printDryRun(out io.Writer, doc dryRunDocument) {
	if doc.Message != "" {
		fmt.Fprintf(out, "%s: %s\n", doc.Target, doc.Message)
		return
	}
	what := "images " + formatImages(doc.Images)
	if len(doc.Resources) > 0 {
		what += ", resources " + formatResources(doc.Resources)
	}
	fmt.Fprintf(out, "%s: dry run of the start, %s (nothing was changed)\n", doc.Target, what)
	for _, h := range doc.Hooks {
		fmt.Fprintln(out, h)
	}
	var notSent []string
	for _, w := range doc.Writes {
		line := fmt.Sprintf("  %s %s, %s: %s", w.Kind, w.Name, w.Write, w.Result)
		if w.Message != "" {
			line += ": " + w.Message
		}
		fmt.Fprintln(out, line)
		if w.Result == rollout.DryRunNotSent {
			notSent = append(notSent, w.Name)
		}
	}
	if !doc.Accepted || len(doc.Writes) == 0 {
		return
	}
	accepted := doc.DryRunReport.Accepted()
	kind, name := doc.Writes[0].Kind, doc.Writes[0].Name
	fmt.Fprintf(out, "would be accepted: %s %s and the first batch's %d pods (batch %d: %s)\n",
		kind, name, len(accepted), doc.Batch, strings.Join(accepted, ", "))
	if len(notSent) > 0 {
		fmt.Fprintf(out, "not tried: %d pods the rollout would not patch now (%s)\n", len(notSent), strings.Join(notSent, ", "))
	}
}

// dryRunExit is the exit of a dry run that ended with err before it could report: bad input,
// or the API server refusing or failing a read, as for plan; stopped by a signal; or the
// workload's controller not caught up in time.
func dryRunExit(err error) error {
	switch {
	case errors.Is(err, context.Canceled):
		return &exitError{code: exitInterrupted, err: errors.New("stopped; nothing was changed")}
	case errors.Is(err, context.DeadlineExceeded):
		return &exitError{code: exitAPIUnavailable, err: fmt.Errorf("%w; nothing was changed: run the dry run again", err)}
	}
	return readExit(cliError(err))
}
