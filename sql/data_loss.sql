-- data_loss.sql - was anything lost, where, and why?
--   sqlite3 trace.db < data_loss.sql
--
-- Part 1 is Perfetto's own data-loss query (docs/concepts/buffers.md:
-- "select * from stats where severity = 'data_loss' and value != 0"),
-- with the columns of the doc's sample output; the rows are the same ones
-- trace processor gives. Part 2 goes further: which sequence (producer
-- writer) lost packets, how often, and for what reasons.
.headers on
.mode column

SELECT name, idx, severity, source, value
FROM stats
WHERE severity = 'data_loss' AND value != 0
ORDER BY name, idx;

SELECT 'no data loss recorded in this trace' AS verdict
WHERE NOT EXISTS (SELECT 1 FROM stats WHERE severity = 'data_loss' AND value != 0)
  AND NOT EXISTS (SELECT 1 FROM data_loss WHERE counted = 1);

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
