/*
 * ipc_host.c - the service side of Perfetto's IPC (ipc_host_*, ipc_conn_*,
 * ipc_call_*).
 *
 * Protocol handled (wire-formats.md section 7; Perfetto src/ipc/host_impl):
 *   msg_bind_service{name}  -> msg_bind_service_reply{success, service_id,
 *                              methods[{id, name}]}; service ids are the
 *                              1-based exposure order, method ids the
 *                              1-based index in the service's table.
 *   msg_invoke_method       -> the handler; unknown service/method or
 *                              undecodable args -> reply success = false
 *                              (sent even with drop_reply).
 *   set_peer_identity       -> ignored (relay only; we trust SO_PEERCRED).
 *   anything else           -> msg_request_error{"unknown request"}.
 *
 * Objects: host 1-n conn 1-n call. A conn owns its channel and its
 * unfinished calls (doubly linked). A call lives until its final reply or
 * until its conn is torn down; teardown first runs on_disconnect of every
 * service the conn used (so services drop their call pointers), then frees
 * the calls. ipc_conn_close() defers teardown to a loop task so handlers may
 * call it on their own connection.
 *
 * Admission: at most IPC_HOST_MAX_CONNS connections, the last `reserved`
 * of them only for two uids (the daemon's owner: root and its own), and
 * at most max_per_uid of one peer uid (SO_PEERCRED), so that one user
 * cannot take them all, nor several users the owner's. A connection over
 * a limit is refused: it gets one msg_request_error frame without a
 * request id saying why (our clients print it; others just see the
 * connection close), is closed, and the refusal is counted and reported
 * (on_refused, which also hears of connections dropped at a transmit
 * bound). When the process is out of descriptors (EMFILE/ENFILE), the
 * pending connection would stay in the listen queue and keep poll()
 * waking us at once, a busy loop for as long as a user holds the
 * descriptors: the host keeps one spare
 * descriptor (/dev/null), lets it go to accept and refuse that
 * connection, and takes it back; without a spare it stops listening for
 * ACCEPT_PAUSE_MS.
 *
 * Replies: all connections of one peer uid share one transmit budget
 * (uid_tx, IPC_HOST_TX_MAX_BYTES_PER_UID; see ipc_chan.c), so the
 * per-connection bound times the connections a uid may hold is not what
 * a uid that never reads can make us keep.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ipc_arena.h"
#include "ipc_int.h"

#define MAX_SERVICES 32
#define ACCEPT_PAUSE_MS 100

/* One peer uid's connections: how many (admit's per-uid limit) and the
 * transmit budget they share. Freed with its last connection. */
typedef struct uid_tx {
    struct uid_tx *next;
    uid_t uid;
    uint64_t used;
    uint32_t conns;
} uid_tx;

typedef struct svc_entry {
    const ipc_service *svc;
    void *ctx;
} svc_entry;

struct ipc_call {
    ipc_conn *conn;
    ipc_call *prev, *next;
    uint64_t request_id;
    bool drop_reply;
    const uint8_t *raw;   /* args bytes, valid during the handler only */
    size_t raw_len;
};

struct ipc_conn {
    ipc_host *host;
    ipc_conn *prev, *next;
    ipc_chan *chan;
    uint64_t id;
    void *data;
    uint32_t used_services; /* bit i: service i+1 was bound or invoked */
    ipc_call *calls;
    uint64_t close_task;
    bool tearing_down;
    uid_tx *tx;           /* its uid's budget */
};

struct ipc_host {
    ipc_loop *loop;
    int listen_fd;
    char *path;           /* unlinked on destroy if still our socket */
    dev_t path_dev;
    ino_t path_ino;
    svc_entry svcs[MAX_SERVICES];
    uint32_t n_svcs;
    ipc_conn *conns;
    size_t n_conns;
    uint32_t max_per_uid;   /* 0: IPC_HOST_MAX_CONNS only */
    uint32_t reserved;      /* the last connections, kept for: */
    uid_t reserved_for[2];
    uint64_t refused;
    ipc_refused_fn on_refused;
    void *refused_ctx;
    int spare_fd;           /* /dev/null, given up to accept at EMFILE */
    uint64_t resume_timer;  /* listening paused: the timer to resume */
    uid_tx *tx_budgets;
    uint64_t tx_max_per_uid;
    uint64_t next_conn_id;
    ipc_arena args_arena;   /* decodes method arguments (on_invoke) */
};

