package argo_test

import (
	"context"
	"maps"
	"sync/atomic"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/inplace-rollout/inplace-rollout/pkg/prepull"
	"github.com/inplace-rollout/inplace-rollout/test/integration/clitest"
)

// TestStepPrePulls: a step with prePull pulls each batch's new images onto its nodes with
// puller pods before the batch restarts, and removes every puller by the end; the pods keep
// their UIDs.
func TestStepPrePulls(t *testing.T) {
	ns := env.Namespace(t)
	clitest.CreateStatefulSet(t, env, ns, "web", replicas)
	_, before := podsOn(t, ns, "web", clitest.AppV1)
	createRollout(t, ns, "web", clitest.AppV1, oneStep("web", map[string]any{"prePull": true}))

	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	w, err := env.Client.CoreV1().Pods(ns).Watch(ctx, metav1.ListOptions{LabelSelector: prepull.LabelRollout})
	if err != nil {
		t.Fatal(err)
	}
	var pullers atomic.Int32
	go func() {
		for ev := range w.ResultChan() {
			if ev.Type == watch.Added {
				pullers.Add(1)
			}
		}
	}()

	old := setImage(t, ns, "web", clitest.AppV2, oneStep("web", map[string]any{"prePull": true}))
	healthyOn(t, ns, "web", old)
	n, after := podsOn(t, ns, "web", clitest.AppV2)
	if n != replicas || !maps.Equal(before, after) {
		t.Errorf("%d of %d pods on %s; UIDs before %v, after %v", n, replicas, clitest.AppV2, before, after)
	}
	if pullers.Load() == 0 {
		t.Error("no puller pod was created")
	}
	left, err := prepull.List(context.Background(), env.Client, ns, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(left) > 0 {
		t.Errorf("%d puller pods outlive the rollout, e.g. %s", len(left), left[0].Name)
	}
}
