/*
 * ipc_chan.c - buffered non-blocking frame channel over an AF_UNIX
 * SOCK_STREAM socket, with SCM_RIGHTS fd passing (ipc_chan_*).
 *
 * Transmit: a FIFO of segments, one per frame {bytes, off, fd}. Sending is
 * attempted at once; what the kernel does not take waits for POLLOUT.
 * A segment with an fd is sent by its own sendmsg() whose first byte
 * carries the SCM_RIGHTS control message (so at most one fd per sendmsg,
 * attached to the frame it belongs to); runs of fd-less segments are
 * gathered into one sendmsg() with up to TX_IOV iovecs. The fd is closed
 * (it is our dup) once the kernel accepted that first byte.
 *
 * Receive: recvmsg() straight into the decoder's buffer, then every
 * complete frame goes to on_frame. A received fd becomes the channel's
 * pending fd (Perfetto semantics: the next method/reply handled may take
 * it); a newer fd closes an untaken older one; extra fds in one message
 * are closed. To stay fair with other clients, one readiness callback does
 * at most RX_ROUNDS recvmsg() calls.
 *
 * Bound: the transmit queue never holds more than IPC_CHAN_TX_MAX_BYTES. A
 * peer that sends requests but never reads the replies would otherwise make
 * us queue replies without limit; the send that would pass the bound kills
 * the channel instead (-ENOBUFS to on_close, -EPIPE to the sender, as for
 * a peer that went away). A channel may also share a budget with others
 * (ipc_chan_set_tx_budget: the host gives all connections of one peer uid
 * one), counted in the same bytes and enforced the same way, so that many
 * non-reading connections cannot add up to gigabytes. The receive side is
 * bounded by the decoder.
 *
 * Lifetime: callbacks may destroy the channel; destruction during a
 * callback is deferred until the callback returns (in_cb/destroyed). Write
 * errors found inside ipc_chan_send() do not call on_close re-entrantly:
 * they post a zero-delay task that reports the close.
 *
 * Last words: a send that fails because the peer closed (EPIPE,
 * ECONNRESET) does not close the socket at once: frames the peer sent
 * before it went may still wait in our receive queue (a host that refuses
 * a connection says why, then closes), so they are received and
 * dispatched first, then the close is reported.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "ipc_int.h"

#define TX_IOV 64
#define RX_ROUNDS 8

typedef struct seg {
    struct seg *next;
    uint8_t *data;
    size_t len, off;
    int fd; /* -1, or our dup to send with the first byte */
} seg;

struct ipc_chan {
    ipc_loop *loop;
    int sock;
    ipc_chan_cbs cbs;
    void *ctx;
    ipc_decoder *dec;
    seg *tx_head, *tx_tail;
    size_t tx_bytes;
    uint64_t *budget_used;  /* shared transmit budget, or NULL */
    uint64_t budget_max;
    int rx_fd;            /* pending received fd or -1 */
    uid_t uid;
    pid_t pid;
    bool dead;            /* socket closed or failed; on_close owed/done */
    int tx_err;           /* a send found the peer gone: last words owed */
    bool close_reported;
    int close_err;
    uint64_t close_task;  /* timer id of a pending close report */
    int in_cb;            /* depth of our callbacks on the stack */
    bool destroyed;       /* ipc_chan_destroy() called during a callback */
};

static void free_chan(ipc_chan *c)
{
    if (c->budget_used)
        *c->budget_used -= c->tx_bytes;
    seg *s = c->tx_head;
    while (s) {
        seg *n = s->next;
        if (s->fd >= 0)
            close(s->fd);
        free(s->data);
        free(s);
        s = n;
    }
    if (c->rx_fd >= 0)
        close(c->rx_fd);
    ipc_decoder_destroy(c->dec);
    free(c);
}

static void shut(ipc_chan *c, int err)
{
    if (c->dead)
        return;
    c->dead = true;
    c->close_err = err;
    ipc_loop_unwatch_fd(c->loop, c->sock);
    close(c->sock);
    c->sock = -1;
}

