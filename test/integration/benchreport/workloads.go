package benchreport

import (
	"context"
	"fmt"
	"log/slog"
	"os"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/inplace-rollout/inplace-rollout/pkg/gate"
	"github.com/inplace-rollout/inplace-rollout/pkg/inplace"
)

func template(app string) corev1.PodTemplateSpec {
	return corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": app}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: imageV1}}},
	}
}

// createStatefulSet creates the StatefulSet of the size's pods app=name, Parallel pod
// management. The floor's is OnDelete from the start, as the floor loop patches its pods
// behind its back. A gated one's pods declare the readiness gate inplace-rollout.io/ready,
// which the project's gate controller, started here for them, sets True on each new pod.
func (s *sizeRun) createStatefulSet(ctx context.Context, name string, gated bool) error {
	sts := &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: s.ns},
		Spec: appsv1.StatefulSetSpec{
			Replicas: ptr.To(int32(s.n)), ServiceName: name, PodManagementPolicy: appsv1.ParallelPodManagement,
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}},
			Template: template(name),
		},
	}
	if name == floorApp {
		sts.Spec.UpdateStrategy = appsv1.StatefulSetUpdateStrategy{Type: appsv1.OnDeleteStatefulSetStrategyType}
	}
	if gated {
		sts.Spec.Template.Spec.ReadinessGates = []corev1.PodReadinessGate{{ConditionType: inplace.ReadinessGate}}
		if err := s.startGate(ctx, name); err != nil {
			return err
		}
	}
	if _, err := s.Client.AppsV1().StatefulSets(s.ns).Create(ctx, sts, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating StatefulSet %s/%s: %w", s.ns, name, err)
	}
	return nil
}

// gateUserAgent names the gate controller's requests in the audit log.
const gateUserAgent = "inplace-rollout-gate-controller"

// startGate runs the project's readiness gate controller (pkg/gate, as the gate-controller
// command runs it) in this process for the pods app=app of the size's namespace, with a
// client of its own at the drivers' rate limit, until Run's context ends.
func (s *sizeRun) startGate(ctx context.Context, app string) error {
	if s.Config == nil {
		return fmt.Errorf("starting the gate controller for the pods app=%s in %s: the bench has no rest.Config", app, s.ns)
	}
	cfg := rest.CopyConfig(s.Config)
	cfg.UserAgent = gateUserAgent
	if s.ClientQPS > 0 {
		cfg.QPS, cfg.Burst = float32(s.ClientQPS), s.ClientBurst
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("building the gate controller's client: %w", err)
	}
	// Its line per pod set is no news here; its warnings are.
	quiet := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	s.gateDone = make(chan error, 1)
	go func() {
		s.gateDone <- gate.Run(ctx, client, gate.Options{Namespace: s.ns, Selector: "app=" + app, Logger: quiet.With("component", "gate-controller", "namespace", s.ns)})
	}()
	return nil
}

// stopGate waits for the gate controller, once Run's context has ended, and returns its error.
func (s *sizeRun) stopGate() error {
	if s.gateDone == nil {
		return nil
	}
	if err := <-s.gateDone; err != nil {
		return fmt.Errorf("the gate controller of namespace %s: %w", s.ns, err)
	}
	return nil
}

// createDeployment creates a Deployment of the size's pods app=name, rolling update
// maxUnavailable 10%, maxSurge 0.
func (s *sizeRun) createDeployment(ctx context.Context, name string) error {
	tenPercent := intstr.FromString("10%")
	zero := intstr.FromInt32(0)
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: s.ns},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(int32(s.n)),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}},
			Template: template(name),
			Strategy: appsv1.DeploymentStrategy{Type: appsv1.RollingUpdateDeploymentStrategyType,
				RollingUpdate: &appsv1.RollingUpdateDeployment{MaxUnavailable: &tenPercent, MaxSurge: &zero}},
		},
	}
	if _, err := s.Client.AppsV1().Deployments(s.ns).Create(ctx, d, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating Deployment %s/%s: %w", s.ns, name, err)
	}
	return nil
}

// cloneSets is OpenKruise's CloneSet resource.
var cloneSets = schema.GroupVersionResource{Group: "apps.kruise.io", Version: "v1alpha1", Resource: "clonesets"}

// createCloneSet creates a CloneSet of the size's pods app=name, updated in place, 10%
// unavailable at most.
func (s *sizeRun) createCloneSet(ctx context.Context, name string) error {
	cs := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apps.kruise.io/v1alpha1",
		"kind":       "CloneSet",
		"metadata":   map[string]any{"name": name, "namespace": s.ns},
		// Every field its controller reads is set: no defaulting webhook runs here.
		"spec": map[string]any{
			"replicas":             int64(s.n),
			"revisionHistoryLimit": int64(10),
			"scaleStrategy":        map[string]any{},
			"selector":             map[string]any{"matchLabels": map[string]any{"app": name}},
			"template": map[string]any{
				"metadata": map[string]any{"labels": map[string]any{"app": name}},
				"spec":     map[string]any{"containers": []any{map[string]any{"name": "app", "image": imageV1}}},
			},
			"updateStrategy": map[string]any{"type": "InPlaceIfPossible", "partition": int64(0), "maxUnavailable": "10%", "maxSurge": int64(0)},
		},
	}}
	if _, err := s.Dynamic.Resource(cloneSets).Namespace(s.ns).Create(ctx, cs, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating CloneSet %s/%s: %w", s.ns, name, err)
	}
	return nil
}
