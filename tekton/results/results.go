// Package results turns a rollout's status into Tekton results: the files the CLI's
// --results-dir writes, which the catalog Task declares, one per result.
package results

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"github.com/inplace-rollout/inplace-rollout/pkg/rollout"
)

// The results' names.
const (
	Phase       = "phase"
	UpdatedPods = "updated-pods"
	RolledBack  = "rolled-back"
	Message     = "message"
)

// Names lists every result, in the order the Task declares them.
var Names = []string{Phase, UpdatedPods, RolledBack, Message}

// Values are the results of a status, by name.
func Values(st rollout.Status) map[string]string {
	return map[string]string{
		Phase:       string(st.Phase),
		UpdatedPods: strconv.Itoa(st.Updated),
		RolledBack:  strconv.Itoa(st.RolledBack),
		Message:     st.Message,
	}
}

// Write writes each result to a file of its name in dir, with no trailing newline, as Tekton
// reads /tekton/results.
func Write(dir string, st rollout.Status) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("creating results directory %s: %w", dir, err)
	}
	for name, value := range Values(st) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(value), 0o644); err != nil {
			return fmt.Errorf("writing result %s: %w", name, err)
		}
	}
	return nil
}
