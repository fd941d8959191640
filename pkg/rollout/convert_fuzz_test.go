package rollout

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/inplace-rollout/inplace-rollout/pkg/apis/v1alpha1"
	"github.com/inplace-rollout/inplace-rollout/pkg/fuzzcheck"
)

// FuzzSpecFile checks that decoding and converting a rollout spec document never panics, that
// no error repeats a credential of the document, that conversion either gives a Spec that
// passes Validate or bad input, and that a document it accepts survives a JSON round trip:
// marshal, decode again, marshal again gives the same bytes.
func FuzzSpecFile(f *testing.F) {
	inputs, _ := filepath.Glob("testdata/specfile/*.[jy]*")
	for _, in := range inputs {
		if data, err := os.ReadFile(in); err == nil && filepath.Ext(in) != ".golden" {
			f.Add(data)
		}
	}
	for _, seed := range []string{
		"",
		"apiVersion: inplace-rollout.io/v1alpha1\nkind: InPlaceRollout\nspec: {target: {kind: sts, name: a}, images: {a: b}, batches: [0]}",
		"apiVersion: inplace-rollout.io/v1alpha1\nkind: InPlaceRollout\nspec: {target: {kind: pods}, images: {a: 'b c'}, maxUnavailable: -1}",
		"apiVersion: inplace-rollout.io/v1alpha1\nkind: InPlaceRollout\nspec: {target: {kind: ds, name: a}, images: {a: b}, soak: -1s, timeout: 1h}",
		`{"apiVersion":"inplace-rollout.io/v1alpha1","kind":"InPlaceRollout","spec":{"target":{"kind":"Pods","selector":"a=b"},"images":{"a":"b"},"batches":["100.0%"]}}`,
		"apiVersion: inplace-rollout.io/v1alpha1\nkind: InPlaceRollout\nspec: {target: {kind: sts, name: a}, images: {a: b}, analysis: {prometheus: {address: 'http://u:s3cr3t-pw@p:9090', basicAuth: {username: u, password: hunter2-secret}}}}",
		"apiVersion: inplace-rollout.io/v1alpha1\nkind: InPlaceRollout\nspec: {target: {kind: sts, name: a}, images: {a: b}, analysis: {prometheus: {basicAuth: {username: u, password: hunter2-secret, passwordSecret: {name: s, key: k}}}}}",
	} {
		f.Add([]byte(seed))
	}
	caller := Caller{Namespace: "ns", Holder: "cli", CallerCredentials: true}
	// message is the error of decoding and converting data, the two steps whose errors a
	// person reads.
	message := func(data []byte) string {
		doc, err := v1alpha1.Decode(data)
		if err == nil {
			_, err = FromV1alpha1(&doc.Spec, caller)
		}
		return fuzzcheck.Message(err)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		doc, err := v1alpha1.Decode(data)
		if err != nil {
			if doc != nil {
				t.Fatalf("Decode returned a document and the error %v", err)
			}
			fuzzcheck.NoSecretIn(t, err.Error(), data, message)
			return
		}
		spec, err := FromV1alpha1(&doc.Spec, caller)
		var ie *InvalidError
		if err != nil && !errors.As(err, &ie) {
			t.Fatalf("conversion failed with %T, not bad input: %v", err, err)
		}
		if err != nil {
			fuzzcheck.NoSecretIn(t, err.Error(), data, message)
		}
		if err == nil {
			if err := spec.Validate(); err != nil {
				t.Fatalf("a converted spec fails Validate: %v", err)
			}
		}
		first, err := json.Marshal(doc)
		if err != nil {
			t.Fatalf("json.Marshal of a decoded document: %v", err)
		}
		again, err := v1alpha1.Decode(first)
		if err != nil {
			t.Fatalf("Decode of the marshalled document %s: %v", first, err)
		}
		second, err := json.Marshal(again)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(first, second) {
			t.Fatalf("round trip changed the document:\n first %s\nsecond %s", first, second)
		}
	})
}
