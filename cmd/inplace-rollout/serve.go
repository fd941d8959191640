package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/client-go/util/flowcontrol"

	"github.com/inplace-rollout/inplace-rollout/pkg/metrics"
	"github.com/inplace-rollout/inplace-rollout/pkg/notify"
	"github.com/inplace-rollout/inplace-rollout/pkg/registry"
	"github.com/inplace-rollout/inplace-rollout/pkg/rollout"
)

// controllerFlags are the flags of the commands that run a controller of rollouts: controller
// and tekton-controller.
type controllerFlags struct {
	kubeconfig, namespace, healthAddr string
	leaderElect                       bool
	leaseNamespace, leaseName         string
	workers                           int
	pullerImage                       string
	qps                               float32
	burst                             int
	notifySecret                      string
}

// register adds the flags to fl; objects names what the controller reconciles, for the help.
func (f *controllerFlags) register(fl *pflag.FlagSet, objects, leaseName string, workers int) {
	fl.StringVar(&f.kubeconfig, "kubeconfig", "", "path of the kubeconfig file (default: in-cluster config, else $KUBECONFIG or ~/.kube/config)")
	fl.StringVarP(&f.namespace, "namespace", "n", "", "reconcile "+objects+" in this namespace only (default: all namespaces)")
	fl.StringVar(&f.healthAddr, "health-addr", "", "serve /healthz, /readyz (ready once "+objects+" are listed) and Prometheus /metrics on this address, e.g. :8081 (default: off)")
	fl.BoolVar(&f.leaderElect, "leader-elect", true, "reconcile only while holding the Lease, so that several replicas can run")
	fl.StringVar(&f.leaseNamespace, "leader-election-namespace", "", "namespace of the Lease (default: $POD_NAMESPACE, else inplace-rollout-system)")
	fl.StringVar(&f.leaseName, "leader-election-id", leaseName, "name of the Lease")
	fl.IntVar(&f.workers, "workers", workers, objects+" reconciled at once")
	fl.StringVar(&f.pullerImage, "puller-image", defaultPullerImage(), "the image holding the puller binary that a rollout with prePull runs on each node: $"+pullerImageEnv+" when set, else this version's image")
	fl.Float32Var(&f.qps, "kube-api-qps", 50, "requests per second to the Kubernetes API, sustained")
	fl.IntVar(&f.burst, "kube-api-burst", 100, "requests to the Kubernetes API allowed in a burst above --kube-api-qps")
	fl.StringVar(&f.notifySecret, "notify-secret", "", "a Secret in the Lease's namespace whose key url names a webhook (and key token, if any, its bearer token): each rollout's outcome (succeeded, paused, rolled back, needs a person) is posted there as a CloudEvents JSON document; read at start")
}

// check checks the flags and fills in the Lease's namespace.
func (f *controllerFlags) check() error {
	if f.workers < 1 {
		return badInput("--workers must be at least 1")
	}
	if f.qps <= 0 || f.burst <= 0 {
		return badInput("--kube-api-qps and --kube-api-burst must be positive")
	}
	if f.leaseNamespace == "" {
		f.leaseNamespace = os.Getenv("POD_NAMESPACE")
	}
	if f.leaseNamespace == "" {
		f.leaseNamespace = "inplace-rollout-system"
	}
	for flag, v := range map[string]string{"--leader-election-namespace": f.leaseNamespace, "--leader-election-id": f.leaseName} {
		if errs := validation.IsDNS1123Subdomain(v); len(errs) > 0 {
			return badInput("%s %q: %s", flag, v, errs[0])
		}
	}
	return nil
}

// config is the client config the flags name.
func (f *controllerFlags) config() (*rest.Config, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = f.kubeconfig
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return nil, badInput("loading kubeconfig (pass --kubeconfig, set $KUBECONFIG, or run in a pod): %v", err)
	}
	return cfg, nil
}

// controllerClients are a controller's clients: every client built from shared (the Kubernetes
// and dynamic ones here, any other a controller adds) takes its tokens from one bucket, since
// client-go gives each client built from a config without one a bucket of its own, so the rate
// limit is the controller's; the Lease is renewed on a client of its own, outside that limit, as
// kube-controller-manager does: a controller busy at its limit must not lose its Lease.
type controllerClients struct {
	shared *rest.Config
	kube   kubernetes.Interface
	dyn    dynamic.Interface
	lease  kubernetes.Interface
}

func newControllerClients(cfg *rest.Config, component string, qps float32, burst int) (*controllerClients, error) {
	cfg = rest.CopyConfig(cfg)
	cfg.UserAgent = "inplace-rollout-" + component + "/" + version
	cfg.QPS, cfg.Burst = qps, burst
	leaseCfg := rest.CopyConfig(cfg)
	cfg.RateLimiter = flowcontrol.NewTokenBucketRateLimiter(qps, burst)
	c := controllerClients{shared: cfg}
	var err error
	if c.kube, err = kubernetes.NewForConfig(cfg); err != nil {
		return nil, badInput("building a client for %s: %v", cfg.Host, err)
	}
	if c.dyn, err = dynamic.NewForConfig(cfg); err != nil {
		return nil, badInput("building a dynamic client for %s: %v", cfg.Host, err)
	}
	if c.lease, err = kubernetes.NewForConfig(leaseCfg); err != nil {
		return nil, badInput("building a client for %s: %v", cfg.Host, err)
	}
	return &c, nil
}

