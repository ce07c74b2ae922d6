/*
 * check_svc_ipc.c - shmtraced's IPC glue end to end inside one process:
 * the daemon (svc_daemon) listens on private sockets in a temp dir; a
 * hand-made producer (ipc_client on ProducerPort, writing chunks into the
 * SMB it received by SCM_RIGHTS) and a consumer (ipc_client on
 * ConsumerPort) share the same ipc_loop. Also: malformed frames and
 * protocol misuse never bring the daemon down; a second daemon on the
 * same sockets is refused; consumer disconnect frees its session;
 * GetTraceStats is always answered, with thousands of writers too;
 * all_data_sources_started waits for a start ack over the socket.
 */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "svc_daemon_fixture.h"
#include "svc_fixture.h"
#include "svc_ipc.h"
#include "svc_ipc_int.h"
#include "tck_main.h"
#include "trace.pb-c.h"

typedef struct {
    svd_fx sv;                   /* the daemon on private sockets */
    /* producer */
    ipc_client *pc;
    bool p_bound, p_init, p_registered;
    uint8_t *smb;
    size_t smb_size, page_size;
    uint32_t target_buffer;
    uint64_t instance_id, flush_request_id;
    int starts, stops, flushes;
    bool notify_on_start;        /* registers will_notify_on_start */
    /* consumer */
    ipc_client *cc;
    bool c_bound, enabled_done, flush_replied, read_done;
    int flush_status, stats_status;
    char enable_error[256];
    uint8_t *pkt;
    size_t pkt_len, pkt_cap;
    int values, service_packets, stats_packets;
    uint32_t seq_of[256];
    int32_t pid_of[256];
    uint64_t stats_sessions;
    int all_started;             /* ObservableEvents received */
} fx_t;

static fx_t F;

static void run_until(bool *flag, int max_iters)
{
    svd_run_until(&F.sv, flag, max_iters);
}

static void run_for(int iters)
{
    for (int i = 0; i < iters; i++)
        ipc_loop_run_once(F.sv.loop, 5);
}

static void setup(void)
{
    memset(&F, 0, sizeof(F));
    svd_start(&F.sv, "svcipc");
}

static void teardown(void)
{
    ipc_client_destroy(F.pc);
    ipc_client_destroy(F.cc);
    svd_stop(&F.sv);
    if (F.smb)
        munmap(F.smb, F.smb_size);
    free(F.pkt);
}

/* ------------------------------------------------------------ producer */

static void on_p_bound(ipc_client *c, bool ok, void *ctx)
{
    F.p_bound = ok;
}
static void on_disc(ipc_client *c, int err, void *ctx)
{
}
static const ipc_client_cbs p_cbs = { on_p_bound, on_disc };

static void on_init(ipc_client *c, int st, const ProtobufCMessage *r,
                    bool more, void *ctx)
{
    F.p_init = st == 0;
}
static void on_reg(ipc_client *c, int st, const ProtobufCMessage *r,
                   bool more, void *ctx)
{
    F.p_registered = st == 0;
}

static void on_cmd(ipc_client *c, int st, const ProtobufCMessage *msg,
                   bool more, void *ctx)
{
    if (st != 0 || !msg)
        return;
    const Perfetto__Protos__GetAsyncCommandResponse *r = (const void *)msg;
    switch (r->cmd_case) {
    case PERFETTO__PROTOS__GET_ASYNC_COMMAND_RESPONSE__CMD_SETUP_TRACING: {
        int fd = ipc_client_take_fd(c);
        ck_assert_int_ge(fd, 0);
        struct stat sb;
        ck_assert_int_eq(fstat(fd, &sb), 0);
        F.smb_size = (size_t)sb.st_size;
        F.page_size = r->setup_tracing->shared_buffer_page_size_kb * 1024u;
        F.smb = mmap(NULL, F.smb_size, PROT_READ | PROT_WRITE, MAP_SHARED,
                     fd, 0);
        ck_assert(F.smb != MAP_FAILED);
        close(fd);
        break;
    }
    case PERFETTO__PROTOS__GET_ASYNC_COMMAND_RESPONSE__CMD_START_DATA_SOURCE:
        F.starts++;
        F.instance_id = r->start_data_source->new_instance_id;
        F.target_buffer = r->start_data_source->config->target_buffer;
        break;
    case PERFETTO__PROTOS__GET_ASYNC_COMMAND_RESPONSE__CMD_STOP_DATA_SOURCE:
        F.stops++;
        break;
    case PERFETTO__PROTOS__GET_ASYNC_COMMAND_RESPONSE__CMD_FLUSH:
        F.flushes++;
        F.flush_request_id = r->flush->request_id;
        break;
    default:
        break;
    }
}

static void connect_producer(void)
{
    int err = 0;
    F.pc = ipc_client_connect(F.sv.loop, F.sv.ppath, IPC_PRODUCER_PORT, &p_cbs,
                              NULL, &err);
    ck_assert_ptr_nonnull(F.pc);
    run_until(&F.p_bound, 500);
    Perfetto__Protos__InitializeConnectionRequest ic =
        PERFETTO__PROTOS__INITIALIZE_CONNECTION_REQUEST__INIT;
    ic.producer_name = "check";
    ic.has_smb_scraping_mode = true;
    ic.smb_scraping_mode = 1;
    ck_assert_int_gt(ipc_client_invoke(F.pc, "InitializeConnection",
            &ic.base, -1,
            &perfetto__protos__initialize_connection_response__descriptor,
            on_init, NULL), 0);
    run_until(&F.p_init, 500);
    ck_assert_int_gt(ipc_client_invoke(F.pc, "GetAsyncCommand", NULL, -1,
            &perfetto__protos__get_async_command_response__descriptor,
            on_cmd, NULL), 0);
    Perfetto__Protos__RegisterDataSourceRequest rr =
        PERFETTO__PROTOS__REGISTER_DATA_SOURCE_REQUEST__INIT;
    Perfetto__Protos__DataSourceDescriptor dd =
        PERFETTO__PROTOS__DATA_SOURCE_DESCRIPTOR__INIT;
    dd.name = "test.ds";
    dd.has_will_notify_on_start = F.notify_on_start;
    dd.will_notify_on_start = F.notify_on_start;
    rr.data_source_descriptor = &dd;
    ck_assert_int_gt(ipc_client_invoke(F.pc, "RegisterDataSource", &rr.base,
            -1, &perfetto__protos__register_data_source_response__descriptor,
            on_reg, NULL), 0);
    run_until(&F.p_registered, 500);
}

