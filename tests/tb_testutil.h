/*
 * tb_testutil.h - helpers for the libbuf Check tests: build chunk payloads
 * (fragments with 1- or 4-byte varint headers, recognisable contents) and
 * read whole buffers back into owned copies.
 *
 * Chunk notation shared by the tests: fragment sizes in an array and their
 * fill seeds as a string, one character a fragment:
 *   tbt_put(b, 1, 1, 0, TB_F2, (uint32_t[]){10, 20}, "ab");
 * tbt_expect / tbt_heads / tbt_read_count check what a read returns.
 *
 * Packet contents: fragment data bytes are filled with (seed + i) & 0xFF, so
 * a test can check a reassembled packet is the right bytes in the right
 * order with tbt_pattern_ok().
 */
#ifndef TESTS_TB_TESTUTIL_H
#define TESTS_TB_TESTUTIL_H

#include <check.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <shmtrace/trace_buffer.h>

#include "tck_main.h"

#define TBT_MAX_CHUNK 65536

/* A chunk being assembled. */
typedef struct {
    uint8_t data[TBT_MAX_CHUNK];
    size_t size;
    uint16_t nfrags;
} tbt_chunk;

static inline void tbt_reset(tbt_chunk *c)
{
    c->size = 0;
    c->nfrags = 0;
}

/* Appends a 4-byte redundant varint (what the writer emits). */
static inline void tbt_put_varint4(tbt_chunk *c, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        c->data[c->size++] = (uint8_t)(((v >> (7 * i)) & 0x7Fu) |
                                       (i < 3 ? 0x80u : 0u));
}

/* Appends a canonical varint. */
static inline void tbt_put_varint(tbt_chunk *c, uint64_t v)
{
    do {
        uint8_t byte = v & 0x7Fu;
        v >>= 7;
        c->data[c->size++] = (uint8_t)(byte | (v ? 0x80u : 0u));
    } while (v);
}

/* Appends one fragment of `size` bytes filled from `seed`. */
static inline void tbt_frag(tbt_chunk *c, uint32_t size, uint8_t seed)
{
    if (size < 127)
        tbt_put_varint(c, size);
    else
        tbt_put_varint4(c, size);
    for (uint32_t i = 0; i < size; i++)
        c->data[c->size++] = (uint8_t)(seed + i);
    c->nfrags++;
}

/* Same, with a 4-byte header whatever the size. */
static inline void tbt_frag4(tbt_chunk *c, uint32_t size, uint8_t seed)
{
    tbt_put_varint4(c, size);
    for (uint32_t i = 0; i < size; i++)
        c->data[c->size++] = (uint8_t)(seed + i);
    c->nfrags++;
}

/* Copies a complete chunk of producer 1 (uid 1000, pid 42). */
static inline void tbt_commit(tb_buffer *b, uint16_t writer, uint32_t id,
                              uint8_t flags, const tbt_chunk *c)
{
    tb_copy_chunk_untrusted(b, 1, 1000, 42, writer, id, c->nfrags, flags,
                            true, c->data, c->size);
}

/* One-fragment-per-packet chunk, fragments of the given sizes. */
static inline void tbt_commit_sizes(tb_buffer *b, uint16_t writer,
                                    uint32_t id, uint8_t flags,
                                    const uint32_t *sizes, size_t n,
                                    uint8_t seed)
{
    static tbt_chunk c;
    tbt_reset(&c);
    for (size_t i = 0; i < n; i++)
        tbt_frag(&c, sizes[i], (uint8_t)(seed + i));
    tbt_commit(b, writer, id, flags, &c);
}

/* Full control: producer, completeness, payload size passed (>= c->size;
 * bytes past c->size are zero, like unwritten SMB space). */
static inline void tbt_commit_ex(tb_buffer *b, uint16_t producer,
                                 uint16_t writer, uint32_t id, uint8_t flags,
                                 bool complete, tbt_chunk *c, size_t pad_to)
{
    size_t size = c->size;
    if (pad_to > size) {
        memset(c->data + size, 0, pad_to - size);
        size = pad_to;
    }
    tb_copy_chunk_untrusted(b, producer, 1000u + producer, 42, writer, id,
                            c->nfrags, flags, complete, c->data, size);
}

