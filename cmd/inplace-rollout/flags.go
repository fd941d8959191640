package main

import (
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/flowcontrol"

	"github.com/inplace-rollout/inplace-rollout/analysis"
	"github.com/inplace-rollout/inplace-rollout/pkg/notify"
	"github.com/inplace-rollout/inplace-rollout/pkg/rollout"
)

// clusterFlags locate the cluster and namespace.
type clusterFlags struct {
	// config are kubectl's own flags for the connection, from cli-runtime: --kubeconfig,
	// --context, --cluster, --user, -n/--namespace, --as, --as-group, --request-timeout and the
	// rest, read as kubectl reads them.
	config   *genericclioptions.ConfigFlags
	target   string
	selector string
	output   string
	qps      float32
	burst    int

	// events is the client Events are recorded with, once client ran: the same credentials
	// and the same token bucket as the rollout's client, so that --kube-api-qps and
	// --kube-api-burst bound every request the command sends. The broadcaster queues Events,
	// so waiting for a token holds back only the Event, never the rollout's goroutine.
	events kubernetes.Interface
}

func (f *clusterFlags) register(cmd *cobra.Command) {
	f.config = genericclioptions.NewConfigFlags(true)
	f.config.AddFlags(cmd.Flags())
	cmd.Flags().StringVar(&f.target, "target", "", "workload as KIND/NAME: statefulset/web, daemonset/agent, deployment/api; or pods with --selector")
	cmd.Flags().StringVarP(&f.selector, "selector", "l", "", "label selector of the pods, with --target pods")
	cmd.Flags().StringVarP(&f.output, "output", "o", "text", "output format: text, json or yaml")
	// A batch steps each of its pods every fraction of a second, two or three requests a pod;
	// client-go's default of 5 requests per second would make the client the bottleneck.
	cmd.Flags().Float32Var(&f.qps, "kube-api-qps", 100, "requests per second to the Kubernetes API, sustained: one budget for every request the command sends, its Events included")
	cmd.Flags().IntVar(&f.burst, "kube-api-burst", 200, "requests to the Kubernetes API allowed in a burst above --kube-api-qps, from the same budget")
}

// resolve builds the client and names the workload from the flags.
func (f *clusterFlags) resolve() (kubernetes.Interface, rollout.Ref, error) {
	client, ns, err := f.client()
	if err != nil {
		return nil, rollout.Ref{}, err
	}
	ref, err := f.ref(ns)
	return client, ref, err
}

func (f *clusterFlags) client() (kubernetes.Interface, string, error) {
	loader := f.config.ToRawKubeConfigLoader()
	cfg, err := loader.ClientConfig()
	if err != nil {
		return nil, "", badInput("loading kubeconfig: %v", err)
	}
	ns, _, err := loader.Namespace()
	if err != nil {
		return nil, "", badInput("reading the namespace from kubeconfig: %v", err)
	}
	if f.qps <= 0 || f.burst <= 0 {
		return nil, "", badInput("--kube-api-qps and --kube-api-burst must be positive")
	}
	cfg.UserAgent = "inplace-rollout/" + version
	cfg.QPS, cfg.Burst = f.qps, f.burst
	// client-go gives each client built from a config without a limiter a token bucket of its
	// own: set one here, which both clients below take, so the rate limit is the command's.
	cfg.RateLimiter = flowcontrol.NewTokenBucketRateLimiter(f.qps, f.burst)
	// Protobuf, as the Kubernetes controllers use: listing hundreds of pods every step decodes
	// faster. Patches keep their own JSON content type.
	cfg.ContentType = "application/vnd.kubernetes.protobuf"
	cfg.AcceptContentTypes = "application/vnd.kubernetes.protobuf,application/json"
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, "", badInput("building a client for %s: %v", cfg.Host, err)
	}
	if f.events, err = kubernetes.NewForConfig(rest.CopyConfig(cfg)); err != nil {
		return nil, "", badInput("building a client for %s: %v", cfg.Host, err)
	}
	return client, ns, nil
}