static void register_writer(uint32_t wid)
{
    Perfetto__Protos__RegisterTraceWriterRequest r =
        PERFETTO__PROTOS__REGISTER_TRACE_WRITER_REQUEST__INIT;
    r.has_trace_writer_id = r.has_target_buffer = true;
    r.trace_writer_id = wid;
    r.target_buffer = F.target_buffer;
    ipc_client_invoke(F.pc, "RegisterTraceWriter", &r.base, -1, NULL, NULL,
                      NULL);
}

/* Div1 chunk at page with packets seq_value first..first+n-1. */
static void write_chunk(uint32_t page, uint16_t writer, uint32_t chunk_id,
                        uint32_t first, unsigned n, unsigned state)
{
    svf_fill_chunk(F.smb + (size_t)page * F.page_size, writer, chunk_id,
                   first, n, state);
}

/* CommitData of chunk 0 at page (none if page is UINT32_MAX). */
static void commit(uint32_t page, uint64_t flush_id)
{
    svf_commit_msg c;
    svf_commit_msg_init(&c, page, 0, F.target_buffer, flush_id);
    if (page == UINT32_MAX)
        c.req.n_chunks_to_move = 0;
    ck_assert_int_gt(ipc_client_invoke(F.pc, "CommitData", &c.req.base, -1,
                                       NULL, NULL, NULL), 0);
}

/* ------------------------------------------------------------ consumer */

static void on_c_bound(ipc_client *c, bool ok, void *ctx)
{
    F.c_bound = ok;
}
static const ipc_client_cbs c_cbs = { on_c_bound, on_disc };

static void on_enable(ipc_client *c, int st, const ProtobufCMessage *msg,
                      bool more, void *ctx)
{
    const Perfetto__Protos__EnableTracingResponse *r = (const void *)msg;
    if (st == 0 && r && r->error)
        snprintf(F.enable_error, sizeof(F.enable_error), "%s", r->error);
    F.enabled_done = true;
}

static void on_flush(ipc_client *c, int st, const ProtobufCMessage *msg,
                     bool more, void *ctx)
{
    F.flush_status = st;
    F.flush_replied = true;
}

static void take_packet(void)
{
    Perfetto__Protos__TracePacket *p =
        perfetto__protos__trace_packet__unpack(NULL, F.pkt_len, F.pkt);
    ck_assert_ptr_nonnull(p);
    if (p->trusted_packet_sequence_id == 1) {
        F.service_packets++;
        if (p->trace_stats) {
            F.stats_packets++;
            F.stats_sessions = p->trace_stats->tracing_sessions;
        }
    } else if (p->for_testing) {
        uint32_t v = p->for_testing->seq_value;
        if (v < 256) {
            F.seq_of[v] = p->trusted_packet_sequence_id;
            F.pid_of[v] = p->trusted_pid;
        }
        F.values++;
    }
    perfetto__protos__trace_packet__free_unpacked(p, NULL);
    F.pkt_len = 0;
}

static void on_read(ipc_client *c, int st, const ProtobufCMessage *msg,
                    bool more, void *ctx)
{
    const Perfetto__Protos__ReadBuffersResponse *r = (const void *)msg;
    if (st == 0 && r) {
        for (size_t i = 0; i < r->n_slices; i++) {
            size_t n = r->slices[i]->data.len;
            if (F.pkt_len + n > F.pkt_cap) {
                F.pkt_cap = (F.pkt_len + n) * 2;
                F.pkt = realloc(F.pkt, F.pkt_cap);
            }
            memcpy(F.pkt + F.pkt_len, r->slices[i]->data.data, n);
            F.pkt_len += n;
            if (r->slices[i]->last_slice_for_packet)
                take_packet();
        }
    }
    if (st != 0 || !more)
        F.read_done = true;
}

static void connect_consumer(void)
{
    int err = 0;
    F.cc = ipc_client_connect(F.sv.loop, F.sv.cpath, IPC_CONSUMER_PORT, &c_cbs,
                              NULL, &err);
    ck_assert_ptr_nonnull(F.cc);
    run_until(&F.c_bound, 500);
}

static void enable(uint32_t size_kb, uint32_t flush_timeout_ms)
{
    Perfetto__Protos__EnableTracingRequest req =
        PERFETTO__PROTOS__ENABLE_TRACING_REQUEST__INIT;
    svf_cfg c;
    svf_cfg_init(&c, size_kb, 0);
    c.buf[0].has_fill_policy = false;
    if (flush_timeout_ms) {
        c.cfg.has_flush_timeout_ms = true;
        c.cfg.flush_timeout_ms = flush_timeout_ms;
    }
    req.trace_config = &c.cfg;
    ck_assert_int_gt(ipc_client_invoke(F.cc, "EnableTracing", &req.base, -1,
            &perfetto__protos__enable_tracing_response__descriptor,
            on_enable, NULL), 0);
}

static void read_buffers(void)
{
    F.read_done = false;
    ck_assert_int_gt(ipc_client_invoke(F.cc, "ReadBuffers", NULL, -1,
            &perfetto__protos__read_buffers_response__descriptor, on_read,
            NULL), 0);
    run_until(&F.read_done, 2000);
}

static void disable_and_wait(void)
{
    ck_assert_int_gt(ipc_client_invoke(F.cc, "DisableTracing", NULL, -1,
                                       NULL, NULL, NULL), 0);
    run_until(&F.enabled_done, 2000);
}

static void on_events(ipc_client *c, int st, const ProtobufCMessage *msg,
                      bool more, void *ctx)
{
    const Perfetto__Protos__ObserveEventsResponse *r = (const void *)msg;
    if (st == 0 && r && r->events && r->events->all_data_sources_started)
        F.all_started++;
}

