/*
 * check_ins_packet.c - the streaming Trace/TracePacket decoder
 * (ins_packet.c over ins_reader.c): fields, last-one-wins, packets larger
 * than the read window, truncation and malformation with offsets.
 *
 * Inputs are built byte by byte here, and the reader is given a tiny
 * window (64 bytes) so refills and window growth are exercised.
 */
#include "check_ins_util.h"

#include <fcntl.h>

#include "ins_packet.h"
#include "ins_reader.h"
#include "bstr.h"
#include "tck_main.h"

/* Decoder over the bytes B through a temp file. */
typedef struct fixture {
    char *dir;
    int fd;
    ins_reader r;
    ins_decoder d;
    ins_packet p;
} fixture;

static void open_fixture(fixture *fx, const bstr *b, size_t window)
{
    memset(fx, 0, sizeof(*fx));
    fx->dir = ck_tmpdir();
    char *path = ck_path(fx->dir, "t.pftrace");
    FILE *f = ck_fopen(path, "wb");
    if (b->n)
        ck_assert_uint_eq(fwrite(b->d, 1, b->n, f), b->n);
    fclose(f);
    fx->fd = open(path, O_RDONLY);
    ck_assert_int_ge(fx->fd, 0);
    free(path);
    ck_assert_int_eq(ins_reader_init(&fx->r, fx->fd, window), 0);
    ins_decoder_init(&fx->d, &fx->r);
}

static void close_fixture(fixture *fx)
{
    ins_packet_free(&fx->p);
    ins_reader_free(&fx->r);
    close(fx->fd);
    ck_rmdir(fx->dir);
}

/* Decodes file through a 64-byte window: `good` packets, then `code`
 * with an error naming `what`, at byte `off` unless that is UINT64_MAX. */
static void expect_decode_error(const bstr *file, int good, int code,
                                uint64_t off, const char *what)
{
    fixture fx;
    open_fixture(&fx, file, 64);
    for (int i = 0; i < good; i++)
        ck_assert_int_eq(ins_decoder_next(&fx.d, &fx.p), INS_DECODE_PACKET);
    ck_assert_int_eq(ins_decoder_next(&fx.d, &fx.p), code);
    if (off != UINT64_MAX)
        ck_assert_uint_eq(fx.d.error_offset, off);
    ck_assert_ptr_nonnull(strstr(fx.d.error, what));
    close_fixture(&fx);
}

START_TEST(test_packet_header_fields)
{
    bstr body = {0}, file = {0};
    bs_tag(&body, 8, 0); bs_varint(&body, 123456789);     /* timestamp */
    bs_tag(&body, 58, 0); bs_varint(&body, 6);            /* clock id */
    bs_tag(&body, 11, 2); bs_varint(&body, 3);            /* track_event */
    bs_put(&body, "abc", 3);
    bs_tag(&body, 13, 0); bs_varint(&body, 2);            /* flags */
    bs_tag(&body, 87, 0); bs_varint(&body, 1);            /* first */
    bs_tag(&body, 3, 0); bs_varint(&body, (uint64_t)-5);  /* uid -5 */
    bs_tag(&body, 10, 0); bs_varint(&body, 7);            /* seq */
    bs_tag(&body, 79, 0); bs_varint(&body, 999);          /* pid */
    bs_tag(&body, 42, 0); bs_varint(&body, 65);           /* dropped */
    bs_record(&file, &body);
    fixture fx;
    open_fixture(&fx, &file, 64);
    ck_assert_int_eq(ins_decoder_next(&fx.d, &fx.p), INS_DECODE_PACKET);
    ck_assert_uint_eq(fx.p.id, 0);
    ck_assert_uint_eq(fx.p.offset, 0);
    ck_assert_uint_eq(fx.p.size, body.n);
    ck_assert(fx.p.has_timestamp);
    ck_assert_uint_eq(fx.p.timestamp, 123456789);
    ck_assert_uint_eq(fx.p.clock_id, 6);
    ck_assert_uint_eq(fx.p.payload_field, 11);
    ck_assert_uint_eq(fx.p.sequence_flags, 2);
    ck_assert(fx.p.first_packet_on_sequence);
    ck_assert(fx.p.has_uid);
    ck_assert_int_eq(fx.p.trusted_uid, -5);
    ck_assert(fx.p.has_seq_id);
    ck_assert_uint_eq(fx.p.seq_id, 7);
    ck_assert_int_eq(fx.p.trusted_pid, 999);
    ck_assert_uint_eq(fx.p.previous_packet_dropped, 65);
    ck_assert_int_eq(ins_decoder_next(&fx.d, &fx.p), INS_DECODE_END);
    close_fixture(&fx);
    free(body.d);
    free(file.d);
}
END_TEST

