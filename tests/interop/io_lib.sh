# tests/interop/io_lib.sh - helpers for the interop suite (sourced).
#
# Perfetto's own binaries are found at $PERFETTO_BIN, else at
# $top_srcdir/../shared/perfetto/bin; without them every test exits 77
# (automake's SKIP) saying why. Every process runs on private sockets in a
# temp dir (PERFETTO_PRODUCER_SOCK_NAME / PERFETTO_CONSUMER_SOCK_NAME, which
# Perfetto's programs and ours all honour) and is stopped by its PID, never
# by name. trace_processor_shell is optional: io_have_tp says whether it
# runs here (it needs libprotobuf32).
#
# Content, not exit codes: io_check runs io_tracecheck (packet kinds,
# seq_value continuity per writer, slice pairs, process/sys stats) and
# io_value reads its answers; io_stats_match compares the inspector's
# stats with trace processor's for a trace; io_no_error_stats asserts that
# neither reports an `error` stat.

: "${top_builddir:=.}"
: "${top_srcdir:=.}"
. "$top_srcdir/tests/e2e_lib.sh"

if [ -z "${PERFETTO_BIN:-}" ]; then
    PERFETTO_BIN="$top_srcdir/../shared/perfetto/bin"
fi
for b in traced perfetto refgen; do
    if [ ! -x "$PERFETTO_BIN/$b" ]; then
        echo "SKIP: Perfetto's binaries not found ($PERFETTO_BIN/$b missing;" \
             "set PERFETTO_BIN to a directory holding traced, perfetto," \
             "traced_probes, refgen, trace_processor_shell)" >&2
        exit 77
    fi
done
PERFETTO_BIN=$(cd "$PERFETTO_BIN" && pwd)
P_TRACED="$PERFETTO_BIN/traced"
P_PROBES="$PERFETTO_BIN/traced_probes"
P_PERFETTO="$PERFETTO_BIN/perfetto"
P_REFGEN="$PERFETTO_BIN/refgen"
P_TP="$PERFETTO_BIN/trace_processor_shell"
IO_CHECK="$top_builddir/tests/interop/io_tracecheck"
IO_CANON="$top_builddir/tests/interop/io_cfgcanon"
IO_LIBSHM="$top_builddir/tests/interop/io_libshm_producer"
INSPECT="$top_builddir/inspector/shmtrace-inspect"
SHMTRACED="$top_builddir/service/shmtraced"
[ -x "$SHMTRACED" ] || SHMTRACED="$top_builddir/libbuf/shmtraced"

# Perfetto's programs print their log lines with colours on a terminal
# only; keep their logs in the temp dir with the others.

io_have_tp() {
    [ -x "$P_TP" ] || return 1
    # It runs here only with its shared libraries (libprotobuf32).
    "$P_TP" --version >/dev/null 2>&1
}

# io_start_traced: Perfetto's service on the private sockets.
io_start_traced() {
    e2e_spawn traced "$P_TRACED"
    DAEMON_PID=$E2E_LAST_PID
    e2e_wait_socket
}

# io_start_shmtraced
io_start_shmtraced() {
    e2e_spawn daemon "$SHMTRACED"
    DAEMON_PID=$E2E_LAST_PID
    e2e_wait_socket
}

# io_stop PID: SIGTERM, wait up to 30 s (SIGKILL after), E2E_RC = status.
io_stop() {
    kill -TERM "$1" 2>/dev/null
    e2e_wait_pid "$1" 30 || e2e_fail "pid $1 did not stop on SIGTERM"
}

# io_wait_ds NAME...: until the service lists every data source NAME
# (perfetto --query-raw against whichever service runs).
io_wait_ds() {
    local i=0 ok ds
    while :; do
        "$P_PERFETTO" --query-raw >"$E2E_DIR/query.bin" 2>/dev/null
        ok=1
        for ds in "$@"; do
            grep -aq "$ds" "$E2E_DIR/query.bin" || ok=0
        done
        [ $ok -eq 1 ] && return 0
        i=$((i + 1))
        [ $i -gt 300 ] && e2e_fail "data sources $* never registered"
        sleep 0.1
    done
}

