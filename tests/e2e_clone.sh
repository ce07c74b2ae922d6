#!/bin/sh
# e2e_clone.sh - CloneSession while the producers keep writing: the clone
# is a consistent read-only snapshot (no silent gap), and the original
# session still delivers every packet afterwards; a clone of a slow
# writer's session holds what it wrote until the clone (the flush first).
. "${top_srcdir:-.}/tests/e2e_lib.sh"
e2e_need_tools

COUNT=6000
e2e_start_daemon
e2e_spawn producer "$PRODUCER" -t 2 -c $COUNT -r 4000 -S 100 --policy stall \
    --once
PROD=$E2E_LAST_PID
e2e_wait_registered 1
e2e_spawn consumer "$CLI" record -q -o "$E2E_DIR/trace" -t 5s -b 32m
CONS=$E2E_LAST_PID
e2e_wait_sessions 1
sleep 0.5                   # let some chunks be committed
"$CLI" clone -o "$E2E_DIR/clone" >"$E2E_DIR/clone.log" 2>&1 ||
    e2e_fail "clone failed"
e2e_check "$E2E_DIR/clone" --min-total 1
e2e_wait_ok "$CONS" 30 consumer
e2e_check "$E2E_DIR/trace" --require-stats --expect-sequences 2 \
    --complete $COUNT

# A slow writer: its chunks are handed back long before its next commit
# (commits are batched), and one cut inside a packet waits for the patches
# that commit carries. The service flushes the producers before it clones
# (as Perfetto does), so the clone holds what was written until then: 0.6 s
# at 300 packets/s is ~180 packets; without the flush it stopped at the
# first cut packet (48, one 4 KiB chunk).
e2e_wait_ok "$PROD" 30 producer
e2e_spawn slow "$PRODUCER" -N slow -t 1 -r 300 -q
e2e_wait_registered 1
e2e_spawn consumer2 "$CLI" record -q -o "$E2E_DIR/trace2" -t 30s -b 4m
CONS=$E2E_LAST_PID
e2e_wait_sessions 1
sleep 0.6
"$CLI" clone -o "$E2E_DIR/clone2" >"$E2E_DIR/clone2.log" 2>&1 ||
    e2e_fail "clone of the slow writer's session failed"
e2e_check "$E2E_DIR/clone2" --min-total 100
kill -TERM "$CONS"
e2e_wait_ok "$CONS" 30 consumer2
e2e_stop_daemon
echo "ok"
