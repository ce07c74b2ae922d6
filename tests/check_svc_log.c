/*
 * check_svc_log.c - names that producers and consumers choose cannot
 * forge or flood shmtraced's log: svc_log_str() (service/svc_log.c)
 * escapes quotes, backslashes, newlines and every non-printable byte and
 * cuts a name at the length the service keeps; and, through the daemon's
 * real sockets and the service core, a producer name and a trigger name
 * holding a newline and a fake "shmtraced: ..." line each come out as one
 * log line, the fake text escaped inside it.
 *
 * The log is the daemon's stderr: the tests point fd 2 at a temp file
 * while the daemon works, then read the lines back.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "svc_daemon_fixture.h"
#include "svc_fixture.h"
#include "svc_ipc.h"
#include "svc_log.h"
#include "tck_main.h"

/* ---------------------------------------------------------------- helper */

static const char *esc(char *out, size_t outsz, const char *in,
                       size_t max_in)
{
    const char *r = svc_log_str(out, outsz, in, max_in);
    ck_assert_ptr_eq(r, out);
    return r;
}

START_TEST(test_log_str_keeps_printable_text)
{
    char out[SVC_LOG_NAME_BYTES];
    ck_assert_str_eq(esc(out, sizeof out, "track_event (pid 7)", 256),
                     "track_event (pid 7)");
    ck_assert_str_eq(esc(out, sizeof out, "", 256), "");
    ck_assert_str_eq(esc(out, sizeof out, NULL, 256), "");
}
END_TEST

START_TEST(test_log_str_escapes_quotes_controls_and_high_bytes)
{
    char out[SVC_LOG_NAME_BYTES];
    ck_assert_str_eq(esc(out, sizeof out, "a\"b\\c", 256), "a\\\"b\\\\c");
    ck_assert_str_eq(esc(out, sizeof out, "l1\nl2\r\tx", 256),
                     "l1\\nl2\\r\\tx");
    /* ESC [ 2 J (clears a terminal), DEL, a UTF-8 byte pair, 0x01 */
    ck_assert_str_eq(esc(out, sizeof out, "\x1b[2J\x7f\xc3\xa9\x01", 256),
                     "\\x1b[2J\\x7f\\xc3\\xa9\\x01");
    /* whatever the input, the output is one printable line */
    char all[256];
    for (int i = 0; i < 255; i++)
        all[i] = (char)(i + 1);
    all[255] = '\0';
    esc(out, sizeof out, all, 256);
    for (const char *c = out; *c; c++)
        ck_assert_msg(*c >= 0x20 && *c < 0x7f, "byte 0x%02x in the output",
                      (unsigned char)*c);
    ck_assert_uint_lt(strlen(out), sizeof out);
}
END_TEST

START_TEST(test_log_str_cuts_at_the_kept_length)
{
    char out[SVC_LOG_NAME_BYTES];
    char *big = malloc(100001);
    memset(big, 'n', 100000);
    big[100000] = '\0';
    esc(out, sizeof out, big, SVC_LOG_NAME_MAX);
    ck_assert_uint_eq(strlen(out), SVC_LOG_NAME_MAX + 3);
    ck_assert_str_eq(out + SVC_LOG_NAME_MAX, "...");
    /* exactly max_in bytes: whole, no mark */
    big[SVC_LOG_NAME_MAX] = '\0';
    esc(out, sizeof out, big, SVC_LOG_NAME_MAX);
    ck_assert_uint_eq(strlen(out), SVC_LOG_NAME_MAX);
    /* the worst case (every byte \xNN) fits SVC_LOG_NAME_BYTES */
    memset(big, 0x01, 100000);
    big[100000] = '\0';
    esc(out, sizeof out, big, SVC_LOG_NAME_MAX);
    ck_assert_uint_eq(strlen(out), 4 * SVC_LOG_NAME_MAX + 3);
    free(big);
}
END_TEST

