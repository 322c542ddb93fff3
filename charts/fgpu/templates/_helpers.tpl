{{/* Names, labels and the pieces several templates share. */}}

{{- define "fgpu.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "fgpu.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "fgpu.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/name: {{ include "fgpu.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{- define "fgpu.selectorLabels" -}}
app.kubernetes.io/name: {{ include "fgpu.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "fgpu.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{- define "fgpu.operator.name" -}}{{ include "fgpu.fullname" . }}-operator{{- end -}}
{{- define "fgpu.node.name" -}}{{ include "fgpu.fullname" . }}-node{{- end -}}
{{- define "fgpu.webhook.name" -}}{{ include "fgpu.fullname" . }}-webhook{{- end -}}
{{- define "fgpu.handoffKey.name" -}}{{ include "fgpu.fullname" . }}-handoff-key{{- end -}}
{{/* Where the operator and the device plugin find the hand-off key (handoffkey.yaml), and its volume. */}}
{{- define "fgpu.handoffKey.dir" -}}/etc/fgpu-handoff{{- end -}}
{{- define "fgpu.handoffKey.volume" -}}
- name: handoff-key
  secret:
    secretName: {{ include "fgpu.handoffKey.name" . }}
    items:
      - {key: key, path: key}
{{- end -}}

{{/* The user name the apiserver gives a ServiceAccount: the webhook trusts these two with hand-off edits. */}}
{{- define "fgpu.serviceAccountUser" -}}
system:serviceaccount:{{ .root.Release.Namespace }}:{{ .name }}
{{- end -}}

{{/* Pod-level security for every fgpu container that needs no host access. */}}
{{- define "fgpu.restrictedContainer" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
capabilities:
  drop: [ALL]
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{- define "fgpu.metricsAnnotations" -}}
{{- if .root.Values.metrics.podAnnotations -}}
prometheus.io/scrape: "true"
prometheus.io/port: {{ .port | quote }}
prometheus.io/path: /metrics
{{- end -}}
{{- end -}}
