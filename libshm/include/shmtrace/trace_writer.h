/*
 * shmtrace/trace_writer.h - TraceWriter: one thread's packet sequence and
 * its zero-copy protobuf encoder.
 *
 * A tw_writer is one sequence {ProducerID, WriterID}: it owns at most one
 * SMB chunk at a time and encodes TracePacket protobuf straight into it.
 * Packets larger than a chunk continue in the next chunk (fragments with
 * the continuation flags); a nested message's 4-byte size field that sits
 * in a chunk already handed back becomes an out-of-band patch. Packets of
 * any size up to 256 MiB - 1 are fine, provided the service keeps freeing
 * chunks (a packet never needs more than one chunk at a time).
 * A large write takes the chunks it will fill in runs (up to 16, at most
 * 1/4 of the SMB's chunks) and hands them back a run at a time, the last
 * one before the call returns: a writer may hold that many chunks during
 * the call, but gets by with whatever is free.
 *
 * Usage (one thread per writer):
 *
 *     tw_writer *w = tw_writer_create(arb, target_buffer, TW_POLICY_DROP);
 *     tw_packet_begin(w);
 *     tw_add_varint(w, 8, timestamp_ns);      // TracePacket.timestamp
 *     tw_begin_nested(w, 900);                // TracePacket.for_testing
 *     tw_add_string(w, 1, "hello");           //   TestEvent.str
 *     tw_end_nested(w);
 *     tw_packet_end(w);
 *     tw_writer_flush(w);                     // commit the current chunk
 *     tw_writer_destroy(w);
 *
 * The writer itself adds first_packet_on_sequence = true (field 87) to the
 * first packet of the sequence, and previous_packet_dropped = 257
 * (DATA_LOSS_PRESENT | DATA_LOSS_SMB_FULL, field 42) to the first packet
 * after packets were lost because the SMB was full (drop policy).
 *
 * Encoder calls outside tw_packet_begin/_end, unbalanced nesting or nesting
 * deeper than TW_MAX_NESTING are misuse: they are ignored and counted in
 * tw_writer_stats.misuse (never a crash). Encoder calls return nothing: a
 * write that cannot reach the SMB is lost and signalled as above.
 *
 * Threads: a writer is used by one thread at a time; writers of one arbiter
 * run in parallel. The per-packet path takes no lock and does no atomic
 * read-modify-write: only chunk boundaries touch the arbiter.
 * Ownership: tw_writer_create allocates; tw_writer_destroy finishes an
 * open packet, commits the chunk, frees the WriterID and the writer.
 */
#ifndef SHMTRACE_TRACE_WRITER_H
#define SHMTRACE_TRACE_WRITER_H

#include <stddef.h>
#include <stdint.h>

#include <shmtrace/api.h>
#include <shmtrace/arbiter.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tw_writer tw_writer;

/* What a writer does when no chunk is free. Values = DataSourceConfig's
 * BufferExhaustedPolicy. */
typedef enum tw_policy {
    /* Never block: lose packets until a chunk is free again, then flag
     * the next packet (previous_packet_dropped = 257). SDK default. */
    TW_POLICY_DROP = 1,
    /* Wait with back-off (0, 8, 72, 584 us, then 2 ms per wait) and lose
     * nothing; once one acquisition has waited TW_MAX_STALLS times and
     * TW_MAX_STALL_US in all, the process aborts (Perfetto's kStall).
     * After smb_arbiter_shutdown (service gone) it drops instead of
     * waiting. */
    TW_POLICY_STALL_THEN_ABORT = 2,
    /* Wait as above; then drop. */
    TW_POLICY_STALL_THEN_DROP = 3,
} tw_policy;

#define TW_MAX_STALLS   300
#define TW_MAX_STALL_US 30000000u    /* 30 s */
#define TW_MAX_NESTING  32

