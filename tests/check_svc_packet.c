/*
 * check_svc_packet.c - the service's TracePacket validator and trusted
 * trailer (service/svc_packet.c, wire-formats.md §3).
 */
#include <check.h>
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

static Suite *svc_packet_suite(void)
{
    Suite *s = suite_create("svc_packet");
    TCK_CASE(s, "validate", test_validate_accepts_plain_packets,
             test_validate_rejects_trusted_fields,
             test_validate_rejects_malformed);
    TCK_CASE(s, "trailer", test_trailer_decodes_as_trusted_fields,
             test_trailer_omits_zero_loss_and_encodes_negative);
    return s;
}

TCK_MAIN(svc_packet_suite)
