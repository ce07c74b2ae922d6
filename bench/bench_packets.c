/*
 * bench_packets.c - refgen's packet written through libshm's TraceWriter,
 * for `make bench-vs-sdk` (bench/bench_vs_sdk.sh), which runs this and
 * bench_packets_sdk.c (the same packet through Perfetto's C SDK) against
 * the same services in one run. The rounds, timing and output are
 * bench_packets.h's.
 *
 * The producer (libshm's IPC client, producer name
 * "bench-packets-libshm") registers the data source; its on_start
 * callback hands the instance's target buffer to the main thread, which
 * creates one writer (stall policy, as the SDK program asks of the SDK)
 * and writes the bursts.
 */
#include "config.h"

#include <pthread.h>

#include <shmtrace/producer.h>
#include <shmtrace/trace_writer.h>

#include "bench_packets.h"

static prod_producer *g_prod;
static tw_writer *g_writer;
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_cv = PTHREAD_COND_INITIALIZER;
static uint32_t g_target;          /* 0 until a session starts us */

static void on_start(prod_producer *p, const prod_ds_config *cfg, void *ctx)
{
    (void)p;
    (void)ctx;
    pthread_mutex_lock(&g_mu);
    if (g_target == 0)
        g_target = cfg->target_buffer;
    pthread_cond_broadcast(&g_cv);
    pthread_mutex_unlock(&g_mu);
}

static int start(const bp_args *a)
{
    static const prod_callbacks cb = { .on_start = on_start };
    prod_options o = { .producer_name = "bench-packets-libshm" };
    prod_data_source ds = { .name = a->ds_name };
    struct timespec dl;
    int rc = 0;

    g_prod = prod_create(&o, &cb, NULL);
    if (g_prod == NULL) {
        const char *sock = getenv("PERFETTO_PRODUCER_SOCK_NAME");
        fprintf(stderr, "bench_packets: cannot reach the service at %s: "
                "%s (start one there, or set PERFETTO_PRODUCER_SOCK_NAME)\n",
                sock ? sock : "the default producer socket",
                strerror(errno));
        return 1;
    }
    if ((rc = prod_register_data_source(g_prod, &ds)) != 0) {
        fprintf(stderr, "bench_packets: cannot register %s: %s\n",
                a->ds_name, strerror(-rc));
        return 1;
    }
    clock_gettime(CLOCK_REALTIME, &dl);
    dl.tv_sec += a->wait_s;
    pthread_mutex_lock(&g_mu);
    while (g_target == 0 && rc == 0)
        rc = pthread_cond_timedwait(&g_cv, &g_mu, &dl);
    pthread_mutex_unlock(&g_mu);
    if (g_target == 0) {
        fprintf(stderr, "bench_packets: no session started %s within %u s "
                "(is a consumer tracing it on $PERFETTO_PRODUCER_SOCK_NAME?)"
                "\n", a->ds_name, a->wait_s);
        return 1;
    }
    g_writer = prod_create_writer(g_prod, g_target,
                                  TW_POLICY_STALL_THEN_DROP);
    if (g_writer == NULL) {
        fprintf(stderr, "bench_packets: cannot create a writer: %s\n",
                strerror(errno));
        return 1;
    }
    return 0;
}

static void burst(uint64_t seq0, unsigned n)
{
    tw_writer *w = g_writer;
    for (uint64_t i = seq0; i < seq0 + n; i++) {
        tw_packet_begin(w);
        tw_add_varint(w, 8, bp_clock_ns(CLOCK_BOOTTIME));
        tw_begin_nested(w, 900);
        tw_add_bytes(w, 1, bp_str64, sizeof(bp_str64) - 1);
        tw_add_varint(w, 2, i);
        tw_add_varint(w, 3, (1ull << 32) | i);
        tw_end_nested(w);
        tw_packet_end(w);
    }
}

static void flush(void)
{
    tw_writer_flush(g_writer);
}

static void finish(void)
{
    tw_writer_destroy(g_writer);
    prod_destroy(g_prod);
}

int main(int argc, char **argv)
{
    static const bp_ops ops = { "libshm", start, burst, flush, NULL,
                                finish };
    return bp_main(argc, argv, &ops);
}
