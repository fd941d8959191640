package main

import (
	"github.com/inplace-rollout/inplace-rollout/pkg/apis/v1alpha1"
	"github.com/inplace-rollout/inplace-rollout/pkg/inplace"
	"github.com/inplace-rollout/inplace-rollout/pkg/rollout"
)

// hooks is the spec's hooks field as --hooks gives it (YAML or JSON), decoded as the spec file's
// is and checked, with the engine's hooks it converts to; nil and nil when --hooks is not given
// or empty. Checked here, so that an error names the flag rather than a field of a file.
func (f *rolloutFlags) hooks() (*v1alpha1.Hooks, *inplace.Hooks, error) {
	if f.hooksText == "" {
		return nil, nil, nil
	}
	var doc v1alpha1.Hooks
	if err := v1alpha1.DecodeInto([]byte(f.hooksText), &doc); err != nil {
		return nil, nil, badInput("--hooks: %v", err)
	}
	hooks, err := rollout.HooksFromV1alpha1("hooks", &doc)
	if err != nil {
		return nil, nil, badInput("--hooks: %v", err)
	}
	return &doc, hooks, nil
}
