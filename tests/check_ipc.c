/*
 * check_ipc.c - tests of the IPC layer (ipc/): frame codec incl. malformed
 * and hostile frames, event loop, socket names and ownership, host/client
 * round trips (replies, streams, drop_reply, failures, request_error), fd
 * passing between real processes, peer credentials; the arena that
 * decodes method arguments.
 *
 * Every wait is bounded by pump()'s iteration limit with a 5 s poll bound,
 * never asserted on timing.
 */
#include "config.h"

#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ipc.h"
#include "ipc_arena.h"
#include "tck_main.h"

typedef Perfetto__Protos__IPCFrame Frame;
typedef Perfetto__Protos__RegisterTraceWriterRequest Rtw;
#define RTW_DESC (&perfetto__protos__register_trace_writer_request__descriptor)

/* Run the loop until *flag (or a safety bound). */
static void pump(ipc_loop *loop, const volatile bool *flag)
{
    for (int i = 0; i < 2000 && !*flag; i++)
        ck_assert_int_ge(ipc_loop_run_once(loop, 5000 / 100), 0);
}

static void pump_n(ipc_loop *loop, int n)
{
    for (int i = 0; i < n; i++)
        ipc_loop_run_once(loop, 10);
}

static char tmpdir[64];

static void make_tmpdir(void)
{
    tck_mkdtemp(tmpdir, sizeof tmpdir, "check_ipc");
}

static void rm_tmpdir(void)
{
    tck_rmdir(tmpdir);
}

/* ================= frame codec ================= */

/* The next frame d decodes has request_id rid. */
static void expect_frame_id(ipc_decoder *d, uint64_t rid)
{
    Frame *out;
    ck_assert_int_eq(ipc_decoder_next(d, &out), 1);
    ck_assert_uint_eq(out->request_id, rid);
    perfetto__protos__ipcframe__free_unpacked(out, NULL);
}

static Frame *bind_frame(uint64_t rid, const char *name, Frame *f,
                         Perfetto__Protos__IPCFrame__BindService *b)
{
    perfetto__protos__ipcframe__init(f);
    perfetto__protos__ipcframe__bind_service__init(b);
    b->service_name = (char *)name;
    f->has_request_id = true;
    f->request_id = rid;
    f->msg_case = PERFETTO__PROTOS__IPCFRAME__MSG_MSG_BIND_SERVICE;
    f->msg_bind_service = b;
    return f;
}

START_TEST(test_frame_roundtrip_bytewise)
{
    Frame f;
    Perfetto__Protos__IPCFrame__BindService b;
    uint8_t *buf;
    size_t len;
    ck_assert_int_eq(ipc_frame_pack(bind_frame(7, "ProducerPort", &f, &b),
                                    &buf, &len), 0);
    /* Header: 4-byte LE length of the rest. */
    ck_assert_uint_eq(len, 4 + (buf[0] | buf[1] << 8 | buf[2] << 16));
    ck_assert_uint_eq(buf[3], 0);
    /* request_id = 2 (varint), then field 3 length-delimited. */
    ck_assert_uint_eq(buf[4], 0x10);
    ck_assert_uint_eq(buf[5], 7);
    ck_assert_uint_eq(buf[6], 0x1a);
    ipc_decoder *d = ipc_decoder_create();
    Frame *out;
    for (size_t i = 0; i < len; i++) {
        ck_assert_int_eq(ipc_decoder_next(d, &out), 0);
        ck_assert_int_eq(ipc_decoder_feed(d, buf + i, 1), 0);
    }
    ck_assert_int_eq(ipc_decoder_next(d, &out), 1);
    ck_assert_uint_eq(out->request_id, 7);
    ck_assert_int_eq(out->msg_case,
                     PERFETTO__PROTOS__IPCFRAME__MSG_MSG_BIND_SERVICE);
    ck_assert_str_eq(out->msg_bind_service->service_name, "ProducerPort");
    perfetto__protos__ipcframe__free_unpacked(out, NULL);
    ck_assert_int_eq(ipc_decoder_next(d, &out), 0);
    ipc_decoder_destroy(d);
    free(buf);
}
END_TEST

START_TEST(test_frame_many_in_one_buffer)
{
    ipc_decoder *d = ipc_decoder_create();
    Frame f;
    Perfetto__Protos__IPCFrame__BindService b;
    uint8_t *buf;
    size_t len;
    for (uint64_t r = 1; r <= 100; r++) {
        ck_assert_int_eq(ipc_frame_pack(bind_frame(r, "X", &f, &b), &buf,
                                        &len), 0);
        ck_assert_int_eq(ipc_decoder_feed(d, buf, len), 0);
        free(buf);
    }
    for (uint64_t r = 1; r <= 100; r++)
        expect_frame_id(d, r);
    Frame *out;
    ck_assert_int_eq(ipc_decoder_next(d, &out), 0);
    ipc_decoder_destroy(d);
}
END_TEST

START_TEST(test_frame_empty_ignored)
{
    ipc_decoder *d = ipc_decoder_create();
    static const uint8_t zero[8] = { 0 };
    ck_assert_int_eq(ipc_decoder_feed(d, zero, sizeof zero), 0);
    /* then a valid frame: request_id = 5 */
    static const uint8_t ok[] = { 2, 0, 0, 0, 0x10, 5 };
    ck_assert_int_eq(ipc_decoder_feed(d, ok, sizeof ok), 0);
    expect_frame_id(d, 5);
    ck_assert_uint_eq(ipc_decoder_empty_frames(d), 2);
    ipc_decoder_destroy(d);
}
END_TEST

START_TEST(test_frame_garbage_dropped_stream_continues)
{
    ipc_decoder *d = ipc_decoder_create();
    /* wire type 7 is invalid; truncated varint; truncated length field */
    static const uint8_t bad[] = {
        2, 0, 0, 0, 0x0f, 0x01,
        3, 0, 0, 0, 0x10, 0xff, 0xff,
        3, 0, 0, 0, 0x1a, 0x7f, 0x00,
    };
    static const uint8_t ok[] = { 2, 0, 0, 0, 0x10, 9 };
    ck_assert_int_eq(ipc_decoder_feed(d, bad, sizeof bad), 0);
    ck_assert_int_eq(ipc_decoder_feed(d, ok, sizeof ok), 0);
    expect_frame_id(d, 9);
    ck_assert_uint_eq(ipc_decoder_dropped_frames(d), 3);
    ipc_decoder_destroy(d);
}
END_TEST

/* Field number 0 in a two-byte key (80 00): protobuf-c parses it, but the
 * frame would not parse again once re-packed, so it is dropped; inside a
 * nested message too (found by fuzz/fuzz_ipc_frame). */
START_TEST(test_frame_field_zero_dropped)
{
    ipc_decoder *d = ipc_decoder_create();
    static const uint8_t bad[] = {
        5, 0, 0, 0, 0x10, 7, 0x80, 0x00, 0x00,          /* top level */
        7, 0, 0, 0, 0x10, 8, 0x1a, 3, 0x80, 0x00, 0x01, /* in BindService */
    };
    static const uint8_t ok[] = { 2, 0, 0, 0, 0x10, 9 };
    ck_assert_int_eq(ipc_decoder_feed(d, bad, sizeof bad), 0);
    ck_assert_int_eq(ipc_decoder_feed(d, ok, sizeof ok), 0);
    Frame *out;
    ck_assert_int_eq(ipc_decoder_next(d, &out), 1);
    ck_assert_uint_eq(out->request_id, 9);
    ck_assert(ipc_message_well_formed(&out->base));
    perfetto__protos__ipcframe__free_unpacked(out, NULL);
    ck_assert_uint_eq(ipc_decoder_dropped_frames(d), 2);
    ipc_decoder_destroy(d);
}
END_TEST

START_TEST(test_frame_oversize_fatal)
{
    ipc_decoder *d = ipc_decoder_create();
    /* N = 131069: 4 + N = 131073 > 131072 */
    uint32_t n = IPC_FRAME_MAX_BYTES - IPC_FRAME_HEADER_BYTES + 1;
    uint8_t h[4] = { (uint8_t)n, (uint8_t)(n >> 8), (uint8_t)(n >> 16), 0 };
    ck_assert_int_eq(ipc_decoder_feed(d, h, 4), 0);
    Frame *out;
    ck_assert_int_eq(ipc_decoder_next(d, &out), -EMSGSIZE);
    ck_assert_ptr_null(out);
    /* latched */
    ck_assert_int_eq(ipc_decoder_next(d, &out), -EMSGSIZE);
    size_t avail;
    ipc_decoder_write_ptr(d, &avail);
    ck_assert_uint_eq(avail, 0);
    ipc_decoder_destroy(d);
    /* 0xffffffff */
    d = ipc_decoder_create();
    static const uint8_t ff[4] = { 0xff, 0xff, 0xff, 0xff };
    ck_assert_int_eq(ipc_decoder_feed(d, ff, 4), 0);
    ck_assert_int_eq(ipc_decoder_next(d, &out), -EMSGSIZE);
    ipc_decoder_destroy(d);
}
END_TEST

