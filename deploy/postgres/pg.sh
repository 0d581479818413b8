#!/usr/bin/env bash
# deploy/postgres/pg.sh: a project-local PostgreSQL cluster for dev and CI, without Docker.
#
#   pg.sh install | start | stop | status | psql [args] | url <name>|admin
#
# See deploy/postgres/README.md. Informational messages go to stderr; `status` prints its one-line
# summary and `url` its URL on stdout. Passwords are never printed except inside `url` output.
set -euo pipefail

SCRIPT_DIR="$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd -P)"
REPO_ROOT="$(cd -- "$SCRIPT_DIR/../.." && pwd -P)"

PGPORT="${PGPORT:-55432}"

# The default home is <repo>/.local/postgres. As root the server runs as an unprivileged user, who must be
# able to traverse every directory above it; a checkout inside a private directory (mktemp -d is 0700)
# would make that impossible. Then, and only when PG_HOME_DIR is not set, the home moves to a fixed place
# under /var/tmp derived from the repository path, so that every subcommand finds the same cluster.
default_home() {
  local dir="$REPO_ROOT"
  if ((EUID == 0)); then
    while [[ "$dir" != "/" ]]; do
      [[ "$(stat -c %A "$dir")" == *[xt] ]] || {  # others may search it (t: sticky + x)
        printf '/var/tmp/deposits-pg-%s\n' "$(printf '%s' "$REPO_ROOT" | sha256sum | cut -c1-12)"
        return
      }
      dir="$(dirname -- "$dir")"
    done
  fi
  printf '%s\n' "$REPO_ROOT/.local/postgres"
}
PG_HOME_DIR="${PG_HOME_DIR:-$(default_home)}"
PG_SUPERUSER_PASSWORD="${PG_SUPERUSER_PASSWORD:-postgres}"
# Less common knobs (documented in the README):
PG_OS_USER="${PG_OS_USER:-postgres}"                          # server user when run as root
PG_DATABASES_FILE="${PG_DATABASES_FILE:-$SCRIPT_DIR/databases.txt}"
PG_BINDIR="${PG_BINDIR:-}"                                    # force a server bindir
PG_START_TIMEOUT="${PG_START_TIMEOUT:-60}"
PG_STOP_MODE="${PG_STOP_MODE:-fast}"                          # immediate: a crash, as drills want it

# libpq reads these from the environment; never let a caller's settings redirect our own connections.
unset PGHOST PGHOSTADDR PGUSER PGDATABASE PGSERVICE PGOPTIONS PGDATA PGPASSWORD PGSSLMODE PGTARGETSESSIONATTRS

