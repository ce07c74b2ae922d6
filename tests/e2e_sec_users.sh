#!/bin/bash
# e2e_sec_users.sh - issue 10, attacks 1 and 2, performed by a second uid
# against a root shmtraced whose sockets were opened to everyone (0666):
#   - clone / inspect --live root's session (by name, by id, by default):
#     refused with the same words as a missing session, no data written;
#   - GetTraceStats: the second uid sees none of root's sessions/buffers;
#   - write_into_file + output_path from the second uid: refused, nothing
#     created or truncated in a directory it cannot write;
#   - a session of the second uid appending to a file it may write but not
#     read, then cloned: refused (write-only), root's data not copied;
# and the legitimate paths: root clones its own session and the user's
# (root's documented right), the user records, clones and sees its own
# session, writes a file through the fd shmtrace record passes, takes a
# session name root also uses, and root's own output_path still works.
. "${top_srcdir:-.}/tests/e2e_lib.sh"
. "${top_srcdir:-.}/tests/e2e_sec_lib.sh"
e2e_need_tools "$SHMTRACED" "$CONSUMER" "$TRACECHECK" "$INSPECT"
sec_need_root
sec_setup

e2e_start_daemon
sec_open_sockets
e2e_spawn producer "$PRODUCER" -t 1 -r 2000 -S 64
e2e_wait_registered 1

# sessions_of RUNNER...: tracing_sessions seen by that consumer.
sessions_seen() {
    "$@" "$CONSUMER" stats >"$E2E_DIR/stats.out" 2>"$E2E_DIR/stats.err" ||
        e2e_fail "stats failed: $(cat "$E2E_DIR/stats.err")"
    sec_value tracing_sessions "$E2E_DIR/stats.out"
}
wait_sessions() {   # wait_sessions N RUNNER...
    local want=$1 i=0; shift
    until [ "$(sessions_seen "$@")" = "$want" ]; do
        i=$((i + 1)); [ $i -gt 600 ] && e2e_fail "never saw $want sessions"
        sleep 0.05
    done
}
as_root() { "$@"; }

# Root's session, running until we stop it.
e2e_spawn rootrec "$CLI" record -q -o "$E2E_DIR/root.pftrace" -t 120s -b 4m \
    -n rootsess
ROOTREC=$E2E_LAST_PID
wait_sessions 1 as_root

# --- attack: clone root's session as the second uid ----------------------
for sel in "-n rootsess" "-i 1" ""; do
    # shellcheck disable=SC2086
    if sec_as_user "$CLI" clone $sel -o "$ATT/stolen" \
            >"$E2E_DIR/att.log" 2>&1; then
        e2e_fail "uid $SEC_UID cloned root's session ($sel)"
    fi
    grep -q "to clone among yours" "$E2E_DIR/att.log" ||
        e2e_fail "clone $sel: unclear error: $(cat "$E2E_DIR/att.log")"
    [ -s "$ATT/stolen" ] && e2e_fail "clone $sel wrote data to $ATT/stolen"
done
# Same words as for a session that does not exist at all.
sec_as_user "$CLI" clone -n rootsess -o "$ATT/s1" 2>&1 | sed 's/rootsess/X/' \
    >"$E2E_DIR/m1"
sec_as_user "$CLI" clone -n nosuchsess -o "$ATT/s2" 2>&1 |
    sed 's/nosuchsess/X/' >"$E2E_DIR/m2"
cmp -s "$E2E_DIR/m1" "$E2E_DIR/m2" ||
    e2e_fail "someone else's session is told apart from a missing one:
$(cat "$E2E_DIR/m1" "$E2E_DIR/m2")"
# The raw consumer, by id (the service's choice of the first session).
sec_as_user "$CONSUMER" clone --out "$ATT/raw" --session 1 \
    >"$E2E_DIR/att.log" 2>&1 && e2e_fail "raw CloneSession of session 1 worked"
