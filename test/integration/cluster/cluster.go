package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/inplace-rollout/inplace-rollout/test/integration/kubeletsim"
	"github.com/inplace-rollout/inplace-rollout/test/integration/ociregistry"
	"github.com/inplace-rollout/inplace-rollout/test/integration/realnode"
)

// Options configure a control plane.
type Options struct {
	// Dir holds certificates, data, logs and PID files. Empty means a new temporary directory,
	// removed by Stop.
	Dir string
	// BinDir holds the binaries built by hack/tools/build.sh. Empty means $INPLACE_ROLLOUT_BIN_DIR,
	// else .dev/bin at the repository root.
	BinDir string
	// Simulator configures the in-process kubelet simulator.
	Simulator kubeletsim.Config
	// Prometheus starts a real Prometheus scraping the simulator's metrics every second.
	Prometheus bool
	// PrometheusBasicAuth makes that Prometheus require these credentials on its HTTP API.
	PrometheusBasicAuth *BasicAuth
	// Registry starts a real OCI registry (go-containerregistry's pkg/registry, in memory) on a
	// loopback port; the simulator resolves images on its host through it.
	Registry bool
	// RegistryBasicAuth starts a second registry, PrivateRegistry, that requires these
	// credentials, for private-registry tests; pods pull from it with an imagePullSecret.
	RegistryBasicAuth *BasicAuth
	// AuditLog makes the apiserver log, at Metadata level, every request of AuditUsers (and no
	// one else's) to Dir/audit.log; AuditedCalls reads it.
	AuditLog bool
	// AuditUsers are the users whose requests AuditLog logs; empty means ArgoUser,
	// InplaceTektonUser and InplaceControllerUser, the drivers the harness starts.
	AuditUsers []string
	// AuditEveryone makes AuditLog log every user's requests, AuditUsers ignored, to a file
	// that a reader may truncate (see AuditLogFile).
	AuditEveryone bool
	// FeatureGates is passed as --feature-gates to kube-apiserver and kube-controller-manager,
	// e.g. "MaxUnavailableStatefulSet=true" [none].
	FeatureGates string
	// RealNode adds a real node, RealNodeName (kubelet and containerd, package realnode), beside
	// the simulated ones, and pushes the real images (package realnode/images) to the registry;
	// it implies Registry. Pods pinned to it run there; the simulator leaves them alone.
	RealNode bool
	// SimulatorQPS gives the kubelet simulator its own client with this rate limit (burst
	// twice that); zero shares Client's (200 requests/s).
	SimulatorQPS float32
	// ControllerManagerQPS and ControllerManagerBurst, when above 0, are kube-controller-manager's
	// client-side rate limit (--kube-api-qps, --kube-api-burst), which the client of each of its
	// controllers has for itself; zero keeps its defaults, 20 requests/s and a burst of 30.
	ControllerManagerQPS   float32
	ControllerManagerBurst int
	// Logger receives one line per lifecycle event. Nil discards.
	Logger *slog.Logger
}

// SimulatorUserAgent is the kubelet simulator's User-Agent, when it has a client of its own
// (Options.SimulatorQPS).
const SimulatorUserAgent = "kubelet-simulator"

