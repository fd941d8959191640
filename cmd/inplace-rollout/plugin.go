package main

import (
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"time"

	argoclientset "github.com/argoproj/argo-rollouts/pkg/client/clientset/versioned"
	"github.com/spf13/pflag"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/inplace-rollout/inplace-rollout/pkg/metrics"
	"github.com/inplace-rollout/inplace-rollout/pkg/registry"
	"github.com/inplace-rollout/inplace-rollout/pkg/rollout"
	"github.com/inplace-rollout/inplace-rollout/plugin"
	"github.com/inplace-rollout/inplace-rollout/plugin/step"
	"github.com/inplace-rollout/inplace-rollout/plugin/traffic"
)

// pluginEnv is the handshake variable Argo Rollouts sets when it starts a plugin process.
const pluginEnv = "ARGO_ROLLOUTS_RPC_PLUGIN"

// Where the plugin processes serve Prometheus /metrics: the argument --metrics-addr of the
// plugin's entry in argo-rollouts-config (Argo starts each plugin with its entry's args), else
// the plugin's own variable of the controller's environment, which Argo's plugins share; neither
// given, none is served.
const (
	metricsAddrArg    = "metrics-addr"
	stepMetricsEnv    = "INPLACE_ROLLOUT_METRICS_ADDR"
	trafficMetricsEnv = "INPLACE_ROLLOUT_TRAFFIC_METRICS_ADDR"
)

// pluginMetricsAddr is the address the plugin serves its metrics on, and where it was given:
// --metrics-addr among args (the entry's args in argo-rollouts-config), else the environment
// variable env. An argument the plugin does not take is an error naming it.
func pluginMetricsAddr(args []string, env string) (addr, source string, err error) {
	fs := pflag.NewFlagSet("plugin", pflag.ContinueOnError)
	fs.SetOutput(io.Discard)
	flag := fs.String(metricsAddrArg, "", "")
	if err := fs.Parse(args); err != nil {
		return "", "", fmt.Errorf("the plugin's args in argo-rollouts-config %q: %w; it takes only --%s=ADDRESS", args, err, metricsAddrArg)
	}
	if fs.NArg() > 0 {
		return "", "", fmt.Errorf("the plugin's args in argo-rollouts-config %q: unexpected %q; it takes only --%s=ADDRESS", args, fs.Args(), metricsAddrArg)
	}
	if fs.Changed(metricsAddrArg) {
		return *flag, "--" + metricsAddrArg, nil
	}
	return os.Getenv(env), env, nil
}

// servePlugin serves the Argo Rollouts plugin named by pluginEnv, and reports whether it was one.
// Logs go to stderr, which Argo copies into its own log: stdout is go-plugin's.
func servePlugin() bool {
	kind := os.Getenv(pluginEnv)
	if kind == "step" || kind == "trafficrouter" {
		// Argo stops its plugins when it stops; a controller killed outright cannot, and its
		// plugins would go on driving rollouts nobody asks about.
		go exitWithParent(os.Getppid(), os.Getppid, parentPoll, func() {
			fmt.Fprintln(os.Stderr, "the Argo Rollouts controller that started this plugin is gone; exiting")
			os.Exit(0)
		})
	}
	switch kind {
	case "step":
		log := slog.New(slog.NewJSONHandler(os.Stderr, nil)).With("plugin", step.Name)
		m := serveMetrics(os.Args[1:], stepMetricsEnv, log)
		events := &processEvents{}
		step.Serve(step.New(func() (step.Clients, error) { return stepClients(log, m, events) }, step.Options{Log: log}))
		events.close(log)
		return true
	case "trafficrouter":
		log := slog.New(slog.NewJSONHandler(os.Stderr, nil)).With("plugin", traffic.Name)
		m := serveMetrics(os.Args[1:], trafficMetricsEnv, log)
		events := &processEvents{}
		traffic.Serve(traffic.New(func() (*rollout.Driver, error) {
			cfg, err := pluginConfig(argoTrafficComponent)
			if err != nil {
				return nil, err
			}
			return pluginEngine(cfg, log, m, events, argoTrafficComponent)
		}, log))
		events.close(log)
		return true
	}
	return false
}

// serveMetrics serves the plugin process's metrics on the address pluginMetricsAddr finds in
// args or env, in the background, and returns their recorder; nil when there is none. Wrong
// args, or an address that cannot be listened on, are logged and the plugin goes on without
// metrics: Argo would only restart it, with the same ones.
func serveMetrics(args []string, env string, log *slog.Logger) rollout.Metrics {
	addr, source, err := pluginMetricsAddr(args, env)
	if err != nil {
		log.Error("metrics not served", "err", err)
		return nil
	}
	if addr == "" {
		return nil
	}
	reg, recorder := metrics.NewRegistry()
	mux := http.NewServeMux()
	mux.Handle("/metrics", metrics.Handler(reg))
	if _, err := serveHTTP(addr, source, mux, log); err != nil {
		log.Error("metrics not served", "err", err)
		return nil
	}
	log.Info("serving metrics", "addr", addr)
	return recorder
}

// parentPoll is how often a plugin process looks whether its controller is still there.
const parentPoll = 2 * time.Second

// exitWithParent calls exit once getppid no longer returns parent: the process that started this
// one has ended and it was re-parented.
func exitWithParent(parent int, getppid func() int, every time.Duration, exit func()) {
	t := time.NewTicker(every)
	defer t.Stop()
	for range t.C {
		if getppid() != parent {
			exit()
			return
		}
	}
}

// pluginConfig is the cluster of the default loading rules ($KUBECONFIG, else the in-cluster
// config Argo's controller pod gives its plugins), with the plugin's name in the User-Agent.
func pluginConfig(name string) (*rest.Config, error) {
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(clientcmd.NewDefaultClientConfigLoadingRules(), &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("loading the kubeconfig (set $KUBECONFIG, or run in a pod): %w", err)
	}
	cfg.UserAgent = "inplace-rollout-" + name + "/" + version
	cfg.QPS, cfg.Burst = plugin.ClientQPS, plugin.ClientBurst
	return cfg, nil
}

// pluginEngine is a driver of an engine on cfg's cluster, reporting to m (nil: nowhere),
// recording the Events of component through the process's events.
func pluginEngine(cfg *rest.Config, log *slog.Logger, m rollout.Metrics, events *processEvents, component string) (*rollout.Driver, error) {
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("building a client for %s: %w", cfg.Host, err)
	}
	recorder, err := events.recorder(client, component, log)
	if err != nil {
		return nil, err
	}
	return &rollout.Driver{Engine: &rollout.Engine{Client: client, Events: recorder, Registry: &registry.Resolver{Client: client}, PullerImage: defaultPullerImage(), Log: log, Metrics: m}}, nil
}

// stepClients are the step plugin's engine and its Argo Rollouts client, which lists the
// Rollouts for rollbacks cut short.
func stepClients(log *slog.Logger, m rollout.Metrics, events *processEvents) (step.Clients, error) {
	cfg, err := pluginConfig(argoStepComponent)
	if err != nil {
		return step.Clients{}, err
	}
	e, err := pluginEngine(cfg, log, m, events, argoStepComponent)
	if err != nil {
		return step.Clients{}, err
	}
	rollouts, err := argoclientset.NewForConfig(cfg)
	if err != nil {
		return step.Clients{}, fmt.Errorf("building an Argo Rollouts client for %s: %w", cfg.Host, err)
	}
	return step.Clients{Driver: e, Rollouts: rollouts}, nil
}
