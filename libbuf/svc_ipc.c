/*
 * svc_ipc.c - ProducerPort / ConsumerPort over ipc_host (see svc_ipc.h).
 *
 * Per-connection state hangs off ipc_conn_set_data():
 *   svc_pconn  producer: its svc_producer (after InitializeConnection), the
 *              open GetAsyncCommand call, and commands queued before that
 *              call arrived (packed GetAsyncCommandResponse + optional fd).
 *   svc_cconn  consumer: its session, the pending EnableTracing call (its
 *              reply is sent when the session ends), pending Flush calls
 *              (by token), and the ReadBuffers pump.
 *
 * ReadBuffers pump: packets are read in rounds of about SVC_READ_ROUND
 * bytes and packed into ReadBuffersResponse replies of at most
 * SVC_REPLY_BYTES (packets larger than that are split into slices, the last
 * one marked last_slice_for_packet). While the socket's transmit queue
 * holds more than SVC_TX_HIGH bytes the pump waits on a 1 ms timer, so the
 * daemon's memory stays bounded whatever the buffer size.
 *
 * Method ids are the 1-based table index (wire-formats.md §8, §9).
 * Unimplemented methods answer success = false.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "svc_ipc.h"

#define SVC_REPLY_BYTES (IPC_MAX_PAYLOAD_BYTES - 1024u)
#define SVC_SLICE_OVERHEAD 16u
#define SVC_READ_ROUND (4u << 20)
#define SVC_TX_HIGH (4u << 20)
#define SVC_TICK_MS 10u
#define SVC_SHUTDOWN_GRACE_MS 15000u

/* Bounds on what one peer can make the daemon hold. */
#define SVC_MAX_PENDING_FLUSHES 64    /* per consumer connection */
#define SVC_MAX_QUEUED_CMDS     4096  /* per producer without GetAsyncCommand */

typedef struct svc_cmd {
    uint8_t *data;
    size_t len;
    int fd;
} svc_cmd;

typedef struct {
    svc_daemon *d;
    ipc_conn *conn;
    svc_producer *p;
    ipc_call *async_call;
    svc_cmd *queue;
    size_t nqueue;
} svc_pconn;

typedef struct {
    uint64_t token;
    ipc_call *call;
} svc_pending_flush;

typedef struct {
    svc_daemon *d;
    ipc_conn *conn;
    svc_session *s;
    ipc_call *enable_call;
    svc_pending_flush *flushes;
    size_t nflushes;
    uint64_t next_token;
    /* ReadBuffers pump */
    ipc_call *read_call;
    uint64_t read_timer;
    uint8_t *batch;              /* SVC_REPLY_BYTES */
    size_t batch_len;
    size_t *slice_len;
    bool *slice_last;
    size_t nslices, cap_slices;
    int read_err;
} svc_cconn;

struct svc_daemon {
    ipc_loop *loop;
    ipc_host *phost, *chost;
    svc_service *svc;
    uint64_t tick_timer;
    bool shutting_down;
    uint64_t shutdown_deadline_ms;
};

/* ================================================================ producer */

static int send_cmd(svc_pconn *pc,
                    const Perfetto__Protos__GetAsyncCommandResponse *r, int fd)
{
    if (pc->async_call) {
        return fd >= 0 ?
            ipc_call_reply_fd(pc->async_call, &r->base, true, fd) :
            ipc_call_reply(pc->async_call, &r->base, true);
    }
    /* A producer that never opens GetAsyncCommand cannot make us queue
     * commands without limit: past the bound it is disconnected. */
    if (pc->nqueue >= SVC_MAX_QUEUED_CMDS) {
        ipc_conn_close(pc->conn);
        return -ENOBUFS;
    }
    svc_cmd *g = realloc(pc->queue, (pc->nqueue + 1) * sizeof(*g));
    if (!g)
        return -ENOMEM;
    pc->queue = g;
    svc_cmd *c = &pc->queue[pc->nqueue];
    c->len = perfetto__protos__get_async_command_response__get_packed_size(r);
    c->data = malloc(c->len ? c->len : 1);
    if (!c->data)
        return -ENOMEM;
    perfetto__protos__get_async_command_response__pack(r, c->data);
    c->fd = fd >= 0 ? dup(fd) : -1;
    pc->nqueue++;
    return 0;
}

