package tekton_test

import (
	"context"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/inplace-rollout/inplace-rollout/internal/syncbuf"
	"github.com/inplace-rollout/inplace-rollout/test/integration/cluster"
)

// TestSecondReplicaTakesOver: a second controller, as the same ServiceAccount, stands by while
// the first holds the Lease; the first killed mid-rollout, the second takes the Lease and
// finishes the run.
func TestSecondReplicaTakesOver(t *testing.T) {
	l, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	health := l.Addr().String()
	l.Close()
	var log syncbuf.Buffer
	second := exec.Command(cli, "tekton-controller", "--kubeconfig", controller.Kubeconfig, "--health-addr", health,
		"--leader-election-namespace", cluster.InplaceTektonNamespace)
	second.Env = append(os.Environ(), "POD_NAMESPACE="+cluster.InplaceTektonNamespace)
	second.Stdout, second.Stderr = &log, &log
	if err := second.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = second.Wait(); close(done) }()
	t.Cleanup(func() {
		// The second replica gives its Lease up as it stops; the first comes back and takes it.
		_ = second.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			_ = second.Process.Kill()
		}
		if err := controller.Restart(); err != nil {
			t.Errorf("starting the first controller again: %v", err)
		}
	})
	cluster.WaitFor(t, time.Minute, "the second replica ready and standing by", func(context.Context) (bool, error) {
		resp, err := http.Get("http://" + health + "/readyz")
		if err != nil {
			return false, nil
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK && strings.Contains(log.String(), "another replica leads"), nil
	})

	ns, _ := startPipelineRun(t, "failover", 2, slowImage, "", "")
	waitCustomRun(t, ns, "failover", "rollout", rolloutTimeout, "updating pods", updating(t))
	if strings.Contains(log.String(), "msg=leading") {
		t.Fatalf("the second replica leads while the first runs:\n%s", log.String())
	}
	if err := controller.Kill(); err != nil {
		t.Fatal(err)
	}
	run := waitCustomRun(t, ns, "failover", "rollout", rolloutTimeout, "done", isDone)
	if c := succeeded(run); c.Status != corev1.ConditionTrue {
		t.Fatalf("CustomRun %s: Succeeded %s %s: %s; want True, finished by the second replica", run.Name, c.Status, c.Reason, c.Message)
	}
	if !strings.Contains(log.String(), "msg=leading") {
		t.Errorf("the run succeeded but the second replica never led:\n%s", log.String())
	}
	if imgs := podImages(t, ns, "web"); imgs[slowImage] != 2 {
		t.Errorf("pods by image: %v, want both on %s", imgs, slowImage)
	}
}
