package kubeletsim

import (
	"crypto/sha256"
	"encoding/hex"
	"testing"
	"time"
)

var testTimings = timings{pull: 200 * time.Millisecond, start: 200 * time.Millisecond, slowStart: 10 * time.Second, backoff: time.Second}

// step advances c to at, with image marked to crash in its pod or not, and returns its status
// reason and restart count.
func step(c *containerSim, image string, crash bool, at time.Time, reg *registry) (state string, restarts int32, next time.Time) {
	next = c.advance(at, image, crash, testTimings, reg)
	st := c.status(at, testTimings)
	switch {
	case st.State.Running != nil && st.Ready:
		state = "Ready"
	case st.State.Running != nil:
		state = "Running"
	case st.State.Waiting != nil:
		state = st.State.Waiting.Reason
	case st.State.Terminated != nil:
		state = "Terminated"
	}
	return state, st.RestartCount, next
}

func TestContainerLifecycle(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	ms := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }
	type point struct {
		at       time.Time
		image    string
		state    string
		restarts int32
		crash    bool // the pod marks the image to crash
	}
	tests := []struct {
		name   string
		points []point
	}{
		{"new container pulls, starts, becomes ready", []point{
			{ms(0), "app:v1", "ContainerCreating", 0, false},
			{ms(250), "app:v1", "Running", 0, false},
			{ms(400), "app:v1", "Ready", 0, false},
		}},
		{"image change restarts once", []point{
			{ms(0), "app:v1", "ContainerCreating", 0, false},
			{ms(500), "app:v1", "Ready", 0, false},
			{ms(600), "app:v2", "Terminated", 0, false},
			{ms(850), "app:v2", "Running", 1, false},
			{ms(1100), "app:v2", "Ready", 1, false},
			{ms(5000), "app:v2", "Ready", 1, false},
		}},
		{"crash image crash-loops with a climbing restart count", []point{
			{ms(0), "app:v1", "ContainerCreating", 0, false},
			{ms(500), "app:v1", "Ready", 0, false},
			{ms(600), "app:crash", "Terminated", 0, false},
			{ms(850), "app:crash", "Running", 1, false},
			{ms(1100), "app:crash", "CrashLoopBackOff", 1, false},
			{ms(2300), "app:crash", "CrashLoopBackOff", 2, false},
			{ms(3500), "app:crash", "CrashLoopBackOff", 3, false},
		}},
		{"unpullable image backs off and keeps the restart count", []point{
			{ms(0), "app:v1", "ContainerCreating", 0, false},
			{ms(500), "app:v1", "Ready", 0, false},
			{ms(600), NotFoundHost + "/app:v2", "Terminated", 0, false},
			{ms(900), NotFoundHost + "/app:v2", "ErrImagePull", 0, false},
			{ms(2000), NotFoundHost + "/app:v2", "ImagePullBackOff", 0, false},
			{ms(9000), NotFoundHost + "/app:v2", "ImagePullBackOff", 0, false},
		}},
		{"slow image takes ten seconds to become ready", []point{
			{ms(0), "app:slow", "ContainerCreating", 0, false},
			{ms(5000), "app:slow", "Running", 0, false},
			{ms(10300), "app:slow", "Ready", 0, false},
		}},
		{"a running image marked to crash exits and crash-loops", []point{
			{ms(0), "app:v1", "ContainerCreating", 0, false},
			{ms(500), "app:v1", "Ready", 0, false},
			{ms(600), "app:v1", "CrashLoopBackOff", 0, true},
			{ms(1700), "app:v1", "Running", 1, true},
			{ms(1900), "app:v1", "CrashLoopBackOff", 1, true},
		}},
		{"invalid reference", []point{
			{ms(0), "App:V1", "InvalidImageName", 0, false},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := &containerSim{name: "app"}
			reg := &registry{}
			for _, p := range tt.points {
				state, restarts, _ := step(c, p.image, p.crash, p.at, reg)
				if state != p.state || restarts != p.restarts {
					t.Errorf("at +%s with %s: state %s restarts %d, want %s restarts %d",
						p.at.Sub(t0), p.image, state, restarts, p.state, p.restarts)
				}
			}
		})
	}
}

func TestStatusReportsNormalizedImageAndDigest(t *testing.T) {
	t0 := time.Now()
	reg := &registry{}
	c := &containerSim{name: "app"}
	c.advance(t0, "nginx:1.25", false, testTimings, reg)
	c.advance(t0.Add(time.Second), "nginx:1.25", false, testTimings, reg)
	st := c.status(t0.Add(time.Second), testTimings)
	if st.Image != "docker.io/library/nginx:1.25" {
		t.Errorf("image = %q, want docker.io/library/nginx:1.25", st.Image)
	}
	// An unretagged tag's digest is the SHA-256 of its normalized reference.
	sum := sha256.Sum256([]byte("docker.io/library/nginx:1.25"))
	if want := "docker.io/library/nginx@sha256:" + hex.EncodeToString(sum[:]); st.ImageID != want {
		t.Errorf("imageID = %q, want %q", st.ImageID, want)
	}
}

func TestRegistryRetag(t *testing.T) {
	reg := &registry{}
	v1, _ := parseImage("reg.example/app:v1")
	pinned, _ := parseImage("reg.example/app@" + DigestFor("x"))
	before := reg.imageID(v1)
	if err := reg.retag("reg.example/app:v1", DigestFor("new")); err != nil {
		t.Fatalf("retag: %v", err)
	}
	if after := reg.imageID(v1); after == before || after != "reg.example/app@"+DigestFor("new") {
		t.Errorf("imageID after retag = %q (before %q)", after, before)
	}
	if got := reg.imageID(pinned); got != "reg.example/app@"+DigestFor("x") {
		t.Errorf("a digest reference resolves to %q, want its own digest", got)
	}
	for _, bad := range []struct{ ref, digest string }{
		{"reg.example/app:v1", "sha256:abc"},
		{"reg.example/app@" + DigestFor("x"), DigestFor("y")},
		{"not a reference", DigestFor("y")},
	} {
		if err := reg.retag(bad.ref, bad.digest); err == nil {
			t.Errorf("retag(%q, %q) succeeded, want an error", bad.ref, bad.digest)
		}
	}
}
