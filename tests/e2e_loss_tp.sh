#!/bin/sh
# e2e_loss_tp.sh - the exact loss counts we add to the trace
# (TraceStats.shmtrace_sequence_loss, field 6000) are ignored harmlessly by
# Perfetto's trace processor: a trace with a wrapped ring (so the field is
# filled) loads in trace_processor_shell with no `error` stat, and its
# stats agree with ours on what the buffer overwrote. Needs Perfetto's
# binaries ($PERFETTO_BIN, else ../shared/perfetto/bin): skipped without.
. "${top_srcdir:-.}/tests/e2e_lib.sh"
e2e_need_tools "$TRACECHECK"
TP="${PERFETTO_BIN:-$top_srcdir/../shared/perfetto/bin}/trace_processor_shell"
if [ ! -x "$TP" ]; then
    echo "SKIP: $TP not found (set PERFETTO_BIN)" >&2
    exit 77
fi
if ! "$TP" --version >/dev/null 2>&1; then
    echo "SKIP: $TP does not run here (Debian libprotobuf32 missing?)" >&2
    exit 77
fi

e2e_start_daemon
e2e_spawn producer "$PRODUCER" -t 2 -c 20000 -r 20000 -S 200 \
    --policy stall --once
e2e_wait_registered 1
"$CLI" record -q -o "$E2E_DIR/trace" -t 2s -b 256k >"$E2E_DIR/cli.log" 2>&1 ||
    e2e_fail "shmtrace record failed"
e2e_check "$E2E_DIR/trace" --require-stats --conservation
[ "$(e2e_value stats_lost_packets)" -gt 0 ] ||
    e2e_fail "the ring did not wrap: nothing to check"
grep -q "shmtrace: lost .* packets (.*%): .* overwritten in the ring" \
    "$E2E_DIR/cli.log" || e2e_fail "shmtrace record did not print the loss"

"$TP" -Q "select name, idx, value from stats where (severity = 'error' and value > 0) or name = 'traced_buf_chunks_overwritten'" \
    "$E2E_DIR/trace" >"$E2E_DIR/tp.out" 2>"$E2E_DIR/tp.log" ||
    e2e_fail "trace_processor_shell failed: $(tail -3 "$E2E_DIR/tp.log")"
if grep -v -e traced_buf_chunks_overwritten -e '^"name"' "$E2E_DIR/tp.out" |
    grep -q '^"'; then
    e2e_fail "trace processor reports errors: $(cat "$E2E_DIR/tp.out")"
fi
tp_over=$(sed -n 's/^"traced_buf_chunks_overwritten",0,//p' "$E2E_DIR/tp.out")
[ "$tp_over" = "$(e2e_value stats_chunks_overwritten)" ] ||
    e2e_fail "trace processor read chunks_overwritten=$tp_over," \
             "we wrote $(e2e_value stats_chunks_overwritten)"
e2e_stop_daemon
echo "ok"
