/*
 * check_tb_malicious.c - libbuf: hostile chunks. Every field of a chunk
 * lies in turn (fragment count, fragment sizes, varints, flags, completeness,
 * payload size, ChunkID, identity); the buffer must keep the valid prefix,
 * count the violation, never crash, and never cost another sequence data.
 * Also a producer that rewrites its shared memory while the service copies
 * from it (tb_copy_chunk_shared; the race is staged by libbuf's test hook
 * between tokenizing the source and copying it).
 */
#include "tb_testutil.h"
#include "tb_int.h"

static tbt_chunk c;

/* A well-behaved neighbour sequence (producer 9) around each bad chunk. */
static void good(tb_buffer *b, uint32_t id)
{
    tbt_put1(b, 9, 9, id, 0, 32, (uint8_t)id);
}

static void raw(tb_buffer *b, uint16_t p, uint16_t w, uint32_t id,
                uint16_t nfrags, uint8_t flags, bool complete,
                const uint8_t *data, size_t size)
{
    tb_copy_chunk_untrusted(b, p, 1, 1, w, id, nfrags, flags, complete,
                            data, size);
}

/* Reads all; checks the neighbour's packets 0..n-1 are all there. */
static tbt_pkts read_check_neighbour(tb_buffer *b, uint32_t n)
{
    tbt_pkts ps = tbt_read_all(b);
    uint32_t seen = 0;
    for (size_t i = 0; i < ps.n; i++) {
        if (ps.p[i].props.producer_id != 9)
            continue;
        ck_assert(tbt_pkt_is1(&ps.p[i], 32, (uint8_t)seen));
        ck_assert_uint_eq(ps.p[i].loss, 0);
        seen++;
    }
    ck_assert_uint_eq(seen, n);
    return ps;
}

/* Reads all: the neighbour's n9 packets intact, n1 packets of producer 1
 * (the hostile one) and nothing else. */
static void expect_read(tb_buffer *b, uint32_t n9, size_t n1)
{
    tbt_pkts ps = read_check_neighbour(b, n9);
    size_t from1 = 0;
    for (size_t i = 0; i < ps.n; i++)
        from1 += ps.p[i].props.producer_id == 1;
    ck_assert_uint_eq(from1, n1);
    ck_assert_uint_eq(ps.n, n9 + n1);
    tbt_free(&ps);
}

/* A chunk of producer 1 with one fragment of `size` bytes from seed whose
 * header claims nfrags fragments. */
static void raw1(tb_buffer *b, uint16_t w, uint32_t id, uint16_t nfrags,
                 uint8_t flags, uint32_t size, uint8_t seed)
{
    tbt_reset(&c);
    tbt_frag(&c, size, seed);
    raw(b, 1, w, id, nfrags, flags, true, c.data, c.size);
}

TBT_RING_TEST(test_bad_num_fragments_too_many)
{
    good(b, 0);
    tbt_reset(&c);
    tbt_frag(&c, 64, 'a');
    raw(b, 1, 1, 0, 3, 0, true, c.data, c.size);
    raw(b, 1, 2, 0, 1, 0, true, c.data, 0); /* 1 fragment, no bytes */
    good(b, 1);
    ck_assert_uint_eq(TBT_STAT(b, abi_violations), 2);
    expect_read(b, 2, 1); /* the valid 'a' */
}

TBT_RING_TEST(test_bad_num_fragments_too_few_or_zero)
{
    tbt_build(&c, (uint32_t[]){10, 10}, "ab");
    raw(b, 1, 1, 0, 1, 0, true, c.data, c.size); /* 'b' ignored */
    raw(b, 1, 1, 1, 0, 0, true, c.data, c.size); /* nothing */
    ck_assert_uint_eq(TBT_STAT(b, abi_violations), 0);
    ck_assert_uint_eq(TBT_STAT(b, bytes_written), 32 + 16);
    tbt_expect(b, "a", (uint32_t[]){10});
}

TBT_RING_TEST(test_bad_fragment_size_past_end)
{
    good(b, 0);
    tbt_reset(&c);
    tbt_frag(&c, 20, 'a');
    tbt_put_varint4(&c, 1000); /* claims 1000, has 5 */
    memset(c.data + c.size, 'x', 5);
    c.size += 5;
    c.nfrags = 2;
    raw(b, 1, 1, 0, c.nfrags, 0, true, c.data, c.size);
    good(b, 1);
    ck_assert_uint_eq(TBT_STAT(b, abi_violations), 1);
    expect_read(b, 2, 1);
}

