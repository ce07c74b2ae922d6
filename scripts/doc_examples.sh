#!/bin/sh
# scripts/doc_examples.sh - the example outputs in the docs, generated from
# real runs so they cannot drift from what the commands print.
#
#   scripts/doc_examples.sh --check  [FILE.md...]   exit 1 if a block differs
#   scripts/doc_examples.sh --update [FILE.md...]   rewrite the blocks
#
# (default files: README.md sql/README.md). A generated region is
#
#   <!-- example: tests/data/ring_loss_v2.pftrace -->
#       $ sqlite3 trace.db < sql/data_loss.sql
#       ...output...
#   <!-- /example -->
#
# The trace is inspected into trace.db (shmtrace-inspect, from the build
# tree) in a scratch directory where sql/ is the source tree's; every line
# starting with "$ " (after the block's indentation) is run there with sh
# and the lines up to the next command, fence or end marker are replaced by
# its output (trailing blanks stripped, indented like the command). Run by
# tests/cli_docs.sh on every `make check`; after changing a query or the
# inspector, run --update and commit the result.
set -u
: "${top_srcdir:=$(cd "$(dirname "$0")/.." && pwd)}"
: "${top_builddir:=$top_srcdir}"
INSPECT=$top_builddir/inspector/shmtrace-inspect

mode=${1:-}
case "$mode" in
  --check|--update) shift ;;
  *) echo "usage: scripts/doc_examples.sh --check|--update [FILE.md...]" >&2
     exit 2 ;;
esac
[ $# -gt 0 ] || set -- "$top_srcdir/README.md" "$top_srcdir/sql/README.md"
[ -x "$INSPECT" ] || { echo "doc_examples: $INSPECT not built" >&2; exit 77; }
command -v sqlite3 >/dev/null 2>&1 ||
  { echo "doc_examples: sqlite3 not installed" >&2; exit 77; }

work=$(mktemp -d "${TMPDIR:-/tmp}/shmtrace-docex.XXXXXX") || exit 99
trap 'rm -rf "$work"' EXIT
srcsql=$(cd "$top_srcdir/sql" && pwd)

# run_cmd TRACE CMD: CMD's output in a scratch dir holding trace.db of TRACE.
run_cmd() {
  rm -rf "$work/run"
  mkdir "$work/run" && ln -s "$srcsql" "$work/run/sql" || exit 99
  "$INSPECT" -q -o "$work/run/trace.db" "$top_srcdir/$1" ||
    { echo "doc_examples: cannot inspect $1" >&2; exit 1; }
  (cd "$work/run" && sh -c "$2" 2>&1) | sed 's/[[:space:]]*$//'
}

status=0
for md in "$@"; do
  out=$work/new.md
  : >"$out"
  trace=""          # inside a region: its trace
  skipping=0        # skipping the old output of a command
  prefix=""
  ncmd=0
  while IFS= read -r line || [ -n "$line" ]; do
    case "$line" in
      "<!-- example: "*" -->")
        trace=${line#<!-- example: }; trace=${trace% -->}
        ncmd=0; skipping=0
        printf '%s\n' "$line" >>"$out"; continue ;;
      "<!-- /example -->")
        trace=""; skipping=0
        printf '%s\n' "$line" >>"$out"; continue ;;
    esac
    if [ -n "$trace" ]; then
      stripped=${line#"${line%%[! ]*}"}
      case "$stripped" in
        '$ '*)
          prefix=${line%%"$stripped"}
          [ "$ncmd" -gt 0 ] && [ -n "$prefix" ] && echo >>"$out"
          ncmd=$((ncmd + 1))
          printf '%s\n' "$line" >>"$out"
          run_cmd "$trace" "${stripped#\$ }" |
            sed "s/^/$prefix/; s/[[:space:]]*\$//" >>"$out"
          skipping=1; continue ;;
        '```'*)
          skipping=0 ;;
      esac
      [ "$skipping" = 1 ] && continue
    fi
    printf '%s\n' "$line" >>"$out"
  done <"$md"
  if ! cmp -s "$md" "$out"; then
    if [ "$mode" = --update ]; then
      cp "$out" "$md"
      echo "doc_examples: updated $md"
    else
      echo "doc_examples: $md differs from what the commands print:" >&2
      diff -u "$md" "$out" >&2
      status=1
    fi
  fi
done
exit $status
