/*
 * shmtrace/arbiter.h - the producer's chunk arbiter and its transport seam.
 *
 * One smb_arbiter per SMB (= per producer connection). It hands free chunks
 * to TraceWriters (partitioning pages on demand, Div1 by default), takes
 * back the chunks they fill, and batches what the service must do into
 * commit batches (Perfetto's CommitDataRequest): chunks to move {page,
 * chunk, target_buffer}, chunks to patch {target_buffer, writer_id,
 * chunk_id, patches[{offset, 4 bytes}], has_more_patches} and an optional
 * flush_request_id.
 *
 * THE TRANSPORT SEAM. The arbiter never knows who moves chunks: it calls
 * smb_transport.commit with each batch. In-process (tests, benchmarks) the
 * callback hands the batch straight to the service-side SMB reader
 * (service/smb_reader.h) and a libbuf tb_buffer; over IPC the callback
 * encodes one CommitDataRequest and sends it on the producer socket. The
 * service applies a batch's chunks before its patches, then the flush id.
 *
 * When batches are sent: a batch is started when a writer returns a chunk
 * or queues patches. It is sent (1) as soon as it holds patches (unless
 * options.batch_patches: then patches wait in the batch like chunks, and
 * the service, which applies a batch's chunks before its patches, reads a
 * packet that straddles chunks once the batch arrives), (2) when
 * its chunks add up to >= options.batch_bytes (each chunk counted with its
 * header: 4088 bytes for a Div1 chunk of a 4 KiB page; default 0: every
 * returned chunk is sent at once) or to half the SMB, (3) on
 * smb_arbiter_flush / tw_writer_flush, and (4) before a writer gives up on
 * finding a free chunk (the service may be waiting for those chunks).
 *
 * Locking: one mutex guards the page cursor, the WriterID pool, the pending
 * batch and the stats. Callbacks are called WITH THAT MUTEX HELD, from
 * whatever thread triggered the send (a writer thread, or the flusher), so
 * batches reach the transport in order and never concurrently. A callback
 * must not call back into the arbiter or its writers. The per-packet write
 * path never takes the mutex: only chunk boundaries do.
 *
 * Ownership: smb_arbiter_create borrows the memory (it must outlive the
 * arbiter); smb_arbiter_create_from_fd maps the fd (dup'ed) and
 * smb_arbiter_create_shm creates a new object; those two own their mapping.
 * Destroy every writer before the arbiter. smb_arbiter_destroy(NULL) is a
 * no-op. Batch arrays passed to callbacks are valid only during the call.
 */
#ifndef SHMTRACE_ARBITER_H
#define SHMTRACE_ARBITER_H

#include <stddef.h>
#include <stdint.h>

#include <shmtrace/api.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct smb_arbiter smb_arbiter;

/* One chunk to move (CommitDataRequest.ChunksToMove). */
typedef struct smb_commit_chunk {
    uint32_t page;           /* page index in the SMB */
    uint32_t chunk;          /* chunk index in the page */
    uint32_t target_buffer;  /* global BufferID, > 0 */
} smb_commit_chunk;

/* One patch; offset from the chunk payload start (chunk start + 8). Same
 * layout as libbuf's tb_patch. */
typedef struct smb_patch {
    uint32_t offset;
    uint8_t data[4];
} smb_patch;

/* Patches for one chunk (CommitDataRequest.ChunkToPatch). */
typedef struct smb_chunk_patches {
    uint32_t target_buffer;
    uint32_t chunk_id;
    uint16_t writer_id;
    uint8_t has_more_patches;  /* 1: more patches for this chunk follow */
    uint8_t reserved;
    uint32_t npatches;         /* 1..1024 */
    const smb_patch *patches;
} smb_chunk_patches;

/* Packets a TraceWriter lost before any of their fragments reached the
 * SMB (drop policy, SMB full), since the previous batch (a delta). */
typedef struct smb_writer_loss {
    uint32_t target_buffer;
    uint16_t writer_id;
    uint16_t reserved;
    uint64_t packets;
    uint64_t bytes;            /* packet bytes the writer had to drop */
} smb_writer_loss;

/* One CommitDataRequest. */
typedef struct smb_commit_batch {
    const smb_commit_chunk *chunks;
    size_t nchunks;
    const smb_chunk_patches *patch_groups;
    size_t npatch_groups;
    uint64_t flush_request_id;  /* 0 = none */
    /* Writer losses to report with this batch (CommitDataRequest
     * .shmtrace_writer_loss); sent on the next batch, flush included. */
    const smb_writer_loss *losses;
    size_t nlosses;
} smb_commit_batch;

