/*
 * check_svc_packet.c - the service's TracePacket validator and trusted
 * trailer (service/svc_packet.c, wire-formats.md §3); the validator over
 * slices against the contiguous one.
 */
#include <check.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "svc_packet.h"
#include "tck_main.h"
#include "trace.pb-c.h"

#define V(...) ((const uint8_t[]){__VA_ARGS__}), \
               sizeof((const uint8_t[]){__VA_ARGS__})

START_TEST(test_validate_accepts_plain_packets)
{
    ck_assert(svc_packet_validate_untrusted(NULL, 0));       /* empty */
    ck_assert(svc_packet_validate_untrusted(V(0x40, 0x05))); /* timestamp */
    /* for_testing { seq_value: 7 } (field 900, 2-byte tag) */
    ck_assert(svc_packet_validate_untrusted(V(0xA2, 0x38, 0x02, 0x10, 0x07)));
    /* fixed64 / fixed32 fields with unknown numbers are fine */
    ck_assert(svc_packet_validate_untrusted(V(0x09, 1, 2, 3, 4, 5, 6, 7, 8)));
    ck_assert(svc_packet_validate_untrusted(V(0x0D, 1, 2, 3, 4)));
    /* a nested message holding field 10 is not looked into */
    ck_assert(svc_packet_validate_untrusted(V(0x5A, 0x02, 0x50, 0x01)));
}
END_TEST

START_TEST(test_validate_rejects_trusted_fields)
{
    static const unsigned fields[] = {3, 10, 33, 35, 36, 50, 69, 79, 98,
                                      124, 125, 133};
    for (size_t i = 0; i < sizeof(fields) / sizeof(fields[0]); i++) {
        uint8_t b[8];
        size_t n = svc_varint(b, (uint64_t)fields[i] << 3);  /* varint */
        b[n++] = 1;
        ck_assert_msg(!svc_packet_validate_untrusted(b, n), "field %u",
                      fields[i]);
    }
}
END_TEST

START_TEST(test_validate_rejects_malformed)
{
    ck_assert(!svc_packet_validate_untrusted(V(0x40)));          /* no value */
    ck_assert(!svc_packet_validate_untrusted(V(0x43, 0x00)));    /* wt 3 */
    ck_assert(!svc_packet_validate_untrusted(V(0x44, 0x00)));    /* wt 4 */
    ck_assert(!svc_packet_validate_untrusted(V(0x46, 0x00)));    /* wt 6 */
    ck_assert(!svc_packet_validate_untrusted(V(0x00, 0x00)));    /* field 0 */
    ck_assert(!svc_packet_validate_untrusted(V(0x09, 1, 2, 3))); /* short */
    ck_assert(!svc_packet_validate_untrusted(V(0x0D, 1, 2)));
    ck_assert(!svc_packet_validate_untrusted(V(0x5A, 0x05, 1))); /* len */
    /* varint of 11 bytes */
    ck_assert(!svc_packet_validate_untrusted(V(0x40, 0x80, 0x80, 0x80, 0x80,
            0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01)));
    /* length 268435456 (> 268435455) */
    ck_assert(!svc_packet_validate_untrusted(V(0x5A, 0x80, 0x80, 0x80, 0x80,
                                               0x01)));
}
END_TEST

/* svc_packet_validate_slices: the same verdict as the contiguous validator
 * on the concatenation, however the packet is cut (empty slices too). */
static uint32_t rng = 12345;
static uint32_t rnd(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 17;
    rng ^= rng << 5;
    return rng;
}

