/*
 * check_tb_frag.c - libbuf: fragment reassembly across chunks, out-of-order
 * commits, ChunkID wrap-around, empty chunks, the writer-abort sentinel and
 * scraped (incomplete) chunks (spec trace-buffer.md §4, §7).
 */
#include "tb_testutil.h"

static tbt_chunk c;

TBT_RING_TEST(test_reasm_simple_two_chunks)
{
    tbt_put(b, 1, 1, 0, TB_F1 | TB_F2, (uint32_t[]){10, 20, 30, 10}, "abcd");
    tbt_put(b, 1, 1, 1, TB_F1, (uint32_t[]){20, 30}, "ef");
    tbt_pkts ps = tbt_read_all(b);
    ck_assert_uint_eq(ps.n, 4);
    /* 'a' continues a packet we never had: dropped, flagged on 'b'. */
    ck_assert(tbt_pkt_is1(&ps.p[0], 20, 'b'));
    ck_assert_uint_eq(ps.p[0].loss,
                      TB_LOSS_PRESENT | TB_LOSS_ORPHAN_CONTINUATION);
    ck_assert(tbt_pkt_is1(&ps.p[1], 30, 'c'));
    ck_assert(tbt_pkt_is_s(&ps.p[2], (uint32_t[]){10, 20}, "de"));
    ck_assert_uint_eq(ps.p[2].nslices, 2);
    ck_assert_uint_eq(ps.p[2].loss, 0);
    ck_assert(tbt_pkt_is1(&ps.p[3], 30, 'f'));
    tbt_free(&ps);
    ck_assert_uint_eq(TBT_STAT(b, readaheads_succeeded), 1);
    ck_assert_uint_eq(TBT_STAT(b, chunks_read), 2);
}

TBT_RING_TEST(test_reasm_waits_for_missing_end)
{
    tbt_put(b, 1, 1, 0, TB_F1, (uint32_t[]){2}, "a");
    tbt_put(b, 1, 1, 1, TB_F2, (uint32_t[]){2}, "b");
    ck_assert_uint_eq(tbt_read_count(b), 0);
    ck_assert_uint_eq(TBT_STAT(b, readaheads_failed), 1);
    tbt_put(b, 1, 1, 2, TB_F1, (uint32_t[]){2}, "c");
    tbt_pkts ps = tbt_read_all(b);
    ck_assert_uint_eq(ps.n, 1);
    ck_assert(tbt_pkt_is_s(&ps.p[0], (uint32_t[]){2, 2}, "bc"));
    /* the orphan 'a' was consumed in the first pass, reported now */
    ck_assert_uint_eq(ps.p[0].loss,
                      TB_LOSS_PRESENT | TB_LOSS_ORPHAN_CONTINUATION);
    tbt_free(&ps);
}

TBT_RING_TEST(test_reasm_stall_does_not_block_other_sequences)
{
    tbt_put(b, 1, 1, 0, TB_F2, (uint32_t[]){10, 10}, "ab");
    tbt_put(b, 1, 2, 0, 0, (uint32_t[]){10}, "x");
    tbt_put(b, 1, 1, 1, TB_F1 | TB_F2, (uint32_t[]){10}, "c");
    tbt_put(b, 1, 2, 1, 0, (uint32_t[]){10}, "y");
    tbt_expect(b, "axy", (uint32_t[]){10, 10, 10});
    tbt_put(b, 1, 1, 2, TB_F1, (uint32_t[]){10}, "d");
    tbt_pkts ps = tbt_read_all(b);
    ck_assert_uint_eq(ps.n, 1);
    ck_assert(tbt_pkt_is_s(&ps.p[0], (uint32_t[]){10, 10, 10}, "bcd"));
    ck_assert_uint_eq(ps.p[0].nslices, 3);
    tbt_free(&ps);
}

