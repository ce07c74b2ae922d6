/*
 * check_tb_patch.c - libbuf: out-of-band patches (spec trace-buffer.md §8):
 * lookup, bounds, stalls until the last patch, stats.
 */
#include "tb_testutil.h"

static tbt_chunk c;

/* A 1024-byte record: one 1000-byte fragment with a 4-byte header. */
static void put_kb(tb_buffer *b, uint16_t p, uint32_t id, uint8_t flags,
                   uint8_t seed)
{
    tbt_reset(&c);
    tbt_frag4(&c, 1000, seed);
    tbt_commit_ex(b, p, 1, id, flags, true, &c, 0);
}

static tb_patch mkpatch(uint32_t off, const char *four)
{
    tb_patch p;
    p.offset = off;
    memcpy(p.data, four, 4);
    return p;
}

TBT_RING_TEST(test_patch_applies_bytes_at_payload_offset)
{
    tbt_put1(b, 1, 1, 0, 0, 100, 'a');
    tbt_put1(b, 2, 1, 0, 0, 9, 'b'); /* payload: [09] b0 .. b8 */
    tbt_put1(b, 3, 1, 0, 0, 100, 'c');
    tb_patch p = mkpatch(5, "YMCA");
    ck_assert(tb_try_patch_chunk(b, 2, 1, 0, &p, 1, false));
    ck_assert_uint_eq(TBT_STAT(b, patches_succeeded), 1);
    tbt_pkts ps = tbt_read_all(b);
    ck_assert_uint_eq(ps.n, 3);
    ck_assert_uint_eq(ps.p[1].size, 9);
    ck_assert(tbt_pattern_ok(ps.p[1].data, 4, 'b'));
    ck_assert_mem_eq(ps.p[1].data + 4, "YMCA", 4);
    ck_assert_uint_eq(ps.p[1].data[8], (uint8_t)('b' + 8));
    tbt_free(&ps);
}

TBT_RING_TEST(test_patch_missing_sequence_or_chunk_fails)
{
    tbt_put1(b, 1, 1, 0, 0, 100, 'a');
    tb_patch p = mkpatch(0, "XXXX");
    ck_assert(!tb_try_patch_chunk(b, 1, 2, 0, &p, 1, false));
    ck_assert(!tb_try_patch_chunk(b, 1, 1, 1, &p, 1, false));
    ck_assert(!tb_try_patch_chunk(b, 1, 1, UINT32_MAX, &p, 1, false));
    ck_assert(!tb_try_patch_chunk(b, 9, 1, 0, &p, 1, false));
    ck_assert_uint_eq(TBT_STAT(b, patches_failed), 4);
    ck_assert_uint_eq(TBT_STAT(b, patches_succeeded), 0);
    tbt_expect(b, "a", (uint32_t[]){100});
    /* a chunk consumed by a read is gone too */
    ck_assert(!tb_try_patch_chunk(b, 1, 1, 0, &p, 1, false));
    ck_assert_uint_eq(TBT_STAT(b, patches_failed), 5);
}

TBT_RING_TEST(test_patch_at_both_ends_of_a_chunk)
{
    tbt_put1(b, 1, 1, 0, TB_F2, 100, 'a');
    tbt_put1(b, 1, 1, 1, TB_F1 | TB_F2, 16, 'b'); /* payload 17 bytes */
    tbt_put1(b, 1, 1, 2, TB_F1, 100, 'c');
    tb_patch p[2] = {mkpatch(1, "PERF"), mkpatch(13, "ETTO")};
    ck_assert(tb_try_patch_chunk(b, 1, 1, 1, p, 2, false));
    ck_assert_uint_eq(TBT_STAT(b, patches_succeeded), 2);
    tbt_pkts ps = tbt_read_all(b);
    ck_assert_uint_eq(ps.n, 1);
    ck_assert_uint_eq(ps.p[0].size, 216);
    ck_assert_mem_eq(ps.p[0].data + 100, "PERF", 4);
    ck_assert_mem_eq(ps.p[0].data + 112, "ETTO", 4);
    tbt_free(&ps);
}

