package main

import (
	"errors"
	"fmt"
	"testing"

	"github.com/inplace-rollout/inplace-rollout/pkg/rollout"
	"github.com/inplace-rollout/inplace-rollout/pkg/workload"
)

// TestCLIErrorNamesFlags: a choice the engine names by code is said with the flag that makes it,
// in the words the CLI has always printed; the engine's own words name no flag.
func TestCLIErrorNamesFlags(t *testing.T) {
	tests := []struct {
		name    string
		err     error
		want    string
		neutral string // the engine's Error(), which must name no flag
	}{
		{"not ready",
			&rollout.InvalidError{Msg: "StatefulSet shop/web: 1 pods are not Ready (web-0); fix them first", Fix: rollout.FixAllowUnready},
			"StatefulSet shop/web: 1 pods are not Ready (web-0); fix them first, or pass --allow-unready",
			"StatefulSet shop/web: 1 pods are not Ready (web-0); fix them first, or allow the rollout to start with pods that are not Ready"},
		{"another rollout in flight",
			&rollout.InvalidError{Msg: `StatefulSet shop/web has rollout r-1 in progress to other images ({"app":"reg/app:v2"})`, Fix: rollout.FixSupersede},
			`StatefulSet shop/web has rollout r-1 in progress to other images ({"app":"reg/app:v2"}); pass --supersede to replace it, or roll it back first`,
			`StatefulSet shop/web has rollout r-1 in progress to other images ({"app":"reg/app:v2"}); supersede it with this rollout, or roll it back first`},
		{"another holder's rollout",
			&rollout.InvalidError{Msg: "StatefulSet shop/web is being rolled out by argo:shop/web (rollout r-1, Progressing, started 2026-12-03T10:00:00Z); only its holder can roll it back", Fix: rollout.FixTakeOver},
			"StatefulSet shop/web is being rolled out by argo:shop/web (rollout r-1, Progressing, started 2026-12-03T10:00:00Z); only its holder can roll it back; if that holder no longer exists (its Rollout or CustomRun was deleted), pass --take-over: rollback --take-over puts the pods back, run --supersede --take-over replaces its rollout",
			"StatefulSet shop/web is being rolled out by argo:shop/web (rollout r-1, Progressing, started 2026-12-03T10:00:00Z); only its holder can roll it back; if that holder no longer exists, take the rollout over to roll it back or replace it"},
		{"owned pods",
			&rollout.InvalidError{Msg: "pod shop/a is controlled by ReplicaSet/rs, which would recreate it from its own template on the old images; target the owning workload instead (its StatefulSet, DaemonSet or Deployment)", Fix: rollout.FixAllowOwned},
			"pod shop/a is controlled by ReplicaSet/rs, which would recreate it from its own template on the old images; target the owning workload instead (its StatefulSet, DaemonSet or Deployment), or pass --allow-owned to update such pods anyway",
			"pod shop/a is controlled by ReplicaSet/rs, which would recreate it from its own template on the old images; target the owning workload instead (its StatefulSet, DaemonSet or Deployment), or allow pods a controller owns to be updated anyway"},
		{"no Prometheus address",
			&rollout.InvalidError{Msg: "analysis needs a Prometheus address", Fix: rollout.FixPrometheusAddress},
			"analysis needs a Prometheus address: give --prometheus or prometheus.address in the analysis config",
			"analysis needs a Prometheus address: give prometheus.address in the analysis config"},
		{"wrapped: only the engine's words change",
			fmt.Errorf("spec.analysis: %w", &rollout.InvalidError{Msg: "analysis needs a Prometheus address", Fix: rollout.FixPrometheusAddress}),
			"spec.analysis: analysis needs a Prometheus address: give --prometheus or prometheus.address in the analysis config",
			"spec.analysis: analysis needs a Prometheus address: give prometheus.address in the analysis config"},
		{"no choice: as it is",
			&rollout.InvalidError{Msg: "no images: give at least one CONTAINER=IMAGE"},
			"no images: give at least one CONTAINER=IMAGE",
			"no images: give at least one CONTAINER=IMAGE"},
		{"unreadable state: the engine's words serve",
			&rollout.InvalidError{Msg: "pod shop/a: state annotation unreadable", Fix: rollout.FixStateAnnotation},
			"pod shop/a: state annotation unreadable; restore it or remove it, then run again. Nothing was changed",
			"pod shop/a: state annotation unreadable; restore it or remove it, then run again. Nothing was changed"},
		{"not bad input: as it is", errors.New("connection refused"), "connection refused", "connection refused"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.err.Error(); got != tt.neutral {
				t.Errorf("engine error:\n%s\nwant:\n%s", got, tt.neutral)
			}
			got := cliError(tt.err)
			if got.Error() != tt.want {
				t.Errorf("CLI error:\n%s\nwant:\n%s", got, tt.want)
			}
			var inv *rollout.InvalidError
			if errors.As(tt.err, &inv) != errors.As(got, &inv) {
				t.Errorf("CLI error %T hides the engine's %T", got, tt.err)
			}
		})
	}
}

