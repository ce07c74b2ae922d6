#!/bin/sh
# io_probes_to_shmtraced.sh - Perfetto's traced_probes as a producer of
# shmtraced, recorded by Perfetto's `perfetto`: linux.process_stats and
# linux.sys_stats always, linux.ftrace (sched_switch) where tracefs is
# mounted and writable. Content: the process tree lists a marker process
# we started, with its command line; sys_stats carries meminfo counters;
# process_stats packets arrive; with tracefs, sched_switch records and the
# print events we write to trace_marker arrive in ftrace bundles; trace
# processor sees the marker too, finds no `error` stat and the same stats
# as the inspector.
. "$top_srcdir/tests/interop/io_lib.sh"
e2e_need_tools "$SHMTRACED" "$IO_CHECK" "$INSPECT"
[ -x "$P_PROBES" ] || { echo "SKIP: no traced_probes in $PERFETTO_BIN" >&2; exit 77; }

MARK="io_marker_$$"
ln -s "$(command -v sleep)" "$E2E_DIR/$MARK" || exit 99
e2e_spawn marker "$E2E_DIR/$MARK" 120

io_start_shmtraced
e2e_spawn probes "$P_PROBES"
PROBES=$E2E_LAST_PID
io_wait_ds linux.process_stats linux.sys_stats

# Ftrace in a private tracefs instance (other programs on the machine may
# use the global one), removed at exit.
FTRACE=""
INSTANCE="shmtrace_io_$$"
for t in /sys/kernel/tracing /sys/kernel/debug/tracing; do
    if [ -w "$t/tracing_on" ] && [ -d "$t/events/sched/sched_switch" ] &&
       mkdir "$t/instances/$INSTANCE" 2>/dev/null; then
        FTRACE=$t/instances/$INSTANCE
        break
    fi
done
io_cleanup() {
    e2e_cleanup
    [ -n "$FTRACE" ] && rmdir "$FTRACE" 2>/dev/null
}
trap io_cleanup EXIT
cat >"$E2E_DIR/probes.pbtxt" <<CFG
buffers { size_kb: 16384 fill_policy: RING_BUFFER }
data_sources { config { name: "linux.process_stats"
  process_stats_config { scan_all_processes_on_start: true
    proc_stats_poll_ms: 500 } } }
data_sources { config { name: "linux.sys_stats"
  sys_stats_config { meminfo_period_ms: 250 stat_period_ms: 250
    stat_counters: STAT_CPU_TIMES vmstat_period_ms: 250 } } }
duration_ms: 2000
CFG
if [ -n "$FTRACE" ]; then
    cat >>"$E2E_DIR/probes.pbtxt" <<CFG
data_sources { config { name: "linux.ftrace"
  ftrace_config { ftrace_events: "sched/sched_switch"
    ftrace_events: "ftrace/print" instance_name: "$INSTANCE" } } }
CFG
    echo "tracefs instance $FTRACE: linux.ftrace included"
else
    echo "note: no writable tracefs here, linux.ftrace not exercised"
fi
if [ -n "$FTRACE" ]; then
    # Our own ftrace print events while it records, in atrace's counter
    # format (trace processor parses prints as atrace: C|pid|name|value).
    (n=0; while :; do n=$((n + 1))
        echo "C|$$|$MARK|$n" >"$FTRACE/trace_marker"; sleep 0.1; done) \
        2>/dev/null &
    E2E_PIDS="$E2E_PIDS $!"
    PRINTER=$!
fi
io_perfetto_record "$E2E_DIR/probes.pbtxt" "$E2E_DIR/probes.pftrace"
[ -n "$FTRACE" ] && kill "$PRINTER" 2>/dev/null
io_check "$E2E_DIR/probes.pftrace" --cmdline "$MARK" --find "$MARK"
io_expect kind.2 -ge 1 "process_tree packets"
io_expect proc_count -ge 3 "processes listed"
io_expect proc_found -eq 1 "our marker process in the process tree"
io_expect kind.9 -ge 1 "process_stats packets"
io_expect kind.7 -ge 2 "sys_stats packets"
io_expect meminfo -ge 1 "meminfo counters"
if [ -n "$FTRACE" ]; then
    # sched_switch comes as compact_sched unless compact_sched is off;
    # print events (ours, written to trace_marker) as FtraceEvent.
    io_expect kind.1 -ge 1 "ftrace bundles"
    io_expect ftrace_compact -ge 1 "sched_switch (compact_sched) records"
    io_expect ftrace_events -ge 1 "ftrace events"
    # The marker shows in the process tree and in our print events.
    io_expect found -ge 2 "our trace_marker prints in the ftrace bundles"
fi
echo "traced_probes: $(io_value proc_count) processes, $(io_value meminfo)" \
     "meminfo values, $(io_value kind.7) sys_stats packets"
if io_have_tp; then
    n=$("$P_TP" -Q "select count(*) from process where cmdline like
        '%$MARK%'" "$E2E_DIR/probes.pftrace" 2>/dev/null | tail -n 1)
    [ "${n:-0}" -ge 1 ] || e2e_fail "trace processor does not see the marker"
    if [ -n "$FTRACE" ]; then
        # Ftrace data recorded through shmtraced is not dropped as "before
        # tracing started" (service events stamped when they happen), and
        # our counter and the scheduler slices are there.
        n=$("$P_TP" -Q "select count(*) from counter join counter_track t
            on counter.track_id = t.id where t.name = '$MARK'" \
            "$E2E_DIR/probes.pftrace" 2>/dev/null | tail -n 1)
        [ "${n:-0}" -ge 2 ] ||
            e2e_fail "trace processor sees ${n:-0} of our trace_marker counters"
        n=$("$P_TP" -Q "select count(*) from sched" \
            "$E2E_DIR/probes.pftrace" 2>/dev/null | tail -n 1)
        [ "${n:-0}" -ge 10 ] ||
            e2e_fail "trace processor sees ${n:-0} sched slices"
    fi
fi
io_no_error_stats "$E2E_DIR/probes.pftrace"
io_stats_match "$E2E_DIR/probes.pftrace"

io_stop "$PROBES"
e2e_stop_daemon
echo "PASS: traced_probes through shmtraced"
