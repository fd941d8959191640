package workload

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
)

var testRef = Ref{Kind: StatefulSet, Namespace: "ns", Name: "web"}

// TestWriteLockRetriesOnlyStatusConflicts: with no lock observed, a lock-only write that meets a
// conflict is written again with the new resourceVersion when only the object's status or
// labels changed, and returns the conflict, for the caller to decide again, when its spec or its
// lock changed.
func TestWriteLockRetriesOnlyStatusConflicts(t *testing.T) {
	observed := objectVersion{resourceVersion: "10", generation: 3}
	conflict := apierrors.NewConflict(schema.GroupResource{Group: "apps", Resource: "statefulsets"}, "web", errors.New("modified"))
	tests := []struct {
		name string
		// now is the object's version read after each conflict; conflicts is how many writes
		// meet one before a write goes through.
		now       objectVersion
		conflicts int
		writeErr  error
		wantRVs   []string
		wantErr   func(error) bool
	}{
		{"no conflict", observed, 0, nil, []string{"10"}, nil},
		{"status written meanwhile", objectVersion{"11", 3, observed.lock}, 1, nil, []string{"10", "11"}, nil},
		{"status written twice meanwhile", objectVersion{"12", 3, observed.lock}, 2, nil, []string{"10", "12", "12"}, nil},
		{"spec changed", objectVersion{"11", 4, observed.lock}, 1, nil, []string{"10"}, apierrors.IsConflict},
		{"lock written meanwhile", objectVersion{"11", 3, `{"rolloutID":"b"}`}, 1, nil, []string{"10"}, apierrors.IsConflict},
		{"other error", observed, 0, apierrors.NewForbidden(schema.GroupResource{Resource: "statefulsets"}, "web", errors.New("no")), []string{"10"}, apierrors.IsForbidden},
		{"always conflicting", objectVersion{"11", 3, observed.lock}, 100, nil, []string{"10", "11", "11", "11", "11"}, apierrors.IsConflict},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var rvs []string
			write := func(_ context.Context, pt types.PatchType, patch []byte) error {
				if pt != types.StrategicMergePatchType {
					t.Fatalf("wrote a %s patch; want a strategic-merge patch", pt)
				}
				var body struct {
					Metadata struct {
						ResourceVersion string `json:"resourceVersion"`
					} `json:"metadata"`
				}
				if err := json.Unmarshal(patch, &body); err != nil {
					t.Fatal(err)
				}
				rvs = append(rvs, body.Metadata.ResourceVersion)
				if tt.writeErr != nil {
					return tt.writeErr
				}
				if len(rvs) <= tt.conflicts {
					return conflict
				}
				return nil
			}
			read := func(context.Context) (objectVersion, error) { return tt.now, nil }
			err := writeLock(context.Background(), testRef, observed, (&testLock{RolloutID: "a"}).encode(), read, write)
			if tt.wantErr == nil && err != nil || tt.wantErr != nil && (err == nil || !tt.wantErr(err)) {
				t.Errorf("writeLock: %v", err)
			}
			if len(rvs) != len(tt.wantRVs) {
				t.Fatalf("wrote with resourceVersions %v; want %v", rvs, tt.wantRVs)
			}
			for i := range rvs {
				if rvs[i] != tt.wantRVs[i] {
					t.Fatalf("wrote with resourceVersions %v; want %v", rvs, tt.wantRVs)
				}
			}
		})
	}
}

// TestWriteLockTestsGenerationAndLock: with a lock observed, a lock-only write is one JSON patch
// that tests the generation and the lock observed before it replaces the lock. A test that fails
// (Invalid, from the server) is a conflict when the object read again changed, and the server's
// own refusal otherwise.
func TestWriteLockTestsGenerationAndLock(t *testing.T) {
	observed := objectVersion{resourceVersion: "10", generation: 3, lock: `{"rolloutID":"a"}`}
	invalid := apierrors.NewInvalid(schema.GroupKind{Group: "apps", Kind: "StatefulSet"}, "web", nil)
	forbidden := apierrors.NewForbidden(schema.GroupResource{Resource: "statefulsets"}, "web", errors.New("no"))
	tests := []struct {
		name     string
		writeErr error
		now      objectVersion
		wantRead bool
		wantErr  func(error) bool
	}{
		{name: "written", now: observed},
		{name: "status written meanwhile: the server's test passes", now: objectVersion{"11", 3, observed.lock}},
		{name: "spec changed", writeErr: invalid, now: objectVersion{"11", 4, observed.lock}, wantRead: true, wantErr: apierrors.IsConflict},
		{name: "lock written meanwhile", writeErr: invalid, now: objectVersion{"11", 3, `{"rolloutID":"b"}`}, wantRead: true, wantErr: apierrors.IsConflict},
		{name: "refused, object unchanged", writeErr: invalid, now: observed, wantRead: true, wantErr: apierrors.IsInvalid},
		{name: "other error", writeErr: forbidden, now: observed, wantErr: apierrors.IsForbidden},
	}
	record := (&testLock{RolloutID: "a", Phase: "Succeeded"}).encode()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var ops []map[string]any
			write := func(_ context.Context, pt types.PatchType, patch []byte) error {
				if pt != types.JSONPatchType {
					t.Fatalf("wrote a %s patch; want a JSON patch", pt)
				}
				if ops != nil {
					t.Fatal("wrote twice")
				}
				if err := json.Unmarshal(patch, &ops); err != nil {
					t.Fatal(err)
				}
				return tt.writeErr
			}
			read := false
			readNow := func(context.Context) (objectVersion, error) { read = true; return tt.now, nil }
			err := writeLock(context.Background(), testRef, observed, record, readNow, write)
			if tt.wantErr == nil && err != nil || tt.wantErr != nil && (err == nil || !tt.wantErr(err)) {
				t.Errorf("writeLock: %v", err)
			}
			if read != tt.wantRead {
				t.Errorf("read the object again: %v, want %v", read, tt.wantRead)
			}
			want := []map[string]any{
				{"op": "test", "path": "/metadata/generation", "value": float64(3)},
				{"op": "test", "path": lockPath, "value": observed.lock},
				{"op": "replace", "path": lockPath, "value": record},
			}
			if fmt.Sprint(ops) != fmt.Sprint(want) {
				t.Errorf("patch %v; want %v", ops, want)
			}
		})
	}
}