/* Report on_close (once). Returns true if the channel got destroyed. */
static bool report_close(ipc_chan *c)
{
    if (c->close_reported)
        return false;
    c->close_reported = true;
    c->in_cb++;
    if (c->cbs.on_close)
        c->cbs.on_close(c, c->close_err, c->ctx);
    c->in_cb--;
    if (c->destroyed && c->in_cb == 0) {
        free_chan(c);
        return true;
    }
    return false;
}

static bool peer_gone(int err)
{
    return err == -EPIPE || err == -ECONNRESET;
}

enum { RX_IDLE = 0, RX_FREED = 1, RX_GONE = 2, RX_EOF = 3 };
static int receive(ipc_chan *c);

/* Receive the peer's last words, then close (see the top). Returns true
 * if the channel got freed. */
static bool close_after_last_words(ipc_chan *c, int err)
{
    if (!c->dead && receive(c) == RX_FREED)
        return true;
    if (c->destroyed)
        return false;   /* destroyed in a callback: no more callbacks */
    shut(c, err);
    return report_close(c);
}

static void close_task(void *ctx)
{
    ipc_chan *c = ctx;
    c->close_task = 0;
    if (c->tx_err && !c->dead)
        close_after_last_words(c, c->tx_err);
    else
        report_close(c);
}

static void fail_later(ipc_chan *c, int err)
{
    if (peer_gone(err) && !c->dead) {
        c->tx_err = err;       /* closed by close_task, after last words */
        ipc_loop_set_events(c->loop, c->sock, POLLIN);
    } else {
        shut(c, err);
    }
    if (!c->close_reported && !c->close_task)
        c->close_task = ipc_loop_add_timer(c->loop, 0, 0, close_task, c);
}

/* Push queued bytes to the kernel. 0, or negative errno on a fatal error
 * (the caller decides how to report it). */
static int flush_tx(ipc_chan *c)
{
    while (c->tx_head) {
        struct iovec iov[TX_IOV];
        int n = 0;
        union {
            struct cmsghdr h;
            char buf[CMSG_SPACE(sizeof(int))];
        } cm;
        struct msghdr mh;
        memset(&mh, 0, sizeof mh);
        seg *s = c->tx_head;
        bool with_fd = s->fd >= 0 && s->off == 0;
        if (with_fd) {
            iov[n].iov_base = s->data;
            iov[n].iov_len = s->len;
            n++;
            memset(&cm, 0, sizeof cm);
            mh.msg_control = cm.buf;
            mh.msg_controllen = sizeof cm.buf;
            struct cmsghdr *ch = CMSG_FIRSTHDR(&mh);
            ch->cmsg_level = SOL_SOCKET;
            ch->cmsg_type = SCM_RIGHTS;
            ch->cmsg_len = CMSG_LEN(sizeof(int));
            memcpy(CMSG_DATA(ch), &s->fd, sizeof(int));
        } else {
            for (; s && n < TX_IOV; s = s->next) {
                if (s->fd >= 0 && s->off == 0)
                    break; /* an fd frame starts its own sendmsg */
                iov[n].iov_base = s->data + s->off;
                iov[n].iov_len = s->len - s->off;
                n++;
            }
        }
        mh.msg_iov = iov;
        mh.msg_iovlen = (size_t)n;
        ssize_t rc = sendmsg(c->sock, &mh, MSG_NOSIGNAL);
        if (rc < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                break;
            return -errno;
        }
        size_t done = (size_t)rc;
        while (done && c->tx_head) {
            seg *h = c->tx_head;
            if (h->fd >= 0) { /* its first byte (and the fd) went out */
                close(h->fd);
                h->fd = -1;
            }
            size_t left = h->len - h->off;
            size_t take = done < left ? done : left;
            h->off += take;
            done -= take;
            c->tx_bytes -= take;
            if (c->budget_used)
                *c->budget_used -= take;
            if (h->off == h->len) {
                c->tx_head = h->next;
                if (!c->tx_head)
                    c->tx_tail = NULL;
                free(h->data);
                free(h);
            }
        }
    }
    short ev = POLLIN | (c->tx_head ? POLLOUT : 0);
    ipc_loop_set_events(c->loop, c->sock, ev);
    return 0;
}

