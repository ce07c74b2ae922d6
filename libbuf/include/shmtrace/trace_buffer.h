/*
 * shmtrace/trace_buffer.h - libbuf's public API: TraceBufferV2.
 *
 * The service-side trace buffer. Producers' chunks (untrusted bytes copied
 * out of shared memory) are appended as records to one large byte array used
 * as a ring (RING_BUFFER) or filled once (DISCARD). Packets are read back
 * whole, reassembled across chunks, in per-sequence order, with every loss
 * reported through previous_packet_dropped (a DataLossReason bitmask) and the
 * stats counters (Perfetto's TraceStats.BufferStats).
 *
 * This header is a contract: the names and types below are fixed.
 *
 * Threads: a tb_buffer is not thread-safe; the owner serialises all calls.
 * Ownership: tb_create / tb_clone_readonly allocate; tb_destroy frees
 * (tb_destroy(NULL) is a no-op). Packets returned by tb_read_next_packet
 * point into the buffer: the slices array stays valid until the next call
 * on it; the bytes the slices point to until the next write
 * (tb_copy_chunk_untrusted, tb_try_patch_chunk) or tb_destroy, since reads
 * never move or change packet bytes (so a reader may gather the slices of
 * many packets and write them out in one go); with a write fence
 * (tb_set_write_fence) the owner learns which bytes a write is about to
 * change and may keep slices past writes that do not touch them.
 */
#ifndef SHMTRACE_TRACE_BUFFER_H
#define SHMTRACE_TRACE_BUFFER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <shmtrace/api.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Chunk flags, as in the SMB chunk header (smb-abi.md). */
#define TB_CHUNK_FIRST_PACKET_CONTINUES_FROM_PREV 0x01u
#define TB_CHUNK_LAST_PACKET_CONTINUES_ON_NEXT    0x02u
#define TB_CHUNK_NEEDS_PATCHING                   0x04u
/* Fragment size a writer stamps when it abandons a packet. */
#define TB_PACKET_SIZE_DROP_PACKET 0x0FFFFFFFu

enum {                 /* bits of previous_packet_dropped; 0 = no loss */
    TB_LOSS_PRESENT = 1, TB_LOSS_READ_GAP = 2, TB_LOSS_CHUNK_CORRUPTED = 4,
    TB_LOSS_ORPHAN_CONTINUATION = 8, TB_LOSS_REASSEMBLY_GAP = 16,
    TB_LOSS_REASSEMBLY_BROKEN_CHAIN = 32, TB_LOSS_OVERWRITE = 64,
    TB_LOSS_WRITER_ABORT = 128, TB_LOSS_SMB_FULL = 256,
};

typedef enum { TB_RING_BUFFER = 0, TB_DISCARD = 1 } tb_fill_policy;

typedef struct tb_buffer tb_buffer;

typedef struct {
    uint16_t producer_id;
    uint16_t writer_id;
    uint32_t uid;
    int32_t pid;
} tb_seq_props;

typedef struct {
    const uint8_t *data;
    size_t size;
} tb_slice;

/* Zero-copy packet: see the top of this file for how long it is valid. */
typedef struct {
    const tb_slice *slices;
    size_t nslices;
    size_t size;
} tb_packet;

/* Out-of-band patch; offset from the first byte of the chunk payload. */
typedef struct {
    uint32_t offset;
    uint8_t data[4];
} tb_patch;

/* Meanings = Perfetto TraceStats.BufferStats (spec trace-buffer.md §10),
 * except the fields after trace_writer_packet_loss, shmtrace's own
 * (appended; earlier fields never move):
 *   hist_chunks_untracked  histogram samples (one per chunk, as for
 *                          tb_get_writer_stats) in the overflow entry
 *                          (TB_HIST_MAX_WRITERS): of writers that have no
 *                          entry of their own, and of the entries folded
 *                          into it; its counts add up to this.
 *                          0 in a clone (its histograms start empty).
 *   seq_cap_chunks         chunks refused because they would have made a
 *                          new sequence for a uid that already has
 *                          TB_MAX_SEQS_PER_UID(buffer_size) of them (see
 *                          there); also counted in chunks_discarded.
 *   seq_cap_packets        the packets (first fragments, as counted by
 *                          tb_get_seq_loss) those chunks held; each is
 *                          also in its writer's lost_packets[DISCARD]. */
