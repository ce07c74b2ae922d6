#!/bin/sh
# tests/cli_args.sh - argument handling, messages and exit codes of the four
# programs (no daemon needed): --help and --version everywhere exit 0; bad
# options/values exit 2 with one line naming the problem (in the user's
# units) plus "Try ... --help", never the whole help; an unreachable
# service exits 3 naming the socket; and no failed run leaves a file.
set -u
: "${top_builddir:=.}"
CLI="$top_builddir/tools/shmtrace"
PRODUCER="$top_builddir/tools/shmtrace-producer"
INSPECT="$top_builddir/inspector/shmtrace-inspect"
DAEMON="$top_builddir/service/shmtraced"
[ -x "$CLI" ] && [ -x "$PRODUCER" ] && [ -x "$INSPECT" ] && [ -x "$DAEMON" ] ||
    { echo "SKIP: tools not built"; exit 77; }
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
        echo "FAIL: no '$1' in $2 of the last command:" >&2
        sed 's/^/  | /' "$DIR/$2" >&2
        fails=$((fails + 1))
    fi
}

# expect_lines N FILE: the last command printed exactly N lines there.
expect_lines() {
    n=$(wc -l <"$DIR/$2")
    if [ "$n" -ne "$1" ]; then
        echo "FAIL: $n lines in $2 of the last command, want $1" >&2
        sed 's/^/  | /' "$DIR/$2" >&2
        fails=$((fails + 1))
    fi
}

