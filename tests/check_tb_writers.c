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
 *
 * Hostile second user (tcase fair, libbuf/tb_share.c and tb_seq.c): once
 * uid A has filled the tables, uid B's writers still get entries of their
 * own (A's folded into the aggregate), exact, with their losses; uids
 * that keep making writers end with equal shares and trade none back and
 * forth; the sums and every identity stay exact through folds (pending
 * packets included), clones and gap marks; and GC keeps B's empty
 * sequences, with their last ChunkIDs, while A churns.
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

/* A chunk refused for its uid's bound that ends in the writer's drop
 * sentinel (the writer cut a packet there) still counts the writer's
 * report in trace_writer_packet_loss, as a kept chunk does; its whole
 * packet before the sentinel is lost to DISCARD, and the sentinel is no
 * ABI violation. */
START_TEST(test_writers_seq_cap_refused_drop_marker_counted)
{
    tb_buffer *b = capped_full(8);  /* writer 9 of A: refused */
    ck_assert_uint_eq(TBT_STAT(b, trace_writer_packet_loss), 0);
    tbt_reset(&c);
    tbt_frag(&c, 8, 'a');
    tbt_put_varint4(&c, TB_PACKET_SIZE_DROP_PACKET);
    c.nfrags++;
    tb_copy_chunk_untrusted(b, 1, UID_A, 42, 10, 0, c.nfrags, 0, true,
                            c.data, c.size);
    ck_assert_uint_eq(TBT_STAT(b, seq_cap_chunks), 2);
    ck_assert_uint_eq(TBT_STAT(b, trace_writer_packet_loss), 1);
    ck_assert_uint_eq(TBT_STAT(b, abi_violations), 0);
    const tb_seq_loss *l = loss_of(b, 1, 10);
    ck_assert_uint_eq(l->packets_offered, 1);
    ck_assert_uint_eq(l->lost_packets[TB_CAUSE_DISCARD], 1);
    ck_assert_uint_eq(l->lost_packets[TB_CAUSE_ABI_VIOLATION], 0);
    /* A kept writer's sentinel counts once more, and flags its next
     * packet as before. */
    tb_copy_chunk_untrusted(b, 1, UID_A, 42, 1, 1, c.nfrags, 0, true,
                            c.data, c.size);
    ck_assert_uint_eq(TBT_STAT(b, trace_writer_packet_loss), 2);
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
 * another uid's. The counts stay exact in the aggregate: A's writers
 * CAP + 1 (refused, then read) and CAP + 2, and A's first two, whose
 * entries B's two writers took (tb_share.c), one packet read each. */
START_TEST(test_writers_seq_cap_gap_flag_in_aggregate)
{
    enum { CAP = TB_LOSS_MAX_WRITERS - 1 };
    tb_buffer *b = capped_full(CAP);  /* the loss table fills; writer
                                         CAP + 1 refused, in the aggregate */
    chunk9u(b, 2, 1, 0, UID_B);                 /* takes A's first entry */
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
    for (uint16_t w = 1; w <= 2; w++)
        ck_assert_uint_eq(loss_of(b, 2, w)->packets_read, 1);
    uint64_t read;
    loss_totals(b, &n, &read);  /* asserts each entry's invariant */
    tb_destroy(b);
}
END_TEST

/* The per-uid counts under churn from thousands of uids (made in
 * descending order: each new one goes first in the sorted table), reads
 * and GC: each equals the uid's sequences counted one by one, and its
 * shares of the writer tables (which fill: entries change hands) its own
 * entries counted one by one; a uid with neither has no entry; a clone
 * has the same counts (no histograms). */
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
    static uint32_t held[TB__NTABS][NUID];
    memset(held, 0, sizeof(held));
    const tb__share *share[TB__NTABS] = {&b->loss_share, &b->hist_share};
    size_t nown[TB__NTABS] = {b->nloss - (b->loss_over != 0),
                              b->nhist - (b->hist_over != 0)};
    /* Both tables full since round 2: round 3's writers (producer 12)
     * that have entries took them from others. */
    ck_assert_uint_eq(nown[TB__TAB_LOSS], TB_LOSS_MAX_WRITERS - 1);
    ck_assert_uint_eq(nown[TB__TAB_HIST], TB_HIST_MAX_WRITERS - 1);
    size_t taken = 0;
    for (size_t i = 0; i < nown[TB__TAB_LOSS]; i++)
        taken += b->lossv[i].producer_id == 12;
    ck_assert_uint_gt(taken, 0);
    for (int t = 0; t < TB__NTABS; t++)
        for (size_t i = 0; i < nown[t]; i++)
            held[t][share[t]->owner[i] - 5000]++;
    uint32_t with = 0, with_loss = 0;
    for (uint32_t u = 0; u < NUID; u++) {
        ck_assert_uint_eq(tb__uid_num_sequences(b, 5000 + u), want[u]);
        bool any = want[u] || held[TB__TAB_LOSS][u] ||
                   held[TB__TAB_HIST][u];
        ck_assert(any == (tb__uid_find(b, 5000 + u) != NULL));
        for (int t = 0; t < TB__NTABS; t++)
            ck_assert_uint_eq(tb__share_held(b, t, 5000 + u), held[t][u]);
        with += any;
        with_loss += want[u] || held[TB__TAB_LOSS][u];
    }
    ck_assert_uint_eq(b->nuids, with);
    ck_assert_uint_lt(b->nseqs, 3 * 2 * NUID);  /* GC ran */
    ck_assert_uint_eq(TBT_STAT(b, seq_cap_chunks), 0);
    tb_buffer *snap = tb_clone_readonly(b);
    ck_assert_ptr_nonnull(snap);
    for (uint32_t u = 0; u < NUID; u++) {
        ck_assert_uint_eq(tb__uid_num_sequences(snap, 5000 + u), want[u]);
        ck_assert_uint_eq(tb__share_held(snap, TB__TAB_LOSS, 5000 + u),
                          held[TB__TAB_LOSS][u]);
        ck_assert_uint_eq(tb__share_held(snap, TB__TAB_HIST, 5000 + u), 0);
    }
    ck_assert_uint_eq(snap->nuids, with_loss);
    tb_destroy(snap);
    tb_destroy(b);
}
END_TEST

/* Fair shares of the writer tables among uids (libbuf/tb_share.c): once
 * a table is full, a writer of a uid holding fewer entries than the top
 * holder less one takes one of the top's, folded into the aggregate /
 * overflow entry, whose sums and identity stay exact. Before, the first
 * 8191 writers kept their entries for the buffer's life, and a second
 * uid's writers were all in the aggregate. */

enum { UID_C = 3000 };
#define MAX_ENTRIES (TB_LOSS_MAX_WRITERS > TB_HIST_MAX_WRITERS ? \
                     TB_LOSS_MAX_WRITERS : TB_HIST_MAX_WRITERS)

