package main

import (
	"context"
	"fmt"
	"io"
	"sort"

	"github.com/spf13/cobra"

	"github.com/inplace-rollout/inplace-rollout/pkg/inplace"
	"github.com/inplace-rollout/inplace-rollout/pkg/registry"
	"github.com/inplace-rollout/inplace-rollout/pkg/rollout"
)

// planReport is the output of `plan`.
type planReport struct {
	Target string            `json:"target"`
	Images map[string]string `json:"images"`
	// Resources are the container resources the pods would be resized to, as given.
	Resources map[string]inplace.Resources `json:"resources,omitempty"`
	// Hooks say each hook run around a pod's change, one line each (inplace.DescribeHooks).
	Hooks   []string          `json:"hooks,omitempty"`
	Batches []planBatch       `json:"batches"`
	Already []string          `json:"alreadyUpdated,omitempty"`
	Current map[string]string `json:"currentImages"`
}

type planBatch struct {
	Index int      `json:"batch"`
	Upto  int      `json:"cumulativePods"`
	Pods  []string `json:"pods"`
}

func newPlanCommand() *cobra.Command {
	var cf clusterFlags
	var rf rolloutFlags
	cmd := &cobra.Command{
		Use:   "plan --target KIND/NAME [--image CONTAINER=IMAGE] [--requests|--limits CONTAINER=RESOURCE=QUANTITY,...] [--hooks TEXT] [flags]",
		Short: "Print the batches and pods a run would update; writes nothing",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			client, ref, err := cf.resolve()
			if err != nil {
				return err
			}
			spec, err := rf.podsSpec(ref)
			if err != nil {
				return err
			}
			engine := &rollout.Engine{Client: client, Registry: &registry.Resolver{Client: client}}
			return printPlan(context.Background(), cmd.OutOrStdout(), engine, spec, cf.output)
		},
	}
	cf.register(cmd)
	rf.registerPlan(cmd)
	cf.registerCompletions(cmd)
	return cmd
}

// printPlan prints the plan of spec, the batches and the pods each updates: what `plan` and
// `run --dry-run=client` print.
func printPlan(ctx context.Context, out io.Writer, engine *rollout.Engine, spec rollout.Spec, output string) error {
	plan, err := engine.Plan(ctx, spec)
	if err != nil {
		return readExit(planError(err))
	}
	report := planReport{Target: spec.Target.String(), Images: plan.Images, Resources: spec.Resources, Hooks: inplace.DescribeHooks(spec.Hooks),
		Current: plan.Current, Already: plan.Already}
	for i, b := range plan.Batches {
		report.Batches = append(report.Batches, planBatch{Index: i + 1, Upto: b.Upto, Pods: b.Pods})
	}
	if done, err := printDocument(out, output, report); done {
		return err
	}
	if len(report.Images) > 0 || len(report.Resources) == 0 {
		fmt.Fprintf(out, "%s: %s -> %s\n", report.Target, formatImages(report.Current), formatImages(report.Images))
	}
	if len(report.Resources) > 0 {
		fmt.Fprintf(out, "%s: resources -> %s\n", report.Target, formatResources(report.Resources))
	}
	for _, h := range report.Hooks {
		fmt.Fprintln(out, h)
	}
	if len(report.Already) > 0 {
		fmt.Fprintf(out, "already on the new images: %v\n", report.Already)
	}
	for _, b := range report.Batches {
		fmt.Fprintf(out, "batch %d (up to %d pods): %v\n", b.Index, b.Upto, b.Pods)
	}
	return nil
}

func sortedStrings(s []string) []string {
	sort.Strings(s)
	return s
}