TBT_RING_TEST(test_bad_varint_too_long_or_truncated)
{
    uint8_t eleven[16];
    memset(eleven, 0x80, sizeof(eleven));
    eleven[11] = 0x00; /* terminates only at byte 12: too long */
    raw(b, 1, 1, 0, 1, 0, true, eleven, sizeof(eleven));
    uint8_t trunc[3] = {0x80, 0x80, 0x80};
    raw(b, 1, 2, 0, 1, 0, true, trunc, sizeof(trunc));
    uint8_t overflow[2] = {0x82}; /* continues past the payload end */
    raw(b, 1, 3, 0, 1, 0, true, overflow, 1);
    ck_assert_uint_eq(TBT_STAT(b, abi_violations), 3);
    /* ten bytes is the maximum and is fine (a redundant zero) */
    uint8_t ten[14] = {0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80,
                       0x00, 0x81, 0x80, 0x00, 'q'};
    raw(b, 1, 4, 0, 2, 0, true, ten, sizeof(ten));
    ck_assert_uint_eq(TBT_STAT(b, abi_violations), 3);
    good(b, 0);
    expect_read(b, 1, 1); /* 'q' (size 1) */
}

START_TEST(test_bad_varint_huge_value)
{
    tb_buffer *b = tb_create(65536, TB_RING_BUFFER);
    static uint8_t jumbo[65536 - 32];
    memset(jumbo, 0xFF, sizeof(jumbo));
    jumbo[9] = 0x7F; /* 10-byte varint near 2^64 */
    raw(b, 1, 1, 0, 1, 0, true, jumbo, sizeof(jumbo));
    uint8_t big[8] = {0xFF, 0xFF, 0xFF, 0xFF, 0x0F, 'a', 'b', 'c'};
    raw(b, 1, 2, 0, 1, 0, true, big, sizeof(big));
    ck_assert_uint_eq(TBT_STAT(b, abi_violations), 2);
    good(b, 0);
    expect_read(b, 1, 0);
    tb_destroy(b);
}
END_TEST

TBT_RING_TEST(test_bad_zero_varint_header_in_sequence)
{
    /* a(begin) | b(cont) whose header says 0 | c(end), d | e */
    tbt_reset(&c);
    tbt_frag(&c, 4, 'a');
    tbt_commit_ex(b, 1, 1, 0, TB_F2, true, &c, 0);
    tbt_reset(&c);
    tbt_frag(&c, 4, 'b');
    c.data[0] = 0; /* size 0; the 4 data bytes become garbage */
    tb_copy_chunk_untrusted(b, 1, 1000, 42, 1, 1, 1, TB_F1 | TB_F2, true,
                            c.data, c.size);
    tbt_reset(&c);
    tbt_frag(&c, 4, 'c');
    tbt_frag(&c, 4, 'd');
    tbt_commit_ex(b, 1, 1, 2, TB_F1, true, &c, 0);
    tbt_reset(&c);
    tbt_frag(&c, 4, 'e');
    tbt_commit_ex(b, 1, 1, 3, 0, true, &c, 0);
    good(b, 0);
    ck_assert_uint_eq(TBT_STAT(b, abi_violations), 0);
    tbt_pkts ps = read_check_neighbour(b, 1);
    ck_assert_uint_eq(ps.n, 4);
    ck_assert(tbt_pkt_is(&ps.p[0], 2, (uint32_t[]){4, 4},
                         (uint8_t[]){'a', 'c'}));
    ck_assert_uint_eq(ps.p[0].nslices, 2); /* the empty one has no slice */
    ck_assert(tbt_pkt_is1(&ps.p[1], 4, 'd'));
    ck_assert(tbt_pkt_is1(&ps.p[2], 4, 'e'));
    tbt_free(&ps);
}

TBT_RING_TEST(test_bad_flags_unknown_bits_ignored)
{
    /* 0x80 is our private "incomplete" marker: a producer cannot set it */
    raw1(b, 1, 0, 1, 0xF8, 10, 'a');
    ck_assert_uint_eq(tbt_read_count(b), 1);
    /* and the chunk was not treated as scraped (it was read, not stalled) */
    ck_assert_uint_eq(TBT_STAT(b, chunks_read), 1);
}

TBT_RING_TEST(test_bad_flags_continuation_lies)
{
    good(b, 0);
    /* claims to continue from and on: an orphan continue that never ends */
    raw1(b, 1, 0, 1, TB_F1 | TB_F2 | TB_F4, 10, 'a');
    good(b, 1);
    expect_read(b, 2, 0);
    raw1(b, 1, 1, 1, 0, 10, 'b');
    tbt_pkts ps = tbt_read_all(b);
    ck_assert_uint_eq(ps.n, 1);
    ck_assert_uint_eq(ps.p[0].loss,
                      TB_LOSS_PRESENT | TB_LOSS_ORPHAN_CONTINUATION);
    tbt_free(&ps);
    ck_assert_uint_eq(TBT_STAT(b, abi_violations), 0);
}