/* One complete chunk of (p, w) of uid with one packet of `size` bytes. */
static void chunk_sized(tb_buffer *b, uint16_t p, uint16_t w, uint32_t id,
                        uint32_t uid, uint32_t size)
{
    tbt_reset(&c);
    tbt_frag(&c, size, (uint8_t)w);
    tb_copy_chunk_untrusted(b, p, uid, 42, w, id, c.nfrags, 0, true,
                            c.data, c.size);
}

/* Own entries of producer p in the loss table and in the histograms. */
static size_t loss_entries_of(tb_buffer *b, uint16_t p)
{
    size_t n, got = 0;
    const tb_seq_loss *l = tb_get_seq_loss(b, &n);
    for (size_t i = 0; i < n; i++)
        got += l[i].producer_id == p && l[i].writer_id != 0;
    return got;
}

static const tb_writer_stats *hist_of(tb_buffer *b, uint16_t p, uint16_t w)
{
    size_t n;
    const tb_writer_stats *h = tb_get_writer_stats(b, &n);
    for (size_t i = 0; i < n; i++)
        if (h[i].producer_id == p && h[i].writer_id == w)
            return &h[i];
    return NULL;
}

static size_t hist_entries_of(tb_buffer *b, uint16_t p)
{
    size_t n, got = 0;
    const tb_writer_stats *h = tb_get_writer_stats(b, &n);
    for (size_t i = 0; i < n; i++)
        got += h[i].producer_id == p && h[i].writer_id != 0;
    return got;
}

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return (x > y) - (x < y);
}

