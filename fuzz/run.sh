#!/bin/sh
# fuzz/run.sh - runs libFuzzer targets for `make fuzz` / `make fuzz-regress`
# (fuzz/Makefile.inc), from the build tree.
#
#   run.sh run     SRCDIR SECONDS NAME...   fuzz each target SECONDS seconds,
#                                           seeds from SRCDIR/fuzz/corpus/NAME
#   run.sh regress SRCDIR 0 NAME...         run each target once over its
#                                           seeds (and what runs found)
#
# Each target's libFuzzer output goes to fuzz/NAME.log; one line per target
# shows its final figures (execs, cov, ft, corpus), then a summary line
# "fuzz: N passed, N failed". Exit status 1 if any target failed (a crash,
# a broken invariant, a leak, a timeout); its reproducer is in fuzz/crashes/.
# FUZZ_FLAGS adds libFuzzer options.
set -u
# ASan's default 256 MiB quarantine, at tens of thousands of runs a second,
# pushes a target's RSS toward libFuzzer's limit: keep it smaller unless
# the caller chose.
ASAN_OPTIONS=${ASAN_OPTIONS:-quarantine_size_mb=64}
export ASAN_OPTIONS
mode=$1 srcdir=$2 seconds=$3
shift 3
pass=0 fail=0
mkdir -p fuzz/crashes
for name in "$@"; do
  bin=fuzz/fuzz_$name
  seeds=$srcdir/fuzz/corpus/$name
  work=fuzz/work/$name
  log=fuzz/$name.log
  mkdir -p "$work"
  if [ "$mode" = regress ]; then
    # shellcheck disable=SC2086
    "$bin" ${FUZZ_FLAGS:-} -runs=0 -artifact_prefix="fuzz/crashes/$name-" \
      "$work" "$seeds" >"$log" 2>&1
  else
    # shellcheck disable=SC2086
    "$bin" ${FUZZ_FLAGS:-} -max_total_time="$seconds" -print_final_stats=1 \
      -artifact_prefix="fuzz/crashes/$name-" "$work" "$seeds" >"$log" 2>&1
  fi
  rc=$?
  last=$(grep -E '^#[0-9]+' "$log" | tail -1)
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
  if [ $rc -eq 0 ]; then
    pass=$((pass + 1))
    echo "PASS: fuzz_$name ${execs:+execs $execs }${last}"
  else
    fail=$((fail + 1))
    echo "FAIL: fuzz_$name (exit $rc; log $log)"
    grep -E -A30 'invariant failed|ERROR: (AddressSanitizer|LeakSanitizer|libFuzzer)|runtime error|SUMMARY' "$log" | head -60
  fi
done
echo "fuzz: $pass passed, $fail failed"
[ $fail -eq 0 ]
