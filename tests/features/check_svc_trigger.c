/*
 * check_svc_trigger.c - the trigger and incremental-state state machines
 * of the service core (service/svc_trigger.c), without sockets or Perfetto:
 * config validation, START_TRACING / STOP_TRACING / CLONE_SNAPSHOT with
 * their timeouts and stop delays, the trigger packets in the trace,
 * producer_name_regex, skip_probability, max_per_24_h, clones taking the
 * received triggers, and periodic ClearIncrementalState.
 */
#include "feat_svc_harness.h"

#define START 1
#define STOP 2
#define CLONE 4

static const char *const T1[] = { "t1" };

/* ---------------------------------------------------------------- config */

static void expect_refused(fh_cfg *c, const char *needle)
{
    svc_service *svc = fh_service();
    char err[256] = "";
    svc_session *s = svc_session_enable(svc, NULL, &c->cfg, -1, err,
                                        sizeof(err));
    ck_assert_ptr_null(s);
    ck_assert_msg(strstr(err, needle) != NULL, "error \"%s\" lacks \"%s\"",
                  err, needle);
    svc_destroy(svc);
}

START_TEST(test_config_checks)
{
    fh_cfg c;
    fh_cfg_init(&c);
    fh_cfg_triggers(&c, STOP, 0);
    fh_cfg_add_trigger(&c, "a", 0);
    expect_refused(&c, "trigger_timeout_ms");          /* timeout 0 */
    c.tc.trigger_timeout_ms = 8u * 24 * 3600 * 1000;
    expect_refused(&c, "trigger_timeout_ms");          /* > 7 days */
    c.tc.trigger_timeout_ms = 1000;
    c.cfg.has_duration_ms = true;
    c.cfg.duration_ms = 500;
    expect_refused(&c, "duration_ms");
    c.cfg.has_duration_ms = false;
    fh_cfg_add_trigger(&c, "a", 0);
    expect_refused(&c, "duplicate trigger name: a");
    c.tc.n_triggers = 1;
    c.cfg.has_write_into_file = true;
    c.cfg.write_into_file = true;
    expect_refused(&c, "write_into_file");
    c.cfg.has_write_into_file = false;
    c.tc.trigger_mode = 3;                             /* reserved */
    expect_refused(&c, "unknown trigger_mode");
    c.tc.trigger_mode = START;
    c.tc.has_use_clone_snapshot_if_available = true;
    c.tc.use_clone_snapshot_if_available = true;
    expect_refused(&c, "STOP_TRACING");
    c.tc.trigger_mode = STOP;
    c.t[0].producer_name_regex = "(";
    expect_refused(&c, "producer_name_regex");
    c.t[0].producer_name_regex = NULL;
    /* and the corrected config is accepted */
    svc_service *svc = fh_service();
    char err[256] = "";
    svc_session *s = svc_session_enable(svc, NULL, &c.cfg, -1, err,
                                        sizeof(err));
    ck_assert_msg(s != NULL, "%s", err);
    svc_destroy(svc);
    /* incremental_state_config.clear_period_ms below 10 ms */
    fh_cfg_init(&c);
    perfetto__protos__trace_config__incremental_state_config__init(&c.ic);
    c.ic.has_clear_period_ms = true;
    c.ic.clear_period_ms = 3;
    c.cfg.incremental_state_config = &c.ic;
    expect_refused(&c, "clear_period_ms");
}
END_TEST

/* ---------------------------------------------------------------- STOP */

