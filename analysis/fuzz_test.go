package analysis

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/inplace-rollout/inplace-rollout/pkg/fuzzcheck"
)

// FuzzDecode checks that Decode never panics, that its error repeats no credential of the
// input, that it accepts no address CheckAddress rejects,
// and that what it accepts survives a JSON round trip: marshal, decode again, marshal again
// gives the same bytes.
func FuzzDecode(f *testing.F) {
	for _, seed := range []string{
		"",
		"{}",
		"null",
		"count: 2\ninterval: 15s\n",
		"prometheus:\n  address: http://prom:9090\n  headers: {X-Scope-OrgID: a}\n",
		"prometheus: {basicAuth: {username: u, password: p}, tls: {insecureSkipVerify: true}}",
		"failureLimit: 1\ninconclusiveLimit: 0\nconsecutiveErrorLimit: 2\nwindow: 1m30s\ninitialDelay: 1h\n",
		"checks:\n  latency: {quantile: 0.95, max: 0.5}\n  traffic: {disabled: true}\n",
		"checks:\n  custom:\n  - {name: q, query: 'up{pod=~\"{{.Pods}}\"}', condition: result >= 1 && result < 2}\n",
		`{"checks":{"errorRate":{"maxRatio":1e-3,"query":"x{pod=~\"{{.Pods}}\"}"},"saturation":{"maxCPU":0.5}}}`,
		"checks: {latency: {quantil: 0.9}}",
		"count: -1",
		"interval: 10",
		"checks: {custom: [{name: latency, query: up, condition: result < 1}]}",
		"- a",
		"a: [",
		"initialDelay: 0s\nprometheus: {headers: {}}\nchecks: {custom: []}",
		"count: 0x10\ninterval: 2562047h47m16.854775807s",
		"checks: {latency: {quantile: .nan}, errorRate: {maxRatio: .inf}}",
		`{"prometheus":{"headers":{"a":"\u007f"}}}`,
		`{"checks":{"custom":[{"name":"\ufffe","query":"up","condition":"result < 1"}]}}`,
		"checks: {saturation: {maxMemory: -0.0}}",
		"prometheus: {address: 'http://reader:pw@prom:9090'}",
		"prometheus: {address: 'reader:pw@prom:9090'}",
		"prometheus: {address: 'http://reader:s3cr3t-pw@prom:9090/x'}",
		"prometheus: {address: 'http://prom:9090', basicAuth: {username: u, password: hunter2-secret, passwordFile: /p}}",
		"prometheus: {basicAuth: {username: u, password: hunter2-secret}, count: 1}",
		"prometheus: {bearerTokenFile: /t, basicAuth: {username: u}, headers: {authorization: x}}",
		"checks: {traffic: {minRate: -1}, latency: {maxIncrease: -0.5}}",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Decode(data)
		if err != nil {
			if c != nil {
				t.Fatalf("Decode returned a config and the error %v", err)
			}
			fuzzcheck.NoSecretIn(t, err.Error(), data, func(d []byte) string {
				_, err := Decode(d)
				return fuzzcheck.Message(err)
			})
			return
		}
		if c == nil {
			t.Fatal("Decode returned neither a config nor an error")
		}
		if a := c.Prometheus.Address; a != "" {
			if err := CheckAddress(a); err != nil {
				t.Fatalf("Decode accepted the address %q that CheckAddress rejects: %v", a, err)
			}
		}
		first, err := json.Marshal(c)
		if err != nil {
			t.Fatalf("json.Marshal of a decoded config: %v", err)
		}
		c2, err := Decode(first)
		if err != nil {
			t.Fatalf("Decode of the marshalled config %s: %v", first, err)
		}
		second, err := json.Marshal(c2)
		if err != nil {
			t.Fatalf("json.Marshal of the decoded marshalled config: %v", err)
		}
		if !bytes.Equal(first, second) {
			t.Fatalf("round trip changed the config:\n first %s\nsecond %s", first, second)
		}
	})
}
