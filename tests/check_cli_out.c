/*
 * check_cli_out.c - unit tests of the command-line helpers added for
 * issue 14: whole-or-nothing output files (cli_outfile_*: commit renames,
 * abort removes, an older file survives a failed run, directories and
 * devices refused, "-" is stdout), --buffer-size limits in the user's
 * units (cli_parse_buffer_kb), and protobuf messages as JSON (cli_json_*).
 */
#include "config.h"

#include <check.h>
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli_json.h"
#include "cli_outfile.h"
#include "cli_parse.h"
#include "trace.pb-c.h"
#include "tck_main.h"

static char g_dir[64];

static void make_dir(void)
{
    tck_mkdtemp(g_dir, sizeof g_dir, "check_cli_out");
}

static void rm_dir(void)
{
    tck_rmdir(g_dir);
}

/* Entries of g_dir (names joined by ' '). */
static void list_dir(char *out, size_t n)
{
    char cmd[128];
    snprintf(cmd, sizeof cmd, "ls %s | tr '\\n' ' '", g_dir);
    FILE *p = popen(cmd, "r");
    ck_assert_ptr_nonnull(p);
    size_t len = fread(out, 1, n - 1, p);
    out[len] = 0;
    pclose(p);
}

START_TEST(test_outfile_commit_and_abort)
{
    make_dir();
    char path[128], ls[512], err[256];
    snprintf(path, sizeof path, "%s/t.pftrace", g_dir);
    cli_outfile of;
    ck_assert_int_eq(cli_outfile_open(&of, path, err, sizeof err), 0);
    ck_assert_int_ne(access(path, F_OK), 0);      /* not there yet */
    list_dir(ls, sizeof ls);
    ck_assert_ptr_nonnull(strstr(ls, "t.pftrace.partial."));
    ck_assert_int_eq(write(of.fd, "abc", 3), 3);
    ck_assert_int_eq(cli_outfile_commit(&of, err, sizeof err), 0);
    list_dir(ls, sizeof ls);
    ck_assert_str_eq(ls, "t.pftrace ");
    struct stat st;
    ck_assert_int_eq(stat(path, &st), 0);
    ck_assert_int_eq(st.st_size, 3);
    ck_assert_int_eq(st.st_mode & 0777, 0600);    /* its owner's only */

    /* A failed run: the older file stays as it was, no partial left. */
    ck_assert_int_eq(cli_outfile_open(&of, path, err, sizeof err), 0);
    ck_assert_int_eq(write(of.fd, "new content", 11), 11);
    cli_outfile_abort(&of);
    cli_outfile_abort(&of);                        /* idempotent */
    list_dir(ls, sizeof ls);
    ck_assert_str_eq(ls, "t.pftrace ");
    ck_assert_int_eq(stat(path, &st), 0);
    ck_assert_int_eq(st.st_size, 3);

    /* From a signal handler: the partial file goes. */
    ck_assert_int_eq(cli_outfile_open(&of, path, err, sizeof err), 0);
    cli_outfile_abort_from_signal();
    list_dir(ls, sizeof ls);
    ck_assert_str_eq(ls, "t.pftrace ");
    cli_outfile_abort(&of);
    rm_dir();
}
END_TEST

START_TEST(test_outfile_refusals)
{
    make_dir();
    char err[256], ls[512], path[128];
    cli_outfile of;
    ck_assert_int_eq(cli_outfile_open(&of, g_dir, err, sizeof err), -EISDIR);
    ck_assert_ptr_nonnull(strstr(err, "is a directory"));
    ck_assert_int_eq(cli_outfile_open(&of, "/dev/null", err, sizeof err),
                     -EEXIST);
    ck_assert_ptr_nonnull(strstr(err, "not a regular file"));
    /* A symlink is refused and left alone (not replaced, not followed). */
    char link[128], target[128];
    snprintf(link, sizeof link, "%s/link", g_dir);
    snprintf(target, sizeof target, "%s/target", g_dir);
    ck_assert_int_eq(symlink(target, link), 0);
    ck_assert_int_eq(cli_outfile_open(&of, link, err, sizeof err), -EEXIST);
    ck_assert_ptr_nonnull(strstr(err, "a symlink"));
    ck_assert_int_eq(unlink(link), 0);
    snprintf(path, sizeof path, "%s/no/such/dir/t", g_dir);
    ck_assert_int_eq(cli_outfile_open(&of, path, err, sizeof err), -ENOENT);
    ck_assert_ptr_nonnull(strstr(err, "cannot create"));
    ck_assert_ptr_nonnull(strstr(err, path));
    list_dir(ls, sizeof ls);
    ck_assert_str_eq(ls, "");
    /* "-" is standard output: nothing to rename or remove. */
    ck_assert_int_eq(cli_outfile_open(&of, "-", err, sizeof err), 0);
    ck_assert_int_eq(of.fd, STDOUT_FILENO);
    ck_assert_int_eq(cli_outfile_commit(&of, err, sizeof err), 0);
    rm_dir();
}
END_TEST

