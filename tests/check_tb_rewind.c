/*
 * check_tb_rewind.c - libbuf: a drained ring starts again at offset 0
 * (tb_rewind.c).
 *
 * What must hold: a ring that rewinds delivers exactly what a ring that
 * never had to evict anything delivers (packets, properties, loss flags,
 * stats but the wrap count, per-writer loss accounting), seeded workloads
 * with scraped chunks, patches and reads at random moments; the records
 * still unread when it rewinds (a packet waiting for its continuation, a
 * scraped chunk) move to the start, and their continuation, re-commit and
 * patches still find them; the write fence sees the moved-over bytes
 * before they change; no rewind in DISCARD buffers, in rings nobody
 * drained, after a writer lapped up to the read floor, or with too much
 * unread; a packet that waits keeps its record, at the start, through
 * rewinds while the read floor stays far behind (compacted in order), but
 * only for 16 in a row; the default threshold by ring size.
 */
#include "tb_int.h"
#include "tb_workload.h"

#define KIB ((size_t)1024)
#define MIB ((size_t)1 << 20)

/* A new buffer that rewinds from `rewind_at` on (0: never). */
static tb_buffer *ring(size_t size, tb_fill_policy policy, size_t rewind_at)
{
    tb_buffer *b = tb_create(size, policy);
    ck_assert_ptr_nonnull(b);
    tb__set_rewind_at(b, rewind_at);
    return b;
}

/* --- same packets as a ring that never evicts ----------------------------- */

static void check_same(uint32_t seed, uint32_t drain_every)
{
    outcome plain = {0}, rewound = {0};
    tb_stats s1, s2;
    tb_buffer *a = ring(8 * MIB, TB_RING_BUFFER, 0);
    tb_buffer *b = ring(8 * MIB, TB_RING_BUFFER, 128 * KIB);
    workload(a, seed, drain_every, &plain, &s1);
    workload(b, seed, drain_every, &rewound, &s2);

    ck_assert_uint_gt(plain.packets, 1000);
    ck_assert_uint_eq(s1.write_wrap_count, 0);   /* a never wrapped */
    ck_assert_uint_eq(s1.chunks_overwritten, 0);
    ck_assert_uint_gt(s2.write_wrap_count, 5);   /* b rewound, often */
    ck_assert_uint_gt(tb_used_size(a), 1 * MIB);
    ck_assert_uint_lt(tb_used_size(b), 1 * MIB);

    ck_assert_uint_eq(plain.packets, rewound.packets);
    ck_assert_uint_eq(plain.flagged, rewound.flagged);
    ck_assert(plain.hash == rewound.hash);
    s2.write_wrap_count = s1.write_wrap_count;
    ck_assert_mem_eq(&s1, &s2, sizeof(s1));

    size_t n1, n2;
    const tb_seq_loss *l1 = tb_get_seq_loss(a, &n1);
    const tb_seq_loss *l2 = tb_get_seq_loss(b, &n2);
    ck_assert_uint_eq(n1, n2);
    ck_assert_uint_gt(n1, 0);
    ck_assert_mem_eq(l1, l2, n1 * sizeof(*l1));
    tb_destroy(a);
    tb_destroy(b);
}

START_TEST(test_rewind_delivers_the_same)
{
    check_same((uint32_t)_i + 1, 30);
}
END_TEST

START_TEST(test_rewind_delivers_the_same_rare_reads)
{
    check_same((uint32_t)_i + 50, 90); /* more unread: more refusals */
}
END_TEST

/* --- what moves, and what finds it afterwards ----------------------------- */

typedef struct {
    const uint8_t *mem;
    uint8_t before[4096];  /* the first bytes of the ring before the write */
    size_t calls_at_0;     /* fence calls starting at offset 0 */
    size_t covered;        /* the longest of them */
    bool intact;           /* those bytes were unchanged at the call */
} fence_log;

static void on_fence(void *ctx, const uint8_t *p, size_t n)
{
    fence_log *l = ctx;
    if (p != l->mem)
        return;
    l->calls_at_0++;
    if (n > l->covered)
        l->covered = n;
    size_t k = n < sizeof(l->before) ? n : sizeof(l->before);
    l->intact = memcmp(l->mem, l->before, k) == 0;
}

/* Writer 2 fills the ring with whole packets of 4000 bytes (chunk ids from
 * *id) until the write cursor is at least `to`. */