START_TEST(test_log_str_never_splits_an_escape)
{
    /* out too small: cut before the escape that does not fit, marked */
    char out[10];
    ck_assert_str_eq(esc(out, sizeof out, "abcd\nefgh", 256), "abcd\\n...");
    ck_assert_str_eq(esc(out, sizeof out, "abcde\nfgh", 256), "abcde...");
    ck_assert_str_eq(esc(out, sizeof out, "abcdef\x01", 256), "abcdef...");
    ck_assert_str_eq(esc(out, sizeof out, "abcdefghij", 256), "abcdef...");
    /* what fits exactly is whole */
    ck_assert_str_eq(esc(out, sizeof out, "abcdefghi", 256), "abcdefghi");
    ck_assert_str_eq(esc(out, sizeof out, "abcde\x01", 256), "abcde\\x01");
    /* cut by max_in, with room to spare */
    ck_assert_str_eq(esc(out, sizeof out, "abcdef", 3), "abc...");
    char tiny[4];
    ck_assert_str_eq(esc(tiny, sizeof tiny, "\n\n", 256), "...");
}
END_TEST

/* ---------------------------------------------------------------- the log */

/* fd 2 goes to a temp file until log_end(), which returns its lines. */
typedef struct {
    char path[64];
    int saved_fd;
    char *text;
    char *lines[64];
    int n;
} log_capture;

static void log_begin(log_capture *lc)
{
    memset(lc, 0, sizeof(*lc));
    snprintf(lc->path, sizeof lc->path, "/tmp/svclogXXXXXX");
    int fd = mkstemp(lc->path);
    ck_assert_int_ge(fd, 0);
    fflush(stderr);
    lc->saved_fd = dup(2);
    ck_assert_int_ge(lc->saved_fd, 0);
    ck_assert_int_eq(dup2(fd, 2), 2);
    close(fd);
}

static void log_end(log_capture *lc)
{
    fflush(stderr);
    ck_assert_int_eq(dup2(lc->saved_fd, 2), 2);
    close(lc->saved_fd);
    FILE *f = fopen(lc->path, "r");
    ck_assert_ptr_nonnull(f);
    size_t cap = 1 << 16, len = 0;
    lc->text = calloc(1, cap);
    len = fread(lc->text, 1, cap - 1, f);
    fclose(f);
    unlink(lc->path);
    lc->text[len] = '\0';
    for (char *save = NULL, *l = strtok_r(lc->text, "\n", &save);
         l && lc->n < 64; l = strtok_r(NULL, "\n", &save))
        lc->lines[lc->n++] = l;
}

/* Lines holding needle. */
static int lines_with(const log_capture *lc, const char *needle)
{
    int n = 0;
    for (int i = 0; i < lc->n; i++)
        n += strstr(lc->lines[i], needle) != NULL;
    return n;
}

/* Lines starting with prefix (a forged line would). */
static int lines_starting(const log_capture *lc, const char *prefix)
{
    int n = 0;
    for (int i = 0; i < lc->n; i++)
        n += strncmp(lc->lines[i], prefix, strlen(prefix)) == 0;
    return n;
}

static const char forged_producer[] =
    "x\" connected (pid 1, uid 1)\nshmtraced: session 1: FORGED LINE";

static void on_bound(ipc_client *c, bool ok, void *ctx)
{
    *(bool *)ctx = ok;
}
static void on_disc(ipc_client *c, int err, void *ctx)
{
}
static void on_init(ipc_client *c, int st, const ProtobufCMessage *r,
                    bool more, void *ctx)
{
    *(bool *)ctx = true;
}

/* InitializeConnection with a name holding a newline: the daemon's
 * "producer N ... connected" is one line, the fake one escaped in it. */
