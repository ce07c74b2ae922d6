#!/bin/sh
# bench/bench_inspector.sh - inspector throughput (MB/s of trace, packets/s)
# on a large synthetic trace, with `cat FILE > /dev/null` of the same file
# as the ceiling, all measured by hyperfine in the same run.
#
#   bench/bench_inspector.sh [SIZE_MB]      (default 256; run via
#                                            `make bench-inspector`)
# Needs: hyperfine, the built bench/bench_ins_gen and
# inspector/shmtrace-inspect (paths from $top_builddir, default .).
set -eu
size_mb=${1:-256}
top_builddir=${top_builddir:-.}
gen=$top_builddir/bench/bench_ins_gen
ins=$top_builddir/inspector/shmtrace-inspect
command -v hyperfine >/dev/null || { echo "hyperfine not found" >&2; exit 1; }
[ -x "$gen" ] && [ -x "$ins" ] || { echo "build first (make)" >&2; exit 1; }

tmp=$(mktemp -d "${TMPDIR:-/tmp}/bench_ins.XXXXXX")
trap 'rm -rf "$tmp"' EXIT INT TERM
trace=$tmp/bench.pftrace
packets=$("$gen" "$trace" "$size_mb")
bytes=$(wc -c < "$trace")
echo "trace: $bytes bytes, $packets packets ($size_mb MB requested)"

hyperfine --warmup 1 --runs 5 --style basic --export-csv "$tmp/r.csv" \
  -n cat "cat '$trace' > /dev/null" \
  -n inspect "'$ins' -q -f --no-progress '$trace' -o '$tmp/out.db'" \
  -n inspect-no-packets \
     "'$ins' -q -f --no-progress --no-packets '$trace' -o '$tmp/out.db'"

# command,mean,stddev,median,user,system,min,max
awk -F, -v bytes="$bytes" -v packets="$packets" '
NR == 1 { next }
{ name[NR] = $1; mean[NR] = $2; if ($1 == "cat") base = $2 }
END {
  printf "\n%-20s %10s %10s %14s %10s\n", "command", "mean s", "MB/s",
         "packets/s", "vs cat"
  for (i = 2; i <= NR; i++)
    printf "%-20s %10.3f %10.1f %14.0f %9.1f%%\n", name[i], mean[i],
           bytes / 1e6 / mean[i], packets / mean[i], 100 * base / mean[i]
}' "$tmp/r.csv"