START_TEST(test_stop_tracing_trigger_ends_session_after_delay)
{
    svc_service *svc = fh_service();
    svc_producer *p = fh_producer(svc, "trigger-app", "test.ds", 1000);
    fh_cfg c;
    fh_cfg_init(&c);
    fh_cfg_triggers(&c, STOP, 60000);
    fh_cfg_add_trigger(&c, "t1", 1000);
    svc_session *s = svc_session_enable(svc, NULL, &c.cfg, -1, NULL, 0);
    ck_assert_ptr_nonnull(s);
    ck_assert_int_eq(FR.start_ds, 1);                  /* traces at once */
    /* No data at all until a trigger, not even the service's packets. */
    ck_assert_uint_eq(fh_read_all(svc, s).packets, 0);
    static const char *const other[] = { "nope" };
    ck_assert_uint_eq(svc_producer_activate_triggers(svc, p, other, 1), 0);
    ck_assert_uint_eq(svc_session_triggers_received(s), 0);
    ck_assert_uint_eq(svc_producer_activate_triggers(svc, p, T1, 1), 1);
    uint64_t t0 = svc_now_ms();
    ck_assert_uint_eq(svc_session_triggers_received(s), 1);
    /* The stop delay, not the 60 s timeout, now bounds the session. */
    uint64_t dl = svc_next_deadline_ms(svc);
    ck_assert_uint_le(dl, t0 + 1000);
    svc_tick(svc, t0 + 500 - 50);
    ck_assert(!svc_session_is_disabled(s));
    ck_assert_int_eq(FR.disabled, 0);
    /* A second trigger is recorded but does not move the stop. */
    ck_assert_uint_eq(svc_producer_activate_triggers(svc, p, T1, 1), 1);
    ck_assert_uint_eq(svc_session_triggers_received(s), 2);
    fh_settle(svc, t0 + 1001);
    ck_assert(svc_session_is_disabled(s));
    ck_assert_int_eq(FR.disabled, 1);
    fh_read r = fh_read_all(svc, s);
    ck_assert_uint_gt(r.packets, 2);
    ck_assert_uint_eq(r.triggers, 2);
    ck_assert_str_eq(r.trig_name[0], "t1");
    ck_assert_str_eq(r.trig_producer[0], "trigger-app");
    ck_assert_uint_eq(r.trig_delay[0], 1000);
    ck_assert_int_eq(r.trig_uid[0], 1000);
    ck_assert_uint_le(r.trig_ts[0], r.trig_ts[1]);
    /* Emitted once: the next read has no trigger packet. */
    ck_assert_uint_eq(fh_read_all(svc, s).triggers, 0);
    /* A disabled session ignores triggers. */
    ck_assert_uint_eq(svc_producer_activate_triggers(svc, p, T1, 1), 0);
    svc_session_free(svc, s);
    svc_destroy(svc);
}
END_TEST

/* prefer_suspend_clock_for_duration moves the stop delay to the suspend
 * clock too (as Perfetto's TriggerConfig.stop_delay_ms says): a suspend
 * after the trigger counts; without it, it does not. */
static int64_t suspend_ns = 3000000000;
static int64_t suspend_clock(void *ctx)
{
    (void)ctx;
    return suspend_ns;
}

static void stop_delay_with_suspend(bool prefer)
{
    svc_service *svc = fh_service();
    svc__set_suspend_clock(svc, suspend_clock, NULL);
    svc_producer *p = fh_producer(svc, "trigger-app", "test.ds", 1000);
    fh_cfg c;
    fh_cfg_init(&c);
    fh_cfg_triggers(&c, STOP, 60000);
    fh_cfg_add_trigger(&c, "t1", 1000);
    c.cfg.has_prefer_suspend_clock_for_duration = prefer;
    c.cfg.prefer_suspend_clock_for_duration = prefer;
    svc_session *s = svc_session_enable(svc, NULL, &c.cfg, -1, NULL, 0);
    ck_assert_ptr_nonnull(s);
    suspend_ns += 5000 * 1000000ll;        /* before the trigger: no matter */
    ck_assert_uint_eq(svc_producer_activate_triggers(svc, p, T1, 1), 1);
    uint64_t t0 = svc_now_ms();
    svc_tick(svc, t0 + 100);
    ck_assert_int_eq(s->state, SVC_SESSION_STARTED);
    suspend_ns += 950 * 1000000ll;         /* 0.95 s suspended after it */
    svc_tick(svc, t0 + 100);
    ck_assert((s->state != SVC_SESSION_STARTED) == prefer);
    fh_settle(svc, t0 + 1001);
    ck_assert(svc_session_is_disabled(s));
    svc_session_free(svc, s);
    svc_destroy(svc);
}

START_TEST(test_stop_delay_counts_suspend_when_preferred)
{
    stop_delay_with_suspend(true);
    stop_delay_with_suspend(false);
}
END_TEST

