/*
 * consumer_ext.c - Detach/Attach, QueryServiceState, ObserveEvents,
 * CloneSession with trigger info, and ActivateTriggers for the `shmtrace`
 * CLI (see consumer_ext.h).
 *
 * QueryServiceState is a stream: each reply carries a piece of the
 * TracingServiceState; the pieces are concatenated in wire form and
 * decoded once (protobuf merge: repeated fields append), as Perfetto's
 * client does. ObserveEvents stays open: each reply is an event, queued
 * in the client for cons_take_clone_hit.
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "consumer_ext.h"
#include "consumer_int.h"

void cons_clone_hit_free(cons_clone_hit *h)
{
    if (!h)
        return;
    free(h->name);
    free(h->producer);
    h->name = h->producer = NULL;
}

void cons__ext_free(cons_client *c)
{
    for (size_t i = 0; i < c->nhits; i++)
        cons_clone_hit_free(&c->hits[i]);
    free(c->hits);
    c->hits = NULL;
    c->nhits = 0;
}

int cons_detach(cons_client *c, const char *key)
{
    Perfetto__Protos__DetachRequest r = PERFETTO__PROTOS__DETACH_REQUEST__INIT;
    r.key = (char *)key;
    call k = { 0 };
    return cons__invoke_sync(c, "Detach", &r.base, -1, NULL, &k);
}

int cons_attach(cons_client *c, const char *key,
                Perfetto__Protos__TraceConfig **cfg_out)
{
    Perfetto__Protos__AttachRequest r = PERFETTO__PROTOS__ATTACH_REQUEST__INIT;
    r.key = (char *)key;
    call k = { 0 };
    k.keep_reply = true;
    int rc = cons__invoke_sync(c, "Attach", &r.base, -1,
                               &perfetto__protos__attach_response__descriptor,
                               &k);
    Perfetto__Protos__AttachResponse *rep = (void *)k.reply;
    if (rc == 0 && cfg_out) {
        *cfg_out = rep ? rep->trace_config : NULL;
        if (rep)
            rep->trace_config = NULL;      /* handed over */
    }
    protobuf_c_message_free_unpacked(k.reply, NULL);
    if (rc < 0)
        return rc;
    /* The end-of-session notification, as Perfetto's client asks for it. */
    Perfetto__Protos__EnableTracingRequest e =
        PERFETTO__PROTOS__ENABLE_TRACING_REQUEST__INIT;
    e.has_attach_notification_only = true;
    e.attach_notification_only = true;
    int64_t rid = ipc_client_invoke(
        c->ipc, "EnableTracing", &e.base, -1,
        &perfetto__protos__enable_tracing_response__descriptor,
        cons__on_enable_reply, c);
    if (rid < 0)
        return (int)rid;
    c->enable_sent = true;
    c->ended = false;
    return 0;
}

/* ---------------------------------------------------------------- query */

typedef struct {
    bool done;
    int status;
    uint8_t *buf;
    size_t len;
} qcall;

static void on_query(ipc_client *ic, int status, const ProtobufCMessage *msg,
                     bool has_more, void *ctx)
{
    (void)ic;
    qcall *q = ctx;
    if (status == 0 && msg) {
        const Perfetto__Protos__QueryServiceStateResponse *r =
            (const void *)msg;
        if (r->service_state) {
            size_t n = perfetto__protos__tracing_service_state__get_packed_size(
                r->service_state);
            uint8_t *g = realloc(q->buf, q->len + n + 1);
            if (!g) {
                q->status = -ENOMEM;
            } else {
                q->buf = g;
                perfetto__protos__tracing_service_state__pack(
                    r->service_state, q->buf + q->len);
                q->len += n;
            }
        }
    }
    if (status < 0)
        q->status = status == -ECONNRESET ? -ENOTCONN : status;
    if (!has_more || status < 0)
        q->done = true;
}

int cons_query(cons_client *c, bool sessions_only,
               Perfetto__Protos__TracingServiceState **out)
{
    *out = NULL;
    if (c->disconnected)
        return -ENOTCONN;
    Perfetto__Protos__QueryServiceStateRequest r =
        PERFETTO__PROTOS__QUERY_SERVICE_STATE_REQUEST__INIT;
    if (sessions_only) {
        r.has_sessions_only = true;
        r.sessions_only = true;
    }
    qcall q = { 0 };
    int64_t rid = ipc_client_invoke(
        c->ipc, "QueryServiceState", &r.base, -1,
        &perfetto__protos__query_service_state_response__descriptor,
        on_query, &q);
    if (rid < 0)
        return (int)rid;
    int rc = cons__wait_flag(c, &q.done);
    if (rc == -ETIMEDOUT) {
        ipc_client_destroy(c->ipc);    /* the callback points at q */
        c->ipc = NULL;
        c->disconnected = true;
    }
    if (rc == 0)
        rc = q.status;
    if (rc == 0) {
        *out = perfetto__protos__tracing_service_state__unpack(NULL, q.len,
                                                               q.buf);
        if (!*out)
            rc = -EBADMSG;
    }
    free(q.buf);
    return rc;
}

