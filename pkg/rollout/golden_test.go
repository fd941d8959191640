package rollout

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/inplace-rollout/inplace-rollout/pkg/workload"
)

// lockAnnotations finds, anywhere in a decoded JSON document, the values of the lock annotation.
func lockAnnotations(v any) []string {
	var out []string
	switch v := v.(type) {
	case map[string]any:
		if raw, ok := v[workload.LockAnnotation].(string); ok {
			out = append(out, raw)
		}
		for _, child := range v {
			out = append(out, lockAnnotations(child)...)
		}
	case []any:
		for _, child := range v {
			out = append(out, lockAnnotations(child)...)
		}
	}
	return out
}

// TestUpgradeLocksSurviveAWrite reads each lock annotation an earlier version wrote
// (testdata/upgrade/lock) as a Record and writes it back unchanged: every field the annotation
// had, the rollout's and the workload's, is there again with its value.
func TestUpgradeLocksSurviveAWrite(t *testing.T) {
	files, err := filepath.Glob("testdata/upgrade/lock/*.json")
	if err != nil || len(files) == 0 {
		t.Fatalf("no upgrade clusters: %v", err)
	}
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		var doc any
		if err := json.Unmarshal(data, &doc); err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		locks := lockAnnotations(doc)
		if len(locks) == 0 {
			t.Fatalf("%s has no lock annotation", file)
		}
		for _, raw := range locks {
			t.Run(filepath.Base(file), func(t *testing.T) { checkNoOpWrite(t, raw) })
		}
	}
}

func checkNoOpWrite(t *testing.T, raw string) {
	t.Helper()
	ctx := context.Background()
	ref := workload.Ref{Kind: workload.StatefulSet, Namespace: testNS, Name: testName}
	client := fake.NewClientset(&appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: testName, Namespace: testNS, Generation: 1,
		Annotations: map[string]string{workload.LockAnnotation: raw}}})
	w, err := workload.Load(ctx, client, ref)
	if err != nil {
		t.Fatal(err)
	}
	rec := mustRecordOf(t, ref, w.Lock())
	if rec == nil {
		t.Fatal("no record read")
	}
	if err := w.SetLock(ctx, rec.encode()); err != nil {
		t.Fatal(err)
	}
	sts, err := client.AppsV1().StatefulSets(testNS).Get(ctx, testName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var before, after map[string]any
	if err := json.Unmarshal([]byte(raw), &before); err != nil {
		t.Fatal(err)
	}
	written := sts.Annotations[workload.LockAnnotation]
	if err := json.Unmarshal([]byte(written), &after); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(before, after) {
		t.Errorf("a no-op write changed the lock\nread    %s\nwritten %s", raw, written)
	}
	again, err := workload.Load(ctx, client, ref)
	if err != nil {
		t.Fatal(err)
	}
	// Compared field by field: the bytes may order the fields otherwise.
	got := mustRecordOf(t, ref, again.Lock())
	got.stored, rec.stored = "", ""
	if !reflect.DeepEqual(got, rec) {
		t.Errorf("the record read back differs: %+v, want %+v", got, rec)
	}
}
