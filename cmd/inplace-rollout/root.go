package main

import (
	"errors"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"
)

// Exit codes of the command (DESIGN.md, "Drivers").
const (
	exitSucceeded          = 0
	exitFailedRolledBack   = 1
	exitBadInput           = 2
	exitRollbackIncomplete = 3
	exitPaused             = 4
	// exitSuperseded: another run of the same holder replaced this one's rollout and carries
	// its pods on.
	exitSuperseded = 5
	// exitAPIUnavailable: the API server kept failing or could not be reached; the rollout is
	// left resumable.
	exitAPIUnavailable = 6
	// exitAPIRefused: the API server refused a request before anything changed (forbidden,
	// unauthorized, invalid, denied by admission), which retrying does not change: apart from
	// bad input, which is what the command was given.
	exitAPIRefused = 7
)

// exitError carries the exit code a command ends with.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

// exitCode maps an error returned by a command to the process exit code. Errors without a code
// are bad input: cobra's own flag and argument errors are of that kind.
func exitCode(err error) int {
	var e *exitError
	if errors.As(err, &e) {
		return e.code
	}
	return exitBadInput
}

func newRootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:   "inplace-rollout",
		Short: "Update container images of live pods in place, in batches, with automatic rollback",
		Long: `inplace-rollout replaces the container images of the live pods of a StatefulSet,
DaemonSet or Deployment without recreating them: each pod keeps its UID, IP, node
and volumes. Pods are updated in batches; every batch can be gated on Prometheus
golden signals, and a failed batch puts every touched pod back on the exact image
it ran before.

Exit codes: 0 succeeded, 1 failed and rolled back, 2 bad input (nothing changed), 3 a
person must look (rollback incomplete, a pod's state annotation unreadable, or a request
the API server refused mid-rollout, which is left in flight: fix the cause, then run
again or roll back), 4 paused by an inconclusive analysis (resume or roll back), 5
superseded by another run (which carries the pods on), 6 the API server kept failing or
could not be reached (run again to resume), 7 the API server refused a request before
anything changed (forbidden, invalid, denied by admission), 130 stopped by Ctrl-C or
SIGTERM (run again to resume).`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	// Installed as kubectl-inplace_rollout (krew), kubectl runs it as `kubectl inplace-rollout`:
	// its help and completion say so.
	if strings.HasPrefix(filepath.Base(os.Args[0]), "kubectl-") {
		root.Annotations = map[string]string{cobra.CommandDisplayNameAnnotation: "kubectl inplace-rollout"}
	}
	addProfileFlags(root)
	root.AddCommand(newRunCommand(), newResumeCommand(), newStatusCommand(), newRollbackCommand(), newPlanCommand(), newGateControllerCommand(), newTektonControllerCommand(), newControllerCommand(), newVersionCommand())
	return root
}
