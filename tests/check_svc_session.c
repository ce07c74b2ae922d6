/*
 * check_svc_session.c - the service core without sockets: sessions and
 * buffers from a TraceConfig, data source matching across producers,
 * CommitData through the SMB reader (honest and lying), reading with the
 * trusted fields, flush / scrape / disable, clone, stats.
 *
 * The svc_ops callbacks record what the service asked for; chunks are
 * written into the SMB by hand with the ABI layout (smb-abi.md §2-§4).
 * The set-up (service, producers, config, session) and the chunk writer
 * and reader are tests/svc_fixture.h.
 */
#include "config.h"

#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/utsname.h>

#include "svc_fixture.h"
#include "svc_fwrite.h"
#include "svc_packet.h"
#include "tck_main.h"

/* ------------------------------------------------------------ config */

/* Enabling c fails with an error naming `what`. */
static void assert_rejected(svc_service *svc, svf_cfg *c, const char *what)
{
    char err[256];
    ck_assert_ptr_null(svc_session_enable(svc, NULL, &c->cfg, -1, err,
                                          sizeof(err)));
    ck_assert_ptr_nonnull(strstr(err, what));
}

START_TEST(test_config_rejects_bad_buffers)
{
    svc_service *svc = svf_new();
    svf_cfg c;
    svf_cfg_init(&c, 64, 0);
    c.cfg.n_buffers = 0;
    assert_rejected(svc, &c, "no buffers");
    svf_cfg_init(&c, 0, 0);
    assert_rejected(svc, &c, "size_kb");
    svf_cfg_init(&c, 64, 7);
    assert_rejected(svc, &c, "fill_policy");
    svf_cfg_init(&c, 64, 0);
    c.dsc.has_target_buffer = true;
    c.dsc.target_buffer = 1;
    assert_rejected(svc, &c, "target_buffer");
    svf_cfg_init(&c, 64, 0);
    svf_cfg_file(&c);
    assert_rejected(svc, &c, "write_into_file");
    ck_assert_uint_eq(svc_session_count(svc), 0);
    svc_destroy(svc);
}
END_TEST

START_TEST(test_config_creates_buffers_with_global_ids)
{
    svc_service *svc = svf_new();
    svf_cfg c;
    svf_cfg_init(&c, 64, 2);
    c.cfg.n_buffers = 2;
    svc_session *s1 = svc_session_enable(svc, NULL, &c.cfg, -1, NULL, 0);
    svc_session *s2 = svc_session_enable(svc, NULL, &c.cfg, -1, NULL, 0);
    ck_assert_ptr_nonnull(s1);
    ck_assert_ptr_nonnull(s2);
    ck_assert_uint_ne(s1->buf_ids[0], s1->buf_ids[1]);
    ck_assert_uint_ne(s1->buf_ids[0], s2->buf_ids[0]);
    ck_assert_uint_ne(s1->buf_ids[1], s2->buf_ids[1]);
    tb_buffer *b = svc__buffer(svc, s2->buf_ids[1], NULL);
    ck_assert_ptr_nonnull(b);
    ck_assert_int_eq(tb_policy(b), TB_DISCARD);
    ck_assert_uint_eq(tb_size(b), 65536);
    Perfetto__Protos__TraceStats *st = svc_stats_build(svc, NULL);
    ck_assert_uint_eq(st->total_buffers, 4);
    ck_assert_uint_eq(st->tracing_sessions, 2);
    svc_stats_free(st);
    uint32_t freed = s1->buf_ids[0];
    svc_session_free(svc, s1);
    ck_assert_ptr_null(svc__buffer(svc, freed, NULL));
    ck_assert_ptr_nonnull(svc__buffer(svc, s2->buf_ids[0], NULL));
    svc_destroy(svc);
}
END_TEST

/* ------------------------------------------------------------ matching */

SVF_TEST(test_match_all_producers_and_late_registration, 2)
{
    ck_assert_uint_ne(svc_producer_id(f->p[0]), svc_producer_id(f->p[1]));
    svc_session *s = svf_enable(f);
    ck_assert_int_eq(svf_rec.setup_tracing, 2);      /* one SMB per producer */
    ck_assert_int_eq(svf_rec.start_ds, 2);
    ck_assert_int_eq(svf_rec.setup_ds, 2);
    ck_assert_uint_eq(svf_rec.last_target_buffer, f->buf);
    ck_assert_uint_eq(svf_rec.last_session_id, svc_session_id(s));
    svc_producer *p3 = svf_add_producer(f->svc, "three", 13);   /* late */
    ck_assert_int_eq(svf_rec.start_ds, 3);
    ck_assert_int_eq(svf_rec.setup_tracing, 3);
    ck_assert(svc__producer_may_write(p3, f->buf));
    /* A second session reuses the SMBs: no new SetupTracing. */
    svc_session *s2 = svc_session_enable(f->svc, NULL, &f->c.cfg, -1, NULL, 0);
    ck_assert_ptr_nonnull(s2);
    ck_assert_int_eq(svf_rec.setup_tracing, 3);
    ck_assert_int_eq(svf_rec.start_ds, 6);
}

/* The fields of the DataSourceConfig the service owns are set as Perfetto's
 * service sets them, whatever the consumer wrote there; above all a
 * consumer cannot tell producers that a trusted system component started
 * its session (session_initiator), which a producer may grant more. */
#define INITIATOR(x) \
    PERFETTO__PROTOS__DATA_SOURCE_CONFIG__SESSION_INITIATOR__SESSION_INITIATOR_##x

SVF_TEST(test_ds_config_service_fields, 2)
{
    f->c.dsc.has_session_initiator = true;
    f->c.dsc.session_initiator = INITIATOR(TRUSTED_SYSTEM);
    f->c.dsc.has_trace_duration_ms = true;
    f->c.dsc.trace_duration_ms = 99;
    f->c.dsc.has_stop_timeout_ms = true;
    f->c.dsc.stop_timeout_ms = 98;
    f->c.dsc.has_enable_extra_guardrails = true;
    f->c.dsc.enable_extra_guardrails = true;
    f->c.dsc.has_target_buffer = true;     /* the config's buffer 0 */
    f->c.dsc.target_buffer = 0;
    f->c.dsc.has_tracing_session_id = true;
    f->c.dsc.tracing_session_id = 4343;
    f->c.cfg.has_duration_ms = true;
    f->c.cfg.duration_ms = 60000;
    f->c.cfg.has_data_source_stop_timeout_ms = true;
    f->c.cfg.data_source_stop_timeout_ms = 777;
    f->c.cfg.has_prefer_suspend_clock_for_duration = true;
    f->c.cfg.prefer_suspend_clock_for_duration = true;
    svc_session *s = svf_enable(f);
    ck_assert_int_eq(svf_rec.start_ds, 2);
    const Perfetto__Protos__DataSourceConfig *c = &svf_rec.last_ds;
    ck_assert_str_eq(c->name, "test.ds");
    ck_assert(c->has_session_initiator);
    ck_assert_int_eq(c->session_initiator, INITIATOR(UNSPECIFIED));
    ck_assert(c->has_trace_duration_ms);
    ck_assert_uint_eq(c->trace_duration_ms, 60000);
    ck_assert(c->has_stop_timeout_ms);
    ck_assert_uint_eq(c->stop_timeout_ms, 777);
    ck_assert(c->has_enable_extra_guardrails);
    ck_assert(!c->enable_extra_guardrails);
    ck_assert(c->has_prefer_suspend_clock_for_duration);
    ck_assert(c->prefer_suspend_clock_for_duration);
    ck_assert_uint_eq(c->target_buffer, f->buf);
    ck_assert_uint_eq(c->tracing_session_id, svc_session_id(s));
    /* The consumer's own config is left as it was (it is echoed into the
     * trace as sent). */
    ck_assert_int_eq(f->c.dsc.session_initiator, INITIATOR(TRUSTED_SYSTEM));
    ck_assert_uint_eq(f->c.dsc.trace_duration_ms, 99);
    /* Defaults: no duration, the default stop timeout; a session that
     * does not ask for the suspend-aware duration passes the consumer's
     * flag on unchanged, as Perfetto's does. */
    f->c.cfg.has_duration_ms = false;
    f->c.cfg.has_data_source_stop_timeout_ms = false;
    f->c.cfg.has_prefer_suspend_clock_for_duration = false;
    f->c.dsc.has_prefer_suspend_clock_for_duration = false;
    ck_assert_ptr_nonnull(
        svc_session_enable(f->svc, NULL, &f->c.cfg, -1, NULL, 0));
    ck_assert_int_eq(svf_rec.start_ds, 4);
    ck_assert_uint_eq(c->trace_duration_ms, 0);
    ck_assert_uint_eq(c->stop_timeout_ms, SVC_DEFAULT_STOP_TIMEOUT_MS);
    ck_assert(!c->has_prefer_suspend_clock_for_duration);
    ck_assert_int_eq(c->session_initiator, INITIATOR(UNSPECIFIED));
}

/* A played suspend: BOOTTIME - MONOTONIC as the service reads it. */
static int64_t fake_suspend_ns = 7000000000;   /* any start */
static int64_t fake_suspend_clock(void *ctx)
{
    (void)ctx;
    return fake_suspend_ns;
}

/* duration_ms counts system activity (MONOTONIC), unless the config
 * prefers the suspend clock: then time suspended counts too, and while
 * such a deadline is armed the main loop wakes at least every
 * SVC_SUSPEND_CHECK_MS (a poll timeout does not count a suspend). */
static void duration_with_suspend(svf_fx *f, bool prefer)
{
    svc__set_suspend_clock(f->svc, fake_suspend_clock, NULL);
    f->c.cfg.has_duration_ms = true;
    f->c.cfg.duration_ms = 10000;
    f->c.cfg.has_prefer_suspend_clock_for_duration = prefer;
    f->c.cfg.prefer_suspend_clock_for_duration = prefer;
    uint64_t t0 = svc_now_ms();
    svc_session *s = svf_enable(f);
    uint64_t t1 = svc_now_ms();
    uint64_t next = svc_next_deadline_ms(f->svc);
    if (prefer)
        ck_assert_uint_le(next, svc_now_ms() + SVC_SUSPEND_CHECK_MS);
    svc_tick(f->svc, t1 + 2000);
    ck_assert_int_eq(s->state, SVC_SESSION_STARTED);
    fake_suspend_ns += 9500 * 1000000ll;          /* 9.5 s suspended */
    if (prefer) {
        /* now due 9.5 s earlier, on the monotonic clock */
        next = svc_next_deadline_ms(f->svc);
        ck_assert_uint_ge(next, t0 + 500);
        ck_assert_uint_le(next, t1 + 500);
    }
    svc_tick(f->svc, t1 + 2000);               /* stopping, or not yet */
    ck_assert((s->state != SVC_SESSION_STARTED) == prefer);
    svc_tick(f->svc, t1 + 10000);
    ck_assert_int_ne(s->state, SVC_SESSION_STARTED);
}

SVF_TEST(test_duration_counts_suspend_when_preferred, 1)
{
    duration_with_suspend(f, true);
}

SVF_TEST(test_duration_ignores_suspend_by_default, 1)
{
    duration_with_suspend(f, false);
}

/* builtin_data_sources.prefer_suspend_clock_for_snapshot: a periodic
 * snapshot (with its sync marker) that fell due during a suspend is taken
 * right after it; without it, the suspend does not count. */
static void snapshot_with_suspend(svf_fx *f, bool prefer)
{
    Perfetto__Protos__TraceConfig__BuiltinDataSource b =
        PERFETTO__PROTOS__TRACE_CONFIG__BUILTIN_DATA_SOURCE__INIT;
    b.has_snapshot_interval_ms = true;
    b.snapshot_interval_ms = 10000;
    b.has_prefer_suspend_clock_for_snapshot = prefer;
    b.prefer_suspend_clock_for_snapshot = prefer;
    f->c.cfg.builtin_data_sources = &b;
    svc__set_suspend_clock(f->svc, fake_suspend_clock, NULL);
    svc_session *s = svf_enable(f);
    uint64_t t1 = svc_now_ms();
    s->sync_marker_due = false;             /* the one of the start */
    svc_tick(f->svc, t1 + 2000);
    ck_assert(!s->sync_marker_due);
    fake_suspend_ns += 9000 * 1000000ll;
    svc_tick(f->svc, t1 + 2000);
    ck_assert(s->sync_marker_due == prefer);
    s->sync_marker_due = false;
    svc_tick(f->svc, t1 + 10001);
    ck_assert(s->sync_marker_due != prefer);  /* the next period */
    f->c.cfg.builtin_data_sources = NULL;
}

SVF_TEST(test_snapshot_counts_suspend_when_preferred, 1)
{
    snapshot_with_suspend(f, true);
}

SVF_TEST(test_snapshot_ignores_suspend_by_default, 1)
{
    snapshot_with_suspend(f, false);
}

SVF_TEST(test_deferred_start_waits_for_start_tracing, 1)
{
    f->c.cfg.has_deferred_start = true;
    f->c.cfg.deferred_start = true;
    svc_session *s = svf_enable(f);
    ck_assert_int_eq(svf_rec.start_ds, 0);
    ck_assert_int_eq(svc_session_flush(f->svc, s, 100, 0, 1), -EINVAL);
    ck_assert_int_eq(svc_session_start(f->svc, s), 0);
    ck_assert_int_eq(svf_rec.start_ds, 1);
    ck_assert_int_eq(svc_session_start(f->svc, s), 0);      /* idempotent */
    ck_assert_int_eq(svf_rec.start_ds, 1);
    /* A deferred session disabled before it started ends at once. */
    svc_session *d = svc_session_enable(f->svc, NULL, &f->c.cfg, -1, NULL, 0);
    ck_assert_int_eq(svc_session_disable(f->svc, d), 0);
    ck_assert(svc_session_is_disabled(d));
    ck_assert_int_eq(svf_rec.disabled, 1);
}

SVF_TEST(test_match_producer_name_filter, 2)
{
    char *names[] = {"two"};
    f->c.ds.n_producer_name_filter = 1;
    f->c.ds.producer_name_filter = names;
    svf_enable(f);
    ck_assert_int_eq(svf_rec.start_ds, 1);
}

SVF_TEST(test_match_producer_name_regex_filter, 3)
{
    char *res[] = {"t(wo|en)", "[[:alpha:]]{5}"};
    f->c.ds.n_producer_name_regex_filter = 2;
    f->c.ds.producer_name_regex_filter = res;
    svf_enable(f);
    /* "two" by the first, "three" by the second, "one" by neither: each
     * pattern matches whole names only */
    ck_assert_int_eq(svf_rec.start_ds, 2);
}

/* A consumer's regular expression runs on the service's thread: patterns
 * that glibc's regexec crashes on (a backreference recursing until the
 * stack overflows: this config killed the daemon as soon as "one" was
 * matched) or grinds on for seconds (nested bounded repetitions), and ones
 * that would step out of the "^(...)$" the service wraps them in, are
 * refused with the session, naming the pattern and the reason; nothing is
 * started. */
