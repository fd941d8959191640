package main

import (
	"strings"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/inplace-rollout/inplace-rollout/analysis"
	"github.com/inplace-rollout/inplace-rollout/pkg/apis/v1alpha1"
	"github.com/inplace-rollout/inplace-rollout/pkg/rollout"
)

// fileSpec builds the spec from the InPlaceRollout file given with -f, with every flag the user
// gave on the command line taking the place of the file's field. The namespace is the
// command's (-n or the kubeconfig context's), never the file's.
func (f *rolloutFlags) fileSpec(cmd *cobra.Command, cf *clusterFlags, ns string) (rollout.Spec, error) {
	doc, err := v1alpha1.DecodeFile(f.file)
	if err != nil {
		return rollout.Spec{}, badInput("-f: %v", err)
	}
	if doc.Namespace != "" && doc.Namespace != ns {
		return rollout.Spec{}, badInput("-f %s: metadata.namespace is %q but the command runs in %q: the namespace is the command's (-n); remove it from the file or give -n %s",
			f.file, doc.Namespace, ns, doc.Namespace)
	}
	s := doc.Spec
	if err := f.overlay(cmd, cf, ns, &s); err != nil {
		return rollout.Spec{}, err
	}
	// The file and the flags are the user's own, read with their own permissions: so are the
	// credential files they name.
	spec, err := rollout.FromV1alpha1(&s, rollout.Caller{Namespace: ns, Holder: "cli", CallerCredentials: true})
	if err != nil {
		return spec, badInput("-f %s: %v", f.file, cliError(err))
	}
	spec.AllowOwned, spec.Supersede, spec.TakeOver, spec.Rerun = f.allowOwned, f.supersede, f.takeOver, true
	if err := spec.Validate(); err != nil {
		return spec, badInput("%v", cliError(err))
	}
	return spec, nil
}

// overlay puts every flag the user gave on the command line in place of the file's field.
func (f *rolloutFlags) overlay(cmd *cobra.Command, cf *clusterFlags, ns string, s *v1alpha1.InPlaceRolloutSpec) error {
	changed := cmd.Flags().Changed
	if changed("target") || changed("selector") {
		ref, err := cf.ref(ns)
		if err != nil {
			return err
		}
		s.Target = v1alpha1.Target{Kind: string(ref.Kind), Name: ref.Name, Selector: ref.Selector}
	}
	if len(f.images) > 0 {
		given, err := parseImages(f.images)
		if err != nil {
			return err
		}
		images := make(map[string]string, len(s.Images)+len(given))
		for name, img := range s.Images {
			images[name] = img
		}
		for name, img := range given {
			images[name] = img
		}
		s.Images = images
	}
	resources, err := f.resources()
	if err != nil {
		return err
	}
	if resources != nil {
		s.Resources = overlayResources(s.Resources, resources, f.resourcesText != "")
	}
	hooks, _, err := f.hooks()
	if err != nil {
		return err
	}
	if hooks != nil {
		// In place of the file's, as --resources: the flag gives the whole field.
		s.Hooks = hooks
	}
	if changed("batches") {
		batches, err := rollout.ParseBatches(f.batches)
		if err != nil {
			return badInput("--batches: %v", err)
		}
		s.Batches = batches
	}
	if changed("up-to") {
		v := intstr.Parse(f.upTo)
		s.UpTo = &v
	}
	if changed("max-unavailable") {
		v := intstr.Parse(f.maxUnavailable)
		s.MaxUnavailable = &v
	}
	for name, d := range map[string]**metav1.Duration{"grace": &s.GracePeriod, "soak": &s.Soak, "timeout": &s.Timeout} {
		if changed(name) {
			v, _ := cmd.Flags().GetDuration(name)
			*d = &metav1.Duration{Duration: v}
		}
	}
	if changed("allow-unready") {
		s.AllowUnready = f.allowUnready
	}
	if changed("include-init") {
		s.IncludeInit = f.includeInit
	}
	if changed("on-inconclusive") {
		s.OnInconclusive = f.onInconclusive
	}
	if changed("pin-digests") {
		s.PinDigests = f.pinDigests
	}
	if changed("pre-pull") {
		s.PrePull = f.prePull
	}
	return f.overlayAnalysis(changed, s)
}

// overlayAnalysis puts the analysis flags in place of the file's analysis.
func (f *rolloutFlags) overlayAnalysis(changed func(string) bool, s *v1alpha1.InPlaceRolloutSpec) error {
	if changed("analysis") && f.analysisFile == "" {
		return badInput("--analysis: give a file")
	}
	cfg, err := f.analysis()
	if err != nil {
		return err
	}
	if cfg != nil {
		s.Analysis = cfg
	}
	if f.prometheusURL != "" {
		if s.Analysis == nil {
			return badInput("--prometheus needs an analysis: spec.analysis in %s, --analysis FILE or --analysis-config", f.file)
		}
		if err := analysis.CheckAddress(f.prometheusURL); err != nil {
			return badInput("--prometheus: %v", err)
		}
		cfg := *s.Analysis
		cfg.Prometheus.Address = f.prometheusURL
		s.Analysis = &cfg
	}
	return nil
}

// parseImages parses --image CONTAINER=IMAGE flags.
func parseImages(flags []string) (map[string]string, error) {
	images := map[string]string{}
	for _, kv := range flags {
		name, img, ok := strings.Cut(kv, "=")
		if !ok || name == "" || img == "" {
			return nil, badInput("--image %q: use CONTAINER=IMAGE", kv)
		}
		if _, dup := images[name]; dup {
			return nil, badInput("--image: container %q given twice", name)
		}
		images[name] = img
	}
	return images, nil
}