/* The keys of the own entries of the loss table (hist false) or of the
 * histograms (hist true), sorted, into keys[]; returns how many. */
static size_t own_keys(tb_buffer *b, bool hist, uint32_t *keys)
{
    size_t n, k = 0;
    if (hist) {
        const tb_writer_stats *h = tb_get_writer_stats(b, &n);
        for (size_t i = 0; i < n; i++)
            if (!is_overflow_key(h[i].producer_id, h[i].writer_id))
                keys[k++] = ((uint32_t)h[i].producer_id << 16) |
                            h[i].writer_id;
    } else {
        const tb_seq_loss *l = tb_get_seq_loss(b, &n);
        for (size_t i = 0; i < n; i++)
            if (!is_overflow_key(l[i].producer_id, l[i].writer_id))
                keys[k++] = ((uint32_t)l[i].producer_id << 16) |
                            l[i].writer_id;
    }
    qsort(keys, k, sizeof(*keys), cmp_u32);
    return k;
}

static bool has_loss_entry(tb_buffer *b, uint16_t p, uint16_t w)
{
    size_t n;
    const tb_seq_loss *l = tb_get_seq_loss(b, &n);
    for (size_t i = 0; i < n; i++)
        if (l[i].producer_id == p && l[i].writer_id == w)
            return true;
    return false;
}

/* The histograms add up to `samples` chunks; the overflow entry, last,
 * holds hist_chunks_untracked of them. */
static void check_hist_sums(tb_buffer *b, uint64_t samples)
{
    size_t n;
    const tb_writer_stats *h = tb_get_writer_stats(b, &n);
    uint64_t total = 0;
    for (size_t i = 0; i < n; i++) {
        total += hist_count(&h[i]);
        if (is_overflow_key(h[i].producer_id, h[i].writer_id)) {
            ck_assert_uint_eq(i, n - 1);
            ck_assert_uint_eq(hist_count(&h[i]),
                              TBT_STAT(b, hist_chunks_untracked));
        }
    }
    ck_assert_uint_eq(total, samples);
}

/* uid A has filled both tables (and 100 more writers are in the
 * aggregate); uid B's 50 writers then get their own entries, exact: three
 * chunks read, a stale one refused, one overwritten by a wrap, each lost
 * packet in B's writer's entry. The sums over the entries stay every
 * packet and sample; each entry's identity and the aggregate's hold. */
