package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/inplace-rollout/inplace-rollout/test/integration/kubeletsim"
)

func main() {
	var cfg kubeletsim.Config
	kubeconfig := flag.String("kubeconfig", os.Getenv("KUBECONFIG"), "admin kubeconfig of the cluster")
	flag.IntVar(&cfg.Nodes, "nodes", 3, "number of nodes to register")
	flag.StringVar(&cfg.NodePrefix, "node-prefix", "sim-node-", "node name prefix")
	flag.DurationVar(&cfg.PullDelay, "pull-delay", 0, "simulated image pull time (default 200ms)")
	flag.DurationVar(&cfg.StartDelay, "start-delay", 0, "simulated container start time (default 200ms)")
	flag.StringVar(&cfg.MetricsAddr, "metrics-addr", "127.0.0.1:0", "address of the metrics and control endpoint")
	flag.Parse()
	cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, nil))
	if err := run(*kubeconfig, cfg); err != nil {
		fmt.Fprintln(os.Stderr, "kubeletsim:", err)
		os.Exit(1)
	}
}

func run(kubeconfig string, cfg kubeletsim.Config) error {
	rc, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return fmt.Errorf("loading kubeconfig %q: %w", kubeconfig, err)
	}
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return fmt.Errorf("building client for %s: %w", rc.Host, err)
	}
	sim, err := kubeletsim.New(client, cfg)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	return sim.Run(ctx)
}
