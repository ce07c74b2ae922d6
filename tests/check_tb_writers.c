/*
 * check_tb_writers.c - libbuf: the per-writer tables stay bounded while
 * producers come and go (trace_buffer.h: TB_HIST_MAX_WRITERS,
 * TB_LOSS_MAX_WRITERS).
 *
 * A producer id is new on every connection and a producer may use 32767
 * writer ids, so keys (producer << 16 | writer) keep coming for the whole
 * life of a buffer. The histogram (tb_get_writer_stats) and loss
 * (tb_get_seq_loss) entries are never dropped: past the bound, writers
 * share one overflow entry (producer 0, writer 0) whose counts are theirs
 * together, and hist_chunks_untracked counts the histogram samples it
 * took. Before the bound, a buffer kept one entry per key ever seen: 12 MiB
 * of heap per hostile producer round (32767 writers), forever.
 *
 * Also checked here: the sequence table, which is garbage-collected, does
 * not grow past what the ring holds plus the empty sequences GC keeps,
 * and the heap it takes then stays under 20 times the ring;
 * and honest use (hundreds of writers) sees no overflow entry at all.
 */
#include <malloc.h>

#include "tb_testutil.h"
#include "tb_int.h"

#define MAX_WRITER 32767u

static tbt_chunk c;

/* One complete chunk of (p, w) with one 8-byte packet: F = 9, outer 32. */
static void chunk9(tb_buffer *b, uint16_t p, uint16_t w, uint32_t id)
{
    tbt_reset(&c);
    tbt_frag(&c, 8, (uint8_t)w);
    tb_copy_chunk_untrusted(b, p, 1000, 42, w, id, c.nfrags, 0, true,
                            c.data, c.size);
}

static uint64_t hist_count(const tb_writer_stats *h)
{
    uint64_t n = 0;
    for (int i = 0; i < TB_HIST_BUCKETS; i++)
        n += h->count[i];
    return n;
}

static uint64_t hist_sum(const tb_writer_stats *h)
{
    uint64_t n = 0;
    for (int i = 0; i < TB_HIST_BUCKETS; i++)
        n += h->sum[i];
    return n;
}

static bool is_overflow_key(uint16_t p, uint16_t w)
{
    return p == 0 && w == 0;
}

/* Checks the loss identity of every entry (the aggregate's as a whole),
 * that only the last entry may be the aggregate, and returns the sums of
 * packets_offered and packets_read; *nout = entries. */
static uint64_t loss_totals(tb_buffer *b, size_t *nout, uint64_t *read)
{
    size_t n = 0;
    const tb_seq_loss *l = tb_get_seq_loss(b, &n);
    uint64_t offered = 0;
    *read = 0;
    for (size_t i = 0; i < n; i++) {
        uint64_t lost = 0;
        for (int k = 0; k < TB_NUM_CAUSES; k++)
            lost += l[i].lost_packets[k];
        ck_assert_uint_eq(l[i].packets_offered,
                          l[i].packets_read + l[i].packets_pending + lost);
        if (is_overflow_key(l[i].producer_id, l[i].writer_id))
            ck_assert_uint_eq(i, n - 1);
        offered += l[i].packets_offered;
        *read += l[i].packets_read;
    }
    *nout = n;
    return offered;
}

/* The attack of the review: producers 1..3 each commit one chunk for every
 * writer id, as a producer that reconnects would. Old code: 98301
 * histogram and loss entries. */