START_TEST(test_writers_fair_second_uid_gets_own_entries)
{
    enum { NA = TB_LOSS_MAX_WRITERS + 99, NB = 50, NBIG = 300 };
    tb_buffer *b = tb_create(1u << 20, TB_RING_BUFFER);
    ck_assert_ptr_nonnull(b);
    for (uint32_t w = 1; w <= NA; w++)
        chunk9u(b, 1, (uint16_t)w, 0, UID_A);
    ck_assert_uint_eq(loss_entries_of(b, 1), TB_LOSS_MAX_WRITERS - 1);
    for (uint32_t id = 0; id < 3; id++)
        for (uint16_t w = 1; w <= NB; w++)
            chunk9u(b, 2, w, id, UID_B);
    size_t read_n = tbt_read_count(b);
    ck_assert_uint_eq(read_n, NA + 3 * NB);
    for (uint16_t w = 1; w <= NB; w++)
        chunk9u(b, 2, w, 1, UID_B);     /* stale: lost to DISCARD */
    for (uint16_t w = 1; w <= NB; w++)
        chunk9u(b, 2, w, 3, UID_B);     /* overwritten below, unread */
    for (uint32_t id = 0; id < NBIG; id++)  /* A's 1 MiB: a wrap */
        chunk_sized(b, 4, 1, id, UID_A, 3500);
    ck_assert_uint_gt(TBT_STAT(b, write_wrap_count), 0);
    read_n += tbt_read_count(b);

    ck_assert_uint_eq(loss_entries_of(b, 2), NB);
    ck_assert_uint_eq(loss_entries_of(b, 1) + loss_entries_of(b, 4),
                      TB_LOSS_MAX_WRITERS - 1 - NB);
    for (uint16_t w = 1; w <= NB; w++) {
        const tb_seq_loss *l = loss_of(b, 2, w);
        ck_assert_uint_eq(l->packets_offered, 5);
        ck_assert_uint_eq(l->packets_read, 3);
        ck_assert_uint_eq(l->packets_pending, 0);
        ck_assert_uint_eq(l->lost_packets[TB_CAUSE_DISCARD], 1);
        ck_assert_uint_eq(l->lost_bytes[TB_CAUSE_DISCARD], 9);
        ck_assert_uint_eq(l->lost_packets[TB_CAUSE_OVERWRITE], 1);
        const tb_writer_stats *h = hist_of(b, 2, w);
        ck_assert_ptr_nonnull(h);
        ck_assert_uint_eq(hist_count(h), 5);
        ck_assert_uint_eq(hist_sum(h), 5 * 9);
    }
    size_t n;
    uint64_t read, offered = loss_totals(b, &n, &read);
    ck_assert_uint_eq(n, TB_LOSS_MAX_WRITERS);
    ck_assert_uint_eq(offered, NA + 5 * NB + NBIG);
    ck_assert_uint_eq(read, read_n);
    check_hist_sums(b, NA + 5 * NB + NBIG);
    ck_assert_uint_eq(hist_entries_of(b, 2), NB);
    tb_destroy(b);
}
END_TEST

/* Max-min: uid B, making writers without end after A filled the tables,
 * ends with half of the entries, one apart from A; A and B making more
 * writers then trade none back and forth (no fold: the aggregate takes
 * them); uid C coming third gets a third, as do A and B. */
START_TEST(test_writers_fair_max_min_shares)
{
    const uint32_t own = TB_LOSS_MAX_WRITERS - 1;
    tb_buffer *b = tb_create(1u << 20, TB_RING_BUFFER);
    ck_assert_ptr_nonnull(b);
    for (uint32_t w = 1; w <= own; w++)
        chunk9u(b, 1, (uint16_t)w, 0, UID_A);
    for (uint32_t w = 1; w <= 6000; w++)
        chunk9u(b, 2, (uint16_t)w, 0, UID_B);
    ck_assert_uint_eq(loss_entries_of(b, 2), own / 2);
    ck_assert_uint_eq(loss_entries_of(b, 1), own - own / 2);
    ck_assert_uint_eq(hist_entries_of(b, 2), own / 2);
    static uint32_t before[2][MAX_ENTRIES], after[MAX_ENTRIES];
    for (int t = 0; t < 2; t++)
        ck_assert_uint_eq(own_keys(b, t, before[t]), own);
    for (uint32_t w = 1; w <= 1000; w++) {
        chunk9u(b, 3, (uint16_t)w, 0, UID_A);
        chunk9u(b, 5, (uint16_t)w, 0, UID_B);
    }
    for (int t = 0; t < 2; t++) {   /* the same writers hold the entries */
        ck_assert_uint_eq(own_keys(b, t, after), own);
        ck_assert(memcmp(before[t], after, own * sizeof(*after)) == 0);
    }
    for (uint32_t w = 1; w <= 5000; w++)
        chunk9u(b, 6, (uint16_t)w, 0, UID_C);
    size_t a = loss_entries_of(b, 1) + loss_entries_of(b, 3);
    size_t bb = loss_entries_of(b, 2) + loss_entries_of(b, 5);
    size_t cc = loss_entries_of(b, 6);
    ck_assert_uint_eq(a + bb + cc, own);
    ck_assert_uint_ge(cc, own / 3 - 1);
    ck_assert_uint_ge(a, own / 3 - 1);
    ck_assert_uint_ge(bb, own / 3 - 1);
    ck_assert_uint_le(cc, own / 3 + 1);
    ck_assert_uint_eq(hist_entries_of(b, 6), cc);
    uint64_t chunks = own + 6000 + 2000 + 5000;
    size_t n;
    uint64_t read, offered = loss_totals(b, &n, &read);
    ck_assert_uint_eq(offered, chunks);
    ck_assert_uint_eq(read, 0);
    check_hist_sums(b, chunks);
    tb_destroy(b);
}
END_TEST

