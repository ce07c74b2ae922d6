/*
 * fuzz_smb_reader.c - libFuzzer target: the service-side SMB reader
 * (smb_reader_*) over a hostile producer's shared memory buffer.
 *
 * The input is a tape: a geometry byte (page size 4..64 KiB, 1..4 pages),
 * then operations. The hostile producer writes page words, chunk headers
 * and payload bytes of its SMB anywhere (bounded by the geometry, as a
 * producer is by its mapping) and asks the service to commit chunks (any
 * page/chunk index), to scrape, to take emulated chunks (IPC-carried
 * bytes) and to apply patches. An honest producer (its own SMB, 4 KiB
 * pages of four chunks, written through the ABI) commits into the buffer
 * the hostile producer also writes; the tape interleaves reads and clones.
 * The SMB is an exact-size allocation, so ASan sees any access outside it.
 *
 * Invariants (FZ_CHECK):
 *  - a commit that won the chunk (moved, malformed or discarded) leaves it
 *    Free with a zeroed header and every other chunk state of the page as
 *    it was (smb-abi.md section 5); a refused one (bad index, not
 *    Complete) changes no byte of the SMB;
 *  - a scrape and an emulated commit change no byte of the SMB;
 *  - the reader's counters account for every call: each return code bumps
 *    exactly its counter;
 *  - resolve is asked only for writer ids 1..32767 and with the target
 *    buffer the request named (0 for scrapes);
 *  - the honest producer's packets all come back intact, once, in order,
 *    any gap flagged (fuzz_honest.h); the hostile producer never gets out
 *    more bytes than the chunks it had moved; libbuf's loss accounting adds
 *    up after every operation (fzh_check_accounting).
 */
#include "config.h"

#include <errno.h>
#include <stdatomic.h>

#include <shmtrace/smb_abi.h>

#include "smb_reader.h"
#include "fuzz_honest.h"

#define HOSTILE 1
#define HONEST 2
#define HONEST_PAGES 4u

typedef struct fz_smb {
    uint8_t *smb;
    size_t size;
    uint32_t page_size, pages;
    smb_reader *rd;
    uint8_t *snap;             /* copy of the SMB before a call */
    tb_buffer *shared, *own;   /* shared with the honest producer */
    uint8_t *hsmb;             /* honest producer's SMB */
    smb_reader *hrd;
    uint32_t hnext;            /* honest: next chunk slot */
    fz_honest h;
    uint32_t want_target;      /* what resolve must be asked for */
} fz_smb;

static tb_buffer *hostile_resolve(void *ctx, uint32_t target,
                                  uint16_t writer_id)
{
    fz_smb *z = ctx;
    FZ_CHECK(writer_id >= 1 && writer_id <= SMB_MAX_WRITER_ID,
             "resolve asked for writer %u", writer_id);
    FZ_CHECK(target == z->want_target, "resolve asked for buffer %u, not %u",
             target, z->want_target);
    if (writer_id % 5 == 0)
        return NULL;
    return (target == 2 || writer_id % 4 == 0) ? z->own : z->shared;
}

static tb_buffer *honest_resolve(void *ctx, uint32_t target,
                                 uint16_t writer_id)
{
    fz_smb *z = ctx;
    FZ_CHECK(target == 0 && writer_id == z->h.writer_id, "honest resolve");
    return z->shared;
}

static smb_page_header *page_of(fz_smb *z, uint32_t p)
{
    return smb_page_at(z->smb, z->page_size, p);
}

static uint32_t word_of(fz_smb *z, uint32_t p)
{
    return atomic_load_explicit(&page_of(z, p)->header_bitmap,
                                memory_order_relaxed);
}

/* The honest producer writes its next chunk through the ABI and the
 * service commits it at once, as CommitData would. */