/* ---- calls -------------------------------------------------------- */

static void unlink_call(ipc_call *call)
{
    ipc_conn *c = call->conn;
    if (call->prev)
        call->prev->next = call->next;
    else
        c->calls = call->next;
    if (call->next)
        call->next->prev = call->prev;
    free(call);
}

static int send_reply(ipc_conn *conn, uint64_t request_id, bool success,
                      bool has_more, const uint8_t *data, size_t len, int fd)
{
    Perfetto__Protos__IPCFrame f = PERFETTO__PROTOS__IPCFRAME__INIT;
    Perfetto__Protos__IPCFrame__InvokeMethodReply r =
        PERFETTO__PROTOS__IPCFRAME__INVOKE_METHOD_REPLY__INIT;
    f.has_request_id = true;
    f.request_id = request_id;
    f.msg_case = PERFETTO__PROTOS__IPCFRAME__MSG_MSG_INVOKE_METHOD_REPLY;
    f.msg_invoke_method_reply = &r;
    r.has_success = true;
    r.success = success;
    if (has_more) {
        r.has_has_more = true;
        r.has_more = true;
    }
    if (success) {
        r.has_reply_proto = true;
        r.reply_proto.data = (uint8_t *)data;
        r.reply_proto.len = len;
    }
    return ipc_chan_send(conn->chan, &f, fd);
}

int ipc_call_reply_fd(ipc_call *call, const ProtobufCMessage *reply,
                      bool has_more, int fd)
{
    int rc = 0;
    if (!call->drop_reply) {
        uint8_t *buf;
        size_t len;
        rc = ipc__pack_msg(reply, &buf, &len);
        if (rc < 0)
            return rc;
        rc = send_reply(call->conn, call->request_id, true, has_more, buf,
                        len, fd);
        free(buf);
        if (rc == -EMSGSIZE || rc == -ENOMEM || rc == -EBADF)
            return rc; /* nothing sent; the call stays open */
        /* -EPIPE: the peer is gone; teardown will follow. */
    }
    if (!has_more)
        unlink_call(call);
    return rc == -EPIPE ? 0 : rc;
}

int ipc_call_reply(ipc_call *call, const ProtobufCMessage *reply,
                   bool has_more)
{
    return ipc_call_reply_fd(call, reply, has_more, -1);
}

void ipc_call_fail(ipc_call *call)
{
    if (!call->drop_reply)
        send_reply(call->conn, call->request_id, false, false, NULL, 0, -1);
    unlink_call(call);
}

ipc_conn *ipc_call_conn(const ipc_call *call)
{
    return call->conn;
}

int ipc_call_take_fd(ipc_call *call)
{
    return ipc_chan_take_fd(call->conn->chan);
}

const uint8_t *ipc_call_args_raw(const ipc_call *call, size_t *len)
{
    *len = call->raw_len;
    return call->raw;
}

uint64_t ipc_call_request_id(const ipc_call *call)
{
    return call->request_id;
}

bool ipc_call_drop_reply(const ipc_call *call)
{
    return call->drop_reply;
}

/* ---- connections -------------------------------------------------- */

uid_t ipc_conn_uid(const ipc_conn *conn)
{
    return ipc_chan_peer_uid(conn->chan);
}

pid_t ipc_conn_pid(const ipc_conn *conn)
{
    return ipc_chan_peer_pid(conn->chan);
}

uint64_t ipc_conn_id(const ipc_conn *conn)
{
    return conn->id;
}

void ipc_conn_set_data(ipc_conn *conn, void *data)
{
    conn->data = data;
}

void *ipc_conn_data(const ipc_conn *conn)
{
    return conn->data;
}

size_t ipc_conn_tx_queued_bytes(const ipc_conn *conn)
{
    return ipc_chan_tx_queued_bytes(conn->chan);
}