/* A packet of random top-level fields; sometimes a mutation breaks it. */
static size_t random_packet(uint8_t *p, size_t cap)
{
    size_t n = 0;
    int nfields = (int)(rnd() % 12);
    for (int f = 0; f < nfields && n + 40 < cap; f++) {
        uint64_t field = 1 + rnd() % 140;
        unsigned wire = (unsigned[]){0, 1, 2, 5}[rnd() % 4];
        n += svc_varint(p + n, field << 3 | wire);
        if (wire == 0) {
            n += svc_varint(p + n, (uint64_t)rnd() << (rnd() % 32));
        } else if (wire == 1 || wire == 5) {
            for (unsigned k = 0; k < (wire == 1 ? 8u : 4u); k++)
                p[n++] = (uint8_t)rnd();
        } else {
            size_t len = rnd() % 300;
            if (n + 12 + len > cap)
                len = 0;
            n += svc_varint(p + n, len);
            for (size_t k = 0; k < len; k++)
                p[n++] = (uint8_t)rnd();
        }
    }
    if (n > 0 && rnd() % 3 == 0) {
        switch (rnd() % 3) {
        case 0: n -= 1 + rnd() % n; break;        /* truncated */
        case 1: p[rnd() % n] = (uint8_t)rnd(); break;
        default: p[rnd() % n] |= 0x80; break;     /* longer varints */
        }
    }
    return n;
}

START_TEST(test_validate_slices_matches_contiguous)
{
    static uint8_t p[8192];
    tb_slice sl[64];
    unsigned ok = 0, bad = 0, flagged = 0;
    for (int iter = 0; iter < 20000; iter++) {
        size_t n = random_packet(p, sizeof(p));
        bool want = svc_packet_validate_untrusted(p, n);
        size_t ns = 0, off = 0;
        while (off < n && ns < 63) {
            size_t cut = rnd() % 4 == 0 ? 0 : 1 + rnd() % 64;
            if (cut > n - off)
                cut = n - off;
            sl[ns].data = p + off;
            sl[ns++].size = cut;
            off += cut;
        }
        if (off < n || ns == 0) {
            sl[ns].data = p + off;
            sl[ns++].size = n - off;
        }
        ck_assert_msg(svc_packet_validate_slices(sl, ns) == want,
                      "iteration %d: %zu bytes in %zu slices", iter, n, ns);
        /* the flag reads the same in pieces */
        bool whole, pieces;
        ck_assert(svc_packet_check(p, n, &whole) == want);
        ck_assert(svc_packet_check_slices(sl, ns, &pieces) == want);
        if (want) {
            ck_assert_msg(whole == pieces, "iteration %d: flag %d in one "
                          "piece, %d in %zu", iter, whole, pieces, ns);
            flagged += whole;
        }
        want ? ok++ : bad++;
    }
    ck_assert_uint_gt(ok, 1000);
    ck_assert_uint_gt(bad, 1000);
    ck_assert_uint_gt(flagged, 20);
    /* byte by byte */
    static const uint8_t pk[] = {0xA2, 0x38, 0x02, 0x10, 0x07, 0x09, 1, 2, 3,
                                 4, 5, 6, 7, 8, 0x40, 0x80, 0x01};
    for (size_t i = 0; i < sizeof(pk); i++) {
        sl[i].data = pk + i;
        sl[i].size = 1;
    }
    ck_assert(svc_packet_validate_slices(sl, sizeof(pk)));
    ck_assert(!svc_packet_validate_slices(sl, sizeof(pk) - 1));
}
END_TEST

START_TEST(test_trailer_decodes_as_trusted_fields)
{
    uint8_t buf[64] = {0x40, 0x2A};        /* timestamp 42 */
    size_t n = 2;
    n += svc_packet_trailer(buf + n, 1000, 7, 4242, 64 | 1);
    Perfetto__Protos__TracePacket *p =
        perfetto__protos__trace_packet__unpack(NULL, n, buf);
    ck_assert_ptr_nonnull(p);
    ck_assert_uint_eq(p->timestamp, 42);
    ck_assert_int_eq(p->trusted_uid, 1000);
    ck_assert_uint_eq(p->trusted_packet_sequence_id, 7);
    ck_assert_int_eq(p->trusted_pid, 4242);
    ck_assert(p->has_previous_packet_dropped);
    ck_assert_uint_eq(p->previous_packet_dropped, 65);
    perfetto__protos__trace_packet__free_unpacked(p, NULL);
}
END_TEST

