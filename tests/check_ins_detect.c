/*
 * check_ins_detect.c - format detection from the first bytes (ins_detect)
 * and the inspector's refusal of non-traces (no database written).
 */
#include "check_ins_util.h"

#include "ins_detect.h"
#include "tck_main.h"

static ins_format detect_str(const char *s, size_t n)
{
    return ins_detect_format((const uint8_t *)s, n);
}

START_TEST(test_detect_proto_trace)
{
    const uint8_t rec[] = {0x0A, 0x02, 0x40, 0x01};
    ck_assert_int_eq(ins_detect_format(rec, sizeof(rec)),
                     INS_FORMAT_PROTO_TRACE);
}
END_TEST

START_TEST(test_detect_compressed_and_binary)
{
    ck_assert_int_eq(detect_str("\x1f\x8b\x08\x00", 4), INS_FORMAT_GZIP);
    ck_assert_int_eq(detect_str("\x28\xb5\x2f\xfd\x00", 5), INS_FORMAT_ZSTD);
    ck_assert_int_eq(detect_str("\xfd" "7zXZ\x00", 6), INS_FORMAT_XZ);
    ck_assert_int_eq(detect_str("BZh91AY", 7), INS_FORMAT_BZIP2);
    ck_assert_int_eq(detect_str("PK\x03\x04xx", 6), INS_FORMAT_ZIP);
    ck_assert_int_eq(detect_str("SQLite format 3\0\x10\x00", 18),
                     INS_FORMAT_SQLITE);
    ck_assert_int_eq(detect_str("\x7f" "ELF\x02\x01", 6), INS_FORMAT_ELF);
    ck_assert_int_eq(detect_str("\x00\x01\x02\x03\xff", 5),
                     INS_FORMAT_UNKNOWN_BINARY);
}
END_TEST

START_TEST(test_detect_text_kinds)
{
    ck_assert_int_eq(detect_str("", 0), INS_FORMAT_EMPTY);
    ck_assert_int_eq(detect_str("{\"traceEvents\": []}", 19),
                     INS_FORMAT_JSON);
    ck_assert_int_eq(detect_str("\n  [ {\"ph\": \"B\"} ]", 18),
                     INS_FORMAT_JSON);
    ck_assert_int_eq(detect_str("# tracer: nop\n#\n", 16),
                     INS_FORMAT_SYSTRACE);
    ck_assert_int_eq(detect_str("<!DOCTYPE html>", 15), INS_FORMAT_HTML);
    ck_assert_int_eq(detect_str("hello world\n", 12), INS_FORMAT_TEXT);
}
END_TEST

START_TEST(test_detect_names_are_specific)
{
    ck_assert_ptr_nonnull(strstr(ins_format_name(INS_FORMAT_GZIP), "gzip"));
    ck_assert_ptr_nonnull(strstr(ins_format_name(INS_FORMAT_SQLITE),
                                 "SQLite"));
    ck_assert_ptr_nonnull(strstr(ins_format_name(INS_FORMAT_JSON), "JSON"));
    ck_assert_ptr_nonnull(strstr(ins_format_hint(INS_FORMAT_GZIP),
                                 "gunzip"));
}
END_TEST

/* Non-traces are refused with the format named, and no db is created. */
static void refuse(const void *bytes, size_t n, const char *expect)
{
    char *dir = ck_tmpdir();
    char *in = ck_path(dir, "input");
    char *db = ck_path(dir, "out.db");
    FILE *f = ck_fopen(in, "wb");
    if (n)
        ck_assert_uint_eq(fwrite(bytes, 1, n, f), n);
    fclose(f);
    ins_result res;
    ck_assert_int_eq(ck_inspect(in, db, &res), INS_EXIT_INPUT);
    ck_assert_msg(strstr(res.message, expect) != NULL, "message '%s' lacks "
                  "'%s'", res.message, expect);
    ck_assert_ptr_nonnull(strstr(res.message, "not a Perfetto trace"));
    ck_assert_int_ne(access(db, F_OK), 0);
    free(in);
    free(db);
    ck_rmdir(dir);
}

START_TEST(test_detect_inspector_refuses_gzip)
{
    refuse("\x1f\x8b\x08\x00\x00\x00\x00\x00", 8, "gzip");
}
END_TEST

START_TEST(test_detect_inspector_refuses_sqlite)
{
    char hdr[100] = "SQLite format 3";
    refuse(hdr, sizeof(hdr), "SQLite");
}
END_TEST

START_TEST(test_detect_inspector_refuses_json_and_text)
{
    refuse("{\"traceEvents\":[]}\n", 19, "JSON");
    refuse("just some words\n", 16, "plain text");
    refuse("", 0, "empty");
}
END_TEST

START_TEST(test_detect_missing_input)
{
    char *dir = ck_tmpdir();
    char *in = ck_path(dir, "nope.pftrace");
    char *db = ck_path(dir, "out.db");
    ins_result res;
    ck_assert_int_eq(ck_inspect(in, db, &res), INS_EXIT_INPUT);
    ck_assert_ptr_nonnull(strstr(res.message, "cannot open"));
    ck_assert_int_eq(ck_inspect(dir, db, &res), INS_EXIT_INPUT);
    ck_assert_ptr_nonnull(strstr(res.message, "directory"));
    free(in);
    free(db);
    ck_rmdir(dir);
}
END_TEST

static Suite *detect_suite(void)
{
    Suite *s = suite_create("ins_detect");
    TCK_CASE(s, "magic", test_detect_proto_trace,
             test_detect_compressed_and_binary, test_detect_text_kinds,
             test_detect_names_are_specific);
    TCK_CASE(s, "refusal", test_detect_inspector_refuses_gzip,
             test_detect_inspector_refuses_sqlite,
             test_detect_inspector_refuses_json_and_text,
             test_detect_missing_input);
    return s;
}

TCK_MAIN(detect_suite)
