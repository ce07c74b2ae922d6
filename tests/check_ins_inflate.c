/*
 * check_ins_inflate.c - the inflater behind compressed_packets
 * (ins_inflate.c) and its use by the inspector.
 *
 * Vectors in tests/data were made by Python's zlib (make_compressed.py):
 * the same text compressed with dynamic Huffman, fixed Huffman, stored
 * blocks, and a gzip wrapper; a 70 MB zero bomb; and a trace whose packets
 * sit in three compressed_packets containers.
 */
#include "check_ins_util.h"

#include "ins_inflate.h"
#include "tck_main.h"

/* The text make_compressed.py compressed. */
static char *expected_text(size_t *len)
{
    size_t cap = 200 * 64, n = 0;
    char *t = malloc(cap);
    ck_assert_ptr_nonnull(t);
    for (int i = 0; i < 200; i++)
        n += (size_t)snprintf(t + n, cap - n, "line %d: the quick brown fox "
                              "jumps over the lazy dog\n", i);
    *len = n;
    return t;
}

static uint8_t *load(const char *name, size_t *n)
{
    char *path = ck_data(name);
    *n = (size_t)ck_file_size(path);
    uint8_t *b = malloc(*n ? *n : 1);
    ck_assert_ptr_nonnull(b);
    FILE *f = ck_fopen(path, "rb");
    ck_assert_uint_eq(fread(b, 1, *n, f), *n);
    fclose(f);
    free(path);
    return b;
}

static const char *const VECTORS[] = {"inflate_text.zdyn",
                                      "inflate_text.zfix",
                                      "inflate_text.zsto", "inflate_text.gz"};

START_TEST(test_inflate_vectors)
{
    size_t n, tlen, olen;
    uint8_t *in = load(VECTORS[_i], &n);
    char *text = expected_text(&tlen);
    uint8_t *out;
    const char *why = NULL;
    ck_assert_int_eq(ins_inflate(in, n, &out, &olen, &why), 0);
    ck_assert_uint_eq(olen, tlen);
    ck_assert_mem_eq(out, text, tlen);
    free(out);
    free(text);
    free(in);
}
END_TEST

START_TEST(test_inflate_every_prefix_fails_cleanly)
{
    size_t n, olen;
    uint8_t *in = load(VECTORS[_i], &n);
    for (size_t cut = 0; cut < n; cut++) {
        uint8_t *copy = malloc(cut ? cut : 1); /* exact size for ASan */
        ck_assert_ptr_nonnull(copy);
        memcpy(copy, in, cut);
        uint8_t *out = (uint8_t *)1;
        const char *why = NULL;
        ck_assert_int_eq(ins_inflate(copy, cut, &out, &olen, &why), -EBADMSG);
        ck_assert_ptr_null(out);
        ck_assert_ptr_nonnull(why);
        free(copy);
    }
    free(in);
}
END_TEST

START_TEST(test_inflate_corruption_never_crashes)
{
    size_t n, tlen, olen;
    uint8_t *in = load(VECTORS[_i], &n);
    char *text = expected_text(&tlen);
    int detected = 0;
    for (size_t at = 0; at < n; at++) {
        for (unsigned bit = 0; bit < 8; bit += 3) {
            in[at] ^= (uint8_t)(1u << bit);
            uint8_t *out;
            const char *why;
            int rc = ins_inflate(in, n, &out, &olen, &why);
            if (rc == 0) {
                /* Only bits the format ignores may be flipped unnoticed. */
                ck_assert_uint_eq(olen, tlen);
                ck_assert_mem_eq(out, text, tlen);
                free(out);
            } else {
                ck_assert(rc == -EBADMSG || rc == -EFBIG);
                detected++;
            }
            in[at] ^= (uint8_t)(1u << bit);
        }
    }
    ck_assert_int_gt(detected, (int)n);
    free(text);
    free(in);
}
END_TEST

