package analysis

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	promconfig "github.com/prometheus/common/config"

	"github.com/inplace-rollout/inplace-rollout/pkg/strictdecode"
)

// Config is an analysis configuration: where Prometheus is, how often to measure, the limits,
// and the checks. Decode it with Decode, which rejects unknown fields by path.
type Config struct {
	Prometheus Prometheus `json:"prometheus"`
	// Interval between measurements [10s].
	Interval Duration `json:"interval,omitempty"`
	// Count is how many measurements a batch needs [3].
	Count int `json:"count,omitempty"`
	// InitialDelay before the first measurement of a batch [the window]: by default the first
	// rate() window holds only traffic served after the batch was updated.
	InitialDelay *Duration `json:"initialDelay,omitempty"`
	// Window is the range of rate() in the built-in queries, {{.Window}} [1m].
	Window Duration `json:"window,omitempty"`
	// FailureLimit: more Fail measurements of a check than this fail it [0].
	FailureLimit *int `json:"failureLimit,omitempty"`
	// InconclusiveLimit: more Inconclusive measurements of a check than this make it Inconclusive [0].
	InconclusiveLimit *int `json:"inconclusiveLimit,omitempty"`
	// ConsecutiveErrorLimit: more consecutive Error measurements of a check than this make it Error [4].
	ConsecutiveErrorLimit *int   `json:"consecutiveErrorLimit,omitempty"`
	Checks                Checks `json:"checks,omitempty"`
}

// Prometheus says how to reach the Prometheus HTTP API. Credentials come from a Secret in the
// rollout's namespace (every driver), from a file (the command line only: a file is read from
// the driver's own filesystem), or inline; they never appear in output.
type Prometheus struct {
	Address string `json:"address,omitempty"`
	// Timeout of one query [10s].
	Timeout Duration          `json:"timeout,omitempty"`
	Headers map[string]string `json:"headers,omitempty"`
	// BearerTokenSecret is a key of a Secret holding the bearer token.
	BearerTokenSecret *SecretKeyRef `json:"bearerTokenSecret,omitempty"`
	BearerTokenFile   string        `json:"bearerTokenFile,omitempty"`
	BasicAuth         *BasicAuth    `json:"basicAuth,omitempty"`
	TLS               *TLS          `json:"tls,omitempty"`
}

// BasicAuth credentials; the password from a Secret, a file, or inline.
type BasicAuth struct {
	Username       string        `json:"username"`
	Password       string        `json:"password,omitempty"`
	PasswordSecret *SecretKeyRef `json:"passwordSecret,omitempty"`
	PasswordFile   string        `json:"passwordFile,omitempty"`
}

// TLS settings for an https address.
type TLS struct {
	// CASecret is a key of a Secret holding the PEM certificates that sign Prometheus'.
	CASecret           *SecretKeyRef `json:"caSecret,omitempty"`
	CAFile             string        `json:"caFile,omitempty"`
	InsecureSkipVerify bool          `json:"insecureSkipVerify,omitempty"`
}

// SecretKeyRef names a key of a Secret in the rollout's namespace.
type SecretKeyRef struct {
	Name string `json:"name"`
	Key  string `json:"key"`
}

// Files lists the configuration's fields that name a file, by path: a driver serving other
// people's rollouts (the Argo plugin, the Tekton controller) refuses them, since it would read
// the file from its own filesystem, where its own credentials live.
func (p Prometheus) Files() []string {
	var paths []string
	if p.BearerTokenFile != "" {
		paths = append(paths, "prometheus.bearerTokenFile")
	}
	if p.BasicAuth != nil && p.BasicAuth.PasswordFile != "" {
		paths = append(paths, "prometheus.basicAuth.passwordFile")
	}
	if p.TLS != nil && p.TLS.CAFile != "" {
		paths = append(paths, "prometheus.tls.caFile")
	}
	return paths
}

// Inline lists the configuration's fields that hold a credential written in the configuration
// itself, by path: a driver serving other people's rollouts refuses them, since everyone who can
// read the object the configuration sits in (a Rollout, a CustomRun) would read the credential.
// A bearer token has no inline field, and an Authorization header is refused by Validate.
func (p Prometheus) Inline() []string {
	var paths []string
	if p.BasicAuth != nil && p.BasicAuth.Password != "" {
		paths = append(paths, "prometheus.basicAuth.password")
	}
	return paths
}

// SecretRefs are the Secret keys the configuration reads, by the path of their field.
func (p Prometheus) SecretRefs() map[string]SecretKeyRef {
	refs := map[string]SecretKeyRef{}
	if r := p.BearerTokenSecret; r != nil {
		refs["prometheus.bearerTokenSecret"] = *r
	}
	if p.BasicAuth != nil && p.BasicAuth.PasswordSecret != nil {
		refs["prometheus.basicAuth.passwordSecret"] = *p.BasicAuth.PasswordSecret
	}
	if p.TLS != nil && p.TLS.CASecret != nil {
		refs["prometheus.tls.caSecret"] = *p.TLS.CASecret
	}
	return refs
}

