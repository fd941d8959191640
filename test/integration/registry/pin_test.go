package registry

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/inplace-rollout/inplace-rollout/pkg/inplace"
	"github.com/inplace-rollout/inplace-rollout/pkg/rollout"
	"github.com/inplace-rollout/inplace-rollout/pkg/workload"
	"github.com/inplace-rollout/inplace-rollout/test/integration/clitest"
	"github.com/inplace-rollout/inplace-rollout/test/integration/cluster"
)

// replicas is the size of the StatefulSet every pinning test rolls out.
const replicas = 3

// runCLI runs inplace-rollout against the test cluster and waits for it.
func runCLI(t *testing.T, args ...string) clitest.Result {
	t.Helper()
	return clitest.Run(t, env, cli, args...)
}

// createWeb creates the StatefulSet web of replicas pods with one container, app, on image,
// pulling with the given secrets, and waits until every replica is Ready.
func createWeb(t *testing.T, ns, image string, secrets ...string) *appsv1.StatefulSet {
	t.Helper()
	labels := map[string]string{"app": "web"}
	sts := &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns},
		Spec: appsv1.StatefulSetSpec{
			Replicas: ptr.To(int32(replicas)), ServiceName: "web", PodManagementPolicy: appsv1.ParallelPodManagement,
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: image}}},
			},
		},
	}
	for _, s := range secrets {
		sts.Spec.Template.Spec.ImagePullSecrets = append(sts.Spec.Template.Spec.ImagePullSecrets, corev1.LocalObjectReference{Name: s})
	}
	if _, err := env.Client.AppsV1().StatefulSets(ns).Create(context.Background(), sts, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating statefulset %s/web: %v", ns, err)
	}
	return clitest.WaitStatefulSet(t, env, ns, "web", "all replicas ready and updated", func(s *appsv1.StatefulSet) bool {
		return s.Status.ObservedGeneration == s.Generation && s.Status.ReadyReplicas == replicas && s.Status.UpdatedReplicas == replicas
	})
}

// podView is what the tests compare of a pod before and after a command.
type podView struct {
	uid, resourceVersion, image, imageID string
	restarts                             int32
}

// webPods returns the pods of web by name, failing unless there are replicas of them.
func webPods(t *testing.T, ns string) map[string]podView {
	t.Helper()
	out := map[string]podView{}
	for _, p := range clitest.ListPods(t, env, ns, "app=web") {
		v := podView{uid: string(p.UID), resourceVersion: p.ResourceVersion, image: p.Spec.Containers[0].Image}
		if cs := cluster.ContainerStatus(&p, "app"); cs != nil {
			v.imageID, v.restarts = cs.ImageID, cs.RestartCount
		}
		out[p.Name] = v
	}
	if len(out) != replicas {
		t.Fatalf("statefulset %s/web has %d pods; want %d", ns, len(out), replicas)
	}
	return out
}

// getWeb reads the StatefulSet web.
func getWeb(t *testing.T, ns string) *appsv1.StatefulSet {
	t.Helper()
	sts, err := env.Client.AppsV1().StatefulSets(ns).Get(context.Background(), "web", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("reading statefulset %s/web: %v", ns, err)
	}
	return sts
}

// checkUnchanged fails for every pod, and the StatefulSet, whose resourceVersion differs from
// before: a refused command writes nothing.
func checkUnchanged(t *testing.T, ns string, stsRV string, before map[string]podView) {
	t.Helper()
	if rv := getWeb(t, ns).ResourceVersion; rv != stsRV {
		t.Errorf("statefulset web: resourceVersion %s -> %s; want nothing written", stsRV, rv)
	}
	for name, a := range webPods(t, ns) {
		if b := before[name]; a.resourceVersion != b.resourceVersion {
			t.Errorf("pod %s: resourceVersion %s -> %s (image %s -> %s); want nothing written", name, b.resourceVersion, a.resourceVersion, b.image, a.image)
		}
	}
}

