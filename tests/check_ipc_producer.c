/*
 * check_ipc_producer.c - libshm's producer IPC client (prod_*) against a
 * fake ProducerPort service built on the IPC host in this process: the
 * connection sequence, SetupTracing with a real SMB fd, start/flush/stop,
 * CommitData batching (never one IPC per packet), flush acks, notify
 * started/stopped, and reconnect after the service goes away.
 */
#include "config.h"

#include <check.h>
#include <errno.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <shmtrace/producer.h>
#include <shmtrace/smb_abi.h>
#include <shmtrace/smb_shm.h>

#include "common.pb-c.h"
#include "config.pb-c.h"
#include "ipc.h"
#include "tck_main.h"

/* ---- fake service ------------------------------------------------- */

typedef struct fake {
    ipc_loop *loop;
    ipc_host *host;
    ipc_call *cmd_stream;
    char producer_name[64];
    uint32_t size_hint, page_hint;
    char ds_name[64];
    bool ds_notify_stop;
    int inits, registers, writers_registered;
    int commits;              /* CommitData IPCs */
    int chunks;               /* chunks_to_move total */
    int bad_chunks;           /* out of range page/chunk */
    uint64_t last_flush_id;
    uint64_t stopped_id, started_id;
    int disconnects;
    smb_shm shm;
} fake;

static void reply_empty(ipc_call *call)
{
    ipc_call_reply(call, NULL, false);
}

static void m_init(ipc_call *call, const ProtobufCMessage *a, void *ctx)
{
    fake *f = ctx;
    const Perfetto__Protos__InitializeConnectionRequest *r = (const void *)a;
    f->inits++;
    snprintf(f->producer_name, sizeof f->producer_name, "%s",
             r->producer_name ? r->producer_name : "");
    f->size_hint = r->shared_memory_size_hint_bytes;
    f->page_hint = r->shared_memory_page_size_hint_bytes;
    Perfetto__Protos__InitializeConnectionResponse rep =
        PERFETTO__PROTOS__INITIALIZE_CONNECTION_RESPONSE__INIT;
    ipc_call_reply(call, &rep.base, false);
}

static void m_register(ipc_call *call, const ProtobufCMessage *a, void *ctx)
{
    fake *f = ctx;
    const Perfetto__Protos__RegisterDataSourceRequest *r = (const void *)a;
    f->registers++;
    if (r->data_source_descriptor && r->data_source_descriptor->name) {
        snprintf(f->ds_name, sizeof f->ds_name, "%s",
                 r->data_source_descriptor->name);
        f->ds_notify_stop = r->data_source_descriptor->will_notify_on_stop;
    }
    reply_empty(call);
}

static void m_commit(ipc_call *call, const ProtobufCMessage *a, void *ctx)
{
    fake *f = ctx;
    const Perfetto__Protos__CommitDataRequest *r = (const void *)a;
    f->commits++;
    for (size_t i = 0; i < r->n_chunks_to_move; i++) {
        const Perfetto__Protos__CommitDataRequest__ChunksToMove *m =
            r->chunks_to_move[i];
        f->chunks++;
        if (m->page >= f->shm.size / 4096 || m->chunk >= 14 ||
            m->target_buffer != 7)
            f->bad_chunks++;
    }
    if (r->has_flush_request_id)
        f->last_flush_id = r->flush_request_id;
    reply_empty(call);
}

static void m_cmds(ipc_call *call, const ProtobufCMessage *a, void *ctx)
{
    (void)a;
    ((fake *)ctx)->cmd_stream = call;
}

static void m_rtw(ipc_call *call, const ProtobufCMessage *a, void *ctx)
{
    (void)a;
    ((fake *)ctx)->writers_registered++;
    reply_empty(call);
}

static void m_started(ipc_call *call, const ProtobufCMessage *a, void *ctx)
{
    ((fake *)ctx)->started_id =
        ((const Perfetto__Protos__NotifyDataSourceStartedRequest *)a)
            ->data_source_id;
    reply_empty(call);
}

static void m_stopped(ipc_call *call, const ProtobufCMessage *a, void *ctx)
{
    ((fake *)ctx)->stopped_id =
        ((const Perfetto__Protos__NotifyDataSourceStoppedRequest *)a)
            ->data_source_id;
    reply_empty(call);
}

static void m_other(ipc_call *call, const ProtobufCMessage *a, void *ctx)
{
    (void)a; (void)ctx;
    reply_empty(call);
}

