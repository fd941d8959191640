package main

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"k8s.io/cli-runtime/pkg/genericclioptions"

	"github.com/inplace-rollout/inplace-rollout/pkg/workload"
)

// offlineKubeconfig is a kubeconfig for a server nothing listens on: enough to build a client,
// and every case below is refused before the first request.
func offlineKubeconfig(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "kubeconfig")
	cfg := `apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: u, user: {token: x}}]
contexts: [{name: c, context: {cluster: c, user: u, namespace: ns}}]
current-context: c
`
	if err := os.WriteFile(p, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestRunTakesImagesAndAnalysisAsATaskPassesThem: the Tekton Task passes its images param as
// CONTAINER=IMAGE arguments and its analysis param as --analysis-config text. Each case is
// refused before anything is written, with an error showing what run made of its arguments.
func TestRunTakesImagesAndAnalysisAsATaskPassesThem(t *testing.T) {
	kubeconfig := offlineKubeconfig(t)
	analysisFile := filepath.Join(t.TempDir(), "analysis.yaml")
	if err := os.WriteFile(analysisFile, []byte("count: 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"an argument is an image", []string{"noequals"}, `"noequals": use CONTAINER=IMAGE`},
		{"arguments are images", []string{"app=reg/app:v2", "app=reg/app:v3"}, `container "app" given twice`},
		{"arguments add to --image", []string{"--image", "app=reg/app:v2", "--", "app=reg/app:v3"}, `container "app" given twice`},
		{"analysis text is decoded", []string{"app=reg/app:v2", "--analysis-config", "count: [1"}, "--analysis-config:"},
		{"analysis text is checked", []string{"app=reg/app:v2", "--analysis-config", "cont: 1"}, "--analysis-config:"},
		{"not both", []string{"app=reg/app:v2", "--analysis", analysisFile, "--analysis-config", "count: 1"}, "not both"},
		{"empty analysis text is none", []string{"app=reg/app:v2", "--analysis-config", "", "--prometheus", "http://prometheus:9090"}, "--prometheus needs"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cmd := newRootCommand()
			cmd.SetOut(&bytes.Buffer{})
			cmd.SetErr(&bytes.Buffer{})
			cmd.SetArgs(append([]string{"run", "--kubeconfig", kubeconfig, "--target", "statefulset/web"}, tt.args...))
			err := cmd.Execute()
			if err == nil || exitCode(err) != exitBadInput || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("run %q: %v (exit %d), want bad input containing %q", tt.args, err, exitCode(err), tt.want)
			}
		})
	}
}

