/*
 * check_fuzz.c - seeded coverage-style fuzzing of every path where hostile
 * input enters shmtrace, meant to run under ASan+UBSan (make check with
 * --enable-sanitizers):
 *
 *   ipc      the IPC frame decoder fed random / mutated / truncated frames
 *            in random slices; a live ipc_host served through a socketpair
 *            with mutated BindService / InvokeMethod frames and fd floods
 *            (SCM_RIGHTS), checking the host keeps answering with
 *            well-formed frames and leaks no descriptor.
 *   smb      the service's SMB reader over a hostile producer's SMB: random
 *            page words, chunk headers, fragment bytes, indices, emulated
 *            chunks and patches, also with a second thread rewriting the
 *            SMB while the reader copies; a well-behaved producer shares
 *            the destination buffer and must get every packet back intact.
 *   inspector  synthetic traces (trace_config, trace_stats, loss bits,
 *            zlib compressed_packets) cut and mutated, through the whole
 *            inspector into SQLite.
 *
 * Every test is deterministic (xorshift, fixed seeds) and bounded by an
 * iteration count; a wall-clock cap only shortens a run on a very slow
 * machine (never asserted on).
 */
#include "config.h"

#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include <dirent.h>

#include <shmtrace/smb_abi.h>
#include <shmtrace/trace_buffer.h>

#include "ipc.h"
#include "common.pb-c.h"
#include "trace.pb-c.h"
#include "smb_reader.h"
#include "ins_inspect.h"
#include "bstr.h"
#include "tck_main.h"
#include "trng.h"

/* ------------------------------------------------------------ helpers */

static uint64_t rng_state;

static uint64_t rnd(void)
{
    return trng_next64(&rng_state);
}

static uint32_t rndn(uint32_t n)
{
    return n ? (uint32_t)(rnd() % n) : 0;
}

static void rnd_bytes(uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        p[i] = (uint8_t)rnd();
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Only shortens a run on a very slow machine; never asserted on. */
#define FUZZ_WALL_CAP_S 8.0

static int count_open_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    if (!d)
        return -1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        if (e->d_name[0] != '.')
            n++;
    closedir(d);
    return n;
}

/* Flip, overwrite, insert-varint or cut: one mutation of buf[0..*len). */
static void mutate(uint8_t *buf, size_t *len, size_t cap)
{
    if (*len == 0)
        return;
    switch (rndn(5)) {
    case 0: /* bit flip */
        buf[rndn((uint32_t)*len)] ^= (uint8_t)(1u << rndn(8));
        break;
    case 1: /* random byte */
        buf[rndn((uint32_t)*len)] = (uint8_t)rnd();
        break;
    case 2: { /* a large varint in place (lengths, ids, sizes) */
        size_t at = rndn((uint32_t)*len);
        static const uint8_t big[][5] = {
            {0xff, 0xff, 0xff, 0xff, 0x0f}, {0x80, 0x80, 0x80, 0x80, 0x01},
            {0xfe, 0xff, 0x03, 0, 0},       {0xff, 0xff, 0xff, 0x7f, 0},
        };
        const uint8_t *v = big[rndn(4)];
        for (size_t i = 0; i < 5 && at + i < *len; i++)
            buf[at + i] = v[i];
        break;
    }
    case 3: /* cut */
        *len = rndn((uint32_t)*len);
        break;
    default: /* duplicate a slice at the end */
        if (*len < cap) {
            size_t from = rndn((uint32_t)*len);
            size_t n = rndn((uint32_t)(*len - from)) + 1;
            if (n > cap - *len)
                n = cap - *len;
            memmove(buf + *len, buf + from, n);
            *len += n;
        }
        break;
    }
}

/* ============================================================ IPC */

typedef Perfetto__Protos__IPCFrame Frame;

/* A valid frame (length prefix included) of a random kind. */
static uint8_t *valid_frame(size_t *len)
{
    Frame f = PERFETTO__PROTOS__IPCFRAME__INIT;
    Perfetto__Protos__IPCFrame__BindService b =
        PERFETTO__PROTOS__IPCFRAME__BIND_SERVICE__INIT;
    Perfetto__Protos__IPCFrame__InvokeMethod im =
        PERFETTO__PROTOS__IPCFRAME__INVOKE_METHOD__INIT;
    Perfetto__Protos__IPCFrame__InvokeMethodReply r =
        PERFETTO__PROTOS__IPCFRAME__INVOKE_METHOD_REPLY__INIT;
    Perfetto__Protos__IPCFrame__RequestError re =
        PERFETTO__PROTOS__IPCFRAME__REQUEST_ERROR__INIT;
    static const char *names[] = {"FuzzPort", "ProducerPort", "", "Fuzz"};
    uint8_t args[512];
    f.has_request_id = rndn(8) != 0;
    f.request_id = rndn(4) ? rndn(64) : rnd();
    switch (rndn(6)) {
    case 0:
        f.msg_case = PERFETTO__PROTOS__IPCFRAME__MSG_MSG_BIND_SERVICE;
        f.msg_bind_service = &b;
        b.service_name = rndn(8) ? (char *)names[rndn(4)] : NULL;
        break;
    case 1: case 2: case 3: {
        f.msg_case = PERFETTO__PROTOS__IPCFRAME__MSG_MSG_INVOKE_METHOD;
        f.msg_invoke_method = &im;
        im.has_service_id = rndn(8) != 0;
        im.service_id = rndn(4) ? 1 + rndn(2) : (uint32_t)rnd();
        im.has_method_id = rndn(8) != 0;
        im.method_id = rndn(4) ? rndn(8) : (uint32_t)rnd();
        im.has_drop_reply = rndn(4) == 0;
        im.drop_reply = rndn(2);
        im.has_args_proto = rndn(6) != 0;
        size_t n = rndn(sizeof args);
        if (rndn(2)) { /* a real CommitDataRequest, maybe mutated */
            Perfetto__Protos__CommitDataRequest cd =
                PERFETTO__PROTOS__COMMIT_DATA_REQUEST__INIT;
            cd.has_flush_request_id = true;
            cd.flush_request_id = rnd();
            n = protobuf_c_message_get_packed_size(&cd.base);
            protobuf_c_message_pack(&cd.base, args);
            for (int k = 0; k < 3; k++)
                mutate(args, &n, sizeof args);
        } else {
            rnd_bytes(args, n);
        }
        im.args_proto.data = args;
        im.args_proto.len = n;
        break;
    }
    case 4:
        f.msg_case = PERFETTO__PROTOS__IPCFRAME__MSG_MSG_INVOKE_METHOD_REPLY;
        f.msg_invoke_method_reply = &r;
        r.has_success = true;
        r.success = rndn(2);
        break;
    default:
        f.msg_case = PERFETTO__PROTOS__IPCFRAME__MSG_MSG_REQUEST_ERROR;
        f.msg_request_error = &re;
        re.error = (char *)"x";
        break;
    }
    uint8_t *out;
    ck_assert_int_eq(ipc_frame_pack(&f, &out, len), 0);
    return out;
}

