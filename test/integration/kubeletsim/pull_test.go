package kubeletsim

import (
	"context"
	"encoding/base64"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/inplace-rollout/inplace-rollout/test/integration/ociregistry"
)

// startRegistry serves a registry for the test, behind basic auth when username is set.
func startRegistry(t *testing.T, username, password string) string {
	t.Helper()
	s, err := ociregistry.Start(username, password)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Error(err)
		}
	})
	return s.Host
}

// push writes a new random image under ref and returns its manifest digest.
func push(t *testing.T, ref string, auth authn.Authenticator) string {
	t.Helper()
	img, err := random.Image(256, 1)
	if err != nil {
		t.Fatal(err)
	}
	r, err := name.ParseReference(ref, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(r, img, remote.WithAuth(auth)); err != nil {
		t.Fatalf("pushing %s: %v", ref, err)
	}
	d, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return d.String()
}

func dockerConfigSecret(name, host, user, pass string) *corev1.Secret {
	auth := base64.StdEncoding.EncodeToString([]byte(user + ":" + pass))
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: name},
		Type:       corev1.SecretTypeDockerConfigJson,
		Data: map[string][]byte{corev1.DockerConfigJsonKey: fmt.Appendf(nil,
			`{"auths":{%q:{"username":%q,"password":%q,"auth":%q}}}`, host, user, pass, auth)},
	}
}

// secretsOf serves the given Secrets as the API would.
func secretsOf(secrets ...*corev1.Secret) secretGetter {
	return func(_ context.Context, namespace, name string) (*corev1.Secret, error) {
		for _, s := range secrets {
			if s.Namespace == namespace && s.Name == name {
				return s, nil
			}
		}
		return nil, apierrors.NewNotFound(schema.GroupResource{Resource: "secrets"}, name)
	}
}

func mustImage(t *testing.T, ref string) image {
	t.Helper()
	img, err := parseImage(ref)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

func TestRemotePullResolvesTagsThroughTheRegistry(t *testing.T) {
	host := startRegistry(t, "", "")
	first := push(t, host+"/app:v1", authn.Anonymous)
	r := newRemoteRegistries([]string{host}, secretsOf())
	img := mustImage(t, host+"/app:v1")
	env := func(node string, policy corev1.PullPolicy) pullEnv {
		return pullEnv{node: node, namespace: "shop", policy: policy}
	}

	got := r.pull(img, env("n0", corev1.PullIfNotPresent))
	if got.reason != "" || got.digest != first || got.onNode {
		t.Fatalf("first pull = %+v; want digest %s, not on the node", got, first)
	}
	r.store(img, got.digest, "n0")

	// The tag floats: new content under v1.
	second := push(t, host+"/app:v1", authn.Anonymous)
	if second == first {
		t.Fatal("two random images have the same digest")
	}
	tests := []struct {
		name       string
		ref        string
		env        pullEnv
		wantDigest string
		wantOnNode bool
		wantReason string
		wantMsg    string
	}{
		{"IfNotPresent uses the node's copy of the tag", host + "/app:v1", env("n0", corev1.PullIfNotPresent), first, true, "", ""},
		{"Always re-resolves the tag", host + "/app:v1", env("n0", corev1.PullAlways), second, false, "", ""},
		{"another node pulls the tag's current content", host + "/app:v1", env("n1", corev1.PullIfNotPresent), second, false, "", ""},
		{"a digest already on the node costs no pull", host + "/app@" + first, env("n0", corev1.PullAlways), first, true, "", ""},
		{"tag and digest pull by digest", host + "/app:v1@" + first, env("n1", corev1.PullAlways), first, false, "", ""},
		{"Never with the image on the node", host + "/app:v1", env("n0", corev1.PullNever), first, true, "", ""},
		{"Never without the image", host + "/app:v1", env("n1", corev1.PullNever), "", false, "ErrImageNeverPull", "not present with pull policy of Never"},
		{"unknown tag", host + "/app:nope", env("n0", corev1.PullAlways), "", false, "ErrImagePull", "manifest unknown"},
		{"unknown repository", host + "/nothing:v1", env("n0", corev1.PullAlways), "", false, "ErrImagePull", "manifest unknown"},
		{"unknown digest", host + "/app@sha256:" + strings.Repeat("0", 64), env("n0", corev1.PullAlways), "", false, "ErrImagePull", "manifest unknown"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := r.pull(mustImage(t, tt.ref), tt.env)
			if got.digest != tt.wantDigest || got.onNode != tt.wantOnNode || got.reason != tt.wantReason || !strings.Contains(got.message, tt.wantMsg) {
				t.Errorf("pull(%s, %s on %s) = %+v; want digest %q onNode %v reason %q message containing %q",
					tt.ref, tt.env.policy, tt.env.node, got, tt.wantDigest, tt.wantOnNode, tt.wantReason, tt.wantMsg)
			}
		})
	}
}