static void f_disconnect(ipc_conn *conn, void *ctx)
{
    (void)conn;
    fake *f = ctx;
    f->disconnects++;
    f->cmd_stream = NULL;
}

#define D(x) (&perfetto__protos__##x##__descriptor)
static const ipc_method producer_port[] = {
    { "InitializeConnection", D(initialize_connection_request), m_init },
    { "RegisterDataSource", D(register_data_source_request), m_register },
    { "UnregisterDataSource", D(unregister_data_source_request), m_other },
    { "CommitData", D(commit_data_request), m_commit },
    { "GetAsyncCommand", D(get_async_command_request), m_cmds },
    { "RegisterTraceWriter", D(register_trace_writer_request), m_rtw },
    { "UnregisterTraceWriter", D(unregister_trace_writer_request), m_other },
    { "NotifyDataSourceStarted", D(notify_data_source_started_request),
      m_started },
    { "NotifyDataSourceStopped", D(notify_data_source_stopped_request),
      m_stopped },
    { "ActivateTriggers", D(activate_triggers_request), m_other },
    { "Sync", D(sync_request), m_other },
    { "UpdateDataSource", D(update_data_source_request), m_other },
};
static const ipc_service producer_service = {
    "ProducerPort", producer_port, 12, f_disconnect,
};

static char sock_path[128];
static char tmpdir[64];

static void fake_start(fake *f)
{
    memset(f, 0, sizeof *f);
    f->shm.fd = -1;
    f->loop = ipc_loop_create();
    int err = 0;
    f->host = ipc_host_create(f->loop, sock_path, 0660, &err);
    ck_assert_msg(f->host, "host: %s", ipc_strerror(err));
    ck_assert_int_eq(ipc_host_expose_service(f->host, &producer_service, f),
                     0);
}

static void fake_stop(fake *f)
{
    ipc_host_destroy(f->host);
    ipc_loop_destroy(f->loop);
    smb_shm_unmap(&f->shm);
}

static void pump_until(fake *f, bool (*pred)(fake *))
{
    for (int i = 0; i < 1000 && !pred(f); i++)
        ipc_loop_run_once(f->loop, 10);
    ck_assert(pred(f));
}

static void send_cmd(fake *f, Perfetto__Protos__GetAsyncCommandResponse *c,
                     int fd)
{
    ck_assert_ptr_nonnull(f->cmd_stream);
    ck_assert_int_eq(ipc_call_reply_fd(f->cmd_stream, &c->base, true, fd), 0);
}

/* GetAsyncCommand replies, one command each. */
static void send_setup(fake *f, uint32_t page_kb, int fd)
{
    Perfetto__Protos__GetAsyncCommandResponse c =
        PERFETTO__PROTOS__GET_ASYNC_COMMAND_RESPONSE__INIT;
    Perfetto__Protos__GetAsyncCommandResponse__SetupTracing st =
        PERFETTO__PROTOS__GET_ASYNC_COMMAND_RESPONSE__SETUP_TRACING__INIT;
    if (page_kb) {
        st.has_shared_buffer_page_size_kb = true;
        st.shared_buffer_page_size_kb = page_kb;
    }
    c.cmd_case = PERFETTO__PROTOS__GET_ASYNC_COMMAND_RESPONSE__CMD_SETUP_TRACING;
    c.setup_tracing = &st;
    send_cmd(f, &c, fd);
}

/* StartDataSource `name` as instance id (target buffer unset if 0). */
static void send_start(fake *f, uint64_t id, const char *name,
                       uint32_t target_buffer)
{
    Perfetto__Protos__DataSourceConfig cfg =
        PERFETTO__PROTOS__DATA_SOURCE_CONFIG__INIT;
    cfg.name = (char *)name;
    if (target_buffer) {
        cfg.has_target_buffer = true;
        cfg.target_buffer = target_buffer;
    }
    Perfetto__Protos__GetAsyncCommandResponse c =
        PERFETTO__PROTOS__GET_ASYNC_COMMAND_RESPONSE__INIT;
    Perfetto__Protos__GetAsyncCommandResponse__StartDataSource sd =
        PERFETTO__PROTOS__GET_ASYNC_COMMAND_RESPONSE__START_DATA_SOURCE__INIT;
    sd.has_new_instance_id = true;
    sd.new_instance_id = id;
    sd.config = &cfg;
    c.cmd_case =
        PERFETTO__PROTOS__GET_ASYNC_COMMAND_RESPONSE__CMD_START_DATA_SOURCE;
    c.start_data_source = &sd;
    send_cmd(f, &c, -1);
}