/* A stream of 1..8 items: valid, mutated, random, truncated frames. With
 * keep_sync the length prefixes stay right (only bodies are mutated), so
 * a connection lives long enough to reach the dispatch code. */
static uint8_t *hostile_stream(size_t *len, bool keep_sync)
{
    size_t cap = 1u << 16, n = 0;
    uint8_t *s = malloc(cap + 16);
    ck_assert_ptr_nonnull(s);
    int items = 1 + (int)rndn(8);
    for (int i = 0; i < items && n < cap - 1024; i++) {
        size_t fl;
        uint8_t *f = valid_frame(&fl);
        uint32_t kind = rndn(8);
        if (kind == 0) { /* random bytes with a small plausible header */
            size_t m = rndn(600);
            s[n] = (uint8_t)m;
            s[n + 1] = (uint8_t)(m >> 8);
            s[n + 2] = s[n + 3] = 0;
            rnd_bytes(s + n + 4, m);
            n += 4 + m;
        } else {
            if (kind <= 3 && keep_sync && fl > 4) {
                size_t body = fl - 4;
                for (uint32_t k = rndn(4) + 1; k > 0; k--) {
                    size_t b2 = body;
                    mutate(f + 4, &b2, body);
                    if (b2 < body) /* a cut: fill, keep the length */
                        memset(f + 4 + b2, 0, body - b2);
                }
            } else if (kind <= 3) {
                for (uint32_t k = rndn(4) + 1; k > 0; k--)
                    mutate(f, &fl, fl); /* may touch the header too */
            }
            if (fl > cap - n)
                fl = cap - n;
            memcpy(s + n, f, fl);
            n += fl;
        }
        free(f);
    }
    *len = n;
    return s;
}

START_TEST(test_fuzz_ipc_decoder)
{
    rng_state = 0x1234567887654321ull;
    double t0 = now_s();
    ipc_decoder *d = ipc_decoder_create();
    ck_assert_ptr_nonnull(d);
    uint64_t frames = 0, fatal = 0;
    for (int iter = 0; iter < 40000 && now_s() - t0 < FUZZ_WALL_CAP_S;
         iter++) {
        size_t len;
        uint8_t *s = hostile_stream(&len, rndn(2));
        if (rndn(64) == 0) { /* a header announcing more than the max */
            s[0] = 0xfd; s[1] = 0xff; s[2] = 0x01; s[3] = 0x00;
        }
        size_t off = 0;
        bool dead = false;
        while (off < len && !dead) {
            size_t avail;
            uint8_t *w = ipc_decoder_write_ptr(d, &avail);
            size_t want = 1 + rndn(rndn(2) ? 16 : 4096);
            if (want > len - off)
                want = len - off;
            if (want > avail)
                want = avail;
            if (want == 0) {
                /* A full buffer must hold a frame or be fatal. */
                Frame *f = NULL;
                int rc = ipc_decoder_next(d, &f);
                ck_assert_int_ne(rc, 0);
                if (f)
                    perfetto__protos__ipcframe__free_unpacked(f, NULL);
                if (rc < 0)
                    dead = true;
                continue;
            }
            memcpy(w, s + off, want);
            ipc_decoder_commit(d, want);
            off += want;
            for (;;) {
                Frame *f = NULL;
                int rc = ipc_decoder_next(d, &f);
                if (rc == 1) {
                    ck_assert_ptr_nonnull(f);
                    frames++;
                    /* touch what a host would read */
                    if (f->msg_case ==
                        PERFETTO__PROTOS__IPCFRAME__MSG_MSG_INVOKE_METHOD &&
                        f->msg_invoke_method->has_args_proto &&
                        f->msg_invoke_method->args_proto.len) {
                        volatile uint8_t x =
                            f->msg_invoke_method->args_proto.data[
                                f->msg_invoke_method->args_proto.len - 1];
                        (void)x;
                    }
                    perfetto__protos__ipcframe__free_unpacked(f, NULL);
                    continue;
                }
                ck_assert_ptr_null(f);
                if (rc < 0) {
                    ck_assert_int_eq(rc, -EMSGSIZE);
                    /* latched: no more space, the error repeats */
                    size_t a2;
                    ipc_decoder_write_ptr(d, &a2);
                    ck_assert_uint_eq(a2, 0);
                    ck_assert_int_eq(ipc_decoder_next(d, &f), -EMSGSIZE);
                    dead = true;
                }
                break;
            }
        }
        free(s);
        if (dead) {
            fatal++;
            ipc_decoder_destroy(d);
            d = ipc_decoder_create();
            ck_assert_ptr_nonnull(d);
        }
    }
    ipc_decoder_destroy(d);
    ck_assert_uint_gt(frames, 1000); /* the fuzz reached the parser */
    ck_assert_uint_gt(fatal, 0);
}
END_TEST

