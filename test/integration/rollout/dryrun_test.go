package rollout_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/inplace-rollout/inplace-rollout/test/integration/clitest"
	"github.com/inplace-rollout/inplace-rollout/test/integration/cluster"
)

// appBad is an image the policy of denyBadImages refuses.
const appBad = "registry.example/app:bad"

// denyBadImages makes the API server refuse, by the ValidatingAdmissionPolicy no-bad-images-NS
// (bound with validationActions Deny), every update of a pod of ns that runs an image containing
// "bad". It returns the policy's name once a dry run of such a change on pod is refused; the
// policy goes when the test ends.
func denyBadImages(t *testing.T, ns, pod string) string {
	t.Helper()
	name := "no-bad-images-" + ns
	bindPodUpdatePolicy(t, name, ns, `object.spec.containers.all(c, !c.image.contains("bad"))`, "images tagged bad are not allowed")
	t.Cleanup(func() { deletePodUpdatePolicy(t, name) })
	cluster.WaitFor(t, 30*time.Second, "the admission policy to refuse a bad image on "+pod, refusesImage(ns, pod, appBad))
	return name
}

// objectVersions are the resourceVersions of every workload object, pod and ConfigMap of ns.
func objectVersions(t *testing.T, ns string) map[string]string {
	t.Helper()
	ctx := context.Background()
	out := map[string]string{}
	sets, err := env.Client.AppsV1().StatefulSets(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range sets.Items {
		out["statefulset/"+s.Name] = s.ResourceVersion
	}
	deps, err := env.Client.AppsV1().Deployments(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range deps.Items {
		out["deployment/"+d.Name] = d.ResourceVersion
	}
	rss, err := env.Client.AppsV1().ReplicaSets(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rss.Items {
		out["replicaset/"+r.Name] = r.ResourceVersion
	}
	cms, err := env.Client.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cms.Items {
		out["configmap/"+c.Name] = c.ResourceVersion
	}
	for _, p := range listPods(t, ns, "") {
		out["pod/"+p.Name] = p.ResourceVersion
	}
	return out
}

// TestDryRunServer: run --dry-run=server sends the start's writes (the workload's hold, a
// Deployment's pause, the lock ConfigMap of label-selected pods, and each first-batch pod's image
// patch) as dry runs to the real API server: a ValidatingAdmissionPolicy that refuses the image is
// named, pod by pod, with exit 7; one that lets it through is said, with exit 0; and either way no
// object changes and no lock is left.
func TestDryRunServer(t *testing.T) {
	for _, tc := range []struct {
		name, target string
		create       func(t *testing.T, ns string)
		// first is the first batch's pods (batches 2,100%), in update order.
		first []string
		hold  string
	}{
		{"StatefulSet", "statefulset/web", func(t *testing.T, ns string) { createStatefulSet(t, ns, "web", 3) },
			[]string{"web-2", "web-1"}, "StatefulSet web"},
		{"Deployment", "deployment/web", func(t *testing.T, ns string) { createDeployment(t, ns, "web", 3) }, nil, "Deployment web"},
		{"Pods", "pods", func(t *testing.T, ns string) { clitest.CreatePods(t, env, ns, "web", 3, false) },
			[]string{"web-0", "web-1"}, "ConfigMap "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ns := env.Namespace(t)
			tc.create(t, ns)
			pods := listPods(t, ns, "app=web")
			// The images are not in any registry: pinning them is not what is tried here.
			args := []string{"run", "-n", ns, "--target", tc.target, "--batches", "2,100%", "--pin-digests", "never", "--dry-run=server"}
			if tc.target == "pods" {
				args = append(args, "--selector", "app=web")
			}
			first := tc.first
			if first == nil {
				// A Deployment's pods are in name order.
				for _, p := range pods {
					first = append(first, p.Name)
				}
				slices.Sort(first)
				first = first[:2]
			}
			policy := denyBadImages(t, ns, pods[0].Name)
			before := objectVersions(t, ns)

			r := runCLI(t, append(args, "--image", "app="+appBad)...)
			if r.Code != 7 {
				t.Fatalf("%s\nwant exit 7: the API server refused", r)
			}
			t.Logf("refused:\n%s%s", r.Stdout, r.Stderr)
			for _, p := range first {
				if want := fmt.Sprintf("pod %s: ", p); !contains(r.Stderr, want) {
					t.Errorf("stderr does not name %q:\n%s", want, r.Stderr)
				}
			}
			for _, want := range []string{"ValidatingAdmissionPolicy '" + policy + "'", "denied request", "images tagged bad are not allowed", "nothing was changed", "then run the dry run again"} {
				if !contains(r.Stderr, want) {
					t.Errorf("stderr does not say %q:\n%s", want, r.Stderr)
				}
			}
			if !contains(r.Stdout, tc.hold) || !contains(r.Stdout, ": Accepted") {
				t.Errorf("stdout does not say the hold of %s was accepted:\n%s", tc.hold, r.Stdout)
			}
			if after := objectVersions(t, ns); !equalMaps(before, after) {
				t.Errorf("the refused dry run changed objects:\nbefore %v\nafter  %v", before, after)
			}

			r = runCLI(t, append(args, "--image", "app="+appV2, "-o", "json")...)
			if r.Code != 0 {
				t.Fatalf("%s\nwant exit 0: the API server accepts", r)
			}
			var doc struct {
				Accepted bool     `json:"accepted"`
				Pods     []string `json:"pods"`
				Writes   []struct {
					Kind, Name, Result string
				} `json:"writes"`
			}
			if err := json.Unmarshal([]byte(r.Stdout), &doc); err != nil {
				t.Fatalf("stdout is no JSON document: %v\n%s", err, r.Stdout)
			}
			if !doc.Accepted || !slices.Equal(doc.Pods, first) || len(doc.Writes) != 3 || !strings.HasPrefix(doc.Writes[0].Kind+" "+doc.Writes[0].Name, tc.hold) {
				t.Errorf("report %+v; want the hold of %s and pods %v accepted", doc, tc.hold, first)
			}
			r = runCLI(t, append(args, "--image", "app="+appV2)...)
			t.Logf("accepted:\n%s", r.Stdout)
			want := fmt.Sprintf("would be accepted: %s", tc.hold)
			if r.Code != 0 || !contains(r.Stdout, want) || !contains(r.Stdout, fmt.Sprintf("the first batch's 2 pods (batch 1: %s)", strings.Join(first, ", "))) {
				t.Errorf("%s\nwant exit 0 saying %q and the first batch's pods %v", r, want, first)
			}
			if after := objectVersions(t, ns); !equalMaps(before, after) {
				t.Errorf("the accepted dry run changed objects:\nbefore %v\nafter  %v", before, after)
			}
		})
	}
}

// TestDryRunFlag: --dry-run takes kubectl's values; any other is bad input, refused before any
// request; client prints the batches, as plan does, and changes nothing.
func TestDryRunFlag(t *testing.T) {
	ns := env.Namespace(t)
	createStatefulSet(t, ns, "web", 2)
	before := objectVersions(t, ns)
	r := runCLI(t, "run", "-n", ns, "--target", "statefulset/web", "--image", "app="+appV2, "--dry-run=true")
	if r.Code != 2 || !contains(r.Stderr, `--dry-run "true": want none, client or server`) {
		t.Errorf("%s\nwant exit 2 naming the values", r)
	}
	r = runCLI(t, "run", "-n", ns, "--target", "statefulset/web", "--image", "app="+appV2, "--pin-digests", "never", "--dry-run=client")
	if r.Code != 0 || !contains(r.Stdout, "batch 1 (up to 2 pods): [web-1 web-0]") {
		t.Errorf("%s\nwant exit 0 and the plan", r)
	}
	if after := objectVersions(t, ns); !equalMaps(before, after) {
		t.Errorf("objects changed:\nbefore %v\nafter  %v", before, after)
	}
}

// TestDryRunServerResize: a dry run of resources sends each first-batch pod's resize to its
// resize subresource, as the update does, before the pod's patch: the API server accepts both,
// and no object changes.
func TestDryRunServerResize(t *testing.T) {
	ns := env.Namespace(t)
	createResizable(t, ns, "web", 3)
	before := objectVersions(t, ns)

	r := runCLI(t, "run", "-n", ns, "--target", "statefulset/web", "--batches", "2,100%", "--requests", "app=cpu=150m", "--dry-run=server", "-o", "json")
	if r.Code != 0 {
		t.Fatalf("%s\nwant exit 0: the API server accepts", r)
	}
	var doc struct {
		Accepted bool `json:"accepted"`
		Writes   []struct{ Kind, Name, Write, Result string }
	}
	if err := json.Unmarshal([]byte(r.Stdout), &doc); err != nil {
		t.Fatalf("stdout is no JSON document: %v\n%s", err, r.Stdout)
	}
	var writes []string
	for _, w := range doc.Writes {
		if w.Result != "Accepted" {
			t.Errorf("write %+v not accepted", w)
		}
		writes = append(writes, w.Kind+" "+w.Name+": "+w.Write)
	}
	want := []string{
		"StatefulSet web: hold: lock annotation, updateStrategy OnDelete, template images",
		"Pod web-2: resize (cpu and memory, through the resize subresource)",
		"Pod web-2: image patch (state annotation, images, labels)",
		"Pod web-1: resize (cpu and memory, through the resize subresource)",
		"Pod web-1: image patch (state annotation, images, labels)",
	}
	if !doc.Accepted || !slices.Equal(writes, want) {
		t.Errorf("writes %q, want %q", writes, want)
	}
	if after := objectVersions(t, ns); !equalMaps(before, after) {
		t.Errorf("the dry run changed objects:\nbefore %v\nafter  %v", before, after)
	}
	for _, p := range listPods(t, ns, "app=web") {
		if q := p.Spec.Containers[0].Resources.Requests.Cpu().String(); q != "100m" {
			t.Errorf("pod %s asks for cpu %s after a dry run, want 100m as it was", p.Name, q)
		}
	}
}
