{{/* The chart's name. */}}
{{- define "mcsd.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The release's full name: the release name if it holds the chart's name. */}}
{{- define "mcsd.fullname" -}}
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

{{- define "mcsd.selectorLabels" -}}
app.kubernetes.io/name: {{ include "mcsd.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "mcsd.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "mcsd.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: mcsd
{{- end }}

{{- define "mcsd.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "mcsd.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name: name the existing ServiceAccount when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* The registry URL (mcsd --registry) from .Values.registry. */}}
{{- define "mcsd.registryURL" -}}
{{- $r := .Values.registry }}
{{- if eq $r.type "etcd" }}
{{- if not $r.etcd.endpoints }}
{{- fail "registry.etcd.endpoints: list at least one host:port" }}
{{- end }}
{{- if $r.etcd.tls.enabled }}etcds{{ else }}etcd{{ end }}://{{ join "," $r.etcd.endpoints }}{{ with $r.etcd.prefix }}/{{ trimPrefix "/" . }}{{ end }}
{{- else if eq $r.type "cloudmap" }}
{{- $query := list }}
{{- range $k, $v := $r.cloudmap.options }}
{{- range (kindIs "slice" $v | ternary $v (list $v)) }}
{{- $query = append $query (printf "%s=%s" (urlquery $k) (urlquery (toString .))) }}
{{- end }}
{{- end }}
{{- printf "cloudmap://" }}{{ if $query }}?{{ join "&" $query }}{{ end }}
{{- else }}
{{- fail (printf "registry.type %q: want etcd or cloudmap" $r.type) }}
{{- end }}
{{- end }}