START_TEST(test_stop_tracing_without_trigger_returns_nothing)
{
    svc_service *svc = fh_service();
    fh_producer(svc, "app", "test.ds", 1000);
    fh_cfg c;
    fh_cfg_init(&c);
    fh_cfg_triggers(&c, STOP, 2000);
    fh_cfg_add_trigger(&c, "t1", 0);
    svc_session *s = svc_session_enable(svc, NULL, &c.cfg, -1, NULL, 0);
    uint64_t t0 = svc_now_ms();
    ck_assert_ptr_nonnull(s);
    /* The timeout became the session's duration (echoed in the config). */
    ck_assert_uint_eq(svc_session_config(s)->duration_ms, 2000);
    svc_tick(svc, t0 + 1000);
    ck_assert(!svc_session_is_disabled(s));
    fh_settle(svc, t0 + 2001);
    ck_assert(svc_session_is_disabled(s));
    ck_assert_uint_eq(fh_read_all(svc, s).packets, 0);
    svc_destroy(svc);
}
END_TEST

/* ---------------------------------------------------------------- START */

START_TEST(test_start_tracing_waits_for_trigger)
{
    svc_service *svc = fh_service();
    svc_producer *p = fh_producer(svc, "app", "test.ds", 1000);
    fh_cfg c;
    fh_cfg_init(&c);
    fh_cfg_triggers(&c, START, 30000);
    fh_cfg_add_trigger(&c, "t1", 700);
    svc_session *s = svc_session_enable(svc, NULL, &c.cfg, -1, NULL, 0);
    ck_assert_ptr_nonnull(s);
    ck_assert_int_eq(FR.start_ds, 0);                  /* configured only */
    svc_tick(svc, svc_now_ms() + 1000);
    ck_assert_int_eq(FR.start_ds, 0);
    ck_assert_uint_eq(svc_producer_activate_triggers(svc, p, T1, 1), 1);
    uint64_t t0 = svc_now_ms();
    ck_assert_int_eq(FR.start_ds, 1);
    ck_assert_uint_eq(svc_session_config(s)->duration_ms, 700);
    /* Starting again on a second trigger: no. */
    ck_assert_uint_eq(svc_producer_activate_triggers(svc, p, T1, 1), 1);
    ck_assert_int_eq(FR.start_ds, 1);
    svc_tick(svc, t0 + 300);
    ck_assert(!svc_session_is_disabled(s));
    fh_settle(svc, t0 + 701);
    ck_assert(svc_session_is_disabled(s));
    fh_read r = fh_read_all(svc, s);
    ck_assert_uint_eq(r.triggers, 2);
    svc_destroy(svc);
}
END_TEST

START_TEST(test_start_tracing_timeout_disables_unstarted)
{
    svc_service *svc = fh_service();
    fh_producer(svc, "app", "test.ds", 1000);
    fh_cfg c;
    fh_cfg_init(&c);
    fh_cfg_triggers(&c, START, 1500);
    fh_cfg_add_trigger(&c, "t1", 0);
    svc_session *s = svc_session_enable(svc, NULL, &c.cfg, -1, NULL, 0);
    uint64_t t0 = svc_now_ms();
    svc_tick(svc, t0 + 1000);
    ck_assert(!svc_session_is_disabled(s));
    svc_tick(svc, t0 + 1501);
    ck_assert(svc_session_is_disabled(s));
    ck_assert_int_eq(FR.disabled, 1);
    ck_assert_int_eq(FR.start_ds, 0);
    ck_assert_uint_eq(fh_read_all(svc, s).packets, 0);
    svc_destroy(svc);
}
END_TEST

/* ---------------------------------------------------------------- CLONE */

