/*
 * check_tb_loss.c - libbuf: every DataLossReason bit where the spec sets it,
 * its reporting on the next packet of the sequence, and the exact stats of
 * eviction and padding (spec trace-buffer.md §5, §9, §10).
 */
#include "tb_testutil.h"

static tbt_chunk c;

/* Producer 1's chunks (tb_testutil.h's tbt_put / tbt_put_outer). */
static void put(tb_buffer *b, uint16_t w, uint32_t id, uint8_t flags,
                const uint32_t *sizes, const char *seeds)
{
    tbt_put(b, 1, w, id, flags, sizes, seeds);
}

/* Record of exactly `outer` bytes: one fragment with a 4-byte header. */
static void put_outer(tb_buffer *b, uint16_t w, uint32_t id, uint32_t outer,
                      uint8_t seed)
{
    tbt_put_outer(b, 1, w, id, outer, seed);
}

TBT_RING_TEST(test_loss_none_on_first_packet_of_new_sequence)
{
    put(b, 1, 77, 0, (uint32_t[]){10}, "a"); /* starts at id 77 */
    tbt_pkts ps = tbt_read_all(b);
    ck_assert_uint_eq(ps.n, 1);
    ck_assert_uint_eq(ps.p[0].loss, 0);
    tbt_free(&ps);
}

TBT_RING_TEST(test_loss_read_gap_between_reads)
{
    put(b, 1, 0, 0, (uint32_t[]){10}, "a");
    tbt_pkts ps = tbt_read_all(b);
    tbt_free(&ps);
    put(b, 1, 2, 0, (uint32_t[]){10, 10}, "bc");
    ps = tbt_read_all(b);
    ck_assert_uint_eq(ps.n, 2);
    ck_assert_uint_eq(ps.p[0].loss, TB_LOSS_PRESENT | TB_LOSS_READ_GAP);
    ck_assert_uint_eq(ps.p[1].loss, 0); /* reported once, then cleared */
    tbt_free(&ps);
}

TBT_RING_TEST(test_loss_gap_inside_one_walk_not_flagged)
{
    put(b, 1, 0, 0, (uint32_t[]){10}, "a");
    put(b, 1, 5, 0, (uint32_t[]){10}, "b");
    /* chunk 5 is the target of the second walk, which starts at chunk 5
     * right after chunk 0 was erased: last_consumed 0 -> read gap */
    tbt_pkts ps = tbt_read_all(b);
    ck_assert_uint_eq(ps.n, 2);
    ck_assert_uint_eq(ps.p[0].loss, 0);
    ck_assert_uint_eq(ps.p[1].loss, TB_LOSS_PRESENT | TB_LOSS_READ_GAP);
    tbt_free(&ps);
    /* out of order: the walk to chunk 7 consumes 6 and then 9 without a
     * continuity check (spec §7: only at walk start / in reassembly) */
    put(b, 1, 9, 0, (uint32_t[]){10}, "e");
    put(b, 1, 6, 0, (uint32_t[]){10}, "c");
    ps = tbt_read_all(b);
    ck_assert_str_eq(tbt_heads(&ps), "ce");
    ck_assert_uint_eq(ps.p[0].loss, 0);
    ck_assert_uint_eq(ps.p[1].loss, 0);
    tbt_free(&ps);
}

TBT_RING_TEST(test_loss_chunk_corrupted_by_patch)
{
    put(b, 1, 0, 0, (uint32_t[]){10, 10, 10}, "abc");
    put(b, 1, 1, 0, (uint32_t[]){10}, "d");
    /* overwrite the second fragment's header (offset 11) with a huge size */
    tb_patch p = {11, {0xFF, 0xFF, 0xFF, 0x0F}};
    ck_assert(tb_try_patch_chunk(b, 1, 1, 0, &p, 1, false));
    tbt_pkts ps = tbt_read_all(b);
    ck_assert_uint_eq(ps.n, 2);
    ck_assert(tbt_pkt_is1(&ps.p[0], 10, 'a'));
    ck_assert(tbt_pkt_is1(&ps.p[1], 10, 'd'));
    ck_assert_uint_eq(ps.p[1].loss,
                      TB_LOSS_PRESENT | TB_LOSS_CHUNK_CORRUPTED);
    tbt_free(&ps);
    /* the corrupted record was not fully consumed: not counted as read */
    ck_assert_uint_eq(TBT_STAT(b, chunks_read), 1);
}

