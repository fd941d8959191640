package kubeletsim

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	corev1 "k8s.io/api/core/v1"
)

// stateOf names a container status as the table below spells it.
func stateOf(st corev1.ContainerStatus) string {
	switch {
	case st.State.Running != nil && st.Ready:
		return "Running/Ready"
	case st.State.Running != nil:
		return "Running"
	case st.State.Waiting != nil:
		return st.State.Waiting.Reason
	case st.State.Terminated != nil:
		return "Exited" + strings.Repeat("!", min(int(st.State.Terminated.ExitCode), 1)) + ":" + strconv.Itoa(int(st.State.Terminated.ExitCode))
	}
	return "?"
}

// summary is "PHASE[/REASON] init=STATE,... main=STATE,...".
func summary(st corev1.PodStatus) string {
	s := string(st.Phase)
	if st.Reason != "" {
		s += "/" + st.Reason
	}
	var init, main []string
	for _, c := range st.InitContainerStatuses {
		init = append(init, stateOf(c))
	}
	for _, c := range st.ContainerStatuses {
		main = append(main, stateOf(c))
	}
	return s + " init=" + strings.Join(init, ",") + " main=" + strings.Join(main, ",")
}

func TestRunOncePod(t *testing.T) {
	host := startRegistry(t, "", "")
	helperDigest := push(t, host+"/helper:v1", authn.Anonymous)
	appDigest := push(t, host+"/app:v1", authn.Anonymous)
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	ms := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }
	type point struct {
		at   time.Time
		want string
	}
	tests := []struct {
		name     string
		init     []string
		main     []string
		deadline int64
		points   []point
		// server leaves the containers without a command: they run the image's entrypoint.
		server bool
	}{
		{"init then containers run to completion", []string{host + "/helper:v1"}, []string{host + "/app:v1", "registry.example/side:v1"}, 0, []point{
			{ms(0), "Pending init=ContainerCreating main=PodInitializing,PodInitializing"},
			{ms(250), "Pending init=Running main=PodInitializing,PodInitializing"},
			{ms(450), "Pending init=Exited:0 main=ContainerCreating,ContainerCreating"},
			{ms(700), "Running init=Exited:0 main=Running,Running"},
			{ms(900), "Succeeded init=Exited:0 main=Exited:0,Exited:0"},
		}, false},
		{"init containers run in order", []string{"registry.example/a:v1", "registry.example/b:v1"}, []string{"registry.example/app:v1"}, 0, []point{
			{ms(0), "Pending init=ContainerCreating,PodInitializing main=PodInitializing"},
			{ms(250), "Pending init=Running,PodInitializing main=PodInitializing"},
			{ms(450), "Pending init=Exited:0,ContainerCreating main=PodInitializing"},
			{ms(900), "Pending init=Exited:0,Exited:0 main=ContainerCreating"},
			{ms(1400), "Succeeded init=Exited:0,Exited:0 main=Exited:0"},
		}, false},
		{"a missing image keeps the pod Pending until its deadline", nil, []string{host + "/app:v1", host + "/app:missing"}, 3, []point{
			{ms(0), "Pending init= main=ContainerCreating,ContainerCreating"},
			{ms(250), "Pending init= main=Running,ErrImagePull"},
			{ms(1300), "Pending init= main=Exited:0,ImagePullBackOff"},
			{ms(2900), "Pending init= main=Exited:0,ImagePullBackOff"},
			{ms(3000), "Failed/DeadlineExceeded init= main=Exited:0,ImagePullBackOff"},
		}, false},
		{"a missing init image keeps the containers waiting", []string{host + "/helper:missing"}, []string{host + "/app:v1"}, 0, []point{
			{ms(0), "Pending init=ContainerCreating main=PodInitializing"},
			{ms(250), "Pending init=ErrImagePull main=PodInitializing"},
			{ms(1300), "Pending init=ImagePullBackOff main=PodInitializing"},
		}, false},
		{"a container that exits 1 fails the pod", nil, []string{"registry.example/app:crash", "registry.example/side:v1"}, 0, []point{
			{ms(0), "Pending init= main=ContainerCreating,ContainerCreating"},
			{ms(300), "Running init= main=Running,Running"},
			{ms(500), "Failed init= main=Exited!:1,Exited:0"},
		}, false},
		{"an init container that exits 1 fails the pod", []string{"registry.example/init:crash"}, []string{"registry.example/app:v1"}, 0, []point{
			{ms(0), "Pending init=ContainerCreating main=PodInitializing"},
			{ms(500), "Failed init=Exited!:1 main=PodInitializing"},
		}, false},
		{"the deadline stops a running container", nil, []string{"registry.example/app:slow"}, 1, []point{
			{ms(0), "Pending init= main=ContainerCreating"},
			{ms(500), "Running init= main=Running"},
			{ms(1000), "Failed/DeadlineExceeded init= main=Exited!:137"},
			{ms(20000), "Failed/DeadlineExceeded init= main=Exited!:137"},
		}, false},
		{"a container without a command serves until stopped", []string{"registry.example/init:v1"}, []string{"registry.example/app:v1"}, 0, []point{
			{ms(0), "Pending init=ContainerCreating main=PodInitializing"},
			{ms(450), "Pending init=Exited:0 main=ContainerCreating"},
			{ms(700), "Running init=Exited:0 main=Running"},
			{ms(900), "Running init=Exited:0 main=Running/Ready"},
			{ms(60000), "Running init=Exited:0 main=Running/Ready"},
		}, true},
		{"the deadline stops a serving container", nil, []string{"registry.example/app:v1"}, 2, []point{
			{ms(0), "Pending init= main=ContainerCreating"},
			{ms(500), "Running init= main=Running/Ready"},
			{ms(2500), "Failed/DeadlineExceeded init= main=Exited!:137"},
		}, true},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			reg := &registry{remote: newRemoteRegistries([]string{host}, secretsOf())}
			node := "sim-node-" + strconv.Itoa(i)
			pod := podOn("puller", node, "")
			pod.Status = corev1.PodStatus{}
			pod.Spec.RestartPolicy = corev1.RestartPolicyNever
			if tt.deadline > 0 {
				pod.Spec.ActiveDeadlineSeconds = &tt.deadline
			}
			for j, img := range tt.init {
				pod.Spec.InitContainers = append(pod.Spec.InitContainers, corev1.Container{Name: "init-" + strconv.Itoa(j), Image: img})
			}
			pod.Spec.Containers = nil
			for j, img := range tt.main {
				c := corev1.Container{Name: "pull-" + strconv.Itoa(j), Image: img}
				if !tt.server {
					c.Command = []string{"/puller/puller"}
				}
				pod.Spec.Containers = append(pod.Spec.Containers, c)
			}
			p := newPodSim(pod, "10.100.0.1", "172.18.0.2", t0)
			p.node = node
			var status corev1.PodStatus
			for _, pt := range tt.points {
				var next time.Time
				status, next = p.sync(pod, pt.at, testTimings, reg)
				if got := summary(status); got != pt.want {
					t.Fatalf("at %v: %s; want %s", pt.at.Sub(t0), got, pt.want)
				}
				terminal := status.Phase == corev1.PodSucceeded || status.Phase == corev1.PodFailed
				// Done is done; until then the deadline, when there is one, brings the pod back.
				if (terminal && !next.IsZero()) || (!terminal && tt.deadline > 0 && next.IsZero()) {
					t.Errorf("at %v: phase %s, next sync %v; want none once done, one while a deadline runs", pt.at.Sub(t0), status.Phase, next)
				}
				pod.Status = status
			}
			if status.Phase == corev1.PodSucceeded && !conditionTrue(status.Conditions, corev1.PodInitialized) {
				t.Errorf("conditions %+v; want Initialized", status.Conditions)
			}
			if want := strings.HasSuffix(tt.points[len(tt.points)-1].want, "main=Running/Ready"); conditionTrue(status.Conditions, corev1.PodReady) != want {
				t.Errorf("conditions %+v; want Ready %v", status.Conditions, want)
			}
			if status.Reason == "DeadlineExceeded" && !strings.Contains(status.Message, "deadline") {
				t.Errorf("message %q; want the deadline named", status.Message)
			}
		})
	}

	// What the first puller pulled stays on its node: a container there starts with no pull delay.
	t.Run("the node keeps what a run-once pod pulled", func(t *testing.T) {
		reg := &registry{remote: newRemoteRegistries([]string{host}, secretsOf())}
		pod := podOn("puller", "sim-node-0", "")
		pod.Spec.RestartPolicy = corev1.RestartPolicyNever
		pod.Spec.InitContainers = []corev1.Container{{Name: "install", Image: host + "/helper:v1"}}
		pod.Spec.Containers = []corev1.Container{{Name: "pull-0", Image: host + "/app:v1", Command: []string{"/puller/puller"}}}
		p := newPodSim(pod, "10.100.0.1", "172.18.0.2", t0)
		p.node = "sim-node-0"
		var status corev1.PodStatus
		for _, at := range []time.Time{ms(0), ms(450)} {
			status, _ = p.sync(pod, at, testTimings, reg)
			pod.Status = status
		}
		if status, _ = p.sync(pod, ms(900), testTimings, reg); status.Phase != corev1.PodSucceeded {
			t.Fatalf("puller: %s; want Succeeded", summary(status))
		}
		if got, want := status.ContainerStatuses[0].ImageID, host+"/app@"+appDigest; got != want {
			t.Errorf("pulled imageID %q; want %q", got, want)
		}
		if got, want := status.InitContainerStatuses[0].ImageID, host+"/helper@"+helperDigest; got != want {
			t.Errorf("init imageID %q; want %q", got, want)
		}
		for _, tc := range []struct {
			node  string
			state string
		}{{"sim-node-0", "Running"}, {"sim-node-1", "ContainerCreating"}} {
			c := &containerSim{name: "app", env: pullEnv{node: tc.node, namespace: "shop", policy: corev1.PullIfNotPresent}}
			if state, _, _ := step(c, host+"/app:v1", false, ms(1000), reg); state != tc.state {
				t.Errorf("a container on %s right after its spec: %s; want %s", tc.node, state, tc.state)
			}
		}
	})
}

