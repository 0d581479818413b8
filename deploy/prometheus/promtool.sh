#!/usr/bin/env bash
# promtool, for `make check-alerts` (promtool check rules / test rules on deploy/prometheus).
#   promtool.sh install   find promtool, or install Debian's `prometheus` package (which ships it)
# Same shape as deploy/postgres/pg.sh install: found -> say where; missing -> apt-get as root, else
# say what to run; the result is judged by the binary, not by apt's exit code.
set -euo pipefail

log() { echo "promtool.sh: $*" >&2; }
die() { log "$*"; exit 1; }
is_root() { [[ "$(id -u)" == 0 ]]; }

cmd_install() {
  if command -v promtool >/dev/null 2>&1; then
    log "$(promtool --version 2>&1 | head -n 1): $(command -v promtool)"
    return 0
  fi
  is_root || die "promtool not found.
  Install it as root:  apt-get install -y prometheus   (Debian/Ubuntu; it ships promtool)"
  command -v apt-get >/dev/null 2>&1 || die "promtool not found and apt-get is unavailable; install Prometheus' promtool"
  export DEBIAN_FRONTEND=noninteractive
  log "apt-get update"
  apt-get update -q >&2 || log "warning: apt-get update failed; trying the install anyway"
  log "apt-get install -y prometheus (non-interactive)"
  # The package may try to start a system Prometheus; without an init system its postinst can fail
  # although promtool is installed: judge by the binary.
  apt-get install -y -q --no-install-recommends prometheus >&2 || log "warning: apt-get reported an error"
  command -v promtool >/dev/null 2>&1 || die "apt-get install prometheus did not provide promtool"
  log "installed $(promtool --version 2>&1 | head -n 1)"
}

case "${1:-}" in
  install) cmd_install ;;
  *) echo "usage: promtool.sh install" >&2; exit 2 ;;
esac