func (f *clusterFlags) ref(ns string) (rollout.Ref, error) {
	if err := checkOutput(f.output); err != nil {
		return rollout.Ref{}, err
	}
	if f.target == "" {
		return rollout.Ref{}, badInput("--target is required, e.g. --target statefulset/web")
	}
	kindStr, name, _ := strings.Cut(f.target, "/")
	kind, err := rollout.ParseKind(kindStr)
	if err != nil {
		return rollout.Ref{}, badInput("--target %q: %v", f.target, err)
	}
	ref := rollout.Ref{Kind: kind, Namespace: ns, Name: name, Selector: f.selector}
	switch {
	case kind == rollout.Pods && f.selector == "":
		return ref, badInput("--target pods needs --selector")
	case kind != rollout.Pods && name == "":
		return ref, badInput("--target %q: give KIND/NAME", f.target)
	case kind != rollout.Pods && f.selector != "":
		return ref, badInput("--selector goes with --target pods only")
	}
	if kind != rollout.Pods {
		// Said here, before any request: the API server would refuse the name, or read it as a
		// path.
		if problems := validation.IsDNS1123Subdomain(name); len(problems) > 0 {
			return ref, badInput("--target %q: %q is not a valid name: %s", f.target, name, strings.Join(problems, "; "))
		}
	}
	return ref, nil
}

// rolloutFlags describe the rollout itself.
type rolloutFlags struct {
	images []string
	// requests and limits are --requests and --limits, CONTAINER=RESOURCE=QUANTITY,... each.
	requests, limits []string
	// resourcesText is --resources: the spec's resources as YAML or JSON, for callers that
	// cannot repeat a flag per container, such as a Tekton step given it as a param.
	resourcesText string
	// hooksText is --hooks: the spec's hooks as YAML or JSON, as --resources gives resources.
	hooksText      string
	batches        string
	maxUnavailable string
	grace          time.Duration
	soak           time.Duration
	timeout        time.Duration
	allowUnready   bool
	allowOwned     bool
	includeInit    bool
	supersede      bool
	takeOver       bool
	notifyURL      string
	resultsDir     string
	analysisFile   string
	// analysisConfig is --analysis-config: the analysis config itself, for callers that cannot
	// write a file, such as a Tekton step given it as a param.
	analysisConfig string
	prometheusURL  string
	onInconclusive string
	upTo           string
	pinDigests     string
	prePull        bool
	pullerImage    string
	// file is -f: an InPlaceRollout spec file the other flags override.
	file string
	// onTerminate is --on-terminate: what Ctrl-C or SIGTERM does to the rollout in flight.
	onTerminate string
	// dryRun is run's --dry-run: none, client or server.
	dryRun string

	// restoreTemplate is rollback's --restore-template.
	restoreTemplate bool
}

func (f *rolloutFlags) register(cmd *cobra.Command) {
	f.registerPlan(cmd)
	cmd.Flags().StringVarP(&f.file, "filename", "f", "", "the rollout as an InPlaceRollout file (apiVersion inplace-rollout.io/v1alpha1, YAML or JSON); flags given override its fields")
	cmd.Flags().StringVar(&f.maxUnavailable, "max-unavailable", "1", "pods that may be down at once, count or percentage above 0: the pods being updated and any other pod not Ready (being deleted, recreated), except pods already not Ready before the rollout")
	cmd.Flags().DurationVar(&f.grace, "grace", 0, "wait between draining a pod (readiness gate inplace-rollout.io/ready False) and restarting it")
	cmd.Flags().DurationVar(&f.soak, "soak", 0, "after each batch, wait this long before its analysis and the next batch; a pod of the batch that crashes or restarts meanwhile fails the rollout")
	cmd.Flags().DurationVar(&f.timeout, "timeout", 10*time.Minute, "progress deadline, above 0: a pod that makes no progress for this long fails, and so does a batch whose next pods cannot start for this long")
	cmd.Flags().BoolVar(&f.allowUnready, "allow-unready", false, "start even if some pods are not Ready")
	cmd.Flags().BoolVar(&f.allowOwned, "allow-owned", false, "with --target pods, update pods a controller owns too (it may recreate them from its own template, on the old images)")
	cmd.Flags().BoolVar(&f.supersede, "supersede", false, "replace this tool's rollout in flight to other images")
	cmd.Flags().StringVar(&f.onTerminate, "on-terminate", terminateLeave, "what Ctrl-C or SIGTERM does to the rollout in flight: leave (stop between two steps, resumable by the same command) or rollback (roll it back first; a second signal stops the rollback, which `rollback` then finishes), as a cancelled or timed-out TaskRun's step wants")
	f.registerTakeOver(cmd)
	f.registerNotify(cmd)
	cmd.Flags().StringVar(&f.resultsDir, "results-dir", "", "write Tekton-style results (phase, updated-pods, rolled-back, message) to this directory")
	cmd.Flags().StringVar(&f.analysisFile, "analysis", "", "analysis config (YAML or JSON): gate every batch on Prometheus golden signals")
	cmd.Flags().StringVar(&f.analysisConfig, "analysis-config", "", "the analysis config itself (YAML or JSON) instead of --analysis FILE; empty: none")
	cmd.Flags().StringVar(&f.prometheusURL, "prometheus", "", "Prometheus URL (default: prometheus.address of the analysis config)")
	cmd.Flags().StringVar(&f.upTo, "up-to", "", "hold point, count or percentage: stop once that many pods are updated and their batch passed analysis (exit 0, phase Holding, the workload still held); run again without it, or with a higher one, to go on")
	cmd.Flags().StringVar(&f.onInconclusive, "on-inconclusive", rollout.InconclusivePause, "what an inconclusive analysis does: fail (roll back), pause, or continue")
	cmd.Flags().BoolVar(&f.prePull, "pre-pull", false, "before a batch's pods restart, pull its new images onto their nodes with one short-lived pod per node, so a pod is down only for its container start")
	cmd.Flags().StringVar(&f.pullerImage, "puller-image", defaultPullerImage(), "with --pre-pull, the image holding the puller binary: $"+pullerImageEnv+" when set, else this version's image")
}

