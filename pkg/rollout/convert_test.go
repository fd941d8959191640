package rollout

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"

	"github.com/inplace-rollout/inplace-rollout/pkg/apis/v1alpha1"
)

var update = flag.Bool("update", false, "rewrite the golden files of testdata/specfile")

// TestSpecFileGolden decodes each document of testdata/specfile, defaults it and converts it to
// a Spec, and compares the outcome with its golden file: the defaulted document and the Spec,
// or the error that names the mistake. `go test ./pkg/rollout -run SpecFileGolden -update`
// rewrites them.
func TestSpecFileGolden(t *testing.T) {
	inputs, err := filepath.Glob("testdata/specfile/*.[jy]*")
	if err != nil || len(inputs) == 0 {
		t.Fatalf("no inputs in testdata/specfile: %v", err)
	}
	for _, in := range inputs {
		if strings.HasSuffix(in, ".golden") {
			continue
		}
		t.Run(filepath.Base(in), func(t *testing.T) {
			data, err := os.ReadFile(in)
			if err != nil {
				t.Fatal(err)
			}
			got := specFileOutcome(data)
			golden := strings.TrimSuffix(in, filepath.Ext(in)) + ".golden"
			if *update {
				if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run with -update to write it)", err)
			}
			if got != string(want) {
				t.Errorf("%s:\n--- got\n%s\n--- want (%s)\n%s", in, got, golden, want)
			}
			if strings.HasPrefix(filepath.Base(in), "error-") != strings.HasPrefix(got, "error: ") {
				t.Errorf("%s: an input named error-* must fail, and only those: got\n%s", in, got)
			}
		})
	}
}

// specFileOutcome is what the golden files hold.
func specFileOutcome(data []byte) string {
	doc, err := v1alpha1.Decode(data)
	if err != nil {
		return "error: " + err.Error() + "\n"
	}
	spec, err := FromV1alpha1(&doc.Spec, Caller{Namespace: "shop", Holder: "argo:shop/web"})
	if err != nil {
		return "error: " + err.Error() + "\n"
	}
	v1alpha1.SetDefaults(&doc.Spec)
	defaulted, err := yaml.Marshal(doc)
	if err != nil {
		return "error: marshalling: " + err.Error() + "\n"
	}
	return fmt.Sprintf("# defaulted\n%s# converted\ntarget: %s\nimages: %s\nbatches: %s\nupTo: %s\nmaxUnavailable: %s\ngracePeriod: %s\nsoak: %s\ntimeout: %s\nallowUnready: %v\nanalysis: %v\nonInconclusive: %s\n",
		defaulted, spec.Target, mustJSON(spec.Images), formatBatches(spec.Batches), upToString(spec.UpTo), spec.MaxUnavailable.String(), spec.GracePeriod, spec.Soak, spec.Timeout,
		spec.AllowUnready, spec.Analysis != nil, spec.OnInconclusive)
}

func upToString(v *intstr.IntOrString) string {
	if v == nil {
		return "every pod"
	}
	return v.String()
}

// TestFromV1alpha1LeavesItsInputAlone: converting defaults a copy, not the caller's spec.
func TestFromV1alpha1LeavesItsInputAlone(t *testing.T) {
	in := &v1alpha1.InPlaceRolloutSpec{Target: v1alpha1.Target{Kind: "statefulset", Name: "web"}, Images: map[string]string{"app": "reg/app:v2"}}
	if _, err := FromV1alpha1(in, Caller{Namespace: "shop", Holder: "cli"}); err != nil {
		t.Fatal(err)
	}
	if in.Batches != nil || in.MaxUnavailable != nil || in.Timeout != nil || in.OnInconclusive != "" {
		t.Errorf("the input was defaulted in place: %+v", in)
	}
}
