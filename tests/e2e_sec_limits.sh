#!/bin/bash
# e2e_sec_limits.sh - one user cannot lock the others out of a root
# shmtraced whose sockets were opened to everyone: a second uid hoards
# what it can, and each hoard stops at its per-uid limit, with the reason,
# while root goes on tracing.
#   - sessions: the sixth of the user's is refused (--max-sessions-per-uid,
#     default 5); its clones are not counted;
#   - buffers: a config, and a clone (it copies), past the user's share
#     (--max-buffers-per-uid) are refused naming what it holds;
#   - connections: past --max-connections-per-uid, on either socket, the
#     next connection is refused and told why (shmtrace says the service's
#     words, the daemon logs it);
#   - descriptors: a daemon out of them (a low hard RLIMIT_NOFILE) refuses
#     the connections it cannot take, saying so, and sleeps; it used to
#     spin on the pending connection at 100% of a CPU;
#   - several users: two, each within its limit, cannot take a socket's
#     last 16 connections, kept for root, who still gets in and records.
. "${top_srcdir:-.}/tests/e2e_lib.sh"
. "${top_srcdir:-.}/tests/e2e_sec_lib.sh"
e2e_need_tools "$SHMTRACED" "$CONSUMER" "$TRACECHECK"
sec_need_root
sec_setup

start_daemon() {    # start_daemon [ULIMIT_N] -- FLAGS...
    local lim=$1; shift
    e2e_spawn daemon bash -c 'if [ "$1" != - ]; then ulimit -n "$1" ||
        exit 9; fi; shift; exec "$@"' _ "$lim" "$SHMTRACED" "$@"
    DAEMON_PID=$E2E_LAST_PID
    e2e_wait_socket
    sec_open_sockets
}
sessions_of_user() {
    E2E_SEEN=$(sec_as_user "$CONSUMER" stats 2>/dev/null |
               sed -n 's/^tracing_sessions=//p')
    [ "${E2E_SEEN:-0}" = "$1" ]
}
cpu_ticks() {   # utime + stime of a process, in clock ticks
    awk '{ print $14 + $15 }' "/proc/$1/stat"
}

start_daemon - --max-connections-per-uid 8 --max-buffers-per-uid 8
e2e_spawn producer "$PRODUCER" -t 1 -r 2000 -S 64
e2e_wait_registered 1

# --- sessions: five, then refused --------------------------------------
USER_RECS=""
for i in 1 2 3 4 5; do
    e2e_spawn "urec$i" "${SEC_AS[@]}" "$CLI" record -q \
        -o "$ATT/u$i.pftrace" -t 120s -b 1m -n "u$i"
    USER_RECS="$USER_RECS $E2E_LAST_PID"
done
e2e_until 600 0.05 "the user's 5 sessions never ran" sessions_of_user 5
sec_as_user "$CLI" record -o "$ATT/u6.pftrace" -t 1s -b 1m \
    >"$E2E_DIR/att.log" 2>&1 && e2e_fail "a sixth session of uid $SEC_UID ran"
grep -q "too many tracing sessions for uid $SEC_UID: it has 5 and a uid may \
have 5 at once" "$E2E_DIR/att.log" ||
    e2e_fail "sixth session: unclear refusal: $(cat "$E2E_DIR/att.log")"
[ -e "$ATT/u6.pftrace" ] && e2e_fail "a refused session left a file"
# Root is not held back, and the user's own clones are not sessions.
"$CLI" record -q -o "$E2E_DIR/root1.pftrace" -t 500ms -b 1m \
    >"$E2E_DIR/root.log" 2>&1 ||
    e2e_fail "root could not record: $(cat "$E2E_DIR/root.log")"
e2e_check "$E2E_DIR/root1.pftrace" --min-total 1 >/dev/null
sec_as_user "$CLI" clone -n u1 -o "$ATT/c1.pftrace" >"$E2E_DIR/uc.log" 2>&1 ||
    e2e_fail "the user could not clone its session at 5 sessions: \
$(cat "$E2E_DIR/uc.log")"

# --- buffers: the user's share is 8 MiB --------------------------------
set -- $USER_RECS
kill -INT "$1"                          # u1 ends cleanly: 4 MiB held
wait "$1"
e2e_until 600 0.05 "the user's session u1 never ended" sessions_of_user 4
sec_as_user "$CLI" record -o "$ATT/big.pftrace" -t 1s -b 8m \
    >"$E2E_DIR/att.log" 2>&1 && e2e_fail "uid $SEC_UID took 12 MiB"
