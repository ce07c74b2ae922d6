/*
 * shmtrace_producer.c - `shmtrace-producer`, a synthetic producer process.
 *
 * Registers one data source (default "shmtrace.synthetic") with the service
 * through libshm's IPC client (<shmtrace/producer.h>). Every started
 * instance runs --threads writer threads; each owns one TraceWriter (one
 * sequence) and emits packets:
 *
 *   TracePacket {
 *     timestamp (8)        CLOCK_BOOTTIME ns
 *     for_testing (900) TestEvent {
 *       seq_value (2)      0, 1, 2, ... per writer
 *       counter (3)        thread index (0-based)
 *       is_last (4)        true on the last packet when --count is set
 *       payload (5) TestPayload { str (1) = --size bytes }
 *     }
 *   }
 *
 * Payload byte k of packet seq is 'a' + (seq + k) % 26, so a reader can
 * check that every packet arrived exactly once (seq_value continuity per
 * trusted_packet_sequence_id) and intact (the pattern). A packet lost in
 * the producer (drop policy, SMB full) still consumes its seq_value: the
 * loop numbers packets, not successful writes, so the gaps in seq_value
 * count exactly the packets lost, wherever they were lost. (The TraceWriter
 * does not report a drop per packet -- tw_packet_end() returns nothing;
 * tw_writer_stats.packets_lost counts them -- and none is needed here.)
 * A TestConfig in the DataSourceConfig (message_count,
 * max_messages_per_second, message_size) overrides --count, --rate and
 * --size; message_size is capped at MAX_PAYLOAD_BYTES (16 MiB) like --size.
 *
 * Threads: the library thread runs the callbacks; they only post events to
 * the main thread, which starts and stops writer threads (joining a writer
 * thread on the library thread could deadlock a stalling writer that waits
 * for the library thread to send its commits). Flushes are served by the
 * writers themselves at their next packet boundary (a writer that is done
 * with its packets sleeps on a condition variable until a flush or its
 * stop); the last one to flush acks the flush (prod_flush_done).
 */
#include "config.h"

#include <errno.h>
#include <getopt.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <shmtrace/producer.h>
#include <shmtrace/smb_shm.h>

#include "cli_exit.h"

#define EXIT_USAGE CLI_EXIT_USAGE
#define EXIT_NO_SERVICE CLI_EXIT_NO_SERVICE
#define MAX_THREADS 256
#define MAX_INSTANCES 16

typedef struct settings {
    const char *ds_name;
    const char *producer_name;
    const char *socket;
    unsigned threads;
    uint32_t size;
    uint64_t rate;       /* packets per second per thread, 0 = unlimited */
    uint64_t count;      /* packets per thread, 0 = until stopped */
    tw_policy policy;
    uint32_t smb_size, page_size;
    bool once;
    bool reconnect;
    bool quiet;
    bool incremental;    /* --incremental: packets need interned state */
    bool hang;           /* test hook: --hang-mid-packet */
    uint64_t hang_at;    /* seq_value of the packet never finished */
} settings;

typedef struct instance instance;

typedef struct worker {
    instance *in;
    unsigned index;
    uint64_t flush_gen0;  /* flush generation when counted as active */
    pthread_t thread;
    uint64_t written;
    tw_writer_stats stats;
} worker;

struct instance {
    uint64_t id;
    uint32_t target_buffer;
    uint64_t count, rate;
    uint32_t size;
    unsigned nthreads;
    worker *workers;
    atomic_bool stop;
    atomic_uint clear_gen;   /* ClearIncrementalState requests so far */
    bool used;
};

typedef enum ev_kind { EV_START, EV_STOP, EV_DISCONNECT, EV_CLEAR } ev_kind;

typedef struct event {
    struct event *next;
    ev_kind kind;
    uint64_t id;
    uint32_t target_buffer;
    uint64_t count, rate;
    uint32_t size;
} event;

