package inplace

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestCheckRevert(t *testing.T) {
	const v1ID = "reg.example/app@sha256:1111111111111111111111111111111111111111111111111111111111111111"
	allowed := map[string][]string{"app": {"reg.example/app:v1", "reg.example/app:v0"}}
	tests := []struct {
		name    string
		allowed map[string][]string
		c       ContainerState
		want    string // "" allowed, else part of the error
	}{
		{"recorded image", allowed, ContainerState{Name: "app", BeforeImage: "reg.example/app:v1", BeforeImageID: v1ID}, ""},
		{"another recorded image", allowed, ContainerState{Name: "app", BeforeImage: "reg.example/app:v0"}, ""},
		{"spelled otherwise", map[string][]string{"app": {"nginx:1.25"}}, ContainerState{Name: "app", BeforeImage: "docker.io/library/nginx:1.25"}, ""},
		{"digest form of the recorded image", allowed,
			ContainerState{Name: "app", BeforeImage: "reg.example/app:v1", BeforeImageID: v1ID, RevertImage: "reg.example/app@" + digestOf(v1ID)}, ""},
		{"edited before image", allowed, ContainerState{Name: "app", BeforeImage: "reg.example/evil:v1", BeforeImageID: v1ID},
			`container "app" would go back to reg.example/evil:v1, not an image the rollout recorded for it (reg.example/app:v1, reg.example/app:v0)`},
		{"edited revert image", allowed, ContainerState{Name: "app", BeforeImage: "reg.example/app:v1", BeforeImageID: v1ID, RevertImage: "reg.example/evil:v1"},
			"would go back to reg.example/evil:v1"},
		{"a digest other than the recorded one", allowed,
			ContainerState{Name: "app", BeforeImage: "reg.example/app:v1", BeforeImageID: v1ID, RevertImage: "reg.example/app@sha256:2222222222222222222222222222222222222222222222222222222222222222"},
			"would go back to reg.example/app@sha256:2222"},
		{"the recorded digest of another repository", allowed,
			ContainerState{Name: "app", BeforeImage: "reg.example/app:v1", BeforeImageID: v1ID, RevertImage: "reg.example/evil@" + digestOf(v1ID)},
			"would go back to reg.example/evil@"},
		{"a container the lock recorded nothing for", allowed, ContainerState{Name: "sidecar", BeforeImage: "reg.example/sidecar:v1"}, "(none)"},
		{"no record: nothing checked", nil, ContainerState{Name: "app", BeforeImage: "reg.example/evil:v1"}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns"}}
			err := CheckRevert(pod, &State{Containers: []ContainerState{tt.c}}, tt.allowed)
			switch {
			case tt.want == "" && err != nil:
				t.Errorf("refused: %v", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Errorf("error %v, want one saying %q", err, tt.want)
			}
			var re *RevertImageError
			if err != nil && !errors.As(err, &re) {
				t.Errorf("error %T, want *RevertImageError", err)
			}
		})
	}
}

func TestNextRevertRefusesAnImageNotRecorded(t *testing.T) {
	st := &State{RolloutID: "r1", Stage: StageUpdated, Containers: []ContainerState{{Name: "app", BeforeImage: "reg.example/evil:v1", AfterImage: "reg.example/app:v2"}}}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", ResourceVersion: "7", Annotations: map[string]string{StateAnnotation: st.encode()}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "reg.example/app:v2"}}},
	}
	opts := Options{RevertImages: map[string][]string{"app": {"reg.example/app:v1"}}}
	step, err := NextRevert(pod, opts, time.Now(), nil)
	var re *RevertImageError
	if !errors.As(err, &re) || step.Patch != nil {
		t.Fatalf("step %+v, error %v; want no write and a *RevertImageError", step, err)
	}
	if re.Pod != "p" || re.Container != "app" || re.Image != "reg.example/evil:v1" {
		t.Errorf("error %+v, want it to name pod p, container app and the image found", re)
	}
}

// TestNextRevertSpellsOrPins checks where a revert sends a container whose before image is a
// tag: back to the tag while it names the digest the container ran, else to that digest, with
// the Event saying which and why.
func TestNextRevertSpellsOrPins(t *testing.T) {
	const (
		before = "reg.example/app:v1"
		v1ID   = "reg.example/app@sha256:1111111111111111111111111111111111111111111111111111111111111111"
		pinned = "reg.example/app@sha256:1111111111111111111111111111111111111111111111111111111111111111"
	)
	tests := []struct {
		name      string
		tagMoved  TagMoved
		want      string
		eventSays string // "" when the Event explains nothing
	}{
		{"the tag names the digest still", func(string, string) (bool, bool) { return false, true }, before, ""},
		{"the tag was pushed again", func(string, string) (bool, bool) { return true, true }, pinned, "the tag names other content now"},
		{"the registry cannot say", func(string, string) (bool, bool) { return false, false }, pinned, "could not be checked"},
		{"no registry access", nil, pinned, "could not be checked"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := &State{RolloutID: "r1", Stage: StageUpdated, Containers: []ContainerState{{Name: "app", BeforeImage: before, BeforeImageID: v1ID, AfterImage: "reg.example/app:v2"}}}
			pod := &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", ResourceVersion: "7", Annotations: map[string]string{StateAnnotation: st.encode()}},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "reg.example/app:v2"}}},
			}
			step, err := NextRevert(pod, Options{}, time.Now(), tt.tagMoved)
			if err != nil {
				t.Fatal(err)
			}
			next := &State{}
			if err := json.Unmarshal([]byte(patchAnnotation(t, step.Patch)), next); err != nil {
				t.Fatal(err)
			}
			if got := next.Containers[0].RevertImage; got != tt.want {
				t.Errorf("revert image %s, want %s", got, tt.want)
			}
			switch msg := step.Event.Message; {
			case tt.eventSays == "" && strings.Contains(msg, "goes back to"):
				t.Errorf("Event %q explains a pin that did not happen", msg)
			case tt.eventSays != "" && (!strings.Contains(msg, `container "app" goes back to `+pinned+", not "+before) || !strings.Contains(msg, tt.eventSays)):
				t.Errorf("Event %q does not say the container goes back to %s because %s", msg, pinned, tt.eventSays)
			}
		})
	}
}

// patchAnnotation is the state annotation a merge patch writes.
func patchAnnotation(t *testing.T, patch []byte) string {
	t.Helper()
	var p struct {
		Metadata struct {
			Annotations map[string]string `json:"annotations"`
		} `json:"metadata"`
	}
	if err := json.Unmarshal(patch, &p); err != nil {
		t.Fatalf("patch %s: %v", patch, err)
	}
	return p.Metadata.Annotations[StateAnnotation]
}
