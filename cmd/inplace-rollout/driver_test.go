package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"

	"github.com/inplace-rollout/inplace-rollout/analysis"
	"github.com/inplace-rollout/inplace-rollout/pkg/inplace"
	"github.com/inplace-rollout/inplace-rollout/pkg/rollout"
	"github.com/inplace-rollout/inplace-rollout/pkg/workload"
)

var (
	webRef    = workload.Ref{Kind: workload.StatefulSet, Namespace: "shop", Name: "web"}
	webImages = map[string]string{"app": "reg/app:v2"}
)

// driverCommand is a command whose stdout and stderr the test reads.
func driverCommand() (*cobra.Command, *bytes.Buffer, *bytes.Buffer) {
	var stdout, stderr bytes.Buffer
	cmd := &cobra.Command{}
	cmd.SetOut(&stdout)
	cmd.SetErr(&stderr)
	return cmd, &stdout, &stderr
}

// logTime is the time attribute of a log line, which differs from run to run.
var logTime = regexp.MustCompile(`(?m)^time=\S+ `)

// logLines are the lines of log, without their times.
func logLines(log string) []string {
	log = strings.TrimSuffix(logTime.ReplaceAllString(log, ""), "\n")
	if log == "" {
		return nil
	}
	return strings.Split(log, "\n")
}

// measured is a measurement at at of the checks results.
func measured(at time.Time, results ...analysis.CheckResult) analysis.Measurement {
	return analysis.Measurement{At: at, Results: results}
}

func check(name string, verdict analysis.Verdict, value float64, threshold string) analysis.CheckResult {
	return analysis.CheckResult{Check: name, Verdict: verdict, Value: ptr.To(value), Threshold: threshold}
}

// TestReportPrintsWhatChanged: the driver prints a progress line when a status's message
// changes, a line per check of each new measurement, and nothing for a status that says nothing
// new; a status that leaves a person a choice names the commands.
func TestReportPrintsWhatChanged(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 10, 0, 0, 0, time.UTC)
	first := measured(t0, check("errorRate", analysis.Pass, 0.001, "at most 0.01"), check("latencyP99", analysis.Pass, 0.2, "at most 0.5"))
	second := measured(t0.Add(10*time.Second), check("errorRate", analysis.Inconclusive, 0, "at least 1 request/s"))
	analysing := func(ms ...analysis.Measurement) *analysis.Run { return &analysis.Run{Batch: 1, Last: ms} }
	steps := []struct {
		name string
		st   rollout.Status
		want []string
	}{
		{"the first status", rollout.Status{Phase: rollout.PhaseProgressing, Batch: 1, Batches: 2, Total: 3, Message: "batch 1/2: updating web-2"},
			[]string{`level=INFO msg=progress target="StatefulSet shop/web" phase=Progressing batch=1/2 updated=0 total=3 message="batch 1/2: updating web-2"`}},
		{"a count changed, the message not", rollout.Status{Phase: rollout.PhaseProgressing, Batch: 1, Batches: 2, Total: 3, Updated: 1, Message: "batch 1/2: updating web-2"},
			nil},
		{"analysis with a measurement", rollout.Status{Phase: rollout.PhaseAnalyzing, Batch: 1, Batches: 2, Total: 3, Updated: 1, Message: "batch 1/2: analysing", Analysis: analysing(first)},
			[]string{
				`level=INFO msg=progress target="StatefulSet shop/web" phase=Analyzing batch=1/2 updated=1 total=3 message="batch 1/2: analysing"`,
				`level=INFO msg=measurement target="StatefulSet shop/web" batch=1 check=errorRate verdict=Pass result="errorRate Pass: 0.001, at most 0.01"`,
				`level=INFO msg=measurement target="StatefulSet shop/web" batch=1 check=latencyP99 verdict=Pass result="latencyP99 Pass: 0.2, at most 0.5"`,
			}},
		{"the same measurement again", rollout.Status{Phase: rollout.PhaseAnalyzing, Batch: 1, Batches: 2, Total: 3, Updated: 1, Message: "batch 1/2: analysing", Analysis: analysing(first)},
			nil},
		{"a new measurement, the same message", rollout.Status{Phase: rollout.PhaseAnalyzing, Batch: 1, Batches: 2, Total: 3, Updated: 1, Message: "batch 1/2: analysing", Analysis: analysing(first, second)},
			[]string{`level=INFO msg=measurement target="StatefulSet shop/web" batch=1 check=errorRate verdict=Inconclusive result="errorRate Inconclusive: 0, at least 1 request/s"`}},
		{"paused, with the commands", rollout.Status{Phase: rollout.PhasePaused, Reason: rollout.ReasonAnalysisInconclusive, Batch: 1, Batches: 2, Total: 3, Updated: 1, Message: "batch 1/2: inconclusive", Analysis: analysing(first, second)},
			[]string{"level=INFO msg=progress target=\"StatefulSet shop/web\" phase=Paused batch=1/2 updated=1 total=3 message=\"batch 1/2: inconclusive. To accept the batch and go on, run `inplace-rollout resume` with the same arguments as `run`; to undo, `inplace-rollout rollback --target statefulset/web -n shop`\""}},
		{"no batch known", rollout.Status{Phase: rollout.PhaseSucceeded, Total: 3, Updated: 3, Message: "3 pods updated"},
			[]string{`level=INFO msg=progress target="StatefulSet shop/web" phase=Succeeded updated=3 total=3 message="3 pods updated"`}},
	}
	cmd, _, stderr := driverCommand()
	d := newDriver(cmd, fake.NewClientset(), nil, webRef, webImages, []intstr.IntOrString{intstr.FromInt32(1), intstr.FromString("100%")})
	for _, step := range steps {
		stderr.Reset()
		d.report(step.st)
		got := logLines(stderr.String())
		if strings.Join(got, "\n") != strings.Join(step.want, "\n") {
			t.Errorf("%s: printed\n%s\nwant\n%s", step.name, strings.Join(got, "\n"), strings.Join(step.want, "\n"))
		}
	}
}

