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
 *                          large states go in several replies; what it
 *                          carries of data source descriptors is bounded
 *                          (see "query" below).
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
#include "svc_packet.h"

/* Below IPC_MAX_PAYLOAD_BYTES with room for the reply's framing. */
#define SVC_QUERY_PIECE_BYTES (IPC_MAX_PAYLOAD_BYTES - 1024u)

/* What one QueryServiceState reply carries of data sources (query_budget):
 * descriptors whole up to SVC_QUERY_DESC_BYTES, all data source entries
 * (whole or cut) up to SVC_QUERY_DS_BYTES; the reply is sent at once, and
 * a connection may have IPC_CHAN_TX_MAX_BYTES queued. */
#define SVC_QUERY_DESC_BYTES (4u << 20)
#define SVC_QUERY_DS_BYTES   (8u << 20)
_Static_assert(SVC_QUERY_DESC_BYTES <= SVC_QUERY_DS_BYTES &&
               SVC_QUERY_DS_BYTES <= IPC_CHAN_TX_MAX_BYTES / 4,
               "a query reply stays well under a connection's send queue");

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
    if (cc->s && svc_session_running(cc->s) &&
        svc_session_all_started(cc->s))
        svc__op_all_ds_started(d, cc, cc->s);
}

/* all_data_sources_started: every instance of the session has started,
 * those that asked to ack their start included (svc_start.c); at once
 * for an observer that subscribes later. `perfetto --background-wait` /
 * --notify-fd wait for this. */
void svc__op_all_ds_started(void *ctx, void *consumer, svc_session *s)
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

/* ---- the data source budget
 *
 * Registered descriptors may total 1 MiB a producer and 64 MiB a uid
 * (SVC_MAX_DS_BYTES_PER_*), and the reply is queued all at once: sent
 * whole, one uid's producers (40 of them with 8 descriptors of 120 KB)
 * took every consumer's query past the 32 MiB a connection may have
 * queued, and the daemon dropped the consumer. Perfetto has no bound (its
 * IPC blocks on a slow reader instead, with a timeout). Here a reply
 * carries:
 *   - descriptors whole up to SVC_QUERY_DESC_BYTES, those of the caller's
 *     own uid first, then the smallest first (so that a few large ones
 *     cannot push out many ordinary ones);
 *   - the others cut to their name and flags (the fields this service
 *     models; track_event_descriptor, ftrace_descriptor and other fields
 *     it keeps as unknown bytes are dropped): `perfetto --query` still
 *     lists them, without their categories;
 *   - and once the data source entries take SVC_QUERY_DS_BYTES even cut,
 *     none of the rest.
 * The reply says how many were cut or left out (shmtrace_data_sources_cut,
 * _left_out: our extension of TracingServiceState, which has no such
 * field; `shmtrace query` prints them), and so does the daemon's log, at
 * most once a minute. */

typedef struct {
    size_t index;              /* in st->data_sources */
    size_t bytes;              /* as a top-level field, descriptor whole */
    bool own;                  /* registered by a producer of the caller */
} ds_rank;

typedef struct {
    size_t cut, left_out;      /* data sources */
    size_t registered, registered_bytes;
} query_budget;

static int ds_rank_cmp(const void *a, const void *b)
{
    const ds_rank *x = a, *y = b;
    if (x->own != y->own)
        return x->own ? -1 : 1;
    if (x->bytes != y->bytes)
        return x->bytes < y->bytes ? -1 : 1;
    return x->index < y->index ? -1 : x->index > y->index;
}

/* Bytes of data source d as field 2 of TracingServiceState. */
static size_t ds_field_bytes(
    const Perfetto__Protos__TracingServiceState__DataSource *d)
{
    size_t n = protobuf_c_message_get_packed_size(&d->base);
    return 1 + svc_varint_len(n) + n;
}

/* Replaces d's descriptor by one with only the fields we model (name, id,
 * flags): the unknown fields it was kept with go. */
static int cut_descriptor(Perfetto__Protos__TracingServiceState__DataSource *d)
{
    if (!d->ds_descriptor)
        return 0;
    Perfetto__Protos__DataSourceDescriptor known = *d->ds_descriptor;
    known.base.n_unknown_fields = 0;
    known.base.unknown_fields = NULL;
    size_t n = perfetto__protos__data_source_descriptor__get_packed_size(
        &known);
    uint8_t *buf = malloc(n ? n : 1);
    if (!buf)
        return -ENOMEM;
    perfetto__protos__data_source_descriptor__pack(&known, buf);
    Perfetto__Protos__DataSourceDescriptor *cut =
        perfetto__protos__data_source_descriptor__unpack(NULL, n, buf);
    free(buf);
    if (!cut)
        return -ENOMEM;
    perfetto__protos__data_source_descriptor__free_unpacked(d->ds_descriptor,
                                                            NULL);
    d->ds_descriptor = cut;
    return 0;
}