uint64_t ipc_conn_dropped_frames(const ipc_conn *conn)
{
    return ipc_chan_dropped_frames(conn->chan);
}

static uid_tx *uid_find(const ipc_host *h, uid_t uid)
{
    for (uid_tx *t = h->tx_budgets; t; t = t->next)
        if (t->uid == uid)
            return t;
    return NULL;
}

/* The uid's entry, made if it has none (NULL: no memory). */
static uid_tx *uid_get(ipc_host *h, uid_t uid)
{
    uid_tx *t = uid_find(h, uid);
    if (t)
        return t;
    t = calloc(1, sizeof *t);
    if (!t)
        return NULL;
    t->uid = uid;
    t->next = h->tx_budgets;
    h->tx_budgets = t;
    return t;
}

/* Frees t once no connection uses it. */
static void uid_put(ipc_host *h, uid_tx *t)
{
    if (t->conns)
        return;
    uid_tx **pp = &h->tx_budgets;
    while (*pp != t)
        pp = &(*pp)->next;
    *pp = t->next;
    free(t);
}

static void teardown(ipc_conn *conn)
{
    if (conn->tearing_down)
        return;
    conn->tearing_down = true;
    ipc_host *h = conn->host;
    if (conn->close_task)
        ipc_loop_cancel_timer(h->loop, conn->close_task);
    for (uint32_t i = 0; i < h->n_svcs; i++)
        if ((conn->used_services & (1u << i)) && h->svcs[i].svc->on_disconnect)
            h->svcs[i].svc->on_disconnect(conn, h->svcs[i].ctx);
    while (conn->calls)
        unlink_call(conn->calls);
    /* The chan may outlive this (freed after its callback returns): it
     * must not count into a budget freed here. */
    ipc_chan_set_tx_budget(conn->chan, NULL, 0);
    conn->tx->conns--;
    uid_put(h, conn->tx);
    ipc_chan_destroy(conn->chan);
    if (conn->prev)
        conn->prev->next = conn->next;
    else
        h->conns = conn->next;
    if (conn->next)
        conn->next->prev = conn->prev;
    h->n_conns--;
    free(conn);
}

static void close_task(void *ctx)
{
    ipc_conn *conn = ctx;
    conn->close_task = 0;
    teardown(conn);
}

void ipc_conn_close(ipc_conn *conn)
{
    if (conn->close_task || conn->tearing_down)
        return;
    conn->close_task = ipc_loop_add_timer(conn->host->loop, 0, 0, close_task,
                                          conn);
    if (!conn->close_task)
        teardown(conn); /* out of memory: tear down now */
}

/* ---- frame dispatch ----------------------------------------------- */

static void on_bind(ipc_conn *conn, uint64_t rid,
                    const Perfetto__Protos__IPCFrame__BindService *b)
{
    ipc_host *h = conn->host;
    Perfetto__Protos__IPCFrame f = PERFETTO__PROTOS__IPCFRAME__INIT;
    Perfetto__Protos__IPCFrame__BindServiceReply r =
        PERFETTO__PROTOS__IPCFRAME__BIND_SERVICE_REPLY__INIT;
    f.has_request_id = true;
    f.request_id = rid;
    f.msg_case = PERFETTO__PROTOS__IPCFRAME__MSG_MSG_BIND_SERVICE_REPLY;
    f.msg_bind_service_reply = &r;
    r.has_success = true;
    const svc_entry *e = NULL;
    uint32_t idx = 0;
    for (uint32_t i = 0; b->service_name && i < h->n_svcs; i++) {
        if (strcmp(h->svcs[i].svc->name, b->service_name) == 0) {
            e = &h->svcs[i];
            idx = i;
        }
    }
    Perfetto__Protos__IPCFrame__BindServiceReply__MethodInfo *infos = NULL;
    Perfetto__Protos__IPCFrame__BindServiceReply__MethodInfo **ptrs = NULL;
    if (e) {
        uint32_t n = e->svc->n_methods;
        infos = calloc(n ? n : 1, sizeof *infos);
        ptrs = calloc(n ? n : 1, sizeof *ptrs);
        if (!infos || !ptrs) {
            free(infos);
            free(ptrs);
            ipc_conn_close(conn);
            return;
        }
        for (uint32_t i = 0; i < n; i++) {
            perfetto__protos__ipcframe__bind_service_reply__method_info__init(
                &infos[i]);
            infos[i].has_id = true;
            infos[i].id = i + 1;
            infos[i].name = (char *)e->svc->methods[i].name;
            ptrs[i] = &infos[i];
        }
        r.success = true;
        r.has_service_id = true;
        r.service_id = idx + 1;
        r.n_methods = n;
        r.methods = ptrs;
        conn->used_services |= 1u << idx;
    }
    ipc_chan_send(conn->chan, &f, -1);
    free(infos);
    free(ptrs);
}

