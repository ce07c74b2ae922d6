#!/bin/sh
# e2e_kill.sh - SIGKILL of a producer in the middle of large (fragmented)
# packets: it costs only its own unfinished data (what it had written is
# scraped), another producer's sequence stays complete, the daemon goes on.
. "${top_srcdir:-.}/tests/e2e_lib.sh"
e2e_need_tools

e2e_start_daemon
e2e_spawn victim "$PRODUCER" -N victim -t 2 -r 200 -S 20000 --policy stall
VICTIM=$E2E_LAST_PID
e2e_spawn honest "$PRODUCER" -N honest -t 1 -c 2000 -r 2000 -S 100 \
    --policy stall --once
e2e_wait_registered 2
e2e_spawn consumer "$CONSUMER" record --out "$E2E_DIR/trace" \
    --duration-ms 4000 --flush-timeout-ms 500 --buffer-kb 65536
CONS=$E2E_LAST_PID
sleep 0.7
kill -KILL "$VICTIM"
e2e_wait_ok "$CONS" 30 consumer
e2e_check "$E2E_DIR/trace" --require-stats --verbose --conservation
grep -q "count=2000 first=0 last=1999 gaps_flagged=0 gaps_silent=0" \
    "$E2E_DIR/check.out" || e2e_fail "the honest producer lost data"
[ "$(e2e_value sequences)" -ge 2 ] || e2e_fail "victim wrote nothing"
"$CONSUMER" stats >/dev/null || e2e_fail "daemon gone after the kill"
grep -q "disconnected; .* scraped" "$E2E_DIR/daemon.log" ||
    e2e_fail "the victim's disconnect was not reported"
e2e_stop_daemon
echo "ok"
