/*
 * ipc_client.c - the client side of Perfetto's IPC (ipc_client_*).
 *
 * One client = one connection bound to one service (as Perfetto's
 * ProducerIPCClient / ConsumerIPCClient use it). On creation it sends
 * BindService(name) with request id 1; the reply's method table (ids chosen
 * by the host, never assumed) is kept for ipc_client_invoke(). Each invoke
 * takes the next request id and, unless it is drop_reply, a pending record
 * {request_id, reply descriptor, callback}; replies are matched by
 * request_id. Streaming replies keep the record while has_more is set.
 *
 * Trust: ipc_client_connect() talks only to a daemon that runs as root or
 * as our own euid (SO_PEERCRED, ipc_sock_check_peer): a socket name another
 * user took over gets neither our requests nor our data (-EPERM).
 *
 * Refusal: a host that refuses the connection (too many of ours, no
 * descriptors left) sends one msg_request_error without a request id and
 * closes; its text, printable ASCII only and bounded, is kept for
 * ipc_client_refusal() so that the user learns why.
 *
 * Hostile host: replies for unknown request ids are ignored; undecodable
 * reply payloads fail the call with -EBADMSG; method tables are bounded
 * (MAX_METHODS, names copied).
 *
 * Lifetime: user callbacks may destroy the client; destruction inside a
 * callback is deferred until control returns here (in_cb/destroyed).
 */
#include "config.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ipc_int.h"

#define MAX_METHODS 256

typedef struct pending {
    struct pending *next;
    uint64_t request_id;
    const ProtobufCMessageDescriptor *reply_desc;
    ipc_reply_fn cb;
    void *ctx;
} pending;

typedef struct method_info {
    uint32_t id;
    char *name;
} method_info;

struct ipc_client {
    ipc_loop *loop;
    ipc_chan *chan;
    ipc_client_cbs cbs;
    void *ctx;
    bool connected;
    bool bound;
    uint32_t service_id;
    method_info *methods;
    size_t n_methods;
    uint64_t last_request_id;
    uint64_t bind_request_id;
    pending *pend;
    int in_cb;
    bool destroyed;
    char refusal[256];      /* "" unless the host refused us */
};

static void free_client(ipc_client *c)
{
    ipc_chan_destroy(c->chan);
    while (c->pend) {
        pending *n = c->pend->next;
        free(c->pend);
        c->pend = n;
    }
    for (size_t i = 0; i < c->n_methods; i++)
        free(c->methods[i].name);
    free(c->methods);
    free(c);
}

/* After a user callback: true if the client is gone or must not go on. */
static bool gone(ipc_client *c)
{
    return c->destroyed;
}

static void on_bind_reply(ipc_client *c,
                          const Perfetto__Protos__IPCFrame__BindServiceReply *r)
{
    bool ok = r->has_success && r->success && r->has_service_id;
    if (ok) {
        size_t n = r->n_methods < MAX_METHODS ? r->n_methods : MAX_METHODS;
        c->methods = calloc(n ? n : 1, sizeof *c->methods);
        if (!c->methods) {
            ok = false;
        } else {
            for (size_t i = 0; i < n; i++) {
                const Perfetto__Protos__IPCFrame__BindServiceReply__MethodInfo
                    *m = r->methods[i];
                if (!m->has_id || !m->name)
                    continue;
                char *name = strdup(m->name);
                if (!name)
                    continue;
                c->methods[c->n_methods].id = m->id;
                c->methods[c->n_methods].name = name;
                c->n_methods++;
            }
            c->service_id = r->service_id;
            c->bound = true;
        }
    }
    c->bind_request_id = 0;
    if (c->cbs.on_bound)
        c->cbs.on_bound(c, ok, c->ctx);
}

static pending *take_pending(ipc_client *c, uint64_t rid, bool remove)
{
    for (pending **pp = &c->pend; *pp; pp = &(*pp)->next) {
        if ((*pp)->request_id != rid)
            continue;
        pending *p = *pp;
        if (remove)
            *pp = p->next;
        return p;
    }
    return NULL;
}

static void on_invoke_reply(
    ipc_client *c, uint64_t rid,
    const Perfetto__Protos__IPCFrame__InvokeMethodReply *r)
{
    pending *p = take_pending(c, rid, false);
    if (!p)
        return; /* not ours (or a reply to a drop_reply call): ignore */
    bool success = r->has_success && r->success;
    bool more = success && r->has_has_more && r->has_more;
    ProtobufCMessage *msg = NULL;
    int status = 0;
    if (!success) {
        status = -EPROTO;
    } else if (p->reply_desc) {
        static const uint8_t empty[1];
        msg = protobuf_c_message_unpack(
            p->reply_desc, NULL, r->has_reply_proto ? r->reply_proto.len : 0,
            r->has_reply_proto && r->reply_proto.data ? r->reply_proto.data
                                                      : empty);
        if (msg && !ipc_message_well_formed(msg)) {
            protobuf_c_message_free_unpacked(msg, NULL);
            msg = NULL;
        }
        if (!msg) {
            status = -EBADMSG;
            more = false;
        }
    }
    ipc_reply_fn cb = p->cb;
    void *ctx = p->ctx;
    if (!more) {
        take_pending(c, rid, true);
        free(p);
    }
    cb(c, status, msg, more, ctx);
    protobuf_c_message_free_unpacked(msg, NULL);
}

