#!/bin/sh
# e2e_perfetto_detach.sh - Detach/Attach and clones against shmtraced with
# Perfetto's `perfetto`:
#   --detach=KEY with write_into_file returns at once, the session goes on;
#   --is_detached=KEY says 0 (yes) / 2 (no);
#   --clone-by-name of the detached file session writes its file so far
#     plus the clone (was_write_into_file);
#   --attach=KEY --stop reattaches, stops and the same session's file holds
#     every packet in order;
#   --clone ID of an IPC-read session reads a snapshot while it runs;
#   --background-wait returns 0 once the data sources started (the
#     ObserveEvents all_data_sources_started event), the session goes on;
#   --save-for-bugreport / --save-all-for-bugreport clone only sessions
#     with a bugreport_score (into $TMPDIR on Linux), under their
#     bugreport_filename.
. "${top_srcdir:-.}/tests/features/feat_lib.sh"
e2e_need_tools "$DUMP" "$CONSUMER"
feat_need_perfetto
D=$E2E_DIR

e2e_start_daemon
e2e_spawn producer "$PRODUCER" -r 400 -q
e2e_wait_registered 1
cat >"$D/file.txt" <<CFG
buffers { size_kb: 8192 fill_policy: RING_BUFFER }
data_sources { config { name: "shmtrace.synthetic" } }
write_into_file: true
file_write_period_ms: 200
duration_ms: 600000
unique_session_name: "detached_one"
CFG
"$PERFETTO" --txt -c "$D/file.txt" -o "$D/det.pftrace" --detach=key1 \
    >"$D/detach.log" 2>&1 || e2e_fail "perfetto --detach failed"
feat_wait_sessions 1
"$PERFETTO" --is_detached=key1 >/dev/null 2>&1
[ $? = 0 ] || e2e_fail "--is_detached=key1 should say yes"
"$PERFETTO" --is_detached=other >/dev/null 2>&1
[ $? = 2 ] || e2e_fail "--is_detached=other should say no (2)"
# A second detach under the same key is refused.
sed 's/detached_one/detached_two/' "$D/file.txt" >"$D/file2.txt"
if "$PERFETTO" --txt -c "$D/file2.txt" -o "$D/det2.pftrace" --detach=key1 \
    >"$D/detach2.log" 2>&1; then
    e2e_fail "a second session detached under the same key"
fi
feat_wait_file "$D/det.pftrace" 60 || e2e_fail "the detached session wrote nothing"
"$PERFETTO" --clone-by-name detached_one -o "$D/clone.pftrace" \
    >"$D/clone.log" 2>&1 || e2e_fail "perfetto --clone-by-name failed"
e2e_check "$D/clone.pftrace" >/dev/null
nc=$(e2e_value test_packets)
[ "${nc:-0}" -gt 0 ] || e2e_fail "the clone holds no data"
"$PERFETTO" --attach=key1 --stop >"$D/attach.log" 2>&1 ||
    e2e_fail "perfetto --attach --stop failed: $(cat "$D/attach.log")"
"$PERFETTO" --is_detached=key1 >/dev/null 2>&1
[ $? = 2 ] || e2e_fail "still detached after attach"
e2e_check "$D/det.pftrace" --require-stats --expect-sequences 1 >/dev/null
nd=$(e2e_value test_packets)
[ "$(e2e_value lost_leading)" = 0 ] || e2e_fail "the attached trace lost its start"
[ "$nd" -ge "$nc" ] || e2e_fail "the attached trace ($nd) has less than its clone ($nc)"
feat_wait_sessions 0