START_TEST(test_frame_max_size_accepted)
{
    /* A frame of exactly 131072 bytes including its header is legal. */
    size_t body = IPC_FRAME_MAX_BYTES - IPC_FRAME_HEADER_BYTES;
    Frame f = PERFETTO__PROTOS__IPCFRAME__INIT;
    ProtobufCBinaryData blob;
    /* data_for_testing: tag(1) + 3-byte varint length + payload */
    blob.len = body - 1 - 3;
    blob.data = calloc(1, blob.len);
    f.n_data_for_testing = 1;
    f.data_for_testing = &blob;
    uint8_t *buf;
    size_t len;
    ck_assert_int_eq(ipc_frame_pack(&f, &buf, &len), 0);
    ck_assert_uint_eq(len, IPC_FRAME_MAX_BYTES);
    ipc_decoder *d = ipc_decoder_create();
    ck_assert_int_eq(ipc_decoder_feed(d, buf, len), 0);
    Frame *out;
    ck_assert_int_eq(ipc_decoder_next(d, &out), 1);
    ck_assert_uint_eq(out->data_for_testing[0].len, blob.len);
    perfetto__protos__ipcframe__free_unpacked(out, NULL);
    ipc_decoder_destroy(d);
    free(buf);
    /* one byte more cannot be packed */
    blob.len++;
    ck_assert_int_eq(ipc_frame_pack(&f, &buf, &len), -EMSGSIZE);
    free(blob.data);
}
END_TEST

START_TEST(test_frame_random_garbage_never_crashes)
{
    /* Deterministic pseudo-random streams with small length prefixes so
     * that frames complete and reach the parser. */
    uint32_t x = 12345;
    for (int round = 0; round < 200; round++) {
        ipc_decoder *d = ipc_decoder_create();
        for (int k = 0; k < 50; k++) {
            uint8_t buf[64];
            x = x * 1103515245u + 12345u;
            uint32_t n = (x >> 16) % 60;
            buf[0] = (uint8_t)n;
            buf[1] = buf[2] = buf[3] = 0;
            for (uint32_t i = 0; i < n; i++) {
                x = x * 1103515245u + 12345u;
                buf[4 + i] = (uint8_t)(x >> 16);
            }
            if (ipc_decoder_feed(d, buf, 4 + n) < 0)
                break;
            Frame *out;
            int rc;
            while ((rc = ipc_decoder_next(d, &out)) == 1)
                perfetto__protos__ipcframe__free_unpacked(out, NULL);
            ck_assert_int_eq(rc, 0);
        }
        ipc_decoder_destroy(d);
    }
}
END_TEST

/* ================= event loop ================= */

static int order[8];
static int n_order;
static void rec(void *ctx)
{
    order[n_order++] = (int)(intptr_t)ctx;
}

START_TEST(test_loop_timers_order_and_cancel)
{
    ipc_loop *loop = ipc_loop_create();
    n_order = 0;
    /* Timer 3 is added first with the latest deadline; its 490 ms lead
     * over timer 2 keeps the expected order even on a loaded machine. */
    ipc_loop_add_timer(loop, 500, 0, rec, (void *)3);
    ipc_loop_add_timer(loop, 0, 0, rec, (void *)1);
    uint64_t t = ipc_loop_add_timer(loop, 10, 0, rec, (void *)99);
    ipc_loop_add_timer(loop, 10, 0, rec, (void *)2);
    ipc_loop_cancel_timer(loop, t);
    for (int i = 0; i < 1000 && n_order < 3; i++)
        ipc_loop_run_once(loop, -1);
    ck_assert_int_eq(n_order, 3);
    ck_assert_int_eq(order[0], 1);
    ck_assert_int_eq(order[1], 2);
    ck_assert_int_eq(order[2], 3);
    ipc_loop_destroy(loop);
}
END_TEST

static int periodic_hits;
static uint64_t periodic_id;
static ipc_loop *periodic_loop;
static void periodic(void *ctx)
{
    (void)ctx;
    if (++periodic_hits == 3)
        ipc_loop_cancel_timer(periodic_loop, periodic_id);
}

START_TEST(test_loop_periodic_cancel_from_callback)
{
    ipc_loop *loop = periodic_loop = ipc_loop_create();
    periodic_hits = 0;
    periodic_id = ipc_loop_add_timer(loop, 1, 1, periodic, NULL);
    pump_n(loop, 50);
    ck_assert_int_eq(periodic_hits, 3);
    ipc_loop_destroy(loop);
}
END_TEST

static void quit_task(void *ctx)
{
    ipc_loop_quit(ctx);
}

static void *thread_post(void *arg)
{
    ipc_loop_post_threadsafe(arg, quit_task, arg);
    return NULL;
}

START_TEST(test_loop_post_threadsafe_wakes)
{
    ipc_loop *loop = ipc_loop_create();
    pthread_t th;
    pthread_create(&th, NULL, thread_post, loop);
    ck_assert_int_eq(ipc_loop_run(loop), 0); /* returns only via quit */
    pthread_join(th, NULL);
    ipc_loop_destroy(loop);
}
END_TEST

/* ================= socket names and ownership ================= */

START_TEST(test_sock_path_resolution)
{
    char p[108];
    setenv("PERFETTO_PRODUCER_SOCK_NAME", "/x/env.sock", 1);
    ck_assert_int_eq(ipc_sock_path(IPC_SOCK_PRODUCER, "/x/flag", p,
                                   sizeof p), 0);
    ck_assert_str_eq(p, "/x/flag");
    ck_assert_int_eq(ipc_sock_path(IPC_SOCK_PRODUCER, NULL, p, sizeof p), 0);
    ck_assert_str_eq(p, "/x/env.sock");
    unsetenv("PERFETTO_PRODUCER_SOCK_NAME");
    unsetenv("PERFETTO_CONSUMER_SOCK_NAME");
    make_tmpdir();
    /* Defaults (the uid rules are exercised with a second uid in
     * check_sec): root always gets the system directory; another user
     * her private $XDG_RUNTIME_DIR, else /tmp/shmtrace-UID. */
    char sys[128], want[160];
    snprintf(sys, sizeof sys, "%s/sys", tmpdir);
    setenv("SHMTRACE_SYSTEM_SOCK_DIR", sys, 1);
    setenv("XDG_RUNTIME_DIR", tmpdir, 1);
    ck_assert_int_eq(ipc_sock_path(IPC_SOCK_CONSUMER, "", p, sizeof p), 0);
    if (geteuid() == 0)
        snprintf(want, sizeof want, "%s/shmtrace-consumer.sock", sys);
    else
        snprintf(want, sizeof want, "%s/shmtrace-consumer.sock", tmpdir);
    ck_assert_str_eq(p, want);
    setenv("XDG_RUNTIME_DIR", "relative/dir", 1);
    ck_assert_int_eq(ipc_sock_path(IPC_SOCK_PRODUCER, NULL, p, sizeof p), 0);
    if (geteuid() == 0)
        snprintf(want, sizeof want, "%s/shmtrace-producer.sock", sys);
    else
        snprintf(want, sizeof want, "/tmp/shmtrace-%u/shmtrace-producer.sock",
                 (unsigned)geteuid());
    ck_assert_str_eq(p, want);
    unsetenv("XDG_RUNTIME_DIR");
    unsetenv("SHMTRACE_SYSTEM_SOCK_DIR");
    ck_assert_int_eq(ipc_sock_path(IPC_SOCK_CONSUMER, NULL, p, sizeof p), 0);
    if (geteuid() == 0)
        ck_assert_str_eq(p, "/run/shmtrace/shmtrace-consumer.sock");
    char longname[200];
    memset(longname, 'a', sizeof longname - 1);
    longname[0] = '/';
    longname[sizeof longname - 1] = 0;
    ck_assert_int_eq(ipc_sock_path(IPC_SOCK_CONSUMER, longname, p, sizeof p),
                     -ENAMETOOLONG);
    rm_tmpdir();
}
END_TEST

START_TEST(test_sock_listen_ownership)
{
    make_tmpdir();
    char path[128];
    snprintf(path, sizeof path, "%s/s.sock", tmpdir);
    int fd = ipc_sock_listen(path, 0600);
    ck_assert_int_ge(fd, 0);
    struct stat st;
    ck_assert_int_eq(stat(path, &st), 0);
    ck_assert_uint_eq(st.st_mode & 0777, 0600);
    /* live instance: refused, socket untouched */
    ck_assert_int_eq(ipc_sock_listen(path, 0600), -EADDRINUSE);
    close(fd);
    /* stale: replaced, new mode applied */
    fd = ipc_sock_listen(path, 0660);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(stat(path, &st), 0);
    ck_assert_uint_eq(st.st_mode & 0777, 0660);
    close(fd);
    /* not a socket: never unlinked */
    char reg[128];
    snprintf(reg, sizeof reg, "%s/file", tmpdir);
    FILE *fp = fopen(reg, "w");
    fclose(fp);
    ck_assert_int_eq(ipc_sock_listen(reg, 0600), -EEXIST);
    ck_assert_int_eq(stat(reg, &st), 0);
    /* no listener */
    ck_assert_int_lt(ipc_sock_connect(path), 0);
    rm_tmpdir();
}
END_TEST

START_TEST(test_sock_abstract_name)
{
    char name[64];
    snprintf(name, sizeof name, "@shmtrace-check-%d", (int)getpid());
    int fd = ipc_sock_listen(name, 0600);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(ipc_sock_listen(name, 0600), -EADDRINUSE);
    int c = ipc_sock_connect(name);
    ck_assert_int_ge(c, 0);
    close(c);
    close(fd);
}
END_TEST

/* ================= host / client ================= */

typedef struct test_svc {
    ipc_loop *loop;
    ipc_call *deferred;
    int disconnects;
    int last_fd_value;   /* 4 bytes read from a passed fd */
    uid_t uid;
    pid_t pid;
    int calls;
} test_svc;

