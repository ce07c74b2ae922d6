#!/bin/sh
# e2e_bigpackets.sh - packets larger than the SMB and than one IPC frame
# (300 KB each): fragmented over many chunks by the writer, reassembled by
# the buffer, and split into several ReadBuffers slices/replies by the
# service; both consumers (shmtrace, svc_consumer) get them intact.
. "${top_srcdir:-.}/tests/e2e_lib.sh"
e2e_need_tools

COUNT=20
e2e_start_daemon
e2e_spawn producer "$PRODUCER" -t 2 -c $COUNT -S 300000 --policy stall
e2e_wait_registered 1
"$CLI" record -q -o "$E2E_DIR/trace" -t 3s -b 64m \
    >"$E2E_DIR/cli.log" 2>&1 || e2e_fail "shmtrace record failed"
e2e_check "$E2E_DIR/trace" --require-stats --expect-sequences 2 \
    --complete $COUNT
"$CONSUMER" record --out "$E2E_DIR/trace2" --duration-ms 3000 \
    --buffer-kb 65536 >"$E2E_DIR/consumer.log" 2>&1 ||
    e2e_fail "svc_consumer failed"
e2e_check "$E2E_DIR/trace2" --require-stats --expect-sequences 2 \
    --complete $COUNT
size=$(stat -c %s "$E2E_DIR/trace2")
[ "$size" -gt $((2 * COUNT * 300000)) ] || e2e_fail "trace too small: $size"
e2e_stop_daemon
echo "ok"
