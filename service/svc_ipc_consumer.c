/*
 * svc_ipc_consumer.c - shmtraced's ConsumerPort: EnableTracing (reply sent
 * when the session ends), Disable/Start/Flush/Free, GetTraceStats,
 * CloneSession, and the ReadBuffers pump.
 *
 * Users: a session belongs to the uid of the consumer that enabled or
 * cloned it (ipc_conn_uid, SO_PEERCRED); the core confines clones and
 * stats to what that uid may access. A connection only ever reads, flushes,
 * stops or frees its own session.
 *
 * ReadBuffers pump: packets are read in rounds of about SVC_READ_ROUND
 * bytes and packed into ReadBuffersResponse replies of at most
 * SVC_REPLY_BYTES (packets larger than that are split into slices, the last
 * one marked last_slice_for_packet). While the socket's transmit queue
 * holds more than SVC_TX_HIGH bytes the pump waits on a 1 ms timer, so the
 * daemon's memory stays bounded whatever the buffer size.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "svc_ipc_int.h"
#include "svc_log.h"

/* ================================================================ consumer */

svc_cconn *svc__cconn_get(svc_daemon *d, ipc_call *call)
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
    cc->clone_fd = -1;
    ipc_conn_set_data(conn, cc);
    return cc;
}

#define cconn_get svc__cconn_get

void svc__send_disabled(svc_cconn *cc, const char *error)
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

void svc__op_session_disabled(void *ctx, void *consumer, svc_session *s,
                                const char *error)
{
    svc_cconn *cc = consumer;
    if (cc)
        svc__send_disabled(cc, error);
}

void svc__op_flush_done(void *ctx, void *consumer, uint64_t token, bool ok)
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
            svc__reply_empty(call);
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
    if (cc && req->has_attach_notification_only &&
        req->attach_notification_only) {
        /* After Attach: the end-of-session notification only. */
        if (fd >= 0)
            close(fd);
        svc__attach_notification(cc, call);
        return;
    }
    if (!cc || cc->s || d->shutting_down) {
        if (fd >= 0)
            close(fd);
        ipc_call_fail(call);
        return;
    }
    char err[512] = "";
    cc->enable_call = call;
    /* The session belongs to the consumer's uid (SO_PEERCRED). */
    cc->s = svc_session_enable_uid(d->svc, cc, ipc_conn_uid(cc->conn),
                                   req->trace_config, fd, err, sizeof(err));
    if (!cc->s) {
        /* err quotes the consumer's config (names): escaped, one line */
        char logged[SVC_LOG_STR_BYTES(sizeof(err))];
        fprintf(stderr, "shmtraced: EnableTracing refused (consumer uid "
                "%ld pid %ld): %s\n", (long)ipc_conn_uid(cc->conn),
                (long)ipc_conn_pid(cc->conn),
                svc_log_str(logged, sizeof logged, err, sizeof(err)));
        svc__send_disabled(cc, err[0] ? err : "EnableTracing failed");
    } else {
        fprintf(stderr, "shmtraced: session %llu started (consumer uid %ld "
                "pid %ld)\n", (unsigned long long)svc_session_id(cc->s),
                (long)ipc_conn_uid(cc->conn), (long)ipc_conn_pid(cc->conn));
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
    svc__reply_empty(call);
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

void svc__read_finish(svc_cconn *cc, bool ok)
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
        svc__read_finish(cc, false);
        return;
    }
    while (ipc_conn_tx_queued_bytes(cc->conn) < SVC_TX_HIGH) {
        bool more = false;
        int rc = svc_session_read(cc->d->svc, cc->s, SVC_READ_ROUND,
                                  batch_emit, cc, &more);
        if (rc < 0) {
            svc__read_finish(cc, false);
            return;
        }
        if (!more) {
            svc__read_finish(cc, true);
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
            svc__read_finish(cc, false);
        svc__send_disabled(cc, NULL);
        for (size_t i = 0; i < cc->nflushes; i++)
            ipc_call_fail(cc->flushes[i].call);
        cc->nflushes = 0;
        svc_session_free(d->svc, cc->s);
        cc->s = NULL;
    }
    svc__reply_empty(call);
}

