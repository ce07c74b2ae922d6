/*
 * smb_reader.c - service-side SMB reader (see smb_reader.h for the rules).
 *
 * Design: the reader keeps only trusted geometry plus a 64 KiB scratch
 * buffer (malloc'ed, not zeroed: zeroing it cost each new producer's
 * setup 16 page first-touches). For each chunk it (1) bounds the indices
 * against the trusted page count and the layout read ONCE from the live
 * page word, (2) wins the chunk (Complete -> BeingRead: a store on a
 * one-chunk page, else the ABI's CAS; smb_reader_acquire_for_reading),
 * (3) reads the header fields once into locals, (4) copies the payload
 * into scratch so that libbuf tokenizes bytes the producer can no longer
 * change (of a complete chunk only its fragments when they end in the
 * first system page), or, for a complete chunk of few large fragments,
 * has libbuf copy it into the trace buffer and check that copy
 * (tb_copy_chunk_shared; copy_into says which and why), (5) frees the
 * chunk (BeingRead -> Free, smb_reader_release_as_free).
 * A scrape does (1), (3), (4) without touching states.
 *
 * A scrape visits only the pages whose header lies in data of the object
 * behind the mapping (smb_reader_set_fd; lseek SEEK_DATA / SEEK_HOLE): a
 * page the producer never wrote is a hole and reads as zeros, nothing to
 * scrape, and reading it through the mapping would make the kernel
 * allocate it. So a producer that used a few pages of its SMB does not get
 * the rest allocated by the service's first flush (the whole SMB with
 * 4 KiB pages, a header page per page with larger ones), nor cost the
 * service a page fault per page at each scrape. Holes come and go only by
 * the producer's own writes (or a hole punch, which zeroes): what it
 * writes after the lseek is as good as written after the scrape.
 *
 * What counts as an ABI violation here (the fragment-level checks are
 * libbuf's): reserved bit 31 of a page word set, state bits set for chunk
 * indices beyond the layout, a reserved layout (6/7) with chunk bits, a
 * header whose writer_id is outside 1..32767 or whose flags use bits 3..5.
 */
#include "config.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <shmtrace/smb_abi.h>

#include "smb_reader.h"

_Static_assert(sizeof(smb_patch) == sizeof(tb_patch), "patch layouts");
_Static_assert(offsetof(smb_patch, data) == offsetof(tb_patch, data),
               "patch layouts");

#define MAX_PATCHES_PER_GROUP 1024u
#define SMB_READER_SYS_PAGE 4096u   /* the smallest page the kernel maps */
#define SMB_READER_PROBE_MIN 256u   /* a first copy at least this long */
/* A complete chunk whose fragments average at least this many bytes goes
 * to libbuf straight from the shared memory; others through scratch
 * (copy_into says why). */
#define SMB_READER_SHARED_FRAG 4096u

struct smb_reader {
    uint8_t *base;            /* borrowed mapping (untrusted contents) */
    size_t num_pages;
    uint32_t page_size;
    uint16_t producer_id;     /* trusted identity of the peer */
    uint32_t uid;
    int32_t pid;
    int fd;                   /* the object behind base, or -1 */
    smb_reader_stats stats;
    uint8_t *scratch;         /* SMB_MAX_CHUNK_SIZE bytes: the private
                                 copy of one payload (not zeroed: only
                                 the bytes just copied are ever read) */
};

smb_reader *smb_reader_create(uint8_t *base, size_t size, uint32_t page_size,
                              uint16_t producer_id, uint32_t uid, int32_t pid)
{
    smb_reader *r;
    if (base == NULL || !smb_page_size_valid(page_size) || size == 0 ||
        size % page_size != 0) {
        errno = EINVAL;
        return NULL;
    }
    r = calloc(1, sizeof(*r));
    if (r == NULL)
        return NULL;
    r->scratch = malloc(SMB_MAX_CHUNK_SIZE);
    if (r->scratch == NULL) {
        free(r);
        return NULL;
    }
    r->base = base;
    r->num_pages = size / page_size;
    r->page_size = page_size;
    r->producer_id = producer_id;
    r->uid = uid;
    r->pid = pid;
    r->fd = -1;
    return r;
}

