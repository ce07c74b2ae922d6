/*
 * producer_client.c - libshm's producer IPC client (prod_*): the library
 * thread, the ProducerPort connection and the async command stream.
 *
 * Connection life (one generation per connection, p->gen):
 *   connect -> BindService("ProducerPort") -> on_bound: InitializeConnection
 *   (drop_reply-free: its reply is only checked), GetAsyncCommand (stream,
 *   re-issued if the service ever ends it), RegisterDataSource xN, then
 *   on_connect. Requests are pipelined as Perfetto's client does.
 *   setup_tracing: take the SMB fd, map it, build the arbiter whose
 *   transport is producer_commit.c, tagged with this generation.
 *   disconnect: generation bumps (queued and late commits of the old one
 *   are dropped and counted), the arbiter is shut down and orphaned,
 *   instances are forgotten, on_disconnect, and a reconnect timer if
 *   asked for.
 * Threads: everything here runs on the library thread except prod_* entry
 * points, which only take mu or post to the loop. See producer_int.h.
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <shmtrace/smb_abi.h>

#include "common.pb-c.h"
#include "config.pb-c.h"
#include "producer_int.h"

/* CommitData batching (see on_setup_tracing): a batch is sent once its
 * chunks reach 1/PROD_BATCH_SMB_DIVISOR of the SMB, capped. The cap was
 * 64 KiB until 2026-12-03; at 256 KiB a 4 MiB SMB sends a quarter of the
 * messages (1 KiB x4 recordings of bench_vs_run.sh, five each way,
 * alternating: producer CPU per packet median 612 ns against 736, 1316
 * against 1084 MB/s; 512 KiB and 1 MiB were no better). */
#define PROD_BATCH_SMB_DIVISOR 16u
#define PROD_BATCH_MAX (256u * 1024u)

/* Size of the SMB object behind fd; 0 if fstat fails (the arbiter then
 * refuses the fd anyway). */
static size_t fd_size(int fd)
{
    struct stat st;
    return fstat(fd, &st) == 0 && st.st_size > 0 ? (size_t)st.st_size : 0;
}

#define DEFAULT_RECONNECT_MS 1000u
#define MAX_DATA_SOURCES 256

static void try_connect(void *ctx);

/* ---- outgoing queue (any thread) ----------------------------------- */

static void drain(void *ctx)
{
    prod_producer *p = ctx;
    pthread_mutex_lock(&p->mu);
    prod__outmsg *m = p->q_head;
    p->q_head = p->q_tail = NULL;
    p->drain_posted = false;
    uint64_t gen = p->gen;
    pthread_mutex_unlock(&p->mu);
    uint64_t sent = 0, dropped = 0;
    while (m) {
        prod__outmsg *next = m->next;
        if (m->gen == gen && p->client &&
            ipc_client_invoke_raw(p->client, m->method, m->bytes, m->len, -1,
                                  NULL, NULL, NULL) > 0) {
            if (strcmp(m->method, "CommitData") == 0)
                sent++;
        } else {
            dropped++;
        }
        free(m->bytes);
        free(m);
        m = next;
    }
    pthread_mutex_lock(&p->mu);
    p->stats.commit_requests += sent;
    p->stats.commits_dropped += dropped;
    pthread_mutex_unlock(&p->mu);
}

int prod__enqueue(prod_producer *p, uint64_t gen, const char *method,
                  uint8_t *bytes, size_t len)
{
    prod__outmsg *m = malloc(sizeof *m);
    pthread_mutex_lock(&p->mu);
    if (!m || gen != p->gen || !p->connected) {
        p->stats.commits_dropped++;
        pthread_mutex_unlock(&p->mu);
        free(bytes);
        free(m);
        return m ? -ENOTCONN : -ENOMEM;
    }
    m->next = NULL;
    m->gen = gen;
    m->method = method;
    m->bytes = bytes;
    m->len = len;
    if (p->q_tail)
        p->q_tail->next = m;
    else
        p->q_head = m;
    p->q_tail = m;
    int rc = 0;
    if (!p->drain_posted) {
        rc = ipc_loop_post_threadsafe(p->loop, drain, p);
        p->drain_posted = rc == 0;
    }
    pthread_mutex_unlock(&p->mu);
    return rc;
}