static void fill(tb_buffer *b, uint32_t *id, size_t to)
{
    for (; b->wr < to; (*id)++)
        tbt_put1(b, 1, 2, *id, 0, 4000, (uint8_t)*id);
}

/* Writer w starts, in its chunk 0, a packet of 3000 'x' bytes that goes
 * on in its next chunk: the record waits for that continuation. */
static void start_waiting(tb_buffer *b, uint16_t w)
{
    tbt_put(b, 1, w, 0, TB_F2, (uint32_t[]){3000}, "x");
}

/* The continuation (chunk 1): 10 more bytes of the pattern, and writer
 * w's packet is whole (3010 bytes). */
static void finish_waiting(tb_buffer *b, uint16_t w)
{
    static const char cont[] = {(char)(('x' + 3000) % 256), 0};
    tbt_put(b, 1, w, 1, TB_F1, (uint32_t[]){10}, cont);
}

/* Reads what is left: exactly n packets, each a 3000-byte 'x' fragment
 * completed by its 10-byte continuation (finish_waiting), whole and
 * without a loss flag; nothing was overwritten. */
static void expect_waiting_packets_whole(tb_buffer *b, size_t n)
{
    tbt_pkts ps = tbt_read_all(b);
    ck_assert_uint_eq(ps.n, n);
    for (size_t i = 0; i < ps.n; i++) {
        ck_assert_uint_eq(ps.p[i].size, 3010);
        ck_assert(tbt_pattern_ok(ps.p[i].data, 3010, 'x'));
        ck_assert_uint_eq(ps.p[i].loss, 0);
    }
    tbt_free(&ps);
    ck_assert_uint_eq(TBT_STAT(b, chunks_overwritten), 0);
}

static const tbt_pkt *find(const tbt_pkts *ps, size_t size)
{
    for (size_t i = 0; i < ps->n; i++)
        if (ps->p[i].size == size)
            return &ps->p[i];
    return NULL;
}

START_TEST(test_rewind_moves_unread_records)
{
    tb_buffer *b = ring(1 * MIB, TB_RING_BUFFER, 64 * KIB);
    uint32_t id2 = 0;
    fill(b, &id2, 64 * KIB);
    size_t w1_off = b->wr;
    /* writer 1: a whole packet, then one that continues in chunk 1 */
    tbt_put(b, 1, 1, 0, TB_F2, (uint32_t[]){1000, 500}, "ab");
    /* writer 3: scraped, its last fragment still being written */
    tbt_put_ex(b, 1, 3, 0, 0, false, 1024, (uint32_t[]){300, 200}, "cd");
    size_t moved = b->wr - w1_off;
    size_t w3_off = w1_off + tb__outer(4 + 1000 + 4 + 500);
    tbt_pkts ps = tbt_read_all(b);
    ck_assert_uint_eq(ps.n, id2 + 2);               /* all but b and d */
    ck_assert_ptr_nonnull(find(&ps, 1000));
    ck_assert_ptr_nonnull(find(&ps, 300));
    tbt_free(&ps);
    ck_assert(b->rd_floor_valid);
    ck_assert_uint_eq(b->rd_floor, w1_off);        /* both still unread */

    fence_log log = {.mem = b->mem, .intact = false};
    memcpy(log.before, b->mem, sizeof(log.before));
    tb_set_write_fence(b, on_fence, &log);
    tbt_put1(b, 1, 2, id2++, 0, 100, 0x42);        /* rewinds first */
    ck_assert_uint_eq(TBT_STAT(b, write_wrap_count), 1);
    ck_assert_uint_eq(tb_used_size(b), moved + tb__outer(1 + 100));
    ck_assert_uint_eq(log.calls_at_0, 1);
    ck_assert_uint_ge(log.covered, moved);
    ck_assert(log.intact);
    /* the waiting records lead, in their order */
    ck_assert_uint_eq(tb__rec_at(b, 0)->pri_wri_id, (1u << 16) | 1u);
    ck_assert_uint_eq(tb__rec_at(b, w3_off - w1_off)->pri_wri_id,
                      (1u << 16) | 3u);

    /* a patch finds writer 1's chunk where it is now: the first 4 bytes of
     * packet b (after 4 + 1000 bytes of packet a and b's 4-byte header) */
    tb_patch p = {4 + 1000 + 4, {'W', 'X', 'Y', 'Z'}};
    ck_assert(tb_try_patch_chunk(b, 1, 1, 0, &p, 1, false));
    /* b's continuation, then writer 3's real commit of its chunk */
    tbt_put(b, 1, 1, 1, TB_F1, (uint32_t[]){300, 10},
            (char[]){(char)(('b' + 500) % 256), 'e', 0});
    tbt_put(b, 1, 3, 0, 0, (uint32_t[]){300, 200}, "cd");
    ps = tbt_read_all(b);
    ck_assert_uint_eq(ps.n, 4);                     /* b, d, 100, e */
    const tbt_pkt *pb = find(&ps, 800), *pd = find(&ps, 200);
    ck_assert_ptr_nonnull(pb);
    ck_assert_ptr_nonnull(pd);
    ck_assert_ptr_nonnull(find(&ps, 10));
    ck_assert_ptr_nonnull(find(&ps, 100));
    ck_assert_mem_eq(pb->data, "WXYZ", 4);
    ck_assert(tbt_pattern_ok(pb->data + 4, 796, (uint8_t)('b' + 4)));
    ck_assert(tbt_pattern_ok(pd->data, 200, 'd'));
    for (size_t i = 0; i < ps.n; i++)
        ck_assert_uint_eq(ps.p[i].loss, 0);
    tbt_free(&ps);
    ck_assert_uint_eq(TBT_STAT(b, chunks_overwritten), 0);
    ck_assert_uint_eq(TBT_STAT(b, abi_violations), 0);
    ck_assert_uint_eq(TBT_STAT(b, chunks_relocated), 1); /* writer 3's */
    size_t n;
    const tb_seq_loss *l = tb_get_seq_loss(b, &n);
    ck_assert_uint_eq(n, 3);
    for (size_t i = 0; i < n; i++) {
        ck_assert_uint_eq(l[i].packets_read, l[i].packets_offered);
        for (int c = 0; c < TB_NUM_CAUSES; c++)
            ck_assert_uint_eq(l[i].lost_packets[c], 0);
    }
    tb_destroy(b);
}
END_TEST