// Credentials are the values of the Secret keys a configuration names (SecretRefs), read by the
// caller, which knows the namespace. They print as a redaction.
type Credentials struct {
	BearerToken string
	Password    string
	CA          string
}

// String hides the values.
func (Credentials) String() string { return "<credentials redacted>" }

// GoString hides the values from %#v.
func (Credentials) GoString() string { return "<credentials redacted>" }

// Checks are the golden signals, each on unless disabled, plus custom checks.
type Checks struct {
	ErrorRate  *ErrorRate  `json:"errorRate,omitempty"`
	Latency    *Latency    `json:"latency,omitempty"`
	Traffic    *Traffic    `json:"traffic,omitempty"`
	Saturation *Saturation `json:"saturation,omitempty"`
	Custom     []Custom    `json:"custom,omitempty"`
}

// ErrorRate compares the share of 5xx answers of the updated pods with an absolute bound and
// with the pods not yet updated.
type ErrorRate struct {
	Disabled bool `json:"disabled,omitempty"`
	// Query replaces the built-in ratio query; {{.Pods}} selects the pods measured.
	Query string `json:"query,omitempty"`
	// MaxRatio: an error ratio above it fails [0.05].
	MaxRatio *float64 `json:"maxRatio,omitempty"`
	// MaxIncrease: an error ratio more than this above the not-yet-updated pods' fails [0.02].
	MaxIncrease *float64 `json:"maxIncrease,omitempty"`
}

// Latency compares a latency quantile of the updated pods with an absolute bound and with the
// pods not yet updated.
type Latency struct {
	Disabled bool   `json:"disabled,omitempty"`
	Query    string `json:"query,omitempty"`
	// Quantile of http_request_duration_seconds [0.99].
	Quantile *float64 `json:"quantile,omitempty"`
	// Max seconds [1].
	Max *float64 `json:"max,omitempty"`
	// MaxIncrease seconds over the not-yet-updated pods [0.25].
	MaxIncrease *float64 `json:"maxIncrease,omitempty"`
}

// Traffic is the request rate the updated pods must serve for a verdict to count: below it
// every measurement is Inconclusive, never a pass.
type Traffic struct {
	Disabled bool   `json:"disabled,omitempty"`
	Query    string `json:"query,omitempty"`
	// MinRate in requests per second [1].
	MinRate *float64 `json:"minRate,omitempty"`
}

// Saturation compares CPU and memory use of the updated pods with their limits. Pods without
// limits have nothing to compare: the check is skipped, and says so.
type Saturation struct {
	Disabled    bool   `json:"disabled,omitempty"`
	CPUQuery    string `json:"cpuQuery,omitempty"`
	MemoryQuery string `json:"memoryQuery,omitempty"`
	// MaxCPU and MaxMemory are fractions of the limit [0.9].
	MaxCPU    *float64 `json:"maxCPU,omitempty"`
	MaxMemory *float64 `json:"maxMemory,omitempty"`
}

// Custom is a user query with a condition on its value, e.g. "result < 0.5". The condition
// holds for every series of the result, or the check fails: a query by pod fails when any pod
// does.
type Custom struct {
	Name      string `json:"name"`
	Query     string `json:"query"`
	Condition string `json:"condition"`
}

// Duration is a time.Duration written as "10s", "1m30s".
type Duration time.Duration

// MarshalJSON writes the duration as a string.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

// UnmarshalJSON reads a duration string.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("a duration must be a string such as \"30s\"")
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("%q is not a duration such as \"30s\"", s)
	}
	if v < 0 {
		return fmt.Errorf("duration %q is negative", s)
	}
	*d = Duration(v)
	return nil
}

// Defaults.
const (
	DefaultInterval              = 10 * time.Second
	DefaultCount                 = 3
	DefaultWindow                = time.Minute
	DefaultTimeout               = 10 * time.Second
	DefaultConsecutiveErrorLimit = 4
)

// Decode parses a YAML or JSON analysis configuration. An unknown field is an error naming its
// path; so is a value of the wrong type or out of range.
func Decode(data []byte) (*Config, error) {
	var c Config
	if err := strictdecode.Decode(data, &c); err != nil {
		if errors.Is(err, strictdecode.ErrEmpty) {
			return nil, fmt.Errorf("analysis config is empty")
		}
		return nil, fmt.Errorf("analysis config: %w", err)
	}
	if err := c.Validate(); err != nil {
		return nil, err
	}
	return &c, nil
}

