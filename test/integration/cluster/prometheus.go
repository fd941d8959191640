package cluster

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"time"
)

// prometheusConfig scrapes the simulator every second. honor_labels keeps the namespace and
// pod labels of the exposition, which describes many pods from one endpoint.
const prometheusConfig = `global:
  scrape_interval: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: kubeletsim
    honor_labels: true
    metrics_path: /metrics
    static_configs:
      - targets: ["%s"]
`

func (c *Cluster) startPrometheus(ctx context.Context) error {
	ports, err := freePorts(1)
	if err != nil {
		return err
	}
	target, err := url.Parse(c.Sim.MetricsURL())
	if err != nil {
		return fmt.Errorf("parsing simulator metrics URL: %w", err)
	}
	cfgPath := filepath.Join(c.Dir, "prometheus.yml")
	if err := os.WriteFile(cfgPath, fmt.Appendf(nil, prometheusConfig, target.Host), 0o644); err != nil {
		return fmt.Errorf("writing %s: %w", cfgPath, err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", ports[0])
	p, err := c.start("prometheus",
		"--config.file="+cfgPath,
		"--storage.tsdb.path="+filepath.Join(c.Dir, "prometheus-data"),
		"--storage.tsdb.retention.time=2h",
		"--web.listen-address="+addr,
		"--log.level=warn",
	)
	if err != nil {
		return err
	}
	c.PrometheusURL = "http://" + addr
	client := &http.Client{Timeout: 2 * time.Second}
	return waitFor(60*time.Second, p, "prometheus /-/ready", func() error {
		if err := ctx.Err(); err != nil {
			return err
		}
		return httpOK(client, c.PrometheusURL+"/-/ready")
	})
}
