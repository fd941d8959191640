package argospec

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/inplace-rollout/inplace-rollout/pkg/fuzzcheck"
)

// FuzzDecode checks the Argo plugins' config: refused, the error names the field and the
// Rollout and repeats no credential of the config; accepted, the spec is the Rollout's (its
// namespace, its holder), passes Validate, and its canonical form decodes to the same spec.
func FuzzDecode(f *testing.F) {
	for _, seed := range []string{
		`{"target":{"kind":"StatefulSet","name":"db"},"images":{"app":"reg/app:v3"}}`,
		`{"target":{"kind":"StatefulSet","name":"db"},"fromRollout":true,"includeInit":true}`,
		"target: {kind: DaemonSet, name: agent}\nimages: {app: reg/app:v3}\nbatches: [1, 50%, 100%]\nsoak: 30s\n",
		"target: {kind: Pods, selector: app=web}\nimages: {app: reg/app:v3}\nmaxUnavailable: 10%\nupTo: 2\n",
		"target: {kind: Deployment, name: api}\nimages: {app: reg/app:v3}\nanalysis: {prometheus: {address: 'http://prom:9090', basicAuth: {username: u, password: hunter2-secret}}}\n",
		"target: {kind: Deployment, name: api}\nimages: {app: reg/app:v3}\nanalysis: {prometheus: {address: 'http://reader:s3cr3t-pw@prom:9090'}}\n",
		"target: {kind: Deployment, name: api}\nimages: {app: reg/app:v3}\nanalysis: {prometheus: {address: 'http://prom:9090', basicAuth: {username: u, passwordSecret: {name: s, key: pw}}}, count: 2}\n",
		`{"target":{"kind":"StatefulSet","name":"db"},"fromRollout":true,"images":{"app":"x:1"}}`,
		`{"target":{"kind":"Job","name":"db"},"images":{"app":"x:1"}}`,
		`{"target":{"kind":"StatefulSet","name":"db"},"image":{"app":"x:1"}}`,
		`{"target":{"kind":"StatefulSet","name":"db"},"images":{"app":"X:1"},"batches":[0]}`,
		"", "null", "{}", "[]", "a: [",
	} {
		f.Add([]byte(seed))
	}
	ro := testRollout("abc")
	const field = "steps[0].plugin.config"
	f.Fuzz(func(t *testing.T, data []byte) {
		req, err := Decode(ro, json.RawMessage(data), field)
		if err != nil {
			if !strings.HasPrefix(err.Error(), field+" of Rollout ns/web") {
				t.Fatalf("Decode(%q) = %v; want an error naming %s and the Rollout", data, err, field)
			}
			fuzzcheck.NoSecretIn(t, err.Error(), data, func(d []byte) string {
				_, err := Decode(ro, json.RawMessage(d), field)
				return fuzzcheck.Message(err)
			})
			return
		}
		if req.Spec.Target.Namespace != "ns" || req.Holder != "argo:ns/web" || req.Spec.Holder != req.Holder {
			t.Fatalf("Decode(%q) = spec in namespace %q held by %q (request %q); want the Rollout's", data, req.Spec.Target.Namespace, req.Spec.Holder, req.Holder)
		}
		if err := req.Spec.Validate(); err != nil {
			t.Fatalf("Decode(%q) accepted a spec that Validate refuses: %v", data, err)
		}
		again, err := Decode(ro, json.RawMessage(req.Canonical), field)
		if err != nil {
			t.Fatalf("Decode of the canonical form %s: %v", req.Canonical, err)
		}
		if again.Canonical != req.Canonical || !reflect.DeepEqual(again.Spec, req.Spec) {
			t.Fatalf("the canonical form reads differently:\n first %s %+v\nsecond %s %+v", req.Canonical, req.Spec, again.Canonical, again.Spec)
		}
	})
}