static void flush_queue(svc_pconn *pc)
{
    for (size_t i = 0; i < pc->nqueue; i++) {
        svc_cmd *c = &pc->queue[i];
        Perfetto__Protos__GetAsyncCommandResponse *r =
            perfetto__protos__get_async_command_response__unpack(NULL, c->len,
                                                                 c->data);
        if (r && pc->async_call)
            send_cmd(pc, r, c->fd);
        perfetto__protos__get_async_command_response__free_unpacked(r, NULL);
        if (c->fd >= 0)
            close(c->fd);
        free(c->data);
    }
    free(pc->queue);
    pc->queue = NULL;
    pc->nqueue = 0;
}

static int op_setup_tracing(void *ctx, void *conn, int fd, uint32_t page_kb)
{
    Perfetto__Protos__GetAsyncCommandResponse r =
        PERFETTO__PROTOS__GET_ASYNC_COMMAND_RESPONSE__INIT;
    Perfetto__Protos__GetAsyncCommandResponse__SetupTracing st =
        PERFETTO__PROTOS__GET_ASYNC_COMMAND_RESPONSE__SETUP_TRACING__INIT;
    st.has_shared_buffer_page_size_kb = true;
    st.shared_buffer_page_size_kb = page_kb;
    r.cmd_case =
        PERFETTO__PROTOS__GET_ASYNC_COMMAND_RESPONSE__CMD_SETUP_TRACING;
    r.setup_tracing = &st;
    return send_cmd(conn, &r, fd);
}

static int op_setup_ds(void *ctx, void *conn, uint64_t id,
                       const Perfetto__Protos__DataSourceConfig *cfg)
{
    Perfetto__Protos__GetAsyncCommandResponse r =
        PERFETTO__PROTOS__GET_ASYNC_COMMAND_RESPONSE__INIT;
    Perfetto__Protos__GetAsyncCommandResponse__SetupDataSource m =
        PERFETTO__PROTOS__GET_ASYNC_COMMAND_RESPONSE__SETUP_DATA_SOURCE__INIT;
    m.has_new_instance_id = true;
    m.new_instance_id = id;
    m.config = (Perfetto__Protos__DataSourceConfig *)cfg;
    r.cmd_case =
        PERFETTO__PROTOS__GET_ASYNC_COMMAND_RESPONSE__CMD_SETUP_DATA_SOURCE;
    r.setup_data_source = &m;
    return send_cmd(conn, &r, -1);
}

static int op_start_ds(void *ctx, void *conn, uint64_t id,
                       const Perfetto__Protos__DataSourceConfig *cfg)
{
    Perfetto__Protos__GetAsyncCommandResponse r =
        PERFETTO__PROTOS__GET_ASYNC_COMMAND_RESPONSE__INIT;
    Perfetto__Protos__GetAsyncCommandResponse__StartDataSource m =
        PERFETTO__PROTOS__GET_ASYNC_COMMAND_RESPONSE__START_DATA_SOURCE__INIT;
    m.has_new_instance_id = true;
    m.new_instance_id = id;
    m.config = (Perfetto__Protos__DataSourceConfig *)cfg;
    r.cmd_case =
        PERFETTO__PROTOS__GET_ASYNC_COMMAND_RESPONSE__CMD_START_DATA_SOURCE;
    r.start_data_source = &m;
    return send_cmd(conn, &r, -1);
}

static int op_stop_ds(void *ctx, void *conn, uint64_t id)
{
    Perfetto__Protos__GetAsyncCommandResponse r =
        PERFETTO__PROTOS__GET_ASYNC_COMMAND_RESPONSE__INIT;
    Perfetto__Protos__GetAsyncCommandResponse__StopDataSource m =
        PERFETTO__PROTOS__GET_ASYNC_COMMAND_RESPONSE__STOP_DATA_SOURCE__INIT;
    m.has_instance_id = true;
    m.instance_id = id;
    r.cmd_case =
        PERFETTO__PROTOS__GET_ASYNC_COMMAND_RESPONSE__CMD_STOP_DATA_SOURCE;
    r.stop_data_source = &m;
    return send_cmd(conn, &r, -1);
}

