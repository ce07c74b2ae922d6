/*
 * bench_packets_sdk.c - refgen's packet written through Perfetto's C SDK
 * (libperfetto_c.so, system backend), for `make bench-vs-sdk`
 * (bench/bench_vs_sdk.sh), which builds it when ../shared/perfetto (or
 * $PERFETTO_BIN/../include) has the SDK's headers and runs it beside
 * bench_packets.c (libshm) against the same services. Not part of the
 * product or of the build: the script compiles it with
 *   cc -std=c11 -O2 -D_GNU_SOURCE -DPERFETTO_SDK_SHLIB -I<sdk>/include
 *      -I<bench> bench_packets_sdk.c -L<bin> -lperfetto_c -lpthread
 * The rounds, timing and output are bench_packets.h's.
 *
 * The data source asks for the stall policy (STALL_AND_DROP: wait for a
 * chunk, as libshm's program does); its on_start callback wakes the main
 * thread, which writes the bursts with the SDK's macros exactly as refgen
 * does. The flush after a burst is PerfettoDsTracerFlush (chunk handed
 * back, commit sent); its acknowledgement is waited for outside the
 * timing. The process re-executes itself as "bench-packets-sdk", the name
 * the SDK gives the producer (so that a config can name it).
 */
#include <pthread.h>
#include <stdbool.h>
#include <unistd.h>

#include "perfetto/public/data_source.h"
#include "perfetto/public/producer.h"
#include "perfetto/public/protos/trace/test_event.pzc.h"
#include "perfetto/public/protos/trace/trace_packet.pzc.h"

#include "bench_packets.h"

static struct PerfettoDs g_ds = PERFETTO_DS_INIT();
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_cv = PTHREAD_COND_INITIALIZER;
static bool g_started;
static unsigned g_flushes_asked, g_flushes_done;

static void on_start(struct PerfettoDsImpl *ds, PerfettoDsInstanceIndex i,
                     void *user, void *inst, struct PerfettoDsOnStartArgs *a)
{
    (void)ds; (void)i; (void)user; (void)inst; (void)a;
    pthread_mutex_lock(&g_mu);
    g_started = true;
    pthread_cond_broadcast(&g_cv);
    pthread_mutex_unlock(&g_mu);
}

static void flushed(void *user)
{
    (void)user;
    pthread_mutex_lock(&g_mu);
    g_flushes_done++;
    pthread_cond_broadcast(&g_cv);
    pthread_mutex_unlock(&g_mu);
}

/* Wait on g_cv until ready() or the deadline; false on timeout. */
static bool wait_until(bool (*ready)(void), unsigned seconds)
{
    struct timespec dl;
    bool ok;
    clock_gettime(CLOCK_REALTIME, &dl);
    dl.tv_sec += seconds;
    pthread_mutex_lock(&g_mu);
    while (!(ok = ready()) &&
           pthread_cond_timedwait(&g_cv, &g_mu, &dl) == 0)
        ;
    ok = ready();
    pthread_mutex_unlock(&g_mu);
    return ok;
}

static bool started(void) { return g_started; }
static bool all_flushed(void) { return g_flushes_done == g_flushes_asked; }

static int start(const bp_args *a)
{
    struct PerfettoProducerInitArgs args = PERFETTO_PRODUCER_INIT_ARGS_INIT();
    struct PerfettoDsParams params = PerfettoDsParamsDefault();

    args.backends = PERFETTO_BACKEND_SYSTEM;
    PerfettoProducerInit(args);
    params.on_start_cb = on_start;
    params.buffer_exhausted_policy =
        PERFETTO_DS_BUFFER_EXHAUSTED_POLICY_STALL_AND_DROP;
    params.will_notify_on_stop = false;
    if (!PerfettoDsRegister(&g_ds, a->ds_name, params)) {
        fprintf(stderr, "bench_packets_sdk: cannot register %s\n",
                a->ds_name);
        return 1;
    }
    if (!wait_until(started, a->wait_s)) {
        fprintf(stderr, "bench_packets_sdk: no session started %s within "
                "%u s (is a consumer tracing it on "
                "$PERFETTO_PRODUCER_SOCK_NAME?)\n", a->ds_name, a->wait_s);
        return 1;
    }
    return 0;
}

static void burst(uint64_t seq0, unsigned n)
{
    for (uint64_t i = seq0; i < seq0 + n; i++) {
        PERFETTO_DS_TRACE(g_ds, ctx) {
            struct PerfettoDsRootTracePacket root;
            struct perfetto_protos_TestEvent ev;
            PerfettoDsTracerPacketBegin(&ctx, &root);
            perfetto_protos_TracePacket_set_timestamp(
                &root.msg, bp_clock_ns(CLOCK_BOOTTIME));
            perfetto_protos_TracePacket_begin_for_testing(&root.msg, &ev);
            perfetto_protos_TestEvent_set_str(&ev, bp_str64,
                                              sizeof(bp_str64) - 1);
            perfetto_protos_TestEvent_set_seq_value(&ev, (uint32_t)i);
            perfetto_protos_TestEvent_set_counter(&ev, (1ull << 32) | i);
            perfetto_protos_TracePacket_end_for_testing(&root.msg, &ev);
            PerfettoDsTracerPacketEnd(&ctx, &root);
        }
    }
}

static void flush(void)
{
    PERFETTO_DS_TRACE(g_ds, ctx) {
        pthread_mutex_lock(&g_mu);
        g_flushes_asked++;
        pthread_mutex_unlock(&g_mu);
        PerfettoDsTracerFlush(&ctx, flushed, NULL);
    }
}

static void settle(void)
{
    if (!wait_until(all_flushed, 5))
        fprintf(stderr, "bench_packets_sdk: a flush was not acknowledged "
                "within 5 s\n");
}

int main(int argc, char **argv)
{
    static const bp_ops ops = { "sdk", start, burst, flush, settle, NULL };
    if (argv[0] == NULL || strcmp(argv[0], "bench-packets-sdk") != 0) {
        argv[0] = (char *)"bench-packets-sdk";
        execv("/proc/self/exe", argv);
        perror("bench_packets_sdk: re-exec as bench-packets-sdk");
    }
    return bp_main(argc, argv, &ops);
}
