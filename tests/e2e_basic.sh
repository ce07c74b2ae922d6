#!/bin/sh
# e2e_basic.sh - N producer processes x M threads through a real shmtraced
# to a real consumer: every packet read exactly once, in order, per
# sequence (stall policy: nothing may be lost), plus the service's own
# packets (config echo, stats). The consumer is the real `shmtrace record`.
. "${top_srcdir:-.}/tests/e2e_lib.sh"
e2e_need_tools

N=3 M=2 COUNT=2000
e2e_start_daemon
i=0
while [ $i -lt $N ]; do
    e2e_spawn "producer$i" "$PRODUCER" -N "prod$i" -t $M -c $COUNT -S 200 \
        --policy stall --once
    i=$((i + 1))
done
e2e_wait_registered $N
"$CLI" record -q -o "$E2E_DIR/trace" -t 3s -b 32m \
    >"$E2E_DIR/consumer.log" 2>&1 || e2e_fail "shmtrace record failed"
e2e_check "$E2E_DIR/trace" --require-stats --expect-sequences $((N * M)) \
    --complete $COUNT --expect-total $((N * M * COUNT))
[ "$(e2e_value config_packets)" = 1 ] || e2e_fail "no trace_config echo"
echo "ok"
