#!/bin/sh
# bench/bench_e2e.sh - end-to-end throughput and service CPU of shmtraced,
# driven by hyperfine: PRODUCERS producer processes record MB megabytes
# through the daemon into a trace file (bench_e2e_run.sh); in the same run,
# dd and cat copy a file of the same size to the same disk (the ceiling;
# like the daemon, without fsync, so both end in the page cache).
#
# Two cases, each in its own daemon so that its CPU is its own:
#   large  SIZE-byte payloads (default 1024), MB megabytes
#   small  SMALL_SIZE-byte payloads (default 64), SMALL_MB megabytes;
#          BENCH_E2E_SMALL_SIZE=0 skips it
# For each: MB/s, the daemon's CPU (utime + stime from /proc over all the
# runs of the case) as ms per MB and ns per packet (packets counted in the
# last recording by svc_tracecheck, times the runs). No figure of
# Perfetto's here: `make bench-vs-perfetto` measures traced side by side,
# in the same run.
#
#   BENCH_E2E_MB=1024 BENCH_E2E_PRODUCERS=4 make bench-e2e   (1 GiB)
# Then the SMB exhaustion scenario once (BENCH_E2E_SMB_FULL=0 skips it):
# written / read / lost packets and the loss episodes flagged.
# Defaults: 256 MB of 1024-byte payloads, 64 MB of 64-byte payloads,
# 4 producers, 3 runs. BENCH_E2E_SMALL_MB, BENCH_E2E_SMALL_SIZE,
# BENCH_E2E_RUNS, BENCH_E2E_SIZE, BENCH_DIR (where the files go).
set -eu
: "${top_builddir:=.}"
export top_builddir
LARGE_MB=${BENCH_E2E_MB:-256}
PRODUCERS=${BENCH_E2E_PRODUCERS:-4}
LARGE_SIZE=${BENCH_E2E_SIZE:-1024}
SMALL_MB=${BENCH_E2E_SMALL_MB:-64}
SMALL_SIZE=${BENCH_E2E_SMALL_SIZE:-64}
RUNS=${BENCH_E2E_RUNS:-3}
export PRODUCERS
command -v hyperfine >/dev/null ||
    { echo "bench_e2e: hyperfine not found (apt-get install hyperfine)" >&2
      exit 1; }
DIR=$(mktemp -d "${BENCH_DIR:-$top_builddir}/bench-e2e.XXXXXX")
daemon=""
stop_daemon() {
    [ -n "$daemon" ] && kill -TERM "$daemon" 2>/dev/null && wait "$daemon"
    daemon=""
}
cleanup() {
    stop_daemon || true
    rm -rf "$DIR"
}
trap cleanup EXIT
here=$(cd "$(dirname "$0")" && pwd)
. "$here/bench_producer.sh"
hz=$(getconf CLK_TCK)
ticks() { awk '{print $14 + $15}' "/proc/$daemon/stat"; }
mean() { sed -n 's/.*"mean": *\([0-9.e+-]*\).*/\1/p' "$1" | sed -n "${2}p"; }

