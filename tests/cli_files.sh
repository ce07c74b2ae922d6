#!/bin/bash
# tests/cli_files.sh - what `shmtrace record`/`clone` leave on disk and say
# when a run fails or is cut short (issue 14, items 1, 2 and 7): a failed
# run leaves no file (and an older one intact); a run the service cuts
# short (shmtraced SIGTERMed) keeps a whole trace, says so and exits 1; a
# daemon SIGKILLed mid-record leaves nothing, or with --long a file of
# whole packets that is reported as such; a second Ctrl-C exits 130 with
# nothing written, or with --long (or write_into_file) the whole packets
# in the file so far; --json summaries; the progress line on a pty. Real
# daemon and producer on private sockets (e2e_lib.sh); waits on
# conditions, never on timing.
. "${top_srcdir:-.}/tests/e2e_lib.sh"
e2e_need_tools
[ -x "$SHMTRACED" ] && [ -x "$TRACECHECK" ] || { echo "SKIP: daemon not built"; exit 77; }
D=$E2E_DIR

# no_file PATH: neither PATH nor PATH.partial.* exists.
no_file() {
    for f in "$1" "$1".partial.*; do
        [ -e "$f" ] && e2e_fail "$f left behind"
    done
    return 0
}
# wait_for CMD...: until CMD succeeds (at most ~30 s).
wait_for() {
    local i=0
    until "$@" >/dev/null 2>&1; do
        i=$((i + 1)); [ $i -gt 600 ] && e2e_fail "timed out waiting for: $*"
        sleep 0.05
    done
}
session_running() { "$CLI" stats 2>/dev/null | grep -q '^tracing_sessions         1'; }
registered() { "$CLI" stats 2>/dev/null | grep -q '^data_sources_registered  1'; }
# The running session's buffer holds committed chunks (the producer has
# written into it: stopping the service then leaves packets to read).
session_has_data() {
    "$CLI" stats 2>/dev/null | grep -Eq '^buffer [0-9]+: .* written [1-9]'
}
# The file being written already holds producer packets (a check of a
# file caught mid-write just fails and is retried).
partial_has_packets() {
    for f in "$1".partial.*; do
        [ -s "$f" ] && "$TRACECHECK" --min-total 1 "$f" && return 0
    done
    return 1
}
restart_daemon() {
    rm -f "$PERFETTO_PRODUCER_SOCK_NAME" "$PERFETTO_CONSUMER_SOCK_NAME"
    e2e_start_daemon
    wait_for registered # the producer reconnects on its own
}

e2e_start_daemon
e2e_spawn prod "$PRODUCER" -t 2 -r 2000 -S 64
PROD=$E2E_LAST_PID
wait_for registered

# 1. A config the service refuses: exit 1, its reason, no file.
printf 'buffers { size_kb: 4194400 }\n' >"$D/bad.cfg"
"$CLI" record -c "$D/bad.cfg" -o "$D/r1.pftrace" -q 2>"$D/r1.err"
rc=$?
[ $rc -eq 1 ] || e2e_fail "refused config: rc=$rc"
grep -q "size_kb 4194400 is invalid" "$D/r1.err" || e2e_fail "r1: $(cat "$D/r1.err")"
grep -q "nothing written" "$D/r1.err" || e2e_fail "r1: $(cat "$D/r1.err")"
no_file "$D/r1.pftrace"

# 2. clone of a session that does not exist: named, exit 1, nothing
# written, and an older file of that name is left as it was.
echo old >"$D/keep.pftrace"
"$CLI" clone -n nosuch -o "$D/keep.pftrace" 2>"$D/c2.err"
rc=$?
[ $rc -eq 1 ] || e2e_fail "clone nosuch: rc=$rc"
grep -q "^shmtrace clone: no tracing session named 'nosuch' to clone.*; nothing written\$" \
    "$D/c2.err" || e2e_fail "c2: $(cat "$D/c2.err")"
[ "$(cat "$D/keep.pftrace")" = old ] || e2e_fail "older file clobbered"
no_file "$D/keep.pftrace.partial"

# 3. --json: one JSON object on stdout, the text summary replaced.
"$CLI" record -o "$D/j.pftrace" -t 500ms -q --json >"$D/j.json" \
    2>"$D/j.err" || e2e_fail "record --json: rc=$?"
grep -q '^{"command":"record","status":"complete","file":"[^"]*j.pftrace","seconds":[0-9.]*,"packets":[1-9][0-9]*,' \
    "$D/j.json" || e2e_fail "record --json: $(cat "$D/j.json")"
grep -q '"trace_stats":{"buffer_stats":\[{' "$D/j.json" ||
    e2e_fail "record --json has no trace_stats: $(cat "$D/j.json")"
[ "$(wc -l <"$D/j.json")" -eq 1 ] || e2e_fail "record --json: not one line"
"$CLI" stats --json >"$D/s.json" || e2e_fail "stats --json: rc=$?"
grep -q '^{.*"producers_connected":1,.*"data_sources_registered":1,' \
    "$D/s.json" || e2e_fail "stats --json: $(cat "$D/s.json")"
