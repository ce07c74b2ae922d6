/*
 * check_tb_lossacct.c - libbuf: exact per-sequence loss accounting
 * (tb_get_seq_loss), one deterministic case per cause.
 *
 * Each test builds chunks by hand (tb_testutil.h), drives the buffer into
 * one kind of loss and checks the writer's entry: packets offered, read,
 * pending, and lost per cause, and that offered = read + pending + lost
 * always holds. A fragmented packet must count once wherever it is lost.
 */
#include "tb_testutil.h"

static tbt_chunk c;

/* The entry of (producer 1, writer w); fails if absent. */
static const tb_seq_loss *entry(tb_buffer *b, uint16_t w)
{
    size_t n = 0;
    const tb_seq_loss *l = tb_get_seq_loss(b, &n);
    for (size_t i = 0; i < n; i++)
        if (l[i].producer_id == 1 && l[i].writer_id == w) {
            uint64_t lost = 0;
            for (int k = 0; k < TB_NUM_CAUSES; k++)
                lost += l[i].lost_packets[k];
            ck_assert_uint_eq(l[i].packets_offered,
                              l[i].packets_read + l[i].packets_pending +
                              lost);
            return &l[i];
        }
    ck_abort_msg("no loss entry for writer %u", w);
    return NULL;
}

/* A chunk of producer 1 (tbt_commit) with one fragment of `size` bytes
 * filled from seed. */
static void one_frag(tb_buffer *b, uint16_t w, uint32_t id, uint8_t flags,
                     uint32_t size, uint8_t seed)
{
    tbt_reset(&c);
    tbt_frag(&c, size, seed);
    tbt_commit(b, w, id, flags, &c);
}

static void whole_chunk(tb_buffer *b, uint16_t w, uint32_t id, int npk,
                        uint32_t size)
{
    tbt_reset(&c);
    for (int i = 0; i < npk; i++)
        tbt_frag(&c, size, (uint8_t)(id + i));
    tbt_commit(b, w, id, 0, &c);
}

TBT_RING_TEST(test_overwrite_counts_every_packet)
{
    /* 20 chunks x 3 packets of ~300 bytes into 4 KiB, never read. */
    for (uint32_t id = 0; id < 20; id++)
        whole_chunk(b, 1, id, 3, 100);
    const tb_seq_loss *e = entry(b, 1);
    ck_assert_uint_eq(e->packets_offered, 60);
    ck_assert_uint_gt(e->lost_packets[TB_CAUSE_OVERWRITE], 0);
    ck_assert_uint_gt(e->lost_bytes[TB_CAUSE_OVERWRITE], 0);
    tbt_pkts ps = tbt_read_all(b);
    e = entry(b, 1);
    ck_assert_uint_eq(e->packets_read, ps.n);
    ck_assert_uint_eq(e->packets_pending, 0);
    ck_assert_uint_eq(e->lost_packets[TB_CAUSE_OVERWRITE] + ps.n, 60);
    ck_assert_str_eq(tb_loss_cause_name(TB_CAUSE_REASSEMBLY), "reassembly");
    ck_assert_str_eq(tb_loss_cause_name(99), "?");
    tbt_free(&ps);
}

TBT_RING_TEST(test_fragmented_packet_counts_once)
{
    /* one packet over chunks 0..2, then enough to evict all of it */
    one_frag(b, 1, 0, TB_F2, 500, 1);
    one_frag(b, 1, 1, TB_F1 | TB_F2, 500, 2);
    one_frag(b, 1, 2, TB_F1, 500, 3);
    ck_assert_uint_eq(entry(b, 1)->packets_offered, 1);
    for (uint32_t id = 0; id < 8; id++)
        whole_chunk(b, 2, id, 1, 1000);
    const tb_seq_loss *e = entry(b, 1);
    ck_assert_uint_eq(e->lost_packets[TB_CAUSE_OVERWRITE], 1);
    /* read, not evicted: one packet read */
    tb_buffer *b2 = tb_create(65536, TB_RING_BUFFER);
    one_frag(b2, 1, 0, TB_F2, 500, 1);
    one_frag(b2, 1, 1, TB_F1, 500, 3);
    tbt_pkts ps = tbt_read_all(b2);
    ck_assert_uint_eq(ps.n, 1);
    ck_assert_uint_eq(entry(b2, 1)->packets_read, 1);
    ck_assert_uint_eq(entry(b2, 1)->packets_offered, 1);
    tbt_free(&ps);
    tb_destroy(b2);
}

