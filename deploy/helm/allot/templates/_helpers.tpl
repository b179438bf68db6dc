{{/* The chart's name. */}}
{{- define "allot.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The release's resource name. It names a StatefulSet, whose pods carry a
controller-revision-hash label of the name plus 11 characters, which must
fit a label value's 63: so at most 52 characters, refused above that (the
schema cannot see the release name).
*/}}
{{- define "allot.fullname" -}}
{{- $name := "" }}
{{- if .Values.fullnameOverride }}
{{- $name = .Values.fullnameOverride }}
{{- else }}
{{- $base := default .Chart.Name .Values.nameOverride }}
{{- if contains $base .Release.Name }}
{{- $name = .Release.Name }}
{{- else }}
{{- $name = printf "%s-%s" .Release.Name $base }}
{{- end }}
{{- end }}
{{- if gt (len $name) 52 }}
{{- fail (printf "the resource name %q is %d characters, at most 52 (a StatefulSet's pods label it with 11 more): choose a shorter release name or set fullnameOverride" $name (len $name)) }}
{{- end }}
{{- $name }}
{{- end }}

{{- define "allot.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "allot.selectorLabels" -}}
app.kubernetes.io/name: {{ include "allot.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "allot.labels" -}}
helm.sh/chart: {{ include "allot.chart" . }}
{{ include "allot.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/component: control-plane
{{- end }}

{{- define "allot.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "allot.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* repository:tag, or repository:tag@digest when a digest is set. */}}
{{- define "allot.image" -}}
{{- $tag := default .Chart.AppVersion .Values.image.tag }}
{{- if .Values.image.digest }}
{{- printf "%s:%s@%s" .Values.image.repository $tag .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository $tag }}
{{- end }}
{{- end }}

{{- define "allot.tokensSecret" -}}
{{- default (printf "%s-tokens" (include "allot.fullname" .)) .Values.tokens.existingSecret }}
{{- end }}

{{/* The admin listener's scheme, for probes and the ServiceMonitor. */}}
{{- define "allot.scheme" -}}
{{- if .Values.tls.enabled }}HTTPS{{ else }}HTTP{{ end }}
{{- end }}

{{/* Where allotd reads its files inside the pod. */}}
{{- define "allot.paths" -}}
data: /var/lib/allot
tokens: /etc/allot/tokens
tls: /etc/allot/tls
clientCA: /etc/allot/xds-client-ca
identities: /etc/allot/xds-identities
mesh: /etc/allot/mesh
stickyKeys: /etc/allot/sticky-keys
etcdTLS: /etc/allot/etcd-tls
{{- end }}

{{/*
allotd's command line: only flags allotd defines
(control-plane/cmd/allotd/flags.go, etcdflags.go); the chart's tests parse
it with allotd itself.
*/}}
{{- define "allot.args" -}}
{{- $p := include "allot.paths" . | fromYaml }}
{{- $v := .Values }}
{{- $a := list (printf "-admin-addr=:%d" (int64 $v.admin.port)) }}
{{- if $v.admin.grpc.enabled }}
{{- $a = append $a (printf "-admin-grpc-addr=:%d" (int64 $v.admin.grpc.port)) }}
{{- end }}
{{- $a = append $a (printf "-xds-addr=:%d" (int64 $v.xds.port)) }}
{{- $a = append $a (printf "-xds-max-streams=%d" (int64 $v.xds.maxStreams)) }}
{{- $a = append $a (printf "-xds-cluster-grace=%s" $v.xds.clusterGrace) }}
{{- $a = append $a (printf "-guardian-interval=%s" $v.guardianInterval) }}
{{- $a = append $a (printf "-tokens=%s/%s" $p.tokens $v.tokens.key) }}
{{- $a = append $a (printf "-wasm-path=%s" $v.filter.wasmPath) }}
{{- $a = append $a (printf "-native-path=%s" $v.filter.nativePath) }}
{{- $a = append $a (printf "-log-level=%s" $v.log.level) }}
{{- $a = append $a (printf "-log-format=%s" $v.log.format) }}
{{- if eq $v.store "bolt" }}
{{- $a = append $a (printf "-db=%s/allot.db" $p.data) }}
{{- else }}
{{- $a = append $a (printf "-store=etcd://%s" (join "," $v.etcd.endpoints)) }}
{{- $a = append $a (printf "-etcd-prefix=%s" $v.etcd.prefix) }}
{{- $a = append $a (printf "-store-timeout=%s" $v.etcd.requestTimeout) }}
{{- $a = append $a (printf "-lease-ttl=%s" $v.etcd.leaseTTL) }}
{{- /* Kubernetes expands $(POD_NAME) from the container's env. */}}
{{- $a = append $a "-replica-id=$(POD_NAME)" }}
{{- if $v.etcd.tls.secretName }}
{{- $a = append $a (printf "-etcd-ca=%s/ca.crt" $p.etcdTLS) }}
{{- if $v.etcd.tls.clientCert }}
{{- $a = append $a (printf "-etcd-cert=%s/tls.crt" $p.etcdTLS) }}
{{- $a = append $a (printf "-etcd-key=%s/tls.key" $p.etcdTLS) }}
{{- end }}
{{- end }}
{{- end }}
{{- if $v.tls.enabled }}
{{- $a = append $a (printf "-tls-cert=%s/tls.crt" $p.tls) }}
{{- $a = append $a (printf "-tls-key=%s/tls.key" $p.tls) }}
{{- $a = append $a (printf "-tls-reload=%s" $v.tls.reload) }}
{{- end }}
{{- if $v.xdsMTLS.enabled }}
{{- $a = append $a (printf "-xds-client-ca=%s/%s" $p.clientCA $v.xdsMTLS.caKey) }}
{{- $a = append $a (printf "-xds-identities=%s/identities.json" $p.identities) }}
{{- end }}
{{- if $v.mesh }}
{{- $a = append $a (printf "-mesh=%s/mesh.json" $p.mesh) }}
{{- end }}
{{- if $v.stickyKeys.existingSecret }}
{{- $a = append $a (printf "-sticky-keys=%s/%s" $p.stickyKeys $v.stickyKeys.key) }}
{{- end }}
{{- toYaml $a }}
{{- end }}

{{/*
Checks the schema cannot express: one value against another. Included by
the StatefulSet; renders nothing.
*/}}
{{- define "allot.validate" -}}
{{- $v := .Values }}
{{- $ports := list (int64 $v.admin.port) (int64 $v.xds.port) }}
{{- if $v.admin.grpc.enabled }}
{{- $ports = append $ports (int64 $v.admin.grpc.port) }}
{{- end }}
{{- if ne (len $ports) (len (uniq $ports)) }}
{{- fail (printf "admin.port, xds.port and admin.grpc.port (when enabled) must differ: %v" $ports) }}
{{- end }}
{{- end }}
