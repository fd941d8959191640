package controller_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"

	"github.com/inplace-rollout/inplace-rollout/controller/inplacerollout"
	"github.com/inplace-rollout/inplace-rollout/pkg/apis/v1alpha1"
	"github.com/inplace-rollout/inplace-rollout/test/integration/clitest"
	"github.com/inplace-rollout/inplace-rollout/test/integration/cluster"
)

// rolloutTimeout bounds a rollout of a few pods with short soaks, on a loaded machine.
const rolloutTimeout = 3 * time.Minute

// kubectl runs the real kubectl as the cluster's admin, with stdin, and returns its stdout, its
// stderr and exit code.
func kubectl(t *testing.T, stdin string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	bins, err := cluster.DefaultBinDir()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(filepath.Join(bins, "kubectl"), args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+env.Kubeconfig, "COLUMNS=1000")
	cmd.Stdin = strings.NewReader(stdin)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err = cmd.Run()
	if err != nil {
		if _, ok := err.(*exec.ExitError); !ok {
			t.Fatalf("kubectl %s: %v", strings.Join(args, " "), err)
		}
	}
	return out.String(), errOut.String(), cmd.ProcessState.ExitCode()
}

// mustKubectl runs kubectl and fails the test unless it exits 0.
func mustKubectl(t *testing.T, stdin string, args ...string) string {
	t.Helper()
	out, errOut, code := kubectl(t, stdin, args...)
	if code != 0 {
		t.Fatalf("kubectl %s: exit %d\n%s%s", strings.Join(args, " "), code, out, errOut)
	}
	return out
}

// applyRollout applies, with kubectl as a GitOps tool would, the InPlaceRollout ns/name whose
// spec is the YAML lines spec (indented for the spec), with annotations.
func applyRollout(t *testing.T, ns, name, spec string, annotations ...string) {
	t.Helper()
	meta := ""
	if len(annotations) > 0 {
		meta = "\n  annotations:"
		for _, a := range annotations {
			k, v, _ := strings.Cut(a, "=")
			meta += fmt.Sprintf("\n    %s: %q", k, v)
		}
	}
	doc := fmt.Sprintf("apiVersion: inplace-rollout.io/v1alpha1\nkind: InPlaceRollout\nmetadata:\n  name: %s\n  namespace: %s%s\nspec:\n%s\n", name, ns, meta, spec)
	mustKubectl(t, doc, "apply", "-f", "-")
}

// statefulSetSpec is the spec of an InPlaceRollout of StatefulSet web to image, in batches,
// with more YAML lines.
func statefulSetSpec(image, batches string, more ...string) string {
	s := fmt.Sprintf("  target: {kind: StatefulSet, name: web}\n  images: {app: %q}\n  batches: %s\n  timeout: 2m", image, batches)
	for _, m := range more {
		s += "\n  " + m
	}
	return s
}

func dynamicClient(t *testing.T) dynamic.Interface {
	t.Helper()
	c, err := dynamic.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// getRollout reads InPlaceRollout ns/name as JSON decodes it (for the health checks) and typed.
func getRollout(ctx context.Context, t *testing.T, ns, name string) (*unstructured.Unstructured, *v1alpha1.InPlaceRollout, error) {
	u, err := dynamicClient(t).Resource(inplacerollout.Resource).Namespace(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, nil, err
	}
	var obj v1alpha1.InPlaceRollout
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &obj); err != nil {
		return nil, nil, err
	}
	return u, &obj, nil
}

// waitRollout polls InPlaceRollout ns/name until cond holds, and returns it.
func waitRollout(t *testing.T, ns, name, what string, cond func(*v1alpha1.InPlaceRollout) bool) (*unstructured.Unstructured, *v1alpha1.InPlaceRollout) {
	t.Helper()
	var u *unstructured.Unstructured
	var obj *v1alpha1.InPlaceRollout
	cluster.WaitFor(t, rolloutTimeout, fmt.Sprintf("InPlaceRollout %s/%s: %s", ns, name, what), func(ctx context.Context) (bool, error) {
		var err error
		u, obj, err = getRollout(ctx, t, ns, name)
		if err != nil {
			return false, err
		}
		return cond(obj), nil
	})
	return u, obj
}

// current reports whether obj's status is about its spec.
func current(obj *v1alpha1.InPlaceRollout) bool {
	return obj.Status.ObservedGeneration == obj.Generation
}

// waitGone polls until InPlaceRollout ns/name no longer exists.
func waitGone(t *testing.T, ns, name string) {
	t.Helper()
	cluster.WaitFor(t, rolloutTimeout, fmt.Sprintf("InPlaceRollout %s/%s gone", ns, name), func(ctx context.Context) (bool, error) {
		_, _, err := getRollout(ctx, t, ns, name)
		return apierrors.IsNotFound(err), nil
	})
}

// podRecord is what a pod must keep through an in-place rollout, and its app container's image
// by digest, which a rollback must put back exactly.
type podRecord struct {
	uid, imageID string
}

// recordPods maps the pods labelled app=app to their UID and app image digest.
func recordPods(t *testing.T, ns, app string) map[string]podRecord {
	t.Helper()
	out := map[string]podRecord{}
	for _, p := range clitest.ListPods(t, env, ns, "app="+app) {
		rec := podRecord{uid: string(p.UID)}
		if cs := cluster.ContainerStatus(&p, "app"); cs != nil {
			rec.imageID = cs.ImageID
		}
		out[p.Name] = rec
	}
	return out
}

// checkSamePods fails the test unless the pods of app are before's: same names, UIDs and (with
// images) app image digests.
func checkSamePods(t *testing.T, ns, app string, before map[string]podRecord, images bool) {
	t.Helper()
	after := recordPods(t, ns, app)
	if !images {
		uids := func(m map[string]podRecord) map[string]string {
			out := map[string]string{}
			for k, r := range m {
				out[k] = r.uid
			}
			return out
		}
		if b, a := uids(before), uids(after); !maps.Equal(b, a) {
			t.Errorf("pods of %s recreated: before %v, after %v", app, b, a)
		}
		return
	}
	if !maps.Equal(before, after) {
		t.Errorf("pods of %s not back as they were (UID, image digest): before %v, after %v", app, before, after)
	}
}

// checkTemplate fails the test unless StatefulSet ns/name's template names image in container app.
func checkTemplate(t *testing.T, ns, name, image string) {
	t.Helper()
	sts, err := env.Client.AppsV1().StatefulSets(ns).Get(t.Context(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := sts.Spec.Template.Spec.Containers[0].Image; got != image {
		t.Errorf("StatefulSet %s/%s's template names %s, want %s", ns, name, got, image)
	}
}

// scrape is the body of a GET of url.
func scrape(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s, %v", url, resp.Status, err)
	}
	return string(body)
}
