/*
 * bench_tw.c - TraceWriter cost and producer -> SMB -> buffer throughput.
 *
 * Figures (each with a baseline measured in the same run):
 *   1. small packet (timestamp + 32-byte payload), 1 thread: ns/packet,
 *      against copying the same encoded bytes with memcpy;
 *   2. the same with 2 threads (each its own writer on one arbiter);
 *   3. large packets (64 KiB, 256 KiB, 1 MiB bytes field) on 4 KiB and
 *      32 KiB SMB pages: MiB/s against the C library's memcpy of the same
 *      bytes in the writer's piece sizes (page - 20) into a warm ring as
 *      large as the SMB. Thread CPU time; each round times both back to
 *      back (alternating order); medians over 15 (--quick) or 31 rounds,
 *      and the range of the per-round ratio. The gap is the per-chunk
 *      cost (chunk handoff, commit) once per page;
 *   4. end to end in-process: writer -> SMB -> smb_reader -> tb_buffer ->
 *      tb_read_next_packet, bytes/s of packets read back.
 *
 * In 1-3 the "service" is a stand-in: the commit callback frees each
 * chunk (Complete -> BeingRead -> Free, made as the service makes them:
 * smb_reader_acquire_for_reading and smb_reader_release_as_free, plain
 * stores on one-chunk pages) without copying. It runs on the writer's
 * thread, inside the writer's time, where a real service (another
 * process) does not: figure 3 also prints the ratio with the stand-in's
 * own time (TSC ticks around the callback, converted with a rate measured
 * against CLOCK_MONOTONIC) taken out, which is the producer's own cost,
 * less the cross-core cache traffic a real service causes.
 * Usage: bench_tw [--quick] [--large] [--size BYTES --page BYTES] [--help];
 * --size runs figure 3 for that one packet size and page size only (to
 * profile one case alone).
 */
#include "config.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <shmtrace/arbiter.h>
#include <shmtrace/smb_abi.h>
#include <shmtrace/smb_shm.h>
#include <shmtrace/trace_buffer.h>
#include <shmtrace/trace_writer.h>

#include "smb_reader.h"

#if defined(__x86_64__) || defined(__i386__)
#include <x86intrin.h>
#endif

#define MiB (1024.0 * 1024.0)

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* A cheap tick counter for the stand-in service's own time: the TSC
 * (constant rate on the machines this runs on), else CLOCK_MONOTONIC ns. */
static uint64_t ticks(void)
{
#if defined(__x86_64__) || defined(__i386__)
    return __rdtsc();
#else
    return (uint64_t)(now_s() * 1e9);
#endif
}

static double ticks_per_s;

static void calibrate_ticks(void)
{
    double t0 = now_s(), t1;
    uint64_t k0 = ticks(), k1;
    do
        t1 = now_s();
    while (t1 - t0 < 0.05);
    k1 = ticks();
    ticks_per_s = (double)(k1 - k0) / (t1 - t0);
}

/* ---- stand-in service --------------------------------------------------- */

typedef struct {
    uint8_t *base;
    uint32_t page_size;
    uint64_t ticks;        /* spent inside instant_commit */
} instant;

static int instant_commit(void *ctx, const smb_commit_batch *b)
{
    instant *s = ctx;
    uint64_t t0 = ticks();
    for (size_t i = 0; i < b->nchunks; i++) {
        smb_page_header *ph = smb_page_at(s->base, s->page_size,
                                          b->chunks[i].page);
        uint32_t word = atomic_load_explicit(&ph->header_bitmap,
                                             memory_order_acquire);
        if (smb_reader_acquire_for_reading(ph, s->page_size,
                                           b->chunks[i].chunk, word, NULL))
            smb_reader_release_as_free(ph, s->page_size, b->chunks[i].chunk);
    }
    s->ticks += ticks() - t0;
    return 0;
}

typedef struct {
    smb_shm shm;
    instant svc;
    smb_arbiter *arb;
} rig;