TBT_RING_TEST(test_loss_chunk_corrupted_in_reassembly)
{
    put(b, 1, 0, TB_F2, (uint32_t[]){10}, "a");
    put(b, 1, 1, TB_F1, (uint32_t[]){10, 10}, "bc");
    tb_patch p = {0, {0xFF, 0xFF, 0xFF, 0xFF}}; /* varint runs off the end */
    ck_assert(tb_try_patch_chunk(b, 1, 1, 1, &p, 1, false));
    put(b, 1, 2, 0, (uint32_t[]){10}, "d");
    tbt_pkts ps = tbt_read_all(b);
    ck_assert_uint_eq(ps.n, 1);
    ck_assert(tbt_pkt_is1(&ps.p[0], 10, 'd'));
    ck_assert_uint_eq(ps.p[0].loss,
                      TB_LOSS_PRESENT | TB_LOSS_CHUNK_CORRUPTED);
    tbt_free(&ps);
    ck_assert_uint_eq(TBT_STAT(b, readaheads_failed), 1);
}

TBT_RING_TEST(test_loss_orphan_continuation)
{
    put(b, 1, 0, TB_F1, (uint32_t[]){10, 10}, "ab");
    tbt_pkts ps = tbt_read_all(b);
    ck_assert_uint_eq(ps.n, 1);
    ck_assert(tbt_pkt_is1(&ps.p[0], 10, 'b'));
    ck_assert_uint_eq(ps.p[0].loss,
                      TB_LOSS_PRESENT | TB_LOSS_ORPHAN_CONTINUATION);
    tbt_free(&ps);
    ck_assert_uint_eq(TBT_STAT(b, abi_violations), 0);
}

TBT_RING_TEST(test_loss_reassembly_gap)
{
    put(b, 1, 0, TB_F2, (uint32_t[]){10, 10}, "ab");
    put(b, 1, 2, TB_F1, (uint32_t[]){10, 10}, "cd"); /* chunk 1 lost */
    tbt_pkts ps = tbt_read_all(b);
    ck_assert_uint_eq(ps.n, 2);
    ck_assert(tbt_pkt_is1(&ps.p[0], 10, 'a'));
    ck_assert_uint_eq(ps.p[0].loss, 0);
    ck_assert(tbt_pkt_is1(&ps.p[1], 10, 'd'));
    /* the begin 'b' (gap), then chunk 2 starts the next walk after a gap
     * and its 'c' is an orphan end */
    ck_assert_uint_eq(ps.p[1].loss,
                      TB_LOSS_PRESENT | TB_LOSS_REASSEMBLY_GAP |
                      TB_LOSS_READ_GAP | TB_LOSS_ORPHAN_CONTINUATION);
    tbt_free(&ps);
    ck_assert_uint_eq(TBT_STAT(b, readaheads_failed), 1);
}

TBT_RING_TEST(test_loss_reassembly_broken_chain)
{
    put(b, 1, 0, TB_F2, (uint32_t[]){10, 10}, "ab");
    put(b, 1, 1, 0, (uint32_t[]){10, 10}, "cd"); /* should have had F1 */
    tbt_pkts ps = tbt_read_all(b);
    ck_assert_uint_eq(ps.n, 3);
    ck_assert(tbt_pkt_is1(&ps.p[1], 10, 'c'));
    ck_assert_uint_eq(ps.p[1].loss,
                      TB_LOSS_PRESENT | TB_LOSS_REASSEMBLY_BROKEN_CHAIN);
    ck_assert(tbt_pkt_is1(&ps.p[2], 10, 'd'));
    ck_assert_uint_eq(ps.p[2].loss, 0);
    tbt_free(&ps);
}

