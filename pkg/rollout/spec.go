package rollout

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/distribution/reference"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/inplace-rollout/inplace-rollout/analysis"
	"github.com/inplace-rollout/inplace-rollout/pkg/badinput"
	"github.com/inplace-rollout/inplace-rollout/pkg/inplace"
	"github.com/inplace-rollout/inplace-rollout/pkg/workload"
)

// Spec is what a rollout does. The CLI builds it from flags; the Argo step plugin and the
// Tekton custom task from their configuration.
type Spec struct {
	// Target is the workload; its namespace is the caller's.
	Target workload.Ref
	// Images maps container names to their new images.
	Images map[string]string
	// Resources maps container names (containers and native sidecars) to the CPU and memory
	// requests and limits they get, beside or instead of Images: each pod's are changed through
	// its resize subresource, before its images, and the template gets them as it gets the
	// images. Only values the containers already declare change.
	Resources map[string]inplace.Resources
	// Hooks run around each pod's change and its revert (inplace.Hooks): an HTTP call to the pod
	// through the API server's pod proxy, or a handshake on a pod condition. They are not part of
	// the hash: a rollout resumed with other hooks goes on, and each pod keeps the hooks its
	// update started with.
	Hooks *inplace.Hooks
	// IncludeInit lets Images name init containers other than native sidecars (init containers
	// with restartPolicy Always), which Images may always name.
	IncludeInit bool
	// Keep maps init containers the rollout leaves alone to the images they must already run:
	// a driver that reads Images from a pod template (Argo's fromRollout) puts there the init
	// containers it read without IncludeInit. A workload whose container runs another image is
	// refused, rather than the rollout reporting done with the difference left behind.
	Keep map[string]string
	// Batches are cumulative pod counts or percentages, strictly increasing, the last 100%.
	Batches []intstr.IntOrString
	// UpTo is the hold point (count or percentage of the pods, above 0): the rollout stops
	// there once that many pods are updated and their batch passed its analysis, reports phase
	// Holding and keeps the workload held. The same spec with a higher UpTo, or none, goes on.
	// nil means every pod.
	UpTo *intstr.IntOrString
	// MaxUnavailable is how many pods of the workload may be down at once because of the
	// rollout (count or percentage, above 0; a percentage that rounds down to no pod means 1).
	// Every pod the rollout updates counts, and so does any other pod that is not Ready (being
	// deleted, missing, pending, recreated and not Ready yet), except one that was already not
	// Ready when the rollout started, or is failing as it did before its update: those are not
	// the rollout's doing, and waiting for them would stall it for good.
	MaxUnavailable intstr.IntOrString
	// GracePeriod is the wait between draining a pod (readiness gate False) and its restart.
	GracePeriod time.Duration
	// Soak is how long a complete batch waits before its analysis and the next batch; a pod of
	// the batch that crashes or restarts meanwhile fails the rollout.
	Soak time.Duration
	// Timeout is the progress deadline, above 0: a pod that makes no progress for this long
	// fails, and so does a batch whose next pods cannot start for this long.
	Timeout time.Duration
	// AllowUnready starts even when pods are not Ready.
	AllowUnready bool
	// AllowOwned lets label-selected pods (target Pods) include pods a controller owns, which
	// it may recreate from its own, old template.
	AllowOwned bool
	// Holder names who runs the rollout: cli, argo:NS/NAME, tekton:NS/NAME.
	Holder string
	// HolderUID is the UID of the object Holder names, when it names one: a lock of an earlier
	// object of that name (deleted, then created again) is not this holder's.
	HolderUID types.UID
	// TakeOver makes this holder the holder of a rollout another holder left, when that holder
	// no longer exists: a person's explicit choice, never a driver's default.
	TakeOver bool
	// Supersede replaces a rollout of the same holder to other images that is in flight.
	Supersede bool
	// Analysis gates every batch on Prometheus; nil runs no analysis.
	Analysis *analysis.Config
	// CallerCredentials lets the analysis take credentials the caller holds: from files named in
	// its config, and written in it inline. Only a spec from the command line may: a driver
	// serving other people's rollouts would read the file from its own filesystem, where its own
	// credentials live, and an inline credential sits in an object (a Rollout, a CustomRun) that
	// everyone who may read that object reads, where a Secret would be read by fewer.
	CallerCredentials bool
	// PrometheusURL overrides Analysis.Prometheus.Address.
	PrometheusURL string
	// OnInconclusive is what an inconclusive analysis does: fail (roll back), pause (wait for a
	// person) or continue [pause].
	OnInconclusive string
	// PinDigests says whether target tags are resolved to digests through their registry and
	// pods patched to TAG@DIGEST: auto (when resolvable, else the tag, said once), always
	// (refuse when not) or never [auto].
	PinDigests string
	// PrePull pulls a batch's new images onto its nodes, one puller pod per node, before any pod
	// of the batch restarts.
	PrePull bool
	// TemplateOwned says the workload's template is its owner's (a GitOps tool applies it from
	// Git): the rollout brings the pods to that template in place and writes nothing on the
	// workload but its lock, never its spec (see workload.Owned); a rollback reverts the pods
	// and leaves the template. Images must be the template's, and are never pinned to digests:
	// the pods run them as the owner spelled them. StatefulSets and DaemonSets only.
	TemplateOwned bool
	// Labels and Annotations are set on each pod in the same write as its images, and put back
	// by a rollback; an empty value removes the key. With TemplateOwned only: the revision
	// labels of the template revision the driver rolls to, and the labels and annotations that
	// revision changed.
	Labels, Annotations map[string]string
	// Rerun says the caller asks for the rollout anew (a command run) rather than calling again
	// for one it drives (the Argo plugins call at every reconcile of a Rollout): a rollout of the
	// same spec that succeeded pinned to digests starts again when a tag now names other content.
	Rerun bool
}