case "$PG_HOME_DIR" in /*) ;; *) PG_HOME_DIR="$PWD/$PG_HOME_DIR" ;; esac
PG_HOME_DIR="${PG_HOME_DIR%/}"
DATA_DIR="$PG_HOME_DIR/data"
RUN_DIR="$PG_HOME_DIR/run"
LOG_FILE="$PG_HOME_DIR/postgres.log"
LOCK_FILE="$PG_HOME_DIR/.pg.sh.lock"
CONF_NAME="postgresql.project.conf"     # our settings; included from postgresql.conf
HOST="127.0.0.1"
SUPERUSER="postgres"
CLEAN_PATH="/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

BINDIR=""
APT_UPDATED=0

log() { printf 'pg.sh: %s\n' "$*" >&2; }
die() { printf 'pg.sh: error: %s\n' "$*" >&2; exit 1; }

usage() {
  cat >&2 <<'EOF'
usage: deploy/postgres/pg.sh <command>
  install       find PostgreSQL server binaries; apt-get install postgresql when missing (root only)
  start         install if needed, initdb once, start, ensure per-service databases and roles
  stop          stop the cluster (fast shutdown, or PG_STOP_MODE=immediate); no-op when not running
  status        exit 0 when accepting connections on 127.0.0.1:PGPORT, 3 otherwise
  psql [args]   psql as the superuser over 127.0.0.1:PGPORT
  url <name>    postgresql:// URL for service <name> (from databases.txt), or `url admin`
env: PGPORT (55432), PG_HOME_DIR (<repo>/.local/postgres, or /var/tmp/deposits-pg-<hash> when root cannot hand <repo> to the server user), PG_SUPERUSER_PASSWORD (postgres),
     PG_PASSWORD_<NAME_UPPER> (<name>_dev), PG_OS_USER (postgres), PG_BINDIR, PG_START_TIMEOUT (60), PG_STOP_MODE (fast)
EOF
}

is_root() { [[ "$(id -u)" -eq 0 ]]; }

ms_now() { local t="${EPOCHREALTIME//[.,]/}"; echo $((10#$t / 1000)); }
fmt_ms() { printf '%d.%03ds' $(($1 / 1000)) $(($1 % 1000)); }

validate_port() {
  if ! [[ "$PGPORT" =~ ^[1-9][0-9]{0,4}$ ]] || ((PGPORT > 65535)); then
    die "PGPORT must be a TCP port number, got '$PGPORT'"
  fi
}

# ---------------------------------------------------------------------------------------------------
# Binaries

bindir_ok() {
  local d="$1" b
  for b in postgres initdb pg_ctl psql pg_isready; do
    [[ -x "$d/$b" ]] || return 1
  done
}

# Sets BINDIR or returns 1. Prefers the major version an existing data dir was initialized with.
find_bindir() {
  local d want=""
  if [[ -n "$PG_BINDIR" ]]; then
    bindir_ok "$PG_BINDIR" || die "PG_BINDIR=$PG_BINDIR lacks one of postgres initdb pg_ctl psql pg_isready"
    BINDIR="$PG_BINDIR"
    return 0
  fi
  [[ -r "$DATA_DIR/PG_VERSION" ]] && want="$(<"$DATA_DIR/PG_VERSION")"
  if [[ -n "$want" ]] && bindir_ok "/usr/lib/postgresql/$want/bin"; then
    BINDIR="/usr/lib/postgresql/$want/bin"
    return 0
  fi
  while IFS= read -r d; do
    if bindir_ok "$d"; then BINDIR="$d"; return 0; fi
  done < <(compgen -G '/usr/lib/postgresql/*/bin' | sort -V -r || true)
  if command -v pg_config >/dev/null 2>&1; then
    d="$(pg_config --bindir 2>/dev/null || true)"
    if [[ -n "$d" ]] && bindir_ok "$d"; then BINDIR="$d"; return 0; fi
  fi
  return 1
}

server_version() { "$BINDIR/postgres" --version | awk '{print $3}'; }   # "postgres (PostgreSQL) 15.18 (Debian ...)"

cmd_install() {
  if find_bindir; then
    log "PostgreSQL $(server_version) server binaries: $BINDIR"
    return 0
  fi
  if ! is_root; then
    die "PostgreSQL server binaries not found (looked in /usr/lib/postgresql/*/bin and pg_config --bindir).
  Install them as root:  apt-get install -y postgresql   (Debian/Ubuntu; any version >= 13 works)
  or point PG_BINDIR at a directory holding postgres, initdb, pg_ctl, psql and pg_isready."
  fi
  command -v apt-get >/dev/null 2>&1 ||
    die "PostgreSQL server binaries not found and apt-get is unavailable; install PostgreSQL server packages or set PG_BINDIR"
  export DEBIAN_FRONTEND=noninteractive
  local t0 rc=0
  t0="$(ms_now)"
  if ((APT_UPDATED == 0)); then
    log "apt-get update"
    apt-get update -q >&2 || log "warning: apt-get update failed; trying the install anyway"
    APT_UPDATED=1
  fi
  log "apt-get install -y postgresql (non-interactive)"
  # The Debian package may create and try to start a system cluster ("main", port 5432, socket in
  # /var/run/postgresql). We do not use it and it does not clash with ours (own port, socket dir, data).
  # If its postinst fails to start it (no init system in a container), apt may report an error even
  # though the binaries are installed: judge by the binaries, not by apt's exit code.
  apt-get install -y -q --no-install-recommends \
    -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold postgresql >&2 || rc=$?
  if find_bindir; then
    ((rc == 0)) || log "warning: apt-get install exited $rc, but the server binaries are present; continuing"
    log "installed PostgreSQL $(server_version) in $(fmt_ms $(($(ms_now) - t0))): $BINDIR"
    return 0
  fi
  die "apt-get install postgresql exited $rc and no server binaries were found afterwards"
}

