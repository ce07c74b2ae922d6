/*
 * smb_reader.h - service-side SMB reader (private; part of service/libsvc.la).
 *
 * Moves chunks of ONE producer's SMB into libbuf trace buffers without
 * trusting a byte of the shared memory. The service calls it from its
 * CommitData handler (commit, then patches, in request order) and when it
 * scrapes (after a flush, on disable, on producer disconnect).
 *
 * Trust: base/size/page_size and producer_id/uid/pid are TRUSTED (the
 * service created or validated the mapping and knows the peer from the
 * socket). Everything read through base is UNTRUSTED and may change under
 * our feet: page words and chunk headers are read once into locals, the
 * chunk payload is copied into a private scratch buffer before libbuf sees
 * it, or (complete chunks of few large fragments) copied by libbuf into
 * the trace buffer and checked there against what it tokenized
 * (tb_copy_chunk_shared), and every index is bounded against the trusted
 * geometry.
 *
 * Commit (smb_reader_commit_chunk), per smb-abi.md §8:
 *   page < num_pages, chunk < num_chunks(live layout), state Complete
 *   (Complete -> BeingRead: smb_reader_acquire_for_reading); header
 *   writer_id in 1..32767; the caller's resolve callback picks the
 *   tb_buffer (or NULL: discarded); the payload (chunk_size - 8 bytes, or
 *   just its fragments when they end in the system page it starts in:
 *   smb_reader.c) is copied out and handed to
 *   tb_copy_chunk_untrusted(..., count, flags, complete=true, ...), or
 *   handed where it lies to tb_copy_chunk_shared when its fragments
 *   average 4 KiB or more; the chunk is then released BeingRead -> Free
 *   (the service frees chunks).
 * Emulation (smb_reader_commit_data): the chunk came inside the IPC
 *   message; only its length and header are checked, then libbuf.
 * Patches (smb_reader_apply_patches): writer_id 1..32767, 1..1024 patches,
 *   then tb_try_patch_chunk.
 * Scrape (smb_reader_scrape), per smb-abi.md §7: every page (that is not
 *   a hole of the fd given with smb_reader_set_fd), every chunk not Free:
 *   complete = (state == Complete); skip if !complete and count < 2;
 *   resolve by writer_id; copy with chunk_complete = complete.
 *   Chunk states are never changed by a scrape.
 *
 * Chunks move only when the producer names them (CommitData) or on a
 * scrape, which leaves states alone: never as soon as they turn Complete.
 * Tried 2026-12-04 for Perfetto's C SDK producer (refgen, whose 256 KiB
 * SMB overflows: its IPC thread sends a commit for every one or two
 * chunks, ~18000 a second): after each CommitData, take the Complete chunks
 * that continue their writer's sequence, and skip their commits when they
 * come. refgen then aborted within a second in its SharedMemoryABI::
 * ReleaseChunk state check (a chunk of its own was not BeingWritten), so
 * the SDK evidently relies on Perfetto's service freeing a chunk only
 * after its commit.
 *
 * Every malformed thing counts in smb_reader_stats (never a crash).
 * Threads: not thread-safe; one caller (the service's thread) per reader.
 * Ownership: the mapping is borrowed and must outlive the reader.
 */
#ifndef SHMTRACE_SMB_READER_H
#define SHMTRACE_SMB_READER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <shmtrace/arbiter.h>
#include <shmtrace/smb_abi.h>
#include <shmtrace/trace_buffer.h>

typedef struct smb_reader smb_reader;

/* Pick the destination buffer for a chunk: the service checks that
 * target_buffer exists, that the producer may write it, and that writer_id
 * (if registered) was registered for it. Return NULL to discard (the chunk
 * is still freed). For scrapes target_buffer is 0 (resolve by writer). */
typedef tb_buffer *(*smb_resolve_fn)(void *ctx, uint32_t target_buffer,
                                     uint16_t writer_id);

