/*
 * svc_ipc_consumer_ext.c - the ConsumerPort methods beyond recording one
 * session, as Perfetto's `perfetto` command uses them:
 *   Detach(key)            the session survives this connection (perfetto
 *                          --detach=KEY); replies once detached.
 *   Attach(key)            takes a detached session of the same uid back,
 *                          replying its TraceConfig; the client then sends
 *                          EnableTracing(attach_notification_only) to learn
 *                          when the session ends (answered at once if it
 *                          already has).
 *   ChangeTraceConfig      new producer name filters (svc_attach.c).
 *   ObserveEvents          a stream; we send clone_trigger_hit (CLONE_SNAPSHOT
 *                          triggers) and all_data_sources_started.
 *   QueryServiceState      a stream of TracingServiceState pieces: the
 *                          client concatenates them (protobuf merge), so
 *                          large states go in several replies.
 *   SaveTraceForBugreport  answered "not supported" with the alternative.
 * and what CloneSession adds: the cloning consumer's uid, and the trigger
 * that made perfetto clone (clone_snapshot_trigger packet).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "svc_ipc_int.h"
#include "svc_log.h"

/* Below IPC_MAX_PAYLOAD_BYTES with room for the reply's framing. */
#define SVC_QUERY_PIECE_BYTES (IPC_MAX_PAYLOAD_BYTES - 1024u)

void svc__c_detach(ipc_call *call, const ProtobufCMessage *args, void *vd)
{
    svc_daemon *d = vd;
    svc_cconn *cc = svc__cconn_get(d, call);
    const Perfetto__Protos__DetachRequest *req = (const void *)args;
    if (!cc || !cc->s) {
        ipc_call_fail(call);
        return;
    }
    int rc = svc_session_detach(d->svc, cc->s, req->key);
    if (rc < 0) {
        fprintf(stderr, "shmtraced: Detach refused: %s\n",
                rc == -EEXIST ? "another session is detached under this key"
                              : "empty key");
        ipc_call_fail(call);
        return;
    }
    if (cc->read_call)
        svc__read_finish(cc, false);
    for (size_t i = 0; i < cc->nflushes; i++)
        ipc_call_fail(cc->flushes[i].call);
    cc->nflushes = 0;
    /* The pending EnableTracing reply is never sent on this connection:
     * whoever attaches asks for the end-of-session notification again. */
    cc->enable_call = NULL;
    fprintf(stderr, "shmtraced: session %llu detached\n",
            (unsigned long long)svc_session_id(cc->s));
    cc->s = NULL;
    svc__reply_empty(call);
}

void svc__c_attach(ipc_call *call, const ProtobufCMessage *args, void *vd)
{
    svc_daemon *d = vd;
    svc_cconn *cc = svc__cconn_get(d, call);
    const Perfetto__Protos__AttachRequest *req = (const void *)args;
    if (!cc || cc->s) {
        ipc_call_fail(call);
        return;
    }
    cc->s = svc_session_attach(d->svc, cc, ipc_conn_uid(cc->conn), req->key);
    if (!cc->s) {
        ipc_call_fail(call);
        return;
    }
    Perfetto__Protos__AttachResponse r =
        PERFETTO__PROTOS__ATTACH_RESPONSE__INIT;
    r.trace_config = (Perfetto__Protos__TraceConfig *)svc_session_config(cc->s);
    ipc_call_reply(call, &r.base, false);
}

void svc__attach_notification(svc_cconn *cc, ipc_call *call)
{
    if (!cc->s || cc->enable_call) {
        ipc_call_fail(call);
        return;
    }
    cc->enable_call = call;
    if (svc_session_is_disabled(cc->s))
        svc__send_disabled(cc, NULL);
}

void svc__c_change_config(ipc_call *call, const ProtobufCMessage *args,
                          void *vd)
{
    svc_daemon *d = vd;
    svc_cconn *cc = svc__cconn_get(d, call);
    const Perfetto__Protos__ChangeTraceConfigRequest *req = (const void *)args;
    char err[256] = "";
    if (!cc || !cc->s ||
        svc_session_change_config(d->svc, cc->s, req->trace_config, err,
                                  sizeof(err)) < 0) {
        /* err quotes the consumer's config (filter names, regexes) */
        char logged[SVC_LOG_STR_BYTES(sizeof err)];
        if (err[0])
            fprintf(stderr, "shmtraced: ChangeTraceConfig refused: %s\n",
                    svc_log_str(logged, sizeof logged, err, sizeof err));
        ipc_call_fail(call);
        return;
    }
    svc__reply_empty(call);
}

