#!/bin/sh
# bench/ab_service.sh - this tree's shmtraced against another build of it,
# side by side in one run (`make bench-ab BASE=...`; not part of make check).
#
#   bench/ab_service.sh [-h|--help] BASE
#
# BASE: a git revision of this repository, or the path of a shmtraced
# program. A revision is exported (git archive, so the repository is not
# touched) into a temporary directory and built there with this tree's
# configure arguments (config.status --config); its build log is kept
# there and shown if it fails.
# Then bench_vs_perfetto.sh runs with BENCH_VS_BASELINE: both daemons at
# once on private sockets, the same producers and consumers (this tree's,
# and Perfetto's `perfetto` and refgen when present), recordings
# alternating between the two, and prints its table with the base in the
# place of traced, then each cell's medians (the A/B figures). On this
# project's 2-vCPU VMs single recordings move by 10-20% from the host
# alone: run a build against itself first (BASE=HEAD on a clean tree, an
# A/A run) to see how much of a difference is noise, and read a 5%
# change only from medians of many recordings. (An A/A run, 2026-12-06,
# defaults: medians 0.93-1.06x in MB/s, 0.94-1.01x in service CPU per
# packet; the sums of the main table down to 0.86x.)
# Knobs: bench_vs_perfetto.sh's, with other defaults here:
# BENCH_VS_CASES "1024:1 1024:4" (SIZE:PRODUCERS), BENCH_VS_RUNS 6,
# BENCH_VS_REFGEN_MS 0 (no refgen), BENCH_VS_MB 256; BENCH_VS_KEEP=1 keeps
# the files, the base build included.
set -eu
: "${top_builddir:=.}"
: "${top_srcdir:=$top_builddir}"
here=$(cd "$(dirname "$0")" && pwd)

usage() {
    sed -n '4,26p' "$0" | sed 's/^# \{0,1\}//'
}
case "${1:-}" in
-h|--help) usage; exit 0 ;;
"") echo "ab_service.sh: give the base to compare with (a git revision or" \
        "a shmtraced program; e.g. make bench-ab BASE=HEAD~1)" >&2
    exit 2 ;;
-*) echo "ab_service.sh: unknown option $1" >&2; usage >&2; exit 2 ;;
esac
[ $# -eq 1 ] || { echo "ab_service.sh: one base only" >&2; exit 2; }
base=$1
[ -x "$top_builddir/service/shmtraced" ] ||
    { echo "ab_service.sh: no $top_builddir/service/shmtraced: build this" \
        "tree first (make)" >&2; exit 1; }

work=""
cleanup() {
    [ -n "$work" ] || return 0
    if [ "${BENCH_VS_KEEP:-0}" = 1 ]; then
        echo "kept the base build in $work" >&2
    else
        rm -rf "$work"
    fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

if [ -f "$base" ] && [ -x "$base" ]; then
    daemon=$(cd "$(dirname "$base")" && pwd)/$(basename "$base")
    name=base       # not the program's name: that is shmtraced too
else
    git -C "$top_srcdir" rev-parse --git-dir >/dev/null 2>&1 ||
        { echo "ab_service.sh: $base is not a program, and a revision" \
            "needs git and a git checkout at $top_srcdir (this is not" \
            "one, or git is missing): give a shmtraced program" >&2
          exit 2; }
    rev=$(git -C "$top_srcdir" rev-parse --verify --quiet \
        "$base^{commit}") ||
        { echo "ab_service.sh: $base is neither a shmtraced program nor a" \
            "revision of the repository at $top_srcdir" >&2; exit 2; }
    name=$(git -C "$top_srcdir" rev-parse --short "$rev")
    work=$(mktemp -d "${BENCH_DIR:-$top_builddir}/ab-base.XXXXXX")
    work=$(cd "$work" && pwd)
    # this tree's configure arguments, as configure was given them
    eval "set -- $(cd "$top_builddir" && ./config.status --config)"
    echo "ab_service.sh: building $base ($name) in $work" \
        "(configure ${*:-with no arguments}, as this tree; log in" \
        "$work/build.log)"
    if ! { git -C "$top_srcdir" archive --format=tar "$rev" |
               tar -x -C "$work" &&
           cd "$work" && autoreconf -fi && ./configure -q "$@" &&
           make -j"$(nproc 2>/dev/null || echo 2)"; } \
            >"$work/build.log" 2>&1; then
        tail -n 30 "$work/build.log" >&2
        echo "ab_service.sh: building $base failed (the log's end above)" >&2
        BENCH_VS_KEEP=1
        exit 1
    fi
    cd - >/dev/null
    daemon=$work/service/shmtraced
fi

BENCH_VS_BASELINE=$daemon
BENCH_VS_BASELINE_NAME=$name
BENCH_VS_CASES=${BENCH_VS_CASES-"1024:1 1024:4"}
BENCH_VS_RUNS=${BENCH_VS_RUNS:-6}
BENCH_VS_REFGEN_MS=${BENCH_VS_REFGEN_MS:-0}
export BENCH_VS_BASELINE BENCH_VS_BASELINE_NAME BENCH_VS_CASES \
    BENCH_VS_RUNS BENCH_VS_REFGEN_MS top_builddir top_srcdir
sh "$here/bench_vs_perfetto.sh"
