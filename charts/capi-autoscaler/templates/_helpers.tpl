{{/*
Hand-written helpers of the generated templates (hack/helmchart writes
every templates/*.yaml from config/; this file and NOTES.txt it leaves
alone).
*/}}

{{/* The chart's name, or nameOverride. */}}
{{- define "capi-autoscaler.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The prefix of every object's name, as config/default's namePrefix is for
kustomize: the release's name when it contains the chart's (a release named
capi-autoscaler installs the names of the release manifests), else the
release's name and the chart's; fullnameOverride wins.
*/}}
{{- define "capi-autoscaler.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/* The chart label's value. */}}
{{- define "capi-autoscaler.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The labels every object carries, in place of the labels config/default
gives (app.kubernetes.io/name and part-of; not cluster.x-k8s.io/provider,
which is clusterctl's inventory).
*/}}
{{- define "capi-autoscaler.labels" -}}
helm.sh/chart: {{ include "capi-autoscaler.chart" . }}
{{ include "capi-autoscaler.selectorLabels" . }}
app.kubernetes.io/part-of: capi-autoscaler
{{- if .Chart.AppVersion }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{- end }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/*
The labels that tell this release's manager pods apart, added to the
selectors of config/ (control-plane: controller-manager), so that two
releases in one namespace do not select each other's pods.
*/}}
{{- define "capi-autoscaler.selectorLabels" -}}
app.kubernetes.io/name: {{ include "capi-autoscaler.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/* The manager's image: image.tag, or the chart's appVersion. */}}
{{- define "capi-autoscaler.image" -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) }}
{{- end }}
