// Package prepull pulls a batch's images onto its nodes before any of its pods restarts, with no
// node agent: one short-lived puller pod per node, as image pre-pullers do. The pod is bound to
// the node by spec.nodeName and has one container per image; each container runs a tiny static
// binary that an init container copies from this project's own image into an emptyDir, so the
// pulled images need no shell or entrypoint of their own. Once every container has started, the
// node holds every image and the pod exits.
//
// Every fact lives on the pods: their names are derived from the rollout and the node, and their
// labels name the rollout, so a restarted driver finds, judges and removes them again.
package prepull

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"
)

// LabelRollout is the label every puller pod carries: the rollout it pulls for.
const LabelRollout = "inplace-rollout.io/puller"

// LabelNode is the label naming the node a puller pod pulls onto: the node's name when it is a
// valid label value (63 characters at most), else "sha256-" and the first 40 hex digits of the
// SHA-256 of the name, since node names may be up to 253 characters.
const LabelNode = "inplace-rollout.io/puller-node"

// NamePrefix starts the name of every puller pod.
const NamePrefix = "inplace-pull-"

// DefaultDeadline is a puller pod's activeDeadlineSeconds when Options.Deadline is zero.
const DefaultDeadline = 10 * time.Minute

// The puller pod's fixed layout: the binary the init container installs and where.
const (
	volumeName    = "puller"
	mountPath     = "/puller"
	pullerPath    = mountPath + "/puller"
	helperBinary  = "/usr/local/bin/puller"
	nonRootUserID = 65532
)

// Options configure the puller pods.
type Options struct {
	// HelperImage is the image holding the puller binary at /usr/local/bin/puller (this
	// project's own image); required.
	HelperImage string
	// Deadline is the pod's activeDeadlineSeconds [DefaultDeadline].
	Deadline time.Duration
}

// Phase is the progress of one puller pod.
type Phase string

// The phases of a puller pod.
const (
	// Pulling: the images are not all on the node yet.
	Pulling Phase = "Pulling"
	// Pulled: every image is on the node.
	Pulled Phase = "Pulled"
	// Failed: an image cannot be pulled, or the pod failed; the reason says which.
	Failed Phase = "Failed"
)

// Name is the puller pod's name for rollout and node: deterministic, a valid DNS label
// ("inplace-pull-" then a short hash of rolloutID and node), so a second Create is AlreadyExists.
func Name(rolloutID, node string) string {
	sum := sha256.Sum256([]byte(rolloutID + "\x00" + node))
	return NamePrefix + hex.EncodeToString(sum[:])[:16]
}

// nodeLabel is the value of LabelNode for node.
func nodeLabel(node string) string {
	if len(validation.IsValidLabelValue(node)) == 0 {
		return node
	}
	sum := sha256.Sum256([]byte(node))
	return "sha256-" + hex.EncodeToString(sum[:])[:40]
}

// PodFor builds the puller pod for one node: one container per distinct image, in the order
// given, each running the puller binary that the "install" init container copies from
// opts.HelperImage. from are the pods of that node that will restart: their imagePullSecrets
// and tolerations go into the puller, so it pulls with their credentials and lands where they
// run.
func PodFor(ns, rolloutID, node string, images []string, from []*corev1.Pod, opts Options) *corev1.Pod {
	deadline := opts.Deadline
	if deadline <= 0 {
		deadline = DefaultDeadline
	}
	resources := corev1.ResourceRequirements{
		Requests: corev1.ResourceList{
			corev1.ResourceCPU:    resource.MustParse("1m"),
			corev1.ResourceMemory: resource.MustParse("8Mi"),
		},
		// Limits too, so that a namespace whose quota covers limits admits the pod.
		Limits: corev1.ResourceList{
			corev1.ResourceCPU:    resource.MustParse("50m"),
			corev1.ResourceMemory: resource.MustParse("32Mi"),
		},
	}
	security := &corev1.SecurityContext{
		RunAsNonRoot:             ptr(true),
		RunAsUser:                ptr(int64(nonRootUserID)),
		AllowPrivilegeEscalation: ptr(false),
		Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
		SeccompProfile:           &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: ns,
			Name:      Name(rolloutID, node),
			Labels:    map[string]string{LabelRollout: rolloutID, LabelNode: nodeLabel(node)},
		},
		Spec: corev1.PodSpec{
			NodeName:                      node,
			RestartPolicy:                 corev1.RestartPolicyNever,
			ActiveDeadlineSeconds:         ptr(int64((deadline + time.Second - 1) / time.Second)),
			TerminationGracePeriodSeconds: ptr(int64(0)),
			AutomountServiceAccountToken:  ptr(false),
			EnableServiceLinks:            ptr(false),
			SecurityContext: &corev1.PodSecurityContext{
				RunAsNonRoot:   ptr(true),
				RunAsUser:      ptr(int64(nonRootUserID)),
				RunAsGroup:     ptr(int64(nonRootUserID)),
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
			},
			Volumes: []corev1.Volume{{
				Name:         volumeName,
				VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{SizeLimit: ptr(resource.MustParse("32Mi"))}},
			}},
			InitContainers: []corev1.Container{{
				Name:            "install",
				Image:           opts.HelperImage,
				ImagePullPolicy: corev1.PullIfNotPresent,
				Command:         []string{helperBinary, "install", pullerPath},
				VolumeMounts:    []corev1.VolumeMount{{Name: volumeName, MountPath: mountPath}},
				Resources:       *resources.DeepCopy(),
				SecurityContext: security.DeepCopy(),
			}},
		},
	}
	for i, img := range distinct(images) {
		pod.Spec.Containers = append(pod.Spec.Containers, corev1.Container{
			Name:            fmt.Sprintf("pull-%d", i),
			Image:           img,
			ImagePullPolicy: corev1.PullIfNotPresent,
			Command:         []string{pullerPath},
			VolumeMounts:    []corev1.VolumeMount{{Name: volumeName, MountPath: mountPath, ReadOnly: true}},
			Resources:       *resources.DeepCopy(),
			SecurityContext: security.DeepCopy(),
		})
	}
	pod.Spec.ImagePullSecrets, pod.Spec.Tolerations = pullSecretsAndTolerations(from)
	return pod
}

