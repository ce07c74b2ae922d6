/*
 * check_ins_cli.c - shmtrace-inspect as a user runs it: --help, exit codes,
 * messages naming the problem, output replacement rules, stdin, and the
 * canned queries of sql/ run through the sqlite3 shell.
 *
 * The binary is $top_builddir/inspector/shmtrace-inspect; commands run
 * through /bin/sh with stderr folded into the captured output.
 */
#include "check_ins_util.h"
#include "tck_main.h"

#include <sys/wait.h>

static char *g_bin;

static void setup(void)
{
    const char *top = getenv("top_builddir");
    ck_assert(asprintf(&g_bin, "%s/inspector/shmtrace-inspect",
                       top ? top : "..") > 0);
    ck_assert_msg(access(g_bin, X_OK) == 0, "%s not built", g_bin);
}

static void teardown(void)
{
    free(g_bin);
}

/* Run FMT (printf-style) in sh; capture stdout+stderr into OUT; return
 * the exit status. */
static int run(char *out, size_t outlen, const char *fmt, ...)
{
    char *cmd, *full;
    va_list ap;
    va_start(ap, fmt);
    ck_assert(vasprintf(&cmd, fmt, ap) > 0);
    va_end(ap);
    ck_assert(asprintf(&full, "( %s ) 2>&1", cmd) > 0);
    FILE *p = popen(full, "r");
    ck_assert_ptr_nonnull(p);
    size_t n = fread(out, 1, outlen - 1, p);
    out[n] = '\0';
    char sink[4096];
    while (fread(sink, 1, sizeof(sink), p) > 0)
        ;
    int st = pclose(p);
    free(cmd);
    free(full);
    ck_assert(WIFEXITED(st));
    return WEXITSTATUS(st);
}

static char out[65536];

START_TEST(test_cli_help_and_usage_errors)
{
    ck_assert_int_eq(run(out, sizeof(out), "%s --help", g_bin), 0);
    ck_assert_ptr_nonnull(strstr(out, "Usage: shmtrace-inspect"));
    ck_assert_ptr_nonnull(strstr(out, "Exit status"));
    ck_assert_ptr_nonnull(strstr(out, "data_loss.sql"));
    ck_assert_int_eq(run(out, sizeof(out), "%s --version", g_bin), 0);
    ck_assert_ptr_nonnull(strstr(out, "shmtrace-inspect "));
    /* Usage errors: 2, as in every shmtrace program (tools/cli_exit.h). */
    ck_assert_int_eq(run(out, sizeof(out), "%s", g_bin), 2);
    ck_assert_ptr_nonnull(strstr(out, "which trace?"));
    ck_assert_int_eq(run(out, sizeof(out), "%s --bogus x", g_bin), 2);
    ck_assert_ptr_nonnull(strstr(out, "unknown option '--bogus'"));
    ck_assert_ptr_nonnull(strstr(out, "Try 'shmtrace-inspect --help'"));
    ck_assert_ptr_null(strstr(out, "Usage:")); /* one line, not the help */
    ck_assert_int_eq(run(out, sizeof(out), "%s a b", g_bin), 2);
    ck_assert_int_eq(run(out, sizeof(out), "%s --batch 0 x", g_bin), 2);
    ck_assert_int_eq(run(out, sizeof(out), "%s -", g_bin), 2);
    ck_assert_ptr_nonnull(strstr(out, "-o FILE"));
}
END_TEST

START_TEST(test_cli_not_a_trace)
{
    char *dir = ck_tmpdir();
    ck_assert_int_eq(run(out, sizeof(out), "echo hello | gzip > %s/t.gz && "
                         "%s %s/t.gz -o %s/o.db", dir, g_bin, dir, dir), 4);
    ck_assert_ptr_nonnull(strstr(out, "gzip"));
    ck_assert_ptr_nonnull(strstr(out, "not a Perfetto trace"));
    ck_assert_int_eq(run(out, sizeof(out), "echo '{\"traceEvents\":[]}' > "
                         "%s/t.json && %s %s/t.json -o %s/o.db", dir, g_bin,
                         dir, dir), 4);
    ck_assert_ptr_nonnull(strstr(out, "JSON"));
    ck_assert_int_eq(run(out, sizeof(out), "%s %s/missing -o %s/o.db", g_bin,
                         dir, dir), 4);
    ck_assert_ptr_nonnull(strstr(out, "cannot open"));
    char *db = ck_path(dir, "o.db");
    ck_assert_int_ne(access(db, F_OK), 0);
    free(db);
    ck_rmdir(dir);
}
END_TEST

