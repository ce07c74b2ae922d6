-- loss_by_sequence.sql - every sequence (1 = the service, then one per
-- producer TraceWriter) with its packets and its losses.
--   sqlite3 trace.db < loss_by_sequence.sql
-- loss_events counts the packets flagged previous_packet_dropped except a
-- sequence's first packet (ignored by trace processor, see data_loss.counted);
-- their sum per buffer is traced_buf_sequence_packet_loss. The aggregate
-- rows of a folded loss list (sequence.loss_kind = 'aggregate') are not
-- sequences and are left out: lost_packets.sql shows them.
.headers on
.mode column

SELECT q.seq_id,
       q.uid,
       q.pid,
       q.buffer,
       q.packets,
       q.bytes,
       q.loss_events,
       q.flagged_packets,
       round((q.last_ts - q.first_ts) / 1e6, 3) AS span_ms,
       (SELECT group_concat(r, ' | ')
          FROM (SELECT DISTINCT d.reasons AS r FROM data_loss d
                 WHERE d.seq_id = q.seq_id AND d.counted = 1)) AS reasons
FROM sequence q
WHERE q.loss_kind IS NOT 'aggregate'
ORDER BY q.loss_events DESC, q.seq_id;
