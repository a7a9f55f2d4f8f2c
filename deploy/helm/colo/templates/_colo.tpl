{{/* Names and labels. */}}
{{- define "colo.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "colo.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else if contains (include "colo.name" .) .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name (include "colo.name" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "colo.selectorLabels" -}}
app.kubernetes.io/name: {{ include "colo.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "colo.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{ include "colo.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/component: inference-server
{{- end -}}

{{- define "colo.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "colo.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "colo.apiKeySecret" -}}
{{- default (printf "%s-api-key" (include "colo.fullname" .)) .Values.apiKey.existingSecret -}}
{{- end -}}

{{/* The seconds a pod may take to stop: preStop sleep + drain delay + longest request + margin. */}}
{{- define "colo.terminationGracePeriod" -}}
{{- if kindIs "invalid" .Values.drain.terminationGracePeriodSeconds -}}
{{- add .Values.drain.preStopSleepSeconds .Values.drain.delaySeconds .Values.drain.maxRequestSeconds .Values.drain.marginSeconds -}}
{{- else -}}
{{- .Values.drain.terminationGracePeriodSeconds -}}
{{- end -}}
{{- end -}}

{{/* colo's config.yaml: the values' colo section, with the keys the chart owns. */}}
{{- define "colo.config" -}}
{{- $server := deepCopy (default (dict) .Values.colo.server) -}}
{{- $_ := set $server "listen" (printf "0.0.0.0:%d" (int .Values.service.targetPort)) -}}
{{- $_ := set $server "drain_delay_ms" (mul (int .Values.drain.delaySeconds) 1000) -}}
{{- $_ := set $server "shutdown_timeout_ms" (mul (int .Values.drain.maxRequestSeconds) 1000) -}}
{{- if .Values.apiKey.enabled -}}
{{- $_ := set $server "api_key_env" "COLO_API_KEY" -}}
{{- else -}}
{{- $_ := unset $server "api_key_env" -}}
{{- end -}}
{{- $cfg := dict "server" $server "models" (required "colo.models must list at least one model" .Values.colo.models) -}}
{{- with .Values.colo.scheduler -}}
{{- $_ := set $cfg "scheduler" . -}}
{{- end -}}
{{- toYaml $cfg -}}
{{- end -}}

{{/* Whether more than one replica can exist (for the PodDisruptionBudget). */}}
{{- define "colo.multiReplica" -}}
{{- if or (gt (int .Values.replicaCount) 1) (and .Values.autoscaling.enabled (gt (int .Values.autoscaling.maxReplicas) 1)) -}}
true
{{- end -}}
{{- end -}}
