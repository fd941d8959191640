package customrun

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tektoncd/pipeline/pkg/apis/pipeline/v1beta1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/inplace-rollout/inplace-rollout/analysis"
	"github.com/inplace-rollout/inplace-rollout/pkg/apis/v1alpha1"
	"github.com/inplace-rollout/inplace-rollout/pkg/rollout"
	"github.com/inplace-rollout/inplace-rollout/pkg/strictdecode"
)

// Param names a CustomRun of ours takes. Each overrides the spec field of the same meaning.
const (
	ParamTarget         = "target"
	ParamSelector       = "selector"
	ParamImages         = "images"
	ParamResources      = "resources"
	ParamHooks          = "hooks"
	ParamBatches        = "batches"
	ParamMaxUnavailable = "max-unavailable"
	ParamSoak           = "soak"
	ParamTimeout        = "timeout"
	ParamAnalysis       = "analysis"
	ParamPrometheusURL  = "prometheus-url"
	ParamOnInconclusive = "on-inconclusive"
	ParamPinDigests     = "pin-digests"
	ParamPrePull        = "pre-pull"
)

var knownParams = []string{ParamTarget, ParamSelector, ParamImages, ParamResources, ParamHooks, ParamBatches, ParamMaxUnavailable,
	ParamSoak, ParamTimeout, ParamAnalysis, ParamPrometheusURL, ParamOnInconclusive, ParamPinDigests, ParamPrePull}

// HolderPrefix begins the lock holder of every CustomRun's rollout.
const HolderPrefix = "tekton:"

// Holder is the lock holder of a CustomRun's rollout.
func Holder(run *v1beta1.CustomRun) string { return HolderPrefix + run.Namespace + "/" + run.Name }

// ours reports whether run is a run of our kind, by reference or embedded.
func ours(run *v1beta1.CustomRun) bool {
	switch {
	case run.Spec.CustomRef != nil:
		return run.Spec.CustomRef.APIVersion == v1alpha1.APIVersion && string(run.Spec.CustomRef.Kind) == v1alpha1.Kind
	case run.Spec.CustomSpec != nil:
		return run.Spec.CustomSpec.APIVersion == v1alpha1.APIVersion && run.Spec.CustomSpec.Kind == v1alpha1.Kind
	}
	return false
}

// SpecGetter reads the InPlaceRollout object a CustomRun references by name.
type SpecGetter interface {
	Get(ctx context.Context, namespace, name string) (*v1alpha1.InPlaceRollout, error)
}

// specError is bad input in a CustomRun: its spec, the object it references, or a param. Nothing
// is written for it and the run fails naming the field.
type specError struct{ msg string }

func (e *specError) Error() string { return e.msg }

func specErrorf(format string, a ...any) error { return &specError{msg: fmt.Sprintf(format, a...)} }

// decodeSpec reads the rollout a CustomRun asks for: its embedded spec or the InPlaceRollout it
// references, with its params on top. A *specError is bad input; other errors come from reading
// the referenced object and are worth a retry.
func decodeSpec(ctx context.Context, run *v1beta1.CustomRun, objects SpecGetter) (rollout.Spec, error) {
	doc, err := specDocument(ctx, run, objects)
	if err != nil {
		return rollout.Spec{}, err
	}
	promURL, err := applyParams(doc, run.Spec.Params)
	if err != nil {
		return rollout.Spec{}, err
	}
	if len(doc.Images) == 0 && len(doc.Resources) == 0 {
		return rollout.Spec{}, specErrorf("nothing to change: give the %s param or spec.images (CONTAINER=IMAGE), or the %s param or spec.resources (cpu and memory by container)", ParamImages, ParamResources)
	}
	if doc.UpTo != nil {
		return rollout.Spec{}, specErrorf("spec.upTo: a CustomRun's rollout ends with its run, so it cannot hold part way; remove upTo")
	}
	if promURL != "" {
		if err := analysis.CheckAddress(promURL); err != nil {
			return rollout.Spec{}, specErrorf("params[%s]: %v", ParamPrometheusURL, err)
		}
		if doc.Analysis == nil {
			return rollout.Spec{}, specErrorf("params[%s]: there is no analysis to query it: give the %s param or spec.analysis too", ParamPrometheusURL, ParamAnalysis)
		}
		// A copy: the document's analysis may be shared with the object it was read from.
		a := *doc.Analysis
		a.Prometheus.Address = promURL
		doc.Analysis = &a
	}
	spec, err := rollout.FromV1alpha1(doc, rollout.Caller{Namespace: run.Namespace, Holder: Holder(run), HolderUID: run.UID})
	if err != nil {
		return rollout.Spec{}, &specError{msg: err.Error()}
	}
	return spec, nil
}

// specDocument is the spec before params: embedded in the run, or the referenced object's.
func specDocument(ctx context.Context, run *v1beta1.CustomRun, objects SpecGetter) (*v1alpha1.InPlaceRolloutSpec, error) {
	if cs := run.Spec.CustomSpec; cs != nil {
		if len(cs.Spec.Raw) == 0 {
			return &v1alpha1.InPlaceRolloutSpec{}, nil
		}
		doc, err := v1alpha1.DecodeSpec(cs.Spec.Raw)
		if errors.Is(err, strictdecode.ErrEmpty) {
			return &v1alpha1.InPlaceRolloutSpec{}, nil
		}
		if err != nil {
			return nil, specErrorf("taskSpec.spec: %v", err)
		}
		return doc, nil
	}
	name := run.Spec.CustomRef.Name
	if name == "" {
		// Params alone may say it all: target and images.
		return &v1alpha1.InPlaceRolloutSpec{}, nil
	}
	obj, err := objects.Get(ctx, run.Namespace, name)
	if apierrors.IsNotFound(err) {
		return nil, specErrorf("taskRef.name: %s %s/%s not found: create it, or embed the spec in taskSpec", v1alpha1.Kind, run.Namespace, name)
	}
	if err != nil {
		return nil, fmt.Errorf("reading %s %s/%s: %w", v1alpha1.Kind, run.Namespace, name, err)
	}
	// The object was decoded for this call alone; params replace its fields, never edit them.
	doc := obj.Spec
	return &doc, nil
}

