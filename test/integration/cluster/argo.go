package cluster

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"
)

// Argo Rollouts as the tests and `make cluster-up ARGO=1` run it.
const (
	// ArgoVersion is the Argo Rollouts module hack/tools/argo-rollouts builds the controller from.
	ArgoVersion = "v1.10.1"
	// ArgoNamespace holds the controller's ServiceAccount and its argo-rollouts-config ConfigMap.
	ArgoNamespace = "argo-rollouts"
	// ArgoServiceAccount is the controller's ServiceAccount, as in Argo's install manifests.
	ArgoServiceAccount = "argo-rollouts"
	// ArgoUser is the user the controller and its plugins are authenticated as.
	ArgoUser = "system:serviceaccount:" + ArgoNamespace + ":" + ArgoServiceAccount
	// argoProcess names the controller's log and PID files.
	argoProcess = "rollouts-controller"
)

// ArgoOptions configure the Argo Rollouts controller.
type ArgoOptions struct {
	// PluginBinary is the inplace-rollout binary registered, by file:// and its sha256, as every
	// plugin config/argo/argo-rollouts-config.yaml names.
	PluginBinary string
}

// Argo is the Argo Rollouts controller StartArgo started. Cluster.Stop stops it.
type Argo struct {
	// Dir is its working directory: Argo copies its plugins into Dir/plugin-bin/NS/NAME.
	Dir string
	// Kubeconfig authenticates as ArgoUser; the controller and, through $KUBECONFIG, its
	// plugins use it.
	Kubeconfig string
	// ModuleDir is the Argo Rollouts module in the Go module cache (manifests, CRDs).
	ModuleDir string
	// LogPath is the controller's log, plugins' stderr included, across restarts.
	LogPath string
	// StepMetricsURL and TrafficMetricsURL are the /metrics of the step and traffic plugin
	// processes, on loopback ports given them through the controller's environment; each
	// answers once Argo started that plugin.
	StepMetricsURL, TrafficMetricsURL string

	c    *Cluster
	proc *process
}

// StartArgo installs Argo Rollouts as its manifests do (CRDs, namespace, ServiceAccount, Argo's
// stock ClusterRole) plus config/argo (our ClusterRole and the plugin registrations, pointed at
// opts.PluginBinary), then starts the controller as that ServiceAccount and waits until its
// rollout workers run. With the cluster's Prometheus, the controller's
// ARGO_ROLLOUTS_PROMETHEUS_ADDRESS is its URL.
func (c *Cluster) StartArgo(ctx context.Context, opts ArgoOptions) (*Argo, error) {
	if _, err := os.Stat(c.bin(argoProcess)); err != nil {
		return nil, fmt.Errorf("%s is missing from %s: run `make tools` (hack/tools/build.sh) first: %w", argoProcess, c.opts.BinDir, err)
	}
	plugin, err := filepath.Abs(opts.PluginBinary)
	if err != nil {
		return nil, fmt.Errorf("resolving the plugin binary %q: %w", opts.PluginBinary, err)
	}
	root, err := RepoRoot()
	if err != nil {
		return nil, err
	}
	a := &Argo{c: c, Dir: filepath.Join(c.Dir, "argo"), LogPath: filepath.Join(c.Dir, argoProcess+".log")}
	if a.ModuleDir, err = ArgoModuleDir(root); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(a.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("creating %s: %w", a.Dir, err)
	}
	if err := c.applyCRDs(ctx, "Argo Rollouts", argoCRDs(a.ModuleDir)); err != nil {
		return nil, err
	}
	if err := c.installArgo(ctx, a.ModuleDir, filepath.Join(root, "config", "argo"), plugin); err != nil {
		return nil, err
	}
	if a.Kubeconfig, err = c.writeServiceAccountKubeconfig(ctx, ArgoNamespace, ArgoServiceAccount, a.Dir); err != nil {
		return nil, err
	}
	if err := a.start(); err != nil {
		return nil, err
	}
	c.Argo = a
	return a, nil
}

// InstallArgoCRDs creates Argo Rollouts' CRDs as its manifests ship them, and nothing else: for
// a test that calls the plugins itself, as Argo's controller would, about Rollouts that exist.
func (c *Cluster) InstallArgoCRDs(ctx context.Context) error {
	root, err := RepoRoot()
	if err != nil {
		return err
	}
	dir, err := ArgoModuleDir(root)
	if err != nil {
		return err
	}
	return c.applyCRDs(ctx, "Argo Rollouts", argoCRDs(dir))
}

// argoCRDs matches the CRD files of Argo Rollouts' module at moduleDir.
func argoCRDs(moduleDir string) string {
	return filepath.Join(moduleDir, "manifests", "crds", "*-crd.yaml")
}

