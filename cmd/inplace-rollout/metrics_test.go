package main

import (
	"bufio"
	"bytes"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
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
			m := serveMetrics(nil, stepMetricsEnv, slog.New(slog.NewTextHandler(&logs, nil)))
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

// TestPluginMetricsAddr: the plugin's entry in argo-rollouts-config gives its address as the
// argument --metrics-addr (each plugin its own), which wins over the environment variable that
// all of Argo's plugins share; an argument it does not take is an error naming it.
func TestPluginMetricsAddr(t *testing.T) {
	t.Setenv(stepMetricsEnv, ":9091")
	for _, tc := range []struct {
		name         string
		args         []string
		addr, source string
		err          string
	}{
		{"no args: the environment", nil, ":9091", stepMetricsEnv, ""},
		{"the argument", []string{"--metrics-addr=:9101"}, ":9101", "--metrics-addr", ""},
		{"the argument, two words", []string{"--metrics-addr", "127.0.0.1:9102"}, "127.0.0.1:9102", "--metrics-addr", ""},
		{"the argument, empty: none", []string{"--metrics-addr="}, "", "--metrics-addr", ""},
		{"an unknown flag", []string{"--log-level=debug"}, "", "", "unknown flag: --log-level"},
		{"a stray word", []string{"--metrics-addr=:9101", "extra"}, "", "", `unexpected ["extra"]`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			addr, source, err := pluginMetricsAddr(tc.args, stepMetricsEnv)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) || !strings.Contains(err.Error(), "--metrics-addr=ADDRESS") {
					t.Fatalf("err %v, want one naming %q and what the plugin takes", err, tc.err)
				}
				return
			}
			if err != nil || addr != tc.addr || source != tc.source {
				t.Errorf("addr %q from %q (err %v), want %q from %q", addr, source, err, tc.addr, tc.source)
			}
		})
	}
}

// TestPluginProcessServesMetricsOnItsArgs: the binary started as Argo starts a step plugin (the
// handshake variable set, the entry's args on its command line) serves /metrics on the address
// its --metrics-addr gives.
func TestPluginProcessServesMetricsOnItsArgs(t *testing.T) {
	bin := buildBinary(t, "inplace-rollout")
	addr := freeAddr(t)
	cmd := exec.Command(bin, "--metrics-addr="+addr)
	cmd.Env = append(os.Environ(), pluginEnv+"=step", stepMetricsEnv+"=")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	// go-plugin's handshake line on stdout says the plugin serves.
	if line, err := bufio.NewReader(stdout).ReadString('\n'); err != nil || !strings.Contains(line, "|") {
		t.Fatalf("the plugin's handshake: %q, %v", line, err)
	}
	if body := get(t, "http://"+addr+"/metrics"); !strings.Contains(body, "go_goroutines") {
		t.Errorf("/metrics on --metrics-addr %s:\n%s", addr, body)
	}
}

// buildBinary builds this command as name in a directory of the test's own.
func buildBinary(t *testing.T, name string) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), name)
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("building the binary: %v\n%s", err, out)
	}
	return bin
}

// TestKubectlPluginName: installed as kubectl-inplace_rollout, as krew installs it, the command
// calls itself `kubectl inplace-rollout` in its help, as kubectl runs it.
func TestKubectlPluginName(t *testing.T) {
	plugin := buildBinary(t, "kubectl-inplace_rollout")
	plain := filepath.Join(filepath.Dir(plugin), "inplace-rollout")
	if err := os.Link(plugin, plain); err != nil {
		t.Fatal(err)
	}
	for bin, want := range map[string]string{plugin: "kubectl inplace-rollout [command]", plain: "inplace-rollout [command]"} {
		name := filepath.Base(bin)
		out, err := exec.Command(bin, "--help").Output()
		if err != nil {
			t.Fatalf("%s --help: %v", name, err)
		}
		if !strings.Contains(string(out), "Usage:\n  "+want) {
			t.Errorf("%s --help says:\n%s\nwant usage %q", name, out, want)
		}
	}
}