static void send_stop(fake *f, uint64_t id)
{
    Perfetto__Protos__GetAsyncCommandResponse c =
        PERFETTO__PROTOS__GET_ASYNC_COMMAND_RESPONSE__INIT;
    Perfetto__Protos__GetAsyncCommandResponse__StopDataSource sd =
        PERFETTO__PROTOS__GET_ASYNC_COMMAND_RESPONSE__STOP_DATA_SOURCE__INIT;
    sd.has_instance_id = true;
    sd.instance_id = id;
    c.cmd_case = PERFETTO__PROTOS__GET_ASYNC_COMMAND_RESPONSE__CMD_STOP_DATA_SOURCE;
    c.stop_data_source = &sd;
    send_cmd(f, &c, -1);
}

/* Flush request_id of the data sources ids[0..n). */
static void send_flush(fake *f, uint64_t request_id, uint64_t *ids, size_t n)
{
    Perfetto__Protos__GetAsyncCommandResponse c =
        PERFETTO__PROTOS__GET_ASYNC_COMMAND_RESPONSE__INIT;
    Perfetto__Protos__GetAsyncCommandResponse__Flush fl =
        PERFETTO__PROTOS__GET_ASYNC_COMMAND_RESPONSE__FLUSH__INIT;
    fl.n_data_source_ids = n;
    fl.data_source_ids = ids;
    fl.has_request_id = true;
    fl.request_id = request_id;
    c.cmd_case = PERFETTO__PROTOS__GET_ASYNC_COMMAND_RESPONSE__CMD_FLUSH;
    c.flush = &fl;
    send_cmd(f, &c, -1);
}

/* A 16-page SMB with 4 KiB pages, then StartDataSource of the registered
 * data source into target buffer 7. */
static void send_setup_and_start(fake *f, uint64_t id)
{
    ck_assert_int_eq(smb_shm_create(16 * 4096, &f->shm), 0);
    send_setup(f, 4, f->shm.fd);
    send_start(f, id, f->ds_name, 7);
}

/* ---- the producer application -------------------------------------- */

typedef struct app {
    atomic_int connects, disconnects, starts, stops, flushes;
    atomic_uint_fast64_t last_instance;
    int packets;            /* written on start */
    tw_writer *w;
    int first_disconnect_err;
    char refusal[256];      /* prod_refusal at the first disconnect */
} app;

static void a_connect(prod_producer *p, void *ctx)
{
    (void)p;
    atomic_fetch_add(&((app *)ctx)->connects, 1);
}

static void a_disconnect(prod_producer *p, int err, void *ctx)
{
    app *a = ctx;
    tw_writer_destroy(a->w);
    a->w = NULL;
    if (atomic_load(&a->disconnects) == 0) {
        const char *why = prod_refusal(p);
        a->first_disconnect_err = err;
        snprintf(a->refusal, sizeof a->refusal, "%s", why ? why : "");
    }
    atomic_fetch_add(&a->disconnects, 1);
}

static void a_start(prod_producer *p, const prod_ds_config *cfg, void *ctx)
{
    app *a = ctx;
    ck_assert_uint_eq(cfg->target_buffer, 7);
    ck_assert_str_eq(cfg->name, "test.source");
    a->w = prod_create_writer(p, cfg->target_buffer, TW_POLICY_DROP);
    ck_assert_ptr_nonnull(a->w);
    uint8_t payload[100];
    memset(payload, 0xab, sizeof payload);
    for (int i = 0; i < a->packets; i++) {
        tw_packet_begin(a->w);
        tw_add_varint(a->w, 8, (uint64_t)i);
        tw_begin_nested(a->w, 900);
        tw_add_varint(a->w, 2, (uint64_t)i);
        tw_add_bytes(a->w, 1, payload, sizeof payload);
        tw_end_nested(a->w);
        tw_packet_end(a->w);
    }
    atomic_store(&a->last_instance, cfg->instance_id);
    atomic_fetch_add(&a->starts, 1);
}

