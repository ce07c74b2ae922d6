#!/bin/sh
# tests/cli_docs.sh - the README, the man pages and every --help checked
# against the programs (issue 14, items 3, 4, 6, 7):
#  - the four programs print the same exit-status table, and README.md
#    holds it word for word;
#  - every long option a --help lists is one the program accepts, and
#    every option README.md shows for a command is in that command's help;
#  - shmtrace-inspect's --help names the configured $(pkgdatadir) and the
#    real consumer-socket default, never "Perfetto's default path";
#  - the generated man pages exist and carry the same table;
#  - the example outputs in README.md and sql/README.md are what the
#    commands print (scripts/doc_examples.sh --check).
set -u
: "${top_builddir:=.}"
: "${top_srcdir:=.}"
CLI="$top_builddir/tools/shmtrace"
PRODUCER="$top_builddir/tools/shmtrace-producer"
INSPECT="$top_builddir/inspector/shmtrace-inspect"
DAEMON="$top_builddir/service/shmtraced"
for p in "$CLI" "$PRODUCER" "$INSPECT" "$DAEMON"; do
    [ -x "$p" ] || { echo "SKIP: $p not built"; exit 77; }
done
DIR=$(mktemp -d "${TMPDIR:-/tmp}/shmtrace-docs.XXXXXX") || exit 99
trap 'rm -rf "$DIR"' EXIT
fails=0
fail() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }

# exit_table FILE: the "Exit status (the same in every ..." block.
exit_table() {
    awk '/^Exit status \(the same in every shmtrace program\):$/ { on = 1 }
         on && /^$/ { exit }
         on { print }' "$1"
}

# 1. One exit-status table: shmtrace's, in all four and in the README.
"$CLI" --help >"$DIR/main.help"
exit_table "$DIR/main.help" >"$DIR/table"
[ "$(wc -l <"$DIR/table")" -ge 9 ] || fail "shmtrace --help has no exit table"
grep -q '^  130  interrupted' "$DIR/table" || fail "no 130 in the table"
for cmd in "$CLI record" "$CLI clone" "$CLI stats" "$PRODUCER" "$INSPECT" \
           "$DAEMON"; do
    $cmd --help >"$DIR/h" 2>&1 || fail "$cmd --help exited $?"
    exit_table "$DIR/h" >"$DIR/t2"
    cmp -s "$DIR/table" "$DIR/t2" ||
        fail "$cmd --help: exit table differs: $(diff "$DIR/table" "$DIR/t2")"
done
awk '/^<!-- exit-codes -->$/ { on = 1; next }
     /^<!-- \/exit-codes -->$/ { on = 0 }
     on && !/^```/ { print }' "$top_srcdir/README.md" >"$DIR/readme_table"
cmp -s "$DIR/table" "$DIR/readme_table" ||
    fail "README.md's exit table differs from --help: $(diff "$DIR/table" "$DIR/readme_table")"

# 2. Every long option in a --help is accepted: given with a value and
# --help after it, the program must not call it unknown.
check_opts() { # HELPFILE CMD...
    help=$1; shift
    for opt in $(grep -o -- '--[a-z][a-z-]*' "$help" | sort -u); do
        "$@" "$opt" x --help >"$DIR/o" 2>&1
        if grep -q "unknown option\|unrecognized option" "$DIR/o"; then
            fail "'$* $opt': listed in --help but unknown"
        fi
    done
}
for sub in record clone stats; do
    "$CLI" "$sub" --help >"$DIR/$sub.help"
    check_opts "$DIR/$sub.help" "$CLI" "$sub"
done
"$PRODUCER" --help >"$DIR/p.help";   check_opts "$DIR/p.help" "$PRODUCER"
"$INSPECT" --help >"$DIR/i.help";    check_opts "$DIR/i.help" "$INSPECT"
"$DAEMON" --help >"$DIR/d.help";     check_opts "$DIR/d.help" "$DAEMON"
# Every option the README shows in a command's synopsis is in its help.
readme_opts() { # PATTERN-of-the-synopsis-line HELPFILE
    line=$(grep -m1 -- "$1" "$top_srcdir/README.md")
    [ -n "$line" ] || { fail "README.md has no line matching '$1'"; return; }
    for opt in $(echo "$line" | grep -o -- ' -[-a-zA-Z][a-z-]*' | sort -u); do
        grep -q -- "$opt[ ,=]" "$2" ||
            fail "README shows '$opt' for '$1' but its --help does not"
    done
}
readme_opts '^\*\*`shmtrace record -o FILE' "$DIR/record.help"
readme_opts '^`shmtrace clone -o' "$DIR/clone.help"
readme_opts '^\*\*`shmtrace-producer \[' "$DIR/p.help"

# 3. shmtrace-inspect names the real paths.
if [ -n "${pkgdatadir:-}" ]; then
    grep -q "$pkgdatadir/data_loss.sql" "$DIR/i.help" ||
        fail "inspect --help does not name $pkgdatadir"
fi
grep -q "Perfetto's default path" "$DIR/i.help" &&
    fail "inspect --help still says \"Perfetto's default path\""
# The default it gives is the one of `shmtrace --help` (one place to say it).
grep -q 'else as `shmtrace --help` says' "$DIR/i.help" ||
    fail "inspect --help does not give the default socket"
grep -q 'PERFETTO_CONSUMER_SOCK_NAME' "$DIR/main.help" ||
    fail "shmtrace --help does not give the default socket"

# 4. Man pages generated from --help, with the same table.
for m in shmtrace shmtrace-producer shmtrace-inspect shmtraced; do
    f="$top_builddir/man/$m.1"
    [ -s "$f" ] || { fail "$f not generated"; continue; }
    grep -q '^\.TH ' "$f" || fail "$f is not a man page"
    grep -q '^  130  interrupted (Ctrl\\-C twice)$' "$f" ||
        fail "$f lacks the exit table"
done
grep -q '^\.SH "shmtrace record"' "$top_builddir/man/shmtrace.1" ||
    fail "shmtrace.1 lacks the record section"
if command -v groff >/dev/null 2>&1; then
    for f in "$top_builddir"/man/*.1; do
        w=$(groff -man -ww -z "$f" 2>&1)
        [ -z "$w" ] || fail "groff warns about $f: $w"
    done
fi

# 5. The docs' example outputs are what the commands print.
sh "$top_srcdir/scripts/doc_examples.sh" --check
rc=$?
[ $rc -eq 0 ] || [ $rc -eq 77 ] || fail "doc examples drifted (run scripts/doc_examples.sh --update)"

[ "$fails" -eq 0 ] || exit 1
echo "cli_docs: all checks passed"