// Cluster is a running control plane.
type Cluster struct {
	// Config is an admin rest.Config for the apiserver.
	Config *rest.Config
	// Client is a clientset built from Config.
	Client kubernetes.Interface
	// Kubeconfig is the path of an admin kubeconfig file.
	Kubeconfig string
	// Dir is the cluster directory (logs, PID files, data).
	Dir string
	// Sim is the kubelet simulator serving the cluster's nodes.
	Sim *kubeletsim.Simulator
	// PrometheusURL is the base URL of Prometheus, empty unless Options.Prometheus.
	PrometheusURL string
	// Registry is HOST:PORT of the OCI registry, empty unless Options.Registry.
	Registry string
	// PrivateRegistry is HOST:PORT of the registry requiring Options.RegistryBasicAuth, empty
	// unless that is set.
	PrivateRegistry string
	// BootDuration is how long Start took until every component was ready.
	BootDuration time.Duration
	// Argo is the Argo Rollouts controller, once StartArgo started it.
	Argo *Argo
	// Tekton is the Tekton Pipelines controller, once StartTekton started it.
	Tekton *Tekton
	// InplaceTekton is our CustomRun controller, once StartInplaceTekton started it.
	InplaceTekton *InplaceTekton
	// InplaceController is our InPlaceRollout controller, once StartInplaceController started it.
	InplaceController *OwnController
	// Kruise is OpenKruise's kruise-manager, once StartKruise started it.
	Kruise *Kruise
	// RealNode is the real node, when Options.RealNode.
	RealNode *realnode.Node
	// Images are the real images pushed to Registry (AppImage's, and pause), each reference
	// with its digest, when Options.RealNode.
	Images map[string]string
	// PullerImage is the puller image on Registry by digest, for pre-pull on the real node,
	// when Options.RealNode.
	PullerImage string

	opts     Options
	pki      *pki
	tempDir  bool
	procs    []*process
	regs     []*ociregistry.Server
	promArgs []string
	cancel   context.CancelFunc
	log      *slog.Logger
	// pickPorts hands out loopback ports for a component; nil means freePorts. Tests make it
	// hand out a port that is taken.
	pickPorts func(n int) ([]int, error)
	// kruiseInstalled is set once StartKruise has installed OpenKruise's CRDs, namespace and
	// webhook configurations, which a later StartKruise finds there.
	kruiseInstalled bool
	// etcd and apiServer are the running processes with the arguments they were started with,
	// which RestartEtcd and RestartAPIServer start them again with: same ports, same data.
	etcd, apiServer *restartable
}

// restartable is a process and how to start it again as it was.
type restartable struct {
	proc *process
	args []string
	// ready waits until the process started again serves, giving up when ctx is done.
	ready func(ctx context.Context, p *process) error
}

// kubeControllers are the controllers the tests rely on; the others only slow the start. The
// endpoints and endpointslice controllers show a pod drained through the readiness gate
// leaving its Service.
var kubeControllers = []string{
	"statefulset-controller",
	"daemonset-controller",
	"deployment-controller",
	"replicaset-controller",
	"garbage-collector-controller",
	"namespace-controller",
	"serviceaccount-controller",
	"endpoints-controller",
	"endpointslice-controller",
}

