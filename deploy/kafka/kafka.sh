#!/usr/bin/env bash
# Run a real Apache Kafka 4.x broker (KRaft combined mode, single node, 127.0.0.1 only)
# from its Maven Central jars, without Docker.
#
#   deploy/kafka/kafka.sh fetch|start|stop|restart|status|logs [-f|N]
#
# Environment (all optional):
#   KAFKA_PORT             client listener port                       (9092)
#   KAFKA_CONTROLLER_PORT  KRaft controller listener port             (9093)
#   KAFKA_HOME_DIR         instance dir: server.properties, data/, broker.log, broker.pid
#                                                                     (<repo>/.local/kafka)
#   KAFKA_LIB_DIR          jar cache, shared by all instances         (<repo>/.local/kafka-lib)
#   KAFKA_HEAP_OPTS        JVM heap                                   (-Xms512m -Xmx1g)
#   KAFKA_START_TIMEOUT_S  seconds to wait for readiness              (90)
#   KAFKA_STOP_TIMEOUT_S   seconds to wait after SIGTERM before SIGKILL (30)
#   KAFKA_LOG4J_CONFIG     log4j2 config                              (deploy/kafka/log4j2.properties)
#   KAFKA_MVN_ARGS         extra arguments for mvn during fetch, e.g. -Dmaven.repo.local=...
#   JAVA_HOME              if set, $JAVA_HOME/bin/java is used instead of java from PATH
#
# Exit codes: 0 ok; 1 error; status: 0 running and answering, 3 stopped,
# 1 process alive but the port does not answer (starting or hung).
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_DIR="$(cd "$SCRIPT_DIR/../.." && pwd)"

KAFKA_PORT="${KAFKA_PORT:-9092}"
KAFKA_CONTROLLER_PORT="${KAFKA_CONTROLLER_PORT:-9093}"
KAFKA_HOME_DIR="${KAFKA_HOME_DIR:-$REPO_DIR/.local/kafka}"
KAFKA_LIB_DIR="${KAFKA_LIB_DIR:-$REPO_DIR/.local/kafka-lib}"
KAFKA_HEAP_OPTS="${KAFKA_HEAP_OPTS:--Xms512m -Xmx1g}"
KAFKA_START_TIMEOUT_S="${KAFKA_START_TIMEOUT_S:-90}"
KAFKA_STOP_TIMEOUT_S="${KAFKA_STOP_TIMEOUT_S:-30}"
KAFKA_LOG4J_CONFIG="${KAFKA_LOG4J_CONFIG:-$SCRIPT_DIR/log4j2.properties}"
KAFKA_MVN_ARGS="${KAFKA_MVN_ARGS:-}"

# Same defaults as Kafka's bin/kafka-run-class.sh (KAFKA_JVM_PERFORMANCE_OPTS).
JVM_PERF_OPTS=(-server -XX:+UseG1GC -XX:MaxGCPauseMillis=20 -XX:InitiatingHeapOccupancyPercent=35
  -XX:+ExplicitGCInvokesConcurrent -XX:MaxInlineLevel=15 -Djava.awt.headless=true
  -XX:+ExitOnOutOfMemoryError)

POM="$SCRIPT_DIR/pom.xml"
TEMPLATE="$SCRIPT_DIR/server.properties.template"
# The line KafkaRaftServer logs once broker and controller are both up (Kafka 4.x).
STARTED_RE='\] Kafka Server started \(kafka\.server\.KafkaRaftServer\)'
MIN_JARS=30

log() { printf 'kafka.sh: %s\n' "$*"; }
die() { printf 'kafka.sh: error: %s\n' "$*" >&2; exit 1; }