/* A writer folded with packets pending: they were offered to its entry,
 * so the aggregate that took its counts holds them, and their read or
 * loss lands there too (the writer's sequence points at it): A's 8191
 * unread chunks; B's writer takes the entry of A's first, which then
 * writes one more; two packets read, a wrap overwrites the rest. */
START_TEST(test_writers_fair_fold_keeps_pending_exact)
{
    const uint32_t own = TB_LOSS_MAX_WRITERS - 1;
    tb_buffer *b = tb_create(1u << 20, TB_RING_BUFFER);
    ck_assert_ptr_nonnull(b);
    for (uint32_t w = 1; w <= own; w++)
        chunk9u(b, 1, (uint16_t)w, 0, UID_A);
    chunk9u(b, 2, 1, 0, UID_B);
    ck_assert(!has_loss_entry(b, 1, 1));  /* the first of the top's */
    ck_assert(has_loss_entry(b, 2, 1));
    size_t n;
    const tb_seq_loss *l = tb_get_seq_loss(b, &n);
    const tb_seq_loss *agg = &l[n - 1];
    ck_assert(is_overflow_key(agg->producer_id, agg->writer_id));
    ck_assert_uint_eq(agg->packets_offered, 1);
    ck_assert_uint_eq(agg->packets_pending, 1);
    const tb_writer_stats *h = tb_get_writer_stats(b, &n);
    ck_assert(is_overflow_key(h[n - 1].producer_id, h[n - 1].writer_id));
    ck_assert_uint_eq(hist_count(&h[n - 1]), 1);
    ck_assert_uint_eq(TBT_STAT(b, hist_chunks_untracked), 1);
    chunk9u(b, 1, 1, 1, UID_A);           /* its sequence: the aggregate */
    ck_assert_uint_eq(TBT_STAT(b, hist_chunks_untracked), 2);

    tb_begin_read(b);                       /* buffer order: 1/1, 1/2 */
    tb_packet pkt;
    tb_seq_props props;
    for (uint16_t w = 1; w <= 2; w++) {
        ck_assert(tb_read_next_packet(b, &pkt, &props, NULL));
        ck_assert_uint_eq(props.producer_id, 1);
        ck_assert_uint_eq(props.writer_id, w);
    }
    for (uint32_t id = 0; id < 300; id++)   /* wrap: the rest overwritten */
        chunk_sized(b, 2, 1, 1 + id, UID_B, 3500);
    l = tb_get_seq_loss(b, &n);
    agg = &l[n - 1];
    ck_assert_uint_eq(agg->packets_offered, 2);
    ck_assert_uint_eq(agg->packets_read, 1);
    ck_assert_uint_eq(agg->lost_packets[TB_CAUSE_OVERWRITE], 1);
    ck_assert_uint_eq(agg->packets_pending, 0);
    ck_assert_uint_eq(loss_of(b, 1, 2)->packets_read, 1);
    ck_assert_uint_eq(loss_of(b, 1, 3)->lost_packets[TB_CAUSE_OVERWRITE], 1);
    uint64_t read, offered = loss_totals(b, &n, &read);
    ck_assert_uint_eq(offered, own + 1 + 1 + 300);
    ck_assert_uint_eq(read, 2);
    check_hist_sums(b, own + 1 + 1 + 300);
    tb_destroy(b);
}
END_TEST

