#!/bin/bash
# tests/check_ins_live.sh - shmtrace-inspect --live against the real daemon:
# a named session records into a small ring buffer while a producer writes
# far more than it holds; the inspector clones it (the session keeps
# running) and its database must hold the session's packets and stats.
# Also: --live exits 1 naming a missing session and 3 naming the socket
# when no service listens. Uses the service's e2e helpers (private sockets,
# every started process killed on exit). No timing assertions.
. "${top_srcdir:-.}/tests/e2e_lib.sh"
e2e_need_tools
INSPECT="$top_builddir/inspector/shmtrace-inspect"
[ -x "$SHMTRACED" ] && [ -x "$INSPECT" ] || { echo "SKIP: not built"; exit 77; }

# No service yet: exit 3 (service unreachable), the socket in the message.
"$INSPECT" --live -o "$E2E_DIR/none.db" 2>"$E2E_DIR/none.log"
[ $? -eq 3 ] || e2e_fail "--live without a service should exit 3"
grep -q "cannot connect to the tracing service at $PERFETTO_CONSUMER_SOCK_NAME" \
    "$E2E_DIR/none.log" ||
    e2e_fail "no reason given: $(cat "$E2E_DIR/none.log")"
[ ! -e "$E2E_DIR/none.db" ] || e2e_fail "a database was written"

e2e_start_daemon
e2e_spawn prod "$PRODUCER" -n ins.live -t 2 -S 200 -r 2000 --once
e2e_cli_wait 'data_sources_registered  1' "producer did not register"
e2e_spawn rec "$CLI" record -o "$E2E_DIR/rec.pftrace" -d ins.live \
    -b 64k -n ins-live-session -q
REC=$E2E_LAST_PID
e2e_cli_wait 'tracing_sessions         1' "session did not start"

# Clone until the snapshot has producer packets (they arrive at once).
live_has_packets() {
    "$INSPECT" -f -q --live --session-name ins-live-session \
        -o "$E2E_DIR/live.db" --keep-trace "$E2E_DIR/live.pftrace" \
        2>"$E2E_DIR/inspect.log" || e2e_fail "--live: rc=$?"
    E2E_SEEN=$(sqlite3 "$E2E_DIR/live.db" \
        "select count(*) from packet where seq_id > 1")
    [ "${E2E_SEEN:-0}" -gt 0 ]
}
e2e_until 100 0.1 "clone never had packets" live_has_packets
status=$(sqlite3 "$E2E_DIR/live.db" \
    "select value from trace_info where key = 'status'")
[ "$status" = complete ] || e2e_fail "status $status"
input=$(sqlite3 "$E2E_DIR/live.db" \
    "select value from trace_info where key = 'input'")
case $input in *ins-live-session*) ;; *) e2e_fail "input: $input" ;; esac
# The 15 single traced_ stats always exist; the clone went to a file that
# inspects the same way on its own.
singles=$(sqlite3 "$E2E_DIR/live.db" \
    "select count(*) from stats where name like 'traced_%' and idx is null")
[ "$singles" -eq 15 ] || e2e_fail "single stats: $singles"
"$INSPECT" -f -q "$E2E_DIR/live.pftrace" -o "$E2E_DIR/file.db" ||
    e2e_fail "kept trace does not inspect"
a=$(sqlite3 "$E2E_DIR/live.db" \
    "select group_concat(name||idx||value) from (select * from stats where name like 'traced_%' order by name, idx)")
b=$(sqlite3 "$E2E_DIR/file.db" \
    "select group_concat(name||idx||value) from (select * from stats where name like 'traced_%' order by name, idx)")
[ "$a" = "$b" ] || e2e_fail "live and file stats differ"
# No temp file left next to the database.
ls "$E2E_DIR"/live.db.live-* >/dev/null 2>&1 && e2e_fail "temp clone left"

# A session that does not exist: exit 1, the session named, nothing left.
"$INSPECT" -f --live --session-name no-such-session \
    -o "$E2E_DIR/x.db" --keep-trace "$E2E_DIR/x.pftrace" 2>"$E2E_DIR/x.log"
[ $? -eq 1 ] || e2e_fail "missing session should exit 1"
grep -q "cannot clone.*no tracing session named 'no-such-session'" \
    "$E2E_DIR/x.log" || e2e_fail "$(cat "$E2E_DIR/x.log")"
for f in "$E2E_DIR"/x.db* "$E2E_DIR"/x.pftrace*; do
    [ -e "$f" ] && e2e_fail "file left behind: $f"
done

# The session went on: stop it; the recording still works.
kill -INT "$REC"
e2e_wait_ok "$REC" 20 "record (stopped by SIGINT)"
"$INSPECT" -f -q "$E2E_DIR/rec.pftrace" -o "$E2E_DIR/rec.db" ||
    e2e_fail "recorded trace does not inspect"
echo "check_ins_live: all checks passed"
