#!/bin/bash
# e2e_sec_outputs.sh - issue 10, attack 4: outputs are regular files.
#   - as root, `shmtrace-inspect -o DEV -f` on a character device (a copy of
#     /dev/full made with mknod, so a regression cannot break the machine's
#     own) is refused and the node stays a device;
#   - a second uid plants, in a shared sticky directory, a symlink to a
#     file of root's, a dangling symlink into root's directory, a FIFO, a
#     socket and a directory under the names root's tools will write:
#     shmtrace record -o, shmtrace clone -o, shmtrace-inspect -o (with -f),
#     shmtrace-inspect --live --keep-trace, and the service's own
#     output_path. Every one is refused at once (a FIFO must not block),
#     with a message naming what is there, and nothing of root's changes;
# and the legitimate paths: new files (mode 0600), existing regular files
# replaced (the inspector only with -f).
. "${top_srcdir:-.}/tests/e2e_lib.sh"
. "${top_srcdir:-.}/tests/e2e_sec_lib.sh"
e2e_need_tools "$SHMTRACED" "$CONSUMER" "$INSPECT" "$TRACECHECK"
sec_need_root
sec_setup
TRACE="$top_srcdir/tests/data/discard_v2.pftrace"
[ -r "$TRACE" ] || { echo "SKIP: $TRACE missing" >&2; exit 77; }

# --- the reported attack: -o /dev/full -f --------------------------------
FULL="$E2E_DIR/full"
if mknod "$FULL" c 1 7 2>/dev/null; then
    "$INSPECT" -q "$TRACE" -o "$FULL" -f >"$E2E_DIR/i0.log" 2>&1
    rc=$?
    [ $rc -eq 1 ] || e2e_fail "inspect -o DEVICE -f: exit $rc, not 1"
    grep -q "is a character device, not a regular file" "$E2E_DIR/i0.log" ||
        e2e_fail "unclear message: $(cat "$E2E_DIR/i0.log")"
    [ -c "$FULL" ] || e2e_fail "the device node was replaced"
else
    # Never aim at the machine's own /dev/full: a regression would break it.
    echo "note: mknod not permitted here (no CAP_MKNOD): device case skipped" >&2
fi

# --- the planted names ----------------------------------------------------
printf 'secret\n' >"$VICTIM/secret"
sec_as_user ln -s "$VICTIM/secret" "$SHARED/link"
sec_as_user ln -s "$VICTIM/created" "$SHARED/dangling"
sec_as_user mkfifo "$SHARED/fifo"
sec_as_user mkdir "$SHARED/dir"
# (python3 may live where the second uid cannot run it: bind as root,
# then give the socket to the second uid.)
PLANTS="link dangling fifo dir"
if python3 -c 'import socket,sys; socket.socket(socket.AF_UNIX).bind(sys.argv[1])' \
        "$SHARED/sock" 2>/dev/null && chown -h "$SEC_UID" "$SHARED/sock"; then
    PLANTS="$PLANTS sock"
else
    echo "note: no python3 to create a socket file; sockets not planted" >&2
fi
kind_of() { stat -c %F "$1"; }
declare -A KIND
for p in $PLANTS; do KIND[$p]=$(kind_of "$SHARED/$p"); done

victim_intact() {   # victim_intact WHAT
    [ "$(cat "$VICTIM/secret")" = secret ] || e2e_fail "$1 changed $VICTIM/secret"
    [ -e "$VICTIM/created" ] && e2e_fail "$1 created $VICTIM/created"
    for p in $PLANTS; do
        [ "$(kind_of "$SHARED/$p")" = "${KIND[$p]}" ] ||
            e2e_fail "$1 replaced $SHARED/$p (${KIND[$p]})"
    done
    return 0
}
refused() {   # refused WHAT LOG: nonzero exit checked by the caller
    grep -q "refusing to write\|refusing to replace\|refused, left alone\|is a directory: give a file name" "$2" ||
        e2e_fail "$1: unclear message: $(cat "$2")"
    victim_intact "$1"
}

e2e_start_daemon
e2e_spawn producer "$PRODUCER" -t 1 -r 1000 -S 32
e2e_wait_registered 1
e2e_spawn rootrec "$CLI" record -q -o "$E2E_DIR/main.pftrace" -t 120s -b 1m \
    -n sess
ROOTREC=$E2E_LAST_PID
i=0
until [ "$("$CONSUMER" stats | sed -n 's/^tracing_sessions=//p')" = 1 ]; do
    i=$((i + 1)); [ $i -gt 600 ] && e2e_fail "the session never started"
    sleep 0.05