static void rig_init_page(rig *r, size_t size, uint32_t page)
{
    smb_transport t = {&r->svc, instant_commit, NULL, NULL};
    if (smb_shm_create(size, &r->shm) != 0) {
        fprintf(stderr, "bench_tw: cannot create the SMB\n");
        exit(1);
    }
    r->svc.base = r->shm.base;
    r->svc.page_size = page;
    r->svc.ticks = 0;
    r->arb = smb_arbiter_create(r->shm.base, size, page, &t, NULL);
    if (r->arb == NULL) {
        fprintf(stderr, "bench_tw: cannot create the arbiter\n");
        exit(1);
    }
}

static void rig_init(rig *r, size_t size)
{
    rig_init_page(r, size, 4096);
}

static void rig_fini(rig *r)
{
    smb_arbiter_destroy(r->arb);
    smb_shm_unmap(&r->shm);
}

/* ---- 1, 2: small packets ------------------------------------------------- */

static const char payload32[33] = "0123456789abcdef0123456789ABCDEF";

static void write_small(tw_writer *w, uint64_t n)
{
    for (uint64_t i = 0; i < n; i++) {
        tw_packet_begin(w);
        tw_add_varint(w, 8, 1700000000000000000ull + i);
        tw_add_bytes(w, 11, payload32, 32);
        tw_packet_end(w);
    }
}

typedef struct {
    smb_arbiter *arb;
    uint64_t n;
    double secs;
} thr;

static void *thr_main(void *p)
{
    thr *t = p;
    tw_writer *w = tw_writer_create(t->arb, 1, TW_POLICY_STALL_THEN_ABORT);
    double t0 = now_s();
    write_small(w, t->n);
    tw_writer_flush(w);
    t->secs = now_s() - t0;
    tw_writer_destroy(w);
    return NULL;
}

/* Baseline: copy the same 47 encoded bytes per packet into a 4 KiB
 * buffer, advancing and wrapping like a chunk. */
static double memcpy_small_ns(uint64_t n)
{
    static uint8_t dst[4096];
    uint8_t pkt[48];
    size_t off = 0;
    double t0;
    memset(pkt, 0x5A, sizeof(pkt));
    t0 = now_s();
    for (uint64_t i = 0; i < n; i++) {
        pkt[2] = (uint8_t)i;
        if (off + 48 > sizeof(dst))
            off = 0;
        memcpy(dst + off, pkt, 48);
        off += 48;
        __asm__ __volatile__("" : : "r"(dst) : "memory");
    }
    return (now_s() - t0) * 1e9 / (double)n;
}

static double cpu_s(void);
static double median(double *v, int n);

#define SMALL_ROUNDS 7

/* 1: SMALL_ROUNDS rounds of n packets, thread CPU time; the median and the
 * best round are printed. */
static void bench_small(uint64_t n)
{
    rig r;
    thr t[2];
    pthread_t th[2];
    double base = 1e30, best = 1e30, v[SMALL_ROUNDS];
    tw_writer *w;

    rig_init(&r, 256 * 1024);
    memset(r.shm.base, 0, 256 * 1024);     /* warm: first touch is slow */
    w = tw_writer_create(r.arb, 1, TW_POLICY_STALL_THEN_ABORT);
    write_small(w, n / 4);                 /* warm-up */
    for (int rep = 0; rep < SMALL_ROUNDS; rep++) {
        double b = memcpy_small_ns(n), t0;
        base = b < base ? b : base;
        t0 = cpu_s();
        write_small(w, n);
        tw_writer_flush(w);
        v[rep] = (cpu_s() - t0) * 1e9 / (double)n;
        best = v[rep] < best ? v[rep] : best;
    }
    tw_writer_destroy(w);
    printf("small packet (ts + 32 B), 1 thread : %7.1f ns/packet median, "
           "%.1f best of %d (thread CPU time; memcpy of the encoded bytes: "
           "%.1f ns; Perfetto's C SDK side by side: make bench-vs-sdk)\n",
           median(v, SMALL_ROUNDS), best, SMALL_ROUNDS, base);
    for (int i = 0; i < 2; i++) {
        t[i].arb = r.arb;
        t[i].n = n;
        pthread_create(&th[i], NULL, thr_main, &t[i]);
    }
    for (int i = 0; i < 2; i++)
        pthread_join(th[i], NULL);
    printf("small packet (ts + 32 B), 2 threads: %7.1f / %.1f ns/packet "
           "per thread, %.1f Mpackets/s together\n",
           t[0].secs * 1e9 / (double)n, t[1].secs * 1e9 / (double)n,
           2.0 * (double)n / (t[0].secs > t[1].secs ? t[0].secs : t[1].secs)
               / 1e6);
    rig_fini(&r);
}