void smb_reader_destroy(smb_reader *r)
{
    if (r != NULL)
        free(r->scratch);
    free(r);
}

const smb_reader_stats *smb_reader_get_stats(const smb_reader *r)
{
    return &r->stats;
}

/* Checks on a page word that do not depend on one chunk: 0 or -EPROTO. */
static int check_word(uint32_t word)
{
    uint32_t n = smb_layout_num_chunks(smb_word_layout(word));
    uint32_t used = n == 0 ? 0 : (SMB_ALL_CHUNKS_MASK &
                                  ((1u << (2u * n)) - 1u));
    if (word & 0x80000000u)
        return -EPROTO;
    if ((word & SMB_ALL_CHUNKS_MASK & ~used) != 0)
        return -EPROTO;
    return 0;
}

/* Header fields read once; 0 or -EPROTO. */
typedef struct {
    uint32_t chunk_id;
    uint16_t writer_id;
    uint16_t count;
    uint8_t flags;
} header_copy;

static int read_header(smb_chunk_header *c, memory_order packets_order,
                       header_copy *out)
{
    uint16_t packets = atomic_load_explicit(&c->packets, packets_order);
    out->writer_id = atomic_load_explicit(&c->writer_id,
                                          memory_order_relaxed);
    out->chunk_id = atomic_load_explicit(&c->chunk_id, memory_order_relaxed);
    out->count = (uint16_t)smb_packets_count(packets);
    out->flags = (uint8_t)smb_packets_flags(packets);
    if (out->writer_id == 0 || out->writer_id > SMB_MAX_WRITER_ID)
        return -EPROTO;
    if (out->flags & ~SMB_FLAGS_MASK)
        return -EPROTO;
    return 0;
}

/* Where the reader copies chunk payload out of the producer's shared
 * memory into private scratch: scraped chunks, and complete chunks of
 * many small fragments (complete chunks of few, large ones go to libbuf
 * straight from the shared memory, which checks its own copy: copy_into).
 * The copy races by design, in two ways no reader can avoid: a scrape
 * (smb-abi.md section 7) copies the
 * whole payload of a chunk whose last fragment the writer may still be
 * writing (the acquire load of `packets` orders the count-1 finished
 * fragments that libbuf will use; the bytes after them are copied but
 * never interpreted), and a hostile producer may rewrite any byte at any
 * time. The other side is plain stores of another process, so no C11
 * atomic on our side alone would make it race-free; libbuf only ever sees
 * the stable scratch copy. Under ThreadSanitizer, tests/tsan.supp
 * suppresses races in exactly this function (noinline keeps the frame).
 * Tried (2026-12-05): copying in 2 KiB pieces, each with the next 2 KiB
 * prefetched, since these lines come from the producer's core: 420 against
 * 434 ns of service CPU per 1 KiB packet (medians of 20 recordings,
 * builds alternating), within the noise; not kept. */
__attribute__((noinline)) static void
smb_reader_copy_from_producer(uint8_t *dst, const void *src, size_t n)
{
    memcpy(dst, src, n);
}

/* Where the payload's first `count` fragments end, when they end within
 * the first `avail` bytes (p: the private copy) and parse as libbuf
 * parses them, or by stricter rules (size varints of at most 4 bytes, so
 * never the drop marker); SIZE_MAX otherwise. */
static size_t frags_end_within(const uint8_t *p, size_t avail, uint32_t count)
{
    size_t pos = 0;
    for (uint32_t i = 0; i < count; i++) {
        uint32_t size = 0;
        unsigned k = 0;
        uint8_t b;
        do {
            if (pos >= avail || k == 4)
                return SIZE_MAX;
            b = p[pos++];
            size |= (uint32_t)(b & 0x7f) << (7 * k++);
        } while (b & 0x80);
        if (size > avail - pos)
            return SIZE_MAX;
        pos += size;
    }
    return pos;
}

