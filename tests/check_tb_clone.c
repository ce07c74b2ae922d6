/*
 * check_tb_clone.c - libbuf: read-only clones (spec trace-buffer.md §11),
 * the eviction callback (ProtoVM hook) and the lazy GC of empty sequences
 * (spec §3).
 */
#include "tb_testutil.h"
#include "tb_int.h"

static tbt_chunk c;

START_TEST(test_clone_reads_from_scratch)
{
    for (int pre = 0; pre < 3; pre++) {
        tb_buffer *b = tb_create(4096, TB_RING_BUFFER);
        for (uint16_t i = 0; i < 3; i++)
            tbt_put1(b, (uint16_t)(i + 1), (uint16_t)(i + 1), i, 0, 15,
                     (uint8_t)('A' + i));
        tb_begin_read(b);
        tb_packet pkt;
        for (int i = 0; i < pre; i++)
            ck_assert(tb_read_next_packet(b, &pkt, NULL, NULL));
        tb_buffer *snap = tb_clone_readonly(b);
        ck_assert_ptr_nonnull(snap);
        ck_assert_uint_eq(tb_used_size(snap), 96);
        ck_assert_uint_eq(tb_size(snap), 4096);
        ck_assert_int_eq(tb_policy(snap), TB_RING_BUFFER);
        tbt_pkts ps = tbt_read_all(snap);
        /* already-consumed packets are not delivered again */
        ck_assert_uint_eq(ps.n, (size_t)(3 - pre));
        for (size_t i = 0; i < ps.n; i++)
            ck_assert_uint_eq(ps.p[i].data[0], (uint8_t)('A' + pre + i));
        tbt_free(&ps);
        /* the original is unaffected by reading the clone */
        ck_assert_uint_eq(tbt_read_count(b), (size_t)(3 - pre));
        tb_destroy(snap);
        tb_destroy(b);
    }
}
END_TEST

TBT_RING_TEST(test_clone_stats_copied_except_read_counters)
{
    tbt_put1(b, 1, 1, 0, TB_F2, 10, 'a');
    tbt_put1(b, 1, 1, 1, TB_F1, 10, 'b');
    tbt_put1(b, 1, 1, 2, 0, 10, 'c');
    tbt_read_count(b);
    tbt_put1(b, 1, 1, 3, 0, 10, 'd');
    tb_buffer *snap = tb_clone_readonly(b);
    const tb_stats *o = tb_get_stats(b), *s = tb_get_stats(snap);
    ck_assert_uint_gt(o->chunks_read, 0);
    ck_assert_uint_gt(o->readaheads_succeeded, 0);
    ck_assert_uint_eq(s->chunks_read, 0);
    ck_assert_uint_eq(s->bytes_read, 0);
    ck_assert_uint_eq(s->readaheads_succeeded, 0);
    ck_assert_uint_eq(s->readaheads_failed, 0);
    ck_assert_uint_eq(s->chunks_written, o->chunks_written);
    ck_assert_uint_eq(s->bytes_written, o->bytes_written);
    ck_assert_uint_eq(s->buffer_size, 4096);
    tbt_pkts ps = tbt_read_all(snap);
    ck_assert_str_eq(tbt_heads(&ps), "d");
    ck_assert_uint_eq(ps.p[0].loss, 0); /* sequence state came along */
    tbt_free(&ps);
    ck_assert_uint_eq(s->chunks_read, 1);
    tb_destroy(snap);
}

TBT_RING_TEST(test_clone_refuses_writes_and_patches)
{
    tbt_put1(b, 1, 1, 0, TB_F4, 10, 'a');
    tb_buffer *snap = tb_clone_readonly(b);
    tbt_put1(snap, 1, 1, 1, 0, 10, 'b');
    ck_assert_uint_eq(TBT_STAT(snap, chunks_discarded), 1);
    tb_patch p = {1, {'x', 'x', 'x', 'x'}};
    ck_assert(!tb_try_patch_chunk(snap, 1, 1, 0, &p, 1, false));
    ck_assert_uint_eq(TBT_STAT(snap, patches_failed), 1);
    ck_assert_uint_eq(TBT_STAT(b, chunks_discarded), 0);
    ck_assert_uint_eq(TBT_STAT(b, patches_failed), 0);
    tbt_pkts ps = tbt_read_all(snap);
    ck_assert_uint_eq(ps.n, 1);
    ck_assert(tbt_pkt_is1(&ps.p[0], 10, 'a'));
    tbt_free(&ps);
    tb_destroy(snap);
}