TBT_RING_TEST(test_bad_incomplete_with_no_fragments)
{
    uint8_t junk[300];
    memset(junk, 0xAB, sizeof(junk));
    raw(b, 1, 1, 0, 0, TB_F2, false, junk, sizeof(junk));
    ck_assert_uint_eq(TBT_STAT(b, abi_violations), 0);
    ck_assert_uint_eq(TBT_STAT(b, bytes_written), 320);
    good(b, 0);
    expect_read(b, 1, 0);
}

START_TEST(test_bad_payload_size_zero_null_and_huge)
{
    tb_buffer *b = tb_create(1 << 20, TB_RING_BUFFER);
    raw(b, 1, 1, 0, 0, 0, true, NULL, 0);
    raw(b, 1, 1, 1, 5, 0, true, NULL, 12345); /* NULL src: size ignored */
    ck_assert_uint_eq(TBT_STAT(b, abi_violations), 1);
    static uint8_t big[70000];
    memset(big, 0, sizeof(big)); /* 70000 empty fragments */
    raw(b, 1, 2, 0, 2, 0, false, big, sizeof(big)); /* > 64 KiB reserve */
    ck_assert_uint_eq(TBT_STAT(b, abi_violations), 2);
    raw(b, 1, 3, 0, 2, 0, true, big, sizeof(big)); /* complete: 2 bytes */
    ck_assert_uint_eq(TBT_STAT(b, abi_violations), 2);
    ck_assert_uint_eq(TBT_STAT(b, chunks_written), 3);
    good(b, 0);
    expect_read(b, 1, 0);
    tb_destroy(b);
}
END_TEST

TBT_RING_TEST(test_bad_chunk_too_big_for_buffer)
{
    good(b, 0);
    tbt_build(&c, (uint32_t[]){4096, 2048}, "ab");
    raw(b, 1, 1, 0, 2, 0, true, c.data, c.size);
    ck_assert_uint_eq(TBT_STAT(b, abi_violations), 1);
    ck_assert_uint_eq(TBT_STAT(b, chunks_overwritten), 0);
    expect_read(b, 1, 0);
}

TBT_RING_TEST(test_bad_chunk_id_replayed_or_old)
{
    tbt_build(&c, (uint32_t[]){30, 40}, "ab");
    raw(b, 1, 1, 0, 2, 0, true, c.data, c.size);
    ck_assert_uint_eq(tbt_read_count(b), 2);
    /* replay of consumed chunk 0, and one far in the past */
    raw1(b, 1, 0, 1, 0, 10, 'x');
    raw1(b, 1, 0x80000001u, 1, 0, 10, 'x');
    ck_assert_uint_eq(TBT_STAT(b, chunks_discarded), 2);
    ck_assert_uint_eq(tbt_read_count(b), 0);
    raw1(b, 1, 1, 1, 0, 10, 'x');
    tbt_pkts ps = tbt_read_all(b);
    ck_assert_uint_eq(ps.n, 1);
    ck_assert_uint_eq(ps.p[0].loss, 0);
    tbt_free(&ps);
}

TBT_RING_TEST(test_bad_identity_zero)
{
    tbt_build(&c, (uint32_t[]){10}, "a");
    raw(b, 0, 0, 0, 1, 0, true, c.data, c.size); /* would look like padding */
    ck_assert_uint_eq(TBT_STAT(b, abi_violations), 1);
    raw(b, 0, 5, 0, 1, 0, true, c.data, c.size); /* producer 0 alone: ok */
    raw(b, 5, 0, 0, 1, 0, true, c.data, c.size); /* writer 0 alone: ok */
    ck_assert_uint_eq(tbt_read_count(b), 2);
}