START_TEST(test_producer_name_with_newline_is_one_log_line)
{
    svd_fx sv;
    svd_start(&sv, "svclog");
    log_capture lc;
    log_begin(&lc);
    static const ipc_client_cbs cbs = { on_bound, on_disc };
    bool bound = false, inited = false;
    int err = 0;
    ipc_client *pc = ipc_client_connect(sv.loop, sv.ppath, IPC_PRODUCER_PORT,
                                        &cbs, &bound, &err);
    ck_assert_ptr_nonnull(pc);
    svd_run_until(&sv, &bound, 500);
    Perfetto__Protos__InitializeConnectionRequest ic =
        PERFETTO__PROTOS__INITIALIZE_CONNECTION_REQUEST__INIT;
    ic.producer_name = (char *)forged_producer;
    ck_assert_int_gt(ipc_client_invoke(pc, "InitializeConnection", &ic.base,
            -1, &perfetto__protos__initialize_connection_response__descriptor,
            on_init, &inited), 0);
    svd_run_until(&sv, &inited, 500);
    ipc_client_destroy(pc);
    for (int i = 0; i < 20; i++)
        ipc_loop_run_once(sv.loop, 5);
    log_end(&lc);
    svd_stop(&sv);
    ck_assert_int_eq(lines_starting(&lc, "shmtraced: session 1: FORGED"), 0);
    ck_assert_int_eq(lines_with(&lc, "FORGED LINE"), 1);
    ck_assert_int_eq(lines_with(&lc, "\" connected (pid "), 1);
    ck_assert_int_eq(lines_with(&lc,
            "\"x\\\" connected (pid 1, uid 1)\\nshmtraced: session 1: "
            "FORGED LINE\" connected (pid "), 1);
    free(lc.text);
}
END_TEST

/* A STOP_TRACING trigger whose name (the consumer's config) and producer
 * name both hold a newline: "trigger ... stops session" is one line. */
START_TEST(test_trigger_names_with_newline_are_one_log_line)
{
    svc_service *svc = svf_new();
    svc_producer_params pp = { .name = "app\nshmtraced: FORGED PRODUCER" };
    svc_producer *p = svc_producer_connect(svc, NULL, 1000, 7, &pp);
    ck_assert_ptr_nonnull(p);
    Perfetto__Protos__DataSourceDescriptor d =
        PERFETTO__PROTOS__DATA_SOURCE_DESCRIPTOR__INIT;
    d.name = "test.ds";
    ck_assert_int_eq(svc_producer_register_ds(svc, p, &d, NULL, 0), 0);
    svf_cfg c;
    svf_cfg_init(&c, 64, 0);
    Perfetto__Protos__TraceConfig__TriggerConfig tc =
        PERFETTO__PROTOS__TRACE_CONFIG__TRIGGER_CONFIG__INIT;
    Perfetto__Protos__TraceConfig__TriggerConfig__Trigger t =
        PERFETTO__PROTOS__TRACE_CONFIG__TRIGGER_CONFIG__TRIGGER__INIT, *tp = &t;
    static const char trig[] = "t\nshmtraced: FORGED TRIGGER";
    t.name = (char *)trig;
    tc.has_trigger_mode = tc.has_trigger_timeout_ms = true;
    tc.trigger_mode =
        PERFETTO__PROTOS__TRACE_CONFIG__TRIGGER_CONFIG__TRIGGER_MODE__STOP_TRACING;
    tc.trigger_timeout_ms = 60000;
    tc.n_triggers = 1;
    tc.triggers = &tp;
    c.cfg.trigger_config = &tc;
    char err[256] = "";
    svc_session *s = svc_session_enable(svc, NULL, &c.cfg, -1, err,
                                        sizeof err);
    ck_assert_msg(s != NULL, "%s", err);
    log_capture lc;
    log_begin(&lc);
    const char *names[] = { trig };
    size_t matched = svc_producer_activate_triggers(svc, p, names, 1);
    log_end(&lc);
    ck_assert_uint_eq(matched, 1);
    ck_assert_int_eq(lines_starting(&lc, "shmtraced: FORGED"), 0);
    ck_assert_int_eq(lines_with(&lc, "FORGED"), 1);
    ck_assert_int_eq(lines_with(&lc,
            "trigger \"t\\nshmtraced: FORGED TRIGGER\" from \"app\\n"
            "shmtraced: FORGED PRODUCER\" stops session"), 1);
    free(lc.text);
    svc_session_free(svc, s);
    svc_destroy(svc);
}
END_TEST

static Suite *svc_log_suite(void)
{
    Suite *s = suite_create("svc_log");
    TCK_CASE(s, "helper", test_log_str_keeps_printable_text,
             test_log_str_escapes_quotes_controls_and_high_bytes,
             test_log_str_cuts_at_the_kept_length,
             test_log_str_never_splits_an_escape);
    TCK_CASE(s, "daemon", test_producer_name_with_newline_is_one_log_line,
             test_trigger_names_with_newline_are_one_log_line);
    return s;
}

TCK_MAIN(svc_log_suite)