// Start boots etcd, kube-apiserver, kube-controller-manager, the kubelet simulator and, when
// asked, the OCI registries and Prometheus, and returns once all of them are ready: the controller manager counts as
// ready once its ServiceAccount controller has written the default ServiceAccount. On error
// everything started is stopped.
func Start(ctx context.Context, opts Options) (c *Cluster, err error) {
	began := time.Now()
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	c = &Cluster{opts: opts, log: log}
	// The cluster as started, for the deferred Stop: an error return sets c to nil.
	started := c
	defer func() {
		if err != nil {
			_ = started.Stop()
		}
	}()
	if c.opts.BinDir == "" {
		c.opts.BinDir, err = DefaultBinDir()
		if err != nil {
			return nil, err
		}
	}
	for _, b := range []string{"etcd", "kube-apiserver", "kube-controller-manager"} {
		if _, err := os.Stat(filepath.Join(c.opts.BinDir, b)); err != nil {
			return nil, fmt.Errorf("control-plane binary %s is missing from %s: run `make tools` (hack/tools/build.sh) first: %w", b, c.opts.BinDir, err)
		}
	}
	if opts.Dir == "" {
		c.Dir, err = os.MkdirTemp("", "inplace-rollout-cluster-")
		if err != nil {
			return nil, fmt.Errorf("creating cluster directory: %w", err)
		}
		c.tempDir = true
	} else {
		// Absolute: a process started in a directory of its own (kruise-manager) reads the
		// kubeconfig and certificates by these paths.
		if c.Dir, err = filepath.Abs(opts.Dir); err != nil {
			return nil, fmt.Errorf("the cluster directory %s: %w", opts.Dir, err)
		}
		if err := os.MkdirAll(c.Dir, 0o755); err != nil {
			return nil, fmt.Errorf("creating cluster directory %s: %w", c.Dir, err)
		}
	}
	// Fresh state on every start: an old Prometheus would bring back series of an earlier run.
	_ = os.RemoveAll(filepath.Join(c.Dir, "prometheus-data"))

	certs, err := writePKI(c.Dir)
	if err != nil {
		return nil, err
	}
	c.pki = certs
	// Each component gets its ports just before it starts, which keeps the window in which
	// another process can take them short.
	var etcdClient int
	if err := c.onFreePorts("etcd", 2, func(ports []int) error {
		etcdClient = ports[0]
		return c.startEtcd(ports[0], ports[1])
	}); err != nil {
		return nil, err
	}
	if err := c.onFreePorts("kube-apiserver", 1, func(ports []int) error {
		return c.startAPIServer(ctx, certs, etcdClient, ports[0])
	}); err != nil {
		return nil, err
	}
	kcm, err := c.startControllerManager(certs)
	if err != nil {
		return nil, err
	}
	if err := c.startRegistries(); err != nil {
		return nil, err
	}
	if opts.RealNode {
		if err := c.startRealNode(ctx, certs); err != nil {
			return nil, err
		}
	}
	if err := c.startSimulator(ctx); err != nil {
		return nil, err
	}
	if opts.Prometheus {
		if err := c.startPrometheus(ctx); err != nil {
			return nil, err
		}
	}
	// Last, so that the simulator and Prometheus start while the controller manager syncs.
	if err := c.waitControllerManager(ctx, kcm); err != nil {
		return nil, err
	}
	c.BootDuration = time.Since(began)
	log.Info("control plane ready", "dir", c.Dir, "apiserver", c.Config.Host, "prometheus", c.PrometheusURL, "boot", c.BootDuration.Round(time.Millisecond).String())
	return c, nil
}

func (c *Cluster) bin(name string) string { return filepath.Join(c.opts.BinDir, name) }

// startAttempts bounds how many times one component is started on fresh ports.
const startAttempts = 3

// onFreePorts calls start with n free loopback ports. freePorts closes its listeners before the
// component binds the ports, so another process can take one meanwhile; the component then
// exits with "address already in use" and start is called again with new ports, at most
// startAttempts times in all.
func (c *Cluster) onFreePorts(name string, n int, start func(ports []int) error) error {
	pick := c.pickPorts
	if pick == nil {
		pick = freePorts
	}
	for attempt := 1; ; attempt++ {
		ports, err := pick(n)
		if err != nil {
			return err
		}
		err = start(ports)
		if err == nil || !errors.Is(err, errPortInUse) {
			return err
		}
		c.dropExited(name)
		if attempt == startAttempts {
			return fmt.Errorf("starting %s: a port it was given was taken on each of %d attempts: %w", name, startAttempts, err)
		}
		c.log.Warn("port taken before the process could bind it; retrying on new ports",
			"process", name, "ports", ports, "attempt", attempt, "maxAttempts", startAttempts)
	}
}

// stopProcess forgets p, so that Stop does not stop it again, and stops it, giving it grace to
// end.
func (c *Cluster) stopProcess(p *process, grace time.Duration) error {
	for i, q := range c.procs {
		if q == p {
			c.procs = append(c.procs[:i], c.procs[i+1:]...)
			break
		}
	}
	if err := p.stop(grace); err != nil {
		return fmt.Errorf("stopping %s: %w", p.name, err)
	}
	return nil
}

// PID returns the process ID of the running component called name (etcd, kube-apiserver,
// kube-controller-manager, or a controller the harness started), for reading its CPU time and
// memory from /proc.
func (c *Cluster) PID(name string) (int, bool) {
	for _, p := range c.procs {
		if done, _ := p.exited(); p.name == name && !done {
			return p.cmd.Process.Pid, true
		}
	}
	return 0, false
}

