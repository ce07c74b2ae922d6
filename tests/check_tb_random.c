/*
 * check_tb_random.c - libbuf: seeded randomized conservation tests.
 *
 * Simulated trace writers produce packets (header: writer, sequence number,
 * length; body: a pattern derived from them), split them across chunks with
 * the continuation flags like a real writer, and commit the chunks in
 * random interleavings into a small ring (so it wraps many times), with
 * reads at random moments. Checked: every packet read is intact and was
 * written, is read once, in per-sequence order, and every gap in a
 * sequence's numbers is flagged on the packet after it. The same workload
 * run with an eviction callback (forcing the full erase walk instead of the
 * fast path) must give identical output and stats. A messy variant adds
 * scraping + re-commits, shuffled batches and out-of-band patches.
 *
 * Exact loss accounting (tb_get_seq_loss): after the last read, for every
 * writer, the packets it started (whose first fragment reached the buffer)
 * = packets read + packets still pending + lost packets of every cause,
 * and the buffer's packets_offered / packets_read agree with what the
 * test wrote and read.
 *
 * The runs use 6 writers, and again 200 (the *_many tests) in a larger
 * ring: past 64 sequences the copy path walks the old records ahead of
 * the write cursor to prefetch the victims' metadata (tb_write.c,
 * prefetch_victims), across the wraps, rewinds, re-commits and patches
 * these runs make; that walk must change nothing but timing.
 */
#include "tb_testutil.h"
#include "tb_int.h"
#include "trng.h"

#define NWRITERS 6          /* the default runs */
#define NWRITERS_MANY 200   /* the *_many runs: past the 64 of prefetch_victims */
#define NWRITERS_MAX NWRITERS_MANY
#define MAX_PKT 1500

typedef struct {
    uint32_t rng;
} rng_t;

static uint32_t next(rng_t *r)
{
    return trng_next32(&r->rng);
}

typedef struct {
    uint32_t next_chunk_id;
    uint32_t next_pkt;       /* seqno of the next packet to start */
    uint8_t pkt[MAX_PKT + 12];
    uint32_t pkt_len;        /* total length of the pending packet */
    uint32_t pkt_off;        /* bytes of it already emitted */
    bool in_packet;
} writer_t;

static void make_packet(writer_t *w, uint16_t wid, rng_t *r)
{
    uint32_t body = next(r) % MAX_PKT;
    w->pkt_len = 10 + body;
    memcpy(w->pkt, &wid, 2);
    memcpy(w->pkt + 2, &w->next_pkt, 4);
    memcpy(w->pkt + 6, &w->pkt_len, 4);
    for (uint32_t i = 0; i < body; i++)
        w->pkt[10 + i] = (uint8_t)(wid * 31 + w->next_pkt * 7 + i);
    w->next_pkt++;
    w->pkt_off = 0;
    w->in_packet = true;
}

static int packet_ok(const uint8_t *d, size_t n, uint16_t *wid,
                     uint32_t *seqno)
{
    uint32_t len;
    if (n < 10)
        return 0;
    memcpy(wid, d, 2);
    memcpy(seqno, d + 2, 4);
    memcpy(&len, d + 6, 4);
    if (len != n)
        return 0;
    for (uint32_t i = 10; i < n; i++)
        if (d[i] != (uint8_t)(*wid * 31 + *seqno * 7 + (i - 10)))
            return 0;
    return 1;
}

