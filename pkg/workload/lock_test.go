package workload

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/inplace-rollout/inplace-rollout/pkg/inplace"
)

// TestParseLock: the workload keeps the record as stored and reads, and checks, only the
// previous images and strategy; pkg/rollout's TestRecordDecode checks the rest.
func TestParseLock(t *testing.T) {
	started := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	full := &testLock{
		Holder: "argo:ns/web", RolloutID: "r-1",
		Images:           map[string]string{"app": "reg/app:v2"},
		PreviousImages:   map[string]string{"app": "reg/app:v1"},
		PreviousStrategy: json.RawMessage(`{"type":"RollingUpdate"}`),
		Phase:            "RollingBack", StartedAt: started,
	}
	const withResources = `{"holder":"cli","phase":"Succeeded","previousResources":{"app":{"requests":{"cpu":"250m"}}}}`
	const older = `{"holder":"cli","rolloutID":"r-9","images":{"app":"reg/app:v2"},"phase":"Succeeded","startedAt":"2025-03-01T12:00:00Z"}`
	tests := []struct {
		name        string
		annotations map[string]string
		want        *Lock
		wantErr     string
	}{
		{"absent", nil, nil, ""},
		{"empty", map[string]string{LockAnnotation: ""}, nil, ""},
		{"other annotations only", map[string]string{"a": "b"}, nil, ""},
		{"full", map[string]string{LockAnnotation: full.encode()}, full.lock(), ""},
		{"the rollout's fields are not the workload's to check", map[string]string{LockAnnotation: `{"phase":"Done","heldAt":-1,"images":{"app":"A B"}}`},
			&Lock{Record: `{"phase":"Done","heldAt":-1,"images":{"app":"A B"}}`}, ""},
		{"older lock without new fields", map[string]string{LockAnnotation: older}, &Lock{Record: older}, ""},
		{"not JSON", map[string]string{LockAnnotation: "{"}, nil,
			"StatefulSet ns/web: annotation inplace-rollout.io/rollout is not valid JSON: unexpected end of JSON input"},
		{"wrong type", map[string]string{LockAnnotation: `{"previousImages":["reg/app:v2"]}`}, nil,
			"StatefulSet ns/web: annotation inplace-rollout.io/rollout is not valid JSON: json: cannot unmarshal array"},
		{"empty container name", map[string]string{LockAnnotation: `{"holder":"cli","phase":"Succeeded","previousImages":{"":"reg/app:v1"}}`}, nil,
			"is not a lock this version writes: previousImages has an empty container name"},
		{"null strategy", map[string]string{LockAnnotation: `{"holder":"cli","phase":"RollingBack","previousStrategy":null}`}, nil,
			"is not a lock this version writes: previousStrategy is null, not an update strategy object"},
		{"previous resources", map[string]string{LockAnnotation: withResources}, &Lock{Record: withResources, PreviousResources: map[string]inplace.Resources{
			"app": {Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("250m")}}}}, ""},
		{"previous resources not cpu or memory", map[string]string{LockAnnotation: `{"holder":"cli","phase":"Succeeded","previousResources":{"app":{"requests":{"ephemeral-storage":"1Gi"}}}}`}, nil,
			`is not a lock this version writes: previousResources: resources of container "app": requests.ephemeral-storage: only cpu and memory change in place`},
		{"previous resources that name nothing", map[string]string{LockAnnotation: `{"holder":"cli","phase":"Succeeded","previousResources":{"app":{}}}`}, nil,
			`is not a lock this version writes: previousResources: resources of container "app": names no request or limit`},
		{"strategy not an object", map[string]string{LockAnnotation: `{"holder":"cli","phase":"RollingBack","previousStrategy":["OnDelete"]}`}, nil,
			`is not a lock this version writes: previousStrategy is ["OnDelete"], not an update strategy object`},
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
		})
	}
}