/* Hand a chunk's payload to libbuf. A complete chunk whose fragments
 * average SMB_READER_SHARED_FRAG bytes or more goes from the shared
 * memory straight into the trace buffer (tb_copy_chunk_shared): libbuf
 * tokenizes it where it lies, copies its fragments into the ring and
 * checks the copy, so the producer cannot make what is stored differ from
 * what was checked, and a chunk rewritten meanwhile is refused as an ABI
 * violation. libbuf reads nothing past its fragments, so the pages behind
 * a part-full chunk (one a flush committed) are neither read nor, if the
 * producer never wrote them, allocated by the kernel for our read.
 * Other chunks are copied into scratch first (smb_reader_copy_from_producer)
 * and libbuf reads the copy: many small fragments (below), and incomplete
 * (scraped) chunks, whose writer may be writing the last fragment right
 * now, an honest race that the check would take for a rewrite, and whose
 * reserved size is the whole payload, copied whole. Of a complete chunk
 * larger than the rest of the system page its payload starts in (pages
 * of 8 KiB and more) that much is copied first: if its fragments end
 * there (a chunk a flush committed part-full), libbuf gets just them, and
 * the pages behind are not touched either.
 * Until 2026-12-07 complete chunks were copied into scratch too, then
 * from there into the ring: two copies of every byte. Measured when that
 * went (2026-12-07, shmtraced, 256 MB recordings through `shmtrace
 * record`, builds alternating, medians; an AMD EPYC VM whose memory ran
 * at 7-8 GB/s that day, bench_tb's baseline): service CPU per 64 KiB packet
 * 42.3 against 48.7 us with one producer, 49.4 against 50.0 with four
 * (12 recordings each). Sent this way whatever their fragments, chunks
 * of 64 B packets cost 183.5 against 169.5 ns per packet (8 each):
 * libbuf then tokenizes ~350 fragment headers in lines still arriving
 * from the producer's core, and again in the ring; 1 KiB packets were
 * level (948.5 against 982.5 ns at x1, 1086.5 against 1082.5 at x4).
 * Hence SMB_READER_SHARED_FRAG: only chunks of few, large fragments.
 * An unsafe build of 2026-12-05 that handed libbuf the SMB's bytes (no
 * check of the copy; libbuf then fetched only the first 4 KiB of a source
 * ahead of tokenizing it) was slower on that day's host: 445.5 against
 * 364 ns per 1 KiB packet; the tokenizer chased fragment headers through
 * lines still on the producer's core.
 * Also tried and not kept (2026-12-05): asking for the next chunk of the
 * CommitData's list (its first 4 KiB, or its whole 32 KiB page, into L2)
 * before committing this one. 1 KiB x1, medians of 24-32 recordings,
 * builds alternating: 381 (4 KiB) and 354 against 397.5 ns of service CPU
 * per packet, then 355.5 against 346 (whole page); x4 387.5 against 412.5
 * (20 each): inside that host's noise. */
static void copy_into(smb_reader *r, tb_buffer *buf, smb_chunk_header *c,
                      uint32_t chunk_size, const header_copy *h,
                      bool complete)
{
    size_t payload = chunk_size - SMB_CHUNK_HEADER_SIZE, len = payload;
    const uint8_t *src = smb_chunk_payload(c);
    if (complete && (size_t)h->count * SMB_READER_SHARED_FRAG <= payload) {
        tb_copy_chunk_shared(buf, r->producer_id, r->uid, r->pid,
                             h->writer_id, h->chunk_id, h->count, h->flags,
                             true, src, payload);
        return;
    }
    size_t probe = SMB_READER_SYS_PAGE -
                   ((uintptr_t)src & (SMB_READER_SYS_PAGE - 1));
    if (probe < SMB_READER_PROBE_MIN)
        probe += SMB_READER_SYS_PAGE;
    if (complete && probe < payload) {
        smb_reader_copy_from_producer(r->scratch, src, probe);
        len = frags_end_within(r->scratch, probe, h->count);
        if (len == SIZE_MAX) {
            len = payload;
            smb_reader_copy_from_producer(r->scratch + probe, src + probe,
                                          payload - probe);
        }
    } else {
        smb_reader_copy_from_producer(r->scratch, src, payload);
    }
    tb_copy_chunk_untrusted(buf, r->producer_id, r->uid, r->pid,
                            h->writer_id, h->chunk_id, h->count, h->flags,
                            complete, r->scratch, len);
}