grep -q "the config needs 8192 KB of buffers, but uid $SEC_UID holds 4096 KB \
in its sessions and clones, and a uid may hold 8192 KB" "$E2E_DIR/att.log" ||
    e2e_fail "buffer share: unclear refusal: $(cat "$E2E_DIR/att.log")"
e2e_spawn urec6 "${SEC_AS[@]}" "$CLI" record -q -o "$ATT/u6.pftrace" \
    -t 120s -b 3m -n u6
e2e_until 600 0.05 "the user's 3 MiB session never ran" sessions_of_user 5
# 7 MiB held: a clone of u6 would copy 3 more.
sec_as_user "$CLI" clone -n u6 -o "$ATT/c6.pftrace" >"$E2E_DIR/att.log" 2>&1 &&
    e2e_fail "uid $SEC_UID cloned past its share"
grep -q "the clone needs 3072 KB of buffers, but uid $SEC_UID holds 7168 KB" \
    "$E2E_DIR/att.log" ||
    e2e_fail "clone past the share: unclear refusal: $(cat "$E2E_DIR/att.log")"
# Root has a share of its own.
"$CLI" record -q -o "$E2E_DIR/root2.pftrace" -t 500ms -b 8m \
    >"$E2E_DIR/root.log" 2>&1 ||
    e2e_fail "root could not record 8 MiB: $(cat "$E2E_DIR/root.log")"

# --- connections: 8 per uid and socket ---------------------------------
# The user's five records hold five consumer connections: three more.
e2e_spawn uhold "${SEC_AS[@]}" "$CONSUMER" hold 5
e2e_until 200 0.05 "the hoarder never reported" grep -q '^why=' \
    "$E2E_DIR/uhold.log"
grep -qx 'bound=3' "$E2E_DIR/uhold.log" && grep -qx 'refused=2' \
    "$E2E_DIR/uhold.log" || e2e_fail "consumer hoard: $(cat "$E2E_DIR/uhold.log")"
grep -q "^why=uid $SEC_UID has 8 connections to this socket of the tracing \
service, the most one uid may have (shmtraced --max-connections-per-uid)" \
    "$E2E_DIR/uhold.log" || e2e_fail "hoard: why? $(cat "$E2E_DIR/uhold.log")"
sec_as_user "$CLI" stats >"$E2E_DIR/att.log" 2>&1
rc=$?
[ $rc -eq 3 ] || e2e_fail "the user's ninth connection: exit $rc, not 3"
grep -q "refused the connection: uid $SEC_UID has 8 connections" \
    "$E2E_DIR/att.log" || e2e_fail "shmtrace does not say why it was refused:
$(cat "$E2E_DIR/att.log")"
sec_as_user "$CLI" clone -n u2 -o "$ATT/refused.pftrace" \
    >"$E2E_DIR/att.log" 2>&1
rc=$?
[ $rc -eq 3 ] && grep -q "refused the connection: uid $SEC_UID" \
    "$E2E_DIR/att.log" || e2e_fail "clone on a refused connection: exit \
$rc: $(cat "$E2E_DIR/att.log")"
"$CLI" stats >"$E2E_DIR/root.log" 2>&1 ||
    e2e_fail "root was locked out: $(cat "$E2E_DIR/root.log")"
grep -q "consumer socket: refused a connection of uid $SEC_UID: uid $SEC_UID \
has 8 connections" "$E2E_DIR/daemon.log" ||
    e2e_fail "the daemon did not log the refusal"
# The producer socket: 8, then refused; root's producers still come in.
e2e_spawn phold "${SEC_AS[@]}" "$CONSUMER" hold 10 --producer
e2e_until 200 0.05 "the producer hoarder never reported" grep -q '^why=' \
    "$E2E_DIR/phold.log"
grep -qx 'bound=8' "$E2E_DIR/phold.log" && grep -qx 'refused=2' \
    "$E2E_DIR/phold.log" || e2e_fail "producer hoard: $(cat "$E2E_DIR/phold.log")"
# The user's triggers come on the producer socket: refused, told why, exit 3.
sec_as_user "$CLI" trigger hoarded >"$E2E_DIR/att.log" 2>&1
rc=$?
[ $rc -eq 3 ] && grep -q "refused the connection: uid $SEC_UID has 8 \
connections" "$E2E_DIR/att.log" || e2e_fail "trigger on a refused \
connection: exit $rc: $(cat "$E2E_DIR/att.log")"
e2e_spawn producer2 "$PRODUCER" -t 1 -r 100 -S 64
e2e_until 600 0.05 "root's second producer was locked out" \
    e2e_stat_ge producers_connected 2

