#!/bin/sh
# bench/bench_vs_run.sh - one recording for bench_vs_perfetto.sh (the command
# hyperfine times). The consumer starts a session from CFG (write_into_file,
# 100 ms period, 128 MiB ring) on whichever service owns the sockets in
# PERFETTO_*_SOCK_NAME; then the producers start:
#   WORKLOAD=synthetic  PRODUCERS shmtrace-producer processes, COUNT packets
#                       of SIZE payload bytes each, stall policy; the run
#                       ends when OUT holds about every packet and every
#                       producer has written all of its own, then the
#                       consumer is stopped with SIGTERM (the service flushes
#                       what is still in flight and finishes the file);
#   WORKLOAD=refgen     Perfetto's C SDK producer refgen (REFGEN_PERIOD_US=0)
#                       starts 0.3 s before the consumer; the session lasts
#                       the config's duration_ms, then refgen gets SIGTERM.
# The producer program is $PRODUCER_BIN (bench_producer.sh: not the build
# tree's libtool wrapper script). Each producer runs under bench_cputime, which appends its CPU time (user +
# sys, microseconds) to PCPU. CONSUMER=perfetto runs "$PERFETTO_BIN/perfetto --txt -c CFG -o OUT",
# CONSUMER=shmtrace runs "shmtrace record -c CFG -o OUT".
set -u
b=$top_builddir
LOG="$OUT.log"
if [ "$CONSUMER" = perfetto ]; then
    set -- "$PERFETTO_BIN/perfetto" --txt -c "$CFG" -o "$OUT"
else
    set -- "$b/tools/shmtrace" record -q -c "$CFG" -o "$OUT"
fi
ticks() { sed 's/.*) //' "/proc/$1/stat" | awk '{print $12 + $13}'; }
pids=""
if [ "$WORKLOAD" = refgen ]; then
    # refgen spins even while not traced: count its CPU over the session
    # only, from /proc (USER_HZ ticks), in microseconds
    REFGEN_PERIOD_US=0 "$PERFETTO_BIN/refgen" >>"$LOG" 2>&1 &
    pids=$!
    sleep 0.3          # let it connect and register
    t0=$(ticks $pids)
    "$@" >>"$LOG" 2>&1
    rc=$?
    t1=$(ticks $pids)
    echo $(((t1 - t0) * 1000000 / $(getconf CLK_TCK))) >>"$PCPU"
    kill -TERM $pids 2>/dev/null
else
    "$@" >>"$LOG" 2>&1 &
    cons=$!
    i=0
    while [ $i -lt "$PRODUCERS" ]; do
        LD_LIBRARY_PATH=$PRODUCER_LIBPATH \
            "$b/bench/bench_cputime" "$PCPU" "$PRODUCER_BIN" \
            -q -N "bench$i" -t 1 -c "$COUNT" -S "$SIZE" --policy stall \
            --once --smb-size 4194304 >>"$LOG" 2>&1 &
        pids="$pids $!"
        i=$((i + 1))
    done
    # Each record is the payload plus about 30 bytes (Trace.packet framing,
    # timestamp, TestEvent fields, trusted fields; 29.96 in shmtraced's
    # 64 B x4 traces, whose smaller seq_values make it just under 30): stop
    # when the file holds about every packet, at SIZE + 29 per packet, and
    # every producer has said on stderr (LOG) that its COUNT packets are
    # written and flushed; stopping the session flushes the rest into the
    # file. (Without the second condition a 64 B recording stopped with
    # about 1% of its packets still to be written, left out of the trace.)
    # A file that stops growing short of that (the service lost packets)
    # ends the run after 3 s; the seconds waited go to OUT.idle, which
    # bench_vs_perfetto.sh takes off the wall time.
    "$b/bench/bench_waitsize" "$OUT" $((COUNT * PRODUCERS * (SIZE + 29))) \
        $cons "$OUT.idle" "$LOG" "$PRODUCERS"
    kill -TERM $cons 2>/dev/null
    wait $cons
    rc=$?
fi
for p in $pids; do wait "$p"; done
[ $rc -eq 0 ] || { echo "bench_vs_run: consumer $CONSUMER exit $rc" \
                   "(see $LOG)" >&2; exit 1; }
