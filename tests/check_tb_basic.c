/*
 * check_tb_basic.c - libbuf: creation, the basic copy/read path, ring
 * wrap-around and DISCARD (spec trace-buffer.md §1, §2, §4, §7).
 */
#include <errno.h>
#include <stdlib.h>

#include "tb_testutil.h"
#include "tb_int.h"

/* --- create ------------------------------------------------------------ */

START_TEST(test_create_rounds_up_to_page)
{
    tb_buffer *b = tb_create(1, TB_RING_BUFFER);
    ck_assert_ptr_nonnull(b);
    ck_assert_uint_eq(tb_size(b), 4096);
    ck_assert_uint_eq(TBT_STAT(b, buffer_size), 4096);
    ck_assert_uint_eq(tb_used_size(b), 0);
    ck_assert_int_eq(tb_policy(b), TB_RING_BUFFER);
    tb_destroy(b);
    b = tb_create(4097, TB_DISCARD);
    ck_assert_uint_eq(tb_size(b), 8192);
    ck_assert_int_eq(tb_policy(b), TB_DISCARD);
    tb_destroy(b);
}
END_TEST

START_TEST(test_create_rejects_zero_and_huge)
{
    errno = 0;
    ck_assert_ptr_null(tb_create(0, TB_RING_BUFFER));
    ck_assert_int_eq(errno, EINVAL);
    errno = 0;
    ck_assert_ptr_null(tb_create(((size_t)4 << 30) + 1, TB_RING_BUFFER));
    ck_assert_int_eq(errno, EINVAL);
    tb_destroy(NULL); /* no-op */
}
END_TEST

TBT_RING_TEST(test_create_empty_buffer_reads_nothing)
{
    tb_begin_read(b);
    tb_packet pkt;
    ck_assert(!tb_read_next_packet(b, &pkt, NULL, NULL));
    ck_assert(!tb_read_next_packet(b, &pkt, NULL, NULL));
}

/* --- read -------------------------------------------------------------- */

TBT_RING_TEST(test_read_single_chunk_packets_in_order)
{
    uint32_t sizes[] = {10, 200, 1, 127};
    tbt_commit_sizes(b, 7, 100, 0, sizes, 4, 0x10);
    tbt_pkts ps = tbt_read_all(b);
    ck_assert_uint_eq(ps.n, 4);
    for (size_t i = 0; i < 4; i++) {
        ck_assert_uint_eq(ps.p[i].size, sizes[i]);
        ck_assert_uint_eq(ps.p[i].nslices, 1);
        ck_assert(tbt_pattern_ok(ps.p[i].data, sizes[i],
                                 (uint8_t)(0x10 + i)));
        ck_assert_uint_eq(ps.p[i].props.producer_id, 1);
        ck_assert_uint_eq(ps.p[i].props.writer_id, 7);
        ck_assert_uint_eq(ps.p[i].props.uid, 1000);
        ck_assert_int_eq(ps.p[i].props.pid, 42);
        ck_assert_uint_eq(ps.p[i].loss, 0);
    }
    tbt_free(&ps);
    /* Reads are destructive. */
    ck_assert_uint_eq(tbt_read_count(b), 0);
    const tb_stats *st = tb_get_stats(b);
    ck_assert_uint_eq(st->chunks_written, 1);
    ck_assert_uint_eq(st->chunks_read, 1);
    ck_assert_uint_eq(st->bytes_written, st->bytes_read);
}

TBT_RING_TEST(test_read_record_size_is_fragments_aligned_to_16)
{
    tbt_chunk c;
    tbt_reset(&c);
    tbt_frag(&c, 10, 1);              /* 11 bytes of fragments */
    memset(c.data + c.size, 0xEE, 50); /* garbage after the fragments */
    c.size += 50;
    tbt_commit(b, 1, 1, 0, &c);
    ck_assert_uint_eq(TBT_STAT(b, bytes_written), 32); /* 16 + 11 -> 32 */
    ck_assert_uint_eq(tb_used_size(b), 32);
    ck_assert_uint_eq(TBT_STAT(b, abi_violations), 0);
}