typedef struct smb_reader_stats {
    uint64_t chunks_moved;       /* copied into a buffer */
    uint64_t chunks_discarded;   /* resolve returned NULL */
    uint64_t chunks_scraped;
    uint64_t bad_requests;       /* page/chunk index out of range or page
                                    without chunks (skipped, as Perfetto) */
    uint64_t not_complete;       /* commit of a chunk not Complete */
    uint64_t abi_violations;     /* malformed headers / page words */
    uint64_t patches_discarded;  /* patch groups refused before libbuf */
    uint64_t patches_failed;     /* tb_try_patch_chunk said no */
} smb_reader_stats;

/* NULL + errno (EINVAL: page_size not ABI-valid, size not a multiple of it,
 * base NULL; ENOMEM). */
smb_reader *smb_reader_create(uint8_t *base, size_t size, uint32_t page_size,
                              uint16_t producer_id, uint32_t uid,
                              int32_t pid);
void smb_reader_destroy(smb_reader *r);

/* Move one chunk. 0 moved; -ERANGE bad index; -EAGAIN not Complete;
 * -EPROTO malformed header (chunk freed, counted); -ENOENT resolve said
 * NULL (chunk freed). */
int smb_reader_commit_chunk(smb_reader *r, uint32_t page, uint32_t chunk,
                            uint32_t target_buffer, smb_resolve_fn resolve,
                            void *ctx);

/* The service's two transitions of a committed chunk, as
 * smb_reader_commit_chunk makes them (exported so that a benchmark standing
 * in for the service makes the same ones). `word` is the page word the
 * caller read (acquire). Complete -> BeingRead returns the chunk and its
 * size, or NULL if chunk `idx` is not Complete; BeingRead -> Free zeroes
 * the header first and returns 0, or -EINVAL / -EBUSY if the chunk is no
 * longer BeingRead. On a one-chunk page (Div1) whose word is exactly
 * {Div1, chunk 0 Complete} / {Div1, chunk 0 BeingRead} each is a plain
 * store, not the ABI helpers' CAS (smb_reader.c says why that is the same
 * transition); any other word takes the CAS. */
smb_chunk_header *smb_reader_acquire_for_reading(smb_page_header *ph,
                                                 uint32_t page_size,
                                                 uint32_t idx, uint32_t word,
                                                 uint32_t *chunk_size);
int smb_reader_release_as_free(smb_page_header *ph, uint32_t page_size,
                               uint32_t idx);

/* Emulation mode (ChunksToMove.data: the chunk, header included, carried
 * inside the IPC message instead of shared memory). len must be 8..65535
 * (else -EINVAL, counted as bad_requests); complete = !chunk_incomplete.
 * Returns as smb_reader_commit_chunk. No SMB state is touched. */
int smb_reader_commit_data(smb_reader *r, const uint8_t *data, size_t len,
                           bool complete, uint32_t target_buffer,
                           smb_resolve_fn resolve, void *ctx);

/* Apply one ChunkToPatch. 0 applied; -EPROTO refused (counted);
 * -ENOENT resolve said NULL; -ESRCH libbuf could not apply. */
int smb_reader_apply_patches(smb_reader *r, const smb_chunk_patches *group,
                             smb_resolve_fn resolve, void *ctx);

/* A whole CommitDataRequest: chunks, then patches. Returns the number of
 * chunks moved. */
size_t smb_reader_commit_batch(smb_reader *r, const smb_commit_batch *batch,
                               smb_resolve_fn resolve, void *ctx);

/* The object behind the mapping (the service's own memfd; kept open by
 * the caller while the reader lives): scrapes then skip its holes, pages
 * never written (smb_reader.c). Without it (-1, the default) a scrape
 * reads every page's header. */
void smb_reader_set_fd(smb_reader *r, int fd);

/* Scrape every written-but-uncommitted chunk. Returns chunks copied. */
size_t smb_reader_scrape(smb_reader *r, smb_resolve_fn resolve, void *ctx);

const smb_reader_stats *smb_reader_get_stats(const smb_reader *r);

#endif /* SHMTRACE_SMB_READER_H */