START_TEST(test_clone_snapshot_notifies_and_clone_carries_triggers)
{
    svc_service *svc = fh_service();
    svc_producer *p = fh_producer(svc, "app", "test.ds", 1000);
    fh_cfg c;
    fh_cfg_init(&c);
    fh_cfg_triggers(&c, CLONE, 60000);
    fh_cfg_add_trigger(&c, "t1", 200);
    int consumer;
    svc_session *s = svc_session_enable(svc, &consumer, &c.cfg, -1, NULL, 0);
    ck_assert_ptr_nonnull(s);
    ck_assert_uint_eq(svc_producer_activate_triggers(svc, p, T1, 1), 1);
    uint64_t t0 = svc_now_ms();
    svc_tick(svc, t0 + 100);
    ck_assert_int_eq(FR.clone_hits, 0);               /* stop_delay_ms */
    svc_tick(svc, t0 + 201);
    ck_assert_int_eq(FR.clone_hits, 1);
    ck_assert_uint_eq(FR.clone_tsid, svc_session_id(s));
    ck_assert_str_eq(FR.hit_name, "t1");
    ck_assert_str_eq(FR.hit_producer, "app");
    ck_assert_uint_eq(FR.hit_delay, 200);
    ck_assert_int_eq(FR.hit_uid, 1000);
    svc_tick(svc, t0 + 1000);
    ck_assert_int_eq(FR.clone_hits, 1);               /* once per trigger */
    ck_assert(!svc_session_is_disabled(s));           /* keeps tracing */
    /* The session itself is read through clones only. */
    ck_assert_uint_eq(fh_read_all(svc, s).packets, 0);
    svc_session *k = svc_session_clone(svc, NULL, svc_session_id(s), NULL,
                                       NULL, 0);
    ck_assert_ptr_nonnull(k);
    svc_trigger_hit h = { "t1", "app", 1000, FR.hit_boot_ns, 200 };
    ck_assert_int_eq(svc_session_set_clone_trigger(k, &h), 0);
    ck_assert_int_eq(svc_session_set_clone_trigger(s, &h), -EINVAL);
    fh_read r = fh_read_all(svc, k);
    ck_assert_uint_gt(r.packets, 2);
    ck_assert_uint_eq(r.triggers, 1);
    ck_assert_uint_eq(r.clone_triggers, 1);
    ck_assert_str_eq(r.clone_name, "t1");
    ck_assert_uint_eq(r.clone_started, 1);    /* the clone's lifecycle */
    ck_assert_uint_eq(r.buffer_cloned, 1);
    ck_assert_uint_eq(fh_read_all(svc, k).clone_started, 0); /* once */
    /* The source handed its triggers over: the next clone has only new
     * ones. */
    ck_assert_uint_eq(svc_session_triggers_received(s), 0);
    ck_assert_uint_eq(svc_producer_activate_triggers(svc, p, T1, 1), 1);
    svc_tick(svc, svc_now_ms() + 201);
    ck_assert_int_eq(FR.clone_hits, 2);
    svc_session *k2 = svc_session_clone(svc, NULL, svc_session_id(s), NULL,
                                        NULL, 0);
    ck_assert_ptr_nonnull(k2);
    r = fh_read_all(svc, k2);
    ck_assert_uint_eq(r.triggers, 1);
    ck_assert_uint_eq(r.clone_triggers, 0);
    /* Without a consumer (detached) nothing is notified. */
    svc_destroy(svc);
}
END_TEST

/* ---------------------------------------------------------------- limits */

START_TEST(test_producer_regex_skip_probability_and_daily_limit)
{
    svc_service *svc = fh_service();
    svc_producer *good = fh_producer(svc, "good-app", "test.ds", 1000);
    svc_producer *bad = fh_producer(svc, "bad-app", "other.ds", 1000);
    fh_cfg c;
    fh_cfg_init(&c);
    fh_cfg_triggers(&c, CLONE, 60000);
    Perfetto__Protos__TraceConfig__TriggerConfig__Trigger *t1 =
        fh_cfg_add_trigger(&c, "t1", 0);
    t1->producer_name_regex = "good.*";
    Perfetto__Protos__TraceConfig__TriggerConfig__Trigger *t2 =
        fh_cfg_add_trigger(&c, "never", 0);
    t2->has_skip_probability = true;
    t2->skip_probability = 1.0;
    Perfetto__Protos__TraceConfig__TriggerConfig__Trigger *t3 =
        fh_cfg_add_trigger(&c, "twice", 0);
    t3->has_max_per_24_h = true;
    t3->max_per_24_h = 2;
    t3->has_skip_probability = true;
    t3->skip_probability = 0.0;
    svc_session *s = svc_session_enable(svc, NULL, &c.cfg, -1, NULL, 0);
    ck_assert_ptr_nonnull(s);
    ck_assert_uint_eq(svc_producer_activate_triggers(svc, bad, T1, 1), 0);
    ck_assert_uint_eq(svc_producer_activate_triggers(svc, good, T1, 1), 1);
    /* Full match: "good" alone is not "good.*"-prefixed garbage. */
    ck_assert_uint_eq(svc_activate_triggers(svc, "xgood-app", 1, T1, 1), 0);
    static const char *const nv[] = { "never" };
    for (int i = 0; i < 50; i++)
        ck_assert_uint_eq(svc_producer_activate_triggers(svc, good, nv, 1),
                          0);
    static const char *const tw[] = { "twice" };
    ck_assert_uint_eq(svc_producer_activate_triggers(svc, bad, tw, 1), 1);
    ck_assert_uint_eq(svc_producer_activate_triggers(svc, bad, tw, 1), 1);
    ck_assert_uint_eq(svc_producer_activate_triggers(svc, bad, tw, 1), 0);
    /* Several names in one request, NULLs ignored. */
    const char *const mix[] = { "t1", NULL, "twice", "t1" };
    ck_assert_uint_eq(svc_producer_activate_triggers(svc, good, mix, 4), 2);
    ck_assert_uint_eq(svc_session_triggers_received(s), 5);
    svc_destroy(svc);
}
END_TEST