START_TEST(test_buffer_kb_limits)
{
    uint32_t kb = 7;
    char why[128];
    ck_assert_int_eq(cli_parse_buffer_kb("32m", &kb, why, sizeof why), 0);
    ck_assert_uint_eq(kb, 32768);
    ck_assert_int_eq(cli_parse_buffer_kb("4095m", &kb, why, sizeof why), 0);
    ck_assert_uint_eq(kb, 4095u * 1024);
    ck_assert_int_eq(cli_parse_buffer_kb("4194300", &kb, why, sizeof why), 0);
    kb = 7;
    ck_assert_int_eq(cli_parse_buffer_kb("0", &kb, why, sizeof why), -ERANGE);
    ck_assert_str_eq(why, "is 0: a buffer needs at least 4k");
    ck_assert_int_eq(cli_parse_buffer_kb("0m", &kb, why, sizeof why), -ERANGE);
    ck_assert_str_eq(why, "is 0: a buffer needs at least 4k");
    ck_assert_int_eq(cli_parse_buffer_kb("100g", &kb, why, sizeof why),
                     -ERANGE);
    ck_assert_str_eq(why, "is larger than the 4095m a buffer can hold");
    ck_assert_int_eq(cli_parse_buffer_kb("4096m", &kb, why, sizeof why),
                     -ERANGE);
    ck_assert_int_eq(cli_parse_buffer_kb("99999999999g", &kb, why,
                                         sizeof why), -ERANGE);
    ck_assert_ptr_nonnull(strstr(why, "larger than"));
    ck_assert_int_eq(cli_parse_buffer_kb("12q", &kb, why, sizeof why),
                     -EINVAL);
    ck_assert_ptr_nonnull(strstr(why, "not a size"));
    ck_assert_uint_eq(kb, 7); /* untouched on failure */
}
END_TEST

START_TEST(test_json_message)
{
    Perfetto__Protos__TraceStats st = PERFETTO__PROTOS__TRACE_STATS__INIT;
    Perfetto__Protos__TraceStats__BufferStats b =
        PERFETTO__PROTOS__TRACE_STATS__BUFFER_STATS__INIT;
    Perfetto__Protos__TraceStats__BufferStats *bp = &b;
    b.has_bytes_written = true;
    b.bytes_written = 18446744073709551615ull;
    b.has_chunks_overwritten = true;
    b.chunks_overwritten = 3;
    st.n_buffer_stats = 1;
    st.buffer_stats = &bp;
    st.has_producers_connected = true;
    st.producers_connected = 2;
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    ck_assert_ptr_nonnull(f);
    cli_json_message(f, &st.base);
    fputc(' ', f);
    cli_json_string(f, "a\"b\\c\n\x01");
    fputc(' ', f);
    cli_json_message(f, NULL);
    fclose(f);
    ck_assert_str_eq(buf,
        "{\"buffer_stats\":[{\"bytes_written\":18446744073709551615,"
        "\"chunks_overwritten\":3}],\"producers_connected\":2} "
        "\"a\\\"b\\\\c\\n\\u0001\" null");
    free(buf);
}
END_TEST

static Suite *cli_out_suite(void)
{
    Suite *s = suite_create("cli_out");
    TCK_CASE(s, "cli_out", test_outfile_commit_and_abort,
             test_outfile_refusals, test_buffer_kb_limits, test_json_message);
    return s;
}

TCK_MAIN(cli_out_suite)
