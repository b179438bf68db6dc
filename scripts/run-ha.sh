#!/usr/bin/env bash
# Runs Allot replicated on loopback (what `make run-ha` does): a 3-member
# etcd cluster, 3 allotd replicas on it, the demo upstream, and two Envoys
# (Wasm filter) whose xDS cluster is envoy-configs/xds-replicas.yaml, Envoy 1
# preferring replica 1 and Envoy 2 replica 2. It then prints commands to try
# (e2e/demo_test.go runs each), among them killing a replica and an etcd
# member: the demo keeps running when any of its processes dies, says so,
# and restarts what is down on SIGUSR1. Ctrl-C (or SIGTERM) stops everything.
# The environment can move the ports (ETCD_CLIENT_PORTS, ETCD_PEER_PORTS,
# ALLOTD_ADMIN_PORTS, ALLOTD_XDS_PORTS, ENVOY_PORTS, ENVOY_ADMIN_PORTS,
# ECHO_PORT), the binaries (BIN, default bin) and the state (STATE_DIR,
# default tmp/run-ha).
set -euo pipefail
cd "$(dirname "$0")/.."

ENVOY_BIN=${ENVOY_BIN:-.venv/bin/envoy}
BIN=${BIN:-bin}
TOKEN=dev-admin-token-change-me
STATE=${STATE_DIR:-tmp/run-ha}
mkdir -p "$STATE"

source scripts/lib.sh
ports ETCD_CLIENT_PORTS 3 "2379 22379 32379"
ports ETCD_PEER_PORTS 3 "2380 22380 32380"
ports ALLOTD_ADMIN_PORTS 3 "8080 8082 8084"
ports ALLOTD_XDS_PORTS 3 "18000 18001 18002"
ports ENVOY_PORTS 2 "10000 10001"
ports ENVOY_ADMIN_PORTS 2 "9901 9902"
ports ECHO_PORT 1 8081
require_free_ports "${ETCD_CLIENT_PORTS[@]}" "${ETCD_PEER_PORTS[@]}" "${ALLOTD_ADMIN_PORTS[@]}" \
  "${ALLOTD_XDS_PORTS[@]}" "${ENVOY_PORTS[@]}" "${ENVOY_ADMIN_PORTS[@]}" "$ECHO_PORT"

# etcd keeps its members' addresses in its data: a cluster made on other
# ports cannot start on these.
layout="${ETCD_CLIENT_PORTS[*]} ${ETCD_PEER_PORTS[*]}"
if [ -d "$STATE/etcd-1/member" ] && [ -f "$STATE/etcd.ports" ] && [ "$(cat "$STATE/etcd.ports")" != "$layout" ]; then
  echo "$STATE holds an etcd cluster made on other ports ($(cat "$STATE/etcd.ports"));" \
    "remove $STATE or set STATE_DIR to another directory" >&2
  exit 1