START_TEST(test_bad_flood_does_not_cost_others)
{
    tb_buffer *b = tb_create(8192, TB_RING_BUFFER);
    uint8_t junk[512];
    uint32_t rng = 12345;
    for (uint32_t i = 0; i < 200; i++) {
        for (size_t k = 0; k < sizeof(junk); k++) {
            rng = rng * 1103515245u + 12345u;
            junk[k] = (uint8_t)(rng >> 16);
        }
        rng = rng * 1103515245u + 12345u;
        raw(b, 1, (uint16_t)(1 + (rng >> 20) % 3), (rng >> 8),
            (uint16_t)((rng >> 4) % 20), (uint8_t)rng, (rng >> 3) & 1, junk,
            (rng >> 12) % sizeof(junk));
        if (i % 50 == 0) {
            tbt_pkts ps = tbt_read_all(b);
            tbt_free(&ps);
        }
    }
    /* producer 9 then gets a clean buffer (every hostile record is
     * evicted by its 8 KiB) and is unaffected */
    for (uint32_t i = 0; i < 100; i++)
        good(b, i);
    tbt_pkts ps = tbt_read_all(b);
    uint32_t seen = 0;
    for (size_t i = 0; i < ps.n; i++)
        if (ps.p[i].props.producer_id == 9)
            seen++;
    ck_assert_uint_gt(seen, 0);
    tbt_free(&ps);
    tb_destroy(b);
}
END_TEST

/* ---- a source rewritten during the copy (tb_copy_chunk_shared) ------ */

static size_t race_at;     /* byte of c.data the producer rewrites ... */
static uint8_t race_value; /* ... to this, after libbuf tokenized c */
static int race_calls;

static bool race_armed;

/* libbuf's hook (tb_int.h): this definition replaces its empty one. */
void tb__shared_race_hook(void)
{
    if (!race_armed)
        return;
    c.data[race_at] = race_value;
    race_calls++;
}

static void shared(tb_buffer *b, uint16_t w, uint32_t id, uint8_t flags,
                   bool complete)
{
    tb_copy_chunk_shared(b, 1, 1, 1, w, id, c.nfrags, flags, complete,
                         c.data, c.size);
}

/* Chunk `id` of writer w (complete, no flags) from c, shared, with byte
 * `at` of c rewritten to `value` between libbuf's tokenizing and its
 * copy. */
static void shared_raced(tb_buffer *b, uint16_t w, uint32_t id, size_t at,
                         uint8_t value)
{
    race_at = at;
    race_value = value;
    race_calls = 0;
    race_armed = true;
    shared(b, w, id, 0, true);
    race_armed = false;
    ck_assert_int_eq(race_calls, 1);
}

/* Producer 1's loss entry for writer w (ck fails if none). */
static const tb_seq_loss *loss_of(tb_buffer *b, uint16_t w)
{
    size_t n = 0;
    const tb_seq_loss *l = tb_get_seq_loss(b, &n);
    for (size_t i = 0; i < n; i++)
        if (l[i].producer_id == 1 && l[i].writer_id == w)
            return &l[i];
    ck_abort_msg("no loss entry for writer %u", w);
    return NULL;
}

/* Left alone, a shared source gives what a private copy gives: the same
 * packets, the same counters. */
START_TEST(test_shared_untouched_as_private)
{
    static const uint32_t sizes[] = {10, 300, 0, 5};
    tb_buffer *a = tb_create(4096, TB_RING_BUFFER);
    tb_buffer *b = tb_create(4096, TB_RING_BUFFER);
    ck_assert_ptr_nonnull(a);
    ck_assert_ptr_nonnull(b);
    for (uint32_t id = 0; id < 3; id++) {
        tbt_build(&c, sizes, "wxyz");
        raw(a, 1, 1, id, c.nfrags, TB_CHUNK_LAST_PACKET_CONTINUES_ON_NEXT,
            true, c.data, c.size);
        shared(b, 1, id, TB_CHUNK_LAST_PACKET_CONTINUES_ON_NEXT, true);
    }
    tbt_pkts pa = tbt_read_all(a), pb = tbt_read_all(b);
    ck_assert_uint_gt(pa.n, 0);
    ck_assert_uint_eq(pa.n, pb.n);
    for (size_t i = 0; i < pa.n; i++) {
        ck_assert_uint_eq(pa.p[i].size, pb.p[i].size);
        ck_assert_mem_eq(pa.p[i].data, pb.p[i].data, pa.p[i].size);
        ck_assert_uint_eq(pa.p[i].loss, pb.p[i].loss);
    }
    ck_assert_mem_eq(tb_get_stats(a), tb_get_stats(b), sizeof(tb_stats));
    tbt_free(&pa);
    tbt_free(&pb);
    tb_destroy(a);
    tb_destroy(b);
}
END_TEST

/* A fragment header rewritten after libbuf read it: the stored bytes no
 * longer tile as tokenized. The chunk is refused whole and counted; the
 * writer's next packet says something was lost; the neighbour is
 * untouched. */
