package traffic

import (
	"encoding/json"
	"fmt"

	argov1alpha1 "github.com/argoproj/argo-rollouts/pkg/apis/rollouts/v1alpha1"

	"github.com/inplace-rollout/inplace-rollout/plugin/argospec"
	"github.com/inplace-rollout/inplace-rollout/plugin/internal/drivers"
)

// request is a decoded call: the engine's spec for the Rollout, and its driver's key.
type request struct {
	argospec.Request
	key drivers.Key
}

// decode reads the Rollout's config. The images are the Rollout's template's, and its resources
// are the sentinel's, left alone; the weights are the hold points. Its error is bad input naming the Rollout and the field, and nothing is
// written for it.
func (p *Plugin) decode(ro *argov1alpha1.Rollout) (request, error) {
	var raw json.RawMessage
	if ro != nil && ro.Spec.Strategy.Canary != nil && ro.Spec.Strategy.Canary.TrafficRouting != nil {
		raw = ro.Spec.Strategy.Canary.TrafficRouting.Plugins[Name]
	}
	raw, err := withFromRollout(ro, raw)
	if err != nil {
		return request{}, err
	}
	r, err := argospec.DecodeImagesFromRollout(ro, raw, configField)
	if err != nil {
		return request{Request: r}, err
	}
	// A template change mid-rollout is a new revision for Argo: the newest images win, and the
	// pods keep the last stable images to roll back to.
	r.Spec.Supersede = true
	return request{Request: r, key: drivers.KeyOf(r.Spec)}, nil
}

// withFromRollout refuses the fields the traffic router sets itself and sets fromRollout. A
// config that is not a JSON object is left to argospec.Decode to refuse.
func withFromRollout(ro *argov1alpha1.Rollout, raw json.RawMessage) (json.RawMessage, error) {
	var fields map[string]json.RawMessage
	if len(raw) == 0 || json.Unmarshal(raw, &fields) != nil || fields == nil {
		return raw, nil
	}
	name := ro.Namespace + "/" + ro.Name
	if _, ok := fields["images"]; ok {
		return nil, fmt.Errorf("%s of Rollout %s: images: the traffic router rolls out the images of the Rollout's pod template, since only a template change starts a revision in Argo; remove images and put the new images in spec.template", configField, name)
	}
	if _, ok := fields["resources"]; ok {
		return nil, fmt.Errorf("%s of Rollout %s: resources: the traffic router rolls out images alone, from the Rollout's pod template, which its sentinel pod runs too; remove resources, and change the target's cpu and memory with the step plugin (fromRollout or resources) or inplace-rollout run --requests and --limits", configField, name)
	}
	if _, ok := fields["upTo"]; ok {
		return nil, fmt.Errorf("%s of Rollout %s: upTo: the weights of the Rollout's setWeight steps are the hold points; remove upTo", configField, name)
	}
	if v, ok := fields["fromRollout"]; ok && string(v) != "true" {
		return nil, fmt.Errorf("%s of Rollout %s: fromRollout: the traffic router always takes the images of the Rollout's pod template; remove fromRollout or set it to true", configField, name)
	}
	fields["fromRollout"] = json.RawMessage("true")
	return json.Marshal(fields)
}

// initial reports a Rollout whose first revision this is: Argo deploys it without steps, as
// what already runs, so there is nothing to roll out in place.
func initial(ro *argov1alpha1.Rollout, req request) bool {
	return req.Initial || ro.Annotations["rollout.argoproj.io/revision"] == "1"
}
