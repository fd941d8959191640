package main

import (
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"

	"github.com/spf13/cobra"
)

// profileFlags are kubectl's hidden --profile and --profile-output: where a command's time and
// memory go, for the benchmark report and for anyone chasing a slow rollout.
type profileFlags struct {
	kind, output string
	file         *os.File
}

func addProfileFlags(root *cobra.Command) {
	p := &profileFlags{}
	root.PersistentFlags().StringVar(&p.kind, "profile", "none", "profile to write: none, cpu or heap")
	root.PersistentFlags().StringVar(&p.output, "profile-output", "profile.pprof", "file the profile is written to")
	_ = root.PersistentFlags().MarkHidden("profile")
	_ = root.PersistentFlags().MarkHidden("profile-output")
	root.PersistentPreRunE = func(*cobra.Command, []string) error { return p.start() }
	root.PersistentPostRunE = func(*cobra.Command, []string) error { return p.stop() }
}

func (p *profileFlags) start() error {
	switch p.kind {
	case "none", "heap":
		return nil
	case "cpu":
		f, err := os.Create(p.output)
		if err != nil {
			return badInput("--profile-output: %v", err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			f.Close()
			return badInput("--profile cpu: %v", err)
		}
		p.file = f
		return nil
	}
	return badInput("--profile %q: want none, cpu or heap", p.kind)
}

// stop writes the profile. It runs after a command that succeeded; a failed command leaves a
// CPU profile unfinished and writes no heap profile.
func (p *profileFlags) stop() error {
	switch p.kind {
	case "cpu":
		pprof.StopCPUProfile()
		if err := p.file.Close(); err != nil {
			return fmt.Errorf("writing CPU profile %s: %w", p.output, err)
		}
	case "heap":
		f, err := os.Create(p.output)
		if err != nil {
			return fmt.Errorf("writing heap profile: %w", err)
		}
		defer f.Close()
		runtime.GC()
		if err := pprof.Lookup("heap").WriteTo(f, 0); err != nil {
			return fmt.Errorf("writing heap profile %s: %w", p.output, err)
		}
	}
	return nil
}
