#!/bin/sh
# ins_lost_packets.sh - the exact loss columns and canned queries:
#  - traces recorded by Perfetto's own service (tests/data) have no exact
#    counts: sequence.lost_packets is NULL (unknown, never 0), packet_loss
#    is empty, lost_packets.sql says so and shows per buffer what can be
#    known, loudly when the ring wrapped or chunks were refused; for the
#    two that lost data, data_loss.sql never says "no data loss" and
#    health_check.sql never says "healthy"; ok_v2 is healthy, its service
#    unknown (no SystemInfo packet);
#  - a trace recorded by shmtraced over a wrapping ring: lost_packets is
#    set on every producer sequence (loss_kind 'writer'; a folded list,
#    tests/ins_lost_folded.sh, is accepted too: then a sequence without
#    its own count is 'folded' and its aggregate accounts for it),
#    packet_loss rows add up to it, packets + lost_packets is what each
#    writer attempted (--count), every entry keeps offered = read +
#    pending + lost - the causes outside the buffer, and health_check.sql
#    names shmtraced and this machine.
. "${top_srcdir:-.}/tests/e2e_lib.sh"
INSPECT="$top_builddir/inspector/shmtrace-inspect"
e2e_need_tools "$INSPECT"
command -v sqlite3 >/dev/null || { echo "SKIP: sqlite3 not installed" >&2; exit 77; }
SQL="$top_srcdir/sql"
q() { sqlite3 "$1" "$2"; }

for t in ok_v2 ring_loss_v2 discard_v2; do
    db="$E2E_DIR/$t.db"
    "$INSPECT" --force --no-progress -o "$db" \
        "$top_srcdir/tests/data/$t.pftrace" >/dev/null 2>&1 ||
        e2e_fail "inspecting $t failed"
    [ "$(q "$db" "select count(*) from sequence where lost_packets is not null")" = 0 ] ||
        e2e_fail "$t: lost_packets must be NULL (unknown) for Perfetto's traces"
    [ "$(q "$db" "select count(*) from packet_loss")" = 0 ] ||
        e2e_fail "$t: packet_loss must be empty"
    sqlite3 "$db" <"$SQL/lost_packets.sql" >"$E2E_DIR/$t.lost" ||
        e2e_fail "$t: lost_packets.sql failed"
    grep -q "no exact loss counts" "$E2E_DIR/$t.lost" ||
        e2e_fail "$t: lost_packets.sql does not say the counts are unknown"
    sqlite3 "$db" <"$SQL/data_loss.sql" >"$E2E_DIR/$t.dl"
    sqlite3 "$db" <"$SQL/health_check.sql" >"$E2E_DIR/$t.hc"
done
grep -q "LOSS: the ring wrapped" "$E2E_DIR/ring_loss_v2.lost" ||
    e2e_fail "ring_loss_v2: no notice that the ring wrapped"
grep -q "LOSS: the buffer refused chunks" "$E2E_DIR/discard_v2.lost" ||
    e2e_fail "discard_v2: no notice that chunks were refused"
for t in ring_loss_v2 discard_v2; do
    if grep -q "no data loss" "$E2E_DIR/$t.dl"; then
        e2e_fail "$t: data_loss.sql says no data loss"
    fi
    if grep -q "healthy" "$E2E_DIR/$t.hc"; then
        e2e_fail "$t: health_check.sql says healthy"
    fi
done
grep -q "LOSS" "$E2E_DIR/ok_v2.lost" && e2e_fail "ok_v2 lost nothing"
# ok_v2 lost nothing, and has no SystemInfo packet to name its service.
grep -q "^healthy  *complete  *unknown (no SystemInfo)" "$E2E_DIR/ok_v2.hc" ||
    e2e_fail "ok_v2: health_check.sql: $(cat "$E2E_DIR/ok_v2.hc")"

# Our own trace, with exact counts.
N=20000
e2e_start_daemon
e2e_spawn producer "$PRODUCER" -t 2 -c $N -r 20000 -S 200 --policy stall \
    --once