START_TEST(test_writers_producer_churn_is_bounded)
{
    enum { ROUNDS = 3 };
    const size_t ring = 256u << 10;
    tb_buffer *b = tb_create(ring, TB_RING_BUFFER);
    ck_assert_ptr_nonnull(b);
    uint64_t chunks = 0;
    uint32_t max_seqs = 0;
    for (uint16_t p = 1; p <= ROUNDS; p++) {
        for (uint32_t w = 1; w <= MAX_WRITER; w++, chunks++) {
            chunk9(b, p, (uint16_t)w, 0);
            uint32_t ns = tb__num_sequences(b);
            if (ns > max_seqs)
                max_seqs = ns;
        }
        size_t n;
        ck_assert_ptr_nonnull(tb_get_writer_stats(b, &n));
        ck_assert_uint_le(n, TB_HIST_MAX_WRITERS);
        tb_get_seq_loss(b, &n);
        ck_assert_uint_le(n, TB_LOSS_MAX_WRITERS);
    }
    ck_assert_uint_eq(chunks, ROUNDS * MAX_WRITER);
    /* Sequences: at most one per record the ring holds (32 bytes each)
     * plus the empty ones GC keeps (it runs after every copy). */
    ck_assert_uint_le(max_seqs, ring / 32 + TB__EMPTY_SEQ_GC_THRESHOLD + 1);

    size_t n;
    const tb_writer_stats *h = tb_get_writer_stats(b, &n);
    ck_assert_uint_eq(n, TB_HIST_MAX_WRITERS);
    for (size_t i = 0; i + 1 < n; i++) { /* first seen: producer 1 */
        ck_assert_uint_eq(h[i].producer_id, 1);
        ck_assert_uint_eq(h[i].writer_id, i + 1);
        ck_assert_uint_eq(hist_count(&h[i]), 1);
        ck_assert_uint_eq(h[i].count[1], 1);  /* (8, 32] */
    }
    const tb_writer_stats *ov = &h[n - 1];
    ck_assert(is_overflow_key(ov->producer_id, ov->writer_id));
    uint64_t untracked = chunks - (TB_HIST_MAX_WRITERS - 1);
    ck_assert_uint_eq(hist_count(ov), untracked);
    ck_assert_uint_eq(ov->count[1], untracked);
    ck_assert_uint_eq(hist_sum(ov), 9 * untracked);
    ck_assert_uint_eq(TBT_STAT(b, hist_chunks_untracked), untracked);

    /* A writer with an entry keeps using it; another new one does not. */
    chunk9(b, 1, 5, 1);
    chunk9(b, 4, 1, 0);
    h = tb_get_writer_stats(b, &n);
    ck_assert_uint_eq(n, TB_HIST_MAX_WRITERS);
    ck_assert_uint_eq(hist_count(&h[4]), 2);
    ck_assert_uint_eq(hist_count(&h[n - 1]), untracked + 1);
    ck_assert_uint_eq(TBT_STAT(b, hist_chunks_untracked), untracked + 1);
    chunks += 2;

    /* Loss: the same bound; nothing offered vanished. */
    size_t ready = tbt_read_count(b);
    ck_assert_uint_gt(ready, 0);
    uint64_t read, offered = loss_totals(b, &n, &read);
    ck_assert_uint_eq(n, TB_LOSS_MAX_WRITERS);
    ck_assert_uint_eq(offered, chunks);          /* one packet a chunk */
    ck_assert_uint_eq(read, ready);
    const tb_seq_loss *l = tb_get_seq_loss(b, &n);
    ck_assert(is_overflow_key(l[n - 1].producer_id, l[n - 1].writer_id));
    ck_assert_uint_eq(l[n - 1].packets_offered,
                      chunks - 1 - (TB_LOSS_MAX_WRITERS - 1)); /* 1/5 x2 */
    ck_assert_uint_eq(l[4].writer_id, 5);
    ck_assert_uint_eq(l[4].packets_offered, 2);
    tb_destroy(b);
}
END_TEST

/* The boundary: TB_HIST_MAX_WRITERS - 1 writers fit without an overflow
 * entry; the next one makes it (and gets no entry of its own). */
