package e2e

import (
	"context"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/inplace-rollout/inplace-rollout/test/integration/clitest"
	"github.com/inplace-rollout/inplace-rollout/test/integration/realnode"
	"github.com/inplace-rollout/inplace-rollout/test/integration/realnode/loadgen"
)

// Analysis on the real app's own metrics, scraped by the real Prometheus from the pods over
// the node's bridge while the load generator sends them traffic: errors1 (30% 5xx) fails its
// first batch's error-rate check and is rolled back; v2 passes every batch.
func TestAnalysisOnRealMetrics(t *testing.T) {
	full(t)
	ns := env.Namespace(t)
	statefulSet(t, ns, "web", 3)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	gen, err := loadgen.Start(ctx, loadgen.Config{
		Subnet: netip.MustParsePrefix(realnode.Subnet),
		RPS:    60,
		Targets: func() []string {
			var ips []string
			for _, p := range clitest.ListPods(t, env, ns, "app=web") {
				if p.Status.PodIP != "" {
					ips = append(ips, p.Status.PodIP)
				}
			}
			return ips
		},
	})
	must(t, err, "starting the load generator")
	t.Cleanup(func() { gen.Stop() })
	// A full rate window of every pod's traffic before the first verdict.
	time.Sleep(8 * time.Second)
	cfg := analysisConfig(t)

	r := run(t, "run", "-n", ns, "--target", "statefulset/web", "--image", "app="+image("errors1"), "--batches", "1,100%", "--analysis", cfg)
	if r.Code != 1 || !strings.Contains(r.Stdout+r.Stderr, "errorRate") {
		t.Fatalf("run errors1: want exit 1 on the error rate, got %s", r)
	}
	onDigest(t, ns, "app=web", digest(t, "v1"))

	r = run(t, "run", "-n", ns, "--target", "statefulset/web", "--image", "app="+image("v2"), "--batches", "1,100%", "--analysis", cfg)
	if r.Code != 0 || !strings.Contains(r.Stderr, "analysis passed") {
		t.Fatalf("run v2: want exit 0 with every batch's analysis passed, got %s", r)
	}
	onDigest(t, ns, "app=web", digest(t, "v2"))
	s := gen.Stats()
	t.Logf("load: %d requests, by code %v, by tag %v, %d errors", s.Sent, s.Codes, s.Bodies, s.Errors)
	if s.Codes[500] == 0 || s.Bodies["v2"] == 0 {
		t.Errorf("the load generator saw no 5xx from errors1 or no answer from v2: %+v", s)
	}
}
