package inplace

import (
	"errors"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// statePod is a pod with containers app and init container setup, and the state annotation raw.
func statePod(t *testing.T, raw string) *corev1.Pod {
	t.Helper()
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web-0", Namespace: "ns", Annotations: map[string]string{StateAnnotation: raw}},
		Spec: corev1.PodSpec{
			InitContainers: []corev1.Container{{Name: "setup", Image: "reg/setup:v1"}},
			Containers:     []corev1.Container{{Name: "app", Image: "reg/app:v2"}},
		},
	}
}

// TestReadStateRefusesShapesNoVersionWrites: a state edited by hand into JSON no version
// writes is a *StateError naming the pod and the field, not a state to act on.
func TestReadStateRefusesShapesNoVersionWrites(t *testing.T) {
	const app = `{"name":"app","beforeImage":"reg/app:v1","afterImage":"reg/app:v2","restartsBefore":2}`
	tests := []struct {
		name, raw string
		// want is the error's text; empty, the state is read.
		want  string
		shape bool
	}{
		{"written by this version", `{"rolloutID":"r","stage":"Updating","containers":[` + app + `]}`, "", false},
		{"init container", `{"stage":"RollingBack","containers":[{"name":"setup","init":true,"beforeImage":"reg/setup:v1","afterImage":"reg/setup@sha256:` + strings.Repeat("a", 64) + `","revertImage":"reg/setup:v1"}]}`, "", false},
		{"no containers", `{"stage":"RolledBack","containers":null}`, "", false},
		{"not JSON", `{"stage":`, "pod ns/web-0: annotation inplace-rollout.io/state is not valid JSON: unexpected end of JSON input", false},
		{"a string", `"Updated"`, "pod ns/web-0: annotation inplace-rollout.io/state is not valid JSON: json: cannot unmarshal string", false},
		{"no stage", `{"containers":[` + app + `]}`, `pod ns/web-0: annotation inplace-rollout.io/state is not a state this version writes: stage "" is none of Preparing, PreUpdateHook, Draining, Resizing, Updating, PostUpdateHook, Updated, Failed, RollingBack, RolledBack`, true},
		{"unknown stage", `{"stage":"updated","containers":[` + app + `]}`, `stage "updated" is none of`, true},
		{"container without a name", `{"stage":"Updated","containers":[{"beforeImage":"a","afterImage":"b"}]}`, "containers[0] has no name", true},
		{"container the pod lacks", `{"stage":"Updated","containers":[` + app + `,{"name":"db","beforeImage":"a","afterImage":"b"}]}`, `containers[1]: the pod has no container "db"`, true},
		{"init container named as a container", `{"stage":"Updated","containers":[{"name":"setup","beforeImage":"a","afterImage":"b"}]}`, `containers[0]: the pod has no container "setup"`, true},
		{"container named as an init container", `{"stage":"Updated","containers":[{"name":"app","init":true,"beforeImage":"a","afterImage":"b"}]}`, `containers[0]: the pod has no init container "app"`, true},
		{"container twice", `{"stage":"Updated","containers":[` + app + `,` + app + `]}`, `containers[1]: container "app" is listed twice`, true},
		{"negative restarts", `{"stage":"Updated","containers":[{"name":"app","beforeImage":"a","afterImage":"b","restartsBefore":-1}]}`, "containers[0].restartsBefore is -1, below 0", true},
		{"negative restarts at the patch", `{"stage":"Updating","containers":[{"name":"app","beforeImage":"a","afterImage":"b","fromContainerID":"containerd://1","fromRestarts":-2}]}`, "containers[0].fromRestarts is -2, below 0", true},
		{"before image empty", `{"stage":"Updated","containers":[{"name":"app","afterImage":"b"}]}`, `containers[0].beforeImage "" is not an image reference`, true},
		{"after image not a reference", `{"stage":"Updated","containers":[{"name":"app","beforeImage":"a","afterImage":"B"}]}`, `containers[0].afterImage "B" is not an image reference`, true},
		{"revert image with spaces", `{"stage":"RollingBack","containers":[{"name":"app","beforeImage":"a","afterImage":"b","revertImage":" a"}]}`, `containers[0].revertImage " a" is not an image reference`, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st, err := ReadState(statePod(t, tt.raw))
			if tt.want == "" {
				if err != nil || st == nil {
					t.Fatalf("ReadState = %+v, %v; want a state", st, err)
				}
				return
			}
			var se *StateError
			if !errors.As(err, &se) || st != nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("ReadState = %+v, %v; want no state and a *StateError saying %q", st, err, tt.want)
			}
			if se.Shape != tt.shape {
				t.Errorf("StateError.Shape = %v, want %v", se.Shape, tt.shape)
			}
		})
	}
}