/* Fills one chunk of `cap` payload bytes for writer w; returns flags. */
static uint8_t fill_chunk(writer_t *w, uint16_t wid, tbt_chunk *c,
                          uint32_t cap, rng_t *r)
{
    uint8_t flags = 0;
    tbt_reset(c);
    if (w->in_packet && w->pkt_off > 0)
        flags |= TB_F1;
    for (;;) {
        if (!w->in_packet)
            make_packet(w, wid, r);
        if (c->size + 4 + 1 > cap)
            break;
        uint32_t room = cap - (uint32_t)c->size - 4;
        uint32_t left = w->pkt_len - w->pkt_off;
        /* even writers never fragment: a packet that does not fit waits
         * for the next chunk (unless it can never fit) */
        if (wid % 2 == 0 && left > room && c->nfrags > 0)
            break;
        uint32_t n = left < room ? left : room;
        tbt_put_varint4(c, n);
        memcpy(c->data + c->size, w->pkt + w->pkt_off, n);
        c->size += n;
        c->nfrags++;
        w->pkt_off += n;
        if (w->pkt_off == w->pkt_len) {
            w->in_packet = false;
        } else {
            flags |= TB_F2;
            break;
        }
    }
    return flags;
}

/* Packets whose chunk the buffer discarded as older than the last one
 * consumed (spec §4 step 7): Perfetto counts them in chunks_discarded but
 * flags nothing when the next chunk is contiguous with what was consumed,
 * so such a gap is allowed to go unflagged (and only such a gap). */
#define MAX_SEQNO 16384
static bool excused[NWRITERS_MAX + 1][MAX_SEQNO];

typedef struct {
    uint32_t last[NWRITERS_MAX + 1];
    bool seen_any[NWRITERS_MAX + 1];
    size_t packets;
    size_t per[NWRITERS_MAX + 1];
    size_t nwriters;
    size_t flagged_gaps;
    uint64_t hash;
} verdict_t;

static void drain(tb_buffer *b, verdict_t *v)
{
    tb_begin_read(b);
    tb_packet pkt;
    tb_seq_props props;
    uint32_t loss;
    static uint8_t buf[MAX_PKT + 16];
    while (tb_read_next_packet(b, &pkt, &props, &loss)) {
        ck_assert_uint_le(pkt.size, sizeof(buf));
        size_t pos = 0;
        for (size_t i = 0; i < pkt.nslices; i++) {
            memcpy(buf + pos, pkt.slices[i].data, pkt.slices[i].size);
            pos += pkt.slices[i].size;
        }
        uint16_t wid;
        uint32_t seqno;
        ck_assert_msg(packet_ok(buf, pos, &wid, &seqno),
                      "corrupt packet from writer %u", props.writer_id);
        ck_assert_uint_eq(wid, props.writer_id);
        ck_assert_uint_ge(wid, 1);
        ck_assert_uint_le(wid, v->nwriters);
        bool expected_next = v->seen_any[wid] ? seqno == v->last[wid] + 1
                                              : seqno == 0;
        if (v->seen_any[wid])
            ck_assert_msg(seqno > v->last[wid],
                          "writer %u: packet %u after %u", wid, seqno,
                          v->last[wid]);
        /* a clean producer loses data only to eviction: a flag iff a gap */
        bool all_excused = !expected_next;
        for (uint32_t q = v->seen_any[wid] ? v->last[wid] + 1 : 0;
             q < seqno && all_excused; q++)
            all_excused = q < MAX_SEQNO && excused[wid][q];
        if (!expected_next && !all_excused) {
            ck_assert_msg(loss != 0, "writer %u: gap before %u unflagged",
                          wid, seqno);
            v->flagged_gaps++;
        } else if (expected_next) {
            ck_assert_msg(loss == 0, "writer %u: packet %u flagged %#x "
                          "without a gap", wid, seqno, loss);
        }
        v->last[wid] = seqno;
        v->seen_any[wid] = true;
        v->packets++;
        v->per[wid]++;
        v->hash = v->hash * 1000003u ^ ((uint64_t)wid << 40 |
                                        (uint64_t)seqno << 8 | loss);
    }
}

/* One chunk of a batch: bytes, flags, where its patch goes (if any). */
typedef struct {
    tbt_chunk c;
    uint32_t seq_lo, seq_hi; /* packets with a fragment in this chunk */
    uint16_t wid;
    uint32_t id;
    uint8_t flags;
    bool patch;
    uint32_t patch_off;
    uint8_t patch_data[4];
} pending_t;

static pending_t batch[24];