/* Serialize msg and queue it for the current connection. */
static int send_msg(prod_producer *p, const char *method,
                    const ProtobufCMessage *msg)
{
    size_t n = protobuf_c_message_get_packed_size(msg);
    uint8_t *buf = malloc(n ? n : 1);
    if (!buf)
        return -ENOMEM;
    protobuf_c_message_pack(msg, buf);
    pthread_mutex_lock(&p->mu);
    uint64_t gen = p->gen;
    pthread_mutex_unlock(&p->mu);
    return prod__enqueue(p, gen, method, buf, n);
}

/* ---- data sources and instances (loop thread) --------------------- */

static int register_one(prod_producer *p, const prod__ds *d)
{
    Perfetto__Protos__DataSourceDescriptor desc =
        PERFETTO__PROTOS__DATA_SOURCE_DESCRIPTOR__INIT;
    desc.name = d->name;
#define FLAG(f)                                                          \
    if (d->desc.f) {                                                     \
        desc.has_##f = true;                                             \
        desc.f = true;                                                   \
    }
    FLAG(will_notify_on_start)
    FLAG(will_notify_on_stop)
    FLAG(handles_incremental_state_clear)
    FLAG(no_flush)
#undef FLAG
    Perfetto__Protos__RegisterDataSourceRequest r =
        PERFETTO__PROTOS__REGISTER_DATA_SOURCE_REQUEST__INIT;
    r.data_source_descriptor = &desc;
    return send_msg(p, "RegisterDataSource", &r.base);
}

static prod__instance *find_instance(prod_producer *p, uint64_t id)
{
    for (size_t i = 0; i < p->n_instances; i++)
        if (p->instances[i].id == id)
            return &p->instances[i];
    return NULL;
}

/* Remember instance id of data source `name`; NULL if the service names a
 * data source we never registered (ignored). */
static prod__instance *add_instance(prod_producer *p, uint64_t id,
                                    const char *name)
{
    prod__instance *in = find_instance(p, id);
    if (in)
        return in;
    size_t idx = SIZE_MAX;
    pthread_mutex_lock(&p->mu);
    for (size_t i = 0; name && i < p->n_dss; i++)
        if (strcmp(p->dss[i].name, name) == 0)
            idx = i;
    pthread_mutex_unlock(&p->mu);
    if (idx == SIZE_MAX)
        return NULL;
    if (p->n_instances == p->cap_instances) {
        size_t cap = p->cap_instances ? p->cap_instances * 2 : 8;
        prod__instance *n = realloc(p->instances, cap * sizeof *n);
        if (!n)
            return NULL;
        p->instances = n;
        p->cap_instances = cap;
    }
    in = &p->instances[p->n_instances++];
    in->id = id;
    in->ds_index = idx;
    return in;
}

static void remove_instance(prod_producer *p, uint64_t id)
{
    for (size_t i = 0; i < p->n_instances; i++)
        if (p->instances[i].id == id) {
            p->instances[i] = p->instances[--p->n_instances];
            return;
        }
}

static prod_data_source ds_flags(prod_producer *p, const prod__instance *in)
{
    pthread_mutex_lock(&p->mu);
    prod_data_source d = p->dss[in->ds_index].desc;
    pthread_mutex_unlock(&p->mu);
    return d;
}

