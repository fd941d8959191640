package analysis

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"
)

const fullYAML = `
prometheus:
  address: https://prometheus.monitoring:9090
  timeout: 5s
  headers:
    X-Scope-OrgID: team-a
  basicAuth:
    username: reader
    passwordFile: /etc/prom/password
  tls:
    caFile: /etc/prom/ca.crt
    insecureSkipVerify: true
interval: 30s
count: 5
initialDelay: 1m30s
window: 2m
failureLimit: 1
inconclusiveLimit: 2
consecutiveErrorLimit: 0
checks:
  errorRate:
    maxRatio: 0.1
    maxIncrease: 0.01
  latency:
    quantile: 0.95
    max: 0.5
  traffic:
    disabled: true
  saturation:
    maxCPU: 0.8
  custom:
  - name: queueDepth
    query: 'sum(queue_depth{namespace="{{.Namespace}}",pod=~"{{.Pods}}"})'
    condition: result >= 0 && result < 100
`

const fullJSON = `{
  "prometheus": {"address": "http://127.0.0.1:9090", "bearerTokenFile": "/var/run/token"},
  "interval": "45s",
  "count": 7,
  "window": "30s",
  "inconclusiveLimit": 3,
  "checks": {
    "latency": {"disabled": true},
    "custom": [{"name": "up", "query": "min(up{pod=~\"{{.Pods}}\"})", "condition": "result == 1"}]
  }
}`

func decodeOK(t *testing.T, in string) *Config {
	t.Helper()
	c, err := Decode([]byte(in))
	if err != nil {
		t.Fatalf("Decode: %v", err)
	}
	if c == nil {
		t.Fatal("Decode returned a nil config and no error")
	}
	return c
}

