// Package workload adapts StatefulSets, DaemonSets, Deployments and label-selected pods to
// in-place updates: it lists their pods, freezes their controllers so that nothing recreates a
// pod while it changes, relabels updated pods so the controller counts them, finalizes the
// template and restores the original update strategy.
package workload
