#!/usr/bin/env bash
# Start, stop and inspect the two simulators as background processes on the local stack:
#   mt5_sim  MT5 Web API 127.0.0.1:17001, control API 127.0.0.1:17002 (database mt5_sim)
#   psp_sim  PSP API     127.0.0.1:17101, control API 127.0.0.1:17102 (database psp_sim)
#
#   deploy/sims/sims.sh start|stop|restart|status|logs [mt5_sim|psp_sim]
#
# Settings come from deploy/dev.env (overridable by the environment). Each simulator applies its
# own migrations at start and keeps its state in its own database, so a restart keeps accounts,
# deals, payment intents and queued webhooks. Logs and pid files live in .local/sims/.
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_DIR="$(cd "$SCRIPT_DIR/../.." && pwd)"
RUN_DIR="${SIMS_RUN_DIR:-$REPO_DIR/.local/sims}"
PY="${PY:-$REPO_DIR/.venv/bin/python}"
PG="$REPO_DIR/deploy/postgres/pg.sh"
START_TIMEOUT_S="${SIMS_START_TIMEOUT_S:-60}"

# deploy/dev.env supplies defaults; variables already in the environment win.
while IFS='=' read -r key value; do
  [[ -z "$key" || "$key" == \#* ]] && continue
  [[ -z "${!key:-}" ]] && export "$key=$value"
done < "$REPO_DIR/deploy/dev.env"

log() { printf 'sims.sh: %s\n' "$*"; }
die() { printf 'sims.sh: error: %s\n' "$*" >&2; exit 1; }

health_url() {
  case "$1" in
    mt5_sim) echo "http://127.0.0.1:${MT5_SIM_CONTROL_PORT}/healthz" ;;
    psp_sim) echo "http://127.0.0.1:${PSP_SIM_API_PORT}/healthz" ;;
    *) die "unknown simulator '$1'" ;;
  esac
}

# The venv's Python answers the health probe, so the stack needs no curl.
answers() {
  "$PY" -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=2)' "$(health_url "$1")" \
    >/dev/null 2>&1
}

pid_of() {
  local pidfile="$RUN_DIR/$1.pid"
  [[ -f "$pidfile" ]] || return 1
  local pid; pid="$(cat "$pidfile")"
  kill -0 "$pid" 2>/dev/null || return 1
  echo "$pid"
}

start_one() {
  local name="$1"
  mkdir -p "$RUN_DIR"
  if pid_of "$name" >/dev/null && answers "$name"; then
    log "$name already running (pid $(pid_of "$name"))"
    return 0
  fi
  local url; url="$(bash "$PG" url "$name")"
  DATABASE_URL="$url" nohup "$PY" -m "$name" >>"$RUN_DIR/$name.log" 2>&1 &
  echo $! >"$RUN_DIR/$name.pid"
  local waited=0
  until answers "$name"; do
    kill -0 "$(cat "$RUN_DIR/$name.pid")" 2>/dev/null || { tail -20 "$RUN_DIR/$name.log" >&2; die "$name exited at start"; }
    ((waited++ < START_TIMEOUT_S * 5)) || die "$name did not answer within ${START_TIMEOUT_S}s (see $RUN_DIR/$name.log)"
    sleep 0.2
  done
  log "$name ready (pid $(cat "$RUN_DIR/$name.pid")) health $(health_url "$name")"
}

stop_one() {
  local name="$1" pid
  if ! pid="$(pid_of "$name")"; then
    log "$name not running"; rm -f "$RUN_DIR/$name.pid"; return 0
  fi
  kill -TERM "$pid"
  for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  kill -0 "$pid" 2>/dev/null && kill -KILL "$pid"
  rm -f "$RUN_DIR/$name.pid"
  log "$name stopped"
}

status_one() {
  local name="$1"
  if pid_of "$name" >/dev/null && answers "$name"; then
    log "$name running (pid $(pid_of "$name")), $(health_url "$name") answers"; return 0
  fi
  log "$name stopped"; return 3
}

main() {
  local cmd="${1:-}"; shift || true
  local names=("${@:-mt5_sim psp_sim}")
  read -r -a names <<<"${names[*]}"
  case "$cmd" in
    start) for n in "${names[@]}"; do start_one "$n"; done ;;
    stop) for n in "${names[@]}"; do stop_one "$n"; done ;;
    restart) for n in "${names[@]}"; do stop_one "$n"; start_one "$n"; done ;;
    status) local rc=0; for n in "${names[@]}"; do status_one "$n" || rc=3; done; return $rc ;;
    logs) for n in "${names[@]}"; do tail -50 "$RUN_DIR/$n.log"; done ;;
    *) echo "usage: sims.sh start|stop|restart|status|logs [mt5_sim|psp_sim]" >&2; exit 2 ;;
  esac
}

main "$@"
