package fuzzcheck

import (
	"fmt"
	"slices"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/inplace-rollout/inplace-rollout/pkg/strictdecode"
)

// config has the shape of the analysis config's prometheus section: field names that contain
// short credentials ("cret", "ordS").
type config struct {
	Prometheus struct {
		Address           string `json:"address,omitempty"`
		BearerTokenSecret string `json:"bearerTokenSecret,omitempty"`
		BasicAuth         struct {
			Username       string `json:"username,omitempty"`
			Password       string `json:"password,omitempty"`
			PasswordSecret string `json:"passwordSecret,omitempty"`
		} `json:"basicAuth"`
	} `json:"prometheus"`
}

// strict is a decoder that says only its own words, its field names and the input's keys.
func strict(data []byte) string {
	var c config
	return Message(strictdecode.Decode(data, &c))
}

// quoting is strict, then quotes the password and the address it accepted: a leak.
func quoting(data []byte) string {
	var c config
	if err := strictdecode.Decode(data, &c); err != nil {
		return err.Error()
	}
	return fmt.Sprintf("password %q for %q is refused", c.Prometheus.BasicAuth.Password, c.Prometheus.Address)
}

// listing is strict, and quotes the password besides its list of known fields: a leak next to
// a field name that contains the credential.
func listing(data []byte) string {
	var c config
	if err := yaml.Unmarshal(data, &c); err != nil {
		return err.Error()
	}
	return fmt.Sprintf("%s; the password was %s", strict(data), c.Prometheus.BasicAuth.Password)
}

// fixed always gives the same message.
func fixed(data []byte) string { return "refused: ---- is no config" }

func TestLeak(t *testing.T) {
	tests := []struct {
		name    string
		data    string
		decoder func([]byte) string
		want    string // the credential reported as repeated, "" for none
	}{
		{"a credential inside a listed field name", "prometheus: {0: {password: cret}}", strict, ""},
		{"a credential inside a field name in a list further in", "prometheus: {basicAuth: {usernam: {password: ordS}}}", strict, ""},
		{"a credential that is a word of the decoder's", "prometheus: {basicAuth: {password: here}, x: 1}", strict, ""},
		{"a credential the message does not hold", "prometheus: {basicAuth: {password: hunter2-secret}, x: 1}", strict, ""},
		{"a quoted password", "prometheus: {basicAuth: {password: hunter2-secret}}", quoting, "hunter2-secret"},
		{"a short quoted password", "prometheus: {basicAuth: {password: cret}}", quoting, "cret"},
		{"a quoted password of JSON", `{"prometheus":{"basicAuth":{"password":"hunter2-secret"}}}`, quoting, "hunter2-secret"},
		{"a quoted address's password", "prometheus: {address: 'http://u:s3cr3t-pw@prom:9090'}", quoting, "s3cr3t-pw"},
		{"a password quoted besides a field name holding it", "prometheus: {0: 1, basicAuth: {password: cret}}", listing, "cret"},
		{"no other value can stand in for the credential", "prometheus: {basicAuth: {password: '----'}}", fixed, "----"},
		{"the credential spelled otherwise in the input", `{"hunter2-secret":1,"prometheus":{"basicAuth":{"password":"hunter2-secre\u0074"}}}`, strict, "hunter2-secret"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			data := []byte(tt.data)
			msg := tt.decoder(data)
			got, ok := Leak(msg, data, tt.decoder)
			if ok != (tt.want != "") || got != tt.want {
				t.Fatalf("Leak(%q, %q) = %q, %v; want %q", msg, tt.data, got, ok, tt.want)
			}
		})
	}
}

func TestSecretValues(t *testing.T) {
	tests := []struct {
		name string
		data string
		want []string
	}{
		{"password, token and bearerToken at any depth", "a: {password: pass-1}\nb: [{token: tok-1}, {bearerToken: bt-11}]", []string{"bt-11", "pass-1", "tok-1"}},
		{"an address's password", "address: 'http://u:s3cr3t@prom'", []string{"s3cr3t"}},
		{"too short", "password: abc", nil},
		{"repeated in the input", "password: hunter2\nname: hunter2", nil},
		{"not YAML", "a: [", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := SecretValues([]byte(tt.data))
			slices.Sort(got)
			if !slices.Equal(got, tt.want) {
				t.Fatalf("SecretValues(%q) = %q, want %q", tt.data, got, tt.want)
			}
		})
	}
}