# --- descriptors: a daemon that has none left sleeps, and says so ------
kill -TERM "$DAEMON_PID"
wait "$DAEMON_PID"
e2e_kill_all
E2E_PIDS=""
rm -f "$PERFETTO_PRODUCER_SOCK_NAME" "$PERFETTO_CONSUMER_SOCK_NAME"
start_daemon 40
e2e_spawn fdhold "${SEC_AS[@]}" "$CONSUMER" hold 60
FDHOLD=$E2E_LAST_PID
e2e_until 600 0.05 "the descriptor hoarder never reported" grep -q '^why=' \
    "$E2E_DIR/fdhold.log"
grep -q '^why=the tracing service is out of file descriptors (RLIMIT_NOFILE)' \
    "$E2E_DIR/fdhold.log" || e2e_fail "out of descriptors: $(cat \
    "$E2E_DIR/fdhold.log")"
# A pending connection keeps the listening socket readable: root knocks,
# and the daemon must neither spin nor hang.
"$CLI" stats >"$E2E_DIR/att.log" 2>&1 &&
    e2e_fail "a daemon without descriptors served root"
grep -q "out of file descriptors" "$E2E_DIR/att.log" ||
    e2e_fail "root not told why: $(cat "$E2E_DIR/att.log")"
t0=$(cpu_ticks "$DAEMON_PID")
sleep 1
t1=$(cpu_ticks "$DAEMON_PID")
# A spinning daemon takes ~100 ticks a second (USER_HZ); an idle one ~0.
[ $((t1 - t0)) -lt 50 ] ||
    e2e_fail "the daemon spins without descriptors: $((t1 - t0)) ticks in 1 s"
kill -TERM "$FDHOLD"
wait "$FDHOLD"
e2e_until 200 0.05 "root never got back in" "$CLI" stats

# --- several users: the last 16 connections are root's ----------------
# Two users, each within its 512 (the default), take all they can of a
# socket's 1024: the second is refused at 1008, told why, and root still
# gets in.
kill -TERM "$DAEMON_PID"
wait "$DAEMON_PID"
rm -f "$PERFETTO_PRODUCER_SOCK_NAME" "$PERFETTO_CONSUMER_SOCK_NAME"
start_daemon -
hold_as() {     # hold_as NAME UID N: a hoarder of N consumer connections
    e2e_spawn "$1" bash -c 'ulimit -n 4096 && exec setpriv --reuid="$1" \
        --regid="$1" --clear-groups -- "$2" hold "$3"' _ "$2" "$CONSUMER" "$3"
    e2e_until 1200 0.05 "hoarder $1 never reported" grep -q '^why=' \
        "$E2E_DIR/$1.log"
}
hold_as hold1 "$SEC_UID" 510
grep -qx 'bound=510' "$E2E_DIR/hold1.log" ||
    e2e_fail "first user's hoard: $(cat "$E2E_DIR/hold1.log")"
hold_as hold2 "$((SEC_UID + 1))" 510
grep -qx 'bound=498' "$E2E_DIR/hold2.log" && grep -qx 'refused=12' \
    "$E2E_DIR/hold2.log" || e2e_fail "second user's hoard: \
$(cat "$E2E_DIR/hold2.log")"
kept="has 1008 connections on this socket, and keeps the last 16 of its 1024"
grep -q "^why=the tracing service $kept for root and its own uid" \
    "$E2E_DIR/hold2.log" ||
    e2e_fail "not told the rest is kept: $(cat "$E2E_DIR/hold2.log")"
sec_as_user "$CLI" stats >"$E2E_DIR/att.log" 2>&1
rc=$?
[ $rc -eq 3 ] && grep -q "$kept" "$E2E_DIR/att.log" ||
    e2e_fail "a user past 1008: exit $rc: $(cat "$E2E_DIR/att.log")"
"$CLI" stats >"$E2E_DIR/root.log" 2>&1 ||
    e2e_fail "two users locked root out: $(cat "$E2E_DIR/root.log")"
"$CLI" record -q -o "$E2E_DIR/root3.pftrace" -t 300ms -b 1m \
    >"$E2E_DIR/root.log" 2>&1 ||
    e2e_fail "root could not record past two users: $(cat "$E2E_DIR/root.log")"
kill -TERM "$DAEMON_PID"
wait "$DAEMON_PID" || e2e_fail "the daemon did not stop cleanly"
echo "PASS: per-uid limits on sessions, buffers, connections; the last \
connections kept for root; no spin without descriptors"
