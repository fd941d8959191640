package cluster

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// Our controllers, inplace-rollout tekton-controller (CustomRuns) and inplace-rollout controller
// (InPlaceRollout objects), as the tests and `make cluster-up` run them: their config directory
// without its Deployment, each controller a process on this machine.
const (
	// InplaceTektonNamespace holds our controllers' ServiceAccounts and leader-election Leases.
	InplaceTektonNamespace = "inplace-rollout-system"
	// InplaceTektonServiceAccount is the CustomRun controller's ServiceAccount in config/tekton.
	InplaceTektonServiceAccount = "inplace-rollout-tekton-controller"
	// InplaceTektonUser is the user the CustomRun controller is authenticated as.
	InplaceTektonUser = "system:serviceaccount:" + InplaceTektonNamespace + ":" + InplaceTektonServiceAccount
	// InplaceControllerServiceAccount is the InPlaceRollout controller's ServiceAccount in
	// config/controller.
	InplaceControllerServiceAccount = "inplace-rollout-controller"
	// InplaceControllerUser is the user the InPlaceRollout controller is authenticated as.
	InplaceControllerUser = "system:serviceaccount:" + InplaceTektonNamespace + ":" + InplaceControllerServiceAccount
)

// ownControllerKind is one of our controllers: its config directory, its subcommand, its
// ServiceAccount there and the user it authenticates as, and the name of its log and PID files.
type ownControllerKind struct {
	config, subcommand, serviceAccount, user, process string
	// namespace holds its ServiceAccount and Lease: InplaceTektonNamespace when empty.
	namespace string
	// lease names its Lease: its subcommand's default when empty.
	lease string
	// installed: something else (a Helm release) created its ServiceAccount and roles.
	installed bool
}

// ns is the namespace of its ServiceAccount and Lease.
func (k ownControllerKind) ns() string {
	if k.namespace != "" {
		return k.namespace
	}
	return InplaceTektonNamespace
}

var (
	inplaceTektonKind     = ownControllerKind{config: "tekton", subcommand: "tekton-controller", serviceAccount: InplaceTektonServiceAccount, user: InplaceTektonUser, process: "inplace-rollout-tekton-controller"}
	inplaceControllerKind = ownControllerKind{config: "controller", subcommand: "controller", serviceAccount: InplaceControllerServiceAccount, user: InplaceControllerUser, process: "inplace-rollout-controller"}
)

// ownControllerFiles are the files of a controller's config directory the harness creates, in
// order: everything but the CRD (config/crd, created first) and the Deployment, whose part the
// process plays.
var ownControllerFiles = []string{
	"namespace.yaml",
	"serviceaccount.yaml",
	"clusterrole.yaml",
	"clusterrolebinding.yaml",
	"role.yaml",
	"rolebinding.yaml",
}

// OwnController is one of our controllers, started by StartInplaceTekton or
// StartInplaceController. Cluster.Stop stops it.
type OwnController struct {
	// Binary is the inplace-rollout binary it runs.
	Binary string
	// Dir is its working directory, holding its kubeconfig.
	Dir string
	// Kubeconfig authenticates as its ServiceAccount, bound only to its config's roles.
	Kubeconfig string
	// HealthURL is the base URL of its /healthz, /readyz and /metrics, on loopback.
	HealthURL string
	// LogPath is the controller's log, across restarts.
	LogPath string
	// Args are the flags it runs with beyond the harness's own.
	Args []string

	kind ownControllerKind
	c    *Cluster
	proc *process
}

// InplaceTekton is our CustomRun controller.
type InplaceTekton = OwnController

// InstallInplaceTekton creates the InPlaceRollout CRD and, from config/tekton, the controller's
// namespace, ServiceAccount, roles and bindings: not its Deployment. What exists already is
// kept, so a test may call it after StartInplaceTekton did.
func (c *Cluster) InstallInplaceTekton(ctx context.Context) error {
	return c.installOwnController(ctx, inplaceTektonKind)
}