# ---- --clone ID of a session read over IPC
cat >"$D/ipc.txt" <<CFG
buffers { size_kb: 8192 fill_policy: RING_BUFFER }
data_sources { config { name: "shmtrace.synthetic" } }
duration_ms: 600000
CFG
e2e_spawn perfetto "$PERFETTO" --txt -c "$D/ipc.txt" -o "$D/ipc.pftrace"
PF=$E2E_LAST_PID
feat_wait_sessions 1
id=$("$PERFETTO" --query 2>/dev/null | awk '$3 == "STARTED" { print $1; exit }')
[ -n "$id" ] || e2e_fail "no session id in --query"
i=0
while :; do
    "$PERFETTO" --clone "$id" -o "$D/ipc_clone.pftrace" >"$D/ipc_clone.log" 2>&1 ||
        e2e_fail "perfetto --clone $id failed: $(cat "$D/ipc_clone.log")"
    n=$("$DUMP" "$D/ipc_clone.pftrace" | sed -n 's/^test_packets //p')
    [ "${n:-0}" -gt 0 ] && break
    i=$((i + 1)); [ $i -gt 100 ] && e2e_fail "clones stay empty"
    sleep 0.1
done
e2e_check "$D/ipc_clone.pftrace" >/dev/null
kill -INT "$PF"
e2e_wait_pid "$PF" 60 || e2e_fail "perfetto did not stop"
e2e_check "$D/ipc.pftrace" --require-stats >/dev/null
[ "$(e2e_value test_packets)" -ge "$n" ] || e2e_fail "the session lost data"

# ---- bugreports: the IPC session above has no bugreport_score
mkdir -p "$D/br"
TMPDIR="$D/br" "$PERFETTO" --save-for-bugreport >"$D/br.log" 2>&1
[ -z "$(ls "$D/br")" ] || e2e_fail "a session without bugreport_score was saved"
sed 's/^duration_ms: 600000/duration_ms: 600000\nbugreport_score: 5\nbugreport_filename: "mine.pftrace"/' \
    "$D/ipc.txt" >"$D/br.txt"
grep -q bugreport_score "$D/br.txt" || e2e_fail "sed"
e2e_spawn perfetto_br "$PERFETTO" --txt -c "$D/br.txt" -o "$D/br.pftrace"
PF=$E2E_LAST_PID
feat_wait_sessions 1
TMPDIR="$D/br" "$PERFETTO" --save-for-bugreport >>"$D/br.log" 2>&1 ||
    e2e_fail "--save-for-bugreport failed"
TMPDIR="$D/br" "$PERFETTO" --save-all-for-bugreport >>"$D/br.log" 2>&1 ||
    e2e_fail "--save-all-for-bugreport failed"
e2e_check "$D/br/systrace.pftrace" >/dev/null
e2e_check "$D/br/mine.pftrace" >/dev/null
"$PERFETTO" --query | grep -q "STARTED" || e2e_fail "the bugreport session stopped"
kill -INT "$PF"
e2e_wait_pid "$PF" 60 || e2e_fail "perfetto did not stop"
feat_wait_sessions 0

# ---- --background-wait: exit 0 when all data sources started (within
# perfetto's own 30 s, else it exits non-zero), then stop it by its pid.
"$PERFETTO" --txt -c "$D/ipc.txt" -o "$D/bg.pftrace" --background-wait \
    >"$D/bg.pid" 2>"$D/bg.log" ||
    e2e_fail "--background-wait failed: $(cat "$D/bg.log")"
BG=$(head -n 1 "$D/bg.pid")
case "$BG" in ''|*[!0-9]*) e2e_fail "no pid from --background-wait";; esac
E2E_PIDS="$E2E_PIDS $BG"        # killed by the cleanup if we fail below
feat_wait_sessions 1
kill -TERM "$BG"
i=0
while kill -0 "$BG" 2>/dev/null; do
    i=$((i + 1)); [ $i -gt 1200 ] && { kill -KILL "$BG"; e2e_fail "bg perfetto hung"; }
    sleep 0.05
done
e2e_check "$D/bg.pftrace" --require-stats >/dev/null
[ "$(e2e_value test_packets)" -gt 0 ] || e2e_fail "the background session traced nothing"

e2e_stop_daemon
echo "ok"
