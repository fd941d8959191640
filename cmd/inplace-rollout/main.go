package main

import (
	"fmt"
	"os"
)

func main() {
	if servePlugin() {
		return
	}
	if err := newRootCommand().Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(exitCode(err))
	}
}