/* ---- a live host ---- */

typedef struct fz_svc {
    ipc_call *kept[64]; /* calls left open (like GetAsyncCommand) */
    int n_kept;
    int calls, disconnects;
} fz_svc;

static void m_reply(ipc_call *call, const ProtobufCMessage *args, void *ctx)
{
    (void)args;
    ((fz_svc *)ctx)->calls++;
    size_t n;
    const uint8_t *raw = ipc_call_args_raw(call, &n);
    if (n)
        ck_assert_ptr_nonnull(raw);
    Perfetto__Protos__CommitDataRequest r =
        PERFETTO__PROTOS__COMMIT_DATA_REQUEST__INIT;
    ipc_call_reply(call, &r.base, false);
}

static void m_keep(ipc_call *call, const ProtobufCMessage *args, void *ctx)
{
    (void)args;
    fz_svc *s = ctx;
    s->calls++;
    if (s->n_kept < 64) {
        s->kept[s->n_kept++] = call;
        ipc_call_reply(call, NULL, true); /* streaming: stays open */
    } else {
        ipc_call_fail(call);
    }
}

static void m_fd(ipc_call *call, const ProtobufCMessage *args, void *ctx)
{
    (void)args;
    ((fz_svc *)ctx)->calls++;
    int fd = ipc_call_take_fd(call);
    if (fd >= 0)
        close(fd);
    ipc_call_reply(call, NULL, false);
}

static void m_close(ipc_call *call, const ProtobufCMessage *args, void *ctx)
{
    (void)args;
    ((fz_svc *)ctx)->calls++;
    ipc_conn_close(ipc_call_conn(call));
    ipc_call_reply(call, NULL, false);
}

static void fz_disconnect(ipc_conn *conn, void *ctx)
{
    (void)conn;
    fz_svc *s = ctx;
    s->disconnects++;
    s->n_kept = 0; /* the host frees them */
}

static const ipc_method fz_methods[] = {
    { "Reply", &perfetto__protos__commit_data_request__descriptor, m_reply },
    { "Keep", NULL, m_keep },
    { "Fd", NULL, m_fd },
    { "Close", NULL, m_close },
};
static const ipc_service fz_service = {
    "FuzzPort", fz_methods, 4, fz_disconnect,
};

/* Send bytes (and maybe nfds <= 12 descriptors of /dev/null) without
 * blocking for ever: the loop runs while the socket is full. false: peer
 * gone. */
static bool send_hostile(ipc_loop *loop, int sock, const uint8_t *p,
                         size_t n, int nfds)
{
    while (n > 0) {
        struct iovec iov = { (void *)p, n };
        struct msghdr mh;
        union {
            struct cmsghdr h;
            char buf[CMSG_SPACE(12 * sizeof(int))];
        } cm;
        int fds[12];
        memset(&mh, 0, sizeof mh);
        mh.msg_iov = &iov;
        mh.msg_iovlen = 1;
        if (nfds > 0) {
            for (int i = 0; i < nfds; i++)
                fds[i] = open("/dev/null", O_RDONLY | O_CLOEXEC);
            memset(&cm, 0, sizeof cm);
            mh.msg_control = cm.buf;
            mh.msg_controllen = CMSG_SPACE((size_t)nfds * sizeof(int));
            struct cmsghdr *ch = CMSG_FIRSTHDR(&mh);
            ch->cmsg_level = SOL_SOCKET;
            ch->cmsg_type = SCM_RIGHTS;
            ch->cmsg_len = CMSG_LEN((size_t)nfds * sizeof(int));
            memcpy(CMSG_DATA(ch), fds, (size_t)nfds * sizeof(int));
        }
        ssize_t w = sendmsg(sock, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
        for (int i = 0; i < nfds; i++)
            close(fds[i]); /* the kernel holds its own references */
        if (w < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK) {
                ipc_loop_run_once(loop, 1);
                continue; /* fds are re-sent with the rest: fine */
            }
            return false;
        }
        nfds = 0;
        p += w;
        n -= (size_t)w;
        ipc_loop_run_once(loop, 0);
    }
    return true;
}

/* Read what the host sent; every frame must decode. false on EOF. */
static bool drain_replies(int sock, ipc_decoder *d, uint64_t *frames)
{
    for (;;) {
        size_t avail;
        uint8_t *w = ipc_decoder_write_ptr(d, &avail);
        ck_assert_uint_gt(avail, 0);
        ssize_t n = recv(sock, w, avail, MSG_DONTWAIT);
        if (n == 0)
            return false;
        if (n < 0)
            return errno == EAGAIN || errno == EWOULDBLOCK;
        ipc_decoder_commit(d, (size_t)n);
        Frame *f;
        int rc;
        while ((rc = ipc_decoder_next(d, &f)) == 1) {
            (*frames)++;
            perfetto__protos__ipcframe__free_unpacked(f, NULL);
        }
        ck_assert_int_eq(rc, 0); /* the host only sends good frames */
        ck_assert_uint_eq(ipc_decoder_dropped_frames(d), 0);
    }
}

