#!/bin/sh
# e2e_seq_cap.sh - a buffer's bound of sequences per uid, end to end: one
# producer (tests/svc_manywriters) with W = 20000 writers of one tiny
# packet each, recorded by `shmtrace record` into a 1 MiB ring. Each
# writer's chunk is a record of a few dozen bytes, so the ring keeps more
# of them than the 16384 sequences one uid may have in a buffer
# (libbuf's TB_MAX_SEQS_PER_UID: 16384 for rings up to 4 MiB): the
# buffer refuses the chunks of the writers past that bound. Checked:
#  - while the session runs, `shmtrace stats` says how many chunks (and
#    packets) the buffer refused for the bound;
#  - the trace's last TraceStats counts them (BufferStats
#    shmtrace_seq_cap_chunks/_packets, via the inspector's trace_info),
#    and every refused packet is a 'discard' loss of its writer in the
#    exact loss list: svc_tracecheck --conservation holds, and packets in
#    the trace plus packets lost come to W, each once;
#  - the daemon keeps serving.
. "${top_srcdir:-.}/tests/e2e_lib.sh"
INSPECT="$top_builddir/inspector/shmtrace-inspect"
MANY="$top_builddir/tests/svc_manywriters"
e2e_need_tools "$INSPECT" "$MANY"
command -v sqlite3 >/dev/null || { echo "SKIP: sqlite3 not installed" >&2; exit 77; }
q() { sqlite3 "$db" "$1"; }
W=20000

e2e_start_daemon
e2e_record_many $W 1 1
"$CLI" stats >"$E2E_DIR/stats.txt" 2>&1 || e2e_fail "shmtrace stats failed"
grep -q "were refused because their uid had its bound of sequences" \
    "$E2E_DIR/stats.txt" ||
    e2e_fail "shmtrace stats does not show refusals: $(grep '^buffer' "$E2E_DIR/stats.txt")"
kill -TERM "$REC"
e2e_wait_ok "$REC" 120 "shmtrace record"
e2e_wait_ok "$MANY_PID" 60 "svc_manywriters"

e2e_check "$E2E_DIR/trace" --require-stats --conservation --per-sequence 1
[ "$(e2e_value conservation)" = exact ] || e2e_fail "conservation broken"

db="$E2E_DIR/t.db"
"$INSPECT" --force --no-progress -o "$db" "$E2E_DIR/trace" >/dev/null 2>&1 ||
    e2e_fail "inspecting the trace failed"
chunks=$(q "select value from trace_info where key = 'seq_cap_chunks'")
packets=$(q "select value from trace_info where key = 'seq_cap_packets'")
[ -n "$chunks" ] && [ "$chunks" -gt 0 ] ||
    e2e_fail "no chunk refused for the bound (trace_info.seq_cap_chunks '$chunks')"
[ "$packets" = "$chunks" ] ||
    e2e_fail "one packet per refused chunk expected: $packets packets, $chunks chunks"
discard=$(q "select ifnull(sum(packets), 0) from packet_loss where cause = 'discard'")
[ "$discard" -ge "$packets" ] ||
    e2e_fail "refused packets not all in packet_loss as 'discard' ($discard < $packets)"
[ "$(q "select sum(packets) + sum(ifnull(lost_packets, 0)) from sequence where seq_id > 1")" = $W ] ||
    e2e_fail "packets + lost over all rows != $W: \
$(q "select loss_kind, count(*), sum(packets), sum(lost_packets) from sequence group by 1")"

"$CLI" stats >/dev/null 2>&1 || e2e_fail "the daemon is gone"
e2e_stop_daemon
echo "ok: $chunks chunks of $W writers refused for the bound, counted and lost as 'discard'"