SVF_TEST(test_regex_filters_refused_before_they_run, 1)
{
    static const struct {
        const char *re, *why;
    } bad[] = {
        {"(|)(\\2\\2)*.*", "backreference"},
        {"(.{0,255}){255}", "count {m,n} on a group"},
        {"x(){0,9}{5,}", "count {m,n} on a group"},
        {"a{0,9}{5,}", "two quantifiers in a row"},
        {"(x)*+", "two quantifiers in a row"},
        {"((.*)*)*", "nested more than two deep"},
        {".{0,200}", "expand it past 128 atoms"},
        {"a{1000}b{1000}", "expand it past 128 atoms"},
        {"(a*|b*|c*|d*|e*|f*|g*|h*|i*|j*|k*|l*|m*|n*|o*|p*|q*|r*|s*|t*"
         "|u*|v*|w*|x*|y*|z*|0*|1*|2*|3*|4*|5*)*x", "expand it past 128"},
        {".*)|(x", "')' without its '('"},
        {"(one", "'(' without its ')'"},
        {"[one", "'[' without its ']'"},
        {"o{1,", "repetition count"},
        {"on\\", "'\\' at the end"},
        {"[z-a]", "not a valid POSIX extended"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char *res[] = {(char *)bad[i].re};
        char err[512] = "";
        f->c.ds.n_producer_name_regex_filter = 1;
        f->c.ds.producer_name_regex_filter = res;
        svc_session *s = svc_session_enable(f->svc, NULL, &f->c.cfg, -1, err,
                                            sizeof(err));
        ck_assert_msg(s == NULL, "%s accepted", bad[i].re);
        ck_assert_msg(strstr(err, "producer_name_regex_filter") &&
                      strstr(err, bad[i].re) && strstr(err, bad[i].why),
                      "%s: %s", bad[i].re, err);
        ck_assert(!svc_regex_full_match(bad[i].re, "one"));
    }
    ck_assert_int_eq(svf_rec.start_ds, 0);
    /* the same patterns as a trigger's producer_name_regex: refused too */
    ck_assert_int_lt(svc_regex_check("(|)(\\1\\1)*", NULL, 0), 0);
}

/* What the checked matcher accepts it matches as regexec does, on the
 * whole subject; subjects past 1024 bytes match no pattern. */
START_TEST(test_regex_full_match)
{
    ck_assert(svc_regex_full_match("com\\.example\\..*", "com.example.app"));
    ck_assert(!svc_regex_full_match("com\\.example\\..*", "comXexample.app"));
    ck_assert(!svc_regex_full_match("example", "com.example.app"));
    ck_assert(svc_regex_full_match("(foo|bar)_[0-9]+", "bar_42"));
    ck_assert(!svc_regex_full_match("(foo|bar)_[0-9]+", "bar_"));
    ck_assert(svc_regex_full_match("a{2,3}", "aaa"));
    ck_assert(!svc_regex_full_match("a{2,3}", "aaaa"));
    ck_assert(svc_regex_full_match("[]a]+", "]a]"));
    ck_assert(svc_regex_full_match("[^]x]+", "ab"));
    ck_assert(svc_regex_full_match("x|y", "y"));
    /* at the limit: 128 atoms, accepted; one more is not */
    ck_assert_int_eq(svc_regex_check(".{0,127}", NULL, 0), 0);
    ck_assert_int_lt(svc_regex_check(".{0,128}", NULL, 0), 0);
    ck_assert_int_eq(svc_regex_check("(.{0,63})+", NULL, 0), 0);
    ck_assert_int_eq(svc_regex_check("(.*|a*)*", NULL, 0), 0);
    ck_assert_int_eq(svc_regex_check("([a-z]+\\.)+[a-z]+", NULL, 0), 0);
    ck_assert(svc_regex_full_match("([a-z]+\\.)+[a-z]+", "com.example.app"));
    char *big = malloc(1026);
    ck_assert_ptr_nonnull(big);
    memset(big, 'a', 1025);
    big[1025] = '\0';
    ck_assert(!svc_regex_full_match(".*", big));
    big[1024] = '\0';
    ck_assert(svc_regex_full_match(".*", big));
    ck_assert(!svc_regex_full_match("x?.{0,105}", big));
    big[105] = '\0';
    ck_assert(svc_regex_full_match("x?.{0,105}", big));
    free(big);
}
END_TEST

SVF_TEST(test_register_ds_rejects_bad_descriptors, 1)
{
    svc_producer *p = f->p[0];
    Perfetto__Protos__DataSourceDescriptor d =
        PERFETTO__PROTOS__DATA_SOURCE_DESCRIPTOR__INIT;
    char err[128];
    ck_assert_int_lt(svc_producer_register_ds(f->svc, p, &d, err,
                                              sizeof(err)), 0);
    d.name = "test.ds";
    ck_assert_int_eq(svc_producer_register_ds(f->svc, p, &d, err,
                                              sizeof(err)), -EEXIST);
    ck_assert_int_eq(svc_producer_register_writer(f->svc, p, 0, 1), -EINVAL);
    ck_assert_int_eq(svc_producer_register_writer(f->svc, p, 40000, 1),
                     -EINVAL);
}

/* The writer -> buffer table grows to the highest id registered: every id
 * up to SVC_MAX_WRITER_ID maps, ids never registered read 0 (no
 * constraint), unregistering is exact. */
SVF_TEST(test_writer_table_grows, 1)
{
    svc_producer *p = f->p[0];
    static const uint32_t ids[] = {1, 63, 64, 65, 1000, SVC_MAX_WRITER_ID};
    ck_assert_uint_eq(svc__writer_buffer(p, 1), 0);
    for (size_t i = 0; i < sizeof(ids) / sizeof(ids[0]); i++)
        ck_assert_int_eq(svc_producer_register_writer(f->svc, p, ids[i],
                                                      (uint32_t)(100 + i)),
                         0);
    for (size_t i = 0; i < sizeof(ids) / sizeof(ids[0]); i++)
        ck_assert_uint_eq(svc__writer_buffer(p, (uint16_t)ids[i]), 100 + i);
    ck_assert_uint_eq(svc__writer_buffer(p, 2), 0);
    ck_assert_uint_eq(svc__writer_buffer(p, 999), 0);
    ck_assert_uint_eq(svc__writer_buffer(p, SVC_MAX_WRITER_ID - 1), 0);
    ck_assert_uint_eq(svc__writer_buffer(p, 40000), 0);
    ck_assert_uint_eq(svc__writer_buffer(p, UINT16_MAX), 0);
    ck_assert_int_eq(svc_producer_unregister_writer(f->svc, p, 64), 0);
    ck_assert_uint_eq(svc__writer_buffer(p, 64), 0);
    ck_assert_uint_eq(svc__writer_buffer(p, 65), 102 + 1);
    ck_assert_int_eq(svc_producer_unregister_writer(f->svc, p, 64), -ENOENT);
    ck_assert_int_eq(svc_producer_unregister_writer(f->svc, p, 40000),
                     -ENOENT);
    ck_assert_int_eq(svc_producer_unregister_writer(f->svc, p, 0), -ENOENT);
}

/* ------------------------------------------------------------ commit+read */

SVF_TEST(test_read_adds_trusted_fields_and_sequences, 2)
{
    svc_session *s = svf_enable(f);
    svf_put(f, f->p[0], 0, 1, 0, 0, 3);      /* values 0..2, writer 1 */
    ck_assert_uint_eq(svf_page_word(f->p[0], 0), 0);   /* chunk freed */
    svf_put(f, f->p[1], 0, 1, 0, 10, 2);     /* values 10..11 */
    svf_put(f, f->p[0], 1, 2, 0, 20, 1);     /* writer 2 of producer 1 */
    svf_readout r;
    svf_read_all(f->svc, s, &r);
    ck_assert_int_eq(r.values, 6);
    ck_assert_int_eq(r.n_config, 1);
    ck_assert_int_eq(r.n_uuid, 1);
    ck_assert_int_eq(r.n_stats, 1);
    ck_assert_uint_eq(r.seq_of_value[0], 2);          /* first use */
    ck_assert_uint_eq(r.seq_of_value[2], 2);
    ck_assert_uint_eq(r.seq_of_value[10], 3);
    ck_assert_uint_eq(r.seq_of_value[20], 4);
    ck_assert_int_eq(r.pid_of_value[0], 11);
    ck_assert_int_eq(r.pid_of_value[10], 12);
    ck_assert_uint_eq(r.dropped_of_value[0], 0);
    /* A second pass: no config again, and no stats: the start's went
     * out with the first; the next is due at the period or the stop. */
    svf_read_all(f->svc, s, &r);
    ck_assert_int_eq(r.values, 0);
    ck_assert_int_eq(r.n_config, 0);
    ck_assert_int_eq(r.n_stats, 0);
    ck_assert_int_eq(svc_session_disable(f->svc, s), 0);
    svc_tick(f->svc, svc_now_ms() + 60000);
    ck_assert(svc_session_is_disabled(s));
    svf_read_all(f->svc, s, &r);
    ck_assert_int_eq(r.n_stats, 1);
    svf_read_all(f->svc, s, &r);
    ck_assert_int_eq(r.n_stats, 0);
}

/* A producer id is not handed out again while a session that gave its
 * producer an instance lives: the session's buffer and sequence ids know
 * a writer by (producer id, writer id) only. With the id of a gone
 * producer (pid 11) whose packets are still unread, a new producer (pid
 * 77) continuing its writer's chunk ids had its packets read as the gone
 * one's: its trusted pid, uid and sequence id. With every id known, a
 * producer is refused. Once no session knows the id, it is handed out
 * again. */
SVF_TEST(test_producer_id_not_reused_while_a_session_knows_it, 1)
{
    svc_session *s = svf_enable(f);
    uint16_t gone_id = svc_producer_id(f->p[0]);
    svf_put(f, f->p[0], 0, 1, 0, 0, 3);       /* values 0..2, writer 1 */
    svc_producer_disconnect(f->svc, f->p[0]);
    f->p[0] = NULL;
    f->svc->last_producer_id = (uint16_t)(gone_id - 1);  /* as if wrapped */
    svc_producer *late = svf_add_producer(f->svc, "late", 77);
    ck_assert_uint_ne(svc_producer_id(late), gone_id);
    svf_put(f, late, 0, 1, 1, 3, 2);          /* writer 1, chunk 1 */
    svf_readout r;
    svf_read_all(f->svc, s, &r);
    ck_assert_int_eq(r.values, 5);
    ck_assert_int_eq(r.pid_of_value[0], 11);
    ck_assert_int_eq(r.pid_of_value[3], 77);
    ck_assert_int_eq(r.pid_of_value[4], 77);
    ck_assert_uint_ne(r.seq_of_value[3], r.seq_of_value[0]);
    /* Every id known to the session: a producer is refused, not given
     * one of them. */
    memset(s->producers_used, 0xFF, 65536 / 8);
    svc_producer_params pp = { .name = "none left" };
    errno = 0;
    ck_assert_ptr_null(svc_producer_connect(f->svc, NULL, 1000, 79, &pp));
    ck_assert_int_eq(errno, EAGAIN);
    ck_assert_int_eq(svc_session_disable(f->svc, s), 0);
    svc_session_free(f->svc, s);
    f->svc->last_producer_id = (uint16_t)(gone_id - 1);
    svc_producer *later = svf_add_producer(f->svc, "later", 78);
    ck_assert_uint_eq(svc_producer_id(later), gone_id);
}

/* The major version trace processor reads from tracing_service_version
 * ("Perfetto vNN." or "Perfetto vNN-"), or -1. */
static long service_major(const char *v)
{
    const char *prefix = "Perfetto v";
    if (strncmp(v, prefix, strlen(prefix)) != 0)
        return -1;
    char *end;
    long major = strtol(v + strlen(prefix), &end, 10);
    return end > v + strlen(prefix) && (*end == '.' || *end == '-') ? major
                                                                     : -1;
}

SVF_TEST(test_read_writes_system_info_once, 1)
{
    svc_session *s = svf_enable(f);
    svf_put(f, f->p[0], 0, 1, 0, 0, 2);
    svf_readout r;
    svf_read_all(f->svc, s, &r);
    struct utsname u;
    ck_assert_int_eq(uname(&u), 0);
    ck_assert_int_eq(r.n_sysinfo, 1);
    ck_assert_str_eq(r.sys_release, u.release);
    ck_assert_str_eq(r.sys_machine, u.machine);
    ck_assert_uint_eq(r.sys_page_size, (uint32_t)sysconf(_SC_PAGESIZE));
    ck_assert_uint_eq(r.sys_num_cpus,
                      (uint32_t)sysconf(_SC_NPROCESSORS_CONF));
    ck_assert_uint_gt(r.sys_ram_bytes, 0);
    /* Trace processor flags write_into_file without flush_period_ms for
     * services before v54, which did not flush before their file writes;
     * shmtraced does (write_flush_mode), and says which service it is. */
    ck_assert_int_ge(service_major(r.sys_version), 54);
    ck_assert_ptr_nonnull(strstr(r.sys_version, "shmtraced " PACKAGE_VERSION));
    ck_assert_int_eq(r.values, 2);
    /* Not again on the next pass. */
    svf_put(f, f->p[0], 1, 1, 1, 2, 1);
    svf_read_all(f->svc, s, &r);
    ck_assert_int_eq(r.n_sysinfo, 0);
    ck_assert_int_eq(r.values, 1);
}

SVF_TEST(test_read_system_info_can_be_disabled, 1)
{
    Perfetto__Protos__TraceConfig__BuiltinDataSource b =
        PERFETTO__PROTOS__TRACE_CONFIG__BUILTIN_DATA_SOURCE__INIT;
    b.has_disable_system_info = true;
    b.disable_system_info = true;
    f->c.cfg.builtin_data_sources = &b;
    svc_session *s = svf_enable(f);
    svf_put(f, f->p[0], 0, 1, 0, 0, 2);
    svf_readout r;
    svf_read_all(f->svc, s, &r);
    ck_assert_int_eq(r.n_sysinfo, 0);
    ck_assert_int_eq(r.n_uuid, 1);                  /* the rest is there */
    ck_assert_int_eq(r.n_config, 1);
    ck_assert_int_eq(r.values, 2);
}

/* Clock snapshots and sync markers (svc_clocks.c): one of each at the
 * start, then one of each per snapshot_interval_ms while the session
 * runs, a snapshot at the stop; each emitted once, in the order taken,
 * the marker byte for byte as the spec fixes it. */
SVF_TEST(test_read_clock_snapshots_and_sync_markers_periodic, 1)
{
    Perfetto__Protos__TraceConfig__BuiltinDataSource b =
        PERFETTO__PROTOS__TRACE_CONFIG__BUILTIN_DATA_SOURCE__INIT;
    b.has_snapshot_interval_ms = true;
    b.snapshot_interval_ms = 200;
    f->c.cfg.builtin_data_sources = &b;
    f->c.cfg.has_flush_timeout_ms = true;
    f->c.cfg.flush_timeout_ms = 100;
    svc_session *s = svf_enable(f);
    ck_assert_uint_eq(s->snapshot_interval_ms, 200);
    svf_put(f, f->p[0], 0, 1, 0, 0, 2);
    svf_readout r;
    svf_read_all(f->svc, s, &r);
    ck_assert_int_eq(r.n_clock, 1);
    ck_assert_int_eq(r.n_sync, 1);
    ck_assert_int_eq(r.n_sync_bad, 0);
    ck_assert_int_eq(r.n_stats, 1);     /* TraceStats: the same period */
    ck_assert_int_eq(r.values, 2);
    uint64_t boot0 = r.clock_first_boot;
    ck_assert_uint_gt(boot0, 0);

    svf_read_all(f->svc, s, &r);           /* nothing new is due */
    ck_assert_int_eq(r.n_clock, 0);
    ck_assert_int_eq(r.n_sync, 0);
    ck_assert_int_eq(r.n_stats, 0);

    uint64_t next = s->next_snapshot_ms;
    ck_assert_uint_gt(next, 0);
    ck_assert_uint_le(svc_next_deadline_ms(f->svc), next);
    svc_tick(f->svc, next - 1);            /* not yet */
    svf_read_all(f->svc, s, &r);
    ck_assert_int_eq(r.n_clock + r.n_sync + r.n_stats, 0);
    svc_tick(f->svc, next);                /* one period */
    ck_assert_uint_eq(s->next_snapshot_ms, next + 200);
    /* A pass that stops short of the end (a budget of one byte, two
     * packets waiting) emits the snapshot and the marker, and no stats:
     * they wait for the pass that drains. */
    svf_put(f, f->p[0], 0, 1, 1, 2, 2);
    bool more = false;
    memset(&r, 0, sizeof(r));
    ck_assert_int_eq(svc_session_read(f->svc, s, 1, svf_collect, &r,
                                      &more), 0);
    ck_assert(more);
    ck_assert_int_eq(r.n_clock, 1);
    ck_assert_int_eq(r.n_sync, 1);
    ck_assert_int_eq(r.values, 1);
    ck_assert_int_eq(r.n_stats, 0);
    ck_assert_uint_ge(r.clock_first_boot, boot0);
    svf_read_all(f->svc, s, &r);
    ck_assert_int_eq(r.values, 1);
    ck_assert_int_eq(r.n_clock + r.n_sync, 0);
    ck_assert_int_eq(r.n_stats, 1);

    /* Two periods before a read: the clocks did not drift, so the first
     * snapshot stays and the second is not kept; one marker is due. */
    svc_tick(f->svc, next + 200);
    svc_tick(f->svc, next + 400);
    svf_read_all(f->svc, s, &r);
    ck_assert_int_eq(r.n_clock, 1);
    ck_assert_int_eq(r.n_sync, 1);
    ck_assert_int_eq(r.n_stats, 1);        /* one for both periods */

    /* The stop takes one more, and ends the period. */
    ck_assert_int_eq(svc_session_disable(f->svc, s), 0);
    svc_tick(f->svc, svc_now_ms() + 60000);
    ck_assert(svc_session_is_disabled(s));
    ck_assert_uint_eq(s->next_snapshot_ms, 0);
    svf_read_all(f->svc, s, &r);
    ck_assert_int_eq(r.n_clock, 1);
    ck_assert_int_eq(r.n_sync, 0);
    ck_assert_int_eq(r.n_stats, 1);        /* tracing_disabled's */
    svc_tick(f->svc, next + 100000);
    svf_read_all(f->svc, s, &r);
    ck_assert_int_eq(r.n_clock + r.n_sync + r.n_stats, 0);
}

/* The default period is Perfetto's 10 s; a tiny one is raised to 100 ms;
 * disable_clock_snapshotting leaves the snapshots out, not the markers. */
SVF_TEST(test_read_clock_snapshots_can_be_disabled, 1)
{
    Perfetto__Protos__TraceConfig__BuiltinDataSource b =
        PERFETTO__PROTOS__TRACE_CONFIG__BUILTIN_DATA_SOURCE__INIT;
    b.has_disable_clock_snapshotting = true;
    b.disable_clock_snapshotting = true;
    b.has_snapshot_interval_ms = true;
    b.snapshot_interval_ms = 1;
    f->c.cfg.builtin_data_sources = &b;
    svc_session *s = svf_enable(f);
    ck_assert_uint_eq(s->snapshot_interval_ms, 100);
    svf_readout r;
    svf_read_all(f->svc, s, &r);
    ck_assert_int_eq(r.n_clock, 0);
    ck_assert_int_eq(r.n_sync, 1);
    ck_assert_int_eq(r.n_sync_bad, 0);
    ck_assert_int_eq(r.n_config, 1);
    svc_tick(f->svc, s->next_snapshot_ms);
    svf_read_all(f->svc, s, &r);
    ck_assert_int_eq(r.n_clock, 0);
    ck_assert_int_eq(r.n_sync, 1);
}

SVF_TEST(test_read_clock_snapshot_default_period, 1)
{
    uint64_t before = svc_now_ms();
    svc_session *s = svf_enable(f);
    ck_assert_uint_eq(s->snapshot_interval_ms, 10000);
    ck_assert_uint_ge(s->next_snapshot_ms, before + 10000);
}

/* The drift rule (as Perfetto's SnapshotClocks): a snapshot is kept when
 * a clock moved by 10 ms or more against BOOTTIME since the last pending
 * one; at most SVC_CLOCK_SNAPS wait, the oldest dropped; emitted oldest
 * first. */
SVF_TEST(test_read_clock_snapshots_kept_on_drift, 1)
{
    svc_session *s = svf_enable(f);
    ck_assert_uint_eq(s->nclock_snaps, 1);
    svc__clocks_snapshot(s);               /* no drift: not kept */
    ck_assert_uint_eq(s->nclock_snaps, 1);
    /* As if REALTIME had been stepped back 9 ms since: still not kept. */
    s->clock_snaps[0].ts[1] += 9000000;
    svc__clocks_snapshot(s);
    ck_assert_uint_eq(s->nclock_snaps, 1);
    /* MONOTONIC 11 ms ahead of BOOTTIME's pace since (a suspend would do
     * the reverse; 11, as the clocks are read one after the other): kept. */
    s->clock_snaps[0].ts[3] -= 11000000;
    svc__clocks_snapshot(s);
    ck_assert_uint_eq(s->nclock_snaps, 2);
    for (uint32_t i = 0; i < 2 * SVC_CLOCK_SNAPS; i++) {
        s->clock_snaps[s->nclock_snaps - 1].ts[5] -= 20000000;
        svc__clocks_snapshot(s);
    }
    ck_assert_uint_eq(s->nclock_snaps, SVC_CLOCK_SNAPS);
    svf_readout r;
    svf_read_all(f->svc, s, &r);
    ck_assert_int_eq(r.n_clock, (int)SVC_CLOCK_SNAPS);
    ck_assert(!r.clock_went_back);
    ck_assert_uint_eq(s->nclock_snaps, 0);
}

/* r's service events were exactly want[0..n), in that order. */
static void expect_events(const svf_readout *r, const int *want, int n)
{
    ck_assert_int_eq(r->n_ev_seq, n);
    for (int i = 0; i < n; i++)
        ck_assert_msg(r->ev_seq[i] == want[i], "event %d: %d, want %d", i,
                      r->ev_seq[i], want[i]);
    ck_assert(!r->ev_went_back);
}

/* Acks the last flush with a commit of chunk `chunk_id` (one packet). */
static void ack_flush(svf_fx *f, uint32_t chunk_id)
{
    svf_write_chunk(f->p[0], 0, 1, chunk_id, chunk_id, 1, 3);
    svf_commit(f->svc, f->p[0], 0, 0, f->buf, svf_rec.last_flush_id);
}

/* The lifecycle events, as Perfetto's service writes them (its
 * SnapshotLifecycleEvent / EmitLifecycleEvents): flush_started (9) and
 * all_data_sources_flushed (3) for every flush, the latest 64 of each
 * kept; tracing_disabled (5) once; read_tracing_buffers_completed (4) at
 * the end of every pass that drained the buffers, none for a pass cut
 * short; all in timestamp order. (Trace processor sorts and hands on
 * what it holds at a read event after two flushes; without them it keeps
 * the whole trace until its end.) */
SVF_TEST(test_read_lifecycle_events_as_perfetto, 1)
{
    svc_session *s = svf_enable(f);
    ck_assert_int_eq(svf_rec.all_started, 1);   /* no data source acks */
    svf_put(f, f->p[0], 0, 1, 0, 0, 2);
    svf_readout r;
    svf_read_all(f->svc, s, &r);
    ck_assert_int_eq(r.values, 2);
    expect_events(&r, (const int[]){2, 1, 4}, 3);
    svf_read_all(f->svc, s, &r);           /* empty, but a read all the same */
    expect_events(&r, (const int[]){4}, 1);

    for (uint32_t k = 1; k <= 2; k++) {
        ck_assert_int_eq(svc_session_flush(f->svc, s, 1000, 0, k), 0);
        ack_flush(f, k);
    }
    ck_assert_uint_eq(s->flushes_succeeded, 2);
    svf_read_all(f->svc, s, &r);
    ck_assert_int_eq(r.values, 2);
    expect_events(&r, (const int[]){9, 3, 9, 3, 4}, 5);

    /* A pass cut short by its budget: no read event until one drains. */
    svf_put(f, f->p[0], 0, 1, 3, 3, 2);
    bool more = false;
    memset(&r, 0, sizeof(r));
    ck_assert_int_eq(svc_session_read(f->svc, s, 1, svf_collect, &r, &more),
                     0);
    ck_assert(more);
    ck_assert_int_eq(r.n_ev_seq, 0);
    svf_read_all(f->svc, s, &r);
    expect_events(&r, (const int[]){4}, 1);

    /* Flushes that time out end too; of 70, the latest 64 of each kind. */
    for (uint32_t k = 0; k < 70; k++)
        ck_assert_int_eq(svc_session_flush(f->svc, s, 100, 0, 10 + k), 0);
    svc_tick(f->svc, svc_now_ms() + 1000);
    ck_assert_uint_eq(s->flushes_failed, 70);
    svf_read_all(f->svc, s, &r);
    ck_assert_int_eq(r.n_ev[9], (int)SVC_EV_FLUSH_MAX);
    ck_assert_int_eq(r.n_ev[3], (int)SVC_EV_FLUSH_MAX);
    ck_assert_int_eq(r.n_ev[4], 1);
    ck_assert_int_eq(r.ev_seq[r.n_ev_seq - 1], 4);
    ck_assert(!r.ev_went_back);

    /* A clone's flush that producer "one" does not ack names its data
     * source (last_flush_slow_data_sources, 8) in the source's trace. */
    ck_assert_int_eq(svc_session_flush_for_clone(f->svc, getuid(), s->id,
                                                 NULL, 77), 1);
    svc_tick(f->svc, svc_now_ms() + 60000);
    svf_read_all(f->svc, s, &r);
    expect_events(&r, (const int[]){9, 8, 3, 4}, 4);
    ck_assert_int_eq(r.slow_ds, 1);
    ck_assert_str_eq(r.slow_first, "one/test.ds");

    /* The stop: its flush (not acked either: slow), its end,
     * tracing_disabled, then the read. */
    ck_assert_int_eq(svc_session_disable(f->svc, s), 0);
    svc_tick(f->svc, svc_now_ms() + 60000);
    ck_assert(svc_session_is_disabled(s));
    svf_read_all(f->svc, s, &r);
    expect_events(&r, (const int[]){9, 8, 3, 5, 4}, 5);
    ck_assert_str_eq(r.slow_first, "one/test.ds");
    svf_read_all(f->svc, s, &r);
    expect_events(&r, (const int[]){4}, 1);
}

/* A stop whose flush every producer acks has no slow data sources. */
SVF_TEST(test_read_lifecycle_stop_acked_is_not_slow, 1)
{
    svc_session *s = svf_enable(f);
    ck_assert_int_eq(svc_session_disable(f->svc, s), 0);
    ack_flush(f, 0);
    svc_tick(f->svc, svc_now_ms() + 60000);
    ck_assert(svc_session_is_disabled(s));
    ck_assert_uint_eq(s->final_flush_outcome, 1);
    svf_readout r;
    svf_read_all(f->svc, s, &r);
    ck_assert_int_eq(r.n_ev[8], 0);
    ck_assert_int_eq(r.n_ev[3], 1);
    ck_assert_int_eq(r.n_ev[5], 1);
}

/* builtin_data_sources.disable_service_events: none of them, ever. */
SVF_TEST(test_read_lifecycle_events_can_be_disabled, 1)
{
    Perfetto__Protos__TraceConfig__BuiltinDataSource b =
        PERFETTO__PROTOS__TRACE_CONFIG__BUILTIN_DATA_SOURCE__INIT;
    b.has_disable_service_events = true;
    b.disable_service_events = true;
    f->c.cfg.builtin_data_sources = &b;
    svc_session *s = svf_enable(f);
    svf_put(f, f->p[0], 0, 1, 0, 0, 2);
    ck_assert_int_eq(svc_session_flush(f->svc, s, 1000, 0, 1), 0);
    ack_flush(f, 1);
    svf_readout r;
    svf_read_all(f->svc, s, &r);
    ck_assert_int_eq(r.values, 3);
    ck_assert_int_eq(r.n_ev_seq, 0);
    ck_assert_int_eq(svc_session_disable(f->svc, s), 0);
    svc_tick(f->svc, svc_now_ms() + 60000);
    svf_read_all(f->svc, s, &r);
    ck_assert_int_eq(r.n_ev_seq, 0);
    ck_assert_uint_eq(s->ev_flush_started.n + s->ev_flushed.n, 0);
}

/* Producer `name` whose "test.ds" acks its start (will_notify_on_start,
 * as traced_probes' ftrace and every data source of Perfetto's SDK). */
static svc_producer *acking_producer(svc_service *svc, const char *name,
                                     pid_t pid)
{
    return svf_connect_producer(svc, name, pid, true);
}

/* The id of producer p's instance in s. */
static uint64_t instance_of(const svc_session *s, const svc_producer *p)
{
    for (size_t k = 0; k < s->ninst; k++)
        if (s->inst[k].producer_id == p->id)
            return s->inst[k].instance_id;
    ck_abort_msg("producer %u has no instance", (unsigned)p->id);
    return 0;
}

/* all_data_sources_started waits for the data sources that ack their
 * start: the consumer hears it (ObservableEvents) and the trace has it
 * (1) when the last one acked, once; an ack from another producer, for an
 * id that is no instance, or for an instance that does not ack, is
 * nothing; an instance started later does not repeat it. */
SVF_TEST(test_start_acks_all_started_after_the_last_ack, 1)
{
    svc_producer *a = acking_producer(f->svc, "acker", 21);
    svc_session *s = svf_enable(f);
    ck_assert_uint_eq(s->ninst, 2);
    ck_assert_int_eq(svf_rec.all_started, 0);
    svf_readout r;
    svf_read_all(f->svc, s, &r);
    expect_events(&r, (const int[]){2, 4}, 2);
    uint64_t id = instance_of(s, a);
    svc_producer_ds_started(f->svc, f->p[0], id);   /* not its instance */
    svc_producer_ds_started(f->svc, a, id + 1000);   /* no instance */
    svc_producer_ds_started(f->svc, a, instance_of(s, f->p[0]));
    svc_producer_ds_started(f->svc, f->p[0], instance_of(s, f->p[0]));
    ck_assert_int_eq(svf_rec.all_started, 0);
    svf_read_all(f->svc, s, &r);
    ck_assert_int_eq(r.n_ev[1], 0);
    svc_producer_ds_started(f->svc, a, id);
    ck_assert_int_eq(svf_rec.all_started, 1);
    svc_producer_ds_started(f->svc, a, id);           /* again: nothing */
    ck_assert_int_eq(svf_rec.all_started, 1);
    svf_read_all(f->svc, s, &r);
    expect_events(&r, (const int[]){1, 4}, 2);
    acking_producer(f->svc, "late", 22);             /* joins, never acks */
    ck_assert_uint_eq(s->ninst, 3);
    svc_tick(f->svc, svc_now_ms() + SVC_START_ACK_TIMEOUT_MS + 1000);
    ck_assert_int_eq(svf_rec.all_started, 1);
    svf_read_all(f->svc, s, &r);
    ck_assert_int_eq(r.n_ev[1], 0);
    ck_assert_int_eq(r.n_ev[7], 0);                  /* all started */
}

/* SVC_START_ACK_TIMEOUT_MS after the start, the data sources still not
 * started are named in the trace (slow_starting_data_sources, 7), once;
 * a late ack still makes the session all started. */
SVF_TEST(test_start_acks_slow_starting_named, 1)
{
    svc_producer *a = acking_producer(f->svc, "acker", 21);
    uint64_t t0 = svc_now_ms();
    svc_session *s = svf_enable(f);
    uint64_t t1 = svc_now_ms();
    ck_assert_uint_ge(s->start_ack_deadline_ms, t0 + SVC_START_ACK_TIMEOUT_MS);
    ck_assert_uint_le(s->start_ack_deadline_ms, t1 + SVC_START_ACK_TIMEOUT_MS);
    svc_tick(f->svc, svc_now_ms() + SVC_START_ACK_TIMEOUT_MS - 1000);
    svf_readout r;
    svf_read_all(f->svc, s, &r);
    ck_assert_int_eq(r.n_ev[7], 0);                  /* not yet */
    svc_tick(f->svc, svc_now_ms() + SVC_START_ACK_TIMEOUT_MS + 1000);
    svf_read_all(f->svc, s, &r);
    ck_assert_int_eq(r.n_ev[7], 1);
    ck_assert_int_eq(r.slow_start_ds, 1);
    ck_assert_str_eq(r.slow_start_first, "acker/test.ds");
    ck_assert_int_eq(r.n_ev[1], 0);
    ck_assert(!r.ev_went_back);
    svc_tick(f->svc, svc_now_ms() + 3 * SVC_START_ACK_TIMEOUT_MS);
    svf_read_all(f->svc, s, &r);
    ck_assert_int_eq(r.n_ev[7], 0);                  /* once */
    svc_producer_ds_started(f->svc, a, instance_of(s, a));
    ck_assert_int_eq(svf_rec.all_started, 1);
    svf_read_all(f->svc, s, &r);
    expect_events(&r, (const int[]){1, 4}, 2);
}

/* Of 40 data sources slow to start, the trace names 32, as Perfetto's
 * (and the log names 32, then counts the rest). */
SVF_TEST(test_start_acks_slow_list_bounded, 0)
{
    for (int i = 0; i < 40; i++) {
        char name[16];
        snprintf(name, sizeof name, "p%d", i);
        acking_producer(f->svc, name, 100 + i);
    }
    svc_session *s = svf_enable(f);
    ck_assert_uint_eq(s->ninst, 40);
    svc_tick(f->svc, svc_now_ms() + SVC_START_ACK_TIMEOUT_MS + 1000);
    svf_readout r;
    svf_read_all(f->svc, s, &r);
    ck_assert_int_eq(r.n_ev[7], 1);
    ck_assert_int_eq(r.slow_start_ds, (int)SVC_SLOW_DS_MAX);
    ck_assert_int_eq(svf_rec.all_started, 0);
}

/* all_data_sources_started goes with the lifecycle events, in timestamp
 * order: after a flush that came before the last ack (2, the flush's 9 and
 * 3, then 1). A clone has its source's, right after tracing_started, or
 * none if its source had not all started. */
SVF_TEST(test_start_acks_event_order_and_clones, 1)
{
    svc_producer *a = acking_producer(f->svc, "acker", 21);
    svc_session *s = svf_enable(f);
    char err[256];
    svc_session *early = svc_session_clone(f->svc, NULL, svc_session_id(s),
                                           NULL, err, sizeof err);
    ck_assert_ptr_nonnull(early);
    ck_assert_int_eq(svc_session_flush(f->svc, s, 100, 0, 1), 0);
    svc_tick(f->svc, svc_now_ms() + 1000);      /* times out: no acks */
    svc_producer_ds_started(f->svc, a, instance_of(s, a));
    svf_readout r;
    svf_read_all(f->svc, s, &r);
    expect_events(&r, (const int[]){2, 9, 3, 1, 4}, 5);

    svc_session *cl = svc_session_clone(f->svc, NULL, svc_session_id(s),
                                        NULL, err, sizeof err);
    ck_assert_ptr_nonnull(cl);
    svf_read_all(f->svc, cl, &r);
    ck_assert_int_ge(r.n_ev_seq, 2);
    ck_assert_int_eq(r.ev_seq[0], 2);
    ck_assert_int_eq(r.ev_seq[1], 1);
    ck_assert_int_eq(r.n_ev[1], 1);
    svf_read_all(f->svc, early, &r);
    ck_assert_int_eq(r.n_ev[2], 1);
    ck_assert_int_eq(r.n_ev[1], 0);
    svc_session_free(f->svc, cl);
    svc_session_free(f->svc, early);
}

/* An instance that goes away unacked (its data source unregistered, its
 * producer gone) no longer holds the others back. */
SVF_TEST(test_start_acks_gone_instances_do_not_count, 1)
{
    svc_producer *a = acking_producer(f->svc, "acker", 21);
    svc_producer *b = acking_producer(f->svc, "other", 22);
    svc_session *s = svf_enable(f);
    ck_assert_uint_eq(s->ninst, 3);
    ck_assert_int_eq(svc_producer_unregister_ds(f->svc, a, "test.ds"), 0);
    ck_assert_int_eq(svf_rec.all_started, 0);
    svc_producer_disconnect(f->svc, b);
    ck_assert_int_eq(svf_rec.all_started, 1);
    svf_readout r;
    svf_read_all(f->svc, s, &r);
    ck_assert_int_eq(r.n_ev[1], 1);
    svc_tick(f->svc, svc_now_ms() + SVC_START_ACK_TIMEOUT_MS + 1000);
    svf_read_all(f->svc, s, &r);
    ck_assert_int_eq(r.n_ev[7], 0);
}

SVF_TEST(test_read_in_bounded_batches, 1)
{
    svc_session *s = svf_enable(f);
    for (uint32_t i = 0; i < 8; i++)
        svf_put(f, f->p[0], i, 1, i, i * 4, 4);
    svf_readout r;
    memset(&r, 0, sizeof(r));
    bool more = true;
    int rounds = 0;
    while (more && rounds < 100) {
        ck_assert_int_eq(svc_session_read(f->svc, s, 40, svf_collect, &r,
                                          &more), 0);
        rounds++;
    }
    ck_assert_int_eq(r.values, 32);
    ck_assert_int_gt(rounds, 2);
}

/* Packets lost to `cause` by the session's loss table, for writer
 * `writer` of the first producer; *total_lost (if not NULL) gets that
 * writer's lost_packets over all causes. */
static uint64_t cause_in_loss_table(svf_fx *f, svc_session *s,
                                    uint32_t writer, const char *cause,
                                    uint64_t *total_lost)
{
    Perfetto__Protos__TraceStats *st = svc_stats_build(f->svc, s);
    uint64_t n = 0, all = 0;
    ck_assert_ptr_nonnull(st);
    for (size_t i = 0; i < st->n_shmtrace_sequence_loss; i++) {
        const Perfetto__Protos__TraceStats__ShmtraceSequenceLoss *l =
            st->shmtrace_sequence_loss[i];
        if (l->producer_id != svc_producer_id(f->p[0]) ||
            l->writer_id != writer)
            continue;
        all += l->lost_packets;
        for (size_t c = 0; c < l->n_causes; c++)
            if (strcmp(l->causes[c]->cause, cause) == 0)
                n += l->causes[c]->packets;
    }
    svc_stats_free(st);
    if (total_lost)
        *total_lost = all;
    return n;
}

/* Packets the service refused as invalid (cause "invalid"). */
static uint64_t invalid_in_loss_table(svf_fx *f, svc_session *s,
                                      uint32_t writer)
{
    return cause_in_loss_table(f, s, writer, "invalid", NULL);
}

SVF_TEST(test_read_drops_invalid_packets_and_flags_next, 1)
{
    svc_session *s = svf_enable(f);
    svf_write_chunk(f->p[0], 0, 1, 0, 0, 3, 3);
    svf_poison_second_packet(f->p[0]);
    svf_commit(f->svc, f->p[0], 0, 0, f->buf, 0);
    svf_readout r;
    svf_read_all(f->svc, s, &r);
    ck_assert_int_eq(r.values, 2);
    ck_assert_uint_eq(r.invalid_packets, 1);
    ck_assert_uint_eq(r.dropped_of_value[0], 0);
    ck_assert_uint_ne(r.dropped_of_value[2], 0);     /* not silent */
    ck_assert_uint_eq(invalid_in_loss_table(f, s, 1), 1);
}

/* ------------------------------------------------------------ stats */

/* The histogram bucket i holds thr[i-1] < v <= thr[i]. */
static void assert_one_sample_in_right_bucket(const uint64_t *counts,
                                              const int64_t *sums)
{
    static const int64_t thr[] = TB_HIST_THRESHOLDS;
    uint64_t total = 0;
    for (size_t q = 0; q < TB_HIST_BUCKETS; q++) {
        total += counts[q];
        if (!counts[q])
            continue;
        ck_assert_int_gt(sums[q], q ? thr[q - 1] : 0);
        if (q < TB_HIST_BUCKETS - 1)
            ck_assert_int_le(sums[q], thr[q]);
    }
    ck_assert_uint_eq(total, 1);
}

SVF_TEST(test_stats_writer_histograms, 1)
{
    svc_session *s = svf_enable(f);
    svf_put(f, f->p[0], 0, 1, 0, 0, 3);            /* writer 1: 3 packets */
    svf_put(f, f->p[0], 1, 2, 0, 10, 20);          /* writer 2: 20 */
    /* Built before any read: the writers get their sequence ids now. */
    Perfetto__Protos__TraceStats *st = svc_stats_build(f->svc, s);
    ck_assert_ptr_nonnull(st);
    ck_assert_uint_eq(st->n_chunk_payload_histogram_def, 10);
    ck_assert_int_eq(st->chunk_payload_histogram_def[0], 8);
    ck_assert_int_eq(st->chunk_payload_histogram_def[9], 16384);
    ck_assert_uint_eq(st->n_writer_stats, 2);
    int64_t sum[2] = {0, 0};
    uint64_t seq[2];
    for (size_t i = 0; i < 2; i++) {
        const Perfetto__Protos__TraceStats__WriterStats *w =
            st->writer_stats[i];
        ck_assert(w->has_sequence_id && w->has_buffer);
        ck_assert_uint_eq(w->buffer, 0);
        ck_assert_uint_eq(w->n_chunk_payload_histogram_counts, 11);
        ck_assert_uint_eq(w->n_chunk_payload_histogram_sum, 11);
        assert_one_sample_in_right_bucket(w->chunk_payload_histogram_counts,
                                          w->chunk_payload_histogram_sum);
        for (size_t q = 0; q < 11; q++)
            sum[i] += w->chunk_payload_histogram_sum[q];
        seq[i] = w->sequence_id;
    }
    ck_assert_int_gt(sum[1], sum[0]);              /* 20 packets vs 3 */
    ck_assert_uint_ne(seq[0], seq[1]);
    svc_stats_free(st);
    /* The packets carry the same sequence ids. */
    svf_readout r;
    svf_read_all(f->svc, s, &r);
    ck_assert_uint_eq(r.seq_of_value[0], seq[0]);
    ck_assert_uint_eq(r.seq_of_value[10], seq[1]);
    /* A second chunk of writer 1 adds a sample to its entry. */
    svf_put(f, f->p[0], 2, 1, 1, 3, 3);
    st = svc_stats_build(f->svc, s);
    ck_assert_uint_eq(st->n_writer_stats, 2);
    uint64_t n = 0;
    for (size_t q = 0; q < 11; q++)
        n += st->writer_stats[0]->chunk_payload_histogram_counts[q];
    ck_assert_uint_eq(n, 2);
    svc_stats_free(st);
    /* Service-wide stats (no session) carry no histograms. */
    st = svc_stats_build(f->svc, NULL);
    ck_assert_uint_eq(st->n_writer_stats, 0);
    ck_assert_uint_eq(st->n_chunk_payload_histogram_def, 0);
    svc_stats_free(st);
}

SVF_TEST(test_stats_histograms_can_be_disabled, 1)
{
    Perfetto__Protos__TraceConfig__BuiltinDataSource b =
        PERFETTO__PROTOS__TRACE_CONFIG__BUILTIN_DATA_SOURCE__INIT;
    b.has_disable_chunk_usage_histograms = true;
    b.disable_chunk_usage_histograms = true;
    f->c.cfg.builtin_data_sources = &b;
    svc_session *s = svf_enable(f);
    svf_put(f, f->p[0], 0, 1, 0, 0, 3);
    Perfetto__Protos__TraceStats *st = svc_stats_build(f->svc, s);
    ck_assert_ptr_nonnull(st);
    ck_assert_uint_eq(st->n_writer_stats, 0);
    ck_assert_uint_eq(st->n_chunk_payload_histogram_def, 0);
    ck_assert_uint_eq(st->n_buffer_stats, 1);      /* the rest is there */
    svc_stats_free(st);
    svf_readout r;
    svf_read_all(f->svc, s, &r);
    ck_assert_int_eq(r.values, 3);
}

/* ------------------------------------------------------------ lying */

START_TEST(test_commit_lies_are_counted_not_fatal)
{
    svf_fx f;
    svf_start(&f, 1);
    svc_service *svc = f.svc;
    svc_producer *p = f.p[0];
    svc_producer *q = svc_producer_connect(svc, NULL, 1000, 99, NULL);
    Perfetto__Protos__CommitDataRequest empty =
        PERFETTO__PROTOS__COMMIT_DATA_REQUEST__INIT;
    ck_assert_int_eq(svc_producer_commit(svc, q, &empty), -EPERM); /* no SMB */
    svc_session *s = svf_enable(&f);
    svf_cfg c2;
    svf_cfg_init(&c2, 64, 0);
    c2.dsc.name = "nobody.registers.this";
    svc_session *other = svc_session_enable(svc, NULL, &c2.cfg, -1, NULL, 0);
    uint32_t b = f.buf;
    size_t size, psz;
    svc_producer_smb(p, &size, &psz);
    uint32_t npages = (uint32_t)(size / psz);
    svf_commit(svc, p, npages, 0, b, 0);          /* page out of range */
    svf_commit(svc, p, UINT32_MAX, 0, b, 0);
    svf_write_chunk(p, 0, 1, 0, 0, 2, 3);
    svf_commit(svc, p, 0, 5, b, 0);               /* chunk index > layout */
    svf_write_chunk(p, 1, 1, 1, 2, 2, 1);         /* BeingWritten */
    svf_commit(svc, p, 1, 0, b, 0);
    ck_assert_uint_eq(svf_page_word(p, 1) & 3, 1);    /* untouched */
    uint64_t before = svc->chunks_discarded;
    svf_commit(svc, p, 0, 0, other->buf_ids[0], 0);   /* not its buffer */
    ck_assert_uint_eq(svc->chunks_discarded, before + 1);
    svf_write_chunk(p, 0, 1, 0, 0, 2, 3);
    svf_commit(svc, p, 0, 0, 77777, 0);                /* no such buffer */
    ck_assert_uint_eq(svc->chunks_discarded, before + 2);
    /* Garbage chunk: count says 5 fragments, payload has none valid. */
    svf_write_chunk(p, 2, 1, 2, 0, 1, 3);
    uint8_t *base = svc_producer_smb(p, NULL, NULL);
    memset(base + 2 * psz + 16, 0xFF, psz - 16);
    uint16_t count = 5;
    memcpy(base + 2 * psz + 8 + 6, &count, 2);
    svf_commit(svc, p, 2, 0, b, 0);
    /* Patches: bad writer id, too many, wrong size. */
    Perfetto__Protos__CommitDataRequest req =
        PERFETTO__PROTOS__COMMIT_DATA_REQUEST__INIT;
    Perfetto__Protos__CommitDataRequest__ChunkToPatch cp =
        PERFETTO__PROTOS__COMMIT_DATA_REQUEST__CHUNK_TO_PATCH__INIT, *cpp = &cp;
    Perfetto__Protos__CommitDataRequest__ChunkToPatch__Patch pt =
        PERFETTO__PROTOS__COMMIT_DATA_REQUEST__CHUNK_TO_PATCH__PATCH__INIT,
        *ptp = &pt;
    uint8_t three[3] = {1, 2, 3};
    pt.has_offset = true;
    pt.has_data = true;
    pt.data.data = three;
    pt.data.len = 3;
    cp.has_writer_id = cp.has_target_buffer = true;
    cp.writer_id = 1;
    cp.target_buffer = b;
    cp.n_patches = 1;
    cp.patches = &ptp;
    req.n_chunks_to_patch = 1;
    req.chunks_to_patch = &cpp;
    uint64_t pd = svc->patches_discarded;
    ck_assert_int_eq(svc_producer_commit(svc, p, &req), 0);
    ck_assert_uint_eq(svc->patches_discarded, pd + 1);
    cp.writer_id = 0;
    ck_assert_int_eq(svc_producer_commit(svc, p, &req), 0);
    ck_assert_uint_eq(svc->patches_discarded, pd + 2);
    svf_readout r;
    svf_read_all(svc, s, &r);
    ck_assert_int_eq(r.values, 0);
    ck_assert_uint_ge(r.abi_violations, 1);
    svc_destroy(svc);
}
END_TEST

/* ------------------------------------------------------------ flush */

START_TEST(test_flush_acked_succeeds)
{
    svf_fx f;
    svf_start(&f, 1);
    svc_session *s = svf_enable(&f);
    ck_assert_int_eq(svc_session_flush(f.svc, s, 1000, 0, 5), 0);
    ck_assert_int_eq(svf_rec.flush, 1);
    ck_assert_int_eq(svf_rec.flush_done_ok, 0);
    svf_write_chunk(f.p[0], 0, 1, 0, 0, 2, 3);
    svf_commit(f.svc, f.p[0], 0, 0, f.buf, svf_rec.last_flush_id);
    ck_assert_int_eq(svf_rec.flush_done_ok, 1);
    ck_assert_uint_eq(s->flushes_succeeded, 1);
    svc_destroy(f.svc);
}
END_TEST

/* CloneSession flushes its source first (svc_session_flush_for_clone): the
 * producers get a Flush with reason "trace clone", and the daemon hears
 * when it is over: acked, timed out, or the source freed meanwhile. */
SVF_TEST(test_clone_flush_acked, 1)
{
    svc_session *s = svf_enable(f);
    ck_assert_int_eq(svc_session_flush_for_clone(f->svc, getuid(), s->id,
                                                 NULL, 77), 1);
    ck_assert_int_eq(svf_rec.flush, 1);
    ck_assert_uint_eq(svf_rec.last_flush_flags & 0xf, 3); /* trace clone */
    ck_assert_int_eq(svf_rec.clone_flush_done, 0);
    svf_write_chunk(f->p[0], 0, 1, 0, 0, 2, 3);
    svf_commit(f->svc, f->p[0], 0, 0, f->buf, svf_rec.last_flush_id);
    ck_assert_int_eq(svf_rec.clone_flush_done, 1);
    ck_assert_int_eq(svf_rec.clone_flush_gone, 0);
    ck_assert_uint_eq(svf_rec.last_clone_token, 77);
    ck_assert_int_eq(svf_rec.flush_done_ok + svf_rec.flush_done_fail, 0);
}

SVF_TEST(test_clone_flush_times_out, 1)
{
    svc_session *s = svf_enable(f);
    ck_assert_int_eq(svc_session_flush_for_clone(f->svc, getuid(), s->id,
                                                 NULL, 5), 1);
    svc_tick(f->svc, svc_now_ms() + 60000);   /* the producer never acks */
    ck_assert_int_eq(svf_rec.clone_flush_done, 1);
    ck_assert_int_eq(svf_rec.clone_flush_gone, 0);
}

SVF_TEST(test_clone_flush_source_freed, 1)
{
    svc_session *s = svf_enable(f);
    ck_assert_int_eq(svc_session_flush_for_clone(f->svc, getuid(), s->id,
                                                 NULL, 6), 1);
    svc_session_free(f->svc, s);
    ck_assert_int_eq(svf_rec.clone_flush_done, 1);
    ck_assert_int_eq(svf_rec.clone_flush_gone, 1);
    ck_assert_uint_eq(svf_rec.last_clone_token, 6);
}

SVF_TEST(test_clone_flush_nothing_to_flush, 1)
{
    svc_session *s = svf_enable(f);
    /* no such session, or not this uid's: nothing is flushed */
    ck_assert_int_eq(svc_session_flush_for_clone(f->svc, getuid(),
                                                 s->id + 100, NULL, 1), 0);
    ck_assert_int_eq(svc_session_flush_for_clone(f->svc, getuid() + 1,
                                                 s->id, NULL, 1), 0);
    ck_assert_int_eq(svf_rec.flush, 0);
    ck_assert_int_eq(svf_rec.clone_flush_done, 0);
}

SVF_TEST(test_flush_timeout_scrapes_silent_producer, 1)
{
    svc_session *s = svf_enable(f);
    ck_assert_int_eq(svc_producer_register_writer(f->svc, f->p[0], 1, f->buf),
                     0);
    /* A chunk still being written, 3 fragments started: 2 are complete. */
    svf_write_chunk(f->p[0], 0, 1, 0, 0, 3, 1);
    ck_assert_int_eq(svc_session_flush(f->svc, s, 1000, 0, 9), 0);
    ck_assert_uint_ne(svc_next_deadline_ms(f->svc), 0);
    svc_tick(f->svc, svc_now_ms() + 60000);
    ck_assert_int_eq(svf_rec.flush_done_fail, 1);
    ck_assert_uint_eq(s->flushes_failed, 1);
    ck_assert_uint_eq(svf_page_word(f->p[0], 0) & 3, 1);  /* never freed */
    svf_readout r;
    svf_read_all(f->svc, s, &r);
    ck_assert_int_eq(r.values, 2);                 /* 0 and 1 recovered */
}

SVF_TEST(test_disable_stops_and_notifies, 1)
{
    f->c.cfg.has_flush_timeout_ms = true;
    f->c.cfg.flush_timeout_ms = 100;
    svc_session *s = svf_enable(f);
    ck_assert_int_eq(svc_session_disable(f->svc, s), 0);
    ck_assert_int_eq(svf_rec.flush, 1);
    ck_assert_int_eq(svf_rec.disabled, 0);
    Perfetto__Protos__CommitDataRequest req =
        PERFETTO__PROTOS__COMMIT_DATA_REQUEST__INIT;
    req.has_flush_request_id = true;
    req.flush_request_id = svf_rec.last_flush_id;
    ck_assert_int_eq(svc_producer_commit(f->svc, f->p[0], &req), 0);
    ck_assert_int_eq(svf_rec.stop_ds, 1);
    ck_assert_int_eq(svf_rec.disabled, 1);
    ck_assert(svc_session_is_disabled(s));
    ck_assert_int_eq(s->final_flush_outcome, 1);
}

SVF_TEST(test_duration_disables_after_failed_final_flush, 1)
{
    f->c.cfg.has_duration_ms = true;
    f->c.cfg.duration_ms = 10;
    svc_session *s = svf_enable(f);
    svc_tick(f->svc, svc_now_ms() + 20);        /* duration: final flush */
    ck_assert_int_eq(svf_rec.flush, 1);
    svc_tick(f->svc, svc_now_ms() + 60000);     /* nobody answers */
    ck_assert_int_eq(svf_rec.disabled, 1);
    ck_assert_int_eq(s->final_flush_outcome, 2);
}

/* ------------------------------------------------------------ faults */

SVF_TEST(test_producer_disconnect_scrapes_its_data, 2)
{
    svc_session *s = svf_enable(f);
    svc_producer_register_writer(f->svc, f->p[0], 1, f->buf);
    svf_write_chunk(f->p[0], 0, 1, 0, 0, 4, 3); /* complete, not committed */
    svf_put(f, f->p[1], 0, 1, 0, 10, 2);
    ck_assert_int_eq(svc_session_flush(f->svc, s, 1000, 0, 1), 0);
    svc_producer_disconnect(f->svc, f->p[0]);    /* killed mid-flush */
    ck_assert_int_eq(svf_rec.flush_done_ok, 0);  /* "two" still owes one */
    svf_readout r;
    svf_read_all(f->svc, s, &r);
    ck_assert_int_eq(r.values, 6);             /* its 4 scraped + 2 */
}

SVF_TEST(test_clone_is_a_snapshot, 1)
{
    svc_session *s = svf_enable(f);
    svf_put(f, f->p[0], 0, 1, 0, 0, 3);
    char err[128];
    svc_session *cl = svc_session_clone(f->svc, NULL, svc_session_id(s),
                                        NULL, err, sizeof(err));
    ck_assert_ptr_nonnull(cl);
    ck_assert_ptr_null(svc_session_clone(f->svc, NULL, 12345, NULL, err,
                                         sizeof(err)));
    /* The clone has the source's pending snapshot (taken at its start),
     * and none of its own: the clocks did not drift since. */
    ck_assert_uint_eq(cl->nclock_snaps, 1);
    ck_assert_mem_eq(&cl->clock_snaps[0], &s->clock_snaps[0],
                     sizeof(svc_clock_snap));
    svf_readout r;
    svf_read_all(f->svc, cl, &r);
    ck_assert_int_eq(r.values, 3);
    ck_assert_int_eq(r.n_clock, 1);
    ck_assert_int_eq(r.n_sync, 0);            /* no period in a clone */
    ck_assert_int_eq(r.n_stats, 1);           /* a clone's trace has them */
    svf_read_all(f->svc, cl, &r);
    ck_assert_int_eq(r.n_stats, 0);           /* once */
    svf_read_all(f->svc, s, &r);                /* original still has them */
    ck_assert_int_eq(r.values, 3);
    ck_assert_int_eq(r.n_clock, 1);
    ck_assert_int_eq(r.n_stats, 1);           /* the start's: still due */
    /* A clone of a source whose snapshots were emitted takes its own. */
    svc_session *cl2 = svc_session_clone(f->svc, NULL, svc_session_id(s),
                                         NULL, err, sizeof(err));
    ck_assert_ptr_nonnull(cl2);
    ck_assert_uint_eq(cl2->nclock_snaps, 1);
    svf_read_all(f->svc, cl2, &r);
    ck_assert_int_eq(r.n_clock, 1);
    ck_assert_int_eq(r.n_stats, 1);
    svf_put(f, f->p[0], 0, 1, 1, 3, 1);        /* tracing goes on */
    svf_read_all(f->svc, s, &r);
    ck_assert_int_eq(r.values, 1);
    ck_assert_int_eq(r.n_stats, 0);           /* the source's, not yet */
}

/* ------------------------------------------------------------ file */

SVF_TEST(test_file_mode_writes_trace_records_and_caps_size, 1)
{
    int mine;
    int fd = svf_temp_file(&mine);
    svf_cfg_file(&f->c);
    f->c.cfg.has_file_write_period_ms = true;
    f->c.cfg.file_write_period_ms = 1;          /* clamped to 100 */
    f->c.cfg.has_max_file_size_bytes = true;
    f->c.cfg.max_file_size_bytes = 4000;
    svc_session *s = svf_enable_fd(f, fd);
    ck_assert(svc_session_writes_file(s));
    ck_assert_uint_eq(s->file_write_period_ms, 100);
    for (uint32_t i = 0; i < 40; i++)
        svf_put(f, f->p[0], i % 8, 1, i, i * 10, 10);
    svc_tick(f->svc, svc_now_ms() + 150);       /* a periodic file write */
    long size = svf_file_size(mine);
    ck_assert_int_gt(size, 0);
    ck_assert_int_lt(size, 4000);              /* whole packets, < limit */
    ck_assert(s->file_full);
    ck_assert_int_eq(svf_rec.flush, 1);        /* file full: disabling */
    /* The file is a sequence of Trace.packet records. */
    svf_readout r;
    svf_read_file_records(mine, &r);
    ck_assert_int_gt(r.n, 3);
    /* Every one of the 400 packets is either in the file or counted as
     * kept out by the limit (cause file_full), and that is the writer's
     * whole loss. */
    uint64_t lost = 0;
    uint64_t kept_out = cause_in_loss_table(f, s, 1, "file_full", &lost);
    ck_assert_int_gt(r.values, 0);
    ck_assert_uint_gt(kept_out, 0);
    ck_assert_uint_eq((uint64_t)r.values + kept_out, 400);
    ck_assert_uint_eq(lost, kept_out);
    close(mine);
}

/* File mode copies packets straight into the write batch and validates
 * them there: an invalid one leaves no bytes behind and flags the next. */
SVF_TEST(test_file_mode_drops_invalid_packets_in_place, 1)
{
    int mine;
    int fd = svf_temp_file(&mine);
    svf_cfg_file(&f->c);
    svc_session *s = svf_enable_fd(f, fd);
    svf_write_chunk(f->p[0], 0, 1, 0, 0, 3, 3);
    svf_poison_second_packet(f->p[0]);
    svf_commit(f->svc, f->p[0], 0, 0, f->buf, 0);
    ck_assert_int_eq(svc_session_write_file(f->svc, s), 0);
    /* a second pass appends behind the first, reusing the batch */
    svf_put(f, f->p[0], 1, 1, 1, 3, 2);
    ck_assert_int_eq(svc_session_write_file(f->svc, s), 0);
    svf_readout r;
    svf_read_file_records(mine, &r);
    ck_assert_int_eq(r.values, 4);                   /* 0, 2, 3, 4 */
    ck_assert_uint_eq(r.invalid_packets, 1);
    ck_assert_uint_eq(r.dropped_of_value[0], 0);
    ck_assert_uint_ne(r.dropped_of_value[2], 0);     /* not silent */
    ck_assert_uint_eq(r.dropped_of_value[3], 0);
    ck_assert_uint_eq(r.seq_of_value[4], r.seq_of_value[0]);
    ck_assert_int_eq((long)s->bytes_written_to_file, svf_file_size(mine));
    close(mine);
}

/* A chunk on `page` holding raw fragment bytes (count fragments, flags as
 * in the ABI: 1 = first continues from prev, 2 = last continues on next). */
static void write_raw_chunk(svc_producer *p, uint32_t page, uint16_t writer,
                            uint32_t chunk_id, const uint8_t *frags,
                            size_t len, unsigned count, unsigned flags)
{
    size_t size, psz;
    uint8_t *pg = svc_producer_smb(p, &size, &psz) + (size_t)page * psz;
    ck_assert_uint_le(len, psz - 16);
    memcpy(pg + 16, frags, len);
    memcpy(pg + 8, &chunk_id, 4);
    memcpy(pg + 12, &writer, 2);
    uint16_t packets = (uint16_t)(count | flags << 10);
    memcpy(pg + 14, &packets, 2);
    atomic_store((_Atomic uint32_t *)(void *)pg, (1u << 28) | 3u);
}

/* Commits n bytes of data as one fragment (its varint size, then the
 * bytes) in chunk id of writer 1 on page 0, with the ABI's flags. */
static void commit_fragment(svf_fx *f, uint32_t id, const uint8_t *data,
                            size_t n, unsigned flags)
{
    static uint8_t fr[65536 + 8];
    ck_assert_uint_le(n, sizeof(fr) - 8);
    size_t k = svc_varint(fr, n);
    memcpy(fr + k, data, n);
    write_raw_chunk(f->p[0], 0, 1, id, fr, k + n, 1, flags);
    svf_commit(f->svc, f->p[0], 0, 0, f->buf, 0);
}

/* Commits packet pk (len bytes) from writer 1 on page 0 as chunk id, or,
 * if split, as its first half in chunk id and the rest in chunk id + 1
 * (begin fragment, then end fragment); returns the next chunk id. */
static uint32_t commit_packet(svf_fx *f, uint32_t id, const uint8_t *pk,
                              size_t len, bool split)
{
    size_t part = split ? len / 2 : len;
    commit_fragment(f, id, pk, part, split ? 2 : 0);
    if (!split)
        return id + 1;
    commit_fragment(f, id + 1, pk + part, len - part, 1);
    return id + 2;
}

/* The str length of big packet v: 500-3499 bytes, varied. */
#define BIG_STR_LEN(v) (500 + ((v) * 37) % 3000)

/* TracePacket { for_testing { seq_value: v, str: L letters } } (or with a
 * top-level field 10 the service alone may write, if bad). */
static size_t big_packet(uint8_t *out, uint32_t v, size_t L, bool bad)
{
    uint8_t inner[8192];
    size_t k = 0;
    inner[k++] = 0x10;
    k += svc_varint(inner + k, v);
    inner[k++] = 0x0A;
    k += svc_varint(inner + k, L);
    for (size_t i = 0; i < L; i++)
        inner[k++] = (uint8_t)('a' + (v + i) % 26);
    size_t n = 0;
    if (bad) {
        out[n++] = 0x50;                    /* trusted_packet_sequence_id */
        out[n++] = 0x07;
    }
    out[n++] = 0xA2;
    out[n++] = 0x38;
    n += svc_varint(out + n, k);
    memcpy(out + n, inner, k);
    return n + k;
}

/* The Trace.packet record at *off of a file's bytes: moves *off to the
 * packet and returns its length (asserting the tag and the bounds). */
static uint64_t next_record(const uint8_t *buf, long size, long *off)
{
    ck_assert_uint_eq(buf[(*off)++], 0x0A);
    uint64_t len = 0;
    for (int shift = 0;; shift += 7) {
        ck_assert_int_lt(*off, size);
        uint8_t b = buf[(*off)++];
        len |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80))
            break;
    }
    ck_assert_int_le(*off + (long)len, size);
    return len;
}