/* ---------------------------------------------------------------- events */

static void on_event(ipc_client *ic, int status, const ProtobufCMessage *msg,
                     bool has_more, void *ctx)
{
    (void)ic;
    cons_client *c = ctx;
    if (status < 0 || !msg) {
        c->observing = false;
        return;
    }
    const Perfetto__Protos__ObserveEventsResponse *r = (const void *)msg;
    const Perfetto__Protos__ObservableEvents *ev = r->events;
    if (!has_more)
        c->observing = false;
    if (!ev)
        return;
    if (ev->has_all_data_sources_started && ev->all_data_sources_started)
        c->all_started = true;
    const Perfetto__Protos__ObservableEvents__CloneTriggerHit *h =
        ev->clone_trigger_hit;
    if (!h)
        return;
    cons_clone_hit *g = realloc(c->hits, (c->nhits + 1) * sizeof(*g));
    if (!g)
        return;
    c->hits = g;
    cons_clone_hit *n = &g[c->nhits];
    memset(n, 0, sizeof(*n));
    n->tsid = (uint64_t)h->tracing_session_id;
    n->name = strdup(h->trigger_name ? h->trigger_name : "");
    n->producer = strdup(h->producer_name ? h->producer_name : "");
    n->producer_uid = h->producer_uid;
    n->boot_time_ns = h->boot_time_ns;
    n->delay_ms = h->trigger_delay_ms;
    if (!n->name || !n->producer) {
        cons_clone_hit_free(n);
        return;
    }
    c->nhits++;
}

int cons_observe(cons_client *c)
{
    if (c->disconnected)
        return -ENOTCONN;
    Perfetto__Protos__ObserveEventsRequest r =
        PERFETTO__PROTOS__OBSERVE_EVENTS_REQUEST__INIT;
    Perfetto__Protos__ObservableEvents__Type types[] = {
        PERFETTO__PROTOS__OBSERVABLE_EVENTS__TYPE__TYPE_CLONE_TRIGGER_HIT,
    };
    r.n_events_to_observe = 1;
    r.events_to_observe = types;
    int64_t rid = ipc_client_invoke(
        c->ipc, "ObserveEvents", &r.base, -1,
        &perfetto__protos__observe_events_response__descriptor, on_event, c);
    if (rid < 0)
        return (int)rid;
    c->observing = true;
    return 0;
}

bool cons_take_clone_hit(cons_client *c, cons_clone_hit *out)
{
    if (!c->nhits)
        return false;
    *out = c->hits[0];
    memmove(c->hits, c->hits + 1, (c->nhits - 1) * sizeof(*c->hits));
    c->nhits--;
    return true;
}

/* ---------------------------------------------------------------- clone */

int cons_clone_ex(cons_client *c, uint64_t session_id, const char *name,
                  const cons_clone_hit *trigger, int fd, bool *was_file,
                  char *err, size_t err_len)
{
    Perfetto__Protos__CloneSessionRequest r =
        PERFETTO__PROTOS__CLONE_SESSION_REQUEST__INIT;
    if (name) {
        r.selector_case =
            PERFETTO__PROTOS__CLONE_SESSION_REQUEST__SELECTOR_UNIQUE_SESSION_NAME;
        r.unique_session_name = (char *)name;
    } else {
        r.selector_case =
            PERFETTO__PROTOS__CLONE_SESSION_REQUEST__SELECTOR_SESSION_ID;
        r.session_id = session_id;
    }
    if (trigger) {
        r.clone_trigger_name = trigger->name;
        r.clone_trigger_producer_name = trigger->producer;
        r.has_clone_trigger_trusted_producer_uid = true;
        r.clone_trigger_trusted_producer_uid = (int32_t)trigger->producer_uid;
        r.has_clone_trigger_boot_time_ns = true;
        r.clone_trigger_boot_time_ns = trigger->boot_time_ns;
        r.has_clone_trigger_delay_ms = true;
        r.clone_trigger_delay_ms = trigger->delay_ms;
    }
    call k = { 0 };
    k.keep_reply = true;
    if (err_len)
        err[0] = 0;
    int rc = cons__invoke_sync(c, "CloneSession", &r.base, fd,
                         &perfetto__protos__clone_session_response__descriptor,
                         &k);
    Perfetto__Protos__CloneSessionResponse *rep = (void *)k.reply;
    if (rc == 0 && (!rep || !rep->success)) {
        rc = -EPROTO;
        snprintf(err, err_len, "%s",
                 rep && rep->error ? rep->error : "clone refused");
    }
    if (was_file)
        *was_file = rc == 0 && rep && rep->was_write_into_file;
    protobuf_c_message_free_unpacked(k.reply, NULL);
    return rc;
}