static void m_echo(ipc_call *call, const ProtobufCMessage *args, void *ctx)
{
    test_svc *s = ctx;
    s->calls++;
    s->uid = ipc_conn_uid(ipc_call_conn(call));
    s->pid = ipc_conn_pid(ipc_call_conn(call));
    const Rtw *req = (const Rtw *)args;
    Rtw rep = PERFETTO__PROTOS__REGISTER_TRACE_WRITER_REQUEST__INIT;
    rep.has_trace_writer_id = true;
    rep.trace_writer_id = req->trace_writer_id + 1;
    ipc_call_reply(call, &rep.base, false);
}

static void m_stream(ipc_call *call, const ProtobufCMessage *args, void *ctx)
{
    (void)args;
    ((test_svc *)ctx)->calls++;
    for (uint32_t i = 0; i < 3; i++) {
        Rtw rep = PERFETTO__PROTOS__REGISTER_TRACE_WRITER_REQUEST__INIT;
        rep.has_trace_writer_id = true;
        rep.trace_writer_id = i;
        ck_assert_int_eq(ipc_call_reply(call, &rep.base, i < 2), 0);
    }
}

static void m_defer(ipc_call *call, const ProtobufCMessage *args, void *ctx)
{
    (void)args;
    test_svc *s = ctx;
    s->calls++;
    s->deferred = call;
}

static void m_fail(ipc_call *call, const ProtobufCMessage *args, void *ctx)
{
    (void)args;
    ((test_svc *)ctx)->calls++;
    ipc_call_fail(call);
}

static void m_take_fd(ipc_call *call, const ProtobufCMessage *args, void *ctx)
{
    (void)args;
    test_svc *s = ctx;
    s->calls++;
    s->uid = ipc_conn_uid(ipc_call_conn(call));
    s->pid = ipc_conn_pid(ipc_call_conn(call));
    int fd = ipc_call_take_fd(call);
    s->last_fd_value = -1;
    if (fd >= 0) {
        int v = 0;
        if (pread(fd, &v, sizeof v, 0) == sizeof v)
            s->last_fd_value = v;
        close(fd);
    }
    ipc_call_reply(call, NULL, false);
}

static void m_give_fd(ipc_call *call, const ProtobufCMessage *args, void *ctx)
{
    (void)args;
    ((test_svc *)ctx)->calls++;
    char tmpl[] = "/tmp/check_ipc_fd.XXXXXX";
    int fd = mkstemp(tmpl);
    unlink(tmpl);
    int v = 0x5eed;
    ck_assert_int_eq(pwrite(fd, &v, sizeof v, 0), sizeof v);
    ipc_call_reply_fd(call, NULL, true, fd);
    close(fd); /* the host dup()ed it */
    ipc_call_reply(call, NULL, false);
}

static void m_close(ipc_call *call, const ProtobufCMessage *args, void *ctx)
{
    (void)args;
    ((test_svc *)ctx)->calls++;
    ipc_conn_close(ipc_call_conn(call));
}

static void m_big(ipc_call *call, const ProtobufCMessage *args, void *ctx)
{
    (void)args;
    ((test_svc *)ctx)->calls++;
    Perfetto__Protos__ReadBuffersResponse r =
        PERFETTO__PROTOS__READ_BUFFERS_RESPONSE__INIT;
    Perfetto__Protos__ReadBuffersResponse__Slice sl =
        PERFETTO__PROTOS__READ_BUFFERS_RESPONSE__SLICE__INIT;
    Perfetto__Protos__ReadBuffersResponse__Slice *slp = &sl;
    sl.has_data = true;
    sl.data.len = IPC_FRAME_MAX_BYTES;
    sl.data.data = calloc(1, sl.data.len);
    r.n_slices = 1;
    r.slices = &slp;
    ck_assert_int_eq(ipc_call_reply(call, &r.base, false), -EMSGSIZE);
    sl.data.len = IPC_MAX_PAYLOAD_BYTES - 16;
    ck_assert_int_eq(ipc_call_reply(call, &r.base, false), 0);
    free(sl.data.data);
}

static void svc_disconnect(ipc_conn *conn, void *ctx)
{
    (void)conn;
    test_svc *s = ctx;
    s->disconnects++;
    s->deferred = NULL; /* the host frees unfinished calls */
}

static const ipc_method test_methods[] = {
    { "Echo", RTW_DESC, m_echo },
    { "Stream", NULL, m_stream },
    { "Defer", NULL, m_defer },
    { "Fail", NULL, m_fail },
    { "TakeFd", NULL, m_take_fd },
    { "GiveFd", NULL, m_give_fd },
    { "Close", NULL, m_close },
    { "Big", NULL, m_big },
};
static const ipc_service test_service = {
    "TestPort", test_methods, sizeof test_methods / sizeof test_methods[0],
    svc_disconnect,
};

typedef struct cli_state {
    bool bound_cb, bound_ok;
    bool disconnected;
    int disconnect_err;
    int replies;
    int last_status;
    bool last_more;
    uint32_t vals[8];
    int n_vals;
    int got_fd_value;
    bool done;
} cli_state;

static void c_bound(ipc_client *c, bool ok, void *ctx)
{
    (void)c;
    cli_state *s = ctx;
    s->bound_cb = true;
    s->bound_ok = ok;
}

static void c_disc(ipc_client *c, int err, void *ctx)
{
    (void)c;
    cli_state *s = ctx;
    s->disconnected = true;
    s->disconnect_err = err;
}

static const ipc_client_cbs client_cbs = { c_bound, c_disc };

static void c_reply(ipc_client *c, int status, const ProtobufCMessage *reply,
                    bool has_more, void *ctx)
{
    cli_state *s = ctx;
    s->replies++;
    s->last_status = status;
    s->last_more = has_more;
    if (reply && reply->descriptor == RTW_DESC && s->n_vals < 8)
        s->vals[s->n_vals++] = ((const Rtw *)reply)->trace_writer_id;
    int fd = ipc_client_take_fd(c);
    if (fd >= 0) {
        int v = 0;
        if (pread(fd, &v, sizeof v, 0) == sizeof v)
            s->got_fd_value = v;
        close(fd);
    }
    if (!has_more)
        s->done = true;
}

typedef struct fixture {
    ipc_loop *loop;
    ipc_host *host;
    test_svc svc;
    ipc_client *client;
    cli_state cs;
    int raw; /* a raw socket into the host, or -1 */
} fixture;

/* A host (no socket file) exposing `service` with ctx fx->svc, one
 * connection adopted through a socketpair; its other end is a client
 * binding `port` (after the bind attempt), or fx->raw if port is NULL. */
static void fx_open(fixture *fx, const ipc_service *service,
                    const char *port)
{
    memset(fx, 0, sizeof *fx);
    fx->raw = -1;
    fx->loop = ipc_loop_create();
    int err = 0;
    fx->host = ipc_host_create_from_fd(fx->loop, -1, &err);
    ck_assert_ptr_nonnull(fx->host);
    ck_assert_int_eq(ipc_host_expose_service(fx->host, service, &fx->svc),
                     0);
    int sv[2];
    ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    ck_assert_int_eq(ipc_host_adopt_client(fx->host, sv[0]), 0);
    if (port) {
        fx->client = ipc_client_create_from_fd(fx->loop, sv[1], port,
                                               &client_cbs, &fx->cs, &err);
        ck_assert_ptr_nonnull(fx->client);
        pump(fx->loop, &fx->cs.bound_cb);
    } else {
        fx->raw = sv[1];
    }
}

/* TestPort, bound by a client or reached raw; a service is exposed once. */
static void fx_init(fixture *fx, bool with_client)
{
    fx_open(fx, &test_service, with_client ? "TestPort" : NULL);
    ck_assert_int_eq(ipc_host_expose_service(fx->host, &test_service,
                                             &fx->svc), -EEXIST);
    if (with_client)
        ck_assert(fx->cs.bound_ok);
}

/* Invokes method (no arguments) with c_reply collecting into fx->cs. */
static void fx_invoke(fixture *fx, const char *method,
                      const ProtobufCMessageDescriptor *reply_desc)
{
    ck_assert_int_gt(ipc_client_invoke(fx->client, method, NULL, -1,
                                       reply_desc, c_reply, &fx->cs), 0);
}

static void fx_fini(fixture *fx)
{
    ipc_client_destroy(fx->client);
    if (fx->raw >= 0)
        close(fx->raw);
    ipc_host_destroy(fx->host);
    ipc_loop_destroy(fx->loop);
}

START_TEST(test_rpc_bind_and_reply)
{
    fixture fx;
    fx_init(&fx, true);
    ck_assert(ipc_client_has_method(fx.client, "Echo"));
    ck_assert(!ipc_client_has_method(fx.client, "Nope"));
    Rtw req = PERFETTO__PROTOS__REGISTER_TRACE_WRITER_REQUEST__INIT;
    req.has_trace_writer_id = true;
    req.trace_writer_id = 41;
    int64_t rid = ipc_client_invoke(fx.client, "Echo", &req.base, -1,
                                    RTW_DESC, c_reply, &fx.cs);
    ck_assert_int_eq(rid, 2); /* 1 was BindService */
    pump(fx.loop, &fx.cs.done);
    ck_assert_int_eq(fx.cs.last_status, 0);
    ck_assert_int_eq(fx.cs.n_vals, 1);
    ck_assert_uint_eq(fx.cs.vals[0], 42);
    ck_assert_int_eq(fx.svc.uid, (int)getuid());
    ck_assert_int_eq(fx.svc.pid, (int)getpid());
    ck_assert_int_eq(ipc_client_invoke(fx.client, "Nope", NULL, -1, NULL,
                                       c_reply, &fx.cs), -ENOENT);
    fx_fini(&fx);
    ck_assert_int_eq(fx.svc.disconnects, 1);
}
END_TEST

