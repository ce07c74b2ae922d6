/*
 * check_tb_recommit.c - libbuf: re-commit of a chunk still in the buffer
 * (scrape then real commit): in place, relocation to the write position,
 * re-admission after the scraped record was erased, invalid re-commits
 * (spec trace-buffer.md §4 step 7, §6).
 */
#include "tb_testutil.h"

/* Chunk `id` of producer 1, writer 1 (tbt_put_ex). */
static void put(tb_buffer *b, uint32_t id, uint8_t flags, bool complete,
                size_t pad, const uint32_t *sizes, const char *seeds)
{
    tbt_put_ex(b, 1, 1, id, flags, complete, pad, sizes, seeds);
}

TBT_RING_TEST(test_recommit_before_read_in_place)
{
    put(b, 0, 0, false, 512, (uint32_t[]){100, 100}, "ab");
    ck_assert_uint_eq(TBT_STAT(b, bytes_written), 528);
    put(b, 0, 0, true, 512, (uint32_t[]){100, 100, 100, 100}, "abcd");
    ck_assert_uint_eq(TBT_STAT(b, chunks_rewritten), 1);
    ck_assert_uint_eq(TBT_STAT(b, chunks_written), 1);
    ck_assert_uint_eq(TBT_STAT(b, bytes_written), 528);
    tbt_expect(b, "abcd", (uint32_t[]){100, 100, 100, 100});
}

TBT_RING_TEST(test_recommit_after_partial_read_relocates)
{
    put(b, 0, 0, false, 512, (uint32_t[]){20, 30}, "ab");
    tbt_expect(b, "a", (uint32_t[]){20});
    put(b, 0, 0, true, 512, (uint32_t[]){20, 30, 40, 50}, "abcd");
    ck_assert_uint_eq(TBT_STAT(b, chunks_relocated), 1);
    ck_assert_uint_eq(TBT_STAT(b, chunks_written), 2);
    ck_assert_uint_eq(TBT_STAT(b, chunks_rewritten), 0);
    tbt_pkts ps = tbt_read_all(b);
    ck_assert_uint_eq(ps.n, 3);
    ck_assert(tbt_pkt_is1(&ps.p[0], 30, 'b'));
    ck_assert_uint_eq(ps.p[0].loss, 0); /* re-admit: no gap */
    ck_assert(tbt_pkt_is1(&ps.p[1], 40, 'c'));
    ck_assert(tbt_pkt_is1(&ps.p[2], 50, 'd'));
    tbt_free(&ps);
}

TBT_RING_TEST(test_recommit_in_place_when_partially_unread)
{
    /* 3 visible fragments of 4; read only... all of them are read in one
     * pass, so use a stall from another route: commit, read nothing */
    put(b, 0, 0, false, 512, (uint32_t[]){20, 30, 40}, "abc");
    put(b, 0, 0, false, 512, (uint32_t[]){20, 30, 40, 50}, "abcd");
    /* second scrape grew it: in place, still incomplete */
    ck_assert_uint_eq(TBT_STAT(b, chunks_rewritten), 1);
    tbt_expect(b, "abc", (uint32_t[]){20, 30, 40});
    put(b, 0, 0, true, 512, (uint32_t[]){20, 30, 40, 50}, "abcd");
    ck_assert_uint_eq(TBT_STAT(b, chunks_relocated), 1);
    tbt_expect(b, "d", (uint32_t[]){50});
}

TBT_RING_TEST(test_recommit_complete_chunk_cannot_grow)
{
    put(b, 0, 0, true, 512, (uint32_t[]){20, 30}, "ab");
    /* complete chunks reserve only their fragments: no room to grow */
    put(b, 0, 0, true, 512, (uint32_t[]){20, 30, 40}, "abc");
    ck_assert_uint_eq(TBT_STAT(b, abi_violations), 1);
    tbt_expect(b, "ab", (uint32_t[]){20, 30});
}

TBT_RING_TEST(test_recommit_shorter_is_violation)
{
    put(b, 0, 0, false, 512, (uint32_t[]){200, 20}, "ab");
    put(b, 0, 0, true, 512, (uint32_t[]){100}, "x");
    ck_assert_uint_eq(TBT_STAT(b, abi_violations), 1);
    put(b, 0, 0, true, 512, (uint32_t[]){200, 20, 600}, "abc");
    /* larger than the reserved 512 bytes */
    ck_assert_uint_eq(TBT_STAT(b, abi_violations), 2);
    tbt_expect(b, "a", (uint32_t[]){200});
}

