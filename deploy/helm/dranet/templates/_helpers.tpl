{{/* The chart's name, or nameOverride. */}}
{{- define "dranet.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* The name of every object the chart makes: the release name when it contains the chart's
name (`helm install dranet` gives `dranet`, as deploy/install.yaml), else release-chart. */}}
{{- define "dranet.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* Labels of every object; the DaemonSet selects its pods by the first one. */}}
{{- define "dranet.labels" -}}
app.kubernetes.io/name: {{ include "dranet.name" . }}
{{- end -}}

{{- define "dranet.serviceAccountName" -}}
{{- default (include "dranet.fullname" .) .Values.serviceAccount.name -}}
{{- end -}}

{{/* The user name the API server gives the daemon's service account tokens. */}}
{{- define "dranet.serviceAccountUser" -}}
system:serviceaccount:{{ .Release.Namespace }}:{{ include "dranet.serviceAccountName" . }}
{{- end -}}

{{/* The DRA driver name: the one dranet publishes under (not a setting: claims, classes and
upstream's attributes all use it). */}}
{{- define "dranet.driver" -}}
dra.net
{{- end -}}