/* ---- 3: large packets ---------------------------------------------------- */

/* Thread CPU time (CLOCK_THREAD_CPUTIME_ID): time the thread is descheduled
 * on a shared machine is left out (a hypervisor's steal time cannot be). */
static double cpu_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* The C library's memcpy, called as the writer calls it: through a pointer
 * the compiler cannot see through (a constant-size memcpy would otherwise
 * be inlined as rep movsq, a different copy routine). */
static void *(*volatile lib_memcpy)(void *, const void *, size_t) = memcpy;

/* Baseline: the least a writer must do. The same packets' bytes, cut in the
 * writer's piece size (the chunk payload minus the 4-byte fragment header:
 * page - 20 bytes for a Div1 chunk), each piece to the next page-sized slot
 * of a warm ring as large as the SMB (also shared memory), at the offset of
 * the first fragment byte (8 page + 8 chunk + 4 fragment header). */
static __attribute__((noinline)) void copy_pieces(uint8_t *ring,
        size_t ring_size, uint32_t page, const uint8_t *src, size_t sz,
        unsigned npackets)
{
    size_t piece = page - 20, roff = 0;
    for (unsigned i = 0; i < npackets; i++) {
        for (size_t o = 0; o < sz; o += piece) {
            size_t k = sz - o < piece ? sz - o : piece;
            lib_memcpy(ring + roff + 20, src + o, k);
            roff += page;
            if (roff == ring_size)
                roff = 0;
        }
    }
    __asm__ __volatile__("" : : "r"(ring) : "memory");
}

/* Measured: the same packets, one sz-byte bytes field nested in
 * for_testing (field 900), through a writer; flushed at the end. */