TBT_RING_TEST(test_recommit_dropping_flags_is_violation)
{
    put(b, 0, TB_F1, false, 512, (uint32_t[]){20, 30, 40}, "abc");
    put(b, 0, 0, true, 512, (uint32_t[]){20, 30, 40}, "abc");
    ck_assert_uint_eq(TBT_STAT(b, abi_violations), 1);
    /* adding flags is fine */
    put(b, 0, TB_F1 | TB_F2, true, 512, (uint32_t[]){20, 30, 40}, "abc");
    ck_assert_uint_eq(TBT_STAT(b, abi_violations), 1);
    ck_assert_uint_eq(TBT_STAT(b, chunks_rewritten), 1);
}

TBT_RING_TEST(test_recommit_identical_is_silent)
{
    put(b, 0, 0, true, 512, (uint32_t[]){20, 30}, "ab");
    put(b, 0, 0, true, 512, (uint32_t[]){20, 30}, "ab");
    put(b, 1, 0, true, 512, (uint32_t[]){40, 50}, "cd");
    ck_assert_uint_eq(TBT_STAT(b, chunks_rewritten), 0);
    ck_assert_uint_eq(TBT_STAT(b, abi_violations), 0);
    ck_assert_uint_eq(TBT_STAT(b, chunks_written), 2);
    tbt_expect(b, "abcd", (uint32_t[]){20, 30, 40, 50});
}

TBT_RING_TEST(test_recommit_after_full_read_discarded)
{
    put(b, 0, 0, true, 512, (uint32_t[]){20, 30}, "ab");
    tbt_expect(b, "ab", (uint32_t[]){20, 30});
    put(b, 1, 0, true, 512, (uint32_t[]){40}, "c");
    tbt_expect(b, "c", (uint32_t[]){40});
    /* chunk 0 was consumed: its recommit is stale */
    put(b, 0, 0, true, 512, (uint32_t[]){20, 30, 10}, "abz");
    ck_assert_uint_eq(TBT_STAT(b, chunks_discarded), 1);
    tbt_expect(b, "", NULL);
    put(b, 2, 0, true, 512, (uint32_t[]){10, 10}, "de");
    tbt_expect(b, "de", (uint32_t[]){10, 10});
}

TBT_RING_TEST(test_recommit_reordered_with_next_chunk)
{
    put(b, 0, 0, false, 512, (uint32_t[]){20, 30}, "ab");
    tbt_expect(b, "a", (uint32_t[]){20});
    put(b, 1, 0, true, 512, (uint32_t[]){50, 60}, "de");
    put(b, 0, 0, true, 512, (uint32_t[]){20, 30, 40}, "abc");
    ck_assert_uint_eq(TBT_STAT(b, chunks_relocated), 1);
    ck_assert_uint_eq(TBT_STAT(b, chunks_committed_out_of_order), 1);
    tbt_pkts ps = tbt_read_all(b);
    ck_assert_uint_eq(ps.n, 4);
    ck_assert(tbt_pkt_is1(&ps.p[0], 30, 'b'));
    ck_assert(tbt_pkt_is1(&ps.p[1], 40, 'c'));
    ck_assert(tbt_pkt_is1(&ps.p[2], 50, 'd'));
    ck_assert(tbt_pkt_is1(&ps.p[3], 60, 'e'));
    for (size_t i = 0; i < 4; i++)
        ck_assert_uint_eq(ps.p[i].loss, 0);
    tbt_free(&ps);
}

TBT_RING_TEST(test_recommit_reordered_fragmenting)
{
    put(b, 0, 0, false, 512, (uint32_t[]){20, 30}, "ab");
    tbt_expect(b, "a", (uint32_t[]){20});
    put(b, 1, TB_F1, true, 512, (uint32_t[]){50, 60}, "de");
    put(b, 0, TB_F2, true, 512, (uint32_t[]){20, 30, 40}, "abc");
    tbt_pkts ps = tbt_read_all(b);
    ck_assert_uint_eq(ps.n, 3);
    ck_assert(tbt_pkt_is1(&ps.p[0], 30, 'b'));
    ck_assert(tbt_pkt_is(&ps.p[1], 2, (uint32_t[]){40, 50},
                         (uint8_t[]){'c', 'd'}));
    ck_assert(tbt_pkt_is1(&ps.p[2], 60, 'e'));
    tbt_free(&ps);
}

