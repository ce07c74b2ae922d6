#!/bin/sh
# e2e_perfetto_triggers.sh - trigger_config against shmtraced, driven by
# Perfetto's own `perfetto` command and `tracebox trigger_perfetto NAME`
# (ActivateTriggers on the producer port), with shmtrace-producer writing:
#   STOP_TRACING    the trigger ends a session whose timeout is 10 min, and
#                   the trace holds the `trigger` packet;
#   (consumer side) a `perfetto` config with activate_triggers does the same;
#   CLONE_SNAPSHOT  each trigger makes perfetto write OUT.N (clone with the
#                   clone_snapshot_trigger packet) while the session goes on;
#   START_TRACING   nothing is traced until the trigger, then stop_delay_ms;
#   no trigger      a STOP_TRACING session times out with an empty trace.
. "${top_srcdir:-.}/tests/features/feat_lib.sh"
e2e_need_tools "$DUMP" "$CONSUMER"
feat_need_perfetto

e2e_start_daemon
e2e_spawn producer "$PRODUCER" -r 300 -q
e2e_wait_registered 1
D=$E2E_DIR

# ---- STOP_TRACING via tracebox trigger_perfetto
cat >"$D/stop.txt" <<CFG
buffers { size_kb: 4096 fill_policy: RING_BUFFER }
data_sources { config { name: "shmtrace.synthetic" } }
trigger_config {
  trigger_mode: STOP_TRACING
  trigger_timeout_ms: 600000
  triggers { name: "stop_now" stop_delay_ms: 300 }
}
CFG
e2e_spawn perfetto_stop "$PERFETTO" --txt -c "$D/stop.txt" -o "$D/stop.pftrace"
PF=$E2E_LAST_PID
feat_wait_sessions 1
"$TRACEBOX" trigger_perfetto stop_now >"$D/trig.log" 2>&1 ||
    e2e_fail "trigger_perfetto failed"
e2e_wait_pid "$PF" 120 || e2e_fail "STOP_TRACING trigger did not end the session"
[ "$E2E_RC" = 0 ] || e2e_fail "perfetto exited $E2E_RC"
"$DUMP" "$D/stop.pftrace" >"$D/stop.dump" || e2e_fail "stop trace unreadable"
grep -q "^trigger stop_now perfetto_cmd_producer [0-9-]* 300 [1-9]" \
    "$D/stop.dump" || e2e_fail "no trigger packet: $(cat "$D/stop.dump")"
n=$(sed -n 's/^test_packets //p' "$D/stop.dump")
[ "${n:-0}" -gt 0 ] || e2e_fail "STOP_TRACING trace has no data"
e2e_check "$D/stop.pftrace" --require-stats >/dev/null

# ---- the same, the trigger sent by a consumer config (activate_triggers)
e2e_spawn perfetto_stop2 "$PERFETTO" --txt -c "$D/stop.txt" -o "$D/stop2.pftrace"
PF=$E2E_LAST_PID
feat_wait_sessions 1
printf 'activate_triggers: "stop_now"\n' >"$D/act.txt"
"$PERFETTO" --txt -c "$D/act.txt" >"$D/act.log" 2>&1 ||
    e2e_fail "perfetto activate_triggers failed"
e2e_wait_pid "$PF" 120 || e2e_fail "activate_triggers did not end the session"
"$DUMP" "$D/stop2.pftrace" | grep -q "^trigger stop_now " ||
    e2e_fail "no trigger packet from activate_triggers"

# ---- CLONE_SNAPSHOT: two snapshots while the session continues
cat >"$D/clone.txt" <<CFG
buffers { size_kb: 8192 fill_policy: RING_BUFFER }
data_sources { config { name: "shmtrace.synthetic" } }
trigger_config {
  trigger_mode: CLONE_SNAPSHOT
  trigger_timeout_ms: 600000
  triggers { name: "snap" stop_delay_ms: 50 }
}
CFG
e2e_spawn perfetto_clone "$PERFETTO" --txt -c "$D/clone.txt" -o "$D/snap"
PF=$E2E_LAST_PID
feat_wait_sessions 1
# 0.6 s at 300 packets/s: ~180 packets over several 4 KiB chunks, and the
# last chunk the producer handed back (cut inside a packet) waits for its
# patches, which come with the producer's next commit. The service flushes
# the producers before it clones, as Perfetto does; without that flush the
# snapshot stopped at the first cut packet (48 packets) and did not grow.
sleep 0.6
"$TRACEBOX" trigger_perfetto snap >>"$D/trig.log" 2>&1 || e2e_fail "trigger failed"
feat_wait_log "$D/perfetto_clone.log" "Wrote .*/snap\.0" 60 ||
    e2e_fail "no snapshot after a CLONE_SNAPSHOT trigger"
