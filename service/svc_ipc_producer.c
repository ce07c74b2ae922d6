/*
 * svc_ipc_producer.c - shmtraced's ProducerPort: InitializeConnection
 * (identity from SO_PEERCRED, SMB hints), data source registration,
 * CommitData, trace writers, start and stop acks, and the GetAsyncCommand
 * stream that carries SetupTracing (+ SMB fd), Setup/Start/StopDataSource
 * and Flush to the producer.
 *
 * Commands the service issues before the producer opened GetAsyncCommand
 * are queued (packed, fd dup'ed) and sent when it does. Perfetto's service
 * drops them instead (its RemoteProducer::SetupDataSource / Start / Stop
 * return while async_producer_commands is unbound); we keep them so that a
 * producer that registers its data sources before asking for commands
 * still traces, but a producer that never asks cannot make us hold much:
 *   - a StopDataSource for an instance whose SetupDataSource is still
 *     queued takes that Setup and its Start out of the queue and is not
 *     queued itself: the producer never heard of the instance, and the
 *     service has forgotten it (data source unregistered, session freed)
 *     or is stopping it (it then waits for no ack it could get, as with
 *     Perfetto). Registering and unregistering a data source a session
 *     wants, in a loop, queues nothing: each cycle held a packed copy of
 *     the session's DataSourceConfig (twice) before.
 *   - past SVC_MAX_QUEUED_CMDS commands or SVC_MAX_QUEUED_CMD_BYTES bytes,
 *     or when its uid's producer connections together would hold more
 *     than SVC_MAX_QUEUED_CMD_BYTES_PER_UID (counted per uid in the
 *     daemon, svc_uid_queued), the connection is dropped, the reason
 *     logged, the queue freed at once. Dropping some commands instead
 *     would leave the producer a Start without its Setup, or a session it
 *     half knows; a producer
 *     that reconnects (the Perfetto SDK does) registers again and starts
 *     clean.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "svc_ipc_int.h"
#include "svc_log.h"

/* ================================================================ producer */

static void cmd_free(svc_cmd *c)
{
    if (c->fd >= 0)
        close(c->fd);
    free(c->data);
    c->data = NULL;
    c->fd = -1;
}

/* The bytes queued for the connections of pc's uid (an entry made if
 * `make`); NULL if none (or no memory to make one). */
static svc_uid_queued *uid_queued(svc_pconn *pc, bool make)
{
    svc_daemon *d = pc->d;
    uid_t uid = ipc_conn_uid(pc->conn);
    for (size_t i = 0; i < d->nuid_queued; i++)
        if (d->uid_queued[i].uid == uid)
            return &d->uid_queued[i];
    if (!make)
        return NULL;
    svc_uid_queued *g = realloc(d->uid_queued,
                                (d->nuid_queued + 1) * sizeof(*g));
    if (!g)
        return NULL;
    d->uid_queued = g;
    g[d->nuid_queued] = (svc_uid_queued){ .uid = uid, .bytes = 0 };
    return &g[d->nuid_queued++];
}

/* len bytes of pc's queue are gone: its uid's count too (the entry goes
 * with its last byte). */
static void uid_unqueued(svc_pconn *pc, size_t len)
{
    svc_uid_queued *u = len ? uid_queued(pc, false) : NULL;
    if (!u)
        return;
    u->bytes = u->bytes > len ? u->bytes - len : 0;
    if (u->bytes == 0)
        *u = pc->d->uid_queued[--pc->d->nuid_queued];
}

static void queue_free(svc_pconn *pc)
{
    for (size_t i = 0; i < pc->nqueue; i++)
        cmd_free(&pc->queue[i]);
    free(pc->queue);
    uid_unqueued(pc, pc->queue_bytes);
    pc->queue = NULL;
    pc->nqueue = 0;
    pc->queue_bytes = 0;
}

/* The producer does not read its commands and has too many waiting: it is
 * dropped (once; the close runs from the loop), and what was queued for
 * it goes now. */
static int queue_overflow(svc_pconn *pc, size_t adding, size_t uid_bytes)
{
    if (!pc->queue_overflowed) {
        pc->queue_overflowed = true;
        fprintf(stderr, "shmtraced: producer %u (pid %ld, uid %ld) "
                "dropped: it has not opened GetAsyncCommand and %zu "
                "command(s) of %zu bytes wait for it (+%zu; %zu bytes for "
                "all its uid's producers), past the %u commands or %u MiB "
                "a producer connection may have queued, or the %u MiB of "
                "a uid\n", pc->p ? svc_producer_id(pc->p) : 0u,
                (long)ipc_conn_pid(pc->conn), (long)ipc_conn_uid(pc->conn),
                pc->nqueue, pc->queue_bytes, adding, uid_bytes,
                SVC_MAX_QUEUED_CMDS, SVC_MAX_QUEUED_CMD_BYTES >> 20,
                SVC_MAX_QUEUED_CMD_BYTES_PER_UID >> 20);
        queue_free(pc);
        ipc_conn_close(pc->conn);
    }
    return -ENOBUFS;
}

