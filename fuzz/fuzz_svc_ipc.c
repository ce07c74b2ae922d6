/*
 * fuzz_svc_ipc.c - libFuzzer target: every IPC request handler of the
 * service (shmtraced's ProducerPort and ConsumerPort, service/svc_ipc*.c)
 * driven by hostile producers and consumers.
 *
 * Each input runs a fresh daemon (svc_daemon on private sockets in a temp
 * dir, one ipc_loop in this thread). Up to two producer and two consumer
 * connections are socketpairs adopted by the daemon's hosts; each binds
 * its port first. The tape then invokes methods (any method id, args bytes
 * from the tape, maybe drop_reply, maybe a passed fd, maybe a wrong
 * service id), sends raw bytes, scribbles into an SMB the daemon passed to
 * a producer, runs the loop, moves the service's clock forward (timeouts,
 * durations), or hangs up a connection. At the end every connection hangs
 * up and the daemon is destroyed.
 *
 * Invariants (FZ_CHECK):
 *  - everything the daemon sends parses as IPC frames, and is an answer:
 *    a BindServiceReply / InvokeMethodReply / RequestError for a request
 *    id this connection sent, never after that request's final reply
 *    (has_more = false), and for a drop_reply request at most the host's
 *    own refusal (success = false), never the handler's answer;
 *  - when every client has hung up, the hosts hold no connection and the
 *    service no session but those a Detach kept (Perfetto's detach); after destroy, no descriptor is left open (the
 *    SMBs and passed fds included); LeakSanitizer checks memory per input.
 * A config's output_path is redirected into the private temp dir so that
 * fuzzing never writes outside it.
 */
#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "svc_ipc_int.h"
#include "ipc.pb-c.h"
#include "config.pb-c.h"

#include "fuzz_util.h"

typedef Perfetto__Protos__IPCFrame Frame;

#define NCONN 4          /* 0, 1 producers; 2, 3 consumers */
#define MAX_REQ 512
#define CONSUMER_DETACH 8 /* ConsumerPort method id of Detach */

typedef struct fz_conn {
    int fd;              /* our end, -1 when closed / never opened */
    bool producer;
    uint32_t service_id;
    uint64_t next_req;
    bool raw;            /* sent raw bytes: ids no longer ours to check */
    ipc_decoder *dec;
    uint8_t sent[MAX_REQ], done[MAX_REQ], dropped[MAX_REQ];
    uint8_t method[MAX_REQ];
    uint8_t *smb;
    size_t smb_size;
} fz_conn;

static char g_dir[256], g_ppath[300], g_cpath[300], g_out[300];

static struct {
    ipc_loop *loop;
    svc_daemon *d;
    fz_conn c[NCONN];
    uint32_t detached;   /* Detach calls the daemon said yes to */
    bool raw_consumer;   /* a consumer sent raw bytes (a Detach we cannot
                            see, maybe) */
} F;

static void cleanup(void)
{
    DIR *dir = opendir(g_dir);
    if (dir) {
        struct dirent *e;
        char p[600];
        while ((e = readdir(dir)) != NULL) {
            if (e->d_name[0] == '.')
                continue;
            snprintf(p, sizeof p, "%s/%s", g_dir, e->d_name);
            unlink(p);
        }
        closedir(dir);
    }
    rmdir(g_dir);
}

static void setup_once(void)
{
    if (g_dir[0])
        return;
    const char *base = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    snprintf(g_dir, sizeof g_dir, "%s/shmtrace-fuzz-svc-XXXXXX", base);
    FZ_CHECK(mkdtemp(g_dir) != NULL, "mkdtemp");
    snprintf(g_ppath, sizeof g_ppath, "%s/p.sock", g_dir);
    snprintf(g_cpath, sizeof g_cpath, "%s/c.sock", g_dir);
    snprintf(g_out, sizeof g_out, "%s/out.pftrace", g_dir);
    atexit(cleanup);
    signal(SIGPIPE, SIG_IGN);
}

static int count_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    FZ_CHECK(d != NULL, "opendir /proc/self/fd");
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        n += e->d_name[0] != '.';
    closedir(d);
    return n;
}

static void pump(int iters)
{
    for (int i = 0; i < iters; i++)
        ipc_loop_run_once(F.loop, 0);
}

static void hang_up(fz_conn *c)
{
    if (c->fd < 0)
        return;
    close(c->fd);
    c->fd = -1;
}

