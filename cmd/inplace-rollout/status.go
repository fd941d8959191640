package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/inplace-rollout/inplace-rollout/analysis"
	"github.com/inplace-rollout/inplace-rollout/pkg/rollout"
)

func newStatusCommand() *cobra.Command {
	var cf clusterFlags
	cmd := &cobra.Command{
		Use:   "status --target KIND/NAME [flags]",
		Short: "Show the workload's rollout and, per pod, its stage, images and reasons",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			client, ref, err := cf.resolve()
			if err != nil {
				return err
			}
			engine := &rollout.Engine{Client: client}
			report, err := engine.Report(context.Background(), ref)
			if err != nil {
				return &exitError{code: exitBadInput, err: err}
			}
			if cf.output == "json" {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				return enc.Encode(report)
			}
			return printReport(cmd.OutOrStdout(), report)
		},
	}
	cf.register(cmd)
	return cmd
}

func printReport(out io.Writer, r rollout.Report) error {
	fmt.Fprintf(out, "%s\n", r.Target)
	if l := r.Lock; l != nil {
		fmt.Fprintf(out, "rollout %s by %s: %s", l.RolloutID, l.Holder, l.Phase)
		if l.Reason != "" {
			fmt.Fprintf(out, ", reason %s", l.Reason)
		}
		if l.Message != "" {
			fmt.Fprintf(out, " (%s)", l.Message)
		}
		fmt.Fprintf(out, "\n  images %s, previously %s\n", formatImages(l.Images), formatImages(l.PreviousImages))
		var run analysis.Run
		if len(l.Analysis) > 0 && json.Unmarshal(l.Analysis, &run) == nil && len(run.Last) > 0 {
			verdict := string(run.Verdict)
			if verdict == "" {
				verdict = "in progress"
			}
			fmt.Fprintf(out, "  analysis of batch %d: %s (%d queries)\n", run.Batch, verdict, run.Queries)
			last := run.Last[len(run.Last)-1]
			for _, r := range last.Results {
				fmt.Fprintf(out, "    %s  %s\n", last.At.Format(time.TimeOnly), r)
				if r.Query != "" {
					// The pod lists stay placeholders; the hash identifies the query as sent.
					fmt.Fprintf(out, "              query: %s  (%s)\n", r.Query, r.QueryHash)
				}
			}
		}
	} else {
		fmt.Fprintln(out, "no in-place rollout recorded")
	}
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "POD\tREADY\tSTAGE\tCONTAINER\tBEFORE\tNOW\tREASON")
	for _, p := range r.Pods {
		// A stage this version does not write never gets here: the reason says why the pod's
		// state was not read.
		stage := string(p.Stage)
		if stage == "" {
			stage = "-"
		}
		// One row per container the rollout changes (all of them when no rollout is
		// recorded), each with the bare image it had before and runs now.
		type row struct{ container, before string }
		var rows []row
		for _, c := range p.Containers {
			rows = append(rows, row{c.Name, c.BeforeImage})
		}
		if len(rows) == 0 {
			for _, name := range p.RolloutContainers(r.Lock) {
				rows = append(rows, row{name, "-"})
			}
		}
		for i, c := range rows {
			name, ready, stg, reason := p.Name, fmt.Sprint(p.Ready), stage, p.Reason
			if i > 0 {
				name, ready, stg, reason = "", "", "", ""
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", name, ready, stg, c.container, c.before, p.Images[c.container], reason)
		}
	}
	return tw.Flush()
}

func formatImages(images map[string]string) string {
	parts := make([]string, 0, len(images))
	for k, v := range images {
		parts = append(parts, k+"="+v)
	}
	return strings.Join(sortedStrings(parts), ",")
}

// printStatus prints a rollout's final status on stdout.
func printStatus(out io.Writer, format string, st rollout.Status) error {
	if format == "json" {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		return enc.Encode(st)
	}
	if st.Reason != "" {
		_, err := fmt.Fprintf(out, "%s (%s): %s\n", st.Phase, st.Reason, st.Message)
		return err
	}
	_, err := fmt.Fprintf(out, "%s: %s\n", st.Phase, st.Message)
	return err
}
