/*
 * bench_tb.c - libbuf throughput benchmark (not part of make check).
 *
 * Same workloads as Perfetto's trace_buffer_benchmark.cc: 100 chunk
 * templates of 5-15 packets of 50-500 bytes (<= 4080 payload bytes, 4-byte
 * varint headers, seeded PRNG), throughput counted as 4096 bytes per chunk:
 *   write, 1 writer      -> 64 MiB ring buffer, many laps (eviction active)
 *   write, 1000 writers  -> same, round-robin over 1000 sequences
 *   read                 -> drain a 128 MiB buffer filled by one writer
 *   patch                -> last / 10th-from-last / missing chunk, ns per call
 * and, in the same run, memcpy of 4 KiB blocks into a 64 MiB area as the
 * baseline each throughput is divided by. Prints one line per figure.
 *
 * Usage: bench_tb [--quick] [--help]
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include <shmtrace/trace_buffer.h>

#define CHUNK_BYTES 4096u
#define MAX_PAYLOAD 4080u
#define NTEMPLATES 100u
#define MIB ((size_t)1 << 20)

typedef struct {
    uint8_t data[MAX_PAYLOAD];
    size_t size;
    uint16_t nfrags;
} tmpl_t;

static tmpl_t templates[NTEMPLATES];
static volatile size_t sink;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static uint32_t rng_state = 42;
static uint32_t rnd(void) /* minstd, like std::minstd_rand */
{
    rng_state = (uint32_t)(((uint64_t)rng_state * 48271u) % 2147483647u);
    return rng_state;
}

static void make_templates(void)
{
    for (unsigned i = 0; i < NTEMPLATES; i++) {
        tmpl_t *t = &templates[i];
        size_t npk = 5 + rnd() % 11;
        for (size_t p = 0; p < npk && t->size < MAX_PAYLOAD - 50; p++) {
            size_t sz = 50 + rnd() % 451; /* whole fragment incl. header */
            if (t->size + sz > MAX_PAYLOAD)
                sz = MAX_PAYLOAD - t->size;
            if (sz < 10)
                break;
            uint32_t body = (uint32_t)(sz - 4);
            for (int k = 0; k < 4; k++)
                t->data[t->size++] = (uint8_t)(((body >> (7 * k)) & 0x7F) |
                                               (k < 3 ? 0x80 : 0));
            memset(t->data + t->size, 'a' + (int)(i % 26), body);
            t->size += body;
            t->nfrags++;
        }
    }
}

