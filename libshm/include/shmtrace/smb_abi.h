/*
 * shmtrace/smb_abi.h - the Shared Memory Buffer (SMB) ABI: the one
 * definition of the bytes a producer and the service share.
 *
 * This header is a STABLE ABI, byte-compatible with Perfetto's
 * shared_memory_abi.h (spec smb-abi.md). Both sides include it; nothing in
 * shared memory is a size_t, bool or enum. All integers are little-endian.
 *
 *   SMB  = num_pages pages of page_size bytes (4096..65536, multiple of 4096)
 *   page = smb_page_header (8 bytes) + 1..14 equal chunks
 *
 *   page header                         chunk header
 *   off size field                      off size field
 *     0  4   header_bitmap (atomic)       0  4   chunk_id  (atomic)
 *     4  4   reserved (0)                 4  2   writer_id (atomic)
 *                                         6  2   packets   (atomic)
 *                                                count bits 0..9,
 *                                                flags bits 10..15
 *   header_bitmap:
 *     bit 31       reserved, 0
 *     bits 30..28  layout (SMB_LAYOUT_*); 0 = page not partitioned
 *     bits 27..0   2-bit state of chunk i at bits [2i+1:2i], i = 0..13
 *
 *   chunk_size = ((page_size - 8) / num_chunks) & ~3; chunk i starts at page
 *   offset 8 + i * chunk_size; its payload (fragments) 8 bytes later.
 *
 * State machine (each arrow one CAS on header_bitmap, acq_rel):
 *
 *   word 0 --partition (producer)--> layout<<28, all chunks Free
 *   Free --producer--> BeingWritten --producer--> Complete
 *        --service--> BeingRead --service--> Free
 *   (when every chunk of a page is Free again the word becomes 0)
 *
 * Zero-filled memory means "every page free and unpartitioned".
 *
 * The inline transition helpers below check their preconditions against the
 * live word and refuse illegal transitions (they return NULL / a negative
 * errno); a lost CAS race is retried a bounded number of times, so a hostile
 * peer flipping bits cannot make the other side spin forever.
 *
 * Threads: every helper is safe to call concurrently from any thread of
 * either process; the chunk *contents* belong to whoever holds the chunk
 * (BeingWritten: the one writer; BeingRead: the service).
 */
#ifndef SHMTRACE_SMB_ABI_H
#define SHMTRACE_SMB_ABI_H

#include <errno.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Geometry ------------------------------------------------------------ */
#define SMB_MIN_PAGE_SIZE           4096u
#define SMB_MAX_PAGE_SIZE           65536u
#define SMB_MAX_CHUNKS_PER_PAGE     14u
#define SMB_PAGE_HEADER_SIZE        8u
#define SMB_CHUNK_HEADER_SIZE       8u
#define SMB_CHUNK_ALIGNMENT         4u
#define SMB_MAX_CHUNK_SIZE          65536u
#define SMB_PACKET_HEADER_SIZE      4u        /* fragment size varint */
#define SMB_PACKET_SIZE_DROP_PACKET 0x0FFFFFFFu
#define SMB_MAX_MESSAGE_LENGTH      0x0FFFFFFFu
#define SMB_MAX_PACKETS_PER_CHUNK   1023u     /* 10-bit counter */
#define SMB_MAX_WRITER_ID           32767u
#define SMB_MAX_CHUNK_ID            0xFFFFFFFFu
/* Service-side sizing defaults and caps (smb-abi.md §1). */
#define SMB_DEFAULT_PAGE_SIZE       4096u
#define SMB_DEFAULT_SIZE            262144u
#define SMB_SERVICE_MAX_PAGE_SIZE   32768u
#define SMB_SERVICE_MAX_SIZE        33554432u

/* ---- Page header word ------------------------------------------------- */
#define SMB_LAYOUT_SHIFT            28u
#define SMB_LAYOUT_MASK             0x70000000u
#define SMB_ALL_CHUNKS_MASK         0x0FFFFFFFu
#define SMB_CHUNK_STATE_MASK        0x3u
#define SMB_ALL_CHUNKS_COMPLETE     0x0FFFFFFFu
#define SMB_ALL_CHUNKS_FREE         0u

/* Page layouts (value of bits 30..28). */
#define SMB_LAYOUT_NOT_PARTITIONED  0u
#define SMB_LAYOUT_DIV1             1u
#define SMB_LAYOUT_DIV2             2u
#define SMB_LAYOUT_DIV4             3u
#define SMB_LAYOUT_DIV7             4u
#define SMB_LAYOUT_DIV14            5u
#define SMB_LAYOUT_RESERVED1        6u
#define SMB_LAYOUT_RESERVED2        7u