// installArgo creates the controller's namespace and ServiceAccount, binds it to Argo's stock
// ClusterRole and to ours, and creates argo-rollouts-config from config/argo with every plugin's
// location pointed at the plugin binary.
func (c *Cluster) installArgo(ctx context.Context, moduleDir, configDir, plugin string) error {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ArgoNamespace}}
	if _, err := c.Client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating namespace %s: %w", ArgoNamespace, err)
	}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: ArgoServiceAccount, Namespace: ArgoNamespace}}
	if _, err := c.Client.CoreV1().ServiceAccounts(ArgoNamespace).Create(ctx, sa, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating ServiceAccount %s/%s: %w", ArgoNamespace, ArgoServiceAccount, err)
	}
	stock, err := ArgoStockClusterRole(moduleDir)
	if err != nil {
		return err
	}
	ours, err := ReadClusterRole(filepath.Join(configDir, "clusterrole.yaml"))
	if err != nil {
		return err
	}
	var ourBinding rbacv1.ClusterRoleBinding
	if err := readYAML(filepath.Join(configDir, "clusterrolebinding.yaml"), &ourBinding); err != nil {
		return err
	}
	stockBinding := rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: stock.Name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: stock.Name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: ArgoServiceAccount, Namespace: ArgoNamespace}},
	}
	for _, role := range []*rbacv1.ClusterRole{stock, ours} {
		if _, err := c.Client.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("creating ClusterRole %s: %w", role.Name, err)
		}
	}
	for _, b := range []*rbacv1.ClusterRoleBinding{&stockBinding, &ourBinding} {
		if _, err := c.Client.RbacV1().ClusterRoleBindings().Create(ctx, b, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("creating ClusterRoleBinding %s: %w", b.Name, err)
		}
	}
	cm, err := argoConfigMap(filepath.Join(configDir, "argo-rollouts-config.yaml"), plugin)
	if err != nil {
		return err
	}
	if _, err := c.Client.CoreV1().ConfigMaps(ArgoNamespace).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating ConfigMap %s/%s: %w", ArgoNamespace, cm.Name, err)
	}
	return nil
}

// ArgoStockClusterRole reads Argo's own ClusterRole, as its manifests ship it.
func ArgoStockClusterRole(moduleDir string) (*rbacv1.ClusterRole, error) {
	return ReadClusterRole(filepath.Join(moduleDir, "manifests", "role", "argo-rollouts-clusterrole.yaml"))
}

// ReadClusterRole reads a ClusterRole manifest.
func ReadClusterRole(path string) (*rbacv1.ClusterRole, error) {
	var role rbacv1.ClusterRole
	if err := readYAML(path, &role); err != nil {
		return nil, err
	}
	if role.Kind != "ClusterRole" || role.Name == "" {
		return nil, fmt.Errorf("%s: want a named ClusterRole, have kind %q name %q", path, role.Kind, role.Name)
	}
	return &role, nil
}

// argoConfigMap reads the argo-rollouts-config manifest and points the location of each plugin
// it registers at the binary, with the binary's sha256.
func argoConfigMap(path, plugin string) (*corev1.ConfigMap, error) {
	var cm corev1.ConfigMap
	if err := readYAML(path, &cm); err != nil {
		return nil, err
	}
	data, err := os.ReadFile(plugin)
	if err != nil {
		return nil, fmt.Errorf("reading the plugin binary: %w", err)
	}
	sum := sha256.Sum256(data)
	for _, key := range []string{"stepPlugins", "trafficRouterPlugins"} {
		// Maps, not Argo's PluginItem, so that every field the file sets is kept as written.
		var items []map[string]any
		if err := yaml.Unmarshal([]byte(cm.Data[key]), &items); err != nil {
			return nil, fmt.Errorf("%s: data.%s: %w", path, key, err)
		}
		for _, item := range items {
			item["location"] = "file://" + plugin
			item["sha256"] = hex.EncodeToString(sum[:])
		}
		out, err := yaml.Marshal(items)
		if err != nil {
			return nil, fmt.Errorf("%s: data.%s: %w", path, key, err)
		}
		cm.Data[key] = string(out)
	}
	cm.Namespace = ArgoNamespace
	return &cm, nil
}

// tokenLifetime is how long a controller's token lasts: longer than any test run or
// `make cluster-up` session, since nothing renews it.
const tokenLifetime = 7 * 24 * time.Hour

// writeServiceAccountKubeconfig writes dir/kubeconfig, authenticating as the ServiceAccount
// namespace/name with a token from a TokenRequest, and returns its path.
func (c *Cluster) writeServiceAccountKubeconfig(ctx context.Context, namespace, name, dir string) (string, error) {
	tr := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
		ExpirationSeconds: ptr.To(int64(tokenLifetime / time.Second)),
	}}
	tr, err := c.Client.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, name, tr, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("requesting a token for ServiceAccount %s/%s: %w", namespace, name, err)
	}
	kc := clientcmdapi.NewConfig()
	kc.Clusters["local"] = &clientcmdapi.Cluster{Server: c.Config.Host, CertificateAuthorityData: c.Config.CAData}
	kc.AuthInfos[name] = &clientcmdapi.AuthInfo{Token: tr.Status.Token}
	kc.Contexts["local"] = &clientcmdapi.Context{Cluster: "local", AuthInfo: name, Namespace: namespace}
	kc.CurrentContext = "local"
	path := filepath.Join(dir, "kubeconfig")
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		return "", fmt.Errorf("writing %s: %w", path, err)
	}
	return path, nil
}

