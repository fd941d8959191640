#!/usr/bin/env bash
# Starts the local control plane in the background and waits until .dev/env is written.
set -euo pipefail
cd "$(dirname "$0")/.."
dev=.dev

# start_gate_controller starts the readiness gate controller (inplace-rollout gate-controller),
# which pods whose template declares the inplace-rollout.io/ready gate need to become Ready, and
# waits until it has listed the pods.
start_gate_controller() {
  if [ -f "$dev/gate-controller.pid" ] && kill -0 "$(cat "$dev/gate-controller.pid")" 2>/dev/null; then
    return 0
  fi
  # exec, so that $! is the controller itself and not a wrapper shell.
  (exec "$dev/bin/inplace-rollout" gate-controller --kubeconfig "$dev/kubeconfig" >"$dev/gate-controller.log" 2>&1) &
  local gpid=$!
  echo "$gpid" >"$dev/gate-controller.pid"
  for _ in $(seq 1 120); do
    if grep -q "gate controller watching pods" "$dev/gate-controller.log" 2>/dev/null; then
      echo "readiness gate controller up (pid $gpid); log in $dev/gate-controller.log"
      return 0
    fi
    if ! kill -0 "$gpid" 2>/dev/null; then
      echo "readiness gate controller failed to start; last lines of $dev/gate-controller.log:" >&2
      tail -n 30 "$dev/gate-controller.log" >&2
      return 1
    fi
    sleep 0.25
  done
  echo "readiness gate controller not watching pods after 30s; see $dev/gate-controller.log" >&2
  return 1
}

# .dev/bin/inplace-rollout controller, the InPlaceRollout controller, always runs, as its
# ServiceAccount bound to config/controller's roles.
# ARGO=1 adds the Argo Rollouts controller, with .dev/bin/inplace-rollout as its plugins.
# TEKTON=1 adds the Tekton Pipelines controller and .dev/bin/inplace-rollout tekton-controller.
args=(--dir "$dev" --controller "$(pwd)/$dev/bin/inplace-rollout")
if [ "${ARGO:-}" = 1 ]; then
  args+=(--argo-plugin "$(pwd)/$dev/bin/inplace-rollout")
fi
if [ "${TEKTON:-}" = 1 ]; then
  args+=(--tekton "$(pwd)/$dev/bin/inplace-rollout")
fi
# IMAGE_DIR (an OCI image layout, which make cluster-up builds) is pushed into the local registry
# as the default puller image of every process; IMAGE_TAG is its tag.
if [ -n "${IMAGE_DIR:-}" ]; then
  args+=(--image "$IMAGE_DIR" --image-tag "${IMAGE_TAG:-dev}")
fi
# NODE=real adds the real node real-0 (kubelet and containerd) beside the simulated ones.
if [ "${NODE:-}" = real ]; then
  args+=(--real-node)
fi

if [ -f "$dev/localcluster.pid" ] && kill -0 "$(cat "$dev/localcluster.pid")" 2>/dev/null && [ -f "$dev/env" ]; then
  if [ "${ARGO:-}" = 1 ] && ! { [ -f "$dev/rollouts-controller.pid" ] && kill -0 "$(cat "$dev/rollouts-controller.pid")" 2>/dev/null; }; then
    echo "the local control plane runs without Argo Rollouts: make cluster-down, then make cluster-up ARGO=1" >&2
    exit 1
  fi
  if [ "${NODE:-}" = real ] && ! grep -q '^export REAL_NODE=' "$dev/env"; then
    echo "the local control plane runs without the real node: make cluster-down, then make cluster-up NODE=real" >&2
    exit 1
  fi
  if [ "${TEKTON:-}" = 1 ] && ! { [ -f "$dev/inplace-rollout-tekton-controller.pid" ] && kill -0 "$(cat "$dev/inplace-rollout-tekton-controller.pid")" 2>/dev/null; }; then
    echo "the local control plane runs without Tekton: make cluster-down, then make cluster-up TEKTON=1" >&2
    exit 1
  fi
  start_gate_controller
  echo "local control plane already running (pid $(cat "$dev/localcluster.pid")); . $dev/env to use it"
  exit 0
fi
# A leftover process is reported but does not block the start: the new cluster uses fresh ports.
hack/cluster-down.sh >/dev/null || true

# exec, so that $! is the control plane itself and not a wrapper shell.
(exec "$dev/bin/localcluster" "${args[@]}" >"$dev/localcluster.log" 2>&1) &
pid=$!
for _ in $(seq 1 240); do
  if [ -f "$dev/env" ]; then
    if ! start_gate_controller; then
      hack/cluster-down.sh
      exit 1
    fi
    echo "local control plane up (pid $pid); . $dev/env to use it, make cluster-down to stop it"
    echo "inplace-rollout controller up (kubectl apply an InPlaceRollout); log in $dev/inplace-rollout-controller.log"
    if grep -q '^export IMAGE=' "$dev/env"; then
      echo "this source's image pushed to the local registry: $(sed -n 's/^export IMAGE=//p' "$dev/env")"
    fi
    if [ "${ARGO:-}" = 1 ]; then
      echo "Argo Rollouts controller up; log in $dev/rollouts-controller.log, kubectl-argo-rollouts on the PATH of $dev/env"
    fi
    if [ "${NODE:-}" = real ]; then
      echo "real node real-0 up (REAL_NODE and PULLER_IMAGE in $dev/env); images \$REGISTRY/app:v1, v2, v3, crash1, errors1, latency1, slow1"
    fi
    if [ "${TEKTON:-}" = 1 ]; then
      echo "Tekton Pipelines controller and inplace-rollout tekton-controller up; logs in $dev/tekton-controller.log and $dev/inplace-rollout-tekton-controller.log"
    fi
    exit 0
  fi
  if ! kill -0 "$pid" 2>/dev/null; then
    echo "local control plane failed to start; last lines of $dev/localcluster.log:" >&2
    tail -n 30 "$dev/localcluster.log" >&2
    exit 1
  fi
  sleep 0.5
done
echo "local control plane not ready after 120s; see $dev/localcluster.log" >&2
hack/cluster-down.sh
exit 1