/* The service's chunk transitions. The ABI's helpers make each with a
 * locked CAS, which guards against another party changing the page word
 * between the load and the store. On a one-chunk (Div1) page no other party
 * may write the word in these two states: a producer takes only Free
 * chunks (partitioning only a word-0 page), and turns its chunk Complete
 * before the service may touch it; this service reads each SMB from one
 * thread. Perfetto's producers follow the same rules (TryAcquireChunk and
 * TryPartitionPage only act on Free chunks / word 0). So when the word is
 * exactly {Div1, Complete} (then {Div1, BeingRead}) a store is the same
 * transition: the producer's arbiter does the mirror image for its own
 * two (libshm/arbiter.c, complete_chunk). The locked CAS costs the service
 * a drained store buffer per chunk, and waits for the page word's line to
 * come from the producer's core where a store need not wait.
 * A hostile producer can still write the word at any time; it then only
 * confuses its own SMB: we copy the payload out before libbuf reads it,
 * whatever the state says. A word that is not exactly the expected one
 * (another layout, reserved bits) takes the ABI's CAS as before. */
#define SMB_READER_DIV1 (SMB_LAYOUT_DIV1 << SMB_LAYOUT_SHIFT)

smb_chunk_header *smb_reader_acquire_for_reading(smb_page_header *ph,
                                                 uint32_t page_size,
                                                 uint32_t idx, uint32_t word,
                                                 uint32_t *chunk_size)
{
    if (idx == 0 && word == (SMB_READER_DIV1 | SMB_CHUNK_COMPLETE)) {
        /* The caller's acquire load of `word` ordered our reads of the
         * chunk after the producer's writes. */
        atomic_store_explicit(&ph->header_bitmap,
                              SMB_READER_DIV1 | SMB_CHUNK_BEING_READ,
                              memory_order_relaxed);
        if (chunk_size != NULL)
            *chunk_size = smb_chunk_size(page_size, SMB_LAYOUT_DIV1);
        return smb_chunk_at(ph, page_size, SMB_LAYOUT_DIV1, 0);
    }
    return smb_try_acquire_chunk_for_reading(ph, page_size, idx, chunk_size);
}

int smb_reader_release_as_free(smb_page_header *ph, uint32_t page_size,
                               uint32_t idx)
{
    if (idx == 0 && atomic_load_explicit(&ph->header_bitmap,
                                         memory_order_relaxed) ==
                        (SMB_READER_DIV1 | SMB_CHUNK_BEING_READ)) {
        smb__clear_chunk_header(smb_chunk_at(ph, page_size,
                                             SMB_LAYOUT_DIV1, 0));
        /* Release: our reads of the chunk and the zeroed header come
         * before the producer's acquire load that finds the page free (its
         * only chunk Free: word 0, as the ABI's release makes it). */
        atomic_store_explicit(&ph->header_bitmap, 0, memory_order_release);
        return 0;
    }
    return smb_release_chunk_as_free(ph, page_size, idx);
}