// applyParams sets doc's fields from the run's params, each checked on its own so that an error
// names the param. The Prometheus address is returned apart: the engine's spec carries it.
func applyParams(doc *v1alpha1.InPlaceRolloutSpec, params v1beta1.Params) (promURL string, err error) {
	for _, p := range params {
		if !slices.Contains(knownParams, p.Name) {
			return "", specErrorf("params: unknown param %q; the params are %s", p.Name, strings.Join(knownParams, ", "))
		}
		if p.Name == ParamPrometheusURL {
			if p.Value.Type == v1beta1.ParamTypeArray || p.Value.Type == v1beta1.ParamTypeObject {
				return "", specErrorf("params[%s]: want a string, got an %s", p.Name, p.Value.Type)
			}
			promURL = strings.TrimSpace(p.Value.StringVal)
			continue
		}
		if err := applyParam(doc, p); err != nil {
			return "", specErrorf("params[%s]: %v", p.Name, err)
		}
	}
	return promURL, nil
}

func applyParam(doc *v1alpha1.InPlaceRolloutSpec, p v1beta1.Param) error {
	if p.Name == ParamImages {
		images, err := parseImages(p.Value)
		if err != nil {
			return err
		}
		doc.Images = images
		return nil
	}
	if p.Value.Type == v1beta1.ParamTypeArray || p.Value.Type == v1beta1.ParamTypeObject {
		return fmt.Errorf("want a string, got an %s", p.Value.Type)
	}
	v := strings.TrimSpace(p.Value.StringVal)
	switch p.Name {
	case ParamTarget:
		kind, name, _ := strings.Cut(v, "/")
		doc.Target.Kind, doc.Target.Name = kind, name
	case ParamSelector:
		doc.Target.Selector = v
	case ParamBatches:
		batches, err := rollout.ParseBatches(v)
		if err == nil {
			err = rollout.CheckBatches(batches)
		}
		if err != nil {
			return err
		}
		doc.Batches = batches
	case ParamMaxUnavailable:
		mu := intstr.Parse(v)
		doc.MaxUnavailable = &mu
	case ParamSoak, ParamTimeout:
		d, err := time.ParseDuration(v)
		if err != nil {
			return fmt.Errorf("%q is not a duration such as \"30s\" or \"5m\"", v)
		}
		if p.Name == ParamSoak {
			doc.Soak = &metav1.Duration{Duration: d}
		} else {
			doc.Timeout = &metav1.Duration{Duration: d}
		}
	case ParamResources:
		r, err := decodeParam[map[string]corev1.ResourceRequirements](v)
		if err != nil {
			return err
		}
		doc.Resources = nil
		if r != nil {
			doc.Resources = *r
		}
	case ParamHooks:
		h, err := decodeParam[v1alpha1.Hooks](v)
		if err != nil {
			return err
		}
		doc.Hooks = h
	case ParamAnalysis:
		if v == "" {
			doc.Analysis = nil
			return nil
		}
		cfg, err := analysis.Decode([]byte(v))
		if err != nil {
			return err
		}
		doc.Analysis = cfg
	case ParamOnInconclusive:
		doc.OnInconclusive = v
	case ParamPinDigests:
		doc.PinDigests = v
	case ParamPrePull:
		b, err := strconv.ParseBool(v)
		if err != nil {
			return fmt.Errorf("%q: want true or false", v)
		}
		doc.PrePull = b
	}
	return nil
}

// decodeParam decodes a param that holds a spec field as YAML or JSON; an empty param is none
// (nil), which clears the spec's field.
func decodeParam[T any](v string) (*T, error) {
	if v == "" {
		return nil, nil
	}
	out := new(T)
	if err := v1alpha1.DecodeInto([]byte(v), out); err != nil {
		return nil, err
	}
	return out, nil
}

// parseImages reads CONTAINER=IMAGE pairs from an array param, or from a string of them
// separated by commas or spaces.
func parseImages(v v1beta1.ParamValue) (map[string]string, error) {
	var items []string
	switch v.Type {
	case v1beta1.ParamTypeArray:
		items = v.ArrayVal
	case v1beta1.ParamTypeObject:
		return nil, errors.New("want an array of CONTAINER=IMAGE, got an object")
	default:
		items = strings.FieldsFunc(v.StringVal, func(r rune) bool { return r == ',' || r == ' ' || r == '\n' || r == '\t' })
	}
	images := map[string]string{}
	for _, item := range items {
		name, image, ok := strings.Cut(strings.TrimSpace(item), "=")
		if !ok || name == "" || image == "" {
			return nil, fmt.Errorf("%q: want CONTAINER=IMAGE, e.g. app=registry.example/app:v2", item)
		}
		if _, dup := images[name]; dup {
			return nil, fmt.Errorf("container %q given twice", name)
		}
		images[name] = image
	}
	if len(images) == 0 {
		return nil, errors.New("empty: give at least one CONTAINER=IMAGE")
	}
	return images, nil
}