static settings S;
static prod_producer *g_prod;
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_cv = PTHREAD_COND_INITIALIZER;
/* Writers done with their packets wait here for a flush or their stop
 * (cb_flush, stop_instance broadcast it under g_mu). */
static pthread_cond_t g_idle_cv = PTHREAD_COND_INITIALIZER;
static event *g_events, *g_events_tail; /* (g_mu) */
static instance g_inst[MAX_INSTANCES];  /* main thread */
/* Flush state (g_mu): generation, pending id, writers still to flush.
 * The generation is also read without the lock, once per packet, to see
 * that no flush is due (maybe_flush). */
static _Atomic uint64_t g_flush_gen;
static uint64_t g_flush_id;
static unsigned g_flush_left;
static unsigned g_active_writers;       /* (g_mu) */
static volatile sig_atomic_t g_signalled;
/* Connection story for the messages (library thread only). */
static bool g_connected_once, g_said_retrying;
static char g_sock[256];

/* The socket libshm connects to, for messages: the flag, else
 * $PERFETTO_PRODUCER_SOCK_NAME; libshm resolves the default itself (and
 * does not export the result), so that one is described, not guessed. */
static void resolve_socket(void)
{
    const char *env = getenv("PERFETTO_PRODUCER_SOCK_NAME");
    if (S.socket && *S.socket)
        snprintf(g_sock, sizeof g_sock, "%s", S.socket);
    else if (env && *env)
        snprintf(g_sock, sizeof g_sock, "%s", env);
    else
        snprintf(g_sock, sizeof g_sock, "the default producer socket (see "
                 "--socket in --help)");
}

static void post_event(const event *e)
{
    event *n = malloc(sizeof *n);
    if (!n)
        return;
    *n = *e;
    n->next = NULL;
    pthread_mutex_lock(&g_mu);
    if (g_events_tail)
        g_events_tail->next = n;
    else
        g_events = n;
    g_events_tail = n;
    pthread_cond_broadcast(&g_cv);
    pthread_mutex_unlock(&g_mu);
}

