/*
 * check_svc_ipc_ext.c - the issue-12 ConsumerPort/ProducerPort methods of
 * shmtraced's IPC glue, in one process: the daemon on private sockets in a
 * temp dir, hand-made producer and consumers (ipc_client) on the same
 * ipc_loop.
 *   - QueryServiceState larger than one IPC frame arrives in pieces that
 *     concatenate to the whole (every descriptor byte for byte);
 *   - ActivateTriggers on the producer port + ObserveEvents: a
 *     CLONE_SNAPSHOT trigger reaches the consumer as clone_trigger_hit, and
 *     CloneSession with that trigger succeeds;
 *   - Detach survives the consumer's disconnect; Attach from another
 *     connection returns the config; EnableTracing(attach_notification_only)
 *     is answered when the session ends; a wrong key fails;
 *   - ChangeTraceConfig widening producer_name_filter starts the data
 *     source in the producer that now matches.
 */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ipc.pb-c.h"
#include "../svc_daemon_fixture.h"
#include "svc_ipc.h"

static svd_fx F;

static void run_until(bool *flag, int max_iters)
{
    svd_run_until(&F, flag, max_iters);
}

static void setup(void)
{
    svd_start(&F, "featipc");
}

static void teardown(void)
{
    svd_stop(&F);
}

/* ---------------------------------------------------------------- clients */

static void on_bound(ipc_client *c, bool ok, void *ctx)
{
    *(bool *)ctx = ok;
}
static void on_disc(ipc_client *c, int err, void *ctx)
{
}
static const ipc_client_cbs cbs = { on_bound, on_disc };

typedef struct {
    bool done;
    int status;
    int replies;
    ProtobufCMessage *last;     /* packed+unpacked copy of the last reply */
} reply_t;

static void on_reply(ipc_client *c, int st, const ProtobufCMessage *msg,
                     bool more, void *ctx)
{
    reply_t *r = ctx;
    r->replies++;
    r->status = st;
    if (st == 0 && msg) {
        if (r->last)
            protobuf_c_message_free_unpacked(r->last, NULL);
        size_t n = protobuf_c_message_get_packed_size(msg);
        uint8_t *b = malloc(n ? n : 1);
        protobuf_c_message_pack(msg, b);
        r->last = protobuf_c_message_unpack(msg->descriptor, NULL, n, b);
        free(b);
    }
    if (!more || st < 0)
        r->done = true;
}

static void reply_free(reply_t *r)
{
    if (r->last)
        protobuf_c_message_free_unpacked(r->last, NULL);
    memset(r, 0, sizeof(*r));
}

static ipc_client *connect_to(const char *path, const char *svc)
{
    bool bound = false;
    int err = 0;
    ipc_client *c = ipc_client_connect(F.loop, path, svc, &cbs, &bound, &err);
    ck_assert_ptr_nonnull(c);
    run_until(&bound, 500);
    return c;
}

static void call(ipc_client *c, const char *method, const ProtobufCMessage *a,
                 const ProtobufCMessageDescriptor *rd, reply_t *r)
{
    memset(r, 0, sizeof(*r));
    ck_assert_int_gt(ipc_client_invoke(c, method, a, -1, rd, on_reply, r), 0);
    run_until(&r->done, 1000);
}

static ipc_client *producer(const char *name)
{
    ipc_client *p = connect_to(F.ppath, IPC_PRODUCER_PORT);
    Perfetto__Protos__InitializeConnectionRequest ic =
        PERFETTO__PROTOS__INITIALIZE_CONNECTION_REQUEST__INIT;
    ic.producer_name = (char *)name;
    reply_t r;
    call(p, "InitializeConnection", &ic.base, NULL, &r);
    ck_assert_int_eq(r.status, 0);
    return p;
}

static void register_ds(ipc_client *p, const char *name)
{
    Perfetto__Protos__RegisterDataSourceRequest rr =
        PERFETTO__PROTOS__REGISTER_DATA_SOURCE_REQUEST__INIT;
    Perfetto__Protos__DataSourceDescriptor dd =
        PERFETTO__PROTOS__DATA_SOURCE_DESCRIPTOR__INIT;
    dd.name = (char *)name;
    rr.data_source_descriptor = &dd;
    reply_t r;
    call(p, "RegisterDataSource", &rr.base, NULL, &r);
    ck_assert_int_eq(r.status, 0);
}

/* ---------------------------------------------------------------- query */