static int op_flush(void *ctx, void *conn, const uint64_t *ids, size_t n,
                    uint64_t flush_id, uint64_t flags)
{
    Perfetto__Protos__GetAsyncCommandResponse r =
        PERFETTO__PROTOS__GET_ASYNC_COMMAND_RESPONSE__INIT;
    Perfetto__Protos__GetAsyncCommandResponse__Flush m =
        PERFETTO__PROTOS__GET_ASYNC_COMMAND_RESPONSE__FLUSH__INIT;
    m.n_data_source_ids = n;
    m.data_source_ids = (uint64_t *)ids;
    m.has_request_id = true;
    m.request_id = flush_id;
    m.has_flags = true;
    m.flags = flags;
    r.cmd_case = PERFETTO__PROTOS__GET_ASYNC_COMMAND_RESPONSE__CMD_FLUSH;
    r.flush = &m;
    return send_cmd(conn, &r, -1);
}

static svc_pconn *pconn_of(ipc_call *call)
{
    return ipc_conn_data(ipc_call_conn(call));
}

static void reply_empty(ipc_call *call)
{
    ipc_call_reply(call, NULL, false);
}

static void p_initialize(ipc_call *call, const ProtobufCMessage *args,
                         void *vd)
{
    svc_daemon *d = vd;
    ipc_conn *conn = ipc_call_conn(call);
    svc_pconn *pc = ipc_conn_data(conn);
    const Perfetto__Protos__InitializeConnectionRequest *req =
        (const void *)args;
    int fd = ipc_call_take_fd(call);
    if (fd >= 0)
        close(fd);        /* producer-provided SMBs are not supported */
    if (pc) {             /* a second InitializeConnection */
        ipc_call_fail(call);
        return;
    }
    pc = calloc(1, sizeof(*pc));
    if (!pc) {
        ipc_call_fail(call);
        return;
    }
    svc_producer_params pp = {
        .page_size_hint_bytes = req->has_shared_memory_page_size_hint_bytes ?
            req->shared_memory_page_size_hint_bytes : 0,
        .smb_size_hint_bytes = req->has_shared_memory_size_hint_bytes ?
            req->shared_memory_size_hint_bytes : 0,
        .name = req->producer_name,
        .smb_scraping_mode = req->has_smb_scraping_mode ?
            (int)req->smb_scraping_mode : 0,
    };
    pc->d = d;
    pc->conn = conn;
    pc->p = svc_producer_connect(d->svc, pc, ipc_conn_uid(conn),
                                 ipc_conn_pid(conn), &pp);
    if (!pc->p) {
        free(pc);
        ipc_call_fail(call);
        ipc_conn_close(conn);
        return;
    }
    fprintf(stderr, "shmtraced: producer %u \"%s\" connected (pid %ld, uid "
            "%ld)\n", svc_producer_id(pc->p),
            req->producer_name ? req->producer_name : "",
            (long)ipc_conn_pid(conn), (long)ipc_conn_uid(conn));
    ipc_conn_set_data(conn, pc);
    Perfetto__Protos__InitializeConnectionResponse r =
        PERFETTO__PROTOS__INITIALIZE_CONNECTION_RESPONSE__INIT;
    ipc_call_reply(call, &r.base, false);
}

/* Every producer method but InitializeConnection needs a producer. */
#define NEED_PRODUCER(call, pc)                  \
    svc_pconn *pc = pconn_of(call);              \
    if (!pc || !pc->p) {                         \
        ipc_call_fail(call);                     \
        return;                                  \
    }

static void p_register_ds(ipc_call *call, const ProtobufCMessage *args,
                          void *vd)
{
    NEED_PRODUCER(call, pc);
    const Perfetto__Protos__RegisterDataSourceRequest *req = (const void *)args;
    char err[256] = "";
    Perfetto__Protos__RegisterDataSourceResponse r =
        PERFETTO__PROTOS__REGISTER_DATA_SOURCE_RESPONSE__INIT;
    if (svc_producer_register_ds(pc->d->svc, pc->p,
                                 req->data_source_descriptor, err,
                                 sizeof(err)) < 0)
        r.error = err;
    ipc_call_reply(call, &r.base, false);
}

static void p_unregister_ds(ipc_call *call, const ProtobufCMessage *args,
                            void *vd)
{
    NEED_PRODUCER(call, pc);
    const Perfetto__Protos__UnregisterDataSourceRequest *req =
        (const void *)args;
    svc_producer_unregister_ds(pc->d->svc, pc->p, req->data_source_name);
    reply_empty(call);
}

static void p_commit(ipc_call *call, const ProtobufCMessage *args, void *vd)
{
    NEED_PRODUCER(call, pc);
    if (svc_producer_commit(pc->d->svc, pc->p, (const void *)args) < 0) {
        ipc_call_fail(call);
        return;
    }
    reply_empty(call);
}

