/*
 * fuzz_tb.c - libFuzzer target: libbuf's untrusted entry points
 * (tb_copy_chunk_untrusted, tb_copy_chunk_shared with a byte rewritten
 * during the copy, tb_try_patch_chunk) and its read side
 * (tb_read_next_packet, tb_clone_readonly, the eviction callback).
 *
 * The input is a tape of operations on one small buffer (4 KiB..256 KiB,
 * ring or discard, so wraps and fills happen; with header bit 0x40 it
 * rewinds once a quarter in and drained, tb_rewind.c, which the default
 * keeps for rings of 16 MiB and more, when the write probe lets it: every
 * third time). A hostile producer
 * (producer 1) commits chunks whose header fields and payload bytes come
 * straight from the tape, and patches them; an honest producer
 * (producer 2, writer 1) commits well-formed chunks built by the target,
 * packets whole or split across two chunks, packet k carrying k and a known
 * pattern. Between writes the tape asks for reads, clones and full drains.
 *
 * Invariants (FZ_CHECK, beyond "no crash" under ASan+UBSan):
 *  - every honest packet that comes out (read, clone read, eviction
 *    callback) is intact: right size, its k, its pattern;
 *  - conservation: an honest packet comes out at most once (read or
 *    evicted, never both, never twice) and in order (k strictly grows);
 *    any gap in k on the read side carries a previous_packet_dropped bit:
 *    nothing is lost silently, whatever the hostile producer does;
 *  - the hostile producer gets out at most the bytes it put in;
 *  - every packet's slices add up to its size; memory stays bounded: the
 *    buffer keeps its size, the per-writer table holds only writers seen;
 *  - after every operation the exact loss accounting adds up for every
 *    sequence (offered = read + pending + lost), and for the honest one
 *    matches what was written and read (fzh_check_accounting).
 */
#include "config.h"

#include <shmtrace/trace_buffer.h>

#include "fuzz_honest.h"
#include "tb_int.h"

#define HOSTILE 1
#define HONEST 2

typedef struct fz_tb {
    tb_buffer *b;
    uint32_t probe_calls;       /* the write probe's: 2 of 3 say busy */
    fz_honest h;
    uint8_t writers[65536 / 8]; /* hostile writer ids used */
    uint32_t n_writers;
} fz_tb;

static void honest_chunk(fz_tb *z, uint8_t shape)
{
    uint8_t chunk[FZH_MAX_CHUNK];
    uint16_t nfrag;
    uint8_t flags;
    uint32_t cid;
    size_t n = fzh_chunk(&z->h, shape, chunk, &nfrag, &flags, &cid);
    if (n)
        tb_copy_chunk_untrusted(z->b, HONEST, 1000, 2, z->h.writer_id, cid,
                                nfrag, flags, true, chunk, n);
}

/* A shared source (tb_copy_chunk_shared): the hostile producer's bytes in
 * memory it may rewrite while libbuf copies them; libbuf's test hook (this
 * definition replaces its empty one: tb_int.h) rewrites one byte between
 * libbuf's tokenizing and its copy, as a racing producer can. */
static uint8_t shared_src[65536];
static size_t race_pos;
static uint8_t race_val;
static bool race_armed;

void tb__shared_race_hook(void)
{
    if (race_armed)
        shared_src[race_pos] = race_val;
}

static void hostile_chunk(fz_tb *z, fz_in *in, bool shared)
{
    uint8_t sel = fz_u8(in);
    uint16_t wid = (sel & 0x80) ? fz_u16(in) : (uint16_t)(sel & 3);
    uint32_t cid = (sel & 0x40) ? fz_u32(in) : fz_u8(in);
    uint16_t nfrag = (sel & 0x20) ? fz_u16(in) : fz_u8(in);
    uint8_t flags = fz_u8(in);
    bool complete = !(sel & 0x10);
    size_t want = (sel & 0x08) ? fz_u16(in) : fz_u8(in), got;
    const uint8_t *src = fz_bytes(in, want, &got);
    if (!(z->writers[wid / 8] & (1u << (wid % 8)))) {
        z->writers[wid / 8] |= (uint8_t)(1u << (wid % 8));
        z->n_writers++;
    }
    z->h.hostile_in += got;
    if (getenv("FUZZ_DEBUG")) { /* replaying a reproducer: what happens */
        fprintf(stderr, "hostile chunk: writer %u chunk %u frags %u flags "
                "%#x %s, %zu bytes:", wid, cid, nfrag, flags,
                complete ? "complete" : "scraped", got);
        for (size_t i = 0; i < got && i < 64; i++)
            fprintf(stderr, " %02x", src[i]);
        fputc('\n', stderr);
    }
    if (shared && got > 0) {
        race_pos = fz_u16(in) % got;
        race_val = fz_u8(in);
        memcpy(shared_src, src, got);
        race_armed = true;
        tb_copy_chunk_shared(z->b, HOSTILE, 1001, 1, wid, cid, nfrag, flags,
                             complete, shared_src, got);
        race_armed = false;
        return;
    }
    tb_copy_chunk_untrusted(z->b, HOSTILE, 1001, 1, wid, cid, nfrag, flags,
                            complete, got ? src : NULL, got);
}