// dropExited forgets the processes called name that have ended, removing their PID files, so
// that a retry's process is the only one of that name Stop knows.
func (c *Cluster) dropExited(name string) {
	kept := c.procs[:0]
	for _, p := range c.procs {
		if done, _ := p.exited(); done && p.name == name {
			_ = p.stop(0) // only removes the PID file: the process has ended
			continue
		}
		kept = append(kept, p)
	}
	c.procs = kept
}

func (c *Cluster) start(name string, args ...string) (*process, error) {
	p, err := startProcess(c.Dir, name, c.bin(name), args...)
	if err != nil {
		return nil, err
	}
	c.procs = append(c.procs, p)
	c.log.Info("started", "process", name, "pid", p.cmd.Process.Pid)
	return p, nil
}

func (c *Cluster) startEtcd(clientPort, peerPort int) error {
	clientURL := fmt.Sprintf("http://127.0.0.1:%d", clientPort)
	peerURL := fmt.Sprintf("http://127.0.0.1:%d", peerPort)
	// Fresh state on every start: an old etcd would bring back objects of an earlier run, or the
	// membership of an attempt on other ports.
	_ = os.RemoveAll(filepath.Join(c.Dir, "etcd-data"))
	args := []string{
		"--name=default",
		"--data-dir=" + filepath.Join(c.Dir, "etcd-data"),
		"--listen-client-urls=" + clientURL,
		"--advertise-client-urls=" + clientURL,
		"--listen-peer-urls=" + peerURL,
		"--initial-advertise-peer-urls=" + peerURL,
		"--initial-cluster=default=" + peerURL,
		// Test data is thrown away; fsync only slows every write.
		"--unsafe-no-fsync",
		"--log-level=warn",
	}
	// A timeout, because a process that took the port may accept and never answer; the wait
	// must still see etcd exit.
	client := &http.Client{Timeout: 2 * time.Second}
	ready := func(_ context.Context, p *process) error {
		return c.waitFor(30*time.Second, p, "etcd /health", func() error {
			return httpOK(client, clientURL+"/health")
		})
	}
	p, err := c.start("etcd", args...)
	if err != nil {
		return err
	}
	c.etcd = &restartable{proc: p, args: args, ready: ready}
	return ready(context.Background(), p)
}

