/*
 * ins_stats.h - trace processor's `stats` semantics and the per-packet
 * bookkeeping behind every table of the output.
 *
 * Facts (../shared/spec/stats-schema.md; Perfetto's stats.h and
 * proto_trace_reader.cc are the reference):
 *  - 47 traced_* stats: 32 indexed by buffer, 15 single. Single stats have
 *    a row with value 0 from the start; indexed ones only once written.
 *  - Each TraceStats packet overwrites what it sets (absent scalar fields
 *    set 0), except traced_final_flush_{succeeded,failed}, incremented.
 *  - Derived per-buffer stats: for each packet carrying a sequence id that
 *    is not the first packet seen with that id, previous_packet_dropped != 0
 *    counts one loss plus one per cause bit (2..256). At each TraceStats the
 *    counts of every writer_stats sequence already seen are summed into its
 *    buffer and the 10 derived stats of those buffers are set.
 *  - Incremental state: a sequence's state is invalid until a packet clears
 *    it (field 41 or SequenceFlags bit 1) and again after a loss; packets
 *    flagged SEQ_NEEDS_INCREMENTAL_STATE while invalid are skipped
 *    (packet_skipped_seq_needs_incremental_state_invalid); a sequence all
 *    of whose such packets were skipped counts in
 *    traced_buf_incremental_sequences_dropped.
 *  - Packets with a clock_snapshot are not looked at past the sequence
 *    bookkeeping (trace processor returns early for them). A packet holding
 *    compressed_packets only gets its own rows: the packets inside are fed
 *    in after it, as trace processor does; zstd_compressed_packets cannot
 *    be expanded here and are counted in trace_info.compressed_packets_skipped.
 *  - Config checks (trace processor's ParseTraceConfig and end of trace):
 *    each trace_config with write_into_file increments
 *    config_write_into_file_discard[i] for every DISCARD buffer i. At the
 *    end, with the last trace_config seen: if write_into_file and
 *    file_write_period_ms < 1 day, long_trace_mode_bytes_overwritten[i] =
 *    traced_buf_bytes_overwritten[i] for each configured buffer where that
 *    is > 0; if write_into_file, no flush_period_ms and the service's major
 *    version (SystemInfo.tracing_service_version "Perfetto vNN...") is
 *    unknown or < 54, config_write_into_file_no_flush = 1.
 *  - SystemInfo's facts go to trace_info (sql/schema.sql says which).
 *  - Service-event stats (clone timestamps) use the packet's raw timestamp
 *    (BOOTTIME = trace time for the service's packets; a packet without one
 *    uses the latest timestamp seen, as trace processor does).
 *
 * Ownership: ins_tracker_create() returns a tracker borrowing DB;
 * ins_tracker_destroy() frees it (NULL-safe). One thread.
 */
#ifndef INS_STATS_H
#define INS_STATS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ins_db.h"
#include "ins_packet.h"