typedef struct {
    bool done;
    int pieces, status;
    uint8_t *buf;
    size_t len;
} qstate;

static void on_query(ipc_client *c, int st, const ProtobufCMessage *msg,
                     bool more, void *ctx)
{
    qstate *q = ctx;
    q->status = st;
    if (st == 0 && msg) {
        const Perfetto__Protos__QueryServiceStateResponse *r =
            (const void *)msg;
        ck_assert_ptr_nonnull(r->service_state);
        size_t n = perfetto__protos__tracing_service_state__get_packed_size(
            r->service_state);
        q->buf = realloc(q->buf, q->len + n + 1);
        perfetto__protos__tracing_service_state__pack(r->service_state,
                                                      q->buf + q->len);
        q->len += n;
        q->pieces++;
    }
    if (!more || st < 0)
        q->done = true;
}

START_TEST(test_query_larger_than_a_frame)
{
    ipc_client *p = producer("big-producer");
    /* 300 descriptors of ~1 KB each (a field we do not model, like a
     * track_event_descriptor), sent as raw RegisterDataSourceRequests. */
    enum { N = 300, BLOB = 1000 };
    for (int i = 0; i < N; i++) {
        Perfetto__Protos__DataSourceDescriptor dd =
            PERFETTO__PROTOS__DATA_SOURCE_DESCRIPTOR__INIT;
        char name[32];
        snprintf(name, sizeof name, "ds.%03d", i);
        dd.name = name;
        uint8_t desc[BLOB + 64];
        size_t n = perfetto__protos__data_source_descriptor__pack(&dd, desc);
        desc[n++] = 0x32;                       /* field 6, bytes */
        desc[n++] = (uint8_t)(0x80 | (BLOB & 0x7f));
        desc[n++] = (uint8_t)(BLOB >> 7);
        memset(desc + n, 'a' + i % 26, BLOB);
        n += BLOB;
        uint8_t req[BLOB + 80];
        size_t m = 0;
        req[m++] = 0x0a;                        /* data_source_descriptor */
        req[m++] = (uint8_t)(0x80 | (n & 0x7f));
        req[m++] = (uint8_t)(n >> 7);
        memcpy(req + m, desc, n);
        m += n;
        reply_t r;
        memset(&r, 0, sizeof r);
        ck_assert_int_gt(ipc_client_invoke_raw(p, "RegisterDataSource", req,
                m, -1, NULL, on_reply, &r), 0);
        run_until(&r.done, 1000);
        ck_assert_int_eq(r.status, 0);
    }
    ipc_client *c = connect_to(F.cpath, IPC_CONSUMER_PORT);
    Perfetto__Protos__QueryServiceStateRequest q =
        PERFETTO__PROTOS__QUERY_SERVICE_STATE_REQUEST__INIT;
    qstate qs = { 0 };
    ck_assert_int_gt(ipc_client_invoke(c, "QueryServiceState", &q.base, -1,
            &perfetto__protos__query_service_state_response__descriptor,
            on_query, &qs), 0);
    run_until(&qs.done, 2000);
    ck_assert_int_eq(qs.status, 0);
    ck_assert_int_gt(qs.pieces, 2);             /* 300 KB > 128 KB frames */
    Perfetto__Protos__TracingServiceState *st =
        perfetto__protos__tracing_service_state__unpack(NULL, qs.len, qs.buf);
    ck_assert_ptr_nonnull(st);
    ck_assert_uint_eq(st->n_producers, 1);
    ck_assert_str_eq(st->producers[0]->name, "big-producer");
    ck_assert_uint_eq(st->n_data_sources, N);
    for (int i = 0; i < N; i++) {
        char name[32];
        snprintf(name, sizeof name, "ds.%03d", i);
        const Perfetto__Protos__DataSourceDescriptor *d =
            st->data_sources[i]->ds_descriptor;
        ck_assert_str_eq(d->name, name);
        uint8_t back[BLOB + 64];
        size_t n = perfetto__protos__data_source_descriptor__pack(d, back);
        ck_assert_uint_gt(n, BLOB);
        ck_assert_uint_eq(back[n - 1], (uint8_t)('a' + i % 26));
    }
    ck_assert(strstr(st->tracing_service_version, "shmtraced"));
    perfetto__protos__tracing_service_state__free_unpacked(st, NULL);
    free(qs.buf);
    ipc_client_destroy(c);
    ipc_client_destroy(p);
}
END_TEST

