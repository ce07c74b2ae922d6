#!/bin/sh
# ins_lost_folded.sh - a loss list the service folds, end to end: one
# producer (tests/svc_manywriters) with W = 8000 writers of N packets each
# into a 1 MiB ring that wraps (about 8 MiB of chunks go through it), recorded by `shmtrace record`. One entry
# per writer would not fit a TraceStats, so shmtraced folds the list
# (service/svc_loss.c): whatever the exact threshold, 8000 is well past
# it, and the test checks that the list did fold (an entry with writer_id
# 0) rather than assuming where. Then:
#  - svc_tracecheck --conservation --per-sequence N: every entry keeps the
#    list's invariant, the folded writers' packets in the trace are what
#    their aggregate read, and its lost_packets are their missing packets
#    plus N per writer that left nothing in the trace;
#  - the inspector: every producer sequence is 'writer' or 'folded' (none
#    unknown), each folded one is tied to the producer's aggregate (whose
#    row has the producer's pid), the
#    aggregate holds exactly its writers' packets and losses, and the
#    totals add up to W * N; lost_packets.sql shows the aggregate as
#    "N writers folded (producer P, buffer 0)" (or "all producers" when
#    the service folded per buffer), data_loss.sql the same total.
. "${top_srcdir:-.}/tests/e2e_lib.sh"
INSPECT="$top_builddir/inspector/shmtrace-inspect"
MANY="$top_builddir/tests/svc_manywriters"
e2e_need_tools "$INSPECT" "$MANY"
command -v sqlite3 >/dev/null || { echo "SKIP: sqlite3 not installed" >&2; exit 77; }
SQL="$top_srcdir/sql"
q() { sqlite3 "$db" "$1"; }
W=8000
N=4

e2e_start_daemon
e2e_record_many $W $N 200
kill -TERM "$REC"
e2e_wait_ok "$REC" 120 "shmtrace record"
e2e_wait_ok "$MANY_PID" 60 "svc_manywriters"
e2e_stop_daemon

e2e_check "$E2E_DIR/trace" --require-stats --conservation --per-sequence $N
[ "$(e2e_value loss_aggregates)" -ge 1 ] ||
    e2e_fail "the loss list of $W writers did not fold"
[ "$(e2e_value folded_sequences)" -gt 0 ] || e2e_fail "no folded sequence"
[ "$(e2e_value folded_untied)" = 0 ] ||
    e2e_fail "one producer: every folded sequence has one aggregate"
[ "$(e2e_value conservation)" = exact ] || e2e_fail "conservation broken"
[ "$(e2e_value read_conservation)" = exact ] ||
    e2e_fail "read conservation broken"
[ "$(e2e_value stats_lost_packets)" -gt 0 ] ||
    e2e_fail "a 1 MiB ring should have lost some of $W writers' packets"

db="$E2E_DIR/t.db"
"$INSPECT" --force --no-progress -o "$db" "$E2E_DIR/trace" >/dev/null 2>&1 ||
    e2e_fail "inspecting the trace failed"
[ "$(q "select value from trace_info where key = 'loss_list'")" = folded ] ||
    e2e_fail "trace_info.loss_list is not 'folded'"
# 8,000 writers' histograms are more than a TraceStats keeps (56 KiB).
[ "$(q "select value from trace_info where key = 'writer_stats_left_out'")" -gt 0 ] ||
    e2e_fail "trace_info.writer_stats_left_out: none of $W writers left out"
[ "$(q "select count(*) from sequence where seq_id > 1 and packets > 0 and loss_kind is null")" = 0 ] ||
    e2e_fail "a producer sequence has neither counts nor an aggregate"
[ "$(q "select count(*) from sequence where loss_kind = 'folded' and (lost_packets is not null or loss_aggregate is null)")" = 0 ] ||
    e2e_fail "a folded sequence has a count of its own or no aggregate"
[ "$(q "select count(*) from sequence where loss_kind = 'aggregate' and packets != 0")" = 0 ] ||
    e2e_fail "an aggregate row has packets"
# A producer's aggregate says its process (the list's pid, which the
# service took from the producer's socket): svc_manywriters'. One
# producer's aggregate fits any list, so the list has one.
[ "$(q "select count(*) from sequence where loss_kind = 'aggregate' and producer_id != 0 and pid = $MANY_PID")" -ge 1 ] ||
    e2e_fail "no aggregate of svc_manywriters' producer with its pid $MANY_PID"