static void observe_all_started(void)
{
    Perfetto__Protos__ObserveEventsRequest req =
        PERFETTO__PROTOS__OBSERVE_EVENTS_REQUEST__INIT;
    Perfetto__Protos__ObservableEvents__Type t =
        PERFETTO__PROTOS__OBSERVABLE_EVENTS__TYPE__TYPE_ALL_DATA_SOURCES_STARTED;
    req.n_events_to_observe = 1;
    req.events_to_observe = &t;
    ck_assert_int_gt(ipc_client_invoke(F.cc, "ObserveEvents", &req.base, -1,
            &perfetto__protos__observe_events_response__descriptor,
            on_events, NULL), 0);
}

/* NotifyDataSourceStarted for instance `id`. */
static void notify_started(uint64_t id)
{
    Perfetto__Protos__NotifyDataSourceStartedRequest r =
        PERFETTO__PROTOS__NOTIFY_DATA_SOURCE_STARTED_REQUEST__INIT;
    r.has_data_source_id = true;
    r.data_source_id = id;
    ck_assert_int_gt(ipc_client_invoke(F.pc, "NotifyDataSourceStarted",
                                       &r.base, -1, NULL, NULL, NULL), 0);
}

/* ------------------------------------------------------------ tests */

START_TEST(test_ipc_full_session)
{
    connect_producer();
    connect_consumer();
    enable(256, 0);
    run_for(20);
    ck_assert_ptr_nonnull(F.smb);
    ck_assert_int_eq(F.starts, 1);
    ck_assert_uint_ne(F.target_buffer, 0);
    register_writer(1);
    for (uint32_t i = 0; i < 10; i++) {
        write_chunk(i, 1, i, i * 10, 10, 3);
        commit(i, 0);
    }
    ck_assert_int_gt(ipc_client_invoke(F.cc, "Flush", NULL, -1, NULL,
                                       on_flush, NULL), 0);
    run_for(10);
    ck_assert_int_eq(F.flushes, 1);
    commit(UINT32_MAX, F.flush_request_id);    /* the ack */
    run_until(&F.flush_replied, 500);
    ck_assert_int_eq(F.flush_status, 0);
    disable_and_wait();
    ck_assert_str_eq(F.enable_error, "");
    ck_assert_int_ge(F.stops, 1);
    read_buffers();
    ck_assert_int_eq(F.values, 100);
    ck_assert_uint_eq(F.seq_of[0], 2);
    ck_assert_uint_eq(F.seq_of[99], 2);
    ck_assert_int_eq(F.pid_of[5], getpid());   /* from SO_PEERCRED */
    ck_assert_int_eq(F.stats_packets, 1);
    ck_assert_int_ge(F.service_packets, 3);
}
END_TEST

/* ObservableEvents.all_data_sources_started (what `perfetto
 * --background-wait` waits for) comes when the producer's data source,
 * registered will_notify_on_start, acks its start over the socket with
 * its own instance id; an ack for another id does nothing. */
START_TEST(test_ipc_all_started_waits_for_the_start_ack)
{
    F.notify_on_start = true;
    connect_producer();
    connect_consumer();
    enable(256, 0);
    run_for(20);
    ck_assert_int_eq(F.starts, 1);
    observe_all_started();
    run_for(20);
    ck_assert_int_eq(F.all_started, 0);
    notify_started(F.instance_id + 1);
    run_for(20);
    ck_assert_int_eq(F.all_started, 0);
    notify_started(F.instance_id);
    bool got = false;
    for (int i = 0; i < 500 && !got; i++) {
        ipc_loop_run_once(F.sv.loop, 5);
        got = F.all_started > 0;
    }
    ck_assert_int_eq(F.all_started, 1);
    notify_started(F.instance_id);             /* again: once */
    run_for(20);
    ck_assert_int_eq(F.all_started, 1);
    disable_and_wait();
}
END_TEST

START_TEST(test_ipc_flush_unanswered_scrapes)
{
    connect_producer();
    connect_consumer();
    enable(256, 50);
    run_for(20);
    register_writer(1);
    write_chunk(0, 1, 0, 0, 4, 1);            /* being written, 3 complete */
    ck_assert_int_gt(ipc_client_invoke(F.cc, "Flush", NULL, -1, NULL,
                                       on_flush, NULL), 0);
    run_until(&F.flush_replied, 1000);
    ck_assert_int_ne(F.flush_status, 0);       /* timed out */
    disable_and_wait();
    read_buffers();
    ck_assert_int_eq(F.values, 3);
}
END_TEST

/* A consumer cannot pile up flushes: past the daemon's bound (64 pending per
 * connection) further Flush calls fail at once instead of being held and fanned
 * out to every producer. The producer here never acks, so every accepted flush
 * stays pending for the (long) flush timeout. */
static int flush_failed_now, flush_replies;
static void on_flush_count(ipc_client *c, int st, const ProtobufCMessage *msg,
                           bool more, void *ctx)
{
    flush_replies++;
    if (st != 0)
        flush_failed_now++;
}

START_TEST(test_ipc_pending_flushes_are_bounded)
{
    connect_producer();
    connect_consumer();
    enable(256, 10000);
    run_for(20);
    flush_failed_now = flush_replies = 0;
    for (int i = 0; i < 100; i++)
        ck_assert_int_gt(ipc_client_invoke(F.cc, "Flush", NULL, -1, NULL,
                                           on_flush_count, NULL), 0);
    run_for(50);
    ck_assert_int_eq(flush_failed_now, 100 - 64);
    ck_assert_int_eq(flush_replies, 100 - 64);
    ck_assert_int_ge(F.flushes, 1);           /* the producer was asked */
}
END_TEST

START_TEST(test_ipc_producer_killed_keeps_its_data)
{
    connect_producer();
    connect_consumer();
    enable(256, 50);
    run_for(20);
    register_writer(1);
    write_chunk(0, 1, 0, 0, 5, 3);            /* complete, never committed */
    run_for(10);
    ipc_client_destroy(F.pc);                 /* the producer vanishes */
    F.pc = NULL;
    run_for(20);
    disable_and_wait();
    read_buffers();
    ck_assert_int_eq(F.values, 5);
}
END_TEST

