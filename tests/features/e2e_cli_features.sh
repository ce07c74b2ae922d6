#!/bin/sh
# e2e_cli_features.sh - the same features through our own CLI against
# shmtraced (no Perfetto needed):
#   shmtrace record --trigger NAME (stop mode) + `shmtrace trigger NAME`:
#     the session ends early and its trace holds the trigger packet;
#   --trigger-mode clone: each trigger writes OUT.N, tracing goes on;
#   --detach KEY / --is-detached KEY / --attach KEY --stop;
#   shmtrace query (+ --json) and shmtrace stats --json list
#     shmtrace-producer's data source and the session;
#   usage errors for inconsistent options.
. "${top_srcdir:-.}/tests/features/feat_lib.sh"
e2e_need_tools "$DUMP" "$CONSUMER"
D=$E2E_DIR
json_ok() {
    if command -v python3 >/dev/null; then
        python3 -c 'import json,sys; json.load(open(sys.argv[1]))' "$1"
    else
        grep -q '^{' "$1"
    fi
}

e2e_start_daemon
e2e_spawn producer "$PRODUCER" -r 300 -N cli-producer -q
e2e_wait_registered 1

# ---- usage errors
"$CLI" record -o "$D/x" --stop >/dev/null 2>&1
[ $? = 2 ] || e2e_fail "--stop without --attach should be a usage error"
"$CLI" record -o "$D/x" --stop-delay 1s >/dev/null 2>&1
[ $? = 2 ] || e2e_fail "--stop-delay without --trigger should be a usage error"
"$CLI" record -o "$D/x" --trigger a --trigger-mode sideways >/dev/null 2>&1
[ $? = 2 ] || e2e_fail "a bad --trigger-mode should be a usage error"
"$CLI" trigger >/dev/null 2>&1
[ $? = 2 ] || e2e_fail "shmtrace trigger without a name should be a usage error"
for c in "record" "trigger" "query" "stats"; do
    "$CLI" $c --help | grep -q "Usage: shmtrace $c" || e2e_fail "$c --help"
done
"$CLI" record --help | grep -q -- "--trigger-mode" || e2e_fail "record --help lacks triggers"
"$CLI" record --help | grep -q -- "--is-detached" || e2e_fail "record --help lacks detach"

# ---- stop trigger
e2e_spawn rec_stop "$CLI" record -q -o "$D/stop.pftrace" --trigger halt \
    --stop-delay 200ms --trigger-timeout 10m
PF=$E2E_LAST_PID
feat_wait_sessions 1
"$CLI" trigger -N my-trigger-app halt || e2e_fail "shmtrace trigger failed"
e2e_wait_pid "$PF" 120 || e2e_fail "the trigger did not end the session"
[ "$E2E_RC" = 0 ] || e2e_fail "record exited $E2E_RC"
"$DUMP" "$D/stop.pftrace" >"$D/stop.dump"
grep -q "^trigger halt my-trigger-app [0-9-]* 200 " "$D/stop.dump" ||
    e2e_fail "no trigger packet: $(cat "$D/stop.dump")"
e2e_check "$D/stop.pftrace" --require-stats --expect-sequences 1 >/dev/null
[ "$(e2e_value test_packets)" -gt 0 ] || e2e_fail "stop trace has no data"

# ---- clone snapshots
e2e_spawn rec_clone "$CLI" record -q -o "$D/snap" --trigger snap \
    --trigger-mode clone --stop-delay 10ms
PF=$E2E_LAST_PID
feat_wait_sessions 1
"$CLI" trigger snap || e2e_fail "trigger failed"
feat_wait_file "$D/snap.0" 60 || e2e_fail "no snapshot"
feat_wait_log "$D/rec_clone.log" "snapshot .*/snap\.0" 60 || e2e_fail "snap.0 unfinished"
"$CLI" trigger snap || e2e_fail "trigger failed"
feat_wait_log "$D/rec_clone.log" "snapshot .*/snap\.1" 60 ||
    e2e_fail "no second snapshot: $(cat "$D/rec_clone.log")"
