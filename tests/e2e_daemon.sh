#!/bin/sh
# e2e_daemon.sh - shmtraced's life cycle: --help, bad flags, sockets and
# their modes, refusal when another instance owns them, stale sockets
# replaced, clean stop on SIGTERM (sockets removed, exit 0).
. "${top_srcdir:-.}/tests/e2e_lib.sh"

"$SHMTRACED" --help >"$E2E_DIR/help.log" 2>&1 || e2e_fail "--help failed"
grep -q "consumer-socket" "$E2E_DIR/help.log" || e2e_fail "--help text"
"$SHMTRACED" --no-such-flag >/dev/null 2>&1
[ $? -eq 2 ] || e2e_fail "bad flag must exit 2"

e2e_start_daemon
pmode=$(stat -c %a "$PERFETTO_PRODUCER_SOCK_NAME")
cmode=$(stat -c %a "$PERFETTO_CONSUMER_SOCK_NAME")
[ "$pmode" = 660 ] || e2e_fail "producer socket mode $pmode"
[ "$cmode" = 600 ] || e2e_fail "consumer socket mode $cmode"

"$SHMTRACED" >"$E2E_DIR/second.log" 2>&1
[ $? -eq 1 ] || e2e_fail "a second instance must refuse to start"
grep -q "another service" "$E2E_DIR/second.log" || e2e_fail "refusal text"

kill -TERM "$DAEMON_PID"
e2e_wait_ok "$DAEMON_PID" 10 "daemon (SIGTERM)"
[ -S "$PERFETTO_CONSUMER_SOCK_NAME" ] && e2e_fail "socket left behind"

# A SIGKILLed daemon leaves stale sockets: the next one replaces them.
e2e_start_daemon
kill -KILL "$DAEMON_PID"
e2e_wait_pid "$DAEMON_PID" 10
[ -S "$PERFETTO_CONSUMER_SOCK_NAME" ] || e2e_fail "expected a stale socket"
e2e_start_daemon
kill -0 "$DAEMON_PID" || e2e_fail "daemon did not replace stale sockets"
echo "ok"
