#!/bin/sh
# e2e_kill_midpacket.sh - a producer SIGKILLed inside a packet: its two
# writers each stop inside packet 1999 (shmtrace-producer's
# --hang-mid-packet test hook; 20000-byte packets, so the unfinished one
# already spans committed chunks), then the process is killed. Conservation
# must hold exactly for every sequence (svc_tracecheck --conservation
# --per-sequence 2000): the unfinished packet counts as lost with cause
# producer_gone (and so may the packet before it: it ends in the chunk
# where the unfinished one begins, which waits for patches that never
# come), and the honest producer beside it loses nothing.
. "${top_srcdir:-.}/tests/e2e_lib.sh"
e2e_need_tools

e2e_start_daemon
e2e_spawn victim "$PRODUCER" -N victim -t 2 -r 4000 -S 20000 \
    --policy stall --hang-mid-packet 1999
VICTIM=$E2E_LAST_PID
e2e_spawn honest "$PRODUCER" -N honest -t 1 -c 2000 -r 2000 -S 100 \
    --policy stall --once
e2e_wait_registered 2
# No duration: the session runs until the victim is gone and the honest
# producer is done (a fixed duration ended it before the writers reached
# packet 1999 under ThreadSanitizer on a loaded machine); then SIGTERM
# makes the consumer stop it and read.
e2e_spawn consumer "$CONSUMER" record --out "$E2E_DIR/trace" \
    --duration-ms 0 --flush-timeout-ms 500 --buffer-kb 131072
CONS=$E2E_LAST_PID
victim_hangs() {
    E2E_SEEN=$(grep -c "hanging inside packet 1999" "$E2E_DIR/victim.log")
    [ "${E2E_SEEN:-0}" -ge 2 ]
}
e2e_until 2400 0.05 "the victim's writers never reached packet 1999" \
    victim_hangs
kill -KILL "$VICTIM"
e2e_until 600 0.05 "the daemon never saw the victim go" \
    grep -q "(pid $VICTIM) disconnected" "$E2E_DIR/daemon.log"
e2e_until 2400 0.05 "the honest producer never finished" \
    grep -q "writer 0 done" "$E2E_DIR/honest.log"
kill -TERM "$CONS"
e2e_wait_ok "$CONS" 30 consumer
e2e_check "$E2E_DIR/trace" --require-stats --verbose --conservation \
    --per-sequence 2000 --expect-sequences 3
[ "$(e2e_value conservation)" = exact ] || e2e_fail "conservation broken"
[ "$(grep -c "producer_gone=[1-9]" "$E2E_DIR/check.out")" = 2 ] ||
    e2e_fail "each victim writer must have lost its unfinished packet" \
             "to producer_gone"
grep -q "count=2000 first=0 last=1999 gaps_flagged=0 gaps_silent=0" \
    "$E2E_DIR/check.out" || e2e_fail "the honest producer lost data"
e2e_stop_daemon
echo "ok"
