#!/usr/bin/env bash
# Runs Allot replicated on loopback (what `make run-ha` does): a 3-member
# etcd cluster, 3 allotd replicas on it, the demo upstream, and two Envoys
# (Wasm filter) whose xDS cluster is envoy-configs/xds-replicas.yaml, Envoy 1
# preferring replica 1 and Envoy 2 replica 2. Ctrl-C stops everything.
set -euo pipefail
cd "$(dirname "$0")/.."

ENVOY_BIN=${ENVOY_BIN:-.venv/bin/envoy}
TOKEN=dev-admin-token-change-me
STATE=tmp/run-ha
mkdir -p "$STATE"

source scripts/lib.sh
require_free_ports 2379 2380 22379 22380 32379 32380 8080 8082 8084 18000 18001 18002 10000 10001 9901 9902 8081

bin/allot-echo -addr 127.0.0.1:8081 >"$STATE/echo.log" 2>&1 & pids+=($!)

# etcd: three members on loopback, data in $STATE/etcd-N.
cluster=m1=http://127.0.0.1:2380,m2=http://127.0.0.1:22380,m3=http://127.0.0.1:32380
state=new
[ -d "$STATE/etcd-1/member" ] && state=existing
for i in 1 2 3; do
  c=$((i == 1 ? 2379 : i == 2 ? 22379 : 32379)); p=$((c + 1))
  bin/etcd --name "m$i" --data-dir "$STATE/etcd-$i" \
    --listen-client-urls "http://127.0.0.1:$c" --advertise-client-urls "http://127.0.0.1:$c" \
    --listen-peer-urls "http://127.0.0.1:$p" --initial-advertise-peer-urls "http://127.0.0.1:$p" \
    --initial-cluster "$cluster" --initial-cluster-state "$state" --initial-cluster-token allot-run-ha \
    --auto-compaction-mode periodic --auto-compaction-retention 1h --log-level warn \
    >"$STATE/etcd-$i.log" 2>&1 & pids+=($!)
done
for c in 2379 22379 32379; do wait_http "http://127.0.0.1:$c/health" "etcd member"; done

STORE=etcd://127.0.0.1:2379,127.0.0.1:22379,127.0.0.1:32379
for i in 1 2 3; do
  admin=$((8078 + 2 * i)); xds=$((17999 + i))
  bin/allotd -store "$STORE" -replica-id "r$i" -admin-addr "127.0.0.1:$admin" -xds-addr "127.0.0.1:$xds" \
    -tokens envoy-configs/dev-tokens.json -mesh envoy-configs/mesh.json -wasm-path bin/allot.wasm \
    -native-path bin/liballot.so >"$STATE/allotd-$i.log" 2>&1 & pids+=($!)
done
for admin in 8080 8082 8084; do wait_http "http://127.0.0.1:$admin/readyz" "allotd"; done

# Envoy N: sidecar.yaml with the replicas' xDS cluster, replica N preferred.
render() { # envoy-number listener admin preferred-xds other-xds other-xds
  {
    sed '/^  - name: allot_xds$/,$d' envoy-configs/sidecar.yaml |
      sed "s/port_value: 10000/port_value: $2/; s/port_value: 9901/port_value: $3/"
    sed -n '/^  - name: allot_xds$/,$p' envoy-configs/xds-replicas.yaml |
      sed "s/port_value: 18000/port_value: P0/; s/port_value: 18001/port_value: P1/; s/port_value: 18002/port_value: P2/" |
      sed "s/port_value: P0/port_value: $4/; s/port_value: P1/port_value: $5/; s/port_value: P2/port_value: $6/"
  } >"$STATE/envoy-$1.yaml"
}
render 1 10000 9901 18000 18001 18002
render 2 10001 9902 18001 18000 18002
for i in 1 2; do
  "$ENVOY_BIN" -c "$STATE/envoy-$i.yaml" --service-node "demo-$i" --service-cluster demo \
    --use-dynamic-base-id --disable-hot-restart -l warning >"$STATE/envoy-$i.log" 2>&1 & pids+=($!)
done
wait_http http://127.0.0.1:9901/ready "envoy 1"
wait_http http://127.0.0.1:9902/ready "envoy 2"

create_examples "http://127.0.0.1:8080/v1/experiments?wait=10s" "etcd"

cat <<MSG

Allot is running replicated:
  etcd            127.0.0.1:2379, :22379, :32379 (data in $STATE/etcd-*)
  allotd r1/r2/r3 admin 127.0.0.1:8080 / :8082 / :8084, xDS :18000 / :18001 / :18002
  Envoy 1         127.0.0.1:10000 (admin :9901), prefers r1
  Envoy 2         127.0.0.1:10001 (admin :9902), prefers r2
  demo upstream   127.0.0.1:8081

Every proxy of the mesh, seen through any replica (note the REPLICA column):
  ALLOT_SERVER=127.0.0.1:8084 ALLOT_TOKEN=$TOKEN bin/allotctl rollout

A write through replica 1 that returns once both Envoys (on r1 and r2) run it:
  sed 's/0.5, 0.5/0, 1/' examples/checkout-button.json > $STATE/ramp.json
  ALLOT_SERVER=127.0.0.1:8080 ALLOT_TOKEN=$TOKEN bin/allotctl apply -f $STATE/ramp.json --wait 10s

Both Envoys serve it right away:
  curl -s -H 'x-user-id: alice' 127.0.0.1:10000/ | grep -i x-experiment-checkout
  curl -s -H 'x-user-id: alice' 127.0.0.1:10001/ | grep -i x-experiment-checkout

Kill replica 1 and watch Envoy 1 move to another replica (REPLICA column):
  kill -9 \$(pgrep -f 'replica-id r1')
  ALLOT_SERVER=127.0.0.1:8082 ALLOT_TOKEN=$TOKEN bin/allotctl rollout

Logs are in $STATE/. Press Ctrl-C to stop.
MSG
wait -n "${pids[@]}" || true
echo "a component exited; see $STATE/*.log" >&2
