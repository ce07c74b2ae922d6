#!/bin/sh
# e2e_flush_scrape.sh - a producer that never answers a flush (SIGSTOPped):
# the flush fails after flush_timeout_ms, the service scrapes its SMB and
# recovers the packets still sitting in its uncommitted chunk; the trace
# names its data source as slow (last_flush_slow_data_sources).
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
# The trace names the data source that did not ack the stop's flush
# (last_flush_slow_data_sources), and the inspector says so.
"$top_builddir/inspector/shmtrace-inspect" -q "$E2E_DIR/trace" \
    -o "$E2E_DIR/t.db" || e2e_fail "shmtrace-inspect: rc=$?"
slow=$(sqlite3 "$E2E_DIR/t.db" "select value from trace_info where key =
    'last_flush_slow_data_sources'")
[ "$slow" = "shmtrace-producer/shmtrace.synthetic" ] ||
    e2e_fail "last_flush_slow_data_sources: '$slow'"
e2e_stop_daemon
echo "ok"