// checkOnContent checks that every pod is the same pod as before, restarted once, with spec
// image want running the content digest of repo, and that the StatefulSet's template and
// the rollout's lock spell want too.
func checkOnContent(t *testing.T, ns string, before map[string]podView, want, repo, digest string) {
	t.Helper()
	for name, a := range webPods(t, ns) {
		b := before[name]
		if a.uid != b.uid {
			t.Errorf("pod %s was recreated: UID %s -> %s", name, b.uid, a.uid)
		}
		if a.image != want || a.imageID != repo+"@"+digest {
			t.Errorf("pod %s: image %s, imageID %s; want image %s running %s@%s", name, a.image, a.imageID, want, repo, digest)
		}
		if a.restarts != b.restarts+1 {
			t.Errorf("pod %s: restartCount %d -> %d; want one restart", name, b.restarts, a.restarts)
		}
	}
	sts := getWeb(t, ns)
	if got := sts.Spec.Template.Spec.Containers[0].Image; got != want {
		t.Errorf("statefulset web: template image %s; want %s", got, want)
	}
	var lock rollout.Record
	if err := json.Unmarshal([]byte(sts.Annotations[workload.LockAnnotation]), &lock); err != nil {
		t.Fatalf("statefulset web: lock annotation %q: %v", sts.Annotations[workload.LockAnnotation], err)
	}
	if lock.Images["app"] != want {
		t.Errorf("statefulset web: lock images %v; want app=%s", lock.Images, want)
	}
}

// waitBatchOneUpdated waits until a pod of web reaches stage Updated and returns its name.
func waitBatchOneUpdated(t *testing.T, ns string) string {
	t.Helper()
	var updated string
	cluster.WaitFor(t, 2*time.Minute, "a pod of web Updated", func(context.Context) (bool, error) {
		for _, p := range clitest.ListPods(t, env, ns, "app=web") {
			st, err := inplace.ReadState(&p)
			if err != nil {
				return false, err
			}
			if st != nil && inplace.Judged(&p, st, time.Now()) == inplace.StageUpdated {
				updated = p.Name
				return true, nil
			}
		}
		return false, nil
	})
	return updated
}

// wait waits for a command started with clitest.Start to end and returns its exit code.
func wait(t *testing.T, cmd *exec.Cmd, stderr *bytes.Buffer) int {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if exit, ok := err.(*exec.ExitError); ok {
			return exit.ExitCode()
		} else if err != nil {
			t.Fatalf("waiting for %v: %v", cmd.Args, err)
		}
		return 0
	case <-time.After(5 * time.Minute):
		t.Fatalf("%v still running after 5 minutes; stderr:\n%s", cmd.Args, clitest.LastLines(stderr.String(), 15))
		return -1
	}
}

// repoFor is a repository of the registry host for this test alone: tests push the same tags.
func repoFor(host, ns string) string { return host + "/" + ns + "/app" }

func TestRunRestartsPodsOntoAFloatingTagsNewContent(t *testing.T) {
	ns := env.Namespace(t)
	dockerConfig := t.TempDir()
	repo := repoFor(env.Registry, ns)
	v1 := repo + ":v1"
	old := pushNew(t, dockerConfig, v1)
	createWeb(t, ns, v1)
	before := webPods(t, ns)
	for name, p := range before {
		if p.imageID != repo+"@"+old {
			t.Fatalf("pod %s runs %s; want %s@%s", name, p.imageID, repo, old)
		}
	}

	pushed := pushNew(t, dockerConfig, v1)
	if pushed == old {
		t.Fatalf("the second push under %s has the first's digest %s", v1, old)
	}
	args := []string{"-n", ns, "--target", "statefulset/web", "--image", "app=" + v1}
	plan := runCLI(t, append([]string{"plan"}, args...)...)
	if plan.Code != 0 || !strings.Contains(plan.Stdout, v1+"@"+pushed) {
		t.Errorf("plan: %s\nwant exit 0 and the pinned image %s@%s", plan, v1, pushed)
	}
	if r := runCLI(t, append([]string{"run"}, args...)...); r.Code != 0 {
		t.Fatalf("run: %s", r)
	}
	checkOnContent(t, ns, before, v1+"@"+pushed, repo, pushed)
}

