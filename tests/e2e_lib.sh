# tests/e2e_lib.sh - helpers for the scripted end-to-end tests (sourced).
#
# Every test gets a private temp dir with its own sockets (exported through
# PERFETTO_PRODUCER_SOCK_NAME / PERFETTO_CONSUMER_SOCK_NAME, which shmtraced,
# libshm producers and the shmtrace CLI all honour), and an EXIT trap that
# SIGKILLs every process the test started (e2e_spawn) even on failure.
# Exit codes follow automake: 0 pass, 1 fail, 77 skip.

set -u
: "${top_builddir:=.}"
: "${top_srcdir:=.}"
SHMTRACED="$top_builddir/service/shmtraced"
PRODUCER="$top_builddir/tools/shmtrace-producer"
CLI="$top_builddir/tools/shmtrace"
TRACECHECK="$top_builddir/tests/svc_tracecheck"
CONSUMER="$top_builddir/tests/svc_consumer"
EVIL="$top_builddir/tests/svc_evilproducer"

E2E_DIR=$(mktemp -d "${TMPDIR:-/tmp}/shmtrace-e2e.XXXXXX") || exit 99
E2E_PIDS=""
# e2e_kill_all: SIGKILL every process the test started, and reap them
# (e2e_cleanup then removes E2E_DIR; a test with more to undo runs both).
e2e_kill_all() {
    for p in $E2E_PIDS; do kill -KILL "$p" 2>/dev/null; done
    for p in $E2E_PIDS; do wait "$p" 2>/dev/null; done
}
e2e_cleanup() {
    e2e_kill_all
    rm -rf "$E2E_DIR"
}
trap e2e_cleanup EXIT
trap 'exit 1' INT TERM
export PERFETTO_PRODUCER_SOCK_NAME="$E2E_DIR/p.sock"
export PERFETTO_CONSUMER_SOCK_NAME="$E2E_DIR/c.sock"

