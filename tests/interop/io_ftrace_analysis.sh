#!/bin/sh
# io_ftrace_analysis.sh - the inspector's ftrace analysis rows
# (inspector/ins_fevents.h: compact_sched_switch_skipped,
# compact_sched_waking_skipped, ftrace_packet_before_tracing_start, ...)
# equal trace processor's, and are called exact, on traces of Perfetto's
# traced_probes (sched_switch and sched_waking, under load so that every
# cpu schedules) recorded through each service, Perfetto's traced and
# shmtraced:
#   - compact_sched in a 16 MiB ring: one skipped switch per cpu;
#   - compact_sched in a 128 KiB ring that wraps many times: each cpu's
#     data starts wherever the ring kept it, wakings before its first
#     switch are skipped;
#   - compact_sched off: the switches are FtraceEvents, nothing skipped.
# Needs tracefs (a private instance) and trace processor; SKIP otherwise.
. "$top_srcdir/tests/interop/io_lib.sh"
e2e_need_tools "$SHMTRACED" "$INSPECT"
[ -x "$P_PROBES" ] || { echo "SKIP: no traced_probes in $PERFETTO_BIN" >&2; exit 77; }
io_have_tp || { echo "SKIP: trace_processor_shell does not run here" >&2; exit 77; }
command -v sqlite3 >/dev/null || { echo "SKIP: sqlite3 not installed" >&2; exit 77; }

FTRACE=""
INSTANCE="shmtrace_fa_$$"
for t in /sys/kernel/tracing /sys/kernel/debug/tracing; do
    if [ -w "$t/tracing_on" ] && [ -d "$t/events/sched/sched_waking" ] &&
       mkdir "$t/instances/$INSTANCE" 2>/dev/null; then
        FTRACE=$t/instances/$INSTANCE
        break
    fi
done
[ -n "$FTRACE" ] || { echo "SKIP: no writable tracefs with sched_waking" >&2; exit 77; }
io_cleanup() {
    e2e_cleanup
    rmdir "$FTRACE" 2>/dev/null
}
trap io_cleanup EXIT

# config NAME RING_KB COMPACT(true|false)
config() {
    cat >"$E2E_DIR/$1.pbtxt" <<CFG
buffers { size_kb: $2 fill_policy: RING_BUFFER }
data_sources { config { name: "linux.ftrace"
  ftrace_config { ftrace_events: "sched/sched_switch"
    ftrace_events: "sched/sched_waking" instance_name: "$INSTANCE"
    compact_sched { enabled: $3 } } } }
duration_ms: 1500
CFG
}
config big 16384 true
config wrap 128 true
config plain 16384 false

# Load on both cpus while recording: switches and wakings everywhere.
load() {
    timeout 2 sh -c 'while :; do sleep 0; done' &
    timeout 2 sh -c 'while :; do sleep 0; done' &
    wait
}

# run SERVICE: record the three configs through it, compare each.
run() {
    if [ "$1" = traced ]; then io_start_traced; else io_start_shmtraced; fi
    e2e_spawn probes_$1 "$P_PROBES"
    PROBES=$E2E_LAST_PID
    io_wait_ds linux.ftrace
    for c in big wrap plain; do
        load &
        LOAD=$!
        io_perfetto_record "$E2E_DIR/$c.pbtxt" "$E2E_DIR/$1.$c.pftrace"
        wait "$LOAD"
        io_stats_match "$E2E_DIR/$1.$c.pftrace"
        v() { sqlite3 "$E2E_DIR/stats.db" "select sum(value) from stats
            where name = '$1'"; }
        n=$(v compact_sched_switch_skipped)
        echo "$1 $c: switch_skipped=$n waking_skipped=$(v \
            compact_sched_waking_skipped) before_start=$(v \
            ftrace_packet_before_tracing_start) mismatched=$(v \
            mismatched_sched_switch_tids) overwritten=$(v \
            traced_buf_chunks_overwritten)"
        # Not vacuous: compact traces skip a first switch, plain ones none.
        if [ "$c" = plain ]; then
            [ "$n" -eq 0 ] || e2e_fail "$1 $c: $n compact switches skipped"
        else
            [ "$n" -ge 1 ] || e2e_fail "$1 $c: no compact switch skipped"
        fi
    done
    io_stop "$PROBES"
    io_stop "$DAEMON_PID"
    rm -f "$PERFETTO_PRODUCER_SOCK_NAME" "$PERFETTO_CONSUMER_SOCK_NAME"
}
run traced
run shmtraced
[ "${IO_STATS_CHECKED:-0}" -eq 6 ] ||
    e2e_fail "compared ${IO_STATS_CHECKED:-0} traces, not 6"
echo "PASS: the ftrace analysis rows of 6 traces equal trace processor's"