/* Checks the file's test packets: values 0..n-1 in order except `skip`,
 * each str intact; returns how many, and the flag on skip + 1. */
static int check_big_file(int fd, uint32_t n, uint32_t skip,
                          uint32_t *flag_after_skip)
{
    long size, off = 0;
    uint8_t *buf = svf_file_bytes(fd, &size);
    uint32_t want = 0;
    int seen = 0;
    while (off < size) {
        uint64_t len = next_record(buf, size, &off);
        Perfetto__Protos__TracePacket *p =
            perfetto__protos__trace_packet__unpack(NULL, len, buf + off);
        ck_assert_ptr_nonnull(p);
        if (p->trusted_packet_sequence_id != 1 && p->for_testing) {
            if (want == skip)
                want++;
            ck_assert_uint_eq(p->for_testing->seq_value, want);
            ck_assert_ptr_nonnull(p->for_testing->str);
            size_t L = strlen(p->for_testing->str);
            ck_assert_uint_eq(L, BIG_STR_LEN(want));
            bool intact = true;
            for (size_t i = 0; i < L; i++)
                intact &= p->for_testing->str[i] ==
                          (char)('a' + (want + i) % 26);
            ck_assert_msg(intact, "packet %u: str damaged", want);
            if (want == skip + 1)
                *flag_after_skip = p->previous_packet_dropped;
            want++;
            seen++;
        }
        perfetto__protos__trace_packet__free_unpacked(p, NULL);
        off += (long)len;
    }
    ck_assert_uint_eq(want, n);
    free(buf);
    return seen;
}

