/*
 * arbiter_int.h - what the TraceWriter needs from the arbiter (private).
 *
 * The writer calls these only at chunk boundaries, never per packet. Every
 * function takes the arbiter mutex itself (once per call); none may be
 * called from inside a transport callback. smb__arbiter_exchange is the
 * one primitive: return chunks and take new ones under one lock, several
 * at a time (a large packet's run of chunks); the other two are its
 * one-chunk cases.
 */
#ifndef SHMTRACE_ARBITER_INT_H
#define SHMTRACE_ARBITER_INT_H

#include <stdbool.h>
#include <stdint.h>

#include <shmtrace/arbiter.h>
#include <shmtrace/smb_abi.h>

/* Where a chunk held by a writer lives. */
typedef struct smb__chunk_loc {
    smb_chunk_header *hdr;     /* NULL: no chunk */
    uint8_t *payload;          /* hdr + 8 */
    uint32_t payload_size;     /* chunk size - 8 */
    uint32_t page;
    uint32_t idx;
} smb__chunk_loc;

/* One lap over the pages for a Free chunk (partitioning empty pages with
 * the arbiter's layout); if none, send the pending batch and try one more
 * lap. The header is stamped {writer_id, chunk_id, packets}. Returns false
 * if no chunk is free. Never sleeps (the writer applies its policy). */
bool smb__arbiter_acquire_chunk(smb_arbiter *arb, uint16_t writer_id,
                                uint32_t chunk_id, uint16_t packets,
                                smb__chunk_loc *out);

/* Return ret[0..nret) (each as smb__arbiter_return_chunk; hdr NULL
 * entries skipped) with the patch groups, send the batch when due, then
 * take up to `want` chunks (0..any) like smb__arbiter_acquire_chunk into
 * out[], stamped with ids chunk_id, chunk_id + 1, ... in out[] order.
 * Returns how many were taken: fewer than `want` when the SMB has fewer
 * free, or than 1/4 of the SMB's chunks; 0 after a second fruitless lap.
 * With want > 1 every chunk taken has the arbiter's own chunk size
 * (smb__arbiter_chunk_payload). Never sleeps. */
size_t smb__arbiter_exchange(smb_arbiter *arb, const smb__chunk_loc *ret,
                             size_t nret, uint32_t target_buffer,
                             const smb_chunk_patches *groups, size_t ngroups,
                             uint16_t writer_id, uint32_t chunk_id,
                             uint16_t packets, size_t want,
                             smb__chunk_loc *out);

/* Payload bytes of a chunk of the arbiter's layout (chunk size - 8). */
uint32_t smb__arbiter_chunk_payload(const smb_arbiter *arb);

/* Mark the chunk Complete and queue it for target_buffer, together with
 * patch groups (may be NULL/0); send the batch when due. loc may be NULL
 * to queue only patches. */
void smb__arbiter_return_chunk(smb_arbiter *arb, const smb__chunk_loc *loc,
                               uint32_t target_buffer,
                               const smb_chunk_patches *groups,
                               size_t ngroups);

/* WriterID pool, next-fit over 1..32767; 0 when empty or shut down. The
 * transport's register/unregister callbacks run inside. */
uint16_t smb__arbiter_alloc_writer(smb_arbiter *arb, uint32_t target_buffer);
void smb__arbiter_free_writer(smb_arbiter *arb, uint16_t writer_id);

void smb__arbiter_count_stall(smb_arbiter *arb);

/* A writer lost `packets` packets (`bytes` bytes) that never reached the
 * SMB: queued as a delta for the next batch (smb_commit_batch.losses). */
void smb__arbiter_note_loss(smb_arbiter *arb, uint16_t writer_id,
                            uint32_t target_buffer, uint64_t packets,
                            uint64_t bytes);

/* smb_arbiter_shutdown was called: writers stop stalling (nobody will free
 * chunks any more) and drop instead. */
bool smb__arbiter_is_shut_down(smb_arbiter *arb);

#endif /* SHMTRACE_ARBITER_INT_H */