done

for p in $PLANTS; do
    out="$SHARED/$p"
    timeout 30 "$CLI" record -q -o "$out" -t 1s >"$E2E_DIR/r.log" 2>&1 &&
        e2e_fail "record -o $p accepted"
    refused "record -o $p" "$E2E_DIR/r.log"
    timeout 30 "$CLI" clone -n sess -o "$out" >"$E2E_DIR/c.log" 2>&1 &&
        e2e_fail "clone -o $p accepted"
    refused "clone -o $p" "$E2E_DIR/c.log"
    timeout 30 "$INSPECT" -q "$TRACE" -o "$out" -f >"$E2E_DIR/i.log" 2>&1 &&
        e2e_fail "inspect -o $p -f accepted"
    refused "inspect -o $p -f" "$E2E_DIR/i.log"
    timeout 30 "$INSPECT" -q --live --session-name sess --keep-trace "$out" \
        -o "$E2E_DIR/k.db" >"$E2E_DIR/k.log" 2>&1 &&
        e2e_fail "inspect --keep-trace $p accepted"
    refused "inspect --keep-trace $p" "$E2E_DIR/k.log"
    rm -f "$E2E_DIR/k.db"
    # The service's own file (root's consumer, so output_path is allowed).
    timeout 30 "$CONSUMER" record --out "$E2E_DIR/dummy" --output-path "$out" \
        --duration-ms 200 >"$E2E_DIR/s.log" 2>&1 &&
        e2e_fail "the service wrote output_path $p"
    refused "output_path $p" "$E2E_DIR/s.log"
done
# An inspector database whose -wal companion is a planted symlink.
: >"$SHARED/db2" && chmod 0666 "$SHARED/db2"
sec_as_user ln -s "$VICTIM/secret" "$SHARED/db2-wal"
"$INSPECT" -q "$TRACE" -o "$SHARED/db2" -f >"$E2E_DIR/w.log" 2>&1 &&
    e2e_fail "inspect replaced a database with a symlinked -wal"
refused "inspect -o db2 (symlinked -wal)" "$E2E_DIR/w.log"

# --- legitimate ----------------------------------------------------------
printf 'junk' >"$E2E_DIR/old.pftrace"
"$CLI" clone -n sess -o "$E2E_DIR/old.pftrace" >"$E2E_DIR/l1.log" 2>&1 ||
    e2e_fail "clone over a regular file: $(cat "$E2E_DIR/l1.log")"
e2e_check "$E2E_DIR/old.pftrace" --min-total 1 >/dev/null
"$CLI" clone -n sess -o "$E2E_DIR/new.pftrace" >"$E2E_DIR/l2.log" 2>&1 ||
    e2e_fail "clone into a new file: $(cat "$E2E_DIR/l2.log")"
[ "$(stat -c %a "$E2E_DIR/new.pftrace")" = 600 ] ||
    e2e_fail "new trace mode $(stat -c %a "$E2E_DIR/new.pftrace"), not 600"
"$INSPECT" -q "$TRACE" -o "$E2E_DIR/t.db" || e2e_fail "inspect new db"
"$INSPECT" -q "$TRACE" -o "$E2E_DIR/t.db" >"$E2E_DIR/l3.log" 2>&1 &&
    e2e_fail "inspect replaced a database without -f"
grep -q "already exists" "$E2E_DIR/l3.log" || e2e_fail "$(cat "$E2E_DIR/l3.log")"
"$INSPECT" -q "$TRACE" -o "$E2E_DIR/t.db" -f || e2e_fail "inspect -f"
if command -v sqlite3 >/dev/null 2>&1; then
    [ "$(sqlite3 "$E2E_DIR/t.db" 'select count(*) from packet')" -gt 0 ] ||
        e2e_fail "the replaced database is empty"
fi
"$CLI" record -q -o "$E2E_DIR/old.pftrace" -t 1s -b 1m \
    >"$E2E_DIR/l4.log" 2>&1 ||
    e2e_fail "record over a regular file: $(cat "$E2E_DIR/l4.log")"
e2e_check "$E2E_DIR/old.pftrace" --min-total 1 --require-stats >/dev/null

kill -INT "$ROOTREC"
e2e_wait_pid "$ROOTREC" 30 || e2e_fail "record hung"
[ "$E2E_RC" = 0 ] || e2e_fail "record failed ($E2E_RC)"
e2e_stop_daemon
echo "ok"