TBT_RING_TEST(test_read_null_props_and_loss)
{
    uint32_t sizes[] = {5};
    tbt_commit_sizes(b, 1, 1, 0, sizes, 1, 0);
    tb_begin_read(b);
    tb_packet pkt;
    ck_assert(tb_read_next_packet(b, &pkt, NULL, NULL));
    ck_assert_uint_eq(pkt.size, 5);
    ck_assert(!tb_read_next_packet(b, &pkt, NULL, NULL));
}

TBT_RING_TEST(test_read_empty_packets_skipped)
{
    uint32_t sizes[] = {0, 3, 0, 0, 4, 0};
    tbt_commit_sizes(b, 1, 1, 0, sizes, 6, 0);
    tbt_pkts ps = tbt_read_all(b);
    ck_assert_uint_eq(ps.n, 2);
    ck_assert_uint_eq(ps.p[0].size, 3);
    ck_assert_uint_eq(ps.p[1].size, 4);
    tbt_free(&ps);
    ck_assert_uint_eq(TBT_STAT(b, chunks_read), 1);
}

TBT_RING_TEST(test_read_two_sequences_buffer_order)
{
    uint32_t one[] = {8};
    tbt_commit_sizes(b, 1, 1, 0, one, 1, 1); /* A1 */
    tbt_commit_sizes(b, 2, 1, 0, one, 1, 2); /* B1 */
    tbt_commit_sizes(b, 1, 2, 0, one, 1, 3); /* A2 */
    tbt_commit_sizes(b, 2, 2, 0, one, 1, 4); /* B2 */
    tbt_pkts ps = tbt_read_all(b);
    ck_assert_uint_eq(ps.n, 4);
    for (size_t i = 0; i < 4; i++)
        ck_assert_uint_eq(ps.p[i].data[0], (uint8_t)(i + 1));
    ck_assert_uint_eq(ps.p[0].props.writer_id, 1);
    ck_assert_uint_eq(ps.p[1].props.writer_id, 2);
    tbt_free(&ps);
}

/* A sequence stalls (its packet continues in a chunk not yet committed)
 * while two others go on, a pass after each of their chunks: each pass
 * reads the new packet without stepping again over every record read
 * since the stall (the read resume: a few records a pass, where stepping
 * from the floor would take some PASSES^2 / 2 in all); every packet comes
 * once, from its writer; the stalled one comes whole once its end is in,
 * and then the floor is past it all. */
START_TEST(test_read_resumes_past_a_stalled_sequence)
{
    enum { PASSES = 200 };
    tb_buffer *b = tb_create(1 << 20, TB_RING_BUFFER);
    tbt_put(b, 1, 9, 0, TB_F2, (uint32_t[]){10, 20}, "ab");
    tbt_pkts ps = tbt_read_all(b);
    ck_assert_uint_eq(ps.n, 1);                  /* 'a'; 'b' waits */
    ck_assert(tbt_pkt_is1(&ps.p[0], 10, 'a'));
    tbt_free(&ps);
    uint64_t v0 = b->rd_visits;
    for (uint32_t i = 0; i < PASSES; i++) {
        uint16_t w = (uint16_t)(1 + i % 2);
        tbt_put1(b, 1, w, i / 2, 0, 100, (uint8_t)(i + 1));
        ps = tbt_read_all(b);
        ck_assert_uint_eq(ps.n, 1);
        ck_assert(tbt_pkt_is1(&ps.p[0], 100, (uint8_t)(i + 1)));
        ck_assert_uint_eq(ps.p[0].props.writer_id, w);
        ck_assert_uint_eq(ps.p[0].loss, 0);
        tbt_free(&ps);
    }
    ck_assert_uint_lt(b->rd_visits - v0, 4 * PASSES);
    tbt_put(b, 1, 9, 1, TB_F1, (uint32_t[]){30}, "b");
    ps = tbt_read_all(b);
    ck_assert_uint_eq(ps.n, 1);
    ck_assert_uint_eq(ps.p[0].size, 50);
    ck_assert_uint_eq(ps.p[0].data[0], 'b');
    ck_assert_uint_eq(ps.p[0].props.writer_id, 9);
    ck_assert_uint_eq(ps.p[0].loss, 0);
    tbt_free(&ps);
    tbt_put1(b, 1, 1, PASSES / 2, 0, 100, 7);
    v0 = b->rd_visits;
    ps = tbt_read_all(b);
    ck_assert_uint_eq(ps.n, 1);
    ck_assert(tbt_pkt_is1(&ps.p[0], 100, 7));
    ck_assert_uint_le(b->rd_visits - v0, 3);     /* from the floor */
    tbt_free(&ps);
    tb_destroy(b);
}
END_TEST

