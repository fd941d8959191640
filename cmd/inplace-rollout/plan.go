package main

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"

	"github.com/inplace-rollout/inplace-rollout/pkg/inplace"
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
			spec, err := rf.podsSpec(ref)
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
			report := planReport{Target: ref.String(), Images: spec.Images, Current: currentImages(w, spec.Images)}
			var pending []string
			for _, p := range w.Pods() {
				// A run reads every pod's state before it writes; plan refuses what run would.
				if _, err := inplace.ReadState(p); err != nil {
					return &exitError{code: exitBadInput, err: fmt.Errorf("%w; a run would refuse to start: fix the annotation or remove it", err)}
				}
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
	rf.registerPlan(cmd)
	return cmd
}

// currentImages are the images the named containers run now: the template's, or for
// label-selected pods each distinct image with how many pods run it.
func currentImages(w workload.Workload, names map[string]string) map[string]string {
	if tmpl := w.Template(); tmpl != nil {
		return workload.TemplateImages(tmpl, names)
	}
	out := map[string]string{}
	counts := map[string]map[string]int{}
	for _, p := range w.Pods() {
		for _, list := range [][]corev1.Container{p.Spec.InitContainers, p.Spec.Containers} {
			for _, c := range list {
				if _, ok := names[c.Name]; ok {
					if counts[c.Name] == nil {
						counts[c.Name] = map[string]int{}
					}
					counts[c.Name][c.Image]++
				}
			}
		}
	}
	for name, images := range counts {
		if len(images) == 1 {
			for img := range images {
				out[name] = img
			}
			continue
		}
		var parts []string
		for img, n := range images {
			parts = append(parts, fmt.Sprintf("%s (%d pods)", img, n))
		}
		out[name] = strings.Join(sortedStrings(parts), " | ")
	}
	return out
}

func sortedStrings(s []string) []string {
	sort.Strings(s)
	return s
}
