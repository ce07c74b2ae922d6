#!/bin/sh
# bench/bench_e2e_run.sh - one end-to-end recording for bench_e2e.sh (the
# command hyperfine times): PRODUCERS shmtrace-producer processes write
# MB megabytes in total (stall policy: nothing lost), svc_consumer records
# them in long-trace mode (write_into_file, 100 ms period) to OUT; the run
# ends when the file holds the payload, with a final flush (DisableTracing).
# Environment: top_builddir, OUT, MB, PRODUCERS, SIZE, PRODUCER_BIN and
# PRODUCER_LIBPATH (bench_producer.sh); the daemon's
# sockets via PERFETTO_*_SOCK_NAME.
set -u
LOG="$OUT.log"
b=$top_builddir
rm -f "$OUT"            # the size test below must not see the last run's
per_producer=$((MB * 1048576 / PRODUCERS / SIZE))
pids=""
i=0
while [ $i -lt "$PRODUCERS" ]; do
    LD_LIBRARY_PATH=$PRODUCER_LIBPATH "$PRODUCER_BIN" -q -N "bench$i" \
        -t 1 -c $per_producer \
        -S "$SIZE" --policy stall --once --smb-size 4194304 2>>"$LOG" &
    pids="$pids $!"
    i=$((i + 1))
done
# wait until the producers' data sources are registered (at most ~30 s)
tries=0
while :; do
    n=$("$b/tests/svc_consumer" stats 2>>"$LOG" |
        sed -n 's/^data_sources_registered=//p')
    [ "${n:-0}" -ge "$PRODUCERS" ] && break
    tries=$((tries + 1))
    [ $tries -gt 1500 ] && { echo "bench_e2e_run: producers did not" \
        "register (see $LOG)" >&2; kill $pids; exit 1; }
    sleep 0.02
done
"$b/tests/svc_consumer" record --out "$OUT" --duration-ms 600000 \
    --buffer-kb 131072 --file-period-ms 100 2>>"$LOG" &
cons=$!
# Each record is the payload plus >= 30 bytes (Trace.packet framing,
# timestamp, TestEvent fields, trusted fields): stop when the file holds
# about every packet; DisableTracing then flushes what is still in flight.
target=$((per_producer * PRODUCERS * (SIZE + 30)))
while kill -0 $cons 2>/dev/null; do
    s=$(stat -c %s "$OUT" 2>/dev/null || echo 0)
    [ "$s" -ge "$target" ] && break
    sleep 0.02
done
kill -INT $cons 2>/dev/null
wait $cons
rc=$?
for p in $pids; do wait "$p"; done
[ $rc -eq 0 ] || { echo "bench_e2e_run: consumer exit $rc (see $LOG)" >&2;
                   exit 1; }