/* ---------------------------------------------------------------- clear */

START_TEST(test_clear_incremental_state_periodically)
{
    svc_service *svc = fh_service();
    svc_producer *p = fh_producer(svc, "app", "test.ds", 1000);
    fh_producer(svc, "idle", "unused.ds", 1000);
    fh_cfg c;
    fh_cfg_init(&c);
    perfetto__protos__trace_config__incremental_state_config__init(&c.ic);
    c.ic.has_clear_period_ms = true;
    c.ic.clear_period_ms = 100;
    c.cfg.incremental_state_config = &c.ic;
    svc_session *s = svc_session_enable(svc, NULL, &c.cfg, -1, NULL, 0);
    ck_assert_ptr_nonnull(s);
    uint64_t t0 = svc_now_ms();
    ck_assert(svc_next_deadline_ms(svc) != 0);
    svc_tick(svc, t0);                  /* arms the first period */
    ck_assert_int_eq(FR.clears, 0);
    svc_tick(svc, t0 + 101);
    ck_assert_int_eq(FR.clears, 1);     /* one producer has instances */
    ck_assert_uint_eq(FR.nclear_ids, 1);
    ck_assert_uint_eq(FR.clear_ids[0], s->inst[0].instance_id);
    ck_assert_uint_eq(s->inst[0].producer_id, svc_producer_id(p));
    svc_tick(svc, t0 + 150);
    ck_assert_int_eq(FR.clears, 1);
    svc_tick(svc, t0 + 202);
    ck_assert_int_eq(FR.clears, 2);
    svc_session_disable(svc, s);
    fh_settle(svc, t0 + 300);
    ck_assert(svc_session_is_disabled(s));
    int n = FR.clears;
    fh_settle(svc, t0 + 50000);
    ck_assert_int_eq(FR.clears, n);     /* not once stopped */
    svc_destroy(svc);
}
END_TEST

START_TEST(test_no_clear_without_config)
{
    svc_service *svc = fh_service();
    fh_producer(svc, "app", "test.ds", 1000);
    fh_cfg c;
    fh_cfg_init(&c);
    svc_session *s = svc_session_enable(svc, NULL, &c.cfg, -1, NULL, 0);
    ck_assert_ptr_nonnull(s);
    uint64_t t0 = svc_now_ms();
    for (uint64_t t = t0; t < t0 + 5000; t += 50)
        svc_tick(svc, t);
    ck_assert_int_eq(FR.clears, 0);
    svc_destroy(svc);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("svc_trigger");
    TCase *tc = tcase_create("triggers");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_config_checks);
    tcase_add_test(tc, test_stop_tracing_trigger_ends_session_after_delay);
    tcase_add_test(tc, test_stop_tracing_without_trigger_returns_nothing);
    tcase_add_test(tc, test_stop_delay_counts_suspend_when_preferred);
    tcase_add_test(tc, test_start_tracing_waits_for_trigger);
    tcase_add_test(tc, test_start_tracing_timeout_disables_unstarted);
    tcase_add_test(tc, test_clone_snapshot_notifies_and_clone_carries_triggers);
    tcase_add_test(tc, test_producer_regex_skip_probability_and_daily_limit);
    suite_add_tcase(s, tc);
    tc = tcase_create("incremental");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_clear_incremental_state_periodically);
    tcase_add_test(tc, test_no_clear_without_config);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