START_TEST(test_rpc_bind_unknown_service)
{
    fixture fx;
    fx_open(&fx, &test_service, "ConsumerPort");
    ck_assert(!fx.cs.bound_ok);
    ck_assert(!ipc_client_is_bound(fx.client));
    ck_assert_int_eq(ipc_client_invoke(fx.client, "Echo", NULL, -1, NULL,
                                       c_reply, &fx.cs), -ENOTCONN);
    fx_fini(&fx);
    ck_assert_int_eq(fx.svc.disconnects, 0); /* never used the service */
}
END_TEST

START_TEST(test_rpc_streaming_reply)
{
    fixture fx;
    fx_init(&fx, true);
    fx_invoke(&fx, "Stream", RTW_DESC);
    pump(fx.loop, &fx.cs.done);
    ck_assert_int_eq(fx.cs.replies, 3);
    ck_assert_int_eq(fx.cs.n_vals, 3);
    for (int i = 0; i < 3; i++)
        ck_assert_uint_eq(fx.cs.vals[i], (uint32_t)i);
    ck_assert(!fx.cs.last_more);
    fx_fini(&fx);
}
END_TEST

START_TEST(test_rpc_deferred_reply_and_failure)
{
    fixture fx;
    fx_init(&fx, true);
    fx_invoke(&fx, "Defer", NULL);
    pump_n(fx.loop, 5);
    ck_assert_ptr_nonnull(fx.svc.deferred);
    ck_assert_int_eq(fx.cs.replies, 0);
    ipc_call_reply(fx.svc.deferred, NULL, false);
    pump(fx.loop, &fx.cs.done);
    ck_assert_int_eq(fx.cs.last_status, 0);
    fx.cs.done = false;
    fx_invoke(&fx, "Fail", NULL);
    pump(fx.loop, &fx.cs.done);
    ck_assert_int_eq(fx.cs.last_status, -EPROTO);
    fx_fini(&fx);
}
END_TEST

START_TEST(test_rpc_drop_reply)
{
    fixture fx;
    fx_init(&fx, true);
    Rtw req = PERFETTO__PROTOS__REGISTER_TRACE_WRITER_REQUEST__INIT;
    ck_assert_int_gt(ipc_client_invoke(fx.client, "Echo", &req.base, -1,
                                       NULL, NULL, NULL), 0);
    /* A following normal call is answered; the dropped one never is. */
    ck_assert_int_gt(ipc_client_invoke(fx.client, "Echo", &req.base, -1,
                                       RTW_DESC, c_reply, &fx.cs), 0);
    pump(fx.loop, &fx.cs.done);
    pump_n(fx.loop, 3);
    ck_assert_int_eq(fx.svc.calls, 2);
    ck_assert_int_eq(fx.cs.replies, 1);
    fx_fini(&fx);
}
END_TEST

START_TEST(test_rpc_reply_too_big_rejected)
{
    fixture fx;
    fx_init(&fx, true);
    fx_invoke(&fx, "Big",
              &perfetto__protos__read_buffers_response__descriptor);
    pump(fx.loop, &fx.cs.done);
    ck_assert_int_eq(fx.cs.last_status, 0);
    ck_assert(!fx.cs.disconnected);
    fx_fini(&fx);
}
END_TEST

START_TEST(test_rpc_conn_close_from_handler)
{
    fixture fx;
    fx_init(&fx, true);
    fx_invoke(&fx, "Defer", NULL);
    fx_invoke(&fx, "Close", NULL);
    pump(fx.loop, &fx.cs.disconnected);
    /* both pending calls were failed with -ECONNRESET */
    ck_assert_int_eq(fx.cs.replies, 2);
    ck_assert_int_eq(fx.cs.last_status, -ECONNRESET);
    ck_assert_int_eq(fx.svc.disconnects, 1);
    ck_assert_ptr_null(fx.svc.deferred);
    ck_assert_uint_eq(ipc_host_num_conns(fx.host), 0);
    fx_fini(&fx);
}
END_TEST

/* Raw wire: send bytes, collect reply frames. */
static void raw_send(int fd, const void *p, size_t n)
{
    ck_assert_int_eq(write(fd, p, n), (ssize_t)n);
}

static void raw_send_frame(int fd, const Frame *f)
{
    uint8_t *buf;
    size_t len;
    ck_assert_int_eq(ipc_frame_pack(f, &buf, &len), 0);
    raw_send(fd, buf, len);
    free(buf);
}

/* Read one frame from the raw socket while pumping the loop. NULL on EOF. */
static Frame *raw_recv(fixture *fx, ipc_decoder *d)
{
    for (int i = 0; i < 500; i++) {
        Frame *f;
        if (ipc_decoder_next(d, &f) == 1)
            return f;
        ipc_loop_run_once(fx->loop, 0);
        struct pollfd p = { fx->raw, POLLIN, 0 };
        if (poll(&p, 1, 10) == 1) {
            size_t avail;
            uint8_t *w = ipc_decoder_write_ptr(d, &avail);
            ssize_t n = read(fx->raw, w, avail);
            if (n <= 0)
                return NULL;
            ipc_decoder_commit(d, (size_t)n);
        }
    }
    return NULL;
}

START_TEST(test_wire_unknown_request_and_bad_ids)
{
    fixture fx;
    fx_init(&fx, false);
    ipc_decoder *d = ipc_decoder_create();
    /* frame with only request_id: "unknown request" */
    Frame f = PERFETTO__PROTOS__IPCFRAME__INIT;
    f.has_request_id = true;
    f.request_id = 77;
    raw_send_frame(fx.raw, &f);
    Frame *r = raw_recv(&fx, d);
    ck_assert_ptr_nonnull(r);
    ck_assert_uint_eq(r->request_id, 77);
    ck_assert_int_eq(r->msg_case,
                     PERFETTO__PROTOS__IPCFRAME__MSG_MSG_REQUEST_ERROR);
    ck_assert_str_eq(r->msg_request_error->error, "unknown request");
    perfetto__protos__ipcframe__free_unpacked(r, NULL);
    /* bind: method table, ids 1-based in declaration order */
    Perfetto__Protos__IPCFrame__BindService b;
    raw_send_frame(fx.raw, bind_frame(78, "TestPort", &f, &b));
    r = raw_recv(&fx, d);
    ck_assert_ptr_nonnull(r);
    ck_assert(r->msg_bind_service_reply->success);
    ck_assert_uint_eq(r->msg_bind_service_reply->service_id, 1);
    ck_assert_uint_eq(r->msg_bind_service_reply->n_methods, 8);
    ck_assert_uint_eq(r->msg_bind_service_reply->methods[0]->id, 1);
    ck_assert_str_eq(r->msg_bind_service_reply->methods[0]->name, "Echo");
    ck_assert_uint_eq(r->msg_bind_service_reply->methods[7]->id, 8);
    ck_assert_str_eq(r->msg_bind_service_reply->methods[7]->name, "Big");
    perfetto__protos__ipcframe__free_unpacked(r, NULL);
    /* invoke: bad service, bad method, undecodable args -> success=false,
     * even with drop_reply */
    Perfetto__Protos__IPCFrame__InvokeMethod im =
        PERFETTO__PROTOS__IPCFRAME__INVOKE_METHOD__INIT;
    f.msg_case = PERFETTO__PROTOS__IPCFRAME__MSG_MSG_INVOKE_METHOD;
    f.msg_invoke_method = &im;
    static const uint8_t junk[] = { 0x0f, 0xff };
    struct { uint32_t svc, meth; bool args; } cases[] = {
        { 9, 1, false }, { 0, 1, false }, { 1, 0, false }, { 1, 99, false },
        { 1, 1, true },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        f.request_id = 100 + i;
        im.has_service_id = im.has_method_id = true;
        im.service_id = cases[i].svc;
        im.method_id = cases[i].meth;
        im.has_args_proto = cases[i].args;
        im.args_proto.data = (uint8_t *)junk;
        im.args_proto.len = sizeof junk;
        im.has_drop_reply = im.drop_reply = (i % 2) == 1;
        raw_send_frame(fx.raw, &f);
        r = raw_recv(&fx, d);
        ck_assert_ptr_nonnull(r);
        ck_assert_uint_eq(r->request_id, 100 + i);
        ck_assert_int_eq(r->msg_case,
                         PERFETTO__PROTOS__IPCFRAME__MSG_MSG_INVOKE_METHOD_REPLY);
        ck_assert(!r->msg_invoke_method_reply->success);
        perfetto__protos__ipcframe__free_unpacked(r, NULL);
    }
    ck_assert_int_eq(fx.svc.calls, 0);
    ck_assert_uint_eq(ipc_host_num_conns(fx.host), 1);
    ipc_decoder_destroy(d);
    fx_fini(&fx);
}
END_TEST