START_TEST(test_packet_last_one_wins)
{
    bstr body = {0}, file = {0};
    bs_tag(&body, 10, 0); bs_varint(&body, 3);
    bs_tag(&body, 10, 0); bs_varint(&body, 9);
    bs_tag(&body, 35, 2); bs_varint(&body, 2); bs_put(&body, "\x10\x01", 2);
    bs_tag(&body, 35, 2); bs_varint(&body, 2); bs_put(&body, "\x10\x05", 2);
    bs_record(&file, &body);
    fixture fx;
    open_fixture(&fx, &file, 64);
    ck_assert_int_eq(ins_decoder_next(&fx.d, &fx.p), INS_DECODE_PACKET);
    ck_assert_uint_eq(fx.p.seq_id, 9);
    ck_assert(fx.p.trace_stats.present);
    ck_assert_uint_eq(fx.p.trace_stats.len, 2);
    ck_assert_uint_eq(fx.p.trace_stats.data[1], 5);
    close_fixture(&fx);
    free(body.d);
    free(file.d);
}
END_TEST

/* An empty sub-message is present with 0 bytes and still has a buffer, so
 * that its parsers may form data + len (NULL + 0 is undefined behaviour;
 * fuzz_inspect found ins_stats.c doing it for an empty service_event). */
START_TEST(test_packet_empty_submessage_has_a_buffer)
{
    bstr body = {0}, file = {0};
    bs_tag(&body, 69, 2); bs_varint(&body, 0);   /* service_event */
    bs_tag(&body, 45, 2); bs_varint(&body, 0);   /* system_info */
    bs_record(&file, &body);
    fixture fx;
    open_fixture(&fx, &file, 64);
    ck_assert_int_eq(ins_decoder_next(&fx.d, &fx.p), INS_DECODE_PACKET);
    ck_assert(fx.p.service_event.present);
    ck_assert_uint_eq(fx.p.service_event.len, 0);
    ck_assert_ptr_nonnull(fx.p.service_event.data);
    ck_assert(fx.p.system_info.present);
    ck_assert_ptr_nonnull(fx.p.system_info.data);
    ck_assert_int_eq(ins_decoder_next(&fx.d, &fx.p), INS_DECODE_END);
    close_fixture(&fx);
    free(body.d);
    free(file.d);
}
END_TEST

/* A 3 MiB payload goes through a 64-byte window without growing it; the
 * next packet is still found at the right offset. */
START_TEST(test_packet_large_payload_streams)
{
    bstr body = {0}, file = {0};
    size_t big = 3u << 20;
    uint8_t *payload = calloc(1, big);
    ck_assert_ptr_nonnull(payload);
    bs_tag(&body, 10, 0); bs_varint(&body, 2);
    bs_tag(&body, 900, 2); bs_varint(&body, big); bs_put(&body, payload, big);
    bs_tag(&body, 8, 0); bs_varint(&body, 77);
    bs_record(&file, &body);
    uint64_t second = file.n;
    bstr small = {0};
    bs_tag(&small, 10, 0); bs_varint(&small, 4);
    bs_record(&file, &small);
    fixture fx;
    open_fixture(&fx, &file, 64);
    ck_assert_int_eq(ins_decoder_next(&fx.d, &fx.p), INS_DECODE_PACKET);
    ck_assert_uint_eq(fx.p.size, body.n);
    ck_assert_uint_eq(fx.p.timestamp, 77);
    ck_assert_uint_eq(fx.p.payload_field, 900);
    ck_assert_uint_eq(fx.r.cap, 64);
    ck_assert_int_eq(ins_decoder_next(&fx.d, &fx.p), INS_DECODE_PACKET);
    ck_assert_uint_eq(fx.p.id, 1);
    ck_assert_uint_eq(fx.p.offset, second);
    ck_assert_uint_eq(fx.p.seq_id, 4);
    ck_assert_int_eq(ins_decoder_next(&fx.d, &fx.p), INS_DECODE_END);
    close_fixture(&fx);
    free(payload);
    free(body.d);
    free(small.d);
    free(file.d);
}
END_TEST

/* A copied submessage larger than the window grows it (bounded). */
START_TEST(test_packet_submessage_larger_than_window)
{
    bstr body = {0}, file = {0}, cfg = {0};
    for (int i = 0; i < 100; i++) {
        bs_tag(&cfg, 22, 2); bs_varint(&cfg, 10);
        bs_put(&cfg, "0123456789", 10);
    }
    bs_tag(&body, 33, 2); bs_varint(&body, cfg.n); bs_put(&body, cfg.d, cfg.n);
    bs_record(&file, &body);
    fixture fx;
    open_fixture(&fx, &file, 64);
    ck_assert_int_eq(ins_decoder_next(&fx.d, &fx.p), INS_DECODE_PACKET);
    ck_assert(fx.p.trace_config.present);
    ck_assert_uint_eq(fx.p.trace_config.len, cfg.n);
    ck_assert_mem_eq(fx.p.trace_config.data, cfg.d, cfg.n);
    ck_assert_uint_gt(fx.r.cap, 64);
    ck_assert_uint_le(fx.r.cap, INS_READER_MAX_BYTES);
    close_fixture(&fx);
    free(cfg.d);
    free(body.d);
    free(file.d);
}
END_TEST