static void fill_config(prod_ds_config *c, uint64_t id,
                        const Perfetto__Protos__DataSourceConfig *dc,
                        uint8_t **raw)
{
    memset(c, 0, sizeof *c);
    c->instance_id = id;
    *raw = NULL;
    if (!dc)
        return;
    c->name = dc->name;
    c->target_buffer = dc->target_buffer;
    c->trace_duration_ms = dc->trace_duration_ms;
    c->tracing_session_id = dc->tracing_session_id;
    c->buffer_exhausted_policy = (uint32_t)dc->buffer_exhausted_policy;
    c->stop_timeout_ms = dc->stop_timeout_ms;
    if (dc->for_testing) {
        c->test_message_count = dc->for_testing->message_count;
        c->test_max_messages_per_second =
            dc->for_testing->max_messages_per_second;
        c->test_message_size = dc->for_testing->message_size;
    }
    size_t n = perfetto__protos__data_source_config__get_packed_size(dc);
    *raw = malloc(n ? n : 1);
    if (*raw) {
        perfetto__protos__data_source_config__pack(dc, *raw);
        c->raw = *raw;
        c->raw_len = n;
    }
}

/* Send RegisterDataSource for every source not yet sent on this
 * connection (loop thread). */
static void send_registrations(prod_producer *p)
{
    for (;;) {
        pthread_mutex_lock(&p->mu);
        bool more = p->n_dss_sent < p->n_dss;
        prod__ds d;
        if (more)
            d = p->dss[p->n_dss_sent]; /* names live until destroy */
        pthread_mutex_unlock(&p->mu);
        if (!more)
            return;
        register_one(p, &d);
        p->n_dss_sent++;
    }
}

/* ---- connection (loop thread) -------------------------------------- */

static void lost(prod_producer *p, int err)
{
    pthread_mutex_lock(&p->mu);
    bool was = p->connected;
    p->connected = false;
    p->gen++;
    prod__smb *old = p->cur;
    p->cur = NULL;
    prod__outmsg *m = p->q_head;
    p->q_head = p->q_tail = NULL;
    if (was)
        p->stats.disconnects++;
    pthread_mutex_unlock(&p->mu);
    while (m) {
        prod__outmsg *n = m->next;
        free(m->bytes);
        free(m);
        m = n;
    }
    if (old)
        smb_arbiter_shutdown(old->arb);
    p->n_instances = 0;
    p->initialized = false;
    const char *why = ipc_client_refusal(p->client);
    snprintf(p->refusal, sizeof p->refusal, "%s", why ? why : "");
    if (why)
        err = -ECONNREFUSED;
    ipc_client_destroy(p->client);
    p->client = NULL;
    if (p->cb.on_disconnect)
        p->cb.on_disconnect(p, err, p->ctx);
    if (p->opts.reconnect && !p->stopping && !p->reconnect_timer) {
        uint32_t d = p->opts.reconnect_delay_ms ? p->opts.reconnect_delay_ms
                                                : DEFAULT_RECONNECT_MS;
        p->reconnect_timer = ipc_loop_add_timer(p->loop, d, 0, try_connect,
                                                p);
    }
}

static void on_setup_tracing(
    prod_producer *p, const Perfetto__Protos__GetAsyncCommandResponse__SetupTracing *st)
{
    int fd = ipc_client_take_fd(p->client);
    pthread_mutex_lock(&p->mu);
    bool have = p->cur != NULL;
    uint64_t gen = p->gen;
    pthread_mutex_unlock(&p->mu);
    if (have || fd < 0) {
        /* Once per connection; without an fd there is nothing to map
         * (shm_key_windows is not for us). */
        if (fd >= 0)
            close(fd);
        return;
    }
    uint32_t kb = st->has_shared_buffer_page_size_kb
                      ? st->shared_buffer_page_size_kb : 0;
    if (kb > SMB_MAX_PAGE_SIZE / 1024u)
        kb = 1; /* hostile: refused below as an invalid page size */
    uint32_t page = kb ? kb * 1024u : SMB_DEFAULT_PAGE_SIZE;
    prod__smb *s = calloc(1, sizeof *s);
    if (!s) {
        close(fd);
        return;
    }
    s->p = p;
    s->gen = gen;
    smb_transport t;
    prod__make_transport(s, &t);
    smb_arbiter_options o;
    memset(&o, 0, sizeof o);
    /* Batches: one CommitData per PROD_BATCH_SMB_DIVISOR-th of the SMB
     * (at least a page, at most PROD_BATCH_MAX bytes), patches included:
     * a packet straddling a chunk boundary no longer forces a send of its
     * own (under load that was one IPC per chunk, the largest cost of a
     * 1 KiB packet on both sides). At most that many bytes of returned
     * chunks wait unsent, until the batch fills, a flush or a stall:
     * nothing waits forever, service flushes send it; the service applies
     * a batch's chunks before its patches. */
    uint32_t batch = (uint32_t)(fd_size(fd) / PROD_BATCH_SMB_DIVISOR);
    if (batch > PROD_BATCH_MAX)
        batch = PROD_BATCH_MAX;
    if (batch < page)
        batch = page;
    o.batch_bytes = batch;
    o.batch_patches = 1;
    s->arb = smb_arbiter_create_from_fd(fd, page, &t, &o);
    int e = errno;
    close(fd);
    if (!s->arb) {
        free(s);
        /* A service handing us an unusable SMB: we cannot trace on this
         * connection. Drop it (and retry later if asked to). */
        lost(p, -e);
        return;
    }
    pthread_mutex_lock(&p->mu);
    s->next = p->smbs;
    p->smbs = s;
    p->cur = s;
    pthread_mutex_unlock(&p->mu);
}

