#!/bin/bash
# e2e_sec_sockets.sh - issue 10, attack 3, performed by a second uid:
# socket names squatted before root's daemon starts.
#   - the user starts shmtraced first on the old shared default names (in
#     a sticky, world-writable directory like /tmp): root's daemon, with
#     its defaults, still starts (its own root-only directory) and root's
#     producer, with its defaults, reaches root's daemon, not the user's;
#   - root's producer, shmtrace and shmtrace-inspect --live, pointed at the
#     user's sockets explicitly, refuse to talk to a daemon that is neither
#     root nor themselves (SO_PEERCRED), with a message saying so, and the
#     user's daemon gets no producer;
#   - a default directory squatted by someone else makes the daemon refuse
#     to start, naming the directory; abstract names need a flag;
# and the legitimate paths: the user's own clients use the user's daemon,
# the user's clients find root's daemon by default, a user's daemon
# creates its private /tmp/shmtrace-UID.
. "${top_srcdir:-.}/tests/e2e_lib.sh"
. "${top_srcdir:-.}/tests/e2e_sec_lib.sh"
e2e_need_tools "$SHMTRACED" "$CONSUMER" "$INSPECT"
sec_need_root
sec_setup
unset PERFETTO_PRODUCER_SOCK_NAME PERFETTO_CONSUMER_SOCK_NAME XDG_RUNTIME_DIR
# Root's default directory, private to this test (else /run/shmtrace).
export SHMTRACE_SYSTEM_SOCK_DIR="$E2E_DIR/run"
USER_TMP="/tmp/shmtrace-$SEC_UID"
[ -e "$USER_TMP" ] && { echo "SKIP: $USER_TMP exists already" >&2; exit 77; }
cleanup_user_tmp() { rm -rf "$USER_TMP"; e2e_cleanup; }
trap cleanup_user_tmp EXIT

wait_sock() {   # wait_sock PATH...
    local i=0
    for s in "$@"; do
        until [ -S "$s" ]; do
            i=$((i + 1)); [ $i -gt 600 ] && e2e_fail "no socket $s"
            sleep 0.05
        done
    done
}

# --- the squatter: the user's daemon on the old shared names -------------
UP="$SHARED/shmtrace-producer.sock" UC="$SHARED/shmtrace-consumer.sock"
e2e_spawn userd "${SEC_AS[@]}" "$SHMTRACED" --producer-socket "$UP" \
    --consumer-socket "$UC"
USERD=$E2E_LAST_PID
wait_sock "$UP" "$UC"

# --- root's daemon and producer, all defaults ----------------------------
e2e_spawn daemon "$SHMTRACED"
DAEMON_PID=$E2E_LAST_PID
RP="$E2E_DIR/run/shmtrace-producer.sock" RC="$E2E_DIR/run/shmtrace-consumer.sock"
wait_sock "$RP" "$RC"
[ "$(stat -c '%u %a' "$E2E_DIR/run")" = "0 755" ] ||
    e2e_fail "root's socket directory: $(stat -c '%u %a' "$E2E_DIR/run")"
e2e_spawn producer "$PRODUCER" -t 1 -r 1000 -S 32
i=0
until [ "$("$CONSUMER" stats 2>/dev/null |
           sed -n 's/^data_sources_registered=//p')" = 1 ]; do
    i=$((i + 1)); [ $i -gt 600 ] && e2e_fail "root's producer never reached root's daemon"
    sleep 0.05
done

# --- root's clients, pointed at the squatter's sockets -------------------
# (timeout: a producer that did connect would wait for sessions forever)
PERFETTO_PRODUCER_SOCK_NAME="$UP" timeout 30 "$PRODUCER" --no-reconnect \
    -c 10 >"$E2E_DIR/p2.log" 2>&1
rc=$?
[ $rc -eq 3 ] || e2e_fail "producer to the user's daemon: exit $rc, not 3"
grep -q "another user" "$E2E_DIR/p2.log" ||
    e2e_fail "unclear producer message: $(cat "$E2E_DIR/p2.log")"
timeout 60 "$CLI" record -q -o "$E2E_DIR/x.pftrace" -t 1s --socket "$UC" \
    >"$E2E_DIR/c2.log" 2>&1
rc=$?
[ $rc -eq 3 ] || e2e_fail "record to the user's daemon: exit $rc, not 3"
grep -q "runs as uid $SEC_UID, neither root nor you" "$E2E_DIR/c2.log" ||
    e2e_fail "unclear record message: $(cat "$E2E_DIR/c2.log")"
[ -e "$E2E_DIR/x.pftrace" ] && e2e_fail "record created its output anyway"
PERFETTO_CONSUMER_SOCK_NAME="$UC" "$CLI" stats >"$E2E_DIR/c3.log" 2>&1 &&
    e2e_fail "stats talked to the user's daemon"