typedef struct {
    uint64_t buffer_size, bytes_written, bytes_overwritten, bytes_read,
             padding_bytes_written, padding_bytes_cleared,
             chunks_written, chunks_rewritten, chunks_relocated,
             chunks_overwritten, chunks_discarded, chunks_read,
             chunks_committed_out_of_order, write_wrap_count,
             patches_succeeded, patches_failed,
             readaheads_succeeded, readaheads_failed,
             abi_violations, trace_writer_packet_loss;
    uint64_t hist_chunks_untracked;
    uint64_t seq_cap_chunks, seq_cap_packets;
} tb_stats;

/* Sequences per uid, an addition to the contract. Each (producer, writer)
 * with a record in the buffer, or recently emptied, has a sequence: about
 * 200 bytes of heap. Of the empty ones GC keeps 1024 (once more than 1152
 * are empty), shared among their uids: the uid keeping the most loses
 * first, each uid its oldest; so one uid's churn cannot push another's
 * out. A writer whose empty sequence goes loses the last ChunkID it had
 * consumed (a later gap in its ChunkIDs is not flagged; a chunk consumed
 * already, committed again, is read again) and any loss flag not yet
 * reported. Producers come and go, and a uid that connects over and
 * over, one tiny chunk per writer id, could make one sequence per 16
 * bytes of ring (17x the ring on the heap). So a buffer keeps at most
 * TB_MAX_SEQS_PER_UID(buffer_size) sequences per uid (the uid the owner
 * passes to tb_copy_chunk_untrusted, trusted): a chunk that would make one
 * more for that uid is not stored (seq_cap_chunks, seq_cap_packets; its
 * packets count as lost to DISCARD for its writer). Sequences that exist
 * keep taking chunks, and other uids are never refused for it. When the
 * writer later gets a sequence (once that uid's sequences have been
 * overwritten or read and garbage-collected), its first packet read
 * carries TB_LOSS_PRESENT | TB_LOSS_READ_GAP (its earlier chunks never
 * entered the buffer); for a writer counted in the loss aggregate
 * (TB_LOSS_MAX_WRITERS), or whose entry was folded into it, every later
 * new sequence of that uid whose writer is in the aggregate or new to
 * the loss table carries it (tb_loss.c). The bound is 16384 sequences (room
 * for 8000 writers of one producer through a reconnection) or one per 256
 * bytes of ring, whichever is more: at most about 2.2 MiB of heap per uid
 * for rings up to 4 MiB, about 0.5-0.7 times the ring above (libbuf's
 * tb_seq.c). */
#define TB_MAX_SEQS_PER_UID(ring_bytes) \
    ((ring_bytes) / 256u > 16384u ? (uint32_t)((ring_bytes) / 256u) : 16384u)

/* size rounded up to 4096; NULL + errno on 0, > 4 GiB, or no memory. */
SHMTRACE_API tb_buffer *tb_create(size_t size, tb_fill_policy policy);
SHMTRACE_API void tb_destroy(tb_buffer *);

/* Ring reuse, for a process that creates buffers over and over (a tracing
 * service: one per session). With a limit > 0, tb_destroy keeps released
 * rings (up to `bytes` in all, at most 4; marked MADV_FREE so the kernel
 * may still reclaim them) and the next tb_create / tb_clone_readonly of the
 * same rounded size takes one already faulted in, instead of paying a
 * page fault and the kernel's zeroing per page again. Default 0 (off);
 * lowering the limit unmaps what no longer fits. Process-wide, thread-safe. */