typedef struct tw_writer_stats {
    uint64_t packets_written;   /* packets begun with a real chunk */
    uint64_t packets_lost;      /* packets (partly) lost: SMB full */
    uint64_t drop_episodes;     /* times the writer entered drop mode */
    uint64_t chunks_used;
    uint64_t patches_created;
    uint64_t stalls;
    uint64_t misuse;
    /* Trailing loss markers (packets holding only previous_packet_dropped
     * = 257, written by flush/destroy while a loss is unsignalled; not in
     * packets_written), and markers given up because no chunk came free
     * within ~64 ms (the loss then stays only in packets_lost). */
    uint64_t loss_markers;
    uint64_t loss_markers_failed;
} tw_writer_stats;

/* New writer for target_buffer (> 0) with a fresh WriterID (registered
 * through the transport). When the ID pool is empty or the arbiter is shut
 * down, returns a null writer (writer id 0: accepts writes, keeps nothing).
 * NULL + errno only on EINVAL / ENOMEM. */
SHMTRACE_API tw_writer *tw_writer_create(smb_arbiter *arb,
                                         uint32_t target_buffer,
                                         tw_policy policy);
SHMTRACE_API void tw_writer_destroy(tw_writer *w);

SHMTRACE_API uint16_t tw_writer_id(const tw_writer *w);
/* Commit the current chunk (even partly filled) and flush the arbiter.
 * Must not be called inside a packet (-EBUSY). Returns the transport's
 * result. If packets were lost since the last packet that could say so,
 * first writes a loss marker (a packet with only previous_packet_dropped
 * = 257), stalling at most ~64 ms for a chunk (none once the arbiter is
 * shut down); tw_writer_destroy does the same. */
SHMTRACE_API int tw_writer_flush(tw_writer *w);
SHMTRACE_API void tw_writer_get_stats(const tw_writer *w,
                                      tw_writer_stats *out);

/* ---- Packets --------------------------------------------------------- */
SHMTRACE_API void tw_packet_begin(tw_writer *w);
/* Closes any nested message left open, then the packet. */
SHMTRACE_API void tw_packet_end(tw_writer *w);

/* ---- Incremental state ------------------------------------------------ */
/* Any thread (e.g. the producer's on_clear_incremental_state callback):
 * the service asked the sequence to drop its incremental state (interned
 * data, packet defaults), incremental_state_config.clear_period_ms. The
 * next packet the writer actually writes (not one lost to a full SMB)
 * carries sequence_flags = SEQ_INCREMENTAL_STATE_CLEARED (field 13 = 1),
 * added by the writer in tw_packet_begin. */
SHMTRACE_API void tw_writer_clear_incremental_state(tw_writer *w);
/* Writer's thread, inside a packet: 1 if this packet carries the clear
 * flag. The application must then re-emit, in this packet or later ones,
 * every interned entry / default it refers to, and must not add its own
 * sequence_flags to this packet. 0 otherwise. */
SHMTRACE_API int tw_packet_incremental_state_cleared(const tw_writer *w);

/* ---- Fields (field numbers 1..2^29-1) ---------------------------------- */
SHMTRACE_API void tw_add_varint(tw_writer *w, uint32_t field, uint64_t v);
/* int32/int64: negative values become 10-byte varints, as protobuf does. */
SHMTRACE_API void tw_add_int64(tw_writer *w, uint32_t field, int64_t v);
SHMTRACE_API void tw_add_sint64(tw_writer *w, uint32_t field, int64_t v);
SHMTRACE_API void tw_add_fixed32(tw_writer *w, uint32_t field, uint32_t v);
SHMTRACE_API void tw_add_fixed64(tw_writer *w, uint32_t field, uint64_t v);
SHMTRACE_API void tw_add_double(tw_writer *w, uint32_t field, double v);
SHMTRACE_API void tw_add_bytes(tw_writer *w, uint32_t field,
                               const void *data, size_t size);
SHMTRACE_API void tw_add_string(tw_writer *w, uint32_t field,
                                const char *str);
/* Open a length-delimited sub-message; close it with tw_end_nested. */
SHMTRACE_API void tw_begin_nested(tw_writer *w, uint32_t field);
SHMTRACE_API void tw_end_nested(tw_writer *w);
/* Append pre-encoded protobuf bytes to the current message. */
SHMTRACE_API void tw_append_raw(tw_writer *w, const void *data,
                                size_t size);

#ifdef __cplusplus
}
#endif
#endif /* SHMTRACE_TRACE_WRITER_H */