static void honest_commit(fz_smb *z, uint8_t shape)
{
    uint8_t payload[FZH_MAX_CHUNK];
    uint16_t nfrag;
    uint8_t flags;
    uint32_t cid;
    size_t n = fzh_chunk(&z->h, shape, payload, &nfrag, &flags, &cid);
    if (n == 0)
        return;
    uint32_t slot = z->hnext++ % (HONEST_PAGES * 4);
    uint32_t page = slot / 4, idx = slot % 4;
    smb_page_header *ph = smb_page_at(z->hsmb, 4096, page);
    smb_try_partition_page(ph, SMB_LAYOUT_DIV4);
    smb_chunk_header *c = smb_try_acquire_chunk_for_writing(
        ph, 4096, idx, z->h.writer_id, cid, smb_make_packets(nfrag, flags));
    FZ_CHECK(c != NULL, "honest chunk %u/%u not free", page, idx);
    FZ_CHECK(n <= smb_chunk_size(4096, SMB_LAYOUT_DIV4) -
                      SMB_CHUNK_HEADER_SIZE, "honest chunk too big");
    memcpy(smb_chunk_payload(c), payload, n);
    FZ_CHECK(smb_release_chunk_as_complete(ph, idx) == 0, "release");
    int rc = smb_reader_commit_chunk(z->hrd, page, idx, 0, honest_resolve, z);
    FZ_CHECK(rc == 0, "honest commit refused: %d", rc);
}

static void put_word(fz_smb *z, fz_in *in)
{
    uint32_t p = fz_u8(in) % z->pages;
    uint8_t sel = fz_u8(in);
    uint32_t w = fz_u32(in);
    if (sel & 1) /* plausible: a real layout, states anywhere */
        w = ((1u + (uint32_t)(sel >> 1) % 5u) << SMB_LAYOUT_SHIFT) |
            (w & SMB_ALL_CHUNKS_MASK);
    atomic_store_explicit(&page_of(z, p)->header_bitmap, w,
                          memory_order_release);
}

/* The chunk (page, idx) of the live layout, or NULL. */
static smb_chunk_header *chunk_of(fz_smb *z, fz_in *in, uint32_t *cs)
{
    uint32_t p = fz_u8(in) % z->pages;
    uint32_t layout = smb_word_layout(word_of(z, p));
    uint32_t n = smb_layout_num_chunks(layout);
    uint32_t idx = fz_u8(in);
    if (n == 0)
        return NULL;
    *cs = smb_chunk_size(z->page_size, layout);
    return smb_chunk_at(page_of(z, p), z->page_size, layout, idx % n);
}

static void put_header(fz_smb *z, fz_in *in)
{
    uint32_t cs;
    smb_chunk_header *c = chunk_of(z, in, &cs);
    uint8_t sel = fz_u8(in);
    uint32_t cid = (sel & 1) ? fz_u32(in) : fz_u8(in);
    uint16_t wid = (sel & 2) ? fz_u16(in) : (uint16_t)(1 + fz_u8(in) % 12);
    uint16_t packets = (sel & 4) ? fz_u16(in)
                                 : smb_make_packets(fz_u8(in) % 16,
                                                    (sel >> 3) & 7);
    if (c == NULL)
        return;
    atomic_store_explicit(&c->chunk_id, cid, memory_order_relaxed);
    atomic_store_explicit(&c->writer_id, wid, memory_order_relaxed);
    atomic_store_explicit(&c->packets, packets, memory_order_release);
}

static void put_payload(fz_smb *z, fz_in *in)
{
    uint32_t cs;
    smb_chunk_header *c = chunk_of(z, in, &cs);
    uint32_t off = fz_u16(in);
    size_t want = fz_u8(in) * 4u, got;
    const uint8_t *src = fz_bytes(in, want, &got);
    if (c == NULL)
        return;
    uint32_t room = cs - SMB_CHUNK_HEADER_SIZE;
    off %= room;
    if (got > room - off)
        got = room - off;
    memcpy(smb_chunk_payload(c) + off, src, got);
}

static void snapshot(fz_smb *z)
{
    memcpy(z->snap, z->smb, z->size);
}

static void unchanged(fz_smb *z, const char *what)
{
    FZ_CHECK(memcmp(z->snap, z->smb, z->size) == 0,
             "%s changed the producer's SMB", what);
}

