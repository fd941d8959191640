package v1alpha1

import (
	"errors"
	"fmt"
	"os"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/inplace-rollout/inplace-rollout/pkg/strictdecode"
)

// describeTypes say what the fields that decode themselves hold, for the errors that name them.
var describeTypes = []strictdecode.Option{
	strictdecode.Describe(intstr.IntOrString{}, `a pod count or a percentage such as "25%"`),
	strictdecode.Describe(metav1.Duration{}, `a duration such as "30s" or "5m"`),
	strictdecode.Describe(resource.Quantity{}, `a quantity such as "250m", "1" or "64Mi"`),
	strictdecode.DescribeField(HTTPHook{}, "port", `a port number such as 8080 or the name of a declared port such as "http"`),
}

// Decode parses an InPlaceRollout document, YAML or JSON. An unknown field, a value of the
// wrong type, or an apiVersion or kind other than this package's is an error naming the field
// by its path, e.g. spec.batches[1].
func Decode(data []byte) (*InPlaceRollout, error) {
	var r InPlaceRollout
	if err := strictdecode.Decode(data, &r, describeTypes...); err != nil {
		if errors.Is(err, strictdecode.ErrEmpty) {
			return nil, fmt.Errorf("the %s document is empty", Kind)
		}
		return nil, err
	}
	switch {
	case r.APIVersion != APIVersion:
		return nil, fmt.Errorf("apiVersion %q: want %s", r.APIVersion, APIVersion)
	case r.Kind != Kind:
		return nil, fmt.Errorf("kind %q: want %s", r.Kind, Kind)
	}
	return &r, nil
}

// DecodeSpec parses the spec alone, as a Tekton custom task embeds it; paths start at the spec.
func DecodeSpec(data []byte) (*InPlaceRolloutSpec, error) {
	var s InPlaceRolloutSpec
	if err := strictdecode.Decode(data, &s, describeTypes...); err != nil {
		if errors.Is(err, strictdecode.ErrEmpty) {
			return nil, fmt.Errorf("the %s spec is empty", Kind)
		}
		return nil, err
	}
	return &s, nil
}

// DecodeInto parses a document that embeds the spec (a driver's config with fields of its own)
// into out, as strictly as DecodeSpec, with the same descriptions of the spec's field types.
func DecodeInto(data []byte, out any) error {
	return strictdecode.Decode(data, out, describeTypes...)
}

// DecodeFile reads and decodes an InPlaceRollout file.
func DecodeFile(path string) (*InPlaceRollout, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading the rollout spec: %w", err)
	}
	r, err := Decode(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return r, nil
}