func TestProgressBarDrawsOnlyOnATerminal(t *testing.T) {
	var out bytes.Buffer
	if newProgressBar(&out).on {
		t.Fatal("a bar on a buffer is drawn")
	}
	st := rollout.Status{Phase: rollout.PhaseProgressing, Batch: 1, Batches: 1, Total: 2, Updated: 1}
	batches := []intstr.IntOrString{intstr.FromString("100%")}
	bar := &progressBar{w: &out, on: true}
	bar.show(st, batches)
	bar.clear()
	if want := barLine(st, batches) + "\r\033[K"; out.String() != want {
		t.Errorf("drawn %q, want %q", out.String(), want)
	}
}

// webStatefulSet is shop/web with no pods yet, and the lock when not nil.
func webStatefulSet(t *testing.T, lock *rollout.Record) *appsv1.StatefulSet {
	t.Helper()
	sts := &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "shop", Generation: 2, Annotations: map[string]string{}},
		Spec: appsv1.StatefulSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "web"}},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "reg/app:v1"}}},
			},
		},
		Status: appsv1.StatefulSetStatus{ObservedGeneration: 1},
	}
	if lock != nil {
		data, err := json.Marshal(lock)
		if err != nil {
			t.Fatal(err)
		}
		sts.Annotations[workload.LockAnnotation] = string(data)
	}
	return sts
}