START_TEST(test_inflate_bomb_is_bounded)
{
    size_t n, olen;
    uint8_t *in = load("bomb.zlib", &n);
    uint8_t *out;
    const char *why = NULL;
    ck_assert_int_eq(ins_inflate(in, n, &out, &olen, &why), -EFBIG);
    ck_assert_ptr_nonnull(strstr(why, "bound"));
    free(in);
}
END_TEST

START_TEST(test_inflate_rejects_other_data)
{
    const uint8_t junk[] = "this is not compressed";
    uint8_t *out;
    size_t olen;
    const char *why = NULL;
    ck_assert_int_eq(ins_inflate(junk, sizeof(junk), &out, &olen, &why),
                     -EBADMSG);
    ck_assert_ptr_nonnull(strstr(why, "zlib"));
    /* zlib header with a preset dictionary. */
    const uint8_t dict[] = {0x78, 0xbb, 0, 0, 0, 0};
    ck_assert_int_eq(ins_inflate(dict, sizeof(dict), &out, &olen, &why),
                     -EBADMSG);
}
END_TEST

/* The inspector expands the containers, in trace processor's order. */
START_TEST(test_inflate_compressed_trace)
{
    char *dir = ck_tmpdir();
    char *trace = ck_data("compressed.pftrace");
    char *db = ck_path(dir, "c.db");
    ins_result res;
    ck_assert_int_eq(ck_inspect(trace, db, &res), INS_EXIT_OK);
    ck_assert_uint_eq(res.packets, 3 + 300 + 50 + 1);
    sqlite3 *c = ck_db_open(db);
    ck_assert_int_eq(ck_stat(c, "traced_buf_sequence_packet_loss", 0, -1), 3);
    ck_assert_int_eq(ck_stat(c, "traced_buf_data_loss_overwrite", 0, -1), 3);
    ck_assert_int_eq(ck_stat(c, "traced_buf_data_loss_read_gap", 0, -1), 1);
    ck_assert_int_eq(ck_stat(c, "traced_buf_chunks_written", 0, -1), 7);
    ck_assert_int_eq(ck_stat(c, "traced_producers_connected", -1, -1), 1);
    ck_assert_int_eq(ck_q_int(c, -1, NULL, "select count(*) from packet "
                              "where container_id = 0"), 300);
    ck_assert_int_eq(ck_q_int(c, -1, NULL, "select container_id from packet "
                              "where seq_id = 3 limit 1"), 301);
    ck_assert_int_eq(ck_q_int(c, -1, NULL, "select value from trace_info "
                              "where key = 'compressed_packets_expanded'"),
                     3);
    ck_assert_int_eq(ck_q_int(c, -1, NULL, "select count(*) from data_loss"),
                     4);
    sqlite3_close(c);
    free(trace);
    free(db);
    ck_rmdir(dir);
}
END_TEST

/* A broken container stops the inspection at its packet, keeping what came
 * before. */
START_TEST(test_inflate_corrupt_container)
{
    char *dir = ck_tmpdir();
    size_t n;
    uint8_t *b = load("compressed.pftrace", &n);
    /* Find the second record (the gzip container) and break its CRC. */
    uint64_t len1 = 0;
    int shift = 0;
    size_t p = 1;
    while (b[p] & 0x80)
        len1 |= (uint64_t)(b[p++] & 0x7f) << shift, shift += 7;
    len1 |= (uint64_t)b[p++] << shift;
    size_t second = p + (size_t)len1;
    size_t second_len = b[second + 1] | (size_t)(b[second + 2] & 0x7f) << 7;
    b[second + 3 + second_len - 6] ^= 0x01; /* in the gzip trailer CRC */
    char *trace = ck_path(dir, "bad.pftrace");
    FILE *f = ck_fopen(trace, "wb");
    ck_assert_uint_eq(fwrite(b, 1, n, f), n);
    fclose(f);
    char *db = ck_path(dir, "bad.db");
    ins_result res;
    ck_assert_int_eq(ck_inspect(trace, db, &res), INS_EXIT_CORRUPT);
    ck_assert_uint_eq(res.error_offset, second);
    ck_assert_ptr_nonnull(strstr(res.message, "do not inflate"));
    /* Both container packets themselves decoded; the first one's 300. */
    ck_assert_uint_eq(res.packets, 2 + 300);
    sqlite3 *c = ck_db_open(db);
    ck_assert_int_eq(ck_q_int(c, -1, NULL, "select count(*) from packet"),
                     302);
    sqlite3_close(c);
    free(b);
    free(trace);
    free(db);
    ck_rmdir(dir);
}
END_TEST