SHMTRACE_API void tb_set_ring_cache_limit(size_t bytes);

/* src = chunk payload (no SMB header). Untrusted: every byte is checked. */
SHMTRACE_API void tb_copy_chunk_untrusted(tb_buffer *, uint16_t producer_id,
        uint32_t uid, int32_t pid, uint16_t writer_id, uint32_t chunk_id,
        uint16_t num_fragments, uint8_t chunk_flags, bool chunk_complete,
        const uint8_t *src, size_t size);

/* The same for a payload still in memory that its writer may change during
 * the call (a producer's shared memory buffer), so that the caller need not
 * copy it out first: the bytes are copied into the buffer once and checked
 * again there. If they no longer tokenize as they did in the source (the
 * writer changed them meanwhile), the chunk is refused as an ABI violation:
 * its packets count as lost and its writer's next packet read is flagged;
 * nothing of it is read. Every read of src stays within size bytes. Costs a
 * second tokenization of the stored bytes, saves the caller's copy. */
SHMTRACE_API void tb_copy_chunk_shared(tb_buffer *, uint16_t producer_id,
        uint32_t uid, int32_t pid, uint16_t writer_id, uint32_t chunk_id,
        uint16_t num_fragments, uint8_t chunk_flags, bool chunk_complete,
        const uint8_t *src, size_t size);

/* Applies 4-byte patches at offsets from the chunk's payload start; false
 * (patches_failed counted) if the chunk is not in the buffer or a patch
 * does not fit in its valid bytes. A patch wholly past the valid bytes
 * changes nothing readable and is otherwise ignored (the chunk still
 * becomes readable when no other patches are pending); one across their
 * end makes the chunk's last packet lost (cause PATCH_FAILED). */
SHMTRACE_API bool tb_try_patch_chunk(tb_buffer *, uint16_t producer_id,
        uint16_t writer_id, uint32_t chunk_id, const tb_patch *patches,
        size_t npatches, bool other_patches_pending);

SHMTRACE_API void tb_begin_read(tb_buffer *);
/* props and previous_packet_dropped may be NULL. */
SHMTRACE_API bool tb_read_next_packet(tb_buffer *, tb_packet *out,
        tb_seq_props *props, uint32_t *previous_packet_dropped);

/* Reset read state; writes into a clone are refused (and counted). */
SHMTRACE_API tb_buffer *tb_clone_readonly(const tb_buffer *);

/* Valid until tb_destroy. */
SHMTRACE_API const tb_stats *tb_get_stats(const tb_buffer *);
SHMTRACE_API size_t tb_size(const tb_buffer *);
SHMTRACE_API size_t tb_used_size(const tb_buffer *);
SHMTRACE_API tb_fill_policy tb_policy(const tb_buffer *);

/* Per-writer chunk-usage histogram (TraceStats.WriterStats, spec
 * trace-buffer.md §10), an addition to the contract. Every copy that passes
 * the size check adds the chunk's valid fragment bytes F to its writer's
 * entry: bucket i < 10 counts TB_HIST_THRESHOLDS[i-1] < F <= [i], bucket 10
 * the values above 16384. No sample is ever dropped; clones start empty.
 *
 * Bound: producers come and go (each connection a new producer id, up to
 * 32767 writers each), so a buffer holds at most TB_HIST_MAX_WRITERS
 * entries (about 1.5 MB of 184-byte entries): up to
 * TB_HIST_MAX_WRITERS - 1 writers' own entries and one overflow entry for
 * every writer without one, made when the first such writer comes, always
 * the last of the array, and told apart by producer_id == 0 &&
 * writer_id == 0 (no writer has that key: the copy refuses it). While
 * there is room every new writer gets an entry. Then the own entries are
 * shared among uids (the uid passed with the chunk), max-min: a new
 * writer whose uid holds at least two fewer than the uid holding the most
 * takes one of that uid's (preferably of a writer that has no sequence
 * left), after adding its counts to the overflow entry; any
 * other new writer goes into the overflow entry. So one uid making
 * writers without end cannot take them all: uids whose writers keep
 * coming end up with equal shares (one apart), a uid with fewer writers
 * than its share keeps one for each, and with a single uid nothing is
 * ever folded. An entry counts its writer's samples since it got it (a
 * folded writer seen again is a new one). The overflow entry's counts
 * and sums are those of the writers it holds and the entries folded into
 * it together, so the entries still add up to every sample;
 * tb_stats.hist_chunks_untracked is its total count. */