/* ---------------------------------------------------------------- triggers */

static void enable_config(ipc_client *c, Perfetto__Protos__TraceConfig *cfg,
                          reply_t *enable_reply)
{
    Perfetto__Protos__EnableTracingRequest e =
        PERFETTO__PROTOS__ENABLE_TRACING_REQUEST__INIT;
    e.trace_config = cfg;
    memset(enable_reply, 0, sizeof(*enable_reply));
    ck_assert_int_gt(ipc_client_invoke(c, "EnableTracing", &e.base, -1,
            &perfetto__protos__enable_tracing_response__descriptor,
            on_reply, enable_reply), 0);
}

typedef struct {
    Perfetto__Protos__TraceConfig cfg;
    Perfetto__Protos__TraceConfig__BufferConfig b, *bp[1];
    Perfetto__Protos__TraceConfig__DataSource ds, *dsp[1];
    Perfetto__Protos__DataSourceConfig dc;
    Perfetto__Protos__TraceConfig__TriggerConfig tc;
    Perfetto__Protos__TraceConfig__TriggerConfig__Trigger t, *tp[1];
} cfg_t;

static void cfg_init(cfg_t *c)
{
    memset(c, 0, sizeof(*c));
    perfetto__protos__trace_config__init(&c->cfg);
    perfetto__protos__trace_config__buffer_config__init(&c->b);
    c->b.has_size_kb = true;
    c->b.size_kb = 256;
    c->bp[0] = &c->b;
    c->cfg.n_buffers = 1;
    c->cfg.buffers = c->bp;
    perfetto__protos__trace_config__data_source__init(&c->ds);
    perfetto__protos__data_source_config__init(&c->dc);
    c->dc.name = "test.ds";
    c->ds.config = &c->dc;
    c->dsp[0] = &c->ds;
    c->cfg.n_data_sources = 1;
    c->cfg.data_sources = c->dsp;
}

typedef struct {
    bool got;
    char name[64], producer[64];
    int64_t tsid;
} hit_t;

static void on_event(ipc_client *c, int st, const ProtobufCMessage *msg,
                     bool more, void *ctx)
{
    hit_t *h = ctx;
    if (st != 0 || !msg)
        return;
    const Perfetto__Protos__ObserveEventsResponse *r = (const void *)msg;
    if (r->events && r->events->clone_trigger_hit) {
        h->got = true;
        snprintf(h->name, sizeof h->name, "%s",
                 r->events->clone_trigger_hit->trigger_name);
        snprintf(h->producer, sizeof h->producer, "%s",
                 r->events->clone_trigger_hit->producer_name);
        h->tsid = r->events->clone_trigger_hit->tracing_session_id;
    }
}

