package images

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// LocalApp is the app binary running on the host and listening on loopback, as the image for
// its tag would run it: for tests of the app and of what sends it traffic, with no node.
type LocalApp struct {
	// Addr is the HOST:PORT it listens on (127.0.0.1 and a free port).
	Addr string

	cmd    *exec.Cmd
	exited chan struct{} // closed once Wait returned
	err    error         // Wait's, once exited is closed

	mu  sync.Mutex
	log strings.Builder
}

// StartApp runs the app binary with APP_TAG=tag, listening on 127.0.0.1 at a free port, and
// returns once it listens. env adds variables (APP_READY_DELAY=1s, ...). The process gets
// SIGKILL when ctx ends; Stop ends it gracefully.
func (p *Programs) StartApp(ctx context.Context, tag string, env ...string) (*LocalApp, error) {
	cmd := exec.CommandContext(ctx, p.App)
	// The caller's own APP_* variables would change what the tag alone should decide.
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "APP_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, "APP_TAG="+tag, "APP_LISTEN=127.0.0.1:0")
	cmd.Env = append(cmd.Env, env...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, fmt.Errorf("starting the app %s: %w", tag, err)
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting the app %s: %w", tag, err)
	}
	a := &LocalApp{cmd: cmd, exited: make(chan struct{})}
	listening := make(chan string, 1)
	logged := make(chan struct{})
	go func() {
		defer close(logged)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			line := sc.Text()
			a.mu.Lock()
			a.log.WriteString(line + "\n")
			a.mu.Unlock()
			if _, addr, ok := strings.Cut(line, " listening on "); ok {
				select {
				case listening <- addr:
				default:
				}
			}
		}
	}()
	go func() {
		// Wait closes the pipe, so the log is read to its end first.
		<-logged
		a.err = cmd.Wait()
		close(a.exited)
	}()
	select {
	case a.Addr = <-listening:
		return a, nil
	case <-a.exited:
		// The line and the exit may both be there: an app that listened was started.
		select {
		case a.Addr = <-listening:
			return a, nil
		default:
		}
		return nil, fmt.Errorf("the app %s exited before it listened (%v):\n%s", tag, a.err, a.Log())
	case <-time.After(10 * time.Second):
		_ = cmd.Process.Kill()
		<-a.exited
		return nil, fmt.Errorf("the app %s did not listen within 10 s:\n%s", tag, a.Log())
	}
}

// Log is what the app wrote on stderr so far.
func (a *LocalApp) Log() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.log.String()
}

// Signal sends sig to the app.
func (a *LocalApp) Signal(sig os.Signal) error {
	if err := a.cmd.Process.Signal(sig); err != nil {
		return fmt.Errorf("signalling the app: %w", err)
	}
	return nil
}

// Wait waits up to timeout for the app to exit and returns its exit code (-1 when a signal
// killed it).
func (a *LocalApp) Wait(timeout time.Duration) (int, error) {
	select {
	case <-a.exited:
	case <-time.After(timeout):
		return 0, fmt.Errorf("the app on %s still runs after %s", a.Addr, timeout)
	}
	return a.exitCode()
}

// exitCode is the code of an app that exited.
func (a *LocalApp) exitCode() (int, error) {
	var exit *exec.ExitError
	if a.err != nil && !errors.As(a.err, &exit) {
		return 0, fmt.Errorf("waiting for the app: %w", a.err)
	}
	return a.cmd.ProcessState.ExitCode(), nil
}

// Stop sends SIGTERM and waits for the exit, killing the app if it takes over 5 s; an app that
// already exited is left as it is. It returns the exit code.
func (a *LocalApp) Stop() (int, error) {
	select {
	case <-a.exited:
		return a.exitCode()
	default:
	}
	if err := a.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return 0, err
	}
	code, err := a.Wait(5 * time.Second)
	if err != nil {
		_ = a.cmd.Process.Kill()
		<-a.exited
	}
	return code, err
}
