#!/bin/sh
# scripts/help2man.sh - a man page (roff, section 1) from a program's --help,
# so the man pages say exactly what --help says (make builds them into
# man/; `make install` installs them; tests/cli_docs.sh checks them).
#
#   scripts/help2man.sh PROGRAM NAME VERSION "one-line summary" [SUBCOMMAND...]
#
# PROGRAM is run with --help (and, for each SUBCOMMAND, `PROGRAM SUB
# --help`). Its "Usage:" lines become SYNOPSIS, the rest DESCRIPTION, kept
# line for line in a no-fill block: our --help texts are laid out by hand
# (option tables, the exit-status table), and reflowing them would lose
# that. Only roff's special characters are escaped.
set -eu
[ $# -ge 4 ] || {
  echo "usage: scripts/help2man.sh PROGRAM NAME VERSION SUMMARY [SUB...]" >&2
  exit 2
}
prog=$1 name=$2 version=$3 summary=$4
shift 4

# Escape for roff: backslashes, and a leading . or ' (control lines).
esc() {
  sed -e 's/\\/\\e/g' -e "s/^\\([.']\\)/\\\\\\&\\1/" -e 's/-/\\-/g'
}

# section HELP_TEXT_FILE: SYNOPSIS lines then the body, no-fill.
body() {
  echo ".nf"
  grep -v "^Usage: \\|^       $name " "$1" | esc
  echo ".fi"
}

tmp=$(mktemp "${TMPDIR:-/tmp}/help2man.XXXXXX")
trap 'rm -f "$tmp"' EXIT
"$prog" --help >"$tmp"

printf '.TH %s 1 "" "shmtrace %s" "User Commands"\n' \
  "$(echo "$name" | tr '[:lower:]' '[:upper:]')" "$version"
echo ".SH NAME"
printf '%s \\- %s\n' "$(echo "$name" | esc)" "$(echo "$summary" | esc)"
echo ".SH SYNOPSIS"
echo ".nf"
grep "^Usage: \\|^       $name " "$tmp" | sed 's/^Usage: //; s/^       //' | esc
for sub in "$@"; do
  "$prog" "$sub" --help | grep '^Usage: ' | sed 's/^Usage: //' | esc
done
echo ".fi"
echo ".SH DESCRIPTION"
body "$tmp"
for sub in "$@"; do
  printf '.SH "%s %s"\n' "$name" "$sub"
  "$prog" "$sub" --help >"$tmp"
  body "$tmp"
done
echo ".SH SEE ALSO"
echo "shmtrace(1), shmtraced(1), shmtrace\\-producer(1), shmtrace\\-inspect(1);"
echo "README.md and sql/README.md of the shmtrace sources."