START_TEST(test_read_past_many_empty_records)
{
    tb_buffer *b = tb_create(8192, TB_RING_BUFFER);
    tbt_chunk c;
    tbt_reset(&c);
    for (uint32_t id = 0; id < 400; id++) /* 400 x 16-byte records */
        tb_copy_chunk_untrusted(b, 1, 0, 0, (uint16_t)(1 + id % 3), id / 3,
                                0, 0, true, c.data, 0);
    uint32_t one[] = {8};
    tbt_commit_sizes(b, 9, 0, 0, one, 1, 7);
    ck_assert_uint_eq(tb_used_size(b), 400 * 16 + 32);
    tbt_pkts ps = tbt_read_all(b);
    ck_assert_uint_eq(ps.n, 1);
    ck_assert_uint_eq(ps.p[0].data[0], 7);
    tbt_free(&ps);
    tb_destroy(b);
}
END_TEST

TBT_RING_TEST(test_read_interleaved_with_writes)
{
    uint32_t one[] = {8};
    for (uint32_t id = 1; id <= 5; id++) {
        tbt_commit_sizes(b, 1, id, 0, one, 1, (uint8_t)id);
        tbt_pkts ps = tbt_read_all(b);
        ck_assert_uint_eq(ps.n, 1);
        ck_assert_uint_eq(ps.p[0].data[0], (uint8_t)id);
        ck_assert_uint_eq(ps.p[0].loss, 0);
        tbt_free(&ps);
    }
}

/* --- ring -------------------------------------------------------------- */

/* One fragment of `size` bytes with a 4-byte header (tbt_commit). */
static void commit_frag4(tb_buffer *b, uint16_t w, uint32_t id,
                         uint32_t size, uint8_t seed)
{
    static tbt_chunk c;
    tbt_reset(&c);
    tbt_frag4(&c, size, seed);
    tbt_commit(b, w, id, 0, &c);
}

/* 4096-byte buffer, chunks of 1000 fragment bytes -> outer 1024: four fit. */
static void commit_kb(tb_buffer *b, uint16_t w, uint32_t id, uint8_t seed)
{
    commit_frag4(b, w, id, 996, seed);
}

TBT_RING_TEST(test_ring_exact_fill_then_wrap_overwrites_oldest)
{
    for (uint32_t id = 1; id <= 4; id++)
        commit_kb(b, 1, id, (uint8_t)id);
    ck_assert_uint_eq(TBT_STAT(b, write_wrap_count), 0);
    ck_assert_uint_eq(tb_used_size(b), 4096);
    commit_kb(b, 1, 5, 5);
    ck_assert_uint_eq(TBT_STAT(b, write_wrap_count), 1);
    ck_assert_uint_eq(TBT_STAT(b, chunks_overwritten), 1);
    ck_assert_uint_eq(TBT_STAT(b, bytes_overwritten), 1024);
    tbt_pkts ps = tbt_read_all(b);
    ck_assert_uint_eq(ps.n, 4);
    for (size_t i = 0; i < 4; i++)
        ck_assert_uint_eq(ps.p[i].data[0], (uint8_t)(i + 2));
    ck_assert_uint_eq(ps.p[0].loss, TB_LOSS_PRESENT | TB_LOSS_OVERWRITE);
    for (size_t i = 1; i < 4; i++)
        ck_assert_uint_eq(ps.p[i].loss, 0);
    tbt_free(&ps);
}

