package customrun

import (
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"github.com/inplace-rollout/inplace-rollout/pkg/apis/v1alpha1"
)

// InPlaceRollouts is the resource of the InPlaceRollout objects a Pipeline can reference.
var InPlaceRollouts = schema.GroupVersionResource{Group: v1alpha1.Group, Version: v1alpha1.Version, Resource: "inplacerollouts"}

// DynamicSpecs reads InPlaceRollout objects through a dynamic client, decoding them as strictly
// as a spec file.
type DynamicSpecs struct {
	Client dynamic.Interface
}

// Get reads the InPlaceRollout namespace/name. An object that does not decode is a *specError
// naming the object and the field.
func (d DynamicSpecs) Get(ctx context.Context, namespace, name string) (*v1alpha1.InPlaceRollout, error) {
	obj, err := d.Client.Resource(InPlaceRollouts).Namespace(namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	data, err := obj.MarshalJSON()
	if err != nil {
		return nil, fmt.Errorf("reading %s %s/%s: %w", v1alpha1.Kind, namespace, name, err)
	}
	doc, err := v1alpha1.Decode(data)
	if err != nil {
		return nil, specErrorf("%s %s/%s: %v", v1alpha1.Kind, namespace, name, err)
	}
	return doc, nil
}
