#!/bin/sh
# e2e_flush_scrape.sh - a producer that never answers a flush (SIGSTOPped):
# the flush fails after flush_timeout_ms, the service scrapes its SMB and
# recovers the packets still sitting in its uncommitted chunk.
. "${top_srcdir:-.}/tests/e2e_lib.sh"
e2e_need_tools

COUNT=1000
e2e_start_daemon
e2e_spawn producer "$PRODUCER" -t 1 -c $COUNT -S 100 --policy stall --once
PROD=$E2E_LAST_PID
e2e_wait_registered 1
e2e_spawn consumer "$CONSUMER" record --out "$E2E_DIR/trace" \
    --duration-ms 2000 --flush-timeout-ms 300 --buffer-kb 4096
CONS=$E2E_LAST_PID
sleep 1                     # the producer writes its packets, then idles
kill -STOP "$PROD"          # ... and will never answer the final flush
e2e_wait_ok "$CONS" 20 consumer
kill -CONT "$PROD"
# The last packet of a chunk still being written is not trusted (its
# fragment may be incomplete): all but that one must have been recovered.
e2e_check "$E2E_DIR/trace" --require-stats --expect-sequences 1 \
    --min-total $((COUNT - 1))
[ "$(e2e_value stats_flushes_failed)" -ge 1 ] || e2e_fail "flush did not fail"
e2e_stop_daemon
echo "ok"