if command -v python3 >/dev/null 2>&1; then
    for f in j s; do
        python3 -m json.tool "$D/$f.json" >/dev/null ||
            e2e_fail "$f.json is not valid JSON"
    done
fi

# 4. shmtraced stopped (SIGTERM) mid-record: the service ends the session
# early; the trace is whole and kept, the note says so, exit 1.
e2e_spawn rec4 "$CLI" record -o "$D/r4.pftrace" -t 60 -q
R=$E2E_LAST_PID
wait_for session_running
wait_for session_has_data
kill -TERM "$DAEMON_PID"
e2e_wait_pid "$R" 60 || e2e_fail "record did not end with the daemon"
[ "$E2E_RC" -eq 1 ] || e2e_fail "cut short: rc=$E2E_RC, want 1"
grep -q "the service ended the session after .* s, before the 60.0 s asked for" \
    "$D/rec4.log" || e2e_fail "no note: $(cat "$D/rec4.log")"
e2e_check "$D/r4.pftrace" --min-total 1
no_file "$D/r4.pftrace.partial"
e2e_wait_pid "$DAEMON_PID" 30 || e2e_fail "daemon did not stop"
restart_daemon

# 5. shmtraced SIGKILLed mid-record: nothing was read, nothing written.
e2e_spawn rec5 "$CLI" record -o "$D/r5.pftrace" -q
R=$E2E_LAST_PID
wait_for session_running
kill -KILL "$DAEMON_PID"
e2e_wait_pid "$R" 60 || e2e_fail "record did not end with the daemon"
[ "$E2E_RC" -eq 1 ] || e2e_fail "daemon killed: rc=$E2E_RC"
grep -q "connection to the tracing service at .* was lost" "$D/rec5.log" ||
    e2e_fail "r5: $(cat "$D/rec5.log")"
grep -q "nothing written" "$D/rec5.log" || e2e_fail "r5: $(cat "$D/rec5.log")"
no_file "$D/r5.pftrace"
restart_daemon

# 6. Same with --long: what was read is whole packets, kept and reported.
e2e_spawn rec6 "$CLI" record -o "$D/r6.pftrace" --long -p 100 -q
R=$E2E_LAST_PID
wait_for partial_has_packets "$D/r6.pftrace"
kill -KILL "$DAEMON_PID"
e2e_wait_pid "$R" 60 || e2e_fail "record did not end with the daemon"
[ "$E2E_RC" -eq 1 ] || e2e_fail "daemon killed (--long): rc=$E2E_RC"
grep -q "r6.pftrace holds the [1-9][0-9]* whole packets" "$D/rec6.log" ||
    e2e_fail "r6: $(cat "$D/rec6.log")"
e2e_check "$D/r6.pftrace" --min-total 1
no_file "$D/r6.pftrace.partial"
restart_daemon

# 7. Ctrl-C twice while the service waits for a stopped producer (a minute
# at most, whatever the load): exit 130 at once; nothing written (the
# buffers were never read)...
cat >"$D/slow.cfg" <<'CFG'
buffers { size_kb: 4096 }
data_sources { config { name: "shmtrace.synthetic" } }
flush_timeout_ms: 60000
data_source_stop_timeout_ms: 60000
CFG
e2e_spawn rec7 "$CLI" record -c "$D/slow.cfg" -o "$D/r7.pftrace" -q
R=$E2E_LAST_PID
wait_for session_running
kill -STOP "$PROD"
kill -INT "$R"
wait_for grep -q "Ctrl-C again to stop waiting" "$D/rec7.log"
kill -INT "$R"
e2e_wait_pid "$R" 20 || e2e_fail "second Ctrl-C did not stop record"
[ "$E2E_RC" -eq 130 ] || e2e_fail "interrupted twice: rc=$E2E_RC, want 130"
grep -q "interrupted twice: nothing written" "$D/rec7.log" ||
    e2e_fail "r7: $(cat "$D/rec7.log")"
no_file "$D/r7.pftrace"
kill -CONT "$PROD"
wait_for registered
wait_for sh -c "! \"$CLI\" stats | grep -q '^tracing_sessions         1'"

# ... and with --long the whole packets read until then, reported.
e2e_spawn rec8 "$CLI" record -c "$D/slow.cfg" -o "$D/r8.pftrace" --long \
    -p 100 -q
R=$E2E_LAST_PID
wait_for partial_has_packets "$D/r8.pftrace"
kill -STOP "$PROD"
kill -INT "$R"
wait_for grep -q "Ctrl-C again to stop waiting" "$D/rec8.log"
kill -INT "$R"
e2e_wait_pid "$R" 20 || e2e_fail "second Ctrl-C did not stop record"
[ "$E2E_RC" -eq 130 ] || e2e_fail "interrupted twice (--long): rc=$E2E_RC"
grep -q "interrupted twice: .*r8.pftrace holds the [1-9][0-9]* whole packets" \
    "$D/rec8.log" || e2e_fail "r8: $(cat "$D/rec8.log")"
