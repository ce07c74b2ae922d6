#!/usr/bin/env bash
# scripts/demo.sh - the main job, run by `make demo` from the build tree.
# Until the end-to-end pipeline exists this runs the trace buffer benchmark.
set -euo pipefail
: "${top_builddir:=.}"
exec "$top_builddir/bench/bench_tb"