START_TEST(test_packet_empty_and_other_trace_fields)
{
    bstr file = {0}, empty = {0};
    bs_record(&file, &empty);                       /* 0A 00 */
    bs_tag(&file, 2, 0); bs_varint(&file, 300);    /* Trace field 2 */
    bs_tag(&file, 3, 2); bs_varint(&file, 2); bs_put(&file, "zz", 2);
    uint64_t off = file.n;
    bs_record(&file, &empty);
    fixture fx;
    open_fixture(&fx, &file, 64);
    ck_assert_int_eq(ins_decoder_next(&fx.d, &fx.p), INS_DECODE_PACKET);
    ck_assert_uint_eq(fx.p.size, 0);
    ck_assert(!fx.p.has_seq_id);
    ck_assert_int_eq(ins_decoder_next(&fx.d, &fx.p), INS_DECODE_PACKET);
    ck_assert_uint_eq(fx.p.id, 1);
    ck_assert_uint_eq(fx.p.offset, off);
    ck_assert_int_eq(ins_decoder_next(&fx.d, &fx.p), INS_DECODE_END);
    close_fixture(&fx);
    free(file.d);
}
END_TEST

START_TEST(test_packet_truncated_header)
{
    bstr file = {0}, body = {0};
    bs_tag(&body, 10, 0); bs_varint(&body, 2);
    bs_record(&file, &body);
    uint64_t off = file.n;
    bs_put(&file, "\x0a\x85", 2);   /* length varint cut short */
    expect_decode_error(&file, 1, INS_DECODE_TRUNCATED, off, "truncated");
    free(body.d);
    free(file.d);
}
END_TEST

START_TEST(test_packet_truncated_body)
{
    bstr file = {0}, body = {0};
    bs_tag(&body, 10, 0); bs_varint(&body, 2);
    bs_record(&file, &body);
    uint64_t off = file.n;
    bs_tag(&file, 1, 2); bs_varint(&file, 100);      /* claims 100 */
    bs_tag(&file, 900, 2); bs_varint(&file, 90); bs_put(&file, "short", 5);
    expect_decode_error(&file, 1, INS_DECODE_TRUNCATED, off,
                        "declares 100 bytes");
    free(body.d);
    free(file.d);
}
END_TEST

START_TEST(test_packet_malformed_wire_type)
{
    bstr file = {0}, body = {0};
    bs_tag(&body, 10, 0); bs_varint(&body, 2);
    uint64_t field_at = body.n;
    bs_tag(&body, 5, 3);                               /* start group */
    bs_tag(&body, 8, 0); bs_varint(&body, 1);
    bs_record(&file, &body);
    expect_decode_error(&file, 0, INS_DECODE_MALFORMED, 2 + field_at,
                        "wire type 3");
    free(body.d);
    free(file.d);
}
END_TEST

START_TEST(test_packet_malformed_length_overrun)
{
    bstr file = {0}, body = {0};
    bs_tag(&body, 900, 2); bs_varint(&body, 50); /* 50 > packet */
    bs_put(&body, "0123456789", 10);
    bs_record(&file, &body);
    bs_put(&file, "more bstr after the packet, plenty of them....", 47);
    expect_decode_error(&file, 0, INS_DECODE_MALFORMED, 2, "claims 50 bytes");
    free(body.d);
    free(file.d);
}
END_TEST

START_TEST(test_packet_malformed_varint)
{
    bstr file = {0}, body = {0};
    bs_tag(&body, 8, 0);
    for (int i = 0; i < 11; i++)
        bs_put(&body, "\xff", 1);                    /* 11-byte varint */
    bs_put(&body, "\x01", 1);
    bs_record(&file, &body);
    expect_decode_error(&file, 0, INS_DECODE_MALFORMED, UINT64_MAX,
                        "bad varint");
    free(body.d);
    free(file.d);
}
END_TEST

START_TEST(test_packet_varint_limits)
{
    const uint8_t ten[] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
                           0xff, 0x01};
    const uint8_t *p = ten;
    uint64_t v;
    ck_assert_int_eq(ins_varint(&p, ten + sizeof(ten), &v), 0);
    ck_assert_uint_eq(v, UINT64_MAX);
    p = ten;
    ck_assert_int_eq(ins_varint(&p, ten + 5, &v), -1); /* runs out */
    ck_assert_ptr_eq(p, ten);
}
END_TEST

static Suite *packet_suite(void)
{
    Suite *s = suite_create("ins_packet");
    TCK_CASE(s, "fields", test_packet_header_fields, test_packet_last_one_wins,
             test_packet_empty_and_other_trace_fields,
             test_packet_empty_submessage_has_a_buffer,
             test_packet_varint_limits);
    TCK_CASE(s, "streaming", test_packet_large_payload_streams,
             test_packet_submessage_larger_than_window);
    TCK_CASE(s, "bad_input", test_packet_truncated_header,
             test_packet_truncated_body, test_packet_malformed_wire_type,
             test_packet_malformed_length_overrun,
             test_packet_malformed_varint);
    return s;
}

TCK_MAIN(packet_suite)