/* ---------------------------------------------------------------- events */

#define OBS(x) PERFETTO__PROTOS__OBSERVABLE_EVENTS__TYPE__TYPE_##x

static void send_events(svc_cconn *cc, Perfetto__Protos__ObservableEvents *ev)
{
    Perfetto__Protos__ObserveEventsResponse r =
        PERFETTO__PROTOS__OBSERVE_EVENTS_RESPONSE__INIT;
    r.events = ev;
    if (ipc_call_reply(cc->observe_call, &r.base, true) < 0)
        fprintf(stderr, "shmtraced: cannot send an event to a consumer\n");
}

void svc__c_observe(ipc_call *call, const ProtobufCMessage *args, void *vd)
{
    svc_daemon *d = vd;
    svc_cconn *cc = svc__cconn_get(d, call);
    const Perfetto__Protos__ObserveEventsRequest *req = (const void *)args;
    if (!cc || cc->observe_call) {
        ipc_call_fail(call);
        return;
    }
    uint32_t mask = 0;
    for (size_t i = 0; i < req->n_events_to_observe; i++)
        if (req->events_to_observe[i] >= 0 && req->events_to_observe[i] < 32)
            mask |= 1u << req->events_to_observe[i];
    cc->observe_call = call;        /* kept open: a stream of events */
    cc->observe_mask = mask;
    if (cc->s && svc_session_running(cc->s))
        svc__op_session_started(d, cc, cc->s);
}

/* all_data_sources_started: our instances are set up and started in one
 * go (StartDataSource is sent with SetupDataSource; we do not wait for
 * NotifyDataSourceStarted), so a started session has them all started.
 * `perfetto --background-wait` / --notify-fd wait for this. */
void svc__op_session_started(void *ctx, void *consumer, svc_session *s)
{
    svc_cconn *cc = consumer;
    if (!cc || !cc->observe_call ||
        !(cc->observe_mask & (1u << OBS(ALL_DATA_SOURCES_STARTED))))
        return;
    Perfetto__Protos__ObservableEvents ev =
        PERFETTO__PROTOS__OBSERVABLE_EVENTS__INIT;
    ev.has_all_data_sources_started = true;
    ev.all_data_sources_started = true;
    send_events(cc, &ev);
}

void svc__op_clone_trigger_hit(void *ctx, void *consumer, uint64_t tsid,
                               const svc_trigger_hit *h)
{
    svc_cconn *cc = consumer;
    if (!cc || !cc->observe_call ||
        !(cc->observe_mask & (1u << OBS(CLONE_TRIGGER_HIT))))
        return;
    Perfetto__Protos__ObservableEvents ev =
        PERFETTO__PROTOS__OBSERVABLE_EVENTS__INIT;
    Perfetto__Protos__ObservableEvents__CloneTriggerHit hit =
        PERFETTO__PROTOS__OBSERVABLE_EVENTS__CLONE_TRIGGER_HIT__INIT;
    hit.has_tracing_session_id = hit.has_producer_uid = true;
    hit.has_boot_time_ns = hit.has_trigger_delay_ms = true;
    hit.tracing_session_id = (int64_t)tsid;
    hit.trigger_name = (char *)h->name;
    hit.producer_name = (char *)h->producer_name;
    hit.producer_uid = (uint32_t)h->producer_uid;
    hit.boot_time_ns = h->boot_time_ns;
    hit.trigger_delay_ms = h->delay_ms;
    ev.clone_trigger_hit = &hit;
    send_events(cc, &ev);
}

void svc__clone_extras(svc_cconn *cc,
                       const Perfetto__Protos__CloneSessionRequest *req)
{
    svc_session_set_consumer_uid(cc->s, ipc_conn_uid(cc->conn));
    if (req->clone_trigger_name && req->clone_trigger_name[0]) {
        svc_trigger_hit h = {
            req->clone_trigger_name,
            req->clone_trigger_producer_name ?
                req->clone_trigger_producer_name : "",
            req->clone_trigger_trusted_producer_uid,
            req->clone_trigger_boot_time_ns, req->clone_trigger_delay_ms };
        svc_session_set_clone_trigger(cc->s, &h);
    }
}