func (c *Cluster) startAPIServer(ctx context.Context, certs *pki, etcdPort, port int) error {
	args := []string{
		fmt.Sprintf("--etcd-servers=http://127.0.0.1:%d", etcdPort),
		"--bind-address=127.0.0.1",
		"--advertise-address=127.0.0.1",
		fmt.Sprintf("--secure-port=%d", port),
		"--tls-cert-file=" + certs.ServingCert,
		"--tls-private-key-file=" + certs.ServingKey,
		"--client-ca-file=" + certs.CACert,
		"--service-account-key-file=" + certs.SAPub,
		"--service-account-signing-key-file=" + certs.SAKey,
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-cluster-ip-range=10.96.0.0/16",
		"--authorization-mode=Node,RBAC",
		// The real node's kubelet is dialled at its InternalIP, never by name: a name would be
		// looked up through the machine's resolver, off the machine. The admin credentials
		// authenticate the apiserver to it (logs, exec).
		"--kubelet-preferred-address-types=InternalIP",
		"--kubelet-client-certificate=" + certs.AdminCert,
		"--kubelet-client-key=" + certs.AdminKey,
		// Pods here never run a real process, so they need no service-account token.
		"--disable-admission-plugins=ServiceAccount",
		"--allow-privileged=true",
		"--profiling=false",
		"--cert-dir=" + filepath.Join(c.Dir, "apiserver-certs"),
	}
	if c.opts.FeatureGates != "" {
		args = append(args, "--feature-gates="+c.opts.FeatureGates)
	}
	if c.opts.AuditLog {
		audit, err := c.auditArgs()
		if err != nil {
			return err
		}
		args = append(args, audit...)
	}
	p, err := c.start("kube-apiserver", args...)
	if err != nil {
		return err
	}
	kubeconfig := clientcmdapi.NewConfig()
	kubeconfig.Clusters["local"] = &clientcmdapi.Cluster{
		Server:               fmt.Sprintf("https://127.0.0.1:%d", port),
		CertificateAuthority: certs.CACert,
	}
	kubeconfig.AuthInfos["admin"] = &clientcmdapi.AuthInfo{
		ClientCertificate: certs.AdminCert,
		ClientKey:         certs.AdminKey,
	}
	kubeconfig.Contexts["local"] = &clientcmdapi.Context{Cluster: "local", AuthInfo: "admin", Namespace: "default"}
	kubeconfig.CurrentContext = "local"
	// Embed the credentials so the file works wherever it is copied.
	if err := clientcmdapi.FlattenConfig(kubeconfig); err != nil {
		return fmt.Errorf("embedding credentials in kubeconfig: %w", err)
	}
	c.Kubeconfig = filepath.Join(c.Dir, "kubeconfig")
	if err := clientcmd.WriteToFile(*kubeconfig, c.Kubeconfig); err != nil {
		return fmt.Errorf("writing kubeconfig %s: %w", c.Kubeconfig, err)
	}
	c.Config, err = clientcmd.NewNonInteractiveClientConfig(*kubeconfig, "local", &clientcmd.ConfigOverrides{}, nil).ClientConfig()
	if err != nil {
		return fmt.Errorf("loading kubeconfig %s: %w", c.Kubeconfig, err)
	}
	c.Config.QPS = 200
	c.Config.Burst = 400
	c.Client, err = kubernetes.NewForConfig(c.Config)
	if err != nil {
		return fmt.Errorf("building client for %s: %w", c.Config.Host, err)
	}
	ready := func(ctx context.Context, p *process) error {
		return c.waitFor(60*time.Second, p, "kube-apiserver /readyz", func() error {
			body, err := c.Client.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
			if err != nil {
				return fmt.Errorf("%w: %s", err, strings.TrimSpace(string(body)))
			}
			return nil
		})
	}
	c.apiServer = &restartable{proc: p, args: args, ready: ready}
	return ready(ctx, p)
}

// RestartEtcd stops etcd (SIGTERM, then SIGKILL after grace) and starts it again on the same
// ports with the same data directory, as a restarted etcd member would come back, and waits
// until it is healthy. The apiserver keeps running and reconnects.
func (c *Cluster) RestartEtcd(grace time.Duration) error {
	return c.restart(c.etcd, "etcd", grace)
}

// RestartAPIServer stops kube-apiserver (SIGTERM, then SIGKILL after grace) and starts it again
// on the same port with the same flags, certificates and etcd, and waits until it is ready.
// Config, Client and Kubeconfig stay valid: every client reconnects to the same address.
func (c *Cluster) RestartAPIServer(grace time.Duration) error {
	return c.restart(c.apiServer, "kube-apiserver", grace)
}

// restart stops r's process and starts it again with its arguments, appending to its log. The
// ports it held are free once it has exited, and nothing else is given them meanwhile. The new
// process takes the old one's place in the order Stop stops them.
func (c *Cluster) restart(r *restartable, name string, grace time.Duration) error {
	if r == nil {
		return fmt.Errorf("restarting %s: the cluster did not start it", name)
	}
	i := slices.Index(c.procs, r.proc)
	if err := r.proc.stop(grace); err != nil {
		return fmt.Errorf("restarting %s: %w", name, err)
	}
	p, err := startCommand(c.Dir, name, exec.Command(c.bin(name), r.args...), true)
	if err != nil {
		return fmt.Errorf("restarting %s: %w", name, err)
	}
	if i >= 0 {
		c.procs[i] = p
	} else {
		c.procs = append(c.procs, p)
	}
	r.proc = p
	c.log.Info("restarted", "process", name, "pid", p.cmd.Process.Pid)
	// Not Start's context, which has ended by now.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := r.ready(ctx, p); err != nil {
		return fmt.Errorf("restarting %s: %w", name, err)
	}
	return nil
}