# e2e_case NAME SIZE MB: one daemon, RUNS recordings; sets case_bytes,
# case_mean (s per run) and prints the case's figures.
e2e_case() {
    name=$1
    export SIZE=$2 MB=$3
    export PERFETTO_PRODUCER_SOCK_NAME="$DIR/$name-p.sock"
    export PERFETTO_CONSUMER_SOCK_NAME="$DIR/$name-c.sock"
    export OUT="$DIR/$name.pftrace"
    "$top_builddir/service/shmtraced" 2>"$DIR/$name-daemon.log" &
    daemon=$!
    while [ ! -S "$PERFETTO_CONSUMER_SOCK_NAME" ]; do sleep 0.02; done
    t0=$(ticks)
    hyperfine --runs "$RUNS" --warmup 0 --export-json "$DIR/$name.json" \
        -n "shmtraced e2e $name ($PRODUCERS producers, $MB MB, $SIZE B)" \
        "sh $here/bench_e2e_run.sh" >"$DIR/hyperfine-$name.txt" ||
        { cat "$OUT.log" "$DIR/$name-daemon.log" >&2; exit 1; }
    t1=$(ticks)
    stop_daemon
    case_bytes=$(stat -c %s "$OUT")
    case_mean=$(mean "$DIR/$name.json" 1)
    # The last recording must be a valid, loss-free trace.
    "$top_builddir/tests/svc_tracecheck" "$OUT" >"$DIR/$name-check.txt" \
        2>&1 || { cat "$DIR/$name-check.txt" >&2
                  echo "bench_e2e: bad trace ($name)" >&2; exit 1; }
    packets=$(sed -n 's/^test_packets=//p' "$DIR/$name-check.txt")
    printf '%s: ' "$name"
    grep -E "^(test_packets|sequences|gaps_flagged|flagged_packets)=" \
        "$DIR/$name-check.txt" | tr '\n' ' '; echo
    awk -v b="$case_bytes" -v e="$case_mean" -v t="$((t1 - t0))" \
        -v hz="$hz" -v runs="$RUNS" -v p="$PRODUCERS" -v n="$packets" \
        -v size="$SIZE" -v name="$name" '
    BEGIN {
        mb = b / 1048576
        cpu = t / hz
        ns = 1e9 * cpu / (n * runs)
        printf "%s: %.1f MB trace, %d packets of %d B payload " \
               "(%d producers), %d runs\n", name, mb, n, size, p, runs
        printf "  shmtraced end to end: %8.1f MB/s  %10.0f packets/s " \
               "(%.3f s per run)\n", mb / e, n / e, e
        printf "  shmtraced CPU: %.3f ms per MB, %.0f ns per packet " \
               "(%.2f s for %.0f MB)\n", 1000 * cpu / (mb * runs), ns, cpu,
               mb * runs
    }'
}

e2e_case large "$LARGE_SIZE" "$LARGE_MB"
large_bytes=$case_bytes
large_mean=$case_mean
large_out=$OUT
if [ "$SMALL_SIZE" -gt 0 ]; then
    e2e_case small "$SMALL_SIZE" "$SMALL_MB"
    rm -f "$OUT"
fi

# SMB exhaustion (tests/e2e_smb_full.sh, once): drop-policy producers
# overflow an 8 KiB SMB; packets lost vs loss episodes flagged.
if [ "${BENCH_E2E_SMB_FULL:-1}" != 0 ]; then
    top_srcdir="$here/.." sh "$here/../tests/e2e_smb_full.sh" \
        >"$DIR/smb_full.txt" 2>&1 ||
        { cat "$DIR/smb_full.txt" >&2; echo "bench_e2e: smb_full failed" >&2
          exit 1; }
    grep '^smb_full:' "$DIR/smb_full.txt"
fi

hyperfine --runs "$RUNS" --export-json "$DIR/copy.json" \
    -n "dd bs=1M" "dd if=$large_out of=$DIR/copy.dd bs=1M status=none" \
    -n "cat" "sh -c 'cat $large_out > $DIR/copy.cat'" \
    >"$DIR/hyperfine-copy.txt"
dd=$(mean "$DIR/copy.json" 1)
cat=$(mean "$DIR/copy.json" 2)
awk -v b="$large_bytes" -v e="$large_mean" -v d="$dd" -v c="$cat" 'BEGIN {
    mb = b / 1048576
    printf "ceiling for the large trace (%.1f MB):\n", mb
    printf "  dd bs=1M: %8.1f MB/s  (%.3f s)\n", mb / d, d
    printf "  cat:      %8.1f MB/s  (%.3f s)\n", mb / c, c
    printf "  ratio e2e/dd: %.2f   e2e/cat: %.2f\n", d / e, c / e
}'