START_TEST(test_trailer_omits_zero_loss_and_encodes_negative)
{
    uint8_t buf[64];
    size_t n = svc_packet_trailer(buf, -1, 2, -1, 0);
    ck_assert_uint_le(n, SVC_TRAILER_MAX);
    Perfetto__Protos__TracePacket *p =
        perfetto__protos__trace_packet__unpack(NULL, n, buf);
    ck_assert_ptr_nonnull(p);
    ck_assert(!p->has_previous_packet_dropped);
    ck_assert_int_eq(p->trusted_uid, -1);
    ck_assert_int_eq(p->trusted_pid, -1);
    perfetto__protos__trace_packet__free_unpacked(p, NULL);
}
END_TEST

/* svc_packet_check's flag: the last top-level previous_packet_dropped
 * (42, varint) is non-zero, whatever its length; a 42 of another wire
 * type is not it; contiguous and byte by byte alike. */
START_TEST(test_check_reads_previous_packet_dropped)
{
#define FLAG_CASE(want, ...)                                              \
    do {                                                                  \
        static const uint8_t pk[] = {__VA_ARGS__};                        \
        tb_slice sl[sizeof(pk)];                                          \
        bool whole = !(want), pieces = !(want);                           \
        for (size_t i = 0; i < sizeof(pk); i++) {                         \
            sl[i].data = pk + i;                                          \
            sl[i].size = 1;                                               \
        }                                                                 \
        ck_assert(svc_packet_check(pk, sizeof(pk), &whole));              \
        ck_assert(svc_packet_check_slices(sl, sizeof(pk), &pieces));      \
        ck_assert_msg(whole == (want) && pieces == (want),                \
                      "line %d: %d / %d, want %d", __LINE__, whole,       \
                      pieces, want);                                      \
    } while (0)
    FLAG_CASE(false, 0x40, 0x2A);                        /* no 42 */
    FLAG_CASE(true, 0xD0, 0x02, 0x01);
    FLAG_CASE(true, 0x40, 0x2A, 0xD0, 0x02, 0x81, 0x02); /* 257 */
    FLAG_CASE(false, 0xD0, 0x02, 0x00);
    FLAG_CASE(false, 0xD0, 0x02, 0x05, 0x40, 0x01, 0xD0, 0x02, 0x00);
    FLAG_CASE(true, 0xD0, 0x02, 0x00, 0xD0, 0x02, 0x03);
    FLAG_CASE(true, 0xD0, 0x02, 0x80, 0x80, 0x80, 0x80, 0x80, 0x20);
    FLAG_CASE(false, 0xD2, 0x02, 0x01, 0x07);           /* 42 as bytes */
    FLAG_CASE(false, 0xD5, 0x02, 1, 0, 0, 0);           /* 42 as fixed32 */
#undef FLAG_CASE
    bool flag;
    static const uint8_t cut[] = {0xD0, 0x02, 0x81};
    ck_assert(!svc_packet_check(cut, sizeof(cut), &flag));
}
END_TEST

/* Varint values of every length from 1 to 11 bytes (11: invalid), with
 * 0-10 bytes after them, cut at every length: the contiguous check (which
 * skips a value varint in one 8-byte load when 8 bytes are left) gives the
 * answer of the byte-by-byte slices walk. */