/* Check one frame the daemon sent on c. */
static void check_frame(fz_conn *c, const Frame *f)
{
    uint64_t id = f->has_request_id ? f->request_id : 0;
    if (getenv("FUZZ_SVC_DEBUG")) /* what the daemon answered, for seeds */
        fprintf(stderr, "conn %d: frame kind %d request %llu%s\n",
                (int)(c - F.c), (int)f->msg_case, (unsigned long long)id,
                f->msg_case ==
                        PERFETTO__PROTOS__IPCFRAME__MSG_MSG_INVOKE_METHOD_REPLY
                    ? (f->msg_invoke_method_reply->success ? " ok" : " FAIL")
                    : "");
    if (c->raw) /* raw bytes may have carried any request id */
        return;
    switch (f->msg_case) {
    case PERFETTO__PROTOS__IPCFRAME__MSG_MSG_BIND_SERVICE_REPLY:
    case PERFETTO__PROTOS__IPCFRAME__MSG_MSG_INVOKE_METHOD_REPLY:
        FZ_CHECK(id > 0 && id < MAX_REQ && c->sent[id],
                 "reply for request %llu never sent", (unsigned long long)id);
        /* drop_reply: no answer from the handler; the host may still
         * refuse the call itself (unknown service or method, bad args:
         * success = false, as Perfetto's host does). */
        FZ_CHECK(!c->dropped[id] ||
                     (f->msg_case ==
                          PERFETTO__PROTOS__IPCFRAME__MSG_MSG_INVOKE_METHOD_REPLY &&
                      !f->msg_invoke_method_reply->success),
                 "reply for drop_reply request %llu", (unsigned long long)id);
        FZ_CHECK(!c->done[id], "reply after the final reply of request %llu",
                 (unsigned long long)id);
        if (f->msg_case ==
            PERFETTO__PROTOS__IPCFRAME__MSG_MSG_BIND_SERVICE_REPLY) {
            c->done[id] = 1;
            if (f->msg_bind_service_reply->success &&
                f->msg_bind_service_reply->has_service_id)
                c->service_id = f->msg_bind_service_reply->service_id;
        } else if (!f->msg_invoke_method_reply->has_more ||
                   !f->msg_invoke_method_reply->success) {
            c->done[id] = 1;
            if (!c->producer && c->method[id] == CONSUMER_DETACH &&
                f->msg_invoke_method_reply->success)
                F.detached++;
        }
        break;
    case PERFETTO__PROTOS__IPCFRAME__MSG_MSG_REQUEST_ERROR:
        /* For a frame that named no valid request: any id we sent, or 0. */
        FZ_CHECK(id < MAX_REQ && (id == 0 || c->sent[id]),
                 "request error for request %llu never sent",
                 (unsigned long long)id);
        break;
    default:
        FZ_CHECK(false, "the daemon sent a frame of kind %d",
                 (int)f->msg_case);
    }
}

/* Read everything the daemon sent on c (fds too). */
static void drain(fz_conn *c)
{
    while (c->fd >= 0) {
        size_t avail;
        uint8_t *w = ipc_decoder_write_ptr(c->dec, &avail);
        FZ_CHECK(avail > 0, "the daemon sent an oversized frame");
        char cbuf[CMSG_SPACE(8 * sizeof(int))];
        struct iovec iov = {w, avail};
        struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1,
                            .msg_control = cbuf,
                            .msg_controllen = sizeof cbuf};
        ssize_t n = recvmsg(c->fd, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
        if (n <= 0) {
            if (n == 0 || (errno != EAGAIN && errno != EINTR))
                hang_up(c); /* the daemon closed us */
            return;
        }
        for (struct cmsghdr *cm = CMSG_FIRSTHDR(&mh); cm;
             cm = CMSG_NXTHDR(&mh, cm)) {
            if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS)
                continue;
            size_t nfd = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
            for (size_t i = 0; i < nfd; i++) {
                int fd;
                memcpy(&fd, CMSG_DATA(cm) + i * sizeof(int), sizeof fd);
                struct stat st;
                if (c->producer && c->smb == NULL && fstat(fd, &st) == 0 &&
                    st.st_size > 0 && st.st_size <= (64 << 20)) {
                    void *m = mmap(NULL, (size_t)st.st_size,
                                   PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
                    if (m != MAP_FAILED) {
                        c->smb = m;
                        c->smb_size = (size_t)st.st_size;
                    }
                }
                close(fd);
            }
        }
        ipc_decoder_commit(c->dec, (size_t)n);
        Frame *f;
        int rc;
        while ((rc = ipc_decoder_next(c->dec, &f)) == 1) {
            check_frame(c, f);
            perfetto__protos__ipcframe__free_unpacked(f, NULL);
        }
        FZ_CHECK(rc == 0, "the daemon's stream does not decode: %d", rc);
        FZ_CHECK(ipc_decoder_dropped_frames(c->dec) == 0,
                 "the daemon sent an unparsable frame");
    }
}

static void drain_all(void)
{
    for (int i = 0; i < NCONN; i++)
        drain(&F.c[i]);
}