START_TEST(test_fuzz_ipc_host_dispatch)
{
    rng_state = 0xfeedface12345678ull;
    signal(SIGPIPE, SIG_IGN);
    double t0 = now_s();
    int fds_before = count_open_fds();
    ipc_loop *loop = ipc_loop_create();
    int err = 0;
    ipc_host *host = ipc_host_create_from_fd(loop, -1, &err);
    ck_assert_ptr_nonnull(host);
    fz_svc svc;
    memset(&svc, 0, sizeof svc);
    ck_assert_int_eq(ipc_host_expose_service(host, &fz_service, &svc), 0);
    uint64_t replies = 0;
    int rounds = 0;
    for (; rounds < 400 && now_s() - t0 < FUZZ_WALL_CAP_S; rounds++) {
        int sv[2];
        ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0,
                                    sv), 0);
        ck_assert_int_eq(ipc_host_adopt_client(host, sv[0]), 0);
        ipc_decoder *d = ipc_decoder_create();
        bool alive = true;
        for (int k = 0; k < 40 && alive; k++) {
            size_t len;
            uint8_t *s = hostile_stream(&len, rndn(16) != 0);
            /* up to 12: more than the channel's control buffer takes
             * (MSG_CTRUNC), all of which must still be closed */
            int nfds = rndn(6) == 0 ? 1 + (int)rndn(rndn(4) ? 3 : 12) : 0;
            if (rndn(200) == 0) { /* fatal header: connection must go */
                s[0] = 0xff; s[1] = 0xff; s[2] = 0xff; s[3] = 0x7f;
            }
            alive = send_hostile(loop, sv[1], s, len, nfds);
            free(s);
            ipc_loop_run_once(loop, 0);
            if (alive)
                alive = drain_replies(sv[1], d, &replies);
        }
        /* Slowloris: leave half a frame behind, then hang up. */
        static const uint8_t half[] = { 0x40, 0x00, 0x00, 0x00, 0x08 };
        send_hostile(loop, sv[1], half, sizeof half, 0);
        close(sv[1]);
        for (int i = 0; i < 200 && ipc_host_num_conns(host) > 0; i++)
            ipc_loop_run_once(loop, 1);
        ck_assert_uint_eq(ipc_host_num_conns(host), 0);
        ipc_decoder_destroy(d);
    }
    ck_assert_uint_gt(replies, 100);
    ck_assert_int_gt(svc.calls, 100);
    ck_assert_int_ge(svc.disconnects, rounds / 2);
    /* A well-behaved client is still served after all that. */
    int sv[2];
    ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv),
                     0);
    ck_assert_int_eq(ipc_host_adopt_client(host, sv[0]), 0);
    Frame f = PERFETTO__PROTOS__IPCFRAME__INIT;
    Perfetto__Protos__IPCFrame__BindService b =
        PERFETTO__PROTOS__IPCFRAME__BIND_SERVICE__INIT;
    f.has_request_id = true;
    f.request_id = 7;
    f.msg_case = PERFETTO__PROTOS__IPCFRAME__MSG_MSG_BIND_SERVICE;
    f.msg_bind_service = &b;
    b.service_name = (char *)"FuzzPort";
    uint8_t *buf;
    size_t len;
    ck_assert_int_eq(ipc_frame_pack(&f, &buf, &len), 0);
    ck_assert(send_hostile(loop, sv[1], buf, len, 0));
    free(buf);
    ipc_decoder *d = ipc_decoder_create();
    Frame *r = NULL;
    for (int i = 0; i < 500 && !r; i++) {
        ipc_loop_run_once(loop, 1);
        size_t avail;
        uint8_t *w = ipc_decoder_write_ptr(d, &avail);
        ssize_t n = recv(sv[1], w, avail, MSG_DONTWAIT);
        if (n > 0) {
            ipc_decoder_commit(d, (size_t)n);
            ipc_decoder_next(d, &r);
        }
    }
    ck_assert_ptr_nonnull(r);
    ck_assert_uint_eq(r->request_id, 7);
    ck_assert(r->msg_bind_service_reply->success);
    ck_assert_uint_eq(r->msg_bind_service_reply->n_methods, 4);
    perfetto__protos__ipcframe__free_unpacked(r, NULL);
    ipc_decoder_destroy(d);
    close(sv[1]);
    ipc_host_destroy(host);
    ipc_loop_destroy(loop);
    /* Every passed descriptor was closed: none leaked. */
    ck_assert_int_eq(count_open_fds(), fds_before);
}
END_TEST

/* ============================================================ SMB */

#define HOSTILE_PAGES 8u
#define GOOD_PRODUCER 2u
#define HOSTILE_PRODUCER 1u
#define GOOD_PAYLOAD 24u

typedef struct fz_smb {
    uint8_t *smb;          /* hostile producer's SMB */
    size_t smb_size;
    uint32_t page_size;
    smb_reader *rd;
    tb_buffer *shared;     /* also written by the good producer */
    tb_buffer *own;        /* the hostile producer's other buffer */
    /* The good producer: its own SMB and reader. */
    uint8_t *gsmb;
    smb_reader *grd;
    uint32_t good_next;    /* next chunk id / packet number */
    uint32_t next_cid[13]; /* hostile writers 1..12: next chunk id */
    uint64_t packets_read; /* from the hostile producer's buffer */
    atomic_bool stop;
} fz_smb;

static tb_buffer *hostile_resolve(void *ctx, uint32_t target,
                                  uint16_t writer_id)
{
    fz_smb *z = ctx;
    (void)target;
    if (writer_id % 5 == 0)
        return NULL;
    return writer_id % 4 == 0 ? z->shared : z->own;
}

static tb_buffer *good_resolve(void *ctx, uint32_t target,
                               uint16_t writer_id)
{
    (void)target; (void)writer_id;
    return ((fz_smb *)ctx)->shared;
}

static void good_packet_bytes(uint32_t n, uint8_t *out)
{
    for (uint32_t k = 0; k < GOOD_PAYLOAD; k++)
        out[k] = (uint8_t)(n * 31u + k);
}

/* The good producer writes packet `good_next` as one whole chunk in its
 * SMB (4 KiB pages, 4 chunks each) and the service commits it. */
