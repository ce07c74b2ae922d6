-- lost_packets.sql - how many packets did each writer lose, of how many,
-- and why?
--   sqlite3 trace.db < lost_packets.sql
--
-- Part 1: one row per producer writer (sequence) from shmtraced's exact
-- per-sequence loss counts (sequence.lost_packets, packet_loss): packets in
-- the trace, lost, attempted (= in trace + lost), the share lost, and the
-- causes. A NOTE marks writers whose producer cannot report its own drops
-- (not a libshm producer, e.g. Perfetto's SDK): their count is a lower
-- bound. Part 2, for traces without these counts (recorded by Perfetto's
-- own service): what can be known per buffer, and a loud notice when the
-- buffer wrapped over unread data or refused chunks.
.headers on
.mode column

SELECT s.seq_id,
       s.pid,
       s.buffer,
       s.packets                    AS in_trace,
       s.lost_packets               AS lost,
       s.packets + s.lost_packets   AS attempted,
       printf('%.1f%%', 100.0 * s.lost_packets /
              max(1, s.packets + s.lost_packets)) AS lost_share,
       ifnull((SELECT group_concat(p.cause || '=' || p.packets, ', ')
               FROM (SELECT * FROM packet_loss q WHERE q.seq_id = s.seq_id
                     ORDER BY q.packets DESC) p), '') AS why,
       CASE s.producer_counts_known
         WHEN 0 THEN 'NOTE: drops inside this producer are unknown (not counted)'
         ELSE '' END                AS note
FROM sequence s
WHERE s.seq_id != 1 AND s.lost_packets IS NOT NULL
ORDER BY s.lost_packets DESC, s.seq_id;

SELECT printf('TOTAL: lost %d of %d packets (%.1f%%)',
              sum(lost_packets), sum(packets + lost_packets),
              100.0 * sum(lost_packets) / max(1, sum(packets + lost_packets)))
       AS total
FROM sequence
WHERE seq_id != 1 AND lost_packets IS NOT NULL
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
