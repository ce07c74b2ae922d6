-- sql/schema.sql - the one schema of shmtrace-inspect's SQLite output.
--
-- shmtrace-inspect embeds this file at build time (it is also installed in
-- $(pkgdatadir) for reference) and runs it on a fresh database. Every table
-- is documented column by column. Timestamps are the raw TracePacket
-- values (field 8, nanoseconds in the packet's clock, BOOTTIME for the
-- service's packets); sizes are bytes.
--
-- Query it with plain sqlite3, e.g.
--   sqlite3 trace.db < sql/data_loss.sql
--   sqlite3 trace.db "select * from stats where severity = 'data_loss' and value != 0"

-- user_version 2: sequence gained producer_id, loss_kind, loss_aggregate
-- and packets_offered/read/pending (folded loss lists).
PRAGMA user_version = 2;

-- stats: Perfetto trace processor's `stats` table, filled the way trace
-- processor fills it (../shared/spec/stats-schema.md). One row per
-- (name, idx). Single stats (idx NULL) exist with value 0 from the start;
-- indexed stats exist only for the indices the trace wrote. Every traced_%
-- row is identical to what trace processor computes for the same file.
CREATE TABLE stats (
  name        TEXT    NOT NULL, -- stat name, e.g. 'traced_buf_chunks_read'
  idx         INTEGER,          -- buffer index for indexed stats, NULL for single stats
  severity    TEXT    NOT NULL, -- 'info' | 'notice' | 'data_loss' | 'error'
  source      TEXT    NOT NULL, -- 'trace' (from TraceStats/packets) | 'analysis' (derived)
  value       INTEGER NOT NULL, -- the counter (int64)
  description TEXT    NOT NULL DEFAULT '' -- what it counts ('' for most)
);
CREATE INDEX stats_by_name ON stats(name, idx);

-- packet: one row per TracePacket, in file order.
CREATE TABLE packet (
  id            INTEGER PRIMARY KEY, -- 0-based ordinal of the packet in the file
  file_offset   INTEGER NOT NULL,    -- file offset of its Trace.packet record (the 0x0A tag)
  ts            INTEGER,             -- TracePacket.timestamp (8); NULL when absent
  clock_id      INTEGER,             -- timestamp_clock_id (58); NULL when absent
  seq_id        INTEGER,             -- trusted_packet_sequence_id (10); NULL when absent
  producer_uid  INTEGER,             -- trusted_uid (3); NULL when absent
  producer_pid  INTEGER,             -- trusted_pid (79); NULL when absent (service)
  size          INTEGER NOT NULL,    -- encoded TracePacket bytes (without tag and length)
  previous_packet_dropped INTEGER NOT NULL, -- field 42, DataLossReason bits (0 = no loss)
  sequence_flags INTEGER NOT NULL,   -- field 13: 1 = incremental state cleared, 2 = needs it
  first_packet_on_sequence INTEGER NOT NULL, -- field 87 (0/1)
  kind          TEXT,                -- payload field: 'track_event', 'trace_stats', ... or 'field_N'
  container_id  INTEGER              -- packet.id of the compressed_packets packet it was
                                     -- inside (file_offset is that packet's); NULL at top level
);

-- sequence: one row per trusted_packet_sequence_id (1 = the service,
-- 2.. = one per producer TraceWriter), plus, in a trace from shmtraced
-- whose loss list was folded, one row per aggregate (loss_kind).
--
-- Exact loss counts (traces recorded by shmtraced; its last TraceStats'
-- shmtrace_sequence_loss, protos/common.proto). The list has one entry per
-- writer, unless the writers were too many for one IPC frame: then the
-- service FOLDS it (service/svc_loss.c): the writers that lost most keep
-- their own entry, the others are summed into aggregate entries (writer_id
-- 0), one per producer and buffer, or one per buffer (producer_id 0).
-- loss_kind says which row is which:
--   'writer'    its own exact counts (lost_packets, packets_offered, ...);
--   'aggregate' not a writer: the sums over the writers folded into it.
--               Its seq_id is one no packet carries, packets = 0, and
--               lost_packets, lost_bytes, packets_offered/read/pending,
--               packet_loss rows are its writers' in sum;
--   'folded'    a writer without counts of its own: lost_packets is NULL
--               because its losses are counted in an aggregate (once),
--               loss_aggregate says which;
--   NULL        no exact counts: the service sequence, and every sequence
--               of a trace recorded by Perfetto's service.
-- So sum(lost_packets) over seq_id > 1 counts every lost packet exactly
-- once, folded list or not; sum(packets) over the producer sequences is
-- every packet in the trace (aggregates add 0). lost_packets.sql and
-- data_loss.sql total them that way.
CREATE TABLE sequence (
  seq_id        INTEGER PRIMARY KEY, -- trusted_packet_sequence_id (an aggregate: the id the
                                     -- service gave it, which no packet carries)
  uid           INTEGER,             -- trusted_uid of its packets (last seen)
  pid           INTEGER,             -- trusted_pid of its packets (NULL for the service); an
                                     -- 'aggregate' of one producer: that producer's pid, when
                                     -- the loss list says it (shmtraced records it)
  packets       INTEGER NOT NULL,    -- packets in the file
  bytes         INTEGER NOT NULL,    -- sum of their encoded sizes
  first_ts      INTEGER,             -- timestamp of its first packet that has one (file order)
  last_ts       INTEGER,             -- timestamp of its last packet that has one (file order)
  flagged_packets INTEGER NOT NULL,  -- packets with previous_packet_dropped != 0
  loss_events   INTEGER NOT NULL,    -- the same, minus the sequence's first packet (trace
                                     -- processor ignores the flag there): what
                                     -- traced_buf_sequence_packet_loss adds up
  first_packet_id INTEGER,           -- packet.id of its first packet
  last_packet_id  INTEGER,           -- packet.id of its last packet
  buffer        INTEGER,             -- target buffer from TraceStats.writer_stats, else from
                                     -- the loss list (NULL if unknown)
  lost_packets  INTEGER,             -- packets of this writer that never reached the trace,
                                     -- exactly (loss_kind 'writer'); a packet fragmented
                                     -- over chunks counts once. 'aggregate': the sum over
                                     -- its writers. NULL: 'folded' (see loss_aggregate), or
                                     -- the trace cannot tell (Perfetto's service)
  lost_bytes    INTEGER,             -- chunk payload bytes that held them (NULL likewise)
  producer_counts_known INTEGER,     -- 1: drops inside the producer are included (libshm
                                     -- producer); 0: the producer cannot report them
                                     -- (e.g. Perfetto's SDK): lost_packets is a lower bound
                                     -- (an aggregate: 1 only if for all its writers)
  producer_id   INTEGER,             -- the service's producer id, from the loss list (0 in
                                     -- a per-buffer aggregate; NULL when not listed)
  loss_kind     TEXT,                -- 'writer' | 'aggregate' | 'folded' | NULL (above)
  loss_aggregate INTEGER,            -- 'folded': seq_id of the aggregate row that holds its
                                     -- counts (same buffer; same producer, known from the
                                     -- aggregate's pid, or else from the pids of that
                                     -- producer's listed writers). NULL when
                                     -- several aggregates could hold it (e.g. two producers
                                     -- in one process): never guessed. Indexed
                                     -- (sequence_by_loss_aggregate) in traces with a
                                     -- folded list
  packets_offered INTEGER,           -- listed rows: packets that reached the buffer
  packets_read  INTEGER,             --   ... read out of it by the service
  packets_pending INTEGER            --   ... still there, incomplete (0 once the session
                                     -- stopped: then counted lost). Per listed row:
                                     -- packets_offered = packets_read + packets_pending +
                                     -- lost_packets - the causes outside the buffer
                                     -- (producer_smb_full, invalid, file_full), and the
                                     -- packets in the trace = packets_read - invalid -
                                     -- file_full (an aggregate: of its writers together)
);

-- packet_loss: why packets were lost, one row per sequence and cause with
-- packets > 0 (from shmtraced's shmtrace_sequence_loss; empty for traces
-- recorded by Perfetto's service). Causes: overwrite (evicted unread from a
-- ring buffer), discard (refused: DISCARD buffer full, stale chunk),
-- abi_violation / corrupted (refused or cut chunks), patch_failed,
-- reassembly (fragments that never made a whole packet, incl. left at
-- stop), producer_smb_full (dropped in the producer: shared memory full),
-- producer_gone (the producer died with packets unfinished), invalid
-- (refused by the service after reading), file_full (read but not written:
-- the file reached max_file_size_bytes; such a file has no final stats,
-- GetTraceStats and `shmtrace record`'s summary report it). Sum over
-- causes = sequence.lost_packets. An aggregate's rows (folded list:
-- sequence.loss_kind = 'aggregate') hold its writers' causes in sum; a
-- folded writer has none of its own.
CREATE TABLE packet_loss (
  seq_id   INTEGER NOT NULL,   -- trusted_packet_sequence_id
  cause    TEXT NOT NULL,
  packets  INTEGER NOT NULL,
  bytes    INTEGER NOT NULL    -- chunk payload bytes (fragment headers included); for
                               -- producer_smb_full the packet bytes the writer dropped
);
CREATE INDEX packet_loss_by_seq ON packet_loss(seq_id);

-- data_loss: one row per packet whose previous_packet_dropped is non-zero,
-- i.e. per place in a sequence where packets before it were lost.
CREATE TABLE data_loss (
  seq_id     INTEGER,          -- trusted_packet_sequence_id (NULL if absent)
  packet_id  INTEGER NOT NULL, -- packet.id of the flagged packet
  ts         INTEGER,          -- its timestamp (NULL when absent)
  bits       INTEGER NOT NULL, -- the raw DataLossReason bitmask
  reasons    TEXT    NOT NULL, -- the bits by name, e.g. 'present,overwrite'
                               --   present=1 read_gap=2 chunk_corrupted=4
                               --   orphan_continuation=8 reassembly_gap=16
                               --   reassembly_broken_chain=32 overwrite=64
                               --   writer_abort=128 smb_full=256
  counted    INTEGER NOT NULL  -- 1 if trace processor counts it (0 on the first packet
                               -- of a sequence, which it ignores)
);
CREATE INDEX data_loss_by_seq ON data_loss(seq_id, packet_id);

-- buffer_config: the session's buffers as the trace_config packet lists them.
CREATE TABLE buffer_config (
  idx         INTEGER PRIMARY KEY, -- buffer index (= stats idx)
  size_kb     INTEGER,             -- BufferConfig.size_kb
  fill_policy TEXT,                -- 'RING_BUFFER' (also for UNSPECIFIED) | 'DISCARD'
  mode        TEXT                 -- 'V1' | 'V2' (experimental_mode TRACE_BUFFER_V2)
);

-- trace_info: facts about the inspection (key/value).
--   input, input_bytes, bytes_decoded, packets, status ('complete' |
--   'truncated' | 'malformed' | 'io_error'), error, error_offset,
--   compressed_packets_expanded, compressed_packets_skipped (zstd, not
--   expanded), inspector_version, write_into_file, duration_ms, ...
--   From the trace's SystemInfo, under trace processor's metadata names
--   (printable ASCII; absent when the service wrote none):
--   tracing_service_version (which service: "Perfetto vNN... (sha)" for
--   traced, "...-shmtraced-VERSION" for shmtraced), system_name,
--   system_version, system_release, system_machine, timezone_off_mins,
--   system_ram_bytes.
--   Exact loss list (shmtraced): loss_list ('per_writer' | 'folded'), and
--   if folded loss_aggregates (aggregate rows), loss_folded_sequences
--   (sequences with loss_kind 'folded'), loss_untied_sequences (those of
--   them whose loss_aggregate is NULL). writer_stats_left_out: writers
--   whose TraceStats.writer_stats entry the service left out to keep a
--   TraceStats under one IPC frame (their sequence.buffer may then be
--   NULL, and trace processor cannot attribute their flagged losses to a
--   buffer; their exact counts above are whole); absent when none was.
--   seq_cap_chunks, seq_cap_packets: chunks the service's buffers refused
--   (summed over the buffers) because their uid already had its bound of
--   sequences in the buffer (libbuf's TB_MAX_SEQS_PER_UID: a user whose
--   producers keep reconnecting with new writers), and the packets they
--   held; those packets are in packet_loss as their writers' 'discard';
--   absent when none was.
--   last_flush_slow_data_sources: the data sources whose producers did not
--   ack the stop's (or a clone's) flush, as "producer/data source, ..."
--   (the service's last such TracingServiceEvent; both services write it):
--   what they had not committed by then may be missing from the end of the
--   trace. slow_starting_data_sources: the same for data sources that had
--   not started 20 s after the session did (traced). Printable ASCII, at
--   most 2048 bytes (then ending in "..."); absent when none was.
--   ftrace_analysis (traces with ftrace bundles): 'exact' when the stats
--   that come from the ftrace events (compact_sched_*_skipped,
--   mismatched_sched_switch_tids, ftrace_packet_before_tracing_start, ...)
--   are as trace processor computes them, else 'approximate: WHY' (another
--   clock, bundles out of order; inspector/ins_fevents.h), or 'not
--   comparable: trace processor refuses the whole trace (WHY)' (critical
--   ftrace parse errors, a cpu of 1024 or more: it loads nothing).
CREATE TABLE trace_info (
  key   TEXT PRIMARY KEY,
  value
);

-- buffer: one row per buffer idx seen in the stats, from the last
-- TraceStats, with the config's policy. used_bytes = the part of the buffer
-- that ever held data (bytes_written + padding, capped at size: a ring that
-- wrapped is 100 % used). An upper bound for a shmtraced ring that was
-- drained while written: it goes back to offset 0 early (each time counted
-- in write_wrap_count) and may have used far less. sequences counts the
-- writers' sequences (aggregate rows are not sequences).
CREATE VIEW buffer AS
SELECT s.idx AS idx,
  max(CASE s.name WHEN 'traced_buf_buffer_size' THEN s.value END) AS size,
  c.fill_policy AS fill_policy,
  c.mode AS mode,
  min(max(CASE s.name WHEN 'traced_buf_buffer_size' THEN s.value END),
      ifnull(max(CASE s.name WHEN 'traced_buf_bytes_written' THEN s.value END), 0)
      + ifnull(max(CASE s.name WHEN 'traced_buf_padding_bytes_written' THEN s.value END), 0))
    AS used,
  round(100.0 * min(max(CASE s.name WHEN 'traced_buf_buffer_size' THEN s.value END),
      ifnull(max(CASE s.name WHEN 'traced_buf_bytes_written' THEN s.value END), 0)
      + ifnull(max(CASE s.name WHEN 'traced_buf_padding_bytes_written' THEN s.value END), 0))
    / nullif(max(CASE s.name WHEN 'traced_buf_buffer_size' THEN s.value END), 0), 1)
    AS used_pct,
  max(CASE s.name WHEN 'traced_buf_bytes_written' THEN s.value END) AS bytes_written,
  max(CASE s.name WHEN 'traced_buf_bytes_read' THEN s.value END) AS bytes_read,
  max(CASE s.name WHEN 'traced_buf_bytes_overwritten' THEN s.value END) AS bytes_overwritten,
  max(CASE s.name WHEN 'traced_buf_chunks_written' THEN s.value END) AS chunks_written,
  max(CASE s.name WHEN 'traced_buf_chunks_read' THEN s.value END) AS chunks_read,
  max(CASE s.name WHEN 'traced_buf_chunks_overwritten' THEN s.value END) AS chunks_overwritten,
  max(CASE s.name WHEN 'traced_buf_chunks_discarded' THEN s.value END) AS chunks_discarded,
  max(CASE s.name WHEN 'traced_buf_write_wrap_count' THEN s.value END) AS write_wrap_count,
  max(CASE s.name WHEN 'traced_buf_patches_failed' THEN s.value END) AS patches_failed,
  max(CASE s.name WHEN 'traced_buf_trace_writer_packet_loss' THEN s.value END) AS writer_packet_loss,
  max(CASE s.name WHEN 'traced_buf_sequence_packet_loss' THEN s.value END) AS sequence_packet_loss,
  (SELECT count(*) FROM sequence q WHERE q.buffer = s.idx
     AND q.loss_kind IS NOT 'aggregate') AS sequences
FROM stats s LEFT JOIN buffer_config c ON c.idx = s.idx
WHERE s.name LIKE 'traced_buf_%' AND s.idx IS NOT NULL
GROUP BY s.idx;