static int raw_connect(const char *path)
{
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    struct sockaddr_un a = { .sun_family = AF_UNIX };
    snprintf(a.sun_path, sizeof(a.sun_path), "%s", path);
    ck_assert_int_eq(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0);
    return fd;
}

START_TEST(test_ipc_malformed_frames_do_not_hurt)
{
    /* Garbage, an oversized length, a frame that does not parse, and a
     * CommitData before InitializeConnection. */
    int a = raw_connect(F.sv.ppath);
    uint8_t junk[64];
    for (size_t i = 0; i < sizeof(junk); i++)
        junk[i] = (uint8_t)(i * 37 + 11);
    ck_assert_int_eq(write(a, junk, sizeof(junk)), (ssize_t)sizeof(junk));
    int b = raw_connect(F.sv.cpath);
    uint8_t big[4] = {0xff, 0xff, 0xff, 0x7f};
    ck_assert_int_eq(write(b, big, 4), 4);
    int c = raw_connect(F.sv.ppath);
    uint8_t bad[] = {5, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0xff};
    ck_assert_int_eq(write(c, bad, sizeof(bad)), (ssize_t)sizeof(bad));
    run_for(20);
    int err = 0;
    F.pc = ipc_client_connect(F.sv.loop, F.sv.ppath, IPC_PRODUCER_PORT, &p_cbs,
                              NULL, &err);
    run_until(&F.p_bound, 500);
    commit(0, 0);                                /* before Initialize */
    run_for(10);
    close(a);
    close(b);
    close(c);
    /* The daemon still serves a full session. */
    ipc_client_destroy(F.pc);
    F.pc = NULL;
    F.p_bound = false;
    connect_producer();
    connect_consumer();
    enable(64, 50);
    run_for(20);
    ck_assert_int_eq(F.starts, 1);
    write_chunk(0, 1, 0, 0, 2, 3);
    commit(0, 0);
    run_for(10);
    disable_and_wait();
    read_buffers();
    ck_assert_int_eq(F.values, 2);
}
END_TEST

START_TEST(test_ipc_consumer_disconnect_frees_session)
{
    connect_producer();
    connect_consumer();
    enable(64, 0);
    run_for(20);
    ck_assert_uint_eq(svc_session_count(svc_daemon_service(F.sv.d)), 1);
    ipc_client_destroy(F.cc);
    F.cc = NULL;
    run_for(20);
    ck_assert_uint_eq(svc_session_count(svc_daemon_service(F.sv.d)), 0);
    ck_assert_int_eq(F.stops, 1);             /* its data source stopped */
}
END_TEST

START_TEST(test_ipc_bad_config_reports_error)
{
    connect_consumer();
    enable(0, 0);
    run_until(&F.enabled_done, 500);
    ck_assert_ptr_nonnull(strstr(F.enable_error, "size_kb"));
}
END_TEST

START_TEST(test_ipc_second_daemon_refused)
{
    int err = 0;
    ipc_loop *l2 = ipc_loop_create();
    svc_daemon *d2 = svc_daemon_create(l2, F.sv.ppath, F.sv.cpath, &err);
    ck_assert_ptr_null(d2);
    ck_assert_int_eq(err, -EADDRINUSE);
    ipc_loop_destroy(l2);
}
END_TEST

/* ---------------------------------------------- commands a producer leaves */

/* A session whose data source "test.ds" has a config of legacy_kb KB (a
 * packed copy goes into every SetupDataSource and StartDataSource), on
 * its own consumer connection; returns that connection. */
static ipc_client *session_with_big_config(size_t legacy_kb)
{
    bool bound = false;
    int err = 0;
    static const ipc_client_cbs cbs = { on_c_bound, on_disc };
    ipc_client *c = ipc_client_connect(F.sv.loop, F.sv.cpath,
                                       IPC_CONSUMER_PORT, &cbs, NULL, &err);
    ck_assert_ptr_nonnull(c);
    F.c_bound = false;
    run_until(&F.c_bound, 500);
    (void)bound;
    svf_cfg cfg;
    svf_cfg_init(&cfg, 64, 0);
    cfg.buf[0].has_fill_policy = false;
    char *legacy = malloc(legacy_kb * 1024 + 1);
    memset(legacy, 'L', legacy_kb * 1024);
    legacy[legacy_kb * 1024] = '\0';
    cfg.dsc.legacy_config = legacy;
    Perfetto__Protos__EnableTracingRequest req =
        PERFETTO__PROTOS__ENABLE_TRACING_REQUEST__INIT;
    req.trace_config = &cfg.cfg;
    ck_assert_int_gt(ipc_client_invoke(c, "EnableTracing", &req.base, -1,
            &perfetto__protos__enable_tracing_response__descriptor,
            on_enable, NULL), 0);
    run_for(5);
    free(legacy);
    return c;
}

/* A producer connection that never opens GetAsyncCommand. */
static bool hoarder_gone;
static void on_hoarder_disc(ipc_client *c, int err, void *ctx)
{
    *(bool *)(ctx ? ctx : &hoarder_gone) = true;
}

/* A producer connection of `name` that has done InitializeConnection and
 * nothing more (cbs get ctx). */
static ipc_client *initialized_producer(const char *name,
                                        const ipc_client_cbs *cbs, void *ctx)
{
    int err = 0;
    F.p_bound = F.p_init = false;
    ipc_client *p = ipc_client_connect(F.sv.loop, F.sv.ppath,
                                       IPC_PRODUCER_PORT, cbs, ctx, &err);
    ck_assert_ptr_nonnull(p);
    run_until(&F.p_bound, 500);
    Perfetto__Protos__InitializeConnectionRequest ic =
        PERFETTO__PROTOS__INITIALIZE_CONNECTION_REQUEST__INIT;
    ic.producer_name = (char *)name;
    ck_assert_int_gt(ipc_client_invoke(p, "InitializeConnection", &ic.base,
            -1, &perfetto__protos__initialize_connection_response__descriptor,
            on_init, NULL), 0);
    run_until(&F.p_init, 500);
    return p;
}

