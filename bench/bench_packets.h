/*
 * bench_packets.h - the driver shared by the two producers of
 * `make bench-vs-sdk` (bench/bench_vs_sdk.sh): bench_packets (libshm's
 * TraceWriter) and bench_packets_sdk (Perfetto's C SDK, built by the
 * script against ../shared/perfetto when it is there).
 *
 * Both write the same packet, refgen's (Perfetto's reference SDK
 * producer, ../shared/perfetto/src/refgen.c): timestamp = CLOCK_BOOTTIME
 * ns, for_testing { str: 64 letters, seq_value: i, counter: 1 << 32 | i },
 * from one thread, into one data source instance of a running session,
 * after one untimed packet (the SDK makes a thread's writer at its first
 * packet), in rounds:
 *   burst   `burst` packets back to back, then a flush (the writer's
 *           chunk handed back, the commit sent): timed with the thread's
 *           CPU clock (CLOCK_THREAD_CPUTIME_ID) and CLOCK_MONOTONIC;
 *   pause   `pause_ms` for the service to drain the SMB (the SDK's flush
 *           is also waited for here: its acknowledgement), outside the
 *           timing.
 * A burst is sized to fit the SMB (bench_vs_sdk.sh: 10000 packets of
 * ~100 bytes into 4 MiB), so the figure is the producer's own cost, not a
 * wait for a full SMB; both use a stall policy, and the script checks the
 * trace for lost packets (gaps in seq_value) all the same.
 * Printed: round 1 (the first chunks of the SMB, "cold") and the median
 * of the other rounds with their range, per packet; the same for the wall
 * clock; and, measured here in the same run, two baselines: memcpy of the
 * packet's encoded bytes (what the packet costs at the least) and one
 * CLOCK_BOOTTIME read (which both producers make per packet).
 * The last line is for the script: "result who=... cold=... median=...".
 *
 * Each program fills a bp_ops and calls bp_main.
 */
#ifndef BENCH_PACKETS_H
#define BENCH_PACKETS_H

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define BP_MAX_ROUNDS 1000

/* 26 + 26 + 12 = 64 letters, as refgen writes them. */
static const char bp_str64[] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyzABCDEFGHIJKL";

typedef struct bp_args {
    const char *ds_name;      /* data source to register */
    unsigned rounds, burst, pause_ms, wait_s;
} bp_args;

typedef struct bp_ops {
    const char *who;          /* "libshm", "sdk" */
    /* Connect, register a.ds_name, wait (at most a.wait_s) for the
     * session to start it; 0, else a message on stderr and non-zero. */
    int (*start)(const bp_args *a);
    /* Write packets seq0 .. seq0 + n - 1. */
    void (*burst)(uint64_t seq0, unsigned n);
    /* Hand the writer's chunk back and send the commit. */
    void (*flush)(void);
    /* After the timing: wait for what flush started, if it can tell
     * (NULL: nothing to wait for). */
    void (*settle)(void);
    /* At the end: let go of the writer and the connection (NULL: none). */
    void (*finish)(void);
} bp_ops;

