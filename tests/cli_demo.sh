#!/bin/sh
# tests/cli_demo.sh - scripts/demo.sh (`make demo`) tells the user where
# its results are and how to open them (issue 14, item 8): it exits 0,
# keeps demo.pftrace, demo.db and the logs by default, prints the paths with
# the sqlite3 command and the Perfetto UI address, leaves no process and no
# socket behind; with DEMO_KEEP=0 it removes its directory. Small settings
# (one producer, a low rate) keep it light; no timing assertions.
set -u
: "${top_builddir:=.}"
: "${top_srcdir:=.}"
export top_builddir top_srcdir
command -v sqlite3 >/dev/null 2>&1 || { echo "SKIP: sqlite3 not installed"; exit 77; }
command -v bash >/dev/null 2>&1 || { echo "SKIP: bash not installed"; exit 77; }
[ -x "$top_builddir/service/shmtraced" ] || { echo "SKIP: not built"; exit 77; }
DIR=$(mktemp -d "${TMPDIR:-/tmp}/shmtrace-demotest.XXXXXX") || exit 99
trap 'rm -rf "$DIR"' EXIT
fails=0
fail() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }

DEMO_SECONDS=1 DEMO_PRODUCERS=1 DEMO_RATE=500 DEMO_OUT="$DIR/out" \
    bash "$top_srcdir/scripts/demo.sh" >"$DIR/demo.out" 2>&1
rc=$?
[ $rc -eq 0 ] || fail "demo exited $rc: $(tail -20 "$DIR/demo.out")"
for f in demo.pftrace demo.db shmtraced.log producer-1.log; do
    [ -s "$DIR/out/$f" ] || fail "demo did not keep $f"
done
grep -q "kept in $DIR/out" "$DIR/demo.out" || fail "no 'kept in' line"
grep -q "https://ui.perfetto.dev" "$DIR/demo.out" || fail "no Perfetto UI hint"
grep -q "sqlite3 $DIR/out/demo.db < .*/sql/data_loss.sql" "$DIR/demo.out" ||
    fail "no sqlite3 command with the kept database"
# The command it prints works as printed.
cmd=$(grep -m1 "sqlite3 $DIR/out/demo.db < " "$DIR/demo.out" | sed 's/^ *//')
sh -c "$cmd" >"$DIR/q.out" 2>&1 || fail "'$cmd' failed: $(cat "$DIR/q.out")"
ls "$DIR"/out/*.sock >/dev/null 2>&1 && fail "sockets left: $(ls "$DIR/out")"

DEMO_SECONDS=1 DEMO_PRODUCERS=1 DEMO_RATE=500 DEMO_OUT="$DIR/gone" \
    DEMO_KEEP=0 bash "$top_srcdir/scripts/demo.sh" >"$DIR/demo2.out" 2>&1
rc=$?
[ $rc -eq 0 ] || fail "demo (DEMO_KEEP=0) exited $rc"
[ -e "$DIR/gone" ] && fail "DEMO_KEEP=0 left $DIR/gone"

[ "$fails" -eq 0 ] || exit 1
echo "cli_demo: all checks passed"
