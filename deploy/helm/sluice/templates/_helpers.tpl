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

{{- /*
The policy as the proxies run it (the WasmPlugin's pluginConfig, the
admin's initial version). Under Istio a Service's port is the Envoy cluster
"outbound|<port>||<service>.<namespace>.svc.<domain>", and no cluster is
named sluice_admin or sluice_rls: those two names, which stand for the
admin's HTTP and rate limit service ports, are written as Istio names them.
Any other cluster name is the policy's own.
*/ -}}
{{- define "sluice.policy" -}}
{{- $p := deepCopy .Values.policy -}}
{{- if .Values.istio.enabled -}}
{{- $host := include "sluice.serviceHost" . -}}
{{- with $p.telemetry -}}
{{- if eq (toString .cluster) "sluice_admin" -}}
{{- $_ := set . "cluster" (printf "outbound|%v||%s" $.Values.service.httpPort $host) -}}
{{- end -}}
{{- end -}}
{{- with $p.fleet -}}
{{- if eq (toString .cluster) "sluice_rls" -}}
{{- $_ := set . "cluster" (printf "outbound|%v||%s" $.Values.service.rlsPort $host) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- toJson $p -}}
{{- end -}}

{{- /* The Secret of the Redis password, when fleet mode uses one: "" otherwise. */ -}}
{{- define "sluice.redisPasswordSecret" -}}
{{- if and .Values.fleet.enabled (ne .Values.fleet.backend "postgres") -}}
{{- .Values.fleet.redis.passwordSecret.name -}}
{{- end -}}
{{- end -}}

{{- /* The admin's Service as proxies resolve it. */ -}}
{{- define "sluice.serviceHost" -}}
{{- printf "%s.%s.svc.%s" (include "sluice.fullname" .) .Release.Namespace .Values.clusterDomain -}}
{{- end -}}

{{/*
The API group of a WasmPlugin target's kind (the kinds values.schema.json
allows).
*/}}
{{- define "sluice.targetGroup" -}}
{{- get (dict "Gateway" "gateway.networking.k8s.io" "GatewayClass" "gateway.networking.k8s.io" "Service" "" "ServiceEntry" "networking.istio.io") . -}}
{{- end -}}

{{/*
The admin's -istio-* settings, so that the WasmPlugin its Istio page renders
for each new version replaces the chart's (same name and namespace, same
attachment and module).
*/}}
{{- define "sluice.istioEnv" -}}
- {name: SLUICE_ISTIO_NAME, value: {{ include "sluice.fullname" . | quote }}}
- {name: SLUICE_ISTIO_NAMESPACE, value: {{ .Values.istio.namespace | quote }}}
- {name: SLUICE_ISTIO_GOGC, value: {{ .Values.istio.gogc | quote }}}
{{- with .Values.istio.selector }}
{{- $labels := list }}
{{- range $k, $v := . }}{{ $labels = append $labels (printf "%s=%s" $k $v) }}{{ end }}
- {name: SLUICE_ISTIO_SELECTOR, value: {{ join "," $labels | quote }}}
{{- end }}
{{- with .Values.istio.targetRefs }}
{{- $targets := list }}
{{- range . }}{{ $targets = append $targets (printf "%s/%s" .kind .name) }}{{ end }}
- {name: SLUICE_ISTIO_TARGET, value: {{ join "," $targets | quote }}}
{{- end }}
{{- with .Values.wasmImage.sha256 }}
- {name: SLUICE_ISTIO_SHA256, value: {{ . | quote }}}
{{- end }}
{{- end -}}
