package rollout

import (
	"errors"
	"strings"
	"testing"

	"github.com/inplace-rollout/inplace-rollout/pkg/workload"
)

// FuzzRecord checks the lock annotation as read back from a workload someone edited, through
// both readers: the workload's (its previous images and strategy) and the Record's (the rest).
// Refused, the error is a *workload.LockError naming the object and the annotation; accepted,
// the Record passes its own check and keeps the annotation as stored, and a Record encoded from
// it reads back the same.
func FuzzRecord(f *testing.F) {
	for _, seed := range []string{
		`{"holder":"cli","rolloutID":"r-1","specHash":"abc","images":{"app":"reg/app:v2"},"previousImages":{"app":"reg/app:v1"},"beforeImages":{"app":["reg/app:v1"]},"previousStrategy":{"type":"RollingUpdate","rollingUpdate":{"partition":0}},"superseded":["r-0"],"touched":[{"name":"web-0","uid":"u"}],"phase":"Progressing","startedAt":"2026-03-01T12:00:00Z","acceptedPods":2,"heldAt":3,"analysis":{"batch":1}}`,
		`{"holder":"argo:ns/web","phase":"Succeeded","startedAt":"2026-03-01T12:00:00Z"}`,
		`{"holder":"cli","phase":"RollingBack","previousStrategy":{"paused":true}}`,
		`{"holder":"cli","phase":"RollingBack","previousStrategy":null}`,
		`{"holder":"cli","phase":"Done"}`,
		`{"holder":"cli","phase":"Holding","heldAt":-1}`,
		`{"holder":"cli","phase":"Succeeded","images":{"app":"A B"}}`,
		`{"holder":"cli","phase":"Succeeded","startedAt":"yesterday"}`,
		`{"holder":"cli","phase":"Succeeded","analysis":[1,2}`,
		`{`, `[]`, `null`, `""`, `{}`,
	} {
		f.Add(seed)
	}
	ref := workload.Ref{Kind: workload.StatefulSet, Namespace: "ns", Name: "web"}
	f.Fuzz(func(t *testing.T, raw string) {
		rec, err := readAnnotation(ref, raw)
		if err != nil {
			var le *workload.LockError
			if !errors.As(err, &le) || rec != nil || !strings.HasPrefix(err.Error(), "StatefulSet ns/web: annotation "+workload.LockAnnotation+" is not ") {
				t.Fatalf("reading %q = %+v, %T %v; want no record and a *LockError naming the object and the annotation", raw, rec, err, err)
			}
			return
		}
		if raw == "" {
			if rec != nil {
				t.Fatalf("a record from an empty annotation: %+v", rec)
			}
			return
		}
		if rec == nil {
			t.Fatalf("reading %q = no record and no error", raw)
		}
		if err := rec.check(); err != nil {
			t.Fatalf("reading %q accepted a record its check refuses: %v", raw, err)
		}
		if rec.stored != raw {
			t.Fatalf("reading %q stored %q", raw, rec.stored)
		}
		rec.Active()
		first := rec.encode()
		again, err := readAnnotation(ref, first)
		if err != nil {
			t.Fatalf("reading the encoded record %s: %v", first, err)
		}
		if second := again.encode(); second != first {
			t.Fatalf("the record changes through encoding:\n first %s\nsecond %s", first, second)
		}
	})
}

// readAnnotation reads raw as ReadRecord reads the annotation of ref: the workload first, then
// the Record.
func readAnnotation(ref Ref, raw string) (*Record, error) {
	lock, err := workload.ParseLock(ref, raw)
	if err != nil {
		return nil, err
	}
	return recordOf(ref, lock)
}