# io_perfetto_record CFG OUT [more perfetto args]: perfetto --txt -c CFG.
io_perfetto_record() {
    local cfg=$1 out=$2; shift 2
    "$P_PERFETTO" --txt -c "$cfg" -o "$out" "$@" \
        >>"$E2E_DIR/perfetto.log" 2>&1 ||
        e2e_fail "perfetto --txt -c $cfg failed"
    [ -s "$out" ] || e2e_fail "perfetto wrote no trace to $out"
}

# io_check TRACE [io_tracecheck args]: content answers into check.out.
io_check() {
    local trace=$1; shift
    "$IO_CHECK" "$@" "$trace" >"$E2E_DIR/check.out" 2>"$E2E_DIR/check.log" ||
        e2e_fail "io_tracecheck $trace: $(cat "$E2E_DIR/check.log")"
    [ "$(io_value malformed)" = 0 ] || e2e_fail "$trace: malformed packets"
    [ "$(io_value truncated)" = 0 ] || e2e_fail "$trace: truncated"
}

io_value() {
    local v
    v=$(sed -n "s/^$1=//p" "$E2E_DIR/check.out")
    echo "${v:-0}"
}

# io_expect KEY OP VALUE [what]: assert on the last io_check answer.
io_expect() {
    local v
    v=$(io_value "$1")
    [ "$v" "$2" "$3" ] || e2e_fail "${4:-check}: $1=$v, expected $2 $3"
}

# io_refgen_content TRACE WHAT: refgen's packets, all of them: two
# writers, seq_value contiguous, counter and str as refgen writes them,
# every slice begun is ended (one per iteration), no loss flagged.
io_refgen_content() {
    io_check "$1" --str-len 64
    io_expect test_writers -eq 2 "$2"
    io_expect test_packets -gt 20 "$2"
    io_expect test_gaps -eq 0 "$2"
    io_expect test_dups -eq 0 "$2"
    io_expect test_bad_counter -eq 0 "$2"
    io_expect test_bad_str -eq 0 "$2"
    io_expect te_begin -gt 20 "$2"
    io_expect te_unmatched_end -eq 0 "$2"
    # At most one slice per track open at the stop, one END per track
    # whose BEGIN came before the start.
    local tracks
    tracks=$(io_value te_tracks)
    io_expect te_open -le "$tracks" "$2"
    io_expect te_leading_end -le "$tracks" "$2"
    # one instant per iteration, inside its slice
    local b i
    b=$(io_value te_begin)
    i=$(io_value te_instant)
    [ $((i - b)) -le "$tracks" ] && [ $((b - i)) -le "$tracks" ] ||
        e2e_fail "$2: $b slices but $i instants"
}