/* n big packets from writer 1 into a file session whose packets of
 * in_place_min bytes or more are written in place, 1 in 5 split over two
 * chunks, packet `bad` invalid: every other one comes out intact and in
 * order, the bad one leaves nothing behind, is counted for the session
 * and for its writer, and flags the next. */
static void big_packets_one_bad(svf_fx *f, size_t in_place_min,
                                uint32_t n, uint32_t bad)
{
    svc_set_file_in_place_min(f->svc, in_place_min);
    int mine;
    int fd = svf_temp_file(&mine);
    svf_cfg_init(&f->c, 4096, 0);
    svf_cfg_file(&f->c);
    svc_session *s = svf_enable_fd(f, fd);
    static uint8_t pk[8192];
    uint32_t id = 0;
    for (uint32_t v = 0; v < n; v++) {
        size_t L = BIG_STR_LEN(v);
        size_t len = big_packet(pk, v, L, v == bad);
        id = commit_packet(f, id, pk, len, v % 5 == 4);  /* 1 in 5 split */
        if (v == n / 2)         /* a pass in the middle too */
            ck_assert_int_eq(svc_session_write_file(f->svc, s), 0);
    }
    ck_assert_int_eq(svc_session_write_file(f->svc, s), 0);
    uint32_t flag = 0;
    ck_assert_int_eq(check_big_file(mine, n, bad, &flag), (int)n - 1);
    ck_assert_uint_ne(flag, 0);                      /* not silent */
    ck_assert_uint_eq(s->invalid_packets, 1);
    ck_assert_uint_eq(invalid_in_loss_table(f, s, 1), 1);
    ck_assert_int_eq((long)s->bytes_written_to_file, svf_file_size(mine));
    if (in_place_min <= 512)
        ck_assert_uint_gt(s->file_slice_bytes, s->file_staged_bytes);
    else
        ck_assert_uint_eq(s->file_slice_bytes, 0);
    close(mine);
}

/* File mode writes packets of >= 512 bytes from the buffer itself
 * (writev): whole ones and ones reassembled from two chunks, more than one
 * writev's worth of pieces in one pass. */
SVF_TEST(test_file_mode_large_packets_in_place, 1)
{
    big_packets_one_bad(f, 512, 1300, 17);
}

/* Under the in-place threshold the same packets are copied into the batch:
 * one in one piece is checked in the buffer before its copy (bad 17),
 * one in two pieces after it, in the batch (bad 19: split). */
SVF_TEST(test_file_mode_copied_packets_checked_whole, 1)
{
    big_packets_one_bad(f, SVC_FILE_IN_PLACE_MIN, 200, 17);
}

SVF_TEST(test_file_mode_copied_packets_checked_split, 1)
{
    big_packets_one_bad(f, SVC_FILE_IN_PLACE_MIN, 200, 19);
}

/* A packet of more pieces than one writev takes (1100 chunks of 3000
 * bytes: over SVC_FILE_IOV, so not written in place) is copied whole, and
 * at 3.3 MB it does not fit a batch (1 MiB): that batch grows (moves off
 * the session's batch arena to the heap) and the file gets the packet
 * intact, between its neighbours, in order. The batches of the arena
 * start on 2 MiB boundaries, side by side. */
