-- lost_packets.sql - how many packets did each writer lose, of how many,
-- and why?
--   sqlite3 trace.db < lost_packets.sql
--
-- Part 1: one row per producer writer (sequence) from shmtraced's exact
-- per-sequence loss counts (sequence.lost_packets, packet_loss): packets in
-- the trace, lost, attempted (= in trace + lost), the share lost, and the
-- causes. A NOTE marks writers whose producer cannot report its own drops
-- (not a libshm producer, e.g. Perfetto's SDK): their count is a lower
-- bound.
--
-- Folded lists (thousands of writers; sql/schema.sql, sequence.loss_kind):
-- the service kept own counts for the writers that lost most and summed
-- the others into aggregates. Each aggregate is one row here, its note
-- "AGGREGATE: N writers folded (producer P, buffer B)" ("all producers":
-- one aggregate per buffer): N counts the
-- writers of this trace tied to it (sequence.loss_aggregate; a writer
-- whose packets were all lost left no sequence and is only in the
-- counts), in_trace is the packets of those writers in the trace
-- (packets_read - invalid - file_full), lost their losses in sum. The
-- folded writers have no row of their own (no count of their own); a
-- line below says how many there are (folded_writers) and how many could
-- not be tied to one aggregate (untied). TOTAL counts every packet once,
-- folded or not. (Notes stay under 60 characters: sqlite3's column mode
-- wraps longer ones.)
--
-- Part 2, for traces without these counts (recorded by Perfetto's own
-- service): what can be known per buffer, and a loud notice when the
-- buffer wrapped over unread data or refused chunks.
.headers on
.mode column

SELECT seq_id, pid, buffer, in_trace, lost,
       in_trace + lost AS attempted,
       printf('%.1f%%', 100.0 * lost / max(1, in_trace + lost)) AS lost_share,
       why, note
FROM (
  SELECT s.seq_id,
         s.pid,
         s.buffer,
         CASE WHEN s.loss_kind = 'aggregate'
           THEN max(0, ifnull(s.packets_read, 0) -
                ifnull((SELECT sum(p.packets) FROM packet_loss p
                        WHERE p.seq_id = s.seq_id
                          AND p.cause IN ('invalid', 'file_full')), 0))
           ELSE s.packets END       AS in_trace,
         s.lost_packets             AS lost,
         ifnull((SELECT group_concat(p.cause || '=' || p.packets, ', ')
                 FROM (SELECT * FROM packet_loss q WHERE q.seq_id = s.seq_id
                       ORDER BY q.packets DESC) p), '') AS why,
         trim(CASE WHEN s.loss_kind = 'aggregate' THEN
           (SELECT printf('AGGREGATE: %d writer%s folded', count(*),
                          CASE count(*) WHEN 1 THEN '' ELSE 's' END)
            FROM sequence f WHERE f.loss_aggregate = s.seq_id) ||
           printf(' (%s, buffer %d)',
                  CASE s.producer_id WHEN 0 THEN 'all producers'
                    ELSE 'producer ' || s.producer_id END, s.buffer)
           ELSE '' END || '; ' ||
         CASE s.producer_counts_known
           WHEN 0 THEN 'NOTE: drops inside this producer are unknown (not counted)'
           ELSE '' END, '; ')       AS note
  FROM sequence s
  WHERE s.seq_id != 1 AND s.lost_packets IS NOT NULL
)
ORDER BY lost DESC, seq_id;

SELECT count(*) AS folded_writers,
       (SELECT count(*) FROM sequence WHERE loss_kind = 'aggregate')
         AS aggregates,
       count(*) - count(loss_aggregate) AS untied,
       CASE WHEN count(*) > count(loss_aggregate)
         THEN 'some untied: several aggregates could hold them'
         ELSE 'each counted in its AGGREGATE row above' END AS note
FROM sequence WHERE loss_kind = 'folded'
HAVING count(*) > 0;

SELECT printf('TOTAL: lost %d of %d packets (%.1f%%)',
              sum(ifnull(lost_packets, 0)),
              sum(packets + ifnull(lost_packets, 0)),
              100.0 * sum(ifnull(lost_packets, 0)) /
              max(1, sum(packets + ifnull(lost_packets, 0))))
       AS total
FROM sequence
WHERE seq_id != 1 AND loss_kind IS NOT NULL
HAVING count(*) > 0;

SELECT 'no exact loss counts in this trace (not recorded by shmtraced)'
       AS notice
WHERE NOT EXISTS (SELECT 1 FROM sequence WHERE lost_packets IS NOT NULL);

SELECT b.idx AS buffer, b.fill_policy,
       b.chunks_overwritten, b.bytes_overwritten, b.chunks_discarded,
       CASE WHEN ifnull(b.chunks_overwritten, 0) > 0
              THEN 'LOSS: the ring wrapped over unread data'
            WHEN ifnull(b.chunks_discarded, 0) > 0
              THEN 'LOSS: the buffer refused chunks (full or stale)'
            ELSE '' END AS notice
FROM buffer b
WHERE NOT EXISTS (SELECT 1 FROM sequence WHERE lost_packets IS NOT NULL);
