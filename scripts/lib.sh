# Shared by run-demo.sh and run-ha.sh (sourced, after STATE and TOKEN are
# set): the ports a demo listens on, the free-port check, the background
# processes stopped on exit, the wait for a component's HTTP endpoint, the
# bootstraps rendered for the demo's ports, and the example experiments.

# ports NAME COUNT DEFAULT: reads the environment variable NAME (COUNT
# space-separated ports; DEFAULT when unset or empty) into the array NAME,
# so that every port of a demo can be moved.
ports() {
  local name=$1 count=$2 default=$3 value
  value=${!name:-$default}
  read -r -a "$name" <<<"$value"
  local -n got=$name
  if [ "${#got[@]}" -ne "$count" ]; then
    echo "$name: want $count port(s), got '$value'" >&2
    exit 1
  fi
  for port in "${got[@]}"; do
    case $port in
      '' | *[!0-9]* | 0*) echo "$name: '$port' is not a port number (1-65535)" >&2; exit 1 ;;
    esac
    if [ "${#port}" -gt 5 ] || [ "$port" -gt 65535 ]; then
      echo "$name: '$port' is not a port number (1-65535)" >&2
      exit 1
    fi
  done
}

require_free_ports() { # port...
  for port in "$@"; do
    if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
      echo "port 127.0.0.1:$port is already in use; stop what listens there first (or move the demo's ports: see envoy-configs/README.md)" >&2
      exit 1
    fi
  done
}

# cleanup stops every background process still running (SIGTERM) and
# waits for them; Ctrl-C (INT), TERM and the script's own exit run it. A
# script that defines stop_in_order stops its components with it first.
cleanup() { # exit-status
  local status=${1:-$?}
  trap - INT TERM EXIT
  local running
  running=$(jobs -pr)
  [ -n "$running" ] || exit "$status"
  echo; echo "stopping..."
  if declare -F stop_in_order >/dev/null; then stop_in_order || true; fi
  running=$(jobs -pr)
  [ -z "$running" ] || kill $running 2>/dev/null || true
  wait 2>/dev/null || true
  exit "$status"
}
trap 'cleanup 130' INT
trap 'cleanup 143' TERM
trap cleanup EXIT

wait_http() { # url what [pid: fail at once when that process is gone]
  for _ in $(seq 1 300); do
    if curl -fsS -o /dev/null "$1" 2>/dev/null; then return 0; fi
    if [ -n "${3:-}" ] && ! kill -0 "$3" 2>/dev/null; then
      echo "$2 exited while starting; see $STATE/*.log" >&2
      exit 1
    fi
    sleep 0.1
  done
  echo "$2 did not come up at $1; see $STATE/*.log" >&2
  exit 1
}

# render_bootstrap SRC OLD=NEW...: SRC with each "port_value: OLD" made
# "port_value: NEW" and the filter module's bin/ path made $BIN/. Every
# OLD goes to a placeholder first, so NEW may equal another OLD.
render_bootstrap() {
  local src=$1 first=() second=()
  shift
  for pair in "$@"; do
    first+=(-e "s/port_value: ${pair%%=*}}/port_value: @${pair%%=*}@}/")
    second+=(-e "s/port_value: @${pair%%=*}@}/port_value: ${pair#*=}}/")
  done
  sed "${first[@]}" "$src" | sed "${second[@]}" -e "s#filename: bin/#filename: $BIN/#"
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