static void packet_larger_than_a_batch(svf_fx *f, bool direct)
{
    /* over a batch: 3.3 MB against 1 MiB, 4.5 MB against a direct 4 MiB */
    const size_t PIECES = direct ? 1500 : 1100, PIECE = 3000;
    int mine;
    int fd = svf_temp_file(&mine);
    svf_cfg_init(&f->c, 8192, 0);
    svf_cfg_file(&f->c);
    svc_set_file_direct(f->svc, direct);
    svc_session *s = svf_enable_fd(f, fd);
    bool was_direct = s->direct;
    static uint8_t pk[8192];
    uint32_t id = commit_packet(f, 0, pk, big_packet(pk, 0, 700, false),
                                false);
    /* for_testing { seq_value: 1, str: L letters }, L chosen so that the
     * packet is exactly PIECES * PIECE bytes */
    size_t total = (size_t)PIECES * PIECE;
    uint8_t *huge = malloc(total);
    ck_assert_ptr_nonnull(huge);
    size_t L = total, n, k;
    for (;; L--) {
        uint8_t tmp[24];
        k = 3 + svc_varint(tmp, L);         /* seq_value: 1, str tag, size */
        n = 2 + svc_varint(tmp, k + L) + k + L;
        if (n == total)
            break;
        ck_assert_uint_gt(n, total);
    }
    n = 0;
    huge[n++] = 0xA2;
    huge[n++] = 0x38;
    n += svc_varint(huge + n, k + L);
    huge[n++] = 0x10;
    huge[n++] = 0x01;
    huge[n++] = 0x0A;
    n += svc_varint(huge + n, L);
    for (size_t i = 0; i < L; i++)
        huge[n++] = (uint8_t)('a' + (1 + i) % 26);
    ck_assert_uint_eq(n, total);
    for (size_t i = 0; i < PIECES; i++) {
        unsigned flags = (i > 0 ? 1u : 0u) | (i + 1 < PIECES ? 2u : 0u);
        commit_fragment(f, id++, huge + i * PIECE, PIECE, flags);
    }
    commit_packet(f, id, pk, big_packet(pk, 2, 900, false), false);
    ck_assert_int_eq(svc_session_write_file(f->svc, s), 0);

    long size, off = 0;
    uint8_t *buf = svf_file_bytes(mine, &size);
    uint32_t want = 0;
    while (off < size) {
        uint64_t len = next_record(buf, size, &off);
        Perfetto__Protos__TracePacket *p =
            perfetto__protos__trace_packet__unpack(NULL, len, buf + off);
        ck_assert_ptr_nonnull(p);
        if (p->trusted_packet_sequence_id != 1 && p->for_testing) {
            ck_assert_uint_eq(p->for_testing->seq_value, want);
            size_t got = strlen(p->for_testing->str);
            ck_assert_uint_eq(got, want == 1 ? L : want == 0 ? 700 : 900);
            bool intact = true;
            for (size_t i = 0; i < got; i++)
                intact &= p->for_testing->str[i] ==
                          (char)('a' + (want + i) % 26);
            ck_assert_msg(intact, "packet %u: str damaged", want);
            want++;
        }
        perfetto__protos__trace_packet__free_unpacked(p, NULL);
        off += (long)len;
    }
    ck_assert_uint_eq(want, 3);
    ck_assert_uint_eq(s->file_slice_bytes, 0);         /* all copied */
    ck_assert_int_eq((long)s->bytes_written_to_file, size);
    ck_assert_uint_eq(s->invalid_packets, 0);
    ck_assert_ptr_nonnull(s->fwb_arena);
    ck_assert_uint_eq((uintptr_t)s->fwb_arena % (2u << 20), 0);
    ck_assert(s->fwb[s->fwb_cur].buf_heap);           /* grown: heap */
    ck_assert_uint_ge(s->fwb[s->fwb_cur].cap, total);
    if (was_direct) {   /* aligned, the tail before it moved with it */
        ck_assert_uint_eq((uintptr_t)s->fwb[s->fwb_cur].buf %
                          SVC_FILE_DIRECT_ALIGN, 0);
        ck_assert_int_eq(s->direct_off, size);
    }
    free(buf);
    free(huge);
    close(mine);
}

SVF_TEST(test_file_mode_copies_a_packet_larger_than_a_batch, 1)
{
    packet_larger_than_a_batch(f, false);
}

/* ------------------------------------------------------- O_DIRECT files */

static uint32_t put_big_range(svf_fx *f, uint32_t id, uint32_t from,
                              uint32_t to);

/* Does /tmp take O_DIRECT writes? If not, says so for `who`, whose
 * direct-only checks are then skipped (the service writes such files
 * through the page cache, which the rest of its checks still see). */
static bool direct_ok(const char *who)
{
    int mine;
    int fd = svf_temp_file(&mine);
    int fl = fcntl(fd, F_GETFL);
    bool ok = fl >= 0 && fcntl(fd, F_SETFL, fl | O_DIRECT) == 0;
    void *p = NULL;
    if (ok && posix_memalign(&p, 4096, 4096) == 0) {
        memset(p, 0, 4096);
        ok = pwrite(fd, p, 4096, 0) == 4096;
    } else {
        ok = false;
    }
    free(p);
    close(fd);
    close(mine);
    if (!ok)
        fprintf(stderr, "%s: /tmp takes no O_DIRECT writes: direct I/O "
                "not checked\n", who);
    return ok;
}

/* 1300 packets of 500-3500 bytes in passes of `step` bytes (each pass
 * ends its batch: tails of every length carried), with or without the
 * writer thread, through --direct-io: the file has them all, intact, in
 * order, exactly as long as what was framed (the tail written at the
 * end), its descriptor without O_DIRECT again and positioned at its end;
 * after each pass the file holds whole blocks, and what it does not hold
 * yet is the tail. */
/* A file session of a 4 MiB ring through --direct-io, with the writer
 * thread if `thread`; *mine: the test's own descriptor of its file. */
static svc_session *direct_session(svf_fx *f, bool thread, int *mine)
{
    if (thread)
        ck_assert_int_eq(svc_set_file_writer_thread(f->svc, true), 0);
    svc_set_file_direct(f->svc, true);
    int fd = svf_temp_file(mine);
    svf_cfg_init(&f->c, 4096, 0);
    svf_cfg_file(&f->c);
    return svf_enable_fd(f, fd);
}

static void direct_file(svf_fx *f, bool thread, size_t step)
{
    bool ok = direct_ok("direct_file");
    int mine;
    svc_session *s = direct_session(f, thread, &mine);
    ck_assert(s->direct == ok);
    if (ok)
        ck_assert(fcntl(mine, F_GETFL) & O_DIRECT);
    uint32_t id = 0;
    for (uint32_t v = 0; v < 1300; v += 100) {
        id = put_big_range(f, id, v, v + 100);
        bool more = true;
        while (more)
            ck_assert_int_eq(svc_session_write_file_step(f->svc, s, step,
                                                         &more), 0);
        if (ok) {   /* the file so far: whole blocks, the rest held */
            ck_assert_int_eq(s->direct_off % SVC_FILE_DIRECT_ALIGN, 0);
            ck_assert_int_eq(s->direct_off + s->direct_tail_len,
                             (long)s->bytes_written_to_file);
            ck_assert_int_le(svf_file_size(mine), s->direct_off);
        }
    }
    ck_assert_int_eq(svc_session_write_file(f->svc, s), 0);
    ck_assert(!s->direct);
    uint32_t flag = 0;
    ck_assert_int_eq(check_big_file(mine, 1300, UINT32_MAX, &flag), 1300);
    long size = svf_file_size(mine);
    ck_assert_int_eq((long)s->bytes_written_to_file, size);
    ck_assert(!(fcntl(mine, F_GETFL) & O_DIRECT));
    if (ok) {
        ck_assert_uint_eq(s->file_slice_bytes, 0);     /* all copied */
        ck_assert_int_eq(s->direct_off, size);
    }
    ck_assert_int_eq(lseek(mine, 0, SEEK_CUR), size);
    close(mine);
}

SVF_TEST(test_file_direct_through_the_thread, 1)
{
    direct_file(f, true, 20000);
}

SVF_TEST(test_file_direct_inline_in_small_steps, 1)
{
    direct_file(f, false, 3000);
}

SVF_TEST(test_file_direct_whole_passes, 1)
{
    direct_file(f, true, 0);
}

/* A direct session freed before its end (its consumer gone): the file
 * holds every byte framed so far, the tail too, and the descriptor the
 * consumer shares is without O_DIRECT again. */
SVF_TEST(test_file_direct_freed_midway_keeps_its_tail, 1)
{
    bool ok = direct_ok("test_file_direct_freed_midway_keeps_its_tail");
    int mine;
    svc_session *s = direct_session(f, true, &mine);
    put_big_range(f, 0, 0, 300);
    bool more = true;
    while (more)
        ck_assert_int_eq(svc_session_write_file_step(f->svc, s, 0, &more),
                         0);
    if (ok)
        ck_assert_uint_gt(s->direct_tail_len, 0);
    long framed = (long)s->bytes_written_to_file;
    svc_session_free(f->svc, s);
    ck_assert_int_eq(svf_file_size(mine), framed);
    ck_assert(!(fcntl(mine, F_GETFL) & O_DIRECT));
    uint32_t flag = 0;
    ck_assert_int_eq(check_big_file(mine, 300, UINT32_MAX, &flag), 300);
    close(mine);
}

/* A direct write the file system refuses (EINVAL: here a buffer that is
 * not aligned, on an O_DIRECT descriptor) goes through the page cache
 * instead, with O_DIRECT taken off for what follows: the bytes land at
 * their offset all the same. */
SVF_TEST(test_file_direct_write_refused_goes_through_the_page_cache, 1)
{
    (void)f;
    if (!direct_ok("test_file_direct_write_refused_goes_through_the_page_"
                   "cache"))
        return;
    int mine;
    int fd = svf_temp_file(&mine);
    int fl = fcntl(fd, F_GETFL);
    ck_assert_int_eq(fcntl(fd, F_SETFL, fl | O_DIRECT), 0);
    uint8_t *mem = NULL;
    ck_assert_int_eq(posix_memalign((void **)&mem, 4096, 3 * 4096), 0);
    for (size_t i = 0; i < 3 * 4096; i++)
        mem[i] = (uint8_t)(i * 7);
    svc_fw_batch b;
    memset(&b, 0, sizeof b);
    b.fd = fd;
    b.direct = true;
    b.buf = mem + 1;                  /* misaligned: O_DIRECT says EINVAL */
    b.direct_len = 2 * 4096;
    b.direct_off = 4096;
    ck_assert_int_eq(svc_fw_write_batch(&b), 0);
    ck_assert(!(fcntl(mine, F_GETFL) & O_DIRECT));
    ck_assert_int_eq(svf_file_size(mine), 3 * 4096);
    uint8_t back[2 * 4096];
    ck_assert_int_eq(pread(mine, back, sizeof back, 4096),
                     (ssize_t)sizeof back);
    ck_assert_mem_eq(back, mem + 1, sizeof back);
    free(mem);
    close(fd);
    close(mine);
}

/* A packet larger than a direct batch (4 MiB) moves to aligned memory
 * with the tail before it, and is written whole. */
SVF_TEST(test_file_direct_packet_larger_than_a_batch, 1)
{
    if (!direct_ok("test_file_direct_packet_larger_than_a_batch"))
        return;
    packet_larger_than_a_batch(f, true);
}

/* Not aligned where the session's first byte goes (the file held 100
 * bytes): written through the page cache, after those bytes. */
SVF_TEST(test_file_direct_refused_at_an_unaligned_start, 1)
{
    svc_set_file_direct(f->svc, true);
    int mine;
    int fd = svf_temp_file(&mine);
    uint8_t junk[100];
    memset(junk, 'j', sizeof junk);
    ck_assert_int_eq(write(fd, junk, sizeof junk), 100);
    svf_cfg_init(&f->c, 4096, 0);
    svf_cfg_file(&f->c);
    svc_session *s = svf_enable_fd(f, fd);
    ck_assert(!s->direct);
    ck_assert(!(fcntl(mine, F_GETFL) & O_DIRECT));
    put_big_range(f, 0, 0, 50);
    ck_assert_int_eq(svc_session_write_file(f->svc, s), 0);
    ck_assert_int_eq(svf_file_size(mine),
                     100 + (long)s->bytes_written_to_file);
    ck_assert_int_eq(s->direct_off, 0);
    close(mine);
}

/* A descriptor open with O_APPEND (pwrite() appends there whatever the
 * offset, so the block holding the tail could not be written again):
 * refused, written through the page cache, the file exact. */
SVF_TEST(test_file_direct_refused_with_o_append, 1)
{
    svc_set_file_direct(f->svc, true);
    int mine;
    int fd = svf_temp_file(&mine);
    ck_assert_int_eq(fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_APPEND), 0);
    svf_cfg_init(&f->c, 4096, 0);
    svf_cfg_file(&f->c);
    svc_session *s = svf_enable_fd(f, fd);
    ck_assert(!s->direct);
    ck_assert(!(fcntl(mine, F_GETFL) & O_DIRECT));
    put_big_range(f, 0, 0, 300);
    bool more = true;
    while (more)
        ck_assert_int_eq(svc_session_write_file_step(f->svc, s, 3000, &more),
                         0);
    ck_assert_int_eq(svc_session_write_file(f->svc, s), 0);
    uint32_t flag = 0;
    ck_assert_int_eq(check_big_file(mine, 300, UINT32_MAX, &flag), 300);
    ck_assert_int_eq(svf_file_size(mine), (long)s->bytes_written_to_file);
    close(mine);
}

/* Cloned into a file mid-session, a direct session's tail (< 4 KiB, not
 * in the file yet) goes to its file first, so the clone's copy of that
 * file is whole; O_DIRECT is back on afterwards and the source's own
 * file still ends whole and exact. */
SVF_TEST(test_file_direct_clone_into_a_file_has_the_tail, 1)
{
    bool ok = direct_ok("test_file_direct_clone_into_a_file_has_the_tail");
    int mine;
    svc_session *s = direct_session(f, true, &mine);
    uint32_t id = put_big_range(f, 0, 0, 300);
    bool more = true;
    while (more)
        ck_assert_int_eq(svc_session_write_file_step(f->svc, s, 0, &more),
                         0);
    if (ok)
        ck_assert_uint_gt(s->direct_tail_len, 0);
    uint64_t src_bytes = s->bytes_written_to_file;
    id = put_big_range(f, id, 300, 400);  /* in the buffer, not the file */
    char err[200] = "";
    svc_session *k = svc_session_clone(f->svc, NULL, svc_session_id(s),
                                       NULL, err, sizeof err);
    ck_assert_msg(k != NULL, "%s", err);
    int kmine;
    int kfd = svf_temp_file(&kmine);
    ck_assert_int_eq(svc_session_clone_file(f->svc, k, kfd, err, sizeof err),
                     1);
    uint32_t flag = 0;
    ck_assert_int_eq(check_big_file(kmine, 400, UINT32_MAX, &flag), 400);
    ck_assert_int_eq(svf_file_size(kmine),
                     (long)(src_bytes + k->bytes_written_to_file));
    if (ok)
        ck_assert(fcntl(mine, F_GETFL) & O_DIRECT);
    put_big_range(f, id, 400, 500);
    ck_assert_int_eq(svc_session_write_file(f->svc, s), 0);
    ck_assert_int_eq(check_big_file(mine, 500, UINT32_MAX, &flag), 500);
    ck_assert_int_eq(svf_file_size(mine), (long)s->bytes_written_to_file);
    close(kmine);
    close(mine);
}

/* Commits big packets v = from .. to - 1 (one chunk each, page 0). */
static uint32_t put_big_range(svf_fx *f, uint32_t id, uint32_t from,
                              uint32_t to)
{
    static uint8_t pk[8192];
    for (uint32_t v = from; v < to; v++)
        id = commit_packet(f, id, pk, big_packet(pk, v, BIG_STR_LEN(v),
                                                 false), false);
    return id;
}

/* Records and records with a non-zero previous_packet_dropped in a file
 * of Trace.packet records, counted by decoding each packet (protobuf-c
 * keeps the last value of a repeated scalar field, as any reader). */
static void count_file_records(int fd, uint64_t *records, uint64_t *flagged)
{
    long size, off = 0;
    uint8_t *buf = svf_file_bytes(fd, &size);
    *records = *flagged = 0;
    while (off < size) {
        uint64_t len = next_record(buf, size, &off);
        Perfetto__Protos__TracePacket *p =
            perfetto__protos__trace_packet__unpack(NULL, len, buf + off);
        ck_assert_ptr_nonnull(p);
        (*records)++;
        *flagged += p->previous_packet_dropped != 0;
        perfetto__protos__trace_packet__free_unpacked(p, NULL);
        off += (long)len;
    }
    free(buf);
}

/* TracePacket { for_testing { seq_value: v } } followed by `extra` raw
 * top-level bytes; returns its length. */
static size_t tagged_packet(uint8_t *out, uint32_t v, const uint8_t *extra,
                            size_t nextra)
{
    size_t n = 0;
    out[n++] = 0xA2;                         /* for_testing (900) */
    out[n++] = 0x38;
    out[n++] = 2;
    out[n++] = 0x10;                         /* seq_value */
    out[n++] = (uint8_t)(v & 0x7f);
    if (nextra > 0)               /* extra may be NULL then */
        memcpy(out + n, extra, nextra);
    return n + nextra;
}

/* GetTraceStats' shmtrace_file for session s (asserted present). */
static Perfetto__Protos__TraceStats *file_stats(svf_fx *f, svc_session *s)
{
    Perfetto__Protos__TraceStats *st = svc_stats_build(f->svc, s);
    ck_assert_ptr_nonnull(st);
    ck_assert_ptr_null(st->shmtrace_file);   /* not in the trace's own */
    ck_assert_int_eq(svc_stats_add_file(st, s), 0);
    ck_assert_ptr_nonnull(st->shmtrace_file);
    return st;
}

/* previous_packet_dropped (42) = 257, 5 then 0, and 1, as raw fields. */
static const uint8_t own_loss_257[] = {0xD0, 0x02, 0x81, 0x02};
static const uint8_t own_loss_5_then_0[] = {0xD0, 0x02, 0x05, 0xD0, 0x02,
                                            0x00};
static const uint8_t own_loss_1[] = {0xD0, 0x02, 0x01};
static const uint8_t service_field_10[] = {0x50, 0x07};

/* A write_into_file session counts what it frames into the file as a
 * reader of the file would (GetTraceStats' shmtrace_file): every record,
 * and the records whose last previous_packet_dropped is non-zero: the
 * packet's own (1-byte and 2-byte values; a later 0 clears an earlier
 * 5), or the trailer's after an invalid packet; on packets copied into
 * the batch and on packets written in place, whole and in two slices.
 * complete only once the session has ended. */
SVF_TEST(test_file_counts_what_it_writes, 1)
{
    svc_set_file_in_place_min(f->svc, 512);    /* big packets in place */
    int mine;
    int fd = svf_temp_file(&mine);
    svf_cfg_init(&f->c, 4096, 0);
    svf_cfg_file(&f->c);
    f->c.cfg.has_flush_timeout_ms = true;
    f->c.cfg.flush_timeout_ms = 100;
    svc_session *s = svf_enable_fd(f, fd);
    svc_producer *p = f->p[0];
    static uint8_t pk[8192], fr[8192];
    size_t k = 0;
    /* one chunk of five small packets: 0 flagged by itself, 1 not (its
     * last 42 is 0), 2 invalid, 3 flagged by the service, 4 not */
    const struct { const uint8_t *x; size_t n; } small[5] = {
        { own_loss_257, sizeof own_loss_257 },
        { own_loss_5_then_0, sizeof own_loss_5_then_0 },
        { service_field_10, sizeof service_field_10 },
        { NULL, 0 }, { NULL, 0 } };
    for (uint32_t v = 0; v < 5; v++) {
        size_t len = tagged_packet(pk, v, small[v].x, small[v].n);
        fr[k++] = (uint8_t)len;
        memcpy(fr + k, pk, len);
        k += len;
    }
    write_raw_chunk(p, 0, 1, 0, fr, k, 5, 0);
    svf_commit(f->svc, p, 0, 0, f->buf, 0);
    /* a big packet flagged by itself, in two chunks (two slices) */
    size_t len = big_packet(pk, 5, 2000, false);
    memcpy(pk + len, own_loss_1, sizeof own_loss_1);
    uint32_t id = commit_packet(f, 1, pk, len + sizeof own_loss_1, true);
    /* a big one in one chunk flagged by itself, and one not */
    len = big_packet(pk, 6, 1500, false);
    memcpy(pk + len, own_loss_257, sizeof own_loss_257);
    id = commit_packet(f, id, pk, len + sizeof own_loss_257, false);
    put_big_range(f, id, 7, 8);
    ck_assert_int_eq(svc_session_write_file(f->svc, s), 0);

    uint64_t records, flagged;
    count_file_records(mine, &records, &flagged);
    ck_assert_uint_eq(flagged, 4);       /* 0, 3, 5 and 6 */
    Perfetto__Protos__TraceStats *st = file_stats(f, s);
    ck_assert_uint_eq(st->shmtrace_file->packets, records);
    ck_assert_uint_eq(st->shmtrace_file->flagged_packets, flagged);
    ck_assert_uint_eq(st->shmtrace_file->bytes, svf_file_size(mine));
    ck_assert(!st->shmtrace_file->complete);     /* still running */
    svc_stats_free(st);

    /* ended (the final flush times out): the last pass is counted too */
    ck_assert_int_eq(svc_session_disable(f->svc, s), 0);
    svc_tick(f->svc, svc_now_ms() + 60000);
    ck_assert(svc_session_is_disabled(s));
    count_file_records(mine, &records, &flagged);
    ck_assert_uint_eq(flagged, 4);
    st = file_stats(f, s);
    ck_assert_uint_eq(st->shmtrace_file->packets, records);
    ck_assert_uint_eq(st->shmtrace_file->flagged_packets, flagged);
    ck_assert_uint_eq(st->shmtrace_file->bytes, svf_file_size(mine));
    ck_assert(st->shmtrace_file->complete);
    svc_stats_free(st);
    /* a session without a file has none */
    svf_cfg_init(&f->c, 64, 0);
    svc_session *plain = svc_session_enable(f->svc, NULL, &f->c.cfg, -1,
                                            NULL, 0);
    ck_assert_ptr_nonnull(plain);
    st = svc_stats_build(f->svc, plain);
    ck_assert_int_eq(svc_stats_add_file(st, plain), 0);
    ck_assert_ptr_null(st->shmtrace_file);
    svc_stats_free(st);
    close(mine);
}