func TestRunRefusesAFloatingTagItCannotResolve(t *testing.T) {
	ns := env.Namespace(t)
	dockerConfig := t.TempDir()
	repo := repoFor(env.Registry, ns)
	v1 := repo + ":v1"
	old := pushNew(t, dockerConfig, v1)
	createWeb(t, ns, v1)
	pushNew(t, dockerConfig, v1)
	before := webPods(t, ns)
	stsRV := getWeb(t, ns).ResourceVersion

	restart, err := env.StopRegistry(env.Registry)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := restart(); err != nil {
			t.Errorf("serving the registry again: %v", err)
		}
	})

	tests := []struct {
		name string
		args []string
		want []string
	}{
		// The pods run the tag: whether they run what it names now cannot be known.
		{"auto with pods on the tag", []string{"--image", "app=" + v1},
			[]string{"app=" + v1, "web-0", "web-1", "web-2", old, "by digest"}},
		// always refuses whatever the pods run.
		{"always", []string{"--image", "app=" + repo + ":v2", "--pin-digests", "always"},
			[]string{repo + ":v2", "pin-digests is always"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := runCLI(t, append([]string{"run", "-n", ns, "--target", "statefulset/web"}, tt.args...)...)
			if r.Code != 2 {
				t.Fatalf("run with the registry stopped: %s\nwant exit 2", r)
			}
			t.Logf("refused: %s", clitest.LastLines(r.Stderr, 3))
			for _, w := range tt.want {
				if !strings.Contains(r.Stderr, w) {
					t.Errorf("stderr does not name %q:\n%s", w, r.Stderr)
				}
			}
			checkUnchanged(t, ns, stsRV, before)
		})
	}
}

func TestTagPushedMidRolloutChangesNoLaterBatch(t *testing.T) {
	ns := env.Namespace(t)
	dockerConfig := t.TempDir()
	repo := repoFor(env.Registry, ns)
	pushNew(t, dockerConfig, repo+":v1")
	v2 := repo + ":v2"
	atStart := pushNew(t, dockerConfig, v2)
	createWeb(t, ns, repo+":v1")
	before := webPods(t, ns)

	var stderr bytes.Buffer
	cmd := clitest.Start(t, env, cli, &stderr, "run", "-n", ns, "--target", "statefulset/web", "--image", "app="+v2, "--batches", "1,100%", "--soak", "15s")
	first := waitBatchOneUpdated(t, ns)
	moved := pushNew(t, dockerConfig, v2)
	if moved == atStart {
		t.Fatalf("the second push under %s has the first's digest %s", v2, atStart)
	}
	if code := wait(t, cmd, &stderr); code != 0 {
		t.Fatalf("run: exit %d; stderr:\n%s", code, clitest.LastLines(stderr.String(), 15))
	}
	t.Logf("batch 1 was %s; %s moved from %s to %s while it soaked", first, v2, atStart, moved)
	checkOnContent(t, ns, before, v2+"@"+atStart, repo, atStart)
}

// rollingBackEvent returns the message of pod's RollingBack Event.
func rollingBackEvent(t *testing.T, ns, pod string) string {
	t.Helper()
	var msg string
	cluster.WaitFor(t, time.Minute, "the RollingBack Event of pod "+pod, func(ctx context.Context) (bool, error) {
		list, err := env.Client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		for _, e := range list.Items {
			if e.InvolvedObject.Kind == "Pod" && e.InvolvedObject.Name == pod && e.Reason == inplace.EventRollingBack {
				msg = e.Message
				return true, nil
			}
		}
		return false, nil
	})
	return msg
}