// TestAnalysisConfigIsTheFile: --analysis-config TEXT gives the spec what --analysis FILE gives
// for a file holding TEXT, and an empty TEXT gives no analysis.
func TestAnalysisConfigIsTheFile(t *testing.T) {
	const text = "prometheus: {address: http://prometheus:9090}\ncount: 2\ninterval: 5s\n"
	file := filepath.Join(t.TempDir(), "analysis.yaml")
	if err := os.WriteFile(file, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	ref := workload.Ref{Kind: workload.StatefulSet, Namespace: "ns", Name: "web"}
	flags := func(f rolloutFlags) *rolloutFlags {
		f.images, f.batches, f.maxUnavailable, f.timeout, f.onInconclusive = []string{"app=reg/app:v2"}, "100%", "1", 60e9, "pause"
		return &f
	}
	fromFile, err := flags(rolloutFlags{analysisFile: file}).spec(ref)
	if err != nil {
		t.Fatalf("--analysis FILE: %v", err)
	}
	fromText, err := flags(rolloutFlags{analysisConfig: text}).spec(ref)
	if err != nil {
		t.Fatalf("--analysis-config: %v", err)
	}
	if fromText.Analysis == nil || !reflect.DeepEqual(fromText.Analysis, fromFile.Analysis) || fromText.CallerCredentials != fromFile.CallerCredentials {
		t.Errorf("--analysis-config gave %+v (credential files %v), --analysis FILE %+v (%v)",
			fromText.Analysis, fromText.CallerCredentials, fromFile.Analysis, fromFile.CallerCredentials)
	}
	none, err := flags(rolloutFlags{analysisConfig: ""}).spec(ref)
	if err != nil {
		t.Fatalf("empty --analysis-config: %v", err)
	}
	if none.Analysis != nil {
		t.Errorf("empty --analysis-config gave analysis %+v, want none", none.Analysis)
	}
}

// TestClientsShareOneRateLimit: the rollout's client and the Events client take their tokens
// from one bucket of --kube-api-qps and --kube-api-burst, so the flags bound every request the
// command sends: the burst spent through one leaves none to the other.
func TestClientsShareOneRateLimit(t *testing.T) {
	kubeconfig := offlineKubeconfig(t)
	f := &clusterFlags{config: genericclioptions.NewConfigFlags(true), qps: 0.001, burst: 3}
	f.config.KubeConfig = &kubeconfig
	client, _, err := f.client()
	if err != nil {
		t.Fatal(err)
	}
	rollout, events := client.CoreV1().RESTClient().GetRateLimiter(), f.events.CoreV1().RESTClient().GetRateLimiter()
	if rollout == nil || rollout != events {
		t.Fatalf("the rollout's client has rate limiter %p, the Events client %p; want one, shared", rollout, events)
	}
	if apps := client.AppsV1().RESTClient().GetRateLimiter(); apps != rollout {
		t.Errorf("the rollout's apps/v1 client has rate limiter %p, its core/v1 client %p; want one", apps, rollout)
	}
	if got := rollout.QPS(); got != f.qps {
		t.Errorf("the shared limiter allows %v requests/s; want --kube-api-qps %v", got, f.qps)
	}
	for i := range f.burst {
		if !rollout.TryAccept() {
			t.Fatalf("request %d of a burst of %d refused", i+1, f.burst)
		}
	}
	if events.TryAccept() {
		t.Errorf("the Events client sent a request after the rollout's client spent the burst of %d", f.burst)
	}
}

// TestClusterFlagsAreKubectls: the connection flags are kubectl's (cli-runtime's ConfigFlags):
// --context picks another context of the kubeconfig, and with it its namespace, which -n
// overrides; an unknown context is bad input, named.
func TestClusterFlagsAreKubectls(t *testing.T) {
	p := filepath.Join(t.TempDir(), "kubeconfig")
	cfg := `apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}, {name: prod, cluster: {server: "https://127.0.0.1:2"}}]
users: [{name: u, user: {token: x}}]
contexts: [{name: c, context: {cluster: c, user: u, namespace: ns}}, {name: prod, context: {cluster: prod, user: u, namespace: shop}}]
current-context: c
`
	if err := os.WriteFile(p, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args     []string
		wantNS   string
		wantHost string
		wantErr  string
	}{
		{[]string{"--kubeconfig", p}, "ns", "https://127.0.0.1:1", ""},
		{[]string{"--kubeconfig", p, "--context", "prod"}, "shop", "https://127.0.0.1:2", ""},
		{[]string{"--kubeconfig", p, "--context", "prod", "-n", "other"}, "other", "https://127.0.0.1:2", ""},
		{[]string{"--kubeconfig", p, "--cluster", "prod"}, "ns", "https://127.0.0.1:2", ""},
		{[]string{"--kubeconfig", p, "--context", "staging"}, "", "", `context "staging" does not exist`},
	} {
		t.Run(strings.Join(tc.args[2:], " "), func(t *testing.T) {
			f := &clusterFlags{}
			cmd := &cobra.Command{Use: "x"}
			f.register(cmd)
			if err := cmd.Flags().Parse(tc.args); err != nil {
				t.Fatal(err)
			}
			client, ns, err := f.client()
			if tc.wantErr != "" {
				var exit *exitError
				if err == nil || !errors.As(err, &exit) || exit.code != exitBadInput || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err %v, want bad input naming %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if host := client.CoreV1().RESTClient().Get().URL().Host; "https://"+host != tc.wantHost || ns != tc.wantNS {
				t.Errorf("host %s, namespace %q; want %s, %q", host, ns, tc.wantHost, tc.wantNS)
			}
		})
	}
}