/* Frees arguments decoded with allocator al (the host's arena or, if NULL,
 * malloc); args may be NULL (a failed decode). */
static void free_args(ipc_host *h, ProtobufCAllocator *al,
                      ProtobufCMessage *args)
{
    if (al)
        ipc_arena_end(&h->args_arena);
    else
        protobuf_c_message_free_unpacked(args, NULL);
}

static void on_invoke(ipc_conn *conn, uint64_t rid,
                      const Perfetto__Protos__IPCFrame__InvokeMethod *m)
{
    ipc_host *h = conn->host;
    if (!m->has_service_id || m->service_id == 0 ||
        m->service_id > h->n_svcs) {
        send_reply(conn, rid, false, false, NULL, 0, -1);
        return;
    }
    const svc_entry *e = &h->svcs[m->service_id - 1];
    if (!m->has_method_id || m->method_id == 0 ||
        m->method_id > e->svc->n_methods) {
        send_reply(conn, rid, false, false, NULL, 0, -1);
        return;
    }
    const ipc_method *meth = &e->svc->methods[m->method_id - 1];
    conn->used_services |= 1u << (m->service_id - 1);
    const uint8_t *raw = m->has_args_proto ? m->args_proto.data : NULL;
    size_t raw_len = m->has_args_proto ? m->args_proto.len : 0;
    ProtobufCMessage *args = NULL;
    /* The arguments are decoded into the host's arena (ipc_arena.h), or
     * with malloc if a handler up the stack is still using it. */
    ProtobufCAllocator *al = NULL;
    if (meth->args_desc) {
        static const uint8_t empty[1];
        al = ipc_arena_begin(&h->args_arena);
        args = protobuf_c_message_unpack(meth->args_desc, al, raw_len,
                                         raw ? raw : empty);
        if (!args || !ipc_message_well_formed(args)) {
            free_args(h, al, args);       /* also ends the arena's use */
            send_reply(conn, rid, false, false, NULL, 0, -1);
            return;
        }
    }
    ipc_call *call = calloc(1, sizeof *call);
    if (!call) {
        free_args(h, al, args);
        send_reply(conn, rid, false, false, NULL, 0, -1);
        return;
    }
    call->conn = conn;
    call->request_id = rid;
    call->drop_reply = m->has_drop_reply && m->drop_reply;
    call->raw = raw;
    call->raw_len = raw_len;
    call->next = conn->calls;
    if (conn->calls)
        conn->calls->prev = call;
    conn->calls = call;
    /* The call may be finished (freed) inside the handler: do not touch it
     * afterwards. */
    meth->fn(call, args, e->ctx);
    free_args(h, al, args);
    /* Calls left open must not keep pointing at the freed frame. */
    for (ipc_call *c = conn->calls; c; c = c->next)
        if (c->raw == raw) {
            c->raw = NULL;
            c->raw_len = 0;
        }
}