/* ... whose going away sets *gone (hoarder_gone if NULL). */
static ipc_client *connect_hoarder_to(bool *gone)
{
    static const ipc_client_cbs cbs = { on_p_bound, on_hoarder_disc };
    *(gone ? gone : &hoarder_gone) = false;
    return initialized_producer("hoarder", &cbs, gone);
}

static ipc_client *connect_hoarder(void)
{
    return connect_hoarder_to(NULL);
}

static void register_ds(ipc_client *p, const char *name)
{
    Perfetto__Protos__RegisterDataSourceRequest rr =
        PERFETTO__PROTOS__REGISTER_DATA_SOURCE_REQUEST__INIT;
    Perfetto__Protos__DataSourceDescriptor dd =
        PERFETTO__PROTOS__DATA_SOURCE_DESCRIPTOR__INIT;
    dd.name = (char *)name;
    rr.data_source_descriptor = &dd;
    F.p_registered = false;
    ck_assert_int_gt(ipc_client_invoke(p, "RegisterDataSource", &rr.base,
            -1, &perfetto__protos__register_data_source_response__descriptor,
            on_reg, NULL), 0);
    run_until(&F.p_registered, 500);
}

static void on_unreg(ipc_client *c, int st, const ProtobufCMessage *r,
                     bool more, void *ctx)
{
    *(bool *)ctx = st == 0;
}

static void unregister_ds(ipc_client *p, const char *name)
{
    Perfetto__Protos__UnregisterDataSourceRequest ur =
        PERFETTO__PROTOS__UNREGISTER_DATA_SOURCE_REQUEST__INIT;
    ur.data_source_name = (char *)name;
    bool done = false;
    ck_assert_int_gt(ipc_client_invoke(p, "UnregisterDataSource", &ur.base,
                                       -1, NULL, on_unreg, &done), 0);
    run_until(&done, 500);
}

/* Registering and unregistering a data source a running session wants,
 * without ever opening GetAsyncCommand, queued a SetupDataSource and a
 * StartDataSource (each a packed copy of the session's 100 KB config) and
 * a StopDataSource per cycle: +38 MiB of the daemon's heap per 200 cycles.
 * A Stop now takes its instance's queued Setup and Start out of the queue:
 * when the producer opens GetAsyncCommand at last it gets SetupTracing
 * and the instance of its last registration only. */
START_TEST(test_ipc_register_unregister_loop_queues_nothing)
{
    F.cc = session_with_big_config(100);
    ipc_client *h = connect_hoarder();
    for (int i = 0; i < 1300; i++) {
        register_ds(h, "test.ds");
        unregister_ds(h, "test.ds");
    }
    ck_assert(!hoarder_gone);
    register_ds(h, "test.ds");
    ck_assert_int_gt(ipc_client_invoke(h, "GetAsyncCommand", NULL, -1,
            &perfetto__protos__get_async_command_response__descriptor,
            on_cmd, NULL), 0);
    run_for(50);
    ck_assert(!hoarder_gone);
    ck_assert_ptr_nonnull(F.smb);              /* SetupTracing was kept */
    ck_assert_int_eq(F.starts, 1);
    ck_assert_int_eq(F.stops, 0);
    ck_assert_uint_ne(F.target_buffer, 0);
    /* and that instance traces: its data reaches the session */
    F.pc = h;                      /* register_writer, commit send on F.pc */
    register_writer(1);
    write_chunk(0, 1, 0, 0, 5, 3);
    commit(0, 0);
    run_for(10);
    disable_and_wait();
    read_buffers();
    ck_assert_int_eq(F.values, 5);
}
END_TEST

/* Commands for a producer that never opens GetAsyncCommand are bounded by
 * bytes, not only by count: with sessions (the per-uid session limit
 * lifted) whose 100 KB configs it matches, it is dropped once ~4 MiB wait
 * for it (the 21st session), where the bound of 4,096 commands let it
 * hold 60 sessions' 12 MB and more. A producer that reads its commands,
 * under the same sessions, gets every one. */
START_TEST(test_ipc_queued_commands_are_bounded_by_bytes)
{
    enum { SESSIONS = 30 };
    svc_set_uid_limits(svc_daemon_service(F.sv.d), 0, 0);
    connect_producer();                        /* reads its commands */
    ipc_client *h = connect_hoarder();
    register_ds(h, "test.ds");
    ipc_client *consumers[SESSIONS];
    int dropped_at = 0;
    for (int i = 0; i < SESSIONS; i++) {
        consumers[i] = session_with_big_config(100);
        run_for(10);
        if (hoarder_gone && !dropped_at)
            dropped_at = i + 1;
    }
    run_for(20);
    ck_assert_msg(hoarder_gone, "a producer holding %d sessions' commands "
                  "is still connected", SESSIONS);
    ck_assert_int_ge(dropped_at, 19);          /* 4 MiB / ~200 KB */
    ck_assert_int_le(dropped_at, 22);
    ck_assert_int_eq(F.starts, SESSIONS);      /* the honest one: all */
    for (int i = 0; i < SESSIONS; i++)
        ipc_client_destroy(consumers[i]);
    ipc_client_destroy(h);
}
END_TEST

/* Connections of one uid that all hoard: each stays under its own bound
 * (10 sessions of ~200 KB of commands: 2 MB of its 4 MiB), but twelve of
 * them would hold 24 MB, past SVC_MAX_QUEUED_CMD_BYTES_PER_UID (16 MiB;
 * a uid may have 512 connections, 2 GiB before). Enough of them are
 * dropped that the others hold at most the uid's bound; the honest
 * producer gets every start; once they are gone the daemon counts no
 * byte for the uid. */
