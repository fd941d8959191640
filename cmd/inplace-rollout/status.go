package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/client-go/kubernetes"

	"github.com/inplace-rollout/inplace-rollout/analysis"
	"github.com/inplace-rollout/inplace-rollout/pkg/rollout"
)

func newStatusCommand() *cobra.Command {
	var cf clusterFlags
	var watch bool
	cmd := &cobra.Command{
		Use:   "status --target KIND/NAME [flags]",
		Short: "Show the workload's rollout and, per pod, its stage, images and reasons",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			client, ref, err := cf.resolve()
			if err != nil {
				return err
			}
			if watch {
				ctx, stop := interruptible()
				defer stop()
				return watchStatus(ctx, cmd.OutOrStdout(), client, ref, cf.output)
			}
			engine := &rollout.Engine{Client: client}
			report, err := engine.Report(context.Background(), ref)
			if err != nil {
				return readExit(err)
			}
			if done, err := printDocument(cmd.OutOrStdout(), cf.output, report); done {
				return err
			}
			return printReport(cmd.OutOrStdout(), report)
		},
	}
	cf.register(cmd)
	cf.registerCompletions(cmd)
	cmd.Flags().BoolVarP(&watch, "watch", "w", false, "after the report, print what changes in it, live, until interrupted: in text the rollout's lines and each pod's row that changed, in json or yaml the whole report again (as kubectl get -w)")
	return cmd
}

// statusRecheck is how often `status --watch` reads the workload's rollout record again: it
// changes without the pods (an analysis measures, the phase moves), which are watched.
const statusRecheck = time.Second

// watchStatus prints the report of ref, then, until ctx ends, again whenever it changes: the
// pods are watched, and the rollout's record is read every statusRecheck. In text only what
// changed is printed (the rollout's lines, the rows of the pods that changed), as kubectl get -w
// prints the objects that changed; json and yaml print the whole report, yaml's documents
// separated by "---".
func watchStatus(ctx context.Context, out io.Writer, client kubernetes.Interface, ref rollout.Ref, format string) error {
	engine := &rollout.Engine{Client: client}
	var changes <-chan struct{}
	if w, err := rollout.WatchPods(ctx, client, ref); err == nil {
		engine.Pods, changes = w, w.Changes()
	}
	recheck := time.NewTicker(statusRecheck)
	defer recheck.Stop()
	var last *reportText
	for {
		r, err := engine.Report(ctx, ref)
		switch {
		case ctx.Err() != nil:
			return nil
		case err != nil:
			return readExit(err)
		}
		if err := printChange(out, format, r, &last); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return nil
		case <-changes:
		case <-recheck.C:
		}
	}
}

// printChange prints report r in format, after last (nil the first time): json and yaml the
// whole report when it changed, text the lines that changed.
func printChange(out io.Writer, format string, r rollout.Report, last **reportText) error {
	t := textOf(r)
	if *last != nil && t.equal(*last) {
		return nil
	}
	defer func() { *last = t }()
	if format == outputYAML && *last != nil {
		if _, err := io.WriteString(out, "---\n"); err != nil {
			return err
		}
	}
	if done, err := printDocument(out, format, r); done {
		return err
	}
	if *last == nil {
		return t.print(out, true, nil)
	}
	return t.print(out, !slices.Equal(t.header, (*last).header), (*last).rows)
}

func printReport(out io.Writer, r rollout.Report) error {
	return textOf(r).print(out, true, nil)
}

// reportText is a report as text: the lines about the workload and its rollout, and a row of
// cells per container the rollout changes, by pod.
type reportText struct {
	header []string
	pods   []string              // in update order
	rows   map[string][][]string // by pod
}

var podColumns = []string{"POD", "READY", "STAGE", "CONTAINER", "BEFORE", "NOW", "REASON"}

