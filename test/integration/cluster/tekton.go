package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// The Tekton Pipelines controller as the tests and `make cluster-up TEKTON=1` run it.
const (
	// TektonVersion is the Tekton Pipelines module hack/tools/tekton builds the controller from.
	TektonVersion = "v1.6.0"
	// TektonNamespace is the controller's SYSTEM_NAMESPACE: its ServiceAccount and ConfigMaps.
	TektonNamespace = "tekton-pipelines"
	// TektonServiceAccount is the controller's ServiceAccount, as in Tekton's release manifests.
	TektonServiceAccount = "tekton-pipelines-controller"
	// TektonUser is the user the controller is authenticated as.
	TektonUser = "system:serviceaccount:" + TektonNamespace + ":" + TektonServiceAccount
	// tektonProcess names the controller's binary, log and PID files.
	tektonProcess = "tekton-controller"
)

// tektonConfigMaps are the files of the module's config/ holding the seven ConfigMaps the
// controller watches without defaults: it exits at start-up if one is missing.
var tektonConfigMaps = []string{
	"config-defaults.yaml",
	"config-feature-flags.yaml",
	"config-observability.yaml",
	"config-spire.yaml",
	"config-events.yaml",
	"config-tracing.yaml",
	"config-wait-exponential-backoff.yaml",
}

// tektonRBACFiles are the files of the module's config/ with the ServiceAccounts, roles and
// bindings of Tekton's release, applied as written.
var tektonRBACFiles = []string{
	"200-serviceaccount.yaml",
	"200-clusterrole.yaml",
	"200-role.yaml",
	"201-clusterrolebinding.yaml",
	"201-rolebinding.yaml",
}

// Tekton is the Tekton Pipelines controller StartTekton started. Cluster.Stop stops it.
type Tekton struct {
	// Dir is its working directory, holding its kubeconfig.
	Dir string
	// Kubeconfig authenticates as TektonUser.
	Kubeconfig string
	// ModuleDir is the Tekton Pipelines module in the Go module cache (config/, CRDs).
	ModuleDir string
	// LogPath is the controller's log, across restarts.
	LogPath string

	c    *Cluster
	proc *process
}

// StartTekton installs Tekton Pipelines as its release manifests do (CRDs, namespace, the
// seven ConfigMaps it requires, its ServiceAccount with Tekton's own roles and bindings), then
// starts the controller as that ServiceAccount and waits until its informers have synced and
// its PipelineRun reconciler runs. No webhook runs: objects are created as tekton.dev/v1 (CustomRun as
// v1beta1, its only version), so the apiserver never calls the conversion webhook the CRDs
// name, and the controller validates and defaults what it reconciles itself.
func (c *Cluster) StartTekton(ctx context.Context) (*Tekton, error) {
	if _, err := os.Stat(c.bin(tektonProcess)); err != nil {
		return nil, fmt.Errorf("%s is missing from %s: run `make tools` (hack/tools/build.sh) first: %w", tektonProcess, c.opts.BinDir, err)
	}
	root, err := RepoRoot()
	if err != nil {
		return nil, err
	}
	t := &Tekton{c: c, Dir: filepath.Join(c.Dir, "tekton"), LogPath: filepath.Join(c.Dir, tektonProcess+".log")}
	if t.ModuleDir, err = TektonModuleDir(root); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(t.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("creating %s: %w", t.Dir, err)
	}
	config := filepath.Join(t.ModuleDir, "config")
	if err := c.applyCRDs(ctx, "Tekton", filepath.Join(config, "300-crds", "*.yaml")); err != nil {
		return nil, err
	}
	if err := c.installTekton(ctx, config); err != nil {
		return nil, err
	}
	if t.Kubeconfig, err = c.writeServiceAccountKubeconfig(ctx, TektonNamespace, TektonServiceAccount, t.Dir); err != nil {
		return nil, err
	}
	if err := t.start(); err != nil {
		return nil, err
	}
	c.Tekton = t
	return t, nil
}