/* --- when it must not happen --------------------------------------------- */

START_TEST(test_rewind_never_in_discard)
{
    tb_buffer *b = ring(256 * KIB, TB_DISCARD, 64 * KIB);
    uint32_t id = 0;
    for (int i = 0; i < 200 && !b->discard_stop; i++) {
        tbt_put1(b, 1, 1, id++, 0, 4000, (uint8_t)i);
        /* always drained, up to the chunk that stopped it */
        ck_assert_uint_eq(tbt_read_count(b), b->discard_stop ? 0 : 1);
    }
    ck_assert(b->discard_stop);                    /* it still stopped */
    ck_assert_uint_eq(TBT_STAT(b, write_wrap_count), 0);
    ck_assert_uint_gt(TBT_STAT(b, chunks_discarded), 0);
    tb_destroy(b);
}
END_TEST

START_TEST(test_rewind_not_while_unread)
{
    tb_buffer *b = ring(256 * KIB, TB_RING_BUFFER, 64 * KIB);
    uint32_t id = 0;
    fill(b, &id, 128 * KIB);                       /* nothing read */
    ck_assert_uint_eq(TBT_STAT(b, write_wrap_count), 0);
    ck_assert_uint_ge(tb_used_size(b), 128 * KIB);
    /* a read of the 10 oldest is not enough either: what is left unread
     * is more than rewind_at / 8 */
    tb_begin_read(b);
    tb_packet pkt;
    for (int i = 0; i < 10; i++)
        ck_assert(tb_read_next_packet(b, &pkt, NULL, NULL));
    fill(b, &id, 200 * KIB);
    ck_assert_uint_eq(TBT_STAT(b, write_wrap_count), 0);
    /* and left alone it wraps at the end and overwrites, as any ring */
    fill(b, &id, 256 * KIB - 4096);
    for (int i = 0; i < 14; i++) /* past the 10 read records at the start */
        tbt_put1(b, 1, 2, id++, 0, 4000, 0);
    ck_assert_uint_eq(TBT_STAT(b, write_wrap_count), 1);
    ck_assert_uint_gt(TBT_STAT(b, chunks_overwritten), 0);
    tb_destroy(b);
}
END_TEST

/* A partial read after the ring wrapped leaves the floor ahead of the
 * writer; a writer that then lands exactly on it has lapped everything
 * unread since, which must stay (found by fuzz_tb). */