[ "$(q "select count(*) from sequence where loss_kind = 'aggregate' and producer_id != 0 and pid is not $MANY_PID")" = 0 ] ||
    e2e_fail "a producer's aggregate row does not have svc_manywriters' pid $MANY_PID"
# Each aggregate: its writers' packets in the trace are what it read,
# and its writers (those in the trace, plus those that left nothing)
# attempted N each.
[ "$(q "select count(*) from sequence a where loss_kind = 'aggregate' and
        packets_read - ifnull((select sum(packets) from packet_loss p where
          p.seq_id = a.seq_id and cause in ('invalid', 'file_full')), 0)
        != (select ifnull(sum(packets), 0) from sequence f
            where f.loss_aggregate = a.seq_id)")" = 0 ] ||
    e2e_fail "an aggregate's read != its folded writers' packets in the trace"
[ "$(q "select count(*) from sequence a where loss_kind = 'aggregate' and
        ((select ifnull(sum(packets), 0) from sequence f
          where f.loss_aggregate = a.seq_id) + lost_packets) % $N != 0")" = 0 ] ||
    e2e_fail "an aggregate does not hold whole writers of $N packets"
[ "$(q "select count(*) from sequence where loss_kind = 'writer' and packets + lost_packets != $N")" = 0 ] ||
    e2e_fail "a writer with its own entry: packets + lost_packets != $N"
# Every entry keeps the list's invariant in the table too.
[ "$(q "select count(*) from sequence s where loss_kind in ('writer', 'aggregate') and
        packets_offered + ifnull((select sum(packets) from packet_loss p where
          p.seq_id = s.seq_id and cause in ('producer_smb_full', 'invalid',
          'file_full')), 0) != packets_read + packets_pending + lost_packets")" = 0 ] ||
    e2e_fail "an entry breaks offered = read + pending + lost - outside causes"
# All W writers, each packet once.
[ "$(q "select sum(packets) + sum(ifnull(lost_packets, 0)) from sequence where seq_id > 1")" = $((W * N)) ] ||
    e2e_fail "packets + lost over all rows != $((W * N)): \
$(q "select loss_kind, count(*), sum(packets), sum(lost_packets) from sequence group by 1")"
lost=$(q "select sum(lost_packets) from sequence where seq_id > 1")
[ "$lost" = "$(e2e_value stats_lost_packets)" ] ||
    e2e_fail "inspector lost $lost, svc_tracecheck $(e2e_value stats_lost_packets)"
folded=$(q "select count(*) from sequence where loss_kind = 'folded'")
# One aggregate for the producer, or (if even that does not fit beside
# the writer_stats) one for the buffer: producer_id 0.
prod=$(q "select producer_id from sequence where loss_kind = 'aggregate' limit 1")
[ "$(q "select count(*) from sequence where loss_kind = 'aggregate'")" = 1 ] ||
    e2e_fail "one producer, one buffer: one aggregate expected"
if [ "$prod" = 0 ]; then who="all producers"; else who="producer $prod"; fi
sqlite3 "$db" <"$SQL/lost_packets.sql" >"$E2E_DIR/lost.out" ||
    e2e_fail "lost_packets.sql failed"
grep -q "AGGREGATE: $folded writers folded ($who, buffer 0)" \
    "$E2E_DIR/lost.out" ||
    e2e_fail "lost_packets.sql does not show the aggregate: $(head -5 "$E2E_DIR/lost.out")"
grep -q "^$folded  *1  *0  *each counted in its AGGREGATE row" "$E2E_DIR/lost.out" ||
    e2e_fail "lost_packets.sql does not say how many writers were folded"
grep -q "^TOTAL: lost $lost of $((W * N)) packets" "$E2E_DIR/lost.out" ||
    e2e_fail "lost_packets.sql total: $(grep TOTAL "$E2E_DIR/lost.out")"
sqlite3 "$db" <"$SQL/data_loss.sql" >"$E2E_DIR/dl.out"
grep -q "^lost $lost of $((W * N)) packets" "$E2E_DIR/dl.out" ||
    e2e_fail "data_loss.sql total: $(grep "lost .* of" "$E2E_DIR/dl.out")"
grep -q "^$folded writers folded into 1 aggregates" "$E2E_DIR/dl.out" ||
    e2e_fail "data_loss.sql does not say the list was folded"
echo "ok: $folded of the sequences folded, $lost of $((W * N)) packets lost"