static void p_get_async(ipc_call *call, const ProtobufCMessage *args,
                        void *vd)
{
    NEED_PRODUCER(call, pc);
    if (pc->async_call) {
        ipc_call_fail(call);
        return;
    }
    pc->async_call = call;
    flush_queue(pc);
}

static void p_register_writer(ipc_call *call, const ProtobufCMessage *args,
                              void *vd)
{
    NEED_PRODUCER(call, pc);
    const Perfetto__Protos__RegisterTraceWriterRequest *req =
        (const void *)args;
    svc_producer_register_writer(pc->d->svc, pc->p,
            req->has_trace_writer_id ? req->trace_writer_id : 0,
            req->has_target_buffer ? req->target_buffer : 0);
    reply_empty(call);
}

static void p_unregister_writer(ipc_call *call, const ProtobufCMessage *args,
                                void *vd)
{
    NEED_PRODUCER(call, pc);
    const Perfetto__Protos__UnregisterTraceWriterRequest *req =
        (const void *)args;
    svc_producer_unregister_writer(pc->d->svc, pc->p,
            req->has_trace_writer_id ? req->trace_writer_id : 0);
    reply_empty(call);
}

static void p_ds_stopped(ipc_call *call, const ProtobufCMessage *args,
                         void *vd)
{
    NEED_PRODUCER(call, pc);
    const Perfetto__Protos__NotifyDataSourceStoppedRequest *req =
        (const void *)args;
    if (req->has_data_source_id)
        svc_producer_ds_stopped(pc->d->svc, pc->p, req->data_source_id);
    reply_empty(call);
}

static void p_ack_only(ipc_call *call, const ProtobufCMessage *args, void *vd)
{
    NEED_PRODUCER(call, pc);
    (void)pc;
    reply_empty(call);
}

static void p_disconnect(ipc_conn *conn, void *vd)
{
    svc_daemon *d = vd;
    svc_pconn *pc = ipc_conn_data(conn);
    if (!pc)
        return;
    pc->async_call = NULL;            /* freed by the host */
    if (pc->p) {
        uint16_t id = svc_producer_id(pc->p);
        size_t n = svc_producer_disconnect(d->svc, pc->p);
        fprintf(stderr, "shmtraced: producer %u (pid %ld) disconnected; "
                "%zu unfinished chunk(s) scraped from its shared memory\n",
                id, (long)ipc_conn_pid(conn), n);
    }
    for (size_t i = 0; i < pc->nqueue; i++) {
        if (pc->queue[i].fd >= 0)
            close(pc->queue[i].fd);
        free(pc->queue[i].data);
    }
    free(pc->queue);
    free(pc);
    ipc_conn_set_data(conn, NULL);
}

static const ipc_method producer_methods[] = {
    {"InitializeConnection",
     &perfetto__protos__initialize_connection_request__descriptor,
     p_initialize},
    {"RegisterDataSource",
     &perfetto__protos__register_data_source_request__descriptor,
     p_register_ds},
    {"UnregisterDataSource",
     &perfetto__protos__unregister_data_source_request__descriptor,
     p_unregister_ds},
    {"CommitData", &perfetto__protos__commit_data_request__descriptor,
     p_commit},
    {"GetAsyncCommand",
     &perfetto__protos__get_async_command_request__descriptor, p_get_async},
    {"RegisterTraceWriter",
     &perfetto__protos__register_trace_writer_request__descriptor,
     p_register_writer},
    {"UnregisterTraceWriter",
     &perfetto__protos__unregister_trace_writer_request__descriptor,
     p_unregister_writer},
    {"NotifyDataSourceStarted",
     &perfetto__protos__notify_data_source_started_request__descriptor,
     p_ack_only},
    {"NotifyDataSourceStopped",
     &perfetto__protos__notify_data_source_stopped_request__descriptor,
     p_ds_stopped},
    {"ActivateTriggers",
     &perfetto__protos__activate_triggers_request__descriptor, p_ack_only},
    {"Sync", &perfetto__protos__sync_request__descriptor, p_ack_only},
    {"UpdateDataSource",
     &perfetto__protos__update_data_source_request__descriptor, p_ack_only},
};

static const ipc_service producer_port = {
    .name = IPC_PRODUCER_PORT,
    .methods = producer_methods,
    .n_methods = sizeof(producer_methods) / sizeof(producer_methods[0]),
    .on_disconnect = p_disconnect,
};

/* ================================================================ consumer */