"$CLI" clone -o "$E2E_DIR/y.pftrace" --socket "$UC" >"$E2E_DIR/c5.log" 2>&1
rc=$?
[ $rc -eq 3 ] && grep -q "runs as uid $SEC_UID, neither root nor you" \
    "$E2E_DIR/c5.log" || e2e_fail "clone to the user's daemon: exit $rc: \
$(cat "$E2E_DIR/c5.log")"
[ -e "$E2E_DIR/y.pftrace" ] && e2e_fail "clone created its output anyway"
"$CLI" trigger --socket "$UP" rootsecret >"$E2E_DIR/c6.log" 2>&1
rc=$?
[ $rc -eq 3 ] && grep -q "runs as uid $SEC_UID, neither root nor you" \
    "$E2E_DIR/c6.log" || e2e_fail "trigger to the user's daemon: exit $rc: \
$(cat "$E2E_DIR/c6.log")"
"$INSPECT" --live --socket "$UC" -o "$E2E_DIR/l.db" >"$E2E_DIR/c4.log" 2>&1
rc=$?
[ $rc -eq 3 ] || e2e_fail "inspect --live to the user's daemon: exit $rc, not 3"
grep -q "neither root nor you" "$E2E_DIR/c4.log" ||
    e2e_fail "unclear inspect message: $(cat "$E2E_DIR/c4.log")"
grep -q "connected\|session" "$E2E_DIR/userd.log" &&
    e2e_fail "the user's daemon got a client of root's: $(cat "$E2E_DIR/userd.log")"

# --- legitimate: the user's own clients ----------------------------------
sec_as_user env PERFETTO_CONSUMER_SOCK_NAME="$UC" "$CLI" stats \
    >"$E2E_DIR/u1.log" 2>&1 ||
    e2e_fail "the user cannot use its own daemon: $(cat "$E2E_DIR/u1.log")"
# ... and, by default, root's daemon (once an admin opened its sockets).
chmod 0666 "$RP" "$RC"
sec_as_user "$CLI" stats >"$E2E_DIR/u2.log" 2>&1 ||
    e2e_fail "the user's default does not find root's daemon: \
$(cat "$E2E_DIR/u2.log")"
grep -q 'data_sources_registered  1' "$E2E_DIR/u2.log" ||
    e2e_fail "not root's daemon: $(cat "$E2E_DIR/u2.log")"
kill -TERM "$USERD"
e2e_wait_pid "$USERD" 30 || e2e_fail "the user's daemon did not stop"

# --- a squatted default directory ----------------------------------------
mkdir -m 0777 "$SHARED/run2" && chown "$SEC_UID" "$SHARED/run2"
SHMTRACE_SYSTEM_SOCK_DIR="$SHARED/run2" "$SHMTRACED" >"$E2E_DIR/d2.log" 2>&1
rc=$?
[ $rc -eq 1 ] || e2e_fail "root's daemon started in a user's directory ($rc)"
grep -q "someone else may have taken it" "$E2E_DIR/d2.log" ||
    e2e_fail "unclear message: $(cat "$E2E_DIR/d2.log")"
mkdir -m 0700 "$USER_TMP"          # root's, where the user's should be
sec_as_user "$SHMTRACED" >"$E2E_DIR/d3.log" 2>&1
rc=$?
[ $rc -eq 1 ] || e2e_fail "the user's daemon used root's $USER_TMP ($rc)"
grep -q "$USER_TMP" "$E2E_DIR/d3.log" ||
    e2e_fail "unclear message: $(cat "$E2E_DIR/d3.log")"
rmdir "$USER_TMP"
# Legitimate: the user's daemon creates its own private directory.
e2e_spawn userd2 "${SEC_AS[@]}" "$SHMTRACED"
USERD2=$E2E_LAST_PID
wait_sock "$USER_TMP/shmtrace-producer.sock" "$USER_TMP/shmtrace-consumer.sock"
[ "$(stat -c '%u %a' "$USER_TMP")" = "$SEC_UID 700" ] ||
    e2e_fail "$USER_TMP: $(stat -c '%u %a' "$USER_TMP")"
sec_as_user "$CLI" stats >"$E2E_DIR/u3.log" 2>&1 ||
    e2e_fail "the user's client misses the user's daemon: \
$(cat "$E2E_DIR/u3.log")"
grep -q 'data_sources_registered  0' "$E2E_DIR/u3.log" ||
    e2e_fail "not the user's own daemon: $(cat "$E2E_DIR/u3.log")"
kill -TERM "$USERD2"
e2e_wait_pid "$USERD2" 30 || e2e_fail "the user's daemon did not stop"

# --- abstract names: only with the flag ----------------------------------
ABS="@shmtrace-sec-$$"
"$SHMTRACED" --producer-socket "$ABS" --consumer-socket "$E2E_DIR/a.sock" \
    >"$E2E_DIR/d4.log" 2>&1
rc=$?
[ $rc -eq 2 ] || e2e_fail "abstract name accepted without the flag ($rc)"
grep -q -- "--allow-abstract-sockets" "$E2E_DIR/d4.log" ||
    e2e_fail "unclear message: $(cat "$E2E_DIR/d4.log")"
"$SHMTRACED" --help | grep -q "no file permission protects" ||
    e2e_fail "--help does not warn about abstract sockets"
e2e_spawn absd "$SHMTRACED" --allow-abstract-sockets --producer-socket "$ABS" \
    --consumer-socket "$E2E_DIR/a.sock"
ABSD=$E2E_LAST_PID
wait_sock "$E2E_DIR/a.sock"
kill -TERM "$ABSD"
e2e_wait_pid "$ABSD" 30 || e2e_fail "abstract daemon did not stop"
[ "$E2E_RC" = 0 ] || e2e_fail "abstract daemon exit $E2E_RC"

e2e_stop_daemon
echo "ok"
