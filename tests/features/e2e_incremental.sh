#!/bin/sh
# e2e_incremental.sh - incremental_state_config.clear_period_ms against
# shmtraced, recorded with Perfetto's `perfetto`:
#   refgen (Perfetto's C SDK): its track_event sequences re-emit their
#     incremental state (a packet with SEQ_INCREMENTAL_STATE_CLEARED) after
#     every ClearIncrementalState, and only once without the config;
#   shmtrace-producer --incremental into a ring buffer that wraps: the
#     packets that need state and lost it are skipped, and the inspector's
#     packet_skipped_seq_needs_incremental_state_invalid equals trace
#     processor's; without clearing every packet would be skipped.
. "${top_srcdir:-.}/tests/features/feat_lib.sh"
e2e_need_tools "$DUMP" "$CONSUMER" "$top_builddir/inspector/shmtrace-inspect"
feat_need_perfetto refgen trace_processor_shell
command -v sqlite3 >/dev/null || { echo "SKIP: sqlite3 not installed" >&2; exit 77; }
TP="$PBIN/trace_processor_shell"
"$TP" -Q "select 1" /dev/null >/dev/null 2>&1 || [ $? -ne 127 ] ||
    { echo "SKIP: trace_processor_shell cannot run (libprotobuf32?)" >&2; exit 77; }
INSPECT="$top_builddir/inspector/shmtrace-inspect"
D=$E2E_DIR

e2e_start_daemon
e2e_spawn refgen env REFGEN_PERIOD_US=2000 "$PBIN/refgen"
RG=$E2E_LAST_PID
e2e_wait_registered 2

# ---- refgen: with and without clear_period_ms
for mode in clear base; do
    {
        echo 'buffers { size_kb: 8192 fill_policy: RING_BUFFER }'
        echo 'data_sources { config { name: "track_event"'
        echo '  track_event_config { enabled_categories: "refgen" } } }'
        echo 'duration_ms: 2500'
        [ $mode = clear ] &&
            echo 'incremental_state_config { clear_period_ms: 100 }'
    } >"$D/$mode.txt"
    "$PERFETTO" --txt -c "$D/$mode.txt" -o "$D/$mode.pftrace" \
        >"$D/perfetto_$mode.log" 2>&1 || e2e_fail "perfetto ($mode) failed"
    "$DUMP" "$D/$mode.pftrace" >"$D/$mode.dump" || e2e_fail "$mode unreadable"
done
# refgen writes from two threads: two track_event sequences.
nseq=$(awk '$1 == "cleared" && $3 >= 3' "$D/clear.dump" | wc -l)
[ "$nseq" -ge 2 ] ||
    e2e_fail "refgen's sequences did not re-emit state: $(cat "$D/clear.dump")"
more=$(awk '$1 == "cleared" && $3 > 1' "$D/base.dump" | wc -l)
[ "$more" = 0 ] ||
    e2e_fail "state re-emitted without clear_period_ms: $(cat "$D/base.dump")"
kill -TERM "$RG"
e2e_wait_pid "$RG" 30

# ---- a wrapping ring buffer, packets that need incremental state
e2e_spawn producer "$PRODUCER" -r 500 -S 200 -t 2 --incremental -q
e2e_wait_registered 1
cat >"$D/ring.txt" <<CFG
buffers { size_kb: 256 fill_policy: RING_BUFFER }
data_sources { config { name: "shmtrace.synthetic" } }
duration_ms: 3000
incremental_state_config { clear_period_ms: 200 }
CFG
"$PERFETTO" --txt -c "$D/ring.txt" -o "$D/ring.pftrace" \
    >"$D/perfetto_ring.log" 2>&1 || e2e_fail "perfetto (ring) failed"
"$DUMP" "$D/ring.pftrace" >"$D/ring.dump"
cleared=$(awk '$1 == "cleared" { s += $3 } END { print s + 0 }' "$D/ring.dump")
needs=$(awk '$1 == "needs" { s += $3 } END { print s + 0 }' "$D/ring.dump")
[ "$cleared" -ge 2 ] || e2e_fail "no cleared packets in the ring: $cleared"
"$INSPECT" "$D/ring.pftrace" -o "$D/ring.db" >"$D/inspect.log" 2>&1 ||
    e2e_fail "inspector failed"
q="select value from stats where name = 'packet_skipped_seq_needs_incremental_state_invalid'"
ours=$(sqlite3 "$D/ring.db" "$q")
theirs=$("$TP" -Q "$q" "$D/ring.pftrace" 2>/dev/null | tail -n 1)
[ -n "$theirs" ] || e2e_fail "trace processor gave no answer"
[ "$ours" = "$theirs" ] ||
    e2e_fail "inspector says $ours skipped packets, trace processor $theirs"
[ "$theirs" -lt "$needs" ] ||
    e2e_fail "clearing saved nothing: $theirs of $needs packets skipped"
echo "ring: $needs packets need state, $cleared cleared, $theirs skipped"

e2e_stop_daemon
echo "ok"