TBT_RING_TEST(test_recommit_incomplete_same_size_unblocks)
{
    put(b, 0, 0, false, 512, (uint32_t[]){20, 30}, "ab");
    tbt_expect(b, "a", (uint32_t[]){20});
    put(b, 1, 0, true, 512, (uint32_t[]){40, 50}, "cd");
    tbt_expect(b, "", NULL); /* still behind the incomplete chunk */
    put(b, 0, 0, true, 512, (uint32_t[]){20, 30}, "ab");
    tbt_expect(b, "bcd", (uint32_t[]){30, 40, 50});
}

TBT_RING_TEST(test_recommit_incomplete_fragmenting)
{
    put(b, 0, TB_F2, false, 512, (uint32_t[]){20, 30}, "ab");
    tbt_expect(b, "a", (uint32_t[]){20});
    put(b, 1, TB_F1, true, 512, (uint32_t[]){40, 50}, "cd");
    tbt_expect(b, "", NULL);
    put(b, 0, TB_F2, true, 512, (uint32_t[]){20, 30}, "ab");
    tbt_pkts ps = tbt_read_all(b);
    ck_assert_uint_eq(ps.n, 2);
    ck_assert(tbt_pkt_is(&ps.p[0], 2, (uint32_t[]){30, 40},
                         (uint8_t[]){'b', 'c'}));
    ck_assert(tbt_pkt_is1(&ps.p[1], 50, 'd'));
    tbt_free(&ps);
}

START_TEST(test_recommit_relocation_wraps_at_end_of_buffer)
{
    tb_buffer *b = tb_create(3072, TB_RING_BUFFER);
    ck_assert_uint_eq(tb_size(b), 4096);
    put(b, 0, 0, false, 2048, (uint32_t[]){20, 30}, "ab");
    tbt_expect(b, "a", (uint32_t[]){20});
    put(b, 0, 0, true, 2048, (uint32_t[]){20, 30}, "ab");
    ck_assert_uint_eq(TBT_STAT(b, chunks_relocated), 1);
    ck_assert_uint_eq(TBT_STAT(b, write_wrap_count), 0);
    tbt_expect(b, "b", (uint32_t[]){30});
    tb_destroy(b);
}
END_TEST

START_TEST(test_recommit_not_relocated_in_discard_mode)
{
    tb_buffer *b = tb_create(4096, TB_DISCARD);
    put(b, 0, 0, false, 512, (uint32_t[]){20, 30}, "ab");
    tbt_expect(b, "a", (uint32_t[]){20});
    put(b, 0, 0, true, 512, (uint32_t[]){20, 30, 40}, "abc");
    ck_assert_uint_eq(TBT_STAT(b, chunks_relocated), 0);
    ck_assert_uint_eq(TBT_STAT(b, chunks_rewritten), 1);
    tbt_expect(b, "bc", (uint32_t[]){30, 40});
    tb_destroy(b);
}
END_TEST

TBT_RING_TEST(test_readmit_after_scraped_record_erased)
{
    /* scraped chunk fully read then erased because a later read walk moved
     * past it: relocation consumes it; the real commit then re-admits */
    put(b, 0, 0, false, 256, (uint32_t[]){20, 30}, "ab");
    tbt_expect(b, "a", (uint32_t[]){20});
    put(b, 0, 0, false, 256, (uint32_t[]){20, 30, 40}, "abc");
    /* second scrape: relocation needs a complete chunk: in place instead */
    ck_assert_uint_eq(TBT_STAT(b, chunks_rewritten), 1);
    tbt_expect(b, "b", (uint32_t[]){30});
    put(b, 0, 0, true, 256, (uint32_t[]){20, 30, 40, 50}, "abcd");
    ck_assert_uint_eq(TBT_STAT(b, chunks_relocated), 1);
    tbt_expect(b, "cd", (uint32_t[]){40, 50});
}

static Suite *tb_recommit_suite(void)
{
    Suite *s = suite_create("tb_recommit");
    TCK_CASE(s, "in_place", test_recommit_before_read_in_place,
             test_recommit_in_place_when_partially_unread,
             test_recommit_identical_is_silent,
             test_recommit_incomplete_same_size_unblocks,
             test_recommit_incomplete_fragmenting,
             test_recommit_not_relocated_in_discard_mode);
    TCK_CASE(s, "relocate", test_recommit_after_partial_read_relocates,
             test_recommit_reordered_with_next_chunk,
             test_recommit_reordered_fragmenting,
             test_recommit_relocation_wraps_at_end_of_buffer,
             test_readmit_after_scraped_record_erased);
    TCK_CASE(s, "invalid", test_recommit_complete_chunk_cannot_grow,
             test_recommit_shorter_is_violation,
             test_recommit_dropping_flags_is_violation,
             test_recommit_after_full_read_discarded);
    return s;
}

TCK_MAIN(tb_recommit_suite)
