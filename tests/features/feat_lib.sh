# tests/features/feat_lib.sh - sourced by the issue-12 e2e scripts, on top
# of tests/e2e_lib.sh (private sockets, process cleanup, shmtraced).
#
# feat_need_perfetto: finds Perfetto's binaries ($PERFETTO_BIN, else
# $top_srcdir/../shared/perfetto/bin) or exits 77 saying why.
# feat_wait_file FILE SECONDS: until FILE exists and is non-empty.
# feat_wait_log FILE PATTERN SECONDS: until FILE has a line matching.
. "${top_srcdir:-.}/tests/e2e_lib.sh"
DUMP="$top_builddir/tests/features/feat_tracedump"

feat_need_perfetto() {
    PBIN=${PERFETTO_BIN:-"$top_srcdir/../shared/perfetto/bin"}
    for b in perfetto tracebox "$@"; do
        if [ ! -x "$PBIN/$b" ]; then
            echo "SKIP: Perfetto's $b not found in $PBIN (set PERFETTO_BIN)" >&2
            exit 77
        fi
    done
    PERFETTO="$PBIN/perfetto"
    TRACEBOX="$PBIN/tracebox"
}

feat_wait_file() {
    local i=0
    while [ ! -s "$1" ]; do
        i=$((i + 1))
        [ $i -gt $(($2 * 20)) ] && return 1
        sleep 0.05
    done
    return 0
}

feat_wait_log() {
    local i=0
    while ! grep -q "$2" "$1" 2>/dev/null; do
        i=$((i + 1))
        [ $i -gt $(($3 * 20)) ] && return 1
        sleep 0.05
    done
    return 0
}

# feat_wait_sessions N: until the service reports N tracing sessions.
feat_wait_sessions() {
    local i=0 n
    while :; do
        n=$("$CONSUMER" stats 2>/dev/null | sed -n 's/^tracing_sessions=//p')
        [ "${n:-0}" -eq "$1" ] && return 0
        i=$((i + 1))
        [ $i -gt 600 ] && e2e_fail "expected $1 sessions, service has ${n:-0}"
        sleep 0.05
    done
}