// installTekton creates, from the module's config directory, the namespace, the
// ServiceAccounts, roles and bindings, and the seven ConfigMaps the controller requires.
func (c *Cluster) installTekton(ctx context.Context, config string) error {
	var ns corev1.Namespace
	if err := readYAML(filepath.Join(config, "100-namespace", "100-namespace.yaml"), &ns); err != nil {
		return err
	}
	if ns.Name != TektonNamespace {
		return fmt.Errorf("%s/100-namespace/100-namespace.yaml: want namespace %s, have %q", config, TektonNamespace, ns.Name)
	}
	if _, err := c.Client.CoreV1().Namespaces().Create(ctx, &ns, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating namespace %s: %w", ns.Name, err)
	}
	for _, f := range tektonRBACFiles {
		if err := c.createManifests(ctx, filepath.Join(config, f)); err != nil {
			return err
		}
	}
	for _, f := range tektonConfigMaps {
		var cm corev1.ConfigMap
		path := filepath.Join(config, f)
		if err := readYAML(path, &cm); err != nil {
			return err
		}
		if cm.Kind != "ConfigMap" || cm.Namespace != TektonNamespace {
			return fmt.Errorf("%s: want a ConfigMap in %s, have kind %q namespace %q", path, TektonNamespace, cm.Kind, cm.Namespace)
		}
		if _, err := c.Client.CoreV1().ConfigMaps(TektonNamespace).Create(ctx, &cm, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("creating ConfigMap %s/%s from %s: %w", TektonNamespace, cm.Name, path, err)
		}
	}
	return nil
}

// createManifests creates every object of a multi-document YAML file; it knows the kinds of
// Tekton's RBAC manifests and of config/tekton's.
func (c *Cluster) createManifests(ctx context.Context, path string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("reading %s: %w", path, err)
	}
	for i, doc := range splitYAML(data) {
		var meta metav1.TypeMeta
		if err := yaml.Unmarshal(doc, &meta); err != nil {
			return fmt.Errorf("decoding document %d of %s: %w", i+1, path, err)
		}
		if meta.Kind == "" {
			continue
		}
		if err := c.createManifest(ctx, meta.Kind, doc); err != nil {
			return fmt.Errorf("document %d of %s: %w", i+1, path, err)
		}
	}
	return nil
}

func (c *Cluster) createManifest(ctx context.Context, kind string, doc []byte) error {
	var err error
	var name string
	switch kind {
	case "Namespace":
		var o corev1.Namespace
		if err = yaml.Unmarshal(doc, &o); err == nil {
			name = o.Name
			_, err = c.Client.CoreV1().Namespaces().Create(ctx, &o, metav1.CreateOptions{})
		}
	case "ServiceAccount":
		var o corev1.ServiceAccount
		if err = yaml.Unmarshal(doc, &o); err == nil {
			name = o.Namespace + "/" + o.Name
			_, err = c.Client.CoreV1().ServiceAccounts(o.Namespace).Create(ctx, &o, metav1.CreateOptions{})
		}
	case "ClusterRole":
		var o rbacv1.ClusterRole
		if err = yaml.Unmarshal(doc, &o); err == nil {
			name = o.Name
			_, err = c.Client.RbacV1().ClusterRoles().Create(ctx, &o, metav1.CreateOptions{})
		}
	case "ClusterRoleBinding":
		var o rbacv1.ClusterRoleBinding
		if err = yaml.Unmarshal(doc, &o); err == nil {
			name = o.Name
			_, err = c.Client.RbacV1().ClusterRoleBindings().Create(ctx, &o, metav1.CreateOptions{})
		}
	case "Role":
		var o rbacv1.Role
		if err = yaml.Unmarshal(doc, &o); err == nil {
			name = o.Namespace + "/" + o.Name
			_, err = c.Client.RbacV1().Roles(o.Namespace).Create(ctx, &o, metav1.CreateOptions{})
		}
	case "RoleBinding":
		var o rbacv1.RoleBinding
		if err = yaml.Unmarshal(doc, &o); err == nil {
			name = o.Namespace + "/" + o.Name
			_, err = c.Client.RbacV1().RoleBindings(o.Namespace).Create(ctx, &o, metav1.CreateOptions{})
		}
	default:
		return fmt.Errorf("kind %s is not one this harness creates", kind)
	}
	if err != nil {
		return fmt.Errorf("creating %s %s: %w", kind, name, err)
	}
	return nil
}

// splitYAML splits a multi-document YAML file at its "---" lines.
func splitYAML(data []byte) [][]byte {
	var docs [][]byte
	var cur []byte
	for _, line := range bytes.SplitAfter(data, []byte("\n")) {
		if strings.TrimSpace(string(line)) == "---" {
			docs = append(docs, cur)
			cur = nil
			continue
		}
		cur = append(cur, line...)
	}
	return append(docs, cur)
}

