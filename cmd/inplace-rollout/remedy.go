package main

import (
	"encoding/json"
	"fmt"
	"maps"
	"strings"

	"github.com/inplace-rollout/inplace-rollout/pkg/rollout"
)

// The engine names a choice by a code and says it in words that name no driver; the CLI says it
// with the flag that makes it. Each ends the engine's message.
var fixFlags = map[rollout.Fix]string{
	rollout.FixAllowUnready:      ", or pass --allow-unready",
	rollout.FixSupersede:         "; pass --supersede to replace it, or roll it back first",
	rollout.FixAllowOwned:        ", or pass --allow-owned to update such pods anyway",
	rollout.FixPrometheusAddress: ": give --prometheus or prometheus.address in the analysis config",
	rollout.FixPinNever:          ", or pass --pin-digests never to take the pods on the tag as done, whatever content it names",
	rollout.FixTakeOver:          "; if that holder no longer exists (its Rollout or CustomRun was deleted), pass --take-over: rollback --take-over puts the pods back, run --supersede --take-over replaces its rollout",
}

// remedied is an engine error as the CLI says it; errors.As still finds the engine's error.
type remedied struct {
	msg string
	err error
}

func (e *remedied) Error() string { return e.msg }
func (e *remedied) Unwrap() error { return e.err }

// cliError says an engine error the CLI's way: a choice the engine names by code becomes the
// flag that makes it. Other errors are returned as they are.
func cliError(err error) error {
	return phraseInvalid(err, fixFlags)
}

// planError is cliError for plan, which writes nothing: an unreadable state annotation is what
// a run would refuse.
func planError(err error) error {
	phrases := maps.Clone(fixFlags)
	phrases[rollout.FixStateAnnotation] = "; a run would refuse to start: fix the annotation or remove it"
	return phraseInvalid(err, phrases)
}

func phraseInvalid(err error, phrases map[rollout.Fix]string) error {
	o := rollout.OutcomeOf(rollout.Status{}, err)
	if o.Kind != rollout.BadInput {
		return err
	}
	phrase, ok := phrases[o.Fix]
	if !ok {
		return err
	}
	// A caller may have wrapped the engine's error: only its own words (the problem, then the
	// choice in neutral words) change.
	return &remedied{msg: strings.Replace(err.Error(), o.Problem+o.Fix.Choice(), o.Problem+phrase, 1), err: err}
}

// cliStatus adds to a status that leaves a person a choice the commands that make it. images are
// the images of the command's rollout.
func cliStatus(st rollout.Status, target rollout.Ref, images map[string]string) rollout.Status {
	switch {
	case st.Phase == rollout.PhasePaused && st.Reason == rollout.ReasonAnalysisInconclusive:
		st.Message += fmt.Sprintf(". To accept the batch and go on, run `inplace-rollout resume` with the same arguments as `run`; to undo, `inplace-rollout rollback --target %s`",
			targetArg(target))
	case st.Phase == rollout.PhaseFailed && st.Reason == rollout.ReasonTemplateChanged:
		prev := jsonOf(st.PreviousImages)
		st.Message += fmt.Sprintf(": to keep that change, `inplace-rollout rollback --target %s` puts the pods back on %s and leaves the template as it is, for the workload's own update strategy to apply; "+
			"add --restore-template to put %s back in the template too; or put %s back in the template and run the same command again to finish this rollout",
			targetArg(target), prev, prev, jsonOf(images))
	case st.Phase == rollout.PhaseHolding:
		st.Message += fmt.Sprintf(". To go on, run the same command again without --up-to (or with a higher one); to undo, `inplace-rollout rollback --target %s`", targetArg(target))
	}
	return st
}

// targetArg is the --target (and -n) that names r on the command line.
func targetArg(r rollout.Ref) string {
	if r.Kind == rollout.Pods {
		return fmt.Sprintf("pods --selector %s -n %s", r.Selector, r.Namespace)
	}
	return fmt.Sprintf("%s/%s -n %s", strings.ToLower(string(r.Kind)), r.Name, r.Namespace)
}

// jsonOf is images as the engine writes them in its messages: JSON, keys sorted.
func jsonOf(images map[string]string) string {
	data, err := json.Marshal(images)
	if err != nil {
		panic(fmt.Sprintf("encoding images: %v", err))
	}
	return string(data)
}
