#!/usr/bin/env bash
# The demo: a 5-replica StatefulSet on the local control plane, its pods running.
set -euo pipefail
cd "$(dirname "$0")/.."
. .dev/env

ns=demo
kubectl get namespace "$ns" >/dev/null 2>&1 || kubectl create namespace "$ns"
kubectl -n "$ns" apply -f - <<'YAML'
apiVersion: apps/v1
kind: StatefulSet
metadata:
  name: web
spec:
  replicas: 5
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
YAML
kubectl -n "$ns" rollout status statefulset/web --timeout=120s
kubectl -n "$ns" get pods -o wide
kubectl -n "$ns" get pods -o custom-columns='POD:.metadata.name,UID:.metadata.uid,IP:.status.podIP,NODE:.spec.nodeName,IMAGE:.status.containerStatuses[0].image,IMAGE-ID:.status.containerStatuses[0].imageID'
echo
echo "The control plane keeps running: . .dev/env, then kubectl. make cluster-down stops it."
