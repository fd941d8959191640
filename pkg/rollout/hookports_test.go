package rollout

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/inplace-rollout/inplace-rollout/pkg/inplace"
	"github.com/inplace-rollout/inplace-rollout/pkg/workload"
)

// declarePort gives the app container the port http (8080) in the StatefulSet's template, when
// there is one, and in each pod but those of except.
func (fc *fakeCluster) declarePort(except ...string) {
	fc.t.Helper()
	ports := []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}}
	if fc.kind == workload.StatefulSet {
		sts := fc.sts()
		sts.Spec.Template.Spec.Containers[0].Ports = ports
		if _, err := fc.client.AppsV1().StatefulSets(testNS).Update(context.Background(), sts, metav1.UpdateOptions{}); err != nil {
			fc.t.Fatal(err)
		}
	}
	for _, p := range fc.pods() {
		if !slices.Contains(except, p.Name) {
			p.Spec.Containers[0].Ports = ports
			fc.updatePod(&p)
		}
	}
}

// httpHook is a preUpdate HTTP hook to port.
func httpHook(port intstr.IntOrString) *inplace.Hooks {
	return &inplace.Hooks{PreUpdate: &inplace.Hook{HTTP: &inplace.HTTPHook{Port: port, Path: "/hook/pre"}}}
}

// TestHookPortsRefused: an HTTP hook naming a port the template (or, for label-selected pods, a
// pod) does not declare is bad input, refused by a start, a rollout superseding another and a
// plan before anything is written; a port the template declares, or a number, starts.
func TestHookPortsRefused(t *testing.T) {
	tests := []struct {
		name  string
		kind  workload.Kind
		setup func(*fakeCluster)
		hooks *inplace.Hooks
		says  string // empty: the rollout starts
	}{
		{name: "a name the template does not declare", hooks: httpHook(intstr.FromString("admin")),
			says: `StatefulSet shop/web (its pod template): hooks.preUpdate: no container declares the port "admin" that the HTTP hook names; name a port a container declares, or give the port's number`},
		{name: "no port declared at all", hooks: &inplace.Hooks{PostUpdate: &inplace.Hook{HTTP: &inplace.HTTPHook{Port: intstr.FromString("http"), Path: "/ready"}}},
			says: `StatefulSet shop/web (its pod template): hooks.postUpdate: no container declares the port "http"`},
		{name: "a pod of label-selected pods lacks it", kind: workload.Pods, setup: func(fc *fakeCluster) { fc.declarePort("web-1") },
			hooks: httpHook(intstr.FromString("http")),
			says:  `pod shop/web-1: hooks.preUpdate: no container declares the port "http" that the HTTP hook names`},
		{name: "a name the template declares", setup: func(fc *fakeCluster) { fc.declarePort() }, hooks: httpHook(intstr.FromString("http"))},
		{name: "a name every selected pod declares", kind: workload.Pods, setup: func(fc *fakeCluster) { fc.declarePort() }, hooks: httpHook(intstr.FromString("http"))},
		{name: "a number, declared or not", hooks: httpHook(intstr.FromInt32(9090))},
		{name: "a handshake", hooks: &inplace.Hooks{PreUpdate: &inplace.Hook{Handshake: &inplace.HandshakeHook{Condition: "example.com/deregistered"}}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fc := newFakeCluster(t, clusterOpts{kind: tt.kind, pods: 2})
			if tt.setup != nil {
				tt.setup(fc)
			}
			spec := fc.spec(imageV2, one, all)
			spec.Hooks = tt.hooks
			e := fc.engine()
			before := fc.snapshot()
			_, planErr := e.Plan(context.Background(), spec)
			_, _, err := e.Reconcile(context.Background(), spec, Status{})
			if tt.says == "" {
				if planErr != nil || err != nil {
					t.Fatalf("plan: %v; start: %v; want both to go on", planErr, err)
				}
				if fc.lock() == nil {
					t.Errorf("the start wrote no lock")
				}
				return
			}
			for what, err := range map[string]error{"plan": planErr, "start": err} {
				var inv *InvalidError
				if !errors.As(err, &inv) || !strings.Contains(err.Error(), tt.says) {
					t.Errorf("%s: error = %v (%T), want an InvalidError saying %q", what, err, err, tt.says)
				}
			}
			if after := fc.snapshot(); after != before {
				t.Errorf("the refused start wrote to the cluster:\nbefore %s\nafter  %s", before, after)
			}
		})
	}
}

// TestHookPortsRefusedOnSupersede: a rollout that replaces one in flight with hooks naming a
// port the template does not declare is refused before it writes its lock.
func TestHookPortsRefusedOnSupersede(t *testing.T) {
	fc := newFakeCluster(t, clusterOpts{pods: 3})
	e := fc.engine()
	fc.mustDrive(e, fc.spec(imageV2, one, all), Status{}, func(st Status) bool { return st.Updated == 1 })
	second := fc.spec(imageV3, one, all)
	second.Supersede, second.Hooks = true, httpHook(intstr.FromString("admin"))
	before := fc.snapshot()
	_, _, err := e.Reconcile(context.Background(), second, Status{})
	var inv *InvalidError
	if !errors.As(err, &inv) || !strings.Contains(err.Error(), `StatefulSet shop/web (its pod template): hooks.preUpdate: no container declares the port "admin"`) {
		t.Errorf("superseding: %v (%T), want an InvalidError naming the port", err, err)
	}
	if after := fc.snapshot(); after != before {
		t.Errorf("the refused supersede wrote to the cluster:\nbefore %s\nafter  %s", before, after)
	}
}