# io_no_error_stats TRACE: trace processor (when present) and the
# inspector find no `error` stat with a value.
io_no_error_stats() {
    local db="$E2E_DIR/noerr.db" n
    rm -f "$db"
    "$INSPECT" -q "$1" -o "$db" >/dev/null 2>"$E2E_DIR/inspect.log" ||
        e2e_fail "shmtrace-inspect $1: $(cat "$E2E_DIR/inspect.log")"
    n=$(sqlite3 "$db" "select group_concat(name) from stats where
        severity = 'error' and value != 0")
    [ -z "$n" ] || e2e_fail "$1: error stats (inspector): $n"
    if io_have_tp; then
        "$P_TP" -Q "select name from stats where severity = 'error' and
            value != 0" "$1" >"$E2E_DIR/tp.out" 2>"$E2E_DIR/tp.log" ||
            e2e_fail "trace processor cannot load $1"
        n=$(tail -n +2 "$E2E_DIR/tp.out" | tr -d '"' | tr '\n' ' ')
        [ -z "$n" ] || e2e_fail "$1: error stats (trace processor): $n"
    fi
}

# io_no_loss TRACE: no data_loss stat with a value (inspector), and no
# packet flagged previous_packet_dropped after its sequence's first one.
io_no_loss() {
    local db="$E2E_DIR/noloss.db" n
    rm -f "$db"
    "$INSPECT" -q "$1" -o "$db" >/dev/null 2>"$E2E_DIR/inspect.log" ||
        e2e_fail "shmtrace-inspect $1: $(cat "$E2E_DIR/inspect.log")"
    n=$(sqlite3 "$db" "select group_concat(name || '=' || value) from stats
        where severity = 'data_loss' and value != 0")
    [ -z "$n" ] || e2e_fail "$1: data loss: $n"
    n=$(sqlite3 "$db" "select count(*) from data_loss where counted = 1")
    [ "$n" = 0 ] || e2e_fail "$1: $n packets flagged a loss"
}

# io_trace_ok TRACE: no `error` stat, and the inspector's stats equal to
# trace processor's.
io_trace_ok() {
    io_no_error_stats "$1"
    io_stats_match "$1"
}

# io_stats_match TRACE: every stats row with a value, and every traced_%
# row, is the same (name, idx, severity, source, value) in the inspector
# and in trace processor (its own timing rows excepted). No-op without
# trace processor. Not reproduced by the inspector, and set aside (printed
# as a NOTE when present): trace processor's rows that need the events'
# contents decoded (IO_FTRACE_ANALYSIS). The ftrace analysis rows it does
# reproduce (ins_fevents.h) are compared like the others, and its
# trace_info must call them exact.
IO_FTRACE_ANALYSIS="'task_state_invalid', 'sched_switch_out_of_order',
    'sched_waking_out_of_order'"
IO_STATS_WHERE="where (value != 0 or name like 'traced_%')
    and name not in ('guess_trace_type_duration_ns',
    'parse_trace_duration_ns', 'clock_sync_cache_miss',
    $IO_FTRACE_ANALYSIS)
    order by name, idx"
io_stats_match() {
    io_have_tp || return 0
    local db="$E2E_DIR/stats.db"
    rm -f "$db"
    "$INSPECT" -q "$1" -o "$db" >/dev/null 2>"$E2E_DIR/inspect.log" ||
        e2e_fail "shmtrace-inspect $1: $(cat "$E2E_DIR/inspect.log")"
    sqlite3 -csv "$db" "select name, coalesce(idx, ''), severity, source,
        value from stats $IO_STATS_WHERE" | tr -d '"' >"$E2E_DIR/ins.csv"
    "$P_TP" -Q "select name, coalesce(idx, ''), severity, source, value
        from stats $IO_STATS_WHERE" "$1" 2>"$E2E_DIR/tp.log" |
        tail -n +2 | tr -d '"' >"$E2E_DIR/tp.csv" ||
        e2e_fail "trace processor cannot load $1"
    [ -s "$E2E_DIR/tp.csv" ] || e2e_fail "trace processor gave no stats for $1"
    "$P_TP" -Q "select name, value from stats where value != 0 and name in
        ($IO_FTRACE_ANALYSIS)" "$1" 2>/dev/null | tail -n +2 | tr -d '"' |
        while read -r row; do
            echo "NOTE: $1: trace processor's ftrace analysis row $row" \
                 "(not reproduced by the inspector)"
        done
    if ! diff "$E2E_DIR/ins.csv" "$E2E_DIR/tp.csv" >"$E2E_DIR/stats.diff"; then
        echo "stats differ for $1 (< inspector, > trace processor):" >&2
        cat "$E2E_DIR/stats.diff" >&2
        e2e_fail "inspector and trace processor disagree on $1's stats"
    fi
    local fa
    fa=$(sqlite3 "$db" "select value from trace_info where key =
        'ftrace_analysis'")
    [ -z "$fa" ] || [ "$fa" = exact ] ||
        e2e_fail "the inspector's ftrace analysis of $1 is not exact: $fa"
    IO_STATS_CHECKED=$((${IO_STATS_CHECKED:-0} + 1))
}
