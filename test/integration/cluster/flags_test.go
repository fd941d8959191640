package cluster

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestControllerManagerFlags: the options' rate limit and feature gates become
// kube-controller-manager's flags, and none is passed for an option left at zero, which keeps
// its own default.
func TestControllerManagerFlags(t *testing.T) {
	tests := []struct {
		name string
		opts Options
		want []string
	}{
		{"defaults", Options{}, nil},
		{"rate limit", Options{ControllerManagerQPS: 100, ControllerManagerBurst: 200}, []string{"--kube-api-qps=100", "--kube-api-burst=200"}},
		{"fractional rate", Options{ControllerManagerQPS: 12.5}, []string{"--kube-api-qps=12.5"}},
		{"gates and burst", Options{FeatureGates: "A=true", ControllerManagerBurst: 30}, []string{"--feature-gates=A=true", "--kube-api-burst=30"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := &Cluster{opts: tt.opts}
			if got := c.controllerManagerFlags(); !slices.Equal(got, tt.want) {
				t.Errorf("flags %q, want %q", got, tt.want)
			}
		})
	}
}

// TestKruiseOptionsArgs: the rate limit becomes kruise-manager's --rest-config-qps and
// --rest-config-burst, as OpenKruise's main.go names them, and zero passes no flag.
func TestKruiseOptionsArgs(t *testing.T) {
	tests := []struct {
		opts KruiseOptions
		want []string
	}{
		{KruiseOptions{}, nil},
		{KruiseOptions{QPS: 100, Burst: 200}, []string{"--rest-config-qps=100", "--rest-config-burst=200"}},
		{KruiseOptions{Burst: 50}, []string{"--rest-config-burst=50"}},
	}
	for _, tt := range tests {
		if got := tt.opts.Args(); !slices.Equal(got, tt.want) {
			t.Errorf("%+v: flags %q, want %q", tt.opts, got, tt.want)
		}
	}
}

// TestLogLineContains: kruise-manager's end of set-up is found only when one line of this
// run's log holds every part, not when the parts are on different lines or in an earlier run's
// part of an appended log.
func TestLogLineContains(t *testing.T) {
	const earlier = `I0101 "Not found kind in group version" kind="ImageListPullJob"` + "\n"
	tests := []struct {
		name string
		log  string
		want bool
	}{
		{"one line", `I0102 discovery.go:73] "Not found kind in group version" kind="ImageListPullJob" groupVersion="apps.kruise.io/v1alpha1"` + "\n", true},
		{"another kind", `I0102 "Not found kind in group version" kind="DaemonSet"` + "\n", false},
		{"parts on two lines", `I0102 "Not found kind in group version" kind="DaemonSet"` + "\nI0102 ImageListPullJob indexed\n", false},
		{"empty", "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "kruise-manager.log")
			if err := os.WriteFile(path, []byte(earlier+tt.log), 0o644); err != nil {
				t.Fatal(err)
			}
			p := &process{logPath: path, logStart: int64(len(earlier))}
			if got := p.logLineContains(kruiseLastProbe...); got != tt.want {
				t.Errorf("logLineContains(%q) over %q = %v, want %v", kruiseLastProbe, tt.log, got, tt.want)
			}
		})
	}
}

// TestAuditArgs: the policy logs the listed users only, or everyone with AuditEveryone, whose
// log the apiserver never rotates, so that the benchmark may truncate it between rollouts.
func TestAuditArgs(t *testing.T) {
	tests := []struct {
		name       string
		opts       Options
		wantPolicy []string
		notPolicy  []string
		maxSize    bool
	}{
		{"drivers", Options{AuditLog: true}, []string{`users: ["` + ArgoUser + `","` + InplaceTektonUser + `","` + InplaceControllerUser + `"]`, "level: None"}, nil, false},
		{"everyone", Options{AuditLog: true, AuditEveryone: true}, []string{"level: Metadata"}, []string{"users:", "level: None"}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := &Cluster{Dir: t.TempDir(), opts: tt.opts}
			args, err := c.auditArgs()
			if err != nil {
				t.Fatal(err)
			}
			policy, err := os.ReadFile(filepath.Join(c.Dir, "audit-policy.yaml"))
			if err != nil {
				t.Fatal(err)
			}
			for _, w := range tt.wantPolicy {
				if !strings.Contains(string(policy), w) {
					t.Errorf("policy lacks %q:\n%s", w, policy)
				}
			}
			for _, w := range tt.notPolicy {
				if strings.Contains(string(policy), w) {
					t.Errorf("policy holds %q:\n%s", w, policy)
				}
			}
			if got := slices.Contains(args, "--audit-log-maxsize=1048576"); got != tt.maxSize {
				t.Errorf("flags %q: --audit-log-maxsize=1048576 there: %v, want %v", args, got, tt.maxSize)
			}
			path, err := c.AuditLogFile()
			if err != nil || !slices.Contains(args, "--audit-log-path="+path) {
				t.Errorf("AuditLogFile() = %q, %v; flags %q", path, err, args)
			}
		})
	}
	if _, err := (&Cluster{}).AuditLogFile(); err == nil {
		t.Error("AuditLogFile of a cluster without an audit log: no error")
	}
}