/* Send bytes on c (fd >= 0 rides with the first byte); the daemon runs
 * in between when the socket is full. */
static void send_bytes(fz_conn *c, const uint8_t *p, size_t n, int pass_fd)
{
    int stuck = 0;
    while (n > 0 && c->fd >= 0) {
        char cbuf[CMSG_SPACE(sizeof(int))];
        struct iovec iov = {(void *)p, n};
        struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1};
        if (pass_fd >= 0) {
            memset(cbuf, 0, sizeof cbuf);
            mh.msg_control = cbuf;
            mh.msg_controllen = sizeof cbuf;
            struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
            cm->cmsg_level = SOL_SOCKET;
            cm->cmsg_type = SCM_RIGHTS;
            cm->cmsg_len = CMSG_LEN(sizeof(int));
            memcpy(CMSG_DATA(cm), &pass_fd, sizeof(int));
        }
        ssize_t w = sendmsg(c->fd, &mh, MSG_DONTWAIT | MSG_NOSIGNAL);
        if (w > 0) {
            p += w;
            n -= (size_t)w;
            pass_fd = -1;
            continue;
        }
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0 && errno == EAGAIN && ++stuck < 64) {
            pump(1);
            drain_all();
            continue;
        }
        hang_up(c);
    }
}

static void send_frame(fz_conn *c, const Frame *f, int pass_fd)
{
    uint8_t *b;
    size_t n;
    if (ipc_frame_pack(f, &b, &n) != 0)
        return;
    send_bytes(c, b, n, pass_fd);
    free(b);
}

/* A fresh request id, or 0 when this connection used them all. */
static uint64_t take_req(fz_conn *c)
{
    if (c->next_req >= MAX_REQ)
        return 0;
    uint64_t id = c->next_req++;
    c->sent[id] = 1;
    return id;
}

static fz_conn *open_conn(int i)
{
    fz_conn *c = &F.c[i];
    if (c->fd >= 0 || c->next_req > 0)
        return c; /* open, or hung up (stays closed) */
    int sv[2];
    FZ_CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0,
             "socketpair");
    c->producer = i < 2;
    ipc_host *h = c->producer ? F.d->phost : F.d->chost;
    FZ_CHECK(ipc_host_adopt_client(h, sv[0]) == 0, "adopt");
    c->fd = sv[1];
    c->next_req = 1;
    c->dec = ipc_decoder_create();
    FZ_CHECK(c->dec != NULL, "decoder");
    Frame f = PERFETTO__PROTOS__IPCFRAME__INIT;
    Perfetto__Protos__IPCFrame__BindService b =
        PERFETTO__PROTOS__IPCFRAME__BIND_SERVICE__INIT;
    b.service_name = c->producer ? "ProducerPort" : "ConsumerPort";
    f.has_request_id = true;
    f.request_id = take_req(c);
    f.msg_case = PERFETTO__PROTOS__IPCFRAME__MSG_MSG_BIND_SERVICE;
    f.msg_bind_service = &b;
    send_frame(c, &f, -1);
    pump(2);
    drain(c);
    return c;
}

/* EnableTracing's output_path, if any, goes to our temp dir. Returns
 * malloc'd replacement args or NULL to keep the bytes. */
static uint8_t *redirect_output(const uint8_t *args, size_t n, size_t *out_n)
{
    Perfetto__Protos__EnableTracingRequest *r =
        perfetto__protos__enable_tracing_request__unpack(NULL, n, args);
    if (r == NULL)
        return NULL;
    uint8_t *out = NULL;
    if (r->trace_config && r->trace_config->output_path) {
        free(r->trace_config->output_path);
        r->trace_config->output_path = strdup(g_out);
        *out_n = perfetto__protos__enable_tracing_request__get_packed_size(r);
        out = malloc(*out_n ? *out_n : 1);
        FZ_CHECK(out != NULL, "oom");
        perfetto__protos__enable_tracing_request__pack(r, out);
    }
    perfetto__protos__enable_tracing_request__free_unpacked(r, NULL);
    return out;
}