START_TEST(test_discard_full_and_stale)
{
    tb_buffer *b = tb_create(4096, TB_DISCARD);
    for (uint32_t id = 0; id < 10; id++)
        whole_chunk(b, 1, id, 2, 300);
    const tb_seq_loss *e = entry(b, 1);
    ck_assert_uint_eq(e->packets_offered, 20);
    ck_assert_uint_gt(e->lost_packets[TB_CAUSE_DISCARD], 0);
    ck_assert_uint_eq(e->lost_packets[TB_CAUSE_DISCARD] % 2, 0);
    tbt_pkts ps = tbt_read_all(b);
    ck_assert_uint_eq(ps.n + entry(b, 1)->lost_packets[TB_CAUSE_DISCARD],
                      20);
    tbt_free(&ps);
    tb_destroy(b);

    /* a chunk older than the last one consumed: refused, counted */
    b = tb_create(65536, TB_RING_BUFFER);
    whole_chunk(b, 1, 5, 1, 10);
    ps = tbt_read_all(b);
    tbt_free(&ps);
    whole_chunk(b, 1, 3, 4, 10);
    e = entry(b, 1);
    ck_assert_uint_eq(e->lost_packets[TB_CAUSE_DISCARD], 4);
    ck_assert_uint_eq(e->packets_offered, 5);
    tb_destroy(b);
}
END_TEST

START_TEST(test_abi_violations)
{
    tb_buffer *b = tb_create(65536, TB_RING_BUFFER);
    /* declares 3 fragments, 2 tokenize: 2 accepted, 1 lost */
    tbt_reset(&c);
    tbt_frag(&c, 10, 1);
    tbt_frag(&c, 10, 2);
    c.data[c.size++] = 0x7F; /* size 127 past the end */
    c.nfrags = 3;
    tbt_commit(b, 1, 0, 0, &c);
    const tb_seq_loss *e = entry(b, 1);
    ck_assert_uint_eq(e->lost_packets[TB_CAUSE_ABI_VIOLATION], 1);
    ck_assert_uint_eq(e->packets_pending, 2);
    /* larger than the buffer: every packet refused */
    tb_buffer *small = tb_create(4096, TB_RING_BUFFER);
    tbt_reset(&c);
    for (int i = 0; i < 5; i++)
        tbt_frag(&c, 1000, (uint8_t)i);
    tbt_commit(small, 1, 0, 0, &c);
    ck_assert_uint_eq(entry(small, 1)->lost_packets[TB_CAUSE_ABI_VIOLATION],
                      5);
    tb_destroy(small);
    ck_assert_uint_eq(tbt_read_count(b), 2);
    tb_destroy(b);
}
END_TEST

START_TEST(test_reassembly_gap_and_pending)
{
    tb_buffer *b = tb_create(65536, TB_RING_BUFFER);
    /* begin in 0, 1 never comes, 2 is a fresh whole packet */
    one_frag(b, 1, 0, TB_F2, 50, 1);
    whole_chunk(b, 1, 2, 1, 20);
    tbt_pkts ps = tbt_read_all(b);
    ck_assert_uint_eq(ps.n, 1);
    const tb_seq_loss *e = entry(b, 1);
    ck_assert_uint_eq(e->lost_packets[TB_CAUSE_REASSEMBLY], 1);
    tbt_free(&ps);
    /* a begin waiting for its continuation is pending, not lost */
    one_frag(b, 1, 3, TB_F2, 50, 3);
    ps = tbt_read_all(b);
    ck_assert_uint_eq(ps.n, 0);
    e = entry(b, 1);
    ck_assert_uint_eq(e->packets_pending, 1);
    ck_assert_uint_eq(e->lost_packets[TB_CAUSE_REASSEMBLY], 1);
    tbt_free(&ps);
    /* the clone keeps the losses, not the reads */
    tb_buffer *cl = tb_clone_readonly(b);
    ck_assert_ptr_nonnull(cl);
    ck_assert_uint_eq(entry(cl, 1)->packets_read, 0);
    ck_assert_uint_eq(entry(cl, 1)->lost_packets[TB_CAUSE_REASSEMBLY], 1);
    ck_assert_uint_eq(entry(cl, 1)->packets_pending, 1);
    tb_destroy(cl);
    tb_destroy(b);
}
END_TEST

