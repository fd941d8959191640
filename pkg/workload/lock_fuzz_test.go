package workload

import (
	"errors"
	"strings"
	"testing"
)

// FuzzParseLock checks the lock annotation as read back from a workload someone edited:
// refused, the error is a *LockError naming the object and the annotation; accepted, the lock
// passes its own check, keeps the record as stored, and a recorded strategy restores without a
// panic. pkg/rollout's FuzzRecord checks the rest of the record.
func FuzzParseLock(f *testing.F) {
	for _, seed := range []string{
		`{"holder":"cli","rolloutID":"r-1","specHash":"abc","images":{"app":"reg/app:v2"},"previousImages":{"app":"reg/app:v1"},"beforeImages":{"app":["reg/app:v1"]},"previousStrategy":{"type":"RollingUpdate","rollingUpdate":{"partition":0}},"superseded":["r-0"],"touched":[{"name":"web-0","uid":"u"}],"phase":"Progressing","startedAt":"2026-03-01T12:00:00Z","acceptedPods":2,"heldAt":3,"analysis":{"batch":1}}`,
		`{"holder":"argo:ns/web","phase":"Succeeded","startedAt":"2026-03-01T12:00:00Z"}`,
		`{"holder":"cli","phase":"RollingBack","previousStrategy":{"paused":true}}`,
		`{"holder":"cli","phase":"RollingBack","previousStrategy":null}`,
		`{"holder":"cli","phase":"RollingBack","previousStrategy":"OnDelete"}`,
		`{"holder":"cli","phase":"Done"}`,
		`{"holder":"cli","phase":"Holding","heldAt":-1}`,
		`{"holder":"cli","phase":"Succeeded","images":{"app":"A B"}}`,
		`{"holder":"cli","phase":"Succeeded","startedAt":"yesterday"}`,
		`{"holder":"cli","phase":"Succeeded","analysis":[1,2}`,
		`{`, `[]`, `null`, `""`, `{}`,
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		lock, err := parseLock(StatefulSet, "ns", "web", map[string]string{LockAnnotation: raw})
		if err != nil {
			var le *LockError
			if !errors.As(err, &le) || lock != nil || !strings.HasPrefix(err.Error(), "StatefulSet ns/web: annotation "+LockAnnotation+" is not ") {
				t.Fatalf("parseLock(%q) = %+v, %T %v; want no lock and a *LockError naming the object and the annotation", raw, lock, err, err)
			}
			return
		}
		if raw == "" {
			if lock != nil {
				t.Fatalf("parseLock of an empty annotation = %+v", lock)
			}
			return
		}
		if lock == nil {
			t.Fatalf("parseLock(%q) = no lock and no error", raw)
		}
		if err := lock.check(); err != nil {
			t.Fatalf("parseLock(%q) accepted a lock its check refuses: %v", raw, err)
		}
		if lock.Record != raw {
			t.Fatalf("parseLock(%q) keeps the record as %q, want it as stored", raw, lock.Record)
		}
		if len(lock.PreviousStrategy) > 0 {
			if s, err := restoreStrategy(lock.PreviousStrategy); err != nil || s == nil {
				t.Fatalf("parseLock(%q) accepted a strategy that does not restore: %v, %v", raw, s, err)
			}
		}
	})
}
