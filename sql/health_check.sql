-- health_check.sql - trace processor shell's health check: a trace is
-- unhealthy when any error or data_loss stat is above zero.
--   sqlite3 trace.db < health_check.sql
.headers on
.mode column

SELECT CASE WHEN EXISTS (
         SELECT 1 FROM stats
         WHERE severity IN ('error', 'data_loss') AND value > 0 LIMIT 1)
       THEN 'data loss or errors: see data_loss.sql'
       ELSE 'healthy' END AS health,
       (SELECT value FROM trace_info WHERE key = 'status') AS inspection;
