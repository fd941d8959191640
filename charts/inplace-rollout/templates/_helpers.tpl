{{/* The name prefix of every object: the release's name, with the chart's name unless the release's name has it. */}}
{{- define "inplace-rollout.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 50 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 50 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* The labels every object carries; the selector labels are the first two and the component. */}}
{{- define "inplace-rollout.labels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/* The image: by digest when one is given, else by tag (the appVersion when empty). */}}
{{- define "inplace-rollout.image" -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}
{{- end -}}

{{/*
inplace-rollout.rules is the rules of a controller's ClusterRole, as a YAML list: those of its
least-privilege ClusterRole in config/DIR/clusterrole.yaml and, with rbac.httpHooks, those of the
ClusterRole that opens config/DIR/clusterrole-http-hooks.yaml (its first document; the second
binds it, which the chart does with the component's own binding). Both files are read here so
that the chart and config/ cannot differ.
Arguments: root (the chart's context), config (DIR).
*/}}
{{- define "inplace-rollout.rules" -}}
{{- $rules := (.root.Files.Get (printf "files/%s/clusterrole.yaml" .config) | fromYaml).rules -}}
{{- if .root.Values.rbac.httpHooks -}}
{{- $hooks := .root.Files.Get (printf "files/%s/clusterrole-http-hooks.yaml" .config) | splitList "\n---\n" | first | fromYaml -}}
{{- $rules = concat $rules $hooks.rules -}}
{{- end -}}
{{- toYaml $rules -}}
{{- end -}}

{{/*
inplace-rollout.component renders one controller: its ServiceAccount; its ClusterRole, with the
rules of its least-privilege ClusterRole in config/ (the one the tests check against the audit
log, read here so that the chart and config/ cannot differ) and binding; with lease, the Role of
config/DIR/role.yaml for its Lease in the release's namespace, binding and Lease; and its
Deployment.
Arguments: root (the chart's context), component (its name), config (its directory DIR in
config/), command (the subcommand), values (the component's values), lease (whether it elects a
leader), rules (the ClusterRole's rules).
*/}}
{{- define "inplace-rollout.component" -}}
{{- $root := .root -}}
{{- $name := printf "%s-%s" (include "inplace-rollout.fullname" $root) .component -}}
{{- $v := .values -}}
apiVersion: v1
kind: ServiceAccount
metadata:
  name: {{ $name }}
  namespace: {{ $root.Release.Namespace }}
  labels:
    {{- include "inplace-rollout.labels" $root | nindent 4 }}
    app.kubernetes.io/component: {{ .component }}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: {{ $name }}
  labels:
    {{- include "inplace-rollout.labels" $root | nindent 4 }}
    app.kubernetes.io/component: {{ .component }}
rules:
  {{- toYaml .rules | nindent 2 }}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: {{ $name }}
  labels:
    {{- include "inplace-rollout.labels" $root | nindent 4 }}
    app.kubernetes.io/component: {{ .component }}
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: {{ $name }}
subjects:
  - kind: ServiceAccount
    name: {{ $name }}
    namespace: {{ $root.Release.Namespace }}
{{- if .lease }}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata:
  name: {{ $name }}
  namespace: {{ $root.Release.Namespace }}
  labels:
    {{- include "inplace-rollout.labels" $root | nindent 4 }}
    app.kubernetes.io/component: {{ .component }}
rules:
  {{- toYaml (($root.Files.Get (printf "files/%s/role.yaml" .config)) | fromYaml).rules | nindent 2 }}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: {{ $name }}
  namespace: {{ $root.Release.Namespace }}
  labels:
    {{- include "inplace-rollout.labels" $root | nindent 4 }}
    app.kubernetes.io/component: {{ .component }}
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: Role
  name: {{ $name }}
subjects:
  - kind: ServiceAccount
    name: {{ $name }}
    namespace: {{ $root.Release.Namespace }}
---
# The Lease the replicas elect their leader on, created empty: the leader takes it over, and
# `helm uninstall` deletes it with the rest.
apiVersion: coordination.k8s.io/v1
kind: Lease
metadata:
  name: {{ $name }}
  namespace: {{ $root.Release.Namespace }}
  labels:
    {{- include "inplace-rollout.labels" $root | nindent 4 }}
    app.kubernetes.io/component: {{ .component }}
{{- end }}
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: {{ $name }}
  namespace: {{ $root.Release.Namespace }}
  labels:
    {{- include "inplace-rollout.labels" $root | nindent 4 }}
    app.kubernetes.io/component: {{ .component }}
spec:
  replicas: {{ $v.replicas }}
  selector:
    matchLabels:
      app.kubernetes.io/name: {{ $root.Chart.Name }}
      app.kubernetes.io/instance: {{ $root.Release.Name }}
      app.kubernetes.io/component: {{ .component }}
  template:
    metadata:
      labels:
        {{- include "inplace-rollout.labels" $root | nindent 8 }}
        app.kubernetes.io/component: {{ .component }}
    spec:
      serviceAccountName: {{ $name }}
      {{- with $root.Values.imagePullSecrets }}
      imagePullSecrets:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      securityContext:
        runAsNonRoot: true
        runAsUser: 65532
        runAsGroup: 65532
        seccompProfile:
          type: RuntimeDefault
      containers:
        - name: {{ .component }}
          image: {{ include "inplace-rollout.image" $root }}
          imagePullPolicy: {{ $root.Values.image.pullPolicy }}
          args:
            - {{ .command }}
            - --health-addr=:8081
            {{- if .lease }}
            - --leader-election-id={{ $name }}
            {{- end }}
            {{- with $v.extraArgs }}
            {{- toYaml . | nindent 12 }}
            {{- end }}
          {{- if .lease }}
          env:
            # Where the controller holds its Lease.
            - name: POD_NAMESPACE
              valueFrom:
                fieldRef:
                  fieldPath: metadata.namespace
          {{- end }}
          ports:
            - name: health
              containerPort: 8081
          livenessProbe:
            httpGet:
              path: /healthz
              port: health
          readinessProbe:
            httpGet:
              path: /readyz
              port: health
          resources:
            {{- toYaml $v.resources | nindent 12 }}
          securityContext:
            allowPrivilegeEscalation: false
            readOnlyRootFilesystem: true
            capabilities:
              drop: ["ALL"]
      {{- with $v.nodeSelector }}
      nodeSelector:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with $v.tolerations }}
      tolerations:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with $v.affinity }}
      affinity:
        {{- toYaml . | nindent 8 }}
      {{- end }}
{{- end -}}