static void a_flush(prod_producer *p, const uint64_t *ids, size_t n,
                    uint64_t flush_id, uint64_t flags, void *ctx)
{
    (void)ids; (void)n; (void)flags;
    app *a = ctx;
    if (a->w)
        tw_writer_flush(a->w);
    atomic_fetch_add(&a->flushes, 1);
    prod_flush_done(p, flush_id);
}

static void a_stop(prod_producer *p, uint64_t id, void *ctx)
{
    app *a = ctx;
    tw_writer_destroy(a->w);
    a->w = NULL;
    atomic_fetch_add(&a->stops, 1);
    prod_notify_stopped(p, id);
}

static const prod_callbacks app_cbs = {
    a_connect, a_disconnect, NULL, a_start, a_stop, a_flush, NULL,
};

static bool has_cmd_stream(fake *f) { return f->cmd_stream && f->registers; }
static bool has_cmd_stream_only(fake *f) { return f->cmd_stream != NULL; }
static bool got_flush(fake *f) { return f->last_flush_id == 99; }
static bool got_stop(fake *f) { return f->stopped_id == 5; }
static bool got_disconnect(fake *f) { return f->disconnects == 1; }

/* Creates a producer of app a on the fake's socket (o's other fields as
 * given), registers "test.source" (a second registration is refused) and
 * waits until the fake holds its command stream. */
static prod_producer *connect_app(fake *f, app *a, prod_options *o,
                                  bool notify_on_stop)
{
    o->socket_path = sock_path;
    prod_producer *p = prod_create(o, &app_cbs, a);
    ck_assert_ptr_nonnull(p);
    prod_data_source ds = { 0 };
    ds.name = "test.source";
    ds.will_notify_on_stop = notify_on_stop;
    ck_assert_int_eq(prod_register_data_source(p, &ds), 0);
    ck_assert_int_eq(prod_register_data_source(p, &ds), -EEXIST);
    pump_until(f, has_cmd_stream);
    return p;
}

/* Runs the fake's loop until *counter reaches at least v (or gives up). */
static void pump_until_count(fake *f, atomic_int *counter, int v)
{
    for (int i = 0; i < 1000 && atomic_load(counter) < v; i++)
        ipc_loop_run_once(f->loop, 10);
}

static void setup(void)
{
    tck_mkdtemp(tmpdir, sizeof tmpdir, "check_prod");
    snprintf(sock_path, sizeof sock_path, "%s/p.sock", tmpdir);
}

static void teardown(void)
{
    tck_rmdir(tmpdir);
}

START_TEST(test_producer_session_batches_and_acks)
{
    fake f;
    fake_start(&f);
    app a = { 0 };
    a.packets = 400; /* ~50 KB: a dozen 4 KiB chunks */
    prod_options o = { 0 };
    o.producer_name = "checker";
    o.smb_size_hint_bytes = 65536;
    o.smb_page_size_hint_bytes = 4096;
    prod_producer *p = connect_app(&f, &a, &o, true);
    ck_assert_int_eq(f.inits, 1);
    ck_assert_str_eq(f.producer_name, "checker");
    ck_assert_uint_eq(f.size_hint, 65536);
    ck_assert_uint_eq(f.page_hint, 4096);
    ck_assert_str_eq(f.ds_name, "test.source");
    ck_assert(f.ds_notify_stop);
    send_setup_and_start(&f, 5);
    /* flush: the app flushes its writer and acks with the id */
    uint64_t ids[1] = { 5 };
    send_flush(&f, 99, ids, 1);
    pump_until(&f, got_flush);
    ck_assert_int_eq(atomic_load(&a.starts), 1);
    ck_assert_int_eq(f.writers_registered, 1);
    ck_assert_int_eq(f.bad_chunks, 0);
    /* 400 packets of ~110 bytes: > 10 chunks moved, and batched: far fewer
     * IPCs than packets (one per 4 KiB page of chunks at most). */
    ck_assert_int_ge(f.chunks, 10);
    ck_assert_int_le(f.commits, f.chunks + 1);
    ck_assert_int_lt(f.commits, a.packets / 10);
    /* stop -> NotifyDataSourceStopped */
    send_stop(&f, 5);
    pump_until(&f, got_stop);
    ck_assert_int_eq(atomic_load(&a.stops), 1);
    prod_stats st;
    prod_get_stats(p, &st);
    ck_assert_uint_eq(st.connects, 1);
    ck_assert_uint_ge(st.chunks_committed, 10);
    ck_assert_uint_ge(st.flush_acks, 1);
    ck_assert_uint_eq(st.commits_dropped, 0);
    prod_destroy(p);
    pump_until(&f, got_disconnect);
    fake_stop(&f);
}
END_TEST

