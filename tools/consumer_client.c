/*
 * consumer_client.c - synchronous ConsumerPort client and trace-file writer
 * (cons_*). See consumer_client.h.
 *
 * Every synchronous call is "invoke, then run the private loop until the
 * call's done flag is set". A call record lives on the caller's stack; if
 * the connection drops, the IPC client fails every pending call with
 * -ECONNRESET before we return, so no callback outlives its record.
 *
 * ReadBuffers reassembly: slices are appended to pkt until one carries
 * last_slice_for_packet; the packet then goes to the callback. A packet
 * larger than CONS_MAX_PACKET_BYTES is dropped (counted in the error) and a
 * stream that ends mid-packet drops the partial one.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli_exit.h"
#include "cli_outfile.h"
#include "consumer_client.h"
#include "consumer_ext.h"
#include "ipc.h"

#define OUT_BUF_BYTES (1u << 20)

#include "consumer_int.h"

static void on_bound(ipc_client *ic, bool ok, void *ctx)
{
    (void)ic;
    cons_client *c = ctx;
    c->bound_done = true;
    c->bound_ok = ok;
}

/* Why the service refused the last cons_connect (ipc_client_refusal),
 * for cons_connect_error: "" if it did not. The programs are
 * single-threaded; one connect at a time. */
static char refused_why[256];

static void on_disc(ipc_client *ic, int err, void *ctx)
{
    (void)err;
    cons_client *c = ctx;
    const char *why = ipc_client_refusal(ic);
    if (why && !c->bound_done)
        snprintf(refused_why, sizeof refused_why, "%s", why);
    c->disconnected = true;
    c->bound_done = true;
    if (c->enable_sent && !c->ended) {
        c->ended = true;
        c->end_lost = true;
        free(c->end_error);
        c->end_error = strdup("connection to the tracing service lost");
    }
}

static const ipc_client_cbs cbs = { on_bound, on_disc };

void cons_poll(cons_client *c, int timeout_ms)
{
    ipc_loop_run_once(c->loop, timeout_ms);
}

/* Run the loop until *flag, a disconnect, or the timeout. */
int cons__wait_flag(cons_client *c, const bool *flag)
{
    uint64_t deadline = ipc_now_ms() + CONS_REPLY_TIMEOUT_MS;
    while (!*flag) {
        if (c->disconnected)
            return -ENOTCONN;
        uint64_t now = ipc_now_ms();
        if (now >= deadline)
            return -ETIMEDOUT;
        ipc_loop_run_once(c->loop, (int)(deadline - now));
    }
    return 0;
}

cons_client *cons_connect(const char *socket_override, int *err)
{
    int rc;
    refused_why[0] = '\0';
    cons_client *c = calloc(1, sizeof *c);
    if (!c) {
        rc = -ENOMEM;
        goto fail;
    }
    rc = ipc_sock_path(IPC_SOCK_CONSUMER, socket_override, c->path,
                       sizeof c->path);
    if (rc < 0)
        goto fail;
    c->loop = ipc_loop_create();
    if (!c->loop) {          /* calloc or pipe() failed; errno says */
        rc = errno ? -errno : -ENOMEM;
        goto fail;
    }
    c->ipc = ipc_client_connect(c->loop, c->path, IPC_CONSUMER_PORT, &cbs, c,
                                &rc);
    if (!c->ipc)
        goto fail;
    rc = cons__wait_flag(c, &c->bound_done);
    if (rc == 0 && !c->bound_ok)
        rc = refused_why[0] ? -ECONNREFUSED :
             c->disconnected ? -ECONNRESET : -EPROTONOSUPPORT;
    else if (rc == -ENOTCONN && refused_why[0])
        rc = -ECONNREFUSED;
    if (rc < 0)
        goto fail;
    return c;
fail:
    if (err)
        *err = rc;
    cons_destroy(c);
    return NULL;
}

bool cons_connect_failure_is_local(int rc)
{
    return cli_local_limit_hint(-rc) != NULL;
}