static uint64_t now_ns(clockid_t c)
{
    struct timespec ts;
    clock_gettime(c, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Serve a pending flush: flush our writer, ack if we are the last. */
static void maybe_flush(tw_writer *w, uint64_t *seen_gen)
{
    if (atomic_load_explicit(&g_flush_gen, memory_order_relaxed) ==
        *seen_gen)
        return;       /* the common case, per packet: no lock taken */
    pthread_mutex_lock(&g_mu);
    bool due = *seen_gen != g_flush_gen;
    uint64_t gen = g_flush_gen;
    pthread_mutex_unlock(&g_mu);
    if (!due)
        return;
    tw_writer_flush(w);
    pthread_mutex_lock(&g_mu);
    *seen_gen = gen;
    bool last = gen == g_flush_gen && g_flush_left > 0 && --g_flush_left == 0;
    uint64_t id = g_flush_id;
    pthread_mutex_unlock(&g_mu);
    if (last)
        prod_flush_done(g_prod, id);
}

static void *writer_main(void *arg)
{
    worker *wk = arg;
    instance *in = wk->in;
    tw_writer *w = prod_create_writer(g_prod, in->target_buffer, S.policy);
    uint64_t seen_gen = wk->flush_gen0;
    if (!w) {
        fprintf(stderr, "shmtrace-producer: cannot create a writer: %s\n",
                strerror(errno));
        goto out;
    }
    /* With --incremental the sequence starts by emitting its state. */
    unsigned clear_seen = atomic_load(&in->clear_gen);
    if (S.incremental)
        tw_writer_clear_incremental_state(w);
    /* Packet seq's payload is 'a' + (seq + k) % 26 for k < size: the bytes
     * at pattern + seq % 26, so no packet costs a pass over its payload
     * (at 1 KiB that pass used to be most of the producer's CPU). */
    uint8_t *payload = malloc((size_t)in->size + 26);
    if (!payload)
        goto out_writer;
    for (uint32_t k = 0; k < in->size + 26; k++)
        payload[k] = (uint8_t)('a' + k % 26);
    uint64_t start = now_ns(CLOCK_MONOTONIC);
    for (uint64_t seq = 0; !atomic_load(&in->stop) &&
                           (in->count == 0 || seq < in->count);
         seq++) {
        if (in->rate) {
            uint64_t due = start + seq * 1000000000u / in->rate;
            for (;;) {
                uint64_t t = now_ns(CLOCK_MONOTONIC);
                if (t >= due || atomic_load(&in->stop))
                    break;
                maybe_flush(w, &seen_gen);
                uint64_t d = due - t;
                struct timespec ts = { 0, (long)(d < 5000000 ? d : 5000000) };
                nanosleep(&ts, NULL);
            }
            if (atomic_load(&in->stop))
                break;
        }
        unsigned cg = atomic_load_explicit(&in->clear_gen,
                                           memory_order_relaxed);
        if (cg != clear_seen) {
            clear_seen = cg;
            tw_writer_clear_incremental_state(w);
        }
        tw_packet_begin(w);
        tw_add_varint(w, 8, now_ns(CLOCK_BOOTTIME));
        if (tw_packet_incremental_state_cleared(w)) {
            /* Re-emit the (one) interned entry: InternedData.event_names
             * {iid: 1, name: "synthetic"}. */
            tw_begin_nested(w, 12);
            tw_begin_nested(w, 2);
            tw_add_varint(w, 1, 1);
            tw_add_string(w, 2, "synthetic");
            tw_end_nested(w);
            tw_end_nested(w);
        } else if (S.incremental) {
            tw_add_varint(w, 13, 2);     /* SEQ_NEEDS_INCREMENTAL_STATE */
        }
        tw_begin_nested(w, 900);
        tw_add_varint(w, 2, seq & 0xffffffffu);
        tw_add_varint(w, 3, wk->index);
        if (in->count && seq + 1 == in->count)
            tw_add_varint(w, 4, 1);
        tw_begin_nested(w, 5);
        tw_add_bytes(w, 1, payload + seq % 26, in->size);
        if (S.hang && seq == S.hang_at) {
            /* Test hook: stay inside this packet (SIGKILL me now). */
            fprintf(stderr, "shmtrace-producer: writer %u hanging inside "
                    "packet %llu (--hang-mid-packet)\n", wk->index,
                    (unsigned long long)seq);
            while (!atomic_load(&in->stop)) {
                struct timespec ts = { 0, 2000000 };
                nanosleep(&ts, NULL);
            }
        }
        tw_end_nested(w);
        tw_end_nested(w);
        tw_packet_end(w);
        wk->written++;
        maybe_flush(w, &seen_gen);
    }
    free(payload);
    tw_writer_flush(w);
    if (in->count && wk->written == in->count) /* tests wait for this */
        fprintf(stderr, "shmtrace-producer: writer %u done: %llu packets "
                "written\n", wk->index, (unsigned long long)wk->written);
    /* Done (count reached) or stopping: keep answering flushes, woken
     * by each one and by the stop (no polling: a session's end waits for
     * its flush and its stop). */
    for (;;) {
        maybe_flush(w, &seen_gen);
        pthread_mutex_lock(&g_mu);
        while (!atomic_load(&in->stop) && seen_gen == g_flush_gen)
            pthread_cond_wait(&g_idle_cv, &g_mu);
        pthread_mutex_unlock(&g_mu);
        if (atomic_load(&in->stop))
            break;
    }
out_writer:
    tw_writer_get_stats(w, &wk->stats);
    tw_writer_destroy(w);
out:
    pthread_mutex_lock(&g_mu);
    g_active_writers--;
    /* A writer leaving mid-flush no longer owes it. */
    if (seen_gen != g_flush_gen && g_flush_left > 0 &&
        --g_flush_left == 0) {
        uint64_t id = g_flush_id;
        pthread_mutex_unlock(&g_mu);
        prod_flush_done(g_prod, id);
        return NULL;
    }
    pthread_mutex_unlock(&g_mu);
    return NULL;
}

/* Largest payload per packet, for --size and for a TestConfig alike: the
 * config comes from whoever started the session (through the service) and
 * must not make each writer thread allocate and fill gigabytes. */
#define MAX_PAYLOAD_BYTES (16u * 1024 * 1024)

/* ---- library-thread callbacks: post to the main thread ------------ */

static void cb_start(prod_producer *p, const prod_ds_config *cfg, void *ctx)
{
    (void)p; (void)ctx;
    event e = { .kind = EV_START, .id = cfg->instance_id,
                .target_buffer = cfg->target_buffer,
                .count = cfg->test_message_count ? cfg->test_message_count
                                                 : S.count,
                .rate = cfg->test_max_messages_per_second
                            ? cfg->test_max_messages_per_second
                            : S.rate,
                .size = cfg->test_message_size ? cfg->test_message_size
                                               : S.size };
    if (e.size > MAX_PAYLOAD_BYTES)
        e.size = MAX_PAYLOAD_BYTES; /* a hostile or mistaken config */
    post_event(&e);
}

static void cb_stop(prod_producer *p, uint64_t id, void *ctx)
{
    (void)p; (void)ctx;
    event e = { .kind = EV_STOP, .id = id };
    post_event(&e);
}

static void cb_disconnect(prod_producer *p, int err, void *ctx)
{
    (void)ctx;
    bool retry = S.reconnect && !S.once;
    char refused[300];
    const char *why = err == -EPERM ? "the service runs as another user, "
                      "neither root nor you: refused"
                      : err ? strerror(-err) : "closed";
    if (err == -ECONNREFUSED && prod_refusal(p)) {
        snprintf(refused, sizeof refused, "refused: %s", prod_refusal(p));
        why = refused;
    }
    /* Once per outage, not once per retry. */
    if (!S.quiet && !g_said_retrying) {
        if (g_connected_once)
            fprintf(stderr, "shmtrace-producer: connection to the tracing "
                    "service at %s lost: %s%s\n", g_sock, why,
                    retry ? "; reconnecting every second (--no-reconnect "
                            "exits instead)" : "");
        else
            fprintf(stderr, "shmtrace-producer: cannot connect to the "
                    "tracing service at %s: %s%s\n", g_sock, why,
                    !retry ? "" : why == refused ? "; retrying every second "
                    "(--no-reconnect exits instead)" : "; retrying every "
                    "second until shmtraced listens (--no-reconnect exits "
                    "instead)");
        g_said_retrying = retry;
    }
    event e = { .kind = EV_DISCONNECT };
    post_event(&e);
}

static void cb_connect(prod_producer *p, void *ctx)
{
    (void)p; (void)ctx;
    g_connected_once = true;
    g_said_retrying = false;
    if (!S.quiet)
        fprintf(stderr, "shmtrace-producer: connected to %s, data source "
                "%s\n", g_sock, S.ds_name);
}

static void cb_flush(prod_producer *p, const uint64_t *ids, size_t n,
                     uint64_t flush_id, uint64_t flags, void *ctx)
{
    (void)ids; (void)n; (void)flags; (void)ctx;
    pthread_mutex_lock(&g_mu);
    unsigned active = g_active_writers;
    if (active) {
        g_flush_gen++;
        g_flush_id = flush_id;
        g_flush_left = active;
        pthread_cond_broadcast(&g_idle_cv);
    }
    pthread_mutex_unlock(&g_mu);
    if (!active)
        prod_flush_done(p, flush_id);
}

static void cb_clear(prod_producer *p, const uint64_t *ids, size_t n,
                     void *ctx)
{
    (void)p; (void)ctx;
    for (size_t i = 0; i < n; i++) {
        event e = { .kind = EV_CLEAR, .id = ids[i] };
        post_event(&e);
    }
}

static const prod_callbacks callbacks = {
    .on_clear_incremental_state = cb_clear,
    .on_connect = cb_connect,
    .on_disconnect = cb_disconnect,
    .on_start = cb_start,
    .on_stop = cb_stop,
    .on_flush = cb_flush,
};

/* ---- main thread ---------------------------------------------------- */

static void start_instance(const event *e)
{
    instance *in = NULL;
    for (int i = 0; i < MAX_INSTANCES; i++)
        if (!g_inst[i].used) {
            in = &g_inst[i];
            break;
        }
    if (!in) {
        fprintf(stderr, "shmtrace-producer: too many instances, ignoring "
                        "instance %llu\n", (unsigned long long)e->id);
        return;
    }
    memset(in, 0, sizeof *in);
    in->used = true;
    in->id = e->id;
    in->target_buffer = e->target_buffer;
    in->count = e->count;
    in->rate = e->rate;
    in->size = e->size;
    in->nthreads = S.threads;
    atomic_init(&in->stop, false);
    atomic_init(&in->clear_gen, 0);
    in->workers = calloc(in->nthreads, sizeof *in->workers);
    if (!in->workers) {
        in->used = false;
        return;
    }
    for (unsigned t = 0; t < in->nthreads; t++) {
        in->workers[t].in = in;
        in->workers[t].index = t;
        pthread_mutex_lock(&g_mu);
        g_active_writers++;
        in->workers[t].flush_gen0 = g_flush_gen;
        pthread_mutex_unlock(&g_mu);
        if (pthread_create(&in->workers[t].thread, NULL, writer_main,
                           &in->workers[t]) != 0) {
            pthread_mutex_lock(&g_mu);
            g_active_writers--;
            pthread_mutex_unlock(&g_mu);
            in->nthreads = t;
            break;
        }
    }
    if (!S.quiet)
        fprintf(stderr, "shmtrace-producer: instance %llu started: %u "
                "threads, %u-byte payloads, buffer %u\n",
                (unsigned long long)in->id, in->nthreads, in->size,
                in->target_buffer);
}

static void stop_instance(instance *in, bool notify)
{
    pthread_mutex_lock(&g_mu);   /* a writer between its check and its wait
                                    still gets the broadcast */
    atomic_store(&in->stop, true);
    pthread_cond_broadcast(&g_idle_cv);
    pthread_mutex_unlock(&g_mu);
    uint64_t written = 0, lost = 0, stalls = 0;
    for (unsigned t = 0; t < in->nthreads; t++) {
        pthread_join(in->workers[t].thread, NULL);
        written += in->workers[t].written;
        lost += in->workers[t].stats.packets_lost;
        stalls += in->workers[t].stats.stalls;
    }
    if (notify)
        prod_notify_stopped(g_prod, in->id);
    if (!S.quiet)
        fprintf(stderr, "shmtrace-producer: instance %llu stopped: %llu "
                "packets written, %llu lost in the producer (SMB full), "
                "%llu waits for a free chunk\n",
                (unsigned long long)in->id, (unsigned long long)written,
                (unsigned long long)lost, (unsigned long long)stalls);
    free(in->workers);
    in->workers = NULL;
    in->used = false;
}

static void on_signal(int sig)
{
    (void)sig;
    g_signalled = 1;
    /* The main thread polls g_signalled at least every 100 ms. */
}

static void usage(FILE *f)
{
    fprintf(f,
"Usage: shmtrace-producer [OPTIONS]\n"
"A synthetic producer: registers a data source with the tracing service\n"
"and, for every tracing session that enables it, writes test packets.\n"
"\n"
"Each packet is a TracePacket with `timestamp` and a `for_testing`\n"
"TestEvent: seq_value counts packets per writer from 0, counter is the\n"
"thread index, payload.str has --size bytes ('a' + (seq + k) %% 26), and\n"
"is_last marks the last packet when --count is set. A packet lost in the\n"
"producer (--policy drop, SMB full) still uses up its seq_value, so the\n"
"gaps in seq_value count exactly the packets lost, in the producer or\n"
"later; the first packet after a loss also has previous_packet_dropped.\n"
"\n"
"Options:\n"
"  -n, --name NAME        data source name (default shmtrace.synthetic)\n"
"  -N, --producer-name S  producer name (default shmtrace-producer)\n"
"  -s, --socket PATH      producer socket (default $PERFETTO_PRODUCER_SOCK_NAME,\n"
"                         else shmtrace-producer.sock in your own runtime\n"
"                         directory ($XDG_RUNTIME_DIR or /tmp/shmtrace-UID)\n"
"                         if your daemon is there, else in /run/shmtrace;\n"
"                         root: /run/shmtrace). Only a service running as\n"
"                         root or as you gets our data.\n"
"  -t, --threads N        writer threads per session (default 1)\n"
"  -S, --size BYTES       payload bytes per packet (default 64, at most\n"
"                         16 MiB)\n"
"  -r, --rate N           packets per second per thread (default 0 = as\n"
"                         fast as possible)\n"
"  -c, --count N          packets per thread, then idle (default 0 = until\n"
"                         the session stops)\n"
"      --policy P         drop | stall (SMB full: lose and flag packets, or\n"
"                         wait; default drop)\n"
"      --smb-size BYTES   shared memory size hint (default: service's)\n"
"      --page-size BYTES  SMB page size hint (default: service's)\n"
"      --incremental      packets depend on incremental state: the first\n"
"                         packet of a sequence and the first after each\n"
"                         ClearIncrementalState carry\n"
"                         SEQ_INCREMENTAL_STATE_CLEARED and an interned\n"
"                         entry, the others SEQ_NEEDS_INCREMENTAL_STATE\n"
"                         (without it only the cleared flag is added when\n"
"                         the service asks, incremental_state_config)\n"
"  -1, --once             exit after the first session stops\n"
"      --no-reconnect     exit when the service goes away (default: retry)\n"
"  -q, --quiet            no progress messages\n"
"      --hang-mid-packet N (tests) stop inside packet N of each writer,\n"
"                         its payload written but not finished, until the\n"
"                         session stops (or a SIGKILL: a producer that dies\n"
"                         mid-packet)\n"
"  -h, --help             this help\n"
"  -V, --version          print the version\n"
"\n"
"A TestConfig (for_testing) in the data source config overrides --count,\n"
"--rate and --size (message_size is capped at 16 MiB too).\n"
"\n"
"Without --no-reconnect a producer that cannot reach the service (or\n"
"loses it) says so once and retries every second.\n"
"\n"
"SIGINT/SIGTERM stop it (exit 0); 1 is the service lost with\n"
"--no-reconnect or --once, 3 no service to connect to with\n"
"--no-reconnect.\n"
"\n" CLI_EXIT_HELP);
}

static bool parse_u64(const char *s, uint64_t *out)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 0);
    if (errno || end == s || *end || s[0] == '-')
        return false;
    *out = v;
    return true;
}

