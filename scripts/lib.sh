# Shared by run-demo.sh and run-ha.sh (sourced, after STATE is set): the
# free-port check, the background processes stopped on exit, and the wait
# for a component's HTTP endpoint.

require_free_ports() { # port...
  for port in "$@"; do
    if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
      echo "port 127.0.0.1:$port is already in use; stop what listens there first" >&2
      exit 1
    fi
  done
}

# pids are the background processes cleanup stops (append with pids+=($!)).
pids=()
cleanup() {
  trap - INT TERM EXIT
  echo; echo "stopping..."
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
}
trap cleanup INT TERM EXIT

wait_http() { # url what
  for _ in $(seq 1 300); do
    if curl -fsS -o /dev/null "$1" 2>/dev/null; then return 0; fi
    sleep 0.1
  done
  echo "$2 did not come up at $1; see $STATE/*.log" >&2
  exit 1
}
