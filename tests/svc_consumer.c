/*
 * svc_consumer.c - a minimal ConsumerPort client for shmtraced's tests and
 * benchmark (the user-facing consumer is tools/shmtrace).
 *
 *   svc_consumer record --out FILE [options]   EnableTracing, wait for the
 *       duration (the service stops the session) or SIGINT/SIGTERM
 *       (DisableTracing), then ReadBuffers into FILE, or let the service
 *       write FILE itself (--file-period-ms: write_into_file, fd passed).
 *   svc_consumer clone --out FILE [--session ID] [--pass-fd]
 *       CloneSession + read (--pass-fd: FILE's fd goes with the request,
 *       as perfetto --clone passes it; a write_into_file session's clone
 *       is then written into it by the service; --name NAME: the session
 *       by its unique_session_name).
 *   svc_consumer stats                          GetTraceStats, key=value.
 *   svc_consumer hold N [--producer]   open N connections to the consumer
 *       (or producer) socket, print bound=B refused=R and the first
 *       refusal's words (why=...), then hold them until SIGTERM/SIGINT
 *       (e2e_sec_limits.sh: a user hoarding connections).
 *
 * Options: --buffer-kb N (default 4096), --fill ring|discard, --duration-ms
 * N (default 2000), --ds NAME (default shmtrace.synthetic), --flush-timeout-ms
 * N, --wait-data-sources N (poll GetTraceStats until that many data sources
 * are registered before enabling), --file-period-ms N, --output-path PATH
 * (write_into_file with the config's output_path and no fd: the service is
 * asked to create PATH itself; e2e_sec_users.sh uses it as an attacker),
 * --append (record: open FILE write-only for appending, not truncated;
 * e2e_sec_users.sh writes a session after another user's data with it),
 * --name NAME (record: the config's unique_session_name).
 * Exit: 0 ok, 1 service error, 2 usage.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ipc.h"
#include "trace.pb-c.h"

typedef struct {
    ipc_loop *loop;
    ipc_client *c;
    bool bound, done, disabled, read_done, failed, got_stats;
    char error[512];
    FILE *out;
    uint64_t bytes, packets;
    uint8_t *pkt;
    size_t pkt_len, pkt_cap;
    Perfetto__Protos__TraceStats *stats;
} cons_t;

static volatile sig_atomic_t g_stop;
static void on_sig(int s)
{
    g_stop = 1;
}

static void run_until(cons_t *c, bool *flag, int timeout_ms)
{
    uint64_t end = ipc_now_ms() + (uint64_t)timeout_ms;
    while (!*flag && !c->failed && ipc_now_ms() < end && !g_stop)
        ipc_loop_run_once(c->loop, 20);
}

static void on_bound(ipc_client *cl, bool ok, void *ctx)
{
    cons_t *c = ctx;
    c->bound = ok;
    if (!ok)
        c->failed = true;
}
static void on_disc(ipc_client *cl, int err, void *ctx)
{
    cons_t *c = ctx;
    c->failed = true;
    snprintf(c->error, sizeof(c->error), "service connection lost");
}

static void on_enable(ipc_client *cl, int st, const ProtobufCMessage *m,
                      bool more, void *ctx)
{
    cons_t *c = ctx;
    const Perfetto__Protos__EnableTracingResponse *r = (const void *)m;
    if (st != 0)
        snprintf(c->error, sizeof(c->error), "EnableTracing failed");
    else if (r && r->error && r->error[0])
        snprintf(c->error, sizeof(c->error), "%s", r->error);
    c->disabled = true;
}

static void on_read(ipc_client *cl, int st, const ProtobufCMessage *m,
                    bool more, void *ctx)
{
    cons_t *c = ctx;
    const Perfetto__Protos__ReadBuffersResponse *r = (const void *)m;
    if (st == 0 && r) {
        for (size_t i = 0; i < r->n_slices; i++) {
            size_t n = r->slices[i]->data.len;
            if (c->pkt_len + n > c->pkt_cap) {
                c->pkt_cap = (c->pkt_len + n) * 2;
                c->pkt = realloc(c->pkt, c->pkt_cap);
            }
            memcpy(c->pkt + c->pkt_len, r->slices[i]->data.data, n);
            c->pkt_len += n;
            if (r->slices[i]->last_slice_for_packet) {
                uint8_t hdr[11];
                size_t h = 0;
                uint64_t v = c->pkt_len;
                hdr[h++] = 0x0A;
                while (v >= 0x80) {
                    hdr[h++] = (uint8_t)(v | 0x80);
                    v >>= 7;
                }
                hdr[h++] = (uint8_t)v;
                fwrite(hdr, 1, h, c->out);
                fwrite(c->pkt, 1, c->pkt_len, c->out);
                c->bytes += h + c->pkt_len;
                c->packets++;
                c->pkt_len = 0;
            }
        }
    }
    if (st != 0) {
        c->failed = true;
        snprintf(c->error, sizeof(c->error), "ReadBuffers failed");
    }
    if (st != 0 || !more)
        c->read_done = true;
}

static void on_stats(ipc_client *cl, int st, const ProtobufCMessage *m,
                     bool more, void *ctx)
{
    cons_t *c = ctx;
    const Perfetto__Protos__GetTraceStatsResponse *r = (const void *)m;
    if (st == 0 && r && r->trace_stats) {
        size_t n = perfetto__protos__trace_stats__get_packed_size(
            r->trace_stats);
        uint8_t *b = malloc(n ? n : 1);
        perfetto__protos__trace_stats__pack(r->trace_stats, b);
        perfetto__protos__trace_stats__free_unpacked(c->stats, NULL);
        c->stats = perfetto__protos__trace_stats__unpack(NULL, n, b);
        free(b);
    }
    c->got_stats = true;
}

#define CLONE_BY_NAME \
    PERFETTO__PROTOS__CLONE_SESSION_REQUEST__SELECTOR_UNIQUE_SESSION_NAME

static bool clone_ok, clone_into_file;
static void on_clone(ipc_client *cl, int st, const ProtobufCMessage *m,
                     bool more, void *ctx)
{
    cons_t *c = ctx;
    const Perfetto__Protos__CloneSessionResponse *r = (const void *)m;
    if (st != 0 || !r || !r->success) {
        c->failed = true;
        snprintf(c->error, sizeof(c->error), "CloneSession: %s",
                 r && r->error ? r->error : "failed");
    }
    clone_into_file = r && r->was_write_into_file;
    clone_ok = true;
}

static int get_stats(cons_t *c)
{
    c->got_stats = false;
    if (ipc_client_invoke(c->c, "GetTraceStats", NULL, -1,
            &perfetto__protos__get_trace_stats_response__descriptor,
            on_stats, c) < 0)
        return -1;
    run_until(c, &c->got_stats, 5000);
    return c->stats ? 0 : -1;
}

static int read_buffers(cons_t *c)
{
    c->read_done = false;
    if (ipc_client_invoke(c->c, "ReadBuffers", NULL, -1,
            &perfetto__protos__read_buffers_response__descriptor, on_read,
            c) < 0)
        return -1;
    while (!c->read_done && !c->failed && !g_stop)
        ipc_loop_run_once(c->loop, 50);
    if (!c->read_done && !c->failed)
        fprintf(stderr, "svc_consumer: interrupted while reading\n");
    return c->read_done && !c->failed ? 0 : -1;
}

static int finish(cons_t *c, int rc)
{
    fflush(stdout);
    ipc_client_destroy(c->c);
    ipc_loop_destroy(c->loop);
    free(c->pkt);
    perfetto__protos__trace_stats__free_unpacked(c->stats, NULL);
    return rc;
}

static void hold_bound(ipc_client *c, bool ok, void *ctx)
{
    (void)c;
    int *state = ctx;
    *state = ok ? 1 : 2;
}

static void hold_disc(ipc_client *c, int err, void *ctx)
{
    (void)c; (void)err;
    int *state = ctx;
    if (*state != 2)
        *state = *state == 1 ? 3 : 2;  /* 3: bound, then dropped */
}

