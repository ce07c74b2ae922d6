-- chunks_lost.sql - loss in the central buffers (ring overwrite, DISCARD
-- full), the query of docs/concepts/buffers.md.
--   sqlite3 trace.db < chunks_lost.sql
.headers on
.mode column

select name, idx, severity, source, value from stats where name = 'traced_buf_chunks_overwritten' or name = 'traced_buf_chunks_discarded';