// TestAlwaysPodIgnoresRunOnce keeps restartPolicy Always pods as they were: init containers
// reported completed at once, containers Ready and never exiting.
func TestAlwaysPodIgnoresRunOnce(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	pod := podOn("web-0", "sim-node-0", "")
	pod.Status = corev1.PodStatus{}
	pod.Spec.RestartPolicy = corev1.RestartPolicyAlways
	pod.Spec.InitContainers = []corev1.Container{{Name: "init", Image: "registry.example/init:v1"}}
	pod.Spec.Containers = []corev1.Container{{Name: "app", Image: "registry.example/app:v1"}}
	p := newPodSim(pod, "10.100.0.1", "172.18.0.2", t0)
	p.node = "sim-node-0"
	reg := &registry{}
	for _, pt := range []struct {
		at   time.Duration
		want string
	}{{0, "Pending init=Exited:0 main=ContainerCreating"}, {time.Second, "Running init=Exited:0 main=Running/Ready"}, {time.Hour, "Running init=Exited:0 main=Running/Ready"}} {
		status, _ := p.sync(pod, t0.Add(pt.at), testTimings, reg)
		if got := summary(status); got != pt.want {
			t.Errorf("at %v: %s; want %s", pt.at, got, pt.want)
		}
		pod.Status = status
	}
}