void cons_describe_connect_failure(const char *path, int rc,
                                   const char *refused, char *msg,
                                   size_t len)
{
    if (cons_connect_failure_is_local(rc))
        snprintf(msg, len, CLI_LOCAL_LIMIT_FMT, path, strerror(-rc),
                 cli_local_limit_hint(-rc));
    else if (rc == -EPERM)   /* a daemon of another user: say so */
        ipc_sock_describe_error(path, rc, msg, len);
    else if (rc == -ECONNREFUSED && refused && refused[0])
        snprintf(msg, len, "the tracing service at %s refused the "
                 "connection: %s", path, refused);
    else
        snprintf(msg, len, CONS_NO_SERVICE_FMT, path, strerror(-rc));
}

void cons_connect_error(const char *socket_override, int rc, char *msg,
                        size_t len)
{
    char sock[108] = "";
    ipc_sock_path(IPC_SOCK_CONSUMER, socket_override, sock, sizeof sock);
    cons_describe_connect_failure(sock, rc, refused_why, msg, len);
}

void cons_destroy(cons_client *c)
{
    if (!c)
        return;
    cons__ext_free(c);
    ipc_client_destroy(c->ipc);
    ipc_loop_destroy(c->loop);
    free(c->end_error);
    free(c);
}

const char *cons_socket_path(const cons_client *c)
{
    return c->path;
}

static void on_reply(ipc_client *ic, int status, const ProtobufCMessage *msg,
                     bool has_more, void *ctx)
{
    (void)ic;
    call *k = ctx;
    if (has_more)
        return;
    k->status = status;
    if (status == 0 && k->keep_reply && msg) {
        /* Copy out: msg is freed after we return. */
        size_t n = protobuf_c_message_get_packed_size(msg);
        uint8_t *b = malloc(n ? n : 1);
        if (b) {
            protobuf_c_message_pack(msg, b);
            k->reply = protobuf_c_message_unpack(msg->descriptor, NULL, n, b);
            free(b);
        }
        if (!k->reply)
            k->status = -ENOMEM;
    }
    k->done = true;
}

int cons__invoke_sync(cons_client *c, const char *method,
                       const ProtobufCMessage *args, int fd,
                       const ProtobufCMessageDescriptor *reply_desc,
                       call *k)
{
    if (c->disconnected)
        return -ENOTCONN;
    int64_t rid = ipc_client_invoke(c->ipc, method, args, fd, reply_desc,
                                    on_reply, k);
    if (rid < 0)
        return (int)rid;
    int rc = cons__wait_flag(c, &k->done);
    if (rc == -ETIMEDOUT) {
        /* The callback still points at k: drop the connection first. */
        ipc_client_destroy(c->ipc);
        c->ipc = NULL;
        c->disconnected = true;
        return rc;
    }
    if (rc < 0 && !k->done)
        return rc;
    return k->status == -ECONNRESET ? -ENOTCONN : k->status;
}

void cons__on_enable_reply(ipc_client *ic, int status,
                            const ProtobufCMessage *msg, bool has_more,
                            void *ctx)
{
    (void)ic;
    cons_client *c = ctx;
    if (has_more)
        return;
    c->ended = true;
    free(c->end_error);
    c->end_error = NULL;
    const Perfetto__Protos__EnableTracingResponse *r = (const void *)msg;
    c->end_lost = status == -ECONNRESET;
    if (status < 0)
        c->end_error = strdup(c->end_lost
                                  ? "connection to the tracing service lost"
                                  : "the service refused the trace config");
    else if (r && r->error && r->error[0])
        c->end_error = strdup(r->error);
}

int cons_enable(cons_client *c, const Perfetto__Protos__TraceConfig *cfg,
                int fd)
{
    if (c->disconnected)
        return -ENOTCONN;
    Perfetto__Protos__EnableTracingRequest r =
        PERFETTO__PROTOS__ENABLE_TRACING_REQUEST__INIT;
    r.trace_config = (Perfetto__Protos__TraceConfig *)cfg;
    int64_t rid = ipc_client_invoke(
        c->ipc, "EnableTracing", &r.base, fd,
        &perfetto__protos__enable_tracing_response__descriptor,
        cons__on_enable_reply, c);
    if (rid < 0)
        return (int)rid;
    c->enable_sent = true;
    c->ended = false;
    return 0;
}

