package argo_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/inplace-rollout/inplace-rollout/test/integration/clitest"
	"github.com/inplace-rollout/inplace-rollout/test/integration/cluster"
)

// TestStepInvalidConfigOnFirstRevisionShowsOnTheRollout: a Rollout created with a step config
// the plugin cannot read goes Healthy all the same (Argo completes a first revision whatever its
// steps return), so the plugin records why the step failed as a Warning Event InvalidConfig on
// the Rollout, naming the Rollout and the field, which `kubectl describe rollout` shows.
func TestStepInvalidConfigOnFirstRevisionShowsOnTheRollout(t *testing.T) {
	t.Parallel()
	ns := env.Namespace(t)
	clitest.CreateStatefulSet(t, env, ns, "web", 1)
	ro := createRollout(t, ns, "web", clitest.AppV1, oneStep("web", map[string]any{"batchez": []any{"50%"}}))

	var events []corev1.Event
	cluster.WaitFor(t, time.Minute, "a Warning Event InvalidConfig on Rollout "+ns+"/web", func(ctx context.Context) (bool, error) {
		list, err := env.Client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.kind=Rollout,involvedObject.name=web,reason=InvalidConfig"})
		if err != nil {
			return false, err
		}
		events = list.Items
		if len(events) == 0 {
			return false, fmt.Errorf("none yet")
		}
		return true, nil
	})
	ev := events[0]
	if ev.Type != corev1.EventTypeWarning || ev.InvolvedObject.UID != ro.UID {
		t.Errorf("Event %s about %+v, want a Warning about the Rollout (UID %s)", ev.Type, ev.InvolvedObject, ro.UID)
	}
	for _, want := range []string{"steps[].plugin.config of Rollout " + ns + "/web", `unknown field "batchez"`, "first revision", "until its config is fixed"} {
		if !strings.Contains(ev.Message, want) {
			t.Errorf("the Event's message %q does not say %q", ev.Message, want)
		}
	}
	describe := kubectl(t, "describe", "rollout", "web", "-n", ns)
	if !strings.Contains(describe, "InvalidConfig") || !strings.Contains(describe, "batchez") {
		t.Errorf("kubectl describe rollout shows no InvalidConfig Event naming batchez:\n%s", describe)
	}

}