/* A patch wholly past a record's valid bytes cannot change a packet
 * (Perfetto's SDK sends them for a packet it took back out of a full
 * chunk): counted failed, otherwise as if applied, so the record's last
 * patch clears its needs-patching flag and the sequence is read on
 * (before, it stalled until the ring overwrote it). */
TBT_RING_TEST(test_patch_past_the_payload_is_ignored)
{
    one_frag(b, 1, 0, TB_F2 | TB_F4, 100, 1);
    one_frag(b, 1, 1, TB_F1, 100, 2);
    tb_patch p = {5000, {1, 2, 3, 4}};
    ck_assert(!tb_try_patch_chunk(b, 1, 1, 0, &p, 1, false));
    ck_assert_uint_eq(TBT_STAT(b, patches_failed), 1);
    tb_patch q = {101, {1, 2, 3, 4}};           /* right at the end */
    ck_assert(!tb_try_patch_chunk(b, 1, 1, 0, &q, 1, false));
    ck_assert_uint_eq(TBT_STAT(b, patches_failed), 2);
    tbt_pkts ps = tbt_read_all(b);
    ck_assert_uint_eq(ps.n, 1);                 /* reassembled, not stalled */
    ck_assert_uint_eq(ps.p[0].size, 200);
    ck_assert_uint_eq(ps.p[0].loss, 0);
    tbt_free(&ps);
    const tb_seq_loss *e = entry(b, 1);
    ck_assert_uint_eq(e->packets_read, 1);
    ck_assert_uint_eq(e->lost_packets[TB_CAUSE_PATCH_FAILED], 0);
}

/* A patch across the end of the valid bytes leaves the last fragment
 * untrustworthy: the read drops its packet at once (cause PATCH_FAILED,
 * DATA_LOSS_CHUNK_CORRUPTED on the sequence's next packet) instead of
 * waiting for a patch that will never make it whole. */
TBT_RING_TEST(test_patch_across_the_payload_end_drops_the_packet)
{
    one_frag(b, 1, 0, TB_F2 | TB_F4, 100, 1);   /* payload 101 bytes */
    one_frag(b, 1, 1, TB_F1, 100, 2);
    one_frag(b, 1, 2, 0, 50, 3);
    tb_patch p = {99, {1, 2, 3, 4}};
    ck_assert(!tb_try_patch_chunk(b, 1, 1, 0, &p, 1, false));
    tbt_pkts ps = tbt_read_all(b);
    ck_assert_uint_eq(ps.n, 1);                 /* only the next packet */
    ck_assert_uint_eq(ps.p[0].size, 50);
    /* and its continuation in chunk 1 was met as an orphan */
    ck_assert_uint_eq(ps.p[0].loss, TB_LOSS_PRESENT |
                      TB_LOSS_CHUNK_CORRUPTED | TB_LOSS_ORPHAN_CONTINUATION);
    tbt_free(&ps);
    const tb_seq_loss *e = entry(b, 1);
    ck_assert_uint_eq(e->lost_packets[TB_CAUSE_PATCH_FAILED], 1);
    ck_assert_uint_eq(e->packets_pending, 0);
    ck_assert_uint_eq(e->packets_read, 1);
}

START_TEST(test_scrape_then_commit_not_double_counted)
{
    tb_buffer *b = tb_create(65536, TB_RING_BUFFER);
    tbt_reset(&c);
    tbt_frag(&c, 10, 1);
    tbt_frag(&c, 10, 2);
    tbt_frag(&c, 10, 3); /* untrusted while scraped */
    tbt_commit_ex(b, 1, 1, 0, 0, false, &c, c.size + 16);
    ck_assert_uint_eq(entry(b, 1)->packets_offered, 2);
    ck_assert_uint_eq(tbt_read_count(b), 2);
    /* the real commit: re-admitted, only the third packet is new */
    tbt_commit(b, 1, 0, 0, &c);
    ck_assert_uint_eq(tbt_read_count(b), 1);
    const tb_seq_loss *e = entry(b, 1);
    ck_assert_uint_eq(e->packets_offered, 3);
    ck_assert_uint_eq(e->packets_read, 3);
    /* committed once more (a duplicate): nothing new, nothing lost */
    tbt_commit(b, 1, 0, 0, &c);
    e = entry(b, 1);
    ck_assert_uint_eq(e->packets_offered, 3);
    tb_destroy(b);
}
END_TEST

