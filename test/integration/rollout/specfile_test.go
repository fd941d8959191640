package rollout_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/inplace-rollout/inplace-rollout/pkg/workload"
)

// TestRunFromASpecFile: `run -f` takes the rollout from an InPlaceRollout file; a misspelt
// field is bad input naming its path, with nothing written; flags given override the file.
func TestRunFromASpecFile(t *testing.T) {
	ns := env.Namespace(t)
	createStatefulSet(t, ns, "web", 3)
	before := identities(t, ns, "app=web")
	write := func(name, body string) string {
		t.Helper()
		path := filepath.Join(t.TempDir(), name)
		if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	head := "apiVersion: inplace-rollout.io/v1alpha1\nkind: InPlaceRollout\nspec:\n  target: {kind: StatefulSet, name: web}\n  images: {app: " + appV2 + "}\n"

	misspelt := write("misspelt.yaml", head+"  batchs: [1, \"100%\"]\n")
	r := runCLI(t, "run", "-n", ns, "-f", misspelt)
	if r.Code != 2 || !contains(r.Stderr, `unknown field "spec.batchs"`) {
		t.Fatalf("run -f with a misspelt field: %s\nwant exit 2 naming spec.batchs", r)
	}
	sts, err := env.Client.AppsV1().StatefulSets(ns).Get(context.Background(), "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := sts.Annotations[workload.LockAnnotation]; ok || sts.Spec.Template.Spec.Containers[0].Image != appV1 {
		t.Fatalf("a refused spec file changed the StatefulSet: annotations %v, image %s", sts.Annotations, sts.Spec.Template.Spec.Containers[0].Image)
	}

	good := write("rollout.yaml", head+"  batches: [1, \"100%\"]\n  maxUnavailable: 2\n")
	// The file says v2; the flag given on the command line wins.
	r = runCLI(t, "run", "-n", ns, "-f", good, "--image", "app="+appV3)
	if r.Code != 0 {
		t.Fatalf("run -f: %s", r)
	}
	podsOnImage(t, ns, "app=web", appV3)
	checkInPlace(t, before, identities(t, ns, "app=web"), 1)
}