int smb_reader_commit_chunk(smb_reader *r, uint32_t page, uint32_t chunk,
                            uint32_t target_buffer, smb_resolve_fn resolve,
                            void *ctx)
{
    smb_page_header *ph;
    smb_chunk_header *c;
    uint32_t word, layout, chunk_size;
    header_copy h;
    tb_buffer *buf;
    int rc = 0;

    if (page >= r->num_pages) {
        r->stats.bad_requests++;
        return -ERANGE;
    }
    ph = smb_page_at(r->base, r->page_size, page);
    word = atomic_load_explicit(&ph->header_bitmap, memory_order_acquire);
    layout = smb_word_layout(word);
    if (chunk >= smb_layout_num_chunks(layout)) {
        r->stats.bad_requests++;
        return -ERANGE;
    }
    if (check_word(word) != 0)
        r->stats.abi_violations++;      /* counted; the chunk may be fine */
    c = smb_reader_acquire_for_reading(ph, r->page_size, chunk, word,
                                       &chunk_size);
    if (c == NULL) {
        r->stats.not_complete++;
        return -EAGAIN;
    }
    if (read_header(c, memory_order_relaxed, &h) != 0) {
        r->stats.abi_violations++;
        rc = -EPROTO;
    } else if ((buf = resolve(ctx, target_buffer, h.writer_id)) == NULL) {
        r->stats.chunks_discarded++;
        rc = -ENOENT;
    } else {
        copy_into(r, buf, c, chunk_size, &h, true);
        r->stats.chunks_moved++;
    }
    if (smb_reader_release_as_free(ph, r->page_size, chunk) != 0)
        r->stats.abi_violations++;      /* someone changed our chunk */
    return rc;
}

int smb_reader_commit_data(smb_reader *r, const uint8_t *data, size_t len,
                           bool complete, uint32_t target_buffer,
                           smb_resolve_fn resolve, void *ctx)
{
    header_copy h;
    uint16_t packets;
    tb_buffer *buf;

    if (data == NULL || len < SMB_CHUNK_HEADER_SIZE ||
        len >= SMB_MAX_CHUNK_SIZE) {
        r->stats.bad_requests++;
        return -EINVAL;
    }
    /* Little-endian header fields, read from the (private) IPC copy. */
    h.chunk_id = (uint32_t)data[0] | (uint32_t)data[1] << 8 |
                 (uint32_t)data[2] << 16 | (uint32_t)data[3] << 24;
    h.writer_id = (uint16_t)(data[4] | data[5] << 8);
    packets = (uint16_t)(data[6] | data[7] << 8);
    h.count = (uint16_t)smb_packets_count(packets);
    h.flags = (uint8_t)smb_packets_flags(packets);
    if (h.writer_id == 0 || h.writer_id > SMB_MAX_WRITER_ID ||
        (h.flags & ~SMB_FLAGS_MASK) != 0) {
        r->stats.abi_violations++;
        return -EPROTO;
    }
    buf = resolve(ctx, target_buffer, h.writer_id);
    if (buf == NULL) {
        r->stats.chunks_discarded++;
        return -ENOENT;
    }
    tb_copy_chunk_untrusted(buf, r->producer_id, r->uid, r->pid, h.writer_id,
                            h.chunk_id, h.count, h.flags, complete,
                            data + SMB_CHUNK_HEADER_SIZE,
                            len - SMB_CHUNK_HEADER_SIZE);
    r->stats.chunks_moved++;
    return 0;
}

int smb_reader_apply_patches(smb_reader *r, const smb_chunk_patches *g,
                             smb_resolve_fn resolve, void *ctx)
{
    tb_buffer *buf;
    if (g->writer_id == 0 || g->writer_id > SMB_MAX_WRITER_ID ||
        g->npatches == 0 || g->npatches > MAX_PATCHES_PER_GROUP ||
        g->patches == NULL) {
        r->stats.patches_discarded++;
        return -EPROTO;
    }
    buf = resolve(ctx, g->target_buffer, g->writer_id);
    if (buf == NULL) {
        r->stats.patches_discarded++;
        return -ENOENT;
    }
    if (!tb_try_patch_chunk(buf, r->producer_id, g->writer_id, g->chunk_id,
                            (const tb_patch *)(const void *)g->patches,
                            g->npatches, g->has_more_patches != 0)) {
        r->stats.patches_failed++;
        return -ESRCH;
    }
    return 0;
}

