package grafana

import (
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/inplace-rollout/inplace-rollout/pkg/metrics"
)

// TestDashboard: the dashboard is Grafana JSON with a data source variable every panel uses,
// unique panel ids, namespace and workload variables, and queries that name only the metrics
// pkg/metrics defines, each of the four at least once. test/integration/analysis runs every
// query on a real Prometheus.
func TestDashboard(t *testing.T) {
	d, err := Parse()
	if err != nil {
		t.Fatal(err)
	}
	if d.UID == "" || d.Title == "" || d.SchemaVersion < 36 {
		t.Errorf("uid %q, title %q, schemaVersion %d: want a uid, a title and a schema Grafana 10 reads", d.UID, d.Title, d.SchemaVersion)
	}
	var vars []string
	for _, v := range d.Templating.List {
		vars = append(vars, v.Name)
	}
	for _, want := range []string{"datasource", "namespace", "workload"} {
		if !slices.Contains(vars, want) {
			t.Errorf("variables %v: no %s", vars, want)
		}
	}
	known := map[string]bool{metrics.PodsUpdated: true, metrics.Rollbacks: true, metrics.AnalysisVerdicts: true,
		metrics.BatchDuration + "_bucket": true, metrics.BatchDuration + "_sum": true, metrics.BatchDuration + "_count": true}
	used := map[string]bool{}
	ids := map[int]bool{}
	name := regexp.MustCompile(`inplace_rollout_[a-z_]+`)
	for _, p := range d.Panels {
		if ids[p.ID] {
			t.Errorf("panel %q: id %d used twice", p.Title, p.ID)
		}
		ids[p.ID] = true
		if p.Datasource.UID != "${datasource}" {
			t.Errorf("panel %q: data source %q, want ${datasource}", p.Title, p.Datasource.UID)
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			for _, m := range name.FindAllString(tg.Expr, -1) {
				if !known[m] {
					t.Errorf("panel %q queries %s, which pkg/metrics does not define", p.Title, m)
				}
				used[strings.TrimSuffix(m, "_bucket")] = true
			}
			if !strings.Contains(tg.Expr, `namespace=~"$namespace"`) || !strings.Contains(tg.Expr, `workload=~"$workload"`) {
				t.Errorf("panel %q: %s does not select the namespace and workload variables", p.Title, tg.Expr)
			}
		}
	}
	for _, m := range []string{metrics.PodsUpdated, metrics.Rollbacks, metrics.BatchDuration, metrics.AnalysisVerdicts} {
		if !used[m] {
			t.Errorf("no panel shows %s", m)
		}
	}
	if got := len(d.Queries()); got < len(d.Panels) {
		t.Errorf("%d queries for %d panels", got, len(d.Panels))
	}
}