/* Empty output (an empty stored block, or a fixed block with only the
 * end code): success, *out still a malloc()ed buffer as documented. Found
 * by libFuzzer: the empty stored block made memcpy() write to NULL + 0
 * (undefined behaviour) and handed back NULL. */
START_TEST(test_inflate_empty_output)
{
    static const uint8_t empty_stored[] = {0x78, 0x01, 0x01, 0x00, 0x00,
                                           0xff, 0xff, 0x00, 0x00, 0x00,
                                           0x01};
    static const uint8_t empty_fixed[] = {0x78, 0x9c, 0x03, 0x00, 0x00,
                                          0x00, 0x00, 0x01};
    const uint8_t *v[2] = {empty_stored, empty_fixed};
    size_t n[2] = {sizeof(empty_stored), sizeof(empty_fixed)};
    for (int i = 0; i < 2; i++) {
        uint8_t *out = NULL;
        size_t olen = 99;
        const char *why = NULL;
        ck_assert_int_eq(ins_inflate(v[i], n[i], &out, &olen, &why), 0);
        ck_assert_uint_eq(olen, 0);
        ck_assert_ptr_nonnull(out);
        free(out);
    }
}
END_TEST

/* A compressed_packets container that inflates to nothing is an empty
 * container: the trace is complete, with just the container packet. */
START_TEST(test_inflate_empty_container_in_trace)
{
    static const uint8_t trace[] = {
        0x0a, 0x0e,                     /* Trace.packet, 14 bytes */
        0x92, 0x03, 0x0b,               /* compressed_packets (50), 11 */
        0x78, 0x01, 0x01, 0x00, 0x00, 0xff, 0xff, 0x00, 0x00, 0x00, 0x01,
    };
    char *dir = ck_tmpdir();
    char *path = ck_path(dir, "empty.pftrace");
    FILE *f = ck_fopen(path, "wb");
    ck_assert_uint_eq(fwrite(trace, 1, sizeof(trace), f), sizeof(trace));
    fclose(f);
    char *db = ck_path(dir, "empty.db");
    ins_result res;
    ck_assert_int_eq(ck_inspect(path, db, &res), INS_EXIT_OK);
    ck_assert_uint_eq(res.packets, 1);
    free(path);
    free(db);
    ck_rmdir(dir);
}
END_TEST

static Suite *inflate_suite(void)
{
    Suite *s = suite_create("ins_inflate");
    TCase *tc = tck_loop_case(s, "vectors", test_inflate_vectors, 0, 4);
    tcase_add_test(tc, test_inflate_rejects_other_data);
    tc = tck_loop_case(s, "hostile", test_inflate_every_prefix_fails_cleanly,
                       0, 4);
    tcase_add_loop_test(tc, test_inflate_corruption_never_crashes, 0, 4);
    tcase_add_test(tc, test_inflate_bomb_is_bounded);
    tcase_add_test(tc, test_inflate_empty_output);
    tcase_add_test(tc, test_inflate_empty_container_in_trace);
    tcase_set_timeout(tc, 120);
    TCK_CASE(s, "trace", test_inflate_compressed_trace,
             test_inflate_corrupt_container);
    return s;
}

TCK_MAIN(inflate_suite)