TBT_RING_TEST(test_clone_of_partial_ooo_and_patched_data)
{
    tbt_put1(b, 1, 1, 0, 0, 10, 'a');
    tbt_put1(b, 1, 1, 2, 0, 30, 'c');
    tbt_put1(b, 2, 1, 0, 0, 9, 'p');
    tb_patch p = {5, {'Y', 'M', 'C', 'A'}};
    ck_assert(tb_try_patch_chunk(b, 2, 1, 0, &p, 1, false));
    tb_buffer *snap = tb_clone_readonly(b);
    tbt_put1(b, 1, 1, 1, 0, 20, 'b');
    tbt_pkts ps = tbt_read_all(snap);
    ck_assert_uint_eq(ps.n, 3);
    ck_assert(tbt_pkt_is1(&ps.p[0], 10, 'a'));
    ck_assert(tbt_pkt_is1(&ps.p[1], 30, 'c')); /* gap: 'b' came later */
    ck_assert_uint_eq(ps.p[1].loss, TB_LOSS_PRESENT | TB_LOSS_READ_GAP);
    ck_assert_mem_eq(ps.p[2].data + 4, "YMCA", 4);
    tbt_free(&ps);
    ps = tbt_read_all(b);
    ck_assert_uint_eq(ps.n, 4);
    ck_assert(tbt_pkt_is1(&ps.p[1], 20, 'b') ||
              tbt_pkt_is1(&ps.p[2], 20, 'b'));
    tbt_free(&ps);
    tb_destroy(snap);
}

START_TEST(test_clone_after_wrap_and_discard_stop)
{
    tb_buffer *b = tb_create(4096, TB_RING_BUFFER);
    for (uint32_t i = 0; i < 10; i++)
        tbt_put1(b, 1, 1, i, 0, 1000, (uint8_t)i);
    tb_buffer *snap = tb_clone_readonly(b);
    tbt_pkts ps = tbt_read_all(snap);
    ck_assert_uint_eq(ps.n, 4);
    ck_assert_uint_eq(ps.p[0].data[0], 6);
    ck_assert_uint_eq(ps.p[0].loss, TB_LOSS_PRESENT | TB_LOSS_OVERWRITE);
    tbt_free(&ps);
    tb_destroy(snap);
    tb_destroy(b);

    b = tb_create(4096, TB_DISCARD);
    for (uint32_t i = 0; i < 10; i++)
        tbt_put1(b, 1, 1, i, 0, 1000, (uint8_t)i);
    snap = tb_clone_readonly(b);
    ck_assert_int_eq(tb_policy(snap), TB_DISCARD);
    ps = tbt_read_all(snap);
    ck_assert_uint_eq(ps.n, 4); /* 4 records of 1024 fill it exactly */
    ck_assert_uint_eq(ps.p[3].data[0], 3);
    tbt_free(&ps);
    ck_assert_uint_eq(TBT_STAT(snap, chunks_discarded), 6);
    tb_destroy(snap);
    tb_destroy(b);
}
END_TEST

/* --- evict callback ---------------------------------------------------- */

typedef struct {
    tbt_pkt p[64];
    size_t n;
} evicted_t;

static void on_evict(void *ctx, const tb_packet *pkt,
                     const tb_seq_props *props)
{
    evicted_t *e = ctx;
    ck_assert_uint_lt(e->n, 64);
    tbt_pkt *o = &e->p[e->n++];
    o->data = malloc(pkt->size + 1);
    size_t pos = 0;
    for (size_t i = 0; i < pkt->nslices; i++) {
        memcpy(o->data + pos, pkt->slices[i].data, pkt->slices[i].size);
        pos += pkt->slices[i].size;
    }
    ck_assert_uint_eq(pos, pkt->size);
    o->size = pkt->size;
    o->nslices = pkt->nslices;
    o->props = *props;
}

/* Chunks id, id + 1 of producer 3, writer 7: [a, begin b] [end B, c],
 * 1024 bytes each (4-byte fragment headers). */
static void put_abc(tb_buffer *b, uint32_t id)
{
    tbt_reset(&c);
    tbt_frag4(&c, 496, 'a');
    tbt_frag4(&c, 500, 'b');
    tbt_commit_ex(b, 3, 7, id, TB_F2, true, &c, 0);
    tbt_reset(&c);
    tbt_frag4(&c, 300, 'B');
    tbt_frag4(&c, 696, 'c');
    tbt_commit_ex(b, 3, 7, id + 1, TB_F1, true, &c, 0);
}