// notifyTokenEnv names the environment variable of the bearer token the webhook of --notify-url
// is sent, if any: kept out of the command line, which other users of the machine can read.
const notifyTokenEnv = "INPLACE_ROLLOUT_NOTIFY_TOKEN"

// registerNotify registers --notify-url, for run and rollback.
func (f *rolloutFlags) registerNotify(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.notifyURL, "notify-url", "", "post a CloudEvents JSON document to this webhook when the rollout succeeds, pauses, rolls back or needs a person (with $"+notifyTokenEnv+" as a bearer token, if set); the URL is never printed")
}

// checkNotify refuses a --notify-url that is no http or https URL, before anything changes.
func (f *rolloutFlags) checkNotify() error {
	if f.notifyURL == "" {
		return nil
	}
	if err := notify.CheckURL(f.notifyURL); err != nil {
		return badInput("--notify-url: %v", err)
	}
	return nil
}

// registerTakeOver registers --take-over, for run and rollback.
func (f *rolloutFlags) registerTakeOver(cmd *cobra.Command) {
	cmd.Flags().BoolVar(&f.takeOver, "take-over", false, "take over the workload's rollout from the holder that left it (an Argo Rollout or a Tekton CustomRun deleted mid-rollout) before rolling it back or replacing it; only once that holder no longer exists")
}

// registerPlan registers the flags that decide which pods a rollout updates and in which
// batches: all that `plan` takes.
func (f *rolloutFlags) registerPlan(cmd *cobra.Command) {
	cmd.Flags().StringArrayVar(&f.images, "image", nil, "CONTAINER=IMAGE to roll out (repeatable)")
	cmd.Flags().StringArrayVar(&f.requests, "requests", nil, "CONTAINER=RESOURCE=QUANTITY[,RESOURCE=QUANTITY]: the cpu and memory requests a container gets, in place through each pod's resize subresource, e.g. app=cpu=200m,memory=64Mi (repeatable, one container each; only values the container declares)")
	cmd.Flags().StringArrayVar(&f.limits, "limits", nil, "CONTAINER=RESOURCE=QUANTITY[,RESOURCE=QUANTITY]: the cpu and memory limits a container gets, as --requests, e.g. app=cpu=400m")
	cmd.Flags().StringVar(&f.resourcesText, "resources", "", "the container resources as the spec's resources field (YAML or JSON), e.g. '{app: {requests: {cpu: 200m}}}', instead of --requests and --limits; empty: none")
	cmd.Flags().StringVar(&f.hooksText, "hooks", "", "the hooks run around each pod's change as the spec's hooks field (YAML or JSON), e.g. '{preUpdate: {http: {port: 8080, path: /hook/pre, method: POST}}}' (an HTTP call through the API server's pod proxy: needs get or create on pods/proxy) or '{postUpdate: {handshake: {condition: example.com/registered}}}' (a pod condition set False, waited on until another party sets it True); empty: none")
	cmd.Flags().StringVar(&f.batches, "batches", "100%", "cumulative batches of pods, counts or percentages, the last 100%: e.g. 1,50%,100%")
	cmd.Flags().BoolVar(&f.includeInit, "include-init", false, "allow --image to name init containers that run once when a pod starts; their new image takes effect at its next start (native sidecars, restartPolicy Always, need no flag)")
	cmd.Flags().StringVar(&f.pinDigests, "pin-digests", rollout.PinAuto, "resolve each image tag to the digest its registry serves now, with the pods' pull credentials, and patch pods to TAG@DIGEST: auto (when the registry answers, else the tag, said once), always (refuse when it does not), never")
}