// TestWatchPods: the driver steps as soon as the target's pods change when it can watch them,
// and at its intervals when the workload is not there or its pods cannot be watched.
func TestWatchPods(t *testing.T) {
	forbidden := func(c *fake.Clientset) {
		c.PrependWatchReactor("pods", func(k8stesting.Action) (bool, watch.Interface, error) {
			return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "pods"}, "", errors.New("no"))
		})
	}
	tests := []struct {
		name    string
		objs    []runtime.Object
		react   func(*fake.Clientset)
		watched bool
	}{
		{"watched", []runtime.Object{webStatefulSet(t, nil)}, nil, true},
		{"no workload", nil, nil, false},
		{"pods cannot be watched", []runtime.Object{webStatefulSet(t, nil)}, forbidden, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			client := fake.NewClientset(tt.objs...)
			if tt.react != nil {
				tt.react(client)
			}
			cmd, _, _ := driverCommand()
			d := newDriver(cmd, client, nil, webRef, webImages, nil)
			ctx, cancel := context.WithCancel(context.Background())
			t.Cleanup(cancel)
			d.watchPods(ctx, client, webRef)
			if got := d.engine.Changes != nil; got != tt.watched {
				t.Fatalf("stepping on pod changes: %v, want %v", got, tt.watched)
			}
			if !tt.watched {
				return
			}
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web-0", Namespace: "shop", Labels: map[string]string{"app": "web"}}}
			if _, err := client.CoreV1().Pods("shop").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			select {
			case <-d.engine.Changes:
			case <-time.After(10 * time.Second):
				t.Fatal("no change heard within 10s of a pod created")
			}
		})
	}
}

// TestDriverEvents: the driver records the engine's Events through its own client, and writes
// those queued before the command exits; without that client it records none.
func TestDriverEvents(t *testing.T) {
	t.Run("recorded and written at the end", func(t *testing.T) {
		events := fake.NewClientset()
		cmd, _, stderr := driverCommand()
		d := newDriver(cmd, fake.NewClientset(), events, webRef, webImages, nil)
		if d.engine.Events == nil {
			t.Fatal("the engine records no Events")
		}
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web-0", Namespace: "shop", UID: "web-0-uid", ResourceVersion: "7"}}
		ev := inplace.Event{Type: corev1.EventTypeNormal, Reason: inplace.EventUpdated, Message: "updated in place: app reg/app:v1 -> reg/app:v2"}
		if err := d.engine.Events.Record(context.Background(), inplace.PodRef(pod), ev); err != nil {
			t.Fatal(err)
		}
		d.closeEvents()
		list, err := events.EventsV1().Events("shop").List(context.Background(), metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(list.Items) != 1 || list.Items[0].Note != ev.Message || list.Items[0].Regarding.Name != "web-0" ||
			list.Items[0].ReportingController != "inplace-rollout.io/"+cliComponent {
			t.Errorf("Events written by the end: %+v; want the one recorded on web-0, by inplace-rollout.io/%s", list.Items, cliComponent)
		}
		if err := d.engine.Events.Record(context.Background(), inplace.PodRef(pod), ev); err == nil {
			t.Error("an Event recorded after the end")
		}
		if stderr.Len() != 0 {
			t.Errorf("logged %q, want nothing", stderr.String())
		}
	})
	t.Run("without a client", func(t *testing.T) {
		cmd, _, _ := driverCommand()
		d := newDriver(cmd, fake.NewClientset(), nil, webRef, webImages, nil)
		if d.engine.Events != nil || d.events != nil {
			t.Error("Events recorded without a client for them")
		}
		d.closeEvents()
	})
}

// TestDriveEndsAsTheRolloutSettles: the command's loop drives the rollout until it settles and
// ends with that outcome's exit code, output and log: paused on an inconclusive analysis (the
// commands that go on or undo named), or refused when the workload is not there.
func TestDriveEndsAsTheRolloutSettles(t *testing.T) {
	spec := rollout.Spec{Target: webRef, Images: webImages, Holder: "cli", MaxUnavailable: intstr.FromInt32(1), Timeout: time.Minute,
		Batches: []intstr.IntOrString{intstr.FromInt32(1), intstr.FromString("100%")}}
	run := &analysis.Run{Batch: 1, Pods: 1, StartedAt: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), Verdict: analysis.Inconclusive}
	raw, err := json.Marshal(run)
	if err != nil {
		t.Fatal(err)
	}
	paused := &rollout.Record{Holder: "cli", RolloutID: "r-1", SpecHash: spec.Hash(), Images: webImages,
		PreviousImages: map[string]string{"app": "reg/app:v1"}, Phase: rollout.PhasePaused,
		Message: "analysis of batch 1: Inconclusive", Reason: rollout.ReasonAnalysisInconclusive, Analysis: raw}
	tests := []struct {
		name       string
		objs       []runtime.Object
		code       int
		msg        string
		stdout     string
		progressed string
	}{
		{"paused", []runtime.Object{webStatefulSet(t, paused)}, exitPaused, "To accept the batch and go on, run `inplace-rollout resume`", "Paused", "phase=Paused"},
		{"no workload", nil, exitBadInput, "not found", "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cmd, stdout, stderr := driverCommand()
			err := drive(cmd, fake.NewClientset(tt.objs...), fake.NewClientset(), spec, driveOptions{output: "text"})
			var ee *exitError
			if !errors.As(err, &ee) || ee.code != tt.code || !strings.Contains(err.Error(), tt.msg) {
				t.Fatalf("drive = %v, want exit %d saying %q", err, tt.code, tt.msg)
			}
			if !strings.Contains(stdout.String(), tt.stdout) {
				t.Errorf("stdout %q, want %q", stdout.String(), tt.stdout)
			}
			if progress := logLines(stderr.String()); tt.progressed != "" && (len(progress) != 1 || !strings.Contains(progress[0], tt.progressed)) {
				t.Errorf("logged %q, want one progress line with %s", progress, tt.progressed)
			}
		})
	}
	// resume accepts the batch the rollout is paused on when it starts, and reports the accept
	// instead of the pause; the rollout goes on from there.
	t.Run("resumed", func(t *testing.T) {
		cmd, _, stderr := driverCommand()
		err := drive(cmd, fake.NewClientset(webStatefulSet(t, paused)), nil, spec, driveOptions{resume: true, output: "text"})
		if exitCode(err) == exitPaused {
			t.Errorf("resume stopped at the pause it accepts: %v", err)
		}
		var progress []string
		for _, l := range logLines(stderr.String()) {
			if strings.Contains(l, "msg=progress") {
				progress = append(progress, l)
			}
		}
		if len(progress) == 0 || !strings.Contains(progress[0], `phase=Progressing`) || !strings.Contains(progress[0], `message="batch 1 accepted; resuming"`) {
			t.Errorf("progress lines %q, want the accept first, and no pause", progress)
		}
	})
}