static void commit(fz_smb *z, fz_in *in)
{
    uint8_t sel = fz_u8(in);
    uint32_t page = (sel & 1) ? fz_u32(in) : fz_u8(in) % (z->pages + 1);
    uint32_t idx = (sel & 2) ? fz_u32(in) : fz_u8(in) % 15;
    uint32_t target = (sel >> 2) % 3;
    uint32_t before = page < z->pages ? word_of(z, page) : 0;
    smb_reader_stats s0 = *smb_reader_get_stats(z->rd);
    snapshot(z);
    z->want_target = target;
    int rc = smb_reader_commit_chunk(z->rd, page, idx, target,
                                     hostile_resolve, z);
    const smb_reader_stats *s = smb_reader_get_stats(z->rd);
    switch (rc) {
    case 0:
        FZ_CHECK(s->chunks_moved == s0.chunks_moved + 1, "moved");
        z->h.hostile_in += smb_chunk_size(z->page_size,
                                          smb_word_layout(before)) -
                           SMB_CHUNK_HEADER_SIZE;
        break;
    case -ENOENT:
        FZ_CHECK(s->chunks_discarded == s0.chunks_discarded + 1, "discarded");
        break;
    case -EPROTO:
        FZ_CHECK(s->abi_violations > s0.abi_violations, "violation");
        break;
    case -ERANGE:
        FZ_CHECK(s->bad_requests == s0.bad_requests + 1, "bad request");
        unchanged(z, "a refused commit");
        return;
    case -EAGAIN:
        FZ_CHECK(s->not_complete == s0.not_complete + 1, "not complete");
        unchanged(z, "a commit of a chunk not Complete");
        return;
    default:
        FZ_CHECK(false, "commit returned %d", rc);
    }
    FZ_CHECK(rc == 0 || s->chunks_moved == s0.chunks_moved, "moved on %d",
             rc);
    /* The chunk was won: it is Free with a zeroed header, the other
     * states as they were (an all-Free page goes back to word 0). */
    uint32_t after = word_of(z, page);
    FZ_CHECK(smb_word_chunk_state(before, idx) == SMB_CHUNK_COMPLETE,
             "won a chunk that was not Complete");
    uint32_t want = smb_word_set_chunk_state(before, idx, SMB_CHUNK_FREE);
    if ((want & SMB_ALL_CHUNKS_MASK) == SMB_ALL_CHUNKS_FREE)
        want = 0;
    FZ_CHECK(after == want, "page word %08x became %08x, not %08x", before,
             after, want);
    smb_chunk_header *c = smb_chunk_at(page_of(z, page), z->page_size,
                                       smb_word_layout(before), idx);
    FZ_CHECK(atomic_load(&c->chunk_id) == 0 &&
                 atomic_load(&c->writer_id) == 0 &&
                 atomic_load(&c->packets) == 0,
             "freed chunk %u/%u keeps its header", page, idx);
}

static void scrape(fz_smb *z)
{
    uint64_t bound = 0;
    for (uint32_t p = 0; p < z->pages; p++) {
        uint32_t w = word_of(z, p), layout = smb_word_layout(w);
        for (uint32_t i = 0; i < smb_layout_num_chunks(layout); i++)
            if (smb_word_chunk_state(w, i) != SMB_CHUNK_FREE)
                bound += smb_chunk_size(z->page_size, layout) -
                         SMB_CHUNK_HEADER_SIZE;
    }
    snapshot(z);
    z->want_target = 0;
    uint64_t s0 = smb_reader_get_stats(z->rd)->chunks_scraped;
    size_t n = smb_reader_scrape(z->rd, hostile_resolve, z);
    unchanged(z, "a scrape");
    FZ_CHECK(smb_reader_get_stats(z->rd)->chunks_scraped == s0 + n,
             "scrape count");
    z->h.hostile_in += bound;
}

static void commit_data(fz_smb *z, fz_in *in)
{
    uint8_t sel = fz_u8(in);
    size_t want = (sel & 1) ? fz_u16(in) : fz_u8(in), got;
    const uint8_t *src = fz_bytes(in, want, &got);
    uint32_t target = (sel >> 1) % 3;
    snapshot(z);
    z->want_target = target;
    uint64_t m0 = smb_reader_get_stats(z->rd)->chunks_moved;
    int rc = smb_reader_commit_data(z->rd, got ? src : NULL, got, sel & 8,
                                    target, hostile_resolve, z);
    unchanged(z, "an emulated commit");
    FZ_CHECK(rc == 0 || rc == -EINVAL || rc == -EPROTO || rc == -ENOENT,
             "commit_data returned %d", rc);
    FZ_CHECK(smb_reader_get_stats(z->rd)->chunks_moved == m0 + (rc == 0),
             "moved");
    if (rc == 0)
        z->h.hostile_in += got - SMB_CHUNK_HEADER_SIZE;
}

