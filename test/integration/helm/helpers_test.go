package helm

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/inplace-rollout/inplace-rollout/test/integration/cluster"
)

// chartDir is the chart, from the repository's root.
func chartDir(t *testing.T) string {
	t.Helper()
	root, err := cluster.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(root, "charts", "inplace-rollout")
}

// helmResult is what one helm command printed and how it ended.
type helmResult struct {
	stdout, stderr string
	err            error
}

// helm runs the tool-cache helm with args against the local control plane, its cache, config and
// data in a directory of the test's own, so that it reads and writes nothing of the machine's.
func helm(t *testing.T, args ...string) helmResult {
	t.Helper()
	bins, err := cluster.DefaultBinDir()
	if err != nil {
		t.Fatal(err)
	}
	home := t.TempDir()
	cmd := exec.Command(filepath.Join(bins, "helm"), args...)
	cmd.Env = append(os.Environ(),
		"HELM_CACHE_HOME="+filepath.Join(home, "cache"), "HELM_CONFIG_HOME="+filepath.Join(home, "config"),
		"HELM_DATA_HOME="+filepath.Join(home, "data"), "KUBECONFIG="+env.Kubeconfig)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err = cmd.Run()
	return helmResult{stdout: stdout.String(), stderr: stderr.String(), err: err}
}

// mustHelm is helm that fails the test unless the command succeeds, and returns its output.
func mustHelm(t *testing.T, args ...string) string {
	t.Helper()
	r := helm(t, args...)
	if r.err != nil {
		t.Fatalf("helm %v: %v\n%s%s", args, r.err, r.stdout, r.stderr)
	}
	return r.stdout
}
