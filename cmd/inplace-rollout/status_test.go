package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/inplace-rollout/inplace-rollout/pkg/inplace"
	"github.com/inplace-rollout/inplace-rollout/pkg/rollout"
)

// statusPod is a two-container pod running app and sidecar, with a state annotation when st is
// not nil.
func statusPod(name, app string, st *inplace.State) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "shop"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{
			{Name: "app", Image: app},
			{Name: "sidecar", Image: "reg/sidecar:1"},
		}},
		Status: corev1.PodStatus{Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}},
	}
	if st != nil {
		data, err := json.Marshal(st)
		if err != nil {
			panic(err)
		}
		p.Annotations = map[string]string{inplace.StateAnnotation: string(data)}
	}
	return p
}

func TestStatusRows(t *testing.T) {
	lock := &rollout.Record{RolloutID: "new-2", Superseded: []string{"mid-1"}, Images: map[string]string{"app": "reg/app:v3"}, Phase: rollout.PhaseProgressing}
	// The pods are reported at the instant their states were written: an Updating one is within
	// its progress deadline.
	at := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	state := func(id string, stage inplace.Stage) *inplace.State {
		return &inplace.State{RolloutID: id, Stage: stage, StageAt: at, Containers: []inplace.ContainerState{{Name: "app", BeforeImage: "reg/app:v1", AfterImage: "reg/app:v2"}}}
	}
	tests := []struct {
		name string
		pod  *corev1.Pod
		lock *rollout.Record
		// want are the pod's rows, fields separated by single spaces.
		want []string
	}{
		{"untouched pod: the rollout's containers, bare images",
			statusPod("web-0", "reg/app:v1", nil), lock,
			[]string{"web-0 true - app - reg/app:v1"}},
		{"no rollout recorded: every container",
			statusPod("web-0", "reg/app:v1", nil), nil,
			[]string{"web-0 true - app - reg/app:v1", "sidecar - reg/sidecar:1"}},
		{"this rollout's pod",
			statusPod("web-1", "reg/app:v3", state("new-2", inplace.StageUpdated)), lock,
			[]string{"web-1 true Updated app reg/app:v1 reg/app:v3"}},
		{"a superseded rollout's pod is still this rollout's",
			statusPod("web-1", "reg/app:v2", state("mid-1", inplace.StageUpdating)), lock,
			[]string{"web-1 true Updating app reg/app:v1 reg/app:v2"}},
		{"an earlier rollout's pod is not shown under this one",
			statusPod("web-2", "reg/app:v1", state("old-0", inplace.StageRolledBack)), lock,
			[]string{"web-2 true - app - reg/app:v1 last changed by an earlier rollout, old-0 (RolledBack)"}},
		{"an unknown stage is flagged, saying why the state is not read",
			statusPod("web-3", "reg/app:v2", state("new-2", "Bogus")), lock,
			[]string{`web-3 true - app - reg/app:v2 pod shop/web-3: annotation inplace-rollout.io/state is not a state this version writes: stage "Bogus" is none of Preparing, PreUpdateHook, Draining, Resizing, Updating, PostUpdateHook, Updated, Failed, RollingBack, RolledBack`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out bytes.Buffer
			r := rollout.Report{Target: "StatefulSet shop/web", Lock: tt.lock, Pods: []rollout.PodReport{rollout.PodRow(tt.pod, tt.lock, at)}}
			if err := printReport(&out, r); err != nil {
				t.Fatal(err)
			}
			lines := strings.Split(strings.TrimSpace(out.String()), "\n")
			header := 0
			for i, l := range lines {
				if strings.HasPrefix(l, "POD") {
					header = i
				}
			}
			var got []string
			for _, l := range lines[header+1:] {
				got = append(got, strings.Join(strings.Fields(l), " "))
			}
			if strings.Join(got, "\n") != strings.Join(tt.want, "\n") {
				t.Errorf("rows:\n%s\nwant:\n%s\nfull output:\n%s", strings.Join(got, "\n"), strings.Join(tt.want, "\n"), out.String())
			}
		})
	}
}

// TestWatchPrintsWhatChanged: `status --watch` prints the whole report first, then nothing while
// it stays the same, then in text the rollout's lines when they changed and the rows of the pods
// that changed; in json and yaml the whole report again, yaml's documents separated by "---".
func TestWatchPrintsWhatChanged(t *testing.T) {
	at := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	lock := func(phase rollout.Phase) *rollout.Record {
		return &rollout.Record{RolloutID: "r-1", Holder: "cli", Images: map[string]string{"app": "reg/app:v2"}, Phase: phase}
	}
	updating := &inplace.State{RolloutID: "r-1", Stage: inplace.StageUpdating, StageAt: at,
		Containers: []inplace.ContainerState{{Name: "app", BeforeImage: "reg/app:v1", AfterImage: "reg/app:v2"}}}
	report := func(l *rollout.Record, pods ...*corev1.Pod) rollout.Report {
		r := rollout.Report{Target: "StatefulSet shop/web", Lock: l}
		for _, p := range pods {
			r.Pods = append(r.Pods, rollout.PodRow(p, l, at))
		}
		return r
	}
	reports := []rollout.Report{
		report(lock(rollout.PhaseProgressing), statusPod("web-1", "reg/app:v1", nil), statusPod("web-0", "reg/app:v1", nil)),
		report(lock(rollout.PhaseProgressing), statusPod("web-1", "reg/app:v1", nil), statusPod("web-0", "reg/app:v1", nil)),
		report(lock(rollout.PhaseProgressing), statusPod("web-1", "reg/app:v2", updating), statusPod("web-0", "reg/app:v1", nil)),
		report(lock(rollout.PhaseSucceeded), statusPod("web-1", "reg/app:v2", updating), statusPod("web-0", "reg/app:v1", nil)),
	}
	tests := []struct {
		format string
		// want is what each report adds to the output, fields separated by single spaces.
		want []string
	}{
		{outputText, []string{
			"StatefulSet shop/web\nrollout r-1 by cli: Progressing\nimages app=reg/app:v2, previously\nPOD READY STAGE CONTAINER BEFORE NOW REASON\nweb-1 true - app - reg/app:v1\nweb-0 true - app - reg/app:v1",
			"",
			"web-1 true Updating app reg/app:v1 reg/app:v2",
			"StatefulSet shop/web\nrollout r-1 by cli: Succeeded\nimages app=reg/app:v2, previously",
		}},
		// A document's first line: yaml's keys come sorted.
		{outputYAML, []string{"pods:", "", "---", "---"}},
		{outputJSON, []string{"{", "", "{", "{"}},
	}
	for _, tt := range tests {
		t.Run(tt.format, func(t *testing.T) {
			var last *reportText
			for i, r := range reports {
				var out bytes.Buffer
				if err := printChange(&out, tt.format, r, &last); err != nil {
					t.Fatal(err)
				}
				var lines []string
				for l := range strings.SplitSeq(strings.TrimSpace(out.String()), "\n") {
					lines = append(lines, strings.Join(strings.Fields(l), " "))
				}
				got := strings.Join(lines, "\n")
				if tt.format != outputText && tt.want[i] != "" {
					// A document: its start is enough, and that it is a whole report.
					got = strings.Join(lines[:min(len(lines), strings.Count(tt.want[i], "\n")+1)], "\n")
					if !strings.Contains(out.String(), "web-0") {
						t.Errorf("report %d: not the whole report:\n%s", i, out.String())
					}
				}
				if got != tt.want[i] {
					t.Errorf("report %d printed:\n%s\nwant:\n%s", i, got, tt.want[i])
				}
			}
		})
	}
}
