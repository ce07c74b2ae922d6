/*
 * ab_libbuf.c - A/B of libbuf variants inside one process.
 *
 * On a noisy VM, two runs of bench_tb a minute apart can differ by 1.5x
 * (host memory placement and neighbours), so a 5% change cannot be seen by
 * running two binaries one after the other. This driver runs bench_tb's own
 * workloads (it includes bench_tb.c) over several libbuf builds linked into
 * one binary, alternating the variants round by round, and prints each
 * variant's median and its per-round ratio to the first variant: the two
 * sides of a ratio ran seconds apart on the same memory.
 *
 * bench/ab_libbuf.sh builds it: each variant's libbuf sources become one
 * relocatable object whose internals are made local and whose public tb_*
 * symbols get the variant's prefix (NAME_tb_create...); the build passes
 * AB_DECLS (one AB_VARIANT(NAME) per variant) and AB_LIST (&ab_NAME, ...).
 * Not built by make: it is a developer's tool.
 *
 * Usage: ab_libbuf WORKLOAD ROUNDS, WORKLOAD one of write1, write1000,
 * read (bench_tb's: fresh 128 MiB buffers), read_cached (a 1 MiB buffer
 * filled and read again and again: the reader's CPU cost), read64 (a
 * 64 MiB buffer filled and read 40 times), svc1k (reading the service's
 * 1 KiB packets out of 32 KiB chunks, 4 MiB behind the writer), svc64
 * (the service's 64 B packets: ~94-byte records out of 32 KiB chunks, 1 MiB
 * behind, each copied out as the file pass does), memcpy.
 */
#include <shmtrace/trace_buffer.h>

typedef struct {
    const char *name;
    tb_buffer *(*create)(size_t, tb_fill_policy);
    void (*destroy)(tb_buffer *);
    void (*copy)(tb_buffer *, uint16_t, uint32_t, int32_t, uint16_t,
                 uint32_t, uint16_t, uint8_t, bool, const uint8_t *, size_t);
    void (*begin_read)(tb_buffer *);
    bool (*read_next)(tb_buffer *, tb_packet *, tb_seq_props *, uint32_t *);
    const tb_stats *(*get_stats)(const tb_buffer *);
    bool (*patch)(tb_buffer *, uint16_t, uint16_t, uint32_t,
                  const tb_patch *, size_t, bool);
    void (*set_cache)(size_t);
} ab_ops;

/* bench_tb.c's calls go to the variant of the round. */
static const ab_ops *ab_cur;
#define tb_create(...) ab_cur->create(__VA_ARGS__)
#define tb_destroy(...) ab_cur->destroy(__VA_ARGS__)
#define tb_copy_chunk_untrusted(...) ab_cur->copy(__VA_ARGS__)
#define tb_begin_read(...) ab_cur->begin_read(__VA_ARGS__)
#define tb_read_next_packet(...) ab_cur->read_next(__VA_ARGS__)
#define tb_get_stats(...) ab_cur->get_stats(__VA_ARGS__)
#define tb_try_patch_chunk(...) ab_cur->patch(__VA_ARGS__)
#define tb_set_ring_cache_limit(...) ab_cur->set_cache(__VA_ARGS__)
#define main bench_tb_main
#include "bench_tb.c"
#undef main

#define AB_VARIANT(N)                                                      \
    tb_buffer *N##_tb_create(size_t, tb_fill_policy);                      \
    void N##_tb_destroy(tb_buffer *);                                      \
    void N##_tb_copy_chunk_untrusted(tb_buffer *, uint16_t, uint32_t,      \
            int32_t, uint16_t, uint32_t, uint16_t, uint8_t, bool,          \
            const uint8_t *, size_t);                                      \
    void N##_tb_begin_read(tb_buffer *);                                   \
    bool N##_tb_read_next_packet(tb_buffer *, tb_packet *, tb_seq_props *, \
                                 uint32_t *);                              \
    const tb_stats *N##_tb_get_stats(const tb_buffer *);                   \
    bool N##_tb_try_patch_chunk(tb_buffer *, uint16_t, uint16_t, uint32_t, \
                                const tb_patch *, size_t, bool);           \
    void N##_tb_set_ring_cache_limit(size_t);                              \
    static const ab_ops ab_##N = {#N, N##_tb_create, N##_tb_destroy,       \
        N##_tb_copy_chunk_untrusted, N##_tb_begin_read,                    \
        N##_tb_read_next_packet, N##_tb_get_stats,                         \
        N##_tb_try_patch_chunk, N##_tb_set_ring_cache_limit};
