#!/usr/bin/env bash
# Runs the whole Allot system locally (what `make run` does): the demo
# upstream, allotd on its embedded bbolt store, Envoy with the sidecar
# bootstrap, and two example experiments. Ctrl-C stops everything.
# FILTER=wasm (default) runs the Wasm module with envoy-configs/sidecar.yaml;
# FILTER=native runs the native module with envoy-configs/sidecar-native.yaml.
set -euo pipefail
cd "$(dirname "$0")/.."

ENVOY_BIN=${ENVOY_BIN:-.venv/bin/envoy}
FILTER=${FILTER:-wasm}
case $FILTER in
  wasm) BOOTSTRAP=envoy-configs/sidecar.yaml; MODULE=bin/allot.wasm ;;
  native) BOOTSTRAP=envoy-configs/sidecar-native.yaml; MODULE=bin/liballot.so ;;
  *) echo "FILTER=$FILTER: want wasm (bin/allot.wasm) or native (bin/liballot.so)" >&2; exit 1 ;;
esac
if [ ! -f "$MODULE" ]; then
  echo "$MODULE is missing: build it with make $([ "$FILTER" = native ] && echo build-native || echo build-filter)" >&2
  exit 1
fi
TOKEN=dev-admin-token-change-me
STATE=tmp/run
mkdir -p "$STATE"

source scripts/lib.sh
require_free_ports 10000 9901 8080 18000 8081

bin/allot-echo -addr 127.0.0.1:8081 >"$STATE/echo.log" 2>&1 & pids+=($!)
bin/allotd -admin-addr 127.0.0.1:8080 -xds-addr 127.0.0.1:18000 -db "$STATE/allot.db" \
  -tokens envoy-configs/dev-tokens.json -mesh envoy-configs/mesh.json -wasm-path bin/allot.wasm -native-path bin/liballot.so >"$STATE/allotd.log" 2>&1 & pids+=($!)
"$ENVOY_BIN" -c "$BOOTSTRAP" --use-dynamic-base-id --disable-hot-restart \
  -l warning >"$STATE/envoy.log" 2>&1 & pids+=($!)

wait_http http://127.0.0.1:8081/ "demo upstream"
wait_http http://127.0.0.1:8080/readyz "allotd"
wait_http http://127.0.0.1:9901/ready "envoy"

create_examples "http://127.0.0.1:8080/v1/experiments" "$STATE/allot.db"

for _ in $(seq 1 100); do
  if curl -fsS -H 'x-user-id: alice' http://127.0.0.1:10000/ | grep -q 'x-experiment-checkout-button'; then break; fi
  sleep 0.1
done

cat <<MSG

Allot is running ($FILTER artifact: $MODULE, bootstrap $BOOTSTRAP):
  Envoy listener  127.0.0.1:10000   (admin 127.0.0.1:9901)
  allotd          admin API 127.0.0.1:8080, xDS 127.0.0.1:18000, store $STATE/allot.db
  web console     http://127.0.0.1:8080/ui/
                  sign in with $TOKEN (admin),
                  dev-growth-token-change-me (owner of growth) or dev-reader-token-change-me (reader)
  demo upstream   127.0.0.1:8081    (echoes the request headers it receives)

See the assignments the service receives:
  curl -s -H 'x-user-id: alice' 127.0.0.1:10000/
  curl -s -H 'x-user-id: bob'   127.0.0.1:10000/

A forged assignment header never reaches the service:
  curl -s -H 'x-user-id: alice' -H 'x-experiment-checkout-button: forged' 127.0.0.1:10000/

Ramp checkout-button to 100% green (visible within a second; apply updates
with the revision it just read, so a concurrent change is never overwritten):
  sed 's/0.5, 0.5/0, 1/' examples/checkout-button.json > $STATE/ramp.json
  ALLOT_SERVER=127.0.0.1:8080 ALLOT_TOKEN=$TOKEN bin/allotctl apply -f $STATE/ramp.json

List experiments, see which proxy runs which artifact and version, or read
Envoy's view of the filter configuration:
  ALLOT_SERVER=127.0.0.1:8080 ALLOT_TOKEN=$TOKEN bin/allotctl list
  ALLOT_SERVER=127.0.0.1:8080 ALLOT_TOKEN=$TOKEN bin/allotctl rollout
  curl -s -H 'Authorization: Bearer $TOKEN' 127.0.0.1:8080/v1/experiments
  curl -s 127.0.0.1:9901/config_dump | grep -A3 '"experiments"'

Logs are in $STATE/. Press Ctrl-C to stop.
MSG
wait -n "${pids[@]}" || true
echo "a component exited; see $STATE/*.log" >&2
