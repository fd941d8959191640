package registry

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/inplace-rollout/inplace-rollout/test/integration/cluster"
)

// crane runs the crane binary hack/tools built, with its docker config in dockerConfig, and
// returns its trimmed standard output.
func crane(t *testing.T, dockerConfig string, args ...string) string {
	t.Helper()
	cmd := exec.Command(filepath.Join(binDir(t), "crane"), args...)
	cmd.Env = append(os.Environ(), "DOCKER_CONFIG="+dockerConfig)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("crane %s: %v: %s", args[0], err, stderr.String())
	}
	return strings.TrimSpace(string(out))
}

func binDir(t *testing.T) string {
	t.Helper()
	d, err := cluster.DefaultBinDir()
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// pushNew pushes a new single-layer image of random content under ref with crane and returns
// its manifest digest as the registry reports it.
func pushNew(t *testing.T, dockerConfig, ref string) string {
	t.Helper()
	content := make([]byte, 64)
	_, _ = rand.Read(content)
	var layer bytes.Buffer
	tw := tar.NewWriter(&layer)
	if err := tw.WriteHeader(&tar.Header{Name: "content", Mode: 0o644, Size: int64(len(content))}); err != nil {
		t.Fatal(err)
	}
	if _, err := tw.Write(content); err != nil {
		t.Fatal(err)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "layer.tar")
	if err := os.WriteFile(path, layer.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	crane(t, dockerConfig, "append", "-f", path, "-t", ref)
	digest := crane(t, dockerConfig, "digest", ref)
	if !strings.HasPrefix(digest, "sha256:") {
		t.Fatalf("crane digest %s = %q; want sha256:...", ref, digest)
	}
	return digest
}

func createPod(t *testing.T, ns, name, image string, policy corev1.PullPolicy, node string, secrets ...string) {
	t.Helper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: corev1.PodSpec{
			NodeName:   node,
			Containers: []corev1.Container{{Name: "app", Image: image, ImagePullPolicy: policy}},
		},
	}
	for _, s := range secrets {
		pod.Spec.ImagePullSecrets = append(pod.Spec.ImagePullSecrets, corev1.LocalObjectReference{Name: s})
	}
	if _, err := env.Client.CoreV1().Pods(ns).Create(context.Background(), pod, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating pod %s/%s: %v", ns, name, err)
	}
}

// readyImageID waits until the pod is Ready and returns its container's imageID.
func readyImageID(t *testing.T, ns, name string) (string, *corev1.Pod) {
	t.Helper()
	pod := env.WaitForPod(t, ns, name, 2*time.Minute, "Ready", cluster.PodReady)
	if pod.Generation == 0 || pod.Status.ObservedGeneration != pod.Generation {
		t.Errorf("pod %s: status.observedGeneration = %d; want the pod's generation %d", name, pod.Status.ObservedGeneration, pod.Generation)
	}
	return cluster.ContainerStatus(pod, "app").ImageID, pod
}

// waitingReasons watches the pod until its container waits with ImagePullBackOff and returns
// every Waiting reason and message it went through, in order; a watch sees each status write,
// so the short ErrImagePull state is never missed.
func waitingReasons(t *testing.T, ns, name string) (reasons, messages []string, last *corev1.Pod) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	w, err := env.Client.CoreV1().Pods(ns).Watch(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", name).String()})
	if err != nil {
		t.Fatalf("watching pod %s/%s: %v", ns, name, err)
	}
	defer w.Stop()
	for ev := range w.ResultChan() {
		if ev.Type != watch.Added && ev.Type != watch.Modified {
			continue
		}
		pod := ev.Object.(*corev1.Pod)
		last = pod
		cs := cluster.ContainerStatus(pod, "app")
		if cs == nil || cs.State.Waiting == nil {
			continue
		}
		if n := len(reasons); n == 0 || reasons[n-1] != cs.State.Waiting.Reason {
			reasons = append(reasons, cs.State.Waiting.Reason)
			messages = append(messages, cs.State.Waiting.Message)
		}
		if cs.State.Waiting.Reason == "ImagePullBackOff" {
			return reasons, messages, last
		}
	}
	t.Fatalf("pod %s/%s never reached ImagePullBackOff; waiting reasons seen: %v", ns, name, reasons)
	return nil, nil, nil
}

// pullFailure finds the ErrImagePull message among a watch's reasons.
func pullFailure(t *testing.T, reasons, messages []string) string {
	t.Helper()
	for i, r := range reasons {
		if r == "ErrImagePull" {
			return messages[i]
		}
	}
	t.Fatalf("no ErrImagePull before ImagePullBackOff; waiting reasons seen: %v", reasons)
	return ""
}

func TestFloatingTagResolvesThroughTheRegistry(t *testing.T) {
	ns := env.Namespace(t)
	dockerConfig := t.TempDir()
	ref := env.Registry + "/app:v1"
	repo := env.Registry + "/app"

	first := pushNew(t, dockerConfig, ref)
	createPod(t, ns, "old", ref, corev1.PullIfNotPresent, "")
	oldID, oldPod := readyImageID(t, ns, "old")
	if oldID != repo+"@"+first {
		t.Fatalf("imageID of the first pod = %q; want %q", oldID, repo+"@"+first)
	}

	second := pushNew(t, dockerConfig, ref)
	if second == first {
		t.Fatalf("the second push under %s has the first's digest %s", ref, first)
	}
	tests := []struct {
		name   string
		policy corev1.PullPolicy
		node   string
		want   string
	}{
		// The node's copy of the tag, as a runtime with IfNotPresent does.
		{"IfNotPresent on the old pod's node", corev1.PullIfNotPresent, oldPod.Spec.NodeName, first},
		// Always asks the registry: the tag's new content, even on the node holding the old.
		// In order: the node's tag then points at the new content.
		{"Always on the old pod's node", corev1.PullAlways, oldPod.Spec.NodeName, second},
		{"IfNotPresent on the old pod's node after the Always pull", corev1.PullIfNotPresent, oldPod.Spec.NodeName, second},
		{"IfNotPresent on a node without the image", corev1.PullIfNotPresent, otherNode(t, oldPod.Spec.NodeName), second},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			name := fmt.Sprintf("new-%d", i)
			createPod(t, ns, name, ref, tt.policy, tt.node)
			if id, _ := readyImageID(t, ns, name); id != repo+"@"+tt.want {
				t.Errorf("imageID = %q; want %q (first push %s, second %s)", id, repo+"@"+tt.want, first, second)
			}
		})
	}

	// The running pod keeps the content it started with.
	if id, _ := readyImageID(t, ns, "old"); id != oldID {
		t.Errorf("imageID of the old pod after the push = %q; want it unchanged, %q", id, oldID)
	}
}

