package workload

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
)

// recordedRevision is a ControllerRevision as the workload controllers write one: the template
// of image as a patch that replaces it, owned by owner.
func recordedRevision(t *testing.T, kind, name, hash string, number int64, image string, owner types.UID) *appsv1.ControllerRevision {
	t.Helper()
	tmpl := webTemplate(image)
	raw, err := json.Marshal(tmpl)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	m["$patch"] = "replace"
	data, err := json.Marshal(map[string]any{"spec": map[string]any{"template": m}})
	if err != nil {
		t.Fatal(err)
	}
	cr := dsRevision(name, number, hash, "")
	cr.OwnerReferences = controlledBy(kind, "owner", owner)
	cr.Data = runtime.RawExtension{Raw: data}
	return cr
}

// TestReadRevisions: the revisions of a workload are its own ControllerRevisions, by the label
// value its pods carry (the name for a StatefulSet, the bare hash for a DaemonSet), each with
// its template.
func TestReadRevisions(t *testing.T) {
	stsRevs := []runtime.Object{
		recordedRevision(t, "StatefulSet", "web-aaa", "aaa", 1, "reg/app:v1", "sts-uid"),
		recordedRevision(t, "StatefulSet", "web-bbb", "bbb", 2, "reg/app:v2", "sts-uid"),
		recordedRevision(t, "StatefulSet", "web-ccc", "ccc", 3, "reg/app:v3", "another-uid"),
	}
	client := fake.NewClientset(stsRevs...)
	revs, err := ReadRevisions(context.Background(), client, Ref{Kind: StatefulSet, Namespace: "ns", Name: "web"}, "sts-uid", webSelector())
	if err != nil {
		t.Fatal(err)
	}
	if len(revs) != 2 || revs["web-bbb"].Number != 2 || revs["web-bbb"].Template.Spec.Containers[0].Image != "reg/app:v2" ||
		revs["web-aaa"].Template.Spec.Containers[0].Image != "reg/app:v1" {
		t.Errorf("StatefulSet revisions %+v; want web-aaa on v1 and web-bbb on v2, not another owner's", revs)
	}

	client = fake.NewClientset(recordedRevision(t, "DaemonSet", "agent-aaa", "aaa", 1, "reg/app:v1", "ds-uid"))
	revs, err = ReadRevisions(context.Background(), client, Ref{Kind: DaemonSet, Namespace: "ns", Name: "agent"}, "ds-uid", webSelector())
	if err != nil {
		t.Fatal(err)
	}
	if r, ok := revs["aaa"]; !ok || r.Name != "agent-aaa" {
		t.Errorf("DaemonSet revisions %+v; want agent-aaa by its hash aaa", revs)
	}

	broken := recordedRevision(t, "StatefulSet", "web-bad", "bad", 4, "reg/app:v1", "sts-uid")
	broken.Data.Raw = []byte(`{"spec":{}}`)
	_, err = ReadRevisions(context.Background(), fake.NewClientset(broken), Ref{Kind: StatefulSet, Namespace: "ns", Name: "web"}, "sts-uid", webSelector())
	if err == nil || !strings.Contains(err.Error(), "revision web-bad of StatefulSet ns/web: its data holds no spec.template") {
		t.Errorf("ReadRevisions of a revision without a template = %v", err)
	}
	if _, err := ReadRevisions(context.Background(), client, Ref{Kind: Deployment, Namespace: "ns", Name: "api"}, "dep-uid", webSelector()); err == nil {
		t.Error("ReadRevisions of a Deployment = nil error, want one")
	}
}
