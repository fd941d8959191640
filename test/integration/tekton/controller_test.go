package tekton_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"
)

// ourController is the inplace-rollout tekton-controller process.
type ourController struct {
	dir, health string
	cmd         *exec.Cmd
	done        chan struct{}
}

// startOurController starts the controller with the admin kubeconfig and waits until it has
// listed the CustomRuns.
func startOurController(ctx context.Context, dir string) (*ourController, error) {
	c := &ourController{dir: dir}
	return c, c.start(ctx)
}

func (c *ourController) start(ctx context.Context) error {
	lis, err := freePort()
	if err != nil {
		return err
	}
	c.health = "127.0.0.1:" + strconv.Itoa(lis)
	log, err := os.OpenFile(filepath.Join(c.dir, "tekton-controller.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	c.cmd = exec.Command(cli, "tekton-controller", "--kubeconfig", env.Kubeconfig, "--health-addr", c.health, "--leader-elect=false")
	c.cmd.Stdout, c.cmd.Stderr = log, log
	if err := c.cmd.Start(); err != nil {
		return err
	}
	c.done = make(chan struct{})
	go func() { _ = c.cmd.Wait(); close(c.done); log.Close() }()
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		select {
		case <-c.done:
			return errors.New("the controller exited at start-up; see " + log.Name())
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
		if resp, err := http.Get("http://" + c.health + "/readyz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
	}
	return fmt.Errorf("the controller was not ready within a minute")
}

// kill stops the controller at once, as a crash would.
func (c *ourController) kill() {
	_ = c.cmd.Process.Signal(syscall.SIGKILL)
	<-c.done
}

func (c *ourController) stop() {
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.done:
	case <-time.After(10 * time.Second):
		c.kill()
	}
}

func freePort() (int, error) {
	l, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