START_TEST(test_rewind_not_after_lapping_to_the_floor)
{
    tb_buffer *b = ring(128 * KIB, TB_RING_BUFFER, 8 * KIB);
    uint32_t id = 0;
    for (int i = 0; i < 40; i++)                   /* 32 fit: it wraps */
        tbt_put1(b, 1, 2, id++, 0, 4000, (uint8_t)i);
    ck_assert_uint_eq(TBT_STAT(b, write_wrap_count), 1);
    tb_begin_read(b);                              /* the 3 oldest */
    tb_packet pkt;
    for (int i = 0; i < 3; i++)
        ck_assert(tb_read_next_packet(b, &pkt, NULL, NULL));
    tbt_put1(b, 1, 2, id++, 0, 4000, 0);           /* over 2 read ones */
    tbt_put1(b, 1, 2, id++, 0, 4000, 0);
    ck_assert(b->rd_floor_valid);
    ck_assert_uint_eq(b->rd_floor, b->wr);         /* on the floor */
    ck_assert_uint_lt(b->wr, tb_used_size(b));
    tbt_put1(b, 1, 2, id++, 0, 4000, 0);           /* over the 3rd */
    ck_assert_uint_eq(TBT_STAT(b, write_wrap_count), 1);
    ck_assert_uint_eq(tbt_read_count(b), 43 - 8 - 3);
    ck_assert_uint_eq(TBT_STAT(b, chunks_overwritten), 8);
    tb_destroy(b);
}
END_TEST

/* What may move is at most an eighth of the bytes before the writer: at
 * 64 KiB + 12 KiB, 4 x ~3 KiB waiting is too much (old rule: 8 KiB). */
START_TEST(test_rewind_refused_with_too_much_unread)
{
    tb_buffer *b = ring(1 * MIB, TB_RING_BUFFER, 64 * KIB);
    uint32_t id = 0;
    fill(b, &id, 64 * KIB);
    for (uint16_t w = 3; w < 7; w++)               /* 4 x ~3 KiB waiting */
        start_waiting(b, w);
    ck_assert_uint_eq(tbt_read_count(b), id);
    ck_assert_uint_lt(b->wr / 8, 4 * 3024);
    tbt_put1(b, 1, 2, id++, 0, 100, 0);
    ck_assert_uint_eq(TBT_STAT(b, write_wrap_count), 0);
    ck_assert_uint_eq(b->rewind_refused_gen, b->generation);
    /* one of them completes and is read: 3 x ~3 KiB left to move, an
     * eighth of what lies before the writer: it rewinds */
    finish_waiting(b, 3);
    ck_assert_uint_eq(tbt_read_count(b), 2);       /* 100, then x3 */
    ck_assert_uint_ge(b->wr / 8, 3 * 3024);
    tbt_put1(b, 1, 2, id++, 0, 100, 0);
    ck_assert_uint_eq(TBT_STAT(b, write_wrap_count), 1);
    /* writers 4 to 6 still get their packets whole */
    for (uint16_t w = 4; w < 7; w++)
        finish_waiting(b, w);
    tbt_pkts ps = tbt_read_all(b);
    ck_assert_uint_eq(ps.n, 4);
    ck_assert_ptr_nonnull(find(&ps, 100));
    for (size_t i = 0; i < ps.n; i++) {
        ck_assert_uint_eq(ps.p[i].loss, 0);
        if (ps.p[i].size == 3010)
            ck_assert(tbt_pattern_ok(ps.p[i].data, 3010, 'x'));
        else
            ck_assert_uint_eq(ps.p[i].size, 100);
    }
    tbt_free(&ps);
    ck_assert_uint_eq(TBT_STAT(b, chunks_overwritten), 0);
    tb_destroy(b);
}
END_TEST

/* --- the write probe ----------------------------------------------------- */

typedef struct {
    const uint8_t *mem;
    bool busy;
    int calls;
    size_t n;           /* the last call's range, from mem */
    bool at_start;      /* it started at mem */
} probe_log;

static bool on_probe(void *ctx, const uint8_t *p, size_t n)
{
    probe_log *l = ctx;
    l->calls++;
    l->at_start = p == l->mem;
    l->n = n;
    return l->busy;
}

/* A drained ring asks the probe about its first rewind_at bytes before it
 * restarts there; while it says they are busy the writer goes on where it
 * is (asked once per read, nothing lost, nothing moved), and the next
 * read's first commit restarts. */