func textOf(r rollout.Report) *reportText {
	t := &reportText{header: []string{r.Target}, rows: map[string][][]string{}}
	t.header = append(t.header, rolloutLines(r.Lock)...)
	for _, p := range r.Pods {
		t.pods = append(t.pods, p.Name)
		t.rows[p.Name] = podRows(r, p)
	}
	return t
}

func (t *reportText) equal(o *reportText) bool {
	return slices.Equal(t.header, o.header) && slices.Equal(t.pods, o.pods) &&
		maps.EqualFunc(t.rows, o.rows, func(a, b [][]string) bool { return slices.EqualFunc(a, b, slices.Equal) })
}

// print prints the header lines when header is set, then the rows of each pod whose rows are
// not those of before (every pod's, with the column names, when before is nil).
func (t *reportText) print(out io.Writer, header bool, before map[string][][]string) error {
	if header {
		for _, l := range t.header {
			fmt.Fprintln(out, l)
		}
	}
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	if before == nil {
		fmt.Fprintln(tw, strings.Join(podColumns, "\t"))
	}
	for _, name := range t.pods {
		rows := t.rows[name]
		if before != nil && slices.EqualFunc(rows, before[name], slices.Equal) {
			continue
		}
		for _, cells := range rows {
			fmt.Fprintln(tw, strings.Join(cells, "\t"))
		}
	}
	return tw.Flush()
}

// rolloutLines are the lines about the rollout the lock records: its phase, images, and the
// last measurement of its analysis.
func rolloutLines(l *rollout.Record) []string {
	if l == nil {
		return []string{"no in-place rollout recorded"}
	}
	line := fmt.Sprintf("rollout %s by %s: %s", l.RolloutID, l.Holder, l.Phase)
	if l.Reason != "" {
		line += fmt.Sprintf(", reason %s", l.Reason)
	}
	if l.Message != "" {
		line += fmt.Sprintf(" (%s)", l.Message)
	}
	lines := []string{line, fmt.Sprintf("  images %s, previously %s", formatImages(l.Images), formatImages(l.PreviousImages))}
	var run analysis.Run
	if len(l.Analysis) > 0 && json.Unmarshal(l.Analysis, &run) == nil && len(run.Last) > 0 {
		verdict := string(run.Verdict)
		if verdict == "" {
			verdict = "in progress"
		}
		lines = append(lines, fmt.Sprintf("  analysis of batch %d: %s (%d queries)", run.Batch, verdict, run.Queries))
		last := run.Last[len(run.Last)-1]
		for _, r := range last.Results {
			lines = append(lines, fmt.Sprintf("    %s  %s", last.At.Format(time.TimeOnly), r))
			if r.Query != "" {
				// The pod lists stay placeholders; the hash identifies the query as sent.
				lines = append(lines, fmt.Sprintf("              query: %s  (%s)", r.Query, r.QueryHash))
			}
		}
	}
	return lines
}

// podRows are the cells of pod p's rows: one per container the rollout changes (all of them
// when no rollout is recorded), each with the bare image it had before and runs now.
func podRows(r rollout.Report, p rollout.PodReport) [][]string {
	// A stage this version does not write never gets here: the reason says why the pod's
	// state was not read.
	stage := string(p.Stage)
	if stage == "" {
		stage = "-"
	}
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
	cells := make([][]string, 0, len(rows))
	for i, c := range rows {
		name, ready, stg, reason := p.Name, fmt.Sprint(p.Ready), stage, p.Reason
		if i > 0 {
			name, ready, stg, reason = "", "", "", ""
		}
		cells = append(cells, []string{name, ready, stg, c.container, c.before, p.Images[c.container], reason})
	}
	return cells
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
	if done, err := printDocument(out, format, st); done {
		return err
	}
	if st.Reason != "" {
		_, err := fmt.Fprintf(out, "%s (%s): %s\n", st.Phase, st.Reason, st.Message)
		return err
	}
	_, err := fmt.Fprintf(out, "%s: %s\n", st.Phase, st.Message)
	return err
}
