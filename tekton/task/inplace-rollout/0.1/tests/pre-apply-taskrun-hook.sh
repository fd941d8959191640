# The catalog's e2e sources this in its own shell, in namespace ${tns}, before it creates each
# tests/*.yaml: the StatefulSet the TaskRun rolls must run, Ready, before the Task starts. Applying
# it again before the second file changes nothing.
kubectl -n "${tns}" apply -f - <<'YAML'
apiVersion: apps/v1
kind: StatefulSet
metadata:
  name: web
spec:
  replicas: 2
  serviceName: web
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers:
        - name: app
          image: docker.io/library/nginx:1.27.4
YAML
kubectl -n "${tns}" rollout status statefulset/web --timeout=5m