func TestRollbackGoesToTheTagOnlyWhileItNamesTheContentRun(t *testing.T) {
	t.Run("crash with the tag unmoved: back to the tag as spelled", func(t *testing.T) {
		ns := env.Namespace(t)
		dockerConfig := t.TempDir()
		repo := repoFor(env.Registry, ns)
		v1 := repo + ":v1"
		old := pushNew(t, dockerConfig, v1)
		pushNew(t, dockerConfig, repo+":crash1")
		createWeb(t, ns, v1)

		r := runCLI(t, "run", "-n", ns, "--target", "statefulset/web", "--image", "app="+repo+":crash1")
		if r.Code != 1 {
			t.Fatalf("run to a crashing image: %s\nwant exit 1, rolled back", r)
		}
		rolledBack := 0
		for name, p := range webPods(t, ns) {
			if p.image != v1 || p.imageID != repo+"@"+old {
				t.Errorf("pod %s: image %s running %s; want %s running %s@%s", name, p.image, p.imageID, v1, repo, old)
			}
			st := stateOfPod(t, ns, name)
			if st == nil || st.Stage != inplace.StageRolledBack {
				continue
			}
			rolledBack++
			if msg := rollingBackEvent(t, ns, name); strings.Contains(msg, "goes back to") {
				t.Errorf("pod %s: RollingBack Event %q; want no pinned revert while the tag names %s", name, msg, old)
			}
		}
		if rolledBack == 0 {
			t.Errorf("no pod is RolledBack after the failed run: the revert was not exercised\n%s", r)
		}
	})

	t.Run("tag pushed again: back to the digest run and why", func(t *testing.T) {
		ns := env.Namespace(t)
		dockerConfig := t.TempDir()
		repo := repoFor(env.Registry, ns)
		v1 := repo + ":v1"
		old := pushNew(t, dockerConfig, v1)
		pushNew(t, dockerConfig, repo+":v2")
		createWeb(t, ns, v1)
		before := webPods(t, ns)

		var stderr bytes.Buffer
		cmd := clitest.Start(t, env, cli, &stderr, "run", "-n", ns, "--target", "statefulset/web", "--image", "app="+repo+":v2", "--batches", "1,100%", "--soak", "60s")
		first := waitBatchOneUpdated(t, ns)
		moved := pushNew(t, dockerConfig, v1)
		_ = cmd.Process.Signal(syscall.SIGKILL)
		_ = cmd.Wait()

		if r := runCLI(t, "rollback", "-n", ns, "--target", "statefulset/web"); r.Code != 0 {
			t.Fatalf("rollback: %s", r)
		}
		pinned := repo + "@" + old
		for name, p := range webPods(t, ns) {
			want := v1
			if name == first {
				want = pinned
			}
			if p.image != want || p.imageID != repo+"@"+old || p.uid != before[name].uid {
				t.Errorf("pod %s: image %s running %s, UID %s; want the same pod (UID %s) on %s running %s", name, p.image, p.imageID, p.uid, before[name].uid, want, pinned)
			}
		}
		if got := getWeb(t, ns).Spec.Template.Spec.Containers[0].Image; got != v1 {
			t.Errorf("statefulset web: template image %s after the rollback; want %s", got, v1)
		}
		msg := rollingBackEvent(t, ns, first)
		for _, w := range []string{pinned, "names other content now", old} {
			if !strings.Contains(msg, w) {
				t.Errorf("pod %s: RollingBack Event %q; want it to say %q (v1 moved from %s to %s)", first, msg, w, old, moved)
			}
		}
	})
}

func stateOfPod(t *testing.T, ns, name string) *inplace.State {
	t.Helper()
	p, err := env.Client.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("reading pod %s: %v", name, err)
	}
	st, err := inplace.ReadState(p)
	if err != nil {
		t.Fatalf("pod %s: %v", name, err)
	}
	return st
}

