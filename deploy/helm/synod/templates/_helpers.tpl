{{/* Names and labels. */}}
{{- define "synod.name" -}}
{{- .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "synod.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 52 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 52 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "synod.peersService" -}}
{{- printf "%s-peers" (include "synod.fullname" .) -}}
{{- end -}}

{{- define "synod.tlsSecret" -}}
{{- .Values.tls.secretName | default (printf "%s-tls" (include "synod.fullname" .)) -}}
{{- end -}}

{{- define "synod.clusterId" -}}
{{- .Values.clusterId | default (printf "%s-%s" .Release.Name .Release.Namespace) -}}
{{- end -}}

{{- define "synod.selectorLabels" -}}
app.kubernetes.io/name: {{ include "synod.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "synod.labels" -}}
{{ include "synod.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{/* The stable DNS name of the pod with ordinal $i: <fullname>-<i>.<peers>.<ns>.svc.<domain>. */}}
{{- define "synod.podHost" -}}
{{- $ctx := index . 0 -}}
{{- printf "%s-%d.%s.%s.svc.%s" (include "synod.fullname" $ctx) (index . 1) (include "synod.peersService" $ctx) $ctx.Release.Namespace $ctx.Values.clusterDomain -}}
{{- end -}}

{{/* Is the admin port HTTPS? */}}
{{- define "synod.adminScheme" -}}
{{- if and .Values.tls.enabled .Values.tls.admin -}}HTTPS{{- else -}}HTTP{{- end -}}
{{- end -}}

{{/*
The node's configuration, as a dict: .Values.config with the keys the chart manages laid over
it. node_id and the certificate files are set per pod by the container's command.
*/}}
{{- define "synod.configDict" -}}
{{- $v := .Values -}}
{{- $c := deepCopy $v.config -}}
{{- $peers := dict -}}
{{- range $i := until (int $v.replicas) -}}
{{- $_ := set $peers (toString (add1 $i)) (printf "%s:%d" (include "synod.podHost" (list $ $i)) (int $v.ports.peer)) -}}
{{- end -}}
{{- $_ := set $c "cluster_id" (include "synod.clusterId" .) -}}
{{- $_ := set $c "data_dir" "/var/lib/synod/data" -}}
{{- $_ := set $c "admin_addr" (printf "0.0.0.0:%d" (int $v.ports.admin)) -}}
{{- $_ := set $c "peer_addr" (printf "0.0.0.0:%d" (int $v.ports.peer)) -}}
{{- if $v.ports.client -}}
{{- $_ := set $c "client_addr" (printf "0.0.0.0:%d" (int $v.ports.client)) -}}
{{- end -}}
{{- $_ := set $c "peers" $peers -}}
{{- if $v.tls.enabled -}}
{{- $_ := set $c "insecure" false -}}
{{- $_ := set $c "secure_client_addr" (printf "0.0.0.0:%d" (int $v.ports.secureClient)) -}}
{{- $_ := set $c "tls" (dict "ca_file" "/etc/synod/tls/ca.crt" "client_auth" $v.tls.clientAuth "admin" $v.tls.admin "admin_subjects" $v.tls.adminSubjects "kv" $v.tls.kv) -}}
{{- else -}}
{{- $_ := set $c "insecure" true -}}
{{- end -}}
{{- if $v.kv.enabled -}}
{{- $addrs := dict -}}
{{- range $i := until (int $v.replicas) -}}
{{- $_ := set $addrs (toString (add1 $i)) (printf "%s:%d" (include "synod.podHost" (list $ $i)) (int $v.kv.port)) -}}
{{- end -}}
{{- $kv := deepCopy (get $c "kv" | default dict) -}}
{{- $_ := set $kv "buckets" $v.kv.buckets -}}
{{- $_ := set $kv "replicas" $v.kv.bucketReplicas -}}
{{- $_ := set $kv "listen" (printf "0.0.0.0:%d" (int $v.kv.port)) -}}
{{- $_ := set $kv "addrs" $addrs -}}
{{- $_ := set $c "kv" $kv -}}
{{- end -}}
{{- toJson $c -}}
{{- end -}}

{{/*
TOML writer (Helm's toToml writes every YAML number as a float, which synod's integer keys
refuse): a scalar or list value.
*/}}
{{- define "synod.tomlValue" -}}
{{- if kindIs "string" . -}}
{{- toJson . -}}
{{- else if kindIs "bool" . -}}
{{- . -}}
{{- else if or (kindIs "float64" .) (kindIs "float32" .) (kindIs "int" .) (kindIs "int64" .) -}}
{{- if eq (float64 .) (floor .) -}}{{- int64 . -}}{{- else -}}{{- . -}}{{- end -}}
{{- else if kindIs "slice" . -}}
[{{- range $i, $e := . -}}{{- if $i -}}, {{ end -}}{{- include "synod.tomlValue" $e -}}{{- end -}}]
{{- else if kindIs "invalid" . -}}
{{- fail "config: a null value cannot be written to TOML (remove the key instead)" -}}
{{- else -}}
{{- fail (printf "config: cannot write %v (%s) to TOML" . (kindOf .)) -}}
{{- end -}}
{{- end -}}

{{- define "synod.tomlKey" -}}
{{- if regexMatch "^[A-Za-z0-9_-]+$" . -}}{{- . -}}{{- else -}}{{- toJson . -}}{{- end -}}
{{- end -}}

{{/* A table: its plain keys first, then its sub-tables as [prefix.key] sections. */}}
{{- define "synod.tomlTable" -}}
{{- $prefix := .prefix -}}
{{- range $k, $v := .table -}}
{{- if not (kindIs "map" $v) }}
{{ include "synod.tomlKey" $k }} = {{ include "synod.tomlValue" $v }}
{{- end -}}
{{- end -}}
{{- range $k, $v := .table -}}
{{- if kindIs "map" $v -}}
{{- $name := include "synod.tomlKey" $k -}}
{{- if $prefix -}}{{- $name = printf "%s.%s" $prefix $name -}}{{- end }}

[{{ $name }}]
{{- include "synod.tomlTable" (dict "prefix" $name "table" $v) -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "synod.configToml" -}}
{{- include "synod.tomlTable" (dict "prefix" "" "table" (include "synod.configDict" . | fromJson)) -}}
{{- end -}}