TBT_RING_TEST(test_ooo_middle_chunk_committed_last)
{
    tbt_put(b, 1, 1, 0, 0, (uint32_t[]){10}, "a");
    tbt_put(b, 1, 1, 2, 0, (uint32_t[]){30}, "c");
    tbt_put(b, 1, 1, 1, 0, (uint32_t[]){20}, "b");
    ck_assert_uint_eq(TBT_STAT(b, chunks_committed_out_of_order), 1);
    tbt_pkts ps = tbt_read_all(b);
    ck_assert_uint_eq(ps.n, 3);
    ck_assert(tbt_pkt_is1(&ps.p[0], 10, 'a'));
    ck_assert(tbt_pkt_is1(&ps.p[1], 20, 'b'));
    ck_assert(tbt_pkt_is1(&ps.p[2], 30, 'c'));
    for (size_t i = 0; i < 3; i++)
        ck_assert_uint_eq(ps.p[i].loss, 0);
    tbt_free(&ps);
}

TBT_RING_TEST(test_ooo_fragmented_chain_completed_by_middle)
{
    tbt_put(b, 1, 1, 0, TB_F2, (uint32_t[]){10}, "a");
    tbt_put(b, 1, 1, 2, TB_F1, (uint32_t[]){30}, "c");
    tbt_put(b, 1, 2, 0, 0, (uint32_t[]){10}, "z");
    tbt_put(b, 1, 1, 1, TB_F1 | TB_F2, (uint32_t[]){20}, "b");
    tbt_put(b, 1, 1, 3, 0, (uint32_t[]){40}, "d");
    tbt_pkts ps = tbt_read_all(b);
    ck_assert_uint_eq(ps.n, 3);
    ck_assert(tbt_pkt_is_s(&ps.p[0], (uint32_t[]){10, 20, 30}, "abc"));
    ck_assert(tbt_pkt_is1(&ps.p[1], 10, 'z'));
    ck_assert(tbt_pkt_is1(&ps.p[2], 40, 'd'));
    tbt_free(&ps);
}

TBT_RING_TEST(test_ooo_batch_across_id_wrap)
{
    /* One scrape batch: ids UINT32_MAX-1, 1, 0, UINT32_MAX. */
    tbt_put(b, 1, 1, UINT32_MAX - 1, 0, (uint32_t[]){10}, "a");
    tbt_put(b, 1, 1, 1, 0, (uint32_t[]){40}, "d");
    tbt_put(b, 1, 1, 0, 0, (uint32_t[]){30}, "c");
    tbt_put(b, 1, 1, UINT32_MAX, 0, (uint32_t[]){20}, "b");
    ck_assert_uint_eq(TBT_STAT(b, chunks_committed_out_of_order), 2);
    tbt_pkts ps = tbt_read_all(b);
    ck_assert_str_eq(tbt_heads(&ps), "abcd");
    for (size_t i = 0; i < 4; i++)
        ck_assert_uint_eq(ps.p[i].loss, 0);
    tbt_free(&ps);
}

TBT_RING_TEST(test_ooo_gap_after_sorting_is_loss)
{
    tbt_put(b, 1, 1, 0, 0, (uint32_t[]){10}, "a");
    ck_assert_uint_eq(tbt_read_count(b), 1);
    /* A later batch 3, 2: chunk 1 never arrives. */
    tbt_put(b, 1, 1, 3, 0, (uint32_t[]){10}, "d");
    tbt_put(b, 1, 1, 2, 0, (uint32_t[]){10}, "c");
    tbt_pkts ps = tbt_read_all(b);
    ck_assert_str_eq(tbt_heads(&ps), "cd");
    ck_assert_uint_eq(ps.p[0].loss, TB_LOSS_PRESENT | TB_LOSS_READ_GAP);
    ck_assert_uint_eq(ps.p[1].loss, 0);
    tbt_free(&ps);
    /* A chunk older than the last consumed is discarded. */
    tbt_put(b, 1, 1, 1, 0, (uint32_t[]){10}, "b");
    ck_assert_uint_eq(TBT_STAT(b, chunks_discarded), 1);
    ck_assert_uint_eq(tbt_read_count(b), 0);
}

