#!/usr/bin/env bash
# Stripe's official mock server (stripe-mock, a Go program) for the Stripe adapter's contract tests.
#
#   deploy/stripe-mock/stripe-mock.sh install          build the pinned version into .local/stripe-mock/
#   deploy/stripe-mock/stripe-mock.sh path             print the binary's path (installs it if missing)
#   deploy/stripe-mock/stripe-mock.sh start [PORT]     run it in the background (default port 12111)
#   deploy/stripe-mock/stripe-mock.sh stop|status
#
# The contract tests (libs/tests/integration/test_stripe_contract.py) start their own copy on a free
# port through `path`; `start` is for trying the adapter by hand. The binary is built from source
# through the Go module proxy (`go install module@version`) and cached: a second install is a no-op.
# stripe-mock is stateless: it validates every request against Stripe's published OpenAPI and
# answers with fixture objects; it proves shapes, never behaviour.
set -euo pipefail

STRIPE_MOCK_VERSION="${STRIPE_MOCK_VERSION:-v0.203.0}"
SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_DIR="$(cd "$SCRIPT_DIR/../.." && pwd)"
RUN_DIR="${STRIPE_MOCK_DIR:-$REPO_DIR/.local/stripe-mock}"
BIN_DIR="$RUN_DIR/$STRIPE_MOCK_VERSION/bin"
BIN="$BIN_DIR/stripe-mock"
GO="${GO:-$(command -v go || echo /usr/local/go/bin/go)}"

log() { printf 'stripe-mock.sh: %s\n' "$*" >&2; }
die() { printf 'stripe-mock.sh: error: %s\n' "$*" >&2; exit 1; }

install() {
  if [[ -x "$BIN" ]]; then return 0; fi
  [[ -x "$GO" ]] || die "no Go toolchain (looked for 'go' on PATH and /usr/local/go/bin/go)"
  mkdir -p "$BIN_DIR"
  log "building github.com/stripe/stripe-mock@$STRIPE_MOCK_VERSION into $BIN_DIR"
  GOBIN="$BIN_DIR" GOFLAGS="${GOFLAGS:-} -mod=mod" GOPATH="${GOPATH:-$RUN_DIR/gopath}" \
    "$GO" install "github.com/stripe/stripe-mock@$STRIPE_MOCK_VERSION"
  [[ -x "$BIN" ]] || die "go install finished without $BIN"
}

pid_of() {
  [[ -f "$RUN_DIR/stripe-mock.pid" ]] || return 1
  local pid; pid="$(cat "$RUN_DIR/stripe-mock.pid")"
  kill -0 "$pid" 2>/dev/null || return 1
  echo "$pid"
}

start() {
  local port="${1:-12111}"
  install
  if pid_of >/dev/null; then log "already running (pid $(pid_of))"; return 0; fi
  "$BIN" -http-addr "127.0.0.1:$port" >"$RUN_DIR/stripe-mock.log" 2>&1 &
  echo $! >"$RUN_DIR/stripe-mock.pid"
  log "started on http://127.0.0.1:$port (pid $!, log $RUN_DIR/stripe-mock.log)"
}

stop() {
  local pid
  if pid="$(pid_of)"; then kill "$pid"; log "stopped (pid $pid)"; else log "not running"; fi
  rm -f "$RUN_DIR/stripe-mock.pid"
}

case "${1:-}" in
  install) install ;;
  path) install; echo "$BIN" ;;
  start) start "${2:-}" ;;
  stop) stop ;;
  status) if pid="$(pid_of)"; then echo "running (pid $pid)"; else echo "stopped"; exit 1; fi ;;
  *) die "usage: $0 install|path|start [PORT]|stop|status" ;;
esac
