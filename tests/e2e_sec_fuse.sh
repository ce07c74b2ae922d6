#!/bin/bash
# e2e_sec_fuse.sh - a second uid cannot make a root shmtraced wait on a
# FUSE file system: a write_into_file descriptor it passes that lives on
# FUSE is refused before the daemon touches it. A FUSE file system is
# served by a program (here bindfs, mounted allow_other as a user may with
# user_allow_other in /etc/fuse.conf); once that program stops answering,
# every fstat() or write() on its files waits, and a daemon writing the
# user's trace there waited with every user's sessions. The attack: the
# user records into a file on the mount, then its server stops; root's
# stats must still answer at once. The legitimate paths stay open: the
# user may record there when the client writes the file itself (no
# write_into_file), and root (the daemon's own uid) may use FUSE files.
# SKIP, saying why, without root, bindfs or a usable /dev/fuse.
. "${top_srcdir:-.}/tests/e2e_lib.sh"
. "${top_srcdir:-.}/tests/e2e_sec_lib.sh"
e2e_need_tools "$SHMTRACED" "$CONSUMER" "$TRACECHECK"
sec_need_root
command -v bindfs >/dev/null 2>&1 || {
    echo "SKIP: bindfs is not installed (apt-get install bindfs; the test" \
         "install step does it)" >&2; exit 77; }
command -v pgrep >/dev/null 2>&1 || {
    echo "SKIP: pgrep is not installed (apt-get install procps; the test" \
         "install step does it)" >&2; exit 77; }
[ -c /dev/fuse ] || { echo "SKIP: no /dev/fuse here" >&2; exit 77; }
sec_setup
SRC="$E2E_DIR/fusesrc"
MNT="$E2E_DIR/fuse"
mkdir -p "$SRC" "$MNT"
chown "$SEC_UID:$SEC_UID" "$SRC"
if ! bindfs -o allow_other "$SRC" "$MNT" 2>"$E2E_DIR/bindfs.err"; then
    echo "SKIP: cannot mount a FUSE file system here: $(cat \
        "$E2E_DIR/bindfs.err")" >&2
    exit 77
fi
BINDFS_PID=$(pgrep -n -x bindfs)
fuse_cleanup() {
    [ -n "${BINDFS_PID:-}" ] && kill -CONT "$BINDFS_PID" 2>/dev/null
    e2e_kill_all
    umount "$MNT" 2>/dev/null || umount -l "$MNT" 2>/dev/null
    rm -rf "$E2E_DIR"
}
trap fuse_cleanup EXIT
grep -q " $MNT .* - fuse" /proc/self/mountinfo ||
    e2e_fail "bindfs did not mount $MNT"

e2e_start_daemon
sec_open_sockets
e2e_spawn producer "$PRODUCER" -t 1 -r 2000 -S 64
e2e_wait_registered 1
cat >"$ATT/wif.cfg" <<'CFG'
buffers { size_kb: 1024 }
data_sources { config { name: "shmtrace.synthetic" } }
write_into_file: true
file_write_period_ms: 100
CFG

# --- attack: the daemon writes the user's trace onto the user's FUSE ----
e2e_spawn fuserec "${SEC_AS[@]}" "$CLI" record -c "$ATT/wif.cfg" \
    -o "$MNT/u.pftrace" -t 30s
FUSEREC=$E2E_LAST_PID
e2e_until 200 0.05 "record on FUSE neither ran nor was refused" \
    grep -q -e "session [0-9]* started (consumer uid $SEC_UID" \
    -e "EnableTracing refused (consumer uid $SEC_UID" "$E2E_DIR/daemon.log"
sleep 0.5                               # a period or more of writes
kill -STOP "$BINDFS_PID"                # the server stops answering
sleep 0.5
timeout 10 "$CLI" stats >"$E2E_DIR/root.log" 2>&1 ||
    e2e_fail "the daemon hangs on the user's FUSE file (root's stats: exit \
$?)"
kill -CONT "$BINDFS_PID"
wait "$FUSEREC" && e2e_fail "the daemon took a write_into_file file on FUSE \
from uid $SEC_UID"
grep -q "the file passed with EnableTracing is on a FUSE file system \
(fuse), whose server could make the tracing service wait" \
    "$E2E_DIR/fuserec.log" ||
    e2e_fail "unclear refusal: $(cat "$E2E_DIR/fuserec.log")"

# --- attack: a clone of the user's own session into a FUSE file ---------
e2e_spawn uwif "${SEC_AS[@]}" "$CLI" record -q -c "$ATT/wif.cfg" \
    -o "$ATT/own.pftrace" -t 30s -n own
e2e_until 200 0.05 "the user's local session never started" \
    grep -q "session [0-9]* started (consumer uid $SEC_UID" "$E2E_DIR/daemon.log"
sec_as_user "$CONSUMER" clone --out "$MNT/clone.pftrace" --pass-fd \
    --name own >"$E2E_DIR/clone.log" 2>&1 &&
    e2e_fail "the daemon wrote a clone into a FUSE file of uid $SEC_UID"
grep -q "the file passed with CloneSession is on a FUSE file system" \
    "$E2E_DIR/clone.log" "$E2E_DIR/daemon.log" ||
    e2e_fail "clone into FUSE: unclear refusal: $(cat "$E2E_DIR/clone.log")"

# --- legitimate: the client writes there itself; root may use FUSE ------
sec_as_user "$CLI" record -q -o "$MNT/u2.pftrace" -t 500ms -b 1m \
    >"$E2E_DIR/u2.log" 2>&1 ||
    e2e_fail "the user cannot record onto FUSE itself: $(cat \
        "$E2E_DIR/u2.log")"
e2e_check "$MNT/u2.pftrace" --min-total 1 >/dev/null
"$CLI" record -q -c "$ATT/wif.cfg" -o "$MNT/root.pftrace" -t 500ms \
    >"$E2E_DIR/r.log" 2>&1 ||
    e2e_fail "root cannot write_into_file onto FUSE: $(cat "$E2E_DIR/r.log")"
e2e_check "$MNT/root.pftrace" --min-total 1 >/dev/null
kill -TERM "$DAEMON_PID"
wait "$DAEMON_PID" || e2e_fail "the daemon did not stop cleanly"
echo "PASS: a FUSE file from another uid is refused before it is touched"