func (c *Cluster) startControllerManager(certs *pki) (*process, error) {
	return c.start("kube-controller-manager", append(c.controllerManagerFlags(),
		"--kubeconfig="+c.Kubeconfig,
		"--bind-address=127.0.0.1",
		"--secure-port=0",
		"--leader-elect=false",
		"--controllers="+strings.Join(kubeControllers, ","),
		"--service-account-private-key-file="+certs.SAKey,
		"--root-ca-file="+certs.CACert,
		"--use-service-account-credentials=false",
	)...)
}

// controllerManagerFlags are kube-controller-manager's flags that the options set.
func (c *Cluster) controllerManagerFlags() []string {
	var flags []string
	if c.opts.FeatureGates != "" {
		flags = append(flags, "--feature-gates="+c.opts.FeatureGates)
	}
	if c.opts.ControllerManagerQPS > 0 {
		flags = append(flags, "--kube-api-qps="+strconv.FormatFloat(float64(c.opts.ControllerManagerQPS), 'f', -1, 32))
	}
	if c.opts.ControllerManagerBurst > 0 {
		flags = append(flags, "--kube-api-burst="+strconv.Itoa(c.opts.ControllerManagerBurst))
	}
	return flags
}

// waitControllerManager waits until the controller manager is observably working. It serves no
// health endpoint here (secure port 0) and holds no Lease (no leader election), so the sign is an
// object one of its controllers writes: the ServiceAccount controller creates the default
// ServiceAccount in every namespace once the manager's informers have synced.
func (c *Cluster) waitControllerManager(ctx context.Context, p *process) error {
	return c.waitFor(60*time.Second, p, "kube-controller-manager (its serviceaccount-controller creating ServiceAccount default/default)", func() error {
		_, err := c.Client.CoreV1().ServiceAccounts(metav1.NamespaceDefault).Get(ctx, "default", metav1.GetOptions{})
		return err
	})
}

func (c *Cluster) startSimulator(ctx context.Context) error {
	simCtx, cancel := context.WithCancel(context.Background())
	c.cancel = cancel
	cfg := c.opts.Simulator
	for _, h := range []string{c.Registry, c.PrivateRegistry} {
		if h != "" {
			cfg.Registries = append(cfg.Registries, h)
		}
	}
	if cfg.Logger == nil {
		cfg.Logger = c.log.With("component", "kubeletsim")
	}
	client := c.Client
	if c.opts.SimulatorQPS > 0 {
		rc := rest.CopyConfig(c.Config)
		rc.QPS, rc.Burst = c.opts.SimulatorQPS, int(2*c.opts.SimulatorQPS)
		// Its requests, in an audit log, apart from the test's own.
		rc.UserAgent = SimulatorUserAgent
		var err error
		if client, err = kubernetes.NewForConfig(rc); err != nil {
			return fmt.Errorf("building the kubelet simulator's client: %w", err)
		}
	}
	sim, err := kubeletsim.New(client, cfg)
	if err != nil {
		return fmt.Errorf("creating kubelet simulator: %w", err)
	}
	c.Sim = sim
	if err := sim.Start(simCtx); err != nil {
		return fmt.Errorf("starting kubelet simulator: %w", err)
	}
	return nil
}

