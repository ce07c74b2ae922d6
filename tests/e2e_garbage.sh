#!/bin/sh
# e2e_garbage.sh - a producer that floods garbage (random SMB contents,
# commits of chunks out of range / in the wrong state / for buffers it was
# never given, bad patches, undecodable IPC arguments) next to an honest
# one: the honest sequence is complete, the garbage is counted
# (abi_violations, chunks_discarded), the daemon survives.
. "${top_srcdir:-.}/tests/e2e_lib.sh"
e2e_need_tools

e2e_start_daemon
e2e_spawn evil "$EVIL" --seconds 1.5
e2e_spawn honest "$PRODUCER" -N honest -t 1 -c 2000 -r 2000 -S 100 \
    --policy stall --once
e2e_wait_registered 2
"$CONSUMER" record --out "$E2E_DIR/trace" --duration-ms 4000 \
    --flush-timeout-ms 500 --buffer-kb 16384 >"$E2E_DIR/consumer.log" 2>&1 ||
    e2e_fail "consumer failed"
e2e_check "$E2E_DIR/trace" --require-stats --verbose --per-sequence 2000 \
    --conservation
grep -q "count=2000 first=0 last=1999 gaps_flagged=0 gaps_silent=0" \
    "$E2E_DIR/check.out" || e2e_fail "the honest producer lost data"
rejected=$(( $(e2e_value stats_abi_violations) + \
             $(e2e_value stats_chunks_discarded) ))
[ "$rejected" -gt 0 ] || e2e_fail "garbage was not counted"
"$CONSUMER" stats >/dev/null || e2e_fail "daemon gone"
kill -0 "$DAEMON_PID" || e2e_fail "daemon died"
e2e_stop_daemon
echo "ok"
