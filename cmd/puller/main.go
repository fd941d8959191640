// Command puller is the command of inplace-rollout's puller pods. Such a pod runs one container
// per image to pull onto a node; the image itself need not have a shell or any entrypoint, so the
// command is this binary, which an init container copies from inplace-rollout's own image into
// a shared emptyDir. Once the container starts, the image is on the node: the binary's job is
// then done, and it exits.
//
//	puller                 exit 0 at once
//	puller install DEST    copy this executable to DEST (mode 0755) and exit 0
//
// It is built static and small, with no dependencies beyond the standard library.
package main

import (
	"io"
	"os"
)

const usage = "usage: puller [install DEST]"

func main() {
	os.Exit(run(os.Args[1:], os.Stderr))
}

// run carries out the command line and returns the exit code: 0 done, 1 failed, 2 misused.
func run(args []string, stderr io.Writer) int {
	switch {
	case len(args) == 0:
		return 0
	case len(args) == 2 && args[0] == "install" && args[1] != "":
		self, err := os.Executable()
		if err == nil {
			err = install(self, args[1])
		}
		if err != nil {
			_, _ = io.WriteString(stderr, "puller: "+err.Error()+"\n")
			return 1
		}
		return 0
	default:
		_, _ = io.WriteString(stderr, usage+"\n")
		return 2
	}
}

// install copies the file src to dest with mode 0755, through a temporary file beside dest so
// that dest is never seen half written.
func install(src, dest string) error {
	in, err := os.Open(src)
	if err != nil {
		return wrap("opening this executable "+src, err)
	}
	defer in.Close()
	tmp := dest + ".tmp"
	out, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o755)
	if err != nil {
		return wrap("creating "+tmp, err)
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		os.Remove(tmp)
		return wrap("copying "+src+" to "+tmp, err)
	}
	if err := out.Close(); err != nil {
		os.Remove(tmp)
		return wrap("writing "+tmp, err)
	}
	// The umask may have narrowed the mode OpenFile asked for.
	if err := os.Chmod(tmp, 0o755); err != nil {
		os.Remove(tmp)
		return wrap("making "+tmp+" executable", err)
	}
	if err := os.Rename(tmp, dest); err != nil {
		os.Remove(tmp)
		return wrap("moving "+tmp+" to "+dest, err)
	}
	return nil
}

// wrapped is an error with what was being done; the binary avoids fmt to stay small.
type wrapped struct {
	doing string
	err   error
}

func (w *wrapped) Error() string { return w.doing + ": " + w.err.Error() }
func (w *wrapped) Unwrap() error { return w.err }

func wrap(doing string, err error) error { return &wrapped{doing, err} }