TBT_RING_TEST(test_ring_many_laps_keeps_newest)
{
    for (uint32_t id = 1; id <= 103; id++)
        commit_kb(b, 1, id, (uint8_t)id);
    tbt_pkts ps = tbt_read_all(b);
    ck_assert_uint_eq(ps.n, 4);
    for (size_t i = 0; i < 4; i++)
        ck_assert_uint_eq(ps.p[i].data[0], (uint8_t)(100 + i));
    ck_assert_uint_eq(ps.p[0].loss, TB_LOSS_PRESENT | TB_LOSS_OVERWRITE);
    tbt_free(&ps);
    ck_assert_uint_eq(TBT_STAT(b, chunks_overwritten), 99);
    ck_assert_uint_eq(TBT_STAT(b, chunks_written), 103);
}

TBT_RING_TEST(test_ring_partial_overlap_leaves_padding)
{
    for (uint32_t id = 1; id <= 4; id++)
        commit_kb(b, 1, id, (uint8_t)id);
    /* 4 + 1516 fragment bytes: outer 1536 covers record 1 and half of 2. */
    commit_frag4(b, 2, 1, 1516, 9);
    ck_assert_uint_eq(TBT_STAT(b, chunks_overwritten), 2);
    ck_assert_uint_eq(TBT_STAT(b, padding_bytes_written), 512);
    tbt_pkts ps = tbt_read_all(b);
    ck_assert_uint_eq(ps.n, 3);
    ck_assert_uint_eq(ps.p[0].data[0], 3);
    ck_assert_uint_eq(ps.p[0].loss, TB_LOSS_PRESENT | TB_LOSS_OVERWRITE);
    ck_assert_uint_eq(ps.p[1].data[0], 4);
    ck_assert_uint_eq(ps.p[2].data[0], 9);
    ck_assert_uint_eq(ps.p[2].props.writer_id, 2);
    ck_assert_uint_eq(ps.p[2].loss, 0);
    tbt_free(&ps);
}

TBT_RING_TEST(test_ring_overwrite_of_read_chunks_is_no_loss)
{
    for (uint32_t id = 1; id <= 4; id++)
        commit_kb(b, 1, id, (uint8_t)id);
    ck_assert_uint_eq(tbt_read_count(b), 4);
    commit_kb(b, 1, 5, 5);
    ck_assert_uint_eq(TBT_STAT(b, chunks_overwritten), 0);
    ck_assert_uint_eq(TBT_STAT(b, padding_bytes_cleared), 1024);
    tbt_pkts ps = tbt_read_all(b);
    ck_assert_uint_eq(ps.n, 1);
    ck_assert_uint_eq(ps.p[0].loss, 0);
    tbt_free(&ps);
}

TBT_RING_TEST(test_ring_chunk_larger_than_buffer_rejected)
{
    commit_frag4(b, 1, 1, 4080, 1); /* 4084 + 16 > 4096 */
    ck_assert_uint_eq(TBT_STAT(b, abi_violations), 1);
    ck_assert_uint_eq(TBT_STAT(b, chunks_written), 0);
    commit_frag4(b, 1, 1, 4076, 1); /* exactly 4096 */
    ck_assert_uint_eq(TBT_STAT(b, chunks_written), 1);
    ck_assert_uint_eq(tbt_read_count(b), 1);
}

/* --- discard ----------------------------------------------------------- */

START_TEST(test_discard_stops_at_end_even_if_read)
{
    tb_buffer *b = tb_create(4096, TB_DISCARD);
    for (uint32_t id = 1; id <= 4; id++)
        commit_kb(b, 1, id, (uint8_t)id);
    ck_assert_uint_eq(tbt_read_count(b), 4);
    commit_kb(b, 1, 5, 5);
    commit_kb(b, 1, 6, 6);
    ck_assert_uint_eq(TBT_STAT(b, chunks_discarded), 2);
    ck_assert_uint_eq(TBT_STAT(b, write_wrap_count), 0);
    ck_assert_uint_eq(tbt_read_count(b), 0);
    tb_destroy(b);
}
END_TEST