START_TEST(test_wire_garbage_then_valid)
{
    fixture fx;
    fx_init(&fx, false);
    ipc_decoder *d = ipc_decoder_create();
    uint32_t x = 99;
    for (int k = 0; k < 300; k++) {
        uint8_t buf[40];
        x = x * 1103515245u + 12345u;
        uint32_t n = (x >> 16) % 36;
        buf[0] = (uint8_t)n;
        buf[1] = buf[2] = buf[3] = 0;
        for (uint32_t i = 0; i < n; i++) {
            x = x * 1103515245u + 12345u;
            buf[4 + i] = (uint8_t)(x >> 16);
        }
        raw_send(fx.raw, buf, 4 + n);
        if (k % 16 == 0)
            pump_n(fx.loop, 1);
    }
    pump_n(fx.loop, 5);
    /* Drain whatever the host answered, then check it still serves. */
    struct pollfd p = { fx.raw, POLLIN, 0 };
    while (poll(&p, 1, 0) == 1) {
        uint8_t sink[4096];
        if (read(fx.raw, sink, sizeof sink) <= 0)
            break;
    }
    ck_assert_uint_eq(ipc_host_num_conns(fx.host), 1);
    Frame f;
    Perfetto__Protos__IPCFrame__BindService b;
    raw_send_frame(fx.raw, bind_frame(5000, "TestPort", &f, &b));
    Frame *r;
    for (;;) {
        r = raw_recv(&fx, d);
        ck_assert_ptr_nonnull(r);
        if (r->request_id == 5000)
            break;
        perfetto__protos__ipcframe__free_unpacked(r, NULL);
    }
    ck_assert(r->msg_bind_service_reply->success);
    perfetto__protos__ipcframe__free_unpacked(r, NULL);
    ipc_decoder_destroy(d);
    fx_fini(&fx);
}
END_TEST

START_TEST(test_wire_oversize_frame_drops_connection)
{
    fixture fx;
    fx_init(&fx, false);
    uint8_t h[4] = { 0xfd, 0xff, 0x01, 0x00 }; /* N = 131069 */
    raw_send(fx.raw, h, 4);
    for (int i = 0; i < 100 && ipc_host_num_conns(fx.host) > 0; i++)
        ipc_loop_run_once(fx.loop, 10);
    ck_assert_uint_eq(ipc_host_num_conns(fx.host), 0);
    uint8_t c;
    ck_assert_int_eq(read(fx.raw, &c, 1), 0); /* EOF */
    fx_fini(&fx);
}
END_TEST

START_TEST(test_wire_peer_eof_mid_frame)
{
    fixture fx;
    fx_init(&fx, false);
    static const uint8_t partial[] = { 10, 0, 0, 0, 0x10 };
    raw_send(fx.raw, partial, sizeof partial);
    close(fx.raw);
    fx.raw = -1;
    for (int i = 0; i < 100 && ipc_host_num_conns(fx.host) > 0; i++)
        ipc_loop_run_once(fx.loop, 10);
    ck_assert_uint_eq(ipc_host_num_conns(fx.host), 0);
    fx_fini(&fx);
}
END_TEST

/* Sends fd, raw, an InvokeMethod of Big (service 1, method 8: a reply of
 * IPC_MAX_PAYLOAD_BYTES - 16). false if the host has dropped us (EPIPE);
 * any other outcome than the whole frame sent fails the test. */
static bool send_big_request(int fd, uint64_t request_id)
{
    Frame f = PERFETTO__PROTOS__IPCFRAME__INIT;
    Perfetto__Protos__IPCFrame__InvokeMethod im =
        PERFETTO__PROTOS__IPCFRAME__INVOKE_METHOD__INIT;
    f.has_request_id = true;
    f.request_id = request_id;
    f.msg_case = PERFETTO__PROTOS__IPCFRAME__MSG_MSG_INVOKE_METHOD;
    f.msg_invoke_method = &im;
    im.has_service_id = im.has_method_id = true;
    im.service_id = 1;
    im.method_id = 8;
    uint8_t *buf;
    size_t len;
    ck_assert_int_eq(ipc_frame_pack(&f, &buf, &len), 0);
    ssize_t w = send(fd, buf, len, MSG_NOSIGNAL);
    int e = errno;
    free(buf);
    if (w < 0 && e == EPIPE)
        return false;
    ck_assert_int_eq(w, (ssize_t)len);
    return true;
}

/* A peer that keeps invoking but never reads its replies must not make the
 * host queue replies without bound: past IPC_CHAN_TX_MAX_BYTES the
 * connection is dropped (before the bound existed, 400 replies of ~128 KiB
 * stayed queued: 50 MiB for one connection). */
START_TEST(test_wire_nonreading_peer_dropped_at_tx_bound)
{
    fixture fx;
    fx_init(&fx, false);
    const int n_calls = 400;
    for (int i = 0; i < n_calls; i++) {
        if (!send_big_request(fx.raw, 1000 + (uint64_t)i))
            break; /* dropped already */
        ipc_loop_run_once(fx.loop, 0); /* the host reads; we never do */
    }
    for (int i = 0; i < 2000 && ipc_host_num_conns(fx.host) > 0; i++)
        ipc_loop_run_once(fx.loop, 1);
    ck_assert_uint_eq(ipc_host_num_conns(fx.host), 0);
    ck_assert_int_eq(fx.svc.disconnects, 1);
    /* It got as far as the bound allows, not further. */
    size_t reply = IPC_MAX_PAYLOAD_BYTES;
    ck_assert_int_ge(fx.svc.calls, (int)(IPC_CHAN_TX_MAX_BYTES / reply) / 2);
    ck_assert_int_lt(fx.svc.calls, n_calls);
    fx_fini(&fx);
}
END_TEST

/* What a host reports through ipc_host_set_refused_cb: refusals (the
 * last one's uid and words) and connections dropped at a transmit bound. */
typedef struct {
    int n, dropped;
    uid_t uid;
    char why[256];
} refusals;

static void on_refused(void *ctx, uid_t uid, bool dropped, const char *why)
{
    refusals *r = ctx;
    if (dropped) {
        r->dropped++;
        return;
    }
    r->n++;
    r->uid = uid;
    snprintf(r->why, sizeof r->why, "%s", why);
}

/* Sends `calls` Big requests (a reply of IPC_MAX_PAYLOAD_BYTES - 16 each)
 * on each of n raw connections of ours, never reading a reply; returns
 * how many connections the host still has, and in *dropped how many it
 * reported dropped. */
static size_t nonreading_round(uint64_t budget, int n, int calls,
                               int *dropped)
{
    ipc_loop *loop = ipc_loop_create();
    ipc_host *host = ipc_host_create_from_fd(loop, -1, NULL);
    ck_assert_ptr_nonnull(host);
    test_svc svc = { 0 };
    ipc_host_expose_service(host, &test_service, &svc);
    ipc_host_set_tx_max_per_uid(host, budget);
    refusals r = { 0 };
    ipc_host_set_refused_cb(host, on_refused, &r);
    int raw[4];
    ck_assert_int_le(n, 4);
    for (int k = 0; k < n; k++) {
        int sv[2];
        ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
        ck_assert_int_eq(ipc_host_adopt_client(host, sv[0]), 0);
        raw[k] = sv[1];
    }
    for (int i = 0; i < calls; i++) {
        for (int k = 0; k < n; k++) {
            send_big_request(raw[k], 1000 + (uint64_t)i);
            ipc_loop_run_once(loop, 0);
        }
    }
    for (int i = 0; i < 200; i++)
        ipc_loop_run_once(loop, 1);
    size_t left = ipc_host_num_conns(host);
    *dropped = r.dropped;
    for (int k = 0; k < n; k++)
        close(raw[k]);
    ipc_host_destroy(host);
    ipc_loop_destroy(loop);
    return left;
}

/* The replies queued for one uid's connections share a budget: two
 * connections that never read, each within the per-connection bound and
 * the budget alone, pass the budget together and one is dropped; with a
 * budget above what they queue, both stay. */
START_TEST(test_wire_nonreading_uid_budget)
{
    /* 20 replies of ~128 KiB: ~2.5 MiB a connection, ~5 MiB for two.
     * The drop is reported (shmtraced logs it). */
    int dropped = -1;
    ck_assert_uint_eq(nonreading_round(4u << 20, 2, 20, &dropped), 1);
    ck_assert_int_eq(dropped, 1);
    ck_assert_uint_eq(nonreading_round(16u << 20, 2, 20, &dropped), 2);
    ck_assert_int_eq(dropped, 0);
    ck_assert_uint_eq(nonreading_round(4u << 20, 1, 20, &dropped), 1);
    ck_assert_int_eq(dropped, 0);
}
END_TEST

/* ================= fd passing between processes ================= */

static int memfile_with(int v)
{
    char tmpl[] = "/tmp/check_ipc_fd.XXXXXX";
    int fd = mkstemp(tmpl);
    unlink(tmpl);
    ck_assert_int_eq(pwrite(fd, &v, sizeof v, 0), sizeof v);
    return fd;
}

/* A fresh temp dir and the path of a host socket in it. */
static const char *host_sock_path(void)
{
    static char path[128];
    make_tmpdir();
    snprintf(path, sizeof path, "%s/host.sock", tmpdir);
    return path;
}

/* The host side in a child process: a host on path exposing TestPort,
 * then serve(), whose result is the child's exit status. Returns once the
 * child listens. */
static pid_t fork_host(const char *path,
                       int (*serve)(ipc_loop *, ipc_host *, test_svc *))
{
    int ready[2];
    ck_assert_int_eq(pipe(ready), 0);
    pid_t child = fork();
    ck_assert_int_ge(child, 0);
    if (child == 0) {
        ipc_loop *hl = ipc_loop_create();
        test_svc svc = { 0 };
        ipc_host *h = ipc_host_create(hl, path, 0600, NULL);
        if (!h)
            _exit(2);
        ipc_host_expose_service(h, &test_service, &svc);
        ck_assert_int_eq(write(ready[1], "r", 1), 1);
        _exit(serve(hl, h, &svc));
    }
    close(ready[1]);    /* a child that dies before listening: EOF */
    char c;
    ck_assert_int_eq(read(ready[0], &c, 1), 1);
    close(ready[0]);
    return child;
}