START_TEST(test_rewind_put_off_while_the_probe_says_busy)
{
    tb_buffer *b = ring(1 * MIB, TB_RING_BUFFER, 64 * KIB);
    probe_log log = {.mem = b->mem, .busy = true};
    tb_set_write_probe(b, on_probe, &log);
    uint32_t id = 0;
    fill(b, &id, 80 * KIB);
    ck_assert_uint_eq(tbt_read_count(b), id);      /* drained */
    ck_assert_int_eq(log.calls, 0);                /* not yet due */
    size_t wr = b->wr;
    for (int i = 0; i < 8; i++)
        tbt_put1(b, 1, 2, id++, 0, 4000, (uint8_t)i);
    ck_assert_int_eq(log.calls, 1);                /* once per read */
    ck_assert(log.at_start);
    ck_assert_uint_eq(log.n, 64 * KIB);
    ck_assert_uint_eq(b->rewinds_put_off, 1);
    ck_assert_uint_eq(TBT_STAT(b, write_wrap_count), 0);
    ck_assert_uint_eq(b->wr, wr + 8 * tb__outer(2 + 4000));
    /* read again: asked again, still busy */
    ck_assert_uint_eq(tbt_read_count(b), 8);
    tbt_put1(b, 1, 2, id++, 0, 4000, 0);
    ck_assert_int_eq(log.calls, 2);
    ck_assert_uint_eq(TBT_STAT(b, write_wrap_count), 0);
    /* free now: the next read's first commit restarts at 0 */
    log.busy = false;
    ck_assert_uint_eq(tbt_read_count(b), 1);
    tbt_put1(b, 1, 2, id++, 0, 4000, 0x5a);
    ck_assert_int_eq(log.calls, 3);
    ck_assert_uint_eq(TBT_STAT(b, write_wrap_count), 1);
    ck_assert_uint_eq(b->rewinds_put_off, 2);
    ck_assert_uint_eq(b->wr, tb__outer(2 + 4000));
    tbt_pkts ps = tbt_read_all(b);
    ck_assert_uint_eq(ps.n, 1);
    ck_assert_uint_eq(ps.p[0].loss, 0);
    ck_assert(tbt_pattern_ok(ps.p[0].data, 4000, 0x5a));
    tbt_free(&ps);
    ck_assert_uint_eq(TBT_STAT(b, chunks_overwritten), 0);
    /* removed: the next restart asks nobody */
    tb_set_write_probe(b, NULL, &log);
    ck_assert_ptr_null(b->probe_ctx);
    log.busy = true;
    fill(b, &id, 80 * KIB);
    ck_assert_uint_gt(tbt_read_count(b), 0);
    tbt_put1(b, 1, 2, id++, 0, 4000, 0);
    ck_assert_int_eq(log.calls, 3);
    ck_assert_uint_eq(TBT_STAT(b, write_wrap_count), 2);
    tb_destroy(b);
}
END_TEST

/* --- the default --------------------------------------------------------- */

START_TEST(test_rewind_default_by_ring_size)
{
    tb_buffer *small = tb_create(16 * MIB - 4096, TB_RING_BUFFER);
    ck_assert_uint_eq(small->rewind_at, 0);
    tb_destroy(small);
    /* a 32 MiB ring drained every 64 chunks stays within its first
     * 2 MiB and a bit */
    tb_buffer *b = tb_create(32 * MIB, TB_RING_BUFFER);
    ck_assert_uint_eq(b->rewind_at, 2 * MIB);
    uint32_t id = 0;
    size_t read = 0, most = 0;
    for (int i = 0; i < 16384; i++) {
        tbt_put1(b, 1, 1, id++, 0, 4000, (uint8_t)i);
        if (i % 64 == 63)
            read += tbt_read_count(b);
        if (tb_used_size(b) > most)
            most = tb_used_size(b);
    }
    read += tbt_read_count(b);
    ck_assert_uint_eq(read, 16384);                /* 64 MiB through it */
    ck_assert_uint_ge(TBT_STAT(b, write_wrap_count), 24);
    ck_assert_uint_eq(TBT_STAT(b, chunks_overwritten), 0);
    ck_assert_uint_le(most, 2 * MIB + 64 * 4096);
    tb_destroy(b);
    tb_buffer *big = tb_create(128 * MIB, TB_RING_BUFFER);
    ck_assert_uint_eq(big->rewind_at, 2 * MIB);
    tb_destroy(big);
}
END_TEST

/* --- a floor far behind: one packet waits for its continuation --------- */

