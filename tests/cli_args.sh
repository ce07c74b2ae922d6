#!/bin/sh
# tests/cli_args.sh - argument handling and exit codes of `shmtrace` and
# `shmtrace-producer` (no daemon needed): --help everywhere exits 0 and
# prints usage; bad options/values exit 2; an unreachable service exits 3.
set -u
: "${top_builddir:=.}"
CLI="$top_builddir/tools/shmtrace"
PRODUCER="$top_builddir/tools/shmtrace-producer"
[ -x "$CLI" ] && [ -x "$PRODUCER" ] || { echo "SKIP: tools not built"; exit 77; }
DIR=$(mktemp -d "${TMPDIR:-/tmp}/shmtrace-args.XXXXXX") || exit 99
trap 'rm -rf "$DIR"' EXIT
NOSOCK="$DIR/none.sock"
fails=0

# expect RC CMD...: run CMD, compare its exit status.
expect() {
    want=$1; shift
    "$@" >"$DIR/out" 2>"$DIR/err"
    got=$?
    if [ "$got" -ne "$want" ]; then
        echo "FAIL: '$*' exited $got, want $want" >&2
        sed 's/^/  | /' "$DIR/err" >&2
        fails=$((fails + 1))
    fi
}

# expect_text PATTERN FILE: grep in the last command's out/err.
expect_text() {
    if ! grep -q -- "$1" "$DIR/$2"; then
        echo "FAIL: no '$1' in $2 of the last command" >&2
        fails=$((fails + 1))
    fi
}

expect 0 "$CLI" --help;               expect_text "Usage: shmtrace COMMAND" out
expect 0 "$CLI" help
expect 0 "$CLI" record --help;        expect_text "Exit status" out
expect 0 "$CLI" clone --help;         expect_text "CloneSession" out
expect 0 "$CLI" stats --help
expect 0 "$CLI" --version;            expect_text "shmtrace " out
expect 2 "$CLI"
expect 2 "$CLI" frobnicate;           expect_text "unknown command" err
expect 2 "$CLI" record;               expect_text "missing -o" err
expect 2 "$CLI" record -o "$DIR/t" --fill-policy sometimes
expect_text "invalid value 'sometimes' for --fill-policy" err
expect 2 "$CLI" record -o "$DIR/t" -b 12q
expect 2 "$CLI" record -o "$DIR/t" -b -5
expect 2 "$CLI" record -o "$DIR/t" -t 10parsecs
expect 2 "$CLI" record -o "$DIR/t" --period 0
expect 2 "$CLI" record -o "$DIR/t" --bogus
expect 2 "$CLI" record -o "$DIR/t" extra-arg
expect 2 "$CLI" record -o "$DIR/t" -c "$DIR/missing.cfg"
expect_text "cannot read config" err
printf 'buffers { size_kb: 64 }\nduration_ms: soon\n' >"$DIR/bad.cfg"
expect 2 "$CLI" record -o "$DIR/t" -c "$DIR/bad.cfg"
expect_text "line 2" err
printf 'buffers { size_kb: 64 }\nduration_ms: 100\n' >"$DIR/good.cfg"
expect 3 "$CLI" record -o "$DIR/t" -c "$DIR/good.cfg" -s "$NOSOCK"
expect_text "cannot connect" err
expect 3 "$CLI" record -o "$DIR/t" -t 1s -d x -s "$NOSOCK"
expect 2 "$CLI" clone;                expect_text "missing -o" err
expect 2 "$CLI" clone -o "$DIR/c" -i 1 -n name
expect 2 "$CLI" clone -o "$DIR/c" -i notanumber
expect 3 "$CLI" clone -o "$DIR/c" -s "$NOSOCK"
expect 3 "$CLI" stats -s "$NOSOCK"
PERFETTO_CONSUMER_SOCK_NAME="$NOSOCK" expect 3 "$CLI" stats
expect_text "$NOSOCK" err

expect 0 "$PRODUCER" --help;          expect_text "seq_value" out
expect 2 "$PRODUCER" --threads 0;     expect_text "for --threads" err
expect 2 "$PRODUCER" --size -1
expect 2 "$PRODUCER" --policy sometimes
expect 2 "$PRODUCER" extra
expect 3 "$PRODUCER" --no-reconnect -s "$NOSOCK"
expect_text "cannot connect" err

[ "$fails" -eq 0 ] || exit 1
echo "cli_args: all checks passed"