/* ---------------------------------------------------------------- query */

static int send_state(ipc_call *call, Perfetto__Protos__TracingServiceState *st,
                      bool has_more)
{
    Perfetto__Protos__QueryServiceStateResponse r =
        PERFETTO__PROTOS__QUERY_SERVICE_STATE_RESPONSE__INIT;
    r.service_state = st;
    return ipc_call_reply(call, &r.base, has_more);
}

/* Length of the top-level field at p (tag + payload), 0 if malformed. */
static size_t field_len(const uint8_t *p, size_t n)
{
    size_t i = 0;
    uint64_t key = 0, v = 0;
    for (int sh = 0; i < n && sh < 64; sh += 7) {
        key |= (uint64_t)(p[i] & 0x7f) << sh;
        if (!(p[i++] & 0x80))
            break;
    }
    switch (key & 7) {
    case 0:
        while (i < n && (p[i] & 0x80))
            i++;
        return i < n ? i + 1 : 0;
    case 1: return i + 8 <= n ? i + 8 : 0;
    case 5: return i + 4 <= n ? i + 4 : 0;
    case 2:
        for (int sh = 0; i < n && sh < 64; sh += 7) {
            v |= (uint64_t)(p[i] & 0x7f) << sh;
            if (!(p[i++] & 0x80))
                break;
        }
        return v <= n - i ? i + (size_t)v : 0;
    default: return 0;
    }
}

static int send_piece(ipc_call *call, const uint8_t *p, size_t n,
                      bool has_more)
{
    Perfetto__Protos__TracingServiceState *st =
        perfetto__protos__tracing_service_state__unpack(NULL, n, p);
    if (!st)
        return -EBADMSG;
    int rc = send_state(call, st, has_more);
    perfetto__protos__tracing_service_state__free_unpacked(st, NULL);
    return rc;
}

/* The state can exceed one IPC frame (many producers, large track_event
 * descriptors): it is cut at top-level field boundaries into pieces of at
 * most SVC_QUERY_PIECE_BYTES; the client concatenates them, which
 * protobuf decodes as the whole (repeated fields append). A single field
 * larger than a frame (one huge descriptor) is left out and logged. */
void svc__c_query(ipc_call *call, const ProtobufCMessage *args, void *vd)
{
    svc_daemon *d = vd;
    const Perfetto__Protos__QueryServiceStateRequest *req = (const void *)args;
    ipc_conn *conn = ipc_call_conn(call);
    Perfetto__Protos__TracingServiceState *st = svc_query_state(d->svc,
            ipc_conn_uid(conn), req->has_sessions_only && req->sessions_only);
    size_t n = st ? perfetto__protos__tracing_service_state__get_packed_size(
                        st) : 0;
    uint8_t *buf = st ? malloc(n ? n : 1) : NULL;
    if (!buf) {
        svc_query_free(st);
        ipc_call_fail(call);
        return;
    }
    perfetto__protos__tracing_service_state__pack(st, buf);
    svc_query_free(st);
    size_t start = 0, off = 0;
    while (off < n) {
        size_t fl = field_len(buf + off, n - off);
        if (fl == 0)
            break;                       /* cannot happen: we packed it */
        if (fl > SVC_QUERY_PIECE_BYTES) {
            if (off > start)
                send_piece(call, buf + start, off - start, true);
            fprintf(stderr, "shmtraced: QueryServiceState: a %zu-byte "
                    "entry does not fit in a reply, left out\n", fl);
            off += fl;
            start = off;
            continue;
        }
        if (off + fl - start > SVC_QUERY_PIECE_BYTES) {
            send_piece(call, buf + start, off - start, true);
            start = off;
        }
        off += fl;
    }
    if (send_piece(call, buf + start, off - start, false) < 0)
        ipc_call_fail(call);
    free(buf);
}

void svc__c_bugreport(ipc_call *call, const ProtobufCMessage *args, void *vd)
{
    Perfetto__Protos__SaveTraceForBugreportResponse r =
        PERFETTO__PROTOS__SAVE_TRACE_FOR_BUGREPORT_RESPONSE__INIT;
    r.has_success = true;
    r.success = false;
    r.msg = "shmtraced does not save traces for bugreports; clone the "
            "session instead (perfetto --clone ID, shmtrace clone)";
    ipc_call_reply(call, &r.base, false);
}