TBT_RING_TEST(test_loss_overwrite_of_begin_with_continuation)
{
    /* seq 1: [x, begin a] [end a', y]; seq 2 fills the rest */
    tbt_reset(&c);
    tbt_frag4(&c, 500, 'x');
    tbt_frag4(&c, 500, 'a');
    tbt_commit_ex(b, 1, 1, 0, TB_F2, true, &c, 0); /* 1024 */
    tbt_reset(&c);
    tbt_frag4(&c, 500, 'b');
    tbt_frag4(&c, 500, 'y');
    tbt_commit_ex(b, 1, 1, 1, TB_F1, true, &c, 0); /* 1024 */
    put_outer(b, 2, 0, 1024, 'm');
    put_outer(b, 2, 1, 1024, 'n');
    /* wrap: evicting chunk 0 of seq 1 also consumes the end in chunk 1 */
    put_outer(b, 2, 2, 1024, 'o');
    ck_assert_uint_eq(TBT_STAT(b, readaheads_succeeded), 1);
    ck_assert_uint_eq(TBT_STAT(b, chunks_overwritten), 1);
    tbt_pkts ps = tbt_read_all(b);
    ck_assert_uint_eq(ps.n, 4);
    ck_assert(tbt_pkt_is1(&ps.p[0], 500, 'y'));
    ck_assert_uint_eq(ps.p[0].loss, TB_LOSS_PRESENT | TB_LOSS_OVERWRITE);
    ck_assert_uint_eq(ps.p[0].props.writer_id, 1);
    tbt_free(&ps);
}

TBT_RING_TEST(test_loss_overwrite_of_read_packets_not_flagged)
{
    put_outer(b, 1, 0, 2048, 'a');
    put_outer(b, 1, 1, 2048, 'b');
    ck_assert_uint_eq(tbt_read_count(b), 2);
    put_outer(b, 1, 2, 2048, 'c');
    tbt_pkts ps = tbt_read_all(b);
    ck_assert_uint_eq(ps.n, 1);
    ck_assert_uint_eq(ps.p[0].loss, 0);
    tbt_free(&ps);
    ck_assert_uint_eq(TBT_STAT(b, chunks_overwritten), 0);
    ck_assert_uint_eq(TBT_STAT(b, padding_bytes_cleared), 2048);
}

TBT_RING_TEST(test_loss_overwrite_of_empty_chunk_not_flagged)
{
    put_outer(b, 1, 0, 16, 0);    /* empty record */
    put_outer(b, 1, 1, 4080, 'b');
    tbt_reset(&c);
    tbt_frag(&c, 0, 0);          /* one empty packet */
    tbt_commit_ex(b, 2, 1, 0, 0, true, &c, 0); /* wraps, evicts both */
    ck_assert_uint_eq(TBT_STAT(b, write_wrap_count), 1);
    ck_assert_uint_eq(TBT_STAT(b, chunks_overwritten), 1); /* only 'b' */
    put_outer(b, 1, 2, 64, 'c');
    tbt_pkts ps = tbt_read_all(b);
    ck_assert_uint_eq(ps.n, 1);
    ck_assert_uint_eq(ps.p[0].loss, TB_LOSS_PRESENT | TB_LOSS_OVERWRITE);
    tbt_free(&ps);
}

TBT_RING_TEST(test_loss_ooo_eviction_erases_earlier_chunks_of_sequence)
{
    put_outer(b, 1, 1, 1024, 'b'); /* at 0 */
    put_outer(b, 2, 0, 1024, 'x'); /* at 1024 */
    put_outer(b, 1, 0, 1024, 'a'); /* at 2048, out of order */
    put_outer(b, 2, 1, 1024, 'y'); /* at 3072 */
    /* wrap: evicting chunk 1 of seq 1 first consumes chunk 0 (at 2048) */
    put_outer(b, 3, 0, 1024, 'z');
    ck_assert_uint_eq(TBT_STAT(b, chunks_overwritten), 2);
    ck_assert_uint_eq(TBT_STAT(b, bytes_overwritten), 2048);
    tbt_pkts ps = tbt_read_all(b);
    ck_assert_str_eq(tbt_heads(&ps), "xyz");
    tbt_free(&ps);
    /* the erased slot at 2048 is padding now: cleared when reached */
    put_outer(b, 3, 1, 2048, 'w');
    ck_assert_uint_eq(TBT_STAT(b, padding_bytes_cleared), 2048);
}