START_TEST(test_discard_small_chunk_after_stop_also_dropped)
{
    tb_buffer *b = tb_create(4096, TB_DISCARD);
    for (uint32_t id = 1; id <= 3; id++)
        commit_kb(b, 1, id, (uint8_t)id);
    commit_frag4(b, 1, 4, 1496, 9); /* does not fit in the last 1024 */
    uint32_t one[] = {8};
    tbt_commit_sizes(b, 1, 5, 0, one, 1, 5); /* would fit, stopped */
    ck_assert_uint_eq(TBT_STAT(b, chunks_discarded), 2);
    ck_assert_uint_eq(tbt_read_count(b), 3);
    tb_destroy(b);
}
END_TEST

/* --- writer histogram ------------------------------------------------ */

static void commit_f(tb_buffer *b, uint16_t p, uint16_t w, uint32_t id,
                     uint32_t frag_bytes)
{
    static tbt_chunk c;
    tbt_reset(&c);
    tbt_frag4(&c, frag_bytes - 4, 1); /* F = frag_bytes */
    tb_copy_chunk_untrusted(b, p, 0, 0, w, id, 1, 0, true, c.data, c.size);
}

START_TEST(test_hist_buckets_per_writer)
{
    tb_buffer *b = tb_create(1 << 20, TB_RING_BUFFER);
    size_t n = 99;
    ck_assert_ptr_null(tb_get_writer_stats(b, &n));
    ck_assert_uint_eq(n, 0);
    commit_f(b, 1, 1, 0, 8);     /* bucket 0: <= 8 */
    commit_f(b, 1, 1, 1, 9);     /* bucket 1: (8, 32] */
    commit_f(b, 1, 1, 2, 32);    /* bucket 1 */
    commit_f(b, 1, 1, 3, 16384); /* bucket 9: (12288, 16384] */
    commit_f(b, 1, 1, 4, 16385); /* bucket 10: overflow */
    commit_f(b, 2, 7, 0, 4096);  /* another writer: bucket 6 */
    commit_f(b, 1, 1, 0, 100);   /* stale (discarded) still sampled: 2 */
    tbt_chunk c;
    tbt_reset(&c);
    tb_copy_chunk_untrusted(b, 1, 0, 0, 1, 9, 0, 0, true, c.data, 0);
    const tb_writer_stats *h = tb_get_writer_stats(b, &n);
    ck_assert_uint_eq(n, 2);
    ck_assert_uint_eq(h[0].producer_id, 1);
    ck_assert_uint_eq(h[0].writer_id, 1);
    ck_assert_uint_eq(h[0].count[0], 2); /* 8 and the empty chunk (0) */
    ck_assert_uint_eq(h[0].sum[0], 8);
    ck_assert_uint_eq(h[0].count[1], 2);
    ck_assert_uint_eq(h[0].sum[1], 41);
    ck_assert_uint_eq(h[0].count[2], 1); /* (32, 128] */
    ck_assert_uint_eq(h[0].count[9], 1);
    ck_assert_uint_eq(h[0].sum[9], 16384);
    ck_assert_uint_eq(h[0].count[10], 1);
    ck_assert_uint_eq(h[1].producer_id, 2);
    ck_assert_uint_eq(h[1].writer_id, 7);
    ck_assert_uint_eq(h[1].count[6], 1);
    /* too large for the buffer: rejected before the sample */
    tb_buffer *small = tb_create(4096, TB_RING_BUFFER);
    commit_f(small, 1, 1, 0, 8000);
    ck_assert_ptr_null(tb_get_writer_stats(small, &n));
    tb_buffer *snap = tb_clone_readonly(b);
    ck_assert_ptr_null(tb_get_writer_stats(snap, &n)); /* not cloned */
    tb_destroy(snap);
    tb_destroy(small);
    tb_destroy(b);
}
END_TEST