static void c_flush(ipc_call *call, const ProtobufCMessage *args, void *vd)
{
    svc_daemon *d = vd;
    svc_cconn *cc = cconn_get(d, call);
    const Perfetto__Protos__FlushRequest *req = (const void *)args;
    if (!cc || !cc->s || svc_session_is_disabled(cc->s)) {
        /* Nothing to flush: a disabled session is already flushed. */
        if (cc && cc->s)
            svc__reply_empty(call);
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
        svc__op_flush_done(d, cc, token, false);
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
        svc__reply_empty(call);
}

/* The final reply to call, or, if it cannot be sent (a reply larger than
 * one frame: -EMSGSIZE, no memory), success = false: the consumer learns
 * that the call failed instead of waiting forever, and the call is freed
 * either way (ipc_call_reply keeps it open when nothing was sent). */
static void reply_or_fail(ipc_call *call, const ProtobufCMessage *reply)
{
    int rc = ipc_call_reply(call, reply, false);
    if (rc < 0) {
        fprintf(stderr, "shmtraced: a %s reply of %zu bytes could not be "
                "sent (%s); the consumer is told the call failed\n",
                reply->descriptor->short_name,
                protobuf_c_message_get_packed_size(reply), strerror(-rc));
        ipc_call_fail(call);
    }
}

static void c_stats(ipc_call *call, const ProtobufCMessage *args, void *vd)
{
    svc_daemon *d = vd;
    svc_cconn *cc = cconn_get(d, call);
    /* Only what this consumer's uid may see (svc_stats_build_for). */
    Perfetto__Protos__TraceStats *st = cc ?
        svc_stats_build_for(d->svc, cc->s, ipc_conn_uid(cc->conn)) : NULL;
    if (st && cc->s && svc_stats_add_file(st, cc->s) < 0) {
        svc_stats_free(st);
        st = NULL;
    }
    if (!st) {
        ipc_call_fail(call);
        return;
    }
    Perfetto__Protos__GetTraceStatsResponse r =
        PERFETTO__PROTOS__GET_TRACE_STATS_RESPONSE__INIT;
    r.trace_stats = st;
    reply_or_fail(call, &r.base);
    svc_stats_free(st);
}

/* CloneSession, in two steps, as Perfetto does: the source's producers
 * flush first (svc_session_flush_for_clone), then the clone is made, on a
 * zero-delay timer after the flush has ended (acked or timed out), so that
 * it holds what they wrote until the request and not only what they had
 * committed: a chunk cut inside a packet waits for the patches that come
 * with its commit, and until then the reader stops that writer's sequence
 * there. One clone at a time per connection; the request is kept (a copy)
 * with its fd while the flush runs, and dropped if the consumer goes. */
static void clone_reply_error(ipc_call *call, const char *error)
{
    Perfetto__Protos__CloneSessionResponse r =
        PERFETTO__PROTOS__CLONE_SESSION_RESPONSE__INIT;
    r.has_success = true;
    r.success = false;
    r.error = (char *)error;
    reply_or_fail(call, &r.base);
}

static void clone_now(svc_daemon *d, svc_cconn *cc, ipc_call *call, int fd,
                      const Perfetto__Protos__CloneSessionRequest *req,
                      uint64_t id, const char *name)
{
    Perfetto__Protos__CloneSessionResponse r =
        PERFETTO__PROTOS__CLONE_SESSION_RESPONSE__INIT;
    char err[256] = "";
    cc->s = svc_session_clone_uid(d->svc, cc, ipc_conn_uid(cc->conn), id,
                                  name, err, sizeof(err));
    r.has_success = true;
    r.success = cc->s != NULL;
    if (!cc->s) {
        r.error = err;
    } else {
        svc__clone_extras(cc, req);
        /* A write_into_file source: the clone goes into the fd (its file
         * so far, then the clone's buffers), as Perfetto does. */
        int wf = svc_session_clone_file(d->svc, cc->s, fd, err, sizeof(err));
        fd = -1;
        if (wf < 0) {
            svc_session_free(d->svc, cc->s);
            cc->s = NULL;
            r.success = false;
            r.error = err;
        } else if (wf > 0) {
            r.has_was_write_into_file = true;
            r.was_write_into_file = true;
        }
    }
    if (fd >= 0)
        close(fd);
    if (cc->s) {
        r.has_uuid_msb = r.has_uuid_lsb = true;
        svc_session_uuid(cc->s, &r.uuid_msb, &r.uuid_lsb);
    }
    reply_or_fail(call, &r.base);
}

/* The unique_session_name a CloneSession names, or NULL. */
static const char *clone_name(const Perfetto__Protos__CloneSessionRequest *r)
{
    return r->selector_case ==
        PERFETTO__PROTOS__CLONE_SESSION_REQUEST__SELECTOR_UNIQUE_SESSION_NAME
        ? r->unique_session_name : NULL;
}

/* Forgets cc's pending clone (its timer, fd and request); the call is
 * neither answered nor failed here. */
static void clone_drop(svc_cconn *cc)
{
    svc_daemon *d = cc->d;
    for (size_t i = 0; i < d->nclones; i++)
        if (d->clones[i] == cc) {
            d->clones[i] = d->clones[--d->nclones];
            break;
        }
    if (cc->clone_timer)
        ipc_loop_cancel_timer(d->loop, cc->clone_timer);
    cc->clone_timer = 0;
    if (cc->clone_fd >= 0)
        close(cc->clone_fd);
    cc->clone_fd = -1;
    if (cc->clone_req)
        perfetto__protos__clone_session_request__free_unpacked(cc->clone_req,
                                                               NULL);
    cc->clone_req = NULL;
    cc->clone_call = NULL;
}

static void clone_finish(void *vcc)
{
    svc_cconn *cc = vcc;
    svc_daemon *d = cc->d;
    ipc_call *call = cc->clone_call;
    int fd = cc->clone_fd;
    Perfetto__Protos__CloneSessionRequest *req = cc->clone_req;
    bool gone = cc->clone_gone;
    uint64_t id = cc->clone_id;
    cc->clone_timer = 0;
    cc->clone_fd = -1;             /* clone_now owns it now */
    cc->clone_req = NULL;
    clone_drop(cc);
    if (!call) {
        if (fd >= 0)
            close(fd);
    } else if (gone || cc->s) {
        /* cc->s: an EnableTracing on this connection meanwhile */
        if (fd >= 0)
            close(fd);
        clone_reply_error(call, cc->s ? "this consumer already has a session"
                          : "the session ended while it was being flushed "
                            "for the clone");
    } else {
        clone_now(d, cc, call, fd, req, id, clone_name(req));
    }
    if (req)
        perfetto__protos__clone_session_request__free_unpacked(req, NULL);
}

void svc__op_clone_flush_done(void *ctx, uint64_t token, bool source_gone)
{
    svc_daemon *d = ctx;
    for (size_t i = 0; i < d->nclones; i++) {
        svc_cconn *cc = d->clones[i];
        if (cc->clone_token != token || cc->clone_timer)
            continue;
        cc->clone_gone = source_gone;
        /* Not from inside the core's loops: on the next loop turn. */
        cc->clone_timer = ipc_loop_add_timer(d->loop, 0, 0, clone_finish,
                                             cc);
        if (!cc->clone_timer)
            clone_finish(cc);
        return;
    }
}

static void c_clone(ipc_call *call, const ProtobufCMessage *args, void *vd)
{
    svc_daemon *d = vd;
    svc_cconn *cc = cconn_get(d, call);
    const Perfetto__Protos__CloneSessionRequest *req = (const void *)args;
    int fd = ipc_call_take_fd(call);
    if (!cc || cc->s || cc->clone_call) {
        if (fd >= 0)
            close(fd);
        clone_reply_error(call, cc && cc->clone_call ?
                          "this consumer is already cloning a session" :
                          "this consumer already has a session");
        return;
    }
    uint64_t id = req->selector_case ==
        PERFETTO__PROTOS__CLONE_SESSION_REQUEST__SELECTOR_SESSION_ID ?
        req->session_id : UINT64_MAX;
    const char *name = clone_name(req);
    if (req->has_for_bugreport && req->for_bugreport && id == UINT64_MAX) {
        /* perfetto --save-for-bugreport: the best bugreport session only. */
        id = svc_bugreport_session_id(d->svc);
        if (!id) {
            if (fd >= 0)
                close(fd);
            clone_reply_error(call, "No tracing sessions eligible for "
                              "bugreport found");
            return;
        }
    }
    /* the request outlives the call's arguments while the flush runs */
    Perfetto__Protos__CloneSessionRequest *copy = svc_pb_copy(&req->base);
    svc_cconn **g = copy ? realloc(d->clones, (d->nclones + 1) *
                                   sizeof(*g)) : NULL;
    if (!g) {
        /* Out of memory: clone without the flush rather than not at all. */
        if (copy)
            perfetto__protos__clone_session_request__free_unpacked(copy,
                                                                   NULL);
        clone_now(d, cc, call, fd, req, id, name);
        return;
    }
    d->clones = g;
    d->clones[d->nclones++] = cc;
    cc->clone_call = call;
    cc->clone_fd = fd;
    cc->clone_req = copy;
    cc->clone_id = id;
    cc->clone_gone = false;
    cc->clone_token = ++d->next_clone_token;
    if (svc_session_flush_for_clone(d->svc, ipc_conn_uid(cc->conn), id, name,
                                    cc->clone_token) == 0 &&
        cc->clone_call && !cc->clone_timer) {
        /* Nothing to flush (stopped, or not found: clone_now says so). */
        clone_finish(cc);
    }
}

static void c_capabilities(ipc_call *call, const ProtobufCMessage *args,
                           void *vd)
{
    svc__reply_empty(call);
}

static void c_disconnect(ipc_conn *conn, void *vd)
{
    svc_daemon *d = vd;
    svc_cconn *cc = ipc_conn_data(conn);
    if (!cc)
        return;
    if (cc->read_timer)
        ipc_loop_cancel_timer(d->loop, cc->read_timer);
    if (cc->clone_call || cc->clone_timer)
        clone_drop(cc);
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
    {"ChangeTraceConfig",
     &perfetto__protos__change_trace_config_request__descriptor,
     svc__c_change_config},
    {"Detach", &perfetto__protos__detach_request__descriptor, svc__c_detach},
    {"Attach", &perfetto__protos__attach_request__descriptor, svc__c_attach},
    {"GetTraceStats", &perfetto__protos__get_trace_stats_request__descriptor,
     c_stats},
    {"ObserveEvents", &perfetto__protos__observe_events_request__descriptor,
     svc__c_observe},
    {"QueryServiceState",
     &perfetto__protos__query_service_state_request__descriptor,
     svc__c_query},
    {"QueryCapabilities", NULL, c_capabilities},
    {"SaveTraceForBugreport",
     &perfetto__protos__save_trace_for_bugreport_request__descriptor,
     svc__c_bugreport},
    {"CloneSession", &perfetto__protos__clone_session_request__descriptor,
     c_clone},
};

const ipc_service svc__consumer_port = {
    .name = IPC_CONSUMER_PORT,
    .methods = consumer_methods,
    .n_methods = sizeof(consumer_methods) / sizeof(consumer_methods[0]),
    .on_disconnect = c_disconnect,
};