/* Messy producers: each batch (what one scrape + IPC burst would carry)
 * holds a few chunks per writer, committed in shuffled order; some are
 * first scraped (incomplete, padded) and committed for real later in the
 * batch; begin fragments may need patching, their 4 first bytes zeroed
 * and patched before the next read. */
static void messy_batch(tb_buffer *b, writer_t *w, size_t nw, rng_t *r)
{
    size_t n = 0;
    size_t nchunks = 1 + next(r) % 8;
    for (size_t k = 0; k < nchunks; k++) {
        pending_t *p = &batch[n++];
        p->wid = (uint16_t)(1 + next(r) % nw);
        p->id = w[p->wid].next_chunk_id++;
        writer_t *wr = &w[p->wid];
        p->seq_lo = wr->in_packet ? wr->next_pkt - 1 : wr->next_pkt;
        p->flags = fill_chunk(wr, p->wid, &p->c, 64 + next(r) % 2000, r);
        p->seq_hi = wr->next_pkt - 1;
        p->patch = false;
        if ((p->flags & TB_F2) && next(r) % 2 == 0) {
            /* last fragment: find it, zero 4 data bytes to patch later */
            uint32_t off = 0, last = 0;
            tb__frag f;
            while (tb__next_frag(p->c.data, (uint32_t)p->c.size, &off, 0,
                                 &f) == TB__FRAG_OK)
                last = f.pos + f.hdr;
            if (p->c.size - last >= 4) {
                p->patch = true;
                p->patch_off = last;
                memcpy(p->patch_data, p->c.data + last, 4);
                memset(p->c.data + last, 0, 4);
                p->flags |= TB_F4;
            }
        }
    }
    /* scrapes first (in order), then the real commits shuffled */
    for (size_t k = 0; k < n; k++) {
        pending_t *p = &batch[k];
        if (next(r) % 4 == 0 && p->c.nfrags > 0)
            tb_copy_chunk_untrusted(b, 1, 1000, 1, p->wid, p->id,
                                    p->c.nfrags, p->flags, false, p->c.data,
                                    p->c.size + next(r) % 64);
    }
    for (size_t k = n; k > 1; k--) {
        size_t j = next(r) % k;
        pending_t tmp = batch[k - 1];
        batch[k - 1] = batch[j];
        batch[j] = tmp;
    }
    for (size_t k = 0; k < n; k++) {
        pending_t *p = &batch[k];
        uint64_t discarded = tb_get_stats(b)->chunks_discarded;
        tb_copy_chunk_untrusted(b, 1, 1000, 1, p->wid, p->id, p->c.nfrags,
                                p->flags, true, p->c.data, p->c.size);
        if (tb_get_stats(b)->chunks_discarded != discarded)
            for (uint32_t q = p->seq_lo; q <= p->seq_hi && q < MAX_SEQNO;
                 q++)
                excused[p->wid][q] = true;
    }
    for (size_t k = 0; k < n; k++) {
        pending_t *p = &batch[k];
        if (!p->patch)
            continue;
        tb_patch pt;
        pt.offset = p->patch_off;
        memcpy(pt.data, p->patch_data, 4);
        tb_try_patch_chunk(b, 1, p->wid, p->id, &pt, 1, false);
    }
}