TBT_RING_TEST(test_patch_bounds_checked)
{
    tbt_put1(b, 1, 1, 0, 0, 2048, 'a');
    tbt_put1(b, 1, 1, 1, 0, 16, 'b'); /* payload 17: last valid offset 13 */
    const uint32_t bad[] = {14, 16, 17, UINT32_MAX - 3, UINT32_MAX - 7,
                            UINT32_MAX, 0x80000000u, 2048};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        tb_patch p = mkpatch(bad[i], "0day");
        ck_assert(!tb_try_patch_chunk(b, 1, 1, 1, &p, 1, false));
    }
    ck_assert_uint_eq(TBT_STAT(b, patches_failed), 8);
    tb_patch ok = mkpatch(13, "edge");
    ck_assert(tb_try_patch_chunk(b, 1, 1, 1, &ok, 1, false));
    /* a tiny chunk (payload < 4) cannot be patched at all */
    tbt_put1(b, 1, 1, 2, 0, 1, 'c'); /* payload 2 bytes */
    tb_patch z = mkpatch(0, "zzzz");
    ck_assert(!tb_try_patch_chunk(b, 1, 1, 2, &z, 1, false));
    tbt_pkts ps = tbt_read_all(b);
    ck_assert_uint_eq(ps.n, 3);
    ck_assert(tbt_pkt_is1(&ps.p[0], 2048, 'a'));
    ck_assert_mem_eq(ps.p[1].data + 12, "edge", 4);
    ck_assert(tbt_pkt_is1(&ps.p[2], 1, 'c'));
    tbt_free(&ps);
}

TBT_RING_TEST(test_patch_failed_batch_keeps_earlier_patches)
{
    tbt_put1(b, 1, 1, 0, TB_F4, 16, 'a');
    tb_patch p[2] = {mkpatch(1, "GOOD"), mkpatch(100, "BAD!")};
    ck_assert(!tb_try_patch_chunk(b, 1, 1, 0, p, 2, false));
    ck_assert_uint_eq(TBT_STAT(b, patches_failed), 1);
    ck_assert_uint_eq(TBT_STAT(b, patches_succeeded), 0);
    /* the second patch lies past the valid bytes: counted failed and
     * ignored; the packet carries the first patch */
    tbt_pkts ps = tbt_read_all(b);
    ck_assert_uint_eq(ps.n, 1);
    ck_assert_mem_eq(ps.p[0].data, "GOOD", 4);
    tbt_free(&ps);
}

TBT_RING_TEST(test_patch_pending_stalls_only_its_sequence)
{
    /* seq 1: a (begin, needs patching) + continuation b */
    tbt_put1(b, 1, 1, 0, TB_F2 | TB_F4, 16, 'a');
    tbt_put1(b, 1, 1, 1, TB_F1, 16, 'b');
    /* seq 2: c, then d (begin, needs patching), e */
    tbt_put1(b, 2, 1, 0, 0, 16, 'c');
    tbt_put1(b, 2, 1, 1, TB_F2 | TB_F4, 16, 'd');
    tbt_put1(b, 2, 1, 2, TB_F1, 16, 'e');
    /* seq 3: f whole packet */
    tbt_put1(b, 3, 1, 0, 0, 16, 'f');
    tbt_expect(b, "cf", (uint32_t[]){16, 16});
    ck_assert_uint_eq(TBT_STAT(b, readaheads_failed), 2);

    tb_patch p = mkpatch(1, "PATC");
    ck_assert(tb_try_patch_chunk(b, 2, 1, 1, &p, 1, false));
    tbt_pkts ps = tbt_read_all(b);
    ck_assert_uint_eq(ps.n, 1);
    ck_assert_uint_eq(ps.p[0].size, 32);
    ck_assert_mem_eq(ps.p[0].data, "PATC", 4);
    ck_assert_uint_eq(ps.p[0].loss, 0);
    tbt_free(&ps);

    /* more patches pending: still stalled */
    p = mkpatch(1, "PERF");
    ck_assert(tb_try_patch_chunk(b, 1, 1, 0, &p, 1, true));
    ck_assert_uint_eq(tbt_read_count(b), 0);
    p = mkpatch(5, "ETTO");
    ck_assert(tb_try_patch_chunk(b, 1, 1, 0, &p, 1, false));
    ps = tbt_read_all(b);
    ck_assert_uint_eq(ps.n, 1);
    ck_assert_mem_eq(ps.p[0].data, "PERFETTO", 8);
    tbt_free(&ps);
    ck_assert_uint_eq(TBT_STAT(b, patches_succeeded), 3);
}

TBT_RING_TEST(test_patch_needed_in_middle_chunk_stalls_reassembly)
{
    tbt_put1(b, 1, 1, 0, TB_F2, 10, 'a');
    tbt_put1(b, 1, 1, 1, TB_F1 | TB_F2 | TB_F4, 10, 'b');
    tbt_put1(b, 1, 1, 2, TB_F1, 10, 'c');
    ck_assert_uint_eq(tbt_read_count(b), 0);
    tb_patch p = mkpatch(1, "MIDL");
    ck_assert(tb_try_patch_chunk(b, 1, 1, 1, &p, 1, false));
    tbt_pkts ps = tbt_read_all(b);
    ck_assert_uint_eq(ps.n, 1);
    ck_assert_uint_eq(ps.p[0].size, 30);
    ck_assert_mem_eq(ps.p[0].data + 10, "MIDL", 4);
    tbt_free(&ps);
}