int cons_enable_raw(cons_client *c, const uint8_t *cfg, size_t len, int fd)
{
    if (c->disconnected)
        return -ENOTCONN;
    Perfetto__Protos__EnableTracingRequestRaw r =
        PERFETTO__PROTOS__ENABLE_TRACING_REQUEST_RAW__INIT;
    r.has_trace_config = true;
    r.trace_config.data = (uint8_t *)cfg;
    r.trace_config.len = len;
    int64_t rid = ipc_client_invoke(
        c->ipc, "EnableTracing", &r.base, fd,
        &perfetto__protos__enable_tracing_response__descriptor,
        cons__on_enable_reply, c);
    if (rid < 0)
        return (int)rid;
    c->enable_sent = true;
    c->ended = false;
    return 0;
}

/* A set of data source names (no duplicates), grown as needed. */
typedef struct {
    char **names;
    size_t n, cap;
} name_set;

static void name_set_add(name_set *q, const char *name)
{
    for (size_t i = 0; i < q->n; i++)
        if (!strcmp(q->names[i], name))
            return;
    if (q->n == q->cap) {
        size_t cap = q->cap ? q->cap * 2 : 16;
        char **nn = realloc(q->names, cap * sizeof *nn);
        if (!nn)
            return;
        q->names = nn;
        q->cap = cap;
    }
    char *d = strdup(name);
    if (d)
        q->names[q->n++] = d;
}

void cons_free_names(char **names, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(names[i]);
    free(names);
}

int cons_query_data_sources(cons_client *c, char ***names, size_t *n)
{
    *names = NULL;
    *n = 0;
    Perfetto__Protos__TracingServiceState *st = NULL;
    int rc = cons_query(c, false, &st);
    if (rc < 0)
        return rc;
    name_set q = { 0 };
    for (size_t i = 0; i < st->n_data_sources; i++) {
        const Perfetto__Protos__TracingServiceState__DataSource *d =
            st->data_sources[i];
        if (d && d->ds_descriptor && d->ds_descriptor->name)
            name_set_add(&q, d->ds_descriptor->name);
    }
    perfetto__protos__tracing_service_state__free_unpacked(st, NULL);
    *names = q.names;
    *n = q.n;
    return 0;
}

bool cons_ended(const cons_client *c, const char **error)
{
    if (error)
        *error = c->end_error;
    return c->ended;
}

bool cons_ended_by_disconnect(const cons_client *c)
{
    return c->ended && c->end_lost;
}

int cons_disable(cons_client *c)
{
    Perfetto__Protos__DisableTracingRequest r =
        PERFETTO__PROTOS__DISABLE_TRACING_REQUEST__INIT;
    call k = { 0 };
    return cons__invoke_sync(c, "DisableTracing", &r.base, -1, NULL, &k);
}

int cons_flush(cons_client *c, uint32_t timeout_ms)
{
    Perfetto__Protos__FlushRequest r = PERFETTO__PROTOS__FLUSH_REQUEST__INIT;
    if (timeout_ms) {
        r.has_timeout_ms = true;
        r.timeout_ms = timeout_ms;
    }
    /* flags: reason explicit (4), initiator perfetto_cmd-like (2 << 4) */
    r.has_flags = true;
    r.flags = 4u | (2u << 4);
    call k = { 0 };
    return cons__invoke_sync(c, "Flush", &r.base, -1, NULL, &k);
}

static void on_read_reply(ipc_client *ic, int status,
                          const ProtobufCMessage *msg, bool has_more,
                          void *ctx)
{
    (void)ic;
    call *k = ctx;
    const Perfetto__Protos__ReadBuffersResponse *r = (const void *)msg;
    for (size_t i = 0; status == 0 && r && i < r->n_slices; i++) {
        const Perfetto__Protos__ReadBuffersResponse__Slice *s = r->slices[i];
        size_t len = s->has_data ? s->data.len : 0;
        if (k->pkt_len + len > CONS_MAX_PACKET_BYTES) {
            k->pkt_overflow = true;
        } else if (len) {
            if (k->pkt_len + len > k->pkt_cap) {
                size_t cap = k->pkt_cap ? k->pkt_cap : 4096;
                while (cap < k->pkt_len + len)
                    cap *= 2;
                uint8_t *n = realloc(k->pkt, cap);
                if (!n) {
                    k->pkt_overflow = true;
                } else {
                    k->pkt = n;
                    k->pkt_cap = cap;
                }
            }
            if (!k->pkt_overflow) {
                memcpy(k->pkt + k->pkt_len, s->data.data, len);
                k->pkt_len += len;
            }
        }
        if (s->has_last_slice_for_packet && s->last_slice_for_packet) {
            if (!k->pkt_overflow && k->cb_error == 0) {
                int rc = k->fn(k->pkt, k->pkt_len, k->ctx);
                if (rc < 0)
                    k->cb_error = rc;
            } else if (k->pkt_overflow && k->cb_error == 0) {
                k->cb_error = -EMSGSIZE;
            }
            k->pkt_len = 0;
            k->pkt_overflow = false;
        }
    }
    if (!has_more || status < 0) {
        k->status = status;
        k->done = true;
    }
}

