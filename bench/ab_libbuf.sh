#!/bin/sh
# bench/ab_libbuf.sh - compare libbuf versions inside one process.
#
# Builds bench/ab_libbuf.c with one libbuf per VERSION (a git revision, "."
# for the working tree, or a directory holding tb_*.c and tb_int.h), then
# runs one of bench_tb's workloads over them, alternating the versions round
# by round in one process, and prints each one's median GB/s and its
# per-round ratio to the first VERSION. Use it to see a 3-10% change that
# two separate bench_tb runs cannot show on a noisy machine (see the top of
# bench/ab_libbuf.c). Run a version against itself first (. .) to see the
# noise left: A/A medians within 2% here, single rounds up to 20% apart.
# Run from the source tree after ./configure (it needs config.h); it builds
# in a temporary directory and leaves nothing behind. Versions must have
# every call bench_tb makes (else the link fails).
#
#   bench/ab_libbuf.sh [-w WORKLOAD] [-n ROUNDS] VERSION VERSION...
#   e.g.  bench/ab_libbuf.sh -w read_cached HEAD .
#
# WORKLOAD: write1, write1000 (default), read, read_cached, read64, svc1k,
# svc64, memcpy.
set -eu

usage() {
    sed -n '2,19p' "$0" | sed 's/^# \{0,1\}//'
}

workload=write1000
rounds=10
while [ $# -gt 0 ]; do
    case "$1" in
    -w) workload=$2; shift 2 ;;
    -n) rounds=$2; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    -*) echo "ab_libbuf.sh: unknown option $1" >&2; usage >&2; exit 2 ;;
    *) break ;;
    esac
done
if [ $# -lt 2 ]; then
    echo "ab_libbuf.sh: give two versions or more (e.g. HEAD .)" >&2
    usage >&2
    exit 2
fi
if [ $# -gt 8 ]; then
    echo "ab_libbuf.sh: at most 8 versions" >&2
    exit 2
fi
top=$(cd "$(dirname "$0")/.." && pwd)
if [ ! -f "$top/config.h" ]; then
    echo "ab_libbuf.sh: no config.h in $top: run ./configure first" >&2
    exit 1
fi
CC=${CC:-cc}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT INT TERM

decls= list= objs= i=0
for ver in "$@"; do
    name=v$i
    mkdir -p "$tmp/$name"
    # dir: the version's tb_*.c and tb_int.h; inc: the headers they use
    if [ "$ver" = . ]; then
        dir=$top/libbuf inc=$top/libbuf/include
    elif [ -d "$ver" ]; then
        dir=$ver inc=$top/libbuf/include
    elif git -C "$top" rev-parse --verify -q "$ver^{commit}" >/dev/null; then
        git -C "$top" archive "$ver" libbuf | tar -x -C "$tmp/$name"
        dir=$tmp/$name/libbuf inc=$tmp/$name/libbuf/include
    else
        echo "ab_libbuf.sh: '$ver' is neither a git revision, '.' nor a" \
             "directory" >&2
        exit 2
    fi
    for f in "$dir"/tb_*.c; do
        $CC -O2 -g -std=gnu11 -fvisibility=hidden -I"$top" -I"$inc" \
            -I"$dir" -c "$f" -o "$tmp/$name/$(basename "$f" .c).o"
    done
    ld -r -o "$tmp/$name.o" "$tmp/$name"/tb_*.o
    renames=
    for sym in $(nm "$tmp/$name.o" | awk '$2 == "T" && $3 ~ /^tb_/ {print $3}'); do
        renames="$renames --redefine-sym $sym=${name}_$sym"
    done
    # shellcheck disable=SC2086 # one word per option
    objcopy --localize-hidden $renames "$tmp/$name.o"
    decls="$decls AB_VARIANT($name)"
    list="$list &ab_$name,"
    objs="$objs $tmp/$name.o"
    echo "$name = $ver"
    i=$((i + 1))
done
# shellcheck disable=SC2086 # one word per object
$CC -O2 -g -std=gnu11 -I"$top" -I"$top/libbuf/include" -I"$top/bench" \
    -DAB_DECLS="$decls" -DAB_LIST="$list" "$top/bench/ab_libbuf.c" $objs \
    -lpthread -lm -o "$tmp/ab_libbuf"
"$tmp/ab_libbuf" "$workload" "$rounds"