[ -s "$ATT/raw" ] && e2e_fail "raw clone wrote data"

# --- attack: shmtrace-inspect --live on root's session -------------------
sec_as_user "$INSPECT" --live --session-name rootsess -o "$ATT/live.db" \
    >"$E2E_DIR/att.log" 2>&1
rc=$?
[ $rc -eq 1 ] || e2e_fail "inspect --live as uid $SEC_UID: exit $rc, not 1:
$(cat "$E2E_DIR/att.log")"
grep -q "to clone among yours" "$E2E_DIR/att.log" ||
    e2e_fail "inspect --live: unclear error: $(cat "$E2E_DIR/att.log")"
[ -e "$ATT/live.db" ] && e2e_fail "inspect --live wrote a database"

# --- attack: GetTraceStats shows root's figures --------------------------
[ "$(sessions_seen sec_as_user)" = 0 ] ||
    e2e_fail "uid $SEC_UID sees root's session in stats"
[ "$(sec_value total_buffers "$E2E_DIR/stats.out")" = 0 ] ||
    e2e_fail "uid $SEC_UID sees root's buffers"
sec_as_user "$CLI" stats >"$E2E_DIR/ustats" 2>&1 || e2e_fail "shmtrace stats"
grep -q '^buffer ' "$E2E_DIR/ustats" &&
    e2e_fail "shmtrace stats shows root's buffers: $(cat "$E2E_DIR/ustats")"
grep -q 'data_sources_registered  1' "$E2E_DIR/ustats" ||
    e2e_fail "public counts missing: $(cat "$E2E_DIR/ustats")"
[ "$(sessions_seen as_root)" = 1 ] || e2e_fail "root lost sight of its session"

# --- attack: output_path makes the root daemon create/truncate a file ----
printf 'secret\n' >"$VICTIM/existing"
for target in "$VICTIM/pwned" "$VICTIM/existing"; do
    sec_as_user "$CONSUMER" record --out "$ATT/dummy" --output-path \
        "$target" --duration-ms 300 >"$E2E_DIR/att.log" 2>&1 &&
        e2e_fail "output_path $target accepted from uid $SEC_UID"
    grep -q "does not create files for another user" "$E2E_DIR/att.log" ||
        e2e_fail "unclear output_path error: $(cat "$E2E_DIR/att.log")"
done
[ -e "$VICTIM/pwned" ] && e2e_fail "root's daemon created $VICTIM/pwned"
[ "$(cat "$VICTIM/existing")" = secret ] ||
    e2e_fail "root's daemon truncated $VICTIM/existing"

# --- legitimate: the user's own sessions -------------------------------
cat >"$ATT/wif.cfg" <<'CFG'
buffers { size_kb: 1024 }
data_sources { config { name: "shmtrace.synthetic" } }
write_into_file: true
file_write_period_ms: 200
output_path: "/should/be/ignored"
CFG
sec_as_user "$CLI" record -q -c "$ATT/wif.cfg" -o "$ATT/wif.pftrace" -t 1s \
    >"$E2E_DIR/wif.log" 2>&1 || e2e_fail "user write_into_file record: \
$(cat "$E2E_DIR/wif.log")"
[ "$(stat -c %u "$ATT/wif.pftrace")" = "$SEC_UID" ] ||
    e2e_fail "the user's trace file is not the user's"
e2e_check "$ATT/wif.pftrace" --min-total 1 --require-stats >/dev/null
# A long user session named like root's: names are per user.
e2e_spawn userrec "${SEC_AS[@]}" "$CLI" record -q -o "$ATT/user.pftrace" \
    -t 120s -b 1m -n rootsess