START_TEST(test_validate_varint_lengths_at_every_cut)
{
    uint8_t p[32];
    tb_slice sl[32];
    unsigned ok = 0, bad = 0;
    for (size_t len = 1; len <= 11; len++) {
        for (size_t tail = 0; tail <= 11; tail++) {
            size_t n = 0;
            p[n++] = 0x40;                         /* field 8, varint */
            for (size_t i = 0; i + 1 < len; i++)
                p[n++] = 0xFF;
            p[n++] = 0x01;
            for (size_t i = 0; i < tail / 2; i++) { /* field 9 varints */
                p[n++] = 0x48;
                p[n++] = 0x05;
            }
            for (size_t cut = 0; cut <= n; cut++) {
                for (size_t i = 0; i < cut; i++) {
                    sl[i].data = p + i;
                    sl[i].size = 1;
                }
                bool want = svc_packet_validate_slices(sl, cut);
                ck_assert_msg(svc_packet_validate_untrusted(p, cut) == want,
                              "varint of %zu bytes, %zu of %zu bytes", len,
                              cut, n);
                want ? ok++ : bad++;
            }
            ck_assert(svc_packet_validate_untrusted(p, n) == (len <= 10));
        }
    }
    ck_assert_uint_gt(ok, 100);
    ck_assert_uint_gt(bad, 100);
}
END_TEST

/* Tags and lengths (read_varint, with its 1- and 2-byte fast paths) of
 * every length from 1 to 11 bytes (redundant encodings; 11: invalid), cut
 * at every length: the contiguous check gives the answer of the byte-by-
 * byte slices walk, and the whole packet is valid exactly when both
 * varints are at most 10 bytes. The tag is field 900 (for_testing, a
 * 2-byte tag) or 9, the length 3 or 200 (2 bytes), padded with 0x80
 * continuation bytes. */
static size_t padded_varint(uint8_t *p, uint64_t v, size_t len)
{
    size_t n = 0;
    while (n + 1 < len) {
        p[n++] = (uint8_t)((v & 0x7f) | 0x80);
        v >>= 7;
    }
    p[n++] = (uint8_t)v;
    return n;
}

START_TEST(test_validate_tag_and_length_varints_at_every_cut)
{
    static const uint64_t fields[] = {9, 900};
    static const uint64_t lens[] = {3, 200};
    uint8_t p[512];
    tb_slice sl[512];
    unsigned ok = 0, bad = 0;
    for (size_t fi = 0; fi < 2; fi++) {
        for (size_t li = 0; li < 2; li++) {
            uint64_t tag = fields[fi] << 3 | 2;
            size_t min_tag = tag < 0x80 ? 1 : 2;
            size_t min_len = lens[li] < 0x80 ? 1 : 2;
            for (size_t tl = min_tag; tl <= 11; tl++) {
                for (size_t ll = min_len; ll <= 11; ll++) {
                    size_t n = padded_varint(p, tag, tl);
                    n += padded_varint(p + n, lens[li], ll);
                    memset(p + n, 0x61, lens[li]);
                    n += lens[li];
                    for (size_t cut = 0; cut <= n; cut++) {
                        for (size_t i = 0; i < cut; i++) {
                            sl[i].data = p + i;
                            sl[i].size = 1;
                        }
                        bool want = svc_packet_validate_slices(sl, cut);
                        ck_assert_msg(
                            svc_packet_validate_untrusted(p, cut) == want,
                            "tag of %zu bytes, length of %zu, %zu of %zu "
                            "bytes", tl, ll, cut, n);
                        want ? ok++ : bad++;
                    }
                    ck_assert(svc_packet_validate_untrusted(p, n) ==
                              (tl <= 10 && ll <= 10));
                }
            }
        }
    }
    ck_assert_uint_gt(ok, 100);
    ck_assert_uint_gt(bad, 1000);
}
END_TEST

static Suite *svc_packet_suite(void)
{
    Suite *s = suite_create("svc_packet");
    TCK_CASE(s, "validate", test_validate_accepts_plain_packets,
             test_validate_rejects_trusted_fields,
             test_validate_rejects_malformed,
             test_validate_slices_matches_contiguous,
             test_validate_varint_lengths_at_every_cut,
             test_validate_tag_and_length_varints_at_every_cut,
             test_check_reads_previous_packet_dropped);
    TCK_CASE(s, "trailer", test_trailer_decodes_as_trusted_fields,
             test_trailer_omits_zero_loss_and_encodes_negative);
    return s;
}

TCK_MAIN(svc_packet_suite)