AB_DECLS
static const ab_ops *const ab_all[] = {AB_LIST};
#define AB_N ((int)(sizeof(ab_all) / sizeof(ab_all[0])))
#define AB_MAX_ROUNDS 200

/* One buffer of `size` filled by one writer and drained `reps` times;
 * chunk-bytes read per CPU-second of reading. */
static double read_again(size_t size, int reps)
{
    tb_buffer *b = tb_create(size, TB_RING_BUFFER);
    uint32_t id = 0;
    size_t tidx = 0, payload = 0;
    double busy = 0;
    if (!b) {
        perror("tb_create");
        exit(1);
    }
    for (int rep = 0; rep < reps; rep++) {
        for (size_t w = 0; w < size - CHUNK_BYTES; w += CHUNK_BYTES) {
            const tmpl_t *t = &templates[tidx++ % NTEMPLATES];
            tb_copy_chunk_untrusted(b, 1, 1000, 100, 1, id++, t->nfrags, 0,
                                    true, t->data, t->size);
        }
        tb_packet pkt;
        double t0 = now_s();
        tb_begin_read(b);
        while (tb_read_next_packet(b, &pkt, NULL, NULL))
            payload += pkt.size;
        busy += now_s() - t0;
    }
    double bytes = (double)tb_get_stats(b)->chunks_read * CHUNK_BYTES;
    tb_destroy(b);
    sink = payload;
    return bytes / busy;
}

/* One writer's chunk (n bytes, npk whole packets) written into a fresh
 * 128 MiB ring step_bytes at a time and drained after each step, as a
 * file pass does, `steps` times; with copy_out each packet is copied into
 * a 1 MiB batch, as the file pass copies small ones. Packet bytes read
 * per CPU-second of reading (props and loss flags asked for, as the
 * service does). */
static double drain_in_steps(const uint8_t *chunk, size_t n, uint16_t npk,
                             int steps, size_t step_bytes, bool copy_out)
{
    static uint8_t batch[1 << 20];
    size_t bl = 0;
    tb_buffer *b = tb_create(128 * MIB, TB_RING_BUFFER);
    if (!b) {
        perror("tb_create");
        exit(1);
    }
    uint32_t id = 0, dropped;
    double busy = 0, bytes = 0;
    tb_packet pkt;
    tb_seq_props props;
    for (int step = 0; step < steps; step++) {
        for (size_t w = 0; w < step_bytes; w += n)
            tb_copy_chunk_untrusted(b, 1, 1000, 100, 1, id++, npk, 0, true,
                                    chunk, n);
        double t0 = now_s();
        tb_begin_read(b);
        while (tb_read_next_packet(b, &pkt, &props, &dropped)) {
            if (copy_out) {
                if (bl + pkt.size > sizeof(batch))
                    bl = 0;
                for (size_t i = 0; i < pkt.nslices; i++) {
                    memcpy(batch + bl, pkt.slices[i].data,
                           pkt.slices[i].size);
                    bl += pkt.slices[i].size;
                }
            }
            bytes += (double)pkt.size;
        }
        busy += now_s() - t0;
    }
    sink = batch[bl / 2];
    tb_destroy(b);
    return bytes / busy;
}

/* The service's shape for 1 KiB packets (shmtraced: SMBs of 2 MiB and
 * more have 32 KiB pages): 32752-byte chunk payloads of 31 whole packets
 * of 1024 bytes (2-byte headers), 4 MiB at a time (SVC_FILE_EAGER_BYTES);
 * two laps of the ring. */
static double read_svc1k(void)
{
    static uint8_t chunk[32752];
    size_t n = 0;
    for (int i = 0; i < 31; i++) {
        chunk[n++] = 0x80 | (1024 & 0x7f);
        chunk[n++] = 1024 >> 7;
        memset(chunk + n, 'a' + i, 1024);
        n += 1024;
    }
    return drain_in_steps(chunk, n, 31, 64, 4 * MIB, false);
}

