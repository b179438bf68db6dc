#!/usr/bin/env bash
# Runs the whole Allot system locally (what `make run` does): the demo
# upstream, allotd on its embedded bbolt store, Envoy with the sidecar
# bootstrap, and two example experiments, then prints commands to try
# (e2e/demo_test.go runs each). Ctrl-C stops everything.
# FILTER=wasm (default) runs the Wasm module with envoy-configs/sidecar.yaml;
# FILTER=native runs the native module with envoy-configs/sidecar-native.yaml.
# The environment can move the ports (ENVOY_PORTS, ENVOY_ADMIN_PORTS,
# ALLOTD_ADMIN_PORTS, ALLOTD_XDS_PORTS, ECHO_PORT), the binaries (BIN,
# default bin) and the state (STATE_DIR, default tmp/run).
set -euo pipefail
cd "$(dirname "$0")/.."

ENVOY_BIN=${ENVOY_BIN:-.venv/bin/envoy}
BIN=${BIN:-bin}
FILTER=${FILTER:-wasm}
case $FILTER in
  wasm) BOOTSTRAP=envoy-configs/sidecar.yaml; MODULE=$BIN/allot.wasm ;;
  native) BOOTSTRAP=envoy-configs/sidecar-native.yaml; MODULE=$BIN/liballot.so ;;
  *) echo "FILTER=$FILTER: want wasm (bin/allot.wasm) or native (bin/liballot.so)" >&2; exit 1 ;;
esac
if [ ! -f "$MODULE" ]; then
  echo "$MODULE is missing: build it with make $([ "$FILTER" = native ] && echo build-native || echo build-filter)" >&2
  exit 1
fi
TOKEN=dev-admin-token-change-me
STATE=${STATE_DIR:-tmp/run}
mkdir -p "$STATE"

source scripts/lib.sh
ports ENVOY_PORTS 1 10000
ports ENVOY_ADMIN_PORTS 1 9901
ports ALLOTD_ADMIN_PORTS 1 8080
ports ALLOTD_XDS_PORTS 1 18000
ports ECHO_PORT 1 8081
LISTENER=${ENVOY_PORTS[0]} ENVOY_ADMIN=${ENVOY_ADMIN_PORTS[0]} ADMIN=${ALLOTD_ADMIN_PORTS[0]} XDS=${ALLOTD_XDS_PORTS[0]}
require_free_ports "$LISTENER" "$ENVOY_ADMIN" "$ADMIN" "$XDS" "$ECHO_PORT"

render_bootstrap "$BOOTSTRAP" 10000="$LISTENER" 9901="$ENVOY_ADMIN" 18000="$XDS" 8081="$ECHO_PORT" >"$STATE/envoy.yaml"

"$BIN/allot-echo" -addr "127.0.0.1:$ECHO_PORT" >"$STATE/echo.log" 2>&1 &
echo_pid=$!
"$BIN/allotd" -admin-addr "127.0.0.1:$ADMIN" -xds-addr "127.0.0.1:$XDS" -db "$STATE/allot.db" \
  -tokens envoy-configs/dev-tokens.json -mesh envoy-configs/mesh.json \
  -wasm-path "$BIN/allot.wasm" -native-path "$BIN/liballot.so" >"$STATE/allotd.log" 2>&1 &
allotd_pid=$!
"$ENVOY_BIN" -c "$STATE/envoy.yaml" --use-dynamic-base-id --disable-hot-restart \
  -l warning >"$STATE/envoy.log" 2>&1 &
envoy_pid=$!

wait_http "http://127.0.0.1:$ECHO_PORT/" "demo upstream" "$echo_pid"
wait_http "http://127.0.0.1:$ADMIN/readyz" "allotd" "$allotd_pid"
wait_http "http://127.0.0.1:$ENVOY_ADMIN/ready" "envoy" "$envoy_pid"

create_examples "http://127.0.0.1:$ADMIN/v1/experiments" "$STATE/allot.db"

for _ in $(seq 1 100); do
  if curl -fsS -H 'x-user-id: alice' "http://127.0.0.1:$LISTENER/" | grep -q 'x-experiment-checkout-button'; then break; fi
  sleep 0.1
done

cat <<MSG

Allot is running ($FILTER artifact: $MODULE, bootstrap $BOOTSTRAP):
  Envoy listener  127.0.0.1:$LISTENER   (admin 127.0.0.1:$ENVOY_ADMIN)
  allotd          admin API 127.0.0.1:$ADMIN, xDS 127.0.0.1:$XDS, store $STATE/allot.db
  web console     http://127.0.0.1:$ADMIN/ui/
                  sign in with $TOKEN (admin),
                  dev-growth-token-change-me (owner of growth) or dev-reader-token-change-me (reader)
  demo upstream   127.0.0.1:$ECHO_PORT    (echoes the request headers it receives)

See the assignments the service receives:
  curl -s -H 'x-user-id: alice' 127.0.0.1:$LISTENER/
  curl -s -H 'x-user-id: bob'   127.0.0.1:$LISTENER/

A forged assignment header never reaches the service:
  curl -s -H 'x-user-id: alice' -H 'x-experiment-checkout-button: forged' 127.0.0.1:$LISTENER/

Ramp checkout-button to 100% green (visible within a second; apply updates
with the revision it just read, so a concurrent change is never overwritten):
  sed 's/0.5, 0.5/0, 1/' examples/checkout-button.json > $STATE/ramp.json
  ALLOT_SERVER=127.0.0.1:$ADMIN ALLOT_TOKEN=$TOKEN $BIN/allotctl apply -f $STATE/ramp.json

List experiments, see which proxy runs which artifact and version, or read
Envoy's view of the filter configuration:
  ALLOT_SERVER=127.0.0.1:$ADMIN ALLOT_TOKEN=$TOKEN $BIN/allotctl list
  ALLOT_SERVER=127.0.0.1:$ADMIN ALLOT_TOKEN=$TOKEN $BIN/allotctl rollout
  curl -s -H 'Authorization: Bearer $TOKEN' 127.0.0.1:$ADMIN/v1/experiments
  curl -s 127.0.0.1:$ENVOY_ADMIN/config_dump | grep -A3 '"experiments"'

Logs are in $STATE/. Press Ctrl-C to stop.
MSG
wait -n || true
echo "a component exited; see $STATE/*.log" >&2
