#!/bin/sh
# bench/bench_vs_sdk.sh - what a small packet costs the producer: libshm's
# TraceWriter against Perfetto's C SDK, same packet, same services, one run
# (`make bench-vs-sdk`, also the last part of `make bench-vs-perfetto`; not
# part of make check).
#
# The packet is refgen's (timestamp + for_testing { 64-letter str,
# seq_value, counter }: ~100 bytes). bench/bench_packets (libshm) and
# bench/bench_packets_sdk.c (the C SDK, compiled here against
# $PERFETTO_BIN/../include and $PERFETTO_BIN/libperfetto_c.so) each write
# RUNS x ROUNDS bursts of BURST packets from one thread, a flush after each
# burst and a pause for the service to drain (bench/bench_packets.h), into
# a session of shmtraced and of Perfetto's traced (both running, on
# private sockets, each idle while the other works), each producer with a
# 4 MiB SMB of 4 KiB pages (named in the config for both producers, so
# neither service's own choice differs), stall policy. The consumer is
# `shmtrace record` (no file until the end: the session's 128 MiB ring is
# read when the producer is done). Order alternates: service, and
# producer within a service, every run.
# Figures, thread CPU time (CLOCK_THREAD_CPUTIME_ID) per packet of the
# writing thread, burst and flush: "cold" is each run's first burst (the
# SMB's first chunks; libshm maps its SMB with MADV_POPULATE_WRITE, the
# SDK does not), the rest is the median of the other bursts over all runs,
# with their range; wall is the median of the same bursts by
# CLOCK_MONOTONIC. Baselines measured by each program in the same run:
# memcpy of the packet's ~100 encoded bytes, and one CLOCK_BOOTTIME read
# (each packet makes one). "lost": packets missing from the trace (gaps in
# seq_value and missing ends; svc_tracecheck), which must be 0.
# Without Perfetto's binaries (or the SDK's headers) only libshm's rows
# print, through shmtraced.
# Environment: BENCH_SDK_RUNS (default 3), BENCH_SDK_ROUNDS (bursts per
# run, default 40), BENCH_SDK_BURST (default 10000), PERFETTO_BIN, CC.
set -eu
: "${top_builddir:=.}"
: "${top_srcdir:=$top_builddir}"
RUNS=${BENCH_SDK_RUNS:-3}
ROUNDS=${BENCH_SDK_ROUNDS:-40}
BURST=${BENCH_SDK_BURST:-10000}
PERFETTO_BIN=${PERFETTO_BIN:-$top_srcdir/../shared/perfetto/bin}
DIR=$(mktemp -d "${TMPDIR:-/tmp}/bench-sdk.XXXXXX")
pids=""
cleanup() {
    set +e
    for p in $pids; do kill -TERM "$p" 2>/dev/null && wait "$p" 2>/dev/null
    done
    rm -rf "$DIR"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

SERVICES=shmtraced
PRODUCERS=libshm
why=""
if [ ! -x "$PERFETTO_BIN/traced" ]; then
    why="no Perfetto binaries in $PERFETTO_BIN (set PERFETTO_BIN)"
elif [ ! -f "$PERFETTO_BIN/../include/perfetto/public/data_source.h" ] ||
     [ ! -f "$PERFETTO_BIN/libperfetto_c.so" ]; then
    why="no C SDK (headers in $PERFETTO_BIN/../include, libperfetto_c.so)"
    SERVICES="shmtraced traced"
elif ! ${CC:-cc} -std=c11 -O2 -D_GNU_SOURCE -DPERFETTO_SDK_SHLIB \
        -I"$PERFETTO_BIN/../include" -I"$top_srcdir/bench" \
        "$top_srcdir/bench/bench_packets_sdk.c" -L"$PERFETTO_BIN" \
        -lperfetto_c -lpthread -Wl,-rpath,"$(cd "$PERFETTO_BIN" && pwd)" \
        -o "$DIR/bench_packets_sdk" 2>"$DIR/cc.log"; then
    why="the SDK program did not build: $(head -3 "$DIR/cc.log")"
    SERVICES="shmtraced traced"
else
    SERVICES="shmtraced traced"
    PRODUCERS="libshm sdk"
fi
[ -n "$why" ] && echo "bench_vs_sdk: $why: libshm's rows only"

BENCH_NAME=bench_vs_sdk
. "$top_srcdir/bench/bench_services.sh"
for svc in $SERVICES; do
    start_service "$svc"
    pids="$pids $service_pid"
done

CFG=$DIR/cfg
{
    echo 'buffers { size_kb: 131072 fill_policy: RING_BUFFER }'
    echo 'data_sources { config { name: "dev.bench.packets" } }'
    echo 'duration_ms: 600000'
    for name in bench-packets-libshm bench-packets-sdk; do
        echo "producers { producer_name: \"$name\" shm_size_kb: 4096" \
            "page_size_kb: 4 }"
    done
} >"$CFG"

# record SERVICE PRODUCER: one session; appends the producer's result line
# and "lost=N" to $DIR/SERVICE.PRODUCER
record() {
    svc=$1 prod=$2 out=$DIR/trace.pftrace
    sockets "$svc"
    rm -f "$out"
    "$top_builddir/tools/shmtrace" record -q -c "$CFG" -o "$out" \
        >"$DIR/record.log" 2>&1 &
    cons=$!
    if [ "$prod" = sdk ]; then
        set -- "$DIR/bench_packets_sdk"
    else
        set -- "$top_builddir/bench/bench_packets"
    fi
    if ! "$@" --rounds "$ROUNDS" --burst "$BURST" >"$DIR/prod.log" 2>&1
    then
        kill -TERM $cons 2>/dev/null; wait $cons || true
        cat "$DIR/prod.log" "$DIR/record.log" >&2
        echo "bench_vs_sdk: $prod through $svc failed" >&2
        exit 1
    fi
    sleep 0.2           # the producer has flushed and exited: let the
                        # service take its last commit before the stop
    kill -TERM $cons 2>/dev/null
    wait $cons || { cat "$DIR/record.log" >&2
        echo "bench_vs_sdk: the consumer failed ($prod, $svc)" >&2; exit 1; }
    total=$((ROUNDS * BURST + 1))     # and the one untimed first packet
    "$top_builddir/tests/svc_tracecheck" --per-sequence $total \
        "$out" >"$DIR/check.txt" 2>&1 || true
    got=$(sed -n 's/^test_packets=//p' "$DIR/check.txt")
    [ -n "$got" ] || { cat "$DIR/check.txt" >&2
        echo "bench_vs_sdk: unreadable trace ($prod, $svc)" >&2; exit 1; }
    lost=$((total - got))
    { grep '^result ' "$DIR/prod.log"; echo "lost=$lost"; } \
        >>"$DIR/$svc.$prod"
}

reversed() { # WORDS...: the words in reverse order
    r=""
    for w in "$@"; do r="$w${r:+ $r}"; done
    echo "$r"
}

echo "producer CPU per small packet (refgen's: timestamp + for_testing," \
    "~100 bytes), one thread,"
echo "$RUNS runs x $ROUNDS bursts of $BURST packets, 4 MiB SMB of 4 KiB" \
    "pages, stall policy; thread CPU time"
run=0
while [ $run -lt "$RUNS" ]; do
    if [ $((run % 2)) -eq 0 ]; then svcs=$SERVICES
    else svcs=$(reversed $SERVICES); fi
    for svc in $svcs; do
        if [ $(((run + ${#svc}) % 2)) -eq 0 ]; then prods=$PRODUCERS
        else prods=$(reversed $PRODUCERS); fi
        for prod in $prods; do
            record "$svc" "$prod"
        done
    done
    run=$((run + 1))
    if [ -t 2 ]; then printf '  run %d of %d done\r' "$run" "$RUNS" >&2; fi
done
if [ -t 2 ]; then printf '%30s\r' '' >&2; fi
printf '%-10s %-7s %9s %9s %15s %9s %7s %7s %5s\n' service producer \
    "cold ns" "ns/pkt" "(range)" "wall ns" memcpy clock lost
for svc in $SERVICES; do
    for prod in $PRODUCERS; do
        awk -v svc="$svc" -v prod="$prod" '
            function med(a, n,   i, j, t) {
                for (i = 2; i <= n; i++) for (j = i; j > 1 &&
                    a[j - 1] > a[j]; j--) { t = a[j]; a[j] = a[j - 1];
                    a[j - 1] = t }
                return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
            }
            /^result / {
                n++
                for (i = 2; i <= NF; i++) {
                    split($i, kv, "="); v[kv[1]] = kv[2]
                }
                cold[n] = v["cold"]; m[n] = v["median"]; w[n] = v["wall"]
                mc[n] = v["memcpy"]; ck[n] = v["clock"]
                if (n == 1 || v["min"] < lo) lo = v["min"]
                if (n == 1 || v["max"] > hi) hi = v["max"]
            }
            /^lost=/ { split($0, kv, "="); lost += kv[2] }
            END {
                printf "%-10s %-7s %9.1f %9.1f %15s %9.1f %7.1f %7.1f %5d\n",
                    svc, prod, med(cold, n), med(m, n),
                    sprintf("(%.1f-%.1f)", lo, hi), med(w, n), med(mc, n),
                    med(ck, n), lost
            }' "$DIR/$svc.$prod" | tee -a "$DIR/table"
    done
done
if echo "$PRODUCERS" | grep -q sdk; then
    echo "C SDK : libshm, thread CPU per packet (> 1: libshm cheaper):"
    for svc in $SERVICES; do
        awk -v svc="$svc" '$1 == svc && $2 == "libshm" { c = $3; s = $4 }
            $1 == svc && $2 == "sdk" { C = $3; S = $4 }
            END { printf "  through %-9s cold %.2fx, then %.2fx\n", svc,
                C / c, S / s }' "$DIR/table"
    done
fi
echo "(memcpy: of the packet's encoded bytes; clock: one CLOCK_BOOTTIME" \
    "read, which every packet makes; both measured by the producers in" \
    "this run)"