#define TB_HIST_MAX_WRITERS 8192
#define TB_HIST_BUCKETS 11
#define TB_HIST_THRESHOLDS {8, 32, 128, 512, 1024, 2048, 4096, 8192, \
                            12288, 16384}
typedef struct {
    uint16_t producer_id;
    uint16_t writer_id;
    uint64_t count[TB_HIST_BUCKETS];
    uint64_t sum[TB_HIST_BUCKETS];
} tb_writer_stats;

/* Array of *n <= TB_HIST_MAX_WRITERS entries in the order they were made
 * (a folded entry's place taken by the writer it was folded for; the
 * overflow entry, if any, last), owned by the buffer, valid until the
 * next tb_copy_chunk_untrusted or tb_destroy. NULL with *n = 0 if none. */
SHMTRACE_API const tb_writer_stats *tb_get_writer_stats(const tb_buffer *,
                                                        size_t *n);

/* Exact per-sequence loss accounting, an addition to the contract.
 *
 * The unit is the packet, counted once at its first fragment (a whole
 * non-empty fragment, or the fragment that begins a fragmented packet):
 * continuation fragments never count, so a packet spread over several
 * chunks counts once wherever it is lost. For every (producer, writer) the
 * buffer has seen, at any time:
 *
 *   packets_offered = packets_read + packets_pending + sum(lost_packets[])
 *
 * where packets_offered counts the first fragments of every chunk handed to
 * tb_copy_chunk_untrusted (accepted or refused; fragments already delivered
 * from a scraped copy of the same chunk are not offered twice), and
 * packets_pending those still unread in the buffer (stalled on a missing
 * continuation, a patch or an incomplete chunk). Causes:
 *   OVERWRITE      evicted unread by a wrap (RING_BUFFER)
 *   DISCARD        refused: DISCARD buffer full, stale ChunkID, clone,
 *                  a new sequence past its uid's TB_MAX_SEQS_PER_UID
 *   ABI_VIOLATION  refused or cut by a malformed chunk (for fragments that
 *                  do not tokenize, each declared fragment counts one)
 *   CORRUPTED      fragments that no longer tokenize when read
 *   PATCH_FAILED   evicted while waiting for a patch that had failed
 *   REASSEMBLY     a fragmented packet that could not be put together
 *                  (ChunkID gap, broken chain)
 * lost_bytes counts the chunk payload bytes (fragment headers included)
 * that held the lost packets: the refused payload, the unread bytes of an
 * evicted record, the fragments of a failed reassembly. Counts are kept
 * for the buffer's life (not garbage-collected with empty sequences), in
 * entries in the order they were made (a folded entry's place taken by
 * the writer it was folded for, below); a clone copies them without the
 * packets already read (packets_read = 0, packets_offered less what was
 * read). The hot paths pay O(1) per chunk (counts known from the
 * copy-time tokenization); refusals and slow-path walks tokenize what
 * they drop.
 *
 * Bound, as for the histograms (producers come and go): at most
 * TB_LOSS_MAX_WRITERS entries (about 1 MB of 128-byte entries), up to
 * TB_LOSS_MAX_WRITERS - 1 writers' own and one aggregate entry for every
 * writer without one, made when the first such writer comes, always the
 * last of the array, told apart by producer_id == 0 && writer_id == 0 (no
 * writer has that key). Once the own entries are all taken they are
 * shared among uids as the histograms' are (see there): a new writer of a
 * uid holding at least two fewer than the uid holding the most takes one
 * of that uid's, folded into the aggregate first (its counts added, and
 * what its writer still has pending or loses later counted there too).
 * So every uid keeps about an equal share of the entries, whatever
 * another uid does, and with a single uid nothing is ever folded. An
 * entry counts its writer from when it got it. The aggregate's counts
 * are the sums of its writers' and of the entries folded into it, so the
 * identity above holds for it as a whole (not per writer) and the
 * entries still add up to every packet offered. */