int cons_read(cons_client *c, cons_packet_fn fn, void *ctx)
{
    if (c->disconnected)
        return -ENOTCONN;
    Perfetto__Protos__ReadBuffersRequest r =
        PERFETTO__PROTOS__READ_BUFFERS_REQUEST__INIT;
    call k = { 0 };
    k.fn = fn;
    k.ctx = ctx;
    int64_t rid = ipc_client_invoke(
        c->ipc, "ReadBuffers", &r.base, -1,
        &perfetto__protos__read_buffers_response__descriptor, on_read_reply,
        &k);
    if (rid < 0)
        return (int)rid;
    /* A long read keeps making progress; only a silent service times out. */
    int rc = 0;
    uint64_t last = ipc_now_ms();
    while (!k.done) {
        if (c->disconnected) {
            rc = -ENOTCONN;
            break;
        }
        /* 0 events is a timeout only if the time really passed: a signal
         * (Ctrl-C) interrupts poll too. */
        if (ipc_loop_run_once(c->loop, CONS_REPLY_TIMEOUT_MS) > 0) {
            last = ipc_now_ms();
        } else if (ipc_now_ms() - last >= CONS_REPLY_TIMEOUT_MS) {
            ipc_client_destroy(c->ipc);
            c->ipc = NULL;
            c->disconnected = true;
            rc = -ETIMEDOUT;
            break;
        }
    }
    free(k.pkt);
    if (rc == 0)
        rc = k.status == -ECONNRESET ? -ENOTCONN : k.status;
    return rc < 0 ? rc : k.cb_error;
}

int cons_free_buffers(cons_client *c)
{
    Perfetto__Protos__FreeBuffersRequest r =
        PERFETTO__PROTOS__FREE_BUFFERS_REQUEST__INIT;
    call k = { 0 };
    return cons__invoke_sync(c, "FreeBuffers", &r.base, -1, NULL, &k);
}

int cons_get_stats(cons_client *c, Perfetto__Protos__TraceStats **out)
{
    Perfetto__Protos__GetTraceStatsRequest r =
        PERFETTO__PROTOS__GET_TRACE_STATS_REQUEST__INIT;
    call k = { 0 };
    k.keep_reply = true;
    *out = NULL;
    int rc = cons__invoke_sync(c, "GetTraceStats", &r.base, -1,
                         &perfetto__protos__get_trace_stats_response__descriptor,
                         &k);
    Perfetto__Protos__GetTraceStatsResponse *rep = (void *)k.reply;
    if (rc == 0 && rep && rep->trace_stats) {
        *out = rep->trace_stats;
        rep->trace_stats = NULL; /* steal it */
    } else if (rc == 0) {
        rc = -EPROTO;
    }
    protobuf_c_message_free_unpacked(k.reply, NULL);
    return rc;
}

int cons_clone(cons_client *c, uint64_t session_id, const char *name,
               char *err, size_t err_len)
{
    /* The plain CloneSession: no trigger, no file of ours to pass. */
    return cons_clone_ex(c, session_id, name, NULL, -1, NULL, err, err_len);
}

/* ---- trace file writer -------------------------------------------- */

int cons_out_init(cons_out *o, int fd)
{
    memset(o, 0, sizeof *o);
    o->fd = fd;
    o->buf = malloc(OUT_BUF_BYTES);
    if (!o->buf)
        return -ENOMEM;
    o->buf_cap = OUT_BUF_BYTES;
    return 0;
}

int cons_out_flush(cons_out *o)
{
    size_t off = 0;
    while (o->error == 0 && off < o->buf_len) {
        ssize_t n = write(o->fd, o->buf + off, o->buf_len - off);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            o->error = -errno;
            break;
        }
        off += (size_t)n;
    }
    o->buf_len = 0;
    return o->error;
}

