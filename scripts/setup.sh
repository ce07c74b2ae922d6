#!/usr/bin/env bash
# scripts/setup.sh - one command from a fresh Debian 12 (as root) to a result.
#
#   scripts/setup.sh demo   install deps, build, run the main job (make demo)
#   scripts/setup.sh test   install deps, build, run the whole suite (make check)
#
# Installing is skipped when every package is already present, so the script
# is quick to re-run. Builds in the source tree.
set -euo pipefail
cd "$(dirname "$0")/.."

mode=${1:-}
case "$mode" in
  demo|test) ;;
  -h|--help|*)
    echo "usage: scripts/setup.sh demo|test" >&2
    echo "  demo  install dependencies, build, run the end-to-end demo" >&2
    echo "  test  install dependencies, build, run the test suite" >&2
    [ "$mode" = -h ] || [ "$mode" = --help ] && exit 0
    exit 2 ;;
esac

# libprotobuf32 and libsqlite3-0: what Perfetto's trace_processor_shell needs
# to run in the interop suite (tests/interop/), when ../shared/perfetto is
# there; clang (with its sanitizer and libFuzzer runtimes) and llvm (the
# symbolizer): the TSan and fuzzing runs of .ci/run.
PKGS="build-essential autoconf automake libtool pkg-config check
libsqlite3-dev sqlite3 libprotobuf-c-dev protobuf-c-compiler hyperfine
libprotobuf32 libsqlite3-0 clang libclang-rt-dev llvm"
# bindfs: a FUSE file system for tests/e2e_sec_fuse.sh, which finds its
# process with pgrep (procps: "important", not "required", so a minimal
# Debian 12 may lack it) (test only).
[ "$mode" = test ] && PKGS="$PKGS bindfs procps"
missing=""
for p in $PKGS; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" \
    || missing="$missing $p"
done
if [ -n "$missing" ]; then
  echo "=== installing:$missing"
  if [ "$(id -u)" -ne 0 ]; then
    echo "error: packages missing ($missing) and not root: install them or run as root" >&2
    exit 1
  fi
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $missing >/dev/null
fi

# The build's chatter (autoreconf's "installing build-aux/...", configure's
# checks, compiler lines) goes to setup.log; on failure its end is shown.
log=$PWD/setup.log
quiet() {
  if ! "$@" >>"$log" 2>&1; then
    echo "error: '$*' failed; the end of $log:" >&2
    tail -n 30 "$log" >&2
    exit 1
  fi
}
: >"$log"
echo "=== building (details in setup.log)"
[ -x configure ] || quiet autoreconf -fi
[ -f Makefile ] || quiet ./configure --enable-werror
quiet make -j"$(nproc)"

if [ "$mode" = test ]; then
  echo "=== running the test suite (make check)"
  if ! make -j"$(nproc)" check; then
    cat test-suite.log 2>/dev/null || true
    exit 1
  fi
else
  echo "=== running the main job (make demo)"
  make -s --no-print-directory demo
fi
