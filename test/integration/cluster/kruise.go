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
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
)

// OpenKruise's kruise-manager as the benchmark runs it: the incumbent in-place updater.
const (
	// KruiseVersion is the OpenKruise module hack/tools/kruise builds kruise-manager from.
	KruiseVersion = "v1.8.3"
	// KruiseNamespace is kruise-manager's POD_NAMESPACE, as in OpenKruise's chart.
	KruiseNamespace = "kruise-system"
	// KruiseBuild is the command that builds kruise-manager into the tool cache.
	KruiseBuild = "hack/tools/build.sh kruise-manager"
	// kruiseProcess names the binary, log and PID files.
	kruiseProcess = "kruise-manager"
)

// kruiseCRDs are the CRDs installed, from the module's config/crd/bases. kruise-manager sets
// up the controller of a kind only when its CRD is served, so installing few leaves the other
// controllers idle: it has no flag that picks controllers. ImagePullJob's is there because
// kruise-manager indexes ImagePullJobs at start-up whatever runs; its controller needs the
// KruiseDaemon feature, which is off.
var kruiseCRDs = []string{"apps.kruise.io_clonesets.yaml", "apps.kruise.io_imagepulljobs.yaml"}

// kruiseWebhookConfigurations are the names kruise-manager requires to exist before it starts
// its controllers; it fills them from their own webhooks, and these have none.
const (
	kruiseMutatingWebhookConfiguration   = "kruise-mutating-webhook-configuration"
	kruiseValidatingWebhookConfiguration = "kruise-validating-webhook-configuration"
)

// KruiseOptions configure kruise-manager.
type KruiseOptions struct {
	// QPS and Burst, when above 0, are its client-side rate limit (--rest-config-qps,
	// --rest-config-burst, whole numbers in its main.go), set on the rest.Config every client
	// of its own is built from; zero keeps its defaults, 30 requests/s and a burst of 50.
	QPS, Burst int
	// Settled makes StartKruise wait, beyond its CloneSet controller's workers, until its
	// set-up has probed discovery for every kind it knows (about 4 more minutes, see
	// StartKruise) and its CloneSet controller has reconciled a probe CloneSet: a benchmark
	// then measures its rollouts, not its start.
	Settled bool
}

// Args are kruise-manager's flags that the options set.
func (o KruiseOptions) Args() []string {
	var args []string
	if o.QPS > 0 {
		args = append(args, "--rest-config-qps="+strconv.Itoa(o.QPS))
	}
	if o.Burst > 0 {
		args = append(args, "--rest-config-burst="+strconv.Itoa(o.Burst))
	}
	return args
}

// Kruise is the kruise-manager StartKruise started. Cluster.Stop stops it.
type Kruise struct {
	// Dir is its working directory: its webhook certificates and protection log.
	Dir string
	// ModuleDir is the OpenKruise module in the Go module cache (config/crd/bases).
	ModuleDir string
	// LogPath is kruise-manager's log.
	LogPath string
	// MetricsURL is its Prometheus /metrics, on a loopback port.
	MetricsURL string

	c       *Cluster
	proc    *process
	healthz string
}