static void patches(fz_smb *z, fz_in *in)
{
    static smb_patch p[1100];
    uint8_t sel = fz_u8(in);
    smb_chunk_patches g = {
        .target_buffer = (sel >> 4) % 3,
        .chunk_id = (sel & 1) ? fz_u32(in) : fz_u8(in),
        .writer_id = (sel & 2) ? fz_u16(in) : (uint16_t)(fz_u8(in) % 13),
        .has_more_patches = (sel >> 3) & 1,
    };
    g.npatches = (sel & 4) ? fz_u16(in) % 1100u : fz_u8(in) % 9u;
    for (uint32_t i = 0; i < g.npatches && i < 8; i++) {
        p[i].offset = fz_u16(in);
        for (int j = 0; j < 4; j++)
            p[i].data[j] = fz_u8(in);
    }
    g.patches = (sel & 0x80) ? NULL : p;
    snapshot(z);
    z->want_target = g.target_buffer;
    smb_reader_stats s0 = *smb_reader_get_stats(z->rd);
    int rc = smb_reader_apply_patches(z->rd, &g, hostile_resolve, z);
    unchanged(z, "a patch");
    const smb_reader_stats *s = smb_reader_get_stats(z->rd);
    switch (rc) {
    case 0:
        break;
    case -EPROTO: case -ENOENT:
        FZ_CHECK(s->patches_discarded == s0.patches_discarded + 1,
                 "discarded");
        return;
    case -ESRCH:
        FZ_CHECK(s->patches_failed == s0.patches_failed + 1, "failed");
        return;
    default:
        FZ_CHECK(false, "apply_patches returned %d", rc);
    }
    FZ_CHECK(g.writer_id >= 1 && g.npatches >= 1 && g.npatches <= 1024 &&
                 g.patches != NULL, "a malformed patch group was applied");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fz_in in = {data, size};
    static fz_smb z;
    memset(&z, 0, sizeof z);
    uint8_t geo = fz_u8(&in);
    z.page_size = 4096u << (geo % 5u);
    z.pages = 1u + (uint32_t)(geo >> 4) % 4u;
    z.size = (size_t)z.page_size * z.pages;
    z.smb = aligned_alloc(4096, z.size);
    z.snap = malloc(z.size);
    z.hsmb = aligned_alloc(4096, HONEST_PAGES * 4096);
    FZ_CHECK(z.smb && z.snap && z.hsmb, "oom");
    memset(z.smb, 0, z.size);
    memset(z.hsmb, 0, HONEST_PAGES * 4096);
    z.rd = smb_reader_create(z.smb, z.size, z.page_size, HOSTILE, 1001, 1);
    z.hrd = smb_reader_create(z.hsmb, HONEST_PAGES * 4096, 4096, HONEST,
                              1000, 2);
    z.shared = tb_create(((geo >> 6) & 1) ? 16384 : 1u << 20,
                         (geo >> 7) ? TB_DISCARD : TB_RING_BUFFER);
    z.own = tb_create(65536, TB_RING_BUFFER);
    FZ_CHECK(z.rd && z.hrd && z.shared && z.own, "setup");
    fzh_init(&z.h, HONEST, HOSTILE, size);
    tb_set_evict_callback(z.shared, fzh_on_evict, &z.h);

    while (!fz_empty(&in)) {
        uint8_t op = fz_u8(&in);
        switch (op % 11) {
        case 0: put_word(&z, &in); break;
        case 1: put_header(&z, &in); break;
        case 2: put_payload(&z, &in); break;
        case 3: commit(&z, &in); break;
        case 4: scrape(&z); break;
        case 5: commit_data(&z, &in); break;
        case 6: patches(&z, &in); break;
        case 7: honest_commit(&z, op >> 4); break;
        case 8: fzh_read(&z.h, z.shared, 1u + (op >> 4)); break;
        case 9: fzh_read_clone(&z.h, z.shared); break;
        default:
            fzh_read(&z.h, z.shared, UINT32_MAX);
            fzh_read(&z.h, z.own, UINT32_MAX);
            break;
        }
        fzh_check_accounting(&z.h, z.shared, true);
        fzh_check_accounting(&z.h, z.own, false);
    }
    fzh_read(&z.h, z.shared, UINT32_MAX);
    fzh_read(&z.h, z.own, UINT32_MAX);
    const smb_reader_stats *hs = smb_reader_get_stats(z.hrd);
    FZ_CHECK(hs->abi_violations == 0 && hs->bad_requests == 0,
             "the honest producer was blamed");
    smb_reader_destroy(z.rd);
    smb_reader_destroy(z.hrd);
    tb_destroy(z.shared);
    tb_destroy(z.own);
    fzh_free(&z.h);
    free(z.smb);
    free(z.snap);
    free(z.hsmb);
    return 0;
}