/* Chunk states (2 bits each). */
#define SMB_CHUNK_FREE              0u
#define SMB_CHUNK_BEING_WRITTEN     1u
#define SMB_CHUNK_BEING_READ        2u
#define SMB_CHUNK_COMPLETE          3u

/* ---- Chunk header `packets` word -------------------------------------- */
#define SMB_PACKETS_COUNT_MASK      0x03FFu
#define SMB_PACKETS_FLAGS_SHIFT     10u
/* Flags (values in the 6-bit flags field). */
#define SMB_FLAG_FIRST_PACKET_CONTINUES_FROM_PREV 0x1u
#define SMB_FLAG_LAST_PACKET_CONTINUES_ON_NEXT    0x2u
#define SMB_FLAG_NEEDS_PATCHING                   0x4u
#define SMB_FLAGS_MASK                            0x7u

/* Bounded CAS retries (the spec's 64 attempts; no sleeping here). */
#define SMB_CAS_ATTEMPTS            64

typedef struct smb_page_header {
    _Atomic uint32_t header_bitmap;
    uint32_t reserved;
} smb_page_header;

typedef struct smb_chunk_header {
    _Atomic uint32_t chunk_id;
    _Atomic uint16_t writer_id;
    _Atomic uint16_t packets;      /* count | flags << 10 */
} smb_chunk_header;

_Static_assert(sizeof(_Atomic uint32_t) == 4, "atomic u32 is 4 bytes");
_Static_assert(sizeof(_Atomic uint16_t) == 2, "atomic u16 is 2 bytes");
_Static_assert(sizeof(smb_page_header) == SMB_PAGE_HEADER_SIZE,
               "page header is 8 bytes");
_Static_assert(offsetof(smb_page_header, header_bitmap) == 0, "bitmap @0");
_Static_assert(offsetof(smb_page_header, reserved) == 4, "reserved @4");
_Static_assert(sizeof(smb_chunk_header) == SMB_CHUNK_HEADER_SIZE,
               "chunk header is 8 bytes");
_Static_assert(_Alignof(smb_chunk_header) == 4, "chunk header align 4");
_Static_assert(offsetof(smb_chunk_header, chunk_id) == 0, "chunk_id @0");
_Static_assert(offsetof(smb_chunk_header, writer_id) == 4, "writer_id @4");
_Static_assert(offsetof(smb_chunk_header, packets) == 6, "packets @6");
_Static_assert(SMB_MAX_CHUNKS_PER_PAGE * 2 == 28, "14 chunks x 2 bits");
_Static_assert(SMB_ALL_CHUNKS_COMPLETE == SMB_ALL_CHUNKS_MASK,
               "Complete must be 3");

/* ---- Pure accessors ---------------------------------------------------- */

/* Chunks in a layout; 0 for "not partitioned" and the reserved layouts. */
static inline uint32_t smb_layout_num_chunks(uint32_t layout)
{
    static const uint8_t n[8] = {0, 1, 2, 4, 7, 14, 0, 0};
    return n[layout & 7u];
}

static inline uint32_t smb_word_layout(uint32_t word)
{
    return (word & SMB_LAYOUT_MASK) >> SMB_LAYOUT_SHIFT;
}

static inline uint32_t smb_word_chunk_state(uint32_t word, uint32_t idx)
{
    return (word >> (idx * 2u)) & SMB_CHUNK_STATE_MASK;
}

static inline uint32_t smb_word_set_chunk_state(uint32_t word, uint32_t idx,
                                                uint32_t state)
{
    return (word & ~(SMB_CHUNK_STATE_MASK << (idx * 2u))) |
           (state << (idx * 2u));
}

/* Chunk byte size (header included) for a layout; 0 if it has no chunks. */
static inline uint32_t smb_chunk_size(uint32_t page_size, uint32_t layout)
{
    uint32_t n = smb_layout_num_chunks(layout);
    if (n == 0)
        return 0;
    return ((page_size - SMB_PAGE_HEADER_SIZE) / n) & ~3u;
}

/* True when every chunk of the page's layout is Complete (never for 0). */
static inline int smb_word_all_complete(uint32_t word)
{
    uint32_t n = smb_layout_num_chunks(smb_word_layout(word));
    uint32_t mask;
    if (n == 0)
        return 0;
    mask = SMB_ALL_CHUNKS_MASK & ((1u << (2u * n)) - 1u);
    return (word & mask) == mask;
}