/* Reading in passes between writes of every size (the service reads in
 * steps): each pass yields exactly the records written since the last one
 * that were not lapped, whole and in order, although tb_begin_read starts
 * at the read floor left by the previous pass (tb_int.h) and writes of
 * other sizes overwrite it, from a fraction of a lap to several laps. */
TBT_RING_TEST(test_read_passes_start_at_the_floor_and_writes_move_it)
{
    enum { ROUNDS = 400, MAXK = 40 };
    static uint32_t outer[ROUNDS * MAXK];
    uint32_t id = 0, lcg = 12345;
    for (int round = 0; round < ROUNDS; round++) {
        lcg = lcg * 1103515245u + 12345u;
        uint32_t k = (lcg >> 16) % (round % 5 == 4 ? MAXK : 12);
        uint64_t ovw = TBT_STAT(b, chunks_overwritten);
        uint32_t first = id;
        for (uint32_t i = 0; i < k; i++, id++) {
            lcg = lcg * 1103515245u + 12345u;
            outer[id] = 16u * (3 + (lcg >> 16) % 30);   /* 48..512 */
            tbt_put_outer(b, 1, 1, id, outer[id], (uint8_t)(1 + id % 250));
        }
        uint32_t lapped = (uint32_t)(TBT_STAT(b, chunks_overwritten) - ovw);
        ck_assert_uint_le(lapped, k);
        tbt_pkts ps = tbt_read_all(b);
        ck_assert_uint_eq(ps.n, k - lapped);
        for (size_t i = 0; i < ps.n; i++) {
            uint32_t rid = first + lapped + (uint32_t)i;
            ck_assert(tbt_pkt_is1(&ps.p[i], outer[rid] - 20,
                                  (uint8_t)(1 + rid % 250)));
        }
        tbt_free(&ps);
    }
}


/* Sum of a writer's histogram counts and of its sums, all buckets. */
static void hist_totals(const tb_writer_stats *h, uint64_t *count,
                        uint64_t *sum)
{
    *count = *sum = 0;
    for (int i = 0; i < TB_HIST_BUCKETS; i++) {
        *count += h->count[i];
        *sum += h->sum[i];
    }
}

/* Every sample shows in tb_get_writer_stats: queried between samples of
 * one bucket, after a bucket change, interleaved with another writer, and
 * after GC deleted the sequences (entries outlive them). */
START_TEST(test_hist_runs_reach_the_stats)
{
    tb_buffer *b = tb_create(1 << 20, TB_RING_BUFFER);
    size_t n;
    uint32_t id = 0;
    for (int i = 0; i < 5; i++)
        commit_f(b, 1, 1, id++, 4096); /* bucket 6 */
    const tb_writer_stats *h = tb_get_writer_stats(b, &n);
    ck_assert_uint_eq(n, 1);
    ck_assert_uint_eq(h[0].count[6], 5);
    ck_assert_uint_eq(h[0].sum[6], 5 * 4096);
    for (int i = 0; i < 3; i++)
        commit_f(b, 1, 1, id++, 4000); /* bucket 6 again */
    commit_f(b, 1, 1, id++, 100);      /* bucket 2 */
    commit_f(b, 2, 9, 0, 100);         /* another writer in between */
    commit_f(b, 1, 1, id++, 4096);
    commit_f(b, 1, 1, id++, 4096);
    h = tb_get_writer_stats(b, &n);
    ck_assert_uint_eq(n, 2);
    ck_assert_uint_eq(h[0].count[6], 10);
    ck_assert_uint_eq(h[0].sum[6], 7 * 4096 + 3 * 4000);
    ck_assert_uint_eq(h[0].count[2], 1);
    ck_assert_uint_eq(h[0].sum[2], 100);
    ck_assert_uint_eq(h[1].count[2], 1);
    tb_destroy(b);

    /* 1200 writers, one chunk each, read (empty), then GC deletes most
     * sequences; half the writers come back as new sequences. */
    b = tb_create(1 << 20, TB_RING_BUFFER);
    for (uint32_t w = 1; w <= 1200; w++)
        commit_f(b, 1, (uint16_t)w, 0, 64);
    tbt_read_count(b);
    commit_f(b, 2, 1, 0, 64); /* more than 1152 empty: GC runs */
    ck_assert_uint_lt(tb__num_sequences(b), 1200);
    for (uint32_t w = 1; w <= 1200; w += 2) /* again: new sequences */
        commit_f(b, 1, (uint16_t)w, 1, 64);
    h = tb_get_writer_stats(b, &n);
    ck_assert_uint_eq(n, 1201);
    for (uint32_t w = 1; w <= 1200; w++) {
        uint64_t count, sum;
        ck_assert_uint_eq(h[w - 1].writer_id, w);
        hist_totals(&h[w - 1], &count, &sum);
        ck_assert_uint_eq(count, (w % 2) ? 2u : 1u);
        ck_assert_uint_eq(sum, 64 * count);
        ck_assert_uint_eq(h[w - 1].count[2], count);
    }
    tb_destroy(b);
}
END_TEST