/* Builds c from fragments: sizes[i] bytes filled from seeds[i] (one
 * character a fragment; "" builds an empty chunk). */
static inline void tbt_build(tbt_chunk *c, const uint32_t *sizes,
                             const char *seeds)
{
    tbt_reset(c);
    for (size_t i = 0; seeds[i]; i++)
        tbt_frag(c, sizes[i], (uint8_t)seeds[i]);
}

/* Builds a chunk (tbt_build) and copies it as chunk `id` of producer p,
 * writer w: complete or not, payload padded to pad_to (tbt_commit_ex). */
static inline void tbt_put_ex(tb_buffer *b, uint16_t p, uint16_t w,
                              uint32_t id, uint8_t flags, bool complete,
                              size_t pad_to, const uint32_t *sizes,
                              const char *seeds)
{
    static tbt_chunk c;
    tbt_build(&c, sizes, seeds);
    tbt_commit_ex(b, p, w, id, flags, complete, &c, pad_to);
}

/* The same, complete and unpadded. */
static inline void tbt_put(tb_buffer *b, uint16_t p, uint16_t w,
                           uint32_t id, uint8_t flags, const uint32_t *sizes,
                           const char *seeds)
{
    tbt_put_ex(b, p, w, id, flags, true, 0, sizes, seeds);
}

/* A complete chunk of one fragment of `size` bytes filled from seed. */
static inline void tbt_put1(tb_buffer *b, uint16_t p, uint16_t w,
                            uint32_t id, uint8_t flags, uint32_t size,
                            uint8_t seed)
{
    static tbt_chunk c;
    tbt_reset(&c);
    tbt_frag(&c, size, seed);
    tbt_commit_ex(b, p, w, id, flags, true, &c, 0);
}

/* A complete chunk whose record is exactly `outer` bytes (header
 * included): one fragment with a 4-byte header, none if outer is 16. */
static inline void tbt_put_outer(tb_buffer *b, uint16_t p, uint16_t w,
                                 uint32_t id, uint32_t outer, uint8_t seed)
{
    static tbt_chunk c;
    tbt_reset(&c);
    if (outer > 16)
        tbt_frag4(&c, outer - 16 - 4, seed);
    tbt_commit_ex(b, p, w, id, 0, true, &c, 0);
}

/* A packet read back, copied out of the buffer. */
typedef struct {
    uint8_t *data;
    size_t size;
    size_t nslices;
    tb_seq_props props;
    uint32_t loss;
} tbt_pkt;

typedef struct {
    tbt_pkt *p;
    size_t n;
} tbt_pkts;

static inline void tbt_free(tbt_pkts *ps)
{
    for (size_t i = 0; i < ps->n; i++)
        free(ps->p[i].data);
    free(ps->p);
    ps->p = NULL;
    ps->n = 0;
}

/* Reads until tb_read_next_packet returns false (no tb_begin_read). */
static inline tbt_pkts tbt_read_more(tb_buffer *b)
{
    tbt_pkts ps = {NULL, 0};
    tb_packet pkt;
    tb_seq_props props;
    uint32_t loss;
    while (tb_read_next_packet(b, &pkt, &props, &loss)) {
        ps.p = realloc(ps.p, (ps.n + 1) * sizeof(*ps.p));
        ck_assert_ptr_nonnull(ps.p);
        tbt_pkt *o = &ps.p[ps.n++];
        o->data = malloc(pkt.size + 1);
        ck_assert_ptr_nonnull(o->data);
        size_t pos = 0;
        for (size_t i = 0; i < pkt.nslices; i++) {
            ck_assert_uint_gt(pkt.slices[i].size, 0);
            memcpy(o->data + pos, pkt.slices[i].data, pkt.slices[i].size);
            pos += pkt.slices[i].size;
        }
        ck_assert_uint_eq(pos, pkt.size);
        o->size = pkt.size;
        o->nslices = pkt.nslices;
        o->props = props;
        o->loss = loss;
    }
    return ps;
}

/* tb_begin_read + read everything. */
static inline tbt_pkts tbt_read_all(tb_buffer *b)
{
    tb_begin_read(b);
    return tbt_read_more(b);
}