# ---------------------------------------------------------------------------------------------------
# Running things as the server user

# Runs a command as the server's OS user (the postgres system user when we are root), from "/" so the
# user never starts in a directory it cannot read, with a clean environment plus any NAME=VALUE given
# before "--".
as_server() {
  local -a envs=(PATH="$CLEAN_PATH" LANG=C.UTF-8)
  while [[ $# -gt 0 && "$1" != "--" ]]; do envs+=("$1"); shift; done
  [[ "${1:-}" == "--" ]] && shift
  # 9>&-: the start/stop lock (fd 9) must not be inherited by the postmaster, or it would hold it forever.
  if is_root; then
    (cd / && runuser -u "$PG_OS_USER" -- env -i "${envs[@]}" "$@" 9>&-)
  else
    (cd / && env -i HOME="${HOME:-/}" "${envs[@]}" "$@" 9>&-)
  fi
}

ensure_os_user() {
  is_root || return 0
  id -u "$PG_OS_USER" >/dev/null 2>&1 && return 0
  command -v useradd >/dev/null 2>&1 || die "user '$PG_OS_USER' does not exist and useradd is unavailable"
  log "creating system user '$PG_OS_USER'"
  if getent group "$PG_OS_USER" >/dev/null 2>&1; then
    useradd --system --gid "$PG_OS_USER" --no-create-home --home-dir /nonexistent \
      --shell /usr/sbin/nologin --comment "PostgreSQL server (deploy/postgres/pg.sh)" "$PG_OS_USER"
  else
    useradd --system --user-group --no-create-home --home-dir /nonexistent \
      --shell /usr/sbin/nologin --comment "PostgreSQL server (deploy/postgres/pg.sh)" "$PG_OS_USER"
  fi
}

# Creates PG_HOME_DIR (and the missing directories above it, mode 0755), checks that the server user can
# traverse every ancestor, and gives the tree to the server user.
prepare_home() {
  local d cur="" part
  local -a missing=() ancestors=()
  IFS='/' read -r -a parts <<<"${PG_HOME_DIR#/}"
  for part in "${parts[@]}"; do
    [[ -z "$part" ]] && continue
    cur="$cur/$part"
    if [[ ! -d "$cur" ]]; then missing+=("$cur"); elif [[ "$cur" != "$PG_HOME_DIR" ]]; then ancestors+=("$cur"); fi
  done
  if is_root; then
    # Every existing ancestor must be searchable (x) by the server user, checked top-down so the message names
    # the directory that actually blocks. We never chmod directories we did not create.
    local blocked
    # shellcheck disable=SC2016  # the script is for sh, expanded there
    blocked="$(as_server -- sh -c 'for d in / "$@"; do [ -x "$d" ] || { printf "%s\n" "$d"; exit 0; }; done' sh "${ancestors[@]}")" || true
    if [[ -n "$blocked" ]]; then
      die "user '$PG_OS_USER' cannot traverse $blocked ($(stat -c '%A %U:%G' "$blocked")), an ancestor of PG_HOME_DIR=$PG_HOME_DIR.
  The server runs as '$PG_OS_USER' because PostgreSQL refuses to run as root. Either grant search permission
  yourself (e.g. chmod o+x $blocked) or set PG_HOME_DIR to a path under a traversable directory (e.g. /var/tmp/pg)."
    fi
  fi
  for d in "${missing[@]}"; do
    mkdir -m 0755 "$d" 2>/dev/null || [[ -d "$d" ]] || die "cannot create directory $d"
  done
  take_lock   # serializes concurrent start/stop from here on (held until this script exits)
  if ! is_root && [[ ! -O "$PG_HOME_DIR" ]]; then
    die "$PG_HOME_DIR is owned by $(stat -c %U "$PG_HOME_DIR"), not by you ($(id -un)).
  It was probably set up by root (server running as '$PG_OS_USER'): run pg.sh as root, or use another PG_HOME_DIR."
  fi
  chmod 0750 "$PG_HOME_DIR"
  if is_root; then
    # Hand over anything not yet owned by the server user (first run, or files created by root).
    find "$PG_HOME_DIR" -xdev ! -user "$PG_OS_USER" -exec chown -h "$PG_OS_USER:$(id -gn "$PG_OS_USER")" {} +
  else
    if [[ -e "$DATA_DIR" && ! -O "$DATA_DIR" ]]; then
      die "$DATA_DIR is owned by $(stat -c %U "$DATA_DIR"), not by you ($(id -un)); run pg.sh as root or use another PG_HOME_DIR"
    fi
  fi
  mkdir -p "$RUN_DIR"
  chmod 0700 "$RUN_DIR"
  if is_root; then chown "$PG_OS_USER:$(id -gn "$PG_OS_USER")" "$RUN_DIR"; fi
  local sock="$RUN_DIR/.s.PGSQL.$PGPORT"
  ((${#sock} <= 107)) || die "socket path $sock is longer than 107 bytes (Unix limit); use a shorter PG_HOME_DIR"
}

take_lock() {
  command -v flock >/dev/null 2>&1 || return 0
  exec 9>>"$LOCK_FILE"
  if is_root; then chown "$PG_OS_USER:$(id -gn "$PG_OS_USER")" "$LOCK_FILE"; fi
  flock -w 120 9 || die "another pg.sh holds $LOCK_FILE for more than 120s"
}

# ---------------------------------------------------------------------------------------------------
# initdb and configuration

run_initdb() {
  if [[ -d "$DATA_DIR" ]] && [[ -n "$(ls -A "$DATA_DIR" 2>/dev/null)" ]]; then
    die "$DATA_DIR is not empty but has no PG_VERSION (interrupted initdb?). Remove it to re-initialize: rm -rf $DATA_DIR"
  fi
  local locale="C.UTF-8"
  [[ "$(locale -a 2>/dev/null || true)" =~ (^|$'\n')C\.(UTF-8|utf8)($|$'\n') ]] || locale="C"
  local pwfile t0 rc=0
  pwfile="$(mktemp "$PG_HOME_DIR/.pwfile.XXXXXX")"
  # shellcheck disable=SC2064  # expand now: the trap must remove this very file
  trap "rm -f '$pwfile'" EXIT
  chmod 0600 "$pwfile"
  if is_root; then chown "$PG_OS_USER" "$pwfile"; fi
  printf '%s\n' "$PG_SUPERUSER_PASSWORD" >"$pwfile"   # printf is a builtin: the password is in no argv
  log "initdb $DATA_DIR (PostgreSQL $(server_version), UTF8, locale $locale)"
  t0="$(ms_now)"
  as_server -- "$BINDIR/initdb" --pgdata="$DATA_DIR" --username="$SUPERUSER" --pwfile="$pwfile" \
    --encoding=UTF8 --locale="$locale" --auth-local=trust --auth-host=scram-sha-256 >"$PG_HOME_DIR/initdb.log" 2>&1 || rc=$?
  rm -f "$pwfile"
  trap - EXIT
  if is_root; then chown "$PG_OS_USER:$(id -gn "$PG_OS_USER")" "$PG_HOME_DIR/initdb.log"; fi
  if ((rc != 0)); then
    tail -n 20 "$PG_HOME_DIR/initdb.log" >&2 || true
    die "initdb failed (exit $rc); full output in $PG_HOME_DIR/initdb.log"
  fi
  log "initdb done in $(fmt_ms $(($(ms_now) - t0)))"
}

sql_literal() { local s="${1//\'/\'\'}"; printf "'%s'" "$s"; }

# Writes $DATA_DIR/$CONF_NAME when its content differs; sets CONF_CHANGED=1 when it (or the include) changed.
CONF_CHANGED=0
write_config() {
  local want tmp
  want="$(cat <<EOF
# Managed by deploy/postgres/pg.sh and rewritten by every 'pg.sh start': change the script, not this file.
listen_addresses = '$HOST'
port = $PGPORT
unix_socket_directories = $(sql_literal "$RUN_DIR")
max_connections = 300
shared_buffers = '256MB'
# Durable commits: benchmarks claim durable commits, so never turn these off here.
fsync = on
synchronous_commit = on
full_page_writes = on
wal_buffers = '16MB'
max_wal_size = '2GB'
checkpoint_timeout = '15min'
password_encryption = 'scram-sha-256'
timezone = 'UTC'
log_timezone = 'UTC'
logging_collector = off
# Per-statement counts for bench-e2e (statements per deposit); needs a restart to take effect,
# a reload only warns. The bench falls back to commits only while it is absent.
shared_preload_libraries = 'pg_stat_statements'
pg_stat_statements.max = 10000
pg_stat_statements.track = 'top'
log_line_prefix = '%m [%p] %q%u@%d '
EOF
)"
  if [[ -f "$DATA_DIR/$CONF_NAME" ]] && [[ "$(<"$DATA_DIR/$CONF_NAME")" == "$want" ]]; then
    :
  else
    tmp="$(mktemp "$DATA_DIR/.$CONF_NAME.XXXXXX")"
    printf '%s\n' "$want" >"$tmp"
    chmod 0600 "$tmp"
    if is_root; then chown "$PG_OS_USER" "$tmp"; fi
    mv -f "$tmp" "$DATA_DIR/$CONF_NAME"
    CONF_CHANGED=1
  fi
  local line="include_if_exists = '$CONF_NAME'   # added by deploy/postgres/pg.sh"
  if ! grep -qF "include_if_exists = '$CONF_NAME'" "$DATA_DIR/postgresql.conf"; then
    printf '\n%s\n' "$line" >>"$DATA_DIR/postgresql.conf"   # appending keeps owner and mode
    CONF_CHANGED=1
  fi
}

# ---------------------------------------------------------------------------------------------------
# Server state

pg_running() {  # 0 when the postmaster of DATA_DIR runs
  [[ -f "$DATA_DIR/PG_VERSION" ]] || return 1
  as_server -- "$BINDIR/pg_ctl" status -D "$DATA_DIR" >/dev/null 2>&1
}

postmaster_field() {  # line N of postmaster.pid (1 pid, 4 port)
  sed -n "${1}p" "$DATA_DIR/postmaster.pid" 2>/dev/null || true
}

# psql as the superuser over our Unix socket (local auth is trust), as the server user.
admin_psql() {
  as_server -- "$BINDIR/psql" -X -q -A -t -v ON_ERROR_STOP=1 -h "$RUN_DIR" -p "$PGPORT" -U "$SUPERUSER" -d postgres "$@"
}

# Does `user` log in to `db` over TCP with `password`? (SCRAM over 127.0.0.1, what the services use)
tcp_login_ok() {
  local user="$1" db="$2" password="$3"
  PGPASSWORD="$password" PGCONNECT_TIMEOUT=5 "$BINDIR/psql" -X -q -A -t -w -h "$HOST" -p "$PGPORT" -U "$user" -d "$db" \
    -c 'select 1' >/dev/null 2>&1
}

# ---------------------------------------------------------------------------------------------------
# Services: databases and roles

SERVICES=()
load_services() {
  [[ -r "$PG_DATABASES_FILE" ]] || die "cannot read $PG_DATABASES_FILE"
  local line name seen=" "
  SERVICES=()
  while IFS= read -r line || [[ -n "$line" ]]; do
    line="${line%%#*}"
    read -r name _ <<<"$line" || true
    [[ -z "${name:-}" ]] && continue
    [[ "$name" =~ ^[a-z_][a-z0-9_]{0,62}$ ]] ||
      die "$PG_DATABASES_FILE: invalid name '$name' (lowercase letters, digits and _, starting with a letter or _)"
    case "$name" in
      postgres | template0 | template1 | admin | public | pg_*) die "$PG_DATABASES_FILE: reserved name '$name'" ;;
    esac
    [[ "$seen" == *" $name "* ]] && continue
    seen+="$name "
    SERVICES+=("$name")
  done <"$PG_DATABASES_FILE"
  ((${#SERVICES[@]} > 0)) || die "$PG_DATABASES_FILE lists no databases"
}

service_password() {
  local var="PG_PASSWORD_${1^^}"
  printf '%s' "${!var:-${1}_dev}"
}

# Statements that set passwords must not end up in the server log, even when they fail.
QUIET_SESSION="SET log_statement = 'none'; SET log_min_error_statement = 'panic'; SET log_min_duration_statement = -1;"

ensure_databases() {
  load_services
  local name list t0 sql="" created=() fixed=() repassed=() restricted=()
  t0="$(ms_now)"
  list="$(IFS=,; echo "${SERVICES[*]}")"
  local -A role_login=() db_owner=() db_public=() db_ownerconnect=()
  local r l roles dbs
  roles="$(admin_psql -F '|' -c "SELECT rolname, rolcanlogin FROM pg_roles WHERE rolname = ANY(string_to_array('$list', ','))")"
  while IFS='|' read -r r l; do
    if [[ -n "$r" ]]; then role_login[$r]="$l"; fi
  done <<<"$roles"
  local d o p c
  dbs="$(admin_psql -F '|' -c "
    SELECT d.datname, pg_get_userbyid(d.datdba),
           EXISTS (SELECT 1 FROM aclexplode(COALESCE(d.datacl, acldefault('d', d.datdba))) a WHERE a.grantee = 0),
           EXISTS (SELECT 1 FROM aclexplode(COALESCE(d.datacl, acldefault('d', d.datdba))) a
                    WHERE a.grantee = d.datdba AND a.privilege_type = 'CONNECT')
      FROM pg_database d WHERE d.datname = ANY(string_to_array('$list,postgres,template1', ','))")"
  while IFS='|' read -r d o p c; do
    [[ -z "$d" ]] && continue
    db_owner[$d]="$o"; db_public[$d]="$p"; db_ownerconnect[$d]="$c"
  done <<<"$dbs"

  # Service roles may connect to their own database only: not to the maintenance databases either
  # (the superuser keeps access; roles lack CREATEDB, so no tool needs them there).
  for name in postgres template1; do
    if [[ "${db_public[$name]:-f}" == "t" ]]; then
      sql+="REVOKE CONNECT, TEMPORARY ON DATABASE \"$name\" FROM PUBLIC;"$'\n'
      restricted+=("$name")
    fi
  done
  local -a need_pw_check=()
  for name in "${SERVICES[@]}"; do
    if [[ -z "${role_login[$name]:-}" ]]; then
      sql+="CREATE ROLE \"$name\" LOGIN PASSWORD $(sql_literal "$(service_password "$name")");"$'\n'
      created+=("role:$name")
    else
      if [[ "${role_login[$name]}" != "t" ]]; then
        sql+="ALTER ROLE \"$name\" LOGIN;"$'\n'
        fixed+=("role:$name(LOGIN)")
      fi
      need_pw_check+=("$name")
    fi
    if [[ -z "${db_owner[$name]:-}" ]]; then
      sql+="CREATE DATABASE \"$name\" OWNER \"$name\";"$'\n'
      sql+="REVOKE ALL ON DATABASE \"$name\" FROM PUBLIC;"$'\n'
      sql+="GRANT CONNECT, TEMPORARY ON DATABASE \"$name\" TO \"$name\";"$'\n'
      created+=("db:$name")
    else
      if [[ "${db_owner[$name]}" != "$name" ]]; then
        sql+="ALTER DATABASE \"$name\" OWNER TO \"$name\";"$'\n'
        fixed+=("db:$name(owner ${db_owner[$name]}->$name)")
      fi
      if [[ "${db_public[$name]}" == "t" || "${db_ownerconnect[$name]}" != "t" ]]; then
        sql+="REVOKE ALL ON DATABASE \"$name\" FROM PUBLIC;"$'\n'
        sql+="GRANT CONNECT, TEMPORARY ON DATABASE \"$name\" TO \"$name\";"$'\n'
        fixed+=("db:$name(privileges)")
      fi
    fi
  done
  if [[ -n "$sql" ]]; then
    printf '%s\n%s' "$QUIET_SESSION" "$sql" | admin_psql -f - >/dev/null ||
      die "creating databases/roles failed (see $LOG_FILE)"
  fi

  # Passwords of roles that already existed: reset only those that no longer match (env override changed).
  local -a pw_sql=()
  for name in "${need_pw_check[@]}"; do
    tcp_login_ok "$name" "$name" "$(service_password "$name")" && continue
    pw_sql+=("ALTER ROLE \"$name\" PASSWORD $(sql_literal "$(service_password "$name")");")
    repassed+=("$name")
  done
  if ! tcp_login_ok "$SUPERUSER" postgres "$PG_SUPERUSER_PASSWORD"; then
    pw_sql+=("ALTER ROLE \"$SUPERUSER\" PASSWORD $(sql_literal "$PG_SUPERUSER_PASSWORD");")
    repassed+=("$SUPERUSER")
  fi
  if ((${#pw_sql[@]} > 0)); then
    printf '%s\n' "$QUIET_SESSION" "${pw_sql[@]}" | admin_psql -f - >/dev/null || die "setting passwords failed"
    for name in "${repassed[@]}"; do
      if [[ "$name" == "$SUPERUSER" ]]; then
        tcp_login_ok "$SUPERUSER" postgres "$PG_SUPERUSER_PASSWORD" || die "superuser still cannot log in over $HOST"
      else
        tcp_login_ok "$name" "$name" "$(service_password "$name")" || die "role $name still cannot log in to database $name over $HOST"
      fi
    done
  fi

  if ((${#created[@]})); then log "created: ${created[*]}"; fi
  if ((${#restricted[@]})); then log "revoked PUBLIC CONNECT on maintenance databases: ${restricted[*]}"; fi
  if ((${#fixed[@]})); then log "fixed: ${fixed[*]}"; fi
  if ((${#repassed[@]})); then log "password reset (did not match the configured one): ${repassed[*]}"; fi
  if ((${#created[@]} + ${#fixed[@]} + ${#repassed[@]} + ${#restricted[@]} == 0)); then
    log "databases and roles up to date (${#SERVICES[@]}: ${SERVICES[*]}) [$(fmt_ms $(($(ms_now) - t0)))]"
  else
    log "databases and roles ensured (${#SERVICES[@]}) in $(fmt_ms $(($(ms_now) - t0)))"
  fi
}

# ---------------------------------------------------------------------------------------------------
# Commands

cmd_start() {
  validate_port
  cmd_install
  ensure_os_user
  prepare_home
  if [[ ! -f "$DATA_DIR/PG_VERSION" ]]; then
    run_initdb
  else
    local have want
    have="$(<"$DATA_DIR/PG_VERSION")"
    want="$(server_version)"; want="${want%%.*}"
    [[ "$have" == "$want" ]] || die "$DATA_DIR was initialized by PostgreSQL $have but the binaries in $BINDIR are $want.
  Install PostgreSQL $have, set PG_BINDIR, or remove $DATA_DIR (its data is lost) to re-initialize."
  fi
  write_config
  if pg_running; then
    local pid port
    pid="$(postmaster_field 1)"; port="$(postmaster_field 4)"
    log "already running (pid $pid, port $port, data $DATA_DIR)"
    if ((CONF_CHANGED)); then
      as_server -- "$BINDIR/pg_ctl" reload -D "$DATA_DIR" >/dev/null
      log "warning: configuration changed while running; reloaded, but port/shared_buffers/max_connections/wal_buffers/shared_preload_libraries need: pg.sh stop && pg.sh start"
    fi
    [[ "$port" == "$PGPORT" ]] || die "the running cluster listens on port $port, not PGPORT=$PGPORT; run pg.sh stop && pg.sh start"
  else
    local t0 rc=0
    t0="$(ms_now)"
    log "starting PostgreSQL $(server_version) on $HOST:$PGPORT (log $LOG_FILE)"
    as_server -- "$BINDIR/pg_ctl" start -D "$DATA_DIR" -l "$LOG_FILE" -w -t "$PG_START_TIMEOUT" >/dev/null || rc=$?
    if ((rc != 0)); then
      log "pg_ctl start failed (exit $rc); last lines of $LOG_FILE:"
      tail -n 20 "$LOG_FILE" >&2 || true
      die "PostgreSQL did not start"
    fi
    log "started in $(fmt_ms $(($(ms_now) - t0))) (pid $(postmaster_field 1))"
  fi
  ensure_databases
  log "ready: postgresql://<service>:<password>@$HOST:$PGPORT/<service>  (deploy/postgres/pg.sh url <service>)"
}

cmd_stop() {
  if ! find_bindir; then
    log "no PostgreSQL binaries found, so nothing of ours can be running"
    return 0
  fi
  if [[ ! -f "$DATA_DIR/PG_VERSION" ]]; then
    log "no cluster in $DATA_DIR; nothing to stop"
    return 0
  fi
  if is_root; then id -u "$PG_OS_USER" >/dev/null 2>&1 || die "user '$PG_OS_USER' does not exist"; fi
  take_lock
  if ! pg_running; then
    log "not running (data $DATA_DIR)"
    return 0
  fi
  local t0
  t0="$(ms_now)"
  case "$PG_STOP_MODE" in smart | fast | immediate) ;; *) die "PG_STOP_MODE must be smart, fast or immediate" ;; esac
  as_server -- "$BINDIR/pg_ctl" stop -D "$DATA_DIR" -m "$PG_STOP_MODE" -w -t "$PG_START_TIMEOUT" >/dev/null
  log "stopped ($PG_STOP_MODE) in $(fmt_ms $(($(ms_now) - t0)))"
}

cmd_status() {
  validate_port
  if ! find_bindir; then
    echo "postgres: not running (no PostgreSQL binaries found; run: deploy/postgres/pg.sh install)"
    return 3
  fi
  local rc=0
  "$BINDIR/pg_isready" -q -h "$HOST" -p "$PGPORT" -t 3 || rc=$?
  if ((rc == 0)); then
    local pid="" ver="" extra=""
    if [[ -f "$DATA_DIR/postmaster.pid" ]]; then
      pid="$(postmaster_field 1)"
      [[ "$(postmaster_field 4)" == "$PGPORT" ]] && extra=", pid $pid, data $DATA_DIR"
    fi
    [[ -n "$extra" ]] || extra=" (not started from $DATA_DIR)"
    ver=" $(server_version)"
    echo "postgres$ver: accepting connections on $HOST:$PGPORT$extra"
    return 0
  fi
  local why="no response"
  ((rc == 1)) && why="rejecting connections (starting up or shutting down)"
  echo "postgres: not accepting connections on $HOST:$PGPORT ($why)"
  return 3
}

cmd_psql() {
  validate_port
  find_bindir || die "PostgreSQL binaries not found; run: deploy/postgres/pg.sh install"
  PGPASSWORD="$PG_SUPERUSER_PASSWORD" exec "$BINDIR/psql" -h "$HOST" -p "$PGPORT" -U "$SUPERUSER" "$@"
}

urlencode() {
  local LC_ALL=C s="$1" out="" c i
  for ((i = 0; i < ${#s}; i++)); do
    c="${s:i:1}"
    case "$c" in
      [A-Za-z0-9._~-]) out+="$c" ;;
      *) out+="$(printf '%%%02X' "'$c")" ;;
    esac
  done
  printf '%s' "$out"
}

cmd_url() {
  validate_port
  local name="${1:-}"
  [[ -n "$name" ]] || die "usage: pg.sh url <service>|admin"
  if [[ "$name" == "admin" ]]; then
    printf 'postgresql://%s:%s@%s:%s/postgres\n' "$SUPERUSER" "$(urlencode "$PG_SUPERUSER_PASSWORD")" "$HOST" "$PGPORT"
    return 0
  fi
  load_services
  local s found=0
  for s in "${SERVICES[@]}"; do [[ "$s" == "$name" ]] && found=1; done
  ((found)) || die "unknown service '$name' (not in $PG_DATABASES_FILE; known: ${SERVICES[*]} admin)"
  printf 'postgresql://%s:%s@%s:%s/%s\n' "$name" "$(urlencode "$(service_password "$name")")" "$HOST" "$PGPORT" "$name"
}

main() {
  local cmd="${1:-}"
  [[ $# -gt 0 ]] && shift
  case "$cmd" in
    install) cmd_install ;;
    start) cmd_start ;;
    stop) cmd_stop ;;
    status) cmd_status ;;
    psql) cmd_psql "$@" ;;
    url) cmd_url "$@" ;;
    -h | --help | help) usage ;;
    *) usage; exit 2 ;;
  esac
}

main "$@"
