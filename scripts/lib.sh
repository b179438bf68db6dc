# Shared by run-demo.sh and run-ha.sh (sourced, after STATE and TOKEN are
# set): the free-port check, the background processes stopped on exit, the
# wait for a component's HTTP endpoint, and the example experiments.

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

create_examples() { # create-url where-they-are-stored
  for f in examples/checkout-button.json examples/search-ranking.json; do
    code=$(curl -sS -o "$STATE/create.out" -w '%{http_code}' -X POST "$1" \
      -H "Authorization: Bearer $TOKEN" -H 'Content-Type: application/json' --data-binary "@$f")
    case $code in
      201) echo "created $(basename "$f" .json)" ;;
      409) echo "$(basename "$f" .json) already exists in $2" ;;
      *) echo "creating $f failed with $code: $(cat "$STATE/create.out")" >&2; exit 1 ;;
    esac
  done
}
