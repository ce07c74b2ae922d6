-- data_loss.sql - was anything lost, where, and why?
--   sqlite3 trace.db < data_loss.sql
--
-- Part 1 is Perfetto's own data-loss query (docs/concepts/buffers.md:
-- "select * from stats where severity = 'data_loss' and value != 0"),
-- with the columns of the doc's sample output; the rows are the same ones
-- trace processor gives. Part 2 goes further: which sequence (producer
-- writer) lost packets, how often, and for what reasons.
--
-- The exact total (traces recorded by shmtraced) counts every lost packet
-- once, also when the service folded its loss list into aggregates
-- (sql/schema.sql, sequence.loss_kind): an aggregate's lost_packets is
-- its writers' in sum, and folded writers add their packets in the trace
-- but no loss of their own. A line then says how many writers were
-- folded into how many aggregates.
.headers on
.mode column

SELECT name, idx, severity, source, value
FROM stats
WHERE severity = 'data_loss' AND value != 0
ORDER BY name, idx;

-- "No data loss" only when nothing at all says otherwise: no data_loss
-- stat, no flagged packet, no chunk overwritten unread or discarded, and
-- no packet counted lost by shmtraced's exact accounting. A trace without
-- those counts (Perfetto's service) gets a weaker verdict.
SELECT CASE WHEN EXISTS (SELECT 1 FROM sequence WHERE lost_packets IS NOT NULL)
            THEN 'no data loss recorded in this trace'
            ELSE 'no data loss flagged (this trace has no exact loss counts)'
       END AS verdict
WHERE NOT EXISTS (SELECT 1 FROM stats WHERE severity = 'data_loss' AND value != 0)
  AND NOT EXISTS (SELECT 1 FROM data_loss WHERE counted = 1)
  AND NOT EXISTS (SELECT 1 FROM stats WHERE value > 0 AND name IN
        ('traced_buf_chunks_overwritten', 'traced_buf_bytes_overwritten',
         'traced_buf_chunks_discarded', 'traced_chunks_discarded'))
  AND NOT EXISTS (SELECT 1 FROM sequence WHERE lost_packets > 0);

SELECT printf('lost %d of %d packets (%.1f%%): see lost_packets.sql',
              sum(ifnull(lost_packets, 0)),
              sum(packets + ifnull(lost_packets, 0)),
              100.0 * sum(ifnull(lost_packets, 0)) /
              max(1, sum(packets + ifnull(lost_packets, 0))))
       AS exact_loss
FROM sequence WHERE seq_id != 1 AND loss_kind IS NOT NULL
HAVING sum(ifnull(lost_packets, 0)) > 0;

SELECT printf('%d writers folded into %d aggregates',
              sum(loss_kind = 'folded'), sum(loss_kind = 'aggregate'))
       AS folded_loss_list
FROM sequence
HAVING sum(loss_kind = 'aggregate') > 0;

SELECT 'chunks were overwritten unread or discarded: data was lost'
       AS notice
WHERE EXISTS (SELECT 1 FROM stats WHERE value > 0 AND name IN
        ('traced_buf_chunks_overwritten', 'traced_buf_chunks_discarded'))
  AND NOT EXISTS (SELECT 1 FROM sequence WHERE lost_packets IS NOT NULL);

SELECT d.seq_id,
       s.pid,
       s.buffer,
       count(*)                    AS loss_events,
       min(d.ts)                   AS first_loss_ts,
       max(d.ts)                   AS last_loss_ts,
       group_concat(DISTINCT d.reasons) AS reasons
FROM data_loss d LEFT JOIN sequence s ON s.seq_id = d.seq_id
WHERE d.counted = 1
GROUP BY d.seq_id
ORDER BY loss_events DESC, d.seq_id;
