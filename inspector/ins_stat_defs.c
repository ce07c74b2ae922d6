/*
 * ins_stat_defs.c - the stats rows the inspector writes, as trace
 * processor defines them (name, indexed or single, severity, source,
 * description; Perfetto's stats.h at ec5d16b), and the names of the
 * DataLossReason bits. Data only: the rules are in ins_stats.c.
 */
#include "ins_stats.h"

#include <inttypes.h>
#include <stdio.h>

#define D_LOSS "data_loss"
#define INFO "info"
#define TRACE "trace"
#define ANALYSIS "analysis"

const ins_stat_def ins_stat_defs[INS_STAT_COUNT] = {
    [INS_STAT_BUF_ABI_VIOLATIONS] =
        {"traced_buf_abi_violations", true, D_LOSS, TRACE, ""},
    [INS_STAT_BUF_BUFFER_SIZE] =
        {"traced_buf_buffer_size", true, INFO, TRACE, ""},
    [INS_STAT_BUF_BYTES_OVERWRITTEN] =
        {"traced_buf_bytes_overwritten", true, INFO, TRACE, ""},
    [INS_STAT_BUF_BYTES_READ] =
        {"traced_buf_bytes_read", true, INFO, TRACE, ""},
    [INS_STAT_BUF_BYTES_FILTERED_OUT] =
        {"traced_buf_bytes_filtered_out", true, INFO, TRACE,
         "Bytes the trace filter removed from this buffer (service packets "
         "are filtered too, so not exactly input minus output)."},
    [INS_STAT_BUF_BYTES_WRITTEN] =
        {"traced_buf_bytes_written", true, INFO, TRACE, ""},
    [INS_STAT_BUF_CLONE_DONE_TIMESTAMP_NS] =
        {"traced_buf_clone_done_timestamp_ns", true, INFO, TRACE,
         "When cloning this buffer finished."},
    [INS_STAT_BUF_CHUNKS_DISCARDED] =
        {"traced_buf_chunks_discarded", true, INFO, TRACE, ""},
    [INS_STAT_BUF_CHUNKS_OVERWRITTEN] =
        {"traced_buf_chunks_overwritten", true, INFO, TRACE, ""},
    [INS_STAT_BUF_CHUNKS_READ] =
        {"traced_buf_chunks_read", true, INFO, TRACE, ""},
    [INS_STAT_BUF_CHUNKS_RELOCATED] =
        {"traced_buf_chunks_relocated", true, INFO, TRACE,
         "TraceBufferV2 only: scraped chunks, already fully read, moved to "
         "the write position instead of being rewritten in place."},
    [INS_STAT_BUF_CHUNKS_REWRITTEN] =
        {"traced_buf_chunks_rewritten", true, INFO, TRACE, ""},
    [INS_STAT_BUF_CHUNKS_WRITTEN] =
        {"traced_buf_chunks_written", true, INFO, TRACE, ""},
    [INS_STAT_BUF_CHUNKS_COMMITTED_OUT_OF_ORDER] =
        {"traced_buf_chunks_committed_out_of_order", true, INFO, TRACE, ""},
    [INS_STAT_BUF_PADDING_BYTES_CLEARED] =
        {"traced_buf_padding_bytes_cleared", true, INFO, TRACE, ""},
    [INS_STAT_BUF_PADDING_BYTES_WRITTEN] =
        {"traced_buf_padding_bytes_written", true, INFO, TRACE, ""},
    [INS_STAT_BUF_PATCHES_FAILED] =
        {"traced_buf_patches_failed", true, D_LOSS, TRACE,
         "Patches that found no chunk to apply to: possible loss in this "
         "buffer (expected on a DISCARD buffer once it is full)."},
    [INS_STAT_BUF_PATCHES_SUCCEEDED] =
        {"traced_buf_patches_succeeded", true, INFO, TRACE, ""},
    [INS_STAT_BUF_READAHEADS_FAILED] =
        {"traced_buf_readaheads_failed", true, INFO, TRACE, ""},
    [INS_STAT_BUF_READAHEADS_SUCCEEDED] =
        {"traced_buf_readaheads_succeeded", true, INFO, TRACE, ""},
    [INS_STAT_BUF_TRACE_WRITER_PACKET_LOSS] =
        {"traced_buf_trace_writer_packet_loss", true, D_LOSS, TRACE,
         "Packet loss the producers' trace writers signalled, including "
         "loss before a ring buffer's kept window or past a full DISCARD "
         "buffer."},
    [INS_STAT_BUF_WRITE_WRAP_COUNT] =
        {"traced_buf_write_wrap_count", true, INFO, TRACE, ""},
    [INS_STAT_BUF_SEQUENCE_PACKET_LOSS] =
        {"traced_buf_sequence_packet_loss", true, D_LOSS, ANALYSIS,
         "Places where a sequence of this buffer lost packets (one per run "
         "of consecutive lost packets), from previous_packet_dropped."},
    [INS_STAT_BUF_INCREMENTAL_SEQUENCES_DROPPED] =
        {"traced_buf_incremental_sequences_dropped", true, D_LOSS, ANALYSIS,
         "Sequences of this buffer whose every packet needing incremental "
         "state was dropped because that state was never valid (clear it "
         "periodically, or more often)."},
    [INS_STAT_BUF_DATA_LOSS_READ_GAP] =
        {"traced_buf_data_loss_read_gap", true, D_LOSS, TRACE,
         "Loss attributed to a gap seen while reading the buffer."},
    [INS_STAT_BUF_DATA_LOSS_CHUNK_CORRUPTED] =
        {"traced_buf_data_loss_chunk_corrupted", true, D_LOSS, TRACE,
         "Loss attributed to a corrupted chunk."},
    [INS_STAT_BUF_DATA_LOSS_ORPHAN_CONTINUATION] =
        {"traced_buf_data_loss_orphan_continuation", true, D_LOSS, TRACE,
         "Loss attributed to a fragment continuation without its start."},
    [INS_STAT_BUF_DATA_LOSS_REASSEMBLY_GAP] =
        {"traced_buf_data_loss_reassembly_gap", true, D_LOSS, TRACE,
         "Loss attributed to a gap while reassembling a fragmented packet."},
    [INS_STAT_BUF_DATA_LOSS_REASSEMBLY_BROKEN_CHAIN] =
        {"traced_buf_data_loss_reassembly_broken_chain", true, D_LOSS, TRACE,
         "Loss attributed to a broken fragment chain."},
    [INS_STAT_BUF_DATA_LOSS_OVERWRITE] =
        {"traced_buf_data_loss_overwrite", true, D_LOSS, TRACE,
         "Loss attributed to unread data overwritten in the ring buffer."},
    [INS_STAT_BUF_DATA_LOSS_WRITER_ABORT] =
        {"traced_buf_data_loss_writer_abort", true, D_LOSS, TRACE,
         "Loss attributed to a writer that aborted a packet."},
    [INS_STAT_BUF_DATA_LOSS_SMB_FULL] =
        {"traced_buf_data_loss_smb_full", true, D_LOSS, TRACE,
         "Loss the producer attributed to a full shared memory buffer."},
    [INS_STAT_CLONE_STARTED_TIMESTAMP_NS] =
        {"traced_clone_started_timestamp_ns", false, INFO, TRACE,
         "When the clone of the session started."},
    [INS_STAT_CLONE_TRIGGER_TIMESTAMP_NS] =
        {"traced_clone_trigger_timestamp_ns", false, INFO, TRACE,
         "When the trigger that caused the clone fired."},
    [INS_STAT_CHUNKS_DISCARDED] =
        {"traced_chunks_discarded", false, INFO, TRACE, ""},
    [INS_STAT_DATA_SOURCES_REGISTERED] =
        {"traced_data_sources_registered", false, INFO, TRACE, ""},
    [INS_STAT_DATA_SOURCES_SEEN] =
        {"traced_data_sources_seen", false, INFO, TRACE, ""},
    [INS_STAT_FINAL_FLUSH_FAILED] =
        {"traced_final_flush_failed", false, D_LOSS, TRACE, ""},
    [INS_STAT_FINAL_FLUSH_SUCCEEDED] =
        {"traced_final_flush_succeeded", false, INFO, TRACE, ""},
    [INS_STAT_FLUSHES_FAILED] =
        {"traced_flushes_failed", false, D_LOSS, TRACE, ""},
    [INS_STAT_FLUSHES_REQUESTED] =
        {"traced_flushes_requested", false, INFO, TRACE, ""},
    [INS_STAT_FLUSHES_SUCCEEDED] =
        {"traced_flushes_succeeded", false, INFO, TRACE, ""},
    [INS_STAT_PATCHES_DISCARDED] =
        {"traced_patches_discarded", false, INFO, TRACE, ""},
    [INS_STAT_PRODUCERS_CONNECTED] =
        {"traced_producers_connected", false, INFO, TRACE, ""},
    [INS_STAT_PRODUCERS_SEEN] =
        {"traced_producers_seen", false, INFO, TRACE, ""},
    [INS_STAT_TOTAL_BUFFERS] =
        {"traced_total_buffers", false, INFO, TRACE, ""},
    [INS_STAT_TRACING_SESSIONS] =
        {"traced_tracing_sessions", false, INFO, TRACE, ""},
    [INS_STAT_PACKET_SKIPPED_INCREMENTAL_INVALID] =
        {"packet_skipped_seq_needs_incremental_state_invalid", false,
         "notice", ANALYSIS,
         "Packets that needed incremental state while their sequence had "
         "none valid (after a loss, or before the first clear): skipped."},
    [INS_STAT_CONFIG_WRITE_INTO_FILE_NO_FLUSH] =
        {"config_write_into_file_no_flush", false, "error", TRACE,
         "write_into_file without flush_period_ms: the service keeps the "
         "whole trace in memory (services before v54 do not flush on each "
         "file write)."},
    [INS_STAT_CONFIG_WRITE_INTO_FILE_DISCARD] =
        {"config_write_into_file_discard", true, D_LOSS, TRACE,
         "write_into_file with a DISCARD buffer: once full, everything "
         "after is lost. Use RING_BUFFER."},
    [INS_STAT_LONG_TRACE_MODE_BYTES_OVERWRITTEN] =
        {"long_trace_mode_bytes_overwritten", true, D_LOSS, TRACE,
         "Bytes this buffer overwrote while streaming to the file "
         "(write_into_file): never written out. Use a larger buffer or a "
         "shorter file_write_period_ms."},
};

/* DataLossReason bit -> name; bits 2..256 are the 8 cause stats in order. */
static const char *const LOSS_BIT_NAMES[] = {
    "present", "read_gap", "chunk_corrupted", "orphan_continuation",
    "reassembly_gap", "reassembly_broken_chain", "overwrite",
    "writer_abort", "smb_full"};

char *ins_loss_reasons(uint32_t bits, char *out, size_t outlen)
{
    size_t n = 0;
    out[0] = '\0';
    for (unsigned b = 0; b < 9; b++) {
        if (!(bits & (1u << b)))
            continue;
        int w = snprintf(out + n, outlen - n, "%s%s", n ? "," : "",
                         LOSS_BIT_NAMES[b]);
        if (w < 0 || (size_t)w >= outlen - n)
            return out;
        n += (size_t)w;
    }
    uint32_t unknown = bits & ~0x1ffu;
    if (unknown)
        snprintf(out + n, outlen - n, "%s0x%" PRIx32, n ? "," : "", unknown);
    return out;
}