/* A file whose writes failed is never reported complete: the consumer
 * then reads the file instead of trusting counts it does not hold. */
SVF_TEST(test_file_counts_not_complete_after_a_failed_write, 1)
{
    int mine;
    int fd = svf_temp_file(&mine);
    svf_cfg_file(&f->c);
    f->c.cfg.has_flush_timeout_ms = true;
    f->c.cfg.flush_timeout_ms = 100;
    svc_session *s = svf_enable_fd(f, fd);
    svf_put(f, f->p[0], 0, 1, 0, 0, 3);
    /* the descriptor cannot be written through */
    int ro = open("/dev/null", O_RDONLY);
    ck_assert_int_ge(ro, 0);
    close(s->out_fd);
    s->out_fd = ro;
    ck_assert_int_lt(svc_session_write_file(f->svc, s), 0);
    ck_assert(s->file_failed);
    ck_assert_int_eq(svc_session_disable(f->svc, s), 0);
    svc_tick(f->svc, svc_now_ms() + 60000);
    ck_assert(svc_session_is_disabled(s));
    Perfetto__Protos__TraceStats *st = file_stats(f, s);
    ck_assert(!st->shmtrace_file->complete);
    svc_stats_free(st);
    close(mine);
}

typedef struct {
    int fd;
    int delay_ms;
    int gate_fd;        /* >= 0: start early when a byte comes on it */
    uint8_t *data;
    size_t len, cap;
} slow_reader;

/* Reads the pipe to its end, after delay_ms (or, with a gate, as soon as
 * gate_fd is readable, at most delay_ms). */
