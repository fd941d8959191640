package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"

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
				report.Pods = append(report.Pods, podRow(p, report.Lock))
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
		stage := string(p.Stage)
		switch {
		case stage == "":
			stage = "-"
		case !p.Stage.Known():
			stage += " (unknown stage)"
		}
		// One row per container the rollout changes (all of them when no rollout is
		// recorded), each with the bare image it had before and runs now.
		type row struct{ container, before string }
		var rows []row
		for _, c := range p.Containers {
			rows = append(rows, row{c.Name, c.BeforeImage})
		}
		if len(rows) == 0 {
			for _, name := range rowContainers(p, r.Lock) {
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

// podRow reports one pod. A state left by an earlier rollout than the lock's (and not one it
// superseded) is not this rollout's: the pod shows no stage, and the reason says whose it is.
func podRow(p *corev1.Pod, lock *workload.Lock) podReport {
	r := podReport{Name: p.Name, Node: p.Spec.NodeName, IP: p.Status.PodIP, Images: map[string]string{}}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			r.Ready = c.Status == corev1.ConditionTrue
		}
	}
	for _, list := range [][]corev1.Container{p.Spec.InitContainers, p.Spec.Containers} {
		for _, c := range list {
			r.Images[c.Name] = c.Image
		}
	}
	st, err := inplace.ReadState(p)
	switch {
	case err != nil:
		r.Reason = err.Error()
	case st == nil:
	case lock != nil && st.RolloutID != lock.RolloutID && !slices.Contains(lock.Superseded, st.RolloutID):
		r.Reason = fmt.Sprintf("last changed by an earlier rollout, %s (%s)", st.RolloutID, st.Stage)
	default:
		r.RolloutID, r.Stage, r.Reason, r.Containers = st.RolloutID, st.Stage, st.Reason, st.Containers
	}
	return r
}

// rowContainers are the containers a pod's rows show when it has no state of the rollout: those
// the rollout changes, or every container when no rollout is recorded.
func rowContainers(p podReport, lock *workload.Lock) []string {
	var names []string
	for name := range p.Images {
		if lock == nil {
			names = append(names, name)
		} else if _, ok := lock.Images[name]; ok {
			names = append(names, name)
		}
	}
	return sortedStrings(names)
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