START_TEST(test_ipc_queued_commands_are_bounded_per_uid)
{
    enum { SESSIONS = 10, HOARDERS = 12 };
    svc_set_uid_limits(svc_daemon_service(F.sv.d), 0, 0);
    connect_producer();                        /* reads its commands */
    bool gone[HOARDERS];
    ipc_client *h[HOARDERS];
    for (int i = 0; i < HOARDERS; i++) {
        h[i] = connect_hoarder_to(&gone[i]);
        register_ds(h[i], "test.ds");
    }
    ipc_client *consumers[SESSIONS];
    for (int i = 0; i < SESSIONS; i++) {
        consumers[i] = session_with_big_config(100);
        run_for(10);
    }
    run_for(20);
    int left = 0;
    for (int i = 0; i < HOARDERS; i++)
        left += !gone[i];
    /* Each one left holds SESSIONS sessions' commands, over 2 MB. */
    ck_assert_msg(left * 2 <= 16, "%d hoarders of one uid still hold "
                  "%d sessions' commands each", left, SESSIONS);
    ck_assert_int_gt(left, 0);
    ck_assert_int_eq(F.starts, SESSIONS);      /* the honest one: all */
    for (int i = 0; i < SESSIONS; i++)
        ipc_client_destroy(consumers[i]);
    for (int i = 0; i < HOARDERS; i++)
        ipc_client_destroy(h[i]);
    run_for(20);
    ck_assert_uint_eq(F.sv.d->nuid_queued, 0);
}
END_TEST

/* ------------------------------------------------------------ query */

static size_t put_varint(uint8_t *p, size_t v)
{
    size_t n = 0;
    for (; v >= 0x80; v >>= 7)
        p[n++] = (uint8_t)(0x80 | (v & 0x7f));
    p[n++] = (uint8_t)v;
    return n;
}

/* RegisterDataSource of `name` whose descriptor carries blob bytes of
 * fill as field 6 (track_event_descriptor, a field we keep unparsed). */
static void register_blob_ds(ipc_client *p, const char *name, size_t blob,
                             char fill)
{
    Perfetto__Protos__DataSourceDescriptor dd =
        PERFETTO__PROTOS__DATA_SOURCE_DESCRIPTOR__INIT;
    dd.name = (char *)name;
    size_t known = perfetto__protos__data_source_descriptor__get_packed_size(
        &dd);
    uint8_t *desc = malloc(known + blob + 16);
    size_t n = perfetto__protos__data_source_descriptor__pack(&dd, desc);
    desc[n++] = 0x32;                            /* field 6, bytes */
    n += put_varint(desc + n, blob);
    memset(desc + n, fill, blob);
    n += blob;
    uint8_t *req = malloc(n + 16);
    size_t m = 0;
    req[m++] = 0x0a;                             /* data_source_descriptor */
    m += put_varint(req + m, n);
    memcpy(req + m, desc, n);
    m += n;
    F.p_registered = false;
    ck_assert_int_gt(ipc_client_invoke_raw(p, "RegisterDataSource", req, m,
            -1, &perfetto__protos__register_data_source_response__descriptor,
            on_reg, NULL), 0);
    run_until(&F.p_registered, 1000);
    free(req);
    free(desc);
}

static ipc_client *plain_producer(const char *name)
{
    static const ipc_client_cbs cbs = { on_p_bound, on_disc };
    return initialized_producer(name, &cbs, NULL);
}

typedef struct {
    bool done, gone;
    int status, pieces;
    uint8_t *buf;
    size_t len;
} query_t;

static query_t Q;

static void on_query(ipc_client *c, int st, const ProtobufCMessage *msg,
                     bool more, void *ctx)
{
    Q.status = st;
    if (st == 0 && msg) {
        const Perfetto__Protos__QueryServiceStateResponse *r =
            (const void *)msg;
        if (r->service_state) {
            size_t n = perfetto__protos__tracing_service_state__get_packed_size(
                r->service_state);
            Q.buf = realloc(Q.buf, Q.len + n + 1);
            perfetto__protos__tracing_service_state__pack(r->service_state,
                                                          Q.buf + Q.len);
            Q.len += n;
            Q.pieces++;
        }
    }
    if (st != 0 || !more)
        Q.done = true;
}

static void on_query_disc(ipc_client *c, int err, void *ctx)
{
    Q.gone = true;
}

/* A new consumer connection (F.cc) asks QueryServiceState; Q gets the
 * reply, or says it was dropped (Q.gone). */
static void query_as_new_consumer(void)
{
    static const ipc_client_cbs ccb = { on_c_bound, on_query_disc };
    int err = 0;
    F.cc = ipc_client_connect(F.sv.loop, F.sv.cpath, IPC_CONSUMER_PORT, &ccb,
                              NULL, &err);
    run_until(&F.c_bound, 500);
    memset(&Q, 0, sizeof Q);
    ck_assert_int_gt(ipc_client_invoke(F.cc, "QueryServiceState", NULL, -1,
            &perfetto__protos__query_service_state_response__descriptor,
            on_query, NULL), 0);
    run_until(&Q.done, 3000);
}

/* Bytes of descriptor d's fields we do not model (track_event_descriptor
 * here), 0 if it was cut to name and flags. */
static size_t unknown_bytes(const Perfetto__Protos__DataSourceDescriptor *d)
{
    size_t n = 0;
    for (size_t i = 0; i < d->base.n_unknown_fields; i++)
        n += d->base.unknown_fields[i].len;
    return n;
}

/* One uid's producers registered 38 MB of descriptors (40 producers, 8 of
 * 120 KB each: within the 1 MiB a producer and 64 MiB a uid may
 * register); QueryServiceState sent them all at once, past the 32 MiB a
 * connection may have queued, and every consumer that asked was dropped
 * (-104). The reply now carries 4 MiB of descriptors whole (the smallest
 * first: another producer's 1 KB one is among them) and every other data
 * source cut to its name, all listed. */
