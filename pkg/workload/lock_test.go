package workload

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestLockActive(t *testing.T) {
	tests := []struct {
		name string
		lock *Lock
		want bool
	}{
		{"no lock", nil, false},
		{"progressing", &Lock{Phase: LockProgressing}, true},
		{"paused", &Lock{Phase: LockPaused}, true},
		{"rolling back", &Lock{Phase: LockRollingBack}, true},
		{"halted", &Lock{Phase: LockHalted}, true},
		{"holding", &Lock{Phase: LockHolding}, true},
		{"succeeded", &Lock{Phase: LockSucceeded}, false},
		{"rolled back", &Lock{Phase: LockRolledBack}, false},
		{"released", &Lock{Phase: LockReleased}, false},
		{"no phase", &Lock{}, false},
		{"unknown phase", &Lock{Phase: "progressing"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.lock.Active(); got != tt.want {
				t.Errorf("Active() = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestLockEncodeDecode(t *testing.T) {
	started := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	full := &Lock{
		Holder: "argo:ns/web", RolloutID: "r-1", SpecHash: "abc",
		Images:           map[string]string{"app": "reg/app:v2"},
		PreviousImages:   map[string]string{"app": "reg/app:v1"},
		BeforeImages:     map[string][]string{"app": {"reg/app:v1", "reg/app:v0"}},
		PreviousStrategy: json.RawMessage(`{"type":"RollingUpdate"}`),
		Superseded:       []string{"r-0"},
		Phase:            LockRollingBack, Reason: "pod web-1 failed", ReasonCode: "PodFailed",
		StartedAt: started, ProgressAt: started.Add(time.Minute), AcceptedPods: 2, AcceptedAll: true, HeldAt: 3,
		Analysis: json.RawMessage(`{"batch":2}`),
	}
	tests := []struct {
		name        string
		annotations map[string]string
		want        *Lock
		wantErr     string
		omitted     []string // JSON fields the encoded lock leaves out
	}{
		{"absent", nil, nil, "", nil},
		{"empty", map[string]string{LockAnnotation: ""}, nil, "", nil},
		{"other annotations only", map[string]string{"a": "b"}, nil, "", nil},
		{"full", map[string]string{LockAnnotation: full.encode()}, full, "", nil},
		{"minimal", map[string]string{LockAnnotation: (&Lock{Holder: "cli", Phase: LockProgressing, StartedAt: started}).encode()},
			&Lock{Holder: "cli", Phase: LockProgressing, StartedAt: started}, "",
			[]string{"beforeImages", "previousStrategy", "superseded", "reason", "reasonCode", "progressAt", "acceptedPods", "acceptedAll", "heldAt", "analysis"}},
		{"older lock without new fields", map[string]string{LockAnnotation: `{"holder":"cli","rolloutID":"r-9","images":{"app":"reg/app:v2"},"phase":"Succeeded","startedAt":"2025-03-01T12:00:00Z"}`},
			&Lock{Holder: "cli", RolloutID: "r-9", Images: map[string]string{"app": "reg/app:v2"}, Phase: LockSucceeded, StartedAt: started}, "", nil},
		{"not JSON", map[string]string{LockAnnotation: "{"}, nil,
			"StatefulSet ns/web: annotation inplace-rollout.io/rollout is not valid JSON: unexpected end of JSON input", nil},
		{"wrong type", map[string]string{LockAnnotation: `{"images":["reg/app:v2"]}`}, nil,
			"StatefulSet ns/web: annotation inplace-rollout.io/rollout is not valid JSON: json: cannot unmarshal array", nil},
		{"unknown phase", map[string]string{LockAnnotation: `{"holder":"cli","phase":"Done"}`}, nil,
			`StatefulSet ns/web: annotation inplace-rollout.io/rollout is not a lock this version writes: phase "Done" is none of`, nil},
		{"no holder", map[string]string{LockAnnotation: `{"phase":"Progressing"}`}, nil,
			"is not a lock this version writes: holder is empty", nil},
		{"negative count", map[string]string{LockAnnotation: `{"holder":"cli","phase":"Holding","heldAt":-1}`}, nil,
			"is not a lock this version writes: heldAt is -1, below 0", nil},
		{"image not a reference", map[string]string{LockAnnotation: `{"holder":"cli","phase":"Succeeded","images":{"app":"reg/app:v2 "}}`}, nil,
			`is not a lock this version writes: images[app] "reg/app:v2 " is not an image reference`, nil},
		{"before image not a reference", map[string]string{LockAnnotation: `{"holder":"cli","phase":"Succeeded","beforeImages":{"app":["reg/app:v1","A:B"]}}`}, nil,
			`is not a lock this version writes: beforeImages[app] "A:B" is not an image reference`, nil},
		{"empty container name", map[string]string{LockAnnotation: `{"holder":"cli","phase":"Succeeded","previousImages":{"":"reg/app:v1"}}`}, nil,
			"is not a lock this version writes: previousImages has an empty container name", nil},
		{"null strategy", map[string]string{LockAnnotation: `{"holder":"cli","phase":"RollingBack","previousStrategy":null}`}, nil,
			"is not a lock this version writes: previousStrategy is null, not an update strategy object", nil},
		{"strategy not an object", map[string]string{LockAnnotation: `{"holder":"cli","phase":"RollingBack","previousStrategy":["OnDelete"]}`}, nil,
			`is not a lock this version writes: previousStrategy is ["OnDelete"], not an update strategy object`, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseLock(StatefulSet, "ns", "web", tt.annotations)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("parseLock = %+v, %v; want an error saying %q", got, err, tt.wantErr)
				}
				var le *LockError
				if !errors.As(err, &le) || got != nil {
					t.Errorf("parseLock = %+v, %T; want no lock and a *LockError", got, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("parseLock = %+v\nwant %+v", got, tt.want)
			}
			if got == nil {
				return
			}
			var fields map[string]json.RawMessage
			if err := json.Unmarshal([]byte(got.encode()), &fields); err != nil {
				t.Fatal(err)
			}
			for _, f := range tt.omitted {
				if _, ok := fields[f]; ok {
					t.Errorf("encoded lock has %s: %s", f, fields[f])
				}
			}
			again, err := parseLock(StatefulSet, "ns", "web", map[string]string{LockAnnotation: got.encode()})
			if err != nil || !reflect.DeepEqual(again, got) {
				t.Errorf("lock does not survive encoding: %+v, %v", again, err)
			}
		})
	}
}