static int out_bytes(cons_out *o, const uint8_t *p, size_t n)
{
    if (o->buf_len + n > o->buf_cap && cons_out_flush(o) < 0)
        return o->error;
    if (n > o->buf_cap) {
        while (n) {
            ssize_t w = write(o->fd, p, n);
            if (w < 0) {
                if (errno == EINTR)
                    continue;
                return o->error = -errno;
            }
            p += w;
            n -= (size_t)w;
        }
        return 0;
    }
    memcpy(o->buf + o->buf_len, p, n);
    o->buf_len += n;
    return 0;
}

int cons_out_packet(const uint8_t *packet, size_t len, void *ctx)
{
    cons_out *o = ctx;
    uint8_t hdr[11];
    size_t n = 0;
    hdr[n++] = 0x0a; /* Trace.packet: field 1, length-delimited */
    uint64_t v = len;
    do {
        hdr[n++] = (uint8_t)((v & 0x7f) | (v > 0x7f ? 0x80 : 0));
        v >>= 7;
    } while (v);
    if (out_bytes(o, hdr, n) < 0 || out_bytes(o, packet, len) < 0)
        return o->error;
    o->bytes += n + len;
    o->packets++;
    cons__scan_packet(o, packet, len);
    return 0;
}

void cons_out_fini(cons_out *o)
{
    free(o->buf);
    o->buf = NULL;
    perfetto__protos__trace_stats__free_unpacked(o->last_stats, NULL);
    o->last_stats = NULL;
}

void cons_losses_from_stats(const Perfetto__Protos__TraceStats *st,
                            cons_losses *out)
{
    memset(out, 0, sizeof *out);
    if (!st)
        return;
    for (size_t i = 0; i < st->n_buffer_stats; i++) {
        const Perfetto__Protos__TraceStats__BufferStats *b =
            st->buffer_stats[i];
        out->chunks_overwritten += b->chunks_overwritten;
        out->chunks_discarded += b->chunks_discarded;
        out->abi_violations += b->abi_violations;
        out->trace_writer_packet_loss += b->trace_writer_packet_loss;
        out->patches_failed += b->patches_failed;
        out->bytes_written += b->bytes_written;
    }
    out->chunks_discarded += st->chunks_discarded;
    out->invalid_packets = st->invalid_packets;
}

int cons_clone_to_file(const char *socket_override, uint64_t session_id,
                       const char *name, const char *path, cons_out *result,
                       bool *unreachable, char *err, size_t err_len)
{
    int rc = 0;
    if (err_len)
        err[0] = 0;
    if (unreachable)
        *unreachable = false;
    /* Whole or nothing: a failed run leaves no file behind. The output is
     * checked first, so a bad -o fails before anything else. */
    cli_outfile of;
    rc = cli_outfile_open(&of, path, err, err_len);
    if (rc < 0)
        return rc;
    cons_client *c = cons_connect(socket_override, &rc);
    if (!c) {
        cons_connect_error(socket_override, rc, err, err_len);
        if (unreachable)
            *unreachable = !cons_connect_failure_is_local(rc);
        cli_outfile_abort(&of);
        return rc;
    }
    rc = cons_clone(c, session_id, name, err, err_len);
    if (rc < 0) {
        if (!err[0])
            snprintf(err, err_len, "CloneSession failed: %s", strerror(-rc));
        cli_outfile_abort(&of);
        cons_destroy(c);
        return rc;
    }
    cons_out o;
    rc = cons_out_init(&o, of.fd);
    if (rc == 0)
        rc = cons_read(c, cons_out_packet, &o);
    int frc = cons_out_flush(&o);
    if (rc == 0)
        rc = frc;
    if (rc < 0 && !err[0])
        snprintf(err, err_len, "reading the clone into %s failed: %s (%s "
                 "not written)", path, strerror(-rc), path);
    cons_free_buffers(c);
    if (rc == 0)
        rc = cli_outfile_commit(&of, err, err_len);
    else
        cli_outfile_abort(&of);
    if (result) {
        free(o.buf);
        o.buf = NULL;
        *result = o;
    } else {
        cons_out_fini(&o);
    }
    cons_destroy(c);
    return rc;
}
