// Package kubeletsim is a kubelet simulator for a control plane without real nodes.
//
// It registers Ready nodes, binds unscheduled pods to them, and drives pod and container status
// the way a kubelet does: container IDs, image IDs pinned by digest, restart counts, Running and
// Waiting states, and Ready computed from container readiness and every readiness gate. When a
// container's image changes it restarts only that container, after a pull delay and a start
// delay, keeping the pod's UID, IP and node.
//
// An image patched in place goes as it went with kubelet v1.34.5 and containerd
// (reference/real-node.md), with times scaled as in Config:
//
//   - status.observedGeneration moves to the new generation at once, while the old container
//     still runs: it does not mean the change is applied; it is the generation the pod's latest
//     sync read;
//   - the old container is reported Running, Ready and with its containerID and image for
//     Config.StopDelay after the patch (or its preStop sleep, when longer), and the pod stays
//     Ready; then it is stopped;
//   - the kubelet kills and starts in one sync, with the spec it read when the sync began: an
//     image patched again while it stops the container or pulls the image waits until that
//     image has started, so patching back during the stop restarts the container twice; the
//     kubelet syncs a pod in one worker, so while its sync stops or starts any container of the
//     pod, a newer spec waits for all of them, and an image patched and patched back meanwhile
//     never restarts its container;
//   - the crash back-off is kubelet v1.34.5's (kuberuntime doBackOff): an entry per pod,
//     container name and image; before each start the kubelet looks at the newest exited
//     instance, and within the entry's back-off of its exit the start waits, shown as waiting
//     CrashLoopBackOff ("back-off 1s restarting failed container=NAME pod=NAME_NAMESPACE(UID)")
//     with the stopped container as the status's containerID and lastState.terminated and the
//     restart count unchanged, although nothing crashed; otherwise the start goes ahead and the
//     entry begins at Config.BackOff or doubles (up to 30 times it), expiring 60 times it after
//     its last update. A start with no exited instance before it counts for nothing, so an
//     in-place patch decides on the status before its own kill: v1 -> v2 -> v1 -> v2 starts
//     each at once, and going back to v1 right after waits;
//   - a missing image kills the old container first: the status keeps its image and
//     containerID, waiting ErrImagePull, then ImagePullBackOff; the restart count does not move;
//   - a crashing image, by the same rule, restarts at once after its first crash when nothing
//     had exited before its start (the restart count is then 2 above the one before the patch
//     when CrashLoopBackOff shows) and backs off at once otherwise.
//
// A pod with restartPolicy Never is run as a kubelet runs it: its init containers in order pull
// their image, run for the start delay and exit 0; then its containers pull and start. A
// container with a command runs it for the start delay and exits 0 (1 when its image crashes);
// one without runs its image's entrypoint, taken for a server that runs until stopped. Once
// every container exited, the pod Succeeds, or Fails when one exited non-zero. A failed pull
// keeps the pod Pending (ErrImagePull, then ImagePullBackOff); once activeDeadlineSeconds have
// passed since its start the pod Fails with reason DeadlineExceeded, what still runs killed
// (exit 137). Pre-pull's puller pods are such pods. Pods with any other restartPolicy report
// their init containers completed at once, and their containers run until their image changes;
// so do their native sidecars (init containers with restartPolicy Always), whose readiness counts
// in the pod's, as a kubelet runs them. A native sidecar with no readiness or startup probe is
// Ready as soon as it runs, and while it is restarted in place the status keeps showing the
// instance it replaces, Running and Ready, until the new one runs: the kubelet kills, pulls and
// starts in one sync and writes the status between syncs, so the pod stays Ready, as it did on the
// real node. Containers behave as if a readiness probe watched them: not Ready for the start delay.
//
// A resize (KEP-1287: the pods/resize subresource, cpu and memory) goes as it went with kubelet
// v1.34.5 and containerd 1.6 (allocation_manager.go, kuberuntime computePodResizeAction). Each
// running container's status reports resources, the ones it runs with ({} when it has none),
// without which the API server refuses a resize. A sync that reads a spec whose resources differ
// from those allocated to the pod allocates them when they fit, and then:
//
//   - a container whose changed resources have resizePolicy NotRequired (or none, the kubelet's
//     default) keeps running, same containerID and restart count; PodResizeInProgress (True,
//     the resize's generation) shows until, Config.ResizeDelay after the sync, the status reports
//     the new resources. observedGeneration is the resize's at once: the resources in the status,
//     not observedGeneration, say the resize is done;
//   - one with RestartContainer for a changed resource is restarted once, as for an image change
//     (the same stop and crash back-off, no pull), into the new resources. The restart is one
//     sync: an image patch that comes during it (or a resize during an image change's sync)
//     waits for the next one, so the container restarts twice;
//   - a request above the node's allocatable (16 cpu, 64Gi) is not allocated: PodResizePending
//     True, reason Infeasible, "Node didn't have enough capacity: cpu, requested: 500000,
//     capacity: 16000" (millicores; bytes for memory, which is named first); one above what the
//     node's other pods were allocated leaves free is Deferred, "Node didn't have enough
//     resource: cpu, requested: R, used: U, capacity: C", and is tried again when a pod leaves
//     the node or another resize is allocated. The spec keeps what was asked, the status the
//     resources the container runs with; a later resize that fits clears the condition.
//
// Image names inject failures and behaviours:
//
//	tag crash*               the container crash-loops (restartCount climbing, CrashLoopBackOff)
//	host notfound.invalid    the pull fails (ErrImagePull, then ImagePullBackOff)
//	tag slow*                the container takes 10 s to become ready
//	tag errors*              the pod serves 30% HTTP 5xx
//	tag latency*             the pod serves a p99 latency of about 2 s
//
// Images on a host listed in Config.Registries are resolved through that real OCI registry, as
// a container runtime does: the imageID is REPO@<manifest digest>, the pod's imagePullSecrets
// (dockerconfigjson) give the credentials, an unknown tag or repository is ErrImagePull
// ("manifest unknown") then ImagePullBackOff, and a 401 is ErrImagePull naming it; as with the
// real kubelet, the ImagePullBackOff message keeps the failed pull's reason and message. Each node
// keeps what it pulled: content already on the node starts without the pull delay, and
// imagePullPolicy is honoured (IfNotPresent and Never use the node's copy of the tag, Always asks
// the registry). Images on every other host resolve through a built-in tag-to-digest map.
//
// The pod annotation kubeletsim.inplace-rollout.io/crash-images (comma-separated images) makes
// those images crash-loop in that pod only.
//
// A metrics endpoint exposes per-pod request counters, a latency histogram and container CPU
// and memory, and the containers' resource limits as kube-state-metrics reports them, in the
// Prometheus text format, for a real Prometheus to scrape.
package kubeletsim
