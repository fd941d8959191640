package main

import (
	"fmt"
	"runtime"

	"github.com/spf13/cobra"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

// imageRepo is the repository of this project's container image, whose tag is the version.
const imageRepo = "ghcr.io/inplace-rollout/inplace-rollout"

// ownImage is this version's container image: it holds the puller binary pre-pull runs.
func ownImage() string { return imageRepo + ":" + version }

func newVersionCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version of inplace-rollout",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, err := fmt.Fprintf(cmd.OutOrStdout(), "inplace-rollout %s (%s, %s/%s)\n", version, runtime.Version(), runtime.GOOS, runtime.GOARCH)
			return err
		},
	}
}