USERREC=$E2E_LAST_PID
wait_sessions 1 sec_as_user
wait_sessions 2 as_root
sleep 0.3                     # let the producer commit into it
sec_as_user "$CLI" clone -n rootsess -o "$ATT/uclone" >"$E2E_DIR/uc.log" \
    2>&1 || e2e_fail "the user cannot clone its own session: \
$(cat "$E2E_DIR/uc.log")"
e2e_check "$ATT/uclone" --min-total 1 >/dev/null
# Root clones its own session by that name (its own first)...
"$CLI" clone -n rootsess -o "$E2E_DIR/rclone" >"$E2E_DIR/rc.log" 2>&1 ||
    e2e_fail "root cannot clone its session: $(cat "$E2E_DIR/rc.log")"
e2e_check "$E2E_DIR/rclone" --min-total 1 >/dev/null
# ... and, as documented, the user's by id (ids so far: 1 root's, 2 the
# user's write_into_file session, 3 the user's long one; refused requests
# and failed clones take none).
"$CONSUMER" clone --out "$E2E_DIR/rclone2" --session 3 \
    >"$E2E_DIR/rc.log" 2>&1 ||
    e2e_fail "root cannot clone the user's session: $(cat "$E2E_DIR/rc.log")"

# Root's own output_path: the daemon's uid, so the service opens it.
"$CONSUMER" record --out "$E2E_DIR/dummy" --output-path "$VICTIM/rootfile" \
    --duration-ms 300 >"$E2E_DIR/rf.log" 2>&1 ||
    e2e_fail "root's output_path refused: $(cat "$E2E_DIR/rf.log")"
e2e_check "$VICTIM/rootfile" --require-stats >/dev/null

# --- attack: a write_into_file session after root's data, then cloned ---
# A file the second uid may write but not read (0622, like a drop box):
# it appends a session's trace to it, then clones that session. The
# clone must not copy the file's start (root's data) with the daemon's
# rights: the service reads back only through the session's own fd, and
# that one is write-only, so the clone is refused and says why.
printf 'root-only secret\n' >"$VICTIM/dropbox"
chmod 0622 "$VICTIM/dropbox"
e2e_spawn wo "${SEC_AS[@]}" "$CONSUMER" record --out "$VICTIM/dropbox" \
    --append --name wo --file-period-ms 100 --duration-ms 60000
WOREC=$E2E_LAST_PID
i=0
until [ "$(stat -c %s "$VICTIM/dropbox")" -gt 17 ]; do
    i=$((i + 1))
    [ $i -gt 600 ] && e2e_fail "the appending session wrote nothing"
    sleep 0.05
done
sec_as_user "$CONSUMER" clone --name wo --pass-fd --out "$ATT/wo_clone" \
    >"$E2E_DIR/wo.log" 2>&1 &&
    e2e_fail "a clone of a session with a write-only file worked"
grep -q "write-only" "$E2E_DIR/wo.log" ||
    e2e_fail "unclear error for the write-only file: $(cat "$E2E_DIR/wo.log")"
grep -q "root-only secret" "$ATT/wo_clone" 2>/dev/null &&
    e2e_fail "the clone copied root's data out of $VICTIM/dropbox"
kill -INT "$WOREC"
e2e_wait_pid "$WOREC" 30 || e2e_fail "the appending record hung"
[ "$(head -c 17 "$VICTIM/dropbox")" = "root-only secret" ] ||
    e2e_fail "root's data in $VICTIM/dropbox changed"

# --- attack: a clone into a FIFO that nobody reads ------------------------
# The second uid clones its own write_into_file session (its file opened
# read-write, as shmtrace record opens it) and passes, as the clone's
# output, a FIFO it holds open and never reads. The service writes such a
# clone itself, on its one thread: past the pipe's 64 KiB it would block
# there for good, and with it every user's tracing (it did, before the
# fd was checked). The fd must be refused at once, saying why, and the
# service must go on serving: root's stats, root's session.
cat >"$ATT/fifo.cfg" <<'CFG'
buffers { size_kb: 1024 }
data_sources { config { name: "shmtrace.synthetic" } }
write_into_file: true
file_write_period_ms: 100
unique_session_name: "fifosess"
CFG
e2e_spawn fifrec "${SEC_AS[@]}" "$CLI" record -q -c "$ATT/fifo.cfg" \
    -o "$ATT/fifo.pftrace" -t 60s
