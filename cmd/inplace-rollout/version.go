package main

import (
	"fmt"
	"os"
	"runtime"

	"github.com/spf13/cobra"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

// imageRepo is the repository of this project's container image, whose tag is the version.
const imageRepo = "ghcr.io/inplace-rollout/inplace-rollout"

// ownImage is this version's container image: it holds the puller binary pre-pull runs.
func ownImage() string { return imageRepo + ":" + version }

// pullerImageEnv overrides ownImage as the default puller image of every command, and is the only
// way to set it for the Argo plugins, which Argo starts with its own environment: a mirror of
// the image, say, or the copy `make cluster-up` pushes into the local registry.
const pullerImageEnv = "INPLACE_ROLLOUT_PULLER_IMAGE"

// defaultPullerImage is the image holding the puller binary for pre-pull when no --puller-image
// is given: $INPLACE_ROLLOUT_PULLER_IMAGE, else this version's image.
func defaultPullerImage() string {
	if img := os.Getenv(pullerImageEnv); img != "" {
		return img
	}
	return ownImage()
}

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