/* A TestPort client of the host on path, once bound or turned away. */
static ipc_client *connect_settled(ipc_loop *loop, const char *path,
                                   cli_state *cs)
{
    int err = 0;
    ipc_client *cl = ipc_client_connect(loop, path, "TestPort", &client_cbs,
                                        cs, &err);
    ck_assert_msg(cl, "connect: %s", ipc_strerror(err));
    for (int i = 0; i < 2000 && !cs->bound_cb && !cs->disconnected; i++)
        ck_assert_int_ge(ipc_loop_run_once(loop, 50), 0);
    return cl;
}

/* A host on path serving TestPort with svc. */
static ipc_host *test_host(ipc_loop *loop, const char *path, test_svc *svc)
{
    int err = 0;
    ipc_host *host = ipc_host_create(loop, path, 0600, &err);
    ck_assert_msg(host, "host: %s", ipc_strerror(err));
    ipc_host_expose_service(host, &test_service, svc);
    return host;
}

START_TEST(test_fdpass_client_to_host_process)
{
    const char *path = host_sock_path();
    ipc_loop *loop = ipc_loop_create();
    test_svc svc = { 0 };
    ipc_host *host = test_host(loop, path, &svc);
    pid_t child = fork();
    if (child == 0) {
        /* Child: a client process that passes an fd and exits 0 on a
         * successful reply. */
        ipc_loop *cl = ipc_loop_create();
        cli_state cs = { 0 };
        ipc_client *c = ipc_client_connect(cl, path, "TestPort", &client_cbs,
                                           &cs, NULL);
        if (!c)
            _exit(2);
        for (int i = 0; i < 500 && !cs.bound_cb; i++)
            ipc_loop_run_once(cl, 10);
        int fd = memfile_with(0x1234);
        if (ipc_client_invoke(c, "TakeFd", NULL, fd, NULL, c_reply, &cs) < 0)
            _exit(3);
        close(fd);
        for (int i = 0; i < 500 && !cs.done; i++)
            ipc_loop_run_once(cl, 10);
        _exit(cs.done && cs.last_status == 0 ? 0 : 4);
    }
    int status = 0;
    for (int i = 0; i < 1000; i++) {
        ipc_loop_run_once(loop, 10);
        if (waitpid(child, &status, WNOHANG) == child)
            break;
    }
    ck_assert(WIFEXITED(status));
    ck_assert_int_eq(WEXITSTATUS(status), 0);
    ck_assert_int_eq(svc.last_fd_value, 0x1234);
    ck_assert_int_eq(svc.pid, child); /* SO_PEERCRED of the peer */
    ck_assert_int_eq(svc.uid, (int)getuid());
    ipc_host_destroy(host);
    struct stat st;
    ck_assert_int_ne(stat(path, &st), 0); /* unlinked on destroy */
    ipc_loop_destroy(loop);
    rm_tmpdir();
}
END_TEST

/* Serves until the client leaves; 0 if it came once, with credentials. */
static int serve_until_disconnect(ipc_loop *hl, ipc_host *h, test_svc *svc)
{
    for (int i = 0; i < 1000 && svc->disconnects == 0; i++)
        ipc_loop_run_once(hl, 10);
    ipc_host_destroy(h);
    return svc->disconnects == 1 && svc->pid != 0 ? 0 : 5;
}

START_TEST(test_fdpass_host_to_client_process)
{
    const char *path = host_sock_path();
    pid_t child = fork_host(path, serve_until_disconnect);
    ipc_loop *loop = ipc_loop_create();
    cli_state cs = { 0 };
    ipc_client *cl = connect_settled(loop, path, &cs);
    ck_assert_int_gt(ipc_client_invoke(cl, "GiveFd", NULL, -1, NULL, c_reply,
                                       &cs), 0);
    pump(loop, &cs.done);
    ck_assert_int_eq(cs.got_fd_value, 0x5eed);
    /* Echo records the peer's credentials on the host side. */
    cs.done = false;
    Rtw req = PERFETTO__PROTOS__REGISTER_TRACE_WRITER_REQUEST__INIT;
    ck_assert_int_gt(ipc_client_invoke(cl, "Echo", &req.base, -1, RTW_DESC,
                                       c_reply, &cs), 0);
    pump(loop, &cs.done);
    ipc_client_destroy(cl);
    int status = 0;
    waitpid(child, &status, 0);
    ck_assert(WIFEXITED(status));
    ck_assert_int_eq(WEXITSTATUS(status), 0);
    ipc_loop_destroy(loop);
    rm_tmpdir();
}
END_TEST

/* Serves until a call is deferred, then dies with it unanswered. */
static int serve_then_die(ipc_loop *hl, ipc_host *h, test_svc *svc)
{
    for (int i = 0; i < 1000 && svc->deferred == NULL; i++)
        ipc_loop_run_once(hl, 10);
    kill(getpid(), SIGKILL);
    return 9;
}

START_TEST(test_fdpass_host_dies_client_notified)
{
    const char *path = host_sock_path();
    pid_t child = fork_host(path, serve_then_die);
    ipc_loop *loop = ipc_loop_create();
    cli_state cs = { 0 };
    ipc_client *cl = connect_settled(loop, path, &cs);
    ck_assert_int_gt(ipc_client_invoke(cl, "Defer", NULL, -1, NULL, c_reply,
                                       &cs), 0);
    pump(loop, &cs.disconnected);
    ck_assert_int_eq(cs.replies, 1);
    ck_assert_int_eq(cs.last_status, -ECONNRESET);
    ck_assert(!ipc_client_is_connected(cl));
    ck_assert_int_eq(ipc_client_invoke(cl, "Echo", NULL, -1, NULL, NULL,
                                       NULL), -ENOTCONN);
    ipc_client_destroy(cl);
    waitpid(child, NULL, 0);
    ipc_loop_destroy(loop);
    /* The dead host left a stale socket: a new host replaces it. */
    ipc_loop *l2 = ipc_loop_create();
    int err = 0;
    ipc_host *h2 = ipc_host_create(l2, path, 0600, &err);
    ck_assert_msg(h2, "stale: %s", ipc_strerror(err));
    ipc_host_destroy(h2);
    ipc_loop_destroy(l2);
    rm_tmpdir();
}
END_TEST

/* Frames with fds sent back to back: each handler gets its own fd. */
static int fd_values[4];
static int n_fd_values;
static void m_take_fd_rec(ipc_call *call, const ProtobufCMessage *args,
                          void *ctx)
{
    m_take_fd(call, args, ctx);
    fd_values[n_fd_values++ & 3] = ((test_svc *)ctx)->last_fd_value;
}

START_TEST(test_fdpass_back_to_back_fds_not_mixed)
{
    static const ipc_method methods[] = { { "TakeFd", NULL, m_take_fd_rec } };
    static const ipc_service svc = { "FdPort", methods, 1, NULL };
    fixture fx;
    fx_open(&fx, &svc, "FdPort");
    n_fd_values = 0;
    for (int i = 0; i < 3; i++) {
        int fd = memfile_with(100 + i);
        /* no reply wanted: the frames go out back to back */
        ck_assert_int_gt(ipc_client_invoke(fx.client, "TakeFd", NULL, fd,
                                           NULL, NULL, NULL), 0);
        close(fd);
    }
    for (int i = 0; i < 200 && n_fd_values < 3; i++)
        ipc_loop_run_once(fx.loop, 10);
    ck_assert_int_eq(n_fd_values, 3);
    ck_assert_int_eq(fd_values[0], 100);
    ck_assert_int_eq(fd_values[1], 101);
    ck_assert_int_eq(fd_values[2], 102);
    fx_fini(&fx);
}
END_TEST

/* ---- arena (ipc_arena.h) ------------------------------------------ */

typedef Perfetto__Protos__CommitDataRequest Cdr;
typedef Perfetto__Protos__CommitDataRequest__ChunksToMove Ctm;
typedef Perfetto__Protos__CommitDataRequest__ChunkToPatch Ctp;
typedef Perfetto__Protos__CommitDataRequest__ChunkToPatch__Patch Ctpp;

/* Pieces are 16-byte aligned, each keeps what was written into it until
 * the end (none overlaps another, in the block or in an extra block); a
 * second begin while in use gets NULL; after a use that overflowed, the
 * block holds the whole of it, so the same use needs no extra block. */
START_TEST(test_arena_pieces_aligned_and_kept)
{
    static const size_t sizes[] = {1, 15, 16, 17, 100, 0, 5000, 3, 70000,
                                   64, 9};
    enum { N = sizeof(sizes) / sizeof(sizes[0]) };
    ipc_arena a;
    ipc_arena_init(&a);
    for (int round = 0; round < 2; round++) {
        ProtobufCAllocator *al = ipc_arena_begin(&a);
        ck_assert_ptr_nonnull(al);
        ck_assert_ptr_null(ipc_arena_begin(&a));        /* in use */
        uint8_t *p[N];
        for (int i = 0; i < N; i++) {
            p[i] = al->alloc(al->allocator_data, sizes[i]);
            ck_assert_ptr_nonnull(p[i]);
            ck_assert_uint_eq((uintptr_t)p[i] % 16, 0);
            memset(p[i], 'a' + i, sizes[i]);
        }
        for (int i = 0; i < N; i++)
            for (size_t k = 0; k < sizes[i]; k++)
                ck_assert_uint_eq(p[i][k], (uint8_t)('a' + i));
        al->free(al->allocator_data, p[0]);       /* nothing until end */
        ck_assert_uint_eq(p[1][0], (uint8_t)('a' + 1));
        if (round == 1)
            ck_assert_ptr_null(a.extra);          /* all in the block */
        else
            ck_assert_ptr_nonnull(a.extra);
        ipc_arena_end(&a);
        ck_assert_ptr_null(a.extra);
        ck_assert_uint_ge(a.cap, 75000);
    }
    ipc_arena_fini(&a);
}
END_TEST