START_TEST(test_producer_ignores_unknown_instance_and_ds)
{
    fake f;
    fake_start(&f);
    app a = { 0 };
    prod_options o = { 0 };
    prod_producer *p = connect_app(&f, &a, &o, false);
    ck_assert_str_eq(f.producer_name, "shmtrace-producer");
    /* start for a data source it never registered, stop for an unknown
     * instance: both ignored */
    send_start(&f, 1, "not.mine", 0);
    send_stop(&f, 77);
    /* flush without an SMB: bare ack */
    send_flush(&f, 99, NULL, 0);
    pump_until(&f, got_flush);
    ck_assert_int_eq(atomic_load(&a.starts), 0);
    ck_assert_int_eq(atomic_load(&a.stops), 0);
    ck_assert_int_eq(f.chunks, 0);
    prod_destroy(p);
    fake_stop(&f);
}
END_TEST

static bool registered_twice(fake *f) { return f->registers >= 1 && f->cmd_stream; }

START_TEST(test_producer_reconnects_after_service_restart)
{
    fake f;
    fake_start(&f);
    app a = { 0 };
    a.packets = 10;
    prod_options o = { 0 };
    o.reconnect = 1;
    o.reconnect_delay_ms = 20;
    prod_producer *p = connect_app(&f, &a, &o, false);
    send_setup_and_start(&f, 5);
    pump_until_count(&f, &a.starts, 1);
    ck_assert_int_eq(atomic_load(&a.starts), 1);
    /* the service goes away */
    fake_stop(&f);
    for (int i = 0; i < 500 && atomic_load(&a.disconnects) == 0; i++)
        usleep(10000);
    ck_assert_int_eq(atomic_load(&a.disconnects), 1);
    ck_assert_int_eq(prod_is_connected(p), 0);
    /* old-SMB writers are harmless; new writers are null writers */
    tw_writer *w = prod_create_writer(p, 7, TW_POLICY_DROP);
    ck_assert_ptr_nonnull(w);
    ck_assert_uint_eq(tw_writer_id(w), 0);
    tw_packet_begin(w);
    tw_add_varint(w, 8, 1);
    tw_packet_end(w);
    tw_writer_destroy(w);
    /* a new service on the same path: the producer comes back */
    fake_start(&f);
    pump_until(&f, registered_twice);
    ck_assert_int_eq(f.inits, 1);
    ck_assert_str_eq(f.ds_name, "test.source");
    pump_until_count(&f, &a.connects, 2);
    ck_assert_int_eq(atomic_load(&a.connects), 2);
    ck_assert_int_eq(prod_is_connected(p), 1);
    prod_destroy(p);
    fake_stop(&f);
}
END_TEST

START_TEST(test_producer_no_service)
{
    prod_options o = { 0 };
    o.socket_path = sock_path; /* nothing listens */
    errno = 0;
    ck_assert_ptr_null(prod_create(&o, NULL, NULL));
    ck_assert(errno == ENOENT || errno == ECONNREFUSED);
    /* with reconnect it starts anyway and reports failures */
    o.reconnect = 1;
    o.reconnect_delay_ms = 10;
    prod_producer *p = prod_create(&o, NULL, NULL);
    ck_assert_ptr_nonnull(p);
    ck_assert_int_eq(prod_is_connected(p), 0);
    prod_destroy(p);
}
END_TEST

/* A service that refuses the connection (its uid holds as many as it may
 * have): on_disconnect gets -ECONNREFUSED and prod_refusal the service's
 * words; once there is room, the producer gets in on its next retry. */
