#!/bin/sh
# e2e_clone.sh - CloneSession while the producers keep writing: the clone
# is a consistent read-only snapshot (no silent gap), and the original
# session still delivers every packet afterwards.
. "${top_srcdir:-.}/tests/e2e_lib.sh"
e2e_need_tools

COUNT=6000
e2e_start_daemon
e2e_spawn producer "$PRODUCER" -t 2 -c $COUNT -r 4000 -S 100 --policy stall \
    --once
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
e2e_stop_daemon
echo "ok"