/* A use of more than IPC_ARENA_KEEP_MAX leaves a block of that size, and
 * an allocation of SIZE_MAX fails instead of wrapping. */
START_TEST(test_arena_keeps_at_most_keep_max)
{
    ipc_arena a;
    ipc_arena_init(&a);
    ProtobufCAllocator *al = ipc_arena_begin(&a);
    for (int i = 0; i < 40; i++)
        ck_assert_ptr_nonnull(al->alloc(al->allocator_data, 64 << 10));
    ck_assert_ptr_null(al->alloc(al->allocator_data, SIZE_MAX));
    ck_assert_ptr_null(al->alloc(al->allocator_data, SIZE_MAX - 20));
    ipc_arena_end(&a);
    ck_assert_uint_eq(a.cap, IPC_ARENA_KEEP_MAX);
    ipc_arena_fini(&a);
}
END_TEST

/* A CommitData of 600 chunks and 3 patch groups, decoded into an arena,
 * equals the same decoded with malloc, twice (the second time from the
 * block alone); truncated it fails to decode and the arena stays usable. */
START_TEST(test_arena_decodes_like_malloc)
{
    enum { NC = 600, NP = 3 };
    Cdr m = PERFETTO__PROTOS__COMMIT_DATA_REQUEST__INIT;
    Ctm ctm[NC], *pctm[NC];
    Ctp ctp[NP], *pctp[NP];
    Ctpp pp[NP][2], *ppp[NP][2];
    uint8_t pdata[NP][2][4];
    for (int i = 0; i < NC; i++) {
        Ctm c = PERFETTO__PROTOS__COMMIT_DATA_REQUEST__CHUNKS_TO_MOVE__INIT;
        c.has_page = c.has_chunk = c.has_target_buffer = 1;
        c.page = (uint32_t)i;
        c.chunk = (uint32_t)(i % 7);
        c.target_buffer = (uint32_t)(1 + i % 3);
        ctm[i] = c;
        pctm[i] = &ctm[i];
    }
    for (int i = 0; i < NP; i++) {
        Ctp c = PERFETTO__PROTOS__COMMIT_DATA_REQUEST__CHUNK_TO_PATCH__INIT;
        c.has_target_buffer = c.has_writer_id = c.has_chunk_id = 1;
        c.target_buffer = 1;
        c.writer_id = (uint32_t)(10 + i);
        c.chunk_id = (uint32_t)(100 * i);
        for (int k = 0; k < 2; k++) {
            Ctpp q =
                PERFETTO__PROTOS__COMMIT_DATA_REQUEST__CHUNK_TO_PATCH__PATCH__INIT;
            q.has_offset = q.has_data = 1;
            q.offset = (uint32_t)(8 * k + i);
            memset(pdata[i][k], 0x80 + i * 2 + k, 4);
            q.data.data = pdata[i][k];
            q.data.len = 4;
            pp[i][k] = q;
            ppp[i][k] = &pp[i][k];
        }
        c.n_patches = 2;
        c.patches = ppp[i];
        ctp[i] = c;
        pctp[i] = &ctp[i];
    }
    m.n_chunks_to_move = NC;
    m.chunks_to_move = pctm;
    m.n_chunks_to_patch = NP;
    m.chunks_to_patch = pctp;
    m.has_flush_request_id = 1;
    m.flush_request_id = 77;
    size_t len = perfetto__protos__commit_data_request__get_packed_size(&m);
    uint8_t *wire = malloc(len);
    ck_assert_ptr_nonnull(wire);
    perfetto__protos__commit_data_request__pack(&m, wire);
    Cdr *want = perfetto__protos__commit_data_request__unpack(NULL, len,
                                                              wire);
    ck_assert_ptr_nonnull(want);
    ipc_arena a;
    ipc_arena_init(&a);
    for (int round = 0; round < 2; round++) {
        ProtobufCAllocator *al = ipc_arena_begin(&a);
        Cdr *got = perfetto__protos__commit_data_request__unpack(al, len,
                                                                 wire);
        ck_assert_ptr_nonnull(got);
        ck_assert(round == 0 || a.extra == NULL);
        ck_assert(ipc_message_well_formed(&got->base));
        ck_assert_uint_eq(got->n_chunks_to_move, want->n_chunks_to_move);
        for (size_t i = 0; i < got->n_chunks_to_move; i++) {
            ck_assert_uint_eq(got->chunks_to_move[i]->page,
                              want->chunks_to_move[i]->page);
            ck_assert_uint_eq(got->chunks_to_move[i]->chunk,
                              want->chunks_to_move[i]->chunk);
            ck_assert_uint_eq(got->chunks_to_move[i]->target_buffer,
                              want->chunks_to_move[i]->target_buffer);
        }
        ck_assert_uint_eq(got->n_chunks_to_patch, NP);
        for (size_t i = 0; i < NP; i++) {
            Ctp *g = got->chunks_to_patch[i], *w = want->chunks_to_patch[i];
            ck_assert_uint_eq(g->writer_id, w->writer_id);
            ck_assert_uint_eq(g->chunk_id, w->chunk_id);
            ck_assert_uint_eq(g->n_patches, 2);
            for (size_t k = 0; k < 2; k++) {
                ck_assert_uint_eq(g->patches[k]->offset,
                                  w->patches[k]->offset);
                ck_assert_uint_eq(g->patches[k]->data.len, 4);
                ck_assert_mem_eq(g->patches[k]->data.data,
                                 w->patches[k]->data.data, 4);
            }
        }
        ck_assert_uint_eq(got->flush_request_id, 77);
        ipc_arena_end(&a);
    }
    ProtobufCAllocator *al = ipc_arena_begin(&a);
    ck_assert_ptr_null(perfetto__protos__commit_data_request__unpack(
        al, len - 3, wire));
    ipc_arena_end(&a);
    ck_assert_ptr_nonnull(ipc_arena_begin(&a));
    ipc_arena_end(&a);
    ipc_arena_fini(&a);
    perfetto__protos__commit_data_request__free_unpacked(want, NULL);
    free(wire);
}
END_TEST

/* ---- admission: per-uid limit, refusal words, no descriptors ---------- */

/* test_host whose refusals and drops are collected in r. */
static ipc_host *watched_host(ipc_loop *loop, const char *path,
                              test_svc *svc, refusals *r)
{
    ipc_host *host = test_host(loop, path, svc);
    ipc_host_set_refused_cb(host, on_refused, r);
    return host;
}

/* One uid may hold max_per_uid connections; the next is refused, told
 * why (ipc_client_refusal), counted and reported; closing one lets the
 * next in; 0 lifts the limit. */
START_TEST(test_admit_per_uid_limit)
{
    const char *path = host_sock_path();
    ipc_loop *loop = ipc_loop_create();
    test_svc svc = { 0 };
    refusals r = { 0 };
    ipc_host *host = watched_host(loop, path, &svc, &r);
    ipc_host_set_max_conns_per_uid(host, 2);

    cli_state s1 = { 0 }, s2 = { 0 }, s3 = { 0 }, s4 = { 0 }, s5 = { 0 };
    ipc_client *c1 = connect_settled(loop, path, &s1);
    ipc_client *c2 = connect_settled(loop, path, &s2);
    ck_assert(s1.bound_ok && s2.bound_ok);
    ck_assert_ptr_null(ipc_client_refusal(c1));

    ipc_client *c3 = connect_settled(loop, path, &s3);
    ck_assert(s3.disconnected);
    ck_assert(!s3.bound_ok);
    const char *why = ipc_client_refusal(c3);
    ck_assert_ptr_nonnull(why);
    char want[64];
    snprintf(want, sizeof want, "uid %ld has 2 connections", (long)getuid());
    ck_assert_msg(strstr(why, want) && strstr(why,
                  "--max-connections-per-uid"), "%s", why);
    ck_assert_int_eq(r.n, 1);
    ck_assert_uint_eq(r.uid, getuid());
    ck_assert_str_eq(r.why, why);
    ck_assert_uint_eq(ipc_host_refused(host), 1);
    ck_assert_uint_eq(ipc_host_num_conns(host), 2);

    /* Adopting a socket past the limit is refused too. */
    int sv[2];
    ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    ck_assert_int_eq(ipc_host_adopt_client(host, sv[0]), -EUSERS);
    close(sv[0]);
    close(sv[1]);

    /* One closed: room for the next. */
    ipc_client_destroy(c1);
    for (int i = 0; i < 200 && ipc_host_num_conns(host) != 1; i++)
        ipc_loop_run_once(loop, 10);
    ck_assert_uint_eq(ipc_host_num_conns(host), 1);
    ipc_client *c4 = connect_settled(loop, path, &s4);
    ck_assert(s4.bound_ok);
    ck_assert_ptr_null(ipc_client_refusal(c4));

    /* No limit: a third at once. */
    ipc_host_set_max_conns_per_uid(host, 0);
    ipc_client *c5 = connect_settled(loop, path, &s5);
    ck_assert(s5.bound_ok);
    ck_assert_int_eq(r.n, 1);

    ipc_client_destroy(c2);
    ipc_client_destroy(c3);
    ipc_client_destroy(c4);
    ipc_client_destroy(c5);
    ipc_host_destroy(host);
    ipc_loop_destroy(loop);
    rm_tmpdir();
}
END_TEST

/* The last connections are kept for two uids (a daemon's owner): others
 * are refused, told why, once the rest are taken, even with no per-uid
 * limit; one of those two uids still gets in. Here all but 2 of the
 * host's connections are kept, for two uids that are not ours. */