static svc_cconn *cconn_get(svc_daemon *d, ipc_call *call)
{
    ipc_conn *conn = ipc_call_conn(call);
    svc_cconn *cc = ipc_conn_data(conn);
    if (cc)
        return cc;
    cc = calloc(1, sizeof(*cc));
    if (!cc)
        return NULL;
    cc->d = d;
    cc->conn = conn;
    ipc_conn_set_data(conn, cc);
    return cc;
}

static void send_disabled(svc_cconn *cc, const char *error)
{
    if (!cc->enable_call)
        return;
    Perfetto__Protos__EnableTracingResponse r =
        PERFETTO__PROTOS__ENABLE_TRACING_RESPONSE__INIT;
    r.state_case = PERFETTO__PROTOS__ENABLE_TRACING_RESPONSE__STATE_DISABLED;
    r.disabled = true;
    r.error = (char *)error;
    ipc_call_reply(cc->enable_call, &r.base, false);
    cc->enable_call = NULL;
}

static void op_session_disabled(void *ctx, void *consumer, svc_session *s,
                                const char *error)
{
    svc_cconn *cc = consumer;
    if (cc)
        send_disabled(cc, error);
}

static void op_flush_done(void *ctx, void *consumer, uint64_t token, bool ok)
{
    svc_cconn *cc = consumer;
    if (!cc)
        return;
    for (size_t i = 0; i < cc->nflushes; i++) {
        if (cc->flushes[i].token != token)
            continue;
        ipc_call *call = cc->flushes[i].call;
        cc->flushes[i] = cc->flushes[--cc->nflushes];
        if (ok)
            reply_empty(call);
        else
            ipc_call_fail(call);
        return;
    }
}

static void c_enable(ipc_call *call, const ProtobufCMessage *args, void *vd)
{
    svc_daemon *d = vd;
    svc_cconn *cc = cconn_get(d, call);
    const Perfetto__Protos__EnableTracingRequest *req = (const void *)args;
    int fd = ipc_call_take_fd(call);
    if (!cc || cc->s || d->shutting_down) {
        if (fd >= 0)
            close(fd);
        ipc_call_fail(call);
        return;
    }
    char err[512] = "";
    cc->enable_call = call;
    cc->s = svc_session_enable(d->svc, cc, req->trace_config, fd, err,
                               sizeof(err));
    if (!cc->s) {
        fprintf(stderr, "shmtraced: EnableTracing refused: %s\n", err);
        send_disabled(cc, err[0] ? err : "EnableTracing failed");
    } else {
        fprintf(stderr, "shmtraced: session %llu started (consumer pid "
                "%ld)\n", (unsigned long long)svc_session_id(cc->s),
                (long)ipc_conn_pid(cc->conn));
    }
}

static void c_disable(ipc_call *call, const ProtobufCMessage *args, void *vd)
{
    svc_daemon *d = vd;
    svc_cconn *cc = cconn_get(d, call);
    if (!cc || !cc->s) {
        ipc_call_fail(call);
        return;
    }
    svc_session_disable(d->svc, cc->s);
    reply_empty(call);
}

/* -- ReadBuffers pump -- */

static int batch_send(svc_cconn *cc, bool has_more)
{
    Perfetto__Protos__ReadBuffersResponse r =
        PERFETTO__PROTOS__READ_BUFFERS_RESPONSE__INIT;
    Perfetto__Protos__ReadBuffersResponse__Slice *sl = NULL, **slp = NULL;
    if (cc->nslices) {
        sl = calloc(cc->nslices, sizeof(*sl));
        slp = calloc(cc->nslices, sizeof(*slp));
        if (!sl || !slp) {
            free(sl);
            free(slp);
            return -ENOMEM;
        }
    }
    size_t off = 0;
    for (size_t i = 0; i < cc->nslices; i++) {
        perfetto__protos__read_buffers_response__slice__init(&sl[i]);
        sl[i].has_data = true;
        sl[i].data.data = cc->batch + off;
        sl[i].data.len = cc->slice_len[i];
        off += cc->slice_len[i];
        if (cc->slice_last[i]) {
            sl[i].has_last_slice_for_packet = true;
            sl[i].last_slice_for_packet = true;
        }
        slp[i] = &sl[i];
    }
    r.n_slices = cc->nslices;
    r.slices = slp;
    int rc = ipc_call_reply(cc->read_call, &r.base, has_more);
    free(sl);
    free(slp);
    cc->batch_len = 0;
    cc->nslices = 0;
    return rc;
}

