/*
 * check_tb_mem.c - libbuf ring memory (tb_mem.c): huge-page rings and the
 * cache of released rings (tb_set_ring_cache_limit).
 *
 * A cached ring is handed out again without being cleared, so the test
 * that matters is behaviour: the same seeded workload (writers splitting
 * packets across chunks, a small ring that wraps many times, scraped
 * incomplete chunks committed later, patches, out-of-order commits, reads
 * at random moments, a clone at the end) run on a fresh ring and on a
 * reused ring filled with garbage first (random bytes; bytes that look
 * like record headers of live sequences) must return the same packets,
 * with the same properties and loss flags, and the same stats. Also: a
 * released ring comes back only for the same size, the limit bounds what
 * is kept, and a limit of 0 keeps nothing.
 */
#include "tb_int.h"
#include "tb_workload.h"

#define RING 32768u

/* Garbage: random bytes, or headers naming live sequences with plausible
 * sizes (what a ring last used by another session would hold). */
static void scribble(uint8_t *mem, size_t size, uint32_t seed, bool headers)
{
    uint32_t r = seed | 1;
    for (size_t i = 0; i + 4 <= size; i += 4) {
        uint32_t v = trng_next32(&r);
        memcpy(mem + i, &v, 4);
    }
    if (!headers)
        return;
    for (size_t off = 0; off + 16 <= size; off += 16) {
        tb__rec *h = (tb__rec *)(void *)(mem + off);
        h->chunk_id = trng_next32(&r) % 64;
        h->pri_wri_id = ((1u + trng_next32(&r) % 2) << 16) |
                        (1u + trng_next32(&r) % 5);
        h->size = (uint16_t)(trng_next32(&r) % 2048);
        h->payload_size = (uint16_t)(trng_next32(&r) % (h->size + 1u));
        h->payload_avail = h->payload_size;
        h->flags = (uint8_t)(trng_next32(&r) & 0x87u);
        h->facts = (uint8_t)trng_next32(&r);
    }
}

static void check_reuse(uint32_t seed, bool headers)
{
    tb_set_ring_cache_limit(0);
    outcome fresh = {0}, reused = {0};
    tb_stats s1, s2;
    tb_buffer *b = tb_create(RING, TB_RING_BUFFER);
    ck_assert_ptr_nonnull(b);
    workload(b, seed, 30, &fresh, &s1);
    tb_destroy(b);
    ck_assert_uint_gt(fresh.packets, 200);
    ck_assert_uint_gt(fresh.flagged, 0);          /* the ring wrapped */
    ck_assert_uint_gt(s1.write_wrap_count, 3);
    ck_assert_uint_gt(s1.patches_succeeded, 0);

    tb_set_ring_cache_limit(4 * RING);
    b = tb_create(RING, TB_RING_BUFFER);
    uint8_t *mem = b->mem;
    scribble(b->mem, b->size, seed, headers);
    tb_destroy(b);
    b = tb_create(RING, TB_RING_BUFFER);
    ck_assert_ptr_eq(b->mem, mem);                /* the same ring */
    scribble(b->mem, b->size, seed + 1, headers); /* MADV_FREE may zero */
    workload(b, seed, 30, &reused, &s2);
    tb_destroy(b);
    tb_set_ring_cache_limit(0);

    ck_assert_uint_eq(fresh.packets, reused.packets);
    ck_assert_uint_eq(fresh.flagged, reused.flagged);
    ck_assert(fresh.hash == reused.hash);
    ck_assert_mem_eq(&s1, &s2, sizeof(s1));
}

START_TEST(test_reused_ring_random_garbage)
{
    check_reuse((uint32_t)_i + 1, false);
}
END_TEST

START_TEST(test_reused_ring_header_garbage)
{
    check_reuse((uint32_t)_i + 100, true);
}
END_TEST

START_TEST(test_cache_rules)
{
    tb_set_ring_cache_limit(0);
    tb_buffer *a = tb_create(RING, TB_RING_BUFFER);
    uint8_t *ma = a->mem;
    tb_destroy(a);                      /* limit 0: unmapped */
    tb_set_ring_cache_limit(2 * RING);
    a = tb_create(RING, TB_RING_BUFFER);
    tb_buffer *b2 = tb_create(2 * RING, TB_DISCARD);
    ma = a->mem;
    uint8_t *mb = b2->mem;
    tb_destroy(a);                      /* kept: RING <= 2 * RING */
    tb_destroy(b2);                     /* not kept: over the limit */
    tb_buffer *c = tb_create(2 * RING, TB_RING_BUFFER);
    ck_assert_ptr_ne(c->mem, ma);       /* other size: not the cached one */
    tb_buffer *d = tb_create(RING - 100, TB_DISCARD); /* rounds to RING */
    ck_assert_ptr_eq(d->mem, ma);
    ck_assert_uint_eq(tb_size(d), RING);
    ck_assert_int_eq(tb_policy(d), TB_DISCARD);
    ck_assert_uint_eq(tb_used_size(d), 0);
    ck_assert_uint_eq(tb_get_stats(d)->bytes_written, 0);
    tb_destroy(c);
    tb_destroy(d);
    /* a clone takes a cached ring too, and reads the same */
    tb_buffer *src = tb_create(RING, TB_RING_BUFFER);
    tbt_chunk *ch = calloc(1, sizeof(*ch));
    tbt_frag(ch, 100, 7);
    tbt_commit(src, 1, 0, 0, ch);
    tb_buffer *cl = tb_clone_readonly(src);
    ck_assert_ptr_nonnull(cl);
    tb_packet p;
    tb_begin_read(cl);
    ck_assert(tb_read_next_packet(cl, &p, NULL, NULL));
    ck_assert_uint_eq(p.size, 100);
    ck_assert(!tb_read_next_packet(cl, &p, NULL, NULL));
    tb_destroy(cl);
    tb_destroy(src);
    free(ch);
    (void)mb;
    tb_set_ring_cache_limit(0);         /* unmaps what was kept */
}
END_TEST

static Suite *tb_mem_suite(void)
{
    Suite *s = suite_create("tb_mem");
    TCase *tc = tcase_create("reuse");
    tcase_add_loop_test(tc, test_reused_ring_random_garbage, 0, 8);
    tcase_add_loop_test(tc, test_reused_ring_header_garbage, 0, 8);
    tcase_add_test(tc, test_cache_rules);
    suite_add_tcase(s, tc);
    return s;
}

TBT_MAIN(tb_mem_suite)