// Digest pinning modes.
const (
	PinAuto   = "auto"
	PinAlways = "always"
	PinNever  = "never"
)

// What an inconclusive analysis does.
const (
	InconclusiveFail     = "fail"
	InconclusivePause    = "pause"
	InconclusiveContinue = "continue"
)

// InvalidError is bad input: the rollout cannot run as asked, and nothing was written. It is the
// one type of bad input, whichever package finds it (see badinput).
type InvalidError = badinput.InvalidError

func invalid(format string, args ...any) error {
	return &InvalidError{Msg: fmt.Sprintf(format, args...)}
}

// Fix names what a person can do about bad input besides what the message says: a choice that
// lets it through, a setting it lacks, a repair. A driver maps it to its own flag, field or
// command, so the engine's messages name none.
type Fix = badinput.Fix

// Fixes.
const (
	// FixAllowUnready: start although some pods are not Ready.
	FixAllowUnready = badinput.FixAllowUnready
	// FixSupersede: replace the holder's rollout in flight to other images with this one.
	FixSupersede = badinput.FixSupersede
	// FixAllowOwned: update label-selected pods that a controller owns anyway.
	FixAllowOwned = badinput.FixAllowOwned
	// FixPrometheusAddress: give the address of the Prometheus the analysis queries.
	FixPrometheusAddress = badinput.FixPrometheusAddress
	// FixStateAnnotation: a pod's state annotation cannot be read; it must be restored or
	// removed before anything is written.
	FixStateAnnotation = badinput.FixStateAnnotation
	// FixPinNever: pods already run a target tag that cannot be resolved; turning digest pinning
	// off judges them by the tag alone.
	FixPinNever = badinput.FixPinNever
	// FixTakeOver: another holder's rollout holds the workload; once that holder no longer
	// exists, taking the lock over lets this caller roll it back or supersede it.
	FixTakeOver = badinput.FixTakeOver
)

// Rollback is the rollback of the spec's rollout at the rollout's own pace (its max-unavailable,
// grace period and progress deadline), by its holder, leaving a template someone else changed as
// it is: how a rollout that fails rolls itself back, and how a driver asked to undo it does.
func (s Spec) Rollback() RollbackSpec {
	return RollbackSpec{Target: s.Target, Holder: s.Holder, HolderUID: s.HolderUID, MaxUnavailable: s.MaxUnavailable, GracePeriod: s.GracePeriod, Timeout: s.Timeout}
}