/* A hostile producer commits a chunk again with the bytes already
 * delivered rewritten, or a packet start turned into a continuation: the
 * rewrite is refused (or the vanished packet counted lost), nothing is read
 * that was never offered, and the accounting still adds up (found by
 * fuzz/fuzz_tb). */
START_TEST(test_hostile_rewrite_keeps_accounting)
{
    tb_buffer *b = tb_create(65536, TB_RING_BUFFER);
    tb_packet pk;
    /* Writer 1: a scraped chunk read whole, then "committed" with one big
     * fragment over the bytes already read (re-admit path). */
    tbt_reset(&c);
    tbt_frag(&c, 10, 1);
    tbt_frag(&c, 10, 2);                   /* in progress while scraped */
    tbt_commit_ex(b, 1, 1, 0, 0, false, &c, c.size + 16);
    tbt_pkts ps = tbt_read_all(b);
    ck_assert_uint_eq(ps.n, 1);
    tbt_free(&ps);
    uint64_t v0 = TBT_STAT(b, abi_violations);
    tbt_reset(&c);
    tbt_frag(&c, 40, 9);
    tbt_frag(&c, 5, 9);
    tbt_commit(b, 1, 0, 0, &c);
    ck_assert_uint_gt(TBT_STAT(b, abi_violations), v0);
    ps = tbt_read_all(b);
    ck_assert_uint_eq(ps.n, 0);
    tbt_free(&ps);
    ck_assert_uint_eq(entry(b, 1)->packets_read, 1);

    /* Writer 2: a scraped chunk read in part, then committed with its first
     * fragment rewritten (in-place re-commit path). */
    tbt_reset(&c);
    tbt_frag(&c, 10, 1);
    tbt_frag(&c, 10, 2);
    tbt_frag(&c, 10, 3);                   /* in progress while scraped */
    tbt_commit_ex(b, 1, 2, 0, 0, false, &c, c.size + 16);
    tb_begin_read(b);
    ck_assert(tb_read_next_packet(b, &pk, NULL, NULL));
    v0 = TBT_STAT(b, abi_violations);
    tbt_reset(&c);
    tbt_frag(&c, 40, 9);
    tbt_commit(b, 2, 0, 0, &c);
    ck_assert_uint_gt(TBT_STAT(b, abi_violations), v0);
    ps = tbt_read_all(b);
    ck_assert_uint_eq(ps.n, 1);            /* the second original packet */
    tbt_free(&ps);
    const tb_seq_loss *e = entry(b, 2);
    ck_assert_uint_eq(e->packets_read, 2);

    /* Writer 3: a scraped chunk committed again with its whole first
     * packet now flagged as a continuation: that packet is lost. */
    tbt_reset(&c);
    tbt_frag(&c, 10, 1);
    tbt_frag(&c, 10, 2);
    tbt_commit_ex(b, 1, 3, 0, 0, false, &c, c.size + 16);
    ck_assert_uint_eq(entry(b, 3)->packets_pending, 1);
    tbt_reset(&c);
    tbt_frag(&c, 15, 1);                   /* grown, and a continuation */
    tbt_frag(&c, 10, 2);
    tbt_commit_ex(b, 1, 3, 0, TB_F1, false, &c, c.size + 16);
    e = entry(b, 3);
    ck_assert_uint_eq(e->packets_pending, 0);
    ck_assert_uint_eq(e->lost_packets[TB_CAUSE_ABI_VIOLATION], 1);

    /* Writer 4: a patch over the fragment header splits one packet into
     * two: the new start is offered, both are read. */
    tbt_reset(&c);
    tbt_frag(&c, 16, 1);                   /* 1-byte header + 16 bytes */
    tbt_commit(b, 4, 0, TB_F4, &c);
    tb_patch pt[2] = {{.offset = 0, .data = {3, 0, 0, 0}},
                      {.offset = 4, .data = {12, 0, 0, 0}}};
    ck_assert(tb_try_patch_chunk(b, 1, 4, 0, pt, 2, false));
    ps = tbt_read_all(b);                  /* 3 bytes, then 12 */
    ck_assert_uint_eq(ps.n, 2);
    tbt_free(&ps);
    e = entry(b, 4);
    ck_assert_uint_eq(e->packets_offered, 2);
    ck_assert_uint_eq(e->packets_read, 2);

    /* Writer 5: the same, but a later patch of the group is out of range:
     * refused after the first was applied; the accounting still adds up. */
    tbt_reset(&c);
    tbt_frag(&c, 16, 1);
    tbt_commit(b, 5, 0, TB_F4, &c);
    pt[1].offset = 1000;
    ck_assert(!tb_try_patch_chunk(b, 1, 5, 0, pt, 2, false));
    ps = tbt_read_all(b);
    tbt_free(&ps);
    entry(b, 5);                           /* asserts the sum */
    tb_destroy(b);
}
END_TEST