static void good_commit(fz_smb *z)
{
    uint32_t n = z->good_next++;
    uint32_t page = (n / 4) % 4, idx = n % 4;
    smb_page_header *ph = smb_page_at(z->gsmb, 4096, page);
    smb_try_partition_page(ph, SMB_LAYOUT_DIV4);
    smb_chunk_header *c = smb_try_acquire_chunk_for_writing(ph, 4096, idx, 1,
            n, smb_make_packets(1, 0));
    ck_assert_ptr_nonnull(c);
    uint8_t *p = smb_chunk_payload(c);
    smb_write_redundant_varint(p, GOOD_PAYLOAD);
    good_packet_bytes(n, p + 4);
    ck_assert_int_eq(smb_release_chunk_as_complete(ph, idx), 0);
    ck_assert_int_eq(smb_reader_commit_chunk(z->grd, page, idx, 0,
                                             good_resolve, z), 0);
}

/* Stores into the hostile SMB are relaxed atomics: in the concurrent test
 * scribbler_main rewrites the same bytes from another thread, and the test's
 * own writers must not race each other (only the reader's copy of untrusted
 * bytes races, by design; see tests/tsan.supp). */
static void smb_put(uint8_t *dst, const void *src, size_t n)
{
    const uint8_t *s = src;
    for (size_t i = 0; i < n; i++)
        __atomic_store_n(dst + i, s[i], __ATOMIC_RELAXED);
}

static void smb_put_random(uint8_t *dst, size_t n)
{
    for (size_t i = 0; i < n; i++)
        __atomic_store_n(dst + i, (uint8_t)rnd(), __ATOMIC_RELAXED);
}

/* Scribble over the hostile SMB: page words (often plausible), chunk
 * headers and fragment runs (plausible varints, the drop sentinel, junk). */
static void scribble(fz_smb *z)
{
    uint32_t page = rndn(HOSTILE_PAGES);
    smb_page_header *ph = smb_page_at(z->smb, z->page_size, page);
    uint32_t word;
    if (rndn(4) == 0)
        word = (uint32_t)rnd();
    else
        word = ((1u + rndn(5)) << SMB_LAYOUT_SHIFT) |
               ((uint32_t)rnd() & SMB_ALL_CHUNKS_MASK);
    atomic_store_explicit(&ph->header_bitmap, word, memory_order_release);
    uint32_t layout = smb_word_layout(word);
    uint32_t nch = smb_layout_num_chunks(layout);
    if (nch == 0)
        return;
    uint32_t cs = smb_chunk_size(z->page_size, layout);
    uint32_t i = rndn(nch);
    uint8_t *c = (uint8_t *)smb_chunk_at(ph, z->page_size, layout, i);
    uint16_t wid = rndn(8) ? (uint16_t)(1 + rndn(12)) : (uint16_t)rnd();
    /* Mostly the writer's next chunk id (so chunks chain and patches find
     * them), sometimes an old, repeated or wild one. */
    uint32_t cid;
    if (rndn(4) && wid >= 1 && wid <= 12)
        cid = z->next_cid[wid]++;
    else
        cid = rndn(2) ? rndn(32) : (uint32_t)rnd();
    uint8_t *pl = c + SMB_CHUNK_HEADER_SIZE;
    uint32_t room = cs - SMB_CHUNK_HEADER_SIZE, off = 0, nfrag = 0;
    bool wild = rndn(3) == 0;
    while (off + 4 < room && rndn(wild ? 3 : 5)) {
        uint32_t sz;
        switch (wild ? rndn(6) : 5) {
        case 0: sz = SMB_PACKET_SIZE_DROP_PACKET; break;
        case 1: sz = (uint32_t)rnd() & 0x0fffffffu; break;
        case 2: sz = room - off - 4 + rndn(3); break; /* exact or past */
        default: sz = rndn(64); break;
        }
        if (sz > room - off - 4 && !wild)
            sz = room - off - 4;
        if (!wild || rndn(4)) {
            uint8_t v[4];
            smb_write_redundant_varint(v, sz);
            smb_put(pl + off, v, 4);
        } else {
            smb_put_random(pl + off, 4);
        }
        off += 4;
        uint32_t body = sz < room - off ? sz : room - off;
        smb_put_random(pl + off, body < 64 ? body : 64);
        off += body;
        nfrag++;
    }
    if (wild && rndn(2))
        nfrag = rndn(1024);
    uint16_t packets = rndn(16) ? smb_make_packets(nfrag, rndn(3) ? 0
                                                               : rndn(8))
                                : (uint16_t)rnd();
    smb_put(c, &cid, 4);
    smb_put(c + 4, &wid, 2);
    smb_put(c + 6, &packets, 2);
}

/* Read (part of) a buffer, touching every byte handed out. */
static size_t drain_buffer(tb_buffer *b, uint32_t max_packets)
{
    tb_packet pk;
    size_t n = 0;
    volatile uint8_t sink = 0;
    tb_begin_read(b);
    while (n < max_packets && tb_read_next_packet(b, &pk, NULL, NULL)) {
        size_t total = 0;
        for (size_t i = 0; i < pk.nslices; i++) {
            for (size_t k = 0; k < pk.slices[i].size; k++)
                sink ^= pk.slices[i].data[k];
            total += pk.slices[i].size;
        }
        ck_assert_uint_eq(total, pk.size);
        n++;
    }
    (void)sink;
    return n;
}