static void on_command(ipc_client *c, int status, const ProtobufCMessage *msg,
                       bool has_more, void *ctx);
static void send_registrations(prod_producer *p);

static void request_commands(prod_producer *p)
{
    Perfetto__Protos__GetAsyncCommandRequest r =
        PERFETTO__PROTOS__GET_ASYNC_COMMAND_REQUEST__INIT;
    if (ipc_client_invoke(p->client, "GetAsyncCommand", &r.base, -1,
                          &perfetto__protos__get_async_command_response__descriptor,
                          on_command, p) < 0)
        lost(p, -EPROTO);
}

static void on_command(ipc_client *c, int status, const ProtobufCMessage *msg,
                       bool has_more, void *ctx)
{
    (void)c;
    prod_producer *p = ctx;
    if (status == -ECONNRESET)
        return; /* the disconnect callback handles it */
    if (status < 0) {
        lost(p, status); /* no command stream: useless connection */
        return;
    }
    pthread_mutex_lock(&p->mu);
    p->stats.commands++;
    pthread_mutex_unlock(&p->mu);
    const Perfetto__Protos__GetAsyncCommandResponse *r =
        (const Perfetto__Protos__GetAsyncCommandResponse *)msg;
    prod_ds_config cfg;
    uint8_t *raw = NULL;
    switch (r->cmd_case) {
    case PERFETTO__PROTOS__GET_ASYNC_COMMAND_RESPONSE__CMD_SETUP_TRACING:
        on_setup_tracing(p, r->setup_tracing);
        if (!p->client)
            return; /* dropped */
        break;
    case PERFETTO__PROTOS__GET_ASYNC_COMMAND_RESPONSE__CMD_SETUP_DATA_SOURCE: {
        const Perfetto__Protos__GetAsyncCommandResponse__SetupDataSource *s =
            r->setup_data_source;
        if (!add_instance(p, s->new_instance_id,
                          s->config ? s->config->name : NULL))
            break;
        fill_config(&cfg, s->new_instance_id, s->config, &raw);
        if (p->cb.on_setup)
            p->cb.on_setup(p, &cfg, p->ctx);
        break;
    }
    case PERFETTO__PROTOS__GET_ASYNC_COMMAND_RESPONSE__CMD_START_DATA_SOURCE: {
        const Perfetto__Protos__GetAsyncCommandResponse__StartDataSource *s =
            r->start_data_source;
        prod__instance *in = add_instance(p, s->new_instance_id,
                                          s->config ? s->config->name : NULL);
        if (!in)
            break;
        prod_data_source d = ds_flags(p, in);
        fill_config(&cfg, s->new_instance_id, s->config, &raw);
        if (p->cb.on_start)
            p->cb.on_start(p, &cfg, p->ctx);
        else if (d.will_notify_on_start)
            prod_notify_started(p, s->new_instance_id);
        break;
    }
    case PERFETTO__PROTOS__GET_ASYNC_COMMAND_RESPONSE__CMD_STOP_DATA_SOURCE: {
        uint64_t id = r->stop_data_source->instance_id;
        prod__instance *in = find_instance(p, id);
        if (!in)
            break;
        prod_data_source d = ds_flags(p, in);
        remove_instance(p, id);
        if (p->cb.on_stop)
            p->cb.on_stop(p, id, p->ctx);
        else if (d.will_notify_on_stop)
            prod_notify_stopped(p, id);
        break;
    }
    case PERFETTO__PROTOS__GET_ASYNC_COMMAND_RESPONSE__CMD_FLUSH: {
        const Perfetto__Protos__GetAsyncCommandResponse__Flush *f = r->flush;
        if (p->cb.on_flush)
            p->cb.on_flush(p, f->data_source_ids, f->n_data_source_ids,
                           f->request_id, f->flags, p->ctx);
        else
            prod_flush_done(p, f->request_id);
        break;
    }
    case PERFETTO__PROTOS__GET_ASYNC_COMMAND_RESPONSE__CMD_CLEAR_INCREMENTAL_STATE: {
        const Perfetto__Protos__GetAsyncCommandResponse__ClearIncrementalState
            *ci = r->clear_incremental_state;
        if (p->cb.on_clear_incremental_state)
            p->cb.on_clear_incremental_state(p, ci->data_source_ids,
                                             ci->n_data_source_ids, p->ctx);
        break;
    }
    default:
        break; /* unknown command: ignore (newer service) */
    }
    free(raw);
    if (!has_more && p->client)
        request_commands(p);
}