// TestProcessEvents: a process that serves makes one broadcaster, with its first recorder, for
// every component, and writes the Events queued as it ends.
func TestProcessEvents(t *testing.T) {
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	(&processEvents{}).close(log) // none made: nothing to write

	client := fake.NewClientset()
	events := &processEvents{}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web-0", Namespace: "shop", UID: "web-0-uid", ResourceVersion: "7"}}
	for _, component := range []string{argoStepComponent, argoTrafficComponent} {
		r, err := events.recorder(client, component, log)
		if err != nil {
			t.Fatal(err)
		}
		if err := r.Record(context.Background(), inplace.PodRef(pod), inplace.Event{Type: corev1.EventTypeNormal, Reason: inplace.EventUpdated, Message: "by " + component}); err != nil {
			t.Fatal(err)
		}
	}
	first := events.b
	if _, err := events.recorder(client, tektonComponent, log); err != nil || events.b != first {
		t.Errorf("a recorder made another broadcaster (%v)", err)
	}
	events.close(log)
	list, err := client.EventsV1().Events("shop").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var by []string
	for _, e := range list.Items {
		by = append(by, e.ReportingController+": "+e.Note)
	}
	slices.Sort(by)
	want := []string{"inplace-rollout.io/argo-step: by argo-step", "inplace-rollout.io/argo-traffic: by argo-traffic"}
	if !slices.Equal(by, want) {
		t.Errorf("Events written by the end: %q, want %q", by, want)
	}
	if logs.Len() != 0 {
		t.Errorf("logged %q, want nothing", logs.String())
	}
}
