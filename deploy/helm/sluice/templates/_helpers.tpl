{{- define "sluice.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "sluice.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "sluice.labels" -}}
{{ include "sluice.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "sluice.secretName" -}}
{{- default (include "sluice.fullname" .) .Values.auth.existingSecret -}}
{{- end -}}

{{- define "sluice.wasmRef" -}}
{{- printf "%s:%s" .Values.wasmImage.repository (default .Chart.AppVersion .Values.wasmImage.tag) -}}
{{- end -}}

{{- /* The Secret of TLS to Redis, when fleet mode uses one: "" otherwise. */ -}}
{{- define "sluice.redisTLSSecret" -}}
{{- if and .Values.fleet.enabled (ne .Values.fleet.backend "postgres") -}}
{{- .Values.fleet.redis.tls.secretName -}}
{{- end -}}
{{- end -}}