START_TEST(test_clone_snapshot_trigger_over_ipc)
{
    ipc_client *p = producer("trig-producer");
    register_ds(p, "test.ds");
    ipc_client *c = connect_to(F.cpath, IPC_CONSUMER_PORT);
    cfg_t cf;
    cfg_init(&cf);
    perfetto__protos__trace_config__trigger_config__init(&cf.tc);
    cf.tc.has_trigger_mode = true;
    cf.tc.trigger_mode = 4;
    cf.tc.has_trigger_timeout_ms = true;
    cf.tc.trigger_timeout_ms = 600000;
    perfetto__protos__trace_config__trigger_config__trigger__init(&cf.t);
    cf.t.name = "snap";
    cf.tp[0] = &cf.t;
    cf.tc.n_triggers = 1;
    cf.tc.triggers = cf.tp;
    cf.cfg.trigger_config = &cf.tc;
    Perfetto__Protos__ObserveEventsRequest ob =
        PERFETTO__PROTOS__OBSERVE_EVENTS_REQUEST__INIT;
    Perfetto__Protos__ObservableEvents__Type ty =
        PERFETTO__PROTOS__OBSERVABLE_EVENTS__TYPE__TYPE_CLONE_TRIGGER_HIT;
    ob.n_events_to_observe = 1;
    ob.events_to_observe = &ty;
    hit_t hit = { 0 };
    ck_assert_int_gt(ipc_client_invoke(c, "ObserveEvents", &ob.base, -1,
            &perfetto__protos__observe_events_response__descriptor,
            on_event, &hit), 0);
    reply_t en;
    enable_config(c, &cf.cfg, &en);
    for (int i = 0; i < 20; i++)
        ipc_loop_run_once(F.loop, 5);
    ck_assert(!en.done);                       /* session running */
    Perfetto__Protos__ActivateTriggersRequest at =
        PERFETTO__PROTOS__ACTIVATE_TRIGGERS_REQUEST__INIT;
    char *names[] = { "other", "snap" };
    at.n_trigger_names = 2;
    at.trigger_names = names;
    reply_t ar;
    call(p, "ActivateTriggers", &at.base, NULL, &ar);
    ck_assert_int_eq(ar.status, 0);
    run_until(&hit.got, 1000);                 /* the daemon's tick */
    ck_assert_str_eq(hit.name, "snap");
    ck_assert_str_eq(hit.producer, "trig-producer");
    /* perfetto clones from another connection with the trigger's info. */
    ipc_client *k = connect_to(F.cpath, IPC_CONSUMER_PORT);
    Perfetto__Protos__CloneSessionRequest cr =
        PERFETTO__PROTOS__CLONE_SESSION_REQUEST__INIT;
    cr.selector_case =
        PERFETTO__PROTOS__CLONE_SESSION_REQUEST__SELECTOR_SESSION_ID;
    cr.session_id = (uint64_t)hit.tsid;
    cr.clone_trigger_name = "snap";
    cr.clone_trigger_producer_name = "trig-producer";
    reply_t kr;
    call(k, "CloneSession", &cr.base,
         &perfetto__protos__clone_session_response__descriptor, &kr);
    ck_assert_int_eq(kr.status, 0);
    const Perfetto__Protos__CloneSessionResponse *resp = (const void *)kr.last;
    ck_assert(resp->success);
    ck_assert(!resp->was_write_into_file);
    reply_free(&kr);
    reply_free(&en);
    ipc_client_destroy(k);
    ipc_client_destroy(c);
    ipc_client_destroy(p);
}
END_TEST

/* ---------------------------------------------------------------- detach */

START_TEST(test_detach_attach_over_ipc)
{
    ipc_client *p = producer("dprod");
    register_ds(p, "test.ds");
    ipc_client *a = connect_to(F.cpath, IPC_CONSUMER_PORT);
    cfg_t cf;
    cfg_init(&cf);
    cf.cfg.has_duration_ms = true;
    cf.cfg.duration_ms = 600000;
    cf.cfg.unique_session_name = "det";
    reply_t en;
    enable_config(a, &cf.cfg, &en);
    Perfetto__Protos__DetachRequest dr = PERFETTO__PROTOS__DETACH_REQUEST__INIT;
    reply_t r;
    dr.key = "";
    call(a, "Detach", &dr.base, NULL, &r);
    ck_assert_int_ne(r.status, 0);             /* empty key */
    dr.key = "k";
    call(a, "Detach", &dr.base, NULL, &r);
    ck_assert_int_eq(r.status, 0);
    ipc_client_destroy(a);                     /* the session survives */
    for (int i = 0; i < 20; i++)
        ipc_loop_run_once(F.loop, 5);
    ck_assert_uint_eq(svc_session_count(svc_daemon_service(F.d)), 1);
    reply_free(&en);

    ipc_client *b = connect_to(F.cpath, IPC_CONSUMER_PORT);
    Perfetto__Protos__AttachRequest atr = PERFETTO__PROTOS__ATTACH_REQUEST__INIT;
    atr.key = "wrong";
    call(b, "Attach", &atr.base, &perfetto__protos__attach_response__descriptor,
         &r);
    ck_assert_int_ne(r.status, 0);
    reply_free(&r);
    atr.key = "k";
    call(b, "Attach", &atr.base, &perfetto__protos__attach_response__descriptor,
         &r);
    ck_assert_int_eq(r.status, 0);
    const Perfetto__Protos__AttachResponse *resp = (const void *)r.last;
    ck_assert_ptr_nonnull(resp->trace_config);
    ck_assert_str_eq(resp->trace_config->unique_session_name, "det");
    ck_assert_uint_eq(resp->trace_config->buffers[0]->size_kb, 256);
    reply_free(&r);
    /* The end-of-session notification, then stop it. */
    Perfetto__Protos__EnableTracingRequest e =
        PERFETTO__PROTOS__ENABLE_TRACING_REQUEST__INIT;
    e.has_attach_notification_only = true;
    e.attach_notification_only = true;
    reply_t note;
    memset(&note, 0, sizeof note);
    ck_assert_int_gt(ipc_client_invoke(b, "EnableTracing", &e.base, -1,
            &perfetto__protos__enable_tracing_response__descriptor,
            on_reply, &note), 0);
    for (int i = 0; i < 20; i++)
        ipc_loop_run_once(F.loop, 5);
    ck_assert(!note.done);
    call(b, "DisableTracing", NULL, NULL, &r);
    ck_assert_int_eq(r.status, 0);
    run_until(&note.done, 2000);
    ck_assert_int_eq(note.status, 0);
    const Perfetto__Protos__EnableTracingResponse *er =
        (const void *)note.last;
    ck_assert(er->disabled);
    reply_free(&note);
    ipc_client_destroy(b);
    ipc_client_destroy(p);
}
END_TEST