START_TEST(test_producer_refused_says_why)
{
    fake f;
    fake_start(&f);
    ipc_host_set_max_conns_per_uid(f.host, 1);
    int hog = ipc_sock_connect(sock_path);
    ck_assert_int_ge(hog, 0);
    for (int i = 0; i < 100 && ipc_host_num_conns(f.host) == 0; i++)
        ipc_loop_run_once(f.loop, 10);
    ck_assert_uint_eq(ipc_host_num_conns(f.host), 1);
    app a = { 0 };
    prod_options o = { 0 };
    o.socket_path = sock_path;
    o.reconnect = 1;
    o.reconnect_delay_ms = 20;
    prod_producer *p = prod_create(&o, &app_cbs, &a);
    ck_assert_ptr_nonnull(p);
    pump_until_count(&f, &a.disconnects, 1);
    ck_assert_int_ge(atomic_load(&a.disconnects), 1);
    ck_assert_int_eq(a.first_disconnect_err, -ECONNREFUSED);
    ck_assert_msg(strstr(a.refusal, "has 1 connections to this socket"),
                  "%s", a.refusal);
    ck_assert_int_eq(f.inits, 0);
    close(hog);
    for (int i = 0; i < 1000 && !f.inits; i++)
        ipc_loop_run_once(f.loop, 10);
    ck_assert_int_eq(f.inits, 1);
    prod_destroy(p);
    fake_stop(&f);
}
END_TEST

/* A hostile service: every bad command costs the producer its connection
 * (reported through on_disconnect), never a crash. */
static void hostile_round(int kind)
{
    fake f;
    fake_start(&f);
    app a = { 0 };
    prod_options o = { 0 };
    o.socket_path = sock_path;
    prod_producer *p = prod_create(&o, &app_cbs, &a);
    ck_assert_ptr_nonnull(p);
    pump_until(&f, has_cmd_stream_only);
    int pp[2] = { -1, -1 };
    if (kind == 0) {
        /* an fd that cannot be mapped as an SMB */
        ck_assert_int_eq(pipe(pp), 0);
        send_setup(&f, 0, pp[0]);
    } else if (kind == 1) {
        /* a real SMB with an impossible page size: 3 KiB is no page size */
        ck_assert_int_eq(smb_shm_create(16 * 4096, &f.shm), 0);
        send_setup(&f, 3, f.shm.fd);
    } else if (kind == 3) {
        /* 4194305 KiB would wrap to 1 KiB in 32-bit arithmetic */
        ck_assert_int_eq(smb_shm_create(16 * 4096, &f.shm), 0);
        send_setup(&f, 4194305, f.shm.fd);
    } else if (kind == 2) {
        /* a reply that does not decode as GetAsyncCommandResponse: field 1
         * (start_data_source, a message) arrives as a varint */
        Perfetto__Protos__RegisterTraceWriterRequest junk =
            PERFETTO__PROTOS__REGISTER_TRACE_WRITER_REQUEST__INIT;
        junk.has_trace_writer_id = true;
        junk.trace_writer_id = 5;
        ck_assert_int_eq(ipc_call_reply(f.cmd_stream, &junk.base, true), 0);
    }
    pump_until_count(&f, &a.disconnects, 1);
    ck_assert_int_eq(atomic_load(&a.disconnects), 1);
    ck_assert_int_eq(prod_is_connected(p), 0);
    /* no SMB was ever attached */
    ck_assert_ptr_null(prod_create_writer(p, 7, TW_POLICY_DROP));
    prod_destroy(p);
    if (pp[0] >= 0) {
        close(pp[0]);
        close(pp[1]);
    }
    fake_stop(&f);
}

START_TEST(test_producer_hostile_service_bad_smb_fd)
{
    hostile_round(0);
}
END_TEST

START_TEST(test_producer_hostile_service_bad_page_size)
{
    hostile_round(1);
}
END_TEST

START_TEST(test_producer_hostile_service_huge_page_size)
{
    hostile_round(3);
}
END_TEST

START_TEST(test_producer_hostile_service_undecodable_command)
{
    hostile_round(2);
}
END_TEST

static Suite *producer_suite(void)
{
    Suite *s = suite_create("ipc_producer");
    TCase *tc = TCK_CASE(s, "session", test_producer_session_batches_and_acks,
                         test_producer_ignores_unknown_instance_and_ds);
    tcase_add_checked_fixture(tc, setup, teardown);
    tc = TCK_CASE(s, "reconnect",
                  test_producer_reconnects_after_service_restart,
                  test_producer_no_service, test_producer_refused_says_why);
    tcase_add_checked_fixture(tc, setup, teardown);
    tc = TCK_CASE(s, "hostile", test_producer_hostile_service_bad_smb_fd,
                  test_producer_hostile_service_bad_page_size,
                  test_producer_hostile_service_huge_page_size,
                  test_producer_hostile_service_undecodable_command);
    tcase_add_checked_fixture(tc, setup, teardown);
    return s;
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    return tck_run(producer_suite());
}