#define TB_LOSS_MAX_WRITERS 8192
typedef enum {
    TB_CAUSE_OVERWRITE = 0, TB_CAUSE_DISCARD, TB_CAUSE_ABI_VIOLATION,
    TB_CAUSE_CORRUPTED, TB_CAUSE_PATCH_FAILED, TB_CAUSE_REASSEMBLY,
    TB_NUM_CAUSES
} tb_loss_cause;

typedef struct {
    uint16_t producer_id;
    uint16_t writer_id;
    uint64_t packets_offered;
    uint64_t packets_read;
    uint64_t packets_pending;   /* computed by tb_get_seq_loss */
    uint64_t lost_packets[TB_NUM_CAUSES];
    uint64_t lost_bytes[TB_NUM_CAUSES];
} tb_seq_loss;

/* Array of *n <= TB_LOSS_MAX_WRITERS entries (the aggregate, if any,
 * last) owned by the buffer, valid until the next call that
 * writes into it or tb_destroy; NULL with *n = 0 if none. An entry's
 * place may hold another writer after a later call (folded: see above).
 * Computing packets_pending costs O(records in the buffer). */
SHMTRACE_API const tb_seq_loss *tb_get_seq_loss(const tb_buffer *,
                                                size_t *n);
/* Stable lower-case name of a cause ("overwrite", ...); "?" if unknown. */
SHMTRACE_API const char *tb_loss_cause_name(int cause);

/* ProtoVM hook: each whole valid packet a wrap evicts unread, in sequence
 * order. The callback must not call into the buffer. */
typedef void (*tb_evict_fn)(void *ctx, const tb_packet *,
                            const tb_seq_props *);
SHMTRACE_API void tb_set_evict_callback(tb_buffer *, tb_evict_fn, void *ctx);

/* Write fence: called before the buffer stores into [p, p + n) of its
 * memory where the bytes of packets already returned may lie (eviction
 * and the copy of a new record, the copy of a re-committed chunk, a
 * patch), never for reads and never for record headers alone. An owner
 * that hands slices to another thread (an asynchronous writev of the
 * slices of many packets) waits there until the slices overlapping
 * [p, p + n) are written out, and may then keep slices across writes.
 * Called on the owner's thread; it must not call into the buffer.
 * fn NULL removes it. */
typedef void (*tb_write_fence_fn)(void *ctx, const uint8_t *p, size_t n);
SHMTRACE_API void tb_set_write_fence(tb_buffer *, tb_write_fence_fn,
                                     void *ctx);

/* Write probe, the fence's question without the wait: would the fence wait
 * now for [p, p + n)? Asked before a drained ring starts writing again at
 * its start (tb_rewind.c), about the stretch the writer then covers before
 * the next restart is due (its first rewind_at bytes); a yes puts the
 * restart off until after the next read (the writer goes on where it is),
 * so that the writer does not wait there for slices still in flight.
 * Called on the owner's thread; it must not call into the buffer and must
 * not block. fn NULL removes it (the restart then never waits for it). */
typedef bool (*tb_write_probe_fn)(void *ctx, const uint8_t *p, size_t n);
SHMTRACE_API void tb_set_write_probe(tb_buffer *, tb_write_probe_fn,
                                     void *ctx);

#ifdef __cplusplus
}
#endif
#endif /* SHMTRACE_TRACE_BUFFER_H */