static __attribute__((noinline)) void write_large(tw_writer *w,
        const uint8_t *src, size_t sz, unsigned npackets)
{
    for (unsigned i = 0; i < npackets; i++) {
        tw_packet_begin(w);
        tw_begin_nested(w, 900);
        tw_add_bytes(w, 1, src, sz);
        tw_end_nested(w);
        tw_packet_end(w);
    }
    tw_writer_flush(w);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof(*v), cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

#define LARGE_MAX_ROUNDS 64
#define SMB_BYTES (256u * 1024u)

/* `rounds` rounds of about `bytes` each; every round times the baseline and
 * the writer back to back (order alternating), after one warm-up round.
 * Printed: the medians of the writer's and the baseline's MiB/s and of the
 * per-round ratio writer/baseline, with the ratio's range over the rounds.
 */
static void bench_large(size_t sz, size_t bytes, uint32_t page, int rounds)
{
    uint8_t *src = malloc(sz);
    unsigned npackets = (unsigned)(bytes / sz);
    smb_shm ring;
    rig r;
    double tw_mib[LARGE_MAX_ROUNDS], mc_mib[LARGE_MAX_ROUNDS];
    double ratio[LARGE_MAX_ROUNDS], rmin = 1e30, rmax = 0;
    double own[LARGE_MAX_ROUNDS], omin = 1e30, omax = 0;
    double svc_share[LARGE_MAX_ROUNDS];
    double mib = (double)npackets * (double)sz / MiB;
    tw_writer *w;

    if (npackets == 0)
        npackets = 1;
    if (rounds > LARGE_MAX_ROUNDS)
        rounds = LARGE_MAX_ROUNDS;
    if (src == NULL || smb_shm_create(SMB_BYTES, &ring) != 0) {
        fprintf(stderr, "bench_tw: out of memory\n");
        exit(1);
    }
    memset(src, 0x33, sz);
    memset(ring.base, 0, SMB_BYTES);
    rig_init_page(&r, SMB_BYTES, page);
    memset(r.shm.base, 0, SMB_BYTES);      /* warm: first touch is slow */
    w = tw_writer_create(r.arb, 1, TW_POLICY_STALL_THEN_ABORT);
    copy_pieces(ring.base, SMB_BYTES, page, src, sz, npackets);  /* warm */
    write_large(w, src, sz, npackets);
    for (int round = 0; round < rounds; round++) {
        double t_mc = 0, t_tw = 0, t_svc = 0, t0;
        for (int k = 0; k < 2; k++) {
            if ((k == 0) == (round % 2 == 0)) {
                t0 = cpu_s();
                copy_pieces(ring.base, SMB_BYTES, page, src, sz, npackets);
                t_mc = cpu_s() - t0;
            } else {
                uint64_t k0 = r.svc.ticks;
                t0 = cpu_s();
                write_large(w, src, sz, npackets);
                t_tw = cpu_s() - t0;
                t_svc = (double)(r.svc.ticks - k0) / ticks_per_s;
            }
        }
        tw_mib[round] = mib / t_tw;
        mc_mib[round] = mib / t_mc;
        ratio[round] = t_mc / t_tw;
        rmin = ratio[round] < rmin ? ratio[round] : rmin;
        rmax = ratio[round] > rmax ? ratio[round] : rmax;
        own[round] = t_svc < t_tw ? t_mc / (t_tw - t_svc) : 0;
        omin = own[round] < omin ? own[round] : omin;
        omax = own[round] > omax ? own[round] : omax;
        svc_share[round] = t_svc / t_tw;
    }
    tw_writer_destroy(w);
    rig_fini(&r);
    smb_shm_unmap(&ring);
    printf("large packet (%4zu KiB, %2u KiB pages): %6.0f MiB/s, memcpy in "
           "%u-byte pieces %6.0f MiB/s: ratio %.2f (%.2f-%.2f over %d "
           "rounds; target >= 0.80)\n"
           "    less the stand-in service (%2.0f%% of the writer's time): "
           "ratio %.2f (%.2f-%.2f)\n",
           sz >> 10, page >> 10, median(tw_mib, rounds), page - 20,
           median(mc_mib, rounds), median(ratio, rounds), rmin, rmax,
           rounds, 100 * median(svc_share, rounds), median(own, rounds),
           omin, omax);
    free(src);
}

/* ---- 4: end to end ------------------------------------------------------ */

typedef struct {
    smb_reader *reader;
    tb_buffer *buf;
} e2e;

static tb_buffer *e2e_resolve(void *ctx, uint32_t target, uint16_t wid)
{
    (void)target;
    (void)wid;
    return ((e2e *)ctx)->buf;
}

static int e2e_commit(void *ctx, const smb_commit_batch *b)
{
    e2e *e = ctx;
    smb_reader_commit_batch(e->reader, b, e2e_resolve, e);
    return 0;
}

static double drain(tb_buffer *buf, uint64_t *npk)
{
    tb_packet p;
    double bytes = 0;
    tb_begin_read(buf);
    while (tb_read_next_packet(buf, &p, NULL, NULL)) {
        bytes += (double)p.size;
        (*npk)++;
    }
    return bytes;
}

static void bench_e2e(size_t pkt_size, uint64_t total_bytes)
{
    smb_shm shm;
    e2e e;
    smb_transport t = {&e, e2e_commit, NULL, NULL};
    smb_arbiter *arb;
    tw_writer *w;
    uint8_t *data = malloc(pkt_size);
    uint64_t n = total_bytes / pkt_size, npk = 0;
    double t0, secs, bytes = 0;

    memset(data, 0x44, pkt_size);
    smb_shm_create(256 * 1024, &shm);
    e.reader = smb_reader_create(shm.base, shm.size, 4096, 1, 0, 0);
    e.buf = tb_create(32 << 20, TB_RING_BUFFER);
    arb = smb_arbiter_create(shm.base, shm.size, 4096, &t, NULL);
    w = tw_writer_create(arb, 1, TW_POLICY_STALL_THEN_ABORT);
    t0 = now_s();
    for (uint64_t i = 0; i < n; i++) {
        tw_packet_begin(w);
        tw_add_bytes(w, 11, data, pkt_size - (pkt_size < 128 ? 2 : 5));
        tw_packet_end(w);
        if ((i + 1) * pkt_size % (8u << 20) < pkt_size)
            bytes += drain(e.buf, &npk);     /* read every 8 MiB */
    }
    tw_writer_flush(w);
    bytes += drain(e.buf, &npk);
    secs = now_s() - t0;
    printf("end to end, %6zu B packets       : %7.0f MiB/s read back "
           "(%.2f Mpackets/s, %llu of %llu packets back)\n",
           pkt_size, bytes / MiB / secs, (double)npk / secs / 1e6,
           (unsigned long long)npk, (unsigned long long)n);
    tw_writer_destroy(w);
    smb_arbiter_destroy(arb);
    smb_reader_destroy(e.reader);
    tb_destroy(e.buf);
    smb_shm_unmap(&shm);
    free(data);
}

int main(int argc, char **argv)
{
    int quick = 0, only_large = 0;
    unsigned long one_size = 0, one_page = 4096;
    for (int i = 1; i < argc; i++) {
        char *end = NULL;
        if (strcmp(argv[i], "--quick") == 0) {
            quick = 1;
        } else if (strcmp(argv[i], "--large") == 0) {
            only_large = 1;
        } else if (strcmp(argv[i], "--size") == 0 && i + 1 < argc) {
            one_size = strtoul(argv[++i], &end, 0);
            if (*end != '\0' || one_size < 1024 || one_size > (16u << 20)) {
                fprintf(stderr, "bench_tw: --size wants 1024..16777216 "
                        "bytes, not '%s'\n", argv[i]);
                return 2;
            }
        } else if (strcmp(argv[i], "--page") == 0 && i + 1 < argc) {
            one_page = strtoul(argv[++i], &end, 0);
            if (*end != '\0' || (one_page != 4096 && one_page != 8192 &&
                                  one_page != 16384 && one_page != 32768)) {
                fprintf(stderr, "bench_tw: --page wants 4096, 8192, 16384 "
                        "or 32768, not '%s'\n", argv[i]);
                return 2;
            }
        } else {
            printf("usage: bench_tw [--quick] [--large] [--size BYTES "
                   "[--page BYTES]]\n"
                   "TraceWriter benchmark: small-packet ns/packet (1 and 2 "
                   "threads), large-packet\nthroughput vs memcpy, and "
                   "end-to-end producer -> SMB -> buffer -> read back.\n"
                   "--quick       run about 10x fewer iterations\n"
                   "--large       the large-packet figures only\n"
                   "--size BYTES  the large-packet figure for this packet "
                   "size only (e.g. to\n"
                   "              profile it alone), on --page BYTES SMB "
                   "pages (4096)\n");
            return strcmp(argv[i], "--help") == 0 ? 0 : 2;
        }
    }
    printf("libshm %s bench_tw%s\n", smb_version(), quick ? " (quick)" : "");
    calibrate_ticks();
    size_t large_bytes = quick ? (16u << 20) : (32u << 20);
    int large_rounds = quick ? 15 : 31;
    if (one_size != 0) {
        /* rounds 16x longer: steadier, and long enough to profile */
        bench_large(one_size, large_bytes * 16, (uint32_t)one_page,
                    large_rounds);
        return 0;
    }
    if (!only_large)
        bench_small(quick ? 2000000 : 20000000);
    /* 4 KiB SMB pages (the default) and 32 KiB (the largest a producer
     * may ask for, --page-size): one chunk handoff per page */
    for (uint32_t page = 4096; page <= 32768; page *= 8) {
        bench_large(64 << 10, large_bytes, page, large_rounds);
        bench_large(256 << 10, large_bytes, page, large_rounds);
        bench_large(1 << 20, large_bytes, page, large_rounds);
    }
    if (only_large)
        return 0;
    bench_e2e(64, quick ? (64u << 20) : (512u << 20));
    bench_e2e(1024, quick ? (128u << 20) : (1024u << 20));
    bench_e2e(100000, quick ? (128u << 20) : (1024u << 20));
    return 0;
}
