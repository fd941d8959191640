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
	"github.com/inplace-rollout/inplace-rollout/pkg/inplace"
	"github.com/inplace-rollout/inplace-rollout/pkg/rollout"
	"github.com/inplace-rollout/inplace-rollout/pkg/workload"
)

// podReport is one pod in `status` output.
type podReport struct {
	Name       string                   `json:"name"`
	Node       string                   `json:"node"`
	IP         string                   `json:"ip"`
	Ready      bool                     `json:"ready"`
	RolloutID  string                   `json:"rolloutID,omitempty"`
	Stage      inplace.Stage            `json:"stage,omitempty"`
	Reason     string                   `json:"reason,omitempty"`
	Containers []inplace.ContainerState `json:"containers,omitempty"`
	Images     map[string]string        `json:"images"`
}

// statusReport is the output of `status`.
type statusReport struct {
	Target string         `json:"target"`
	Lock   *workload.Lock `json:"rollout,omitempty"`
	Pods   []podReport    `json:"pods"`
}

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
			w, err := workload.Load(context.Background(), client, ref)
			if err != nil {
				return &exitError{code: exitBadInput, err: err}
			}
			report := statusReport{Target: ref.String(), Lock: w.Lock()}
			for _, p := range w.Pods() {
				r := podReport{Name: p.Name, Node: p.Spec.NodeName, IP: p.Status.PodIP, Images: map[string]string{}}
				for _, c := range p.Status.Conditions {
					if c.Type == "Ready" {
						r.Ready = c.Status == "True"
					}
				}
				for _, c := range p.Spec.Containers {
					r.Images[c.Name] = c.Image
				}
				st, err := inplace.ReadState(p)
				if err != nil {
					r.Reason = err.Error()
				} else if st != nil {
					r.RolloutID, r.Stage, r.Reason, r.Containers = st.RolloutID, st.Stage, st.Reason, st.Containers
				}
				report.Pods = append(report.Pods, r)
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

func printReport(out io.Writer, r statusReport) error {
	fmt.Fprintf(out, "%s\n", r.Target)
	if l := r.Lock; l != nil {
		fmt.Fprintf(out, "rollout %s by %s: %s", l.RolloutID, l.Holder, l.Phase)
		if l.ReasonCode != "" {
			fmt.Fprintf(out, ", reason %s", l.ReasonCode)
		}
		if l.Reason != "" {
			fmt.Fprintf(out, " (%s)", l.Reason)
		}
		fmt.Fprintf(out, "\n  images %s, previously %s\n", formatImages(l.Images), formatImages(l.PreviousImages))
		var run analysis.Run
		if len(l.Analysis) > 0 && json.Unmarshal(l.Analysis, &run) == nil && len(run.Last) > 0 {
			verdict := string(run.Verdict)
			if verdict == "" {
				verdict = "in progress"
			}
			fmt.Fprintf(out, "  analysis of batch %d: %s (%d queries)\n", run.Batch+1, verdict, run.Queries)
			last := run.Last[len(run.Last)-1]
			for _, r := range last.Results {
				fmt.Fprintf(out, "    %s  %s\n", last.At.Format(time.TimeOnly), r)
				if r.Query != "" {
					fmt.Fprintf(out, "              query: %s\n", r.Query)
				}
			}
		}
	} else {
		fmt.Fprintln(out, "no in-place rollout recorded")
	}
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "POD\tREADY\tSTAGE\tCONTAINER\tBEFORE\tNOW\tREASON")
	for _, p := range r.Pods {
		stage := string(p.Stage)
		if stage == "" {
			stage = "-"
		}
		if len(p.Containers) == 0 {
			fmt.Fprintf(tw, "%s\t%v\t%s\t-\t-\t%s\t%s\n", p.Name, p.Ready, stage, formatImages(p.Images), p.Reason)
			continue
		}
		for i, c := range p.Containers {
			name, ready, stg, reason := p.Name, fmt.Sprint(p.Ready), stage, p.Reason
			if i > 0 {
				name, ready, stg, reason = "", "", "", ""
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", name, ready, stg, c.Name, c.BeforeImage, p.Images[c.Name], reason)
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