static void on_init_reply(ipc_client *c, int status,
                          const ProtobufCMessage *msg, bool has_more,
                          void *ctx)
{
    (void)c; (void)msg; (void)has_more;
    prod_producer *p = ctx;
    if (status == -ECONNRESET)
        return; /* the disconnect callback handles it */
    if (status < 0) {
        lost(p, status); /* the service refused us */
        return;
    }
    /* Like Perfetto's client: the producer is "connected" (registers its
     * data sources) once InitializeConnection succeeded. */
    p->initialized = true;
    p->n_dss_sent = 0;
    send_registrations(p);
    if (p->cb.on_connect)
        p->cb.on_connect(p, p->ctx);
}

static void on_bound(ipc_client *c, bool ok, void *ctx)
{
    prod_producer *p = ctx;
    if (!ok) {
        lost(p, -EPROTONOSUPPORT);
        return;
    }
    pthread_mutex_lock(&p->mu);
    p->connected = true;
    p->gen++;
    p->stats.connects++;
    pthread_mutex_unlock(&p->mu);
    Perfetto__Protos__InitializeConnectionRequest ir =
        PERFETTO__PROTOS__INITIALIZE_CONNECTION_REQUEST__INIT;
    ir.producer_name = p->producer_name;
    if (p->opts.smb_size_hint_bytes) {
        ir.has_shared_memory_size_hint_bytes = true;
        ir.shared_memory_size_hint_bytes = p->opts.smb_size_hint_bytes;
    }
    if (p->opts.smb_page_size_hint_bytes) {
        ir.has_shared_memory_page_size_hint_bytes = true;
        ir.shared_memory_page_size_hint_bytes =
            p->opts.smb_page_size_hint_bytes;
    }
    ir.sdk_version = (char *)"shmtrace " PACKAGE_VERSION;
    if (ipc_client_invoke(c, "InitializeConnection", &ir.base, -1,
                          &perfetto__protos__initialize_connection_response__descriptor,
                          on_init_reply, p) < 0) {
        lost(p, -EPROTO);
        return;
    }
    request_commands(p);
}

static void on_disc(ipc_client *c, int err, void *ctx)
{
    (void)c;
    lost(ctx, err ? err : -ECONNRESET);
}

static const ipc_client_cbs client_cbs = { on_bound, on_disc };

/* Returns 0 or the connect error. */
static int connect_now(prod_producer *p)
{
    int err = 0;
    p->client = ipc_client_connect(p->loop, p->path, IPC_PRODUCER_PORT,
                                   &client_cbs, p, &err);
    return p->client ? 0 : err;
}