// watchingReconciler is a controller of rollouts: it lists and watches its objects (Watch), then
// reconciles them while this replica leads (Reconcile).
type watchingReconciler interface {
	Watch(ctx context.Context) error
	Reconcile(ctx context.Context)
	Synced() bool
}

// serveController runs the controller that build makes from the clients and the engine until
// SIGTERM or Ctrl-C: its Events as component, its webhook from --notify-secret, its health and
// metrics server, its Lease. notListed is what /readyz says before the objects are listed.
func serveController(cmd *cobra.Command, f controllerFlags, c *controllerClients, component, notListed string,
	build func(engine *rollout.Engine, log *slog.Logger) watchingReconciler) error {
	log := slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), nil))
	reg, recorder := metrics.NewRegistry()
	events := &processEvents{}
	defer events.close(log)
	eventRecorder, err := events.recorder(c.kube, component, log)
	if err != nil {
		return &exitError{code: 1, err: fmt.Errorf("%s: %w", component, err)}
	}
	engine := &rollout.Engine{Client: c.kube, Events: eventRecorder, Registry: &registry.Resolver{Client: c.kube}, PullerImage: f.pullerImage, Log: log, Metrics: recorder}
	if f.notifySecret != "" {
		hook, err := webhookFromSecret(cmd.Context(), c.kube, f.leaseNamespace, f.notifySecret, log)
		if err != nil {
			return err
		}
		defer func() {
			if err := hook.Close(eventDrain); err != nil {
				log.Warn("notifications lost", "err", err)
			}
		}()
		engine.Notifier = hook
	}
	ctrl := build(engine, log)

	ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	stopHealth, err := serveHealth(f.healthAddr, healthHandler(ctrl.Synced, notListed, metrics.Handler(reg)), log)
	if err != nil {
		return err
	}
	defer stopHealth()
	if err := ctrl.Watch(ctx); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return &exitError{code: 1, err: fmt.Errorf("%s: %w", component, err)}
	}
	if !f.leaderElect {
		ctrl.Reconcile(ctx)
		return nil
	}
	return lead(ctx, c.lease, f, log, ctrl.Reconcile)
}

// lead runs reconcile while this process holds the Lease. Losing it ends the process (exit 1),
// as client-go's leader election expects: another replica has taken over.
func lead(ctx context.Context, kube kubernetes.Interface, f controllerFlags, log *slog.Logger, reconcile func(context.Context)) error {
	id, err := os.Hostname()
	if err != nil {
		return &exitError{code: 1, err: fmt.Errorf("naming this replica for the Lease: %w", err)}
	}
	id = fmt.Sprintf("%s_%d", id, os.Getpid())
	lock, err := resourcelock.New(resourcelock.LeasesResourceLock, f.leaseNamespace, f.leaseName,
		kube.CoreV1(), kube.CoordinationV1(), resourcelock.ResourceLockConfig{Identity: id})
	if err != nil {
		return badInput("Lease %s/%s: %v", f.leaseNamespace, f.leaseName, err)
	}
	lost := false
	leaderelection.RunOrDie(ctx, leaderelection.LeaderElectionConfig{
		Lock:            lock,
		LeaseDuration:   15 * time.Second,
		RenewDeadline:   10 * time.Second,
		RetryPeriod:     2 * time.Second,
		ReleaseOnCancel: true,
		Name:            f.leaseName,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(ctx context.Context) {
				log.Info("leading", "lease", f.leaseNamespace+"/"+f.leaseName, "identity", id)
				reconcile(ctx)
			},
			OnStoppedLeading: func() {
				lost = ctx.Err() == nil
			},
			OnNewLeader: func(leader string) {
				if leader != id {
					log.Info("another replica leads", "lease", f.leaseNamespace+"/"+f.leaseName, "leader", leader)
				}
			},
		},
	})
	if lost {
		return &exitError{code: 1, err: fmt.Errorf("lost Lease %s/%s: another replica reconciles now", f.leaseNamespace, f.leaseName)}
	}
	return nil
}

// webhookFromSecret is the webhook the Secret ns/name names (key url, and key token if any). The
// operator who runs the controller names the Secret, never the author of a rollout it runs. What is wrong
// with it is said without its values: they are secrets.
func webhookFromSecret(ctx context.Context, kube kubernetes.Interface, ns, name string, log *slog.Logger) (*notify.Webhook, error) {
	s, err := kube.CoreV1().Secrets(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, badInput("--notify-secret: reading Secret %s/%s: %v", ns, name, err)
	}
	url := string(s.Data["url"])
	if url == "" {
		return nil, badInput("--notify-secret: Secret %s/%s has no key url", ns, name)
	}
	hook, err := notify.NewWebhook(url, string(s.Data["token"]), log)
	if err != nil {
		return nil, badInput("--notify-secret: Secret %s/%s, key url: %v", ns, name, err)
	}
	return hook, nil
}