fi
echo "$layout" >"$STATE/etcd.ports"
rm -f "$STATE"/*.pid

# The components, by name: what starts each, and the pid it runs as ("" once
# it exited). start NAME launches one in the background, logging to
# $STATE/NAME.log and writing its pid to $STATE/NAME.pid.
names=()
declare -A starter pid_of
component() { names+=("$1"); starter[$1]=$2; pid_of[$1]=; }
start() {
  ${starter[$1]} >>"$STATE/$1.log" 2>&1 &
  pid_of[$1]=$!
  echo "$!" >"$STATE/$1.pid"
}

cluster=
for i in 1 2 3; do cluster+="${cluster:+,}m$i=http://127.0.0.1:${ETCD_PEER_PORTS[i - 1]}"; done
etcd() { # member
  local c=${ETCD_CLIENT_PORTS[$1 - 1]} p=${ETCD_PEER_PORTS[$1 - 1]} state=new
  [ -d "$STATE/etcd-$1/member" ] && state=existing
  exec "$BIN/etcd" --name "m$1" --data-dir "$STATE/etcd-$1" \
    --listen-client-urls "http://127.0.0.1:$c" --advertise-client-urls "http://127.0.0.1:$c" \
    --listen-peer-urls "http://127.0.0.1:$p" --initial-advertise-peer-urls "http://127.0.0.1:$p" \
    --initial-cluster "$cluster" --initial-cluster-state "$state" --initial-cluster-token allot-run-ha \
    --auto-compaction-mode periodic --auto-compaction-retention 1h --log-level warn
}
STORE=etcd://$(IFS=,; echo "${ETCD_CLIENT_PORTS[*]/#/127.0.0.1:}")
allotd() { # replica
  exec "$BIN/allotd" -store "$STORE" -replica-id "r$1" \
    -admin-addr "127.0.0.1:${ALLOTD_ADMIN_PORTS[$1 - 1]}" -xds-addr "127.0.0.1:${ALLOTD_XDS_PORTS[$1 - 1]}" \
    -tokens envoy-configs/dev-tokens.json -mesh envoy-configs/mesh.json \
    -wasm-path "$BIN/allot.wasm" -native-path "$BIN/liballot.so"
}
envoy() { # number
  exec "$ENVOY_BIN" -c "$STATE/envoy-$1.yaml" --service-node "demo-$1" --service-cluster demo \
    --use-dynamic-base-id --disable-hot-restart -l warning
}
echo_upstream() { exec "$BIN/allot-echo" -addr "127.0.0.1:$ECHO_PORT"; }

# Envoy N: sidecar.yaml with the replicas' xDS cluster, replica N preferred
# (priority 0), the others next.
render() { # envoy-number preferred-replica other-replica other-replica
  local n=$1 x=("${ALLOTD_XDS_PORTS[@]}")
  {
    sed '/^  - name: allot_xds$/,$d' envoy-configs/sidecar.yaml
    sed -n '/^  - name: allot_xds$/,$p' envoy-configs/xds-replicas.yaml
  } >"$STATE/envoy-$n.yaml.in"
  render_bootstrap "$STATE/envoy-$n.yaml.in" 10000="${ENVOY_PORTS[n - 1]}" 9901="${ENVOY_ADMIN_PORTS[n - 1]}" \
    8081="$ECHO_PORT" 18000="${x[$2 - 1]}" 18001="${x[$3 - 1]}" 18002="${x[$4 - 1]}" >"$STATE/envoy-$n.yaml"
  rm "$STATE/envoy-$n.yaml.in"
}
render 1 1 2 3
render 2 2 1 3

for i in 1 2 3; do component "etcd-$i" "etcd $i"; done
component echo echo_upstream
for i in 1 2 3; do component "allotd-$i" "allotd $i"; done
for i in 1 2; do component "envoy-$i" "envoy $i"; done
for name in "${names[@]}"; do : >"$STATE/$name.log"; done

# stop_in_order (run by cleanup) stops the etcd members last, one at a
# time: a member leaving hands its leadership to a live member at once,
# while a leader whose peers are all leaving too waits 7 s for a transfer.
stop_in_order() {
  local name pid
  for name in envoy-1 envoy-2 allotd-1 allotd-2 allotd-3 echo; do
    if [ -n "${pid_of[$name]}" ]; then kill "${pid_of[$name]}" 2>/dev/null || true; fi
  done
  for name in envoy-1 envoy-2 allotd-1 allotd-2 allotd-3 echo etcd-1 etcd-2 etcd-3; do
    pid=${pid_of[$name]}
    [ -n "$pid" ] || continue
    case $name in etcd-*) kill "$pid" 2>/dev/null || true ;; esac
    wait "$pid" 2>/dev/null || true
  done
  rm -f "$STATE"/*.pid # a printed kill must not reach a process that took a pid over
}

# health NAME: the URL that answers 2xx once component NAME serves.
health() {
  local i=${1##*-}
  case $1 in
    etcd-*) echo "http://127.0.0.1:${ETCD_CLIENT_PORTS[i - 1]}/health" ;;
    allotd-*) echo "http://127.0.0.1:${ALLOTD_ADMIN_PORTS[i - 1]}/readyz" ;;
    envoy-*) echo "http://127.0.0.1:${ENVOY_ADMIN_PORTS[i - 1]}/ready" ;;
    echo) echo "http://127.0.0.1:$ECHO_PORT/" ;;
  esac
}

for name in etcd-1 etcd-2 etcd-3; do start "$name"; done
for name in etcd-1 etcd-2 etcd-3; do wait_http "$(health "$name")" "etcd member $name" "${pid_of[$name]}"; done
for name in echo allotd-1 allotd-2 allotd-3; do start "$name"; done
for name in echo allotd-1 allotd-2 allotd-3; do wait_http "$(health "$name")" "$name" "${pid_of[$name]}"; done
for name in envoy-1 envoy-2; do start "$name"; done
for name in envoy-1 envoy-2; do wait_http "$(health "$name")" "$name" "${pid_of[$name]}"; done

A1=${ALLOTD_ADMIN_PORTS[0]} A2=${ALLOTD_ADMIN_PORTS[1]} A3=${ALLOTD_ADMIN_PORTS[2]}
E1=${ENVOY_PORTS[0]} E2=${ENVOY_PORTS[1]}
create_examples "http://127.0.0.1:$A1/v1/experiments?wait=10s" "etcd"

restart=0
trap 'restart=1' USR1
echo "$$" >"$STATE/run-ha.pid"
cat <<MSG

Allot is running replicated:
  etcd m1/m2/m3   127.0.0.1:${ETCD_CLIENT_PORTS[0]} / :${ETCD_CLIENT_PORTS[1]} / :${ETCD_CLIENT_PORTS[2]} (data in $STATE/etcd-*)
  allotd r1/r2/r3 admin 127.0.0.1:$A1 / :$A2 / :$A3, xDS :${ALLOTD_XDS_PORTS[0]} / :${ALLOTD_XDS_PORTS[1]} / :${ALLOTD_XDS_PORTS[2]}
  Envoy 1         127.0.0.1:$E1 (admin :${ENVOY_ADMIN_PORTS[0]}), prefers r1
  Envoy 2         127.0.0.1:$E2 (admin :${ENVOY_ADMIN_PORTS[1]}), prefers r2
  demo upstream   127.0.0.1:$ECHO_PORT

Every proxy of the mesh, seen through any replica (REPLICA: demo-1 on r1, demo-2 on r2):
  ALLOT_SERVER=127.0.0.1:$A3 ALLOT_TOKEN=$TOKEN $BIN/allotctl rollout

A write through replica 1 that returns once both Envoys (on r1 and r2) run it:
  sed 's/0.5, 0.5/0, 1/' examples/checkout-button.json > $STATE/ramp.json
  ALLOT_SERVER=127.0.0.1:$A1 ALLOT_TOKEN=$TOKEN $BIN/allotctl apply -f $STATE/ramp.json --wait 10s

Both Envoys serve it right away:
  curl -s -H 'x-user-id: alice' 127.0.0.1:$E1/ | grep -i x-experiment-checkout
  curl -s -H 'x-user-id: alice' 127.0.0.1:$E2/ | grep -i x-experiment-checkout

Kill replica 1 (the demo goes on without it):
  kill -9 \$(cat $STATE/allotd-1.pid)

Envoy 1 keeps serving its assignment and, within seconds, moves to another
replica (REPLICA: demo-1 on r2 or r3; run rollout again until it shows):
  curl -s -H 'x-user-id: alice' 127.0.0.1:$E1/ | grep -i x-experiment-checkout
  ALLOT_SERVER=127.0.0.1:$A2 ALLOT_TOKEN=$TOKEN $BIN/allotctl rollout

Kill etcd member m1 (two of three keep the quorum):
  kill -9 \$(cat $STATE/etcd-1.pid)

Writes go on: back to 100% blue through replica 2, applied by both Envoys:
  sed 's/0.5, 0.5/1, 0/' examples/checkout-button.json > $STATE/blue.json
  ALLOT_SERVER=127.0.0.1:$A2 ALLOT_TOKEN=$TOKEN $BIN/allotctl apply -f $STATE/blue.json --wait 10s
  curl -s -H 'x-user-id: alice' 127.0.0.1:$E1/ | grep -i x-experiment-checkout

Restart whatever is down (here r1 and m1); r1 is listed again within seconds:
  kill -USR1 \$(cat $STATE/run-ha.pid)
  ALLOT_SERVER=127.0.0.1:$A3 ALLOT_TOKEN=$TOKEN $BIN/allotctl rollout

Logs are in $STATE/. Press Ctrl-C to stop.
MSG

# Supervise: report every component that exits and keep the others running;
# on SIGUSR1 start again whatever is down. A child that never exits keeps
# `wait -n` blocking (until a signal) once every component is gone.
sleep 2147483647 &
while :; do
  wait -n || true
  for name in "${names[@]}"; do
    pid=${pid_of[$name]}
    if [ -n "$pid" ] && ! kill -0 "$pid" 2>/dev/null; then
      pid_of[$name]=
      rm -f "$STATE/$name.pid"
      echo "$(date +%T) $name (pid $pid) exited; the rest keeps running (log: $STATE/$name.log; restart: kill -USR1 $$)"
    fi
  done
  if [ "$restart" = 1 ]; then
    restart=0
    for name in "${names[@]}"; do
      [ -z "${pid_of[$name]}" ] || continue
      start "$name"
      echo "$(date +%T) restarted $name (pid ${pid_of[$name]})"
    done
  fi
done