static void stash_fds(ipc_chan *c, struct msghdr *mh)
{
    for (struct cmsghdr *ch = CMSG_FIRSTHDR(mh); ch;
         ch = CMSG_NXTHDR(mh, ch)) {
        if (ch->cmsg_level != SOL_SOCKET || ch->cmsg_type != SCM_RIGHTS)
            continue;
        size_t n = (ch->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        for (size_t i = 0; i < n; i++) {
            int fd;
            memcpy(&fd, CMSG_DATA(ch) + i * sizeof(int), sizeof fd);
            if (i == 0) {
                if (c->rx_fd >= 0)
                    close(c->rx_fd);
                c->rx_fd = fd;
            } else {
                close(fd); /* more than one fd per message: not ours */
            }
        }
    }
}

/* Dispatch complete frames. Returns true if the channel was destroyed. */
static bool dispatch(ipc_chan *c)
{
    for (;;) {
        Perfetto__Protos__IPCFrame *f;
        int rc = ipc_decoder_next(c->dec, &f);
        if (rc == 0)
            return false;
        if (rc < 0) {
            shut(c, rc);
            return report_close(c);
        }
        c->in_cb++;
        if (c->cbs.on_frame)
            c->cbs.on_frame(c, f, c->ctx);
        c->in_cb--;
        perfetto__protos__ipcframe__free_unpacked(f, NULL);
        if (c->destroyed && c->in_cb == 0) {
            free_chan(c);
            return true;
        }
        if (c->destroyed || c->dead)
            return false;
    }
}

static void on_ready(ipc_loop *loop, int fd, short revents, void *ctx)
{
    (void)loop; (void)fd;
    ipc_chan *c = ctx;
    if ((revents & POLLOUT) && !c->tx_err) {
        int rc = flush_tx(c);
        if (rc < 0) {
            if (peer_gone(rc))
                close_after_last_words(c, rc);
            else {
                shut(c, rc);
                report_close(c);
            }
            return;
        }
    }
    if (!(revents & (POLLIN | POLLHUP | POLLERR)))
        return;
    int r = receive(c);
    if (r == RX_EOF || r < 0) {
        shut(c, r == RX_EOF ? (c->tx_err ? c->tx_err : 0) : r);
        report_close(c);
    }
}

/* Receive and dispatch what the socket holds, at most RX_ROUNDS reads:
 * RX_IDLE when it holds no more for now, RX_FREED when the channel was
 * freed (do not touch it), RX_GONE when a callback destroyed or killed
 * it, RX_EOF at the peer's orderly close, or a negative errno (the caller
 * closes). */
static int receive(ipc_chan *c)
{
    for (int round = 0; round < RX_ROUNDS; round++) {
        size_t avail;
        uint8_t *p = ipc_decoder_write_ptr(c->dec, &avail);
        if (avail == 0) /* cannot happen: a full buffer holds a frame */
            return -EMSGSIZE;
        struct iovec iov = { .iov_base = p, .iov_len = avail };
        union {
            struct cmsghdr h;
            char buf[CMSG_SPACE(8 * sizeof(int))];
        } cm;
        struct msghdr mh;
        memset(&mh, 0, sizeof mh);
        mh.msg_iov = &iov;
        mh.msg_iovlen = 1;
        mh.msg_control = cm.buf;
        mh.msg_controllen = sizeof cm.buf;
        ssize_t rc = recvmsg(c->sock, &mh, MSG_CMSG_CLOEXEC);
        if (rc < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                return RX_IDLE;
            return -errno;
        }
        stash_fds(c, &mh);
        if (rc == 0)
            return RX_EOF;
        ipc_decoder_commit(c->dec, (size_t)rc);
        if (dispatch(c))
            return RX_FREED;
        if (c->dead || c->destroyed)
            return RX_GONE;
        if ((size_t)rc < avail)
            return RX_IDLE; /* drained */
    }
    return RX_IDLE;
}

ipc_chan *ipc_chan_create(ipc_loop *loop, int sock_fd, const ipc_chan_cbs *cbs,
                          void *ctx)
{
    ipc_chan *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    c->dec = ipc_decoder_create();
    if (!c->dec) {
        free(c);
        errno = ENOMEM;
        return NULL;
    }
    int rc = ipc__set_nonblock_cloexec(sock_fd);
    if (rc < 0) {
        ipc_decoder_destroy(c->dec);
        free(c);
        errno = -rc;
        return NULL;
    }
    c->loop = loop;
    c->sock = sock_fd;
    c->cbs = *cbs;
    c->ctx = ctx;
    c->rx_fd = -1;
    c->uid = (uid_t)-1;
    c->pid = (pid_t)-1;
    struct ucred cr;
    socklen_t crlen = sizeof cr;
    if (getsockopt(sock_fd, SOL_SOCKET, SO_PEERCRED, &cr, &crlen) == 0 &&
        crlen == sizeof cr) {
        c->uid = cr.uid;
        c->pid = cr.pid;
    }
    rc = ipc_loop_watch_fd(loop, sock_fd, POLLIN, on_ready, c);
    if (rc < 0) {
        ipc_decoder_destroy(c->dec);
        free(c);
        errno = -rc;
        return NULL;
    }
    return c;
}

void ipc_chan_destroy(ipc_chan *chan)
{
    if (!chan)
        return;
    if (chan->close_task)
        ipc_loop_cancel_timer(chan->loop, chan->close_task);
    chan->close_task = 0;
    chan->close_reported = true; /* no callbacks after destroy */
    shut(chan, 0);
    if (chan->in_cb) {
        chan->destroyed = true;
        return;
    }
    free_chan(chan);
}

int ipc_chan_send(ipc_chan *chan, const Perfetto__Protos__IPCFrame *frame,
                  int fd)
{
    if (chan->dead || chan->destroyed || chan->tx_err)
        return -EPIPE;
    uint8_t *bytes;
    size_t len;
    int rc = ipc_frame_pack(frame, &bytes, &len);
    if (rc < 0)
        return rc;
    if (len > IPC_CHAN_TX_MAX_BYTES - chan->tx_bytes ||
        (chan->budget_used && *chan->budget_used + len > chan->budget_max)) {
        /* The peer does not read what we send it: stop feeding it. */
        free(bytes);
        fail_later(chan, -ENOBUFS);
        return -EPIPE;
    }
    seg *s = malloc(sizeof *s);
    if (!s) {
        free(bytes);
        return -ENOMEM;
    }
    s->next = NULL;
    s->data = bytes;
    s->len = len;
    s->off = 0;
    s->fd = -1;
    if (fd >= 0) {
        s->fd = fcntl(fd, F_DUPFD_CLOEXEC, 0);
        if (s->fd < 0) {
            rc = -errno;
            free(bytes);
            free(s);
            return rc;
        }
    }
    if (chan->tx_tail)
        chan->tx_tail->next = s;
    else
        chan->tx_head = s;
    chan->tx_tail = s;
    chan->tx_bytes += len;
    if (chan->budget_used)
        *chan->budget_used += len;
    rc = flush_tx(chan);
    if (rc < 0)
        fail_later(chan, rc); /* the frame is queued; report the death */
    return 0;
}

void ipc_chan_set_tx_budget(ipc_chan *chan, uint64_t *used, uint64_t max)
{
    if (chan->budget_used)
        *chan->budget_used -= chan->tx_bytes;
    chan->budget_used = used;
    chan->budget_max = max;
    if (used)
        *used += chan->tx_bytes;
}

int ipc_chan_take_fd(ipc_chan *chan)
{
    int fd = chan->rx_fd;
    chan->rx_fd = -1;
    return fd;
}

size_t ipc_chan_tx_queued_bytes(const ipc_chan *chan)
{
    return chan->tx_bytes;
}

uid_t ipc_chan_peer_uid(const ipc_chan *chan)
{
    return chan->uid;
}

pid_t ipc_chan_peer_pid(const ipc_chan *chan)
{
    return chan->pid;
}

uint64_t ipc_chan_dropped_frames(const ipc_chan *chan)
{
    return ipc_decoder_dropped_frames(chan->dec) +
           ipc_decoder_empty_frames(chan->dec);
}
