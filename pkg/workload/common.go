package workload

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"

	"github.com/inplace-rollout/inplace-rollout/pkg/inplace"
)

// objectPatch is a strategic-merge patch of a workload object carrying the resourceVersion it
// was computed from.
type objectPatch struct {
	resourceVersion string
	lock            string // the lock annotation; none when empty
	spec            map[string]any
}

func (p objectPatch) bytes() []byte {
	meta := map[string]any{"resourceVersion": p.resourceVersion}
	if p.lock != "" {
		meta["annotations"] = map[string]any{LockAnnotation: p.lock}
	}
	body := map[string]any{"metadata": meta}
	if len(p.spec) > 0 {
		body["spec"] = p.spec
	}
	data, err := json.Marshal(body)
	if err != nil {
		panic(fmt.Sprintf("encoding workload patch: %v", err))
	}
	return data
}

// templatePatch sets the template's container images and resources by name: of the resources,
// only the values ch names (a strategic-merge patch merges each container's requests and
// limits by key), and only where they differ by quantity.
func templatePatch(tmpl *corev1.PodTemplateSpec, ch Change) map[string]any {
	spec := map[string]any{}
	add := func(field string, containers []corev1.Container) {
		var entries []map[string]any
		for _, c := range containers {
			entry := map[string]any{}
			if img, ok := ch.Images[c.Name]; ok && !inplace.SameImage(img, c.Image) {
				entry["image"] = img
			}
			if r, ok := ch.Resources[c.Name]; ok && !inplace.HasResources(c.Resources, r) {
				res := map[string]any{}
				if len(r.Requests) > 0 {
					res["requests"] = r.Requests
				}
				if len(r.Limits) > 0 {
					res["limits"] = r.Limits
				}
				entry["resources"] = res
			}
			if len(entry) > 0 {
				entry["name"] = c.Name
				entries = append(entries, entry)
			}
		}
		if len(entries) > 0 {
			spec[field] = entries
		}
	}
	add("initContainers", tmpl.Spec.InitContainers)
	add("containers", tmpl.Spec.Containers)
	return map[string]any{"spec": spec}
}

// TemplateImages returns the template's images for the named containers.
func TemplateImages(tmpl *corev1.PodTemplateSpec, names map[string]string) map[string]string {
	out := map[string]string{}
	for _, list := range [][]corev1.Container{tmpl.Spec.InitContainers, tmpl.Spec.Containers} {
		for _, c := range list {
			if _, ok := names[c.Name]; ok {
				out[c.Name] = c.Image
			}
		}
	}
	return out
}

// TemplateHasImages reports whether the template's containers named in images run them, however
// each reference is spelled.
func TemplateHasImages(tmpl *corev1.PodTemplateSpec, images map[string]string) bool {
	for name, img := range TemplateImages(tmpl, images) {
		if !inplace.SameImage(images[name], img) {
			return false
		}
	}
	return true
}

// Foreign returns the template's images and resources of the rollout's containers (ch, its
// target) when someone other than the rollout changed them while its lock held the workload,
// else nil. The rollout's own template is its target for a StatefulSet or DaemonSet (written
// when it starts) and, for a Deployment, what the lock records as previous until it finishes
// (then the target, which a rollback of the finished rollout starts from).
func Foreign(w Observed, ch Change) *Change {
	tmpl := w.Template()
	if tmpl == nil || ch.IsZero() || TemplateHas(tmpl, ch) {
		return nil
	}
	if d, ok := w.(*deployment); ok && d.lock != nil && TemplateHas(tmpl, d.lock.PreviousChange()) {
		return nil
	}
	have := TemplateChange(tmpl, ch)
	return &have
}

// RunsImages reports whether the pod spec runs these images, however each reference is spelled.
func RunsImages(pod *corev1.Pod, images map[string]string) bool {
	for _, list := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for _, c := range list {
			if img, ok := images[c.Name]; ok && !inplace.SameImage(img, c.Image) {
				return false
			}
		}
	}
	return true
}

func hasLabels(pod *corev1.Pod, labels map[string]string) bool {
	for k, v := range labels {
		if pod.Labels[k] != v {
			return false
		}
	}
	return true
}

// selectorOf converts a workload's selector; one the API server accepted always converts, and
// any other selects nothing.
func selectorOf(s *metav1.LabelSelector) labels.Selector {
	sel, err := metav1.LabelSelectorAsSelector(s)
	if err != nil {
		return labels.Nothing()
	}
	return sel
}

// ownedPods lists the pods matching selector that ownerUID controls.
func ownedPods(ctx context.Context, lister PodLister, ns string, selector *metav1.LabelSelector, ownerUID types.UID) ([]*corev1.Pod, error) {
	sel, err := metav1.LabelSelectorAsSelector(selector)
	if err != nil {
		return nil, fmt.Errorf("parsing selector: %w", err)
	}
	list, err := lister.ListPods(ctx, ns, sel)
	if err != nil {
		return nil, err
	}
	var pods []*corev1.Pod
	for _, p := range list {
		if ref := metav1.GetControllerOfNoCopy(p); ref != nil && ref.UID == ownerUID && active(p) {
			pods = append(pods, p)
		}
	}
	return pods, nil
}