TBT_RING_TEST(test_patch_stall_released_by_overwrite)
{
    put_kb(b, 1, 0, TB_F2 | TB_F4, 'a');
    for (uint32_t id = 1; id <= 3; id++)
        put_kb(b, 2, id, 0, (uint8_t)('a' + id));
    ck_assert_uint_eq(tbt_read_count(b), 3);
    /* the next chunk of seq 2 evicts the stalled begin of seq 1 */
    put_kb(b, 2, 4, 0, 'z');
    ck_assert_uint_eq(TBT_STAT(b, readaheads_failed), 2);
    ck_assert_uint_eq(TBT_STAT(b, chunks_overwritten), 1);
    tbt_put1(b, 1, 1, 1, 0, 10, 'n');
    tbt_pkts ps = tbt_read_all(b);
    ck_assert_uint_eq(ps.n, 2);
    ck_assert(tbt_pkt_is1(&ps.p[0], 1000, 'z'));
    ck_assert(tbt_pkt_is1(&ps.p[1], 10, 'n'));
    ck_assert_uint_eq(ps.p[1].loss, TB_LOSS_PRESENT | TB_LOSS_OVERWRITE);
    tbt_free(&ps);
}

TBT_RING_TEST(test_patch_zero_patches_clears_flag)
{
    tbt_put1(b, 1, 1, 0, TB_F2 | TB_F4, 10, 'a');
    tbt_put1(b, 1, 1, 1, TB_F1, 10, 'b');
    ck_assert(tb_try_patch_chunk(b, 1, 1, 0, NULL, 0, false));
    ck_assert_uint_eq(TBT_STAT(b, patches_succeeded), 0);
    tbt_pkts ps = tbt_read_all(b);
    ck_assert_uint_eq(ps.n, 1);
    ck_assert_uint_eq(ps.p[0].size, 20);
    tbt_free(&ps);
}

START_TEST(test_patch_lookup_after_wrap_and_ooo)
{
    tb_buffer *b = tb_create(1 << 20, TB_RING_BUFFER);
    /* many chunks, ids wrapping past UINT32_MAX, one gap, one OOO */
    uint32_t id = UINT32_MAX - 100;
    for (int i = 0; i < 300; i++, id++) {
        if (i == 150)
            continue; /* gap */
        tbt_put1(b, 1, 1, id, 0, 40, (uint8_t)i);
    }
    tbt_put1(b, 1, 1, UINT32_MAX - 100 + 150, 0, 40, 150); /* late, OOO */
    ck_assert_uint_eq(TBT_STAT(b, chunks_committed_out_of_order), 1);
    tb_patch p = mkpatch(1, "HIT!");
    for (int i = 0; i < 300; i++)
        ck_assert(tb_try_patch_chunk(b, 1, 1, UINT32_MAX - 100 + (uint32_t)i,
                                     &p, 1, true));
    ck_assert(!tb_try_patch_chunk(b, 1, 1, UINT32_MAX - 101, &p, 1, true));
    ck_assert(!tb_try_patch_chunk(b, 1, 1, UINT32_MAX - 100 + 300, &p, 1,
                                  true));
    ck_assert_uint_eq(TBT_STAT(b, patches_succeeded), 300);
    ck_assert_uint_eq(TBT_STAT(b, patches_failed), 2);
    tbt_pkts ps = tbt_read_all(b);
    ck_assert_uint_eq(ps.n, 300);
    for (size_t i = 0; i < 300; i++)
        ck_assert_mem_eq(ps.p[i].data, "HIT!", 4);
    tbt_free(&ps);
    tb_destroy(b);
}
END_TEST

/* ---- write fence (tb_set_write_fence) ---- */

/* Bytes of a packet returned by a read, watched across later writes. */
typedef struct {
    const uint8_t *p;
    size_t n;
    uint8_t copy[64];
    bool fenced;              /* a fence call covered it */
    bool intact_at_fence;     /* ... while its bytes were still the old */
} fence_watch;

typedef struct {
    fence_watch w[64];
    size_t nw;
    size_t calls;
    const uint8_t *last_p;
    size_t last_n;
} fence_log;

