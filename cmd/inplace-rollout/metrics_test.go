package main

import (
	"bytes"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/inplace-rollout/inplace-rollout/pkg/metrics"
	"github.com/inplace-rollout/inplace-rollout/pkg/workload"
)

var web = workload.Ref{Kind: workload.StatefulSet, Namespace: "shop", Name: "web"}

const webUpdated = `inplace_rollout_pods_updated_total{namespace="shop",workload="StatefulSet/web"} 2`

// get returns the body of url, failing the test unless it answers 200.
func get(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s: %s", url, resp.Status, body)
	}
	return string(body)
}

func TestHealthHandlerServesMetrics(t *testing.T) {
	reg, r := metrics.NewRegistry()
	r.PodsUpdated(web, 2)
	srv := httptest.NewServer(healthHandler(func() bool { return true }, "not yet", metrics.Handler(reg)))
	t.Cleanup(srv.Close)
	if body := get(t, srv.URL+"/metrics"); !strings.Contains(body, webUpdated) {
		t.Errorf("/metrics has no %s:\n%s", webUpdated, body)
	}
	if body := get(t, srv.URL+"/healthz"); body != "ok\n" {
		t.Errorf("/healthz = %q, want ok", body)
	}
}

// freeAddr is a loopback address nothing listens on now.
func freeAddr(t *testing.T) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	if err := lis.Close(); err != nil {
		t.Fatal(err)
	}
	return addr
}

func TestServeMetrics(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = taken.Close() })
	tests := []struct {
		name   string
		addr   string
		served bool
		log    string // in the plugin's log
	}{
		{name: "unset", addr: ""},
		{name: "free address", addr: freeAddr(t), served: true, log: "serving metrics"},
		{name: "address taken", addr: taken.Addr().String(), log: "metrics not served"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv(stepMetricsEnv, tt.addr)
			var logs bytes.Buffer
			m := serveMetrics(stepMetricsEnv, slog.New(slog.NewTextHandler(&logs, nil)))
			if (m != nil) != tt.served {
				t.Fatalf("serveMetrics returned %v, want metrics served %v; log:\n%s", m, tt.served, logs.String())
			}
			if !strings.Contains(logs.String(), tt.log) {
				t.Errorf("log has no %q:\n%s", tt.log, logs.String())
			}
			if tt.name == "address taken" && !strings.Contains(logs.String(), stepMetricsEnv) {
				t.Errorf("log does not name %s:\n%s", stepMetricsEnv, logs.String())
			}
			if !tt.served {
				return
			}
			m.PodsUpdated(web, 2)
			if body := get(t, "http://"+tt.addr+"/metrics"); !strings.Contains(body, webUpdated) {
				t.Errorf("/metrics has no %s:\n%s", webUpdated, body)
			}
		})
	}
}
