/*
 * svc_manywriters.c - a libshm producer with thousands of TraceWriters,
 * for the end-to-end test of folded loss lists (tests/ins_lost_folded.sh).
 *
 * shmtrace-producer runs one thread per writer (at most 256); the service
 * folds its loss list only past a few thousand writers. Here one thread
 * drives them all: when the data source starts it creates --writers
 * writers on the session's buffer, and for each in turn writes --count
 * packets and flushes it (its chunk goes to the service at once, so the
 * SMB never holds more than a few chunks). Every writer stays alive until
 * the session stops: a destroyed writer's id could be given to the next
 * one, which would then continue its sequence.
 *
 * Packets are shmtrace-producer's (svc_tracecheck checks them): TestEvent
 * (TracePacket.for_testing) with seq_value 0..count-1 per writer, counter
 * the writer's index, is_last on the last one, and payload.str of --size
 * bytes, byte k = 'a' + (seq_value + k) % 26. Policy stall-then-drop: a writer
 * waits for a free chunk (the ones before it flushed theirs), so nothing
 * is lost in the producer and no loss marker is written; the losses are
 * the service's (a ring that wraps), which is what the test needs.
 *
 * Prints "all N writers done" once every packet was written. Exits 0 when
 * the session stops (or on SIGTERM), 1 if the service goes away first or
 * refuses us, 2 on bad usage.
 */
#include <errno.h>
#include <getopt.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <shmtrace/producer.h>

#define MW_MAX_WRITERS 30000u
#define MW_MAX_SIZE 4096u

typedef struct {
    prod_producer *p;
    uint32_t nwriters, count, size;
    /* Set by callbacks (the library thread), read by main. */
    atomic_uint started;         /* 1: on_start came (target below) */
    atomic_uint stopped;         /* 1: on_stop came */
    atomic_uint lost;            /* 1: disconnected */
    uint32_t target_buffer;      /* written before `started` (release) */
} mw_state;

static volatile sig_atomic_t g_term;

static void on_term(int sig)
{
    (void)sig;
    g_term = 1;
}

static void on_start(prod_producer *p, const prod_ds_config *cfg, void *ctx)
{
    (void)p;
    mw_state *st = ctx;
    st->target_buffer = cfg->target_buffer;
    atomic_store_explicit(&st->started, 1, memory_order_release);
}

static void on_stop(prod_producer *p, uint64_t instance_id, void *ctx)
{
    (void)p;
    (void)instance_id;
    atomic_store_explicit(&((mw_state *)ctx)->stopped, 1,
                          memory_order_release);
}

static void on_disconnect(prod_producer *p, int err, void *ctx)
{
    (void)p;
    fprintf(stderr, "svc_manywriters: disconnected (%d)\n", err);
    atomic_store_explicit(&((mw_state *)ctx)->lost, 1, memory_order_release);
}

static void sleep_ms(long ms)
{
    struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };
    nanosleep(&ts, NULL);
}

/* One packet of writer INDEX, number SEQ (see the top comment). */
static void write_packet(tw_writer *w, uint32_t index, uint32_t seq,
                         uint32_t count, uint32_t size, const uint8_t *pat)
{
    struct timespec now;
    clock_gettime(CLOCK_BOOTTIME, &now);
    tw_packet_begin(w);
    tw_add_varint(w, 8, (uint64_t)now.tv_sec * 1000000000u +
                            (uint64_t)now.tv_nsec);
    tw_begin_nested(w, 900);
    tw_add_varint(w, 2, seq);
    tw_add_varint(w, 3, index);
    if (seq + 1 == count)
        tw_add_varint(w, 4, 1);
    tw_begin_nested(w, 5);
    tw_add_bytes(w, 1, pat + seq % 26, size);
    tw_end_nested(w);
    tw_end_nested(w);
    tw_packet_end(w);
}