// start starts the controller on free ports and waits until its rollout workers run.
func (a *Argo) start() error {
	return a.c.onFreePorts(argoProcess, 4, func(ports []int) error {
		cmd := exec.Command(a.c.bin(argoProcess),
			"--kubeconfig", a.Kubeconfig,
			"--leader-elect=false",
			"--healthzPort", strconv.Itoa(ports[0]),
			"--metricsPort", strconv.Itoa(ports[1]),
			"--loglevel", "info",
		)
		// Plugins get the controller's environment, not its --kubeconfig flag; POD_NAMESPACE is
		// where it reads argo-rollouts-config.
		cmd.Env = append(os.Environ(), "KUBECONFIG="+a.Kubeconfig, "POD_NAMESPACE="+ArgoNamespace)
		// Each plugin process serves its metrics on its own port.
		step, traffic := "127.0.0.1:"+strconv.Itoa(ports[2]), "127.0.0.1:"+strconv.Itoa(ports[3])
		cmd.Env = append(cmd.Env, "INPLACE_ROLLOUT_METRICS_ADDR="+step, "INPLACE_ROLLOUT_TRAFFIC_METRICS_ADDR="+traffic)
		a.StepMetricsURL, a.TrafficMetricsURL = "http://"+step+"/metrics", "http://"+traffic+"/metrics"
		if a.c.PrometheusURL != "" {
			// The address of an AnalysisTemplate's prometheus provider that sets none, as an
			// installation sets it once for its cluster's Prometheus.
			cmd.Env = append(cmd.Env, "ARGO_ROLLOUTS_PROMETHEUS_ADDRESS="+a.c.PrometheusURL)
		}
		cmd.Dir = a.Dir
		p, err := startCommand(a.c.Dir, argoProcess, cmd, true)
		if err != nil {
			return err
		}
		a.c.procs = append(a.c.procs, p)
		a.proc = p
		a.c.log.Info("started", "process", argoProcess, "pid", p.cmd.Process.Pid)
		// Logged once its informers have synced.
		if err := a.c.waitFor(60*time.Second, p, "rollouts-controller (its log line \"Started rollout workers\")", func() error {
			if p.logContains("Started rollout workers") {
				return nil
			}
			return errors.New("rollout workers not started yet")
		}); err != nil {
			return err
		}
		// Argo logs a port it cannot bind and runs on; a retry gives it free ones.
		if p.logContains("address already in use") {
			_ = p.stop(10 * time.Second)
			return errPortInUse
		}
		return nil
	})
}

// Restart stops the controller (SIGTERM; its plugin processes exit with it) and starts it again
// in the same directory, as a controller Pod restarting would.
func (a *Argo) Restart() error {
	if err := a.stop(); err != nil {
		return err
	}
	return a.start()
}

func (a *Argo) stop() error {
	return a.c.stopProcess(a.proc, 30*time.Second)
}

// PluginPIDs returns the running plugin processes: those whose executable is under
// Dir/plugin-bin, where Argo copies its plugins and starts them from.
func (a *Argo) PluginPIDs() ([]int, error) {
	bin := filepath.Join(a.Dir, "plugin-bin") + string(filepath.Separator)
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, fmt.Errorf("listing processes: %w", err)
	}
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		exe, err := os.Readlink(filepath.Join("/proc", e.Name(), "exe"))
		if err != nil {
			continue
		}
		if strings.HasPrefix(strings.TrimSuffix(exe, " (deleted)"), bin) {
			pids = append(pids, pid)
		}
	}
	return pids, nil
}

// KillPlugins SIGKILLs every plugin process, as a crash would, and returns their PIDs. Argo
// starts a plugin again on its next call to it.
func (a *Argo) KillPlugins() ([]int, error) {
	pids, err := a.PluginPIDs()
	if err != nil {
		return nil, err
	}
	for _, pid := range pids {
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
			return nil, fmt.Errorf("killing plugin process %d: %w", pid, err)
		}
	}
	return pids, nil
}

// readYAML decodes the YAML manifest at path into out.
func readYAML(path string, out any) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("reading %s: %w", path, err)
	}
	if err := yaml.Unmarshal(data, out); err != nil {
		return fmt.Errorf("decoding %s: %w", path, err)
	}
	return nil
}

// waitUntil polls check every 100ms until it succeeds or timeout passes.
func waitUntil(ctx context.Context, timeout time.Duration, check func() error) error {
	deadline := time.Now().Add(timeout)
	for {
		err := check()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("after %s: %w", timeout, err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last: %v)", ctx.Err(), err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// ArgoModuleDir returns Argo Rollouts' module directory, downloading the module when missing,
// as the tool module hack/tools/argo-rollouts of the repository at root pins it.
func ArgoModuleDir(root string) (string, error) {
	return moduleDir(root, "argo-rollouts", "github.com/argoproj/argo-rollouts", ArgoVersion, "Argo Rollouts")
}
