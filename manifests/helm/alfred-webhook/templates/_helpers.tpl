{{/* The name every object of the release shares. */}}
{{- define "alfred-webhook.name" -}}
{{- default "alfred-webhook" .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "alfred-webhook.labels" -}}
app.kubernetes.io/name: {{ include "alfred-webhook.name" . }}
app.kubernetes.io/part-of: kubectl-alfred
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "alfred-webhook.selector" -}}
app.kubernetes.io/name: {{ include "alfred-webhook.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* The Secret the serving certificate lives in. */}}
{{- define "alfred-webhook.tlsSecret" -}}
{{- if eq .Values.certificates.source "secret" -}}
{{- required "certificates.secret.name is required when certificates.source is secret" .Values.certificates.secret.name -}}
{{- else -}}
{{- printf "%s-tls" (include "alfred-webhook.name" .) -}}
{{- end -}}
{{- end -}}

{{/* The webhook's Service; the CA is the given one, else the webhook fills in its serving CA. */}}
{{- define "alfred-webhook.clientConfig" -}}
clientConfig:
  service:
    name: {{ include "alfred-webhook.name" .root }}
    namespace: {{ .root.Release.Namespace }}
    path: {{ .path }}
  {{- if eq .root.Values.certificates.source "secret" }}
  caBundle: {{ required "certificates.secret.caBundle is required when certificates.source is secret" .root.Values.certificates.secret.caBundle }}
  {{- end }}
{{- end -}}

{{- define "alfred-webhook.namespaceSelector" -}}
namespaceSelector:
  matchExpressions:
    - key: kubernetes.io/metadata.name
      operator: NotIn
      values:
        {{- range .Values.excludedNamespaces }}
        - {{ . | quote }}
        {{- end }}
        - {{ .Release.Namespace | quote }}
{{- end -}}

{{- define "alfred-webhook.caretakerSelector" -}}
app.kubernetes.io/name: alfred-caretaker
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "alfred-webhook.caretakerLabels" -}}
{{ include "alfred-webhook.caretakerSelector" . }}
app.kubernetes.io/part-of: kubectl-alfred
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}