static void ds_free(Perfetto__Protos__TracingServiceState__DataSource *d)
{
    if (d->ds_descriptor)
        perfetto__protos__data_source_descriptor__free_unpacked(
            d->ds_descriptor, NULL);
    free(d);
}

/* Applies the budget to st (see above) for a query by caller_uid. */
static int query_budget_apply(Perfetto__Protos__TracingServiceState *st,
                              uid_t caller_uid, query_budget *qb)
{
    memset(qb, 0, sizeof(*qb));
    size_t n = st->n_data_sources;
    if (n == 0)
        return 0;
    ds_rank *rank = malloc(n * sizeof(*rank));
    uint8_t *own_id = calloc(65536, 1);         /* by ProducerID */
    if (!rank || !own_id) {
        free(rank);
        free(own_id);
        return -ENOMEM;
    }
    for (size_t i = 0; i < st->n_producers; i++)
        if ((uid_t)st->producers[i]->uid == caller_uid)
            own_id[(uint16_t)st->producers[i]->id] = 1;
    for (size_t i = 0; i < n; i++) {
        const Perfetto__Protos__TracingServiceState__DataSource *d =
            st->data_sources[i];
        rank[i].index = i;
        rank[i].bytes = ds_field_bytes(d);
        rank[i].own = own_id[(uint16_t)d->producer_id] != 0;
        qb->registered_bytes += rank[i].bytes;
    }
    qb->registered = n;
    free(own_id);
    qsort(rank, n, sizeof(*rank), ds_rank_cmp);
    size_t whole = 0, all = 0;
    for (size_t k = 0; k < n; k++) {
        Perfetto__Protos__TracingServiceState__DataSource *d =
            st->data_sources[rank[k].index];
        size_t b = rank[k].bytes;
        if (b <= SVC_QUERY_PIECE_BYTES && b <= SVC_QUERY_DESC_BYTES - whole &&
            b <= SVC_QUERY_DS_BYTES - all) {
            whole += b;
            all += b;
            continue;
        }
        bool had_more = d->ds_descriptor &&
                        d->ds_descriptor->base.n_unknown_fields > 0;
        if (cut_descriptor(d) == 0) {
            b = ds_field_bytes(d);
            if (b <= SVC_QUERY_DS_BYTES - all) {
                all += b;
                qb->cut += had_more;     /* else nothing was cut */
                continue;
            }
        }
        ds_free(d);
        st->data_sources[rank[k].index] = NULL;
        qb->left_out++;
    }
    free(rank);
    size_t kept = 0;
    for (size_t i = 0; i < n; i++)
        if (st->data_sources[i])
            st->data_sources[kept++] = st->data_sources[i];
    st->n_data_sources = kept;
    return 0;
}

static void query_budget_log(const query_budget *qb, uid_t caller_uid)
{
    static uint64_t last_ms;
    uint64_t now = svc_now_ms();
    if (!qb->cut && !qb->left_out)
        return;
    if (last_ms && now - last_ms < 60000)
        return;
    last_ms = now;
    fprintf(stderr, "shmtraced: QueryServiceState (uid %ld): %zu of %zu "
            "data sources sent with their descriptors cut to name and "
            "flags, %zu left out: their %zu bytes pass what a reply carries "
            "(%u MiB of descriptors, %u MiB of data sources); logged at most "
            "once a minute\n", (long)caller_uid, qb->cut, qb->registered,
            qb->left_out, qb->registered_bytes, SVC_QUERY_DESC_BYTES >> 20,
            SVC_QUERY_DS_BYTES >> 20);
}

/* The state can exceed one IPC frame (many producers, large track_event
 * descriptors): it is cut at top-level field boundaries into pieces of at
 * most SVC_QUERY_PIECE_BYTES; the client concatenates them, which
 * protobuf decodes as the whole (repeated fields append). A data source
 * larger than a piece is sent with its descriptor cut (query_budget_apply);
 * any other field that large would be left out and logged. */
void svc__c_query(ipc_call *call, const ProtobufCMessage *args, void *vd)
{
    svc_daemon *d = vd;
    const Perfetto__Protos__QueryServiceStateRequest *req = (const void *)args;
    ipc_conn *conn = ipc_call_conn(call);
    uid_t uid = ipc_conn_uid(conn);
    Perfetto__Protos__TracingServiceState *st = svc_query_state(d->svc,
            uid, req->has_sessions_only && req->sessions_only);
    query_budget qb;
    if (st && query_budget_apply(st, uid, &qb) < 0) {
        svc_query_free(st);
        st = NULL;
    }
    if (st) {
        query_budget_log(&qb, uid);
        st->has_shmtrace_data_sources_cut = qb.cut != 0;
        st->shmtrace_data_sources_cut = (uint32_t)qb.cut;
        st->has_shmtrace_data_sources_left_out = qb.left_out != 0;
        st->shmtrace_data_sources_left_out = (uint32_t)qb.left_out;
    }
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