// active reports whether a pod can still run: one that has Failed (evicted, say) or Succeeded
// stays only as a record, and its controller has replaced it, as the controllers count pods.
func active(p *corev1.Pod) bool {
	return p.Status.Phase != corev1.PodFailed && p.Status.Phase != corev1.PodSucceeded
}

func sortByName(pods []*corev1.Pod) {
	sort.Slice(pods, func(i, j int) bool { return pods[i].Name < pods[j].Name })
}

// ordinal is a StatefulSet pod's ordinal, the number its name ends with, or -1.
func ordinal(p *corev1.Pod) int {
	i := strings.LastIndexByte(p.Name, '-')
	n, err := strconv.Atoi(p.Name[i+1:])
	if err != nil {
		return -1
	}
	return n
}

// byOrdinalDesc returns the StatefulSet pods whose ordinals are in [from, to), highest first, as
// its controller updates. Each name is parsed once: a sort that parsed both names at every
// comparison was 6% of a rollout's CPU at 5,000 pods.
func byOrdinalDesc(pods []*corev1.Pod, from, to int) []*corev1.Pod {
	type numbered struct {
		n   int
		pod *corev1.Pod
	}
	in := make([]numbered, 0, len(pods))
	for _, p := range pods {
		if n := ordinal(p); n >= from && n < to {
			in = append(in, numbered{n, p})
		}
	}
	slices.SortFunc(in, func(a, b numbered) int { return cmp.Compare(b.n, a.n) })
	out := make([]*corev1.Pod, len(in))
	for i, x := range in {
		out[i] = x.pod
	}
	return out
}

// CheckChange refuses a change that names a container the workload's template (or, for
// label-selected pods, a pod) lacks, an init container without includeInit, an invalid image, or
// resources that cannot be set in place (inplace.CheckResources). A change of resources alone
// checks no images.
func CheckChange(w Observed, ch Change, includeInit bool) error {
	if len(ch.Images) > 0 || len(ch.Resources) == 0 {
		if tmpl := w.Template(); tmpl != nil {
			if err := checkImages(w.Ref(), tmpl, ch.Images, includeInit); err != nil {
				return err
			}
		} else {
			for _, pod := range w.Pods() {
				if err := inplace.CheckImages(pod.Spec, ch.Images, includeInit); err != nil {
					return &InvalidError{Msg: fmt.Sprintf("pod %s/%s: %v", pod.Namespace, pod.Name, err)}
				}
			}
		}
	}
	return checkResources(w, ch.Resources)
}

// CheckKeep refuses a workload whose init containers named in keep do not run the images keep
// gives them: in its template, or in each pod for label-selected pods. A rollout leaves those
// containers alone, so its success would hide that they run other images than asked.
func CheckKeep(w Observed, keep map[string]string) error {
	if len(keep) == 0 {
		return nil
	}
	if tmpl := w.Template(); tmpl != nil {
		return checkKeep(w.Ref().String(), tmpl.Spec, keep)
	}
	for _, pod := range w.Pods() {
		if err := checkKeep("pod "+pod.Namespace+"/"+pod.Name, pod.Spec, keep); err != nil {
			return err
		}
	}
	return nil
}

func checkKeep(who string, spec corev1.PodSpec, keep map[string]string) error {
	for _, name := range slices.Sorted(maps.Keys(keep)) {
		want := keep[name]
		i := slices.IndexFunc(spec.InitContainers, func(c corev1.Container) bool { return c.Name == name })
		if i < 0 {
			return &InvalidError{Msg: fmt.Sprintf("%s has no init container %q, which the pod template the images come from runs on %s: a rollout changes the containers a workload has; remove it from that template, or add it to %s", who, name, want, who)}
		}
		if have := spec.InitContainers[i].Image; !inplace.SameImage(have, want) {
			return &InvalidError{Msg: fmt.Sprintf("%s: init container %q runs %s, and the pod template the images come from gives it %s, which the rollout would leave undone: an init container runs once when a pod starts, so its image changes in place only when init containers are included (includeInit); include them, and the new image takes effect when each pod next starts, or put %s back in that template",
				who, name, have, want, have)}
		}
	}
	return nil
}

func checkImages(ref Ref, tmpl *corev1.PodTemplateSpec, images map[string]string, includeInit bool) error {
	if err := inplace.CheckImages(tmpl.Spec, images, includeInit); err != nil {
		return &InvalidError{Msg: fmt.Sprintf("%s: %v", ref, err)}
	}
	return nil
}

// strategyJSON encodes an update strategy for the lock.
func strategyJSON(v any) json.RawMessage {
	data, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("encoding update strategy: %v", err))
	}
	return data
}