/* The host's words, as it said them, but only printable ASCII (a hostile
 * host's text goes to a terminal). */
static void keep_refusal(ipc_client *c, const char *text)
{
    size_t n = 0;
    for (; text && text[n] && n + 1 < sizeof c->refusal; n++)
        c->refusal[n] = (text[n] >= 0x20 && text[n] < 0x7f) ? text[n] : '?';
    c->refusal[n] = '\0';
}

static void on_frame(ipc_chan *chan, Perfetto__Protos__IPCFrame *f, void *ctx)
{
    (void)chan;
    ipc_client *c = ctx;
    if (c->destroyed)
        return;
    uint64_t rid = f->has_request_id ? f->request_id : 0;
    c->in_cb++;
    switch (f->msg_case) {
    case PERFETTO__PROTOS__IPCFRAME__MSG_MSG_BIND_SERVICE_REPLY:
        if (c->bind_request_id && rid == c->bind_request_id)
            on_bind_reply(c, f->msg_bind_service_reply);
        break;
    case PERFETTO__PROTOS__IPCFRAME__MSG_MSG_INVOKE_METHOD_REPLY:
        on_invoke_reply(c, rid, f->msg_invoke_method_reply);
        break;
    case PERFETTO__PROTOS__IPCFRAME__MSG_MSG_REQUEST_ERROR: {
        if (!f->has_request_id) {
            keep_refusal(c, f->msg_request_error->error);
            break;
        }
        if (c->bind_request_id && rid == c->bind_request_id) {
            Perfetto__Protos__IPCFrame__BindServiceReply no =
                PERFETTO__PROTOS__IPCFRAME__BIND_SERVICE_REPLY__INIT;
            on_bind_reply(c, &no);
            break;
        }
        pending *p = take_pending(c, rid, true);
        if (p) {
            ipc_reply_fn cb = p->cb;
            void *cctx = p->ctx;
            free(p);
            cb(c, -EPROTO, NULL, false, cctx);
        }
        break;
    }
    default:
        break; /* hosts send nothing else to clients: ignore */
    }
    c->in_cb--;
    if (c->destroyed && c->in_cb == 0)
        free_client(c);
}

static void on_close(ipc_chan *chan, int err, void *ctx)
{
    (void)chan;
    ipc_client *c = ctx;
    c->connected = false;
    c->bound = false;
    c->in_cb++;
    while (c->pend && !gone(c)) {
        pending *p = c->pend;
        c->pend = p->next;
        ipc_reply_fn cb = p->cb;
        void *pctx = p->ctx;
        free(p);
        cb(c, -ECONNRESET, NULL, false, pctx);
    }
    if (!gone(c) && c->cbs.on_disconnect)
        c->cbs.on_disconnect(c, err, c->ctx);
    c->in_cb--;
    if (c->destroyed && c->in_cb == 0)
        free_client(c);
}

ipc_client *ipc_client_create_from_fd(ipc_loop *loop, int sock_fd,
                                      const char *service_name,
                                      const ipc_client_cbs *cbs, void *ctx,
                                      int *err)
{
    int rc = -ENOMEM;
    ipc_client *c = calloc(1, sizeof *c);
    if (!c)
        goto fail;
    c->loop = loop;
    if (cbs)
        c->cbs = *cbs;
    c->ctx = ctx;
    static const ipc_chan_cbs chan_cbs = { on_frame, on_close };
    c->chan = ipc_chan_create(loop, sock_fd, &chan_cbs, c);
    if (!c->chan) {
        rc = -errno;
        goto fail;
    }
    sock_fd = -1; /* the channel owns it now */
    c->connected = true;
    Perfetto__Protos__IPCFrame f = PERFETTO__PROTOS__IPCFRAME__INIT;
    Perfetto__Protos__IPCFrame__BindService b =
        PERFETTO__PROTOS__IPCFRAME__BIND_SERVICE__INIT;
    b.service_name = (char *)service_name;
    f.has_request_id = true;
    f.request_id = c->bind_request_id = ++c->last_request_id;
    f.msg_case = PERFETTO__PROTOS__IPCFRAME__MSG_MSG_BIND_SERVICE;
    f.msg_bind_service = &b;
    rc = ipc_chan_send(c->chan, &f, -1);
    if (rc < 0)
        goto fail;
    return c;
fail:
    if (c)
        ipc_chan_destroy(c->chan);
    if (sock_fd >= 0)
        close(sock_fd);
    free(c);
    if (err)
        *err = rc;
    return NULL;
}