func (f *rolloutFlags) spec(ref rollout.Ref) (rollout.Spec, error) {
	spec, err := f.podsSpec(ref)
	if err != nil {
		return spec, err
	}
	spec.GracePeriod, spec.Soak, spec.Timeout = f.grace, f.soak, f.timeout
	spec.AllowUnready, spec.AllowOwned, spec.Supersede, spec.TakeOver = f.allowUnready, f.allowOwned, f.supersede, f.takeOver
	spec.MaxUnavailable = intstr.Parse(f.maxUnavailable)
	spec.PrometheusURL, spec.OnInconclusive = f.prometheusURL, f.onInconclusive
	spec.PrePull = f.prePull
	if f.upTo != "" {
		v := intstr.Parse(f.upTo)
		spec.UpTo = &v
	}
	cfg, err := f.analysis()
	if err != nil {
		return spec, err
	}
	if cfg != nil {
		// The file or text is the user's own, read with their own permissions: so are the
		// credential files it names.
		spec.Analysis, spec.CallerCredentials = cfg, true
		if f.prometheusURL != "" {
			if err := analysis.CheckAddress(f.prometheusURL); err != nil {
				return spec, badInput("--prometheus: %v", err)
			}
		}
	} else if f.prometheusURL != "" {
		return spec, badInput("--prometheus needs --analysis FILE or --analysis-config")
	}
	if err := spec.Validate(); err != nil {
		return spec, badInput("%v", cliError(err))
	}
	return spec, nil
}

// analysis is the analysis config of --analysis or --analysis-config, nil when neither is given
// (or --analysis-config is empty).
func (f *rolloutFlags) analysis() (*analysis.Config, error) {
	switch {
	case f.analysisFile != "" && f.analysisConfig != "":
		return nil, badInput("give --analysis FILE or --analysis-config, not both")
	case f.analysisFile != "":
		cfg, err := analysis.DecodeFile(f.analysisFile)
		if err != nil {
			return nil, badInput("--analysis: %v", err)
		}
		return cfg, nil
	case f.analysisConfig != "":
		cfg, err := analysis.Decode([]byte(f.analysisConfig))
		if err != nil {
			return nil, badInput("--analysis-config: %v", err)
		}
		return cfg, nil
	}
	return nil, nil
}

// podsSpec is the part of the spec that decides which pods change and in which batches, from
// the flags registerPlan registers; the rest keeps its defaults.
func (f *rolloutFlags) podsSpec(ref rollout.Ref) (rollout.Spec, error) {
	spec := rollout.Spec{
		Target:         ref,
		Images:         map[string]string{},
		IncludeInit:    f.includeInit,
		Holder:         "cli",
		MaxUnavailable: intstr.FromInt32(1),
		Timeout:        rollout.DefaultProgressDeadline,
		PinDigests:     f.pinDigests,
		Rerun:          true,
	}
	images, err := parseImages(f.images)
	if err != nil {
		return spec, err
	}
	spec.Images = images
	if spec.Resources, err = f.resources(); err != nil {
		return spec, err
	}
	if _, spec.Hooks, err = f.hooks(); err != nil {
		return spec, err
	}
	batches, err := rollout.ParseBatches(f.batches)
	if err != nil {
		return spec, badInput("--batches: %v", err)
	}
	spec.Batches = batches
	if err := spec.Validate(); err != nil {
		return spec, badInput("%v", cliError(err))
	}
	return spec, nil
}

func badInput(format string, args ...any) error {
	return &exitError{code: exitBadInput, err: fmt.Errorf(format, args...)}
}