static inline uint32_t smb_packets_count(uint16_t packets)
{
    return packets & SMB_PACKETS_COUNT_MASK;
}

static inline uint32_t smb_packets_flags(uint16_t packets)
{
    return (uint32_t)packets >> SMB_PACKETS_FLAGS_SHIFT;
}

static inline uint16_t smb_make_packets(uint32_t count, uint32_t flags)
{
    return (uint16_t)((count & SMB_PACKETS_COUNT_MASK) |
                      (flags << SMB_PACKETS_FLAGS_SHIFT));
}

/* Valid page size for the ABI (not the service's stricter sizing). */
static inline int smb_page_size_valid(size_t page_size)
{
    return page_size >= SMB_MIN_PAGE_SIZE && page_size <= SMB_MAX_PAGE_SIZE &&
           page_size % SMB_MIN_PAGE_SIZE == 0;
}

static inline smb_page_header *smb_page_at(uint8_t *base, size_t page_size,
                                           size_t page)
{
    return (smb_page_header *)(void *)(base + page * page_size);
}

/* Chunk `idx` of a page under `layout`; caller checked idx < num_chunks. */
static inline smb_chunk_header *smb_chunk_at(smb_page_header *page,
                                             uint32_t page_size,
                                             uint32_t layout, uint32_t idx)
{
    return (smb_chunk_header *)(void *)((uint8_t *)page +
            SMB_PAGE_HEADER_SIZE + idx * smb_chunk_size(page_size, layout));
}

static inline uint8_t *smb_chunk_payload(smb_chunk_header *chunk)
{
    return (uint8_t *)chunk + SMB_CHUNK_HEADER_SIZE;
}

/* ---- State transitions -------------------------------------------------- */

/* Producer: CAS word 0 -> layout<<28. Returns 1 on success, 0 if the page is
 * already partitioned (or the layout is not 1..5). */
static inline int smb_try_partition_page(smb_page_header *page,
                                         uint32_t layout)
{
    uint32_t expected = 0;
    if (smb_layout_num_chunks(layout) == 0)
        return 0;
    return atomic_compare_exchange_strong_explicit(&page->header_bitmap,
            &expected, layout << SMB_LAYOUT_SHIFT, memory_order_acq_rel,
            memory_order_relaxed);
}

/* Producer: Free -> BeingWritten for chunk idx, then stamp the header
 * (writer_id, chunk_id relaxed; packets release). Returns the chunk, or NULL
 * if idx is out of the layout or the chunk is not Free (or the CAS kept
 * losing races). */
static inline smb_chunk_header *smb_try_acquire_chunk_for_writing(
        smb_page_header *page, uint32_t page_size, uint32_t idx,
        uint16_t writer_id, uint32_t chunk_id, uint16_t packets)
{
    uint32_t word = atomic_load_explicit(&page->header_bitmap,
                                         memory_order_acquire);
    for (int attempt = 0; attempt < SMB_CAS_ATTEMPTS; attempt++) {
        uint32_t layout = smb_word_layout(word);
        smb_chunk_header *c;
        if (idx >= smb_layout_num_chunks(layout) ||
            smb_word_chunk_state(word, idx) != SMB_CHUNK_FREE)
            return NULL;
        if (!atomic_compare_exchange_strong_explicit(&page->header_bitmap,
                &word, smb_word_set_chunk_state(word, idx,
                                                SMB_CHUNK_BEING_WRITTEN),
                memory_order_acq_rel, memory_order_acquire))
            continue;
        c = smb_chunk_at(page, page_size, layout, idx);
        atomic_store_explicit(&c->writer_id, writer_id, memory_order_relaxed);
        atomic_store_explicit(&c->chunk_id, chunk_id, memory_order_relaxed);
        atomic_store_explicit(&c->packets, packets, memory_order_release);
        return c;
    }
    return NULL;
}

/* Producer: BeingWritten -> Complete. 0, -EINVAL (not BeingWritten / bad
 * index) or -EBUSY (CAS kept losing). */
static inline int smb_release_chunk_as_complete(smb_page_header *page,
                                                uint32_t idx)
{
    uint32_t word = atomic_load_explicit(&page->header_bitmap,
                                         memory_order_relaxed);
    for (int attempt = 0; attempt < SMB_CAS_ATTEMPTS; attempt++) {
        if (idx >= smb_layout_num_chunks(smb_word_layout(word)) ||
            smb_word_chunk_state(word, idx) != SMB_CHUNK_BEING_WRITTEN)
            return -EINVAL;
        if (atomic_compare_exchange_strong_explicit(&page->header_bitmap,
                &word, smb_word_set_chunk_state(word, idx,
                                                SMB_CHUNK_COMPLETE),
                memory_order_acq_rel, memory_order_relaxed))
            return 0;
    }
    return -EBUSY;
}