START_TEST(test_admit_reserved_for_owner)
{
    const char *path = host_sock_path();
    ipc_loop *loop = ipc_loop_create();
    test_svc svc = { 0 };
    refusals r = { 0 };
    ipc_host *host = watched_host(loop, path, &svc, &r);
    uid_t other = getuid() == 12345 ? 12346 : 12345;
    ipc_host_set_reserved_conns(host, IPC_HOST_MAX_CONNS - 2, 0 == getuid()
                                ? other : 0, other);

    cli_state s1 = { 0 }, s2 = { 0 }, s3 = { 0 }, s4 = { 0 };
    ipc_client *c1 = connect_settled(loop, path, &s1);
    ipc_client *c2 = connect_settled(loop, path, &s2);
    ck_assert(s1.bound_ok && s2.bound_ok);
    ipc_client *c3 = connect_settled(loop, path, &s3);
    ck_assert(s3.disconnected && !s3.bound_ok);
    const char *why = ipc_client_refusal(c3);
    ck_assert_ptr_nonnull(why);
    char want[128];
    snprintf(want, sizeof want, "has 2 connections on this socket, and "
             "keeps the last %u of its %u for root and its own uid",
             IPC_HOST_MAX_CONNS - 2, IPC_HOST_MAX_CONNS);
    ck_assert_msg(strstr(why, want), "%s", why);
    ck_assert_int_eq(r.n, 1);
    ck_assert_uint_eq(ipc_host_num_conns(host), 2);

    /* The same connections kept for us: in. */
    ipc_host_set_reserved_conns(host, IPC_HOST_MAX_CONNS - 2, other,
                                getuid());
    ipc_client *c4 = connect_settled(loop, path, &s4);
    ck_assert(s4.bound_ok);
    ck_assert_ptr_null(ipc_client_refusal(c4));
    ck_assert_int_eq(r.n, 1);

    ipc_client_destroy(c1);
    ipc_client_destroy(c2);
    ipc_client_destroy(c3);
    ipc_client_destroy(c4);
    ipc_host_destroy(host);
    ipc_loop_destroy(loop);
    rm_tmpdir();
}
END_TEST

/* A host that refused us before our BindService went out: the send fails
 * (EPIPE), and the refusal waiting in our receive queue is still read
 * before the close is reported (the channel's "last words"). */
START_TEST(test_admit_refusal_read_after_failed_send)
{
    int sv[2];
    ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    Frame f = PERFETTO__PROTOS__IPCFRAME__INIT;
    Perfetto__Protos__IPCFrame__RequestError e =
        PERFETTO__PROTOS__IPCFRAME__REQUEST_ERROR__INIT;
    e.error = (char *)"go away\x01 now";
    f.msg_case = PERFETTO__PROTOS__IPCFRAME__MSG_MSG_REQUEST_ERROR;
    f.msg_request_error = &e;
    uint8_t *bytes;
    size_t len;
    ck_assert_int_eq(ipc_frame_pack(&f, &bytes, &len), 0);
    ck_assert_int_eq(write(sv[0], bytes, len), (ssize_t)len);
    free(bytes);
    close(sv[0]);
    ipc_loop *loop = ipc_loop_create();
    cli_state cs = { 0 };
    int err = 0;
    ipc_client *cl = ipc_client_create_from_fd(loop, sv[1], "TestPort",
                                               &client_cbs, &cs, &err);
    ck_assert_ptr_nonnull(cl);
    pump(loop, &cs.disconnected);
    ck_assert(cs.disconnected);
    ck_assert(!cs.bound_ok);
    /* Printable ASCII only: the control byte is shown as '?'. */
    ck_assert_str_eq(ipc_client_refusal(cl), "go away? now");
    ipc_client_destroy(cl);
    ipc_loop_destroy(loop);
}
END_TEST

/* Out of descriptors (RLIMIT_NOFILE): pending connections are refused
 * with the reason, using the spare descriptor, instead of staying in the
 * listen queue where they kept poll() waking the loop at once (a busy
 * loop for as long as someone held the descriptors). The clients run in
 * a child process: their descriptors are not ours. */
START_TEST(test_admit_out_of_descriptors)
{
    const char *path = host_sock_path();
    ipc_loop *loop = ipc_loop_create();
    test_svc svc = { 0 };
    refusals r = { 0 };
    ipc_host *host = watched_host(loop, path, &svc, &r);
    enum { CLIENTS = 6 };
    int res[2], go[2];
    ck_assert_int_eq(pipe(res), 0);
    ck_assert_int_eq(pipe(go), 0);
    pid_t child = fork();
    ck_assert_int_ge(child, 0);
    if (child == 0) {
        close(res[0]);
        close(go[1]);
        ipc_loop *cl = ipc_loop_create();
        cli_state cs[CLIENTS];
        memset(cs, 0, sizeof cs);
        ipc_client *c[CLIENTS];
        int bound = 0, told = 0;
        for (int i = 0; i < CLIENTS; i++) {
            c[i] = ipc_client_connect(cl, path, "TestPort", &client_cbs,
                                      &cs[i], NULL);
            if (!c[i])
                _exit(2);
            for (int k = 0; k < 500 && !cs[i].bound_cb &&
                            !cs[i].disconnected; k++)
                ipc_loop_run_once(cl, 10);
            const char *why = ipc_client_refusal(c[i]);
            bound += cs[i].bound_ok;
            told += why && strstr(why, "out of file descriptors") != NULL;
        }
        char out[2] = { (char)bound, (char)told };
        if (write(res[1], out, 2) != 2)
            _exit(3);
        char x;
        if (read(go[0], &x, 1) < 0)   /* hold them until the parent is done */
            _exit(4);
        _exit(0);
    }
    close(res[1]);
    close(go[0]);
    /* Room for two more descriptors (two connections), no more. */
    int probe = open("/dev/null", O_RDONLY);
    ck_assert_int_ge(probe, 0);
    close(probe);
    struct rlimit old, low;
    ck_assert_int_eq(getrlimit(RLIMIT_NOFILE, &old), 0);
    low = old;
    low.rlim_cur = (rlim_t)probe + 2;
    ck_assert_int_eq(setrlimit(RLIMIT_NOFILE, &low), 0);
    char got[2];
    ssize_t n = 0;
    struct pollfd pf = { res[0], POLLIN, 0 };
    for (int i = 0; i < 3000 && n == 0; i++) {
        ipc_loop_run_once(loop, 5);
        if (poll(&pf, 1, 0) == 1)
            n = read(res[0], got, 2);
    }
    ck_assert_int_eq(n, 2);
    /* Every connection was served or refused with the reason. */
    ck_assert_int_eq(got[0] + got[1], CLIENTS);
    ck_assert_int_ge(got[1], 1);
    ck_assert_int_eq(r.n, got[1]);
    ck_assert_msg(strstr(r.why, "RLIMIT_NOFILE") != NULL, "%s", r.why);
    /* Nothing waits in the listen queue: the loop sleeps through its
     * timeouts instead of running a callback per iteration. */
    int callbacks = 0;
    for (int i = 0; i < 20; i++)
        callbacks += ipc_loop_run_once(loop, 5);
    ck_assert_int_le(callbacks, 2);
    ck_assert_int_eq(setrlimit(RLIMIT_NOFILE, &old), 0);
    ck_assert_int_eq(write(go[1], "x", 1), 1);
    int st;
    ck_assert_int_eq(waitpid(child, &st, 0), child);
    ck_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    close(res[0]);
    close(go[1]);
    ipc_host_destroy(host);
    ipc_loop_destroy(loop);
    rm_tmpdir();
}
END_TEST

static Suite *ipc_suite(void)
{
    Suite *s = suite_create("ipc");
    TCK_CASE(s, "frame", test_frame_roundtrip_bytewise,
             test_frame_many_in_one_buffer, test_frame_empty_ignored,
             test_frame_garbage_dropped_stream_continues,
             test_frame_field_zero_dropped,
             test_frame_oversize_fatal, test_frame_max_size_accepted,
             test_frame_random_garbage_never_crashes);
    TCK_CASE(s, "loop", test_loop_timers_order_and_cancel,
             test_loop_periodic_cancel_from_callback,
             test_loop_post_threadsafe_wakes);
    TCK_CASE(s, "sock", test_sock_path_resolution, test_sock_listen_ownership,
             test_sock_abstract_name);
    TCK_CASE(s, "rpc", test_rpc_bind_and_reply, test_rpc_bind_unknown_service,
             test_rpc_streaming_reply, test_rpc_deferred_reply_and_failure,
             test_rpc_drop_reply, test_rpc_reply_too_big_rejected,
             test_rpc_conn_close_from_handler);
    TCK_CASE(s, "wire", test_wire_unknown_request_and_bad_ids,
             test_wire_garbage_then_valid,
             test_wire_oversize_frame_drops_connection,
             test_wire_peer_eof_mid_frame,
             test_wire_nonreading_peer_dropped_at_tx_bound,
             test_wire_nonreading_uid_budget);
    TCK_CASE(s, "fdpass", test_fdpass_client_to_host_process,
             test_fdpass_host_to_client_process,
             test_fdpass_host_dies_client_notified,
             test_fdpass_back_to_back_fds_not_mixed);
    TCK_CASE(s, "admit", test_admit_per_uid_limit,
             test_admit_reserved_for_owner,
             test_admit_refusal_read_after_failed_send,
             test_admit_out_of_descriptors);
    TCK_CASE(s, "arena", test_arena_pieces_aligned_and_kept,
             test_arena_keeps_at_most_keep_max,
             test_arena_decodes_like_malloc);
    return s;
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    return tck_run(ipc_suite());
}
