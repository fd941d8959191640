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

	"github.com/inplace-rollout/inplace-rollout/internal/ocipush"
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
	image := flag.String("image", "", "push the OCI image layout in this directory (make image writes one) into the registry as inplace-rollout/inplace-rollout:IMAGE-TAG, and make it the default puller image of every process started here and of .dev/env")
	imageTag := flag.String("image-tag", "dev", "the tag of -image in the registry")
	undo := flag.Bool("undo-real-node", false, "only put the machine back from a real node whose run was killed (processes, mounts, bridge, cgroups, sysctls), then exit")
	flag.Parse()
	if *undo {
		if err := realnode.Cleanup(slog.New(slog.NewTextHandler(os.Stderr, nil))); err != nil {
			fmt.Fprintln(os.Stderr, "localcluster:", err)
			os.Exit(1)
		}
		return
	}
	if err := run(*dir, *nodes, *prom, *reg, *realNode, *argoPlugin, *tekton, *controller, *image, *imageTag); err != nil {
		fmt.Fprintln(os.Stderr, "localcluster:", err)
		os.Exit(1)
	}
}

func run(dir string, nodes int, prom, reg, realNode bool, argoPlugin, tekton, controller, image, imageTag string) error {
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
	var ownImage string
	if image != "" {
		if ownImage, err = pushImage(startCtx, c.Registry, image, imageTag); err != nil {
			cancel()
			return err
		}
		log.Info("image pushed", "image", ownImage)
	}
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
	if ownImage != "" {
		env += fmt.Sprintf("export IMAGE=%s\nexport %s=%s\n", ownImage, pullerImageEnv, ownImage)
	}
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

// pullerImageEnv is the variable inplace-rollout's commands take their default --puller-image
// from; the processes started here inherit it.
const pullerImageEnv = "INPLACE_ROLLOUT_PULLER_IMAGE"

// pushImage pushes this source's image (the layout in dir) into the local registry and makes it
// the default puller image of the processes started after it, so that the default image
// reference of every one of them names an image that exists.
func pushImage(ctx context.Context, registry, dir, tag string) (string, error) {
	if registry == "" {
		return "", fmt.Errorf("pushing the image in %s: the local control plane runs no registry; leave -registry on", dir)
	}
	ref, err := ocipush.Push(ctx, dir, registry+"/inplace-rollout/inplace-rollout:"+tag)
	if err != nil {
		return "", err
	}
	if err := os.Setenv(pullerImageEnv, ref); err != nil {
		return "", fmt.Errorf("setting %s: %w", pullerImageEnv, err)
	}
	return ref, nil
}