/* The fold prefers a writer whose sequence is gone (its counts are
 * final) to a live one: A's writers 1..10 write again after GC deleted
 * the sequences of A's oldest writers; B's 20 writers take the entries of
 * A's writers 11..30, not of 1..10. */
START_TEST(test_writers_fair_folds_finished_writers_first)
{
    const uint32_t own = TB_LOSS_MAX_WRITERS - 1;
    tb_buffer *b = tb_create(1u << 20, TB_RING_BUFFER);
    ck_assert_ptr_nonnull(b);
    for (uint32_t w = 1; w <= own; w++)
        chunk9u(b, 1, (uint16_t)w, 0, UID_A);
    ck_assert_uint_eq(tbt_read_count(b), own);
    for (uint16_t w = 1; w <= 10; w++)
        chunk9u(b, 1, w, 1, UID_A);         /* GC ran after the first */
    ck_assert_ptr_null(tb__seq_find(b, (1u << 16) | 11));
    for (uint16_t w = 1; w <= 20; w++)
        chunk9u(b, 2, w, 0, UID_B);
    for (uint16_t w = 1; w <= 10; w++) {
        ck_assert(has_loss_entry(b, 1, w));
        ck_assert_ptr_nonnull(hist_of(b, 1, w));
        ck_assert_uint_eq(loss_of(b, 1, w)->packets_offered, 2);
    }
    for (uint16_t w = 11; w <= 30; w++) {
        ck_assert(!has_loss_entry(b, 1, w));
        ck_assert_ptr_null(hist_of(b, 1, w));
    }
    ck_assert(has_loss_entry(b, 1, 31));
    ck_assert_uint_eq(loss_entries_of(b, 2), 20);
    ck_assert_uint_eq(hist_entries_of(b, 2), 20);
    tb_destroy(b);
}
END_TEST

/* A clone keeps the shares: B's entries, exact, and the owners, so that a
 * refusal in the clone of a writer of uid C, which holds none, folds one
 * of A's there (not in the source). */
START_TEST(test_writers_fair_clone_keeps_the_shares)
{
    const uint32_t own = TB_LOSS_MAX_WRITERS - 1;
    tb_buffer *b = tb_create(1u << 20, TB_RING_BUFFER);
    ck_assert_ptr_nonnull(b);
    for (uint32_t w = 1; w <= own + 5; w++)
        chunk9u(b, 1, (uint16_t)w, 0, UID_A);
    for (uint16_t w = 1; w <= 30; w++) {
        chunk9u(b, 2, w, 0, UID_B);
        chunk9u(b, 2, w, 1, UID_B);
    }
    ck_assert_uint_eq(tbt_read_count(b), own + 5 + 60);
    chunk9u(b, 2, 7, 0, UID_B);             /* stale: DISCARD */
    tb_buffer *snap = tb_clone_readonly(b);
    ck_assert_ptr_nonnull(snap);
    ck_assert_uint_eq(loss_entries_of(snap, 2), 30);
    ck_assert_uint_eq(loss_of(snap, 2, 7)->packets_offered, 1);
    ck_assert_uint_eq(loss_of(snap, 2, 7)->lost_packets[TB_CAUSE_DISCARD],
                      1);
    ck_assert_uint_eq(loss_of(snap, 2, 8)->packets_offered, 0);
    chunk9u(snap, 3, 1, 0, UID_C);          /* refused: a clone */
    chunk9u(snap, 2, 8, 2, UID_B);          /* refused, its own entry */
    ck_assert_uint_eq(loss_entries_of(snap, 3), 1);
    ck_assert_uint_eq(loss_of(snap, 3, 1)->lost_packets[TB_CAUSE_DISCARD],
                      1);
    ck_assert_uint_eq(loss_of(snap, 2, 8)->lost_packets[TB_CAUSE_DISCARD],
                      1);
    ck_assert_uint_eq(loss_entries_of(b, 3), 0);
    size_t n;
    uint64_t read, offered = loss_totals(snap, &n, &read);
    ck_assert_uint_eq(n, TB_LOSS_MAX_WRITERS);
    ck_assert_uint_eq(offered, 1 + 1 + 1); /* reads are not cloned */
    ck_assert_uint_eq(read, 0);
    offered = loss_totals(b, &n, &read);
    ck_assert_uint_eq(offered, own + 5 + 60 + 1);
    ck_assert_uint_eq(read, own + 5 + 60);
    tb_destroy(snap);
    tb_destroy(b);
}
END_TEST