// Validate checks the spec without looking at the cluster.
func (s Spec) Validate() error {
	if err := checkTarget(s.Target); err != nil {
		return err
	}
	if _, err := resolveMaxUnavailable(s.MaxUnavailable, 100); err != nil {
		return err
	}
	if s.GracePeriod < 0 || s.Soak < 0 || s.Timeout < 0 {
		return invalid("grace, soak and timeout cannot be negative")
	}
	if err := checkTimeout(s.Timeout); err != nil {
		return err
	}
	if len(s.Images) == 0 && len(s.Resources) == 0 {
		return invalid("nothing to change: give at least one CONTAINER=IMAGE, or container resources")
	}
	if err := inplace.CheckResourceValues(s.Resources); err != nil {
		return invalid("%v", err)
	}
	if err := inplace.CheckHooks("hooks", s.Hooks); err != nil {
		return invalid("%v", err)
	}
	for name, img := range s.Images {
		if name == "" {
			return invalid("image %q has no container name: use CONTAINER=IMAGE", img)
		}
		if _, err := reference.ParseNormalizedNamed(img); err != nil || strings.TrimSpace(img) != img {
			return invalid("image %q for container %q is not a valid image reference", img, name)
		}
	}
	if err := CheckBatches(s.Batches); err != nil {
		return err
	}
	if _, err := resolveUpTo(s.UpTo, 100); err != nil {
		return err
	}
	switch s.OnInconclusive {
	case "", InconclusiveFail, InconclusivePause, InconclusiveContinue:
	default:
		return invalid("on-inconclusive %q: use fail, pause or continue", s.OnInconclusive)
	}
	switch s.PinDigests {
	case "", PinAuto, PinAlways, PinNever:
	default:
		return invalid("pin-digests %q: use auto, always or never", s.PinDigests)
	}
	if s.Analysis != nil {
		// A driver's spec embeds its analysis rather than reading it through analysis.Decode, so
		// it is checked here: an Authorization header or a password in the address would
		// otherwise pass, in an object others read, until a batch queried Prometheus.
		if err := s.Analysis.Validate(); err != nil {
			return &InvalidError{Msg: err.Error()}
		}
	}
	if s.Analysis != nil && !s.CallerCredentials {
		if files := s.Analysis.Prometheus.Files(); len(files) > 0 {
			return invalid("analysis.%s: a file would be read from the filesystem of the driver, which holds the driver's own credentials; give the credential as a key of a Secret in the rollout's namespace (%s) instead",
				files[0], secretFieldFor(files[0]))
		}
		// The value is never quoted: the message goes where the spec's readers see it.
		if inline := s.Analysis.Prometheus.Inline(); len(inline) > 0 {
			return invalid("analysis.%s: a credential written in the spec can be read by everyone who can read the object that carries it; put it in a Secret in namespace %s and name its key in analysis.%s instead",
				inline[0], s.Target.Namespace, secretFieldFor(inline[0]))
		}
	}
	if s.Analysis != nil && s.Analysis.Prometheus.Address == "" && s.PrometheusURL == "" {
		return &InvalidError{Msg: "analysis needs a Prometheus address", Fix: FixPrometheusAddress}
	}
	if s.PrometheusURL != "" {
		if err := analysis.CheckAddress(s.PrometheusURL); err != nil {
			return invalid("prometheus address override: %v", err)
		}
	}
	return s.checkOwned()
}

// ownAnnotations begins the annotations this project writes on pods and workloads.
const ownAnnotations = "inplace-rollout.io/"