/* Perfetto's ReadWrite_Padding scenario with V2 figures (spec §2, §5). */
TBT_RING_TEST(test_stats_padding_scenario)
{
    put_outer(b, 1, 0, 128, 'a');
    put_outer(b, 1, 1, 256, 'b');
    put_outer(b, 1, 2, 512, 'c');
    put_outer(b, 1, 3, 1024, 'd');
    put_outer(b, 1, 4, 2048, 'e');
    ck_assert_uint_eq(tb_used_size(b), 3968);
    put_outer(b, 1, 5, 512, 'f'); /* does not fit in the last 128: wraps */
    ck_assert_uint_eq(TBT_STAT(b, write_wrap_count), 1);
    tbt_pkts ps = tbt_read_all(b);
    ck_assert_str_eq(tbt_heads(&ps), "def");
    ck_assert_uint_eq(ps.p[0].loss, TB_LOSS_PRESENT | TB_LOSS_OVERWRITE);
    tbt_free(&ps);
    const tb_stats *st = tb_get_stats(b);
    ck_assert_uint_eq(st->chunks_written, 6);
    ck_assert_uint_eq(st->chunks_overwritten, 3);
    ck_assert_uint_eq(st->chunks_read, 3);
    ck_assert_uint_eq(st->bytes_written, 4480);
    ck_assert_uint_eq(st->bytes_overwritten, 896);
    ck_assert_uint_eq(st->bytes_read, 3584);
    ck_assert_uint_eq(st->padding_bytes_written, 384); /* [512, 896) */
    ck_assert_uint_eq(st->padding_bytes_cleared, 0);
    put_outer(b, 1, 6, 128, 'g'); /* eats into the 384-byte padding */
    ck_assert_uint_eq(st->padding_bytes_cleared, 384);
    ck_assert_uint_eq(st->padding_bytes_written, 384 + 256);
    ck_assert_uint_eq(st->buffer_size, 4096);
}

TBT_RING_TEST(test_stats_minimal_padding_and_exact_wrap)
{
    put_outer(b, 1, 0, 2048, 'a');
    put_outer(b, 1, 1, 1024, 'b');
    put_outer(b, 1, 2, 1008, 'c');
    put_outer(b, 1, 3, 16, 0); /* empty chunk fills the last 16 bytes */
    ck_assert_uint_eq(TBT_STAT(b, write_wrap_count), 0);
    put_outer(b, 1, 4, 2032, 'd'); /* leaves a 16-byte padding record */
    ck_assert_uint_eq(TBT_STAT(b, write_wrap_count), 1);
    ck_assert_uint_eq(TBT_STAT(b, padding_bytes_written), 16);
    put_outer(b, 1, 5, 1040, 'e'); /* clears that padding and 'b' */
    ck_assert_uint_eq(TBT_STAT(b, padding_bytes_cleared), 16);
    put_outer(b, 1, 6, 16, 0);
    put_outer(b, 1, 7, 1008, 'f');
    ck_assert_uint_eq(TBT_STAT(b, write_wrap_count), 1);
    tbt_pkts ps = tbt_read_all(b);
    ck_assert_str_eq(tbt_heads(&ps), "def");
    tbt_free(&ps);
}

TBT_RING_TEST(test_stats_read_everything_before_wrap)
{
    put_outer(b, 1, 0, 4080, 'a');
    ck_assert_uint_eq(tbt_read_count(b), 1);
    put_outer(b, 1, 1, 16, 0);
    put_outer(b, 1, 2, 2048, 'b');
    put_outer(b, 1, 3, 2048, 'c');
    tbt_pkts ps = tbt_read_all(b);
    ck_assert_str_eq(tbt_heads(&ps), "bc");
    ck_assert_uint_eq(ps.p[0].loss, 0);
    tbt_free(&ps);
}

static Suite *tb_loss_suite(void)
{
    Suite *s = suite_create("tb_loss");
    TCK_CASE(s, "reasons", test_loss_none_on_first_packet_of_new_sequence,
             test_loss_read_gap_between_reads,
             test_loss_gap_inside_one_walk_not_flagged,
             test_loss_chunk_corrupted_by_patch,
             test_loss_chunk_corrupted_in_reassembly,
             test_loss_orphan_continuation, test_loss_reassembly_gap,
             test_loss_reassembly_broken_chain);
    TCK_CASE(s, "overwrite", test_loss_overwrite_of_begin_with_continuation,
             test_loss_overwrite_of_read_packets_not_flagged,
             test_loss_overwrite_of_empty_chunk_not_flagged,
             test_loss_ooo_eviction_erases_earlier_chunks_of_sequence);
    TCK_CASE(s, "stats", test_stats_padding_scenario,
             test_stats_minimal_padding_and_exact_wrap,
             test_stats_read_everything_before_wrap);
    return s;
}

TCK_MAIN(tb_loss_suite)
