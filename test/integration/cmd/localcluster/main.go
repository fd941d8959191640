package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/inplace-rollout/inplace-rollout/test/integration/cluster"
	"github.com/inplace-rollout/inplace-rollout/test/integration/kubeletsim"
	"github.com/inplace-rollout/inplace-rollout/test/integration/realnode"
)

func main() {
	dir := flag.String("dir", ".dev", "directory for state, logs, PID files, kubeconfig and env")
	nodes := flag.Int("nodes", 3, "number of simulated nodes")
	prom := flag.Bool("prometheus", true, "start Prometheus scraping the simulator")
	reg := flag.Bool("registry", true, "serve an OCI registry on a loopback port; the simulator pulls images on its host from it")
	argoPlugin := flag.String("argo-plugin", "", "start Argo Rollouts with this inplace-rollout binary registered as its plugins (config/argo); empty: no Argo")
	tekton := flag.String("tekton", "", "start Tekton Pipelines, and this inplace-rollout binary's tekton-controller with config/tekton; empty: no Tekton")
	controller := flag.String("controller", "", "start this inplace-rollout binary's controller (InPlaceRollout objects) with config/controller; empty: none")
	realNode := flag.Bool("real-node", false, "add the real node "+cluster.RealNodeName+" (kubelet and containerd; needs root and Debian's containerd, runc and CNI plugins) and push the real images")
	undo := flag.Bool("undo-real-node", false, "only put the machine back from a real node whose run was killed (processes, mounts, bridge, cgroups, sysctls), then exit")
	flag.Parse()
	if *undo {
		if err := realnode.Cleanup(slog.New(slog.NewTextHandler(os.Stderr, nil))); err != nil {
			fmt.Fprintln(os.Stderr, "localcluster:", err)
			os.Exit(1)
		}
		return
	}
	if err := run(*dir, *nodes, *prom, *reg, *realNode, *argoPlugin, *tekton, *controller); err != nil {
		fmt.Fprintln(os.Stderr, "localcluster:", err)
		os.Exit(1)
	}
}

func run(dir string, nodes int, prom, reg, realNode bool, argoPlugin, tekton, controller string) error {
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	abs, err := filepath.Abs(dir)
	if err != nil {
		return fmt.Errorf("resolving %s: %w", dir, err)
	}
	envPath := filepath.Join(abs, "env")
	pidPath := filepath.Join(abs, "localcluster.pid")
	_ = os.Remove(envPath)
	if err := os.MkdirAll(abs, 0o755); err != nil {
		return fmt.Errorf("creating %s: %w", abs, err)
	}
	if err := os.WriteFile(pidPath, []byte(strconv.Itoa(os.Getpid())+"\n"), 0o644); err != nil {
		return fmt.Errorf("writing %s: %w", pidPath, err)
	}
	defer os.Remove(pidPath)

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	startCtx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	c, err := cluster.Start(startCtx, cluster.Options{
		Dir:        abs,
		BinDir:     filepath.Join(abs, "bin"),
		Simulator:  kubeletsim.Config{Nodes: nodes},
		Prometheus: prom,
		Registry:   reg,
		RealNode:   realNode,
		Logger:     log,
	})
	if err != nil {
		cancel()
		return err
	}
	defer func() {
		_ = os.Remove(envPath)
		if err := c.Stop(); err != nil {
			log.Error("stopping the control plane", "err", err)
		}
		log.Info("control plane stopped")
	}()
	if argoPlugin != "" {
		a, err := c.StartArgo(startCtx, cluster.ArgoOptions{PluginBinary: argoPlugin})
		if err != nil {
			cancel()
			return fmt.Errorf("starting Argo Rollouts: %w", err)
		}
		log.Info("Argo Rollouts ready", "log", a.LogPath, "plugins", filepath.Join(a.Dir, "plugin-bin"))
	}
	if tekton != "" {
		t, err := c.StartTekton(startCtx)
		if err != nil {
			cancel()
			return fmt.Errorf("starting Tekton Pipelines: %w", err)
		}
		log.Info("Tekton Pipelines ready", "log", t.LogPath)
		p, err := c.StartInplaceTekton(startCtx, tekton)
		if err != nil {
			cancel()
			return fmt.Errorf("starting inplace-rollout tekton-controller: %w", err)
		}
		log.Info("inplace-rollout tekton-controller ready", "log", p.LogPath, "health", p.HealthURL)
	}
	if controller != "" {
		p, err := c.StartInplaceController(startCtx, controller)
		if err != nil {
			cancel()
			return fmt.Errorf("starting inplace-rollout controller: %w", err)
		}
		log.Info("inplace-rollout controller ready", "log", p.LogPath, "health", p.HealthURL)
	}
	cancel()

	env := fmt.Sprintf("export KUBECONFIG=%s\nexport PROMETHEUS_URL=%s\nexport KUBELETSIM_URL=%s\nexport REGISTRY=%s\nexport PATH=%s:$PATH\n",
		c.Kubeconfig, c.PrometheusURL, c.Sim.MetricsURL(), c.Registry, filepath.Join(abs, "bin"))
	if c.RealNode != nil {
		env += fmt.Sprintf("export REAL_NODE=%s\nexport PULLER_IMAGE=%s\n", c.RealNode.Name, c.PullerImage)
	}
	if err := os.WriteFile(envPath, []byte(env), 0o644); err != nil {
		return fmt.Errorf("writing %s: %w", envPath, err)
	}
	log.Info("local control plane ready; `. " + envPath + "` to use it")
	<-ctx.Done()
	return nil
}