// checkOwned checks what a rollout to the workload's own template adds to a spec: the kinds it
// drives, no digests, and labels and annotations a pod can carry, none of them ours.
func (s Spec) checkOwned() error {
	if !s.TemplateOwned {
		if len(s.Labels) > 0 || len(s.Annotations) > 0 {
			return invalid("labels and annotations are set on pods only by a rollout to the workload's own template")
		}
		return nil
	}
	if s.Target.Kind != workload.StatefulSet && s.Target.Kind != workload.DaemonSet {
		return invalid("a rollout to the workload's own template drives a StatefulSet or a DaemonSet, not a %s", s.Target.Kind)
	}
	if s.PinDigests == PinAlways {
		return invalid("pin-digests always would put digests on pods whose template its owner spells with tags; a rollout to the workload's own template runs the template's images as written")
	}
	for _, k := range slices.Sorted(maps.Keys(s.Labels)) {
		if errs := validation.IsQualifiedName(k); len(errs) > 0 {
			return invalid("label %q: %s", k, strings.Join(errs, "; "))
		}
		if errs := validation.IsValidLabelValue(s.Labels[k]); len(errs) > 0 {
			return invalid("label %s=%q: %s", k, s.Labels[k], strings.Join(errs, "; "))
		}
	}
	for _, k := range slices.Sorted(maps.Keys(s.Annotations)) {
		if errs := validation.IsQualifiedName(strings.ToLower(k)); len(errs) > 0 {
			return invalid("annotation %q: %s", k, strings.Join(errs, "; "))
		}
		if strings.HasPrefix(k, ownAnnotations) {
			return invalid("annotation %q: the %s annotations are the rollouts' own records (%s on each pod), which a template cannot set", k, ownAnnotations, inplace.StateAnnotation)
		}
	}
	return nil
}

// checkTarget checks a workload reference without looking at the cluster.
func checkTarget(t workload.Ref) error {
	if t.Kind == "" {
		return invalid("no target: give KIND/NAME, e.g. statefulset/web")
	}
	if t.Kind == workload.Pods {
		if t.Selector == "" {
			return invalid("target pods needs a label selector")
		}
	} else if t.Name == "" {
		return invalid("target %s needs a name", t.Kind)
	} else if errs := validation.IsDNS1123Subdomain(t.Name); len(errs) > 0 {
		return invalid("target %s %q is not a valid name: %s", t.Kind, t.Name, strings.Join(errs, "; "))
	}
	if t.Namespace == "" {
		return invalid("no namespace")
	}
	if errs := validation.IsDNS1123Label(t.Namespace); len(errs) > 0 {
		return invalid("namespace %q is not a valid name: %s", t.Namespace, strings.Join(errs, "; "))
	}
	return nil
}

// checkTimeout refuses a zero progress deadline.
func checkTimeout(d time.Duration) error {
	if d == 0 {
		return invalid("timeout 0s would give no progress deadline at all: give a positive duration, e.g. 10m")
	}
	return nil
}

// progressDeadline is Timeout, or the default when none is set.
func (s Spec) progressDeadline() time.Duration {
	if s.Timeout > 0 {
		return s.Timeout
	}
	return inplace.DefaultProgressDeadline
}

// Hash identifies the rollout's target and images: the same hash resumes, another supersedes.
func (s Spec) Hash() string {
	names := make([]string, 0, len(s.Images))
	for n := range s.Images {
		names = append(names, n)
	}
	sort.Strings(names)
	var b strings.Builder
	fmt.Fprintf(&b, "%s|%s|%s|%s|%v", s.Target.Kind, s.Target.Namespace, s.Target.Name, s.Target.Selector, s.IncludeInit)
	for _, n := range names {
		fmt.Fprintf(&b, "|%s=%s", n, s.Images[n])
	}
	// Absent when empty, so that a spec without Keep hashes as before it existed: the lock of a
	// rollout in flight keeps naming it.
	if len(s.Keep) > 0 {
		b.WriteString("|keep")
		for _, n := range slices.Sorted(maps.Keys(s.Keep)) {
			fmt.Fprintf(&b, "|%s=%s", n, s.Keep[n])
		}
	}
	// Absent when empty, likewise: a spec of images alone hashes as before resources existed.
	if len(s.Resources) > 0 {
		b.WriteString("|resources")
		for _, n := range slices.Sorted(maps.Keys(s.Resources)) {
			r := s.Resources[n]
			for _, part := range []struct {
				what string
				list corev1.ResourceList
			}{{"requests", r.Requests}, {"limits", r.Limits}} {
				for _, res := range slices.Sorted(maps.Keys(part.list)) {
					q := part.list[res]
					// Canonical, so 0.5 and 500m hash alike.
					fmt.Fprintf(&b, "|%s.%s.%s=%s", n, part.what, res, q.String())
				}
			}
		}
	}
	// Absent unless set, likewise: the rollouts to a workload's own template hash apart, and so
	// do two revisions of it that change only labels or annotations.
	if s.TemplateOwned {
		b.WriteString("|owned")
		for _, kv := range []struct {
			what string
			m    map[string]string
		}{{"label", s.Labels}, {"annotation", s.Annotations}} {
			for _, k := range slices.Sorted(maps.Keys(kv.m)) {
				fmt.Fprintf(&b, "|%s:%s=%q", kv.what, k, kv.m[k])
			}
		}
	}
	sum := sha256.Sum256([]byte(b.String()))
	return hex.EncodeToString(sum[:])[:16]
}

