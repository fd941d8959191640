#!/usr/bin/env bash
# The demo: in-place rollouts on the local control plane. A 6-replica StatefulSet and a
# DaemonSet get a good image in batches (1, 50%, 100%), then a crashing image that rolls
# itself back, then an image serving 5xx that fails its Prometheus analysis and rolls back, then
# an InPlaceRollout object applied with kubectl, as a GitOps tool would, which the controller runs.
# Pod UIDs and IPs are shown before and after: they never change.
set -euo pipefail
cd "$(dirname "$0")/.."
. .dev/env
cli=.dev/bin/inplace-rollout
ns=demo

say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
pods() { # selector
  kubectl -n "$ns" get pods -l "$1" --sort-by=.metadata.name \
    -o custom-columns='POD:.metadata.name,UID:.metadata.uid,IP:.status.podIP,NODE:.spec.nodeName,IMAGE:.spec.containers[0].image,RESTARTS:.status.containerStatuses[0].restartCount,READY:.status.containerStatuses[0].ready'
}
identity() { # selector: name uid ip, one pod per line
  kubectl -n "$ns" get pods -l "$1" --sort-by=.metadata.name -o jsonpath='{range .items[*]}{.metadata.name} {.metadata.uid} {.status.podIP}{"\n"}{end}'
}

if kubectl get namespace "$ns" >/dev/null 2>&1; then
  kubectl delete namespace "$ns" --wait=true >/dev/null
fi
kubectl create namespace "$ns" >/dev/null
kubectl -n "$ns" apply -f - >/dev/null <<'YAML'
apiVersion: apps/v1
kind: StatefulSet
metadata:
  name: web
spec:
  replicas: 6
  serviceName: web
  podManagementPolicy: Parallel
  selector:
    matchLabels: {app: web}
  template:
    metadata:
      labels: {app: web}
    spec:
      containers:
        - name: app
          image: registry.example/app:v1
        - name: sidecar
          image: registry.example/proxy:v1
---
apiVersion: apps/v1
kind: DaemonSet
metadata:
  name: agent
spec:
  selector:
    matchLabels: {app: agent}
  template:
    metadata:
      labels: {app: agent}
    spec:
      containers:
        - name: agent
          image: registry.example/agent:v1
YAML
kubectl -n "$ns" rollout status statefulset/web --timeout=120s >/dev/null
kubectl -n "$ns" rollout status daemonset/agent --timeout=120s >/dev/null
identity app=web >.dev/demo-before.txt
identity app=agent >>.dev/demo-before.txt

say "Before: StatefulSet web (6 pods) and DaemonSet agent"
pods app=web
pods app=agent

say "Plan: registry.example/app:v2 in batches 1, 50%, 100% (writes nothing)"
$cli plan -n "$ns" --target statefulset/web --image app=registry.example/app:v2 --batches 1,50%,100%

# expect CODE FILTER CMD...: runs CMD with its output through the shell pipeline FILTER, and stops
# the demo unless CMD exits CODE.
expect() {
  local want=$1 filter=$2; shift 2
  set +e
  "$@" 2>&1 | eval "$filter"
  local code=${PIPESTATUS[0]}
  set -e
  if [ "$code" != "$want" ]; then
    echo "demo: inplace-rollout exited $code, expected $want" >&2
    exit 1
  fi
  echo "inplace-rollout exited $code"
}

say "Rollout 1: StatefulSet web to registry.example/app:v2, in place"
start=$(date +%s%N)
expect 0 "grep -E 'rollout (started|succeeded)|Updating|Updated|progress'" \
  $cli run -n "$ns" --target statefulset/web --image app=registry.example/app:v2 --batches 1,50%,100%
echo "took $(( ($(date +%s%N) - start) / 1000000 )) ms"

say "Rollout 2: DaemonSet agent to registry.example/agent:v2, in place"
expect 0 "grep -E 'rollout (started|succeeded)|progress'" \
  $cli run -n "$ns" --target daemonset/agent --image agent=registry.example/agent:v2 --batches 1,100%

say "Rollout 3: StatefulSet web to registry.example/app:crash-1, which crash-loops; it rolls itself back"
expect 1 "grep -E 'rollout started|rolling back|rolled back|RollingBack|RolledBack' | cut -c1-220" \
  $cli run -n "$ns" --target statefulset/web --image app=registry.example/app:crash-1 --batches 1,50%,100%
echo "(exit 1: failed and rolled back)"

say "Rollout 4: StatefulSet web to registry.example/app:errors-1, gated on Prometheus golden signals"
cat >.dev/demo-analysis.yaml <<YAML
prometheus: {address: "$PROMETHEUS_URL"}
interval: 1s
count: 2
window: 5s
YAML
expect 1 "grep -E 'analysis started|msg=measurement|rolling back|rolled back' | grep -v 'verdict=Skipped' | cut -c1-220" \
  $cli run -n "$ns" --target statefulset/web --image app=registry.example/app:errors-1 --batches 1,50%,100% \
  --analysis .dev/demo-analysis.yaml
echo "(exit 1: the error-rate check failed batch 1 and it rolled back)"

say "Rollout 5: the same StatefulSet from Git: kubectl apply of an InPlaceRollout, which inplace-rollout controller runs"
kubectl -n "$ns" apply -f - <<YAML
apiVersion: inplace-rollout.io/v1alpha1
kind: InPlaceRollout
metadata:
  name: web
spec:
  target: {kind: StatefulSet, name: web}
  images: {app: registry.example/app:v3}
  batches: [1, "50%", "100%"]
YAML
kubectl -n "$ns" wait --for=condition=Succeeded inplacerollout/web --timeout=180s
kubectl -n "$ns" get inplacerollouts

say "Per-pod status of web (stage, image before the last rollout, image now)"
$cli status -n "$ns" --target statefulset/web

say "Events on the pod the crash reached"
kubectl -n "$ns" get events --field-selector involvedObject.name=web-5 --sort-by=.lastTimestamp -o custom-columns='REASON:.reason,MESSAGE:.message' | grep InPlace | cut -c1-160

say "After: same pods, same UIDs and IPs"
pods app=web
pods app=agent
identity app=web >.dev/demo-after.txt
identity app=agent >>.dev/demo-after.txt
if diff -u .dev/demo-before.txt .dev/demo-after.txt; then
  echo "every pod kept its UID and IP through five rollouts and two rollbacks"
else
  echo "pod identities changed" >&2
  exit 1
fi
echo
echo "The control plane keeps running: . .dev/env, then kubectl or .dev/bin/inplace-rollout. make cluster-down stops it."