// Stop stops every process and the simulator, and removes the directory if Start created it.
func (c *Cluster) Stop() error {
	if c.cancel != nil {
		c.cancel()
		if c.Sim != nil {
			c.Sim.Wait()
		}
		c.cancel = nil
	}
	var errs []error
	if c.RealNode != nil {
		if err := c.RealNode.Stop(); err != nil {
			errs = append(errs, fmt.Errorf("stopping the real node: %w", err))
		}
		c.RealNode = nil
	}
	// Reverse order: the controller manager and apiserver before etcd.
	for i := len(c.procs) - 1; i >= 0; i-- {
		if err := c.procs[i].stop(10 * time.Second); err != nil {
			errs = append(errs, err)
		}
	}
	c.procs = nil
	for _, r := range c.regs {
		if err := r.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	c.regs = nil
	if c.tempDir && c.Dir != "" {
		if err := os.RemoveAll(c.Dir); err != nil {
			errs = append(errs, fmt.Errorf("removing %s: %w", c.Dir, err))
		}
		c.Dir = ""
	}
	return errors.Join(errs...)
}

// waitFor polls check until it succeeds, the process exits, or timeout passes, and logs how
// long the process took to become ready (the breakdown of the boot time).
func (c *Cluster) waitFor(timeout time.Duration, p *process, what string, check func() error) error {
	began := time.Now()
	deadline := began.Add(timeout)
	var last error
	for {
		if done, werr := p.exited(); done {
			return fmt.Errorf("waiting for %s: %w (%v); last log lines:\n%s", what, p.exitError(), werr, p.logTail())
		}
		if last = check(); last == nil {
			c.log.Info("ready", "process", p.name, "check", what,
				"waited", time.Since(began).Round(time.Millisecond).String(),
				"up", time.Since(p.started).Round(time.Millisecond).String())
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not ready after %s: %w; last log lines of %s:\n%s", what, timeout, last, p.name, p.logTail())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func httpOK(client *http.Client, url string) error {
	resp, err := client.Get(url)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: HTTP %d", url, resp.StatusCode)
	}
	return nil
}

// DefaultBinDir returns $INPLACE_ROLLOUT_BIN_DIR, else .dev/bin at the repository root found by
// walking up from the working directory.
func DefaultBinDir() (string, error) {
	if d := os.Getenv("INPLACE_ROLLOUT_BIN_DIR"); d != "" {
		return d, nil
	}
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	return filepath.Join(root, ".dev", "bin"), nil
}

// RepoRoot walks up from the working directory to the directory holding hack/tools/build.sh.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("finding the repository root: %w", err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "hack", "tools", "build.sh")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("finding the repository root: no hack/tools/build.sh above the working directory; set INPLACE_ROLLOUT_BIN_DIR")
		}
		dir = parent
	}
}

// startRegistries serves the OCI registries the options ask for, in this process.
func (c *Cluster) startRegistries() error {
	if c.opts.Registry || c.opts.RealNode {
		r, err := ociregistry.Start("", "")
		if err != nil {
			return err
		}
		c.regs = append(c.regs, r)
		c.Registry = r.Host
		c.log.Info("ready", "process", "registry", "host", r.Host)
	}
	if auth := c.opts.RegistryBasicAuth; auth != nil {
		if auth.Username == "" {
			return errors.New("starting the private OCI registry: RegistryBasicAuth has an empty Username; give one")
		}
		r, err := ociregistry.Start(auth.Username, auth.Password)
		if err != nil {
			return err
		}
		c.regs = append(c.regs, r)
		c.PrivateRegistry = r.Host
		c.log.Info("ready", "process", "private-registry", "host", r.Host)
	}
	return nil
}

// StopRegistry stops the registry serving host (Registry or PrivateRegistry), as an outage
// would: connections to it are refused. It returns a function that serves it again on the same
// host and port with the content it had.
func (c *Cluster) StopRegistry(host string) (restart func() error, err error) {
	for _, r := range c.regs {
		if r.Host != host {
			continue
		}
		if err := r.Stop(); err != nil {
			return nil, err
		}
		return r.Resume, nil
	}
	return nil, fmt.Errorf("stopping the OCI registry %q: the cluster serves no registry there; start it with Options.Registry or Options.RegistryBasicAuth", host)
}