static int usage(FILE *f, int rc)
{
    fprintf(f, "usage: svc_manywriters [-w WRITERS] [-c COUNT] [-S SIZE]\n"
            "  -w N  writers (default 8000, at most %u)\n"
            "  -c N  packets per writer (default 4)\n"
            "  -S N  payload bytes per packet (default 64, at most %u)\n"
            "Connects to $PERFETTO_PRODUCER_SOCK_NAME (else the default),\n"
            "registers shmtrace.synthetic, writes when it starts.\n",
            MW_MAX_WRITERS, MW_MAX_SIZE);
    return rc;
}

int main(int argc, char **argv)
{
    static mw_state st;
    st.nwriters = 8000;
    st.count = 4;
    st.size = 64;
    int o;
    while ((o = getopt(argc, argv, "w:c:S:h")) != -1) {
        long v = o == 'h' ? 0 : strtol(optarg, NULL, 10);
        switch (o) {
        case 'w': st.nwriters = (uint32_t)v; break;
        case 'c': st.count = (uint32_t)v; break;
        case 'S': st.size = (uint32_t)v; break;
        case 'h': return usage(stdout, 0);
        default: return usage(stderr, 2);
        }
        if (v <= 0)
            return usage(stderr, 2);
    }
    if (optind != argc || st.nwriters > MW_MAX_WRITERS ||
        st.size > MW_MAX_SIZE)
        return usage(stderr, 2);
    signal(SIGTERM, on_term);
    signal(SIGINT, on_term);
    uint8_t pat[MW_MAX_SIZE + 26];
    for (size_t k = 0; k < sizeof(pat); k++)
        pat[k] = (uint8_t)('a' + k % 26);

    prod_options opts;
    memset(&opts, 0, sizeof(opts));
    opts.producer_name = "svc_manywriters";
    prod_callbacks cb;
    memset(&cb, 0, sizeof(cb));
    cb.on_start = on_start;
    cb.on_stop = on_stop;
    cb.on_disconnect = on_disconnect;
    st.p = prod_create(&opts, &cb, &st);
    if (!st.p) {
        fprintf(stderr, "svc_manywriters: prod_create: %s\n",
                strerror(errno));
        return 1;
    }
    prod_data_source ds;
    memset(&ds, 0, sizeof(ds));
    ds.name = "shmtrace.synthetic";
    if (prod_register_data_source(st.p, &ds) != 0) {
        prod_destroy(st.p);
        return 1;
    }
    fprintf(stderr, "svc_manywriters: registered\n");
    while (!atomic_load_explicit(&st.started, memory_order_acquire) &&
           !atomic_load(&st.lost) && !g_term)
        sleep_ms(5);
    tw_writer **w = calloc(st.nwriters, sizeof(*w));
    uint32_t made = 0;
    int rc = 0;
    if (!w) {
        rc = 1;
        goto out;
    }
    for (; made < st.nwriters && !g_term && !atomic_load(&st.lost) &&
           atomic_load(&st.started); made++) {
        w[made] = prod_create_writer(st.p, st.target_buffer,
                                     TW_POLICY_STALL_THEN_DROP);
        if (!w[made]) {
            fprintf(stderr, "svc_manywriters: writer %u: %s\n", made,
                    strerror(errno));
            rc = 1;
            break;
        }
        for (uint32_t i = 0; i < st.count; i++)
            write_packet(w[made], made, i, st.count, st.size, pat);
        tw_writer_flush(w[made]);
    }
    if (made == st.nwriters)
        printf("all %u writers done\n", made);
    fflush(stdout);
    while (!atomic_load_explicit(&st.stopped, memory_order_acquire) &&
           !atomic_load(&st.lost) && !g_term)
        sleep_ms(5);
    if (atomic_load(&st.lost) && !atomic_load(&st.stopped))
        rc = 1;
out:
    for (uint32_t i = 0; i < made; i++)
        tw_writer_destroy(w[i]);
    free(w);
    prod_destroy(st.p);
    return rc;
}