START_TEST(test_cli_output_rules)
{
    char *dir = ck_tmpdir();
    char *trace = ck_data("discard_v2.pftrace");
    ck_assert_int_eq(run(out, sizeof(out), "%s %s -o %s/o.db", g_bin, trace,
                         dir), 0);
    ck_assert_ptr_nonnull(strstr(out, "1625 packets"));
    ck_assert_int_eq(run(out, sizeof(out), "%s %s -o %s/o.db", g_bin, trace,
                         dir), 1);
    ck_assert_ptr_nonnull(strstr(out, "already exists"));
    ck_assert_int_eq(run(out, sizeof(out), "%s -f -q %s -o %s/o.db", g_bin,
                         trace, dir), 0);
    ck_assert_str_eq(out, "");
    /* Default output name: TRACE.db next to the trace. */
    ck_assert_int_eq(run(out, sizeof(out), "cp %s %s/x.pftrace && %s -q "
                         "%s/x.pftrace && test -s %s/x.pftrace.db", trace,
                         dir, g_bin, dir, dir), 0);
    /* Never overwrite the trace being read, even with --force. */
    ck_assert_int_eq(run(out, sizeof(out), "%s -f %s/x.pftrace -o "
                         "%s/x.pftrace", g_bin, dir, dir), 1);
    ck_assert_ptr_nonnull(strstr(out, "input trace itself"));
    ck_assert_int_eq(run(out, sizeof(out), "cmp %s %s/x.pftrace", trace, dir),
                     0);
    /* Standard input. */
    ck_assert_int_eq(run(out, sizeof(out), "cat %s | %s - -o %s/stdin.db",
                         trace, g_bin, dir), 0);
    ck_assert_ptr_nonnull(strstr(out, "1625 packets"));
    free(trace);
    ck_rmdir(dir);
}
END_TEST

START_TEST(test_cli_truncated_trace)
{
    char *dir = ck_tmpdir();
    char *trace = ck_data("ring_loss_v2.pftrace");
    ck_assert_int_eq(run(out, sizeof(out), "head -c 300000 %s > %s/cut && "
                         "%s %s/cut -o %s/o.db", trace, dir, g_bin, dir, dir),
                     5);
    ck_assert_ptr_nonnull(strstr(out, "truncated"));
    ck_assert_ptr_nonnull(strstr(out, "offset"));
    char *db = ck_path(dir, "o.db");
    sqlite3 *c = ck_db_open(db);
    char status[32];
    ck_q_text(c, status, sizeof(status), "select value from trace_info "
              "where key = 'status'");
    ck_assert_str_eq(status, "truncated");
    ck_assert_int_gt(ck_q_int(c, -1, NULL, "select count(*) from packet"),
                     1000);
    sqlite3_close(c);
    free(db);
    free(trace);
    ck_rmdir(dir);
}
END_TEST

/* The canned queries, as the README says to run them. */
START_TEST(test_cli_canned_queries)
{
    char *dir = ck_tmpdir();
    char *trace = ck_data("ring_loss_v2.pftrace");
    const char *top = getenv("top_srcdir");
    if (top == NULL)
        top = "..";
    ck_assert_int_eq(run(out, sizeof(out), "%s -q %s -o %s/o.db", g_bin,
                         trace, dir), 0);
    ck_assert_int_eq(run(out, sizeof(out), "sqlite3 %s/o.db < "
                         "%s/sql/data_loss.sql", dir, top), 0);
    ck_assert_ptr_nonnull(strstr(out, "traced_buf_data_loss_overwrite"));
    ck_assert_ptr_nonnull(strstr(out, "traced_buf_sequence_packet_loss"));
    ck_assert_ptr_nonnull(strstr(out, "present,overwrite"));
    ck_assert_ptr_null(strstr(out, "Error"));
    static const char *const QUERIES[] = {
        "loss_by_sequence", "loss_timeline", "buffer_usage", "health_check",
        "writer_packet_loss", "chunks_lost"};
    for (size_t i = 0; i < sizeof(QUERIES) / sizeof(*QUERIES); i++) {
        ck_assert_int_eq(run(out, sizeof(out), "sqlite3 %s/o.db < "
                             "%s/sql/%s.sql", dir, top, QUERIES[i]), 0);
        ck_assert_msg(strstr(out, "Error") == NULL && strlen(out) > 0,
                      "%s: %s", QUERIES[i], out);
    }
    ck_assert_int_eq(run(out, sizeof(out), "sqlite3 %s/o.db < "
                         "%s/sql/buffer_usage.sql", dir, top), 0);
    ck_assert_ptr_nonnull(strstr(out, "RING_BUFFER"));
    /* A clean trace says so. */
    char *ok = ck_data("ok_v2.pftrace");
    ck_assert_int_eq(run(out, sizeof(out), "%s -q %s -o %s/ok.db && sqlite3 "
                         "%s/ok.db < %s/sql/data_loss.sql", g_bin, ok, dir,
                         dir, top), 0);
    ck_assert_ptr_nonnull(strstr(out, "no data loss"));
    ck_assert_int_eq(run(out, sizeof(out), "sqlite3 %s/ok.db < "
                         "%s/sql/health_check.sql", dir, top), 0);
    ck_assert_ptr_nonnull(strstr(out, "healthy"));
    free(ok);
    free(trace);
    ck_rmdir(dir);
}
END_TEST

static Suite *cli_suite(void)
{
    Suite *s = suite_create("ins_cli");
    TCase *tc = TCK_CASE(s, "usage",
                         test_cli_help_and_usage_errors,
                         test_cli_not_a_trace,
                         test_cli_output_rules);
    tcase_add_checked_fixture(tc, setup, teardown);
    tc = TCK_CASE(s, "results",
                  test_cli_truncated_trace,
                  test_cli_canned_queries);
    tcase_add_checked_fixture(tc, setup, teardown);
    return s;
}

TCK_MAIN(cli_suite)