e2e_check "$D/r8.pftrace" --min-total 1
no_file "$D/r8.pftrace.partial"
kill -CONT "$PROD"
wait_for registered
wait_for sh -c "! \"$CLI\" stats | grep -q '^tracing_sessions         1'"

# ... and when the service writes the file (write_into_file), the whole
# records it wrote, cut at the last one.
cat "$D/slow.cfg" - >"$D/wif.cfg" <<'CFG'
write_into_file: true
file_write_period_ms: 100
CFG
e2e_spawn rec9 "$CLI" record -c "$D/wif.cfg" -o "$D/r9.pftrace" -q
R=$E2E_LAST_PID
wait_for partial_has_packets "$D/r9.pftrace"
kill -STOP "$PROD"
kill -INT "$R"
wait_for grep -q "Ctrl-C again to stop waiting and keep the whole packets" \
    "$D/rec9.log"
kill -INT "$R"
e2e_wait_pid "$R" 20 || e2e_fail "second Ctrl-C did not stop record"
[ "$E2E_RC" -eq 130 ] || e2e_fail "interrupted twice (write_into_file): rc=$E2E_RC"
grep -q "interrupted twice: .*r9.pftrace holds the [1-9][0-9]* whole packets" \
    "$D/rec9.log" || e2e_fail "r9: $(cat "$D/rec9.log")"
e2e_check "$D/r9.pftrace" --min-total 1
no_file "$D/r9.pftrace.partial"
kill -CONT "$PROD"
wait_for registered

# 8. The producer told each of the three outages once (not every retry)
# and each reconnection.
n=$(grep -c "connection to the tracing service at $PERFETTO_PRODUCER_SOCK_NAME lost: .*; reconnecting every second" "$D/prod.log")
[ "$n" -eq 3 ] || e2e_fail "producer: $n 'lost' lines for 3 outages: $(cat "$D/prod.log")"
n=$(grep -c "^shmtrace-producer: connected to $PERFETTO_PRODUCER_SOCK_NAME" "$D/prod.log")
[ "$n" -eq 4 ] || e2e_fail "producer: $n 'connected' lines, want 4"
grep -q "cannot connect" "$D/prod.log" && e2e_fail "producer: 'cannot connect' after it had connected"

# 9. Progress on a terminal (script(1) gives record a pty): elapsed and
# remaining time against -t; without --long it says the packets are in the
# service's buffers (not "file 0.0 MB" throughout); with --long the file;
# with write_into_file the file the service writes.
if command -v script >/dev/null 2>&1; then
    script -qec "\"$CLI\" record -o \"$D/p1.pftrace\" -t 2" "$D/p1.tty" \
        >/dev/null 2>&1 </dev/null || e2e_fail "record on a pty: rc=$?"
    tr '\r' '\n' <"$D/p1.tty" >"$D/p1.txt"
    grep -q '^.*\[ *[0-9.]* s, [0-9]* s left\] traced [0-9.]* MB | in the service.s buffers, read at the end | losses' \
        "$D/p1.txt" || e2e_fail "progress: $(cat "$D/p1.txt")"
    grep -q 'file 0.0 MB' "$D/p1.txt" && e2e_fail "progress shows an empty file"
    script -qec "\"$CLI\" record -o \"$D/p2.pftrace\" -t 2 --long -p 100" \
        "$D/p2.tty" >/dev/null 2>&1 </dev/null || e2e_fail "record --long on a pty"
    tr '\r' '\n' <"$D/p2.tty" >"$D/p2.txt"
    grep -q '\[ *[0-9.]* s, [0-9]* s left\] traced [0-9.]* MB | file [0-9.]* MB, [0-9]* packets |' \
        "$D/p2.txt" || e2e_fail "progress --long: $(cat "$D/p2.txt")"
    grep -q "wrote [1-9][0-9]* packets" "$D/p2.txt" || e2e_fail "no summary on a pty"
    # write_into_file: the file and the packets shmtraced says it wrote
    # (TraceStats.shmtrace_file; the file is not read back), and at the
    # end the same count as the file's
    script -qec "\"$CLI\" record -c \"$D/wif.cfg\" -o \"$D/p3.pftrace\" -t 2" \
        "$D/p3.tty" >/dev/null 2>&1 </dev/null || e2e_fail "record write_into_file on a pty"
    tr '\r' '\n' <"$D/p3.tty" >"$D/p3.txt"
    grep -q '\[ *[0-9.]* s, [0-9]* s left\] traced [0-9.]* MB | file [0-9.]* MB, [1-9][0-9]* packets (the service writes it) |' \
        "$D/p3.txt" || e2e_fail "progress write_into_file: $(cat "$D/p3.txt")"
    e2e_check "$D/p3.pftrace" --min-total 1
    grep -q "wrote $(e2e_value packets) packets" "$D/p3.txt" ||
        e2e_fail "summary against $(e2e_value packets) packets: $(cat "$D/p3.txt")"
else
    echo "note: script(1) not installed: progress display not checked"
fi
echo "cli_files: all checks passed"
