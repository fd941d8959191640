package customrun

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/tektoncd/pipeline/pkg/apis/pipeline/v1beta1"

	"github.com/inplace-rollout/inplace-rollout/pkg/fuzzcheck"
)

// fuzzParams reads params from text, one a line: NAME=VALUE is a string param, NAME=[A,B] an
// array param.
func fuzzParams(text string) v1beta1.Params {
	var params v1beta1.Params
	if text == "" {
		return nil
	}
	for _, line := range strings.Split(text, "\n") {
		name, value, _ := strings.Cut(line, "=")
		if inner, ok := strings.CutPrefix(value, "["); ok && strings.HasSuffix(inner, "]") {
			items := strings.Split(strings.TrimSuffix(inner, "]"), ",")
			params = append(params, arr(name, items...))
			continue
		}
		params = append(params, str(name, value))
	}
	return params
}

// FuzzSpec checks a CustomRun's embedded spec with its params: refused, the error is bad input
// (a *specError, never a retry) and repeats no credential of the spec or the params; accepted,
// the spec is the run's (its namespace, its holder) and passes Validate.
func FuzzSpec(f *testing.F) {
	for _, seed := range [][2]string{
		{target, "images=app=reg/app:v2"},
		{`{"target":{"kind":"StatefulSet","name":"web"},"images":{"app":"reg/app:v2"},"batches":[1,"100%"]}`, ""},
		{"", "target=statefulset/web\nimages=[app=reg/app:v2,side=reg/side:v2]\nbatches=1,50%,100%\nsoak=30s\ntimeout=5m\npre-pull=true"},
		{"", "target=deployment/api\nimages=app=reg/app:v2\nanalysis=prometheus: {address: 'http://prom:9090', basicAuth: {username: u, password: hunter2-secret}}"},
		{`{"target":{"kind":"Deployment","name":"api"},"images":{"app":"reg/app:v2"},"analysis":{"prometheus":{"address":"http://u:s3cr3t-pw@prom:9090"}}}`, ""},
		{`{"target":{"kind":"Deployment","name":"api"},"images":{"app":"reg/app:v2"},"analysis":{"prometheus":{"basicAuth":{"username":"u","password":"hunter2-secret"}}}}`, "prometheus-url=http://prom:9090"},
		{target, "images=app=reg/app:v2\nprometheus-url=http://prom:9090"},
		{target, "images=app=reg/app:v2\nupTo=2"},
		{`{"target":{"kind":"StatefulSet","name":"web"},"images":{"app":"reg/app:v2"},"upTo":"50%"}`, ""},
		{target, "images=[app]"},
		{target, "images=app=reg/app:v2\nbatches=0,100%"},
		{target, "images=app=reg/app:v2\nmax-unavailable=0%"},
		{target, "images=app=reg/app:v2\nsoak=-1s"},
		{`{"target":`, ""},
		{`[]`, ""},
		{"null", ""},
	} {
		f.Add([]byte(seed[0]), seed[1])
	}
	f.Fuzz(func(t *testing.T, spec []byte, params string) {
		ps := fuzzParams(params)
		run := embedded(string(spec), ps...)
		got, err := decodeSpec(context.Background(), run, specs{})
		if err != nil {
			var se *specError
			if !errors.As(err, &se) || err.Error() == "" {
				t.Fatalf("decodeSpec(%q, %q) = %T %v; want bad input", spec, params, err, err)
			}
			fuzzcheck.NoSecretIn(t, err.Error(), spec, func(s []byte) string {
				_, err := decodeSpec(context.Background(), embedded(string(s), ps...), specs{})
				return fuzzcheck.Message(err)
			})
			for i, p := range ps {
				fuzzcheck.NoSecretIn(t, err.Error(), []byte(p.Value.StringVal), func(v []byte) string {
					other := slices.Clone(ps)
					other[i] = str(p.Name, string(v))
					_, err := decodeSpec(context.Background(), embedded(string(spec), other...), specs{})
					return fuzzcheck.Message(err)
				})
			}
			return
		}
		if got.Target.Namespace != "ns" || got.Holder != "tekton:ns/pr-rollout" {
			t.Fatalf("decodeSpec(%q, %q) = spec in namespace %q held by %q; want the run's", spec, params, got.Target.Namespace, got.Holder)
		}
		if err := got.Validate(); err != nil {
			t.Fatalf("decodeSpec(%q, %q) accepted a spec that Validate refuses: %v", spec, params, err)
		}
	})
}
