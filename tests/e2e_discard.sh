#!/bin/sh
# e2e_discard.sh - a DISCARD buffer that fills: the beginning of every
# sequence is kept intact (starts at seq_value 0, no gap), later chunks are
# discarded and counted (buffer chunks_discarded).
. "${top_srcdir:-.}/tests/e2e_lib.sh"
e2e_need_tools

e2e_start_daemon
e2e_spawn producer0 "$PRODUCER" -t 2 -c 5000 -r 2000 -S 200 --policy stall \
    --once
e2e_wait_registered 1
"$CONSUMER" record --out "$E2E_DIR/trace" --duration-ms 3000 \
    --buffer-kb 256 --fill discard >"$E2E_DIR/consumer.log" 2>&1 ||
    e2e_fail "consumer failed"
e2e_check "$E2E_DIR/trace" --require-stats --require-loss --verbose \
    --expect-sequences 2 --per-sequence 5000 --conservation
[ "$(e2e_value stats_buf_chunks_discarded)" -gt 0 ] ||
    e2e_fail "no chunk discarded"
[ "$(e2e_value gaps_flagged)" = 0 ] || e2e_fail "DISCARD keeps a prefix"
grep -q "first=0 " "$E2E_DIR/check.out" || e2e_fail "prefix does not start at 0"
if grep "^seq " "$E2E_DIR/check.out" | grep -vq "first=0 "; then
    e2e_fail "a sequence does not start at 0"
fi
e2e_stop_daemon
echo "ok"