TBT_RING_TEST(test_empty_chunk_before_fragments)
{
    tbt_put(b, 1, 1, 0, 0, NULL, "");
    tbt_put(b, 1, 1, 1, TB_F2, (uint32_t[]){10, 20}, "ab");
    tbt_put(b, 1, 1, 2, TB_F1 | TB_F2, (uint32_t[]){30, 40}, "cd");
    tbt_pkts ps = tbt_read_all(b);
    ck_assert_uint_eq(ps.n, 2);
    ck_assert(tbt_pkt_is1(&ps.p[0], 10, 'a'));
    ck_assert(tbt_pkt_is_s(&ps.p[1], (uint32_t[]){20, 30}, "bc"));
    tbt_free(&ps);
    /* the empty record counted as neither read nor written payload */
    ck_assert_uint_eq(TBT_STAT(b, chunks_written), 3);
    ck_assert_uint_eq(TBT_STAT(b, chunks_read), 1);
}

TBT_RING_TEST(test_empty_chunk_after_begin_stalls)
{
    tbt_put(b, 1, 1, 0, TB_F2, (uint32_t[]){10, 10}, "ab");
    tbt_put(b, 1, 1, 1, 0, NULL, "");
    tbt_expect(b, "a", (uint32_t[]){10});
}

TBT_RING_TEST(test_empty_chunk_in_the_middle_skipped)
{
    tbt_put(b, 1, 1, 0, TB_F2, (uint32_t[]){10}, "a");
    tbt_put(b, 1, 1, 1, 0, NULL, "");
    tbt_put(b, 1, 1, 2, TB_F1, (uint32_t[]){10, 20}, "bc");
    tbt_pkts ps = tbt_read_all(b);
    ck_assert_uint_eq(ps.n, 2);
    ck_assert(tbt_pkt_is_s(&ps.p[0], (uint32_t[]){10, 10}, "ab"));
    ck_assert(tbt_pkt_is1(&ps.p[1], 20, 'c'));
    ck_assert_uint_eq(ps.p[0].loss, 0);
    tbt_free(&ps);
}

START_TEST(test_long_packets_any_length)
{
    for (uint32_t len = 1; len <= 10; len++) {
        tb_buffer *b = tb_create(4096, TB_RING_BUFFER);
        uint32_t sizes[16];
        uint8_t seeds[16];
        size_t n = 0;
        tbt_put(b, 1, 1, 0, TB_F2, (uint32_t[]){10, 20}, "ab");
        sizes[n] = 20;
        seeds[n++] = 'b';
        for (uint32_t i = 1; i <= len; i++) {
            uint32_t sz = 20 + i;
            uint8_t sd = (uint8_t)('b' + i);
            tbt_put1(b, 1, 1, i, TB_F1 | TB_F2, sz, sd);
            sizes[n] = sz;
            seeds[n++] = sd;
        }
        tbt_put(b, 1, 1, len + 1, TB_F1, (uint32_t[]){30, 50}, "yz");
        sizes[n] = 30;
        seeds[n++] = 'y';
        tbt_pkts ps = tbt_read_all(b);
        ck_assert_uint_eq(ps.n, 3);
        ck_assert(tbt_pkt_is1(&ps.p[0], 10, 'a'));
        ck_assert(tbt_pkt_is(&ps.p[1], n, sizes, seeds));
        ck_assert_uint_eq(ps.p[1].nslices, n);
        ck_assert(tbt_pkt_is1(&ps.p[2], 50, 'z'));
        tbt_free(&ps);
        tb_destroy(b);
    }
}
END_TEST

