#!/bin/bash
# tests/cli_smoke.sh - smoke test of the consumer CLI against the real
# daemon and real producer processes: `shmtrace record` (duration, flags and
# a text config), long-trace mode (periodic ReadBuffers, every packet once),
# `shmtrace clone` of a running session, `shmtrace stats`. Uses the
# service's e2e helpers (private sockets, every started process killed on
# exit). No timing assertions: sizes are chosen so nothing can be lost.
. "${top_srcdir:-.}/tests/e2e_lib.sh"
e2e_need_tools
[ -x "$SHMTRACED" ] && [ -x "$TRACECHECK" ] || { echo "SKIP: daemon not built"; exit 77; }
e2e_start_daemon

# 1. flags: 2 writer threads x 300 packets, session of 1 s.
e2e_spawn prod1 "$PRODUCER" -t 2 -c 300 -S 100 --once
P1=$E2E_LAST_PID
e2e_cli_wait 'data_sources_registered  1' "producer did not register"
"$CLI" record -o "$E2E_DIR/a.pftrace" -t 1s -b 4m -d shmtrace.synthetic \
    -q 2>"$E2E_DIR/rec_a.log" || e2e_fail "record a: rc=$?"
grep -q 'losses: 0 packets flagged' "$E2E_DIR/rec_a.log" ||
    e2e_fail "no loss summary: $(cat "$E2E_DIR/rec_a.log")"
e2e_check "$E2E_DIR/a.pftrace" --complete 300 --expect-sequences 2 \
    --require-stats
# The recorded trace_config is the one sent: shmtrace record adds no
# experimental_mode (the inspector reads an unset mode as Perfetto's
# default, V1), only what its flags say (-b 4m).
INSPECT="$top_builddir/inspector/shmtrace-inspect"
if [ -x "$INSPECT" ] && command -v sqlite3 >/dev/null 2>&1; then
    "$INSPECT" -q -o "$E2E_DIR/a.db" "$E2E_DIR/a.pftrace" ||
        e2e_fail "inspect a: rc=$?"
XX
fi
e2e_wait_ok "$P1" 10 "producer --once"

# 2. config file + long-trace mode: reads every 100 ms while the producer
# writes 1000 packets at 2000/s; each packet must appear exactly once.
cat >"$E2E_DIR/long.cfg" <<'CFG'
buffers { size_kb: 2048 fill_policy: RING_BUFFER }
data_sources { config { name: "smoke.long" target_buffer: 0 } }
duration_ms: 1500
CFG
e2e_spawn prod2 "$PRODUCER" -n smoke.long -c 1000 -r 2000 -S 64 --once
P2=$E2E_LAST_PID
e2e_cli_wait 'data_sources_registered  1' "producer 2 did not register"
"$CLI" record -c "$E2E_DIR/long.cfg" --long -p 100 -o "$E2E_DIR/b.pftrace" \
    -q 2>"$E2E_DIR/rec_b.log" || e2e_fail "record b: rc=$?"
e2e_check "$E2E_DIR/b.pftrace" --complete 1000 --expect-sequences 1
e2e_wait_pid "$P2" 10 || e2e_fail "producer 2 did not exit"

# 3. clone a running session by name, then stop it with SIGINT.
e2e_spawn prod3 "$PRODUCER" -n smoke.clone -c 500 -S 32 --once
P3=$E2E_LAST_PID
e2e_cli_wait 'data_sources_registered  1' "producer 3 did not register"
e2e_spawn rec_c "$CLI" record -o "$E2E_DIR/c.pftrace" -d smoke.clone \
    -n smoke-session
