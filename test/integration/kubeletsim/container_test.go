package kubeletsim

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"testing"
	"time"
)

var testTimings = timings{pull: 200 * time.Millisecond, start: 200 * time.Millisecond, slowStart: 10 * time.Second, backoff: time.Second}

// step advances c to at, with image marked to crash in its pod or not, and returns its status
// reason and restart count.
func step(c *containerSim, image string, crash bool, at time.Time, reg *registry) (state string, restarts int32, next time.Time) {
	next = c.advance(at, image, crash, false, testTimings, reg)
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
		// As kubelet v1.34.5 did: the first crash restarts at once, so the restart count is 2
		// above the one before the update when CrashLoopBackOff first shows.
		{"crash image crash-loops with a climbing restart count", []point{
			{ms(0), "app:v1", "ContainerCreating", 0, false},
			{ms(500), "app:v1", "Ready", 0, false},
			{ms(600), "app:crash", "Terminated", 0, false},
			{ms(850), "app:crash", "Running", 1, false},
			{ms(1100), "app:crash", "Running", 2, false},
			{ms(1300), "app:crash", "CrashLoopBackOff", 2, false},
			{ms(2300), "app:crash", "Running", 3, false},
			{ms(2500), "app:crash", "CrashLoopBackOff", 3, false},
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
			{ms(600), "app:v1", "Running", 1, true},
			{ms(900), "app:v1", "CrashLoopBackOff", 1, true},
			{ms(1900), "app:v1", "Running", 2, true},
			{ms(2100), "app:v1", "CrashLoopBackOff", 2, true},
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
	c.advance(t0, "nginx:1.25", false, false, testTimings, reg)
	c.advance(t0.Add(time.Second), "nginx:1.25", false, false, testTimings, reg)
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

// TestContainerAsTheRealKubeletAfterAnImagePatch follows one container through in-place image
// patches with the timings of a real kubelet's behaviour scaled down (reference/real-node.md):
// the replaced container still reported Running and Ready for the stop delay; the crash back-off,
// keyed by image, before going back soon to an image started after an exit, shown as
// CrashLoopBackOff on the replaced container with the restart count unchanged and doubling; a
// missing image that kills the old container first and keeps its image and containerID.
func TestContainerAsTheRealKubeletAfterAnImagePatch(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	ms := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }
	tm := testTimings
	tm.stop = 300 * time.Millisecond
	type point struct {
		at       time.Time
		image    string
		state    string
		restarts int32
		// instance is which container the status names: "same" as the last point, "new", or
		// "" not checked.
		instance string
		// image and message checks, when set.
		statusImage, message string
	}
	tests := []struct {
		name   string
		points []point
	}{
		{"the replaced container is reported Ready for the stop delay", []point{
			{at: ms(0), image: "app:v1", state: "ContainerCreating"},
			{at: ms(500), image: "app:v1", state: "Ready", instance: "new"},
			{at: ms(600), image: "app:v2", state: "Ready", instance: "same", statusImage: "docker.io/library/app:v1"},
			{at: ms(850), image: "app:v2", state: "Ready", instance: "same", statusImage: "docker.io/library/app:v1"},
			{at: ms(950), image: "app:v2", state: "Terminated", instance: "same"},
			{at: ms(1200), image: "app:v2", state: "Running", restarts: 1, instance: "new", statusImage: "docker.io/library/app:v2"},
		}},
		// The kubelet kills and starts in one sync, with the spec it read when the sync began:
		// patched back while it stops the container, it starts v2 all the same, then v1.
		{"an image patched back during the stop starts the patched image first", []point{
			{at: ms(0), image: "app:v1", state: "ContainerCreating"},
			{at: ms(500), image: "app:v1", state: "Ready", instance: "new"},
			{at: ms(600), image: "app:v2", state: "Ready", instance: "same"},
			{at: ms(700), image: "app:v1", state: "Ready", instance: "same", statusImage: "docker.io/library/app:v1"},
			{at: ms(950), image: "app:v1", state: "Terminated", instance: "same"},
			{at: ms(1150), image: "app:v1", state: "Running", restarts: 1, instance: "new", statusImage: "docker.io/library/app:v2"},
			{at: ms(1350), image: "app:v1", state: "Running", restarts: 1, instance: "same", statusImage: "docker.io/library/app:v2"},
			{at: ms(1450), image: "app:v1", state: "Terminated", restarts: 1, instance: "same"},
			{at: ms(1650), image: "app:v1", state: "Running", restarts: 2, instance: "new", statusImage: "docker.io/library/app:v1"},
		}},
		{"back to an image started after an exit waits the back-off, doubling", []point{
			{at: ms(0), image: "app:v1", state: "ContainerCreating"},
			{at: ms(500), image: "app:v1", state: "Ready", instance: "new"},
			// v1's first start followed no exit, nor does v2's: neither counts.
			{at: ms(600), image: "app:v2", state: "Ready", instance: "same"},
			{at: ms(1400), image: "app:v2", state: "Ready", restarts: 1, instance: "new"},
			// v1 again, after v1's exit at 0.9 s: it starts, and now counts.
			{at: ms(1500), image: "app:v1", state: "Ready", restarts: 1, instance: "same"},
			{at: ms(2300), image: "app:v1", state: "Ready", restarts: 2, instance: "new"},
			{at: ms(2400), image: "app:v2", state: "Ready", restarts: 2, instance: "same"},
			{at: ms(3200), image: "app:v2", state: "Ready", restarts: 3, instance: "new"},
			// v1 once more, stopped at 3.6 s: the last exit (2.7 s) is within v1's back-off of
			// 1s, so no new container and the restart count unchanged, until 4.6 s.
			{at: ms(3300), image: "app:v1", state: "Ready", restarts: 3, instance: "same"},
			{at: ms(3700), image: "app:v1", state: "CrashLoopBackOff", restarts: 3, instance: "same", statusImage: "docker.io/library/app:v2",
				message: "back-off 1s restarting failed container=app pod=web-0_ns(uid-1)"},
			{at: ms(4500), image: "app:v1", state: "CrashLoopBackOff", restarts: 3, instance: "same"},
			{at: ms(4900), image: "app:v1", state: "Running", restarts: 4, instance: "new", statusImage: "docker.io/library/app:v1"},
			{at: ms(5100), image: "app:v1", state: "Ready", restarts: 4, instance: "same"},
			// v2, stopped at 5.5 s: the last exit (3.6 s) is past v2's back-off.
			{at: ms(5200), image: "app:v2", state: "Ready", restarts: 4, instance: "same"},
			{at: ms(6000), image: "app:v2", state: "Ready", restarts: 5, instance: "new"},
			// v1, stopped at 6.4 s: its back-off doubled when it passed, to 2s.
			{at: ms(6100), image: "app:v1", state: "Ready", restarts: 5, instance: "same"},
			{at: ms(6500), image: "app:v1", state: "CrashLoopBackOff", restarts: 5, instance: "same", message: "back-off 2s restarting"},
			{at: ms(8300), image: "app:v1", state: "CrashLoopBackOff", restarts: 5, instance: "same"},
			{at: ms(8700), image: "app:v1", state: "Running", restarts: 6, instance: "new"},
		}},
		{"an image started long ago starts at once", []point{
			{at: ms(0), image: "app:v1", state: "ContainerCreating"},
			{at: ms(500), image: "app:v1", state: "Ready", instance: "new"},
			{at: ms(600), image: "app:v2", state: "Ready", instance: "same"},
			{at: ms(1500), image: "app:v2", state: "Ready", restarts: 1, instance: "new"},
			{at: ms(70000), image: "app:v1", state: "Ready", restarts: 1, instance: "same"},
			{at: ms(70350), image: "app:v1", state: "Terminated", restarts: 1, instance: "same"},
		}},
		{"a missing image kills the old container, then fails to pull", []point{
			{at: ms(0), image: "app:v1", state: "ContainerCreating"},
			{at: ms(500), image: "app:v1", state: "Ready", instance: "new"},
			{at: ms(600), image: NotFoundHost + "/app:v2", state: "Ready", instance: "same"},
			{at: ms(950), image: NotFoundHost + "/app:v2", state: "Terminated", instance: "same"},
			{at: ms(1200), image: NotFoundHost + "/app:v2", state: "ErrImagePull", instance: "same", statusImage: "docker.io/library/app:v1"},
			{at: ms(2200), image: NotFoundHost + "/app:v2", state: "ImagePullBackOff", instance: "same", statusImage: "docker.io/library/app:v1"},
			// Back to v1, whose only start followed no exit: it starts at once.
			{at: ms(2300), image: "app:v1", state: "Terminated", instance: "same", statusImage: "docker.io/library/app:v1"},
			{at: ms(2600), image: "app:v1", state: "Running", restarts: 1, instance: "new"},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := &containerSim{name: "app", pod: "web-0_ns(uid-1)"}
			reg := &registry{}
			var id string
			for _, p := range tt.points {
				c.advance(p.at, p.image, false, false, tm, reg)
				st := c.status(p.at, tm)
				state := ""
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
				at := p.at.Sub(t0)
				if state != p.state || st.RestartCount != p.restarts {
					t.Errorf("at +%s with %s: state %s restarts %d, want %s restarts %d", at, p.image, state, st.RestartCount, p.state, p.restarts)
				}
				switch {
				case p.instance == "same" && st.ContainerID != id:
					t.Errorf("at +%s: containerID %s, want the last one %s", at, st.ContainerID, id)
				case p.instance == "new" && (st.ContainerID == id || st.ContainerID == ""):
					t.Errorf("at +%s: containerID %q, want a new one", at, st.ContainerID)
				}
				if p.statusImage != "" && st.Image != p.statusImage {
					t.Errorf("at +%s: status image %s, want %s", at, st.Image, p.statusImage)
				}
				if p.message != "" && (st.State.Waiting == nil || !strings.Contains(st.State.Waiting.Message, p.message)) {
					t.Errorf("at +%s: waiting %+v, want a message with %q", at, st.State.Waiting, p.message)
				}
				if p.state == "CrashLoopBackOff" && (st.LastTerminationState.Terminated == nil || st.LastTerminationState.Terminated.ContainerID != st.ContainerID) {
					t.Errorf("at +%s: last termination %+v, want the container the status names", at, st.LastTerminationState.Terminated)
				}
				id = st.ContainerID
			}
		})
	}
}
