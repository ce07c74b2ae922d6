/*
 * bench_hostspeed.c - helper of bench_vs_perfetto.sh: how fast this host's
 * memory is right now, so that a run's figures can be read against it.
 *
 * Why: this project's benchmarks run on 2-vCPU virtual machines whose
 * speed moves from one boot (and one hour) to the next with what the host
 * runs beside them. The same code on the same kind of machine, a few
 * hours apart on 2026-12-07: bench-vs-perfetto put shmtraced's CPU per
 * 1 KiB packet at 325-402 ns in one session and at 805-944 ns in the
 * next, whose page-cache floor (bench_fwrite) was 290-308 ns per packet
 * instead of 113-132 and whose bench_tb memcpy baseline was 8.4 GB/s (an
 * earlier Intel host of this kind: 22-26). Every figure that moves bytes
 * moves with the memory's speed, Perfetto's traced less than shmtraced
 * (more of its time is its own code), so the ratios between the two
 * services shrink on a slow host. The ratios in one run stay fair; a note
 * that compares runs needs this line.
 *
 * What: memcpy of 4 KiB pieces, measured per CPU-second (thread CPU time,
 * CLOCK_THREAD_CPUTIME_ID, so time the host takes the vCPU away is not
 * counted; the wall figure is printed too), median of ROUNDS rounds of
 * about 50 ms each:
 *   memory  into a 64 MiB area, piece after piece (bench_tb's baseline:
 *           every line written misses the caches), from a 1 MiB source;
 *   cache   into a 512 KiB area, from a 256 KiB source (both stay in a
 *           core's L2 on this project's hosts).
 * Both areas are touched before timing (no page faults in the figures).
 *
 * Output, one line on stdout:
 *   memcpy 4 KiB pieces: memory X GB/s (wall Y), cache Z GB/s (wall W)
 * Usage: bench_hostspeed [--help]
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define PIECE 4096u
#define ROUNDS 7
#define ROUND_S 0.05

static double clock_s(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* One figure: memcpy of PIECE-byte pieces from src (src_size bytes, read
 * round robin) into dst (dst_size bytes, written piece after piece); the
 * medians of ROUNDS rounds, in GB/s per CPU-second (*cpu) and per wall
 * second (*wall). */
static void measure(uint8_t *dst, size_t dst_size, const uint8_t *src,
                    size_t src_size, double *cpu, double *wall)
{
    double c[ROUNDS], w[ROUNDS];
    size_t d = 0, s = 0;

    for (int r = 0; r < ROUNDS; r++) {
        uint64_t bytes = 0;
        double c0 = clock_s(CLOCK_THREAD_CPUTIME_ID);
        double w0 = clock_s(CLOCK_MONOTONIC), c1;
        do {
            for (int i = 0; i < 256; i++) {
                memcpy(dst + d, src + s, PIECE);
                d = d + PIECE < dst_size ? d + PIECE : 0;
                s = s + PIECE < src_size ? s + PIECE : 0;
            }
            /* keep the copies: the compiler may not drop them */
            __asm__ volatile("" : : "r"(dst) : "memory");
            bytes += 256u * PIECE;
            c1 = clock_s(CLOCK_THREAD_CPUTIME_ID);
        } while (c1 - c0 < ROUND_S);
        c[r] = (double)bytes / (c1 - c0) / 1e9;
        w[r] = (double)bytes / (clock_s(CLOCK_MONOTONIC) - w0) / 1e9;
    }
    qsort(c, ROUNDS, sizeof(c[0]), cmp_double);
    qsort(w, ROUNDS, sizeof(w[0]), cmp_double);
    *cpu = c[ROUNDS / 2];
    *wall = w[ROUNDS / 2];
}

int main(int argc, char **argv)
{
    const size_t mem_dst = 64u << 20, mem_src = 1u << 20;
    const size_t cache_dst = 512u << 10, cache_src = 256u << 10;
    double mc, mw, cc, cw;
    uint8_t *dst, *src;

    if (argc > 1) {
        int help = strcmp(argv[1], "--help") == 0 ||
                   strcmp(argv[1], "-h") == 0;
        fprintf(help ? stdout : stderr,
                "usage: bench_hostspeed [--help]\n"
                "Prints this host's memcpy speed now (4 KiB pieces into a "
                "64 MiB area:\nmemory; within 512 KiB: cache), per "
                "CPU-second and per wall second,\nfor bench_vs_perfetto.sh "
                "to print beside its figures.\n");
        return help ? 0 : 2;
    }
    dst = malloc(mem_dst);
    src = malloc(mem_src);
    if (dst == NULL || src == NULL) {
        fprintf(stderr, "bench_hostspeed: out of memory\n");
        return 1;
    }
    memset(dst, 1, mem_dst);                /* fault everything in */
    memset(src, 2, mem_src);
    measure(dst, mem_dst, src, mem_src, &mc, &mw);
    measure(dst, cache_dst, src, cache_src, &cc, &cw);
    printf("memcpy 4 KiB pieces: memory %.1f GB/s (wall %.1f), "
           "cache %.1f GB/s (wall %.1f)\n", mc, mw, cc, cw);
    free(dst);
    free(src);
    return 0;
}