static int send_cmd(svc_pconn *pc,
                    const Perfetto__Protos__GetAsyncCommandResponse *r, int fd,
                    uint64_t instance_id)
{
    if (pc->async_call) {
        return fd >= 0 ?
            ipc_call_reply_fd(pc->async_call, &r->base, true, fd) :
            ipc_call_reply(pc->async_call, &r->base, true);
    }
    if (pc->queue_overflowed)
        return -ENOBUFS;            /* being dropped */
    size_t len = perfetto__protos__get_async_command_response__get_packed_size(
        r);
    svc_uid_queued *u = uid_queued(pc, true);
    if (!u)
        return -ENOMEM;
    if (pc->nqueue >= SVC_MAX_QUEUED_CMDS ||
        len > SVC_MAX_QUEUED_CMD_BYTES - pc->queue_bytes ||
        len > SVC_MAX_QUEUED_CMD_BYTES_PER_UID - u->bytes) {
        size_t uid_bytes = u->bytes;
        if (uid_bytes == 0)               /* made just now: unmake it */
            *u = pc->d->uid_queued[--pc->d->nuid_queued];
        return queue_overflow(pc, len, uid_bytes);
    }
    svc_cmd *g = realloc(pc->queue, (pc->nqueue + 1) * sizeof(*g));
    if (!g)
        return -ENOMEM;
    pc->queue = g;
    svc_cmd *c = &pc->queue[pc->nqueue];
    c->len = len;
    c->data = malloc(c->len ? c->len : 1);
    if (!c->data)
        return -ENOMEM;
    perfetto__protos__get_async_command_response__pack(r, c->data);
    c->fd = fd >= 0 ? dup(fd) : -1;
    if (fd >= 0 && c->fd < 0) {       /* out of descriptors: not queued */
        int err = errno;
        free(c->data);
        c->data = NULL;
        return -err;
    }
    c->instance_id = instance_id;
    pc->nqueue++;
    pc->queue_bytes += len;
    u->bytes += len;
    return 0;
}

/* Takes instance id's queued Setup/StartDataSource out of the queue (in
 * order); true if there was one, i.e. the producer never heard of it. */
static bool unqueue_instance(svc_pconn *pc, uint64_t id)
{
    size_t kept = 0;
    bool found = false;
    for (size_t i = 0; i < pc->nqueue; i++) {
        svc_cmd *c = &pc->queue[i];
        if (id != 0 && c->instance_id == id) {
            pc->queue_bytes -= c->len;
            uid_unqueued(pc, c->len);
            cmd_free(c);
            found = true;
            continue;
        }
        pc->queue[kept++] = *c;
    }
    pc->nqueue = kept;
    return found;
}

static void flush_queue(svc_pconn *pc)
{
    for (size_t i = 0; i < pc->nqueue; i++) {
        svc_cmd *c = &pc->queue[i];
        Perfetto__Protos__GetAsyncCommandResponse *r =
            perfetto__protos__get_async_command_response__unpack(NULL, c->len,
                                                                 c->data);
        if (r && pc->async_call)
            send_cmd(pc, r, c->fd, 0);
        perfetto__protos__get_async_command_response__free_unpacked(r, NULL);
    }
    queue_free(pc);
}

int svc__op_setup_tracing(void *ctx, void *conn, int fd, uint32_t page_kb)
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
    return send_cmd(conn, &r, fd, 0);
}

int svc__op_setup_ds(void *ctx, void *conn, uint64_t id,
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
    return send_cmd(conn, &r, -1, id);
}

int svc__op_start_ds(void *ctx, void *conn, uint64_t id,
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
    return send_cmd(conn, &r, -1, id);
}

int svc__op_stop_ds(void *ctx, void *conn, uint64_t id)
{
    svc_pconn *pc = conn;
    if (!pc->async_call && unqueue_instance(pc, id))
        return 0;                   /* never told of it: nothing to stop */
    Perfetto__Protos__GetAsyncCommandResponse r =
        PERFETTO__PROTOS__GET_ASYNC_COMMAND_RESPONSE__INIT;
    Perfetto__Protos__GetAsyncCommandResponse__StopDataSource m =
        PERFETTO__PROTOS__GET_ASYNC_COMMAND_RESPONSE__STOP_DATA_SOURCE__INIT;
    m.has_instance_id = true;
    m.instance_id = id;
    r.cmd_case =
        PERFETTO__PROTOS__GET_ASYNC_COMMAND_RESPONSE__CMD_STOP_DATA_SOURCE;
    r.stop_data_source = &m;
    return send_cmd(conn, &r, -1, 0);
}

int svc__op_flush(void *ctx, void *conn, const uint64_t *ids, size_t n,
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
    return send_cmd(conn, &r, -1, 0);
}