FIFREC=$E2E_LAST_PID
i=0
until [ "$(cat "$ATT"/fifo.pftrace* 2>/dev/null | wc -c)" -gt 262144 ]; do
    i=$((i + 1))
    [ $i -gt 600 ] && e2e_fail "the user's session wrote under 256 KiB in 30 s"
    sleep 0.05
done
sec_as_user mkfifo "$ATT/fifo"
timeout -k 5 30 "${SEC_AS[@]}" sh -c 'exec 3<>"$1"; exec "$2" clone --name \
    fifosess --pass-fd --out "$1"' sh "$ATT/fifo" "$CONSUMER" \
    >"$E2E_DIR/fifo.log" 2>&1
rc=$?
{ [ $rc -eq 124 ] || [ $rc -eq 137 ]; } && e2e_fail "the clone into a FIFO hung"
[ $rc -ne 0 ] || e2e_fail "a clone into a FIFO was accepted"
grep -q "CloneSession is a FIFO, not a regular file" "$E2E_DIR/fifo.log" ||
    e2e_fail "unclear error for the FIFO: $(cat "$E2E_DIR/fifo.log")"
timeout 10 "$CONSUMER" stats >"$E2E_DIR/fifo_stats.out" 2>&1 ||
    e2e_fail "the service stopped answering after the FIFO clone"
kill -INT "$FIFREC"
e2e_wait_pid "$FIFREC" 30 || e2e_fail "the user's FIFO-session record hung"
[ "$E2E_RC" = 0 ] || e2e_fail "the user's FIFO-session record failed ($E2E_RC)"

# --- attack: a regular expression glibc's matcher crashes on -------------
# With this filter regexec recursed until its stack overflowed
# (CVE-2019-9192) and killed the daemon, with everyone's sessions, as soon
# as the producer was matched. The config must be refused, naming the
# pattern and why, and the service must go on serving.
cat >"$ATT/regex.cfg" <<'CFG'
buffers { size_kb: 1024 }
data_sources {
  config { name: "shmtrace.synthetic" }
  producer_name_regex_filter: "(|)(\\2\\2)*.*"
}
duration_ms: 1000
CFG
timeout -k 5 30 "${SEC_AS[@]}" "$CLI" record -q -c "$ATT/regex.cfg" \
    -o "$ATT/regex.pftrace" >"$E2E_DIR/regex.log" 2>&1 &&
    e2e_fail "a config with a backreference in a regex was accepted"
grep -q 'producer_name_regex_filter "(|)(\\2\\2)\*\.\*" refused: a backreference' \
    "$E2E_DIR/regex.log" ||
    e2e_fail "unclear error for the regex: $(cat "$E2E_DIR/regex.log")"
kill -0 "$DAEMON_PID" 2>/dev/null || e2e_fail "a consumer's regex killed the daemon"
timeout 10 "$CONSUMER" stats >"$E2E_DIR/regex_stats.out" 2>&1 ||
    e2e_fail "the service stopped answering after the regex"

kill -INT "$USERREC" "$ROOTREC"
e2e_wait_pid "$USERREC" 30 || e2e_fail "user record hung"
[ "$E2E_RC" = 0 ] || e2e_fail "user record failed ($E2E_RC)"
e2e_wait_pid "$ROOTREC" 30 || e2e_fail "root record hung"
[ "$E2E_RC" = 0 ] || e2e_fail "root record failed ($E2E_RC)"
e2e_check "$E2E_DIR/root.pftrace" --min-total 1 --require-stats >/dev/null
e2e_check "$ATT/user.pftrace" --min-total 1 --require-stats >/dev/null
e2e_stop_daemon
echo "ok"