// InstallInplaceController is InstallInplaceTekton for config/controller.
func (c *Cluster) InstallInplaceController(ctx context.Context) error {
	return c.installOwnController(ctx, inplaceControllerKind)
}

func (c *Cluster) installOwnController(ctx context.Context, k ownControllerKind) error {
	root, err := RepoRoot()
	if err != nil {
		return err
	}
	if err := c.applyCRDs(ctx, "InPlaceRollout", filepath.Join(root, "config", "crd", "inplacerollouts.yaml")); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	// Apart: applyCRDs stops at the first CRD that exists already.
	if err := c.applyCRDs(ctx, "InPlaceRolloutPolicy", filepath.Join(root, "config", "crd", "inplacerolloutpolicies.yaml")); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	for _, f := range ownControllerFiles {
		if err := c.createManifests(ctx, filepath.Join(root, "config", k.config, f)); err != nil && !apierrors.IsAlreadyExists(err) {
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
	p, err := c.startOwnController(ctx, inplaceTektonKind, binary, nil)
	if err != nil {
		return nil, err
	}
	c.InplaceTekton = p
	return p, nil
}

// StartInplaceController is StartInplaceTekton for `binary controller` and config/controller,
// with args added to its flags (--notify-secret, say); it is ready once it has listed the
// InPlaceRollout objects.
func (c *Cluster) StartInplaceController(ctx context.Context, binary string, args ...string) (*OwnController, error) {
	p, err := c.startOwnController(ctx, inplaceControllerKind, binary, args)
	if err != nil {
		return nil, err
	}
	c.InplaceController = p
	return p, nil
}

func (c *Cluster) startOwnController(ctx context.Context, k ownControllerKind, binary string, args []string) (*OwnController, error) {
	bin, err := filepath.Abs(binary)
	if err != nil {
		return nil, fmt.Errorf("resolving the inplace-rollout binary %q: %w", binary, err)
	}
	if _, err := os.Stat(bin); err != nil {
		return nil, fmt.Errorf("the inplace-rollout binary: %w", err)
	}
	p := &OwnController{c: c, kind: k, Binary: bin, Args: args, Dir: filepath.Join(c.Dir, k.process), LogPath: filepath.Join(c.Dir, k.process+".log")}
	if err := os.MkdirAll(p.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("creating %s: %w", p.Dir, err)
	}
	if !k.installed {
		if err := c.installOwnController(ctx, k); err != nil {
			return nil, err
		}
	}
	if p.Kubeconfig, err = c.writeServiceAccountKubeconfig(ctx, k.ns(), k.serviceAccount, p.Dir); err != nil {
		return nil, err
	}
	if err := p.start(); err != nil {
		return nil, err
	}
	return p, nil
}

// start starts the controller with its health server on a free port and waits until /readyz
// answers 200.
func (p *OwnController) start() error {
	process := p.kind.process
	return p.c.onFreePorts(process, 1, func(ports []int) error {
		addr := "127.0.0.1:" + strconv.Itoa(ports[0])
		args := []string{p.kind.subcommand,
			"--kubeconfig", p.Kubeconfig,
			"--health-addr", addr,
			"--leader-election-namespace", p.kind.ns(),
		}
		if p.kind.lease != "" {
			args = append(args, "--leader-election-id", p.kind.lease)
		}
		cmd := exec.Command(p.Binary, append(args, p.Args...)...)
		// As the Deployment's downward API sets it.
		cmd.Env = append(os.Environ(), "POD_NAMESPACE="+p.kind.ns())
		cmd.Dir = p.Dir
		proc, err := startCommand(p.c.Dir, process, cmd, true)
		if err != nil {
			return err
		}
		p.c.procs = append(p.c.procs, proc)
		p.proc = proc
		p.HealthURL = "http://" + addr
		p.c.log.Info("started", "process", process, "pid", proc.cmd.Process.Pid)
		client := &http.Client{Timeout: 2 * time.Second}
		return p.c.waitFor(60*time.Second, proc, process+" /readyz", func() error {
			return httpOK(client, p.HealthURL+"/readyz")
		})
	})
}

// StartInstalledController starts `binary subcommand` as the ServiceAccount namespace/name that
// something else installed with its roles (a Helm release), its Lease namespace/name, as the
// Deployment it stands in for runs it, and waits until it is ready; it installs nothing. Its
// process, log and PID files are named after the ServiceAccount. Its roles are not config/'s
// files, so CheckRBAC is not for it.
func (c *Cluster) StartInstalledController(ctx context.Context, binary, subcommand, namespace, name string) (*OwnController, error) {
	k := ownControllerKind{subcommand: subcommand, serviceAccount: name, user: "system:serviceaccount:" + namespace + ":" + name,
		process: name, namespace: namespace, lease: name, installed: true}
	return c.startOwnController(ctx, k, binary, nil)
}

// PID is the controller process's id.
func (p *OwnController) PID() int {
	return p.proc.cmd.Process.Pid
}

// Restart stops the controller (SIGTERM), unless it has ended already, and starts it again,
// as a controller Pod restarting would.
func (p *OwnController) Restart() error {
	if err := p.c.stopProcess(p.proc, 30*time.Second); err != nil {
		return err
	}
	return p.start()
}

// Kill ends the controller with SIGKILL, as a crash or an evicted Pod would, and waits until it
// has ended. Restart starts it again.
func (p *OwnController) Kill() error {
	if done, _ := p.proc.exited(); done {
		return nil
	}
	if err := syscall.Kill(p.proc.cmd.Process.Pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("killing %s (pid %d): %w", p.kind.process, p.proc.cmd.Process.Pid, err)
	}
	select {
	case <-p.proc.done:
		return nil
	case <-time.After(10 * time.Second):
		return fmt.Errorf("%s (pid %d) did not exit after SIGKILL", p.kind.process, p.proc.cmd.Process.Pid)
	}
}

// CheckRBAC compares the controller's config ClusterRole and Role with the calls its
// ServiceAccount made (the audit log, Options.AuditLog with its user), and returns those calls
// with their counts. The controller has no other role, so every call must be granted, every rule
// used, and each grant named by needs with the tests that break without it. The Role (the Lease)
// is namespaced to the controller's own namespace; the comparison, which does not tell
// namespaces apart, takes its rules with the ClusterRole's.
func (p *OwnController) CheckRBAC(needs []Need) (calls []string, err error) {
	user := p.kind.user
	audited, err := p.c.AuditedCalls(user)
	if err != nil {
		return nil, err
	}
	byNamespace, err := p.c.AuditedCallsByNamespace(user)
	if err != nil {
		return nil, err
	}
	if len(audited) == 0 {
		return nil, errors.New("the audit log holds no call of " + user)
	}
	root, err := RepoRoot()
	if err != nil {
		return nil, err
	}
	clusterRole, err := ReadClusterRole(filepath.Join(root, "config", p.kind.config, "clusterrole.yaml"))
	if err != nil {
		return nil, err
	}
	role, err := ReadRole(filepath.Join(root, "config", p.kind.config, "role.yaml"))
	if err != nil {
		return nil, err
	}
	ours := slices.Concat(clusterRole.Rules, role.Rules)
	for c, n := range audited {
		calls = append(calls, fmt.Sprintf("%s x%d", c, n))
	}
	sort.Strings(calls)
	problems := CompareRole(nil, "", ours, audited)
	byTest := CallsByTest(byNamespace)
	problems = append(problems, CheckNeeds(ours, needs, byTest)...)
	if len(problems) > 0 {
		return nil, fmt.Errorf("%s\nevery call of %s, by test (its namespaces) or namespace:\n%s", strings.Join(problems, "\n"), user, FormatOpCalls(byTest))
	}
	return append(calls, "each grant, and the tests that break without it:", FormatNeeds(needs)), nil
}