size_t smb_reader_commit_batch(smb_reader *r, const smb_commit_batch *b,
                               smb_resolve_fn resolve, void *ctx)
{
    size_t moved = 0;
    for (size_t i = 0; i < b->nchunks; i++)
        if (smb_reader_commit_chunk(r, b->chunks[i].page, b->chunks[i].chunk,
                                    b->chunks[i].target_buffer, resolve,
                                    ctx) == 0)
            moved++;
    for (size_t i = 0; i < b->npatch_groups; i++)
        smb_reader_apply_patches(r, &b->patch_groups[i], resolve, ctx);
    return moved;
}

void smb_reader_set_fd(smb_reader *r, int fd)
{
    r->fd = fd;
}

/* Pages p.. to scrape next: returns the first page at or after p whose
 * header lies in data of r->fd (SEEK_DATA), with *end the first page after
 * it whose header lies in the hole after that data (SEEK_HOLE);
 * r->num_pages when no data is left. Without an fd, or if lseek fails
 * otherwise than "no more data" (ENXIO), every page from p on. */
static size_t data_pages(const smb_reader *r, size_t p, size_t *end)
{
    const off_t ps = (off_t)r->page_size;
    *end = r->num_pages;
    while (r->fd >= 0 && p < r->num_pages) {
        off_t data = lseek(r->fd, (off_t)p * ps, SEEK_DATA);
        if (data < 0)
            return errno == ENXIO ? r->num_pages : p;
        off_t hole = lseek(r->fd, data, SEEK_HOLE);
        if (hole < 0)
            return p;
        size_t first = (size_t)((data + ps - 1) / ps);
        size_t after = (size_t)((hole + ps - 1) / ps);
        if (after > r->num_pages)
            after = r->num_pages;
        if (first < after) {
            *end = after;
            return first;
        }
        /* the data holds no page header: on (even if a racing hole punch
         * made lseek's answers disagree) */
        p = after > p ? after : p + 1;
    }
    return p;
}

/* Scrape one page (every chunk not Free). Returns chunks copied. */
static size_t scrape_page(smb_reader *r, size_t p, smb_resolve_fn resolve,
                          void *ctx)
{
    smb_page_header *ph = smb_page_at(r->base, r->page_size, p);
    uint32_t word = atomic_load_explicit(&ph->header_bitmap,
                                         memory_order_acquire);
    uint32_t layout = smb_word_layout(word);
    uint32_t n = smb_layout_num_chunks(layout);
    uint32_t chunk_size = smb_chunk_size(r->page_size, layout);
    size_t copied = 0;

    if (word == 0)
        return 0;
    if (check_word(word) != 0)
        r->stats.abi_violations++;
    for (uint32_t i = 0; i < n; i++) {
        uint32_t state = smb_word_chunk_state(word, i);
        smb_chunk_header *c;
        header_copy h;
        tb_buffer *buf;
        bool complete;

        if (state == SMB_CHUNK_FREE || state == SMB_CHUNK_BEING_READ)
            continue;
        complete = state == SMB_CHUNK_COMPLETE;
        c = smb_chunk_at(ph, r->page_size, layout, i);
        if (read_header(c, memory_order_acquire, &h) != 0) {
            r->stats.abi_violations++;
            continue;
        }
        if (!complete && h.count < 2)
            continue;
        buf = resolve(ctx, 0, h.writer_id);
        if (buf == NULL)
            continue;
        copy_into(r, buf, c, chunk_size, &h, complete);
        r->stats.chunks_scraped++;
        copied++;
    }
    return copied;
}

size_t smb_reader_scrape(smb_reader *r, smb_resolve_fn resolve, void *ctx)
{
    size_t copied = 0, p = 0, end;
    while ((p = data_pages(r, p, &end)) < r->num_pages)
        for (; p < end; p++)
            copied += scrape_page(r, p, resolve, ctx);
    return copied;
}