// pullSecretsAndTolerations are the distinct image pull secrets and tolerations of the pods
// from: a puller pulls with their credentials and lands where they run.
func pullSecretsAndTolerations(from []*corev1.Pod) (secrets []corev1.LocalObjectReference, tolerations []corev1.Toleration) {
	for _, p := range from {
		for _, s := range p.Spec.ImagePullSecrets {
			if !containsSecret(secrets, s.Name) {
				secrets = append(secrets, s)
			}
		}
		for _, tol := range p.Spec.Tolerations {
			if !containsToleration(tolerations, tol) {
				tolerations = append(tolerations, *tol.DeepCopy())
			}
		}
	}
	return secrets, tolerations
}

func distinct(images []string) []string {
	var out []string
	seen := map[string]bool{}
	for _, img := range images {
		if !seen[img] {
			seen[img] = true
			out = append(out, img)
		}
	}
	return out
}

func containsSecret(refs []corev1.LocalObjectReference, name string) bool {
	for _, r := range refs {
		if r.Name == name {
			return true
		}
	}
	return false
}

func containsToleration(tols []corev1.Toleration, t corev1.Toleration) bool {
	for _, have := range tols {
		if equality.Semantic.DeepEqual(have, t) {
			return true
		}
	}
	return false
}

// pullFailures are the Waiting reasons of a container whose image cannot be pulled.
var pullFailures = map[string]bool{
	"ErrImagePull":        true,
	"ImagePullBackOff":    true,
	"InvalidImageName":    true,
	"ErrImageNeverPull":   true,
	"RegistryUnavailable": true,
}

// Judge tells a puller pod's progress from its status alone. Pulled: the pod Succeeded, or
// every main container has started (running, or terminated with exit code 0), so every image is
// on the node. Failed: a container (the init container too) waits on a failed pull, or the pod
// Failed (deadline exceeded, evicted ...); the reason says which, naming the image and node.
// Else Pulling.
func Judge(p *corev1.Pod) (Phase, string) {
	node := p.Spec.NodeName
	switch p.Status.Phase {
	case corev1.PodSucceeded:
		return Pulled, ""
	case corev1.PodFailed:
		reason := p.Status.Reason
		if reason == "" {
			reason = "Failed"
		}
		msg := fmt.Sprintf("puller pod %s on node %s failed: %s", p.Name, node, reason)
		if p.Status.Message != "" {
			msg += ": " + p.Status.Message
		}
		return Failed, msg
	}
	specImage := map[string]string{}
	for _, c := range append(append([]corev1.Container(nil), p.Spec.InitContainers...), p.Spec.Containers...) {
		specImage[c.Name] = c.Image
	}
	for _, st := range append(append([]corev1.ContainerStatus(nil), p.Status.InitContainerStatuses...), p.Status.ContainerStatuses...) {
		if w := st.State.Waiting; w != nil && pullFailures[w.Reason] {
			img := specImage[st.Name]
			if img == "" {
				img = st.Image
			}
			return Failed, fmt.Sprintf("pulling %s on node %s: %s: %s", img, node, w.Reason, w.Message)
		}
	}
	started := map[string]bool{}
	for _, st := range p.Status.ContainerStatuses {
		if st.State.Running != nil || (st.State.Terminated != nil && st.State.Terminated.ExitCode == 0) {
			started[st.Name] = true
		}
	}
	for _, c := range p.Spec.Containers {
		if !started[c.Name] {
			return Pulling, ""
		}
	}
	if len(p.Spec.Containers) == 0 {
		return Pulling, ""
	}
	return Pulled, ""
}