static void hostile_op(fz_smb *z, bool scribbles)
{
    if (rndn(50) == 0) { /* the consumer reads while the producer writes */
        z->packets_read += drain_buffer(z->own, rndn(64));
        return;
    }
    switch (rndn(scribbles ? 10 : 6)) {
    case 0: case 1: case 2:
        smb_reader_commit_chunk(z->rd,
                                rndn(8) ? rndn(HOSTILE_PAGES) : (uint32_t)rnd(),
                                rndn(8) ? rndn(14) : (uint32_t)rnd(),
                                rndn(3), hostile_resolve, z);
        break;
    case 3:
        if (rndn(6) == 0)
            smb_reader_scrape(z->rd, hostile_resolve, z);
        break;
    case 4: { /* emulation: the chunk inside the IPC message */
        static uint8_t data[SMB_MAX_CHUNK_SIZE + 16];
        size_t len = rndn(8) ? rndn(2048) : rndn(sizeof data);
        rnd_bytes(data, len < 64 ? len : 64);
        if (len >= 8) {
            uint16_t wid = (uint16_t)(1 + rndn(12));
            memcpy(data + 4, &wid, 2);
            uint16_t packets = smb_make_packets(rndn(5), rndn(8));
            memcpy(data + 6, &packets, 2);
            for (size_t o = 8; o + 4 < len && o < 64; o += 4 + rndn(40))
                smb_write_redundant_varint(data + o, rndn(48));
        }
        smb_reader_commit_data(z->rd, data, len, rndn(2), rndn(3),
                               hostile_resolve, z);
        break;
    }
    case 5: { /* patches */
        static smb_patch pt[1100];
        uint32_t np = rndn(8) ? rndn(8) : rndn(1100);
        for (uint32_t i = 0; i < np; i++) {
            pt[i].offset = rndn(4) ? rndn(rndn(2) ? 64 : 4200)
                                   : (uint32_t)rnd();
            rnd_bytes(pt[i].data, 4);
        }
        smb_chunk_patches g = {
            .target_buffer = rndn(3),
            .chunk_id = 0,
            .writer_id = rndn(8) ? (uint16_t)(1 + rndn(12)) : (uint16_t)rnd(),
            .has_more_patches = rndn(2),
            .npatches = np,
            .patches = rndn(16) ? pt : NULL,
        };
        if (g.writer_id >= 1 && g.writer_id <= 12 && rndn(4))
            g.chunk_id = z->next_cid[g.writer_id] - 1 - rndn(3);
        else
            g.chunk_id = (uint32_t)rnd();
        smb_reader_apply_patches(z->rd, &g, hostile_resolve, z);
        break;
    }
    default:
        scribble(z);
        break;
    }
}

static void *scribbler_main(void *arg)
{
    fz_smb *z = arg;
    uint64_t x = 0x5eed5eed5eedull;
    while (!atomic_load(&z->stop)) {
        x ^= x << 13; x ^= x >> 7; x ^= x << 17;
        size_t off = (size_t)(x % (z->smb_size / 4)) * 4;
        uint32_t v = (uint32_t)(x >> 32);
        if ((x & 7) == 0) /* a page word: keep it plausible sometimes */
            off = (size_t)((x >> 8) % HOSTILE_PAGES) * z->page_size;
        __atomic_store_n((uint32_t *)(void *)(z->smb + off), v,
                         __ATOMIC_RELAXED);
    }
    return NULL;
}

static void smb_fixture(fz_smb *z, uint32_t page_size)
{
    memset(z, 0, sizeof *z);
    z->page_size = page_size;
    z->smb_size = (size_t)HOSTILE_PAGES * page_size;
    z->smb = aligned_alloc(4096, z->smb_size);
    z->gsmb = aligned_alloc(4096, 4 * 4096);
    ck_assert_ptr_nonnull(z->smb);
    ck_assert_ptr_nonnull(z->gsmb);
    memset(z->smb, 0, z->smb_size);
    memset(z->gsmb, 0, 4 * 4096);
    z->rd = smb_reader_create(z->smb, z->smb_size, page_size,
                              HOSTILE_PRODUCER, 1000, 1);
    z->grd = smb_reader_create(z->gsmb, 4 * 4096, 4096, GOOD_PRODUCER, 1001,
                               2);
    ck_assert_ptr_nonnull(z->rd);
    ck_assert_ptr_nonnull(z->grd);
    z->shared = tb_create(64u << 20, TB_RING_BUFFER);
    z->own = tb_create(1u << 20, TB_RING_BUFFER);
    ck_assert_ptr_nonnull(z->shared);
    ck_assert_ptr_nonnull(z->own);
}

/* The good producer's packets all come back, in order, intact, without a
 * loss flag; the shared buffer never wrapped (else losses would be the
 * ring's, not the hostile producer's). */
static void check_good_intact(fz_smb *z)
{
    ck_assert_uint_eq(tb_get_stats(z->shared)->write_wrap_count, 0);
    tb_begin_read(z->shared);
    tb_packet pk;
    tb_seq_props props;
    uint32_t dropped;
    uint32_t next = 0;
    uint8_t want[GOOD_PAYLOAD], got[GOOD_PAYLOAD];
    while (tb_read_next_packet(z->shared, &pk, &props, &dropped)) {
        if (props.producer_id != GOOD_PRODUCER)
            continue;
        ck_assert_uint_eq(dropped, 0);
        ck_assert_uint_eq(pk.size, GOOD_PAYLOAD);
        size_t o = 0;
        for (size_t i = 0; i < pk.nslices; i++) {
            memcpy(got + o, pk.slices[i].data, pk.slices[i].size);
            o += pk.slices[i].size;
        }
        good_packet_bytes(next, want);
        ck_assert_mem_eq(got, want, GOOD_PAYLOAD);
        next++;
    }
    ck_assert_uint_eq(next, z->good_next);
}

static void smb_fixture_free(fz_smb *z)
{
    smb_reader_destroy(z->rd);
    smb_reader_destroy(z->grd);
    tb_destroy(z->shared);
    tb_destroy(z->own);
    free(z->smb);
    free(z->gsmb);
}