is_uint() { [[ "$1" =~ ^[0-9]+$ ]]; }
is_uint "$KAFKA_PORT" || die "KAFKA_PORT must be a number, got '$KAFKA_PORT'"
is_uint "$KAFKA_CONTROLLER_PORT" || die "KAFKA_CONTROLLER_PORT must be a number, got '$KAFKA_CONTROLLER_PORT'"
is_uint "$KAFKA_START_TIMEOUT_S" || die "KAFKA_START_TIMEOUT_S must be a number of seconds"
is_uint "$KAFKA_STOP_TIMEOUT_S" || die "KAFKA_STOP_TIMEOUT_S must be a number of seconds"
[[ "$KAFKA_PORT" != "$KAFKA_CONTROLLER_PORT" ]] || die "KAFKA_PORT and KAFKA_CONTROLLER_PORT must differ"

# Absolute paths: the broker runs with its own cwd and server.properties needs absolute dirs.
# realpath -m also normalises "dir/" vs "dir", so pid lookups by config path stay stable.
abspath() {
  if command -v realpath >/dev/null 2>&1; then
    realpath -m -- "$1"
  else
    case "$1" in /*) printf '%s' "${1%/}" ;; *) printf '%s/%s' "$PWD" "${1%/}" ;; esac
  fi
}
KAFKA_HOME_DIR="$(abspath "$KAFKA_HOME_DIR")"
KAFKA_LIB_DIR="$(abspath "$KAFKA_LIB_DIR")"
KAFKA_LOG4J_CONFIG="$(abspath "$KAFKA_LOG4J_CONFIG")"

CONF="$KAFKA_HOME_DIR/server.properties"
DATA_DIR="$KAFKA_HOME_DIR/data"
LOG_FILE="$KAFKA_HOME_DIR/broker.log"
PID_FILE="$KAFKA_HOME_DIR/broker.pid"
OFFSET_FILE="$KAFKA_HOME_DIR/broker.log-offset"   # size of broker.log when the current run began
MARKER="$KAFKA_LIB_DIR/.kafka-jars"

kafka_version() {
  local v
  v="$(sed -n 's:.*<kafka.version>\([^<]*\)</kafka.version>.*:\1:p' "$POM" | head -n1)"
  [[ -n "$v" ]] || die "cannot read <kafka.version> from $POM"
  printf '%s' "$v"
}

# Serialise fetch/start/stop on a lock file when flock(1) exists (util-linux).
with_lock() { # with_lock LOCKFILE cmd...
  local lockfile="$1"; shift
  if command -v flock >/dev/null 2>&1; then
    mkdir -p "$(dirname "$lockfile")"
    (
      flock -w 600 9 || die "could not lock $lockfile within 600 s"
      "$@"
    ) 9>"$lockfile"
  else
    "$@"
  fi
}

# ---------------------------------------------------------------------------- java / mvn
JAVA=""
find_java() {
  if [[ -n "${JAVA_HOME:-}" && -x "${JAVA_HOME}/bin/java" ]]; then
    JAVA="$JAVA_HOME/bin/java"
  elif command -v java >/dev/null 2>&1; then
    JAVA="$(command -v java)"
  else
    die "java not found (need Java 17+). Debian/Ubuntu: apt-get install -y openjdk-17-jre-headless maven"
  fi
  local ver major
  ver="$("$JAVA" -version 2>&1 | awk -F'"' '/version/ {print $2; exit}')"
  major="${ver%%.*}"
  [[ "$major" == "1" ]] && major="$(printf '%s' "$ver" | cut -d. -f2)"
  is_uint "${major:-x}" || die "cannot parse the version of $JAVA ('$ver')"
  ((major >= 17)) || die "$JAVA is Java $ver; Kafka 4.x needs Java 17+. Debian/Ubuntu: apt-get install -y openjdk-17-jre-headless"
}

need_mvn() {
  command -v mvn >/dev/null 2>&1 \
    || die "mvn (Apache Maven) not found; it is needed once to download the Kafka jars. Debian/Ubuntu: apt-get install -y openjdk-17-jre-headless maven"
}

# ---------------------------------------------------------------------------- fetch
jar_count() { find "$KAFKA_LIB_DIR" -maxdepth 1 -name '*.jar' 2>/dev/null | wc -l | tr -d ' '; }

pom_sum() { sha256sum "$POM" | cut -d' ' -f1; }

jars_ok() {
  local v n
  v="$(kafka_version)"
  [[ -f "$MARKER" ]] || return 1
  grep -qx "kafka.version=$v" "$MARKER" || return 1
  grep -qx "pom.sha256=$(pom_sum)" "$MARKER" || return 1
  n="$(jar_count)"
  grep -qx "jars=$n" "$MARKER" || return 1
  ((n >= MIN_JARS)) || return 1
  [[ -f "$KAFKA_LIB_DIR/kafka_2.13-$v.jar" ]] || return 1
}

do_fetch_locked() {
  jars_ok && return 0 # another process may have fetched while we waited for the lock
  need_mvn
  local v tmp out t0 n
  v="$(kafka_version)"
  tmp="$KAFKA_LIB_DIR/.download.$$"
  out="$KAFKA_LIB_DIR/.mvn-output.log"
  rm -rf "$tmp"
  mkdir -p "$tmp"
  log "downloading Apache Kafka $v jars from Maven Central into $KAFKA_LIB_DIR (about 45 MB, once)..."
  t0=$SECONDS
  # shellcheck disable=SC2086  # KAFKA_MVN_ARGS is a list of words on purpose
  if ! mvn -q -B -Dstyle.color=never $KAFKA_MVN_ARGS -f "$POM" \
      dependency:copy-dependencies -DincludeScope=runtime -DoutputDirectory="$tmp" >"$out" 2>&1; then
    rm -rf "$tmp"
    tail -n 30 "$out" >&2 || true
    die "mvn could not download the Kafka jars (full output: $out)"
  fi
  n="$(find "$tmp" -maxdepth 1 -name '*.jar' | wc -l | tr -d ' ')"
  if ((n < MIN_JARS)) || [[ ! -f "$tmp/kafka_2.13-$v.jar" ]]; then
    rm -rf "$tmp"
    die "mvn produced only $n jars (expected >= $MIN_JARS including kafka_2.13-$v.jar); see $out"
  fi
  rm -f "$KAFKA_LIB_DIR"/*.jar "$MARKER"
  mv "$tmp"/*.jar "$KAFKA_LIB_DIR"/
  rmdir "$tmp"
  rm -f "$out"
  printf 'kafka.version=%s\npom.sha256=%s\njars=%s\n' "$v" "$(pom_sum)" "$n" >"$MARKER"
  log "fetched $n jars ($(du -sh "$KAFKA_LIB_DIR" | cut -f1)) in $((SECONDS - t0)) s"
}

cmd_fetch() { # cmd_fetch [quiet]
  find_java
  if jars_ok; then
    [[ "${1:-}" == quiet ]] || log "Kafka $(kafka_version) jars already in $KAFKA_LIB_DIR ($(jar_count) jars)"
    return 0
  fi
  mkdir -p "$KAFKA_LIB_DIR"
  with_lock "$KAFKA_LIB_DIR/.lock" do_fetch_locked
}

# ---------------------------------------------------------------------------- process helpers
# Prints the pid of THIS instance's broker (a java process running kafka.Kafka with our
# server.properties), or nothing. A stale pid file (process gone or pid reused) is removed.
broker_pid() {
  local pid=""
  if [[ -f "$PID_FILE" ]]; then
    pid="$(tr -dc '0-9' <"$PID_FILE" || true)"
    if [[ -n "$pid" ]] && is_our_broker "$pid"; then
      printf '%s' "$pid"
      return 0
    fi
    rm -f "$PID_FILE"
  fi
  # Pid file lost but the broker still runs (e.g. the file was deleted): find it by its config path.
  local p
  for p in /proc/[0-9]*; do
    p="${p#/proc/}"
    if is_our_broker "$p"; then
      printf '%s' "$p" >"$PID_FILE"
      printf '%s' "$p"
      return 0
    fi
  done 2>/dev/null
  return 0
}

is_our_broker() {
  local pid="$1" cmdline
  [[ -r "/proc/$pid/cmdline" ]] || return 1
  cmdline="$(tr '\0' '\n' <"/proc/$pid/cmdline" 2>/dev/null)" || return 1
  grep -qx 'kafka.Kafka' <<<"$cmdline" && grep -qxF "$CONF" <<<"$cmdline"
}

alive() { [[ -n "$1" ]] && kill -0 "$1" 2>/dev/null; }

port_open() { # port_open PORT: true if something accepts TCP connections on 127.0.0.1:PORT
  timeout 2 bash -c "exec 3<>/dev/tcp/127.0.0.1/$1" 2>/dev/null
}

port_owner() { # best effort description of who listens on a port
  if command -v ss >/dev/null 2>&1; then
    ss -ltnpH "sport = :$1" 2>/dev/null | head -n 3 | sed 's/^/    /'
  fi
}

started_since_launch() { # the "Kafka Server started" line appears after this run's log offset
  local off=0
  [[ -f "$OFFSET_FILE" ]] && off="$(tr -dc '0-9' <"$OFFSET_FILE")"
  [[ -f "$LOG_FILE" ]] || return 1
  tail -c "+$((${off:-0} + 1))" "$LOG_FILE" | grep -qE "$STARTED_RE"
}

ready() { # ready PID
  alive "$1" && port_open "$KAFKA_PORT" && started_since_launch
}

show_log_tail() {
  if [[ -f "$LOG_FILE" ]]; then
    printf -- '--- last 40 lines of %s ---\n' "$LOG_FILE" >&2
    tail -n 40 "$LOG_FILE" >&2
    printf -- '--- end of %s ---\n' "$LOG_FILE" >&2
  fi
}

# ---------------------------------------------------------------------------- start
render_config() {
  [[ -f "$TEMPLATE" ]] || die "missing $TEMPLATE"
  local esc_data
  esc_data="$(printf '%s' "$DATA_DIR" | sed 's/[\\&|]/\\&/g')"
  sed -e "s|@KAFKA_PORT@|$KAFKA_PORT|g" \
      -e "s|@KAFKA_CONTROLLER_PORT@|$KAFKA_CONTROLLER_PORT|g" \
      -e "s|@DATA_DIR@|$esc_data|g" "$TEMPLATE" >"$CONF.tmp"
  mv "$CONF.tmp" "$CONF"
}

new_cluster_id() { # 22-char base64url of 16 random bytes, like `kafka-storage random-uuid`
  local id
  while :; do
    id="$(head -c 16 /dev/urandom | base64 | tr '+/' '-_' | tr -d '=\n')"
    # a leading '-' would be read as an option by argparse; an all-zero id is reserved
    [[ ${#id} -eq 22 && "$id" != -* && "$id" != AAAAAAAAAAAAAAAAAAAAAA ]] && break
  done
  printf '%s' "$id"
}

format_storage() {
  [[ -f "$DATA_DIR/meta.properties" ]] && return 0
  local id out t0
  id="$(new_cluster_id)"
  mkdir -p "$DATA_DIR"
  out="$KAFKA_HOME_DIR/format.log"
  log "formatting storage in $DATA_DIR (cluster id $id)"
  t0=$SECONDS
  if ! "$JAVA" -Xmx256m -Dlog4j2.configurationFile="$KAFKA_LOG4J_CONFIG" -cp "$KAFKA_LIB_DIR/*" \
      kafka.tools.StorageTool format --cluster-id="$id" --config "$CONF" >"$out" 2>&1; then
    cat "$out" >&2
    die "kafka-storage format failed (if $DATA_DIR holds a half-written format, remove it and retry)"
  fi
  cat "$out" >>"$LOG_FILE"
  rm -f "$out"
  log "formatted in $((SECONDS - t0)) s"
}

wait_ready() { # wait_ready PID: 0 when ready, 1 on timeout or process death
  local pid="$1" deadline=$((SECONDS + KAFKA_START_TIMEOUT_S))
  while ((SECONDS < deadline)); do
    if ! alive "$pid"; then
      printf 'kafka.sh: error: the broker (pid %s) exited during startup\n' "$pid" >&2
      return 1
    fi
    if ready "$pid"; then
      return 0
    fi
    sleep 0.5
  done
  printf 'kafka.sh: error: the broker (pid %s) was not ready within %s s (KAFKA_START_TIMEOUT_S)\n' \
    "$pid" "$KAFKA_START_TIMEOUT_S" >&2
  return 1
}

do_start_locked() {
  local pid t0
  pid="$(broker_pid)"
  if [[ -n "$pid" ]]; then
    if ready "$pid"; then
      log "already running (pid $pid) on 127.0.0.1:$KAFKA_PORT, dir $KAFKA_HOME_DIR"
      return 0
    fi
    log "broker (pid $pid) is running but not ready yet; waiting up to ${KAFKA_START_TIMEOUT_S} s"
    if wait_ready "$pid"; then
      log "ready (pid $pid) on 127.0.0.1:$KAFKA_PORT"
      return 0
    fi
    show_log_tail
    exit 1
  fi

  local p
  for p in "$KAFKA_PORT" "$KAFKA_CONTROLLER_PORT"; do
    if port_open "$p"; then
      printf 'kafka.sh: error: port 127.0.0.1:%s is already in use by another process (not the broker of %s):\n' \
        "$p" "$KAFKA_HOME_DIR" >&2
      port_owner "$p" >&2
      echo "  stop that process, or pick other ports with KAFKA_PORT / KAFKA_CONTROLLER_PORT" >&2
      exit 1
    fi
  done

  render_config
  format_storage

  local off
  off="$(stat -c %s "$LOG_FILE" 2>/dev/null || echo 0)"
  printf '%s\n' "$off" >"$OFFSET_FILE"
  printf '[%s] kafka.sh: starting Kafka %s on 127.0.0.1:%s (controller %s)\n' \
    "$(date '+%Y-%m-%d %H:%M:%S')" "$(kafka_version)" "$KAFKA_PORT" "$KAFKA_CONTROLLER_PORT" >>"$LOG_FILE"
  rm -f "$PID_FILE"
  t0=$(date +%s%N)
  # New session (setsid) so the broker survives the calling shell and its process group;
  # the inner bash writes its own pid and then becomes java (exec), so the pid file is exact.
  # shellcheck disable=SC2086,SC2016  # KAFKA_HEAP_OPTS is a list of words; $$ is for the inner bash
  (
    exec 9>&- # do not hand the instance lock to the broker
    cd "$KAFKA_HOME_DIR"
    exec setsid nohup bash -c 'echo $$ >"$1"; shift; exec "$@"' _ "$PID_FILE" \
      "$JAVA" $KAFKA_HEAP_OPTS "${JVM_PERF_OPTS[@]}" \
      -Dlog4j2.configurationFile="$KAFKA_LOG4J_CONFIG" \
      -cp "$KAFKA_LIB_DIR/*" kafka.Kafka "$CONF" \
      >>"$LOG_FILE" 2>&1 </dev/null
  ) &
  local _
  for _ in $(seq 1 100); do
    [[ -s "$PID_FILE" ]] && break
    sleep 0.05
  done
  pid="$(tr -dc '0-9' <"$PID_FILE" 2>/dev/null || true)"
  [[ -n "$pid" ]] || { show_log_tail; die "the broker did not start (no pid)"; }

  if wait_ready "$pid"; then
    local ms=$((($(date +%s%N) - t0) / 1000000))
    log "ready (pid $pid) on 127.0.0.1:$KAFKA_PORT (controller $KAFKA_CONTROLLER_PORT) in $((ms / 1000)).$(printf '%03d' $((ms % 1000))) s; dir $KAFKA_HOME_DIR"
    return 0
  fi
  show_log_tail
  if alive "$pid"; then
    log "stopping the broker that did not become ready"
    stop_pid "$pid" >/dev/null || true
  fi
  rm -f "$PID_FILE"
  exit 1
}

cmd_start() {
  cmd_fetch quiet
  mkdir -p "$KAFKA_HOME_DIR"
  with_lock "$KAFKA_HOME_DIR/.lock" do_start_locked
}

# ---------------------------------------------------------------------------- stop
stop_pid() { # SIGTERM, wait KAFKA_STOP_TIMEOUT_S, then SIGKILL
  local pid="$1" deadline=$((SECONDS + KAFKA_STOP_TIMEOUT_S))
  kill -TERM "$pid" 2>/dev/null || return 0
  while alive "$pid" && ((SECONDS < deadline)); do sleep 0.2; done
  if alive "$pid"; then
    log "broker (pid $pid) still alive after ${KAFKA_STOP_TIMEOUT_S} s; sending SIGKILL"
    kill -KILL "$pid" 2>/dev/null || true
    local _
    for _ in $(seq 1 50); do alive "$pid" || break; sleep 0.1; done
    alive "$pid" && die "broker (pid $pid) survived SIGKILL"
  fi
  return 0
}

do_stop_locked() {
  local pid t0
  pid="$(broker_pid)"
  if [[ -z "$pid" ]]; then
    rm -f "$PID_FILE"
    log "not running (dir $KAFKA_HOME_DIR)"
    return 0
  fi
  t0=$SECONDS
  stop_pid "$pid"
  rm -f "$PID_FILE"
  printf '[%s] kafka.sh: broker pid %s stopped\n' "$(date '+%Y-%m-%d %H:%M:%S')" "$pid" >>"$LOG_FILE"
  log "stopped (pid $pid) in $((SECONDS - t0)) s; data kept in $DATA_DIR"
}

cmd_stop() {
  if [[ ! -d "$KAFKA_HOME_DIR" ]]; then
    log "not running (no instance dir $KAFKA_HOME_DIR)"
    return 0
  fi
  with_lock "$KAFKA_HOME_DIR/.lock" do_stop_locked
}

# ---------------------------------------------------------------------------- status / logs
cmd_status() {
  local pid=""
  [[ -d "$KAFKA_HOME_DIR" ]] && pid="$(broker_pid)"
  if [[ -z "$pid" ]]; then
    echo "stopped (port $KAFKA_PORT, controller $KAFKA_CONTROLLER_PORT, dir $KAFKA_HOME_DIR)"
    return 3
  fi
  if port_open "$KAFKA_PORT"; then
    echo "running (pid $pid) on 127.0.0.1:$KAFKA_PORT, controller 127.0.0.1:$KAFKA_CONTROLLER_PORT, dir $KAFKA_HOME_DIR"
    return 0
  fi
  echo "process alive (pid $pid) but 127.0.0.1:$KAFKA_PORT does not answer (starting or hung); see: $0 logs"
  return 1
}

cmd_logs() {
  [[ -f "$LOG_FILE" ]] || die "no log yet: $LOG_FILE"
  case "${1:-}" in
    -f) exec tail -n 50 -F "$LOG_FILE" ;;
    "") tail -n 100 "$LOG_FILE" ;;
    *) is_uint "$1" || die "usage: $0 logs [-f|N]"; tail -n "$1" "$LOG_FILE" ;;
  esac
}

usage() {
  cat <<EOF
usage: $0 fetch|start|stop|restart|status|logs [-f|N]
  fetch    download the Kafka jars into KAFKA_LIB_DIR once (needs java 17+ and mvn)
  start    fetch if needed, format storage once, start the broker, wait until ready
  stop     SIGTERM (SIGKILL after KAFKA_STOP_TIMEOUT_S); data is kept
  restart  stop then start
  status   exit 0 running, 3 stopped, 1 alive but not answering
  logs     tail of broker.log (-f to follow, N for N lines)
EOF
}

main() {
  local cmd="${1:-}"
  [[ $# -gt 0 ]] && shift
  case "$cmd" in
    fetch) cmd_fetch ;;
    start) cmd_start ;;
    stop) cmd_stop ;;
    restart) cmd_stop; cmd_start ;;
    status) cmd_status ;;
    logs) cmd_logs "$@" ;;
    -h | --help | help) usage ;;
    *) usage >&2; exit 2 ;;
  esac
}

main "$@"
