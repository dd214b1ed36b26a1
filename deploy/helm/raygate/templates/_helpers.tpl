{{/*
Object names are fixed (raygate, ray-scheduler, raygate-webhook): they are what the
kustomize setups of deploy/ name, what the scheduler configurations and the docs call,
and raygate is one per cluster (its ClusterRoles are cluster-wide).
*/}}

{{- define "raygate.labels" -}}
app.kubernetes.io/name: {{ .name }}
helm.sh/chart: {{ printf "%s-%s" .root.Chart.Name .root.Chart.Version }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/version: {{ .root.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
{{- end }}

{{/* Labels of an object that kustomize's manifests leave unlabelled: Helm's only. */}}
{{- define "raygate.helmLabels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "raygate.image" -}}
{{- $image := .Values.image -}}
{{- if $image.digest -}}
{{ $image.repository }}@{{ $image.digest }}
{{- else -}}
{{ $image.repository }}:{{ $image.tag | default .Chart.AppVersion }}
{{- end -}}
{{- end }}

{{/* podAntiAffinity over nodes for the pods labelled app.kubernetes.io/name=.name */}}
{{- define "raygate.antiAffinity" -}}
{{- $term := dict "topologyKey" "kubernetes.io/hostname" "labelSelector" (dict "matchLabels" (dict "app.kubernetes.io/name" .name)) -}}
podAntiAffinity:
{{- if eq .root.Values.podAntiAffinity "required" }}
  requiredDuringSchedulingIgnoredDuringExecution:
  {{- toYaml (list $term) | nindent 2 }}
{{- else if eq .root.Values.podAntiAffinity "preferred" }}
  preferredDuringSchedulingIgnoredDuringExecution:
  {{- toYaml (list (dict "weight" 100 "podAffinityTerm" $term)) | nindent 2 }}
{{- else }}
{{- fail (printf "podAntiAffinity: %q is neither preferred nor required" .root.Values.podAntiAffinity) }}
{{- end }}
{{- end }}

{{- define "raygate.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
seccompProfile: {type: RuntimeDefault}
{{- end }}

{{- define "raygate.containerSecurityContext" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
capabilities: {drop: [ALL]}
{{- end }}

{{/* The setup's own checks: a combination that cannot work fails the render. */}}
{{- define "raygate.validate" -}}
{{- $mode := .Values.kubeScheduler.mode -}}
{{- if not (has $mode (list "second" "default" "none")) -}}
{{- fail (printf "kubeScheduler.mode: %q is none of second, default, none" $mode) -}}
{{- end -}}
{{- if and .Values.kueue.enabled (ne $mode "second") -}}
{{- fail "kueue.enabled needs kubeScheduler.mode second: ray-scheduler places the pods Kueue admits" -}}
{{- end -}}
{{- if and .Values.volcano.enabled (ne $mode "none") -}}
{{- fail "volcano.enabled needs kubeScheduler.mode none: Volcano schedules the Ray pods, not kube-scheduler" -}}
{{- end -}}
{{- if and (eq $mode "default") (not .Values.webhook.tls.certManager.enabled) (not (and .Values.webhook.tls.existingSecret .Values.webhook.tls.caBundle)) -}}
{{- fail "kubeScheduler.mode default serves a webhook: set webhook.tls.certManager.enabled, or webhook.tls.existingSecret and webhook.tls.caBundle" -}}
{{- end -}}
{{- end }}
