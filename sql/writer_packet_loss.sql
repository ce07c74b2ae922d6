-- writer_packet_loss.sql - loss in the shared memory path (producer side),
-- the query of docs/concepts/buffers.md.
--   sqlite3 trace.db < writer_packet_loss.sql
.headers on
.mode column

select name, idx, severity, source, value from stats where name = 'traced_buf_trace_writer_packet_loss';