START_TEST(test_writers_overflow_entry_made_at_the_bound)
{
    tb_buffer *b = tb_create(4u << 20, TB_RING_BUFFER);
    ck_assert_ptr_nonnull(b);
    for (uint32_t w = 1; w < TB_HIST_MAX_WRITERS; w++)
        chunk9(b, 7, (uint16_t)w, 0);
    size_t n, nl;
    const tb_writer_stats *h = tb_get_writer_stats(b, &n);
    ck_assert_uint_eq(n, TB_HIST_MAX_WRITERS - 1);
    ck_assert(!is_overflow_key(h[n - 1].producer_id, h[n - 1].writer_id));
    ck_assert_uint_eq(TBT_STAT(b, hist_chunks_untracked), 0);
    const tb_seq_loss *l = tb_get_seq_loss(b, &nl);
    ck_assert_uint_eq(nl, TB_LOSS_MAX_WRITERS - 1);
    ck_assert(!is_overflow_key(l[nl - 1].producer_id, l[nl - 1].writer_id));

    chunk9(b, 7, TB_HIST_MAX_WRITERS, 0);
    h = tb_get_writer_stats(b, &n);
    ck_assert_uint_eq(n, TB_HIST_MAX_WRITERS);
    ck_assert(is_overflow_key(h[n - 1].producer_id, h[n - 1].writer_id));
    ck_assert_uint_eq(hist_count(&h[n - 1]), 1);
    ck_assert_uint_eq(TBT_STAT(b, hist_chunks_untracked), 1);
    l = tb_get_seq_loss(b, &nl);
    ck_assert_uint_eq(nl, TB_LOSS_MAX_WRITERS);
    ck_assert(is_overflow_key(l[nl - 1].producer_id, l[nl - 1].writer_id));
    ck_assert_uint_eq(l[nl - 1].packets_offered, 1);
    ck_assert_uint_eq(l[nl - 1].packets_pending, 1);
    /* Read back with its own props: only the bookkeeping is shared. */
    tb_begin_read(b);
    tb_packet pkt;
    tb_seq_props props;
    size_t got = 0;
    bool seen = false;
    while (tb_read_next_packet(b, &pkt, &props, NULL)) {
        got++;
        seen |= props.producer_id == 7 &&
                props.writer_id == TB_HIST_MAX_WRITERS;
    }
    ck_assert_uint_eq(got, TB_HIST_MAX_WRITERS);
    ck_assert(seen);
    l = tb_get_seq_loss(b, &nl);
    ck_assert_uint_eq(l[nl - 1].packets_read, 1);
    ck_assert_uint_eq(l[nl - 1].packets_pending, 0);
    tb_destroy(b);
}
END_TEST

/* A clone copies the loss table with its aggregate (refusals of writers
 * without an entry land there) and starts with no histogram, so with no
 * untracked samples either. */
START_TEST(test_writers_clone_keeps_the_aggregate)
{
    tb_buffer *b = tb_create(1u << 20, TB_RING_BUFFER);
    ck_assert_ptr_nonnull(b);
    for (uint32_t w = 1; w <= TB_LOSS_MAX_WRITERS + 10; w++)
        chunk9(b, 3, (uint16_t)w, 0);
    ck_assert_uint_eq(TBT_STAT(b, hist_chunks_untracked), 11);
    tb_buffer *snap = tb_clone_readonly(b);
    ck_assert_ptr_nonnull(snap);
    size_t n;
    ck_assert_ptr_null(tb_get_writer_stats(snap, &n));
    ck_assert_uint_eq(TBT_STAT(snap, hist_chunks_untracked), 0);
    uint64_t read, offered = loss_totals(snap, &n, &read);
    ck_assert_uint_eq(n, TB_LOSS_MAX_WRITERS);
    ck_assert_uint_eq(offered, TB_LOSS_MAX_WRITERS + 10);
    chunk9(snap, 9, 1, 0);      /* refused, no sequence: the aggregate */
    chunk9(snap, 3, 1, 1);      /* refused, has an entry: its own */
    const tb_seq_loss *l = tb_get_seq_loss(snap, &n);
    ck_assert_uint_eq(n, TB_LOSS_MAX_WRITERS);
    ck_assert(is_overflow_key(l[n - 1].producer_id, l[n - 1].writer_id));
    ck_assert_uint_eq(l[n - 1].packets_offered, 12);
    ck_assert_uint_eq(l[n - 1].lost_packets[TB_CAUSE_DISCARD], 1);
    ck_assert_uint_eq(l[0].writer_id, 1);
    ck_assert_uint_eq(l[0].lost_packets[TB_CAUSE_DISCARD], 1);
    offered = loss_totals(snap, &n, &read);
    ck_assert_uint_eq(offered, TB_LOSS_MAX_WRITERS + 12);
    tb_destroy(snap);
    tb_destroy(b);
}
END_TEST

/* Honest use: 3 producers x 100 writers, chunks of every bucket
 * interleaved, read in steps, a ring that wraps: one entry per writer,
 * exact, no overflow entry, nothing untracked. */
