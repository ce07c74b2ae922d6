#!/bin/sh
# e2e_perfetto_query.sh - QueryServiceState against shmtraced with
# Perfetto's `perfetto --query` / `--query-raw`: the service version, the
# connected shmtrace-producer and its data source, and the caller's
# running session are listed; the raw reply is a TracingServiceState that
# names the same.
. "${top_srcdir:-.}/tests/features/feat_lib.sh"
e2e_need_tools "$CONSUMER"
feat_need_perfetto
D=$E2E_DIR

e2e_start_daemon
e2e_spawn producer "$PRODUCER" -N query-test-producer -n dev.query.source -q
e2e_wait_registered 1
cat >"$D/cfg.txt" <<CFG
buffers { size_kb: 1024 fill_policy: RING_BUFFER }
data_sources { config { name: "dev.query.source" } }
duration_ms: 600000
unique_session_name: "query_session"
CFG
e2e_spawn perfetto "$PERFETTO" --txt -c "$D/cfg.txt" -o "$D/out.pftrace"
PF=$E2E_LAST_PID
feat_wait_sessions 1

"$PERFETTO" --query >"$D/query.txt" 2>"$D/query.err" ||
    e2e_fail "perfetto --query failed: $(cat "$D/query.err")"
grep -q "^Service: shmtraced" "$D/query.txt" ||
    e2e_fail "no service version: $(cat "$D/query.txt")"
grep -q "query-test-producer" "$D/query.txt" || e2e_fail "producer not listed"
grep -q "^dev.query.source  *query-test-producer (" "$D/query.txt" ||
    e2e_fail "data source not listed: $(cat "$D/query.txt")"
grep -q "STARTED .* query_session" "$D/query.txt" ||
    e2e_fail "session not listed: $(cat "$D/query.txt")"
grep -q "Tracing sessions: 1 (started: 1)" "$D/query.txt" ||
    e2e_fail "session counts wrong"

"$PERFETTO" --query-raw >"$D/query.raw" 2>"$D/query.err" ||
    e2e_fail "perfetto --query-raw failed"
for s in shmtraced query-test-producer dev.query.source query_session; do
    grep -aq "$s" "$D/query.raw" || e2e_fail "--query-raw lacks $s"
done

kill -INT "$PF"
e2e_wait_pid "$PF" 60 || e2e_fail "perfetto did not stop"
[ "$E2E_RC" = 0 ] || e2e_fail "perfetto exited $E2E_RC"
e2e_stop_daemon
echo "ok"
