package realnode

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// Config describes the node to start.
type Config struct {
	// Name is the node's name [real-0].
	Name string
	// Dir holds everything the node writes: configuration, containerd's images and containers,
	// the kubelet's root, logs. It must be short enough for a unix socket path under it.
	Dir string
	// Kubelet is the kubelet binary (hack/tools/build.sh kubelet).
	Kubelet string
	// Server is kube-apiserver's URL; CACert its CA file, which also authenticates kube-apiserver
	// to the kubelet.
	Server, CACert string
	// CertFile and KeyFile are the kubelet's client credentials: a certificate for
	// system:node:NAME in group system:nodes.
	CertFile, KeyFile string
	// Registry is HOST:PORT of a plain-HTTP registry on loopback that containerd pulls from.
	Registry string
	// PauseImage is the sandbox image, on Registry.
	PauseImage string
	// Client reads the Node object; it must be allowed to patch nodes (an admin client).
	Client kubernetes.Interface
	// Logger receives one line per lifecycle event. Nil discards.
	Logger *slog.Logger
}

// Node is a running real node.
type Node struct {
	// Name is the Node object's name; IP its InternalIP (the bridge's gateway address).
	Name, IP string
	// KubeletLog and ContainerdLog are the processes' log files.
	KubeletLog, ContainerdLog string

	cfg Config
	log *slog.Logger
	rec *record
	// before is the machine as Start found it, with the lock held: Stop fails unless undoing
	// the run brought it back to that.
	before   Machine
	procs    []*exec.Cmd
	unlock   func()
	stopOnce bool
}

// Prerequisites are the machine's parts a real node needs: the root user, and the binaries
// from Debian's packages that .ci/run installs.
func Prerequisites() error {
	if os.Geteuid() != 0 {
		return errors.New("a real node needs root (it runs containerd and a kubelet); run as root")
	}
	for _, bin := range []string{"containerd", "runc", "iptables", "conntrack", "ip", "nft", "/usr/lib/cni/bridge", "/usr/lib/cni/host-local", "/usr/lib/cni/loopback"} {
		if _, err := exec.LookPath(bin); err != nil {
			return fmt.Errorf("a real node needs %s: install Debian's containerd, runc, containernetworking-plugins, iptables, conntrack, iproute2 and nftables (.ci/run does): %w", bin, err)
		}
	}
	return nil
}

