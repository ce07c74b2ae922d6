#!/bin/bash
# tests/check_exports.sh - the installed libraries are their contracts and
# nothing else (architecture issue): libbuf.so exports only tb_* and links
# nothing but libc (no IPC, no protobuf-c, no service); libshm.so exports
# only the producer API (smb_*, tw_*, prod_*). Reads the built .so files
# with nm and readelf; SKIP when those tools or the shared objects are
# missing (e.g. --disable-shared).
set -u
b=${top_builddir:-.}
libbuf=$b/libbuf/.libs/libbuf.so
libshm=$b/libshm/.libs/libshm.so
command -v nm >/dev/null && command -v readelf >/dev/null ||
    { echo "SKIP: nm/readelf not installed (binutils)"; exit 77; }
[ -f "$libbuf" ] && [ -f "$libshm" ] ||
    { echo "SKIP: shared libraries not built ($libbuf, $libshm)"; exit 77; }
fail=0

# exports NAME SO REGEX: every defined dynamic symbol of SO matches REGEX,
# and there is at least one.
exports() {
    local syms bad
    syms=$(nm -D --defined-only "$2" | awk '$2 ~ /^[TDBRVW]$/ {print $3}' |
           sed 's/@.*//' | grep -v '^LIB[A-Z]*_[0-9]*$')
    [ -n "$syms" ] || { echo "FAIL: $1 exports nothing"; fail=1; return; }
    bad=$(echo "$syms" | grep -Ev "$3")
    if [ -n "$bad" ]; then
        echo "FAIL: $1 exports symbols outside its contract ($3):"
        echo "$bad" | head -20
        fail=1
    else
        echo "ok: $1 exports $(echo "$syms" | wc -l) symbols, all $3"
    fi
}
exports libbuf.so "$libbuf" '^tb_'
exports libshm.so "$libshm" '^(smb|tw|prod)_'

needed=$(readelf -d "$libbuf" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')
for n in $needed; do
    case $n in
        libc.so.*|libpthread.so.*|librt.so.*|ld-linux*) ;;
        # sanitizer runtimes of an --enable-sanitizers build
        libasan.so.*|libubsan.so.*|libtsan.so.*|libm.so.*|libstdc++.so.*|libgcc_s.so.*) ;;
        *) echo "FAIL: libbuf.so needs $n (it must need only libc)"; fail=1 ;;
    esac
done
[ $fail -ne 0 ] || echo "ok: libbuf.so needs only: $(echo $needed)"

# The service must not hide inside libbuf.so, even unexported.
if nm "$libbuf" 2>/dev/null | grep -Eq ' [tT] (svc_|ipc_|smb_reader|protobuf_c)'; then
    echo "FAIL: libbuf.so contains service/IPC code:"
    nm "$libbuf" | grep -E ' [tT] (svc_|ipc_|smb_reader|protobuf_c)' | head
    fail=1
fi
exit $fail
