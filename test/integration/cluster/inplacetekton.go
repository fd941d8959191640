package cluster

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// inplace-rollout tekton-controller, our CustomRun controller, as the tests and
// `make cluster-up TEKTON=1` run it: config/tekton without its Deployment, the controller a
// process on this machine.
const (
	// InplaceTektonNamespace holds the controller's ServiceAccount and its leader-election Lease.
	InplaceTektonNamespace = "inplace-rollout-system"
	// InplaceTektonServiceAccount is the controller's ServiceAccount in config/tekton.
	InplaceTektonServiceAccount = "inplace-rollout-tekton-controller"
	// InplaceTektonUser is the user the controller is authenticated as.
	InplaceTektonUser = "system:serviceaccount:" + InplaceTektonNamespace + ":" + InplaceTektonServiceAccount
	// inplaceTektonProcess names the controller's log and PID files.
	inplaceTektonProcess = "inplace-rollout-tekton-controller"
)

// inplaceTektonFiles are the files of config/tekton the harness creates, in order: everything
// but the Deployment, whose part the process plays.
var inplaceTektonFiles = []string{
	"namespace.yaml",
	"serviceaccount.yaml",
	"clusterrole.yaml",
	"clusterrolebinding.yaml",
	"role.yaml",
	"rolebinding.yaml",
}

// InplaceTekton is the inplace-rollout tekton-controller StartInplaceTekton started.
// Cluster.Stop stops it.
type InplaceTekton struct {
	// Binary is the inplace-rollout binary it runs.
	Binary string
	// Dir is its working directory, holding its kubeconfig.
	Dir string
	// Kubeconfig authenticates as InplaceTektonUser, bound only to config/tekton's roles.
	Kubeconfig string
	// HealthURL is the base URL of its /healthz and /readyz, on loopback.
	HealthURL string
	// LogPath is the controller's log, across restarts.
	LogPath string

	c    *Cluster
	proc *process
}

// InstallInplaceTekton creates the InPlaceRollout CRD and, from config/tekton, the controller's
// namespace, ServiceAccount, roles and bindings: not its Deployment. What exists already is
// kept, so a test may call it after StartInplaceTekton did.
func (c *Cluster) InstallInplaceTekton(ctx context.Context) error {
	root, err := RepoRoot()
	if err != nil {
		return err
	}
	config := filepath.Join(root, "config", "tekton")
	if err := c.applyCRDs(ctx, "InPlaceRollout", filepath.Join(root, "config", "crd", "inplacerollouts.yaml")); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	for _, f := range inplaceTektonFiles {
		if err := c.createManifests(ctx, filepath.Join(config, f)); err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
	}
	return nil
}

// StartInplaceTekton installs config/tekton (InstallInplaceTekton), then starts
// `binary tekton-controller` as the controller's ServiceAccount, with leader election in
// InplaceTektonNamespace and its health server on a free loopback port, and waits until it is
// ready (/readyz: it has listed the CustomRuns). Tekton's CRDs must be installed: StartTekton
// first.
func (c *Cluster) StartInplaceTekton(ctx context.Context, binary string) (*InplaceTekton, error) {
	bin, err := filepath.Abs(binary)
	if err != nil {
		return nil, fmt.Errorf("resolving the inplace-rollout binary %q: %w", binary, err)
	}
	if _, err := os.Stat(bin); err != nil {
		return nil, fmt.Errorf("the inplace-rollout binary: %w", err)
	}
	p := &InplaceTekton{c: c, Binary: bin, Dir: filepath.Join(c.Dir, "inplace-rollout-tekton"), LogPath: filepath.Join(c.Dir, inplaceTektonProcess+".log")}
	if err := os.MkdirAll(p.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("creating %s: %w", p.Dir, err)
	}
	if err := c.InstallInplaceTekton(ctx); err != nil {
		return nil, err
	}
	if p.Kubeconfig, err = c.writeServiceAccountKubeconfig(ctx, InplaceTektonNamespace, InplaceTektonServiceAccount, p.Dir); err != nil {
		return nil, err
	}
	if err := p.start(); err != nil {
		return nil, err
	}
	c.InplaceTekton = p
	return p, nil
}

// start starts the controller with its health server on a free port and waits until /readyz
// answers 200.
func (p *InplaceTekton) start() error {
	return p.c.onFreePorts(inplaceTektonProcess, 1, func(ports []int) error {
		addr := "127.0.0.1:" + strconv.Itoa(ports[0])
		cmd := exec.Command(p.Binary, "tekton-controller",
			"--kubeconfig", p.Kubeconfig,
			"--health-addr", addr,
			"--leader-election-namespace", InplaceTektonNamespace,
		)
		// As the Deployment's downward API sets it.
		cmd.Env = append(os.Environ(), "POD_NAMESPACE="+InplaceTektonNamespace)
		cmd.Dir = p.Dir
		proc, err := startCommand(p.c.Dir, inplaceTektonProcess, cmd, true)
		if err != nil {
			return err
		}
		p.c.procs = append(p.c.procs, proc)
		p.proc = proc
		p.HealthURL = "http://" + addr
		p.c.log.Info("started", "process", inplaceTektonProcess, "pid", proc.cmd.Process.Pid)
		client := &http.Client{Timeout: 2 * time.Second}
		return p.c.waitFor(60*time.Second, proc, inplaceTektonProcess+" /readyz", func() error {
			return httpOK(client, p.HealthURL+"/readyz")
		})
	})
}

// PID is the controller process's id.
func (p *InplaceTekton) PID() int {
	return p.proc.cmd.Process.Pid
}

// Restart stops the controller (SIGTERM), unless it has ended already, and starts it again,
// as a controller Pod restarting would.
func (p *InplaceTekton) Restart() error {
	if err := p.c.stopProcess(p.proc, 30*time.Second); err != nil {
		return err
	}
	return p.start()
}

// Kill ends the controller with SIGKILL, as a crash or an evicted Pod would, and waits until it
// has ended. Restart starts it again.
func (p *InplaceTekton) Kill() error {
	if done, _ := p.proc.exited(); done {
		return nil
	}
	if err := syscall.Kill(p.proc.cmd.Process.Pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("killing %s (pid %d): %w", inplaceTektonProcess, p.proc.cmd.Process.Pid, err)
	}
	select {
	case <-p.proc.done:
		return nil
	case <-time.After(10 * time.Second):
		return fmt.Errorf("%s (pid %d) did not exit after SIGKILL", inplaceTektonProcess, p.proc.cmd.Process.Pid)
	}
}