func TestRemotePullUsesThePodsPullSecrets(t *testing.T) {
	const user, pass = "puller", "s3cret-Pa55"
	host := startRegistry(t, user, pass)
	want := push(t, host+"/private/app:v1", &authn.Basic{Username: user, Password: pass})
	r := newRemoteRegistries([]string{host}, secretsOf(
		dockerConfigSecret("good", host, user, pass),
		dockerConfigSecret("wrong", host, user, "not-the-password"),
		dockerConfigSecret("other-host", "registry.example", user, pass),
	))
	img := mustImage(t, host+"/private/app:v1")
	tests := []struct {
		name       string
		secrets    []string
		wantDigest string
		wantMsg    string
	}{
		{"the right dockerconfigjson secret", []string{"good"}, want, ""},
		{"a missing secret is skipped, the next one used", []string{"absent", "good"}, want, ""},
		{"no secret", nil, "", "401 Unauthorized"},
		{"a secret for another host", []string{"other-host"}, "", "401 Unauthorized"},
		{"a wrong password", []string{"wrong"}, "", "401 Unauthorized"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := r.pull(img, pullEnv{node: "n0", namespace: "shop", pullSecrets: tt.secrets, policy: corev1.PullAlways})
			if got.digest != tt.wantDigest || !strings.Contains(got.message, tt.wantMsg) {
				t.Errorf("pull with secrets %v = %+v; want digest %q and a message containing %q", tt.secrets, got, tt.wantDigest, tt.wantMsg)
			}
			if tt.wantDigest == "" && got.reason != "ErrImagePull" {
				t.Errorf("reason = %q; want ErrImagePull", got.reason)
			}
			for _, secret := range []string{pass, "not-the-password"} {
				if strings.Contains(got.message, secret) {
					t.Errorf("the message %q contains a password", got.message)
				}
			}
		})
	}
}

// TestRegistryContainerLifecycle runs a container on a registry image through pull, start and
// readiness: the imageID is the manifest digest, and a second container of the image on the
// same node starts without the pull delay.
func TestRegistryContainerLifecycle(t *testing.T) {
	host := startRegistry(t, "", "")
	digest := push(t, host+"/app:v1", authn.Anonymous)
	reg := &registry{remote: newRemoteRegistries([]string{host}, secretsOf())}
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	ms := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }
	ref := host + "/app:v1"
	wantID := host + "/app@" + digest

	first := &containerSim{name: "app", env: pullEnv{node: "n0", namespace: "shop", policy: corev1.PullIfNotPresent}}
	for _, p := range []struct {
		at    time.Time
		state string
	}{{ms(0), "ContainerCreating"}, {ms(100), "ContainerCreating"}, {ms(250), "Running"}, {ms(500), "Ready"}} {
		if state, _, _ := step(first, ref, false, p.at, reg); state != p.state {
			t.Fatalf("first container at %v: %s; want %s", p.at.Sub(t0), state, p.state)
		}
	}
	if id := first.status(ms(500), testTimings).ImageID; id != wantID {
		t.Errorf("imageID = %q; want %q", id, wantID)
	}

	// The node holds the image now: Running at once, no pull delay.
	second := &containerSim{name: "app", env: pullEnv{node: "n0", namespace: "shop", policy: corev1.PullIfNotPresent}}
	if state, _, _ := step(second, ref, false, ms(1000), reg); state != "Running" {
		t.Errorf("second container on the same node right after its spec: %s; want Running", state)
	}
	// Another node has to pull.
	third := &containerSim{name: "app", env: pullEnv{node: "n1", namespace: "shop", policy: corev1.PullIfNotPresent}}
	if state, _, _ := step(third, ref, false, ms(1000), reg); state != "ContainerCreating" {
		t.Errorf("container on another node right after its spec: %s; want ContainerCreating", state)
	}

	// A missing tag: ErrImagePull with the registry's answer, then the kubelet's back-off, whose
	// message keeps the failed pull's reason and message as kubelet v1.34 words it.
	missing := &containerSim{name: "app", env: pullEnv{node: "n0", namespace: "shop", policy: corev1.PullIfNotPresent}}
	ref = host + "/app:missing"
	var pullMsg string
	for _, p := range []struct {
		at    time.Time
		state string
		msg   func() string
	}{
		{ms(0), "ContainerCreating", func() string { return "" }},
		{ms(250), "ErrImagePull", func() string {
			return fmt.Sprintf("failed to pull and unpack image %q: failed to resolve reference %q: %s: not found: manifest unknown", ref, ref, ref)
		}},
		{ms(1300), "ImagePullBackOff", func() string { return fmt.Sprintf("Back-off pulling image %q: ErrImagePull: %s", ref, pullMsg) }},
		{ms(9000), "ImagePullBackOff", func() string { return fmt.Sprintf("Back-off pulling image %q: ErrImagePull: %s", ref, pullMsg) }},
	} {
		state, _, _ := step(missing, ref, false, p.at, reg)
		var msg string
		if w := missing.status(p.at, testTimings).State.Waiting; w != nil {
			msg = w.Message
		}
		if want := p.msg(); state != p.state || msg != want {
			t.Fatalf("missing tag at %v: %s %q; want %s %q", p.at.Sub(t0), state, msg, p.state, want)
		}
		if state == "ErrImagePull" {
			pullMsg = msg
		}
	}
}