static void on_fence(void *ctx, const uint8_t *p, size_t n)
{
    fence_log *l = ctx;
    l->calls++;
    l->last_p = p;
    l->last_n = n;
    for (size_t i = 0; i < l->nw; i++) {
        fence_watch *w = &l->w[i];
        if ((uintptr_t)p < (uintptr_t)(w->p + w->n) &&
            (uintptr_t)w->p < (uintptr_t)(p + n) && !w->fenced) {
            w->fenced = true;
            w->intact_at_fence = memcmp(w->p, w->copy, w->n) == 0;
        }
    }
}

/* Every byte a read returned that a later write changes was announced to
 * the fence before it changed: wrap the ring over packets already read. */
TBT_RING_TEST(test_fence_precedes_overwrite_of_read_packets)
{
    static fence_log l;
    memset(&l, 0, sizeof(l));
    for (uint32_t id = 0; id < 8; id++)
        tbt_put1(b, 1, 1, id, 0, 40, (uint8_t)('a' + id));
    tb_begin_read(b);
    tb_packet pkt;
    tb_seq_props props;
    uint32_t dropped;
    while (l.nw < 64 && tb_read_next_packet(b, &pkt, &props, &dropped)) {
        ck_assert_uint_eq(pkt.nslices, 1);
        fence_watch *w = &l.w[l.nw++];
        w->p = pkt.slices[0].data;
        w->n = pkt.slices[0].size;
        ck_assert_uint_le(w->n, sizeof(w->copy));
        memcpy(w->copy, w->p, w->n);
    }
    ck_assert_uint_eq(l.nw, 8);
    tb_set_write_fence(b, on_fence, &l);
    /* 4096-byte ring, 64-byte records: 70 more laps it twice */
    for (uint32_t id = 8; id < 78; id++)
        tbt_put1(b, 1, 1, id, 0, 40, (uint8_t)('A' + id % 26));
    ck_assert_uint_gt(l.calls, 0);
    size_t changed = 0;
    for (size_t i = 0; i < l.nw; i++) {
        const fence_watch *w = &l.w[i];
        if (memcmp(w->p, w->copy, w->n) == 0)
            continue;
        changed++;
        ck_assert_msg(w->fenced, "packet %zu changed without a fence", i);
        ck_assert_msg(w->intact_at_fence,
                      "packet %zu changed before its fence", i);
    }
    ck_assert_uint_eq(changed, 8);   /* every one was overwritten */
    /* removed: no more calls */
    tb_set_write_fence(b, NULL, NULL);
    size_t calls = l.calls;
    tbt_put1(b, 1, 1, 78, 0, 40, 'z');
    ck_assert_uint_eq(l.calls, calls);
}

/* A patch announces exactly the 4 bytes it stores. */
TBT_RING_TEST(test_fence_covers_a_patch)
{
    static fence_log l;
    memset(&l, 0, sizeof(l));
    tbt_put1(b, 2, 1, 0, 0, 9, 'b'); /* payload: [09] b0 .. b8 */
    tb_set_write_fence(b, on_fence, &l);
    tb_patch p = mkpatch(5, "YMCA");
    ck_assert(tb_try_patch_chunk(b, 2, 1, 0, &p, 1, false));
    ck_assert_uint_eq(l.calls, 1);
    ck_assert_uint_eq(l.last_n, 4);
    tb_begin_read(b);
    tb_packet pkt;
    tb_seq_props props;
    uint32_t dropped;
    ck_assert(tb_read_next_packet(b, &pkt, &props, &dropped));
    /* payload offset 5 = packet byte 4 (after the 1-byte size) */
    ck_assert_ptr_eq(l.last_p, pkt.slices[0].data + 4);
    ck_assert_mem_eq(l.last_p, "YMCA", 4);
}

static Suite *tb_patch_suite(void)
{
    Suite *s = suite_create("tb_patch");
    TCK_CASE(s, "lookup", test_patch_applies_bytes_at_payload_offset,
             test_patch_missing_sequence_or_chunk_fails,
             test_patch_lookup_after_wrap_and_ooo);
    TCK_CASE(s, "bounds", test_patch_at_both_ends_of_a_chunk,
             test_patch_bounds_checked,
             test_patch_failed_batch_keeps_earlier_patches);
    TCK_CASE(s, "stall", test_patch_pending_stalls_only_its_sequence,
             test_patch_needed_in_middle_chunk_stalls_reassembly,
             test_patch_stall_released_by_overwrite,
             test_patch_zero_patches_clears_flag);
    TCK_CASE(s, "fence", test_fence_precedes_overwrite_of_read_packets,
             test_fence_covers_a_patch);
    return s;
}

TCK_MAIN(tb_patch_suite)