/* ---------------------------------------------------------------- change */

static void on_cmd_count(ipc_client *c, int st, const ProtobufCMessage *msg,
                         bool more, void *ctx)
{
    if (st != 0 || !msg)
        return;
    const Perfetto__Protos__GetAsyncCommandResponse *r = (const void *)msg;
    if (r->cmd_case ==
        PERFETTO__PROTOS__GET_ASYNC_COMMAND_RESPONSE__CMD_START_DATA_SOURCE)
        (*(int *)ctx)++;
    if (r->cmd_case ==
        PERFETTO__PROTOS__GET_ASYNC_COMMAND_RESPONSE__CMD_SETUP_TRACING) {
        int fd = ipc_client_take_fd(c);
        if (fd >= 0)
            close(fd);
    }
}

START_TEST(test_change_trace_config_over_ipc)
{
    int starts_a = 0, starts_b = 0;
    ipc_client *pa = producer("alpha");
    ipc_client *pb = producer("beta");
    ck_assert_int_gt(ipc_client_invoke(pa, "GetAsyncCommand", NULL, -1,
            &perfetto__protos__get_async_command_response__descriptor,
            on_cmd_count, &starts_a), 0);
    ck_assert_int_gt(ipc_client_invoke(pb, "GetAsyncCommand", NULL, -1,
            &perfetto__protos__get_async_command_response__descriptor,
            on_cmd_count, &starts_b), 0);
    register_ds(pa, "test.ds");
    register_ds(pb, "test.ds");
    ipc_client *c = connect_to(F.cpath, IPC_CONSUMER_PORT);
    cfg_t cf;
    cfg_init(&cf);
    char *only_alpha[] = { "alpha" };
    cf.ds.n_producer_name_filter = 1;
    cf.ds.producer_name_filter = only_alpha;
    reply_t en;
    enable_config(c, &cf.cfg, &en);
    for (int i = 0; i < 200 && starts_a == 0; i++)
        ipc_loop_run_once(F.loop, 5);
    ck_assert_int_eq(starts_a, 1);
    ck_assert_int_eq(starts_b, 0);
    char *both[] = { "alpha", "beta" };
    cf.ds.n_producer_name_filter = 2;
    cf.ds.producer_name_filter = both;
    Perfetto__Protos__ChangeTraceConfigRequest ch =
        PERFETTO__PROTOS__CHANGE_TRACE_CONFIG_REQUEST__INIT;
    ch.trace_config = &cf.cfg;
    reply_t r;
    call(c, "ChangeTraceConfig", &ch.base, NULL, &r);
    ck_assert_int_eq(r.status, 0);
    for (int i = 0; i < 200 && starts_b == 0; i++)
        ipc_loop_run_once(F.loop, 5);
    ck_assert_int_eq(starts_b, 1);
    ck_assert_int_eq(starts_a, 1);
    /* Without a session: refused. */
    ipc_client *n = connect_to(F.cpath, IPC_CONSUMER_PORT);
    call(n, "ChangeTraceConfig", &ch.base, NULL, &r);
    ck_assert_int_ne(r.status, 0);
    reply_free(&en);
    ipc_client_destroy(n);
    ipc_client_destroy(c);
    ipc_client_destroy(pb);
    ipc_client_destroy(pa);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("svc_ipc_ext");
    TCase *tc = tcase_create("ipc");
    tcase_set_timeout(tc, 120);
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_query_larger_than_a_frame);
    tcase_add_test(tc, test_clone_snapshot_trigger_over_ipc);
    tcase_add_test(tc, test_detach_attach_over_ipc);
    tcase_add_test(tc, test_change_trace_config_over_ipc);
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
