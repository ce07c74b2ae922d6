-- loss_timeline.sql - every place a sequence lost packets, in time order,
-- with milliseconds since the first timestamp of the trace.
--   sqlite3 trace.db < loss_timeline.sql
.headers on
.mode column

SELECT d.packet_id,
       d.seq_id,
       s.pid,
       d.ts,
       round((d.ts - (SELECT min(first_ts) FROM sequence)) / 1e6, 3) AS ms_into_trace,
       d.bits,
       d.reasons,
       d.counted
FROM data_loss d LEFT JOIN sequence s ON s.seq_id = d.seq_id
ORDER BY d.ts, d.packet_id;