/* --- growable arrays ---------------------------------------------------- */

START_TEST(test_grow_doubles_and_refuses_overflow)
{
    size_t cap = 0;
    uint32_t *a = tb__grow(NULL, &cap, 1, sizeof(*a), 16);
    ck_assert_ptr_nonnull(a);
    ck_assert_uint_eq(cap, 16);          /* first size */
    for (uint32_t i = 0; i < 16; i++)
        a[i] = i;
    ck_assert_ptr_eq(tb__grow(a, &cap, 16, sizeof(*a), 16), a);
    ck_assert_uint_eq(cap, 16);          /* enough: untouched */
    a = tb__grow(a, &cap, 17, sizeof(*a), 16);
    ck_assert_ptr_nonnull(a);
    ck_assert_uint_eq(cap, 32);          /* doubled */
    a = tb__grow(a, &cap, 200, sizeof(*a), 16);
    ck_assert_ptr_nonnull(a);
    ck_assert_uint_eq(cap, 256);         /* doubled until it holds 200 */
    for (uint32_t i = 0; i < 16; i++)    /* the contents moved along */
        ck_assert_uint_eq(a[i], i);
    /* Sizes past size_t: NULL, nothing changed. */
    ck_assert_ptr_null(tb__grow(a, &cap, SIZE_MAX, sizeof(*a), 16));
    ck_assert_uint_eq(cap, 256);
    ck_assert_ptr_null(tb__grow(a, &cap, SIZE_MAX / 2, sizeof(*a), 16));
    ck_assert_uint_eq(cap, 256);
    ck_assert_uint_eq(a[15], 15);
    free(a);
}
END_TEST

static Suite *tb_basic_suite(void)
{
    Suite *s = suite_create("tb_basic");
    TCK_CASE(s, "create", test_create_rounds_up_to_page,
             test_create_rejects_zero_and_huge,
             test_create_empty_buffer_reads_nothing);
    TCK_CASE(s, "read", test_read_single_chunk_packets_in_order,
             test_read_record_size_is_fragments_aligned_to_16,
             test_read_null_props_and_loss, test_read_empty_packets_skipped,
             test_read_two_sequences_buffer_order,
             test_read_interleaved_with_writes,
             test_read_past_many_empty_records,
             test_read_resumes_past_a_stalled_sequence);
    TCK_CASE(s, "ring", test_ring_exact_fill_then_wrap_overwrites_oldest,
             test_ring_many_laps_keeps_newest,
             test_ring_partial_overlap_leaves_padding,
             test_ring_overwrite_of_read_chunks_is_no_loss,
             test_ring_chunk_larger_than_buffer_rejected,
             test_read_passes_start_at_the_floor_and_writes_move_it);
    TCK_CASE(s, "histogram", test_hist_buckets_per_writer,
             test_hist_runs_reach_the_stats);
    TCK_CASE(s, "grow", test_grow_doubles_and_refuses_overflow);
    TCK_CASE(s, "discard", test_discard_stops_at_end_even_if_read,
             test_discard_small_chunk_after_stop_also_dropped);
    return s;
}

TCK_MAIN(tb_basic_suite)