// ParseBatches parses a comma-separated list of counts and percentages, e.g. "1,50%,100%".
func ParseBatches(s string) ([]intstr.IntOrString, error) {
	var out []intstr.IntOrString
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			return nil, invalid("batches %q: empty entry", s)
		}
		if strings.HasSuffix(part, "%") {
			out = append(out, intstr.FromString(part))
			continue
		}
		// 32 bits, as the count is stored: a larger one would wrap around to another count.
		n, err := strconv.ParseInt(part, 10, 32)
		if err != nil {
			return nil, invalid("batches %q: %q is neither a pod count nor a percentage", s, part)
		}
		out = append(out, intstr.FromInt32(int32(n)))
	}
	return out, nil
}

// CheckBatches checks batches without a pod count: each a positive count or a percentage up to
// 100%, counts and percentages each strictly increasing, the last 100%. Whether mixed counts
// and percentages increase depends on the pod count; ResolveBatches checks that.
func CheckBatches(batches []intstr.IntOrString) error {
	_, err := resolveBatches(batches, 100, false)
	return err
}

// ResolveBatches turns batches into cumulative pod counts for total pods. Counts are capped at
// total; percentages round up, so 10% of 5 pods is 1. Batches that resolve to the count of the
// one before are dropped; one that resolves to fewer pods than the one before is an error.
// Empty batches mean one batch of 100%.
func ResolveBatches(batches []intstr.IntOrString, total int) ([]int, error) {
	return resolveBatches(batches, total, true)
}

// batchCounts resolves batches for a rollout already running. The pod count may have changed
// since the batches were checked (the workload was scaled), so a batch that now resolves to
// fewer pods than the one before is dropped instead of stopping the rollout.
func batchCounts(batches []intstr.IntOrString, total int) ([]int, error) {
	return resolveBatches(batches, total, false)
}

func resolveBatches(batches []intstr.IntOrString, total int, strict bool) ([]int, error) {
	if len(batches) == 0 {
		return []int{total}, nil
	}
	last := batches[len(batches)-1]
	if last.Type != intstr.String || last.StrVal != "100%" {
		return nil, invalid("batches %s: the last batch must be 100%%", formatBatches(batches))
	}
	var out []int
	prevPercent, prevCount := -1.0, -1
	for _, b := range batches {
		var n int
		if b.Type == intstr.String {
			p, ok := parsePercent(b.StrVal)
			if !ok {
				return nil, invalid("batches %s: %q is not a percentage between 0 and 100%%", formatBatches(batches), b.StrVal)
			}
			if p <= prevPercent {
				return nil, invalid("batches %s: not strictly increasing at %s", formatBatches(batches), b.StrVal)
			}
			prevPercent = p
			n = percentOf(p, total)
		} else {
			if b.IntVal <= 0 {
				return nil, invalid("batches %s: a pod count must be positive, got %d", formatBatches(batches), b.IntVal)
			}
			if int(b.IntVal) <= prevCount {
				return nil, invalid("batches %s: not strictly increasing at %d", formatBatches(batches), b.IntVal)
			}
			prevCount = int(b.IntVal)
			n = min(int(b.IntVal), total)
		}
		if len(out) > 0 && n < out[len(out)-1] {
			if strict {
				return nil, invalid("batches %s: with %d pods, batch %s resolves to %d pods, fewer than the %d of the batch before it",
					formatBatches(batches), total, b.String(), n, out[len(out)-1])
			}
			continue
		}
		if len(out) > 0 && n == out[len(out)-1] {
			continue
		}
		out = append(out, n)
	}
	return out, nil
}

