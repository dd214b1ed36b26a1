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

{{/*
The ray-scheduler image: kubeScheduler.image.tag, else the cluster's own version
(.Capabilities.KubeVersion: the API server's under `helm install`, --kube-version under
`helm template`) without a provider's suffix (v1.30.4-eks-a737599 -> v1.30.4), so the
scheduler is always its control plane's release.
*/}}
{{- define "raygate.kubeSchedulerImage" -}}
{{- $image := .Values.kubeScheduler.image -}}
{{- $tag := $image.tag | default (regexFind "^v[0-9]+\\.[0-9]+\\.[0-9]+" .Capabilities.KubeVersion.Version) -}}
{{- if not $tag -}}
{{- fail (printf "kubeScheduler.image.tag: empty, and the cluster's version %q is not vX.Y.Z" .Capabilities.KubeVersion.Version) -}}
{{- end -}}
{{ $image.repository }}:{{ $tag }}
{{- end }}

{{/* The pods that serve raygate's HTTP and gRPC ports, which the Service `raygate` selects:
in mode second the sidecars of ray-scheduler (there is no raygate Deployment then). */}}
{{- define "raygate.serving" -}}
{{- if eq .Values.kubeScheduler.mode "second" }}ray-scheduler{{ else }}raygate{{ end -}}
{{- end }}

{{/* config: with what the chart itself decides (authz off, the TLS files it mounts). */}}
{{- define "raygate.config" -}}
{{- $config := deepCopy .Values.config -}}
{{- if not .Values.authz.enabled -}}
{{- $_ := set $config.server.authz "mode" "off" -}}
{{- end -}}
{{- if .Values.tls.secretName -}}
{{- $_ := set $config.server.tls "cert" "/etc/raygate/server-tls/tls.crt" -}}
{{- $_ := set $config.server.tls "key" "/etc/raygate/server-tls/tls.key" -}}
{{- end -}}
{{- if .Values.tls.clientCASecretName -}}
{{- $_ := set $config.server.tls "clientCA" "/etc/raygate/client-ca/ca.crt" -}}
{{- end -}}
{{- toYaml $config -}}
{{- end }}

{{/* The namespace of the leader election's Lease: config.server.leaderElection's, else
the release's (raygate's default: its pod's namespace). */}}
{{- define "raygate.leaseNamespace" -}}
{{- .Values.config.server.leaderElection.leaseNamespace | default .Release.Namespace -}}
{{- end }}

{{/* The raygate container's environment: the leader election's identity (the pod's name,
with a random suffix) and the Lease's default namespace, from the downward API. */}}
{{- define "raygate.podEnv" -}}
env:
- name: POD_NAME
  valueFrom: {fieldRef: {fieldPath: metadata.name}}
- name: POD_NAMESPACE
  valueFrom: {fieldRef: {fieldPath: metadata.namespace}}
{{- end }}

{{/* Pod annotations: podAnnotations, and the checksum of what the pods read only at start
(raygate.yaml's server:, and the extra document given, e.g. ray-scheduler's
configuration), so that `helm upgrade` rolls them when it changes; policy: is reloaded in
place and left out. */}}
{{- define "raygate.podAnnotations" -}}
{{- $server := (include "raygate.config" .root | fromYaml).server -}}
checksum/config: {{ printf "%s\n%s" (toYaml $server) (.extra | default "") | sha256sum }}
{{- with .root.Values.podAnnotations }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{- define "raygate.podLabels" -}}
app.kubernetes.io/name: {{ .name }}
{{- with .root.Values.podLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* raygate's probes: probes.* as given, else httpGet (HTTPS under TLS), else under mutual
TLS tcpSocket (the kubelet presents no client certificate: docs/security.md). */}}
{{- define "raygate.probes" -}}
{{- $v := .Values -}}
{{- $mtls := not (empty $v.tls.clientCASecretName) -}}
readinessProbe:
{{- if $v.probes.readiness }}
  {{- toYaml $v.probes.readiness | nindent 2 }}
{{- else if $mtls }}
  tcpSocket: {port: http}
  periodSeconds: 5
  failureThreshold: 2
{{- else }}
  httpGet: {path: /readyz, port: http{{ if $v.tls.secretName }}, scheme: HTTPS{{ end }}}
  periodSeconds: 5
  failureThreshold: 2
{{- end }}
livenessProbe:
{{- if $v.probes.liveness }}
  {{- toYaml $v.probes.liveness | nindent 2 }}
{{- else if $mtls }}
  tcpSocket: {port: http}
  periodSeconds: 10
  failureThreshold: 6
{{- else }}
  httpGet: {path: /healthz, port: http{{ if $v.tls.secretName }}, scheme: HTTPS{{ end }}}
  periodSeconds: 10
  failureThreshold: 6
{{- end }}
startupProbe:
{{- if $v.probes.startup }}
  {{- toYaml $v.probes.startup | nindent 2 }}
{{- else if $mtls }}
  tcpSocket: {port: http}
  periodSeconds: 5
  failureThreshold: 60
{{- else }}
  # The first list of 5,000 nodes and 150,000 pods takes seconds; give it minutes.
  httpGet: {path: /healthz, port: http{{ if $v.tls.secretName }}, scheme: HTTPS{{ end }}}
  periodSeconds: 5
  failureThreshold: 60
{{- end }}
{{- end }}

{{/* raygate's args after `serve` and its listeners' addresses: extraArgs. */}}
{{- define "raygate.extraArgs" -}}
{{- range .Values.extraArgs }}
- {{ . | quote }}
{{- end }}
{{- end }}