START_TEST(test_ipc_query_survives_huge_descriptors)
{
    enum { PRODUCERS = 40, PER_PRODUCER = 8, BIG = 120000, SMALL = 1000 };
    ipc_client *ps[PRODUCERS + 1];
    for (int i = 0; i < PRODUCERS; i++) {
        ps[i] = plain_producer("bloat");
        for (int k = 0; k < PER_PRODUCER; k++) {
            char name[32];
            snprintf(name, sizeof name, "bloat.%d.%d", i, k);
            register_blob_ds(ps[i], name, BIG, 'x');
        }
    }
    ps[PRODUCERS] = plain_producer("ordinary");
    register_blob_ds(ps[PRODUCERS], "ordinary.track_event", SMALL, 'c');
    query_as_new_consumer();
    ck_assert_msg(Q.status == 0 && !Q.gone, "QueryServiceState failed (%d)%s",
                  Q.status, Q.gone ? ", the consumer was dropped" : "");
    ck_assert_uint_le(Q.len, (8u << 20) + (64u << 10));
    Perfetto__Protos__TracingServiceState *st =
        perfetto__protos__tracing_service_state__unpack(NULL, Q.len, Q.buf);
    ck_assert_ptr_nonnull(st);
    ck_assert_uint_eq(st->n_producers, PRODUCERS + 1);
    ck_assert_uint_eq(st->n_data_sources, PRODUCERS * PER_PRODUCER + 1);
    size_t whole_big = 0, cut = 0, whole_bytes = 0;
    bool ordinary_whole = false;
    for (size_t i = 0; i < st->n_data_sources; i++) {
        const Perfetto__Protos__DataSourceDescriptor *d =
            st->data_sources[i]->ds_descriptor;
        ck_assert_ptr_nonnull(d);
        ck_assert_ptr_nonnull(d->name);
        size_t u = unknown_bytes(d);
        whole_bytes += u;
        if (strcmp(d->name, "ordinary.track_event") == 0)
            ordinary_whole = u > SMALL;
        else if (u)
            whole_big++;
        else
            cut++;
    }
    ck_assert(ordinary_whole);
    ck_assert_uint_le(whole_bytes, 4u << 20);
    ck_assert_uint_ge(whole_big, (4u << 20) / (BIG + 64) - 1);
    ck_assert_uint_eq(whole_big + cut, PRODUCERS * PER_PRODUCER);
    /* and the reply says so (shmtraced's extension of the message) */
    ck_assert(st->has_shmtrace_data_sources_cut);
    ck_assert_uint_eq(st->shmtrace_data_sources_cut, cut);
    ck_assert(!st->has_shmtrace_data_sources_left_out);
    perfetto__protos__tracing_service_state__free_unpacked(st, NULL);
    free(Q.buf);
    /* the connection still serves: a second query answers the same */
    memset(&Q, 0, sizeof Q);
    ck_assert_int_gt(ipc_client_invoke(F.cc, "QueryServiceState", NULL, -1,
            &perfetto__protos__query_service_state_response__descriptor,
            on_query, NULL), 0);
    run_until(&Q.done, 3000);
    ck_assert_int_eq(Q.status, 0);
    ck_assert(!Q.gone);
    free(Q.buf);
    for (int i = 0; i <= PRODUCERS; i++)
        ipc_client_destroy(ps[i]);
}
END_TEST

static int regs_pending;
static void on_reg_count(ipc_client *c, int st, const ProtobufCMessage *r,
                         bool more, void *ctx)
{
    const Perfetto__Protos__RegisterDataSourceResponse *rr = (const void *)r;
    ck_assert_msg(st == 0 && rr && !rr->error, "RegisterDataSource: %s",
                  rr && rr->error ? rr->error : "failed");
    regs_pending--;
}

/* Past 8 MiB of data source entries, even cut to their names, the rest
 * are left out, and the reply says how many: 34 producers x 1,024 data
 * sources with 256-byte names (~9 MiB of names alone). */
START_TEST(test_ipc_query_leaves_out_past_its_budget)
{
    enum { PRODUCERS = 34, PER_PRODUCER = 1024, TOTAL = PRODUCERS * 1024 };
    ipc_client *ps[PRODUCERS];
    char name[257];
    for (int i = 0; i < PRODUCERS; i++) {
        ps[i] = plain_producer("names");
        regs_pending = 0;
        for (int k = 0; k < PER_PRODUCER; k++) {
            memset(name, 'n', 256);
            int l = snprintf(name, sizeof name, "%d.%d.", i, k);
            name[l] = 'n';                      /* no NUL before 256 */
            name[256] = '\0';
            Perfetto__Protos__RegisterDataSourceRequest rr =
                PERFETTO__PROTOS__REGISTER_DATA_SOURCE_REQUEST__INIT;
            Perfetto__Protos__DataSourceDescriptor dd =
                PERFETTO__PROTOS__DATA_SOURCE_DESCRIPTOR__INIT;
            dd.name = name;
            rr.data_source_descriptor = &dd;
            ck_assert_int_gt(ipc_client_invoke(ps[i], "RegisterDataSource",
                    &rr.base, -1,
                    &perfetto__protos__register_data_source_response__descriptor,
                    on_reg_count, NULL), 0);
            regs_pending++;
        }
        for (int n = 0; n < 2000 && regs_pending > 0; n++)
            ipc_loop_run_once(F.sv.loop, 10);
        ck_assert_int_eq(regs_pending, 0);
    }
    query_as_new_consumer();
    ck_assert_int_eq(Q.status, 0);
    ck_assert(!Q.gone);
    ck_assert_uint_le(Q.len, (8u << 20) + (64u << 10));
    Perfetto__Protos__TracingServiceState *st =
        perfetto__protos__tracing_service_state__unpack(NULL, Q.len, Q.buf);
    ck_assert_ptr_nonnull(st);
    ck_assert_uint_eq(st->n_producers, PRODUCERS);
    ck_assert(st->has_shmtrace_data_sources_left_out);
    ck_assert_uint_gt(st->shmtrace_data_sources_left_out, 0);
    ck_assert_uint_eq(st->n_data_sources + st->shmtrace_data_sources_left_out,
                      TOTAL);
    ck_assert_uint_gt(st->n_data_sources, TOTAL * 3 / 4);
    ck_assert(!st->has_shmtrace_data_sources_cut);   /* had nothing to cut */
    for (size_t i = 0; i < st->n_data_sources; i++)
        ck_assert_uint_eq(strlen(st->data_sources[i]->ds_descriptor->name),
                          256);
    perfetto__protos__tracing_service_state__free_unpacked(st, NULL);
    free(Q.buf);
    for (int i = 0; i < PRODUCERS; i++)
        ipc_client_destroy(ps[i]);
}
END_TEST