static const tb_seq_loss *loss_of(tb_buffer *b, uint16_t writer)
{
    size_t n;
    const tb_seq_loss *l = tb_get_seq_loss(b, &n);
    for (size_t i = 0; i < n; i++)
        if (l[i].writer_id == writer)
            return &l[i];
    return NULL;
}

/* Writer 2 writes a 4000-byte packet and it is read at once. */
static void put_and_read(tb_buffer *b, uint32_t *id)
{
    tbt_put1(b, 1, 2, *id, 0, 4000, (uint8_t)*id);
    (*id)++;
    ck_assert_uint_eq(tbt_read_count(b), 1);
}

/* Writer 3's packet waits for its continuation while writer 2 writes on,
 * each packet read at once: writer 3's record holds the read floor at the
 * start of the ring, far behind the writer. The ring still rewinds every
 * rewind_at bytes (the waiting record stays where it is, at the start),
 * and the packet comes out whole when its continuation comes. */
START_TEST(test_rewind_with_the_floor_far_behind)
{
    tb_buffer *b = ring(1 * MIB, TB_RING_BUFFER, 64 * KIB);
    uint32_t id = 0;
    start_waiting(b, 3);
    for (int i = 0; i < 100; i++)                 /* ~400 KiB */
        put_and_read(b, &id);
    ck_assert(b->rd_floor_valid);
    ck_assert_uint_ge(TBT_STAT(b, write_wrap_count), 5);
    ck_assert_uint_lt(tb_used_size(b), 72 * KIB);
    ck_assert_uint_eq(tb__rec_at(b, 0)->pri_wri_id, (1u << 16) | 3u);
    finish_waiting(b, 3);
    expect_waiting_packets_whole(b, 1);
    const tb_seq_loss *l = loss_of(b, 3);
    ck_assert_ptr_nonnull(l);
    ck_assert_uint_eq(l->packets_read, 1);
    ck_assert_uint_eq(l->lost_packets[TB_CAUSE_OVERWRITE], 0);
    tb_destroy(b);
}
END_TEST

/* The same records, refused at the threshold, move once the writer is far
 * enough on: eight times what waits lies before it (before 2026-12-06 the
 * bound stayed at rewind_at / 8 and this ring never rewound). Writer 2's
 * packets are read as they come, so each retry is a new read's. */
START_TEST(test_rewind_moves_more_once_the_writer_is_further_on)
{
    tb_buffer *b = ring(1 * MIB, TB_RING_BUFFER, 64 * KIB);
    uint32_t id = 0;
    size_t waiting = 0, wr_at_rewind = 0;
    fill(b, &id, 64 * KIB);
    for (uint16_t w = 3; w < 7; w++) {             /* 4 x ~3 KiB waiting */
        size_t before = b->wr;
        start_waiting(b, w);
        waiting += b->wr - before;
    }
    ck_assert_uint_eq(tbt_read_count(b), id);
    ck_assert_uint_gt(waiting, 64 * KIB / 8);      /* too much at first */
    size_t rec = b->wr;                            /* one of writer 2's */
    put_and_read(b, &id);
    ck_assert_uint_eq(TBT_STAT(b, write_wrap_count), 0);
    rec = b->wr - rec;
    for (int i = 0; i < 40 && TBT_STAT(b, write_wrap_count) == 0; i++) {
        wr_at_rewind = b->wr;
        put_and_read(b, &id);
    }
    ck_assert_uint_eq(TBT_STAT(b, write_wrap_count), 1);
    ck_assert_uint_ge(wr_at_rewind, 8 * waiting);  /* not before */
    ck_assert_uint_lt(wr_at_rewind, 8 * waiting + rec); /* at once */
    /* the four moved whole, first in the ring, then writer 2's packet */
    ck_assert_uint_eq(tb__rec_at(b, 0)->pri_wri_id, (1u << 16) | 3u);
    ck_assert_uint_eq(b->wr, waiting + rec);
    for (uint16_t w = 3; w < 7; w++)
        finish_waiting(b, w);
    expect_waiting_packets_whole(b, 4);
    tb_destroy(b);
}
END_TEST

/* However far the writer is, one rewind moves at most rewind_at / 2:
 * 11 x ~3 KiB waiting (more than 32 KiB) hold it back through 512 KiB of
 * writes; once one of them is read it goes back. */
