package workload

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// TestWriteLockRetriesOnlyStatusConflicts: a lock-only write that meets a conflict is written
// again with the new resourceVersion when only the object's status or labels changed, and
// returns the conflict, for the caller to decide again, when its spec or its lock changed.
func TestWriteLockRetriesOnlyStatusConflicts(t *testing.T) {
	observed := objectVersion{resourceVersion: "10", generation: 3, lock: `{"rolloutID":"a"}`}
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
		{"lock changed", objectVersion{"11", 3, `{"rolloutID":"b"}`}, 1, nil, []string{"10"}, apierrors.IsConflict},
		{"other error", observed, 0, apierrors.NewForbidden(schema.GroupResource{Resource: "statefulsets"}, "web", errors.New("no")), []string{"10"}, apierrors.IsForbidden},
		{"always conflicting", objectVersion{"11", 3, observed.lock}, 100, nil, []string{"10", "11", "11", "11", "11"}, apierrors.IsConflict},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var rvs []string
			write := func(_ context.Context, patch []byte) error {
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
			err := writeLock(context.Background(), observed, objectPatch{lock: (&testLock{RolloutID: "a"}).encode()}, read, write)
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
