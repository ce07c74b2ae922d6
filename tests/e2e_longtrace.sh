#!/bin/sh
# e2e_longtrace.sh - long-trace mode: write_into_file with a short
# file_write_period_ms; the service drains a buffer smaller than the whole
# trace into the file periodically, so a rate-limited producer loses
# nothing although it writes several times the buffer size. Then the
# same with the consumer reading periodically (shmtrace record --long).
. "${top_srcdir:-.}/tests/e2e_lib.sh"
e2e_need_tools

e2e_start_daemon
# 2 threads x 2000 packets/s x ~230 B for 1.5 s ~ 1.4 MB >> 256 KB buffer
e2e_spawn producer0 "$PRODUCER" -t 2 -c 3000 -r 2000 -S 200 --policy stall \
    --once
e2e_wait_registered 1
"$CONSUMER" record --out "$E2E_DIR/trace" --duration-ms 5000 \
    --buffer-kb 256 --file-period-ms 100 >"$E2E_DIR/consumer.log" 2>&1 ||
    e2e_fail "consumer failed"
e2e_check "$E2E_DIR/trace" --require-stats --expect-sequences 2 \
    --complete 3000 --per-sequence 3000 --conservation
[ "$(e2e_value stats_packets)" -gt 1 ] || e2e_fail "expected periodic passes"
size=$(stat -c %s "$E2E_DIR/trace")
[ "$size" -gt 524288 ] || e2e_fail "trace of $size bytes: not a long trace"

# The same through the consumer: `shmtrace record --long` reads the
# buffers every 100 ms over IPC while tracing.
e2e_spawn producer1 "$PRODUCER" -N second -t 2 -c 3000 -r 2000 -S 200 \
    --policy stall --once
e2e_wait_registered 1
"$CLI" record -q -o "$E2E_DIR/trace2" -t 5s -b 256k --long -p 100 \
    >"$E2E_DIR/cli.log" 2>&1 || e2e_fail "shmtrace record --long failed"
e2e_check "$E2E_DIR/trace2" --require-stats --expect-sequences 2 \
    --complete 3000 --per-sequence 3000 --conservation
e2e_stop_daemon
echo "ok"