/* GetTraceStats with thousands of writers. Writers 1..n write one chunk
 * each (a page per writer, a round of commits per SMB's worth of pages). */
static void many_writers_write(uint32_t n)
{
    uint32_t npages = (uint32_t)(F.smb_size / F.page_size);
    for (uint32_t w = 1; w <= n;) {
        for (uint32_t pg = 0; pg < npages && w <= n; pg++, w++) {
            write_chunk(pg, (uint16_t)w, 0, w, 1, 3);
            commit(pg, 0);
        }
        run_for(5);
    }
    run_for(20);
}

typedef struct {
    bool done;
    int status;
    Perfetto__Protos__TraceStats *st;   /* unpacked reply, or NULL */
} stats_reply_t;

static void on_stats(ipc_client *c, int st, const ProtobufCMessage *msg,
                     bool more, void *ctx)
{
    stats_reply_t *r = ctx;
    const Perfetto__Protos__GetTraceStatsResponse *resp = (const void *)msg;
    r->status = st;
    if (st == 0 && resp && resp->trace_stats) {
        size_t len =
            perfetto__protos__trace_stats__get_packed_size(resp->trace_stats);
        uint8_t *buf = malloc(len ? len : 1);
        perfetto__protos__trace_stats__pack(resp->trace_stats, buf);
        r->st = perfetto__protos__trace_stats__unpack(NULL, len, buf);
        free(buf);
    }
    r->done = true;
}

/* GetTraceStats, waiting at most 3 s for its reply (r->done false if
 * none came). */
static void get_stats(stats_reply_t *r)
{
    memset(r, 0, sizeof(*r));
    ck_assert_int_gt(ipc_client_invoke(F.cc, "GetTraceStats", NULL, -1,
            &perfetto__protos__get_trace_stats_response__descriptor,
            on_stats, r), 0);
    for (int i = 0; i < 300 && !r->done; i++)
        ipc_loop_run_once(F.sv.loop, 10);
}

/* n writers of one producer, each with one packet: GetTraceStats is
 * answered, under the bound, with every writer's packet counted in the
 * loss list and every writer either given its writer_stats entry or
 * counted as left out. */
static void check_many_writers_stats(const stats_reply_t *r, uint32_t n)
{
    ck_assert_msg(r->done, "GetTraceStats never answered");
    ck_assert_int_eq(r->status, 0);
    ck_assert_ptr_nonnull(r->st);
    ck_assert_uint_le(perfetto__protos__trace_stats__get_packed_size(r->st),
                      SVC_STATS_MAX_BYTES);
    ck_assert(r->st->has_shmtrace_writer_stats_left_out);
    ck_assert_uint_gt(r->st->shmtrace_writer_stats_left_out, 0);
    ck_assert_uint_eq(r->st->n_writer_stats +
                      r->st->shmtrace_writer_stats_left_out, n);
    uint64_t offered = 0;
    for (size_t i = 0; i < r->st->n_shmtrace_sequence_loss; i++)
        offered += r->st->shmtrace_sequence_loss[i]->packets_offered;
    ck_assert_uint_eq(offered, n);
}

/* 3,000 writers of one producer: the TraceStats was 180 KB, more than a
 * frame, and the call was never answered (the review's reproduction).
 * Now writer_stats and the loss list are bounded and the reply comes. */
START_TEST(test_ipc_stats_of_many_writers_answered)
{
    connect_producer();
    connect_consumer();
    enable(1024, 0);
    run_for(20);
    ck_assert_ptr_nonnull(F.smb);
    many_writers_write(3000);
    stats_reply_t r;
    get_stats(&r);
    check_many_writers_stats(&r, 3000);
    perfetto__protos__trace_stats__free_unpacked(r.st, NULL);
}
END_TEST

/* 5,000 writers: their writer_stats alone would be 170 KB, and the
 * reply was success = false. writer_stats is bounded now: answered, every
 * time, and the connection goes on working. */
START_TEST(test_ipc_stats_of_5000_writers_answered)
{
    connect_producer();
    connect_consumer();
    enable(1024, 0);
    run_for(20);
    ck_assert_ptr_nonnull(F.smb);
    many_writers_write(5000);
    for (int i = 0; i < 3; i++) {
        stats_reply_t r;
        get_stats(&r);
        check_many_writers_stats(&r, 5000);
        perfetto__protos__trace_stats__free_unpacked(r.st, NULL);
    }
    read_buffers();
    ck_assert_int_eq(F.values, 5000);
}
END_TEST

static Suite *svc_ipc_suite(void)
{
    Suite *s = suite_create("svc_ipc");
    TCase *tc = TCK_CASE(s, "session", test_ipc_full_session,
                         test_ipc_all_started_waits_for_the_start_ack,
                         test_ipc_bad_config_reports_error);
    tcase_add_checked_fixture(tc, setup, teardown);
    tc = TCK_CASE(s, "faults", test_ipc_flush_unanswered_scrapes,
                  test_ipc_producer_killed_keeps_its_data,
                  test_ipc_consumer_disconnect_frees_session);
    tcase_add_checked_fixture(tc, setup, teardown);
    tc = TCK_CASE(s, "untrusted", test_ipc_malformed_frames_do_not_hurt,
                  test_ipc_pending_flushes_are_bounded,
                  test_ipc_second_daemon_refused,
                  test_ipc_register_unregister_loop_queues_nothing,
                  test_ipc_queued_commands_are_bounded_by_bytes,
                  test_ipc_queued_commands_are_bounded_per_uid);
    tcase_add_checked_fixture(tc, setup, teardown);
    tc = TCK_CASE(s, "query", test_ipc_query_survives_huge_descriptors,
                  test_ipc_query_leaves_out_past_its_budget);
    tcase_add_checked_fixture(tc, setup, teardown);
    tc = TCK_CASE(s, "stats", test_ipc_stats_of_many_writers_answered,
                  test_ipc_stats_of_5000_writers_answered);
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 60);
    return s;
}

TCK_MAIN(svc_ipc_suite)