static void try_connect(void *ctx)
{
    prod_producer *p = ctx;
    p->reconnect_timer = 0;
    if (p->stopping || p->client)
        return;
    /* A default name depends on which daemons run now (ipc_sock_path). */
    if (!p->path_explicit)
        ipc_sock_path(IPC_SOCK_PRODUCER, NULL, p->path, sizeof p->path);
    int rc = connect_now(p);
    if (rc < 0)
        lost(p, rc); /* reports and re-arms the timer */
}

static void *thread_main(void *arg)
{
    prod_producer *p = arg;
    ipc_loop_run(p->loop);
    return NULL;
}

/* ---- public API ---------------------------------------------------- */

prod_producer *prod_create(const prod_options *opts, const prod_callbacks *cb,
                           void *ctx)
{
    prod_producer *p = calloc(1, sizeof *p);
    if (!p)
        return NULL;
    if (opts)
        p->opts = *opts;
    if (cb)
        p->cb = *cb;
    p->ctx = ctx;
    pthread_mutex_init(&p->mu, NULL);
    p->path_explicit = p->opts.socket_path && *p->opts.socket_path;
    int rc = ipc_sock_path(IPC_SOCK_PRODUCER, p->opts.socket_path, p->path,
                           sizeof p->path);
    p->producer_name = strdup(p->opts.producer_name ? p->opts.producer_name
                                                    : "shmtrace-producer");
    p->opts.socket_path = NULL;
    p->opts.producer_name = NULL;
    if (rc == 0 && !p->producer_name)
        rc = -ENOMEM;
    if (rc == 0 && !(p->loop = ipc_loop_create()))
        rc = errno ? -errno : -ENOMEM;     /* calloc or pipe() failed */
    if (rc < 0)
        goto fail;
    rc = connect_now(p);
    if (rc < 0) {
        if (!p->opts.reconnect)
            goto fail;
        uint32_t d = p->opts.reconnect_delay_ms ? p->opts.reconnect_delay_ms
                                                : DEFAULT_RECONNECT_MS;
        p->reconnect_timer = ipc_loop_add_timer(p->loop, d, 0, try_connect,
                                                p);
    }
    rc = -pthread_create(&p->thread, NULL, thread_main, p);
    if (rc < 0)
        goto fail;
    p->thread_started = true;
    return p;
fail:
    ipc_client_destroy(p->client);
    ipc_loop_destroy(p->loop);
    free(p->producer_name);
    pthread_mutex_destroy(&p->mu);
    free(p);
    errno = -rc;
    return NULL;
}

static void stop_task(void *ctx)
{
    prod_producer *p = ctx;
    p->stopping = true;
    if (p->reconnect_timer)
        ipc_loop_cancel_timer(p->loop, p->reconnect_timer);
    p->reconnect_timer = 0;
    ipc_client_destroy(p->client);
    p->client = NULL;
    ipc_loop_quit(p->loop);
}

void prod_destroy(prod_producer *p)
{
    if (!p)
        return;
    if (p->thread_started) {
        /* Flush what writers already queued before stopping. */
        if (ipc_loop_post_threadsafe(p->loop, drain, p) < 0 ||
            ipc_loop_post_threadsafe(p->loop, stop_task, p) < 0)
            ipc_loop_quit(p->loop);
        pthread_join(p->thread, NULL);
    }
    ipc_client_destroy(p->client);
    ipc_loop_destroy(p->loop);
    prod__smb *s = p->smbs;
    while (s) {
        prod__smb *n = s->next;
        smb_arbiter_destroy(s->arb);
        free(s);
        s = n;
    }
    prod__outmsg *m = p->q_head;
    while (m) {
        prod__outmsg *n = m->next;
        free(m->bytes);
        free(m);
        m = n;
    }
    for (size_t i = 0; i < p->n_dss; i++)
        free(p->dss[i].name);
    free(p->dss);
    free(p->instances);
    free(p->producer_name);
    pthread_mutex_destroy(&p->mu);
    free(p);
}