static int batch_emit(void *ctx, const uint8_t *p, size_t size)
{
    svc_cconn *cc = ctx;
    size_t done = 0;
    do {
        if (cc->nslices == cc->cap_slices) {
            size_t cap = cc->cap_slices ? cc->cap_slices * 2 : 256;
            size_t *l = realloc(cc->slice_len, cap * sizeof(*l));
            if (!l)
                return -ENOMEM;
            cc->slice_len = l;
            bool *b = realloc(cc->slice_last, cap * sizeof(*b));
            if (!b)
                return -ENOMEM;
            cc->slice_last = b;
            cc->cap_slices = cap;
        }
        size_t used = cc->batch_len + (cc->nslices + 1) * SVC_SLICE_OVERHEAD;
        if (used + 64 > SVC_REPLY_BYTES) {
            int rc = batch_send(cc, true);
            if (rc < 0)
                return rc;
            continue;
        }
        size_t space = SVC_REPLY_BYTES - used;
        size_t n = size - done < space ? size - done : space;
        memcpy(cc->batch + cc->batch_len, p + done, n);
        cc->batch_len += n;
        done += n;
        cc->slice_len[cc->nslices] = n;
        cc->slice_last[cc->nslices] = done == size;
        cc->nslices++;
    } while (done < size);
    return 0;
}

static void read_pump(void *vcc);

static void read_finish(svc_cconn *cc, bool ok)
{
    if (cc->read_timer)
        ipc_loop_cancel_timer(cc->d->loop, cc->read_timer);
    cc->read_timer = 0;
    if (ok)
        batch_send(cc, false);
    else
        ipc_call_fail(cc->read_call);
    cc->read_call = NULL;
    cc->batch_len = 0;
    cc->nslices = 0;
}

static void read_pump(void *vcc)
{
    svc_cconn *cc = vcc;
    cc->read_timer = 0;
    if (!cc->read_call)
        return;
    if (!cc->s) {
        read_finish(cc, false);
        return;
    }
    while (ipc_conn_tx_queued_bytes(cc->conn) < SVC_TX_HIGH) {
        bool more = false;
        int rc = svc_session_read(cc->d->svc, cc->s, SVC_READ_ROUND,
                                  batch_emit, cc, &more);
        if (rc < 0) {
            read_finish(cc, false);
            return;
        }
        if (!more) {
            read_finish(cc, true);
            return;
        }
    }
    cc->read_timer = ipc_loop_add_timer(cc->d->loop, 1, 0, read_pump, cc);
}

static void c_read(ipc_call *call, const ProtobufCMessage *args, void *vd)
{
    svc_daemon *d = vd;
    svc_cconn *cc = cconn_get(d, call);
    if (!cc || !cc->s || cc->read_call) {
        ipc_call_fail(call);
        return;
    }
    if (!cc->batch) {
        cc->batch = malloc(SVC_REPLY_BYTES);
        if (!cc->batch) {
            ipc_call_fail(call);
            return;
        }
    }
    cc->read_call = call;
    read_pump(cc);
}

static void c_free(ipc_call *call, const ProtobufCMessage *args, void *vd)
{
    svc_daemon *d = vd;
    svc_cconn *cc = cconn_get(d, call);
    if (cc && cc->s) {
        if (cc->read_call)
            read_finish(cc, false);
        send_disabled(cc, NULL);
        for (size_t i = 0; i < cc->nflushes; i++)
            ipc_call_fail(cc->flushes[i].call);
        cc->nflushes = 0;
        svc_session_free(d->svc, cc->s);
        cc->s = NULL;
    }
    reply_empty(call);
}

