#!/bin/sh
# bench/bench_e2e.sh - end-to-end throughput of shmtraced, driven by
# hyperfine: PRODUCERS producer processes record MB megabytes through the
# daemon into a trace file (bench_e2e_run.sh); in the same run, dd and cat
# copy a file of the same size to the same disk (the ceiling; like the
# daemon, without fsync, so both end in the page cache). Prints MB/s
# for each, the ratio to the ceiling, and the daemon's CPU time per MB
# (utime + stime from /proc, over all the recording runs).
#
#   BENCH_E2E_MB=1024 BENCH_E2E_PRODUCERS=4 make bench-e2e   (1 GiB)
# Defaults: 256 MB, 4 producers, 1024-byte payloads, 3 runs.
set -eu
: "${top_builddir:=.}"
export top_builddir
MB=${BENCH_E2E_MB:-256}
PRODUCERS=${BENCH_E2E_PRODUCERS:-4}
SIZE=${BENCH_E2E_SIZE:-1024}
RUNS=${BENCH_E2E_RUNS:-3}
export MB PRODUCERS SIZE
command -v hyperfine >/dev/null ||
    { echo "bench_e2e: hyperfine not found (apt-get install hyperfine)" >&2
      exit 1; }
DIR=$(mktemp -d "${BENCH_DIR:-$top_builddir}/bench-e2e.XXXXXX")
daemon=""
cleanup() {
    [ -n "$daemon" ] && kill -TERM "$daemon" 2>/dev/null && wait "$daemon"
    rm -rf "$DIR"
}
trap cleanup EXIT
export PERFETTO_PRODUCER_SOCK_NAME="$DIR/p.sock"
export PERFETTO_CONSUMER_SOCK_NAME="$DIR/c.sock"
export OUT="$DIR/trace.pftrace"
"$top_builddir/libbuf/shmtraced" 2>"$DIR/daemon.log" &
daemon=$!
while [ ! -S "$PERFETTO_CONSUMER_SOCK_NAME" ]; do sleep 0.02; done

ticks() { awk '{print $14 + $15}' "/proc/$daemon/stat"; }
hz=$(getconf CLK_TCK)
t0=$(ticks)
here=$(cd "$(dirname "$0")" && pwd)
hyperfine --runs "$RUNS" --warmup 0 --export-json "$DIR/e2e.json" \
    -n "shmtraced e2e ($PRODUCERS producers, $MB MB)" \
    "sh $here/bench_e2e_run.sh" >"$DIR/hyperfine-e2e.txt" ||
    { cat "$OUT.log" "$DIR/daemon.log" >&2; exit 1; }
t1=$(ticks)
bytes=$(stat -c %s "$OUT")
# The last recording must be a valid, loss-free trace.
"$top_builddir/tests/svc_tracecheck" "$OUT" >"$DIR/check.txt" 2>&1 ||
    { cat "$DIR/check.txt" >&2; echo "bench_e2e: bad trace" >&2; exit 1; }
grep -E "^(test_packets|sequences|gaps_flagged|flagged_packets)=" \
    "$DIR/check.txt" | tr '\n' ' '; echo
hyperfine --runs "$RUNS" --export-json "$DIR/copy.json" \
    -n "dd bs=1M" "dd if=$OUT of=$DIR/copy.dd bs=1M status=none" \
    -n "cat" "sh -c 'cat $OUT > $DIR/copy.cat'" \
    >"$DIR/hyperfine-copy.txt"
mean() { sed -n 's/.*"mean": *\([0-9.e+-]*\).*/\1/p' "$1" | sed -n "${2}p"; }
e2e=$(mean "$DIR/e2e.json" 1)
dd=$(mean "$DIR/copy.json" 1)
cat=$(mean "$DIR/copy.json" 2)
awk -v b="$bytes" -v e="$e2e" -v d="$dd" -v c="$cat" -v t="$((t1 - t0))" \
    -v hz="$hz" -v runs="$RUNS" -v p="$PRODUCERS" 'BEGIN {
    mb = b / 1048576
    printf "trace file: %.1f MB (%d producers), %d runs each\n", mb, p, runs
    printf "shmtraced end to end: %8.1f MB/s  (%.3f s per run)\n", mb/e, e
    printf "dd bs=1M (ceiling):   %8.1f MB/s  (%.3f s)\n", mb/d, d
    printf "cat (ceiling):        %8.1f MB/s  (%.3f s)\n", mb/c, c
    printf "ratio e2e/dd: %.2f   e2e/cat: %.2f\n", d/e, c/e
    printf "shmtraced CPU: %.2f ms per MB (%.2f s for %.0f MB)\n",
        1000 * t / hz / (mb * runs), t / hz, mb * runs
}'