// TestPlanErrorSaysWhatARunWouldDo: plan says an unreadable state is what a run would refuse.
func TestPlanErrorSaysWhatARunWouldDo(t *testing.T) {
	err := planError(&rollout.InvalidError{Msg: "pod shop/a: state annotation unreadable", Fix: rollout.FixStateAnnotation})
	if want := "pod shop/a: state annotation unreadable; a run would refuse to start: fix the annotation or remove it"; err.Error() != want {
		t.Errorf("plan error:\n%s\nwant:\n%s", err, want)
	}
}

// TestCLIStatusNamesCommands: a status that leaves a person a choice gets the commands that make
// it; any other is left as the engine said it.
func TestCLIStatusNamesCommands(t *testing.T) {
	sts := workload.Ref{Kind: workload.StatefulSet, Namespace: "shop", Name: "web"}
	pods := workload.Ref{Kind: workload.Pods, Namespace: "shop", Selector: "app=web"}
	images := map[string]string{"app": "reg/app:v2"}
	tests := []struct {
		name   string
		st     rollout.Status
		target workload.Ref
		want   string
	}{
		{"paused",
			rollout.Status{Phase: rollout.PhasePaused, Reason: rollout.ReasonAnalysisInconclusive, Message: "paused: analysis of batch 1: Inconclusive: traffic"},
			sts,
			"paused: analysis of batch 1: Inconclusive: traffic. To accept the batch and go on, run `inplace-rollout resume` with the same arguments as `run`; to undo, `inplace-rollout rollback --target statefulset/web -n shop`"},
		{"paused, label-selected pods",
			rollout.Status{Phase: rollout.PhasePaused, Reason: rollout.ReasonAnalysisInconclusive, Message: "paused: x"},
			pods,
			"paused: x. To accept the batch and go on, run `inplace-rollout resume` with the same arguments as `run`; to undo, `inplace-rollout rollback --target pods --selector app=web -n shop`"},
		{"halted on a changed template",
			rollout.Status{Phase: rollout.PhaseFailed, Reason: rollout.ReasonTemplateChanged, PreviousImages: map[string]string{"app": "reg/app:v1"},
				Message: "TemplateChanged: someone else changed it. Nothing was rolled back (1/2 pods run the rollout's images) and StatefulSet shop/web stays frozen until you decide"},
			sts,
			"TemplateChanged: someone else changed it. Nothing was rolled back (1/2 pods run the rollout's images) and StatefulSet shop/web stays frozen until you decide: " +
				"to keep that change, `inplace-rollout rollback --target statefulset/web -n shop` puts the pods back on {\"app\":\"reg/app:v1\"} and leaves the template as it is, for the workload's own update strategy to apply; " +
				"add --restore-template to put {\"app\":\"reg/app:v1\"} back in the template too; or put {\"app\":\"reg/app:v2\"} back in the template and run the same command again to finish this rollout"},
		{"holding",
			rollout.Status{Phase: rollout.PhaseHolding, Message: "holding at 2/4 pods updated; StatefulSet shop/web stays held until the rollout is asked to go further or is rolled back"},
			sts,
			"holding at 2/4 pods updated; StatefulSet shop/web stays held until the rollout is asked to go further or is rolled back. " +
				"To go on, run the same command again without --up-to (or with a higher one); to undo, `inplace-rollout rollback --target statefulset/web -n shop`"},
		{"rolled back: as it is",
			rollout.Status{Phase: rollout.PhaseRolledBack, Reason: rollout.ReasonAnalysisInconclusive, Message: "rolled back 2 pods"},
			sts, "rolled back 2 pods"},
		{"progressing: as it is",
			rollout.Status{Phase: rollout.PhaseProgressing, Message: "batch 1/2: 0/2 pods updated, 1 updating"},
			sts, "batch 1/2: 0/2 pods updated, 1 updating"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := cliStatus(tt.st, tt.target, images)
			if got.Message != tt.want {
				t.Errorf("message:\n%s\nwant:\n%s", got.Message, tt.want)
			}
			if got.Phase != tt.st.Phase || got.Reason != tt.st.Reason {
				t.Errorf("phase %s reason %s, want %s %s unchanged", got.Phase, got.Reason, tt.st.Phase, tt.st.Reason)
			}
		})
	}
}