static void on_frame(ipc_chan *chan, Perfetto__Protos__IPCFrame *f, void *ctx)
{
    (void)chan;
    ipc_conn *conn = ctx;
    if (conn->close_task)
        return; /* closing: ignore the rest of what it sent */
    uint64_t rid = f->has_request_id ? f->request_id : 0;
    switch (f->msg_case) {
    case PERFETTO__PROTOS__IPCFRAME__MSG_MSG_BIND_SERVICE:
        on_bind(conn, rid, f->msg_bind_service);
        break;
    case PERFETTO__PROTOS__IPCFRAME__MSG_MSG_INVOKE_METHOD:
        on_invoke(conn, rid, f->msg_invoke_method);
        break;
    case PERFETTO__PROTOS__IPCFRAME__MSG_SET_PEER_IDENTITY:
        break; /* only relays may set it; never on a local socket */
    default: {
        Perfetto__Protos__IPCFrame r = PERFETTO__PROTOS__IPCFRAME__INIT;
        Perfetto__Protos__IPCFrame__RequestError e =
            PERFETTO__PROTOS__IPCFRAME__REQUEST_ERROR__INIT;
        r.has_request_id = true;
        r.request_id = rid;
        r.msg_case = PERFETTO__PROTOS__IPCFRAME__MSG_MSG_REQUEST_ERROR;
        r.msg_request_error = &e;
        e.error = (char *)"unknown request";
        ipc_chan_send(conn->chan, &r, -1);
        break;
    }
    }
}

static void on_chan_close(ipc_chan *chan, int err, void *ctx)
{
    ipc_conn *conn = ctx;
    ipc_host *h = conn->host;
    if (err == -ENOBUFS && h->on_refused) {
        char why[160];
        snprintf(why, sizeof why, "it did not read its replies (%u MiB "
                 "queued for the connection, or %llu MiB for its uid on "
                 "this socket)", IPC_CHAN_TX_MAX_BYTES >> 20,
                 (unsigned long long)(h->tx_max_per_uid >> 20));
        h->on_refused(h->refused_ctx, ipc_chan_peer_uid(chan), true, why);
    }
    teardown(conn);
}

static uid_t sock_peer_uid(int fd)
{
    struct ucred cr;
    socklen_t len = sizeof cr;
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &len) == 0 &&
        len == sizeof cr)
        return cr.uid;
    return (uid_t)-1;
}

/* Tell the peer why, close, count, report. Never blocks: the socket is
 * non-blocking and the frame small (a full socket buffer loses the text,
 * not the refusal). */
static void refuse(ipc_host *h, int fd, uid_t uid, const char *why)
{
    Perfetto__Protos__IPCFrame f = PERFETTO__PROTOS__IPCFRAME__INIT;
    Perfetto__Protos__IPCFrame__RequestError e =
        PERFETTO__PROTOS__IPCFRAME__REQUEST_ERROR__INIT;
    e.error = (char *)why;
    f.msg_case = PERFETTO__PROTOS__IPCFRAME__MSG_MSG_REQUEST_ERROR;
    f.msg_request_error = &e;
    uint8_t *bytes;
    size_t len;
    if (ipc_frame_pack(&f, &bytes, &len) == 0) {
        ssize_t n = send(fd, bytes, len, MSG_NOSIGNAL | MSG_DONTWAIT);
        (void)n;
        free(bytes);
    }
    close(fd);
    h->refused++;
    if (h->on_refused)
        h->on_refused(h->refused_ctx, uid, false, why);
}

/* 0, or why this peer may not connect now (into why). */
static int admit(const ipc_host *h, uid_t uid, char *why, size_t len)
{
    if (h->n_conns >= IPC_HOST_MAX_CONNS) {
        snprintf(why, len, "the tracing service has %zu connections on this "
                 "socket, its limit; try again later", h->n_conns);
        return -EMFILE;
    }
    if (h->reserved && h->n_conns + h->reserved >= IPC_HOST_MAX_CONNS &&
        uid != h->reserved_for[0] && uid != h->reserved_for[1]) {
        snprintf(why, len, "the tracing service has %zu connections on this "
                 "socket, and keeps the last %u of its %u for root and its "
                 "own uid; try again later", h->n_conns, h->reserved,
                 IPC_HOST_MAX_CONNS);
        return -EMFILE;
    }
    if (!h->max_per_uid)
        return 0;
    const uid_tx *t = uid_find(h, uid);
    uint32_t mine = t ? t->conns : 0;
    if (mine < h->max_per_uid)
        return 0;
    snprintf(why, len, "uid %ld has %u connections to this socket of the "
             "tracing service, the most one uid may have (shmtraced "
             "--max-connections-per-uid); close some of them",
             uid == (uid_t)-1 ? -1L : (long)uid, mine);
    return -EUSERS;
}