/* A's writers refused for the bound are marked for a read gap in their
 * own entries; when such an entry is folded to make room for B, the mark
 * goes to A (as for a refusal in the aggregate), so the writer, back
 * with a sequence, still starts with the gap; B's writers never do. */
START_TEST(test_writers_fair_fold_keeps_gap_marks)
{
    const uint32_t own = TB_LOSS_MAX_WRITERS - 1;
    tb_buffer *b = tb_create(1u << 20, TB_RING_BUFFER);
    ck_assert_ptr_nonnull(b);
    for (uint32_t w = 1; w <= own; w++)
        chunk9u(b, 1, (uint16_t)w, 0, UID_A);
    ck_assert_uint_eq(tbt_read_count(b), own);
    chunk9u(b, 1, own, 1, UID_A);   /* GC: A keeps its newest empties */
    ck_assert_uint_le(tb__uid_num_sequences(b, UID_A),
                      TB__KEEP_LAST_EMPTY_SEQ + 1);
    tb__set_max_seqs_per_uid(b, tb__uid_num_sequences(b, UID_A));
    for (uint16_t w = 1; w <= 40; w++)  /* refused, marked, own entries */
        chunk9u(b, 1, w, 1, UID_A);
    ck_assert_uint_eq(TBT_STAT(b, seq_cap_chunks), 40);
    ck_assert_ptr_nonnull(b->loss_gap);
    chunk9u(b, 2, 1, 0, UID_B);     /* folds A's first: marked */
    ck_assert(!has_loss_entry(b, 1, 1));
    ck_assert(has_loss_entry(b, 2, 1));
    ck_assert(tb__uid_find(b, UID_A)->agg_gap);

    tb__set_max_seqs_per_uid(b, TB_MAX_SEQS_PER_UID(1u << 20));
    chunk9u(b, 1, 1, 2, UID_A);     /* folded, back */
    chunk9u(b, 1, 2, 2, UID_A);     /* marked in its own entry */
    chunk9u(b, 1, 41, 1, UID_A);    /* neither: its own entry, no mark */
    chunk9u(b, 2, 2, 0, UID_B);
    tbt_pkts ps = tbt_read_all(b);
    ck_assert_uint_eq(ps.n, 2 + 4);     /* with 1/own and 2/1 from before */
    for (size_t i = 0; i < ps.n; i++) {
        const tb_seq_props *p = &ps.p[i].props;
        bool gap = p->producer_id == 1 && p->writer_id <= 2;
        ck_assert_msg(ps.p[i].loss == (gap ? (uint32_t)(TB_LOSS_PRESENT |
                      TB_LOSS_READ_GAP) : 0u), "%u/%u: loss %u",
                      p->producer_id, p->writer_id, ps.p[i].loss);
    }
    tbt_free(&ps);
    size_t n;
    uint64_t read;
    loss_totals(b, &n, &read);      /* asserts each entry's invariant */
    tb_destroy(b);
}
END_TEST

