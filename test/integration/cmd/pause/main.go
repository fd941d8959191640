// Command pause is the sandbox ("pause") image's program on the real node: it holds the pod's
// namespaces by doing nothing until SIGTERM or SIGINT, then exits 0. As the pod's PID 1 when the
// pod shares its process namespace, it also reaps the zombies that orphans leave behind.
//
// It is built static (CGO_ENABLED=0) with the standard library only.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGCHLD)
	os.Stdout.WriteString("pause: waiting for SIGTERM\n")
	for sig := range sigs {
		if sig == syscall.SIGCHLD {
			reap()
			continue
		}
		os.Exit(0)
	}
}

// reap collects every exited child without blocking: several exits can arrive as one SIGCHLD.
func reap() {
	for {
		var status syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &status, syscall.WNOHANG, nil)
		if err == syscall.EINTR {
			continue
		}
		if pid <= 0 || err != nil {
			return
		}
	}
}