// StartKruise installs OpenKruise's CloneSet and ImagePullJob CRDs and starts kruise-manager
// against the cluster as admin, without leader election, and waits until its CloneSet
// controller runs, about a minute (with opts.Settled, until its set-up has ended). Started
// again after Stop, it finds what the first start installed. Its set-up then goes on in the background through the 14
// later kinds without a CRD, about 16 s and 4 discovery requests each, and adds on the way the
// two pod controllers it always runs (pod readiness, container launch priority), which watch
// pods but act only on pods that ask for them.
//
// Webhooks are off as far as kruise-manager allows: it cannot start its controllers without
// serving its webhook server (it waits for that server's /healthz), so the server runs, but
// the webhook configurations it fills are created empty, so the apiserver never calls it.
// CloneSets are therefore neither defaulted nor validated: a test sets every field it relies on.
// The PodWebhook and KruiseDaemon feature gates are off, as no pod webhook and no kruise-daemon
// run here. The webhook server binds all interfaces on a free port: kruise-manager hard-codes
// the host 0.0.0.0.
func (c *Cluster) StartKruise(ctx context.Context, opts KruiseOptions) (*Kruise, error) {
	if _, err := os.Stat(c.bin(kruiseProcess)); err != nil {
		return nil, fmt.Errorf("%s is missing from %s: run `%s` first: %w", kruiseProcess, c.opts.BinDir, KruiseBuild, err)
	}
	root, err := RepoRoot()
	if err != nil {
		return nil, err
	}
	k := &Kruise{c: c, Dir: filepath.Join(c.Dir, "kruise"), LogPath: filepath.Join(c.Dir, kruiseProcess+".log")}
	if k.ModuleDir, err = KruiseModuleDir(root); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Join(k.Dir, "certs"), 0o755); err != nil {
		return nil, fmt.Errorf("creating %s: %w", k.Dir, err)
	}
	// A kruise-manager started again after Stop finds what the first one had installed.
	if !c.kruiseInstalled {
		for _, f := range kruiseCRDs {
			if err := c.applyCRDs(ctx, "OpenKruise", filepath.Join(k.ModuleDir, "config", "crd", "bases", f)); err != nil {
				return nil, err
			}
		}
		if err := c.installKruise(ctx); err != nil {
			return nil, err
		}
		c.kruiseInstalled = true
	}
	if err := k.start(opts); err != nil {
		return nil, err
	}
	if opts.Settled {
		if err := k.settle(ctx); err != nil {
			_ = k.Stop()
			return nil, err
		}
	}
	c.Kruise = k
	return k, nil
}

// kruiseLastProbe is what kruise-manager logs when its set-up ends: the last controller it
// adds (ImageListPullJob's, last of pkg/controller's list in v1.8.3) first asks discovery for
// its kind, which has no CRD here, and logs this once the retries are spent.
var kruiseLastProbe = []string{`"Not found kind in group version"`, `ImageListPullJob`}

// kruiseSettleTimeout bounds the wait for kruise-manager's set-up to end: about 16 s for each
// of some 17 kinds without a CRD.
const kruiseSettleTimeout = 8 * time.Minute

// settle waits until kruise-manager's set-up has ended (its log's kruiseLastProbe), then until
// its CloneSet controller reconciles a probe CloneSet of no pods, which it then deletes.
func (k *Kruise) settle(ctx context.Context) error {
	if err := k.c.waitFor(kruiseSettleTimeout, k.proc, "kruise-manager's set-up (the discovery of the last kind it probes, ImageListPullJob)", func() error {
		if !k.proc.logLineContains(kruiseLastProbe...) {
			return errors.New("still probing discovery")
		}
		return nil
	}); err != nil {
		return err
	}
	dyn, err := dynamic.NewForConfig(k.c.Config)
	if err != nil {
		return fmt.Errorf("building a dynamic client: %w", err)
	}
	sets := dyn.Resource(kruiseCloneSets).Namespace(KruiseNamespace)
	probe := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apps.kruise.io/v1alpha1",
		"kind":       "CloneSet",
		"metadata":   map[string]any{"generateName": "probe-"},
		"spec": map[string]any{
			"replicas":             int64(0),
			"revisionHistoryLimit": int64(10),
			"selector":             map[string]any{"matchLabels": map[string]any{"kruise-probe": "true"}},
			"template":             map[string]any{"metadata": map[string]any{"labels": map[string]any{"kruise-probe": "true"}}, "spec": map[string]any{"containers": []any{map[string]any{"name": "probe", "image": "registry.example/probe:v1"}}}},
			"scaleStrategy":        map[string]any{},
			"updateStrategy":       map[string]any{"type": "InPlaceIfPossible", "partition": int64(0), "maxUnavailable": int64(1), "maxSurge": int64(0)},
		},
	}}
	created, err := sets.Create(ctx, probe, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("creating a probe CloneSet in %s: %w", KruiseNamespace, err)
	}
	defer func() { _ = sets.Delete(context.Background(), created.GetName(), metav1.DeleteOptions{}) }()
	return k.c.waitFor(time.Minute, k.proc, "kruise-manager's CloneSet controller (reconciling CloneSet "+KruiseNamespace+"/"+created.GetName()+")", func() error {
		got, err := sets.Get(ctx, created.GetName(), metav1.GetOptions{})
		if err != nil {
			return err
		}
		observed, _, _ := unstructured.NestedInt64(got.Object, "status", "observedGeneration")
		if observed != got.GetGeneration() {
			return fmt.Errorf("status.observedGeneration %d, generation %d", observed, got.GetGeneration())
		}
		return nil
	})
}

