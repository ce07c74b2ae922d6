#!/bin/sh
# e2e_sessions.sh - several concurrent sessions on the same data source:
# each gets its own instance in every producer, its own buffers and its
# own complete copy; a consumer that disappears (SIGKILL) frees its
# session and stops its data source instances.
. "${top_srcdir:-.}/tests/e2e_lib.sh"
e2e_need_tools

COUNT=1500
e2e_start_daemon
e2e_spawn p0 "$PRODUCER" -N p0 -t 2 -c $COUNT -r 3000 -S 100 --policy stall
e2e_spawn p1 "$PRODUCER" -N p1 -t 1 -c $COUNT -r 3000 -S 100 --policy stall
e2e_wait_registered 2
e2e_spawn c1 "$CONSUMER" record --out "$E2E_DIR/t1" --duration-ms 4000 \
    --buffer-kb 8192
C1=$E2E_LAST_PID
e2e_spawn c2 "$CONSUMER" record --out "$E2E_DIR/t2" --duration-ms 4000 \
    --buffer-kb 4096 --fill discard
C2=$E2E_LAST_PID
e2e_spawn c3 "$CONSUMER" record --out "$E2E_DIR/t3" --duration-ms 60000
C3=$E2E_LAST_PID
e2e_wait_sessions 3
kill -KILL "$C3"              # a consumer that vanishes
e2e_wait_ok "$C1" 30 "consumer 1"
e2e_wait_ok "$C2" 30 "consumer 2"
e2e_check "$E2E_DIR/t1" --require-stats --expect-sequences 3 --complete $COUNT
e2e_check "$E2E_DIR/t2" --require-stats --expect-sequences 3 --complete $COUNT
n=$("$CONSUMER" stats | sed -n 's/^tracing_sessions=//p')
[ "$n" = 0 ] || e2e_fail "$n session(s) left after every consumer went away"
e2e_stop_daemon
echo "ok"