static void hostile_patch(fz_tb *z, fz_in *in)
{
    tb_patch p[16];
    uint16_t wid = fz_u8(in) & 3;
    uint32_t cid = fz_u8(in);
    size_t np = fz_u8(in) % 17;
    bool more = np & 1;
    for (size_t i = 0; i < np; i++) {
        p[i].offset = fz_u16(in);
        for (int j = 0; j < 4; j++)
            p[i].data[j] = fz_u8(in);
    }
    bool ok = tb_try_patch_chunk(z->b, HOSTILE, wid, cid, np ? p : NULL, np,
                                 more);
    if (getenv("FUZZ_DEBUG"))
        fprintf(stderr, "patch: writer %u chunk %u, %zu patches%s: %s\n",
                wid, cid, np, more ? " (more)" : "", ok ? "ok" : "refused");
}

/* The owner's write probe (tb_set_write_probe), asked before a rewind:
 * busy twice, then free, so rewinds are put off and happen. It must only
 * be asked about the stretch a rewind writes over: [mem, mem + rewind_at).
 */
static bool probe(void *ctx, const uint8_t *p, size_t n)
{
    fz_tb *z = ctx;
    FZ_CHECK(p == z->b->mem && n == z->b->rewind_at,
             "probe asked for [%td, +%zu)", p - z->b->mem, n);
    return z->probe_calls++ % 3 != 2;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fz_in in = {data, size};
    static fz_tb z;
    memset(&z, 0, sizeof z);
    uint8_t hdr = fz_u8(&in);
    size_t bsize = 4096u * (1u + (hdr & 63u));
    z.b = tb_create(bsize, (hdr & 0x80) ? TB_DISCARD : TB_RING_BUFFER);
    FZ_CHECK(z.b != NULL, "tb_create(%zu)", bsize);
    if (hdr & 0x40) {
        tb__set_rewind_at(z.b, bsize / 4);
        tb_set_write_probe(z.b, probe, &z);
    }
    fzh_init(&z.h, HONEST, HOSTILE, size);
    tb_set_evict_callback(z.b, fzh_on_evict, &z.h);

    while (!fz_empty(&in)) {
        uint8_t op = fz_u8(&in);
        if (getenv("FUZZ_DEBUG"))
            fprintf(stderr, "op %u (%u)\n", op % 8u, op);
        switch (op % 8) {
        case 0: hostile_chunk(&z, &in, false); break;
        case 1: hostile_chunk(&z, &in, true); break;
        case 2: hostile_patch(&z, &in); break;
        case 3: case 4: honest_chunk(&z, op >> 3); break;
        case 5: fzh_read(&z.h, z.b, 1u + (op >> 3)); break;
        case 6: fzh_read_clone(&z.h, z.b); break;
        default: fzh_read(&z.h, z.b, UINT32_MAX); break;
        }
        FZ_CHECK(tb_size(z.b) == bsize, "buffer size changed");
        FZ_CHECK(tb_used_size(z.b) <= bsize, "used %zu > size %zu",
                 tb_used_size(z.b), bsize);
        fzh_check_accounting(&z.h, z.b, true);
    }
    fzh_read(&z.h, z.b, UINT32_MAX);
    fzh_check_accounting(&z.h, z.b, true);
    size_t nw = 0;
    tb_get_writer_stats(z.b, &nw);
    FZ_CHECK(nw <= z.n_writers + 1u, "%zu writer entries for %u writers", nw,
             z.n_writers + 1u);
    tb_destroy(z.b);
    fzh_free(&z.h);
    return 0;
}
