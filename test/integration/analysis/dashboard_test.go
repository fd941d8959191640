package analysis_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"testing"

	"github.com/inplace-rollout/inplace-rollout/config/grafana"
)

// TestGrafanaDashboardQueriesRun: every query of the Grafana dashboard (config/grafana), its
// variables expanded as Grafana expands them, is PromQL that this real Prometheus evaluates.
func TestGrafanaDashboardQueriesRun(t *testing.T) {
	d, err := grafana.Parse()
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range d.Queries() {
		req, err := http.NewRequest(http.MethodGet, env.PrometheusURL+"/api/v1/query?"+url.Values{"query": {q}}.Encode(), nil)
		if err != nil {
			t.Fatal(err)
		}
		req.SetBasicAuth(promUser, promPassword)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		var answer struct {
			Status string `json:"status"`
			Error  string `json:"error"`
		}
		if err := json.Unmarshal(body, &answer); err != nil || answer.Status != "success" {
			t.Errorf("Prometheus on %s: HTTP %d, status %q, error %q (%v)", q, resp.StatusCode, answer.Status, answer.Error, err)
		}
	}
}
