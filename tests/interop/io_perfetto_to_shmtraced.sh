#!/bin/sh
# io_perfetto_to_shmtraced.sh - Perfetto's producers and consumer through
# shmtraced (recording, --clone-by-name, --query, --background-wait): refgen (C SDK: track_event slices + for_testing packets) and
# the SDK examples write, Perfetto's `perfetto` records. Checked on
# content: both refgen writers' seq_values contiguous with counter and str
# as written, every slice begun ended (one instant inside each), no loss
# flagged or counted, no `error` stat, and the inspector's stats equal to
# trace processor's.
. "$top_srcdir/tests/interop/io_lib.sh"
e2e_need_tools "$SHMTRACED" "$IO_CHECK" "$INSPECT"

io_start_shmtraced
REFGEN_PERIOD_US=500 e2e_spawn refgen "$P_REFGEN"
REFGEN=$E2E_LAST_PID
io_wait_ds track_event dev.refgen.test_packets

cat >"$E2E_DIR/refgen.pbtxt" <<CFG
buffers { size_kb: 16384 fill_policy: RING_BUFFER }
data_sources { config { name: "track_event"
  track_event_config { enabled_categories: "refgen" } } }
data_sources { config { name: "dev.refgen.test_packets" } }
duration_ms: 3000
unique_session_name: "io_refgen"
CFG
# While it records, perfetto --clone-by-name snapshots it (CloneSession).
"$P_PERFETTO" --txt -c "$E2E_DIR/refgen.pbtxt" -o "$E2E_DIR/refgen.pftrace" \
    >>"$E2E_DIR/perfetto.log" 2>&1 &
PMAIN=$!
E2E_PIDS="$E2E_PIDS $PMAIN"
i=0
until "$P_PERFETTO" --query-raw 2>/dev/null | grep -aq io_refgen; do
    i=$((i + 1))
    [ $i -gt 200 ] && e2e_fail "the session never showed in perfetto --query"
    sleep 0.05
done
sleep 1
"$P_PERFETTO" --clone-by-name io_refgen -o "$E2E_DIR/clone.pftrace" \
    >>"$E2E_DIR/perfetto.log" 2>&1 || e2e_fail "perfetto --clone-by-name failed"
e2e_wait_pid "$PMAIN" 60 || e2e_fail "perfetto did not finish"
[ "$E2E_RC" -eq 0 ] || e2e_fail "perfetto exit status $E2E_RC"
io_refgen_content "$E2E_DIR/clone.pftrace" "perfetto --clone-by-name"
io_no_error_stats "$E2E_DIR/clone.pftrace"
io_stats_match "$E2E_DIR/clone.pftrace"
io_refgen_content "$E2E_DIR/refgen.pftrace" "perfetto+refgen via shmtraced"
io_expect flagged -eq 0 "perfetto+refgen via shmtraced"
io_expect kind.33 -eq 1 "trace_config packet"
io_expect kind.35 -ge 1 "trace_stats packet"
echo "refgen: $(io_value test_packets) test packets, $(io_value te_begin) slices"
io_no_error_stats "$E2E_DIR/refgen.pftrace"
io_no_loss "$E2E_DIR/refgen.pftrace"
# The service events are stamped when they happened: tracing started
# before the first slice, was disabled after the last (trace processor
# drops ftrace data older than tracing_started_ns); all data sources
# started (refgen's ack their start: NotifyDataSourceStarted) at or after
# tracing started, and none was slow to.
if io_have_tp; then
    ok=$("$P_TP" -Q "select (select int_value from metadata where name =
        'tracing_started_ns') <= (select min(ts) from slice) and
        (select int_value from metadata where name = 'tracing_disabled_ns')
        >= (select max(ts) from slice) and
        (select int_value from metadata where name =
        'all_data_source_started_ns') >= (select int_value from metadata
        where name = 'tracing_started_ns') and
        (select count(*) from metadata where name =
        'slow_start_data_source') = 0" "$E2E_DIR/refgen.pftrace" \
        2>/dev/null | tail -n 1)
    [ "$ok" = 1 ] || e2e_fail "service events not stamped when they happened"
fi
io_stats_match "$E2E_DIR/refgen.pftrace"
n=$(sqlite3 "$E2E_DIR/stats.db" "select count(*) from stats where
    severity = 'data_loss' and value != 0" 2>/dev/null || echo 0)
[ "${n:-0}" -eq 0 ] || e2e_fail "data loss counted in a 16 MiB buffer"
# perfetto --background-wait returns once every data source started
# (ObserveEvents ALL_DATA_SOURCES_STARTED), while its child still records
# (a 60 s session: only a service that never answers lets it run out);
# SIGTERM to the child ends the session and writes the trace.
sed -e 's/duration_ms: 3000/duration_ms: 60000/' \
    -e 's/io_refgen/io_bgwait/' "$E2E_DIR/refgen.pbtxt" >"$E2E_DIR/bg.pbtxt"
BGPID=$("$P_PERFETTO" --txt -c "$E2E_DIR/bg.pbtxt" -o "$E2E_DIR/bg.pftrace" \
    --background-wait 2>>"$E2E_DIR/perfetto.log") ||
    e2e_fail "perfetto --background-wait failed"
case "$BGPID" in ''|*[!0-9]*) e2e_fail "--background-wait printed '$BGPID'" ;; esac
E2E_PIDS="$E2E_PIDS $BGPID"
kill -0 "$BGPID" 2>/dev/null ||
    e2e_fail "perfetto --background-wait returned only when tracing ended"