// DecodeFile reads and decodes a configuration file.
func DecodeFile(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading analysis config: %w", err)
	}
	c, err := Decode(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}

// Validate checks values and ranges.
func (c *Config) Validate() error {
	bad := func(format string, args ...any) error { return fmt.Errorf("analysis config: "+format, args...) }
	if c.Prometheus.Address != "" {
		if err := CheckAddress(c.Prometheus.Address); err != nil {
			return bad("prometheus.address: %v", err)
		}
	}
	// Negative durations (interval, initialDelay, window, prometheus.timeout) are rejected by
	// Duration.UnmarshalJSON, named by their path in unknownFields.
	if c.Count < 0 {
		return bad("count %d is negative: give 1 or more, or 0 for the default %d", c.Count, DefaultCount)
	}
	// Slices, not maps, here and below: with several mistakes, the same one is reported first.
	for _, l := range []struct {
		path string
		v    *int
	}{{"failureLimit", c.FailureLimit}, {"inconclusiveLimit", c.InconclusiveLimit}, {"consecutiveErrorLimit", c.ConsecutiveErrorLimit}} {
		if l.v != nil && *l.v < 0 {
			return bad("%s %d is negative: give 0 or more", l.path, *l.v)
		}
	}
	if err := c.Checks.checkBounds(); err != nil {
		return bad("%v", err)
	}
	p := c.Prometheus
	if b := p.BasicAuth; b != nil {
		if set := setFields(map[string]bool{"password": b.Password != "", "passwordSecret": b.PasswordSecret != nil, "passwordFile": b.PasswordFile != ""}); len(set) > 1 {
			return bad("prometheus.basicAuth: give %s, not both", strings.Join(set, " or "))
		}
	}
	if p.BearerTokenFile != "" && p.BearerTokenSecret != nil {
		return bad("prometheus: give bearerTokenSecret or bearerTokenFile, not both")
	}
	if t := p.TLS; t != nil && t.CAFile != "" && t.CASecret != nil {
		return bad("prometheus.tls: give caSecret or caFile, not both")
	}
	// The client library rejects these too, but only when a rollout builds the client, and
	// in its own field names (bearer_token_file, basic_auth).
	if token := setFields(map[string]bool{"prometheus.bearerTokenFile": p.BearerTokenFile != "", "prometheus.bearerTokenSecret": p.BearerTokenSecret != nil}); len(token) > 0 && p.BasicAuth != nil {
		return bad("%s and prometheus.basicAuth are both set: give one of them", token[0])
	}
	for path, ref := range p.SecretRefs() {
		if ref.Name == "" || ref.Key == "" {
			return bad("%s: give the Secret's name and key", path)
		}
	}
	headers := make([]string, 0, len(p.Headers))
	for h := range p.Headers {
		headers = append(headers, h)
	}
	sort.Strings(headers)
	for _, h := range headers {
		canonical := http.CanonicalHeaderKey(h)
		switch _, reserved := promconfig.ReservedHeaders[canonical]; {
		case canonical == "Authorization":
			return bad("prometheus.headers.%s: the client sets this header itself: give the credentials in prometheus.bearerTokenSecret, prometheus.bearerTokenFile or prometheus.basicAuth", h)
		case reserved:
			return bad("prometheus.headers.%s: the client sets this header itself: remove it", h)
		}
	}
	if l := c.Checks.Latency; l != nil && l.Quantile != nil && (*l.Quantile <= 0 || *l.Quantile >= 1) {
		return bad("checks.latency.quantile %v is not between 0 and 1", *l.Quantile)
	}
	seen := map[string]bool{}
	for i, cu := range c.Checks.Custom {
		if cu.Name == "" || cu.Query == "" {
			return bad("checks.custom[%d]: name and query are required", i)
		}
		if seen[cu.Name] || builtinCheck[cu.Name] {
			return bad("checks.custom[%d]: the name %q is already used", i, cu.Name)
		}
		seen[cu.Name] = true
		if _, err := parseCondition(cu.Condition); err != nil {
			return bad("checks.custom[%d] (%s): %v", i, cu.Name, err)
		}
		if err := checkTemplate(cu.Name, cu.Query); err != nil {
			return bad("checks.custom[%d] (%s): query: %v", i, cu.Name, err)
		}
	}
	for _, q := range []struct{ path, text string }{
		{"checks.errorRate.query", queryOf(c.Checks.ErrorRate)},
		{"checks.latency.query", queryOf(c.Checks.Latency)},
		{"checks.traffic.query", queryOf(c.Checks.Traffic)},
	} {
		if q.text != "" {
			if err := checkTemplate(q.path, q.text); err != nil {
				return bad("%s: %v", q.path, err)
			}
		}
	}
	return nil
}