e2e_fail() {
    echo "FAIL: $*" >&2
    for f in "$E2E_DIR"/*.log; do
        [ -f "$f" ] || continue
        echo "---- $f" >&2
        tail -n 30 "$f" >&2
    done
    exit 1
}

e2e_need_tools() {
    for t in "$PRODUCER" "$CLI" "$@"; do
        if [ ! -x "$t" ]; then
            echo "SKIP: $t not built" >&2
            exit 77
        fi
    done
}

# e2e_spawn LOGNAME CMD...: start in the background, remember the pid.
e2e_spawn() {
    local log="$E2E_DIR/$1.log"; shift
    "$@" >"$log" 2>&1 &
    E2E_LAST_PID=$!
    E2E_PIDS="$E2E_PIDS $E2E_LAST_PID"
}

e2e_wait_socket() {
    local i=0
    while [ ! -S "$PERFETTO_CONSUMER_SOCK_NAME" ] ||
          [ ! -S "$PERFETTO_PRODUCER_SOCK_NAME" ]; do
        i=$((i + 1))
        [ $i -gt 600 ] && e2e_fail "daemon did not create its sockets"
        sleep 0.05
    done
}

e2e_start_daemon() {
    e2e_spawn daemon "$SHMTRACED"
    DAEMON_PID=$E2E_LAST_PID
    e2e_wait_socket
}

# e2e_until TRIES DELAY WHAT CMD...: run CMD until it succeeds, at most
# TRIES times DELAY seconds apart; then fail saying WHAT did not happen
# (and the last value CMD saw, if it set E2E_SEEN).
e2e_until() {
    local tries=$1 delay=$2 what=$3 i=0
    shift 3
    E2E_SEEN=
    until "$@"; do
        i=$((i + 1))
        [ $i -gt "$tries" ] && e2e_fail "$what${E2E_SEEN:+ (last: $E2E_SEEN)}"
        sleep "$delay"
    done
}

# e2e_stat_ge KEY N: the daemon's stats (svc_consumer stats) say KEY >= N;
# E2E_SEEN gets the value.
e2e_stat_ge() {
    E2E_SEEN=$("$CONSUMER" stats 2>/dev/null | sed -n "s/^$1=//p")
    [ "${E2E_SEEN:-0}" -ge "$2" ]
}

# e2e_wait_registered N: until N data sources are registered.
e2e_wait_registered() {
    e2e_until 600 0.05 "$1 data sources never registered" \
        e2e_stat_ge data_sources_registered "$1"
}

# e2e_wait_sessions N: until N tracing sessions run together.
e2e_wait_sessions() {
    e2e_until 600 0.05 "$1 tracing sessions never ran together" \
        e2e_stat_ge tracing_sessions "$1"
}

# e2e_cli_stat PATTERN: `shmtrace stats` prints a line matching PATTERN.
e2e_cli_stat() {
    "$CLI" stats 2>/dev/null | grep -q "$1"
}

# e2e_cli_wait PATTERN WHAT: until `shmtrace stats` prints PATTERN (10 s).
e2e_cli_wait() {
    e2e_until 200 0.05 "$2" e2e_cli_stat "$1"
}

# e2e_wait_pid PID SECONDS: wait for a child to end, SIGKILL it after
# SECONDS. Sets E2E_RC to its exit status; returns 1 if it had to be killed.
e2e_wait_pid() {
    local i=0 st
    while [ $i -lt $(($2 * 20)) ]; do
        st=$(cut -d' ' -f3 "/proc/$1/stat" 2>/dev/null)
        [ -z "$st" ] || [ "$st" = Z ] && break
        sleep 0.05
        i=$((i + 1))
    done
    if [ $i -ge $(($2 * 20)) ]; then
        kill -KILL "$1" 2>/dev/null
        wait "$1" 2>/dev/null
        E2E_RC=137
        return 1
    fi
    wait "$1" 2>/dev/null
    E2E_RC=$?
    return 0
}

# e2e_wait_ok PID SECONDS WHAT: wait_pid, and WHAT must have exited 0.
e2e_wait_ok() {
    e2e_wait_pid "$1" "$2" || e2e_fail "$3 did not exit within $2 s"
    [ "$E2E_RC" -eq 0 ] || e2e_fail "$3 exited $E2E_RC"
}

# e2e_stop_daemon: SIGTERM, then the daemon must exit 0 (a sanitizer
# report, a leak or a crash makes that fail) within 30 s.
e2e_stop_daemon() {
    kill -TERM "$DAEMON_PID" 2>/dev/null
    e2e_wait_ok "$DAEMON_PID" 30 "daemon (SIGTERM)"
    if grep -q "Sanitizer\|runtime error" "$E2E_DIR/daemon.log"; then
        e2e_fail "sanitizer report from the daemon"
    fi
}

# e2e_check TRACE ARGS...: run the trace checker, keep its output.
e2e_check() {
    local trace=$1; shift
    "$TRACECHECK" "$@" "$trace" >"$E2E_DIR/check.out" 2>"$E2E_DIR/check.log"
    local rc=$?
    cat "$E2E_DIR/check.out"
    [ $rc -eq 0 ] || e2e_fail "trace check failed: $(cat "$E2E_DIR/check.log")"
}

# e2e_value KEY: a key=value from the last e2e_check.
e2e_value() {
    sed -n "s/^$1=//p" "$E2E_DIR/check.out"
}

# e2e_record_many W N SIZE: with the daemon up, tests/svc_manywriters with
# W writers of N packets of SIZE bytes, recorded by `shmtrace record` into
# a 1 MiB ring ($E2E_DIR/trace); returns once every writer is done, the
# session still running (its PID in REC, the producer's in MANY_PID).
e2e_record_many() {
    e2e_spawn many "$top_builddir/tests/svc_manywriters" -w "$1" -c "$2" \
        -S "$3"
    MANY_PID=$E2E_LAST_PID
    e2e_wait_registered 1
    e2e_spawn cli "$CLI" record -q -o "$E2E_DIR/trace" -t 600s -b 1m
    REC=$E2E_LAST_PID
    e2e_until 2400 0.05 "the writers never finished" \
        grep -q "all $1 writers done" "$E2E_DIR/many.log"
}
