// Package workload adapts StatefulSets, DaemonSets, Deployments and label-selected pods to
// in-place updates: it lists their pods, freezes their controllers so that nothing recreates a
// pod while it changes, relabels updated pods so the controller counts them, finalizes the
// template and restores the original update strategy. It stores the rollout's record (pkg/rollout)
// in the annotation LockAnnotation as it is given, and reads of it only what it set aside to hand
// the workload back: the previous images and update strategy.
package workload
