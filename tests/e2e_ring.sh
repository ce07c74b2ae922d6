#!/bin/sh
# e2e_ring.sh - a RING_BUFFER much smaller than what the producers write:
# the buffer wraps, the oldest data is overwritten, and every loss shows as
# previous_packet_dropped on the next packet read of its sequence (no
# silent gap) and in the stats (write_wrap_count, chunks_overwritten).
# The writers run until the session stops, so every sequence is still
# present in the last lap of the buffer.
. "${top_srcdir:-.}/tests/e2e_lib.sh"
e2e_need_tools

e2e_start_daemon
e2e_spawn producer0 "$PRODUCER" -t 2 -r 10000 -S 200 --policy stall --once
e2e_spawn producer1 "$PRODUCER" -N other -t 1 -r 10000 -S 200 \
    --policy stall --once
e2e_wait_registered 2
"$CONSUMER" record --out "$E2E_DIR/trace" --duration-ms 3000 \
    --buffer-kb 256 --fill ring >"$E2E_DIR/consumer.log" 2>&1 ||
    e2e_fail "consumer failed"
e2e_check "$E2E_DIR/trace" --require-stats --require-loss --expect-sequences 3 \
    --conservation
[ "$(e2e_value stats_lost_packets)" -gt 0 ] || e2e_fail "no lost packet counted"
[ "$(e2e_value stats_write_wrap_count)" -gt 0 ] || e2e_fail "no wrap"
[ "$(e2e_value stats_chunks_overwritten)" -gt 0 ] || e2e_fail "no overwrite"
e2e_stop_daemon
echo "ok"
