package cluster

import (
	"context"
	"fmt"
	"path/filepath"

	"github.com/inplace-rollout/inplace-rollout/test/integration/realnode"
	"github.com/inplace-rollout/inplace-rollout/test/integration/realnode/images"
)

// RealNodeName is the name of the real node Options.RealNode adds.
const RealNodeName = "real-0"

// startRealNode pushes the real images to the registry and starts the real node, pulling its
// sandbox image from there.
func (c *Cluster) startRealNode(ctx context.Context, certs *pki) error {
	progs, err := images.Compile(ctx)
	if err != nil {
		return fmt.Errorf("building the real node's images: %w", err)
	}
	defer progs.Close()
	if c.Images, err = progs.Push(ctx, c.Registry); err != nil {
		return fmt.Errorf("pushing the real node's images to %s: %w", c.Registry, err)
	}
	if c.PullerImage, err = progs.PushPuller(ctx, c.Registry); err != nil {
		return fmt.Errorf("pushing the puller image to %s: %w", c.Registry, err)
	}
	pause := images.PauseRef(c.Registry)
	n, err := realnode.Start(ctx, realnode.Config{
		Name:       RealNodeName,
		Dir:        filepath.Join(c.Dir, "realnode"),
		Kubelet:    c.bin("kubelet"),
		Server:     c.Config.Host,
		CACert:     certs.CACert,
		CertFile:   certs.NodeCert,
		KeyFile:    certs.NodeKey,
		Registry:   c.Registry,
		PauseImage: pause + "@" + c.Images[pause],
		Client:     c.Client,
		Logger:     c.log.With("component", "realnode"),
	})
	if err != nil {
		return fmt.Errorf("starting the real node: %w", err)
	}
	c.RealNode = n
	return nil
}

// AppImage is the reference of the real app image with tag (v1, v2, v3, crash1, errors1,
// latency1, slow1) on the cluster's registry, when Options.RealNode.
func (c *Cluster) AppImage(tag string) string { return images.AppRef(c.Registry, tag) }