func TestPrivateRegistryPinsWithThePodsPullSecret(t *testing.T) {
	host := env.PrivateRegistry
	const wrongPassword = "wrong-Pa55word-5d2e"
	secrets := []string{
		registryAuth.Password, wrongPassword,
		base64.StdEncoding.EncodeToString([]byte(registryAuth.Username + ":" + registryAuth.Password)),
		base64.StdEncoding.EncodeToString([]byte(registryAuth.Username + ":" + wrongPassword)),
	}
	dockerConfig := t.TempDir()
	crane(t, dockerConfig, "auth", "login", host, "-u", registryAuth.Username, "-p", registryAuth.Password)

	// setup creates web on v1 of a repository of its own, pulling with the secret pull, and
	// returns the repository and v2's digest.
	setup := func(t *testing.T, ns string) (string, string) {
		t.Helper()
		repo := repoFor(host, ns)
		pushNew(t, dockerConfig, repo+":v1")
		v2 := pushNew(t, dockerConfig, repo+":v2")
		s := &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "pull"},
			Type:       corev1.SecretTypeDockerConfigJson,
			Data:       map[string][]byte{corev1.DockerConfigJsonKey: dockerConfigJSON(host, registryAuth.Username, registryAuth.Password)},
		}
		if _, err := env.Client.CoreV1().Secrets(ns).Create(context.Background(), s, metav1.CreateOptions{}); err != nil {
			t.Fatalf("creating secret %s/pull: %v", ns, err)
		}
		createWeb(t, ns, repo+":v1", "pull")
		return repo, v2
	}
	// noCredentials fails when a credential appears in the command's output, an Event of the
	// namespace, or an annotation of web or its pods.
	noCredentials := func(t *testing.T, ns string, r clitest.Result) {
		t.Helper()
		where := map[string]string{"stdout": r.Stdout, "stderr": r.Stderr}
		events, err := env.Client.CoreV1().Events(ns).List(context.Background(), metav1.ListOptions{})
		if err != nil {
			t.Fatalf("listing events: %v", err)
		}
		for _, e := range events.Items {
			where["event "+e.Name] = e.Message + " " + e.Reason
		}
		for k, v := range getWeb(t, ns).Annotations {
			where["statefulset annotation "+k] = v
		}
		for _, p := range clitest.ListPods(t, env, ns, "app=web") {
			for k, v := range p.Annotations {
				where["pod "+p.Name+" annotation "+k] = v
			}
		}
		for what, text := range where {
			for _, s := range secrets {
				if strings.Contains(text, s) {
					t.Errorf("%s contains a credential", what)
				}
			}
		}
	}

	t.Run("the pods' secret resolves and pins", func(t *testing.T) {
		ns := env.Namespace(t)
		repo, v2 := setup(t, ns)
		before := webPods(t, ns)
		r := runCLI(t, "run", "-n", ns, "--target", "statefulset/web", "--image", "app="+repo+":v2")
		if r.Code != 0 {
			t.Fatalf("run: %s", r)
		}
		checkOnContent(t, ns, before, repo+":v2@"+v2, repo, v2)
		noCredentials(t, ns, r)
	})

	t.Run("a wrong password in the pods' secret is refused", func(t *testing.T) {
		ns := env.Namespace(t)
		repo, _ := setup(t, ns)
		s, err := env.Client.CoreV1().Secrets(ns).Get(context.Background(), "pull", metav1.GetOptions{})
		if err != nil {
			t.Fatalf("reading secret pull: %v", err)
		}
		s.Data[corev1.DockerConfigJsonKey] = dockerConfigJSON(host, registryAuth.Username, wrongPassword)
		if _, err := env.Client.CoreV1().Secrets(ns).Update(context.Background(), s, metav1.UpdateOptions{}); err != nil {
			t.Fatalf("updating secret pull: %v", err)
		}
		before := webPods(t, ns)
		stsRV := getWeb(t, ns).ResourceVersion

		r := runCLI(t, "run", "-n", ns, "--target", "statefulset/web", "--image", "app="+repo+":v2")
		if r.Code != 2 || !strings.Contains(r.Stderr, host) || !strings.Contains(r.Stderr, "401") {
			t.Errorf("run with a wrong password: %s\nwant exit 2 naming %s and 401", r, host)
		}
		t.Logf("refused: %s", clitest.LastLines(r.Stderr, 3))
		checkUnchanged(t, ns, stsRV, before)
		noCredentials(t, ns, r)
	})
}

func TestRunGoesOnWithAnUnresolvedTagNoPodRuns(t *testing.T) {
	ns := env.Namespace(t)
	dockerConfig := t.TempDir()
	repo := repoFor(env.Registry, ns)
	pushNew(t, dockerConfig, repo+":v1")
	v2 := repo + ":v2"
	digest := pushNew(t, dockerConfig, v2)
	createWeb(t, ns, repo+":v1")
	// Every node pulls v2 now, so that the pods, IfNotPresent, start it with the registry down.
	for i, node := range env.Sim.NodeNames() {
		name := "prepull-" + strconv.Itoa(i)
		createPod(t, ns, name, v2, corev1.PullIfNotPresent, node)
		if id, _ := readyImageID(t, ns, name); id != repo+"@"+digest {
			t.Fatalf("pod %s on %s runs %s; want %s@%s", name, node, id, repo, digest)
		}
	}
	before := webPods(t, ns)
	restart, err := env.StopRegistry(env.Registry)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := restart(); err != nil {
			t.Errorf("serving the registry again: %v", err)
		}
	})

	r := runCLI(t, "run", "-n", ns, "--target", "statefulset/web", "--image", "app="+v2)
	if r.Code != 0 {
		t.Fatalf("run with the registry stopped and no pod on %s: %s", v2, r)
	}
	if n := strings.Count(r.Stderr, "not pinned"); n != 1 || !strings.Contains(r.Stderr, v2) {
		t.Errorf("stderr says %d times that the image is not pinned; want once, naming %s:\n%s", n, v2, r.Stderr)
	}
	for name, a := range webPods(t, ns) {
		b := before[name]
		if a.uid != b.uid || a.image != v2 || a.imageID != repo+"@"+digest || a.restarts != b.restarts+1 {
			t.Errorf("pod %s: UID %s, image %s running %s, restartCount %d -> %d; want UID %s, %s running %s@%s, one restart", name, a.uid, a.image, a.imageID, b.restarts, a.restarts, b.uid, v2, repo, digest)
		}
	}
}