static void invoke(fz_in *in, uint8_t op)
{
    fz_conn *c = open_conn((op >> 3) & 3);
    uint8_t method = fz_u8(in);
    uint8_t fl = fz_u8(in);
    size_t want = (fl & 1) ? fz_u16(in) : fz_u8(in), got;
    const uint8_t *args = fz_bytes(in, want, &got);
    uint64_t id = c->fd >= 0 ? take_req(c) : 0;
    if (id == 0)
        return;
    Frame f = PERFETTO__PROTOS__IPCFRAME__INIT;
    Perfetto__Protos__IPCFrame__InvokeMethod im =
        PERFETTO__PROTOS__IPCFRAME__INVOKE_METHOD__INIT;
    f.has_request_id = true;
    f.request_id = id;
    f.msg_case = PERFETTO__PROTOS__IPCFRAME__MSG_MSG_INVOKE_METHOD;
    f.msg_invoke_method = &im;
    im.has_service_id = true;
    im.service_id = (fl & 2) ? fz_u8(in) : c->service_id;
    im.has_method_id = true;
    im.method_id = method % 20;
    c->method[id] = (uint8_t)im.method_id;
    im.has_drop_reply = (fl & 4) != 0;
    im.drop_reply = (fl & 8) != 0;
    if (im.has_drop_reply && im.drop_reply)
        c->dropped[f.request_id] = 1;
    uint8_t *fixed = NULL;
    size_t fixed_n = 0;
    if (!c->producer && im.method_id == 1)
        fixed = redirect_output(args, got, &fixed_n);
    im.has_args_proto = true;
    im.args_proto.data = fixed ? fixed : (uint8_t *)args;
    im.args_proto.len = fixed ? fixed_n : got;
    int pass = -1;
    if (fl & 0x10) /* an fd along (output files, or junk for the SMB) */
        pass = memfd_create("fuzz-fd", MFD_CLOEXEC);
    send_frame(c, &f, pass);
    if (pass >= 0)
        close(pass);
    free(fixed);
}

static void raw(fz_in *in, uint8_t op)
{
    fz_conn *c = open_conn((op >> 3) & 3);
    size_t want = fz_u8(in), got;
    const uint8_t *p = fz_bytes(in, want, &got);
    c->raw = c->raw || got > 0;
    if (!c->producer && got > 0)
        F.raw_consumer = true;
    send_bytes(c, p, got, -1);
}

static void scribble(fz_in *in, uint8_t op)
{
    fz_conn *c = &F.c[(op >> 3) & 1];
    uint32_t off = fz_u32(in);
    size_t want = fz_u8(in), got;
    const uint8_t *p = fz_bytes(in, want, &got);
    if (c->smb == NULL || c->smb_size == 0)
        return;
    off %= c->smb_size;
    if (got > c->smb_size - off)
        got = c->smb_size - off;
    memcpy(c->smb + off, p, got);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    setup_once();
    int fds0 = count_fds();
    fz_in in = {data, size};
    memset(&F, 0, sizeof F);
    for (int i = 0; i < NCONN; i++)
        F.c[i].fd = -1;
    F.loop = ipc_loop_create();
    FZ_CHECK(F.loop != NULL, "loop");
    int err = 0;
    F.d = svc_daemon_create(F.loop, g_ppath, g_cpath, &err);
    FZ_CHECK(F.d != NULL, "svc_daemon_create: %d", err);
    uint64_t now = svc_now_ms();

    while (!fz_empty(&in)) {
        uint8_t op = fz_u8(&in);
        switch (op % 8) {
        case 0: case 1: case 2: invoke(&in, op); break;
        case 3: raw(&in, op); break;
        case 4: scribble(&in, op); break;
        case 5: pump(1 + (op >> 3) % 8); break;
        case 6: /* time passes: timeouts, durations, periodic work */
            now += 1 + (uint64_t)fz_u16(&in) * 16u;
            svc_tick(F.d->svc, now);
            break;
        default: hang_up(&F.c[(op >> 3) & 3]); break;
        }
        pump(2);
        drain_all();
    }
    /* Everyone hangs up: the daemon must let go of everything. */
    for (int i = 0; i < NCONN; i++)
        hang_up(&F.c[i]);
    for (int i = 0; i < 200 && (ipc_host_num_conns(F.d->phost) ||
                                ipc_host_num_conns(F.d->chost)); i++)
        ipc_loop_run_once(F.loop, 1);
    FZ_CHECK(ipc_host_num_conns(F.d->phost) == 0 &&
                 ipc_host_num_conns(F.d->chost) == 0,
             "connections outlive their clients");
    /* Only a detached session may outlive its consumer (Detach). */
    FZ_CHECK(F.raw_consumer || svc_session_count(F.d->svc) <= F.detached,
             "%zu sessions outlive their consumers (%u detached)",
             svc_session_count(F.d->svc), F.detached);
    svc_daemon_destroy(F.d);
    ipc_loop_destroy(F.loop);
    for (int i = 0; i < NCONN; i++) {
        ipc_decoder_destroy(F.c[i].dec);
        if (F.c[i].smb)
            munmap(F.c[i].smb, F.c[i].smb_size);
    }
    unlink(g_out);
    FZ_CHECK(count_fds() == fds0, "%d descriptors leaked",
             count_fds() - fds0);
    return 0;
}
