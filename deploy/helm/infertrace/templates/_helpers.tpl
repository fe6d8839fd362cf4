{{/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */}}
{{/*
Names and labels shared by every template. Resource names follow the usual
<release>-<chart> convention, truncated to 63 characters because Kubernetes
names (and label values) are DNS labels.
*/}}

{{- define "infertrace.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "infertrace.fullname" -}}
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

{{- define "infertrace.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* selector labels: must never change between upgrades (immutable selector) */}}
{{- define "infertrace.selectorLabels" -}}
app.kubernetes.io/name: {{ include "infertrace.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "infertrace.labels" -}}
helm.sh/chart: {{ include "infertrace.chart" . }}
{{ include "infertrace.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/component: node-agent
{{- end }}

{{- define "infertrace.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "infertrace.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "infertrace.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{/*
librdkafka security.protocol from what is configured: TLS and SASL are
independent Secrets, the protocol name combines them.
*/}}
{{- define "infertrace.kafkaSecurityProtocol" -}}
{{- if and .Values.kafka.tls.secretName .Values.kafka.sasl.secretName }}SASL_SSL
{{- else if .Values.kafka.sasl.secretName }}SASL_PLAINTEXT
{{- else if .Values.kafka.tls.secretName }}SSL
{{- else }}PLAINTEXT
{{- end }}
{{- end }}

{{/*
Paths inside the containers; the agent reads the config file from the
ConfigMap mount, the SASL credentials from the memory volume the init
container fills. Sibling directories, never one volume inside another: a
mount point inside a read-only ConfigMap volume cannot be created. Keep in sync with the agent's defaults: shim.sock and
agent.sock under /run/infertrace (agent/main.c, agent/control/control_proto.h).
*/}}
{{- define "infertrace.configDir" -}}/etc/infertrace/config{{- end }}
{{- define "infertrace.secretConfDir" -}}/run/infertrace-secrets{{- end }}
{{- define "infertrace.tlsDir" -}}/etc/infertrace/kafka-tls{{- end }}
{{- define "infertrace.saslDir" -}}/etc/infertrace/kafka-sasl{{- end }}
{{- define "infertrace.shimImagePath" -}}/usr/lib/infertrace/libinfertrace_cupti.so{{- end }}

{{/*
An auto|on|off value (agent.gpuTelemetry.mode, agent.pythonStacks.mode): YAML
reads an unquoted off as false (and on as true), so those are taken as the
words they were written as.
*/}}
{{- define "infertrace.autoOnOff" -}}
{{- $m := toString . -}}
{{- if eq $m "false" }}off{{ else if eq $m "true" }}on{{ else }}{{ $m }}{{ end -}}
{{- end }}