/* ---------------------------------------------------------------- trigger */

typedef struct {
    bool bound_done, bound_ok, disc;
    bool init_done, trig_done;
    int init_status, trig_status;
    char refused_why[256];   /* the service's reason, if it refused us */
} tstate;

static void t_bound(ipc_client *ic, bool ok, void *ctx)
{
    tstate *t = ctx;
    t->bound_done = true;
    t->bound_ok = ok;
}

static void t_disc(ipc_client *ic, int err, void *ctx)
{
    (void)err;
    tstate *t = ctx;
    const char *why = ipc_client_refusal(ic);
    if (why && !t->bound_done)
        snprintf(t->refused_why, sizeof t->refused_why, "%s", why);
    t->disc = true;
    t->bound_done = true;
}

static void t_init(ipc_client *ic, int status, const ProtobufCMessage *m,
                   bool more, void *ctx)
{
    tstate *t = ctx;
    t->init_status = status;
    t->init_done = true;
}

static void t_trig(ipc_client *ic, int status, const ProtobufCMessage *m,
                   bool more, void *ctx)
{
    tstate *t = ctx;
    t->trig_status = status;
    t->trig_done = true;
}

static int t_wait(ipc_loop *loop, tstate *t, const bool *flag)
{
    uint64_t deadline = ipc_now_ms() + CONS_REPLY_TIMEOUT_MS;
    while (!*flag) {
        if (t->disc)
            return -ENOTCONN;
        uint64_t now = ipc_now_ms();
        if (now >= deadline)
            return -ETIMEDOUT;
        ipc_loop_run_once(loop, (int)(deadline - now));
    }
    return 0;
}

int cons_activate_triggers(const char *producer_socket,
                           const char *producer_name,
                           const char *const *names, size_t n,
                           bool *unreachable, char *err, size_t err_len)
{
    char path[108];
    if (unreachable)
        *unreachable = false;
    if (err_len)
        err[0] = 0;
    int rc = ipc_sock_path(IPC_SOCK_PRODUCER, producer_socket, path,
                           sizeof(path));
    if (rc < 0) {
        snprintf(err, err_len, "no usable producer socket name: %s",
                 strerror(-rc));
        return rc;
    }
    ipc_loop *loop = ipc_loop_create();
    if (!loop) {             /* calloc or pipe() failed; errno says */
        rc = errno ? -errno : -ENOMEM;
        cons_describe_connect_failure(path, rc, NULL, err, err_len);
        return rc;
    }
    static const ipc_client_cbs cbs = { t_bound, t_disc };
    tstate t = { 0 };
    ipc_client *ic = ipc_client_connect(loop, path, IPC_PRODUCER_PORT, &cbs,
                                        &t, &rc);
    if (!ic) {
        cons_describe_connect_failure(path, rc, NULL, err, err_len);
        if (unreachable)
            *unreachable = !cons_connect_failure_is_local(rc);
        ipc_loop_destroy(loop);
        return rc;
    }
    rc = t_wait(loop, &t, &t.bound_done);
    if (t.refused_why[0]) {   /* too many connections of ours, say */
        rc = -ECONNREFUSED;
        cons_describe_connect_failure(path, rc, t.refused_why, err, err_len);
        if (unreachable)
            *unreachable = true;
    }
    if (rc == 0 && !t.bound_ok)
        rc = -EPROTONOSUPPORT;
    if (rc == 0) {
        Perfetto__Protos__InitializeConnectionRequest ir =
            PERFETTO__PROTOS__INITIALIZE_CONNECTION_REQUEST__INIT;
        ir.producer_name = (char *)producer_name;
        ir.sdk_version = "shmtrace " PACKAGE_VERSION;
        int64_t id = ipc_client_invoke(ic, "InitializeConnection", &ir.base,
                                       -1, NULL, t_init, &t);
        rc = id < 0 ? (int)id : t_wait(loop, &t, &t.init_done);
        if (rc == 0)
            rc = t.init_status;
    }
    if (rc == 0) {
        Perfetto__Protos__ActivateTriggersRequest ar =
            PERFETTO__PROTOS__ACTIVATE_TRIGGERS_REQUEST__INIT;
        ar.n_trigger_names = n;
        ar.trigger_names = (char **)names;
        int64_t id = ipc_client_invoke(ic, "ActivateTriggers", &ar.base, -1,
                                       NULL, t_trig, &t);
        rc = id < 0 ? (int)id : t_wait(loop, &t, &t.trig_done);
        if (rc == 0)
            rc = t.trig_status;
    }
    if (rc < 0 && err_len && !err[0])
        snprintf(err, err_len, "the tracing service at %s did not take the "
                 "triggers: %s", path, strerror(-rc));
    ipc_client_destroy(ic);
    ipc_loop_destroy(loop);
    return rc;
}