// Start starts containerd and the kubelet and returns once the Node is Ready. It waits for the
// machine-wide lock first, and undoes an earlier run that crashed. On error everything it
// changed is put back.
func Start(ctx context.Context, cfg Config) (n *Node, err error) {
	if cfg.Name == "" {
		cfg.Name = "real-0"
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if err := Prerequisites(); err != nil {
		return nil, err
	}
	if cfg.Dir == "" || cfg.Kubelet == "" || cfg.Server == "" || cfg.Client == nil {
		return nil, errors.New("starting a real node: Config needs Dir, Kubelet, Server and Client")
	}
	dir, err := filepath.Abs(cfg.Dir)
	if err != nil {
		return nil, fmt.Errorf("resolving %s: %w", cfg.Dir, err)
	}
	cfg.Dir = dir
	unlock, err := lock(ctx)
	if err != nil {
		return nil, err
	}
	n = &Node{Name: cfg.Name, IP: Gateway, cfg: cfg, log: log, unlock: unlock}
	defer func() {
		if err != nil {
			if serr := n.Stop(); serr != nil {
				log.Error("putting the machine back after a failed start", "err", serr)
			}
			n = nil
		}
	}()
	if err := undoRecorded(log); err != nil {
		return n, fmt.Errorf("undoing an earlier real node run: %w", err)
	}
	n.before = ReadMachine()
	if n.rec, err = newRecord(dir, n.before); err != nil {
		return n, err
	}
	if err := n.rec.save(); err != nil {
		return n, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return n, fmt.Errorf("creating %s: %w", dir, err)
	}
	if err := makeBridge(); err != nil {
		return n, err
	}
	ports, err := freePorts(2)
	if err != nil {
		return n, err
	}
	vals := map[string]string{
		"dir": dir, "pause": cfg.PauseImage, "registry": cfg.Registry, "bridge": Bridge,
		"subnet": Subnet, "gateway": Gateway, "ca": cfg.CACert, "cgroupRoot": cgroupRoot,
		"port": strconv.Itoa(ports[0]), "healthz": strconv.Itoa(ports[1]),
	}
	if err := writeConfigs(dir, vals); err != nil {
		return n, err
	}
	// The kubelet checks that its cgroup root exists in every hierarchy.
	if err := makeCgroupRoot(); err != nil {
		return n, err
	}
	kubeconfig, err := writeKubeconfig(dir, cfg)
	if err != nil {
		return n, err
	}

	n.ContainerdLog = filepath.Join(dir, "containerd.log")
	if err := n.start("containerd", n.ContainerdLog, "containerd", "--config", filepath.Join(dir, "containerd.toml")); err != nil {
		return n, err
	}
	if err := waitFor(ctx, 30*time.Second, "containerd's socket", func() error {
		c, err := net.Dial("unix", filepath.Join(dir, "containerd.sock"))
		if err == nil {
			c.Close()
		}
		return err
	}); err != nil {
		return n, err
	}
	n.KubeletLog = filepath.Join(dir, "kubelet.log")
	if err := n.start("kubelet", n.KubeletLog, cfg.Kubelet,
		"--config="+filepath.Join(dir, "kubelet.yaml"),
		"--kubeconfig="+kubeconfig,
		"--root-dir="+filepath.Join(dir, "kubelet"),
		"--hostname-override="+cfg.Name,
		"--node-ip="+Gateway,
		"--v=2",
	); err != nil {
		return n, err
	}
	healthz := "http://127.0.0.1:" + vals["healthz"] + "/healthz"
	hc := &http.Client{Timeout: 2 * time.Second}
	if err := waitFor(ctx, 60*time.Second, "the kubelet's /healthz", func() error {
		resp, err := hc.Get(healthz)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("HTTP %d", resp.StatusCode)
		}
		return nil
	}); err != nil {
		return n, fmt.Errorf("%w; see %s", err, n.KubeletLog)
	}
	if err := n.waitReady(ctx); err != nil {
		return n, fmt.Errorf("%w; see %s", err, n.KubeletLog)
	}
	log.Info("real node ready", "node", cfg.Name, "ip", Gateway, "dir", dir)
	return n, nil
}

// waitReady waits for the Node to be Ready and removes the not-ready taint it registered with:
// no node-lifecycle controller runs here to remove it.
func (n *Node) waitReady(ctx context.Context) error {
	return waitFor(ctx, 60*time.Second, "node "+n.Name+" Ready", func() error {
		node, err := n.cfg.Client.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		ready := false
		for _, c := range node.Status.Conditions {
			if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
				ready = true
			}
		}
		if !ready {
			return errors.New("not Ready yet")
		}
		var kept []corev1.Taint
		for _, t := range node.Spec.Taints {
			if t.Key != corev1.TaintNodeNotReady {
				kept = append(kept, t)
			}
		}
		if len(kept) == len(node.Spec.Taints) {
			return nil
		}
		node.Spec.Taints = kept
		_, err = n.cfg.Client.CoreV1().Nodes().Update(ctx, node, metav1.UpdateOptions{})
		if err == nil {
			err = errors.New("removed the not-ready taint; checking again")
		}
		return err
	})
}