e2e_wait_registered 1
# Record until both writers have written all N (a fixed 2 s was too short
# under ThreadSanitizer on a loaded machine), then SIGTERM (as Ctrl-C).
e2e_spawn cli "$CLI" record -q -o "$E2E_DIR/trace" -t 600s -b 256k
REC=$E2E_LAST_PID
writers_done() {
    E2E_SEEN=$(grep -c "writer [01] done" "$E2E_DIR/producer.log")
    [ "${E2E_SEEN:-0}" -ge 2 ]
}
e2e_until 2400 0.05 "the writers never finished" writers_done
kill -TERM "$REC"
e2e_wait_ok "$REC" 60 "shmtrace record"
e2e_stop_daemon
db="$E2E_DIR/ours.db"
"$INSPECT" --force --no-progress -o "$db" "$E2E_DIR/trace" >/dev/null 2>&1 ||
    e2e_fail "inspecting our trace failed"
# Every producer sequence has its own count ('writer') or, if the service
# folded the list (many writers: not here, but the checks must hold then
# too), is counted in an aggregate ('folded', tied to it).
[ "$(q "$db" "select count(*) from sequence where seq_id != 1 and (loss_kind is null or (loss_kind = 'writer') != (lost_packets is not null))")" = 0 ] ||
    e2e_fail "a producer sequence has no lost_packets and is not folded"
[ "$(q "$db" "select count(*) from sequence where loss_kind = 'folded' and loss_aggregate is null")" = 0 ] ||
    e2e_fail "one producer: a folded sequence must be tied to its aggregate"
[ "$(q "$db" "select count(*) from sequence where seq_id != 1 and loss_kind in ('writer', 'aggregate') and lost_packets > 0")" = 2 ] ||
    [ "$(q "$db" "select count(*) from sequence where loss_kind = 'aggregate'")" != 0 ] ||
    e2e_fail "both writers should have lost packets to the 256 KiB ring"
[ "$(q "$db" "select count(*) from sequence s where seq_id != 1 and lost_packets != (select sum(packets) from packet_loss p where p.seq_id = s.seq_id)")" = 0 ] ||
    e2e_fail "packet_loss does not add up to lost_packets"
[ "$(q "$db" "select count(*) from sequence where loss_kind = 'writer' and packets + lost_packets != $N")" = 0 ] ||
    e2e_fail "packets + lost_packets != $N: $(q "$db" "select seq_id, packets, lost_packets from sequence")"
# An aggregate holds whole writers: its folded writers' packets in the
# trace are what it read, and with its losses make N per writer.
[ "$(q "$db" "select count(*) from sequence a where loss_kind = 'aggregate' and
        (packets_read - ifnull((select sum(packets) from packet_loss p where
           p.seq_id = a.seq_id and cause in ('invalid', 'file_full')), 0)
         != (select ifnull(sum(packets), 0) from sequence f
             where f.loss_aggregate = a.seq_id)
         or ((select ifnull(sum(packets), 0) from sequence f
              where f.loss_aggregate = a.seq_id) + lost_packets) % $N != 0)")" = 0 ] ||
    e2e_fail "an aggregate does not account for its folded writers"
# Every entry (writer or aggregate): offered = read + pending + lost -
# the causes outside the buffer.
[ "$(q "$db" "select count(*) from sequence s where loss_kind in ('writer', 'aggregate') and
        packets_offered + ifnull((select sum(packets) from packet_loss p where
          p.seq_id = s.seq_id and cause in ('producer_smb_full', 'invalid',
          'file_full')), 0) != packets_read + packets_pending + lost_packets")" = 0 ] ||
    e2e_fail "an entry breaks offered = read + pending + lost - outside causes"
[ "$(q "$db" "select count(*) from sequence where seq_id != 1 and producer_counts_known != 1")" = 0 ] ||
    e2e_fail "a libshm producer's drops must be known"
sqlite3 "$db" <"$SQL/lost_packets.sql" >"$E2E_DIR/ours.lost"
grep -q "overwrite=" "$E2E_DIR/ours.lost" || e2e_fail "lost_packets.sql: no cause"
grep -q "TOTAL: lost" "$E2E_DIR/ours.lost" || e2e_fail "lost_packets.sql: no total"
sqlite3 "$db" <"$SQL/data_loss.sql" | grep -q "no data loss" &&
    e2e_fail "data_loss.sql says no data loss"
sqlite3 "$db" <"$SQL/health_check.sql" >"$E2E_DIR/ours.hc"
grep -q "healthy" "$E2E_DIR/ours.hc" && e2e_fail "health_check.sql says healthy"
grep -q "^data loss.*complete .*(shmtraced [0-9.]*)  *$(uname -m)" \
    "$E2E_DIR/ours.hc" ||
    e2e_fail "health_check.sql does not name shmtraced and this machine: \
$(cat "$E2E_DIR/ours.hc")"
echo "ok"