TBT_RING_TEST(test_shared_header_rewritten_refused)
{
    static const uint32_t sizes[] = {20, 20};
    good(b, 0);
    tbt_build(&c, sizes, "ab");
    shared_raced(b, 1, 0, 21, 5); /* 'b''s size varint (after 1 + 20):
                                     20 -> 5 */
    ck_assert_uint_eq(TBT_STAT(b, abi_violations), 1);
    tbt_build(&c, sizes, "cd");
    shared(b, 1, 1, 0, true);  /* the writer's next chunk, left alone */
    good(b, 1);
    tbt_pkts ps = read_check_neighbour(b, 2);
    const char *heads = tbt_heads(&ps);
    size_t got = 0;
    for (size_t i = 0; i < ps.n; i++) {
        if (ps.p[i].props.producer_id != 1)
            continue;
        /* only 'c' and 'd'; 'c' carries the loss of 'a' and 'b' */
        ck_assert(tbt_pkt_is1(&ps.p[i], 20, (uint8_t)("cd"[got])));
        if (got == 0)
            ck_assert_uint_eq(ps.p[i].loss & (TB_LOSS_PRESENT |
                                              TB_LOSS_CHUNK_CORRUPTED),
                              TB_LOSS_PRESENT | TB_LOSS_CHUNK_CORRUPTED);
        else
            ck_assert_uint_eq(ps.p[i].loss, 0);
        got++;
    }
    ck_assert_msg(got == 2, "heads %s", heads);
    const tb_seq_loss *l = loss_of(b, 1);
    ck_assert_uint_eq(l->lost_packets[TB_CAUSE_ABI_VIOLATION], 2);
    tbt_free(&ps);
}

/* Bytes inside a fragment rewritten: nothing moves, the chunk is kept
 * with what was copied (packet contents are the producer's to choose). */
TBT_RING_TEST(test_shared_body_rewritten_kept)
{
    static const uint32_t sizes[] = {20};
    tbt_build(&c, sizes, "a");
    shared_raced(b, 1, 0, 1 + 7, 'Z'); /* after the 1-byte size varint */
    ck_assert_uint_eq(TBT_STAT(b, abi_violations), 0);
    tbt_pkts ps = tbt_read_all(b);
    ck_assert_uint_eq(ps.n, 1);
    ck_assert_uint_eq(ps.p[0].size, 20);
    ck_assert_uint_eq(ps.p[0].data[7], 'Z');
    ck_assert_uint_eq(ps.p[0].loss, 0);
    tbt_free(&ps);
}

/* A scraped (incomplete) chunk, read in part, then committed complete from
 * shared memory whose bytes move a fragment boundary under the part
 * already read: refused, counted, and the rest of the packets lost. */
TBT_RING_TEST(test_shared_readmit_boundary_moved_refused)
{
    static const uint32_t sizes[] = {10, 10, 10};
    tbt_build(&c, sizes, "abc");
    /* scraped with its last fragment unfinished: 'a' and 'b' readable */
    raw(b, 1, 1, 0, 3, 0, false, c.data, c.size);
    tbt_pkts ps = tbt_read_all(b);
    ck_assert_str_eq(tbt_heads(&ps), "ab");
    tbt_free(&ps);
    /* committed: 'b''s header says 11 bytes once libbuf tokenized, so
     * that the part read (22 bytes) no longer ends at a fragment */
    shared_raced(b, 1, 0, 11, 11);
    ck_assert_uint_eq(TBT_STAT(b, abi_violations), 1);
    ck_assert_uint_eq(tbt_read_count(b), 0);
    ck_assert_uint_eq(loss_of(b, 1)->lost_packets[TB_CAUSE_ABI_VIOLATION],
                      1);
}

static Suite *tb_malicious_suite(void)
{
    Suite *s = suite_create("tb_malicious");
    TCK_CASE(s, "fragments", test_bad_num_fragments_too_many,
             test_bad_num_fragments_too_few_or_zero,
             test_bad_fragment_size_past_end,
             test_bad_varint_too_long_or_truncated, test_bad_varint_huge_value,
             test_bad_zero_varint_header_in_sequence);
    TCK_CASE(s, "header", test_bad_flags_unknown_bits_ignored,
             test_bad_flags_continuation_lies,
             test_bad_incomplete_with_no_fragments,
             test_bad_payload_size_zero_null_and_huge,
             test_bad_chunk_too_big_for_buffer,
             test_bad_chunk_id_replayed_or_old, test_bad_identity_zero);
    TCK_CASE(s, "flood", test_bad_flood_does_not_cost_others);
    TCK_CASE(s, "shared", test_shared_untouched_as_private,
             test_shared_header_rewritten_refused,
             test_shared_body_rewritten_kept,
             test_shared_readmit_boundary_moved_refused);
    return s;
}

TCK_MAIN(tb_malicious_suite)
