package main

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"

	"github.com/spf13/cobra"

	"github.com/inplace-rollout/inplace-rollout/pkg/rollout"
	"github.com/inplace-rollout/inplace-rollout/pkg/workload"
)

// planReport is the output of `plan`.
type planReport struct {
	Target  string            `json:"target"`
	Images  map[string]string `json:"images"`
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
		Use:   "plan --target KIND/NAME --image CONTAINER=IMAGE [flags]",
		Short: "Print the batches and pods a run would update; writes nothing",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			client, ref, err := cf.resolve()
			if err != nil {
				return err
			}
			spec, err := rf.spec(ref)
			if err != nil {
				return err
			}
			w, err := workload.Load(context.Background(), client, ref)
			if err != nil {
				return &exitError{code: exitBadInput, err: err}
			}
			if err := w.CheckStart(spec.Images, spec.IncludeInit); err != nil {
				return &exitError{code: exitBadInput, err: err}
			}
			batches, err := rollout.ResolveBatches(spec.Batches, w.Replicas())
			if err != nil {
				return &exitError{code: exitBadInput, err: err}
			}
			report := planReport{Target: ref.String(), Images: spec.Images, Current: map[string]string{}}
			if tmpl := w.Template(); tmpl != nil {
				for _, c := range tmpl.Spec.Containers {
					if _, ok := spec.Images[c.Name]; ok {
						report.Current[c.Name] = c.Image
					}
				}
			}
			var pending []string
			for _, p := range w.Pods() {
				if w.Counted(p, spec.Images, nil) {
					report.Already = append(report.Already, p.Name)
				} else {
					pending = append(pending, p.Name)
				}
			}
			done := len(report.Already)
			for i, upto := range batches {
				b := planBatch{Index: i + 1, Upto: upto}
				for done < upto && len(pending) > 0 {
					b.Pods = append(b.Pods, pending[0])
					pending, done = pending[1:], done+1
				}
				report.Batches = append(report.Batches, b)
			}
			if cf.output == "json" {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				return enc.Encode(report)
			}
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "%s: %s -> %s\n", report.Target, formatImages(report.Current), formatImages(report.Images))
			if len(report.Already) > 0 {
				fmt.Fprintf(out, "already on the new images: %v\n", report.Already)
			}
			for _, b := range report.Batches {
				fmt.Fprintf(out, "batch %d (up to %d pods): %v\n", b.Index, b.Upto, b.Pods)
			}
			return nil
		},
	}
	cf.register(cmd)
	rf.register(cmd)
	return cmd
}

func sortedStrings(s []string) []string {
	sort.Strings(s)
	return s
}