static inline uint64_t bp_clock_ns(clockid_t c)
{
    struct timespec ts;
    clock_gettime(c, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static inline void bp_sleep_ms(unsigned ms)
{
    struct timespec ts = { (time_t)(ms / 1000), (long)(ms % 1000) * 1000000 };
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

static int bp_cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Median, min and max of v[0..n) (sorted in place). */
static void bp_summary(double *v, unsigned n, double *med, double *lo,
                       double *hi)
{
    qsort(v, n, sizeof(*v), bp_cmp_double);
    *med = n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
    *lo = v[0];
    *hi = v[n - 1];
}

/* refgen's packet, encoded by hand: the bytes the baseline copies. */
static size_t bp_encode(uint8_t *out, uint64_t ts, uint64_t seq)
{
    uint8_t body[96];
    size_t b = 0, o = 0;
    uint64_t counter = (1ull << 32) | seq;
    body[b++] = 0x0a;                                   /* str, field 1 */
    body[b++] = 64;
    memcpy(body + b, bp_str64, 64);
    b += 64;
    body[b++] = 0x10;                                   /* seq_value */
    for (uint64_t v = seq; ; v >>= 7) {
        body[b++] = (uint8_t)(v < 0x80 ? v : (v & 0x7f) | 0x80);
        if (v < 0x80)
            break;
    }
    body[b++] = 0x18;                                   /* counter */
    for (uint64_t v = counter; ; v >>= 7) {
        body[b++] = (uint8_t)(v < 0x80 ? v : (v & 0x7f) | 0x80);
        if (v < 0x80)
            break;
    }
    out[o++] = 0x40;                                    /* timestamp */
    for (uint64_t v = ts; ; v >>= 7) {
        out[o++] = (uint8_t)(v < 0x80 ? v : (v & 0x7f) | 0x80);
        if (v < 0x80)
            break;
    }
    out[o++] = 0xa2;                                    /* field 900, */
    out[o++] = 0x38;                                    /* wire type 2 */
    out[o++] = (uint8_t)b;
    memcpy(out + o, body, b);
    return o + b;
}

/* The C library's memcpy through a pointer the compiler cannot see
 * through (a constant-size copy would be inlined). */
static void *(*volatile bp_memcpy)(void *, const void *, size_t) = memcpy;

/* Baselines, thread CPU ns per packet over `n` packets: memcpy of the
 * encoded packet into the next slot of a 1 MiB area (as a writer fills
 * its chunks), and one CLOCK_BOOTTIME read. */
static void bp_baselines(unsigned n, double *copy_ns, double *clock_ns)
{
    static uint8_t area[1u << 20];
    uint8_t pkt[128];
    size_t len = bp_encode(pkt, bp_clock_ns(CLOCK_BOOTTIME), 123456);
    size_t off = 0;
    memset(area, 0, sizeof(area));       /* its first touch is not timed */
    uint64_t t0 = bp_clock_ns(CLOCK_THREAD_CPUTIME_ID), sink = 0;
    for (unsigned i = 0; i < n; i++) {
        if (off + len > sizeof(area))
            off = 0;
        bp_memcpy(area + off, pkt, len);
        off += len;
    }
    uint64_t t1 = bp_clock_ns(CLOCK_THREAD_CPUTIME_ID);
    for (unsigned i = 0; i < n; i++)
        sink += bp_clock_ns(CLOCK_BOOTTIME);
    uint64_t t2 = bp_clock_ns(CLOCK_THREAD_CPUTIME_ID);
    __asm__ __volatile__("" : : "r"(sink), "r"(area) : "memory");
    *copy_ns = (double)(t1 - t0) / n;
    *clock_ns = (double)(t2 - t1) / n;
}

static unsigned bp_uint(const char *opt, const char *s, unsigned lo,
                        unsigned hi)
{
    char *end;
    unsigned long v;
    errno = 0;
    v = strtoul(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) {
        fprintf(stderr, "%s: want a number from %u to %u, got '%s'\n", opt,
                lo, hi, s);
        exit(2);
    }
    return (unsigned)v;
}

static int bp_main(int argc, char **argv, const bp_ops *ops)
{
    bp_args a = { "dev.bench.packets", 40, 10000, 30, 10 };
    static double cpu[BP_MAX_ROUNDS], wall[BP_MAX_ROUNDS];
    double cold_cpu, cold_wall, med, lo, hi, wmed, wlo, whi, copy, clk;

    for (int i = 1; i < argc; i++) {
        const char *o = argv[i];
        if (strcmp(o, "-h") == 0 || strcmp(o, "--help") == 0) {
            printf("usage: %s [--ds NAME] [--rounds N] [--burst N] "
                   "[--pause-ms N] [--wait-s N]\n"
                   "Registers data source NAME (default %s), waits up to "
                   "--wait-s (10) s\nfor a session to start it, then "
                   "writes --rounds (40) bursts of --burst\n(10000) of "
                   "refgen's packets from one thread, with --pause-ms (30)"
                   "\nbetween bursts, and prints the thread CPU time per "
                   "packet (%s).\nThe service comes from "
                   "$PERFETTO_PRODUCER_SOCK_NAME.\n", argv[0], a.ds_name,
                   ops->who);
            return 0;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "%s: unknown option or missing value '%s' "
                    "(--help)\n", argv[0], o);
            return 2;
        }
        const char *v = argv[++i];
        if (strcmp(o, "--ds") == 0)
            a.ds_name = v;
        else if (strcmp(o, "--rounds") == 0)
            a.rounds = bp_uint(o, v, 2, BP_MAX_ROUNDS);
        else if (strcmp(o, "--burst") == 0)
            a.burst = bp_uint(o, v, 1, 10000000);
        else if (strcmp(o, "--pause-ms") == 0)
            a.pause_ms = bp_uint(o, v, 0, 60000);
        else if (strcmp(o, "--wait-s") == 0)
            a.wait_s = bp_uint(o, v, 1, 3600);
        else {
            fprintf(stderr, "%s: unknown option '%s' (--help)\n", argv[0],
                    o);
            return 2;
        }
    }
    if (ops->start(&a) != 0)
        return 1;
    /* One packet first, untimed: the SDK makes its writer at the first
     * packet of a thread, libshm's program in start. */
    ops->burst(0, 1);
    for (unsigned r = 0; r < a.rounds; r++) {
        uint64_t c0 = bp_clock_ns(CLOCK_THREAD_CPUTIME_ID);
        uint64_t w0 = bp_clock_ns(CLOCK_MONOTONIC);
        ops->burst(1 + (uint64_t)r * a.burst, a.burst);
        ops->flush();
        uint64_t c1 = bp_clock_ns(CLOCK_THREAD_CPUTIME_ID);
        uint64_t w1 = bp_clock_ns(CLOCK_MONOTONIC);
        cpu[r] = (double)(c1 - c0) / a.burst;
        wall[r] = (double)(w1 - w0) / a.burst;
        if (ops->settle)
            ops->settle();
        bp_sleep_ms(a.pause_ms);
    }
    bp_baselines(a.burst, &copy, &clk);
    if (ops->finish)
        ops->finish();
    cold_cpu = cpu[0];
    cold_wall = wall[0];
    bp_summary(cpu + 1, a.rounds - 1, &med, &lo, &hi);
    bp_summary(wall + 1, a.rounds - 1, &wmed, &wlo, &whi);
    printf("%s: %u rounds of %u packets: cold %.1f ns/packet, then "
           "median %.1f (%.1f-%.1f) thread CPU; wall %.1f, then %.1f "
           "(%.1f-%.1f); memcpy of the packet %.1f ns, CLOCK_BOOTTIME read "
           "%.1f ns\n", ops->who, a.rounds, a.burst, cold_cpu, med, lo, hi,
           cold_wall, wmed, wlo, whi, copy, clk);
    printf("result who=%s cold=%.1f median=%.1f min=%.1f max=%.1f "
           "wall=%.1f memcpy=%.1f clock=%.1f packets=%llu\n", ops->who,
           cold_cpu, med, lo, hi, wmed, copy, clk,
           (unsigned long long)a.rounds * a.burst + 1);
    fflush(stdout);
    return 0;
}

#endif /* BENCH_PACKETS_H */