static void *slow_read(void *arg)
{
    slow_reader *r = arg;
    if (r->gate_fd >= 0) {
        struct pollfd g = {.fd = r->gate_fd, .events = POLLIN};
        (void)poll(&g, 1, r->delay_ms);
    } else {
        usleep((useconds_t)r->delay_ms * 1000);
    }
    for (;;) {
        if (r->len == r->cap) {
            r->cap = r->cap ? r->cap * 2 : 65536;
            r->data = realloc(r->data, r->cap);
            ck_assert_ptr_nonnull(r->data);
        }
        ssize_t n = read(r->fd, r->data + r->len, r->cap - r->len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        r->len += (size_t)n;
    }
    return NULL;
}

/* A file session through the writer thread whose file is a 4 KiB pipe
 * that *r reads from only after 300 ms (in *th), or, with gate_fd >= 0,
 * once a byte comes on gate_fd (at most 2 s): the thread's writev is held
 * up meanwhile. */
static svc_session *held_up_session(svf_fx *f, uint32_t size_kb,
                                    slow_reader *r, pthread_t *th,
                                    int gate_fd)
{
    ck_assert_int_eq(svc_set_file_writer_thread(f->svc, true), 0);
    svc_set_file_in_place_min(f->svc, 512);    /* big packets in place */
    int mine;
    int fd = svf_temp_file(&mine);
    close(mine);
    svf_cfg_init(&f->c, size_kb, 0);
    svf_cfg_file(&f->c);
    svc_session *s = svf_enable_fd(f, fd);
    int pfd[2];
    ck_assert_int_eq(pipe(pfd), 0);
    fcntl(pfd[1], F_SETPIPE_SZ, 4096);
    close(s->out_fd);
    s->out_fd = pfd[1];
    *r = (slow_reader){ .fd = pfd[0], .delay_ms = gate_fd >= 0 ? 2000 : 300,
                        .gate_fd = gate_fd };
    ck_assert_int_eq(pthread_create(th, NULL, slow_read, r), 0);
    return s;
}

/* The rest of the pass, then the pipe's end: r->data holds the file. */
static void held_up_finish(svf_fx *f, svc_session *s, slow_reader *r,
                           pthread_t th)
{
    ck_assert_int_eq(svc_session_write_file(f->svc, s), 0);
    close(s->out_fd);
    s->out_fd = -1;
    ck_assert_int_eq(pthread_join(th, NULL), 0);
    close(r->fd);
}

/* The pipe's bytes (r->data, freed here), as a file, through
 * check_big_file: n big packets, all there and intact, and as many bytes
 * as the session says it wrote. */
static void held_up_check_big(svc_session *s, slow_reader *r, uint32_t n)
{
    int mine;
    int out = svf_temp_file(&mine);
    close(out);
    ck_assert_int_eq(write(mine, r->data, r->len), (ssize_t)r->len);
    uint32_t flag = 0;
    ck_assert_int_eq(check_big_file(mine, n, UINT32_MAX, &flag), (int)n);
    ck_assert_uint_eq((uint64_t)r->len, s->bytes_written_to_file);
    free(r->data);
    close(mine);
}

/* The writer thread (svc_fwrite.h) writes a pass's slices of large
 * packets while the main thread takes more chunks. Here its writev is
 * held up (a 4 KiB pipe read only after 300 ms) while the commits that
 * follow lap the 64 KiB ring over every packet in flight: the buffer's
 * write fence must hold each commit until the bytes it would overwrite
 * are out, so the file has every packet intact (without the fence the
 * pipe would carry the new packets' bytes in the old ones' place). */
SVF_TEST(test_file_writer_thread_keeps_slices_until_written, 1)
{
    slow_reader r;
    pthread_t th;
    svc_session *s = held_up_session(f, 64, &r, &th, -1);
    /* 30 packets take 32256 bytes of the ring, the next 20 another
     * 40000: the second lot overwrites the first lot's oldest records */
    const uint32_t first = 30, n = 50;
    uint32_t id = put_big_range(f, 0, 0, first);
    ck_assert_uint_eq(tb_get_stats(svc__buffer(f->svc, s->buf_ids[0],
                                               NULL))->write_wrap_count, 0);
    bool more = true;
    ck_assert_int_eq(svc_session_write_file_step(f->svc, s, 1u << 30,
                                                 &more), 0);
    ck_assert(!more);
    put_big_range(f, id, first, n);
    const tb_stats *st = tb_get_stats(svc__buffer(f->svc, s->buf_ids[0],
                                                  NULL));
    ck_assert_uint_gt(st->write_wrap_count, 0);   /* it did lap the ring */
    held_up_finish(f, s, &r, th);
    held_up_check_big(s, &r, n);
    ck_assert_uint_eq(s->invalid_packets, 0);
}

/* A drained ring starts writing again at its start (libbuf/tb_rewind.c:
 * 2 MiB on in a 16 MiB ring) only where no batch in flight holds slices:
 * the service's write probe (svc_fw_busy) says so. Here a pass hands the
 * writer thread slices of the ring's first ~2.3 MiB, whose writev is held
 * up (a 4 KiB pipe, read when the test opens its gate, at most 2 s on):
 * the commits that follow do not restart (a restart would wait in the
 * fence for the held-up batch until the 2 s ran out); once the batch is
 * written and the next pass read, the next commit restarts, and the file
 * has every packet, intact. */
SVF_TEST(test_file_rewind_not_onto_slices_in_flight, 1)
{
    slow_reader r;
    pthread_t th;
    int gate[2];
    ck_assert_int_eq(pipe(gate), 0);
    svc_session *s = held_up_session(f, 16384, &r, &th, gate[0]);
    tb_buffer *buf = svc__buffer(f->svc, s->buf_ids[0], NULL);
    const uint32_t first = 1150, n = 1250;
    uint32_t id = put_big_range(f, 0, 0, first);
    ck_assert_uint_gt(tb_used_size(buf), 2u << 20);  /* past the threshold */
    ck_assert_uint_eq(tb_get_stats(buf)->write_wrap_count, 0);
    bool more = true;
    ck_assert_int_eq(svc_session_write_file_step(f->svc, s, 1u << 30,
                                                 &more), 0);
    ck_assert(!more);                       /* all read, the batch held up */
    size_t bytes;
    ck_assert_uint_ne(svc_fw_in_flight(f->svc->fw, s->fwb, SVC_FILE_BATCHES,
                                       &bytes), 0);
    id = put_big_range(f, id, first, first + 50);
    ck_assert_uint_eq(tb_get_stats(buf)->write_wrap_count, 0);
    ck_assert_uint_ne(svc_fw_in_flight(f->svc->fw, s->fwb, SVC_FILE_BATCHES,
                                       &bytes), 0);    /* still held up */
    ck_assert_int_eq(write(gate[1], "", 1), 1);
    svc_fw_drain(f->svc->fw);
    ck_assert_int_eq(svc_session_write_file_step(f->svc, s, 1u << 30,
                                                 &more), 0);
    put_big_range(f, id, first + 50, n);
    ck_assert_uint_eq(tb_get_stats(buf)->write_wrap_count, 1);
    ck_assert_uint_lt(tb_used_size(buf), 1u << 20);
    held_up_finish(f, s, &r, th);
    held_up_check_big(s, &r, n);
    ck_assert_uint_eq(s->invalid_packets, 0);
    close(gate[0]);
    close(gate[1]);
}

/* A session of large and then small packets: the small packets' batch is
 * written on the main thread, but only after the large packets' batch
 * that the writer thread still holds (a 4 KiB pipe read after 300 ms);
 * written at once, it would land in the file before (or inside) it. */
SVF_TEST(test_file_inline_batch_waits_for_the_thread_batch, 1)
{
    slow_reader r;
    pthread_t th;
    svc_session *s = held_up_session(f, 4096, &r, &th, -1);
    const uint32_t big = 30, n = 130;
    uint32_t id = put_big_range(f, 0, 0, big);
    bool more = true;
    ck_assert_int_eq(svc_session_write_file_step(f->svc, s, 1u << 30,
                                                 &more), 0);
    /* small packets, 10 to a chunk */
    static uint8_t pk[256], fr[4096];
    for (uint32_t v = big; v < n; v += 10) {
        size_t k = 0;
        for (uint32_t j = v; j < v + 10; j++) {
            size_t len = big_packet(pk, j, 20, false);
            k += svc_varint(fr + k, len);
            memcpy(fr + k, pk, len);
            k += len;
        }
        write_raw_chunk(f->p[0], 0, 1, id++, fr, k, 10, 0);
        svf_commit(f->svc, f->p[0], 0, 0, f->buf, 0);
    }
    ck_assert_int_eq(svc_session_write_file_step(f->svc, s, 1u << 30,
                                                 &more), 0);
    ck_assert_uint_gt(s->file_staged_bytes, 0);
    held_up_finish(f, s, &r, th);
    /* every test packet, in order, each str intact */
    long off = 0, size = (long)r.len;
    uint32_t want = 0;
    while (off < size) {
        uint64_t len = next_record(r.data, size, &off);
        Perfetto__Protos__TracePacket *p =
            perfetto__protos__trace_packet__unpack(NULL, len, r.data + off);
        ck_assert_ptr_nonnull(p);
        if (p->trusted_packet_sequence_id != 1 && p->for_testing) {
            ck_assert_uint_eq(p->for_testing->seq_value, want);
            size_t L = want < big ? BIG_STR_LEN(want) : 20;
            ck_assert_uint_eq(strlen(p->for_testing->str), L);
            for (size_t i = 0; i < L; i++)
                ck_assert_int_eq(p->for_testing->str[i],
                                 (char)('a' + (want + i) % 26));
            want++;
        }
        perfetto__protos__trace_packet__free_unpacked(p, NULL);
        off += (long)len;
    }
    ck_assert_uint_eq(want, n);
    ck_assert_uint_eq((uint64_t)r.len, s->bytes_written_to_file);
    free(r.data);
}

/* A pass's batches of large packets (up to SVC_FILE_IOV pieces each) go
 * to the writer thread several at a time, not just two: the session
 * fills another while those in flight hold at most
 * SVC_FILE_IN_FLIGHT_BYTES (or just one is in flight), and never more
 * than its SVC_FILE_BATCHES. Here the thread is held up (a 4 KiB pipe read
 * after 300 ms) while steps of a pass hand out 4000 packets of 500-3499
 * bytes (~680 KB per batch): more than two batches go in flight, what is
 * in flight stays within the bound, and the file comes out whole. */
/* Several batches in flight (held up by a slow pipe) within the bound,
 * and the file whole: batches of slices or, with `copied`, batches of
 * packets copied into them (under the in-place threshold), handed to the
 * thread because the session says so. */
static void several_in_flight(svf_fx *f, bool copied)
{
    slow_reader r;
    pthread_t th;
    svc_session *s = held_up_session(f, 16384, &r, &th, -1);
    if (copied) {
        svc_set_file_in_place_min(f->svc, 0);      /* 8 KiB: all copied */
        svc_set_file_copied_mode(f->svc, SVC_FILE_COPIED_THREAD);
    }
    const uint32_t n = 4000;
    put_big_range(f, 0, 0, n);
    int most = 0;
    bool more = true;
    while (more) {
        uint64_t before = s->bytes_written_to_file;
        ck_assert_int_eq(svc_session_write_file_step(f->svc, s, 1u << 20,
                                                     &more), 0);
        size_t bytes, largest = 0;
        uint32_t mask = svc_fw_in_flight(f->svc->fw, s->fwb,
                                         SVC_FILE_BATCHES, &bytes);
        int count = __builtin_popcount(mask);
        for (int i = 0; i < SVC_FILE_BATCHES; i++)
            if (mask >> i & 1u && s->fwb[i].len + s->fwb[i].slice_bytes >
                                  largest)
                largest = s->fwb[i].len + s->fwb[i].slice_bytes;
        /* the bound, or one batch if larger; the last one handed out
         * (a step ends by handing out what it has) may take it past */
        size_t bound = SVC_FILE_IN_FLIGHT_BYTES > largest ?
                       SVC_FILE_IN_FLIGHT_BYTES : largest;
        ck_assert_uint_le(bytes, bound + largest);
        if (count > most)
            most = count;
        if (s->bytes_written_to_file == before)
            usleep(1000);          /* held up: the thread has them all */
    }
    ck_assert_int_gt(most, 2);
    held_up_finish(f, s, &r, th);
    held_up_check_big(s, &r, n);
    if (copied) {
        ck_assert_uint_eq(s->file_slice_bytes, 0);
        ck_assert_uint_gt(s->file_copied_out_batches, 2);
    } else {
        ck_assert_uint_gt(s->file_slice_bytes, s->file_staged_bytes);
        ck_assert_uint_eq(s->file_copied_out_batches, 0);
    }
}

SVF_TEST(test_file_writer_thread_keeps_several_batches_in_flight, 1)
{
    several_in_flight(f, false);
}

SVF_TEST(test_file_writer_thread_keeps_copied_batches_in_flight, 1)
{
    several_in_flight(f, true);
}


/* The rule behind AUTO: the main thread busy at least 90% of the window,
 * and records of at least 512 bytes on average framed in it. */
START_TEST(test_file_copied_to_thread_rule)
{
    const uint64_t ms = 1000000;
    ck_assert(svc__copied_to_thread(95 * ms, 100 * ms, 1000 * 1024, 1000));
    ck_assert(svc__copied_to_thread(90 * ms, 100 * ms, 512 * 1000, 1000));
    ck_assert(!svc__copied_to_thread(89 * ms, 100 * ms, 1000 * 1024, 1000));
    ck_assert(!svc__copied_to_thread(50 * ms, 100 * ms, 1000 * 1024, 1000));
    ck_assert(!svc__copied_to_thread(95 * ms, 100 * ms, 511 * 1000, 1000));
    ck_assert(!svc__copied_to_thread(100 * ms, 100 * ms, 93 * 1000, 1000));
    ck_assert(!svc__copied_to_thread(5 * ms, 5 * ms, 0, 0));
    ck_assert(!svc__copied_to_thread(0, 0, 4096, 1));
}
END_TEST

/* A file that fails (a pipe nobody reads: EPIPE) fails the pass even
 * when its batches were in flight on the writer thread while the steps
 * went on: each batch's error is kept until the session reuses or waits
 * for that batch, and is returned then. */
SVF_TEST(test_file_writer_thread_reports_write_errors, 1)
{
    ck_assert_int_eq(svc_set_file_writer_thread(f->svc, true), 0);
    svc_set_file_in_place_min(f->svc, 512);    /* big packets in place */
    int mine;
    int fd = svf_temp_file(&mine);
    close(mine);
    svf_cfg_init(&f->c, 16384, 0);
    svf_cfg_file(&f->c);
    svc_session *s = svf_enable_fd(f, fd);
    int pfd[2];
    ck_assert_int_eq(pipe(pfd), 0);
    close(pfd[0]);
    signal(SIGPIPE, SIG_IGN);             /* as shmtraced does */
    close(s->out_fd);
    s->out_fd = pfd[1];
    put_big_range(f, 0, 0, 4000);
    int rc = 0;
    bool more = true;
    for (int i = 0; i < 100000 && more && rc == 0; i++)
        rc = svc_session_write_file_step(f->svc, s, 1u << 20, &more);
    if (rc == 0)
        rc = svc_session_write_file(f->svc, s);
    ck_assert_int_eq(rc, -EPIPE);
    /* A step returns the first error it reaps; the batches after it may
     * still be on the writer thread: they finish (and fail) before the
     * pipe is closed under them, as session_destroy does. */
    int later = svc__file_wait(f->svc, s);
    ck_assert(later == 0 || later == -EPIPE);
    size_t bytes;
    ck_assert_uint_eq(svc_fw_in_flight(f->svc->fw, s->fwb, SVC_FILE_BATCHES,
                                       &bytes), 0);
    close(s->out_fd);
    s->out_fd = -1;
}

/* 1300 packets of 500-3500 bytes through the writer thread, packets of
 * in_place_min bytes or more in place (0: the default, 8 KiB, so all
 * copied), batches of copied packets where `mode` says, in passes of
 * small steps (batches in flight): the file has them all, intact and in
 * order. */
static svc_session *thread_file(svf_fx *f, size_t in_place_min,
                                svc_file_copied_mode mode)
{
    ck_assert_int_eq(svc_set_file_writer_thread(f->svc, true), 0);
    svc_set_file_in_place_min(f->svc, in_place_min);
    svc_set_file_copied_mode(f->svc, mode);
    int mine;
    int fd = svf_temp_file(&mine);
    svf_cfg_init(&f->c, 4096, 0);
    svf_cfg_file(&f->c);
    svc_session *s = svf_enable_fd(f, fd);
    uint32_t id = 0;
    for (uint32_t v = 0; v < 1300; v += 100) {
        id = put_big_range(f, id, v, v + 100);
        bool more = true;
        while (more) {
            ck_assert_int_eq(svc_session_write_file_step(f->svc, s, 20000,
                                                         &more), 0);
        }
    }
    ck_assert_int_eq(svc_session_write_file(f->svc, s), 0);
    uint32_t flag = 0;
    ck_assert_int_eq(check_big_file(mine, 1300, UINT32_MAX, &flag), 1300);
    ck_assert_int_eq((long)s->bytes_written_to_file, svf_file_size(mine));
    close(mine);
    return s;
}

/* The same file through the writer thread as without it. */
SVF_TEST(test_file_writer_thread_writes_what_inline_writes, 1)
{
    svc_session *s = thread_file(f, 512, SVC_FILE_COPIED_AUTO);
    ck_assert_uint_gt(s->file_slice_bytes, s->file_staged_bytes);
}

/* Told to, the writer thread takes the batches of copied packets, and
 * the file is the same; told not to, it takes none. */
SVF_TEST(test_file_copied_batches_through_the_thread_when_told, 1)
{
    svc_session *s = thread_file(f, 0, SVC_FILE_COPIED_THREAD);
    ck_assert_uint_eq(s->file_slice_bytes, 0);
    ck_assert_uint_gt(s->file_copied_out_batches, 2);
}

SVF_TEST(test_file_copied_batches_inline_when_told, 1)
{
    svc_session *s = thread_file(f, 0, SVC_FILE_COPIED_INLINE);
    ck_assert_uint_eq(s->file_slice_bytes, 0);
    ck_assert_uint_eq(s->file_copied_out_batches, 0);
}

/* A file session's batch memory outlives it as the service's spare:
 * the next file session takes it (its pages already faulted in), and its
 * file is whole and its own (thread_file reads every packet back); a
 * third, while the second still has it, maps its own; of two freed, one
 * is kept and the other unmapped. */
SVF_TEST(test_file_batch_arena_kept_for_the_next_session, 1)
{
    svc_session *s = thread_file(f, 0, SVC_FILE_COPIED_INLINE);
    uint8_t *arena = s->fwb_arena;
    ck_assert_ptr_nonnull(arena);
    ck_assert_ptr_null(f->svc->fwb_spare);
    svc_session_free(f->svc, s);
    ck_assert_ptr_eq(f->svc->fwb_spare, arena);
    s = thread_file(f, 0, SVC_FILE_COPIED_THREAD);
    ck_assert_ptr_eq(s->fwb_arena, arena);
    ck_assert_ptr_null(f->svc->fwb_spare);
    svc_session *s3 = thread_file(f, 0, SVC_FILE_COPIED_INLINE);
    ck_assert_ptr_nonnull(s3->fwb_arena);
    ck_assert_ptr_ne(s3->fwb_arena, arena);
    svc_session_free(f->svc, s3);
    ck_assert_ptr_nonnull(f->svc->fwb_spare);     /* s3's, kept */
    svc_session_free(f->svc, s);                  /* s's unmapped */
    ck_assert_ptr_ne(f->svc->fwb_spare, arena);
}

/* AUTO's input, as the test describes it (svc__set_load_clock): each
 * read of the clocks moves wall time on by 10 ms (two windows) and the
 * main thread's CPU time by busy_ns. Static: it outlives the test body. */
typedef struct {
    uint64_t wall, cpu, busy_ns;
    unsigned reads;
} fake_load;
static fake_load the_load;

static void fake_load_clock(void *ctx, uint64_t *wall, uint64_t *cpu)
{
    fake_load *l = ctx;
    l->wall += 10000000;
    l->cpu += l->busy_ns;
    l->reads++;
    *wall = l->wall;
    *cpu = l->cpu;
}

static svc_session *file_under_load(svf_fx *f, uint64_t busy_ns)
{
    the_load = (fake_load){ .wall = 1000000000, .busy_ns = busy_ns };
    svc__set_load_clock(f->svc, fake_load_clock, &the_load);
    svc_session *s = thread_file(f, 0, SVC_FILE_COPIED_AUTO);
    ck_assert_uint_gt(the_load.reads, 2);    /* several windows ended */
    ck_assert_uint_eq(s->file_slice_bytes, 0);
    return s;
}

/* By default (AUTO) a main thread with time to spare writes the batches
 * of copied packets itself: 1 ms of CPU in every 10 ms. */
SVF_TEST(test_file_copied_batches_inline_while_the_service_idles, 1)
{
    svc_session *s = file_under_load(f, 1000000);
    ck_assert_uint_eq(s->file_copied_out_batches, 0);
}

/* ... and a saturated one (10 ms in 10 ms) hands them to the writer
 * thread, these packets averaging well over SVC_FILE_COPIED_OUT_MIN
 * bytes; the file is the same (thread_file checks it). */
SVF_TEST(test_file_copied_batches_to_the_thread_while_the_service_is_busy, 1)
{
    svc_session *s = file_under_load(f, 10000000);
    ck_assert_uint_gt(s->file_copied_out_batches, 0);
}

/* In file mode a packet of at least svc_set_file_in_place_min bytes is
 * written from where it lies in its buffer (its bytes counted in
 * file_slice_bytes), a smaller one copied into the file batch; here with
 * the writer thread, as in shmtraced. The file is the same either way. 200 of the fixture's big packets (500-3500 bytes),
 * one chunk each. */
static void in_place_threshold(svf_fx *f, size_t min)
{
    static uint8_t pk[8192];
    uint64_t sliced = 0, copied = 0;
    ck_assert_int_eq(svc_set_file_writer_thread(f->svc, true), 0);
    svc_set_file_in_place_min(f->svc, min);
    int mine;
    int fd = svf_temp_file(&mine);
    svf_cfg_init(&f->c, 4096, 0);
    svf_cfg_file(&f->c);
    svc_session *s = svf_enable_fd(f, fd);
    put_big_range(f, 0, 0, 200);
    ck_assert_int_eq(svc_session_write_file(f->svc, s), 0);
    for (uint32_t v = 0; v < 200; v++) {
        size_t len = big_packet(pk, v, BIG_STR_LEN(v), false);
        if (len >= (min ? min : SVC_FILE_IN_PLACE_MIN))
            sliced += len;
        else
            copied += len;
    }
    ck_assert_uint_gt(copied, 0);
    if (min)
        ck_assert_uint_gt(sliced, 0);        /* both kinds */
    uint32_t flag = 0;
    ck_assert_int_eq(check_big_file(mine, 200, UINT32_MAX, &flag), 200);
    ck_assert_int_eq((long)s->bytes_written_to_file, svf_file_size(mine));
    ck_assert_uint_eq(s->file_slice_bytes, sliced);
    ck_assert_uint_ge(s->file_staged_bytes, copied);
    close(mine);
}

/* 2000: the packets of 2000 bytes or more are written in place, and only
 * those; the others copied. */
SVF_TEST(test_file_in_place_from_the_threshold, 1)
{
    in_place_threshold(f, 2000);
}

/* The default, 8 KiB: all of these are copied (in the daemon that made
 * 1 KiB packets cheaper: svc_read.c). */
SVF_TEST(test_file_in_place_default_copies_under_8k, 1)
{
    ck_assert_uint_eq(SVC_FILE_IN_PLACE_MIN, 8192);
    in_place_threshold(f, 0);
}

/* Small packets are copied into the file batch without a library call
 * (svc_read.c copy_small: moves from both ends): every size from 2 to 140
 * bytes comes out byte for byte, followed only by the trailer. */
static size_t small_packet(uint8_t *out, size_t n, uint32_t v)
{
    size_t k = 0;
    if (n <= 4) {                      /* timestamp, an (n - 1)-byte varint */
        out[k++] = 0x40;
        for (size_t i = 0; i + 2 < n; i++)
            out[k++] = (uint8_t)(0x80 | (v + i));
        out[k++] = 0x01;
        return k;
    }
    size_t L = 0, inner = 0;
    for (; L < n; L++) {               /* for_testing { str: L letters } */
        inner = 1 + svc_varint_len(L) + L;
        if (2 + svc_varint_len(inner) + inner >= n)
            break;
    }
    out[k++] = 0xA2;
    out[k++] = 0x38;
    k += svc_varint(out + k, inner);
    out[k++] = 0x0A;
    k += svc_varint(out + k, L);
    for (size_t i = 0; i < L; i++)
        out[k++] = (uint8_t)('a' + (v + i) % 26);
    return k;
}

SVF_TEST(test_file_mode_small_packets_every_size, 1)
{
    int mine;
    int fd = svf_temp_file(&mine);
    svf_cfg_init(&f->c, 4096, 0);
    svf_cfg_file(&f->c);
    svc_session *s = svf_enable_fd(f, fd);
    uint8_t pk[256];
    uint32_t id = 0;
    for (size_t n = 2; n <= 140; n++) {
        size_t len = small_packet(pk, n, (uint32_t)n);
        if (len != n)
            continue;                  /* not reachable with this shape */
        commit_fragment(f, id++, pk, len, 0);
    }
    ck_assert_int_eq(svc_session_write_file(f->svc, s), 0);
    ck_assert_uint_eq(s->invalid_packets, 0);

    long size, off = 0;
    uint8_t *buf = svf_file_bytes(mine, &size);
    size_t want = 2;
    while (off < size) {
        uint64_t len = next_record(buf, size, &off);
        Perfetto__Protos__TracePacket *tp =
            perfetto__protos__trace_packet__unpack(NULL, len, buf + off);
        ck_assert_msg(tp != NULL, "record at %ld (%zu bytes, next test "
                      "packet %zu) does not parse", off, (size_t)len, want);
        if (tp->trusted_packet_sequence_id != 1) {  /* not the service's */
            while (small_packet(pk, want, (uint32_t)want) != want)
                want++;                /* the sizes skipped above */
            ck_assert_uint_le(want, 140);
            ck_assert_uint_gt(len, want);
            ck_assert_uint_le(len, want + SVC_TRAILER_MAX);
            small_packet(pk, want, (uint32_t)want);
            ck_assert_msg(memcmp(buf + off, pk, want) == 0,
                          "packet of %zu bytes differs", want);
            /* what follows is the trailer alone: no stray bytes */
            Perfetto__Protos__TracePacket *tr =
                perfetto__protos__trace_packet__unpack(
                    NULL, len - want, buf + off + want);
            ck_assert_ptr_nonnull(tr);
            ck_assert(tr->has_trusted_packet_sequence_id);
            ck_assert_ptr_null(tr->for_testing);
            ck_assert(!tr->has_timestamp);
            perfetto__protos__trace_packet__free_unpacked(tr, NULL);
            want++;
        }
        perfetto__protos__trace_packet__free_unpacked(tp, NULL);
        off += (long)len;
    }
    ck_assert_uint_eq(want, 141);
    free(buf);
    close(mine);
}

SVF_TEST(test_periodic_flush_by_period_and_file_mode, 1)
{
    f->c.cfg.has_flush_period_ms = true;
    f->c.cfg.flush_period_ms = 200;
    svf_enable(f);
    svc_tick(f->svc, svc_now_ms() + 250);
    ck_assert_int_eq(svf_rec.flush, 1);
    /* File mode, write_flush_mode unspecified: every 5 s whatever
     * flush_period_ms says. */
    svf_cfg fc;
    svf_cfg_init(&fc, 64, 0);
    svf_cfg_file(&fc);
    fc.cfg.has_flush_period_ms = true;
    fc.cfg.flush_period_ms = 200;
    int fd = open("/dev/null", O_WRONLY);
    svc_session *fs = svc_session_enable(f->svc, NULL, &fc.cfg, fd, NULL, 0);
    ck_assert_ptr_nonnull(fs);
    ck_assert_uint_eq(fs->flush_period_ms, 5000);
}

/* A file-mode session of f with file_write_period_ms = period_ms (steps of
 * step_bytes, 0 = the default); returns the test's own descriptor of the
 * file. */
static int file_session(svf_fx *f, uint32_t period_ms, size_t step_bytes)
{
    int mine;
    int fd = svf_temp_file(&mine);
    svf_cfg_file(&f->c);
    f->c.cfg.has_file_write_period_ms = true;
    f->c.cfg.file_write_period_ms = period_ms;
    svc_set_file_step_bytes(f->svc, step_bytes);
    svf_enable_fd(f, fd);
    return mine;
}

/* Puts packets id, id + 1, ... (10 values each) until the buffer's
 * bytes_written reaches `bytes`; returns the next id. */
static uint32_t put_until(svf_fx *f, const tb_stats *st, uint32_t id,
                          uint64_t bytes)
{
    while (st->bytes_written < bytes) {
        svf_put(f, f->p[0], id % 8, 1, id, id * 10, 10);
        id++;
    }
    return id;
}

/* Ticks at `now` until no file pass has steps left. */
static void tick_until_written(svf_fx *f, uint64_t now)
{
    svc_tick(f->svc, now);
    while (svc_has_pending_steps(f->svc))
        svc_tick(f->svc, now);
}

/* A periodic file pass runs in steps of svc_set_file_step_bytes, one per
 * tick, so commits are served between them: the first tick writes part of
 * the buffer and no TraceStats yet; a chunk committed between steps is
 * read by the same pass; the last step ends with the one TraceStats
 * packet; nothing is written twice or lost. */
SVF_TEST(test_file_pass_runs_in_steps, 1)
{
    int mine = file_session(f, 100, 512);
    for (uint32_t i = 0; i < 40; i++)
        svf_put(f, f->p[0], i % 8, 1, i, i * 10, 10);
    uint64_t t = svc_now_ms() + 101;            /* the period is due */
    ck_assert(!svc_has_pending_steps(f->svc));
    svc_tick(f->svc, t);
    ck_assert(svc_has_pending_steps(f->svc));
    svf_readout r;
    svf_read_file_records(mine, &r);
    ck_assert_int_gt(r.values, 0);
    ck_assert_int_lt(r.values, 400);
    ck_assert_int_eq(r.n_stats, 0);             /* the pass goes on */
    svf_put(f, f->p[0], 0, 1, 40, 400, 10);     /* between two steps */
    int steps = 1;
    while (svc_has_pending_steps(f->svc)) {
        svc_tick(f->svc, t);                    /* not due again: steps */
        ck_assert_int_lt(++steps, 1000);
    }
    ck_assert_int_gt(steps, 4);
    svf_read_file_records(mine, &r);
    ck_assert_int_eq(r.values, 410);
    ck_assert_int_eq(r.n_stats, 1);
    /* The next pass waits for its period. */
    svf_put(f, f->p[0], 1, 1, 41, 410, 10);
    long size = svf_file_size(mine);
    svc_tick(f->svc, t + 50);
    ck_assert_int_eq(svf_file_size(mine), size);
    ck_assert(!svc_has_pending_steps(f->svc));
    tick_until_written(f, t + 101);
    svf_read_file_records(mine, &r);
    ck_assert_int_eq(r.values, 420);
    ck_assert_int_eq(r.n_stats, 1);     /* the next is due in 10 s */
    close(mine);
}

/* A ring that fills faster than the period is drained early: once half
 * of the buffer has been written since the last pass began, the next tick
 * starts a pass whatever the period says, and the next early one needs
 * another half. */
SVF_TEST(test_file_pass_starts_early_when_half_the_buffer_is_written, 1)
{
    int mine = file_session(f, 3600000, 0);      /* an hour: never due */
    const tb_stats *st = tb_get_stats(svc__buffer(f->svc, f->buf, NULL));
    ck_assert_ptr_nonnull(st);
    uint64_t t = svc_now_ms() + 10;
    uint32_t id = 0;
    svf_put(f, f->p[0], 0, 1, id, id * 10, 10);
    id++;
    svc_tick(f->svc, t);
    ck_assert_int_eq(svf_file_size(mine), 0);   /* too little: waits */
    id = put_until(f, st, id, st->buffer_size / 2);
    ck_assert_uint_eq(st->chunks_overwritten, 0);
    tick_until_written(f, t);
    svf_readout r;
    svf_read_file_records(mine, &r);
    ck_assert_int_eq(r.values, id * 10);
    ck_assert_int_eq(r.n_stats, 1);
    long size = svf_file_size(mine);
    svf_put(f, f->p[0], id % 8, 1, id, id * 10, 10);
    id++;
    svc_tick(f->svc, f->svc->last_commit_ms);    /* not quiet: waits */
    ck_assert_int_eq(svf_file_size(mine), size);
    close(mine);
}

/* The tail of a burst: after a pass that began early, the producers go
 * quiet with less than an idle pass needs (one packet); once
 * SVC_FILE_IDLE_MS passed without a commit, a tick writes it anyway,
 * instead of leaving it for the period. That pass ends the burst: the
 * next packet, quiet as long, waits again. */
SVF_TEST(test_file_pass_writes_the_tail_of_a_burst, 1)
{
    int mine = file_session(f, 3600000, 0);      /* an hour: never due */
    const tb_stats *st = tb_get_stats(svc__buffer(f->svc, f->buf, NULL));
    ck_assert_ptr_nonnull(st);
    uint32_t id = put_until(f, st, 0, st->buffer_size / 2);
    tick_until_written(f, f->svc->last_commit_ms);  /* the early pass */
    long size = svf_file_size(mine);
    ck_assert_int_gt(size, 0);
    svf_put(f, f->p[0], id % 8, 1, id, id * 10, 10);  /* the tail */
    id++;
    uint64_t last = f->svc->last_commit_ms;
    svc_tick(f->svc, last + SVC_FILE_IDLE_MS - 1);   /* not quiet yet */
    ck_assert_int_eq(svf_file_size(mine), size);
    tick_until_written(f, last + SVC_FILE_IDLE_MS);
    svf_readout r;
    svf_read_file_records(mine, &r);
    ck_assert_int_eq(r.values, id * 10);
    ck_assert_int_eq(r.n_stats, 1);     /* the start's, in the first pass */
    size = svf_file_size(mine);
    svf_put(f, f->p[0], id % 8, 1, id, id * 10, 10);
    svc_tick(f->svc, f->svc->last_commit_ms + 1000);
    ck_assert_int_eq(svf_file_size(mine), size);
    close(mine);
}

/* A write_into_file session (f->s) of one 32 MiB buffer whose period is
 * never due (an hour): only eager passes reach the file. Returns the
 * file's fd; *st: the buffer's stats. */
static int never_due_file_session(svf_fx *f, const tb_stats **st)
{
    svf_cfg_init(&f->c, 32768, 0);
    int fd = file_session(f, 3600000, 0);
    *st = tb_get_stats(svc__buffer(f->svc, f->s->buf_ids[0], NULL));
    ck_assert_ptr_nonnull(*st);
    return fd;
}

/* With the writer thread, a file pass starts once SVC_FILE_EAGER_BYTES
 * have come in since the last one began, small packets as well as large;
 * once the session's file is known to hold small packets (copied, not
 * sliced: its first pass), after SVC_FILE_EAGER_SMALL_BYTES. Here 4 MiB,
 * then 1 MiB more of small packets into a 32 MiB buffer, far from half of
 * it, with a period that is never due: each round reaches the file.
 * Without the thread, the same waits for half the buffer. */
SVF_TEST(test_file_pass_starts_eagerly_with_the_writer_thread, 1)
{
    for (int thread = 1; thread >= 0; thread--) {
        ck_assert_int_eq(svc_set_file_writer_thread(f->svc, thread), 0);
        svc_set_file_in_place_min(f->svc, 512);    /* big packets in place */
        const tb_stats *st;
        int mine = never_due_file_session(f, &st);
        svc_session *s = f->s;
        uint32_t id = 0;
        uint64_t until = SVC_FILE_EAGER_BYTES;
        for (int round = 1; round <= 2; round++) {
            while (st->bytes_written < until) {
                /* values < 16384: the fixture's packets hold 2-byte
                 * varints */
                svf_put(f, f->p[0], id % 8, 1, id, id * 10 % 10000, 10);
                id++;
            }
            ck_assert_uint_lt(st->bytes_written, st->buffer_size / 2);
            /* a pass began at the last commit, if one did */
            until = st->bytes_written + SVC_FILE_EAGER_SMALL_BYTES;
            tick_until_written(f, f->svc->last_commit_ms);  /* not quiet */
            ck_assert_int_eq(svc__file_wait(f->svc, s), 0);
            if (thread) {
                svf_readout r;
                svf_read_file_records(mine, &r);
                ck_assert_int_eq(r.values, id * 10);
                ck_assert_int_eq(r.n_stats, 1);    /* the start's */
            } else {
                ck_assert_int_eq(svf_file_size(mine), 0);
            }
        }
        ck_assert_uint_eq(s->file_slice_bytes, 0);   /* all copied */
        close(mine);
        svc_session_disable(f->svc, s);
    }
}

/* Big packets v, v + 1, ... (one chunk each, ids from *id) until the
 * buffer's bytes_written reaches `bytes`; *id and *v move on. */
static void put_big_until(svf_fx *f, const tb_stats *st, uint32_t *id,
                          uint32_t *v, uint64_t bytes)
{
    while (st->bytes_written < bytes) {
        *id = put_big_range(f, *id, *v, *v + 1);
        (*v)++;
    }
}

/* svc_prealloc.c through the service: while a write_into_file session runs
 * its file has space reserved past its end, written by the inline path
 * (small packets) and by the writer thread (large ones); once the session
 * stopped (final flush acked, last write) none is left past the end, and
 * the file is whole records. Where /tmp cannot fallocate: said, and passed. */
SVF_TEST(test_file_space_reserved_while_running_and_trimmed_at_stop, 1)
{
    if (!svf_can_reserve("test_file_space_reserved_while_running..."))
        return;
    for (int big = 0; big <= 1; big++) {
        ck_assert_int_eq(svc_set_file_writer_thread(f->svc, true), 0);
        svc_set_file_in_place_min(f->svc, 512);    /* big packets in place */
        int mine;
        int fd = svf_temp_file(&mine);
        svf_cfg_init(&f->c, 8192, 0);
        svf_cfg_file(&f->c);
        f->c.cfg.has_file_write_period_ms = true;
        f->c.cfg.file_write_period_ms = 100;
        f->c.cfg.has_flush_timeout_ms = true;
        f->c.cfg.flush_timeout_ms = 100;
        svc_session *s = svf_enable_fd(f, fd);
        uint32_t id = 0, v = 0;
        uint64_t now = svc_now_ms();
        while (svf_file_size(mine) < 2 * 1024 * 1024) {
            if (big) {
                id = put_big_range(f, id, v, v + 64);
                v += 64;
            } else {
                for (int k = 0; k < 64; k++, id++)
                    svf_put(f, f->p[0], id % 8, 1, id, id * 10 % 10000, 10);
            }
            now += 200;
            tick_until_written(f, now);
            ck_assert_int_eq(svc__file_wait(f->svc, s), 0);
        }
        /* the thread wrote the large packets' slices, the loop the rest */
        if (big)
            ck_assert_uint_gt(s->file_slice_bytes, 1024 * 1024);
        else
            ck_assert_uint_eq(s->file_slice_bytes, 0);
        ck_assert_int_gt(svf_allocated(mine),
                         svf_file_size(mine) + 1024 * 1024);
        ck_assert_int_eq(svc_session_disable(f->svc, s), 0);
        Perfetto__Protos__CommitDataRequest req =
            PERFETTO__PROTOS__COMMIT_DATA_REQUEST__INIT;
        req.has_flush_request_id = true;
        req.flush_request_id = svf_rec.last_flush_id;
        ck_assert_int_eq(svc_producer_commit(f->svc, f->p[0], &req), 0);
        ck_assert(svc_session_is_disabled(s));
        long size = svf_file_size(mine);
        ck_assert_int_lt(svf_allocated(mine), size + 64 * 1024);
        svf_readout r;
        svf_read_file_records(mine, &r);
        ck_assert_int_gt(r.n, 0);
        close(mine);
    }
}

/* A session of large packets (sliced, handed to the writer thread) keeps
 * SVC_FILE_EAGER_BYTES between passes: after its first pass, another
 * SVC_FILE_EAGER_SMALL_BYTES of them start none; the rest of the 4 MiB
 * does. */
SVF_TEST(test_file_pass_of_large_packets_waits_for_more, 1)
{
    ck_assert_int_eq(svc_set_file_writer_thread(f->svc, true), 0);
    svc_set_file_in_place_min(f->svc, 512);    /* big packets in place */
    const tb_stats *st;
    int mine = never_due_file_session(f, &st);
    svc_session *s = f->s;
    uint32_t id = 0, v = 0;
    put_big_until(f, st, &id, &v, SVC_FILE_EAGER_BYTES);
    uint64_t first = st->bytes_written;         /* the first pass began */
    tick_until_written(f, f->svc->last_commit_ms);
    ck_assert_int_eq(svc__file_wait(f->svc, s), 0);
    ck_assert_uint_gt(s->file_slice_bytes, s->file_staged_bytes);
    svf_readout r;
    svf_read_file_records(mine, &r);
    ck_assert_int_eq(r.n_stats, 1);
    long size = svf_file_size(mine);
    put_big_until(f, st, &id, &v, first + 2 * SVC_FILE_EAGER_SMALL_BYTES);
    tick_until_written(f, f->svc->last_commit_ms);
    ck_assert_int_eq(svc__file_wait(f->svc, s), 0);
    ck_assert_int_eq(svf_file_size(mine), size);     /* no pass yet */
    put_big_until(f, st, &id, &v, first + SVC_FILE_EAGER_BYTES);
    tick_until_written(f, f->svc->last_commit_ms);
    ck_assert_int_eq(svc__file_wait(f->svc, s), 0);
    ck_assert_uint_lt(st->bytes_written, st->buffer_size / 2);
    uint32_t flag = 0;
    ck_assert_int_eq(check_big_file(mine, v, UINT32_MAX, &flag), (int)v);
    svf_read_file_records(mine, &r);
    ck_assert_int_eq(r.n_stats, 1);     /* the next is due in 10 s */
    close(mine);
}

/* Producers that went quiet: once SVC_FILE_IDLE_MS passed without a
 * commit, a tick writes what came in since the last pass if that is at
 * least a sixteenth of the buffer (here: less than SVC_FILE_IDLE_BYTES),
 * whatever the period says; not while commits keep coming, and not for
 * less. */
SVF_TEST(test_file_pass_starts_when_the_producers_go_quiet, 1)
{
    int mine = file_session(f, 3600000, 0);      /* an hour: never due */
    const tb_stats *st = tb_get_stats(svc__buffer(f->svc, f->buf, NULL));
    ck_assert_ptr_nonnull(st);
    uint32_t id = put_until(f, st, 0, st->buffer_size / 16);
    ck_assert_uint_lt(st->bytes_written, st->buffer_size / 4);
    uint64_t last = f->svc->last_commit_ms;
    ck_assert_uint_gt(last, 0);
    svc_tick(f->svc, last + SVC_FILE_IDLE_MS - 1);  /* not quiet yet */
    ck_assert_int_eq(svf_file_size(mine), 0);
    tick_until_written(f, last + SVC_FILE_IDLE_MS);
    svf_readout r;
    svf_read_file_records(mine, &r);
    ck_assert_int_eq(r.values, id * 10);
    ck_assert_int_eq(r.n_stats, 1);
    /* A little more, then quiet for long: too little for a pass. */
    long size = svf_file_size(mine);
    svf_put(f, f->p[0], id % 8, 1, id, id * 10, 10);
    svc_tick(f->svc, f->svc->last_commit_ms + 1000);
    ck_assert_int_eq(svf_file_size(mine), size);
    close(mine);
}

/* Producers that outrun the file: when a quarter of the buffer comes in
 * while a pass is under way, the next step finishes the pass in one go
 * (commits then wait: backpressure), instead of letting the producers lap
 * the ring under the pass. */
SVF_TEST(test_file_pass_hurries_when_producers_outrun_it, 1)
{
    int mine = file_session(f, 100, 256);
    uint32_t id = 0;
    for (; id < 40; id++)
        svf_put(f, f->p[0], id % 8, 1, id, id * 10, 10);
    uint64_t t = svc_now_ms() + 101;
    svc_tick(f->svc, t);
    ck_assert(svc_has_pending_steps(f->svc));
    svc_tick(f->svc, t);
    ck_assert(svc_has_pending_steps(f->svc));   /* small steps go on */
    ck_assert_uint_eq(f->svc->file_passes_hurried, 0);
    const tb_stats *st = tb_get_stats(svc__buffer(f->svc, f->buf, NULL));
    id = put_until(f, st, id, st->bytes_written + st->buffer_size / 4);
    svc_tick(f->svc, t);                        /* the rest at once */
    ck_assert(!svc_has_pending_steps(f->svc));
    ck_assert_uint_eq(f->svc->file_passes_hurried, 1);
    ck_assert_uint_eq(st->chunks_overwritten, 0);
    svf_readout r;
    svf_read_file_records(mine, &r);
    ck_assert_int_eq(r.values, id * 10);
    ck_assert_int_eq(r.n_stats, 1);
    close(mine);
}

/* One uid's producers hold at most SVC_MAX_SMB_BYTES_PER_UID of SMBs:
 * past it a producer gets the default 256 KiB, then none (-EDQUOT);
 * another uid's producers are not held back. */
START_TEST(test_smb_bytes_per_uid)
{
    svc_service *svc = svf_new();
    svc_producer_params pp = { .smb_size_hint_bytes = 32u << 20 };
    const size_t n = SVC_MAX_SMB_BYTES_PER_UID / (32u << 20);
    svc_producer *p = NULL;
    for (size_t i = 0; i < n; i++) {
        p = svc_producer_connect(svc, NULL, 1000, (pid_t)(100 + i), &pp);
        ck_assert_ptr_nonnull(p);
        ck_assert_int_eq(svc__smb_setup(svc, p, NULL), 0);
        ck_assert_uint_eq(p->smb_size, 32u << 20);
    }
    /* Full: 32 MiB asked, not even 256 KiB left. */
    svc_producer *late = svc_producer_connect(svc, NULL, 1000, 99, &pp);
    ck_assert_int_eq(svc__smb_setup(svc, late, NULL), -EDQUOT);
    ck_assert_int_lt(late->smb_fd, 0);
    /* One freed: 32 MiB free again; a smaller SMB of another producer
     * then leaves room only for the default. */
    svc_producer_disconnect(svc, p);
    svc_producer_params small = { .smb_size_hint_bytes = 1u << 20 };
    svc_producer *q = svc_producer_connect(svc, NULL, 1000, 98, &small);
    ck_assert_int_eq(svc__smb_setup(svc, q, NULL), 0);
    ck_assert_uint_eq(q->smb_size, 1u << 20);
    ck_assert_int_eq(svc__smb_setup(svc, late, NULL), 0);
    ck_assert_uint_eq(late->smb_size, SVC_SMB_SIZE_DEFAULT);
    ck_assert_uint_eq(late->smb_page_size, SVC_SMB_PAGE_DEFAULT);
    /* Another uid has its own. */
    svc_producer *other = svc_producer_connect(svc, NULL, 1001, 97, &pp);
    ck_assert_int_eq(svc__smb_setup(svc, other, NULL), 0);
    ck_assert_uint_eq(other->smb_size, 32u << 20);
    svc_destroy(svc);
}
END_TEST

/* A descriptor of `extra` bytes (an unknown field, kept as Perfetto's
 * track_event descriptors are) named name. Free with free_unpacked. */
static Perfetto__Protos__DataSourceDescriptor *big_descriptor(
    const char *name, size_t extra)
{
    size_t nl = strlen(name), len = 0;
    uint8_t *raw = malloc(nl + extra + 16);
    ck_assert_ptr_nonnull(raw);
    raw[len++] = 0x0a;                      /* field 1 (name), LEN */
    raw[len++] = (uint8_t)nl;
    memcpy(raw + len, name, nl);
    len += nl;
    raw[len++] = 0xa2;                      /* field 100, LEN */
    raw[len++] = 0x06;
    for (size_t v = extra; ; v >>= 7) {     /* its length, varint */
        raw[len++] = (uint8_t)((v & 0x7f) | (v > 0x7f ? 0x80 : 0));
        if (v <= 0x7f)
            break;
    }
    memset(raw + len, 'x', extra);
    len += extra;
    Perfetto__Protos__DataSourceDescriptor *d =
        perfetto__protos__data_source_descriptor__unpack(NULL, len, raw);
    free(raw);
    ck_assert_ptr_nonnull(d);
    return d;
}

static int register_big(svc_service *svc, svc_producer *p, const char *name,
                        size_t extra, char *err, size_t errlen)
{
    Perfetto__Protos__DataSourceDescriptor *d = big_descriptor(name, extra);
    err[0] = 0;
    int rc = svc_producer_register_ds(svc, p, d, err, errlen);
    perfetto__protos__data_source_descriptor__free_unpacked(d, NULL);
    return rc;
}

/* What the service keeps of a producer's data sources is bounded per
 * producer (1 MiB) and per uid (64 MiB): past either, registration fails
 * saying so; unregistering gives the bytes back; another uid goes on. */
START_TEST(test_ds_bytes_per_producer_and_uid)
{
    svc_service *svc = svf_new();
    svc_producer_params pp = { 0 };
    char err[512], name[32];
    const size_t extra = 100 * 1024;
    svc_producer *p = svc_producer_connect(svc, NULL, 1000, 1, &pp);
    int n = 0;
    for (;; n++) {
        snprintf(name, sizeof name, "ds.%d", n);
        if (register_big(svc, p, name, extra, err, sizeof err) < 0)
            break;
    }
    ck_assert_int_eq(n, 10);       /* 10 x 100 KiB fit in 1 MiB, 11 not */
    ck_assert_msg(strstr(err, "data source ds.10 refused: this producer's "
                         "data sources would take") &&
                  strstr(err, "past the 1048576 a producer may register"),
                  "%s", err);
    ck_assert_uint_eq(p->nds, 10);
    /* Small ones still fit; one unregistered makes room for a big one. */
    ck_assert_int_eq(register_big(svc, p, "small", 10, err, sizeof err), 0);
    ck_assert_int_eq(svc_producer_unregister_ds(svc, p, "ds.3"), 0);
    ck_assert_int_eq(register_big(svc, p, "ds.again", extra, err,
                                  sizeof err), 0);
    /* More producers of uid 1000 until the uid's 64 MiB are taken. */
    int refused_at = -1;
    for (int k = 0; k < 80 && refused_at < 0; k++) {
        svc_producer *q = svc_producer_connect(svc, NULL, 1000,
                                               (pid_t)(10 + k), &pp);
        for (int i = 0; i < 10; i++) {
            snprintf(name, sizeof name, "q%d.%d", k, i);
            if (register_big(svc, q, name, extra, err, sizeof err) < 0) {
                refused_at = k;
                break;
            }
        }
    }
    ck_assert_int_eq(refused_at, 64);  /* 65 x ~1000 KiB > 64 MiB */
    ck_assert_msg(strstr(err, "the producers of uid 1000 would keep") &&
                  strstr(err, "past the 67108864 a uid may register"),
                  "%s", err);
    svc_producer *other = svc_producer_connect(svc, NULL, 1001, 99, &pp);
    ck_assert_int_eq(register_big(svc, other, "mine", extra, err,
                                  sizeof err), 0);
    svc_destroy(svc);
}
END_TEST

START_TEST(test_smb_sizes_clamped)
{
    svc_service *svc = svf_new();
    svc_producer_params pp = { .page_size_hint_bytes = 12288,
                               .smb_size_hint_bytes = 1 << 20 };
    svc_producer *p = svc_producer_connect(svc, NULL, 0, 1, &pp);
    size_t page, size;
    svc__smb_sizes(p, NULL, &page, &size);
    ck_assert_uint_eq(page, 4096);             /* 12 KiB not a power of 2 */
    ck_assert_uint_eq(size, 256 * 1024);
    p->page_hint_bytes = 16384;
    p->size_hint_bytes = 1u << 30;
    svc__smb_sizes(p, NULL, &page, &size);
    ck_assert_uint_eq(page, 16384);
    ck_assert_uint_eq(size, 32u << 20);
    /* No page size asked for: 4 KiB, 32 KiB from a 2 MiB SMB on. */
    p->page_hint_bytes = 0;
    p->size_hint_bytes = 1u << 20;
    svc__smb_sizes(p, NULL, &page, &size);
    ck_assert_uint_eq(page, 4096);
    p->size_hint_bytes = 4u << 20;
    svc__smb_sizes(p, NULL, &page, &size);
    ck_assert_uint_eq(page, 32768);
    ck_assert_uint_eq(size, 4u << 20);
    svc_destroy(svc);
}
END_TEST

/* Nobody asks for a size: 1/64 of the session's buffers, a power of two
 * from 256 KiB to 2 MiB (svc_commit.c). */
START_TEST(test_smb_sizes_follow_buffers)
{
    static const struct {
        uint32_t kb[2];
        size_t want_size, want_page;
    } cases[] = {
        {{4096, 0}, 256u << 10, 4096},        /* 64 KiB share: the floor */
        {{16384, 0}, 256u << 10, 4096},       /* exactly the floor */
        {{32768, 0}, 512u << 10, 4096},
        {{49152, 49152}, 1u << 20, 4096},     /* 1.5 MiB share: down to 1 */
        {{131072, 0}, 2u << 20, 32768},       /* 2 MiB: 32 KiB pages */
        {{1048576, 0}, 2u << 20, 32768},      /* capped */
    };
    svc_service *svc = svf_new();
    svc_producer_params pp = { .name = "one" };
    svc_producer *p = svc_producer_connect(svc, NULL, 0, 1, &pp);
    size_t page, size;
    svf_cfg c;
    svc__smb_sizes(p, NULL, &page, &size);
    ck_assert_uint_eq(size, 256u << 10);
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        svf_cfg_init(&c, cases[i].kb[0], 0);
        if (cases[i].kb[1]) {
            c.buf[1].size_kb = cases[i].kb[1];
            c.cfg.n_buffers = 2;
        }
        svc__smb_sizes(p, &c.cfg, &page, &size);
        ck_assert_msg(size == cases[i].want_size &&
                      page == cases[i].want_page,
                      "buffers %u + %u KiB: SMB %zu, page %zu (want %zu, "
                      "%zu)", cases[i].kb[0], cases[i].kb[1], size, page,
                      cases[i].want_size, cases[i].want_page);
    }
    /* A size asked for wins: the producer's hint, then the config's. */
    svf_cfg_init(&c, 131072, 0);
    p->size_hint_bytes = 512u << 10;
    svc__smb_sizes(p, &c.cfg, &page, &size);
    ck_assert_uint_eq(size, 512u << 10);
    ck_assert_uint_eq(page, 4096);
    Perfetto__Protos__TraceConfig__ProducerConfig pc =
        PERFETTO__PROTOS__TRACE_CONFIG__PRODUCER_CONFIG__INIT;
    Perfetto__Protos__TraceConfig__ProducerConfig *pcp = &pc;
    pc.producer_name = "one";
    pc.has_shm_size_kb = true;
    pc.shm_size_kb = 8192;
    c.cfg.n_producers = 1;
    c.cfg.producers = &pcp;
    svc__smb_sizes(p, &c.cfg, &page, &size);
    ck_assert_uint_eq(size, 8u << 20);
    ck_assert_uint_eq(page, 32768);
    svc_destroy(svc);
}
END_TEST