func formatBatches(batches []intstr.IntOrString) string {
	parts := make([]string, len(batches))
	for i, b := range batches {
		parts[i] = b.String()
	}
	return strings.Join(parts, ",")
}

// parsePercent parses a percentage above 0 and up to 100, e.g. "12.5%".
func parsePercent(s string) (float64, bool) {
	p, err := strconv.ParseFloat(strings.TrimSuffix(s, "%"), 64)
	return p, err == nil && strings.HasSuffix(s, "%") && p > 0 && p <= 100
}

// percentOf is p percent of total pods, rounded up: 10% of 5 pods is 1.
func percentOf(p float64, total int) int {
	return int(math.Ceil(p * float64(total) / 100))
}

// resolveUpTo resolves the hold point for total pods: nil is every pod; a count is capped at
// total; a percentage rounds up, as batches do.
func resolveUpTo(v *intstr.IntOrString, total int) (int, error) {
	if v == nil {
		return total, nil
	}
	if v.Type == intstr.String {
		p, ok := parsePercent(v.StrVal)
		if !ok {
			return 0, invalid("hold point %q is not a pod count or a percentage between 0 and 100%%", v.StrVal)
		}
		return percentOf(p, total), nil
	}
	if v.IntVal <= 0 {
		return 0, invalid("hold point %d: give a pod count above 0, or a percentage", v.IntVal)
	}
	return min(int(v.IntVal), total), nil
}

// resolveMaxUnavailable resolves a count or percentage of total. 0 and 0% are refused: they
// would update nothing. A percentage that rounds down to no pod means 1, so a small workload
// still moves.
func resolveMaxUnavailable(v intstr.IntOrString, total int) (int, error) {
	n, err := intstr.GetScaledValueFromIntOrPercent(&v, total, false)
	if err != nil {
		return 0, invalid("max-unavailable %q is neither a count nor a percentage", v.String())
	}
	if n < 0 {
		return 0, invalid("max-unavailable %q cannot be negative", v.String())
	}
	if whole, _ := intstr.GetScaledValueFromIntOrPercent(&v, 100, false); whole == 0 {
		return 0, invalid("max-unavailable %s would let no pod be updated: give at least 1 (or a percentage above 0%%)", v.String())
	}
	return max(n, 1), nil
}

// rolloutID names a new rollout: the spec hash and when it started.
func rolloutID(hash string, now time.Time) string {
	return fmt.Sprintf("%s-%d", hash[:10], now.Unix())
}

// change is what the spec sets on the containers: its images and resources.
func (s Spec) change() workload.Change {
	return workload.Change{Images: s.Images, Resources: s.Resources}
}

// describeChange says ch in messages: its images as JSON, as they always were, or with its
// resources the two as one JSON object.
func describeChange(ch workload.Change) string {
	if len(ch.Resources) == 0 {
		return mustJSON(ch.Images)
	}
	return mustJSON(ch)
}

func mustJSON(v any) string {
	data, _ := json.Marshal(v)
	return string(data)
}

// secretFieldFor names the field that takes from a Secret what a file field reads from a file,
// or an inline field holds.
func secretFieldFor(field string) string {
	switch field {
	case "prometheus.bearerTokenFile":
		return "prometheus.bearerTokenSecret"
	case "prometheus.basicAuth.passwordFile", "prometheus.basicAuth.password":
		return "prometheus.basicAuth.passwordSecret"
	}
	return "prometheus.tls.caSecret"
}