func otherNode(t *testing.T, node string) string {
	t.Helper()
	for _, n := range env.Sim.NodeNames() {
		if n != node {
			return n
		}
	}
	t.Fatalf("the simulator has no node besides %s", node)
	return ""
}

func TestUnknownTagFailsThePull(t *testing.T) {
	ns := env.Namespace(t)
	pushNew(t, t.TempDir(), env.Registry+"/app:v1")
	tests := []struct{ name, image string }{
		{"unknown tag", env.Registry + "/app:does-not-exist"},
		{"unknown repository", env.Registry + "/no-such-repo:v1"},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			name := fmt.Sprintf("missing-%d", i)
			createPod(t, ns, name, tt.image, corev1.PullIfNotPresent, "")
			reasons, messages, _ := waitingReasons(t, ns, name)
			if msg := pullFailure(t, reasons, messages); !strings.Contains(msg, "manifest unknown") {
				t.Errorf("ErrImagePull message = %q; want it to contain \"manifest unknown\"", msg)
			}
		})
	}
}

func dockerConfigJSON(host, user, pass string) []byte {
	auth := base64.StdEncoding.EncodeToString([]byte(user + ":" + pass))
	b, _ := json.Marshal(map[string]any{"auths": map[string]any{host: map[string]string{"username": user, "password": pass, "auth": auth}}})
	return b
}

func TestPrivateRegistryNeedsThePodsPullSecret(t *testing.T) {
	ns := env.Namespace(t)
	host := env.PrivateRegistry
	const wrongPassword = "wrong-Pa55word-91ab"
	dockerConfig := t.TempDir()
	crane(t, dockerConfig, "auth", "login", host, "-u", registryAuth.Username, "-p", registryAuth.Password)
	ref := host + "/private/app:v1"
	digest := pushNew(t, dockerConfig, ref)

	for name, pass := range map[string]string{"good": registryAuth.Password, "wrong": wrongPassword} {
		s := &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Type:       corev1.SecretTypeDockerConfigJson,
			Data:       map[string][]byte{corev1.DockerConfigJsonKey: dockerConfigJSON(host, registryAuth.Username, pass)},
		}
		if _, err := env.Client.CoreV1().Secrets(ns).Create(context.Background(), s, metav1.CreateOptions{}); err != nil {
			t.Fatalf("creating secret %s: %v", name, err)
		}
	}
	noSecrets := func(t *testing.T, pod *corev1.Pod) {
		t.Helper()
		status, err := json.Marshal(pod.Status)
		if err != nil {
			t.Fatal(err)
		}
		for _, secret := range []string{registryAuth.Password, wrongPassword, base64.StdEncoding.EncodeToString([]byte(registryAuth.Username + ":" + wrongPassword))} {
			if strings.Contains(string(status), secret) {
				t.Errorf("pod %s status contains a credential: %s", pod.Name, status)
			}
		}
	}

	t.Run("the right password pulls", func(t *testing.T) {
		createPod(t, ns, "good", ref, corev1.PullAlways, "", "good")
		id, pod := readyImageID(t, ns, "good")
		if want := host + "/private/app@" + digest; id != want {
			t.Errorf("imageID = %q; want %q", id, want)
		}
		noSecrets(t, pod)
	})
	for _, tt := range []struct{ name, pod, secret string }{
		{"a wrong password is a 401", "wrong", "wrong"},
		{"no pull secret is a 401", "anonymous", ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var secrets []string
			if tt.secret != "" {
				secrets = append(secrets, tt.secret)
			}
			createPod(t, ns, tt.pod, ref, corev1.PullAlways, "", secrets...)
			reasons, messages, last := waitingReasons(t, ns, tt.pod)
			msg := pullFailure(t, reasons, messages)
			if !strings.Contains(msg, "401") || !strings.Contains(msg, "unauthorized") {
				t.Errorf("ErrImagePull message = %q; want the 401 named, unauthorized", msg)
			}
			noSecrets(t, last)
		})
	}
}