// Ensure creates the puller pods missing for the nodes of byNode (one Create each; AlreadyExists
// is fine) given those that exist (existing: listed by the caller with LabelRollout=rolloutID)
// and returns the phase of each node's puller, and the reason of each Failed one. A node whose
// pod was just created is Pulling. byNode holds the pods of each node that will restart: their
// pull secrets and tolerations go into the puller. A failed Create leaves that node out of the
// phases and is in the returned error, which names the pod and node.
func Ensure(ctx context.Context, client kubernetes.Interface, ns, rolloutID string, images []string,
	byNode map[string][]*corev1.Pod, existing []corev1.Pod, opts Options) (map[string]Phase, map[string]string, error) {
	if opts.HelperImage == "" {
		return nil, nil, errors.New("pre-pull: no helper image: the image holding /usr/local/bin/puller must be given")
	}
	if len(distinct(images)) == 0 {
		return nil, nil, errors.New("pre-pull: no images to pull")
	}
	have := map[string]*corev1.Pod{}
	for i := range existing {
		p := &existing[i]
		if p.Labels[LabelRollout] == rolloutID && p.Name == Name(rolloutID, p.Spec.NodeName) {
			have[p.Spec.NodeName] = p
		}
	}
	nodes := make([]string, 0, len(byNode))
	for n := range byNode {
		nodes = append(nodes, n)
	}
	sort.Strings(nodes)
	phases, reasons := map[string]Phase{}, map[string]string{}
	var errs []error
	for _, node := range nodes {
		if p := have[node]; p != nil {
			phase, reason := Judge(p)
			phases[node] = phase
			if phase == Failed {
				reasons[node] = reason
			}
			continue
		}
		pod := PodFor(ns, rolloutID, node, images, byNode[node], opts)
		_, err := client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			errs = append(errs, fmt.Errorf("creating puller pod %s/%s for node %s: %w", ns, pod.Name, node, err))
			continue
		}
		phases[node] = Pulling
	}
	return phases, reasons, errors.Join(errs...)
}

// List lists the puller pods of ns: those of rolloutID, or of every rollout when it is "".
func List(ctx context.Context, client kubernetes.Interface, ns, rolloutID string) ([]corev1.Pod, error) {
	selector := LabelRollout
	what := "every rollout"
	if rolloutID != "" {
		selector = LabelRollout + "=" + rolloutID
		what = "rollout " + rolloutID
	}
	list, err := client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		return nil, fmt.Errorf("listing the puller pods of %s in namespace %s: %w", what, ns, err)
	}
	return list.Items, nil
}

// Cleanup deletes the puller pods in ns of every rollout but keep ("" deletes all) and returns
// how many it deleted. Each delete carries the pod's UID as a precondition, so a pod created
// since under the same name is left alone, and a grace period of 0: the puller holds nothing.
func Cleanup(ctx context.Context, client kubernetes.Interface, ns, keep string) (int, error) {
	pods, err := List(ctx, client, ns, "")
	if err != nil {
		return 0, err
	}
	var gone []corev1.Pod
	for _, p := range pods {
		if keep == "" || p.Labels[LabelRollout] != keep {
			gone = append(gone, p)
		}
	}
	return Delete(ctx, client, gone)
}

// Remove deletes the puller pods in ns of the rollouts named, and returns how many it deleted.
func Remove(ctx context.Context, client kubernetes.Interface, ns string, rolloutIDs ...string) (int, error) {
	if len(rolloutIDs) == 0 {
		return 0, nil
	}
	selector := fmt.Sprintf("%s in (%s)", LabelRollout, strings.Join(rolloutIDs, ","))
	list, err := client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		return 0, fmt.Errorf("listing the puller pods of rollouts %s in namespace %s: %w", strings.Join(rolloutIDs, ", "), ns, err)
	}
	return Delete(ctx, client, list.Items)
}

// Delete deletes puller pods at once (no grace period), each with a UID precondition so that a
// pod recreated under the same name is left for the next look; pods already being deleted are
// skipped. It returns how many it deleted.
func Delete(ctx context.Context, client kubernetes.Interface, pods []corev1.Pod) (int, error) {
	deleted := 0
	var errs []error
	for i := range pods {
		p := &pods[i]
		if p.DeletionTimestamp != nil {
			continue
		}
		err := client.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{
			GracePeriodSeconds: ptr(int64(0)),
			Preconditions:      &metav1.Preconditions{UID: &p.UID},
		})
		switch {
		case err == nil:
			deleted++
		case apierrors.IsNotFound(err), apierrors.IsConflict(err):
			// Gone already, or replaced by a pod the next look judges.
		default:
			errs = append(errs, fmt.Errorf("deleting puller pod %s/%s on node %s: %w", p.Namespace, p.Name, p.Spec.NodeName, err))
		}
	}
	return deleted, errors.Join(errs...)
}

func ptr[T any](v T) *T { return &v }
