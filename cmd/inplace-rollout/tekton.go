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
	tektonclient "github.com/tektoncd/pipeline/pkg/client/clientset/versioned"
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
	"github.com/inplace-rollout/inplace-rollout/tekton/customrun"
)

// tektonFlags are the tekton-controller command's flags.
type tektonFlags struct {
	kubeconfig, namespace, healthAddr string
	leaderElect                       bool
	leaseNamespace, leaseName         string
	workers                           int
	pullerImage                       string
	qps                               float32
	burst                             int
	notifySecret                      string
}

func newTektonControllerCommand() *cobra.Command {
	var f tektonFlags
	cmd := &cobra.Command{
		Use:   "tekton-controller",
		Short: "Run the Tekton custom task: reconcile CustomRuns of kind InPlaceRollout",
		Long: `tekton-controller runs until stopped. It reconciles tekton.dev/v1beta1 CustomRuns
whose customRef or customSpec is inplace-rollout.io/v1alpha1 InPlaceRollout: each run rolls
its workload out in place, batch by batch, gated on analysis, in the run's namespace, and
no pod is created for it. The run's status shows the progress (extraFields), and on success
the results phase, updated-pods, rolled-back and message. A run that is cancelled (its
PipelineRun cancelled or timed out) or outlives its own timeout is rolled back first, then
fails with reason CustomRunCancelled or CustomRunTimedOut. A rollout that rolls back is
tried again while the run has retries left, each attempt from the rolled-back workload.
A run deleted in flight rolls back before it goes (a finalizer holds it); the rollout of a
run gone without it (its finalizer removed, or force-deleted) is found by a scan, at start,
every few minutes and soon after a run is deleted, and rolled back.
A wrong spec or param fails the run naming the field, with nothing changed. Analysis
credentials come only from Secrets in the run's namespace, never from files.

With --leader-elect (the default) replicas share one Lease and only its holder reconciles;
the others keep their cache warm and take over when it stops.

Exit codes: 0 stopped by SIGTERM or Ctrl-C, 1 lost its Lease or could not list CustomRuns,
2 bad input.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runTektonController(cmd, f)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.kubeconfig, "kubeconfig", "", "path of the kubeconfig file (default: in-cluster config, else $KUBECONFIG or ~/.kube/config)")
	fl.StringVarP(&f.namespace, "namespace", "n", "", "reconcile CustomRuns in this namespace only (default: all namespaces)")
	fl.StringVar(&f.healthAddr, "health-addr", "", "serve /healthz, /readyz (ready once CustomRuns are listed) and Prometheus /metrics on this address, e.g. :8081 (default: off)")
	fl.BoolVar(&f.leaderElect, "leader-elect", true, "reconcile only while holding the Lease, so that several replicas can run")
	fl.StringVar(&f.leaseNamespace, "leader-election-namespace", "", "namespace of the Lease (default: $POD_NAMESPACE, else inplace-rollout-system)")
	fl.StringVar(&f.leaseName, "leader-election-id", "inplace-rollout-tekton-controller", "name of the Lease")
	fl.IntVar(&f.workers, "workers", customrun.DefaultWorkers, "CustomRuns reconciled at once")
	fl.StringVar(&f.pullerImage, "puller-image", ownImage(), "the image holding the puller binary that a rollout with prePull runs on each node (this project's image)")
	fl.Float32Var(&f.qps, "kube-api-qps", 50, "requests per second to the Kubernetes API, sustained")
	fl.IntVar(&f.burst, "kube-api-burst", 100, "requests to the Kubernetes API allowed in a burst above --kube-api-qps")
	fl.StringVar(&f.notifySecret, "notify-secret", "", "a Secret in the Lease's namespace whose key url names a webhook (and key token, if any, its bearer token): each rollout's outcome (succeeded, paused, rolled back, needs a person) is posted there as a CloudEvents JSON document; read at start")
	return cmd
}

func runTektonController(cmd *cobra.Command, f tektonFlags) error {
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
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = f.kubeconfig
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return badInput("loading kubeconfig (pass --kubeconfig, set $KUBECONFIG, or run in a pod): %v", err)
	}
	c, err := newTektonClients(cfg, f.qps, f.burst)
	if err != nil {
		return err
	}
	kube := c.kube
	log := slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), nil))
	reg, recorder := metrics.NewRegistry()
	events := &processEvents{}
	defer events.close(log)
	eventRecorder, err := events.recorder(kube, tektonComponent, log)
	if err != nil {
		return &exitError{code: 1, err: fmt.Errorf("tekton controller: %w", err)}
	}
	engine := &rollout.Engine{Client: kube, Events: eventRecorder, Registry: &registry.Resolver{Client: kube}, PullerImage: f.pullerImage, Log: log, Metrics: recorder}
	if f.notifySecret != "" {
		hook, err := webhookFromSecret(cmd.Context(), kube, f.leaseNamespace, f.notifySecret, log)
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
	ctrl := customrun.New(c.tekton, engine, customrun.DynamicSpecs{Client: c.dyn}, customrun.Options{Namespace: f.namespace, Workers: f.workers, Log: log})

	ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	stopHealth, err := serveHealth(f.healthAddr, healthHandler(ctrl.Synced, "CustomRuns not listed yet", metrics.Handler(reg)), log)
	if err != nil {
		return err
	}
	defer stopHealth()
	if err := ctrl.Watch(ctx); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return &exitError{code: 1, err: fmt.Errorf("tekton controller: %w", err)}
	}
	if !f.leaderElect {
		ctrl.Reconcile(ctx)
		return nil
	}
	return lead(ctx, c.lease, f, log, ctrl.Reconcile)
}

// tektonClients are the controller's clients: the Kubernetes, Tekton and dynamic ones share one
// token bucket (client-go gives each client built from a config without one a bucket of its
// own), so the rate limit is the controller's; the Lease is renewed on a client of its own,
// outside that limit, as kube-controller-manager does: a controller busy at its limit must not
// lose its Lease.
type tektonClients struct {
	kube   kubernetes.Interface
	tekton tektonclient.Interface
	dyn    dynamic.Interface
	lease  kubernetes.Interface
}

func newTektonClients(cfg *rest.Config, qps float32, burst int) (*tektonClients, error) {
	cfg = rest.CopyConfig(cfg)
	cfg.UserAgent = "inplace-rollout-tekton-controller/" + version
	cfg.QPS, cfg.Burst = qps, burst
	leaseCfg := rest.CopyConfig(cfg)
	cfg.RateLimiter = flowcontrol.NewTokenBucketRateLimiter(qps, burst)
	var c tektonClients
	var err error
	if c.kube, err = kubernetes.NewForConfig(cfg); err != nil {
		return nil, badInput("building a client for %s: %v", cfg.Host, err)
	}
	if c.tekton, err = tektonclient.NewForConfig(cfg); err != nil {
		return nil, badInput("building a Tekton client for %s: %v", cfg.Host, err)
	}
	if c.dyn, err = dynamic.NewForConfig(cfg); err != nil {
		return nil, badInput("building a dynamic client for %s: %v", cfg.Host, err)
	}
	if c.lease, err = kubernetes.NewForConfig(leaseCfg); err != nil {
		return nil, badInput("building a client for %s: %v", cfg.Host, err)
	}
	return &c, nil
}

// lead runs reconcile while this process holds the Lease. Losing it ends the process (exit 1),
// as client-go's leader election expects: another replica has taken over.
func lead(ctx context.Context, kube kubernetes.Interface, f tektonFlags, log *slog.Logger, reconcile func(context.Context)) error {
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
// operator who runs the controller names the Secret, never a CustomRun's author. What is wrong
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
