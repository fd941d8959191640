// Package plugintest is what the Argo plugins' tests share: Serve, which serves a plugin over
// go-plugin's in-process harness as Argo's controller talks to it (the scale benchmarks use it
// too), and the fake cluster their unit tests run the engine on: a fake API server with a
// StatefulSet and its pods, and a kubelet that restarts containers on their new images when the
// pods are read.
package plugintest

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8stypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	goplugin "github.com/hashicorp/go-plugin"
)

// The fake cluster's names and images.
const (
	Namespace = "shop"
	StsName   = "web"
	Container = "app"
	ImageV1   = "reg.example/app:v1"
	ImageV2   = "reg.example/app:v2"
	ImageV3   = "reg.example/app:v3"
	// ImageCrash crash-loops once started: CrashLoopBackOff, never Ready.
	ImageCrash = "reg.example/app:crash"
)

func ptr[T any](v T) *T { return &v }

// NewClient is a fake API server with the StatefulSet web of n pods running ImageV1, Ready for
// an hour. Its recorded actions start empty.
func NewClient(t testing.TB, n int) *fake.Clientset {
	t.Helper()
	client := fake.NewClientset()
	ctx := context.Background()
	sts := &appsv1.StatefulSet{
		// Generation 1, as the API server starts every apps/v1 object, observed by the controller.
		ObjectMeta: metav1.ObjectMeta{Name: StsName, Namespace: Namespace, UID: "uid-sts-web", Generation: 1},
		Spec: appsv1.StatefulSetSpec{
			Replicas: ptr(int32(n)),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": StsName}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": StsName}},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: Container, Image: ImageV1}}},
			},
			UpdateStrategy: appsv1.StatefulSetUpdateStrategy{Type: appsv1.RollingUpdateStatefulSetStrategyType},
		},
		Status: appsv1.StatefulSetStatus{ObservedGeneration: 1, Replicas: int32(n), CurrentRevision: "web-1", UpdateRevision: "web-1"},
	}
	if _, err := client.AppsV1().StatefulSets(Namespace).Create(ctx, sts, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	since := metav1.NewTime(time.Now().Add(-time.Hour))
	for i := range n {
		name := fmt.Sprintf("%s-%d", StsName, i)
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: Namespace, UID: k8stypes.UID("uid-" + name), CreationTimestamp: since,
				Labels:          map[string]string{"app": StsName, appsv1.ControllerRevisionHashLabelKey: "web-1"},
				OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "StatefulSet", Name: StsName, UID: "uid-sts-web", Controller: ptr(true)}}},
			Spec: corev1.PodSpec{NodeName: "node-1", Containers: []corev1.Container{{Name: Container, Image: ImageV1}}},
			Status: corev1.PodStatus{
				Phase:      corev1.PodRunning,
				Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: since}},
				ContainerStatuses: []corev1.ContainerStatus{{Name: Container, Image: ImageV1, ImageID: ImageIDOf(ImageV1),
					Ready: true, Started: ptr(true), State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: since}}}},
			},
		}
		if _, err := client.CoreV1().Pods(Namespace).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	client.ClearActions()
	return client
}

// Writes lists the write actions the fake API server received, as "verb resource".
func Writes(client *fake.Clientset) []string {
	var out []string
	for _, a := range client.Actions() {
		switch a.GetVerb() {
		case "get", "list", "watch":
			continue
		}
		out = append(out, a.GetVerb()+" "+a.GetResource().Resource)
	}
	return out
}

// ImageIDOf is the imageID the fake kubelet reports for image.
func ImageIDOf(image string) string {
	repo, digest, ok := strings.Cut(image, "@")
	if !ok {
		sum := sha256.Sum256([]byte(image))
		digest = "sha256:" + hex.EncodeToString(sum[:])
	}
	if i := strings.LastIndexByte(repo, ':'); i > strings.LastIndexByte(repo, '/') {
		repo = repo[:i]
	}
	return repo + "@" + digest
}