TBT_RING_TEST(test_evict_callback_gets_unread_packets_in_order)
{
    evicted_t ev = {.n = 0};
    tb_set_evict_callback(b, on_evict, &ev);
    /* seq 3: [a, begin b] [end b', c] ... then wrap over the first one */
    put_abc(b, 0);
    tbt_put1(b, 4, 1, 0, 0, 2000, 'x');
    tbt_pkts ps = tbt_read_all(b);
    ck_assert_uint_eq(ps.n, 4); /* a, b+B, c, x */
    tbt_free(&ps);
    ck_assert_uint_eq(ev.n, 0); /* nothing unread was evicted yet */
    put_abc(b, 2);
    tbt_put1(b, 4, 1, 1, 0, 3000, 'y'); /* wraps, evicts [0, 3024): 2 and 3 */
    ck_assert_uint_eq(ev.n, 3);
    ck_assert(tbt_pkt_is1(&ev.p[0], 496, 'a'));
    ck_assert(tbt_pkt_is(&ev.p[1], 2, (uint32_t[]){500, 300},
                         (uint8_t[]){'b', 'B'}));
    ck_assert_uint_eq(ev.p[1].nslices, 2);
    ck_assert_uint_eq(ev.p[0].props.producer_id, 3);
    ck_assert_uint_eq(ev.p[0].props.writer_id, 7);
    ck_assert_uint_eq(ev.p[0].props.uid, 1003);
    ck_assert(tbt_pkt_is1(&ev.p[2], 696, 'c'));
    ck_assert_uint_eq(TBT_STAT(b, chunks_overwritten), 2);
    tbt_expect(b, "y", (uint32_t[]){3000});
    for (size_t i = 0; i < ev.n; i++)
        free(ev.p[i].data);
}

/* --- GC of empty sequences --------------------------------------------- */

START_TEST(test_gc_keeps_newest_1024_empty_sequences)
{
    tb_buffer *b = tb_create(1 << 20, TB_RING_BUFFER);
    for (uint32_t w = 1; w <= 1152; w++)
        tbt_put1(b, 1, (uint16_t)w, 0, 0, 4, 'a');
    /* empties all 1152, oldest first */
    ck_assert_uint_eq(tbt_read_count(b), 1152);
    tbt_put1(b, 2, 1, 0, 0, 4, 'b'); /* 1152 empty: not above the threshold */
    ck_assert_uint_eq(tb__num_sequences(b), 1153);
    tbt_put1(b, 3, 1, 0, 0, 4, 'c');
    tbt_read_count(b); /* now 1154 empty */
    tbt_put1(b, 4, 1, 0, 0, 4, 'd'); /* GC: keep 1024 empty + the non-empty */
    ck_assert_uint_eq(tb__num_sequences(b), 1025);
    /* writer 1 (oldest emptied) was forgotten: stale id accepted, no gap */
    tbt_put1(b, 1, 1, 0, 0, 4, 'e');
    /* writer 1152 (recent) still remembers chunk 0: replay discarded */
    tbt_put1(b, 1, 1152, 0, 0, 4, 'f');
    ck_assert_uint_eq(TBT_STAT(b, chunks_discarded), 1);
    tbt_put1(b, 1, 1151, 5, 0, 4, 'g');
    tbt_pkts ps = tbt_read_all(b);
    ck_assert_str_eq(tbt_heads(&ps), "deg");
    ck_assert_uint_eq(ps.p[1].loss, 0);
    ck_assert_uint_eq(ps.p[2].loss, TB_LOSS_PRESENT | TB_LOSS_READ_GAP);
    tbt_free(&ps);
    tb_destroy(b);
}
END_TEST

static Suite *tb_clone_suite(void)
{
    Suite *s = suite_create("tb_clone");
    TCK_CASE(s, "clone", test_clone_reads_from_scratch,
             test_clone_stats_copied_except_read_counters,
             test_clone_refuses_writes_and_patches,
             test_clone_of_partial_ooo_and_patched_data,
             test_clone_after_wrap_and_discard_stop);
    TCK_CASE(s, "evict_callback",
             test_evict_callback_gets_unread_packets_in_order);
    TCK_CASE(s, "gc", test_gc_keeps_newest_1024_empty_sequences);
    return s;
}

TCK_MAIN(tb_clone_suite)