{{/* The TLS volumes and mounts of a raygate container (tls.*). */}}
{{- define "raygate.tlsMounts" -}}
{{- if .Values.tls.secretName }}
- {name: server-tls, mountPath: /etc/raygate/server-tls, readOnly: true}
{{- end }}
{{- if .Values.tls.clientCASecretName }}
- {name: client-ca, mountPath: /etc/raygate/client-ca, readOnly: true}
{{- end }}
{{- end }}

{{- define "raygate.tlsVolumes" -}}
{{- if .Values.tls.secretName }}
- name: server-tls
  secret: {secretName: {{ .Values.tls.secretName }}}
{{- end }}
{{- if .Values.tls.clientCASecretName }}
- name: client-ca
  secret: {secretName: {{ .Values.tls.clientCASecretName }}, items: [{key: ca.crt, path: ca.crt}]}
{{- end }}
{{- end }}

{{/* "true" for an on/off setting of raygate.yaml that is on ("on" or a YAML true), else "". */}}
{{- define "raygate.isOn" -}}
{{- if has (toString .) (list "on" "true") }}true{{ end -}}
{{- end }}

{{/* "true" when raygate serves its Ray-pod webhook (every mode): native placement on
(config.server.placement.native, the default), or the marker (config.server.webhook.marker).
Else "" (extender only). */}}
{{- define "raygate.webhook" -}}
{{- $server := .Values.config.server -}}
{{- if or (include "raygate.isOn" $server.placement.native) (include "raygate.isOn" $server.webhook.marker) -}}
true
{{- end -}}
{{- end }}

{{/* Where the webhook's certificate comes from: existingSecret (with its caBundle),
certManager (webhook.tls.certManager.enabled), else generated (the chart's own CA). */}}
{{- define "raygate.webhookCertSource" -}}
{{- $tls := .Values.webhook.tls -}}
{{- if $tls.existingSecret }}existingSecret{{ else if $tls.certManager.enabled }}certManager{{ else }}generated{{ end -}}
{{- end }}

{{/* The raygate container's webhook listener, its port and its certificate's mount and
volume, where raygate serves the webhook: each a list of one, or nothing. */}}
{{- define "raygate.webhookArgs" -}}
{{- if include "raygate.webhook" . }}
- --webhook-addr=0.0.0.0:9443
- --webhook-cert=/etc/raygate/tls/tls.crt
- --webhook-key=/etc/raygate/tls/tls.key
{{- end }}
{{- end }}

{{- define "raygate.webhookPort" -}}
{{- if include "raygate.webhook" . }}
- {name: webhook, containerPort: 9443, protocol: TCP}
{{- end }}
{{- end }}

{{- define "raygate.webhookMount" -}}
{{- if include "raygate.webhook" . }}
- {name: webhook-tls, mountPath: /etc/raygate/tls, readOnly: true}
{{- end }}
{{- end }}

{{- define "raygate.webhookVolume" -}}
{{- if include "raygate.webhook" . }}
- name: webhook-tls
  secret: {secretName: {{ .Values.webhook.tls.existingSecret | default "raygate-webhook-tls" }}}
{{- end }}
{{- end }}

{{/* "true" when ray-scheduler's own kube-scheduler metrics are scraped: mode second and
metrics.kubeScheduler.serviceMonitor.enabled (raygate.validate refuses it in other modes). */}}
{{- define "raygate.scrapesKubeScheduler" -}}
{{- if and (eq .Values.kubeScheduler.mode "second") .Values.metrics.kubeScheduler.serviceMonitor.enabled -}}
true
{{- end -}}
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
{{- if and .Values.metrics.kubeScheduler.serviceMonitor.enabled (ne $mode "second") -}}
{{- fail "metrics.kubeScheduler.serviceMonitor.enabled needs kubeScheduler.mode second: only there does the chart run a kube-scheduler (ray-scheduler)" -}}
{{- end -}}
{{- if and .Values.volcano.enabled (ne $mode "none") -}}
{{- fail "volcano.enabled needs kubeScheduler.mode none: Volcano schedules the Ray pods, not kube-scheduler" -}}
{{- end -}}
{{- if and .Values.tls.clientCASecretName (not .Values.tls.secretName) -}}
{{- fail "tls.clientCASecretName needs tls.secretName: mutual TLS is TLS with client certificates" -}}
{{- end -}}
{{- if and .Values.volcano.enabled .Values.tls.clientCASecretName -}}
{{- fail "tls.clientCASecretName with volcano.enabled: Volcano's extender client presents no certificate (docs/security.md)" -}}
{{- end -}}
{{- if and .Values.writeBounds.enabled (semverCompare "<1.30.0-0" .Capabilities.KubeVersion.Version) -}}
{{- fail (printf "writeBounds.enabled needs Kubernetes 1.30 or later (ValidatingAdmissionPolicy, admissionregistration.k8s.io/v1), the cluster is %s: set it false" .Capabilities.KubeVersion.Version) -}}
{{- end -}}
{{- $tls := .Values.webhook.tls -}}
{{- if ne (empty $tls.existingSecret) (empty $tls.caBundle) -}}
{{- fail "webhook.tls.existingSecret and webhook.tls.caBundle go together: the Secret serves the webhook, the CA (base64 PEM) is what the API server verifies it with" -}}
{{- end -}}
{{- if and $tls.existingSecret $tls.certManager.enabled -}}
{{- fail "webhook.tls: existingSecret or certManager.enabled, not both (one certificate source)" -}}
{{- end -}}
{{- end }}
