-- buffer_usage.sql - each central buffer: size, policy, how full it got,
-- and what it lost (from the last TraceStats in the trace).
--   sqlite3 trace.db < buffer_usage.sql
-- used = bytes of the buffer that ever held data (100 % once a ring wraps;
-- an upper bound where shmtraced drained a ring and rewound it early);
-- chunks_overwritten (RING_BUFFER) and chunks_discarded (DISCARD) are the
-- central-buffer losses of docs/concepts/buffers.md.
.headers on
.mode line

SELECT idx, size, fill_policy, mode, used, used_pct,
       bytes_written, bytes_read, bytes_overwritten,
       chunks_written, chunks_read, chunks_overwritten, chunks_discarded,
       write_wrap_count, patches_failed, writer_packet_loss,
       sequence_packet_loss, sequences
FROM buffer
ORDER BY idx;