START_TEST(test_rewind_moves_at_most_half_the_threshold)
{
    tb_buffer *b = ring(1 * MIB, TB_RING_BUFFER, 64 * KIB);
    uint32_t id = 0;
    for (uint16_t w = 3; w < 14; w++)
        start_waiting(b, w);
    ck_assert_uint_gt(b->wr, 32 * KIB);            /* waiting: > cap */
    ck_assert_uint_lt(b->wr, 32 * KIB + 3024);     /* one less: <= cap */
    while (b->wr < 512 * KIB)
        put_and_read(b, &id);
    ck_assert_uint_eq(TBT_STAT(b, write_wrap_count), 0);
    finish_waiting(b, 3);
    ck_assert_uint_eq(tbt_read_count(b), 1);
    put_and_read(b, &id);
    ck_assert_uint_eq(TBT_STAT(b, write_wrap_count), 1);
    ck_assert_uint_eq(tb__rec_at(b, 0)->pri_wri_id, (1u << 16) | 4u);
    for (uint16_t w = 4; w < 14; w++)
        finish_waiting(b, w);
    expect_waiting_packets_whole(b, 10);
    tb_destroy(b);
}
END_TEST

/* Records that wait are compacted towards the start even where their new
 * place overlaps their old one (the floor at 0, below what they need):
 * writer 3 waits at the start, writer 4 starts waiting later; each rewind
 * keeps them both, in their order, and both packets come out whole. */
START_TEST(test_rewind_compacts_waiting_records_in_order)
{
    tb_buffer *b = ring(1 * MIB, TB_RING_BUFFER, 64 * KIB);
    uint32_t id = 0;
    start_waiting(b, 3);
    for (int i = 0; i < 5; i++)
        put_and_read(b, &id);
    start_waiting(b, 4);
    uint64_t wraps = TBT_STAT(b, write_wrap_count);
    for (int i = 0; i < 60; i++)                  /* ~240 KiB */
        put_and_read(b, &id);
    ck_assert_uint_ge(TBT_STAT(b, write_wrap_count), wraps + 3);
    size_t second = tb__outer(4 + 3000);
    ck_assert_uint_eq(tb__rec_at(b, 0)->pri_wri_id, (1u << 16) | 3u);
    ck_assert_uint_eq(tb__rec_at(b, second)->pri_wri_id, (1u << 16) | 4u);
    finish_waiting(b, 4);
    finish_waiting(b, 3);
    expect_waiting_packets_whole(b, 2);
    tb_destroy(b);
}
END_TEST

/* A waiting record that moves down by less than its own size overwrites
 * its old header: writer 3 waits with 100 bytes at the start, writer 4
 * with 3000 right behind it; once writer 3's packet is read, the next
 * rewind moves writer 4's record from just past it to offset 0. The ring
 * then holds that record and what was written after, tiled exactly, and
 * writer 4's packet comes out whole. */
START_TEST(test_rewind_moves_a_record_over_its_old_place)
{
    tb_buffer *b = ring(1 * MIB, TB_RING_BUFFER, 64 * KIB);
    const char cont3[] = {(char)(('a' + 100) % 256), 0};
    uint32_t id = 0;
    tbt_put(b, 1, 3, 0, TB_F2, (uint32_t[]){100}, "a");
    start_waiting(b, 4);
    uint64_t wraps = TBT_STAT(b, write_wrap_count);
    while (TBT_STAT(b, write_wrap_count) == wraps)
        put_and_read(b, &id);
    size_t a = tb__outer(1 + 100), x = tb__outer(2 + 3000);
    ck_assert_uint_eq(tb__rec_at(b, 0)->pri_wri_id, (1u << 16) | 3u);
    ck_assert_uint_eq(tb__rec_at(b, a)->pri_wri_id, (1u << 16) | 4u);
    tbt_put(b, 1, 3, 1, TB_F1, (uint32_t[]){10}, cont3);
    tbt_pkts ps = tbt_read_all(b);
    ck_assert_uint_eq(ps.n, 1);                    /* writer 3's, whole */
    ck_assert_uint_eq(ps.p[0].size, 110);
    ck_assert(tbt_pattern_ok(ps.p[0].data, 110, 'a'));
    tbt_free(&ps);
    wraps = TBT_STAT(b, write_wrap_count);
    while (TBT_STAT(b, write_wrap_count) == wraps)
        put_and_read(b, &id);
    /* writer 4's record alone was moved, to 0; then one packet of writer
     * 2 was written behind it */
    ck_assert_uint_eq(tb__rec_at(b, 0)->pri_wri_id, (1u << 16) | 4u);
    ck_assert_uint_eq(tb_used_size(b), x + tb__outer(2 + 4000));
    finish_waiting(b, 4);
    ps = tbt_read_all(b);
    ck_assert_uint_eq(ps.n, 1);
    ck_assert_uint_eq(ps.p[0].size, 3010);
    ck_assert(tbt_pattern_ok(ps.p[0].data, 3010, 'x'));
    ck_assert_uint_eq(ps.p[0].loss, 0);
    tbt_free(&ps);
    for (int i = 0; i < 300; i++)                  /* past the ring's end */
        put_and_read(b, &id);
    ck_assert_uint_eq(TBT_STAT(b, chunks_overwritten), 0);
    ck_assert_uint_eq(TBT_STAT(b, abi_violations), 0);
    tb_destroy(b);
}
END_TEST