static Suite *svc_session_suite(void)
{
    Suite *s = suite_create("svc_session");
    TCK_CASE(s, "config", test_config_rejects_bad_buffers,
             test_config_creates_buffers_with_global_ids,
             test_smb_sizes_clamped,
             test_smb_bytes_per_uid, test_ds_bytes_per_producer_and_uid, test_smb_sizes_follow_buffers);
    TCK_CASE(s, "matching", test_match_all_producers_and_late_registration,
             test_deferred_start_waits_for_start_tracing,
             test_ds_config_service_fields,
             test_duration_counts_suspend_when_preferred,
             test_duration_ignores_suspend_by_default,
             test_snapshot_counts_suspend_when_preferred,
             test_snapshot_ignores_suspend_by_default,
             test_match_producer_name_filter,
             test_match_producer_name_regex_filter,
             test_regex_filters_refused_before_they_run,
             test_regex_full_match,
             test_register_ds_rejects_bad_descriptors,
             test_writer_table_grows);
    TCK_CASE(s, "read", test_read_adds_trusted_fields_and_sequences,
             test_read_in_bounded_batches,
             test_read_writes_system_info_once,
             test_read_system_info_can_be_disabled,
             test_read_clock_snapshots_and_sync_markers_periodic,
             test_read_clock_snapshots_can_be_disabled,
             test_read_lifecycle_events_as_perfetto,
             test_read_lifecycle_events_can_be_disabled,
             test_read_lifecycle_stop_acked_is_not_slow,
             test_start_acks_all_started_after_the_last_ack,
             test_start_acks_slow_starting_named,
             test_start_acks_gone_instances_do_not_count,
             test_start_acks_event_order_and_clones,
             test_start_acks_slow_list_bounded,
             test_read_clock_snapshot_default_period,
             test_read_clock_snapshots_kept_on_drift,
             test_read_drops_invalid_packets_and_flags_next,
             test_producer_id_not_reused_while_a_session_knows_it);
    TCK_CASE(s, "untrusted", test_commit_lies_are_counted_not_fatal);
    TCK_CASE(s, "stats", test_stats_writer_histograms,
             test_stats_histograms_can_be_disabled);
    TCK_CASE(s, "flush", test_flush_acked_succeeds,
             test_flush_timeout_scrapes_silent_producer,
             test_disable_stops_and_notifies,
             test_duration_disables_after_failed_final_flush);
    TCK_CASE(s, "clone_flush", test_clone_flush_acked,
             test_clone_flush_times_out, test_clone_flush_source_freed,
             test_clone_flush_nothing_to_flush);
    TCK_CASE(s, "faults", test_producer_disconnect_scrapes_its_data,
             test_clone_is_a_snapshot);
    TCK_CASE(s, "file", test_file_mode_writes_trace_records_and_caps_size,
             test_periodic_flush_by_period_and_file_mode,
             test_file_mode_drops_invalid_packets_in_place,
             test_file_mode_large_packets_in_place,
             test_file_mode_copied_packets_checked_whole,
             test_file_mode_copied_packets_checked_split,
             test_file_mode_copies_a_packet_larger_than_a_batch,
             test_file_direct_through_the_thread,
             test_file_direct_inline_in_small_steps,
             test_file_direct_whole_passes,
             test_file_direct_packet_larger_than_a_batch,
             test_file_direct_refused_at_an_unaligned_start,
             test_file_direct_refused_with_o_append,
             test_file_direct_clone_into_a_file_has_the_tail,
             test_file_direct_freed_midway_keeps_its_tail,
             test_file_direct_write_refused_goes_through_the_page_cache,
             test_file_counts_what_it_writes,
             test_file_counts_not_complete_after_a_failed_write,
             test_file_writer_thread_keeps_slices_until_written,
             test_file_rewind_not_onto_slices_in_flight,
             test_file_writer_thread_writes_what_inline_writes,
             test_file_in_place_from_the_threshold,
             test_file_in_place_default_copies_under_8k,
             test_file_inline_batch_waits_for_the_thread_batch,
             test_file_writer_thread_keeps_several_batches_in_flight,
             test_file_writer_thread_reports_write_errors,
             test_file_writer_thread_keeps_copied_batches_in_flight,
             test_file_copied_batches_through_the_thread_when_told,
             test_file_copied_batches_inline_when_told,
             test_file_copied_batches_inline_while_the_service_idles,
             test_file_batch_arena_kept_for_the_next_session,
             test_file_copied_batches_to_the_thread_while_the_service_is_busy,
             test_file_copied_to_thread_rule,
             test_file_mode_small_packets_every_size,
             test_file_pass_runs_in_steps,
             test_file_pass_starts_early_when_half_the_buffer_is_written,
             test_file_pass_starts_eagerly_with_the_writer_thread,
             test_file_pass_of_large_packets_waits_for_more,
             test_file_pass_starts_when_the_producers_go_quiet,
             test_file_pass_writes_the_tail_of_a_burst,
             test_file_pass_hurries_when_producers_outrun_it,
             test_file_space_reserved_while_running_and_trimmed_at_stop);
    return s;
}

TCK_MAIN(svc_session_suite)