"$TRACEBOX" trigger_perfetto snap >>"$D/trig.log" 2>&1 || e2e_fail "trigger failed"
feat_wait_log "$D/perfetto_clone.log" "Wrote .*/snap\.1" 60 ||
    e2e_fail "no second snapshot: the session did not continue"
for k in 0 1; do
    "$DUMP" "$D/snap.$k" >"$D/snap$k.dump" || e2e_fail "snap.$k unreadable"
    grep -q "^clone_trigger snap perfetto_cmd_producer [0-9-]* 50 " \
        "$D/snap$k.dump" || e2e_fail "snap.$k lacks clone_snapshot_trigger"
    [ "$(grep -c '^trigger snap ' "$D/snap$k.dump")" = 1 ] ||
        e2e_fail "snap.$k should hold exactly its own trigger"
    e2e_check "$D/snap.$k" >/dev/null
done
n0=$(sed -n 's/^test_packets //p' "$D/snap0.dump")
n1=$(sed -n 's/^test_packets //p' "$D/snap1.dump")
[ "${n0:-0}" -ge 100 ] ||
    e2e_fail "the first snapshot should hold the ~180 packets written" \
        "before it ($n0): the flush before the clone is missing"
[ "${n1:-0}" -gt "$n0" ] ||
    e2e_fail "snapshots should grow while tracing continues ($n0, $n1)"
# The snapshot's clone stats as trace processor reads them, and the
# inspector agrees (when both can run here).
TP="$PBIN/trace_processor_shell"
INSPECT="$top_builddir/inspector/shmtrace-inspect"
if "$TP" -Q "select 1" "$D/snap.0" >/dev/null 2>&1 &&
   command -v sqlite3 >/dev/null && [ -x "$INSPECT" ]; then
    "$INSPECT" "$D/snap.0" -o "$D/snap0.db" >/dev/null 2>&1 ||
        e2e_fail "inspector failed on snap.0"
    for st in traced_clone_trigger_timestamp_ns \
              traced_clone_started_timestamp_ns \
              traced_buf_clone_done_timestamp_ns; do
        q="select value from stats where name = '$st'"
        tp=$("$TP" -Q "$q" "$D/snap.0" 2>/dev/null | tail -n 1)
        ins=$(sqlite3 "$D/snap0.db" "$q")
        [ -n "$tp" ] && [ "$tp" != 0 ] || e2e_fail "trace processor: $st = '$tp'"
        [ "$tp" = "$ins" ] || e2e_fail "$st: inspector $ins, trace processor $tp"
    done
fi
kill -INT "$PF"
e2e_wait_pid "$PF" 60 || e2e_fail "perfetto did not stop on SIGINT"
# The session itself returns nothing: only its clones do.
[ ! -s "$D/snap" ] || e2e_fail "a CLONE_SNAPSHOT session wrote its own trace"

# ---- START_TRACING: idle until the trigger
cat >"$D/start.txt" <<CFG
buffers { size_kb: 4096 fill_policy: RING_BUFFER }
data_sources { config { name: "shmtrace.synthetic" } }
trigger_config {
  trigger_mode: START_TRACING
  trigger_timeout_ms: 600000
  triggers { name: "go" stop_delay_ms: 400 producer_name_regex: "perfetto.*" }
}
CFG
before=$(grep -c "instance .* started" "$D/producer.log")
e2e_spawn perfetto_start "$PERFETTO" --txt -c "$D/start.txt" -o "$D/start.pftrace"
PF=$E2E_LAST_PID
feat_wait_sessions 1
sleep 0.3
[ "$(grep -c "instance .* started" "$D/producer.log")" = "$before" ] ||
    e2e_fail "START_TRACING started the data source before the trigger"
"$TRACEBOX" trigger_perfetto go >>"$D/trig.log" 2>&1 || e2e_fail "trigger failed"
e2e_wait_pid "$PF" 120 || e2e_fail "START_TRACING session did not end"
"$DUMP" "$D/start.pftrace" >"$D/start.dump"
grep -q "^trigger go perfetto_cmd_producer [0-9-]* 400 " "$D/start.dump" ||
    e2e_fail "no trigger packet in the START_TRACING trace"
n=$(sed -n 's/^test_packets //p' "$D/start.dump")
[ "${n:-0}" -gt 0 ] || e2e_fail "START_TRACING traced nothing after the trigger"

# ---- no trigger: STOP_TRACING times out, nothing returned
sed 's/trigger_timeout_ms: 600000/trigger_timeout_ms: 500/' "$D/stop.txt" \
    >"$D/timeout.txt"
"$PERFETTO" --txt -c "$D/timeout.txt" -o "$D/timeout.pftrace" \
    >"$D/timeout.log" 2>&1 || e2e_fail "perfetto failed on a timed-out session"
[ ! -s "$D/timeout.pftrace" ] ||
    e2e_fail "a session that never got its trigger returned data"

e2e_stop_daemon
echo "ok"