/* Service: Complete -> BeingRead. Returns the chunk or NULL (index outside
 * the live layout, or not Complete). If chunk_size_out is not NULL it gets
 * the chunk size of the layout the CAS succeeded on (the pointer and size
 * always lie inside the page, whatever the producer does later). */
static inline smb_chunk_header *smb_try_acquire_chunk_for_reading(
        smb_page_header *page, uint32_t page_size, uint32_t idx,
        uint32_t *chunk_size_out)
{
    uint32_t word = atomic_load_explicit(&page->header_bitmap,
                                         memory_order_acquire);
    for (int attempt = 0; attempt < SMB_CAS_ATTEMPTS; attempt++) {
        uint32_t layout = smb_word_layout(word);
        if (idx >= smb_layout_num_chunks(layout) ||
            smb_word_chunk_state(word, idx) != SMB_CHUNK_COMPLETE)
            return NULL;
        if (atomic_compare_exchange_strong_explicit(&page->header_bitmap,
                &word, smb_word_set_chunk_state(word, idx,
                                                SMB_CHUNK_BEING_READ),
                memory_order_acq_rel, memory_order_acquire)) {
            if (chunk_size_out != NULL)
                *chunk_size_out = smb_chunk_size(page_size, layout);
            return smb_chunk_at(page, page_size, layout, idx);
        }
    }
    return NULL;
}

/* A released chunk's header is zeroed before its state says Free (the
 * release store of `packets` orders it after the reads of the chunk). */
static inline void smb__clear_chunk_header(smb_chunk_header *c)
{
    atomic_store_explicit(&c->writer_id, 0, memory_order_relaxed);
    atomic_store_explicit(&c->chunk_id, 0, memory_order_relaxed);
    atomic_store_explicit(&c->packets, 0, memory_order_release);
}

/* Shared tail of the two "-> Free" releases: zero the header, then CAS the
 * state from `from` to Free; an all-Free page becomes word 0. */
static inline int smb__release_chunk_to_free(smb_page_header *page,
                                             uint32_t page_size, uint32_t idx,
                                             uint32_t from)
{
    uint32_t word = atomic_load_explicit(&page->header_bitmap,
                                         memory_order_acquire);
    int zeroed = 0;
    for (int attempt = 0; attempt < SMB_CAS_ATTEMPTS; attempt++) {
        uint32_t layout = smb_word_layout(word), next;
        if (idx >= smb_layout_num_chunks(layout) ||
            smb_word_chunk_state(word, idx) != from)
            return -EINVAL;
        if (!zeroed) {
            smb__clear_chunk_header(smb_chunk_at(page, page_size, layout,
                                                 idx));
            zeroed = 1;
        }
        next = smb_word_set_chunk_state(word, idx, SMB_CHUNK_FREE);
        if ((next & SMB_ALL_CHUNKS_MASK) == SMB_ALL_CHUNKS_FREE)
            next = 0;
        if (atomic_compare_exchange_strong_explicit(&page->header_bitmap,
                &word, next, memory_order_acq_rel, memory_order_acquire))
            return 0;
    }
    return -EBUSY;
}

/* Service: BeingRead -> Free (header zeroed first). 0, -EINVAL, -EBUSY. */
static inline int smb_release_chunk_as_free(smb_page_header *page,
                                            uint32_t page_size, uint32_t idx)
{
    return smb__release_chunk_to_free(page, page_size, idx,
                                      SMB_CHUNK_BEING_READ);
}

/* Producer, emulation only: Complete -> Free. 0, -EINVAL, -EBUSY. */
static inline int smb_release_complete_chunk_as_free(smb_page_header *page,
                                                     uint32_t page_size,
                                                     uint32_t idx)
{
    return smb__release_chunk_to_free(page, page_size, idx,
                                      SMB_CHUNK_COMPLETE);
}

/* ---- Fragment size varints --------------------------------------------- */

/* 4-byte redundant varint of v (< 2^28) at p. */
static inline void smb_write_redundant_varint(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)((v & 0x7Fu) | 0x80u);
    p[1] = (uint8_t)(((v >> 7) & 0x7Fu) | 0x80u);
    p[2] = (uint8_t)(((v >> 14) & 0x7Fu) | 0x80u);
    p[3] = (uint8_t)((v >> 21) & 0x7Fu);
}

#ifdef __cplusplus
}
#endif
#endif /* SHMTRACE_SMB_ABI_H */