/* Whoever moves chunks. Any callback but commit may be NULL. */
typedef struct smb_transport {
    void *ctx;
    /* Deliver a batch (see "When batches are sent"). Return 0, or a
     * negative errno if it could not be delivered (counted; the chunks stay
     * Complete in the SMB and may be scraped). */
    int (*commit)(void *ctx, const smb_commit_batch *batch);
    /* RegisterTraceWriter / UnregisterTraceWriter. */
    void (*register_writer)(void *ctx, uint16_t writer_id,
                            uint32_t target_buffer);
    void (*unregister_writer)(void *ctx, uint16_t writer_id);
} smb_transport;

typedef struct smb_arbiter_options {
    uint32_t page_layout;  /* SMB_LAYOUT_DIV1..DIV14; 0 = DIV1 */
    uint32_t batch_bytes;  /* send once pending chunks reach this; 0 = at
                              once */
    uint32_t batch_patches; /* 1: patches do not force a send (rule 1
                               above); 0 = they do */
    uint32_t reserved[5];  /* zero */
} smb_arbiter_options;

typedef struct smb_arbiter_stats {
    uint64_t chunks_acquired;
    uint64_t chunks_returned;
    uint64_t acquire_failures;   /* no free chunk found in a full lap */
    uint64_t stalls;             /* waits under a stall policy */
    uint64_t batches_sent;
    uint64_t batch_send_errors;  /* commit callback returned < 0 */
    uint64_t patches_sent;
    uint64_t writers_created;
    uint64_t null_writers;       /* created while the ID pool was empty or
                                    after shutdown */
} smb_arbiter_stats;

/* Arbiter over memory mapped by the caller: size a multiple of page_size,
 * page_size valid for the ABI, base 4096-aligned. transport is copied;
 * options may be NULL. NULL + errno (EINVAL, ENOMEM) on failure. */
SHMTRACE_API smb_arbiter *smb_arbiter_create(uint8_t *base, size_t size,
        uint32_t page_size, const smb_transport *transport,
        const smb_arbiter_options *options);

/* Arbiter over the SMB the service sent (SetupTracing): maps fd (dup'ed;
 * the caller still owns fd). NULL + errno on failure. */
SHMTRACE_API smb_arbiter *smb_arbiter_create_from_fd(int fd,
        uint32_t page_size, const smb_transport *transport,
        const smb_arbiter_options *options);

/* Arbiter over a new SMB of size bytes it creates itself (producer-provided
 * SMB: send smb_arbiter_fd() to the service). NULL + errno on failure. */
SHMTRACE_API smb_arbiter *smb_arbiter_create_shm(size_t size,
        uint32_t page_size, const smb_transport *transport,
        const smb_arbiter_options *options);

SHMTRACE_API void smb_arbiter_destroy(smb_arbiter *arb);

/* fd of an owned mapping (-1 for smb_arbiter_create). Borrowed. */
SHMTRACE_API int smb_arbiter_fd(const smb_arbiter *arb);
SHMTRACE_API uint8_t *smb_arbiter_base(const smb_arbiter *arb);
SHMTRACE_API size_t smb_arbiter_size(const smb_arbiter *arb);
SHMTRACE_API uint32_t smb_arbiter_page_size(const smb_arbiter *arb);

/* Send the pending batch now, with flush_request_id (0 = none). With
 * nothing pending and an id != 0 an empty batch is sent (for the ack).
 * Writers' current chunks are NOT returned (each writer flushes its own
 * with tw_writer_flush; the service scrapes the rest). Thread-safe.
 * Returns the commit callback's result, 0 if nothing was sent. */
SHMTRACE_API int smb_arbiter_flush(smb_arbiter *arb,
                                   uint64_t flush_request_id);

/* The connection is gone: from now on new writers are null writers (see
 * trace_writer.h) and existing writers never stall (nobody will free
 * chunks any more): with no free chunk they drop, whatever their policy.
 * Thread-safe. */
SHMTRACE_API void smb_arbiter_shutdown(smb_arbiter *arb);

SHMTRACE_API void smb_arbiter_get_stats(smb_arbiter *arb,
                                        smb_arbiter_stats *out);

#ifdef __cplusplus
}
#endif
#endif /* SHMTRACE_ARBITER_H */