/* Patches in the body of a chunk's last fragment (where a TraceWriter puts
 * the size fields of the packet continuing in the next chunk) skip the
 * recount of packet starts; one over that fragment's header, right before
 * its body, must not: the boundary it moves adds a packet. */
START_TEST(test_patch_over_the_last_header_recounts)
{
    tb_buffer *b = tb_create(65536, TB_RING_BUFFER);
    /* 1 + 10 bytes, then the last fragment: header at 11, body 12..27 */
    tbt_reset(&c);
    tbt_frag(&c, 10, 1);
    tbt_frag(&c, 16, 50);
    tbt_commit(b, 1, 0, TB_F4, &c);
    tb_patch body = {.offset = 20, .data = {7, 7, 7, 7}};
    ck_assert(tb_try_patch_chunk(b, 1, 1, 0, &body, 1, true));
    /* header at 11: 3 bytes, then a new header at 15: 12 bytes, to 28 */
    tb_patch hdr[2] = {{.offset = 11, .data = {3, 0, 0, 0}},
                       {.offset = 15, .data = {12, 9, 9, 9}}};
    ck_assert(tb_try_patch_chunk(b, 1, 1, 0, hdr, 2, false));
    tbt_pkts ps = tbt_read_all(b);
    ck_assert_uint_eq(ps.n, 3);
    ck_assert_uint_eq(ps.p[1].size, 3);
    ck_assert_uint_eq(ps.p[2].size, 12);
    ck_assert_uint_eq(ps.p[2].data[4], 7);  /* the body patch, offset 20 */
    tbt_free(&ps);
    const tb_seq_loss *e = entry(b, 1);    /* asserts the sum */
    ck_assert_uint_eq(e->packets_offered, 3);
    ck_assert_uint_eq(e->packets_read, 3);

    /* Writer 2: only a body patch: the two packets as committed. */
    tbt_reset(&c);
    tbt_frag(&c, 10, 1);
    tbt_frag(&c, 16, 50);
    tbt_commit(b, 2, 0, TB_F4, &c);
    body.offset = 12;                      /* the first body byte */
    ck_assert(tb_try_patch_chunk(b, 1, 2, 0, &body, 1, false));
    ps = tbt_read_all(b);
    ck_assert_uint_eq(ps.n, 2);
    ck_assert_uint_eq(ps.p[1].size, 16);
    ck_assert_uint_eq(ps.p[1].data[0], 7);
    tbt_free(&ps);
    e = entry(b, 2);
    ck_assert_uint_eq(e->packets_offered, 2);
    ck_assert_uint_eq(e->packets_read, 2);
    tb_destroy(b);
}
END_TEST

static Suite *tb_lossacct_suite(void)
{
    Suite *s = suite_create("tb_lossacct");
    TCK_CASE(s, "causes", test_overwrite_counts_every_packet,
             test_fragmented_packet_counts_once, test_discard_full_and_stale,
             test_abi_violations, test_reassembly_gap_and_pending,
             test_patch_past_the_payload_is_ignored,
             test_patch_across_the_payload_end_drops_the_packet,
             test_scrape_then_commit_not_double_counted,
             test_hostile_rewrite_keeps_accounting,
             test_patch_over_the_last_header_recounts);
    return s;
}

TCK_MAIN(tb_lossacct_suite)
