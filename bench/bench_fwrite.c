/*
 * bench_fwrite.c - helper of bench_vs_perfetto.sh: the CPU a service must
 * spend just to put a trace's bytes into the page cache.
 *
 * Reads SRC whole into memory first (outside the measurement), then
 * writes it to DST (created, truncated) in write() calls of BATCH bytes
 * (default 4 MiB, about what shmtraced's file writer hands the kernel in
 * one writev) twice: once untimed, truncated away, then timed. Reading
 * SRC takes as much fresh memory as the page cache warm-up before it had
 * freed, so a single pass met the page faults the warm-up is there to
 * avoid (on a VM that reports free pages to its host, 2026-12-03: 107-127
 * ns per KiB in 8 runs of 14, 542-1414 in the other 6; the timed pass
 * after the untimed one: 105-115 in 8 runs of 8). It
 * appends one line to LOG:
 *     wall_s cpu_s bytes
 * wall_s from CLOCK_MONOTONIC around the writes, cpu_s the process's user
 * + system time (getrusage RUSAGE_SELF) spent in them. No fsync: neither
 * service syncs its trace file. This is a floor for the service CPU per
 * packet in bench_vs_perfetto's table: a service that writes the file
 * itself spends at least this much, whatever it does before. So the timed
 * writes reserve the file's space ahead as shmtraced does (its own
 * service/svc_prealloc.c, compiled in: 8 MiB past each write, given back
 * at the end, inside the timing), which takes ext4's per-page delayed
 * allocation out of the kernel's copy; --no-reserve writes without
 * (Perfetto's traced does not reserve).
 *
 * Usage: bench_fwrite [--no-reserve] SRC DST LOG [BATCH_BYTES]
 */
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "svc_prealloc.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static double cpu_s(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
           (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

/* All of buf[0, size) to fd in write()s of at most batch bytes, each
 * after its reservation (pa NULL: none); -1 with errno on error. */
static int write_all(int fd, const uint8_t *buf, size_t size, size_t batch,
                     svc_prealloc *pa)
{
    for (size_t off = 0; off < size;) {
        size_t len = size - off < batch ? size - off : batch;
        if (pa)
            svc_prealloc_ahead(pa, fd, len);
        ssize_t n = write(fd, buf + off, len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return -1;
        off += (size_t)n;
    }
    return 0;
}

static int fail(const char *what, const char *path)
{
    fprintf(stderr, "bench_fwrite: %s %s: %s\n", what, path, strerror(errno));
    return 1;
}

int main(int argc, char **argv)
{
    bool reserve = true;
    if (argc > 1 && strcmp(argv[1], "--no-reserve") == 0) {
        reserve = false;
        argv++;
        argc--;
    }
    if (argc < 4 || argc > 5 || strcmp(argv[1], "--help") == 0) {
        fprintf(stderr, "usage: bench_fwrite [--no-reserve] SRC DST LOG "
                "[BATCH_BYTES]\n"
                "writes SRC's bytes to DST in BATCH_BYTES write()s (default"
                " 4194304), twice\n(the first pass truncated away) and "
                "appends \"wall_s cpu_s bytes\" of the second\npass's "
                "writes alone to LOG; the space is reserved ahead as "
                "shmtraced does,\nunless --no-reserve\n");
        return 2;
    }
    size_t batch = 4u << 20;
    if (argc == 5) {
        char *end;
        unsigned long long v = strtoull(argv[4], &end, 10);
        if (*end || v == 0 || v > (1ull << 30)) {
            fprintf(stderr, "bench_fwrite: BATCH_BYTES must be 1..2^30, "
                    "not %s\n", argv[4]);
            return 2;
        }
        batch = (size_t)v;
    }
    int in = open(argv[1], O_RDONLY | O_CLOEXEC);
    if (in < 0)
        return fail("cannot open", argv[1]);
    struct stat st;
    if (fstat(in, &st) != 0)
        return fail("cannot stat", argv[1]);
    size_t size = (size_t)st.st_size;
    uint8_t *buf = malloc(size ? size : 1);
    if (!buf) {
        fprintf(stderr, "bench_fwrite: no memory for %zu bytes\n", size);
        return 1;
    }
    for (size_t got = 0; got < size;) {
        ssize_t n = read(in, buf + got, size - got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            if (n == 0)
                errno = EIO;
            return fail("cannot read", argv[1]);
        }
        got += (size_t)n;
    }
    close(in);
    int out = open(argv[2], O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (out < 0)
        return fail("cannot create", argv[2]);

    /* An untimed pass first, truncated away: the timed one then gets page
     * cache pages just freed, as the recordings do after their warm-up
     * (reading SRC above took the pages that warm-up had freed). */
    if (write_all(out, buf, size, batch, NULL) < 0 ||
        ftruncate(out, 0) != 0 || lseek(out, 0, SEEK_SET) != 0)
        return fail("cannot write", argv[2]);
    svc_prealloc pa = {0};
    if (reserve)
        svc_prealloc_init(&pa, 0, 0);
    double w0 = now_s(), c0 = cpu_s();
    if (write_all(out, buf, size, batch, &pa) < 0)
        return fail("cannot write", argv[2]);
    svc_prealloc_trim(&pa, out);
    double w1 = now_s(), c1 = cpu_s();

    if (close(out) != 0)
        return fail("cannot close", argv[2]);
    free(buf);
    FILE *log = fopen(argv[3], "a");
    if (!log)
        return fail("cannot open", argv[3]);
    fprintf(log, "%.6f %.6f %zu\n", w1 - w0, c1 - c0, size);
    if (fclose(log) != 0)
        return fail("cannot write", argv[3]);
    return 0;
}