/* Conservation per writer, exactly (see the file comment). */
static uint64_t check_loss_identity(const tb_buffer *b, const writer_t *w,
                                    const verdict_t *v, tb_fill_policy pol)
{
    uint64_t total_lost = 0;
    size_t n = 0;
    const tb_seq_loss *l = tb_get_seq_loss(b, &n);
    ck_assert_uint_eq(n, v->nwriters);
    for (size_t i = 0; i < n; i++) {
        uint16_t wid = l[i].writer_id;
        ck_assert_uint_ge(wid, 1);
        ck_assert_uint_le(wid, v->nwriters);
        ck_assert_uint_eq(l[i].producer_id, 1);
        const writer_t *wr = &w[wid];
        uint64_t started = wr->next_pkt -
                           ((wr->in_packet && wr->pkt_off == 0) ? 1u : 0u);
        uint64_t lost = 0;
        for (int c = 0; c < TB_NUM_CAUSES; c++)
            lost += l[i].lost_packets[c];
        ck_assert_uint_eq(l[i].packets_read, v->per[wid]);
        ck_assert_msg(l[i].packets_offered == started,
                      "writer %u: offered %llu, started %llu", wid,
                      (unsigned long long)l[i].packets_offered,
                      (unsigned long long)started);
        ck_assert_msg(started == v->per[wid] + l[i].packets_pending + lost,
                      "writer %u: started %llu != read %zu + pending %llu "
                      "+ lost %llu", wid, (unsigned long long)started,
                      v->per[wid], (unsigned long long)l[i].packets_pending,
                      (unsigned long long)lost);
        if (pol == TB_DISCARD)
            ck_assert_uint_eq(l[i].lost_packets[TB_CAUSE_OVERWRITE], 0);
        ck_assert_uint_eq(l[i].lost_packets[TB_CAUSE_ABI_VIOLATION], 0);
        ck_assert_uint_eq(l[i].lost_packets[TB_CAUSE_CORRUPTED], 0);
        ck_assert_str_eq(tb_loss_cause_name(TB_CAUSE_OVERWRITE),
                         "overwrite");
        total_lost += lost;
    }
    return total_lost;
}

static void noop_evict(void *ctx, const tb_packet *p, const tb_seq_props *s)
{
    (void)p;
    (void)s;
    (*(size_t *)ctx)++;
}

/* One seeded run with nw writers (a ring 4x larger with more than
 * NWRITERS); returns the verdict and copies the stats out. */
static verdict_t run_n(uint32_t seed, size_t nw, tb_fill_policy pol,
                       bool callback, bool messy, tb_stats *stats_out)
{
    rng_t r = {seed * 2654435761u + 1};
    size_t scale = nw > NWRITERS ? 4 : 1;
    tb_buffer *b = tb_create(scale * (16384 + 4096 * (next(&r) % 4)), pol);
    size_t evicted = 0;
    if (callback)
        tb_set_evict_callback(b, noop_evict, &evicted);
    static writer_t w[NWRITERS_MAX + 1];
    memset(w, 0, sizeof(w));
    verdict_t v;
    memset(&v, 0, sizeof(v));
    v.nwriters = nw;
    memset(excused, 0, sizeof(excused));
    static tbt_chunk c;
    for (int step = 0; messy && step < 600 * (int)scale; step++) {
        messy_batch(b, w, nw, &r);
        if (next(&r) % 8 == 0)
            drain(b, &v);
    }
    for (int step = 0; !messy && step < 3000 * (int)scale; step++) {
        uint16_t wid = (uint16_t)(1 + next(&r) % nw);
        uint32_t cap = 64 + next(&r) % 2000;
        uint8_t flags = fill_chunk(&w[wid], wid, &c, cap, &r);
        tb_copy_chunk_untrusted(b, 1, 1000, 1, wid, w[wid].next_chunk_id++,
                                c.nfrags, flags, true, c.data, c.size);
        if (next(&r) % 40 == 0)
            drain(b, &v);
    }
    drain(b, &v);
    uint64_t lost = check_loss_identity(b, w, &v, pol);
    *stats_out = *tb_get_stats(b);
    /* a buffer that evicted or refused chunks lost packets: never 0 */
    if (stats_out->chunks_overwritten + stats_out->chunks_discarded > 0)
        ck_assert_uint_gt(lost, 0);
    if (!callback || pol == TB_DISCARD)
        ck_assert_uint_eq(evicted, 0);
    tb_destroy(b);
    return v;
}

/* A ring run with nw writers, then the same with an eviction callback,
 * which forces the full erase walk: the fast eviction path must be
 * indistinguishable from the walk (same packets, same stats). Returns the
 * first run's verdict and stats. */