TBT_RING_TEST(test_long_packet_across_id_wrap)
{
    uint32_t sizes[5];
    uint8_t seeds[5];
    size_t n = 0;
    for (uint32_t id = UINT32_MAX - 1; n < 5; id++) {
        uint8_t fl = (uint8_t)((n > 0 ? TB_F1 : 0) | (n < 4 ? TB_F2 : 0));
        sizes[n] = 10 + (uint32_t)n;
        seeds[n] = (uint8_t)('c' + n);
        tbt_put1(b, 1, 1, id, fl, sizes[n], seeds[n]);
        n++;
    }
    tbt_pkts ps = tbt_read_all(b);
    ck_assert_uint_eq(ps.n, 1);
    ck_assert(tbt_pkt_is(&ps.p[0], 5, sizes, seeds));
    ck_assert_uint_eq(ps.p[0].loss, 0);
    tbt_free(&ps);
}

TBT_RING_TEST(test_props_follow_the_sequence)
{
    tbt_build(&c, (uint32_t[]){10, 10}, "ab");
    tb_copy_chunk_untrusted(b, 1, 11, 111, 1, 0, c.nfrags, TB_F2, true,
                            c.data, c.size);
    tbt_build(&c, (uint32_t[]){10, 10}, "cd");
    tb_copy_chunk_untrusted(b, 2, 22, 222, 1, 0, c.nfrags, 0, true,
                            c.data, c.size);
    tbt_build(&c, (uint32_t[]){10, 10}, "ef");
    tb_copy_chunk_untrusted(b, 1, 11, 111, 1, 1, c.nfrags, TB_F1, true,
                            c.data, c.size);
    tbt_pkts ps = tbt_read_all(b);
    ck_assert_uint_eq(ps.n, 5);
    /* buffer order: a, (b+e), c, d, f */
    const uint32_t uid[] = {11, 11, 22, 22, 11};
    const int32_t pid[] = {111, 111, 222, 222, 111};
    const uint16_t prod[] = {1, 1, 2, 2, 1};
    for (size_t i = 0; i < 5; i++) {
        ck_assert_uint_eq(ps.p[i].props.uid, uid[i]);
        ck_assert_int_eq(ps.p[i].props.pid, pid[i]);
        ck_assert_uint_eq(ps.p[i].props.producer_id, prod[i]);
        ck_assert_uint_eq(ps.p[i].props.writer_id, 1);
    }
    ck_assert(tbt_pkt_is_s(&ps.p[1], (uint32_t[]){10, 10}, "be"));
    ck_assert(tbt_pkt_is1(&ps.p[4], 10, 'f'));
    tbt_free(&ps);
}

TBT_RING_TEST(test_drop_sentinel_discards_fragmented_packet)
{
    tbt_put(b, 1, 1, 0, TB_F2, (uint32_t[]){10, 10}, "ab");
    tbt_reset(&c);
    tbt_put_varint4(&c, TB_PACKET_SIZE_DROP_PACKET); /* ff ff ff 7f */
    c.nfrags = 1;
    tbt_commit_ex(b, 1, 1, 1, TB_F1, true, &c, 0);
    tbt_put(b, 1, 1, 2, 0, (uint32_t[]){10}, "d");
    ck_assert_uint_eq(TBT_STAT(b, trace_writer_packet_loss), 1);
    ck_assert_uint_eq(TBT_STAT(b, abi_violations), 0);
    tbt_pkts ps = tbt_read_all(b);
    ck_assert_uint_eq(ps.n, 2);
    ck_assert(tbt_pkt_is1(&ps.p[0], 10, 'a'));
    /* The abort was flagged when chunk 1 was copied: first packet after. */
    ck_assert_uint_eq(ps.p[0].loss, TB_LOSS_PRESENT | TB_LOSS_WRITER_ABORT);
    ck_assert(tbt_pkt_is1(&ps.p[1], 10, 'd'));
    tbt_free(&ps);
}