START_TEST(test_fuzz_smb_reader_hostile_contents)
{
    static const uint32_t pages[] = { 4096, 8192, 16384, 32768, 65536 };
    rng_state = 0xabcdef0123456789ull;
    double t0 = now_s();
    uint64_t violations = 0, moved = 0, packets_read = 0;
    for (int run = 0; run < 5; run++) {
        fz_smb z;
        smb_fixture(&z, pages[run]);
        for (int op = 0; op < 30000 && now_s() - t0 < FUZZ_WALL_CAP_S;
             op++) {
            if (op % 7 == 0)
                good_commit(&z);
            hostile_op(&z, true);
        }
        const smb_reader_stats *st = smb_reader_get_stats(z.rd);
        violations += st->abi_violations + st->bad_requests +
                      st->patches_discarded;
        moved += st->chunks_moved + st->chunks_scraped;
        violations += tb_get_stats(z.own)->abi_violations +
                      tb_get_stats(z.shared)->abi_violations;
        check_good_intact(&z);
        size_t dn = drain_buffer(z.own, UINT32_MAX);
        packets_read += z.packets_read + dn;
        /* The good producer lost nothing to anyone. */
        const smb_reader_stats *gs = smb_reader_get_stats(z.grd);
        ck_assert_uint_eq(gs->chunks_moved, z.good_next);
        ck_assert_uint_eq(gs->abi_violations + gs->bad_requests, 0);
        smb_fixture_free(&z);
    }
    /* The fuzz got through the checks into libbuf, and tripped them. */
    ck_assert_uint_gt(moved, 500);
    ck_assert_uint_gt(violations, 500);
    ck_assert_uint_gt(packets_read, 500); /* and back out of the reader */
}
END_TEST

START_TEST(test_fuzz_smb_reader_concurrent_mutation)
{
    rng_state = 0x0badc0ffee123457ull;
    double t0 = now_s();
    fz_smb z;
    smb_fixture(&z, 4096);
    pthread_t th;
    ck_assert_int_eq(pthread_create(&th, NULL, scribbler_main, &z), 0);
    for (int op = 0; op < 200000 && now_s() - t0 < FUZZ_WALL_CAP_S; op++) {
        if (op % 13 == 0)
            good_commit(&z);
        hostile_op(&z, rndn(4) == 0);
        if (op % 64 == 0)
            smb_reader_scrape(z.rd, hostile_resolve, &z);
    }
    atomic_store(&z.stop, true);
    pthread_join(th, NULL);
    check_good_intact(&z);
    drain_buffer(z.own, UINT32_MAX);
    ck_assert_uint_gt(smb_reader_get_stats(z.rd)->abi_violations, 0);
    smb_fixture_free(&z);
}
END_TEST

/* ============================================================ inspector */

/* One Trace record (field 1, length-delimited) holding packet p. */
static void put_packet(bstr *b, const Perfetto__Protos__TracePacket *p)
{
    size_t n = perfetto__protos__trace_packet__get_packed_size(p);
    uint8_t *t = malloc(n ? n : 1);
    perfetto__protos__trace_packet__pack(p, t);
    bs_varint(b, 0x0a);
    bs_varint(b, n);
    bs_put(b, t, n);
    free(t);
}

/* zlib stream of stored blocks (what a trace writer without a compressor
 * could emit; the inspector must take it like any deflate stream). */
static void zlib_stored(bstr *out, const uint8_t *d, size_t n)
{
    static const uint8_t hdr[2] = { 0x78, 0x01 };
    bs_put(out, hdr, 2);
    size_t off = 0;
    do {
        size_t k = n - off > 65535 ? 65535 : n - off;
        uint8_t bh[5] = { off + k == n ? 1 : 0, (uint8_t)k,
                          (uint8_t)(k >> 8), (uint8_t)~k,
                          (uint8_t)(~k >> 8) };
        bs_put(out, bh, 5);
        bs_put(out, d + off, k);
        off += k;
    } while (off < n);
    uint32_t a = 1, b = 0;
    for (size_t i = 0; i < n; i++) {
        a = (a + d[i]) % 65521;
        b = (b + a) % 65521;
    }
    uint32_t ad = b << 16 | a;
    uint8_t t[4] = { (uint8_t)(ad >> 24), (uint8_t)(ad >> 16),
                     (uint8_t)(ad >> 8), (uint8_t)ad };
    bs_put(out, t, 4);
}

#define BUFFER_MODE_V2 \
    PERFETTO__PROTOS__TRACE_CONFIG__BUFFER_CONFIG__EXPERIMENTAL_MODE__TRACE_BUFFER_V2