typedef enum ins_stat_id {
    INS_STAT_BUF_ABI_VIOLATIONS,
    INS_STAT_BUF_BUFFER_SIZE,
    INS_STAT_BUF_BYTES_OVERWRITTEN,
    INS_STAT_BUF_BYTES_READ,
    INS_STAT_BUF_BYTES_FILTERED_OUT,
    INS_STAT_BUF_BYTES_WRITTEN,
    INS_STAT_BUF_CLONE_DONE_TIMESTAMP_NS,
    INS_STAT_BUF_CHUNKS_DISCARDED,
    INS_STAT_BUF_CHUNKS_OVERWRITTEN,
    INS_STAT_BUF_CHUNKS_READ,
    INS_STAT_BUF_CHUNKS_RELOCATED,
    INS_STAT_BUF_CHUNKS_REWRITTEN,
    INS_STAT_BUF_CHUNKS_WRITTEN,
    INS_STAT_BUF_CHUNKS_COMMITTED_OUT_OF_ORDER,
    INS_STAT_BUF_PADDING_BYTES_CLEARED,
    INS_STAT_BUF_PADDING_BYTES_WRITTEN,
    INS_STAT_BUF_PATCHES_FAILED,
    INS_STAT_BUF_PATCHES_SUCCEEDED,
    INS_STAT_BUF_READAHEADS_FAILED,
    INS_STAT_BUF_READAHEADS_SUCCEEDED,
    INS_STAT_BUF_TRACE_WRITER_PACKET_LOSS,
    INS_STAT_BUF_WRITE_WRAP_COUNT,
    INS_STAT_BUF_SEQUENCE_PACKET_LOSS,
    INS_STAT_BUF_INCREMENTAL_SEQUENCES_DROPPED,
    INS_STAT_BUF_DATA_LOSS_READ_GAP,            /* bit 2 */
    INS_STAT_BUF_DATA_LOSS_CHUNK_CORRUPTED,     /* bit 4 */
    INS_STAT_BUF_DATA_LOSS_ORPHAN_CONTINUATION, /* bit 8 */
    INS_STAT_BUF_DATA_LOSS_REASSEMBLY_GAP,      /* bit 16 */
    INS_STAT_BUF_DATA_LOSS_REASSEMBLY_BROKEN_CHAIN, /* bit 32 */
    INS_STAT_BUF_DATA_LOSS_OVERWRITE,           /* bit 64 */
    INS_STAT_BUF_DATA_LOSS_WRITER_ABORT,        /* bit 128 */
    INS_STAT_BUF_DATA_LOSS_SMB_FULL,            /* bit 256 */
    INS_STAT_CLONE_STARTED_TIMESTAMP_NS,
    INS_STAT_CLONE_TRIGGER_TIMESTAMP_NS,
    INS_STAT_CHUNKS_DISCARDED,
    INS_STAT_DATA_SOURCES_REGISTERED,
    INS_STAT_DATA_SOURCES_SEEN,
    INS_STAT_FINAL_FLUSH_FAILED,
    INS_STAT_FINAL_FLUSH_SUCCEEDED,
    INS_STAT_FLUSHES_FAILED,
    INS_STAT_FLUSHES_REQUESTED,
    INS_STAT_FLUSHES_SUCCEEDED,
    INS_STAT_PATCHES_DISCARDED,
    INS_STAT_PRODUCERS_CONNECTED,
    INS_STAT_PRODUCERS_SEEN,
    INS_STAT_TOTAL_BUFFERS,
    INS_STAT_TRACING_SESSIONS,
    INS_STAT_TRACED_COUNT, /* 47: the traced_* stats end here */
    /* trace processor stats outside traced_* that the same logic yields */
    INS_STAT_PACKET_SKIPPED_INCREMENTAL_INVALID = INS_STAT_TRACED_COUNT,
    INS_STAT_CONFIG_WRITE_INTO_FILE_NO_FLUSH,
    INS_STAT_CONFIG_WRITE_INTO_FILE_DISCARD,
    INS_STAT_LONG_TRACE_MODE_BYTES_OVERWRITTEN,
    INS_STAT_COUNT
} ins_stat_id;

typedef struct ins_stat_def {
    const char *name;
    bool indexed;
    const char *severity;    /* "info" | "notice" | "data_loss" | "error" */
    const char *source;      /* "trace" | "analysis" */
    const char *description; /* "" for most */
} ins_stat_def;

extern const ins_stat_def ins_stat_defs[INS_STAT_COUNT];

/* Names of DataLossReason bits, comma-separated into OUT (e.g.
 * "present,overwrite"; unknown bits as "0x..."). Returns OUT. */
char *ins_loss_reasons(uint32_t bits, char *out, size_t outlen);

typedef struct ins_tracker ins_tracker;

/* 0, or -ENOMEM. */
int ins_tracker_create(ins_db *db, bool packet_rows, ins_tracker **out);
void ins_tracker_destroy(ins_tracker *t);

/* Write the rows that exist from the start (single stats at 0). */
int ins_tracker_start(ins_tracker *t);

/* Account one packet: packet/data_loss rows, sequence facts, stats.
 * Returns 0; -EIO (database: see ins_db_errmsg), -EBADMSG (a TraceStats
 * that does not decode), -ENOSPC (more than INS_SEQ_MAX sequences). ERR
 * gets a message for the last two. */
int ins_tracker_on_packet(ins_tracker *t, const ins_packet *p, char *err,
                          size_t errlen);

/* Write pending sequence rows and in-memory counters (before a commit). */
int ins_tracker_flush(ins_tracker *t);
/* At the end, once, after the last ins_tracker_flush: the stats trace
 * processor derives once every packet is in (config checks above), and
 * exact loss accounting rows (packet_loss, sequence.lost_* and loss_*:
 * ins_loss.h). */
int ins_tracker_finish(ins_tracker *t);

/* Packets with compressed_packets/zstd_compressed_packets seen. */
uint64_t ins_tracker_compressed_skipped(const ins_tracker *t);

#endif /* INS_STATS_H */