static int adopt(ipc_host *host, int sock_fd, uid_t uid)
{
    ipc_conn *conn = calloc(1, sizeof *conn);
    uid_tx *tx = uid_get(host, uid);
    if (!conn || !tx) {
        free(conn);
        if (tx)
            uid_put(host, tx);
        return -ENOMEM;
    }
    static const ipc_chan_cbs cbs = { on_frame, on_chan_close };
    conn->chan = ipc_chan_create(host->loop, sock_fd, &cbs, conn);
    if (!conn->chan) {
        int rc = -errno;
        free(conn);
        uid_put(host, tx);
        return rc;
    }
    conn->tx = tx;
    tx->conns++;
    ipc_chan_set_tx_budget(conn->chan, &tx->used, host->tx_max_per_uid);
    conn->host = host;
    conn->id = ++host->next_conn_id;
    conn->next = host->conns;
    if (host->conns)
        host->conns->prev = conn;
    host->conns = conn;
    host->n_conns++;
    return 0;
}

int ipc_host_adopt_client(ipc_host *host, int sock_fd)
{
    char why[256];
    uid_t uid = sock_peer_uid(sock_fd);
    int rc = admit(host, uid, why, sizeof why);
    return rc < 0 ? rc : adopt(host, sock_fd, uid);
}

static void on_accept(ipc_loop *loop, int fd, short revents, void *ctx);

static void resume_listening(void *ctx)
{
    ipc_host *h = ctx;
    h->resume_timer = 0;
    if (h->spare_fd < 0)
        h->spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    ipc_loop_watch_fd(h->loop, h->listen_fd, POLLIN, on_accept, h);
}

/* Out of descriptors: refuse the connection at the head of the queue
 * with the spare one, or stop listening for a while. */
static void accept_without_fds(ipc_host *h)
{
    static const char why[] = "the tracing service is out of file "
        "descriptors (RLIMIT_NOFILE); try again later";
    if (h->spare_fd >= 0) {
        close(h->spare_fd);
        h->spare_fd = -1;
        int s = accept4(h->listen_fd, NULL, NULL,
                        SOCK_NONBLOCK | SOCK_CLOEXEC);
        bool drained = s < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
        if (s >= 0)
            refuse(h, s, sock_peer_uid(s), why);
        h->spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
        if ((s >= 0 || drained) && h->spare_fd >= 0)
            return;
    }
    ipc_loop_unwatch_fd(h->loop, h->listen_fd);
    h->resume_timer = ipc_loop_add_timer(h->loop, ACCEPT_PAUSE_MS, 0,
                                         resume_listening, h);
    if (!h->resume_timer)   /* no memory for a timer: listen again */
        ipc_loop_watch_fd(h->loop, h->listen_fd, POLLIN, on_accept, h);
}