# expect_no_file PATH: neither PATH nor a PATH.partial.* was left behind.
expect_no_file() {
    for f in "$1" "$1".partial.*; do
        if [ -e "$f" ]; then
            echo "FAIL: $f left behind" >&2
            fails=$((fails + 1))
            rm -f "$f"
        fi
    done
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

# ---- messages of issue 14: one line, the cause, the user's units ----
expect 2 "$CLI" record -o "$DIR/t" -b 100g
expect_text "shmtrace record: --buffer-size '100g' is larger than the 4095m a buffer can hold" err
expect_text "Try 'shmtrace record --help'" err
expect_no_file "$DIR/t"
expect 2 "$CLI" record -o "$DIR/t" -b 0
expect_text "'0' is 0: a buffer needs at least 4k" err
expect 2 "$CLI" record -o "$DIR/t" -b 4096m
expect_text "larger than the 4095m" err
expect 2 "$CLI" record -o "$DIR/t" -t 0
expect_text "--duration '0' is 0: give a duration above 0, or no -t" err
expect 2 "$CLI" record -o "$DIR/t" --bogus
expect_text "^shmtrace record: unknown option '--bogus'" err
expect_text "^Try 'shmtrace record --help' for more information.\$" err
expect_lines 2 err
expect 2 "$CLI" record -o
expect_text "shmtrace record: option '-o' needs a value" err
expect 2 "$CLI" clone -Z;             expect_text "shmtrace clone: unknown option '-Z'" err
expect_lines 2 err
expect 2 "$CLI" stats --frob;         expect_text "shmtrace stats: unknown option" err
expect 2 "$CLI" frobnicate;           expect_lines 2 err
expect_text "Try 'shmtrace --help'" err
expect_no_file "$DIR/t"
# `shmtrace help COMMAND` is the command's help, not the top-level one.
expect 0 "$CLI" help record;          expect_text "Usage: shmtrace record" out
expect 0 "$CLI" help clone;           expect_text "Usage: shmtrace clone" out
expect 0 "$CLI" help stats;           expect_text "Usage: shmtrace stats" out
expect 2 "$CLI" help frob;            expect_text "no command 'frob'" err
# The socket is named whenever the service cannot be reached.
expect 3 "$CLI" clone -o "$DIR/c" -s "$NOSOCK"
expect_text "cannot connect to the tracing service at $NOSOCK" err
expect_no_file "$DIR/c"
expect 3 "$CLI" record -o "$DIR/t" -s "$NOSOCK" -t 1
expect_text "cannot connect to the tracing service at $NOSOCK" err
expect_no_file "$DIR/t"
expect 3 "$INSPECT" --live -o "$DIR/l.db" --socket "$NOSOCK" \
    --keep-trace "$DIR/l.pftrace"
expect_text "cannot connect to the tracing service at $NOSOCK" err
expect_no_file "$DIR/l.db"
expect_no_file "$DIR/l.pftrace"
# A client that runs out of descriptors before it reaches the service
# says so, exits 1 (a failure of its own, not 3) and does not ask whether
# shmtraced runs: with fds 3-9 closed and 4 allowed, the dynamic loader
# still gets its one, the event loop's pipe cannot.
lowfd() {
    sh -c 'exec 3>&- 4>&- 5>&- 6>&- 7>&- 8>&- 9>&-
           ulimit -n 4 && exec "$@"' lowfd "$@"
}
expect_local_limit() { # PROGRAM-NAME: the last command's err
    expect_text "^$1: cannot connect to the tracing service at $NOSOCK: Too many open files (a limit of this process, not of the service: raise its open files limit, ulimit -n)\$" err
    if grep -q "is shmtraced running" "$DIR/err"; then
        echo "FAIL: '$1' blames the service for its own descriptor limit" >&2
        fails=$((fails + 1))
    fi
}
expect 1 lowfd "$CLI" stats -s "$NOSOCK"
expect_local_limit "shmtrace stats"
expect 1 lowfd "$CLI" query -s "$NOSOCK"
expect_local_limit "shmtrace query"
expect 1 lowfd "$CLI" trigger -s "$NOSOCK" t1
expect_local_limit "shmtrace trigger"
# the producer's program itself, not libtool's wrapper script (a shell
# script that cannot run with 4 descriptors)
PRODUCER_REAL=$PRODUCER
PRODUCER_LIBPATH=${LD_LIBRARY_PATH:-}
if [ -x "$top_builddir/libtool" ]; then
    PRODUCER_REAL=$("$top_builddir/libtool" --mode=execute \
        sh -c 'printf %s "$1"' sh "$PRODUCER")
    PRODUCER_LIBPATH=$("$top_builddir/libtool" --mode=execute \
        sh -c 'printf %s "${LD_LIBRARY_PATH:-}"' sh "$PRODUCER")
fi
expect 1 lowfd env LD_LIBRARY_PATH="$PRODUCER_LIBPATH" "$PRODUCER_REAL" \
    --no-reconnect -s "$NOSOCK"
expect_local_limit "shmtrace-producer"
# with descriptors to spare, the same commands blame the missing service
expect 3 "$CLI" stats -s "$NOSOCK"
expect_text "(is shmtraced running? see --socket)" err
expect 3 "$CLI" trigger -s "$NOSOCK" t1
expect_text "(is shmtraced running? see --socket)" err

# An output that is a directory is refused before anything starts.
mkdir "$DIR/adir"
expect 1 "$CLI" clone -o "$DIR/adir" -s "$NOSOCK"
expect_text "adir is a directory" err
expect 1 "$CLI" record -o "$DIR/adir" -s "$NOSOCK"
expect_text "adir is a directory" err
ls "$DIR"/adir.partial.* >/dev/null 2>&1 && { echo "FAIL: partial left" >&2; fails=$((fails + 1)); }
# --version and bad options in every program; usage errors are 2 in all.
for p in "$CLI" "$PRODUCER" "$INSPECT" "$DAEMON"; do
    name=$(basename "$p")
    expect 0 "$p" --version;          expect_text "^$name [0-9]" out
    expect 0 "$p" -V;                 expect_text "^$name [0-9]" out
    expect 2 "$p" --no-such-option
    case $name in
    shmtrace) expect_text "unknown command" err ;;
    *) expect_text "^$name: unknown option '--no-such-option'" err
       expect_text "^Try '$name --help' for more information.\$" err
       expect_lines 2 err ;;
    esac
done
# A producer that cannot connect says so once, with the socket, and that
# it retries -- not "connection lost" every second.
"$PRODUCER" -s "$NOSOCK" >"$DIR/out" 2>"$DIR/err" &
PP=$!
i=0
until grep -q retrying "$DIR/err"; do
    i=$((i + 1)); [ $i -gt 200 ] && break
    sleep 0.05
done
sleep 2.5 # at least two more retries (each 1 s) that must stay silent
kill -TERM "$PP"; wait "$PP"
expect_text "shmtrace-producer: cannot connect to the tracing service at $NOSOCK: .*; retrying every second" err
expect_lines 1 err
if grep -q "connection lost" "$DIR/err"; then
    echo "FAIL: the producer says 'connection lost' before it ever connected" >&2
    fails=$((fails + 1))
fi

[ "$fails" -eq 0 ] || exit 1
echo "cli_args: all checks passed"