sleep 0.5
kill -TERM "$BGPID"
i=0
while kill -0 "$BGPID" 2>/dev/null; do
    i=$((i + 1))
    [ $i -gt 600 ] && e2e_fail "background perfetto did not stop on SIGTERM"
    sleep 0.05
done
io_refgen_content "$E2E_DIR/bg.pftrace" "perfetto --background-wait"
io_trace_ok "$E2E_DIR/bg.pftrace"

io_stop "$REFGEN"
[ "$E2E_RC" -eq 0 ] || e2e_fail "refgen exit status $E2E_RC"

# A producer that names no SMB size gets 1/64 of the buffers of the session
# that sets its SMB up, from 256 KiB up to 2 MiB (service/svc_commit.c), and
# from 2 MiB on 32 KiB pages: a fresh refgen whose first session holds
# 128 MiB maps a 2 MiB SMB, and its data comes through the SDK's writers on
# those pages intact.
REFGEN_PERIOD_US=200 e2e_spawn refgen_big "$P_REFGEN"
REFGEN=$E2E_LAST_PID
io_wait_ds dev.refgen.test_packets
sed -e 's/size_kb: 16384/size_kb: 131072/' \
    -e 's/duration_ms: 3000/duration_ms: 1500/' \
    -e 's/io_refgen/io_bigsmb/' "$E2E_DIR/refgen.pbtxt" >"$E2E_DIR/big.pbtxt"
"$P_PERFETTO" --txt -c "$E2E_DIR/big.pbtxt" -o "$E2E_DIR/big.pftrace" \
    >>"$E2E_DIR/perfetto.log" 2>&1 &
PMAIN=$!
E2E_PIDS="$E2E_PIDS $PMAIN"
sleep 0.7
smb=0
while read -r range _ _ _ _ path; do
    case "$path" in
    *shmtrace_smb*)
        kb=$(( (0x${range#*-} - 0x${range%-*}) / 1024 ))
        [ "$kb" -gt "$smb" ] && smb=$kb ;;
    esac
done <"/proc/$REFGEN/maps"
e2e_wait_pid "$PMAIN" 60 || e2e_fail "perfetto did not finish"
[ "$E2E_RC" -eq 0 ] || e2e_fail "perfetto exit status $E2E_RC"
[ "$smb" = 2048 ] ||
    e2e_fail "refgen's SMB in a 128 MiB session: $smb KiB, want 2048"
io_refgen_content "$E2E_DIR/big.pftrace" "refgen on a 2 MiB SMB"
io_expect flagged -eq 0 "refgen on a 2 MiB SMB"
io_no_loss "$E2E_DIR/big.pftrace"
io_stop "$REFGEN"
[ "$E2E_RC" -eq 0 ] || e2e_fail "refgen exit status $E2E_RC"
echo "refgen on a 2 MiB SMB: $(io_value test_packets) test packets"

# The SDK examples (track_event with every category, a custom data source).
if [ -x "$PERFETTO_BIN/example_shlib_track_event" ] &&
   [ -x "$PERFETTO_BIN/example_shlib_data_source" ]; then
    e2e_spawn ex_te "$PERFETTO_BIN/example_shlib_track_event"
    EX1=$E2E_LAST_PID
    e2e_spawn ex_ds "$PERFETTO_BIN/example_shlib_data_source"
    EX2=$E2E_LAST_PID
    io_wait_ds track_event com.example.custom_data_source
    cat >"$E2E_DIR/examples.pbtxt" <<CFG
buffers { size_kb: 4096 }
data_sources { config { name: "track_event"
  track_event_config { enabled_categories: "*" } } }
data_sources { config { name: "com.example.custom_data_source" } }
duration_ms: 2500
CFG
    io_perfetto_record "$E2E_DIR/examples.pbtxt" "$E2E_DIR/examples.pftrace"
    io_check "$E2E_DIR/examples.pftrace"
    io_expect kind.900 -ge 1 "example_shlib_data_source packets"
    io_expect kind.11 -ge 1 "example_shlib_track_event events"
    io_expect te_unmatched_end -eq 0 "example slices"
    io_expect flagged -eq 0 "examples"
    io_no_error_stats "$E2E_DIR/examples.pftrace"
    io_stats_match "$E2E_DIR/examples.pftrace"
    kill -TERM "$EX1" "$EX2" 2>/dev/null
else
    echo "note: SDK examples not in $PERFETTO_BIN, skipped that part"
fi

e2e_stop_daemon
echo "PASS: Perfetto's perfetto, refgen and SDK examples through shmtraced" \
     "(${IO_STATS_CHECKED:-0} traces' stats compared with trace processor)"