static void on_accept(ipc_loop *loop, int fd, short revents, void *ctx)
{
    (void)loop; (void)revents;
    ipc_host *h = ctx;
    for (int i = 0; i < 64; i++) {
        int s = accept4(fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (s < 0) {
            if (errno == EMFILE || errno == ENFILE)
                accept_without_fds(h);
            return; /* EAGAIN, or a transient error: retry on next poll */
        }
        char why[256];
        uid_t uid = sock_peer_uid(s);
        if (admit(h, uid, why, sizeof why) < 0)
            refuse(h, s, uid, why);
        else if (adopt(h, s, uid) < 0)
            refuse(h, s, uid, "the tracing service is out of memory");
    }
}

/* ---- host --------------------------------------------------------- */

ipc_host *ipc_host_create_from_fd(ipc_loop *loop, int listen_fd, int *err)
{
    ipc_host *h = calloc(1, sizeof *h);
    int rc = -ENOMEM;
    if (!h)
        goto fail;
    h->loop = loop;
    h->listen_fd = listen_fd;
    h->spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    h->tx_max_per_uid = IPC_HOST_TX_MAX_BYTES_PER_UID;
    ipc_arena_init(&h->args_arena);
    if (listen_fd >= 0) {
        rc = ipc__set_nonblock_cloexec(listen_fd);
        if (rc == 0)
            rc = ipc_loop_watch_fd(loop, listen_fd, POLLIN, on_accept, h);
        if (rc < 0)
            goto fail;
    }
    return h;
fail:
    if (h && h->spare_fd >= 0)
        close(h->spare_fd);
    free(h);
    if (err)
        *err = rc;
    return NULL;
}

ipc_host *ipc_host_create(ipc_loop *loop, const char *path, mode_t mode,
                          int *err)
{
    int fd = ipc_sock_listen(path, mode);
    if (fd < 0) {
        if (err)
            *err = fd;
        return NULL;
    }
    ipc_host *h = ipc_host_create_from_fd(loop, fd, err);
    if (!h) {
        close(fd);
        if (path[0] != '@')
            unlink(path);
        return NULL;
    }
    struct stat st;
    if (path[0] != '@' && lstat(path, &st) == 0) {
        h->path = strdup(path);
        h->path_dev = st.st_dev;
        h->path_ino = st.st_ino;
    }
    return h;
}

void ipc_host_destroy(ipc_host *host)
{
    if (!host)
        return;
    while (host->conns)
        teardown(host->conns);
    if (host->listen_fd >= 0) {
        ipc_loop_unwatch_fd(host->loop, host->listen_fd);
        close(host->listen_fd);
    }
    ipc_loop_cancel_timer(host->loop, host->resume_timer);
    if (host->spare_fd >= 0)
        close(host->spare_fd);
    struct stat st;
    /* Only remove the path if it is still the socket we created. */
    if (host->path && lstat(host->path, &st) == 0 &&
        st.st_dev == host->path_dev && st.st_ino == host->path_ino)
        unlink(host->path);
    free(host->path);
    ipc_arena_fini(&host->args_arena);
    free(host);
}

int ipc_host_expose_service(ipc_host *host, const ipc_service *svc,
                            void *svc_ctx)
{
    if (!svc || !svc->name || (svc->n_methods && !svc->methods))
        return -EINVAL;
    for (uint32_t i = 0; i < svc->n_methods; i++)
        if (!svc->methods[i].name || !svc->methods[i].fn)
            return -EINVAL;
    for (uint32_t i = 0; i < host->n_svcs; i++)
        if (strcmp(host->svcs[i].svc->name, svc->name) == 0)
            return -EEXIST;
    if (host->n_svcs == MAX_SERVICES)
        return -ENOSPC;
    host->svcs[host->n_svcs].svc = svc;
    host->svcs[host->n_svcs].ctx = svc_ctx;
    host->n_svcs++;
    return 0;
}

size_t ipc_host_num_conns(const ipc_host *host)
{
    return host->n_conns;
}

void ipc_host_set_max_conns_per_uid(ipc_host *host, uint32_t n)
{
    host->max_per_uid = n;
}

void ipc_host_set_reserved_conns(ipc_host *host, uint32_t n, uid_t a,
                                 uid_t b)
{
    host->reserved = n < IPC_HOST_MAX_CONNS ? n : IPC_HOST_MAX_CONNS;
    host->reserved_for[0] = a;
    host->reserved_for[1] = b;
}

void ipc_host_set_refused_cb(ipc_host *host, ipc_refused_fn fn, void *ctx)
{
    host->on_refused = fn;
    host->refused_ctx = ctx;
}

uint64_t ipc_host_refused(const ipc_host *host)
{
    return host->refused;
}

void ipc_host_set_tx_max_per_uid(ipc_host *host, uint64_t bytes)
{
    host->tx_max_per_uid = bytes ? bytes : IPC_HOST_TX_MAX_BYTES_PER_UID;
    for (ipc_conn *c = host->conns; c; c = c->next)
        ipc_chan_set_tx_budget(c->chan, &c->tx->used, host->tx_max_per_uid);
}