// tektonImages are the six image flags the controller refuses to start without. They name the
// images of TaskRun pods, which no test here runs: any non-empty value serves.
var tektonImages = []string{
	"-entrypoint-image", "example.invalid/tekton/entrypoint",
	"-nop-image", "example.invalid/tekton/nop",
	"-sidecarlogresults-image", "example.invalid/tekton/sidecarlogresults",
	"-workingdirinit-image", "example.invalid/tekton/workingdirinit",
	"-shell-image", "example.invalid/tekton/shell",
	"-shell-image-win", "example.invalid/tekton/shell-win",
}

// maxKnativeMetricsPort is the highest port knative's metrics exporter accepts: it parses
// METRICS_PROMETHEUS_PORT as a signed 16-bit number.
const maxKnativeMetricsPort = 32767

// start starts the controller with free ports for its probes, metrics and profiling servers
// and waits until its PipelineRun reconciler runs.
func (t *Tekton) start() error {
	return t.c.onFreePorts(tektonProcess, 2, func(ports []int) error {
		metricsPort, err := freePortBelow(maxKnativeMetricsPort)
		if err != nil {
			return err
		}
		args := append([]string{"-kubeconfig", t.Kubeconfig, "-disable-ha"}, tektonImages...)
		cmd := exec.Command(t.c.bin(tektonProcess), args...)
		// The environment of Tekton's config/controller.yaml, with ports of our own.
		cmd.Env = append(os.Environ(),
			"KUBECONFIG="+t.Kubeconfig,
			"SYSTEM_NAMESPACE="+TektonNamespace,
			"KUBERNETES_MIN_VERSION=v1.28.0",
			"CONFIG_DEFAULTS_NAME=config-defaults",
			"CONFIG_LOGGING_NAME=config-logging",
			"CONFIG_OBSERVABILITY_NAME=config-observability",
			"CONFIG_FEATURE_FLAGS_NAME=feature-flags",
			"CONFIG_LEADERELECTION_NAME=config-leader-election-controller",
			"CONFIG_SPIRE=config-spire",
			"METRICS_DOMAIN=tekton.dev/pipeline",
			"PROBES_PORT="+strconv.Itoa(ports[0]),
			"PROFILING_PORT="+strconv.Itoa(ports[1]),
			"METRICS_PROMETHEUS_HOST=127.0.0.1",
			"METRICS_PROMETHEUS_PORT="+strconv.Itoa(metricsPort),
		)
		cmd.Dir = t.Dir
		p, err := startCommand(t.c.Dir, tektonProcess, cmd, true)
		if err != nil {
			return err
		}
		t.c.procs = append(t.c.procs, p)
		t.proc = p
		t.c.log.Info("started", "process", tektonProcess, "pid", p.cmd.Process.Pid)
		// knative's sharedmain logs "Starting controllers..." once the informers have synced,
		// then each controller logs "Started workers". It also serves probes on port 8080,
		// which no setting moves; with that port taken it runs on without them, so the harness
		// neither needs nor checks it.
		return t.c.waitFor(60*time.Second, p, "tekton-controller (its PipelineRun reconciler's log line \"Started workers\")", func() error {
			data, err := p.log()
			if err != nil {
				return err
			}
			for _, line := range strings.Split(string(data), "\n") {
				if strings.Contains(line, "Started workers") && strings.Contains(line, "pipelinerun.Reconciler") {
					return nil
				}
			}
			return errors.New("the PipelineRun reconciler's workers have not started yet")
		})
	})
}

// freePortBelow returns a loopback port no higher than max that is free now.
func freePortBelow(max int) (int, error) {
	const min = 20000
	for range 100 {
		port := min + rand.IntN(max-min+1)
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
		if err != nil {
			continue
		}
		l.Close()
		return port, nil
	}
	return 0, fmt.Errorf("finding a free loopback port between %d and %d: 100 tries found none", min, max)
}

// PID is the controller process's id.
func (t *Tekton) PID() int {
	return t.proc.cmd.Process.Pid
}

// Restart stops the controller (SIGTERM) and starts it again, as a controller Pod restarting
// would.
func (t *Tekton) Restart() error {
	if err := t.c.stopProcess(t.proc, 30*time.Second); err != nil {
		return err
	}
	return t.start()
}

// TektonModuleDir returns Tekton Pipelines' module directory, downloading the module when
// missing, as the tool module hack/tools/tekton of the repository at root pins it.
func TektonModuleDir(root string) (string, error) {
	return moduleDir(root, "tekton", "github.com/tektoncd/pipeline", TektonVersion, "Tekton Pipelines")
}