// restoreStrategy is the patch value that puts back a recorded update strategy in full:
// rollingUpdate is cleared when the original had none.
func restoreStrategy(raw json.RawMessage) (map[string]any, error) {
	var orig map[string]any
	if err := json.Unmarshal(raw, &orig); err != nil {
		return nil, fmt.Errorf("decoding the recorded update strategy: %w", err)
	}
	if orig == nil {
		// JSON null decodes without an error into no map at all.
		return nil, errors.New("decoding the recorded update strategy: it is null, not an update strategy")
	}
	if _, ok := orig["rollingUpdate"]; !ok {
		orig["rollingUpdate"] = nil
	}
	return orig, nil
}

// objectVersion is what a lock-only write depends on in a workload object: its spec (the
// generation) and its lock annotation.
type objectVersion struct {
	resourceVersion string
	generation      int64
	lock            string
}

func versionOf(meta metav1.Object) objectVersion {
	return objectVersion{resourceVersion: meta.GetResourceVersion(), generation: meta.GetGeneration(), lock: meta.GetAnnotations()[LockAnnotation]}
}

// writeLock writes the lock alone, if the object's generation and lock are still those
// observed. With a lock observed, it is one JSON patch (RFC 6902) whose test operations the
// server checks as it applies the patch: a write of the object's status, labels or other
// annotations in between (the controller's, as the pods change) lets it through, where a
// resourceVersion precondition would conflict, the more often the busier the controller. A test
// that fails comes back as Invalid; the object read again tells it from a patch refused for
// another reason, and a changed object is returned as a conflict, for the caller to decide again.
// With no lock observed there is nothing to test: it is a strategic-merge patch written with
// writeIfUnchanged.
func writeLock(ctx context.Context, ref Ref, observed objectVersion, record string, read func(context.Context) (objectVersion, error), write func(context.Context, types.PatchType, []byte) error) error {
	if observed.lock == "" {
		return writeIfUnchanged(ctx, observed, objectPatch{lock: record}, read, write)
	}
	err := write(ctx, types.JSONPatchType, lockPatch(observed, record))
	if !apierrors.IsInvalid(err) {
		return err
	}
	if changed, rerr := changedSince(ctx, observed, read); rerr != nil || changed {
		if rerr != nil {
			return rerr
		}
		return apierrors.NewConflict(ref.Kind.resource(), ref.Name, errors.New("its spec or lock changed since it was read"))
	}
	return err
}

// changedSince reads the object again and reports whether its spec (its generation) or its lock
// changed since observed.
func changedSince(ctx context.Context, observed objectVersion, read func(context.Context) (objectVersion, error)) (bool, error) {
	now, err := read(ctx)
	if err != nil {
		return false, err
	}
	return now.generation != observed.generation || now.lock != observed.lock, nil
}

// resource is the apps/v1 resource of a workload kind with an object: statefulsets.apps for
// StatefulSet.
func (k Kind) resource() schema.GroupResource {
	return schema.GroupResource{Group: "apps", Resource: strings.ToLower(string(k)) + "s"}
}

// lockPatch replaces the lock annotation, testing first that the generation and the lock are
// those observed.
func lockPatch(observed objectVersion, record string) []byte {
	path := "/metadata/annotations/" + strings.NewReplacer("~", "~0", "/", "~1").Replace(LockAnnotation)
	data, err := json.Marshal([]map[string]any{
		{"op": "test", "path": "/metadata/generation", "value": observed.generation},
		{"op": "test", "path": path, "value": observed.lock},
		{"op": "replace", "path": path, "value": record},
	})
	if err != nil {
		panic(fmt.Sprintf("encoding the lock patch: %v", err))
	}
	return data
}

// writeIfUnchanged writes p, a patch computed from the object as observed, with the
// resourceVersion observed. On a conflict it reads the object again and, when neither its spec
// (its generation) nor its lock changed, writes again with the new resourceVersion: the conflict
// came from a write of its status, labels or other annotations (the controller's, as the pods
// change), which leaves p as right as it was. Any other change returns the conflict, for the
// caller to decide again.
func writeIfUnchanged(ctx context.Context, observed objectVersion, p objectPatch, read func(context.Context) (objectVersion, error), write func(context.Context, types.PatchType, []byte) error) error {
	p.resourceVersion = observed.resourceVersion
	changed := false
	return retry.OnError(retry.DefaultRetry, func(err error) bool { return !changed && apierrors.IsConflict(err) }, func() error {
		err := write(ctx, types.StrategicMergePatchType, p.bytes())
		if !apierrors.IsConflict(err) {
			return err
		}
		now, rerr := read(ctx)
		if rerr != nil {
			return rerr
		}
		if changed = now.generation != observed.generation || now.lock != observed.lock; changed {
			return err
		}
		p.resourceVersion = now.resourceVersion
		return err
	})
}

// objectRef is what an Event about the apps/v1 object of kind, as observed, regards.
func objectRef(kind Kind, meta *metav1.ObjectMeta) corev1.ObjectReference {
	return corev1.ObjectReference{Kind: string(kind), APIVersion: "apps/v1", Namespace: meta.Namespace, Name: meta.Name,
		UID: meta.UID, ResourceVersion: meta.ResourceVersion}
}