// checkBounds rejects a negative threshold, naming its path: below zero a maximum fails healthy
// pods, and a minimum traffic rate lets a batch nobody sent requests to pass.
func (c Checks) checkBounds() error {
	type bound struct {
		path string
		v    *float64
	}
	var bounds []bound
	if e := c.ErrorRate; e != nil {
		bounds = append(bounds, bound{"checks.errorRate.maxRatio", e.MaxRatio}, bound{"checks.errorRate.maxIncrease", e.MaxIncrease})
	}
	if l := c.Latency; l != nil {
		bounds = append(bounds, bound{"checks.latency.max", l.Max}, bound{"checks.latency.maxIncrease", l.MaxIncrease})
	}
	if t := c.Traffic; t != nil {
		bounds = append(bounds, bound{"checks.traffic.minRate", t.MinRate})
	}
	if s := c.Saturation; s != nil {
		bounds = append(bounds, bound{"checks.saturation.maxCPU", s.MaxCPU}, bound{"checks.saturation.maxMemory", s.MaxMemory})
	}
	for _, b := range bounds {
		if b.v != nil && *b.v < 0 {
			return fmt.Errorf("%s %v is negative: give 0 or more", b.path, *b.v)
		}
	}
	return nil
}

// CheckAddress reports whether addr can be a Prometheus address: an http or https URL with a
// host and without a user or password. Credentials belong in prometheus.basicAuth, where they
// stay secret; in the address they would end up in errors, logs and the rollout lock. The
// error never shows a user or password the address holds.
func CheckAddress(addr string) error {
	u, err := url.Parse(addr)
	switch {
	case err == nil && u.User != nil:
		return fmt.Errorf("%s holds a user name or password: remove them from the address and give the credentials in prometheus.basicAuth of the analysis config", shownAddress(addr))
	case err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "":
		return fmt.Errorf("%s is not an http(s) URL such as http://prometheus:9090", shownAddress(addr))
	}
	return nil
}

// shownAddress is addr quoted for an error message, with a user and password replaced by
// xxxxx. url.URL.Redacted would keep the user name, which can be a token. An address with an
// @ that does not parse as user information (say "user:pw@host" without a scheme) is not
// shown at all: a password may be anywhere in it.
func shownAddress(addr string) string {
	u, err := url.Parse(addr)
	switch {
	case err == nil && u.User != nil:
		c := *u
		c.User = url.User("xxxxx")
		return strconv.Quote(c.String())
	case strings.Contains(addr, "@"):
		return "the address (not shown, as it may hold a password)"
	}
	return strconv.Quote(addr)
}

// checkTemplate renders a query template with sample values, which catches unknown fields
// such as {{.Pod}} as well as syntax errors.
func checkTemplate(name, text string) error {
	_, err := render(name, text, Scope{Namespace: "ns", Pods: []string{"pod"}, StablePods: []string{"stable"}, Window: time.Minute})
	return err
}

func queryOf(v any) string {
	switch c := v.(type) {
	case *ErrorRate:
		if c != nil {
			return c.Query
		}
	case *Latency:
		if c != nil {
			return c.Query
		}
	case *Traffic:
		if c != nil {
			return c.Query
		}
	}
	return ""
}

// Built-in check names.
const (
	CheckErrorRate  = "errorRate"
	CheckLatency    = "latency"
	CheckTraffic    = "traffic"
	CheckSaturation = "saturation"
)

var builtinCheck = map[string]bool{CheckErrorRate: true, CheckLatency: true, CheckTraffic: true, CheckSaturation: true}

func (c *Config) interval() time.Duration { return orDuration(c.Interval, DefaultInterval) }
func (c *Config) window() time.Duration   { return orDuration(c.Window, DefaultWindow) }

func (c *Config) initialDelay() time.Duration {
	if c.InitialDelay == nil {
		return c.window()
	}
	return time.Duration(*c.InitialDelay)
}

func (c *Config) count() int {
	if c.Count == 0 {
		return DefaultCount
	}
	return c.Count
}

func (c *Config) limits() (failure, inconclusive, consecutiveErrors int) {
	return orInt(c.FailureLimit, 0), orInt(c.InconclusiveLimit, 0), orInt(c.ConsecutiveErrorLimit, DefaultConsecutiveErrorLimit)
}

func orDuration(d Duration, def time.Duration) time.Duration {
	if d == 0 {
		return def
	}
	return time.Duration(d)
}

// setFields returns the names of the fields that are set, in order.
func setFields(fields map[string]bool) []string {
	var names []string
	for name, set := range fields {
		if set {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	return names
}

func orInt(p *int, def int) int {
	if p == nil {
		return def
	}
	return *p
}

func orFloat(p *float64, def float64) float64 {
	if p == nil {
		return def
	}
	return *p
}
