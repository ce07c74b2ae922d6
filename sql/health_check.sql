-- health_check.sql - trace processor shell's health check: a trace is
-- unhealthy when any error or data_loss stat is above zero.
--   sqlite3 trace.db < health_check.sql
.headers on
.mode column

-- Beyond trace processor: a chunk overwritten unread or discarded, or any
-- packet counted lost (sequence.lost_packets), is data loss too.
SELECT CASE WHEN EXISTS (
         SELECT 1 FROM stats
         WHERE severity IN ('error', 'data_loss') AND value > 0 LIMIT 1)
         OR EXISTS (SELECT 1 FROM stats WHERE value > 0 AND name IN
              ('traced_buf_chunks_overwritten', 'traced_buf_bytes_overwritten',
               'traced_buf_chunks_discarded', 'traced_chunks_discarded'))
         OR EXISTS (SELECT 1 FROM sequence WHERE lost_packets > 0)
       THEN 'data loss or errors: see data_loss.sql and lost_packets.sql'
       ELSE 'healthy' END AS health,
       (SELECT value FROM trace_info WHERE key = 'status') AS inspection,
       -- Which service wrote it (its SystemInfo packet), and on what.
       COALESCE((SELECT value FROM trace_info
                 WHERE key = 'tracing_service_version'),
                'unknown (no SystemInfo)') AS service,
       (SELECT value FROM trace_info WHERE key = 'system_machine') AS machine,
       -- Data sources that did not ack the last flush: the end of their
       -- data may be missing (NULL: every one did).
       (SELECT value FROM trace_info
        WHERE key = 'last_flush_slow_data_sources') AS slow_at_last_flush;