static void c_flush(ipc_call *call, const ProtobufCMessage *args, void *vd)
{
    svc_daemon *d = vd;
    svc_cconn *cc = cconn_get(d, call);
    const Perfetto__Protos__FlushRequest *req = (const void *)args;
    if (!cc || !cc->s || svc_session_is_disabled(cc->s)) {
        /* Nothing to flush: a disabled session is already flushed. */
        if (cc && cc->s)
            reply_empty(call);
        else
            ipc_call_fail(call);
        return;
    }
    /* A consumer cannot make us hold (and fan out to every producer) an
     * unbounded number of flushes: past the bound the call fails at once. */
    if (cc->nflushes >= SVC_MAX_PENDING_FLUSHES) {
        ipc_call_fail(call);
        return;
    }
    svc_pending_flush *g = realloc(cc->flushes,
                                   (cc->nflushes + 1) * sizeof(*g));
    if (!g) {
        ipc_call_fail(call);
        return;
    }
    cc->flushes = g;
    uint64_t token = ++cc->next_token;
    cc->flushes[cc->nflushes].token = token;
    cc->flushes[cc->nflushes].call = call;
    cc->nflushes++;
    /* 4 = explicit reason, 2 << 4 = initiated by a consumer command. */
    uint64_t flags = req->has_flags && req->flags ? req->flags : 4u | (2u << 4);
    if (svc_session_flush(d->svc, cc->s,
                          req->has_timeout_ms ? req->timeout_ms : 0, flags,
                          token) < 0)
        op_flush_done(d, cc, token, false);
}

static void c_start(ipc_call *call, const ProtobufCMessage *args, void *vd)
{
    svc_cconn *cc = cconn_get(vd, call);
    if (!cc || !cc->s) {
        ipc_call_fail(call);
        return;
    }
    if (svc_session_start(((svc_daemon *)vd)->svc, cc->s) < 0)
        ipc_call_fail(call);
    else
        reply_empty(call);
}

static void c_stats(ipc_call *call, const ProtobufCMessage *args, void *vd)
{
    svc_daemon *d = vd;
    svc_cconn *cc = cconn_get(d, call);
    Perfetto__Protos__TraceStats *st =
        svc_stats_build(d->svc, cc ? cc->s : NULL);
    if (!st) {
        ipc_call_fail(call);
        return;
    }
    Perfetto__Protos__GetTraceStatsResponse r =
        PERFETTO__PROTOS__GET_TRACE_STATS_RESPONSE__INIT;
    r.trace_stats = st;
    ipc_call_reply(call, &r.base, false);
    svc_stats_free(st);
}

static void c_clone(ipc_call *call, const ProtobufCMessage *args, void *vd)
{
    svc_daemon *d = vd;
    svc_cconn *cc = cconn_get(d, call);
    const Perfetto__Protos__CloneSessionRequest *req = (const void *)args;
    int fd = ipc_call_take_fd(call);
    if (fd >= 0)
        close(fd);
    Perfetto__Protos__CloneSessionResponse r =
        PERFETTO__PROTOS__CLONE_SESSION_RESPONSE__INIT;
    char err[256] = "";
    if (!cc || cc->s) {
        r.has_success = true;
        r.success = false;
        r.error = "this consumer already has a session";
        ipc_call_reply(call, &r.base, false);
        return;
    }
    uint64_t id = req->selector_case ==
        PERFETTO__PROTOS__CLONE_SESSION_REQUEST__SELECTOR_SESSION_ID ?
        req->session_id : UINT64_MAX;
    const char *name = req->selector_case ==
        PERFETTO__PROTOS__CLONE_SESSION_REQUEST__SELECTOR_UNIQUE_SESSION_NAME ?
        req->unique_session_name : NULL;
    cc->s = svc_session_clone(d->svc, cc, id, name, err, sizeof(err));
    r.has_success = true;
    r.success = cc->s != NULL;
    if (!cc->s) {
        r.error = err;
    } else {
        r.has_uuid_msb = r.has_uuid_lsb = true;
        svc_session_uuid(cc->s, &r.uuid_msb, &r.uuid_lsb);
    }
    ipc_call_reply(call, &r.base, false);
}

static void c_observe(ipc_call *call, const ProtobufCMessage *args, void *vd)
{
    (void)call;      /* kept open, never answered: no events are sent */
}

static void c_unsupported(ipc_call *call, const ProtobufCMessage *args,
                          void *vd)
{
    ipc_call_fail(call);
}

static void c_capabilities(ipc_call *call, const ProtobufCMessage *args,
                           void *vd)
{
    reply_empty(call);
}

static void c_disconnect(ipc_conn *conn, void *vd)
{
    svc_daemon *d = vd;
    svc_cconn *cc = ipc_conn_data(conn);
    if (!cc)
        return;
    if (cc->read_timer)
        ipc_loop_cancel_timer(d->loop, cc->read_timer);
    if (cc->s)
        svc_session_free(d->svc, cc->s);
    free(cc->flushes);
    free(cc->batch);
    free(cc->slice_len);
    free(cc->slice_last);
    free(cc);
    ipc_conn_set_data(conn, NULL);
}