func TestDecodeValid(t *testing.T) {
	type limits struct{ failure, inconclusive, consecutiveErrors int }
	tests := []struct {
		name         string
		in           string
		interval     time.Duration
		count        int
		window       time.Duration
		initialDelay time.Duration
		limits       limits
		check        func(t *testing.T, c *Config)
	}{
		{
			name: "yaml with every section", in: fullYAML,
			interval: 30 * time.Second, count: 5, window: 2 * time.Minute, initialDelay: 90 * time.Second,
			limits: limits{1, 2, 0}, // an explicit 0 is not replaced by the default 4
			check: func(t *testing.T, c *Config) {
				t.Helper()
				p := c.Prometheus
				if p.Address != "https://prometheus.monitoring:9090" || p.Timeout != Duration(5*time.Second) {
					t.Errorf("prometheus = %+v", p)
				}
				if p.Headers["X-Scope-OrgID"] != "team-a" {
					t.Errorf("headers = %v", p.Headers)
				}
				if p.BasicAuth == nil || p.BasicAuth.Username != "reader" || p.BasicAuth.PasswordFile != "/etc/prom/password" || p.BasicAuth.Password != "" {
					t.Errorf("basicAuth = %+v", p.BasicAuth)
				}
				if p.TLS == nil || p.TLS.CAFile != "/etc/prom/ca.crt" || !p.TLS.InsecureSkipVerify {
					t.Errorf("tls = %+v", p.TLS)
				}
				ch := c.Checks
				if ch.ErrorRate == nil || *ch.ErrorRate.MaxRatio != 0.1 || *ch.ErrorRate.MaxIncrease != 0.01 {
					t.Errorf("errorRate = %+v", ch.ErrorRate)
				}
				if ch.Latency == nil || *ch.Latency.Quantile != 0.95 || *ch.Latency.Max != 0.5 || ch.Latency.MaxIncrease != nil {
					t.Errorf("latency = %+v", ch.Latency)
				}
				if ch.Traffic == nil || !ch.Traffic.Disabled {
					t.Errorf("traffic = %+v", ch.Traffic)
				}
				if ch.Saturation == nil || *ch.Saturation.MaxCPU != 0.8 || ch.Saturation.MaxMemory != nil {
					t.Errorf("saturation = %+v", ch.Saturation)
				}
				if len(ch.Custom) != 1 || ch.Custom[0].Name != "queueDepth" || ch.Custom[0].Condition != "result >= 0 && result < 100" ||
					!strings.Contains(ch.Custom[0].Query, `pod=~"{{.Pods}}"`) {
					t.Errorf("custom = %+v", ch.Custom)
				}
			},
		},
		{
			name: "json", in: fullJSON,
			interval: 45 * time.Second, count: 7, window: 30 * time.Second, initialDelay: 30 * time.Second, // the window
			limits: limits{0, 3, DefaultConsecutiveErrorLimit},
			check: func(t *testing.T, c *Config) {
				t.Helper()
				if c.Prometheus.Address != "http://127.0.0.1:9090" || c.Prometheus.BearerTokenFile != "/var/run/token" {
					t.Errorf("prometheus = %+v", c.Prometheus)
				}
				if c.Checks.Latency == nil || !c.Checks.Latency.Disabled || c.Checks.ErrorRate != nil {
					t.Errorf("checks = %+v", c.Checks)
				}
				if len(c.Checks.Custom) != 1 || c.Checks.Custom[0].Query != `min(up{pod=~"{{.Pods}}"})` {
					t.Errorf("custom = %+v", c.Checks.Custom)
				}
			},
		},
		{
			name: "empty json object takes every default", in: `{}`,
			interval: DefaultInterval, count: DefaultCount, window: DefaultWindow, initialDelay: DefaultWindow,
			limits: limits{0, 0, DefaultConsecutiveErrorLimit},
		},
		{
			name: "zero values take the defaults", in: "count: 0\ninterval: 0s\nwindow: 0s\n",
			interval: DefaultInterval, count: DefaultCount, window: DefaultWindow, initialDelay: DefaultWindow,
			limits: limits{0, 0, DefaultConsecutiveErrorLimit},
		},
		{
			name: "an explicit zero initial delay is kept", in: "initialDelay: 0s\nwindow: 5m\n",
			interval: DefaultInterval, count: DefaultCount, window: 5 * time.Minute, initialDelay: 0,
			limits: limits{0, 0, DefaultConsecutiveErrorLimit},
		},
		{
			name: "only the prometheus address", in: "prometheus:\n  address: http://prom:9090/prefix\n",
			interval: 10 * time.Second, count: 3, window: time.Minute, initialDelay: time.Minute,
			limits: limits{0, 0, 4},
			check: func(t *testing.T, c *Config) {
				t.Helper()
				if c.Prometheus.Address != "http://prom:9090/prefix" {
					t.Errorf("address = %q", c.Prometheus.Address)
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := decodeOK(t, tt.in)
			if got := c.interval(); got != tt.interval {
				t.Errorf("interval() = %v, want %v", got, tt.interval)
			}
			if got := c.count(); got != tt.count {
				t.Errorf("count() = %d, want %d", got, tt.count)
			}
			if got := c.window(); got != tt.window {
				t.Errorf("window() = %v, want %v", got, tt.window)
			}
			if got := c.initialDelay(); got != tt.initialDelay {
				t.Errorf("initialDelay() = %v, want %v", got, tt.initialDelay)
			}
			f, i, e := c.limits()
			if got := (limits{f, i, e}); got != tt.limits {
				t.Errorf("limits() = %+v, want %+v", got, tt.limits)
			}
			if tt.check != nil {
				tt.check(t, c)
			}
		})
	}
}

func TestDecodeErrors(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want []string // substrings of the error
	}{
		// Unknown fields, by their full path.
		{"unknown top-level field", "intervall: 10s", []string{`unknown field "intervall"`, "interval"}},
		{"unknown latency field", "checks:\n  latency:\n    quantil: 0.9\n", []string{`unknown field "checks.latency.quantil"`, "quantile"}},
		{"unknown tls field", "prometheus:\n  tls:\n    caFil: /ca\n", []string{`unknown field "prometheus.tls.caFil"`, "caFile"}},
		{"unknown basicAuth field", "prometheus:\n  basicAuth:\n    user: u\n", []string{`unknown field "prometheus.basicAuth.user"`}},
		{"unknown custom field", "checks:\n  custom:\n  - nam: x\n    query: up\n    condition: result > 0\n", []string{`unknown field "checks.custom[0].nam"`, "name"}},
		{"unknown field in second custom", `{"checks":{"custom":[{"name":"a","query":"up","condition":"result > 0"},{"name":"b","query":"up","condition":"result > 0","cond":"x"}]}}`, []string{`unknown field "checks.custom[1].cond"`}},
		{"field names are case-sensitive", "Count: 3", []string{`unknown field "Count"`}},
		{"unknown check", "checks:\n  errors: {}\n", []string{`unknown field "checks.errors"`}},

		// Wrong types.
		{"count is a string", "count: three", []string{"count", "cannot hold string"}},
		{"count is a fraction", "count: 1.5", []string{"count", "1.5"}},
		{"maxRatio is a string", "checks:\n  errorRate:\n    maxRatio: high\n", []string{"checks.errorRate.maxRatio", "cannot hold string"}},
		{"disabled is a string", "checks:\n  traffic:\n    disabled: sometimes\n", []string{"checks.traffic.disabled", "bool"}},
		{"custom is not a list", "checks:\n  custom: 3\n", []string{"checks.custom", "cannot hold number"}},
		{"header value is an object", "prometheus:\n  headers:\n    a: {b: c}\n", []string{"prometheus.headers", "cannot hold object"}},
		{"document is a list", "- a\n- b\n", []string{"cannot hold array"}},
		{"interval is a number", "interval: 10", []string{"interval", "duration"}},
		{"custom query names an unknown field", "checks:\n  custom:\n  - {name: q, query: 'up{pod=~\"{{.Pod}}\"}', condition: result > 0}\n", []string{"checks.custom[0] (q)", "Pod"}},
		{"built-in query override names an unknown field", "checks:\n  traffic: {query: 'sum(x{ns=\"{{.NS}}\"})'}\n", []string{"checks.traffic.query", "NS"}},
		{"window is not a duration", "window: soon", []string{"window", `"soon" is not a duration`}},
		{"timeout is negative", "prometheus:\n  timeout: -1s\n", []string{"prometheus.timeout", "negative"}},
		{"yaml syntax", "count: [", []string{"analysis config", "yaml"}},

		// Ranges.
		{"negative count", "count: -1", []string{"count -1 is negative: give 1 or more, or 0 for the default 3"}},
		{"negative failureLimit", "failureLimit: -1", []string{"failureLimit -1 is negative: give 0 or more"}},
		{"negative inconclusiveLimit", "inconclusiveLimit: -2", []string{"inconclusiveLimit -2 is negative"}},
		{"negative consecutiveErrorLimit", "consecutiveErrorLimit: -3", []string{"consecutiveErrorLimit -3 is negative"}},
		{"the first of several negative limits", "consecutiveErrorLimit: -3\ninconclusiveLimit: -2\nfailureLimit: -1\n", []string{"analysis config: failureLimit -1"}},
		{"negative interval", "interval: -10s", []string{"interval", `duration "-10s" is negative`}},
		{"negative initialDelay", "initialDelay: -1m", []string{"initialDelay", `duration "-1m" is negative`}},
		{"initialDelay is not a duration", "initialDelay: later", []string{"initialDelay", `"later" is not a duration`}},
		{"negative window", "window: -1m", []string{"window", `duration "-1m" is negative`}},
		{"negative errorRate.maxRatio", "checks:\n  errorRate:\n    maxRatio: -0.1\n", []string{"checks.errorRate.maxRatio -0.1 is negative: give 0 or more"}},
		{"negative errorRate.maxIncrease", "checks:\n  errorRate:\n    maxIncrease: -0.01\n", []string{"checks.errorRate.maxIncrease -0.01 is negative"}},
		{"negative latency.max", "checks:\n  latency:\n    max: -1\n", []string{"checks.latency.max -1 is negative"}},
		{"negative latency.maxIncrease", "checks:\n  latency:\n    maxIncrease: -0.25\n", []string{"checks.latency.maxIncrease -0.25 is negative"}},
		{"negative traffic.minRate", "checks:\n  traffic:\n    minRate: -1\n", []string{"checks.traffic.minRate -1 is negative"}},
		{"negative saturation.maxCPU", "checks:\n  saturation:\n    maxCPU: -0.5\n", []string{"checks.saturation.maxCPU -0.5 is negative"}},
		{"negative saturation.maxMemory", "checks:\n  saturation:\n    maxMemory: -0.9\n", []string{"checks.saturation.maxMemory -0.9 is negative"}},
		{"a negative bound of a disabled check", "checks:\n  traffic:\n    disabled: true\n    minRate: -1\n", []string{"checks.traffic.minRate -1 is negative"}},
		{"address without scheme", "prometheus:\n  address: prometheus:9090\n", []string{"prometheus.address", "not an http(s) URL"}},
		{"address with another scheme", "prometheus:\n  address: ftp://prometheus:9090\n", []string{"prometheus.address", `"ftp://prometheus:9090"`}},
		{"address without host", "prometheus:\n  address: 'http://'\n", []string{"prometheus.address", "not an http(s) URL"}},
		{"address that does not parse", "prometheus:\n  address: 'http://[::1'\n", []string{"prometheus.address", "not an http(s) URL"}},
		{"address with a user and password", "prometheus:\n  address: http://reader:pw-secret@prom:9090\n", []string{"prometheus.address", `"http://xxxxx@prom:9090"`, "prometheus.basicAuth"}},
		{"address with a user only", "prometheus:\n  address: https://token-user@prom:9090/x\n", []string{"prometheus.address", `"https://xxxxx@prom:9090/x"`, "prometheus.basicAuth"}},
		{"quantile 0", "checks:\n  latency:\n    quantile: 0\n", []string{"checks.latency.quantile", "between 0 and 1"}},
		{"quantile 1", "checks:\n  latency:\n    quantile: 1\n", []string{"checks.latency.quantile 1", "between 0 and 1"}},
		{"quantile above 1", "checks:\n  latency:\n    quantile: 99\n", []string{"checks.latency.quantile 99", "between 0 and 1"}},
		{"negative quantile", "checks:\n  latency:\n    quantile: -0.5\n", []string{"checks.latency.quantile -0.5"}},

		// Custom checks and templates.
		{"duplicate custom names", "checks:\n  custom:\n  - {name: q, query: up, condition: result > 0}\n  - {name: q, query: up, condition: result > 1}\n", []string{"checks.custom[1]", `"q" is already used`}},
		{"custom named like a built-in", "checks:\n  custom:\n  - {name: latency, query: up, condition: result > 0}\n", []string{"checks.custom[0]", `"latency" is already used`}},
		{"custom named saturation", "checks:\n  custom:\n  - {name: saturation, query: up, condition: result > 0}\n", []string{`"saturation" is already used`}},
		{"custom without a name", "checks:\n  custom:\n  - {query: up, condition: result > 0}\n", []string{"checks.custom[0]", "name and query are required"}},
		{"custom without a query", "checks:\n  custom:\n  - {name: q, condition: result > 0}\n", []string{"checks.custom[0]", "name and query are required"}},
		{"custom without a condition", "checks:\n  custom:\n  - {name: q, query: up}\n", []string{"checks.custom[0] (q)", "condition is empty"}},
		{"custom condition with a bad operator", "checks:\n  custom:\n  - {name: q, query: up, condition: result ~ 1}\n", []string{"checks.custom[0] (q)", `unknown operator "~"`}},
		{"custom condition on another variable", "checks:\n  custom:\n  - {name: q, query: up, condition: value < 1}\n", []string{"checks.custom[0] (q)", "result OP NUMBER"}},
		{"custom condition against a word", "checks:\n  custom:\n  - {name: q, query: up, condition: result < one}\n", []string{"checks.custom[0] (q)", `"one" is not a number`}},
		{"custom query that does not parse", "checks:\n  custom:\n  - {name: q, query: 'up{pod=~\"{{.Pods\"}', condition: result > 0}\n", []string{"checks.custom[0] (q): query:"}},
		{"errorRate query that does not parse", "checks:\n  errorRate:\n    query: 'sum({{if}})'\n", []string{"checks.errorRate.query"}},
		{"latency query that does not parse", "checks:\n  latency:\n    query: '{{.Pods'\n", []string{"checks.latency.query"}},
		{"traffic query that does not parse", "checks:\n  traffic:\n    query: '{{end}}'\n", []string{"checks.traffic.query"}},

		// Credentials.
		{"password and passwordFile", "prometheus:\n  basicAuth:\n    username: u\n    password: p\n    passwordFile: /p\n", []string{"prometheus.basicAuth", "password or passwordFile, not both"}},
		{"bearerTokenFile and basicAuth", "prometheus:\n  bearerTokenFile: /t\n  basicAuth:\n    username: u\n    passwordFile: /p\n", []string{"prometheus.bearerTokenFile and prometheus.basicAuth are both set: give one of them"}},
		{"an Authorization header", "prometheus:\n  headers:\n    authorization: Bearer pw-secret\n", []string{"prometheus.headers.authorization: the client sets this header itself", "prometheus.bearerTokenFile or prometheus.basicAuth"}},
		{"a header the client sets", "prometheus:\n  headers:\n    X-Scope-OrgID: a\n    User-Agent: b\n", []string{"prometheus.headers.User-Agent: the client sets this header itself: remove it"}},

		// Empty documents.
		{"empty document", "", []string{"analysis config is empty"}},
		{"blank document", "  \n\n", []string{"analysis config is empty"}},
		{"comment only", "# nothing here\n", []string{"analysis config is empty"}},
		{"null", "null", []string{"analysis config is empty"}},
		{"a secret without its key", "prometheus: {bearerTokenSecret: {name: prom}}", []string{"prometheus.bearerTokenSecret: give the Secret's name and key"}},
		{"a password secret without its name", "prometheus: {basicAuth: {username: u, passwordSecret: {key: k}}}", []string{"prometheus.basicAuth.passwordSecret: give the Secret's name and key"}},
		{"a token from a secret and a file", "prometheus: {bearerTokenSecret: {name: a, key: b}, bearerTokenFile: /t}", []string{"bearerTokenSecret or bearerTokenFile, not both"}},
		{"a password from a secret and inline", "prometheus: {basicAuth: {username: u, password: p, passwordSecret: {name: a, key: b}}}", []string{"password or passwordSecret, not both"}},
		{"a CA from a secret and a file", "prometheus: {tls: {caFile: /ca, caSecret: {name: a, key: b}}}", []string{"caSecret or caFile, not both"}},
		{"a token secret and basicAuth", "prometheus: {bearerTokenSecret: {name: a, key: b}, basicAuth: {username: u}}", []string{"prometheus.bearerTokenSecret and prometheus.basicAuth are both set"}},
		{"an unknown secret field", "prometheus: {bearerTokenSecret: {name: a, key: b, namespace: c}}", []string{`unknown field "prometheus.bearerTokenSecret.namespace"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Decode([]byte(tt.in))
			if err == nil {
				t.Fatalf("Decode(%q) = %+v, want an error", tt.in, c)
			}
			if c != nil {
				t.Errorf("Decode returned a config with the error %v", err)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
			for _, secret := range []string{"pw-secret", "token-user"} {
				if strings.Contains(err.Error(), secret) {
					t.Errorf("error %q shows %q", err, secret)
				}
			}
		})
	}
}

func TestCheckAddress(t *testing.T) {
	tests := []struct {
		addr string
		want []string // substrings of the error; nil for none
	}{
		{addr: "http://prom:9090"},
		{addr: "https://prometheus.monitoring.svc:9090/prefix"},
		{addr: "http://127.0.0.1:9090"},
		{addr: "http://[::1]:9090"},
		{addr: "", want: []string{`"" is not an http(s) URL`}},
		{addr: "prom:9090", want: []string{`"prom:9090" is not an http(s) URL`}},
		{addr: "ftp://prom:9090", want: []string{`"ftp://prom:9090" is not an http(s) URL`}},
		{addr: "http://", want: []string{`"http://" is not an http(s) URL`}},
		{addr: "http://[::1", want: []string{`"http://[::1" is not an http(s) URL`}},
		{addr: "http://reader:pw-secret@prom:9090", want: []string{`"http://xxxxx@prom:9090" holds a user name or password`, "prometheus.basicAuth"}},
		{addr: "http://token-user@prom:9090", want: []string{`"http://xxxxx@prom:9090" holds a user name or password`}},
		{addr: "https://reader:pw-secret@prom:9090/p?q=1", want: []string{`"https://xxxxx@prom:9090/p?q=1"`}},
		{addr: "http://reader:pw@secret@prom:9090", want: []string{`"http://xxxxx@prom:9090" holds a user name or password`}},
		{addr: "ftp://reader:pw-secret@prom", want: []string{`"ftp://xxxxx@prom" holds a user name or password`}},
		{addr: "http://reader:pw-secret@[::1", want: []string{"not shown", "not an http(s) URL"}},
		{addr: "reader:pw-secret@prom:9090", want: []string{"not shown", "not an http(s) URL"}},
		{addr: "http://reader:pw-secret@prom:9090/@x", want: []string{`"http://xxxxx@prom:9090/@x" holds a user name or password`}},
		{addr: "mailto:reader:pw-secret@prom", want: []string{"not shown", "not an http(s) URL"}},
	}
	for _, tt := range tests {
		t.Run(tt.addr, func(t *testing.T) {
			err := CheckAddress(tt.addr)
			if tt.want == nil {
				if err != nil {
					t.Fatalf("CheckAddress(%q): %v", tt.addr, err)
				}
				return
			}
			if err == nil {
				t.Fatalf("CheckAddress(%q) = nil, want an error", tt.addr)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
			for _, secret := range []string{"pw-secret", "secret", "token-user", "reader"} {
				if strings.Contains(err.Error(), secret) {
					t.Errorf("error %q shows %q", err, secret)
				}
			}
		})
	}
}

func TestDecodeFile(t *testing.T) {
	dir := t.TempDir()
	good := dir + "/good.yaml"
	bad := dir + "/bad.yaml"
	writeFile(t, good, "count: 4\n")
	writeFile(t, bad, "count: -4\n")

	c, err := DecodeFile(good)
	if err != nil {
		t.Fatalf("DecodeFile: %v", err)
	}
	if c.count() != 4 {
		t.Errorf("count() = %d, want 4", c.count())
	}
	for _, tt := range []struct{ path, want string }{
		{bad, bad + ": analysis config: count -4 is negative"},
		{dir + "/missing.yaml", "missing.yaml"},
	} {
		if _, err := DecodeFile(tt.path); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("DecodeFile(%s) error = %v, want it to contain %q", tt.path, err, tt.want)
		}
	}
}

func TestDurationJSON(t *testing.T) {
	tests := []struct {
		d    time.Duration
		json string
	}{
		{0, `"0s"`},
		{1500 * time.Millisecond, `"1.5s"`},
		{90 * time.Second, `"1m30s"`},
		{2 * time.Hour, `"2h0m0s"`},
	}
	for _, tt := range tests {
		b, err := Duration(tt.d).MarshalJSON()
		if err != nil || string(b) != tt.json {
			t.Errorf("Duration(%v).MarshalJSON() = %s, %v; want %s", tt.d, b, err, tt.json)
			continue
		}
		var back Duration
		if err := back.UnmarshalJSON(b); err != nil || time.Duration(back) != tt.d {
			t.Errorf("UnmarshalJSON(%s) = %v, %v; want %v", b, time.Duration(back), err, tt.d)
		}
	}
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestCredentialSources(t *testing.T) {
	c, err := Decode([]byte("prometheus:\n  bearerTokenFile: /t\n  tls: {caSecret: {name: prom-ca, key: ca.crt}}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if got := c.Prometheus.Files(); len(got) != 1 || got[0] != "prometheus.bearerTokenFile" {
		t.Errorf("Files() = %q", got)
	}
	if got := c.Prometheus.SecretRefs(); len(got) != 1 || got["prometheus.tls.caSecret"] != (SecretKeyRef{Name: "prom-ca", Key: "ca.crt"}) {
		t.Errorf("SecretRefs() = %v", got)
	}
	c, err = Decode([]byte("prometheus:\n  basicAuth: {username: u, passwordFile: /p}\n  tls: {caFile: /ca}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if got := c.Prometheus.Files(); strings.Join(got, ",") != "prometheus.basicAuth.passwordFile,prometheus.tls.caFile" {
		t.Errorf("Files() = %q", got)
	}
	if got := c.Prometheus.Inline(); len(got) != 0 {
		t.Errorf("Inline() = %q for a password from a file, want none", got)
	}
	c, err = Decode([]byte("prometheus:\n  basicAuth: {username: u, password: pw-secret}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if got := c.Prometheus.Inline(); len(got) != 1 || got[0] != "prometheus.basicAuth.password" {
		t.Errorf("Inline() = %q, want prometheus.basicAuth.password", got)
	}
	creds := Credentials{BearerToken: "tok-secret", Password: "pw-secret", CA: "pem"}
	for _, s := range []string{fmt.Sprint(creds), fmt.Sprintf("%+v", creds), fmt.Sprintf("%#v", creds), fmt.Sprintf("%v", &creds)} {
		if strings.Contains(s, "secret") || strings.Contains(s, "pem") {
			t.Errorf("credentials print as %q", s)
		}
	}
}