/* memcpy of 4 KiB blocks into a 64 MiB area, for at least `secs`. */
static double bench_memcpy(double secs)
{
    size_t area = 64 * MIB;
    uint8_t *dst = mmap(NULL, area, PROT_READ | PROT_WRITE,
                        MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (dst == MAP_FAILED) {
        perror("mmap");
        exit(1);
    }
    memset(dst, 0, area); /* fault the pages in, as a used ring would be */
    size_t bytes = 0, off = 0, i = 0;
    double t0 = now_s(), t;
    do {
        for (int k = 0; k < 1024; k++) {
            memcpy(dst + off, templates[i % NTEMPLATES].data, CHUNK_BYTES -
                   16);
            off += CHUNK_BYTES;
            if (off >= area)
                off = 0;
            i++;
            bytes += CHUNK_BYTES;
        }
        t = now_s() - t0;
    } while (t < secs);
    sink += dst[off];
    munmap(dst, area);
    return (double)bytes / t;
}

static double bench_write(unsigned nwriters, double secs)
{
    tb_buffer *b = tb_create(64 * MIB, TB_RING_BUFFER);
    if (!b) {
        perror("tb_create");
        exit(1);
    }
    uint32_t *ids = calloc(nwriters, sizeof(*ids));
    /* Warm-up lap: fill the ring once so eviction runs in the timed part. */
    size_t tidx = 0, widx = 0, bytes = 0;
    for (size_t filled = 0; filled < 64 * MIB; filled += CHUNK_BYTES) {
        const tmpl_t *t = &templates[tidx++ % NTEMPLATES];
        unsigned w = (unsigned)(widx++ % nwriters);
        tb_copy_chunk_untrusted(b, (uint16_t)(w + 1), 1000 + w,
                                100 + (int32_t)w, (uint16_t)(w + 1),
                                ids[w]++, t->nfrags, 0, true, t->data,
                                t->size);
    }
    double t0 = now_s(), el;
    do {
        for (int k = 0; k < 4096; k++) {
            const tmpl_t *t = &templates[tidx++ % NTEMPLATES];
            unsigned w = (unsigned)(widx++ % nwriters);
            tb_copy_chunk_untrusted(b, (uint16_t)(w + 1), 1000 + w,
                                    100 + (int32_t)w, (uint16_t)(w + 1),
                                    ids[w]++, t->nfrags, 0, true, t->data,
                                    t->size);
            bytes += CHUNK_BYTES;
        }
        el = now_s() - t0;
    } while (el < secs);
    if (tb_get_stats(b)->chunks_overwritten == 0) {
        fprintf(stderr, "bench_tb: no eviction happened\n");
        exit(1);
    }
    tb_destroy(b);
    free(ids);
    return (double)bytes / el;
}

static void fill_one_writer(tb_buffer *b, size_t size)
{
    uint32_t id = 0;
    size_t tidx = 0;
    for (size_t w = 0; w < size - CHUNK_BYTES; w += CHUNK_BYTES) {
        const tmpl_t *t = &templates[tidx++ % NTEMPLATES];
        tb_copy_chunk_untrusted(b, 1, 1000, 100, 1, id++, t->nfrags, 0,
                                true, t->data, t->size);
    }
}

/* Drains a freshly filled 128 MiB buffer, repeatedly for at least `secs`
 * (fill time excluded). Returns chunk-bytes/s; *payload_bps = slice bytes/s.
 */
static double bench_read(double secs, double *payload_bps)
{
    double busy = 0;
    size_t chunk_bytes = 0, payload = 0;
    do {
        tb_buffer *b = tb_create(128 * MIB, TB_RING_BUFFER);
        if (!b) {
            perror("tb_create");
            exit(1);
        }
        fill_one_writer(b, 128 * MIB);
        tb_packet pkt;
        tb_seq_props props;
        uint32_t dropped;
        double t0 = now_s();
        tb_begin_read(b);
        while (tb_read_next_packet(b, &pkt, &props, &dropped))
            for (size_t i = 0; i < pkt.nslices; i++)
                payload += pkt.slices[i].size;
        busy += now_s() - t0;
        chunk_bytes += tb_get_stats(b)->chunks_read * CHUNK_BYTES;
        tb_destroy(b);
    } while (busy < secs);
    *payload_bps = (double)payload / busy;
    return (double)chunk_bytes / busy;
}

/* ns per tb_try_patch_chunk on a full 64 MiB single-writer buffer. */
static void bench_patch(double secs, double ns[3])
{
    tb_buffer *b = tb_create(64 * MIB, TB_RING_BUFFER);
    uint32_t id = 0;
    size_t tidx = 0;
    for (size_t w = 0; w < 2 * 64 * MIB; w += CHUNK_BYTES) {
        const tmpl_t *t = &templates[tidx++ % NTEMPLATES];
        tb_copy_chunk_untrusted(b, 1, 1000, 100, 1, id++, t->nfrags, 0,
                                true, t->data, t->size);
    }
    uint32_t last = id - 1;
    uint32_t targets[3] = {last, last - 9, 5 /* evicted long ago */};
    tb_patch p = {8, {1, 2, 3, 4}};
    for (int k = 0; k < 3; k++) {
        size_t n = 0;
        unsigned ok = 0;
        double t0 = now_s(), el;
        do {
            for (int i = 0; i < 65536; i++)
                ok += tb_try_patch_chunk(b, 1, 1, targets[k], &p, 1, true);
            n += 65536;
            el = now_s() - t0;
        } while (el < secs);
        if ((k < 2) != (ok == n)) {
            fprintf(stderr, "bench_tb: unexpected patch result\n");
            exit(1);
        }
        ns[k] = el * 1e9 / (double)n;
    }
    tb_destroy(b);
}

static void usage(FILE *f)
{
    fprintf(f,
        "usage: bench_tb [--quick] [--only W] [--help]\n"
        "Measures libbuf (TraceBufferV2) throughput against memcpy of 4 KiB\n"
        "blocks into a 64 MiB area, measured in the same run.\n"
        "  --quick  shorter measurements (about 5 s instead of 20 s)\n"
        "  --only W run one workload: memcpy, write1, write1000, read\n"
        "  --help   this text\n"
        "Targets: write >= 0.6x memcpy (1 and 1000 writers), read >= 0.5x,\n"
        "each patch case < 100 ns.\n");
}

int main(int argc, char **argv)
{
    double secs = 1.5;
    const char *only = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--only") && i + 1 < argc) {
            only = argv[++i];
        } else if (!strcmp(argv[i], "--quick")) {
            secs = 0.3;
        } else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            usage(stdout);
            return 0;
        } else {
            fprintf(stderr, "bench_tb: unknown argument '%s'\n", argv[i]);
            usage(stderr);
            return 2;
        }
    }
    make_templates();
    if (only) { /* profiling aid: run one workload */
        double x;
        if (!strcmp(only, "write1"))
            x = bench_write(1, secs);
        else if (!strcmp(only, "write1000"))
            x = bench_write(1000, secs);
        else if (!strcmp(only, "read"))
            x = bench_read(secs, &x);
        else
            x = bench_memcpy(secs);
        printf("%s %.2f GB/s\n", only, x / 1e9);
        return 0;
    }
    double mc = bench_memcpy(secs);
    double w1 = bench_write(1, secs);
    double w1000 = bench_write(1000, secs);
    double rd_payload;
    double rd = bench_read(secs, &rd_payload);
    double mc2 = bench_memcpy(secs);
    double ns[3];
    bench_patch(secs / 3, ns);
    double base = (mc + mc2) / 2;
    printf("libbuf benchmark (64 MiB ring, 4096 bytes counted per chunk)\n");
    printf("%-28s %8.2f GB/s   (baseline; runs %.2f / %.2f)\n",
           "memcpy 4 KiB -> 64 MiB", base / 1e9, mc / 1e9, mc2 / 1e9);
    printf("%-28s %8.2f GB/s   %.2fx memcpy (target >= 0.60x)\n",
           "write, 1 writer", w1 / 1e9, w1 / base);
    printf("%-28s %8.2f GB/s   %.2fx memcpy (target >= 0.60x)\n",
           "write, 1000 writers", w1000 / 1e9, w1000 / base);
    printf("%-28s %8.2f GB/s   %.2fx memcpy (target >= 0.50x; "
           "packet bytes %.2f GB/s)\n",
           "read, 128 MiB", rd / 1e9, rd / base, rd_payload / 1e9);
    printf("%-28s %8.1f ns     (target < 100 ns)\n", "patch last chunk",
           ns[0]);
    printf("%-28s %8.1f ns     (target < 100 ns)\n",
           "patch 10th-from-last", ns[1]);
    printf("%-28s %8.1f ns     (target < 100 ns)\n", "patch missing chunk",
           ns[2]);
    return 0;
}