// PlayKubelet makes every read of pods see them as a kubelet reports them once it restarted
// their containers on the images of their spec: running and Ready, or crash-looping on
// ImageCrash.
func PlayKubelet(t testing.TB, client *fake.Clientset) {
	t.Helper()
	podsGVR := corev1.SchemeGroupVersion.WithResource("pods")
	sync := func(k8stesting.Action) (bool, runtime.Object, error) {
		objs, err := client.Tracker().List(podsGVR, corev1.SchemeGroupVersion.WithKind("Pod"), Namespace)
		if err != nil {
			return true, nil, err
		}
		for _, p := range objs.(*corev1.PodList).Items {
			changed := false
			for i, c := range p.Spec.Containers {
				cs := &p.Status.ContainerStatuses[i]
				if cs.Image == c.Image {
					continue
				}
				changed = true
				now := metav1.Now()
				cs.Image, cs.ImageID, cs.RestartCount = c.Image, ImageIDOf(c.Image), cs.RestartCount+1
				cs.Ready, cs.Started = true, ptr(true)
				cs.State = corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}}
				if c.Image == ImageCrash {
					cs.Ready, cs.Started = false, ptr(false)
					cs.State = corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff", Message: "back-off restarting failed container"}}
				}
			}
			if changed {
				ready := corev1.ConditionTrue
				for _, cs := range p.Status.ContainerStatuses {
					if !cs.Ready {
						ready = corev1.ConditionFalse
					}
				}
				for i := range p.Status.Conditions {
					if c := &p.Status.Conditions[i]; c.Type == corev1.PodReady && c.Status != ready {
						c.Status, c.LastTransitionTime = ready, metav1.Now()
					}
				}
			}
			if changed {
				if err := client.Tracker().Update(podsGVR, &p, Namespace); err != nil {
					return true, nil, err
				}
			}
		}
		return false, nil, nil
	}
	client.PrependReactor("list", "pods", sync)
	client.PrependReactor("get", "pods", sync)
}

// PodImages lists the pods' first container images as "name=image", sorted.
func PodImages(t testing.TB, client *fake.Clientset) []string {
	t.Helper()
	objs, err := client.Tracker().List(corev1.SchemeGroupVersion.WithResource("pods"), corev1.SchemeGroupVersion.WithKind("Pod"), Namespace)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, p := range objs.(*corev1.PodList).Items {
		out = append(out, p.Name+"="+p.Spec.Containers[0].Image)
	}
	slices.Sort(out)
	return out
}

// TemplateImage is the StatefulSet's template image, read without a recorded action.
func TemplateImage(t testing.TB, client *fake.Clientset) string {
	t.Helper()
	obj, err := client.Tracker().Get(appsv1.SchemeGroupVersion.WithResource("statefulsets"), Namespace, StsName)
	if err != nil {
		t.Fatal(err)
	}
	return obj.(*appsv1.StatefulSet).Spec.Template.Spec.Containers[0].Image
}

// Serve serves plugins over go-plugin's in-process harness, as Argo's controller talks to a
// plugin process, and returns what the client side dispenses under key. clientPlugins is the
// client's plugin map (the same kinds, with no implementation).
func Serve(t testing.TB, handshake goplugin.HandshakeConfig, plugins, clientPlugins map[string]goplugin.Plugin, key string) any {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	reattach := make(chan *goplugin.ReattachConfig, 1)
	closed := make(chan struct{})
	go goplugin.Serve(&goplugin.ServeConfig{
		HandshakeConfig: handshake,
		Plugins:         plugins,
		Test:            &goplugin.ServeTestConfig{Context: ctx, ReattachConfigCh: reattach, CloseCh: closed},
	})
	cfg := <-reattach
	c := goplugin.NewClient(&goplugin.ClientConfig{HandshakeConfig: handshake, Plugins: clientPlugins, Reattach: cfg})
	t.Cleanup(func() {
		c.Kill()
		cancel()
		<-closed
	})
	proto, err := c.Client()
	if err != nil {
		t.Fatal(err)
	}
	raw, err := proto.Dispense(key)
	if err != nil {
		t.Fatal(err)
	}
	return raw
}