R3=$E2E_LAST_PID
e2e_cli_wait 'tracing_sessions         1' "session did not start"
# The producer writes its 500 packets at once; clone until they are there.
clone_has_packets() {
    "$CLI" clone -n smoke-session -o "$E2E_DIR/clone.pftrace" \
        2>"$E2E_DIR/clone.log" || e2e_fail "clone: rc=$?"
    "$TRACECHECK" --min-total 1 "$E2E_DIR/clone.pftrace" >/dev/null 2>&1
}
e2e_until 100 0.1 "clone never had packets" clone_has_packets
grep -q 'cloned' "$E2E_DIR/clone.log" || e2e_fail "no clone summary"
"$CLI" clone -n no-such-session -o "$E2E_DIR/none.pftrace" 2>/dev/null
[ $? -eq 1 ] || e2e_fail "clone of a missing session should exit 1"
"$CLI" stats >"$E2E_DIR/stats.out" || e2e_fail "stats: rc=$?"
grep -q '^tracing_sessions         1' "$E2E_DIR/stats.out" ||
    e2e_fail "stats: $(cat "$E2E_DIR/stats.out")"
kill -INT "$R3"
e2e_wait_ok "$R3" 20 "record c (stopped by SIGINT)"
e2e_check "$E2E_DIR/c.pftrace" --complete 500 --expect-sequences 1
e2e_wait_pid "$P3" 10 || e2e_fail "producer 3 did not exit"
# 4. write_into_file: the service writes the file through the fd passed
# with EnableTracing; the CLI reports what it wrote (shmtraced counts it:
# TraceStats.shmtrace_file), the same count as the file's.
cat >"$E2E_DIR/wif.cfg" <<'CFG'
buffers { size_kb: 1024 }
data_sources { config { name: "smoke.wif" } }
duration_ms: 1000
write_into_file: true
file_write_period_ms: 200
CFG
e2e_spawn prod4 "$PRODUCER" -n smoke.wif -t 2 -c 400 -S 40 --once
P4=$E2E_LAST_PID
e2e_cli_wait 'data_sources_registered  1' "producer 4 did not register"
"$CLI" record -c "$E2E_DIR/wif.cfg" -o "$E2E_DIR/d.pftrace" -q \
    2>"$E2E_DIR/rec_d.log" || e2e_fail "record d: rc=$?"
grep -q 'wrote 8[0-9][0-9] packets' "$E2E_DIR/rec_d.log" ||
    e2e_fail "write_into_file summary: $(cat "$E2E_DIR/rec_d.log")"
e2e_check "$E2E_DIR/d.pftrace" --complete 400 --expect-sequences 2
n=$(sed -n 's/.*wrote \([0-9]*\) packets (\([0-9.]*\) MB).*/\1 \2/p' \
    "$E2E_DIR/rec_d.log")
mb=$(stat -c %s "$E2E_DIR/d.pftrace" | awk '{ printf "%.1f", $1 / 1e6 }')
[ "$n" = "$(e2e_value packets) $mb" ] ||
    e2e_fail "summary says '$n' packets and MB, the file holds" \
        "$(e2e_value packets) packets of $mb MB"
e2e_wait_pid "$P4" 10 || e2e_fail "producer 4 did not exit"
# 5. a TestConfig asking for 4 GB packets: the producer caps message_size
# at 16 MiB (as --size) instead of allocating and filling 4 GB per thread.
cat >"$E2E_DIR/big.cfg" <<'CFG'
buffers { size_kb: 65536 }
data_sources { config { name: "smoke.big"
  for_testing { message_count: 1 message_size: 4000000000 } } }
duration_ms: 3000
CFG
e2e_spawn prod5 "$PRODUCER" -n smoke.big --policy stall --once
P5=$E2E_LAST_PID
e2e_cli_wait 'data_sources_registered  1' "producer 5 did not register"
"$CLI" record -c "$E2E_DIR/big.cfg" -o "$E2E_DIR/e.pftrace" -q \
    2>"$E2E_DIR/rec_e.log" || e2e_fail "record e: rc=$?"
e2e_check "$E2E_DIR/e.pftrace" --complete 1 --expect-sequences 1
size=$(stat -c %s "$E2E_DIR/e.pftrace")
[ "$size" -gt 16777216 ] && [ "$size" -lt 17825792 ] ||
    e2e_fail "a 16 MiB packet expected, trace is $size bytes"
e2e_wait_ok "$P5" 10 "producer 5"
echo "cli_smoke: all checks passed"