int main(int argc, char **argv)
{
    S.ds_name = "shmtrace.synthetic";
    S.producer_name = "shmtrace-producer";
    S.threads = 1;
    S.size = 64;
    S.policy = TW_POLICY_DROP;
    S.reconnect = true;
    enum { O_POLICY = 1000, O_SMB, O_PAGE, O_NORECONNECT, O_INCREMENTAL,
           O_HANG };
    static const struct option lopts[] = {
        { "name", required_argument, 0, 'n' },
        { "producer-name", required_argument, 0, 'N' },
        { "socket", required_argument, 0, 's' },
        { "threads", required_argument, 0, 't' },
        { "size", required_argument, 0, 'S' },
        { "rate", required_argument, 0, 'r' },
        { "count", required_argument, 0, 'c' },
        { "policy", required_argument, 0, O_POLICY },
        { "smb-size", required_argument, 0, O_SMB },
        { "page-size", required_argument, 0, O_PAGE },
        { "once", no_argument, 0, '1' },
        { "incremental", no_argument, 0, O_INCREMENTAL },
        { "no-reconnect", no_argument, 0, O_NORECONNECT },
        { "hang-mid-packet", required_argument, 0, O_HANG },
        { "quiet", no_argument, 0, 'q' },
        { "help", no_argument, 0, 'h' },
        { "version", no_argument, 0, 'V' },
        { 0, 0, 0, 0 },
    };
    int c;
    uint64_t v;
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":n:N:s:t:S:r:c:1qhV", lopts,
                            NULL)) != -1) {
        switch (c) {
        case 'n': S.ds_name = optarg; break;
        case 'N': S.producer_name = optarg; break;
        case 's': S.socket = optarg; break;
        case 't':
            if (!parse_u64(optarg, &v) || v == 0 || v > MAX_THREADS)
                goto bad_value;
            S.threads = (unsigned)v;
            break;
        case 'S':
            if (!parse_u64(optarg, &v) || v > MAX_PAYLOAD_BYTES)
                goto bad_value;
            S.size = (uint32_t)v;
            break;
        case 'r':
            if (!parse_u64(optarg, &v))
                goto bad_value;
            S.rate = v;
            break;
        case 'c':
            if (!parse_u64(optarg, &v))
                goto bad_value;
            S.count = v;
            break;
        case O_POLICY:
            if (strcmp(optarg, "drop") == 0)
                S.policy = TW_POLICY_DROP;
            else if (strcmp(optarg, "stall") == 0)
                S.policy = TW_POLICY_STALL_THEN_DROP;
            else
                goto bad_value;
            break;
        case O_SMB:
            if (!parse_u64(optarg, &v) || v > UINT32_MAX)
                goto bad_value;
            S.smb_size = (uint32_t)v;
            break;
        case O_PAGE:
            if (!parse_u64(optarg, &v) || v > UINT32_MAX)
                goto bad_value;
            S.page_size = (uint32_t)v;
            break;
        case '1': S.once = true; break;
        case O_INCREMENTAL: S.incremental = true; break;
        case O_NORECONNECT: S.reconnect = false; break;
        case O_HANG:
            if (!parse_u64(optarg, &v))
                goto bad_value;
            S.hang = true;
            S.hang_at = v;
            break;
        case 'q': S.quiet = true; break;
        case 'h': usage(stdout); return 0;
        case 'V': printf("shmtrace-producer %s\n", PACKAGE_VERSION); return 0;
        default:
            if (c == ':')
                fprintf(stderr, "shmtrace-producer: option '%s' needs a "
                        "value\n", argv[optind - 1]);
            else if (optopt)
                fprintf(stderr, "shmtrace-producer: unknown option '-%c'\n",
                        optopt);
            else
                fprintf(stderr, "shmtrace-producer: unknown option '%s'\n",
                        argv[optind - 1]);
            fputs(CLI_TRY_HELP("shmtrace-producer"), stderr);
            return EXIT_USAGE;
        }
        continue;
    bad_value:
        for (const struct option *lo = lopts; lo->name; lo++)
            if (lo->val == c)
                fprintf(stderr, "shmtrace-producer: invalid value '%s' for "
                        "--%s\n" CLI_TRY_HELP("shmtrace-producer"), optarg,
                        lo->name);
        return EXIT_USAGE;
    }
    if (optind < argc) {
        fprintf(stderr, "shmtrace-producer: unexpected argument '%s'\n"
                CLI_TRY_HELP("shmtrace-producer"), argv[optind]);
        return EXIT_USAGE;
    }
    signal(SIGPIPE, SIG_IGN);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);

    prod_options o;
    memset(&o, 0, sizeof o);
    o.socket_path = S.socket;
    o.producer_name = S.producer_name;
    o.smb_size_hint_bytes = S.smb_size;
    o.smb_page_size_hint_bytes = S.page_size;
    o.reconnect = S.reconnect;
    resolve_socket();
    g_prod = prod_create(&o, &callbacks, NULL);
    if (!g_prod && errno == EPERM) {
        fprintf(stderr, "shmtrace-producer: the service at %s runs as "
                "another user, neither root nor you: refusing to hand it "
                "any data (someone may have taken the socket name; check "
                "--socket / $PERFETTO_PRODUCER_SOCK_NAME)\n", g_sock);
        return EXIT_NO_SERVICE;
    }
    if (!g_prod && cli_local_limit_hint(errno)) {
        /* this process's limit, not the service's */
        int e = errno;
        fprintf(stderr, "shmtrace-producer: " CLI_LOCAL_LIMIT_FMT "\n",
                g_sock, strerror(e), cli_local_limit_hint(e));
        return CLI_EXIT_FAIL;
    }
    if (!g_prod) {
        fprintf(stderr, "shmtrace-producer: cannot connect to the tracing "
                "service at %s: %s (is shmtraced running? see --socket)\n",
                g_sock, strerror(errno));
        return EXIT_NO_SERVICE;
    }
    prod_data_source ds;
    memset(&ds, 0, sizeof ds);
    ds.name = S.ds_name;
    ds.will_notify_on_stop = 1; /* we ack stops after the final commits */
    ds.handles_incremental_state_clear = 1;
    int rc = prod_register_data_source(g_prod, &ds);
    if (rc < 0) {
        fprintf(stderr, "shmtrace-producer: cannot register %s: %s\n",
                S.ds_name, strerror(-rc));
        prod_destroy(g_prod);
        return 1;
    }
    int status = 0;
    bool done = false;
    while (!done && !g_signalled) {
        pthread_mutex_lock(&g_mu);
        if (!g_events) {
            struct timespec dl;
            clock_gettime(CLOCK_REALTIME, &dl);
            dl.tv_nsec += 100000000;
            if (dl.tv_nsec >= 1000000000) {
                dl.tv_sec++;
                dl.tv_nsec -= 1000000000;
            }
            pthread_cond_timedwait(&g_cv, &g_mu, &dl);
        }
        event *e = g_events;
        g_events = g_events_tail = NULL;
        pthread_mutex_unlock(&g_mu);
        while (e) {
            event *n = e->next;
            if (e->kind == EV_START) {
                start_instance(e);
            } else if (e->kind == EV_CLEAR) {
                for (int i = 0; i < MAX_INSTANCES; i++)
                    if (g_inst[i].used && g_inst[i].id == e->id)
                        atomic_fetch_add(&g_inst[i].clear_gen, 1);
            } else if (e->kind == EV_STOP) {
                for (int i = 0; i < MAX_INSTANCES; i++)
                    if (g_inst[i].used && g_inst[i].id == e->id)
                        stop_instance(&g_inst[i], true);
                if (S.once)
                    done = true;
            } else {
                for (int i = 0; i < MAX_INSTANCES; i++)
                    if (g_inst[i].used)
                        stop_instance(&g_inst[i], false);
                if (!S.reconnect || S.once) {
                    status = 1;
                    done = true;
                }
            }
            free(e);
            e = n;
        }
    }
    for (int i = 0; i < MAX_INSTANCES; i++)
        if (g_inst[i].used)
            stop_instance(&g_inst[i], true);
    prod_destroy(g_prod);
    pthread_mutex_lock(&g_mu);
    event *e = g_events;
    g_events = NULL;
    pthread_mutex_unlock(&g_mu);
    while (e) {
        event *n = e->next;
        free(e);
        e = n;
    }
    return status;
}