/* Sequence GC shares the empty sequences it keeps among uids: uid A
 * churning writers (each one chunk, read) used to push out every empty
 * sequence of uid B, and with it the last ChunkID each B writer had
 * consumed: a re-commit of that chunk was then delivered again, and a gap
 * after it went unflagged. Now B keeps its empty sequences (fewer than
 * its share), A's go first. */
START_TEST(test_writers_fair_gc_keeps_other_uids_empty_sequences)
{
    enum { NB = 300 };
    tb_buffer *b = tb_create(1u << 20, TB_RING_BUFFER);
    ck_assert_ptr_nonnull(b);
    for (uint16_t w = 1; w <= NB; w++)
        chunk9u(b, 9, w, 0, UID_B);
    ck_assert_uint_eq(tbt_read_count(b), NB);
    for (uint32_t round = 0; round < 10; round++) {
        for (uint32_t w = 1; w <= 500; w++)
            chunk9u(b, (uint16_t)(100 + round), (uint16_t)w, 0, UID_A);
        ck_assert_uint_eq(tbt_read_count(b), 500);
    }
    ck_assert_uint_eq(tb__uid_num_sequences(b, UID_B), NB);
    ck_assert_uint_le(tb__uid_num_sequences(b, UID_A),   /* GC ran */
                      TB__KEEP_LAST_EMPTY_SEQ + 500);

    uint64_t discarded = TBT_STAT(b, chunks_discarded);
    for (uint16_t w = 1; w <= NB; w++) {
        chunk9u(b, 9, w, 0, UID_B);     /* consumed already: refused */
        chunk9u(b, 9, w, 2, UID_B);     /* chunk 1 never came */
    }
    ck_assert_uint_eq(TBT_STAT(b, chunks_discarded), discarded + NB);
    tbt_pkts ps = tbt_read_all(b);
    ck_assert_uint_eq(ps.n, NB);
    for (size_t i = 0; i < ps.n; i++)
        ck_assert_uint_eq(ps.p[i].loss, TB_LOSS_PRESENT | TB_LOSS_READ_GAP);
    tbt_free(&ps);
    tb_destroy(b);
}
END_TEST

/* GC with one uid is what it was: the newest TB__KEEP_LAST_EMPTY_SEQ
 * empty sequences stay. */
START_TEST(test_writers_gc_one_uid_keeps_the_newest)
{
    tb_buffer *b = tb_create(1u << 20, TB_RING_BUFFER);
    ck_assert_ptr_nonnull(b);
    for (uint32_t w = 1; w <= 2000; w++)
        chunk9u(b, 1, (uint16_t)w, 0, UID_A);
    ck_assert_uint_eq(tbt_read_count(b), 2000);
    chunk9u(b, 2, 1, 0, UID_A);                 /* GC after this copy */
    ck_assert_uint_eq(b->nseqs, TB__KEEP_LAST_EMPTY_SEQ + 1);
    for (uint32_t w = 1; w <= 2000; w++)
        ck_assert((tb__seq_find(b, (1u << 16) | w) != NULL) ==
                  (w > 2000 - TB__KEEP_LAST_EMPTY_SEQ));
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
             test_writers_seq_cap_counts_many_uids,
             test_writers_seq_cap_refused_drop_marker_counted);
    tc = TCK_CASE(s, "fair", test_writers_fair_second_uid_gets_own_entries,
                  test_writers_fair_max_min_shares,
                  test_writers_fair_fold_keeps_pending_exact,
                  test_writers_fair_folds_finished_writers_first,
                  test_writers_fair_clone_keeps_the_shares,
                  test_writers_fair_fold_keeps_gap_marks,
                  test_writers_fair_gc_keeps_other_uids_empty_sequences,
                  test_writers_gc_one_uid_keeps_the_newest);
    tcase_set_timeout(tc, 300); /* sanitizer builds */
    TCK_CASE(s, "honest", test_writers_honest_use_unaffected);
    return s;
}

TCK_MAIN(tb_writers_suite)