START_TEST(test_writers_honest_use_unaffected)
{
    enum { NP = 3, NW = 100, NCHUNK = 40 };
    static const uint32_t sizes[] = {4, 20, 100, 500, 1000, 2000, 4000};
    tb_buffer *b = tb_create(256u << 10, TB_RING_BUFFER);
    ck_assert_ptr_nonnull(b);
    static uint64_t want_sum[NP][NW];
    for (uint32_t id = 0; id < NCHUNK; id++) {
        for (uint16_t p = 0; p < NP; p++)
            for (uint16_t w = 0; w < NW; w++) {
                uint32_t sz = sizes[(id + p + w) % 7];
                tbt_reset(&c);
                tbt_frag(&c, sz, (uint8_t)id);
                tb_copy_chunk_untrusted(b, (uint16_t)(10 + p), 1000, 42,
                                        (uint16_t)(w + 1), id, 1, 0, true,
                                        c.data, c.size);
                want_sum[p][w] += c.size;
            }
        if (id % 8 == 7)
            tbt_read_count(b);
    }
    size_t n;
    const tb_writer_stats *h = tb_get_writer_stats(b, &n);
    ck_assert_uint_eq(n, NP * NW);
    for (size_t i = 0; i < n; i++) {
        ck_assert(!is_overflow_key(h[i].producer_id, h[i].writer_id));
        size_t p = h[i].producer_id - 10u, w = h[i].writer_id - 1u;
        ck_assert_uint_lt(p, NP);
        ck_assert_uint_lt(w, NW);
        ck_assert_uint_eq(hist_count(&h[i]), NCHUNK);
        ck_assert_uint_eq(hist_sum(&h[i]), want_sum[p][w]);
    }
    ck_assert_uint_eq(TBT_STAT(b, hist_chunks_untracked), 0);
    ck_assert_uint_gt(TBT_STAT(b, chunks_overwritten), 0);
    uint64_t read, offered = loss_totals(b, &n, &read);
    ck_assert_uint_eq(n, NP * NW);
    ck_assert_uint_eq(offered, (uint64_t)NP * NW * NCHUNK);
    ck_assert_uint_gt(read, 0);
    const tb_seq_loss *l = tb_get_seq_loss(b, &n);
    for (size_t i = 0; i < n; i++)
        ck_assert(!is_overflow_key(l[i].producer_id, l[i].writer_id));
    tb_destroy(b);
}
END_TEST

/* Heap in use (glibc's arenas and mmapped blocks); 0 where malloc does
 * not report it (sanitizers replace it). */
static size_t heap_in_use(void)
{
    struct mallinfo2 m = mallinfo2();
    return m.uordblks + m.hblkhd;
}

/* What the sequence table costs under the same churn, with empty chunks
 * (the smallest records: 16 bytes, 65,536 in a 1 MiB ring): the heap the
 * buffer takes, ring included, stays under 20 times the ring. Each
 * sequence's ChunkID ring started at 16 entries (256 bytes): 31x then;
 * it starts at 2 now (17x). */
START_TEST(test_writers_sequence_memory_under_churn)
{
    enum { ROUNDS = 4 };
    const size_t ring = 1u << 20;
    void *probe = malloc(1u << 16);
    size_t before_probe = heap_in_use();
    free(probe);
    if (before_probe == 0) {
        fprintf(stderr, "heap not reported by this malloc: memory bound not "
                "checked\n");
        return;
    }
    size_t base = heap_in_use();
    tb_buffer *b = tb_create(ring, TB_RING_BUFFER);
    ck_assert_ptr_nonnull(b);
    static const uint8_t none[1];
    size_t peak = 0;
    for (uint16_t p = 1; p <= ROUNDS; p++) {
        for (uint32_t w = 1; w <= MAX_WRITER; w++)
            tb_copy_chunk_untrusted(b, p, 1000, 42, (uint16_t)w, 0, 0, 0,
                                    true, none, 0);
        size_t now = heap_in_use() - base;
        if (now > peak)
            peak = now;
    }
    ck_assert_uint_ge(tb__num_sequences(b), ring / 16);  /* it filled */
    ck_assert_msg(peak <= 20 * ring, "the buffer took %.1f times its ring",
                  (double)peak / (double)ring);
    tb_destroy(b);
}
END_TEST

static Suite *tb_writers_suite(void)
{
    Suite *s = suite_create("tb_writers");
    TCase *tc = TCK_CASE(s, "bounds",
                         test_writers_producer_churn_is_bounded,
                         test_writers_overflow_entry_made_at_the_bound,
                         test_writers_clone_keeps_the_aggregate,
                         test_writers_sequence_memory_under_churn);
    tcase_set_timeout(tc, 300); /* sanitizer builds: ~100k copies */
    TCK_CASE(s, "honest", test_writers_honest_use_unaffected);
    return s;
}

TCK_MAIN(tb_writers_suite)
