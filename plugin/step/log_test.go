package step

import (
	"encoding/json"
	"log/slog"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/inplace-rollout/inplace-rollout/internal/syncbuf"
	"github.com/inplace-rollout/inplace-rollout/pkg/metrics"
	"github.com/inplace-rollout/inplace-rollout/pkg/rollout"
)

// A rollout driven by the plugin logs every line with the namespace, the workload and the
// Argo Rollout, and with the rollout id once there is one; its pods are counted in the
// metrics, by namespace and workload.
func TestDriverLogsAndMetrics(t *testing.T) {
	client := newClient(t, 3)
	playKubelet(t, client)
	var logs syncbuf.Buffer
	log := slog.New(slog.NewJSONHandler(&logs, nil))
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg)
	if err != nil {
		t.Fatal(err)
	}
	p := newPluginWith(t, Clients{Driver: &rollout.Driver{Engine: &rollout.Engine{Client: client, Log: log, Metrics: m}}}, Options{Log: log})
	config := withField(goodConfig, `"maxUnavailable":"100%"`)
	if res := runToEnd(t, p, argoRollout("65f9bfd99b"), config); res.Phase != "Successful" {
		t.Fatalf("Run = %s %q, want Successful", res.Phase, res.Message)
	}
	var id string
	var lines int
	for line := range strings.Lines(logs.String()) {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		lines++
		if rec["namespace"] != testNS || rec["workload"] != "StatefulSet/"+stsName {
			t.Errorf("log line %s: want namespace %q and workload %q", line, testNS, "StatefulSet/"+stsName)
		}
		got, _ := rec["rolloutID"].(string)
		switch {
		case rec["msg"] == "driving":
			// Logged before the engine's first step, which finds or starts the rollout.
		case got == "":
			t.Errorf("log line %s names no rolloutID", line)
		case id == "":
			id = got
		case got != id:
			t.Errorf("log line %s: rolloutID %s, want %s as the lines before", line, got, id)
		}
	}
	if lines < 5 {
		t.Errorf("%d log lines, want the driver's and the engine's:\n%s", lines, logs.String())
	}
	want := `
# HELP inplace_rollout_pods_updated_total Pods updated in place: on the new images and Ready, as the rollout's lock records their count.
# TYPE inplace_rollout_pods_updated_total counter
inplace_rollout_pods_updated_total{namespace="` + testNS + `",workload="StatefulSet/` + stsName + `"} 3
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), metrics.PodsUpdated); err != nil {
		t.Error(err)
	}
}
