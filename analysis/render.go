package analysis

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"regexp"
	"strings"
	"text/template"
	"time"

	"github.com/prometheus/common/model"
)

// Scope is what a batch's queries are about.
type Scope struct {
	Namespace string
	// Pods are the pods on the new images; StablePods those not yet updated.
	Pods       []string
	StablePods []string
	Window     time.Duration
}

// templateData is what query templates see. Every string is already escaped for use inside a
// double-quoted PromQL string, and the pod lists are anchored regular expressions that match
// exactly those names, whatever characters they hold.
type templateData struct {
	Namespace  string
	Pods       string
	StablePods string
	Window     string
}

func newTemplate(name, text string) (*template.Template, error) {
	return template.New(name).Option("missingkey=error").Parse(text)
}

// render executes a query template for a scope.
func render(name, text string, s Scope) (string, error) {
	return execute(name, text, templateData{
		Namespace:  promString(s.Namespace),
		Pods:       podRegex(s.Pods),
		StablePods: podRegex(s.StablePods),
		Window:     model.Duration(s.Window).String(),
	})
}

// renderShown renders a query as results keep it: the namespace and window filled in, the pod
// lists left as {{.Pods}} and {{.StablePods}}, so that a result is the same size for 5 pods or
// 5,000. queryHash identifies the query as sent.
func renderShown(name, text string, s Scope) string {
	shown, err := execute(name, text, templateData{
		Namespace:  promString(s.Namespace),
		Pods:       "{{.Pods}}",
		StablePods: "{{.StablePods}}",
		Window:     model.Duration(s.Window).String(),
	})
	if err != nil {
		return text
	}
	return shown
}

// queryHash is a short hash of a query as sent, to match a result with Prometheus' query log.
func queryHash(query string) string {
	sum := sha256.Sum256([]byte(query))
	return "sha256:" + hex.EncodeToString(sum[:6])
}

func execute(name, text string, data templateData) (string, error) {
	t, err := newTemplate(name, text)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	if err := t.Execute(&b, data); err != nil {
		return "", fmt.Errorf("rendering query %s: %w", name, err)
	}
	return b.String(), nil
}

// podRegex is a regular expression matching exactly the given names, escaped for a PromQL
// string. An empty list matches nothing.
func podRegex(names []string) string {
	if len(names) == 0 {
		// Matches no value, not even the empty one a series without the label has.
		return promString(".^")
	}
	quoted := make([]string, len(names))
	for i, n := range names {
		quoted[i] = regexp.QuoteMeta(n)
	}
	return promString(strings.Join(quoted, "|"))
}

// promString escapes s for the inside of a double-quoted PromQL string.
func promString(s string) string {
	r := strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`, "\r", `\r`, "\t", `\t`)
	return r.Replace(s)
}

// Built-in query templates. PromQL anchors =~ at both ends.
const (
	errorRateQuery = `sum(rate(http_requests_total{namespace="{{.Namespace}}",pod=~"{{.Pods}}",code=~"5.."}[{{.Window}}])) / sum(rate(http_requests_total{namespace="{{.Namespace}}",pod=~"{{.Pods}}"}[{{.Window}}]))`
	// latencyQuery takes the quantile through fmt.
	latencyQuery = `histogram_quantile(%g, sum by (le) (rate(http_request_duration_seconds_bucket{namespace="{{.Namespace}}",pod=~"{{.Pods}}"}[{{.Window}}])))`
	trafficQuery = `sum(rate(http_requests_total{namespace="{{.Namespace}}",pod=~"{{.Pods}}"}[{{.Window}}]))`
	cpuQuery     = `max(sum by (pod, container) (rate(container_cpu_usage_seconds_total{namespace="{{.Namespace}}",pod=~"{{.Pods}}"}[{{.Window}}])) / sum by (pod, container) (kube_pod_container_resource_limits{namespace="{{.Namespace}}",pod=~"{{.Pods}}",resource="cpu"}))`
	memoryQuery  = `max(sum by (pod, container) (container_memory_working_set_bytes{namespace="{{.Namespace}}",pod=~"{{.Pods}}"}) / sum by (pod, container) (kube_pod_container_resource_limits{namespace="{{.Namespace}}",pod=~"{{.Pods}}",resource="memory"}))`
	limitsQuery  = `count(kube_pod_container_resource_limits{namespace="{{.Namespace}}",pod=~"{{.Pods}}"})`
)
