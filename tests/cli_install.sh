#!/bin/sh
# tests/cli_install.sh - `make install` gives working programs (issue 14,
# item 7): the built libraries record the configured $(libdir) (no stale
# libtool state from an earlier --prefix: paths.stamp relinks them when it
# changes), and an install into a DESTDIR holds the four programs, their
# man pages and the SQL files, and the installed programs run against the
# installed libraries.
set -u
: "${top_builddir:=.}"
[ -n "${libdir:-}" ] && [ -n "${bindir:-}" ] && [ -n "${mandir:-}" ] &&
    [ -n "${pkgdatadir:-}" ] || { echo "SKIP: run through make check"; exit 77; }
command -v make >/dev/null 2>&1 || { echo "SKIP: no make"; exit 77; }
DIR=$(mktemp -d "${TMPDIR:-/tmp}/shmtrace-install.XXXXXX") || exit 99
trap 'rm -rf "$DIR"' EXIT
fails=0
fail() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }

# 1. What the libraries were linked for is what configure says now.
[ "$(cat "$top_builddir/paths.stamp")" = "$libdir $pkgdatadir" ] ||
    fail "paths.stamp '$(cat "$top_builddir/paths.stamp")' != '$libdir $pkgdatadir'"
for la in libshm/libshm.la libbuf/libbuf.la; do
    grep -q "^libdir='$libdir'\$" "$top_builddir/$la" ||
        fail "$la was linked for $(sed -n 's/^libdir=//p' "$top_builddir/$la"), not $libdir"
done

# 2. An install into DESTDIR: programs, man pages, SQL files.
make -C "$top_builddir" install DESTDIR="$DIR/root" >"$DIR/install.log" 2>&1 ||
    { fail "make install failed:"; tail -20 "$DIR/install.log" >&2; }
R=$DIR/root
for p in shmtrace shmtrace-producer shmtrace-inspect shmtraced; do
    [ -x "$R$bindir/$p" ] || fail "$bindir/$p not installed"
    [ -s "$R$mandir/man1/$p.1" ] || fail "$mandir/man1/$p.1 not installed"
    out=$(LD_LIBRARY_PATH="$R$libdir" "$R$bindir/$p" --version 2>&1) ||
        fail "installed $p --version: $out"
    case $out in "$p "[0-9]*) ;; *) fail "installed $p --version: $out" ;; esac
done
[ -s "$R$pkgdatadir/data_loss.sql" ] || fail "SQL files not installed"
grep -q "ldconfig" "$DIR/install.log" &&
    fail "ldconfig ran for a DESTDIR install"

[ "$fails" -eq 0 ] || exit 1
echo "cli_install: all checks passed"