/* The service's shape for 64 B packets (shmtrace-producer -S 64: 92-byte
 * TracePackets, 1-byte fragment headers) in 32 KiB chunks, 1 MiB at a
 * time (SVC_FILE_EAGER_SMALL_BYTES), each packet copied out. */
static double read_svc64(void)
{
    static uint8_t chunk[32752];
    size_t n = 0, npk = 0;
    while (n + 93 <= sizeof(chunk)) {
        chunk[n++] = 92;
        memset(chunk + n, 'a' + (int)(npk % 26), 92);
        n += 92;
        npk++;
    }
    return drain_in_steps(chunk, n, (uint16_t)npk, 256, MIB, true);
}

static double run(const char *w)
{
    double unused;
    if (!strcmp(w, "write1"))
        return bench_write(1, 0.25);
    if (!strcmp(w, "write1000"))
        return bench_write(1000, 0.25);
    if (!strcmp(w, "read"))
        return bench_read(2, &unused);
    if (!strcmp(w, "read_cached"))
        return read_again(MIB, 4000);
    if (!strcmp(w, "read64"))
        return read_again(64 * MIB, 40);
    if (!strcmp(w, "svc1k"))
        return read_svc1k();
    if (!strcmp(w, "svc64"))
        return read_svc64();
    if (!strcmp(w, "memcpy"))
        return bench_memcpy(0.25);
    fprintf(stderr, "ab_libbuf: unknown workload '%s'\n", w);
    exit(2);
}

static int cmp_dbl(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double med(const double *v, int n, double *lo, double *hi)
{
    double s[AB_MAX_ROUNDS];
    memcpy(s, v, sizeof(*v) * (size_t)n);
    qsort(s, (size_t)n, sizeof(*s), cmp_dbl);
    *lo = s[0];
    *hi = s[n - 1];
    return n % 2 ? s[n / 2] : (s[n / 2 - 1] + s[n / 2]) / 2;
}

int main(int argc, char **argv)
{
    static double gbs[8][AB_MAX_ROUNDS], ratio[8][AB_MAX_ROUNDS];
    if (argc != 3 || !strcmp(argv[1], "--help")) {
        fprintf(argc == 2 ? stdout : stderr,
                "usage: ab_libbuf WORKLOAD ROUNDS (built by "
                "bench/ab_libbuf.sh)\nWORKLOAD: write1 write1000 read "
                "read_cached read64 svc1k svc64 memcpy\n");
        return argc == 2 ? 0 : 2;
    }
    int rounds = atoi(argv[2]);
    if (rounds < 1 || rounds > AB_MAX_ROUNDS || AB_N > 8) {
        fprintf(stderr, "ab_libbuf: 1-%d rounds, at most 8 variants\n",
                AB_MAX_ROUNDS);
        return 2;
    }
    make_templates();
    warm_memory(512 * MIB);
    for (int r = 0; r < rounds; r++) {
        for (int k = 0; k < AB_N; k++) {
            int v = (k + r) % AB_N;        /* each variant goes first too */
            ab_cur = ab_all[v];
            gbs[v][r] = run(argv[1]) / 1e9;
        }
        fprintf(stderr, "\rround %d of %d", r + 1, rounds);
    }
    fprintf(stderr, "\n");
    for (int v = 0; v < AB_N; v++) {
        double lo, hi, rlo, rhi, m, rm;
        int wins = 0;
        for (int r = 0; r < rounds; r++) {
            ratio[v][r] = gbs[v][r] / gbs[0][r];
            wins += ratio[v][r] > 1;
        }
        m = med(gbs[v], rounds, &lo, &hi);
        rm = med(ratio[v], rounds, &rlo, &rhi);
        printf("%-12s %-10s %6.2f GB/s median (%.2f-%.2f)", argv[1],
               ab_all[v]->name, m, lo, hi);
        if (v > 0)
            printf("  x%s: %.3f median (%.3f-%.3f), ahead in %d of %d",
                   ab_all[0]->name, rm, rlo, rhi, wins, rounds);
        printf("\n");
    }
    return 0;
}