static void register_task(void *ctx)
{
    prod_producer *p = ctx;
    if (p->initialized)
        send_registrations(p); /* else on_init_reply sends them all */
}

int prod_register_data_source(prod_producer *p, const prod_data_source *ds)
{
    if (!ds || !ds->name || !*ds->name)
        return -EINVAL;
    pthread_mutex_lock(&p->mu);
    int rc = 0;
    for (size_t i = 0; i < p->n_dss; i++)
        if (strcmp(p->dss[i].name, ds->name) == 0)
            rc = -EEXIST;
    if (rc == 0 && p->n_dss == MAX_DATA_SOURCES)
        rc = -ENOSPC;
    prod__ds *n = NULL;
    if (rc == 0) {
        n = realloc(p->dss, (p->n_dss + 1) * sizeof *n);
        if (!n)
            rc = -ENOMEM;
    }
    if (rc == 0) {
        p->dss = n;
        p->dss[p->n_dss].desc = *ds;
        p->dss[p->n_dss].name = strdup(ds->name);
        if (!p->dss[p->n_dss].name)
            rc = -ENOMEM;
        else
            p->dss[p->n_dss++].desc.name = NULL;
    }
    pthread_mutex_unlock(&p->mu);
    if (rc == 0)
        rc = ipc_loop_post_threadsafe(p->loop, register_task, p);
    return rc;
}

tw_writer *prod_create_writer(prod_producer *p, uint32_t target_buffer,
                              tw_policy policy)
{
    pthread_mutex_lock(&p->mu);
    smb_arbiter *arb = p->cur ? p->cur->arb : (p->smbs ? p->smbs->arb : NULL);
    pthread_mutex_unlock(&p->mu);
    if (!arb) {
        /* No SMB has ever been set up: nothing to write into. */
        errno = ENOTCONN;
        return NULL;
    }
    /* A shut-down (orphaned) arbiter hands out null writers. */
    return tw_writer_create(arb, target_buffer ? target_buffer : 1, policy);
}

static int notify(prod_producer *p, const char *method, uint64_t id)
{
    Perfetto__Protos__NotifyDataSourceStartedRequest r =
        PERFETTO__PROTOS__NOTIFY_DATA_SOURCE_STARTED_REQUEST__INIT;
    r.has_data_source_id = true;
    r.data_source_id = id;
    /* Started and Stopped requests have the same single field 1. */
    return send_msg(p, method, &r.base);
}

int prod_notify_started(prod_producer *p, uint64_t instance_id)
{
    return notify(p, "NotifyDataSourceStarted", instance_id);
}

int prod_notify_stopped(prod_producer *p, uint64_t instance_id)
{
    return notify(p, "NotifyDataSourceStopped", instance_id);
}

int prod_flush_done(prod_producer *p, uint64_t flush_id)
{
    pthread_mutex_lock(&p->mu);
    smb_arbiter *arb = p->cur ? p->cur->arb : NULL;
    pthread_mutex_unlock(&p->mu);
    if (arb)
        return smb_arbiter_flush(arb, flush_id);
    /* No SMB yet: a bare ack. */
    Perfetto__Protos__CommitDataRequest r =
        PERFETTO__PROTOS__COMMIT_DATA_REQUEST__INIT;
    r.has_flush_request_id = true;
    r.flush_request_id = flush_id;
    pthread_mutex_lock(&p->mu);
    p->stats.flush_acks++;
    pthread_mutex_unlock(&p->mu);
    return send_msg(p, "CommitData", &r.base);
}

const char *prod_refusal(prod_producer *p)
{
    return p && p->refusal[0] ? p->refusal : NULL;
}

int prod_is_connected(prod_producer *p)
{
    pthread_mutex_lock(&p->mu);
    int c = p->connected;
    pthread_mutex_unlock(&p->mu);
    return c;
}

void prod_get_stats(prod_producer *p, prod_stats *out)
{
    pthread_mutex_lock(&p->mu);
    *out = p->stats;
    pthread_mutex_unlock(&p->mu);
}
