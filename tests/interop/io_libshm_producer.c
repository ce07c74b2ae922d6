/*
 * io_libshm_producer.c - a small producer on libshm's public API
 * (<shmtrace/producer.h>, <shmtrace/trace_writer.h>) for the interop suite:
 * it talks to Perfetto's traced as any application linking libshm would.
 *
 * Registers data source "io.libshm". For each instance it starts, THREADS
 * writer threads each write COUNT packets then flush:
 *   TracePacket { timestamp (8), for_testing (900) { str (1): LEN letters
 *     'a'+(i+k)%26, seq_value (2): i, counter (3): thread << 32 | i,
 *     payload (5) { nested (2) { str (1) ... } ... } } }
 * Every 5th packet is large (LEN_BIG letters plus NEST levels of nested
 * TestPayload): it spans chunks, so the size fields of the open nested
 * messages are patched after their chunk was committed, and the packet
 * is fragmented -- the paths a service must get right for our producers.
 * The checkers then need every seq_value 0..COUNT-1 once per writer
 * (svc_tracecheck --complete) and str exactly as written, letter by letter
 * (io_tracecheck --str-pattern).
 *
 * Usage: io_libshm_producer [THREADS COUNT]   (default 3 500). Prints
 * "io_libshm_producer: instance N started" per instance; SIGTERM/SIGINT
 * end it.
 */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <shmtrace/producer.h>
#include <shmtrace/trace_writer.h>

#define MAX_THREADS 16
#define LEN_SMALL 40
#define LEN_BIG 9000
#define NEST 6

static prod_producer *g_prod;
static int g_threads = 3, g_count = 500;
static volatile sig_atomic_t g_quit;

typedef struct {
    uint32_t buffer;
    int index;
    uint64_t instance;
} job;

static void *writer_main(void *arg)
{
    job *j = arg;
    tw_writer *w = prod_create_writer(g_prod, j->buffer,
                                      TW_POLICY_STALL_THEN_ABORT);
    if (!w) {
        fprintf(stderr, "io_libshm_producer: no writer\n");
        free(j);
        return NULL;
    }
    for (int i = 0; i < g_count; i++) {
        int big = i % 5 == 4;
        size_t len = big ? LEN_BIG : LEN_SMALL;
        char s[LEN_BIG + 1];
        for (size_t k = 0; k < len; k++)
            s[k] = (char)('a' + (i + k) % 26);
        s[len] = 0;
        struct timespec ts;
        clock_gettime(CLOCK_BOOTTIME, &ts);
        tw_packet_begin(w);
        tw_add_varint(w, 8, (uint64_t)ts.tv_sec * 1000000000u +
                                (uint64_t)ts.tv_nsec);
        tw_begin_nested(w, 900);
        tw_add_string(w, 1, s);
        tw_add_varint(w, 2, (uint64_t)i);
        tw_add_varint(w, 3, (uint64_t)j->index << 32 | (uint64_t)i);
        if (big) {
            tw_begin_nested(w, 5);
            for (int d = 0; d < NEST; d++) {
                tw_begin_nested(w, 2);
                tw_add_string(w, 1, s);
            }
            for (int d = 0; d < NEST; d++)
                tw_end_nested(w);
            tw_end_nested(w);
        }
        tw_end_nested(w);
        tw_packet_end(w);
    }
    tw_writer_flush(w);
    tw_writer_destroy(w);
    free(j);
    return NULL;
}

static void on_start(prod_producer *p, const prod_ds_config *cfg, void *ctx)
{
    (void)p; (void)ctx;
    /* Runs on the library thread: the writers run on their own threads
     * (a stalled writer must not block the IPC that frees chunks); each
     * owns its job, detached. */
    for (int t = 0; t < g_threads; t++) {
        job *j = malloc(sizeof(*j));
        pthread_t th;
        if (!j)
            break;
        j->buffer = cfg->target_buffer;
        j->index = t;
        j->instance = cfg->instance_id;
        if (pthread_create(&th, NULL, writer_main, j) != 0) {
            free(j);
            break;
        }
        pthread_detach(th);
    }
    printf("io_libshm_producer: instance %llu started\n",
           (unsigned long long)cfg->instance_id);
    fflush(stdout);
}

static void on_signal(int sig)
{
    (void)sig;
    g_quit = 1;
}

int main(int argc, char **argv)
{
    if (argc == 3) {
        g_threads = atoi(argv[1]);
        g_count = atoi(argv[2]);
    }
    if (g_threads < 1 || g_threads > MAX_THREADS || g_count < 1) {
        fprintf(stderr, "usage: io_libshm_producer [THREADS(1-16) COUNT]\n");
        return 2;
    }
    signal(SIGTERM, on_signal);
    signal(SIGINT, on_signal);
    prod_options o;
    memset(&o, 0, sizeof o);
    o.producer_name = "io_libshm_producer";
    prod_callbacks cb;
    memset(&cb, 0, sizeof cb);
    cb.on_start = on_start;
    g_prod = prod_create(&o, &cb, NULL);
    if (!g_prod) {
        perror("io_libshm_producer: prod_create");
        return 1;
    }
    prod_data_source ds;
    memset(&ds, 0, sizeof ds);
    ds.name = "io.libshm";
    if (prod_register_data_source(g_prod, &ds) < 0) {
        fprintf(stderr, "io_libshm_producer: register failed\n");
        return 1;
    }
    while (!g_quit)
        pause();
    /* Writers are short-lived; give them a moment before tearing down. */
    usleep(100000);
    prod_destroy(g_prod);
    return 0;
}
