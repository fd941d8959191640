// Package grafana holds the Grafana dashboard of the project's four metrics
// (inplace-rollout.json: pods updated, rollbacks, batch durations, analysis verdicts), which
// Grafana imports as it is; Queries gives the tests its PromQL, to check against the metrics
// pkg/metrics defines and to run on a real Prometheus.
package grafana

import (
	_ "embed"
	"encoding/json"
	"fmt"
	"strings"
)

// JSON is inplace-rollout.json.
//
//go:embed inplace-rollout.json
var JSON []byte

// Dashboard is the part of Grafana's dashboard model the tests read.
type Dashboard struct {
	UID           string `json:"uid"`
	Title         string `json:"title"`
	SchemaVersion int    `json:"schemaVersion"`
	Templating    struct {
		List []struct {
			Name       string          `json:"name"`
			Type       string          `json:"type"`
			Query      json.RawMessage `json:"query"`
			Definition string          `json:"definition"`
		} `json:"list"`
	} `json:"templating"`
	Panels []struct {
		ID         int    `json:"id"`
		Title      string `json:"title"`
		Datasource struct {
			UID string `json:"uid"`
		} `json:"datasource"`
		Targets []struct {
			RefID string `json:"refId"`
			Expr  string `json:"expr"`
		} `json:"targets"`
	} `json:"panels"`
}

// Parse reads the dashboard.
func Parse() (*Dashboard, error) {
	var d Dashboard
	if err := json.Unmarshal(JSON, &d); err != nil {
		return nil, fmt.Errorf("reading inplace-rollout.json: %w", err)
	}
	return &d, nil
}

// Queries are the PromQL of every panel target and query variable, with Grafana's variables
// replaced as Grafana would on a dashboard showing every namespace and workload over the last
// hour.
func (d *Dashboard) Queries() []string {
	expand := strings.NewReplacer(`"$namespace"`, `".*"`, `"$workload"`, `".*"`, "$__rate_interval", "1m", "$__range", "1h").Replace
	var out []string
	for _, p := range d.Panels {
		for _, t := range p.Targets {
			out = append(out, expand(t.Expr))
		}
	}
	for _, v := range d.Templating.List {
		if v.Type == "query" {
			// label_values(METRIC{...}, LABEL) is Grafana's, not PromQL: its selector is.
			sel := strings.TrimPrefix(v.Definition, "label_values(")
			if i := strings.LastIndex(sel, ","); i > 0 {
				sel = sel[:i]
			}
			out = append(out, expand(sel))
		}
	}
	return out
}