/* A packet whose continuation never comes: rewinds keep its record for
 * TB__REWIND_MOVES_MAX (16) in a row, no more; then the ring laps as any
 * ring, overwrites it and counts the packet lost (overwritten), and
 * rewinds start again. */
START_TEST(test_rewind_gives_up_on_a_record_that_waits_too_long)
{
    tb_buffer *b = ring(1 * MIB, TB_RING_BUFFER, 64 * KIB);
    uint32_t id = 0;
    start_waiting(b, 3);
    while (TBT_STAT(b, write_wrap_count) < 16 && id < 2000)
        put_and_read(b, &id);
    ck_assert_uint_eq(TBT_STAT(b, write_wrap_count), 16);
    while (b->wr < 512 * KIB)                     /* no 17th */
        put_and_read(b, &id);
    ck_assert_uint_eq(TBT_STAT(b, write_wrap_count), 16);
    ck_assert_uint_eq(tb__rec_at(b, 0)->pri_wri_id, (1u << 16) | 3u);
    const tb_seq_loss *l = loss_of(b, 3);
    ck_assert_ptr_nonnull(l);
    ck_assert_uint_eq(l->lost_packets[TB_CAUSE_OVERWRITE], 0);
    while (TBT_STAT(b, write_wrap_count) < 17 && id < 4000)  /* the lap */
        put_and_read(b, &id);
    ck_assert_uint_eq(TBT_STAT(b, write_wrap_count), 17);
    put_and_read(b, &id);                         /* over writer 3's */
    l = loss_of(b, 3);
    ck_assert_uint_eq(l->lost_packets[TB_CAUSE_OVERWRITE], 1);
    ck_assert_uint_eq(l->packets_read, 0);
    uint32_t before = id;
    while (TBT_STAT(b, write_wrap_count) < 18 && id < before + 100)
        put_and_read(b, &id);
    ck_assert_uint_eq(TBT_STAT(b, write_wrap_count), 18);  /* again */
    ck_assert_uint_lt(id - before, 40);
    tb_destroy(b);
}
END_TEST

static Suite *tb_rewind_suite(void)
{
    Suite *s = suite_create("tb_rewind");
    TCase *tc = tcase_create("rewind");
    tcase_set_timeout(tc, 60);
    tcase_add_loop_test(tc, test_rewind_delivers_the_same, 0, 8);
    tcase_add_loop_test(tc, test_rewind_delivers_the_same_rare_reads, 0, 4);
    tcase_add_test(tc, test_rewind_moves_unread_records);
    tcase_add_test(tc, test_rewind_never_in_discard);
    tcase_add_test(tc, test_rewind_not_while_unread);
    tcase_add_test(tc, test_rewind_not_after_lapping_to_the_floor);
    tcase_add_test(tc, test_rewind_refused_with_too_much_unread);
    tcase_add_test(tc, test_rewind_with_the_floor_far_behind);
    tcase_add_test(tc, test_rewind_moves_more_once_the_writer_is_further_on);
    tcase_add_test(tc, test_rewind_moves_at_most_half_the_threshold);
    tcase_add_test(tc, test_rewind_compacts_waiting_records_in_order);
    tcase_add_test(tc, test_rewind_moves_a_record_over_its_old_place);
    tcase_add_test(tc, test_rewind_gives_up_on_a_record_that_waits_too_long);
    tcase_add_test(tc, test_rewind_put_off_while_the_probe_says_busy);
    tcase_add_test(tc, test_rewind_default_by_ring_size);
    suite_add_tcase(s, tc);
    return s;
}

TBT_MAIN(tb_rewind_suite)