// kruiseCloneSets is OpenKruise's CloneSet resource.
var kruiseCloneSets = schema.GroupVersionResource{Group: "apps.kruise.io", Version: "v1alpha1", Resource: "clonesets"}

// installKruise creates kruise-manager's namespace and the two webhook configurations it
// requires, with no webhooks.
func (c *Cluster) installKruise(ctx context.Context) error {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: KruiseNamespace}}
	if _, err := c.Client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating namespace %s: %w", KruiseNamespace, err)
	}
	admission := c.Client.AdmissionregistrationV1()
	mutating := &admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: kruiseMutatingWebhookConfiguration}}
	if _, err := admission.MutatingWebhookConfigurations().Create(ctx, mutating, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating MutatingWebhookConfiguration %s: %w", mutating.Name, err)
	}
	validating := &admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: kruiseValidatingWebhookConfiguration}}
	if _, err := admission.ValidatingWebhookConfigurations().Create(ctx, validating, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating ValidatingWebhookConfiguration %s: %w", validating.Name, err)
	}
	return nil
}

// start starts kruise-manager on free ports and waits until it is ready: its /readyz answers
// once its webhook server is up, and its controllers are set up only after that.
func (k *Kruise) start(opts KruiseOptions) error {
	return k.c.onFreePorts(kruiseProcess, 3, func(ports []int) error {
		metrics := "127.0.0.1:" + strconv.Itoa(ports[0])
		health := "127.0.0.1:" + strconv.Itoa(ports[1])
		cmd := exec.Command(k.c.bin(kruiseProcess), append([]string{
			"--kubeconfig=" + k.c.Kubeconfig,
			"--enable-leader-election=false",
			"--metrics-addr=" + metrics,
			"--health-probe-addr=" + health,
			"--enable-pprof=false",
			"--protection-log-path=" + k.Dir,
			"--feature-gates=PodWebhook=false,KruiseDaemon=false",
		}, opts.Args()...)...)
		// A WEBHOOK_HOST makes kruise-manager write its self-signed certificates for that host
		// into WEBHOOK_CERT_DIR instead of a Secret; its health check calls https://localhost.
		cmd.Env = append(os.Environ(),
			"POD_NAMESPACE="+KruiseNamespace,
			"WEBHOOK_HOST=localhost",
			"WEBHOOK_PORT="+strconv.Itoa(ports[2]),
			"WEBHOOK_CERT_DIR="+filepath.Join(k.Dir, "certs"),
		)
		cmd.Dir = k.Dir
		p, err := startCommand(k.c.Dir, kruiseProcess, cmd, false)
		if err != nil {
			return err
		}
		k.c.procs = append(k.c.procs, p)
		k.proc = p
		k.MetricsURL = "http://" + metrics + "/metrics"
		k.healthz = "http://" + health + "/readyz"
		k.c.log.Info("started", "process", kruiseProcess, "pid", p.cmd.Process.Pid)
		client := &http.Client{Timeout: 2 * time.Second}
		// Its start-up asks discovery for every kind it knows, and each kind without a CRD costs
		// about 16 s of retries (a fixed backoff): about a minute until the CloneSet
		// controller, set up third, runs. The kinds after it are probed meanwhile, in the
		// background.
		return k.c.waitFor(3*time.Minute, p, "kruise-manager (its /readyz, then its CloneSet controller's workers)", func() error {
			if err := httpOK(client, k.healthz); err != nil {
				return err
			}
			if !p.logContains(`"Starting workers" "controller"="cloneset-controller"`) {
				return errors.New("the CloneSet controller's workers have not started yet")
			}
			return nil
		})
	})
}

// PID is kruise-manager's process id.
func (k *Kruise) PID() int {
	return k.proc.cmd.Process.Pid
}

// Stop stops kruise-manager (SIGTERM, then SIGKILL after 30s).
func (k *Kruise) Stop() error {
	return k.c.stopProcess(k.proc, 30*time.Second)
}

// KruiseModuleDir returns OpenKruise's module directory, downloading the module when missing,
// as the tool module hack/tools/kruise of the repository at root pins it.
func KruiseModuleDir(root string) (string, error) {
	return moduleDir(root, "kruise", "github.com/openkruise/kruise", KruiseVersion, "OpenKruise")
}