// start starts a process whose PID goes into the record before anything else happens, so that
// a crash of this process leaves enough to undo. The kernel kills it if this process dies.
func (n *Node) start(name, logPath, bin string, args ...string) error {
	logFile, err := os.Create(logPath)
	if err != nil {
		return fmt.Errorf("creating %s: %w", logPath, err)
	}
	defer logFile.Close()
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.Dir = n.cfg.Dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting %s: %w", name, err)
	}
	go func() { _ = cmd.Wait() }()
	n.procs = append(n.procs, cmd)
	n.rec.PIDs[name] = cmd.Process.Pid
	n.log.Info("started", "process", name, "pid", cmd.Process.Pid, "log", logPath)
	return n.rec.save()
}

// Stop stops the kubelet and containerd, kills the containers and puts the machine back as it
// was, then releases the lock. It fails when the machine still differs from what Start found.
// The Node object stays in the API.
func (n *Node) Stop() error {
	if n == nil || n.stopOnce {
		return nil
	}
	n.stopOnce = true
	defer n.unlock()
	if n.rec == nil {
		return nil
	}
	if err := n.rec.undo(n.log); err != nil {
		return err
	}
	if diff := n.before.Diff(ReadMachine()); len(diff) > 0 {
		return fmt.Errorf("the real node left the machine changed (its record %s is kept for make cluster-down):\n  %s", recordPath(), strings.Join(diff, "\n  "))
	}
	return os.Remove(recordPath())
}

// makeBridge creates the pods' bridge with the gateway address on it.
func makeBridge() error {
	for _, args := range [][]string{
		{"link", "add", Bridge, "type", "bridge"},
		{"addr", "add", Gateway + "/24", "dev", Bridge},
		{"link", "set", Bridge, "up"},
	} {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			return fmt.Errorf("creating bridge %s (ip %v): %w: %s", Bridge, args, err, out)
		}
	}
	return nil
}

func makeCgroupRoot() error {
	hier, _ := filepath.Glob("/sys/fs/cgroup/*")
	for _, h := range hier {
		if _, err := os.Stat(filepath.Join(h, "cgroup.procs")); err != nil {
			continue // not a hierarchy
		}
		if err := os.Mkdir(filepath.Join(h, cgroupRoot), 0o755); err != nil && !errors.Is(err, os.ErrExist) {
			return fmt.Errorf("creating cgroup %s: %w", filepath.Join(h, cgroupRoot), err)
		}
	}
	return nil
}

func writeKubeconfig(dir string, cfg Config) (string, error) {
	kc := clientcmdapi.NewConfig()
	kc.Clusters["local"] = &clientcmdapi.Cluster{Server: cfg.Server, CertificateAuthority: cfg.CACert}
	kc.AuthInfos["node"] = &clientcmdapi.AuthInfo{ClientCertificate: cfg.CertFile, ClientKey: cfg.KeyFile}
	kc.Contexts["local"] = &clientcmdapi.Context{Cluster: "local", AuthInfo: "node"}
	kc.CurrentContext = "local"
	p := filepath.Join(dir, "kubelet.kubeconfig")
	if err := clientcmd.WriteToFile(*kc, p); err != nil {
		return "", fmt.Errorf("writing %s: %w", p, err)
	}
	return p, nil
}

func waitFor(ctx context.Context, timeout time.Duration, what string, check func() error) error {
	deadline := time.Now().Add(timeout)
	for {
		err := check()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("waiting for %s: not done after %s: %w", what, timeout, err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s: %w", what, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func freePorts(n int) ([]int, error) {
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("finding a free port: %w", err)
		}
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// lock takes the machine-wide lock, waiting for it until ctx is done.
func lock(ctx context.Context) (func(), error) {
	if err := os.MkdirAll(stateDir(), 0o755); err != nil {
		return nil, fmt.Errorf("creating %s: %w", stateDir(), err)
	}
	f, err := os.OpenFile(filepath.Join(stateDir(), "lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("opening the real node's lock: %w", err)
	}
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return func() { _ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN); f.Close() }, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			f.Close()
			return nil, fmt.Errorf("locking the real node's lock: %w", err)
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, fmt.Errorf("waiting for the real node of another run on this machine to stop: %w", ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}