TBT_RING_TEST(test_drop_sentinel_any_encoding_stops_chunk)
{
    tbt_reset(&c);
    tbt_frag(&c, 10, 'a');
    tbt_put_varint(&c, TB_PACKET_SIZE_DROP_PACKET); /* canonical form */
    c.nfrags++;
    tbt_frag(&c, 10, 'z'); /* after the sentinel: ignored */
    tbt_commit_ex(b, 1, 1, 0, 0, true, &c, 0);
    ck_assert_uint_eq(TBT_STAT(b, trace_writer_packet_loss), 1);
    ck_assert_uint_eq(TBT_STAT(b, abi_violations), 0);
    ck_assert_uint_eq(TBT_STAT(b, bytes_written), 32); /* 16 + 11 */
    tbt_pkts ps = tbt_read_all(b);
    ck_assert_uint_eq(ps.n, 1);
    ck_assert(tbt_pkt_is1(&ps.p[0], 10, 'a'));
    ck_assert_uint_eq(ps.p[0].loss, TB_LOSS_PRESENT | TB_LOSS_WRITER_ABORT);
    tbt_free(&ps);
}

TBT_RING_TEST(test_scraped_chunk_last_fragment_ignored)
{
    tbt_put_ex(b, 1, 1, 0, TB_F2 | TB_F4, false, 512, (uint32_t[]){20, 30},
               "ab");
    /* whole 512-byte payload reserved for the later commit */
    ck_assert_uint_eq(TBT_STAT(b, bytes_written), 528);
    tbt_expect(b, "a", (uint32_t[]){20});
    /* stays stalled: the record is incomplete */
    ck_assert_uint_eq(tbt_read_count(b), 0);
    /* its visible payload was consumed: counted read, record kept */
    ck_assert_uint_eq(TBT_STAT(b, chunks_read), 1);
}

TBT_RING_TEST(test_scraped_chunk_blocks_later_chunks_until_recommit)
{
    tbt_put_ex(b, 1, 1, 0, 0, false, 512, (uint32_t[]){20, 30}, "ab");
    tbt_put(b, 1, 1, 1, 0, (uint32_t[]){40}, "c");
    tbt_put(b, 1, 2, 0, 0, (uint32_t[]){5}, "x");
    tbt_expect(b, "ax", (uint32_t[]){20, 5});
    tbt_put_ex(b, 1, 1, 0, 0, true, 512, (uint32_t[]){20, 30}, "ab");
    tbt_pkts ps = tbt_read_all(b);
    ck_assert_uint_eq(ps.n, 2);
    ck_assert(tbt_pkt_is1(&ps.p[0], 30, 'b'));
    ck_assert_uint_eq(ps.p[0].loss, 0);
    ck_assert(tbt_pkt_is1(&ps.p[1], 40, 'c'));
    tbt_free(&ps);
}

static Suite *tb_frag_suite(void)
{
    Suite *s = suite_create("tb_frag");
    TCK_CASE(s, "reassembly", test_reasm_simple_two_chunks,
             test_reasm_waits_for_missing_end,
             test_reasm_stall_does_not_block_other_sequences,
             test_long_packets_any_length, test_long_packet_across_id_wrap,
             test_props_follow_the_sequence);
    TCK_CASE(s, "out_of_order", test_ooo_middle_chunk_committed_last,
             test_ooo_fragmented_chain_completed_by_middle,
             test_ooo_batch_across_id_wrap,
             test_ooo_gap_after_sorting_is_loss);
    TCK_CASE(s, "empty_chunks", test_empty_chunk_before_fragments,
             test_empty_chunk_after_begin_stalls,
             test_empty_chunk_in_the_middle_skipped);
    TCK_CASE(s, "writer_abort", test_drop_sentinel_discards_fragmented_packet,
             test_drop_sentinel_any_encoding_stops_chunk);
    TCK_CASE(s, "scraped", test_scraped_chunk_last_fragment_ignored,
             test_scraped_chunk_blocks_later_chunks_until_recommit);
    return s;
}

TCK_MAIN(tb_frag_suite)