static const ipc_method consumer_methods[] = {
    {"EnableTracing", &perfetto__protos__enable_tracing_request__descriptor,
     c_enable},
    {"DisableTracing", &perfetto__protos__disable_tracing_request__descriptor,
     c_disable},
    {"ReadBuffers", &perfetto__protos__read_buffers_request__descriptor,
     c_read},
    {"FreeBuffers", &perfetto__protos__free_buffers_request__descriptor,
     c_free},
    {"Flush", &perfetto__protos__flush_request__descriptor, c_flush},
    {"StartTracing", &perfetto__protos__start_tracing_request__descriptor,
     c_start},
    {"ChangeTraceConfig", NULL, c_unsupported},
    {"Detach", NULL, c_unsupported},
    {"Attach", NULL, c_unsupported},
    {"GetTraceStats", &perfetto__protos__get_trace_stats_request__descriptor,
     c_stats},
    {"ObserveEvents", NULL, c_observe},
    {"QueryServiceState", NULL, c_unsupported},
    {"QueryCapabilities", NULL, c_capabilities},
    {"SaveTraceForBugreport", NULL, c_unsupported},
    {"CloneSession", &perfetto__protos__clone_session_request__descriptor,
     c_clone},
};

static const ipc_service consumer_port = {
    .name = IPC_CONSUMER_PORT,
    .methods = consumer_methods,
    .n_methods = sizeof(consumer_methods) / sizeof(consumer_methods[0]),
    .on_disconnect = c_disconnect,
};

/* ================================================================ daemon */

static void tick(void *vd)
{
    svc_daemon *d = vd;
    uint64_t now = svc_now_ms();
    svc_tick(d->svc, now);
    if (!d->shutting_down)
        return;
    /* Done when every session is disabled (files written) and every
     * session read over IPC was collected by its consumer. */
    if ((svc_all_sessions_disabled(d->svc) &&
         svc_sessions_owing_reads(d->svc) == 0) ||
        now >= d->shutdown_deadline_ms)
        ipc_loop_quit(d->loop);
}

svc_daemon *svc_daemon_create(ipc_loop *loop, const char *producer_path,
                              const char *consumer_path, int *err)
{
    static const svc_ops ops = {
        .setup_tracing = op_setup_tracing,
        .setup_data_source = op_setup_ds,
        .start_data_source = op_start_ds,
        .stop_data_source = op_stop_ds,
        .flush = op_flush,
        .flush_done = op_flush_done,
        .session_disabled = op_session_disabled,
    };
    int e = 0;
    svc_daemon *d = calloc(1, sizeof(*d));
    if (!d) {
        if (err)
            *err = -ENOMEM;
        return NULL;
    }
    d->loop = loop;
    d->svc = svc_create(&ops, d, getuid());
    if (!d->svc) {
        e = -ENOMEM;
        goto fail;
    }
    d->phost = ipc_host_create(loop, producer_path, 0660, &e);
    if (!d->phost)
        goto fail;
    d->chost = ipc_host_create(loop, consumer_path, 0600, &e);
    if (!d->chost)
        goto fail;
    if ((e = ipc_host_expose_service(d->phost, &producer_port, d)) < 0 ||
        (e = ipc_host_expose_service(d->chost, &consumer_port, d)) < 0)
        goto fail;
    d->tick_timer = ipc_loop_add_timer(loop, SVC_TICK_MS, SVC_TICK_MS, tick,
                                       d);
    if (!d->tick_timer) {
        e = -ENOMEM;
        goto fail;
    }
    return d;
fail:
    if (err)
        *err = e ? e : -ENOMEM;
    svc_daemon_destroy(d);
    return NULL;
}

void svc_daemon_destroy(svc_daemon *d)
{
    if (!d)
        return;
    if (d->tick_timer)
        ipc_loop_cancel_timer(d->loop, d->tick_timer);
    /* Hosts first: their on_disconnect callbacks use the service. */
    ipc_host_destroy(d->chost);
    ipc_host_destroy(d->phost);
    svc_destroy(d->svc);
    free(d);
}

void svc_daemon_shutdown(svc_daemon *d)
{
    if (d->shutting_down)
        return;
    d->shutting_down = true;
    d->shutdown_deadline_ms = svc_now_ms() + SVC_SHUTDOWN_GRACE_MS;
    svc_disable_all_sessions(d->svc);
}

svc_service *svc_daemon_service(svc_daemon *d)
{
    return d->svc;
}