static verdict_t run_ring_twice(uint32_t seed, size_t nw, bool messy,
                                tb_stats *s1)
{
    tb_stats s2;
    verdict_t a = run_n(seed, nw, TB_RING_BUFFER, false, messy, s1);
    verdict_t bb = run_n(seed, nw, TB_RING_BUFFER, true, messy, &s2);
    ck_assert_uint_eq(a.packets, bb.packets);
    ck_assert(a.hash == bb.hash);
    ck_assert_mem_eq(s1, &s2, sizeof(s2));
    return a;
}

START_TEST(test_random_ring_conservation)
{
    tb_stats s1;
    verdict_t a = run_ring_twice((uint32_t)_i, NWRITERS, false, &s1);
    ck_assert_uint_gt(a.packets, 100);
    ck_assert_uint_gt(a.flagged_gaps, 0);
    ck_assert_uint_gt(s1.write_wrap_count, 2);
    ck_assert_uint_gt(s1.readaheads_succeeded, 0);
    /* bytes: everything written is read, overwritten or still there */
    ck_assert_uint_ge(s1.bytes_written, s1.bytes_read + s1.bytes_overwritten);
}
END_TEST

START_TEST(test_random_discard_conservation)
{
    tb_stats s;
    verdict_t v = run_n((uint32_t)_i + 1000, NWRITERS, TB_DISCARD, false,
                        false, &s);
    ck_assert_uint_gt(v.packets, 10);
    ck_assert_uint_eq(s.chunks_overwritten, 0);
    ck_assert_uint_eq(s.write_wrap_count, 0);
    ck_assert_uint_gt(s.chunks_discarded, 0);
    ck_assert_uint_eq(s.chunks_written + s.chunks_discarded, 3000);
}
END_TEST

START_TEST(test_random_messy_conservation)
{
    tb_stats s1;
    verdict_t a = run_ring_twice((uint32_t)_i + 5000, NWRITERS, true, &s1);
    ck_assert_uint_gt(a.packets, 100);
    ck_assert_uint_gt(s1.chunks_committed_out_of_order, 0);
    ck_assert_uint_gt(s1.patches_succeeded, 0);
    ck_assert_uint_gt(s1.chunks_rewritten + s1.chunks_relocated, 0);
}
END_TEST

/* The same with 200 writers (tb_get_seq_loss then has 200 entries, which
 * check_loss_identity asserts): the victim lookahead runs. */
START_TEST(test_random_ring_conservation_many)
{
    tb_stats s1;
    verdict_t a = run_ring_twice((uint32_t)_i + 9000, NWRITERS_MANY, false,
                                 &s1);
    ck_assert_uint_gt(a.packets, 100);
    ck_assert_uint_gt(a.flagged_gaps, 0);
    ck_assert_uint_gt(s1.write_wrap_count, 2);
    ck_assert_uint_ge(s1.bytes_written, s1.bytes_read + s1.bytes_overwritten);
}
END_TEST

START_TEST(test_random_messy_conservation_many)
{
    tb_stats s1;
    verdict_t a = run_ring_twice((uint32_t)_i + 13000, NWRITERS_MANY, true,
                                 &s1);
    ck_assert_uint_gt(a.packets, 100);
    ck_assert_uint_gt(s1.chunks_committed_out_of_order, 0);
    ck_assert_uint_gt(s1.patches_succeeded, 0);
}
END_TEST

static Suite *tb_random_suite(void)
{
    Suite *s = suite_create("tb_random");
    TCase *tc = tcase_create("conservation");
    tcase_add_loop_test(tc, test_random_ring_conservation, 1, 21);
    tcase_add_loop_test(tc, test_random_discard_conservation, 1, 6);
    tcase_add_loop_test(tc, test_random_messy_conservation, 1, 21);
    tcase_add_loop_test(tc, test_random_ring_conservation_many, 1, 6);
    tcase_add_loop_test(tc, test_random_messy_conservation_many, 1, 6);
    suite_add_tcase(s, tc);
    return s;
}

TCK_MAIN(tb_random_suite)