/* svc_consumer hold N [--producer] (see the top). */
static int hold(int argc, char **argv)
{
    if (argc < 3 || argc > 4 ||
        (argc == 4 && strcmp(argv[3], "--producer") != 0)) {
        fprintf(stderr, "usage: svc_consumer hold N [--producer]\n");
        return 2;
    }
    int n = atoi(argv[2]);
    bool producer = argc == 4;
    if (n <= 0 || n > 4096)
        return 2;
    signal(SIGINT, on_sig);
    signal(SIGTERM, on_sig);
    signal(SIGPIPE, SIG_IGN);
    char path[108];
    if (ipc_sock_path(producer ? IPC_SOCK_PRODUCER : IPC_SOCK_CONSUMER, NULL,
                      path, sizeof path) < 0)
        return 2;
    ipc_loop *loop = ipc_loop_create();
    ipc_client **c = calloc((size_t)n, sizeof *c);
    int *state = calloc((size_t)n, sizeof *state);
    if (!loop || !c || !state)
        return 1;
    static const ipc_client_cbs cbs = { hold_bound, hold_disc };
    int bound = 0, refused = 0;
    char why[256] = "";
    for (int i = 0; i < n; i++) {
        int err = 0;
        c[i] = ipc_client_connect(loop, path, producer ? IPC_PRODUCER_PORT :
                                  IPC_CONSUMER_PORT, &cbs, &state[i], &err);
        if (!c[i]) {
            fprintf(stderr, "svc_consumer: connect %d: %s\n", i,
                    ipc_strerror(err));
            return 1;
        }
        for (int k = 0; k < 500 && !state[i]; k++)
            ipc_loop_run_once(loop, 10);
        const char *r = ipc_client_refusal(c[i]);
        if (state[i] == 1) {
            bound++;
        } else {
            refused++;
            if (r && !why[0])
                snprintf(why, sizeof why, "%s", r);
        }
    }
    printf("bound=%d\nrefused=%d\nwhy=%s\n", bound, refused, why);
    fflush(stdout);
    while (!g_stop)
        ipc_loop_run_once(loop, 100);
    for (int i = 0; i < n; i++)
        ipc_client_destroy(c[i]);
    free(c);
    free(state);
    ipc_loop_destroy(loop);
    return 0;
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"out", required_argument, NULL, 'o'},
        {"buffer-kb", required_argument, NULL, 'b'},
        {"fill", required_argument, NULL, 'f'},
        {"duration-ms", required_argument, NULL, 'd'},
        {"ds", required_argument, NULL, 'n'},
        {"flush-timeout-ms", required_argument, NULL, 't'},
        {"wait-data-sources", required_argument, NULL, 'w'},
        {"file-period-ms", required_argument, NULL, 'p'},
        {"session", required_argument, NULL, 's'},
        {"output-path", required_argument, NULL, 'P'},
        {"append", no_argument, NULL, 'A'},
        {"name", required_argument, NULL, 'N'},
        {"pass-fd", no_argument, NULL, 'F'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    const char *out = NULL, *ds = "shmtrace.synthetic", *opath = NULL;
    const char *name = NULL;
    bool append = false, pass_clone_fd = false;
    uint32_t buffer_kb = 4096, duration = 2000, flush_timeout = 0,
             wait_ds = 0, period = 0;
    int fill = 1;
    uint64_t session = UINT64_MAX;
    int o;
    if (argc < 2) {
        fprintf(stderr, "usage: svc_consumer record|clone|stats [options]\n");
        return 2;
    }
    const char *cmd = argv[1];
    if (strcmp(cmd, "hold") == 0)
        return hold(argc, argv);
    optind = 2;
    while ((o = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (o) {
        case 'o': out = optarg; break;
        case 'b': buffer_kb = (uint32_t)atol(optarg); break;
        case 'f': fill = strcmp(optarg, "discard") == 0 ? 2 : 1; break;
        case 'd': duration = (uint32_t)atol(optarg); break;
        case 'n': ds = optarg; break;
        case 't': flush_timeout = (uint32_t)atol(optarg); break;
        case 'w': wait_ds = (uint32_t)atol(optarg); break;
        case 'p': period = (uint32_t)atol(optarg); break;
        case 's': session = strtoull(optarg, NULL, 0); break;
        case 'P': opath = optarg; break;
        case 'A': append = true; break;
        case 'N': name = optarg; break;
        case 'F': pass_clone_fd = true; break;
        case 'h':
            printf("usage: svc_consumer record|clone|stats [--out FILE] "
                   "[--buffer-kb N] [--fill ring|discard] [--duration-ms N]\n"
                   "  [--ds NAME] [--flush-timeout-ms N] "
                   "[--wait-data-sources N] [--file-period-ms N] "
                   "[--session ID] [--output-path PATH]\n"
                   "  [--append] [--name NAME] [--pass-fd]\n");
            return 0;
        default: return 2;
        }
    }
    signal(SIGINT, on_sig);
    signal(SIGTERM, on_sig);
    signal(SIGPIPE, SIG_IGN);
    cons_t c = {0};
    char path[108];
    if (ipc_sock_path(IPC_SOCK_CONSUMER, NULL, path, sizeof(path)) < 0)
        return 2;
    c.loop = ipc_loop_create();
    static const ipc_client_cbs cbs = { on_bound, on_disc };
    int err = 0;
    c.c = ipc_client_connect(c.loop, path, IPC_CONSUMER_PORT, &cbs, &c, &err);
    if (!c.c) {
        fprintf(stderr, "svc_consumer: cannot connect to %s: %s\n", path,
                ipc_strerror(err));
        return finish(&c, 1);
    }
    run_until(&c, &c.bound, 5000);
    if (!c.bound) {
        fprintf(stderr, "svc_consumer: not bound\n");
        return finish(&c, 1);
    }
    int rc = 0;
    if (strcmp(cmd, "stats") == 0) {
        if (get_stats(&c) < 0)
            return finish(&c, 1);
        Perfetto__Protos__TraceStats *s = c.stats;
        printf("producers_connected=%u\ndata_sources_registered=%u\n"
               "tracing_sessions=%u\ntotal_buffers=%u\nchunks_discarded=%llu\n"
               "patches_discarded=%llu\n", s->producers_connected,
               s->data_sources_registered, s->tracing_sessions,
               s->total_buffers, (unsigned long long)s->chunks_discarded,
               (unsigned long long)s->patches_discarded);
        uint64_t abi = 0;
        for (size_t i = 0; i < s->n_buffer_stats; i++)
            abi += s->buffer_stats[i]->abi_violations;
        printf("abi_violations=%llu\n", (unsigned long long)abi);
        return finish(&c, 0);
    }
    if (!out) {
        fprintf(stderr, "svc_consumer: --out FILE is required\n");
        return finish(&c, 2);
    }
    int fd = open(out, O_WRONLY | O_CREAT | O_CLOEXEC |
                  (append ? O_APPEND : O_TRUNC), 0644);
    if (fd < 0) {
        perror(out);
        return finish(&c, 1);
    }
    if (strcmp(cmd, "clone") == 0) {
        Perfetto__Protos__CloneSessionRequest req =
            PERFETTO__PROTOS__CLONE_SESSION_REQUEST__INIT;
        if (name) {
            req.selector_case = CLONE_BY_NAME;
            req.unique_session_name = (char *)name;
        } else {
            req.selector_case =
                PERFETTO__PROTOS__CLONE_SESSION_REQUEST__SELECTOR_SESSION_ID;
            req.session_id = session;
        }
        ipc_client_invoke(c.c, "CloneSession", &req.base,
                          pass_clone_fd ? fd : -1,
                          &perfetto__protos__clone_session_response__descriptor,
                          on_clone, &c);
        run_until(&c, &clone_ok, 5000);
        if (c.failed || !clone_ok) {
            fprintf(stderr, "svc_consumer: %s\n", c.failed ? c.error :
                    g_stop ? "interrupted before CloneSession's reply" :
                    "no reply to CloneSession in 5 s");
            close(fd);
            return finish(&c, 1);
        }
        if (clone_into_file) {
            fprintf(stderr, "svc_consumer: the service wrote the clone into "
                    "%s\n", out);
            close(fd);
            return finish(&c, 0);
        }
        c.out = fdopen(fd, "wb");
        rc = read_buffers(&c);
        fclose(c.out);
        fprintf(stderr, "svc_consumer: cloned %llu packets, %llu bytes\n",
                (unsigned long long)c.packets, (unsigned long long)c.bytes);
        return finish(&c, rc < 0 ? 1 : 0);
    }
    if (strcmp(cmd, "record") != 0) {
        fprintf(stderr, "svc_consumer: unknown command %s\n", cmd);
        close(fd);
        return finish(&c, 2);
    }
    while (wait_ds && !g_stop) {
        if (get_stats(&c) < 0) {
            close(fd);
            return finish(&c, 1);
        }
        if (c.stats->data_sources_registered >= wait_ds)
            break;
        usleep(20000);
    }
    Perfetto__Protos__EnableTracingRequest req =
        PERFETTO__PROTOS__ENABLE_TRACING_REQUEST__INIT;
    Perfetto__Protos__TraceConfig cfg = PERFETTO__PROTOS__TRACE_CONFIG__INIT;
    Perfetto__Protos__TraceConfig__BufferConfig b =
        PERFETTO__PROTOS__TRACE_CONFIG__BUFFER_CONFIG__INIT, *bp = &b;
    Perfetto__Protos__TraceConfig__DataSource d =
        PERFETTO__PROTOS__TRACE_CONFIG__DATA_SOURCE__INIT, *dp = &d;
    Perfetto__Protos__DataSourceConfig dc =
        PERFETTO__PROTOS__DATA_SOURCE_CONFIG__INIT;
    b.has_size_kb = b.has_fill_policy = true;
    b.size_kb = buffer_kb;
    b.fill_policy = fill;
    dc.name = (char *)ds;
    d.config = &dc;
    cfg.n_buffers = 1;
    cfg.buffers = &bp;
    cfg.n_data_sources = 1;
    cfg.data_sources = &dp;
    if (duration) {
        cfg.has_duration_ms = true;
        cfg.duration_ms = duration;
    }
    if (name)
        cfg.unique_session_name = (char *)name;
    if (flush_timeout) {
        cfg.has_flush_timeout_ms = true;
        cfg.flush_timeout_ms = flush_timeout;
    }
    int pass_fd = -1;
    if (period) {
        cfg.has_write_into_file = cfg.has_file_write_period_ms = true;
        cfg.write_into_file = true;
        cfg.file_write_period_ms = period;
        pass_fd = fd;
    }
    if (opath) {
        /* The service is asked to open the file itself (no fd). */
        cfg.has_write_into_file = true;
        cfg.write_into_file = true;
        cfg.output_path = (char *)opath;
        pass_fd = -1;
        period = period ? period : 100;
    }
    req.trace_config = &cfg;
    ipc_client_invoke(c.c, "EnableTracing", &req.base, pass_fd,
                      &perfetto__protos__enable_tracing_response__descriptor,
                      on_enable, &c);
    while (!c.disabled && !c.failed) {
        ipc_loop_run_once(c.loop, 50);
        if (g_stop) {
            g_stop = 0;
            ipc_client_invoke(c.c, "DisableTracing", NULL, -1, NULL, NULL,
                              NULL);
        }
    }
    if (c.error[0]) {
        fprintf(stderr, "svc_consumer: %s\n", c.error);
        close(fd);
        return finish(&c, 1);
    }
    if (!period) {
        c.out = fdopen(fd, "wb");
        rc = read_buffers(&c);
        fclose(c.out);
    } else {
        close(fd);
    }
    ipc_client_invoke(c.c, "FreeBuffers", NULL, -1, NULL, NULL, NULL);
    for (int i = 0; i < 10; i++)
        ipc_loop_run_once(c.loop, 5);
    fprintf(stderr, "svc_consumer: %llu packets, %llu bytes\n",
            (unsigned long long)c.packets, (unsigned long long)c.bytes);
    return finish(&c, rc < 0 ? 1 : 0);
}