for k in 0 1; do
    "$DUMP" "$D/snap.$k" | grep -q "^clone_trigger snap shmtrace-trigger " ||
        e2e_fail "snap.$k lacks clone_snapshot_trigger"
    e2e_check "$D/snap.$k" >/dev/null
done
kill -INT "$PF"
e2e_wait_pid "$PF" 60 || e2e_fail "record did not stop"
[ "$E2E_RC" = 0 ] || e2e_fail "record (clone) exited $E2E_RC"
grep -q "2 snapshot(s) written" "$D/rec_clone.log" || e2e_fail "no snapshot count"
! grep -q "lost .* of .* packets" "$D/rec_clone.log" ||
    e2e_fail "a CLONE_SNAPSHOT session reported as lost: $(cat "$D/rec_clone.log")"

# ---- no trigger within the timeout: empty trace, said so, exit 0
"$CLI" record -q -o "$D/none.pftrace" --trigger never --trigger-timeout 300ms \
    >"$D/none.log" 2>&1 || e2e_fail "record (no trigger) failed: $(cat "$D/none.log")"
[ -f "$D/none.pftrace" ] && [ ! -s "$D/none.pftrace" ] ||
    e2e_fail "a session without its trigger returned data"
grep -q "no trigger arrived" "$D/none.log" || e2e_fail "no explanation: $(cat "$D/none.log")"

# ---- detach / attach
"$CLI" record -q -o "$D/det.pftrace" --detach mykey -t 10m \
    -n detached_cli >"$D/det.log" 2>&1 || e2e_fail "record --detach failed"
"$CLI" record --is-detached mykey >/dev/null 2>&1 || e2e_fail "--is-detached: no"
"$CLI" record --is-detached nokey >/dev/null 2>&1
[ $? = 1 ] || e2e_fail "--is-detached nokey should say no (1)"
"$CLI" query >"$D/query.txt" || e2e_fail "shmtrace query failed"
grep -q "^service: shmtraced" "$D/query.txt" || e2e_fail "query: no version"
grep -q "shmtrace.synthetic  *cli-producer (" "$D/query.txt" ||
    e2e_fail "query: data source missing: $(cat "$D/query.txt")"
grep -q "STARTED .* detached_cli" "$D/query.txt" || e2e_fail "query: no session"
"$CLI" query --json >"$D/query.json" || e2e_fail "query --json failed"
json_ok "$D/query.json" || e2e_fail "query --json is not JSON"
grep -q '"name": *"shmtrace.synthetic"' "$D/query.json" || e2e_fail "json: no data source"
"$CLI" stats --json >"$D/stats.json" || e2e_fail "stats --json failed"
json_ok "$D/stats.json" || e2e_fail "stats --json is not JSON"
grep -q '"producers_connected": *1' "$D/stats.json" || e2e_fail "stats json"
grep -q '"service_state": *{.*"tracing_service_version"' "$D/stats.json" ||
    e2e_fail "stats json lacks the state: $(cat "$D/stats.json")"
[ "$(wc -l <"$D/stats.json")" -eq 1 ] || e2e_fail "stats --json: not one line"
"$CLI" stats | grep -q "cli-producer" || e2e_fail "stats lacks the producers"
feat_wait_file "$D/det.pftrace" 60 || e2e_fail "the detached session wrote nothing"
"$CLI" record -q --attach mykey --stop >"$D/attach.log" 2>&1 ||
    e2e_fail "record --attach --stop failed: $(cat "$D/attach.log")"
"$CLI" record --is-detached mykey >/dev/null 2>&1
[ $? = 1 ] || e2e_fail "still detached after attach"
"$CLI" record --attach mykey >/dev/null 2>&1
[ $? = 1 ] || e2e_fail "attaching twice should fail"
e2e_check "$D/det.pftrace" --require-stats --expect-sequences 1 >/dev/null
[ "$(e2e_value test_packets)" -gt 0 ] || e2e_fail "detached trace has no data"
[ "$(e2e_value lost_leading)" = 0 ] || e2e_fail "detached trace lost its start"
feat_wait_sessions 0

e2e_stop_daemon
echo "ok"