/* incremental_state_config.clear_period_ms (svc_trigger.c). */
int svc__op_clear_incremental(void *ctx, void *conn, const uint64_t *ids,
                              size_t n)
{
    Perfetto__Protos__GetAsyncCommandResponse r =
        PERFETTO__PROTOS__GET_ASYNC_COMMAND_RESPONSE__INIT;
    Perfetto__Protos__GetAsyncCommandResponse__ClearIncrementalState m =
        PERFETTO__PROTOS__GET_ASYNC_COMMAND_RESPONSE__CLEAR_INCREMENTAL_STATE__INIT;
    m.n_data_source_ids = n;
    m.data_source_ids = (uint64_t *)ids;
    r.cmd_case = PERFETTO__PROTOS__GET_ASYNC_COMMAND_RESPONSE__CMD_CLEAR_INCREMENTAL_STATE;
    r.clear_incremental_state = &m;
    return send_cmd(conn, &r, -1, 0);
}

static svc_pconn *pconn_of(ipc_call *call)
{
    return ipc_conn_data(ipc_call_conn(call));
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
        .sdk_version = req->sdk_version,
    };
    pc->d = d;
    pc->conn = conn;
    pc->p = svc_producer_connect(d->svc, pc, ipc_conn_uid(conn),
                                 ipc_conn_pid(conn), &pp);
    if (!pc->p) {
        int err = errno;
        fprintf(stderr, "shmtraced: producer (pid %ld, uid %ld) refused: "
                "%s\n", (long)ipc_conn_pid(conn), (long)ipc_conn_uid(conn),
                err == EAGAIN ? "no producer id is free (each of the 65535 "
                "is a connected producer's or known to a live session)"
                              : strerror(err));
        free(pc);
        ipc_call_fail(call);
        ipc_conn_close(conn);
        return;
    }
    char name[SVC_LOG_NAME_BYTES];
    fprintf(stderr, "shmtraced: producer %u \"%s\" connected (pid %ld, uid "
            "%ld)\n", svc_producer_id(pc->p),
            svc_log_str(name, sizeof name, req->producer_name,
                        SVC_LOG_NAME_MAX),
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
    svc__reply_empty(call);
}

static void p_commit(ipc_call *call, const ProtobufCMessage *args, void *vd)
{
    NEED_PRODUCER(call, pc);
    if (svc_producer_commit(pc->d->svc, pc->p, (const void *)args) < 0) {
        ipc_call_fail(call);
        return;
    }
    svc__reply_empty(call);
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
    svc__reply_empty(call);
}

static void p_unregister_writer(ipc_call *call, const ProtobufCMessage *args,
                                void *vd)
{
    NEED_PRODUCER(call, pc);
    const Perfetto__Protos__UnregisterTraceWriterRequest *req =
        (const void *)args;
    svc_producer_unregister_writer(pc->d->svc, pc->p,
            req->has_trace_writer_id ? req->trace_writer_id : 0);
    svc__reply_empty(call);
}

static void p_ds_stopped(ipc_call *call, const ProtobufCMessage *args,
                         void *vd)
{
    NEED_PRODUCER(call, pc);
    const Perfetto__Protos__NotifyDataSourceStoppedRequest *req =
        (const void *)args;
    if (req->has_data_source_id)
        svc_producer_ds_stopped(pc->d->svc, pc->p, req->data_source_id);
    svc__reply_empty(call);
}

static void p_ds_started(ipc_call *call, const ProtobufCMessage *args,
                         void *vd)
{
    NEED_PRODUCER(call, pc);
    const Perfetto__Protos__NotifyDataSourceStartedRequest *req =
        (const void *)args;
    if (req->has_data_source_id)
        svc_producer_ds_started(pc->d->svc, pc->p, req->data_source_id);
    svc__reply_empty(call);
}

/* ActivateTriggers (what `trigger_perfetto NAME` sends): the names are
 * untrusted strings; the core bounds what it keeps per session. */
static void p_triggers(ipc_call *call, const ProtobufCMessage *args, void *vd)
{
    NEED_PRODUCER(call, pc);
    const Perfetto__Protos__ActivateTriggersRequest *req = (const void *)args;
    svc_producer_activate_triggers(pc->d->svc, pc->p,
            (const char *const *)req->trigger_names, req->n_trigger_names);
    svc__reply_empty(call);
}

static void p_ack_only(ipc_call *call, const ProtobufCMessage *args, void *vd)
{
    NEED_PRODUCER(call, pc);
    (void)pc;
    svc__reply_empty(call);
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
    queue_free(pc);
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
     p_ds_started},
    {"NotifyDataSourceStopped",
     &perfetto__protos__notify_data_source_stopped_request__descriptor,
     p_ds_stopped},
    {"ActivateTriggers",
     &perfetto__protos__activate_triggers_request__descriptor, p_triggers},
    {"Sync", &perfetto__protos__sync_request__descriptor, p_ack_only},
    {"UpdateDataSource",
     &perfetto__protos__update_data_source_request__descriptor, p_ack_only},
};

const ipc_service svc__producer_port = {
    .name = IPC_PRODUCER_PORT,
    .methods = producer_methods,
    .n_methods = sizeof(producer_methods) / sizeof(producer_methods[0]),
    .on_disconnect = p_disconnect,
};