static void synthetic_trace(bstr *out)
{
    Perfetto__Protos__TracePacket p = PERFETTO__PROTOS__TRACE_PACKET__INIT;
    Perfetto__Protos__TraceConfig cfg = PERFETTO__PROTOS__TRACE_CONFIG__INIT;
    Perfetto__Protos__TraceConfig__BufferConfig bc[2], *bcp[2];
    for (int i = 0; i < 2; i++) {
        perfetto__protos__trace_config__buffer_config__init(&bc[i]);
        bc[i].has_size_kb = true;
        bc[i].size_kb = 1024u << i;
        bc[i].has_experimental_mode = i == 0;
        bc[i].experimental_mode = BUFFER_MODE_V2;
        bcp[i] = &bc[i];
    }
    cfg.n_buffers = 2;
    cfg.buffers = bcp;
    p.trace_config = &cfg;
    put_packet(out, &p);
    p.trace_config = NULL;

    bstr inner = {0};
    for (uint32_t i = 0; i < 40; i++) {
        Perfetto__Protos__TracePacket q = PERFETTO__PROTOS__TRACE_PACKET__INIT;
        q.has_timestamp = true;
        q.timestamp = 1000 + i;
        q.has_trusted_packet_sequence_id = true;
        q.trusted_packet_sequence_id = 1 + i % 3;
        if (i % 9 == 4) {
            q.has_previous_packet_dropped = true;
            q.previous_packet_dropped = 1u << (i % 9);
        }
        q.has_first_packet_on_sequence = i < 3;
        q.first_packet_on_sequence = true;
        put_packet(i % 2 ? &inner : out, &q);
    }
    bstr z = {0};
    zlib_stored(&z, inner.d, inner.n);
    p.has_compressed_packets = true;
    p.compressed_packets.data = z.d;
    p.compressed_packets.len = z.n;
    p.has_trusted_packet_sequence_id = true;
    p.trusted_packet_sequence_id = 9;
    put_packet(out, &p);
    p.has_compressed_packets = false;
    free(z.d);
    free(inner.d);

    Perfetto__Protos__TraceStats ts = PERFETTO__PROTOS__TRACE_STATS__INIT;
    Perfetto__Protos__TraceStats__BufferStats bs[2], *bsp[2];
    for (int i = 0; i < 2; i++) {
        perfetto__protos__trace_stats__buffer_stats__init(&bs[i]);
        bs[i].has_buffer_size = true;
        bs[i].buffer_size = 1u << 20;
        bs[i].has_abi_violations = true;
        bs[i].abi_violations = (uint64_t)i * 3;
        bs[i].has_chunks_overwritten = true;
        bs[i].chunks_overwritten = 5;
        bsp[i] = &bs[i];
    }
    Perfetto__Protos__TraceStats__WriterStats ws =
        PERFETTO__PROTOS__TRACE_STATS__WRITER_STATS__INIT;
    Perfetto__Protos__TraceStats__WriterStats *wsp = &ws;
    uint64_t counts[3] = { 1, 2, 3 };
    int64_t sums[3] = { 10, 20, 30 };
    ws.has_sequence_id = true;
    ws.sequence_id = 1;
    ws.n_chunk_payload_histogram_counts = 3;
    ws.chunk_payload_histogram_counts = counts;
    ws.n_chunk_payload_histogram_sum = 3;
    ws.chunk_payload_histogram_sum = sums;
    int64_t def[2] = { 100, 1000 };
    ts.n_buffer_stats = 2;
    ts.buffer_stats = bsp;
    ts.n_writer_stats = 1;
    ts.writer_stats = &wsp;
    ts.n_chunk_payload_histogram_def = 2;
    ts.chunk_payload_histogram_def = def;
    p.trace_stats = &ts;
    put_packet(out, &p);
}

START_TEST(test_fuzz_inspector_mutated_traces)
{
    rng_state = 0x7777aaaa5555ccccull;
    double t0 = now_s();
    char dir[32];
    tck_mkdtemp(dir, sizeof dir, "check_fuzz");
    char in[64], db[64];
    snprintf(in, sizeof in, "%s/t.pftrace", dir);
    snprintf(db, sizeof db, "%s/t.db", dir);
    bstr base = {0};
    synthetic_trace(&base);
    /* Sanity: the unmutated trace is read completely. */
    ins_options o = { .input_path = in, .output_path = db, .force = true,
                      .progress = 0, .no_packet_rows = false };
    ins_result res;
    FILE *f = fopen(in, "wb");
    ck_assert_ptr_nonnull(f);
    ck_assert_uint_eq(fwrite(base.d, 1, base.n, f), base.n);
    fclose(f);
    ck_assert_int_eq(ins_inspect(&o, &res), INS_EXIT_OK);
    ck_assert_uint_eq(res.packets, 43); /* 3 + 20 outer, 20 inner */
    int corrupt = 0;
    uint8_t *m = malloc(base.n * 2 + 64);
    ck_assert_ptr_nonnull(m);
    for (int iter = 0; iter < 250 && now_s() - t0 < FUZZ_WALL_CAP_S;
         iter++) {
        size_t n = base.n;
        memcpy(m, base.d, n);
        for (uint32_t k = 1 + rndn(4); k > 0; k--)
            mutate(m, &n, base.n * 2);
        f = fopen(in, "wb");
        ck_assert_ptr_nonnull(f);
        ck_assert_uint_eq(fwrite(m, 1, n, f), n);
        fclose(f);
        o.no_packet_rows = rndn(2);
        memset(&res, 0, sizeof res);
        ins_exit st = ins_inspect(&o, &res);
        ck_assert_msg(st == INS_EXIT_OK || st == INS_EXIT_CORRUPT ||
                      st == INS_EXIT_INPUT, "status %d", st);
        if (st != INS_EXIT_OK) {
            ck_assert_uint_gt(strlen(res.message), 0);
            corrupt++;
        }
        ck_assert_uint_le(res.bytes_decoded, n);
    }
    ck_assert_int_gt(corrupt, 10);
    free(m);
    free(base.d);
    unlink(in);
    unlink(db);
    char j[80];
    snprintf(j, sizeof j, "%s/t.db-journal", dir);
    unlink(j);
    ck_assert_int_eq(rmdir(dir), 0);
}
END_TEST

static Suite *fuzz_suite(void)
{
    Suite *s = suite_create("fuzz");
    TCase *tc = tcase_create("ipc");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_fuzz_ipc_decoder);
    tcase_add_test(tc, test_fuzz_ipc_host_dispatch);
    suite_add_tcase(s, tc);
    tc = tcase_create("smb");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_fuzz_smb_reader_hostile_contents);
    tcase_add_test(tc, test_fuzz_smb_reader_concurrent_mutation);
    suite_add_tcase(s, tc);
    tc = tcase_create("inspector");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_fuzz_inspector_mutated_traces);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    return tck_run(fuzz_suite());
}
