package workload

import (
	"context"
	"encoding/json"
	"fmt"
)

// Owned is w, a StatefulSet or a DaemonSet, as a rollout to its own template sees it: the
// template and the update strategy belong to whoever applies the workload's manifest (a GitOps
// tool, from Git), and the rollout brings the pods to that template in place. It writes nothing
// on the workload but its lock (an annotation, which the owner's manifest does not name), never
// its spec: no freeze, no template, no strategy, so the owner sees no drift, and a rollback
// reverts the pods and leaves the template as the owner wrote it.
//
// So the strategy must already be OnDelete, for the controller to recreate no pod for its
// revision meanwhile, and the images a rollout targets must be the template's. The revision
// labels the pods get come with the rollout rather than from the workload (RevisionLabels has
// none): its driver names the template revision it rolls to, so that a template changed again
// meanwhile never labels a pod with a revision it does not run. A pod the controller creates
// from the template runs what the lock records as previous (the template's images, see
// Previous), so a rollback leaves it as the template says.
func Owned(w Workload) (Workload, error) {
	switch v := w.(type) {
	case *owned:
		return v, nil
	case *statefulSet:
		return &owned{Workload: w, od: v.onDelete}, nil
	case *daemonSet:
		return &owned{Workload: w, od: v.onDelete}, nil
	}
	return nil, &InvalidError{Msg: fmt.Sprintf("%s: only a StatefulSet or a DaemonSet can be rolled out in place to its own template", w.Ref())}
}

type owned struct {
	Workload
	od *onDelete
}

func (o *owned) setDryRun() { o.od.setDryRun() }

// CheckStart refuses images or resources the template does not have, and a strategy other than
// OnDelete. Pods at another revision than the template's are what the rollout is for.
func (o *owned) CheckStart(ch Change, includeInit bool) error {
	if err := CheckChange(o, ch, includeInit); err != nil {
		return err
	}
	if t := o.od.strategyType(); t != o.od.onDeleteType {
		return &InvalidError{Msg: fmt.Sprintf("%s: its updateStrategy is %s; a rollout in place to its own template needs %s, which its manifest must say, so that its controller recreates no pod meanwhile",
			o.Ref(), t, o.od.onDeleteType)}
	}
	if !TemplateHasImages(o.Template(), ch.Images) {
		have, _ := json.Marshal(TemplateImages(o.Template(), ch.Images))
		want, _ := json.Marshal(ch.Images)
		return &InvalidError{Msg: fmt.Sprintf("%s: its template runs %s, not %s; a rollout in place to its own template takes the template's images", o.Ref(), have, want)}
	}
	if !TemplateHas(o.Template(), ch) {
		have, _ := json.Marshal(specResources(o.Template().Spec, ch.Resources))
		want, _ := json.Marshal(ch.Resources)
		return &InvalidError{Msg: fmt.Sprintf("%s: its template has resources %s, not %s; a rollout in place to its own template takes the template's resources", o.Ref(), have, want)}
	}
	return nil
}

// RevisionLabels are none: the rollout brings them (see Owned).
func (o *owned) RevisionLabels(Change) (map[string]string, bool, error) {
	return nil, true, nil
}

// Start writes the lock alone: the strategy is OnDelete already, and the template the owner's.
func (o *owned) Start(ctx context.Context, record string, _ Change) error {
	return o.SetLock(ctx, record)
}

// Retarget writes the lock alone: the owner wrote the new template.
func (o *owned) Retarget(ctx context.Context, record string, _ Change) error {
	return o.SetLock(ctx, record)
}

// Finalize writes the finished lock alone: the template and the strategy are the owner's.
func (o *owned) Finalize(ctx context.Context, record string, _ Change) (bool, error) {
	return true, o.SetLock(ctx, record)
}

// Restore writes the finished lock alone: the pods went back, the template stays the owner's.
func (o *owned) Restore(ctx context.Context, record string, _ Change, _ bool) (bool, error) {
	return true, o.SetLock(ctx, record)
}

// strategyType is the type of the object's update strategy as loaded.
func (o *onDelete) strategyType() string {
	var s struct {
		Type string `json:"type"`
	}
	if err := json.Unmarshal(strategyJSON(o.strategy), &s); err != nil {
		return ""
	}
	return s.Type
}