// TestStateFromContainerIsOptional: a state written before the replaced container was recorded
// reads with no FromContainerID (and is judged without it, see TestRefreshAcrossThePatch); a
// state that records it keeps it through a write and a read, and one that does not stays
// without the fields.
func TestStateFromContainerIsOptional(t *testing.T) {
	old := `{"rolloutID":"r","startedAt":"2026-11-30T12:00:00Z","stage":"Updating","stageAt":"2026-11-30T12:00:00Z",` +
		`"containers":[{"name":"app","beforeImage":"reg/app:v1","beforeImageID":"reg/app@sha256:` + strings.Repeat("1", 64) + `","afterImage":"reg/app:v2","restartsBefore":2}]}`
	st, err := ReadState(statePod(t, old))
	if err != nil {
		t.Fatal(err)
	}
	if c := st.Containers[0]; c.FromContainerID != "" || c.FromRestarts != 0 || c.RestartsBefore != 2 {
		t.Fatalf("old state read as %+v", c)
	}
	if enc := st.encode(); strings.Contains(enc, "fromContainerID") || strings.Contains(enc, "fromRestarts") {
		t.Errorf("a state without them encodes the new fields: %s", enc)
	}
	st.Containers[0].FromContainerID, st.Containers[0].FromRestarts = "containerd://abc", 3
	back, err := ReadState(statePod(t, st.encode()))
	if err != nil {
		t.Fatal(err)
	}
	if c := back.Containers[0]; c.FromContainerID != "containerd://abc" || c.FromRestarts != 3 {
		t.Errorf("round trip lost the replaced container: %+v", c)
	}
}

// TestReadStateAgainFromTheCache: a state read a second time from the same text comes from
// ReadState's cache, and must read as the first time did: a copy the caller may change without
// changing the next read, and, on a pod without a container the state names, the same error as
// an uncached read.
func TestReadStateAgainFromTheCache(t *testing.T) {
	raw := `{"rolloutID":"cache","stage":"Updating","containers":[{"name":"app","beforeImage":"reg/app:v1","afterImage":"reg/app:v2"},` +
		`{"name":"setup","init":true,"beforeImage":"reg/setup:v1","afterImage":"reg/setup:v2"}],"labels":{"l":{"after":"b"}}}`
	pod := statePod(t, raw)
	first, err := ReadState(pod)
	if err != nil {
		t.Fatalf("first read: %v", err)
	}
	want := first.encode()
	first.Containers[0].AfterImage = "reg/app:changed"
	first.Labels["l"] = LabelChange{After: "changed"}
	first.Stage = StageFailed
	again, err := ReadState(pod)
	if err != nil {
		t.Fatalf("second read: %v", err)
	}
	if got := again.encode(); got != want {
		t.Errorf("the second read changed with the first's copy:\n got %s\nwant %s", got, want)
	}

	uncached := `{"rolloutID":"uncached","stage":"Updating","containers":[{"name":"app","beforeImage":"reg/app:v1","afterImage":"reg/app:v2"},` +
		`{"name":"setup","init":true,"beforeImage":"reg/setup:v1","afterImage":"reg/setup:v2"}]}`
	for _, text := range []string{uncached, raw} { // uncached: its first read is on the pod without setup
		lacking := statePod(t, text)
		lacking.Spec.InitContainers = nil
		_, err := ReadState(lacking)
		var se *StateError
		if !errors.As(err, &se) || !se.Shape || !strings.HasSuffix(err.Error(), `containers[1]: the pod has no init container "setup"`) {
			t.Errorf("ReadState on a pod without init container setup: %v; want a *StateError naming containers[1]", err)
		}
	}
}
