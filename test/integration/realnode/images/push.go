package images

import (
	"context"
	"fmt"
	"net"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// The repositories and tags Push and PushPuller write, under the registry's HOST:PORT.
const (
	AppRepo    = "app"
	PauseRepo  = "pause"
	PauseTag   = "3.10"
	PullerRepo = "inplace-rollout-puller"
	PullerTag  = "dev"
)

// AppTags are the app image tags Push writes: three healthy versions and one of each failure
// the simulator's tags stand for (kubeletsim's behaviorOf).
var AppTags = []string{"v1", "v2", "v3", "crash1", "errors1", "latency1", "slow1"}

// AppRef is the reference of the app image with tag in registry: HOST:PORT/app:TAG.
func AppRef(registry, tag string) string { return registry + "/" + AppRepo + ":" + tag }

// PauseRef is the reference of the sandbox image in registry, for containerd's sandbox_image.
func PauseRef(registry string) string { return registry + "/" + PauseRepo + ":" + PauseTag }

// Push writes the app image of every tag in AppTags and the pause image to registry
// (HOST:PORT of a plain-HTTP registry on loopback) and returns each reference it pushed
// (AppRef, PauseRef) with its manifest digest ("sha256:...").
func (p *Programs) Push(ctx context.Context, registry string) (map[string]string, error) {
	if err := onLoopback(registry); err != nil {
		return nil, fmt.Errorf("pushing the images: %w", err)
	}
	pushed := make(map[string]string, len(AppTags)+1)
	for _, tag := range AppTags {
		img, err := p.AppImage(tag)
		if err != nil {
			return nil, err
		}
		ref := AppRef(registry, tag)
		if pushed[ref], err = push(ctx, ref, img); err != nil {
			return nil, err
		}
	}
	img, err := p.PauseImage()
	if err != nil {
		return nil, err
	}
	ref := PauseRef(registry)
	if pushed[ref], err = push(ctx, ref, img); err != nil {
		return nil, err
	}
	return pushed, nil
}

// PushPuller writes the puller image to registry as HOST:PORT/inplace-rollout-puller:dev and
// returns its reference by digest (repo:tag@sha256:...), the value for --puller-image.
func (p *Programs) PushPuller(ctx context.Context, registry string) (string, error) {
	if err := onLoopback(registry); err != nil {
		return "", fmt.Errorf("pushing the puller image: %w", err)
	}
	img, err := p.PullerImage()
	if err != nil {
		return "", err
	}
	ref := registry + "/" + PullerRepo + ":" + PullerTag
	digest, err := push(ctx, ref, img)
	if err != nil {
		return "", err
	}
	return ref + "@" + digest, nil
}

// push writes img to ref over plain HTTP and returns its manifest digest. The registry must be
// on loopback: these images are for this machine's registry and nothing leaves it.
func push(ctx context.Context, ref string, img v1.Image) (string, error) {
	r, err := name.ParseReference(ref, name.Insecure, name.StrictValidation)
	if err != nil {
		return "", fmt.Errorf("parsing the image reference %q: %w", ref, err)
	}
	if err := onLoopback(r.Context().RegistryStr()); err != nil {
		return "", fmt.Errorf("pushing %s: %w", ref, err)
	}
	digest, err := img.Digest()
	if err != nil {
		return "", fmt.Errorf("computing the digest of %s: %w", ref, err)
	}
	if err := remote.Write(r, img, remote.WithContext(ctx)); err != nil {
		return "", fmt.Errorf("pushing %s: %w", ref, err)
	}
	return digest.String(), nil
}

// onLoopback refuses a registry whose host is not a loopback address or localhost.
func onLoopback(hostPort string) error {
	host, _, err := net.SplitHostPort(hostPort)
	if err != nil {
		host = hostPort
	}
	if host == "localhost" {
		return nil
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return nil
	}
	return fmt.Errorf("registry %s is not on loopback (127.0.0.1:PORT or localhost:PORT)", hostPort)
}
