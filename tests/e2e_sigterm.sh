#!/bin/sh
# e2e_sigterm.sh - SIGTERM to shmtraced during a write_into_file session:
# it flushes, stops the data sources, writes what it owes to the file,
# tells the consumer, and exits 0.
. "${top_srcdir:-.}/tests/e2e_lib.sh"
e2e_need_tools

COUNT=3000
e2e_start_daemon
e2e_spawn producer "$PRODUCER" -t 2 -c $COUNT -S 100 --policy stall --once
e2e_wait_registered 1
e2e_spawn consumer "$CONSUMER" record --out "$E2E_DIR/trace" \
    --duration-ms 60000 --file-period-ms 5000 --buffer-kb 16384
CONS=$E2E_LAST_PID
sleep 1
kill -TERM "$DAEMON_PID"
e2e_wait_ok "$DAEMON_PID" 20 daemon
e2e_wait_pid "$CONS" 10 || e2e_fail "consumer hung"
e2e_check "$E2E_DIR/trace" --require-stats --expect-sequences 2 \
    --complete $COUNT
echo "ok"