/* True if data is the fill pattern of one fragment of `seed`. */
static inline int tbt_pattern_ok(const uint8_t *data, size_t size,
                                 uint8_t seed)
{
    for (size_t i = 0; i < size; i++)
        if (data[i] != (uint8_t)(seed + i))
            return 0;
    return 1;
}

/* True if p is the concatenation of fragments (sizes[i], seeds[i]). */
static inline int tbt_pkt_is(const tbt_pkt *p, size_t n,
                             const uint32_t *sizes, const uint8_t *seeds)
{
    size_t pos = 0;
    for (size_t i = 0; i < n; i++) {
        if (pos + sizes[i] > p->size ||
            !tbt_pattern_ok(p->data + pos, sizes[i], seeds[i]))
            return 0;
        pos += sizes[i];
    }
    return pos == p->size;
}

/* Single-fragment packet check. */
static inline int tbt_pkt_is1(const tbt_pkt *p, uint32_t size, uint8_t seed)
{
    return tbt_pkt_is(p, 1, &size, &seed);
}

/* True if p is the concatenation of fragments sizes[i] filled from the
 * characters of seeds (tbt_build's notation). */
static inline int tbt_pkt_is_s(const tbt_pkt *p, const uint32_t *sizes,
                               const char *seeds)
{
    size_t pos = 0;
    for (size_t i = 0; seeds[i]; i++) {
        if (pos + sizes[i] > p->size ||
            !tbt_pattern_ok(p->data + pos, sizes[i], (uint8_t)seeds[i]))
            return 0;
        pos += sizes[i];
    }
    return pos == p->size;
}

/* Reads everything and returns how many packets came out. */
static inline size_t tbt_read_count(tb_buffer *b)
{
    tbt_pkts ps = tbt_read_all(b);
    size_t n = ps.n;
    tbt_free(&ps);
    return n;
}

/* The first byte of each packet of ps as a string ("" if none; a packet
 * of size 0 gives '?'), to compare with ck_assert_str_eq. The string
 * lives until the next call. */
static inline const char *tbt_heads(const tbt_pkts *ps)
{
    static char s[256];
    ck_assert_uint_lt(ps->n, sizeof(s));
    for (size_t i = 0; i < ps->n; i++)
        s[i] = ps->p[i].size ? (char)ps->p[i].data[0] : '?';
    s[ps->n] = 0;
    return s;
}

/* Reads everything: exactly the one-fragment packets (sizes[i],
 * seeds[i]) in that order, whatever their loss flags. */
static inline void tbt_expect(tb_buffer *b, const char *seeds,
                              const uint32_t *sizes)
{
    tbt_pkts ps = tbt_read_all(b);
    size_t n = strlen(seeds);
    ck_assert_uint_eq(ps.n, n);
    for (size_t i = 0; i < n; i++)
        ck_assert(tbt_pkt_is1(&ps.p[i], sizes[i], (uint8_t)seeds[i]));
    tbt_free(&ps);
}

#define TBT_STAT(b, field) (tb_get_stats(b)->field)

/* A test on an empty 4 KiB ring buffer `b`, destroyed after the body:
 *   TBT_RING_TEST(test_x)
 *   {
 *       tbt_put(b, ...);
 *   }
 * (no END_TEST). Registered like any START_TEST test. */
#define TBT_RING_TEST(name)                                                \
    static void name##_on(tb_buffer *b);                                   \
    START_TEST(name)                                                       \
    {                                                                      \
        tb_buffer *ring = tb_create(4096, TB_RING_BUFFER);                 \
        ck_assert_ptr_nonnull(ring);                                       \
        name##_on(ring);                                                   \
        tb_destroy(ring);                                                  \
    }                                                                      \
    END_TEST                                                               \
    static void name##_on(tb_buffer *b)

/* The older name of TCK_MAIN, for tests written before tck_main.h. */
#define TBT_MAIN(suite_fn) TCK_MAIN(suite_fn)

#define TB_F1 TB_CHUNK_FIRST_PACKET_CONTINUES_FROM_PREV
#define TB_F2 TB_CHUNK_LAST_PACKET_CONTINUES_ON_NEXT
#define TB_F4 TB_CHUNK_NEEDS_PATCHING

#endif /* TESTS_TB_TESTUTIL_H */
