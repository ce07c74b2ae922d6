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
 * not grow past what the ring holds plus the empty sequences GC keeps;
 * under churn from one uid it holds TB_MAX_SEQS_PER_UID of that uid's
 * sequences and no more, so the heap stays under 5 times a 1 MiB ring
 * (17x without the bound) and under a 16 MiB one; the chunks refused for
 * it are counted, lost for their writers, flagged on their writers' next
 * packets, and cost other uids nothing (tcase seq_cap); and honest use
 * (hundreds of writers) sees no overflow entry at all.
 */
#include <malloc.h>

#include "tb_testutil.h"
#include "tb_int.h"

#define MAX_WRITER 32767u

static tbt_chunk c;

/* One complete chunk of (p, w) of uid with one 8-byte packet filled from
 * seed w: F = 9, outer 32. */
static void chunk9u(tb_buffer *b, uint16_t p, uint16_t w, uint32_t id,
                    uint32_t uid)
{
    tbt_reset(&c);
    tbt_frag(&c, 8, (uint8_t)w);
    tb_copy_chunk_untrusted(b, p, uid, 42, w, id, c.nfrags, 0, true,
                            c.data, c.size);
}

static void chunk9(tb_buffer *b, uint16_t p, uint16_t w, uint32_t id)
{
    chunk9u(b, p, w, id, 1000);
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

/* The hostile churn of the sequence table: producers 1..rounds of uid 1000
 * each commit one empty chunk (the smallest record: 16 bytes, 65,536 in a
 * 1 MiB ring) for every writer id. Returns the most heap the buffer took
 * (sampled every 1024 chunks and at the end), 0 if malloc does not report
 * it (sanitizers replace it). */
static size_t churn_peak(tb_buffer *b, uint16_t rounds)
{
    void *probe = malloc(1u << 16);
    bool reported = heap_in_use() != 0;
    free(probe);
    size_t base = heap_in_use(), peak = 0;
    static const uint8_t none[1];
    uint64_t n = 0;
    for (uint16_t p = 1; p <= rounds; p++)
        for (uint32_t w = 1; w <= MAX_WRITER; w++, n++) {
            tb_copy_chunk_untrusted(b, p, 1000, 42, (uint16_t)w, 0, 0, 0,
                                    true, none, 0);
            if (n % 1024 == 0 || (p == rounds && w == MAX_WRITER)) {
                size_t now = heap_in_use() - base;
                if (now > peak)
                    peak = now;
            }
        }
    if (!reported)
        fprintf(stderr, "heap not reported by this malloc: memory bound not "
                "checked\n");
    return reported ? peak : 0;
}

/* The churn above, made with the buffer: the uid keeps
 * TB_MAX_SEQS_PER_UID(ring) sequences, every later chunk for a new writer
 * is refused and counted, and the heap stays under max_ratio times the
 * ring. */
static void check_churn(size_t ring, uint16_t rounds, double max_ratio)
{
    tb_buffer *b = tb_create(ring, TB_RING_BUFFER);
    ck_assert_ptr_nonnull(b);
    size_t peak = churn_peak(b, rounds);
    uint64_t chunks = (uint64_t)rounds * MAX_WRITER;
    uint32_t cap = TB_MAX_SEQS_PER_UID(ring);
    ck_assert_uint_eq(tb__num_sequences(b), cap);
    ck_assert_uint_eq(tb__uid_num_sequences(b, 1000), cap);
    ck_assert_uint_eq(TBT_STAT(b, chunks_written), cap);
    ck_assert_uint_eq(TBT_STAT(b, seq_cap_chunks), chunks - cap);
    ck_assert_uint_eq(TBT_STAT(b, chunks_discarded), chunks - cap);
    ck_assert_uint_eq(TBT_STAT(b, seq_cap_packets), 0); /* empty chunks */
    ck_assert_msg(peak <= max_ratio * (double)ring,
                  "the buffer took %.2f times its ring",
                  (double)peak / (double)ring);
    if (peak)
        fprintf(stderr, "churn of a %zu KiB ring: heap %.2f times the ring\n",
                ring >> 10, (double)peak / (double)ring);
    tb_destroy(b);
}

/* A 1 MiB ring: 16384 sequences (the floor of TB_MAX_SEQS_PER_UID) take
 * about 2.2 MiB; with the writer tables, bounded by count, not by the
 * ring (TB_HIST_MAX_WRITERS, TB_LOSS_MAX_WRITERS: 2.6 MiB), 4.7 times
 * the ring (2026-12-07). Without the bound 65,536 sequences and 17x:
 * each sequence's ChunkID ring started at 16 entries (256 bytes) before,
 * 31x then. */
START_TEST(test_writers_sequence_memory_under_churn)
{
    check_churn(1u << 20, 4, 5.0);
}
END_TEST

/* A 16 MiB ring: one sequence per 256 bytes of ring, 65,536, take 0.7
 * times the ring with the writer tables (2026-12-07); without the bound
 * the 163,835 writers' sequences took 1.9x. */
START_TEST(test_writers_sequence_memory_large_ring)
{
    check_churn(16u << 20, 5, 1.0);
}
END_TEST

enum { UID_A = 1000, UID_B = 2000 };

/* The loss entry of (p, w); fails if there is none. */
static const tb_seq_loss *loss_of(tb_buffer *b, uint16_t p, uint16_t w)
{
    size_t n;
    const tb_seq_loss *l = tb_get_seq_loss(b, &n);
    for (size_t i = 0; i < n; i++)
        if (l[i].producer_id == p && l[i].writer_id == w)
            return &l[i];
    ck_abort_msg("no loss entry for %u/%u", p, w);
    return NULL;
}

/* Reads everything; checks each packet is a chunk9 of its writer, and
 * returns how many came from (p, w) (*loss: the flags of the first). */
static size_t read_writer(tb_buffer *b, uint16_t p, uint16_t w,
                          uint32_t *loss, size_t *total)
{
    tbt_pkts ps = tbt_read_all(b);
    size_t got = 0;
    for (size_t i = 0; i < ps.n; i++) {
        ck_assert(tbt_pkt_is1(&ps.p[i], 8, (uint8_t)ps.p[i].props.writer_id));
        if (ps.p[i].props.producer_id == p && ps.p[i].props.writer_id == w &&
            got++ == 0)
            *loss = ps.p[i].loss;
    }
    *total = ps.n;
    tbt_free(&ps);
    return got;
}

/* A 1 MiB ring whose bound is `cap` sequences per uid, filled to it by
 * uid A (producer 1, writers 1..cap, ChunkID 0), then one chunk of A's
 * writer cap + 1: refused. */
static tb_buffer *capped_full(uint32_t cap)
{
    tb_buffer *b = tb_create(1u << 20, TB_RING_BUFFER);
    ck_assert_ptr_nonnull(b);
    tb__set_max_seqs_per_uid(b, cap);
    for (uint32_t w = 1; w <= cap; w++)
        chunk9u(b, 1, (uint16_t)w, 0, UID_A);
    chunk9u(b, 1, (uint16_t)(cap + 1), 0, UID_A);
    return b;
}

/* A uid at its bound: a chunk that would make it a new sequence is
 * refused and counted (stats, its writer's loss entry, a histogram
 * sample), while its existing sequences take chunks and another uid
 * makes new ones, read back intact. */
START_TEST(test_writers_seq_cap_refuses_new_sequences_only)
{
    tb_buffer *b = capped_full(8);  /* a new writer of A: refused */
    chunk9u(b, 3, 1, 0, UID_A);     /* A through another producer: too */
    ck_assert_uint_eq(TBT_STAT(b, chunks_written), 8);
    ck_assert_uint_eq(TBT_STAT(b, chunks_discarded), 2);
    ck_assert_uint_eq(TBT_STAT(b, seq_cap_chunks), 2);
    ck_assert_uint_eq(TBT_STAT(b, seq_cap_packets), 2);
    ck_assert_uint_eq(TBT_STAT(b, abi_violations), 0);
    ck_assert_uint_eq(tb__uid_num_sequences(b, UID_A), 8);
    ck_assert_uint_eq(tb__num_sequences(b), 8);

    for (uint16_t w = 1; w <= 8; w++)   /* A's sequences: still taken */
        chunk9u(b, 1, w, 1, UID_A);
    for (uint16_t w = 1; w <= 8; w++)   /* another uid: new sequences */
        chunk9u(b, 2, w, 0, UID_B);
    ck_assert_uint_eq(TBT_STAT(b, chunks_written), 24);
    ck_assert_uint_eq(TBT_STAT(b, seq_cap_chunks), 2);
    ck_assert_uint_eq(tb__uid_num_sequences(b, UID_B), 8);

    tbt_pkts ps = tbt_read_all(b);
    ck_assert_uint_eq(ps.n, 24);
    size_t from_a = 0;
    for (size_t i = 0; i < ps.n; i++) {
        const tbt_pkt *k = &ps.p[i];
        ck_assert(tbt_pkt_is1(k, 8, (uint8_t)k->props.writer_id));
        ck_assert_uint_eq(k->loss, 0);
        ck_assert_uint_le(k->props.writer_id, 8);
        ck_assert(k->props.producer_id == 1 || k->props.producer_id == 2);
        ck_assert_uint_eq(k->props.uid,
                          k->props.producer_id == 1 ? UID_A : UID_B);
        from_a += k->props.producer_id == 1;
    }
    ck_assert_uint_eq(from_a, 16);
    tbt_free(&ps);

    const tb_seq_loss *l = loss_of(b, 1, 9);
    ck_assert_uint_eq(l->packets_offered, 1);
    ck_assert_uint_eq(l->lost_packets[TB_CAUSE_DISCARD], 1);
    ck_assert_uint_eq(l->lost_bytes[TB_CAUSE_DISCARD], 9);
    ck_assert_uint_eq(loss_of(b, 3, 1)->lost_packets[TB_CAUSE_DISCARD], 1);
    size_t n;
    uint64_t read, offered = loss_totals(b, &n, &read);
    ck_assert_uint_eq(offered, 26);
    ck_assert_uint_eq(read, 24);
    const tb_writer_stats *h = tb_get_writer_stats(b, &n);
    ck_assert_uint_eq(n, 18);       /* the refused writers have samples */
    ck_assert_uint_eq(h[8].producer_id, 1);
    ck_assert_uint_eq(h[8].writer_id, 9);
    ck_assert_uint_eq(hist_count(&h[8]), 1);
    tb_destroy(b);
}
END_TEST

/* A refused writer gets a sequence once its uid's have been read and
 * garbage-collected (the refusal itself runs the GC: nothing else is
 * copied here), and its first packet read carries the loss; a writer of
 * that uid never refused, and its next packets, carry none. */
START_TEST(test_writers_seq_cap_gap_flag_after_gc)
{
    enum { CAP = 1500 };
    tb_buffer *b = capped_full(CAP);           /* writer CAP + 1 refused */
    for (uint16_t w = 1; w <= 300; w++)
        chunk9u(b, 2, w, 0, UID_B);
    ck_assert_uint_eq(TBT_STAT(b, seq_cap_chunks), 1);
    uint32_t loss = 0;
    size_t total;
    ck_assert_uint_eq(read_writer(b, 1, CAP + 1, &loss, &total), 0);
    ck_assert_uint_eq(total, CAP + 300);
    ck_assert_uint_eq(tb__uid_num_sequences(b, UID_A), CAP); /* empty */

    chunk9u(b, 1, CAP + 1, 1, UID_A);          /* room after GC */
    chunk9u(b, 1, CAP + 2, 0, UID_A);          /* never refused */
    ck_assert_uint_eq(TBT_STAT(b, seq_cap_chunks), 1);
    ck_assert_uint_lt(tb__uid_num_sequences(b, UID_A), CAP);
    ck_assert_uint_eq(read_writer(b, 1, CAP + 1, &loss, &total), 1);
    ck_assert_uint_eq(loss, TB_LOSS_PRESENT | TB_LOSS_READ_GAP);
    ck_assert_uint_eq(total, 2);
    ck_assert_uint_eq(read_writer(b, 1, CAP + 2, &loss, &total), 0);
    chunk9u(b, 1, CAP + 2, 1, UID_A);
    chunk9u(b, 1, CAP + 1, 2, UID_A);
    tb_begin_read(b);
    tb_packet pkt;
    tb_seq_props props;
    size_t got = 0;
    while (tb_read_next_packet(b, &pkt, &props, &loss)) {
        ck_assert_uint_eq(loss, 0);             /* the mark was taken */
        got++;
    }
    ck_assert_uint_eq(got, 2);
    const tb_seq_loss *l = loss_of(b, 1, CAP + 1);
    ck_assert_uint_eq(l->packets_offered, 3);
    ck_assert_uint_eq(l->packets_read, 2);
    ck_assert_uint_eq(l->lost_packets[TB_CAUSE_DISCARD], 1);
    size_t n;
    uint64_t read;
    loss_totals(b, &n, &read);  /* asserts each entry's invariant */
    tb_destroy(b);
}
END_TEST

/* A refused writer counted in the loss aggregate (the loss table full):
 * which of the aggregate's writers lost chunks is not known, so every new
 * sequence of that uid in the aggregate starts with the loss, and none of
 * another uid's. The counts stay exact in the aggregate. */
START_TEST(test_writers_seq_cap_gap_flag_in_aggregate)
{
    enum { CAP = TB_LOSS_MAX_WRITERS - 1 };
    tb_buffer *b = capped_full(CAP);  /* the loss table fills; writer
                                         CAP + 1 refused, in the aggregate */
    chunk9u(b, 2, 1, 0, UID_B);                 /* aggregate, accepted */
    ck_assert_uint_eq(TBT_STAT(b, seq_cap_chunks), 1);
    tbt_pkts ps = tbt_read_all(b);
    ck_assert_uint_eq(ps.n, CAP + 1);
    for (size_t i = 0; i < ps.n; i++)
        ck_assert_uint_eq(ps.p[i].loss, 0);
    tbt_free(&ps);

    chunk9u(b, 1, CAP + 1, 1, UID_A);           /* GC made room */
    chunk9u(b, 1, CAP + 2, 0, UID_A);
    chunk9u(b, 2, 2, 0, UID_B);
    ck_assert_uint_eq(TBT_STAT(b, seq_cap_chunks), 1);
    ps = tbt_read_all(b);
    ck_assert_uint_eq(ps.n, 3);
    for (size_t i = 0; i < ps.n; i++)
        ck_assert_uint_eq(ps.p[i].loss, (ps.p[i].props.uid == UID_A
                          ? TB_LOSS_PRESENT | TB_LOSS_READ_GAP : 0));
    tbt_free(&ps);
    size_t n;
    const tb_seq_loss *l = tb_get_seq_loss(b, &n);
    ck_assert_uint_eq(n, TB_LOSS_MAX_WRITERS);
    ck_assert(is_overflow_key(l[n - 1].producer_id, l[n - 1].writer_id));
    ck_assert_uint_eq(l[n - 1].packets_offered, 5);
    ck_assert_uint_eq(l[n - 1].packets_read, 4);
    ck_assert_uint_eq(l[n - 1].lost_packets[TB_CAUSE_DISCARD], 1);
    uint64_t read;
    loss_totals(b, &n, &read);  /* asserts each entry's invariant */
    tb_destroy(b);
}
END_TEST

/* The per-uid counts under churn from thousands of uids (made in
 * descending order: each new one goes first in the sorted table), reads
 * and GC: each equals the uid's sequences counted one by one, a uid with
 * none has no entry, and a clone has the same counts. */
START_TEST(test_writers_seq_cap_counts_many_uids)
{
    enum { NUID = 3000 };
    tb_buffer *b = tb_create(1u << 20, TB_RING_BUFFER);
    ck_assert_ptr_nonnull(b);
    static uint32_t want[NUID];
    for (uint32_t round = 0; round < 3; round++) {
        for (uint32_t u = NUID; u-- > 0;)
            for (uint16_t w = 1; w <= 1 + u % 3; w++)
                chunk9u(b, (uint16_t)(10 + round), (uint16_t)(u * 4 + w),
                        0, 5000 + u);
        if (round < 2)
            tbt_read_count(b);  /* all empty: GC deletes all but 1024 */
    }
    memset(want, 0, sizeof(want));
    for (uint32_t i = 0; i < b->nseqs; i++) {
        ck_assert_uint_ge(b->seqs[i].uid, 5000);
        want[b->seqs[i].uid - 5000]++;
    }
    uint32_t with = 0;
    for (uint32_t u = 0; u < NUID; u++) {
        ck_assert_uint_eq(tb__uid_num_sequences(b, 5000 + u), want[u]);
        ck_assert(want[u] == 0 || tb__uid_find(b, 5000 + u) != NULL);
        with += want[u] > 0;
    }
    ck_assert_uint_eq(b->nuids, with);
    ck_assert_uint_lt(b->nseqs, 3 * 2 * NUID);  /* GC ran */
    ck_assert_uint_eq(TBT_STAT(b, seq_cap_chunks), 0);
    tb_buffer *snap = tb_clone_readonly(b);
    ck_assert_ptr_nonnull(snap);
    for (uint32_t u = 0; u < NUID; u++)
        ck_assert_uint_eq(tb__uid_num_sequences(snap, 5000 + u), want[u]);
    tb_destroy(snap);
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
                         test_writers_sequence_memory_under_churn,
                         test_writers_sequence_memory_large_ring);
    tcase_set_timeout(tc, 300); /* sanitizer builds: ~100k copies */
    TCK_CASE(s, "seq_cap", test_writers_seq_cap_refuses_new_sequences_only,
             test_writers_seq_cap_gap_flag_after_gc,
             test_writers_seq_cap_gap_flag_in_aggregate,
             test_writers_seq_cap_counts_many_uids);
    TCK_CASE(s, "honest", test_writers_honest_use_unaffected);
    return s;
}

TCK_MAIN(tb_writers_suite)