func TestSimulatorDigestAndRetagOnARegistryHost(t *testing.T) {
	host := startRegistry(t, "", "")
	digest := push(t, host+"/app:v1", authn.Anonymous)
	s, err := New(fake.NewClientset(), Config{Registries: []string{host}})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, image string
		want        string // a digest, or "error:<substring>"
	}{
		{"a tag on the registry", host + "/app:v1", digest},
		{"an unknown tag on the registry", host + "/app:nope", "error:manifest_unknown"},
		{"another host keeps the built-in map", "registry.example/app:v1", builtinDigest("registry.example/app:v1")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := s.Digest(tt.image)
			if kind, sub, _ := strings.Cut(tt.want, ":"); kind == "error" {
				if err == nil || !strings.Contains(strings.ToLower(err.Error()), sub) {
					t.Errorf("Digest(%s) = %q, %v; want an error containing %q", tt.image, got, err, sub)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Errorf("Digest(%s) = %q, %v; want %q", tt.image, got, err, tt.want)
			}
		})
	}
	if err := s.Retag(host+"/app:v1", DigestFor("x")); err == nil || !strings.Contains(err.Error(), "push new content") {
		t.Errorf("Retag of a registry image = %v; want an error saying to push instead", err)
	}
	if err := s.Retag("registry.example/app:v1", DigestFor("x")); err != nil {
		t.Errorf("Retag of another host's image = %v; want nil", err)
	}
}

// builtinDigest is the built-in map's digest of a reference nobody retagged.
func builtinDigest(ref string) string {
	img, err := parseImage(ref)
	if err != nil {
		panic(err)
	}
	return (&registry{}).digestOf(img)
}

func TestInitContainerOnARegistryReportsItsDigest(t *testing.T) {
	host := startRegistry(t, "", "")
	digest := push(t, host+"/init:v1", authn.Anonymous)
	reg := &registry{remote: newRemoteRegistries([]string{host}, secretsOf())}
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	tests := []struct {
		name, image, wantID string
	}{
		{"pushed image", host + "/init:v1", host + "/init@" + digest},
		{"unknown tag", host + "/init:nope", ""},
		{"another host", "registry.example/init:v1", "registry.example/init@" + builtinDigest("registry.example/init:v1")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pod := podOn("web-0", "sim-node-0", "")
			pod.Spec.InitContainers = []corev1.Container{{Name: "init", Image: tt.image}}
			p := newPodSim(pod, "10.100.0.1", "172.18.0.2", t0)
			p.node = "sim-node-0"
			status, _ := p.sync(pod, t0, testTimings, reg)
			if got := status.InitContainerStatuses[0].ImageID; got != tt.wantID {
				t.Errorf("init container imageID = %q; want %q", got, tt.wantID)
			}
		})
	}
}