ipc_client *ipc_client_connect(ipc_loop *loop, const char *path,
                               const char *service_name,
                               const ipc_client_cbs *cbs, void *ctx,
                               int *err)
{
    int fd = ipc_sock_connect(path);
    int rc = fd < 0 ? fd : ipc_sock_check_peer(fd, NULL);
    if (rc < 0) {
        /* Not root's or ours: whoever listens there gets nothing. */
        if (fd >= 0)
            close(fd);
        if (err)
            *err = rc;
        return NULL;
    }
    return ipc_client_create_from_fd(loop, fd, service_name, cbs, ctx, err);
}

void ipc_client_destroy(ipc_client *client)
{
    if (!client)
        return;
    if (client->in_cb) {
        client->destroyed = true;
        return;
    }
    free_client(client);
}

bool ipc_client_is_bound(const ipc_client *client)
{
    return client->bound;
}

bool ipc_client_is_connected(const ipc_client *client)
{
    return client->connected;
}

static const method_info *find_method(const ipc_client *c, const char *name)
{
    for (size_t i = 0; i < c->n_methods; i++)
        if (strcmp(c->methods[i].name, name) == 0)
            return &c->methods[i];
    return NULL;
}

bool ipc_client_has_method(const ipc_client *client, const char *method)
{
    return find_method(client, method) != NULL;
}

int64_t ipc_client_invoke_raw(ipc_client *client, const char *method,
                              const uint8_t *args, size_t args_len, int fd,
                              const ProtobufCMessageDescriptor *reply_desc,
                              ipc_reply_fn cb, void *cb_ctx)
{
    if (!client->bound || !client->connected || client->destroyed)
        return -ENOTCONN;
    const method_info *m = find_method(client, method);
    if (!m)
        return -ENOENT;
    pending *p = NULL;
    if (cb) {
        p = calloc(1, sizeof *p);
        if (!p)
            return -ENOMEM;
    }
    static uint8_t empty[1];
    Perfetto__Protos__IPCFrame f = PERFETTO__PROTOS__IPCFRAME__INIT;
    Perfetto__Protos__IPCFrame__InvokeMethod im =
        PERFETTO__PROTOS__IPCFRAME__INVOKE_METHOD__INIT;
    uint64_t rid = client->last_request_id + 1;
    f.has_request_id = true;
    f.request_id = rid;
    f.msg_case = PERFETTO__PROTOS__IPCFRAME__MSG_MSG_INVOKE_METHOD;
    f.msg_invoke_method = &im;
    im.has_service_id = true;
    im.service_id = client->service_id;
    im.has_method_id = true;
    im.method_id = m->id;
    im.has_args_proto = true;
    im.args_proto.data = args ? (uint8_t *)args : empty;
    im.args_proto.len = args ? args_len : 0;
    if (!cb) {
        im.has_drop_reply = true;
        im.drop_reply = true;
    }
    int rc = ipc_chan_send(client->chan, &f, fd);
    if (rc < 0) {
        free(p);
        return rc == -EPIPE ? -ENOTCONN : rc;
    }
    client->last_request_id = rid;
    if (p) {
        p->request_id = rid;
        p->reply_desc = reply_desc;
        p->cb = cb;
        p->ctx = cb_ctx;
        p->next = client->pend;
        client->pend = p;
    }
    return (int64_t)rid;
}

int64_t ipc_client_invoke(ipc_client *client, const char *method,
                          const ProtobufCMessage *args, int fd,
                          const ProtobufCMessageDescriptor *reply_desc,
                          ipc_reply_fn cb, void *cb_ctx)
{
    if (!client->bound || !client->connected || client->destroyed)
        return -ENOTCONN;
    uint8_t *buf;
    size_t len;
    int rc = ipc__pack_msg(args, &buf, &len);
    if (rc < 0)
        return rc;
    int64_t r = ipc_client_invoke_raw(client, method, buf, len, fd,
                                      reply_desc, cb, cb_ctx);
    free(buf);
    return r;
}

int ipc_client_take_fd(ipc_client *client)
{
    return ipc_chan_take_fd(client->chan);
}

size_t ipc_client_tx_queued_bytes(const ipc_client *client)
{
    return ipc_chan_tx_queued_bytes(client->chan);
}

uint64_t ipc_client_dropped_frames(const ipc_client *client)
{
    return ipc_chan_dropped_frames(client->chan);
}

int ipc_client_send_raw_frame(ipc_client *client,
                              const Perfetto__Protos__IPCFrame *frame, int fd)
{
    if (!client->connected)
        return -ENOTCONN;
    return ipc_chan_send(client->chan, frame, fd);
}

const char *ipc_client_refusal(const ipc_client *client)
{
    return client && client->refusal[0] ? client->refusal : NULL;
}
