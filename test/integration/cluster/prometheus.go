package cluster

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"time"

	"golang.org/x/crypto/bcrypt"
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

// realNodeScrape adds the pods of the real node: found through kube-apiserver, scraped at
// POD_IP:8080/metrics over the node's bridge, and labelled with their namespace and pod as the
// simulator labels its series, so that one query reads both.
const realNodeScrape = `  - job_name: realnode
    metrics_path: /metrics
    kubernetes_sd_configs:
      - role: pod
        api_server: %q
        tls_config:
          ca_file: %q
          cert_file: %q
          key_file: %q
        selectors:
          - role: pod
            field: spec.nodeName=%s
    relabel_configs:
      - source_labels: [__meta_kubernetes_pod_phase]
        regex: Running
        action: keep
      - source_labels: [__meta_kubernetes_pod_ip]
        target_label: __address__
        replacement: $1:8080
      - source_labels: [__meta_kubernetes_namespace]
        target_label: namespace
      - source_labels: [__meta_kubernetes_pod_name]
        target_label: pod
`

// BasicAuth are HTTP basic-auth credentials.
type BasicAuth struct {
	Username, Password string
}

func (c *Cluster) startPrometheus(ctx context.Context) error {
	target, err := url.Parse(c.Sim.MetricsURL())
	if err != nil {
		return fmt.Errorf("parsing simulator metrics URL: %w", err)
	}
	cfgPath := filepath.Join(c.Dir, "prometheus.yml")
	cfg := fmt.Appendf(nil, prometheusConfig, target.Host)
	if c.RealNode != nil {
		cfg = fmt.Appendf(cfg, realNodeScrape, c.Config.Host, c.pki.CACert,
			c.pki.AdminCert, c.pki.AdminKey, c.RealNode.Name)
	}
	if err := os.WriteFile(cfgPath, cfg, 0o644); err != nil {
		return fmt.Errorf("writing %s: %w", cfgPath, err)
	}
	args := []string{
		"--config.file=" + cfgPath,
		"--storage.tsdb.path=" + filepath.Join(c.Dir, "prometheus-data"),
		"--storage.tsdb.retention.time=2h",
		"--log.level=warn",
	}
	if auth := c.opts.PrometheusBasicAuth; auth != nil {
		hash, err := bcrypt.GenerateFromPassword([]byte(auth.Password), bcrypt.MinCost)
		if err != nil {
			return fmt.Errorf("hashing the Prometheus password: %w", err)
		}
		webPath := filepath.Join(c.Dir, "prometheus-web.yml")
		web := fmt.Sprintf("basic_auth_users:\n  %s: %s\n", auth.Username, hash)
		if err := os.WriteFile(webPath, []byte(web), 0o600); err != nil {
			return fmt.Errorf("writing %s: %w", webPath, err)
		}
		args = append(args, "--web.config.file="+webPath)
	}
	return c.onFreePorts("prometheus", 1, func(ports []int) error {
		addr := fmt.Sprintf("127.0.0.1:%d", ports[0])
		c.promArgs = append(slices.Clip(args), "--web.listen-address="+addr)
		c.PrometheusURL = "http://" + addr
		return c.runPrometheus(ctx)
	})
}

func (c *Cluster) runPrometheus(ctx context.Context) error {
	p, err := c.start("prometheus", c.promArgs...)
	if err != nil {
		return err
	}
	client := &http.Client{Timeout: 2 * time.Second}
	return c.waitFor(60*time.Second, p, "prometheus /-/ready", func() error {
		if err := ctx.Err(); err != nil {
			return err
		}
		req, _ := http.NewRequest(http.MethodGet, c.PrometheusURL+"/-/ready", nil)
		if auth := c.opts.PrometheusBasicAuth; auth != nil {
			req.SetBasicAuth(auth.Username, auth.Password)
		}
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("GET /-/ready: HTTP %d", resp.StatusCode)
		}
		return nil
	})
}

// StopPrometheus stops Prometheus, as an outage would, and returns a function that starts it
// again on the same address with the same data.
func (c *Cluster) StopPrometheus() (restart func() error, err error) {
	for i, p := range c.procs {
		if p.name != "prometheus" {
			continue
		}
		if err := p.stop(10 * time.Second); err != nil {
			return nil, err
		}
		c.procs = append(c.procs[:i], c.procs[i+1:]...)
		return func() error {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			return c.runPrometheus(ctx)
		}, nil
	}
	return nil, fmt.Errorf("prometheus is not running")
}
