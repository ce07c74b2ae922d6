/*
 * bench_waitsize.c - helper of bench_vs_perfetto.sh: waits until FILE holds
 * at least BYTES bytes, or process PID is gone, whichever comes first.
 * With LOG and WRITERS, the size is not enough: LOG (the producers' stderr)
 * must also hold WRITERS lines "shmtrace-producer: writer N done: ..."
 * (printed once a writer's --count packets are written and flushed), so
 * that the run stops only after every packet was handed to the service.
 * BYTES is an estimate of the finished file (payload plus ~29 bytes of
 * framing per packet); a file of small packets reaches it while the
 * producers still have about 1% to write, and stopping the session then
 * left those packets out of the trace (459-15390 in some 64 B cells of
 * bench-vs-perfetto runs 13-18).
 *
 * A shell loop of `stat` + `sleep` forks twice per poll and costs CPU on
 * the machine being measured; this polls stat() every 2 ms for a few
 * microseconds of CPU each. Exit: 0 the size was reached, 1 PID ended
 * first, 2 usage, 3 the file stopped growing for STALL_S seconds short of
 * BYTES (packets were lost: the run is stopped and its losses counted
 * rather than waited for forever). "Growing" means by at least
 * STALL_MIN_GROWTH bytes: a service's periodic stats packets keep a stuck
 * file creeping by a few hundred bytes a period, which must not count as
 * progress. On a stall, if IDLEFILE is given, the seconds waited since the
 * file last grew are written to it, so that the caller can take them off
 * the run's wall time (the wait is ours, not the service's).
 *
 * `shmtrace record` writes FILE.partial.XXXXXX and renames it to FILE at
 * the end: until FILE exists, the largest FILE.partial.* counts.
 *
 * Usage: bench_waitsize FILE BYTES PID [IDLEFILE [LOG WRITERS]]
 */
#include <dirent.h>
#include <errno.h>
#include <libgen.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <time.h>

#define STALL_S 3u
#define STALL_MIN_GROWTH (64u * 1024u)

/* Size of FILE, else of the largest FILE.partial.* next to it; 0 if none. */
static unsigned long long file_size(const char *file)
{
    struct stat st;
    if (stat(file, &st) == 0)
        return (unsigned long long)st.st_size;
    char d[4096], b[4096];
    snprintf(d, sizeof(d), "%s", file);
    snprintf(b, sizeof(b), "%s", file);
    const char *dir = dirname(d), *base = basename(b);
    char prefix[4200];
    snprintf(prefix, sizeof(prefix), "%s.partial.", base);
    unsigned long long best = 0;
    DIR *dp = opendir(dir);
    if (!dp)
        return 0;
    struct dirent *e;
    while ((e = readdir(dp)) != NULL) {
        if (strncmp(e->d_name, prefix, strlen(prefix)) != 0)
            continue;
        char path[8400];
        snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
        if (stat(path, &st) == 0 && (unsigned long long)st.st_size > best)
            best = (unsigned long long)st.st_size;
    }
    closedir(dp);
    return best;
}

/* Lines of the producers' "writer N done:" message in the log from *off
 * on, added to *done; *off moves past the last whole line read. *f is the
 * log, opened on the first call that finds it and kept open (one seek and
 * read per poll, not an open and close). */
static void count_done(const char *log, FILE **f, long *off,
                       unsigned long *done)
{
    if (!*f && !(*f = fopen(log, "r")))
        return;
    if (fseek(*f, *off, SEEK_SET) != 0)  /* also drops EOF and the buffer */
        return;
    char line[1024];
    while (fgets(line, sizeof(line), *f)) {
        size_t n = strlen(line);
        if (n == 0 || (line[n - 1] != '\n' && feof(*f)))
            break;                          /* a line still being written */
        *off += (long)n;            /* a whole line, or a piece of a long
                                       one (not the message looked for) */
        if (strstr(line, "shmtrace-producer: writer ") &&
            strstr(line, " done: "))
            (*done)++;
    }
}

/* kill(pid, 0) succeeds on a zombie, and the caller reaps its child only
 * after we return: look at the state in /proc instead. */
static int alive(long pid)
{
    if (kill((pid_t)pid, 0) < 0 && errno == ESRCH)
        return 0;
    char path[64], buf[512];
    snprintf(path, sizeof(path), "/proc/%ld/stat", pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    char *paren = strrchr(buf, ')');
    return !(paren && paren[1] == ' ' && (paren[2] == 'Z' || paren[2] == 'X'));
}

int main(int argc, char **argv)
{
    if (argc != 4 && argc != 5 && argc != 7) {
        fprintf(stderr, "usage: bench_waitsize FILE BYTES PID [IDLEFILE "
                "[LOG WRITERS]]\n");
        return 2;
    }
    char *end;
    unsigned long long want = strtoull(argv[2], &end, 10);
    long pid = strtol(argv[3], &end, 10);
    if (*end != '\0' || pid <= 0) {
        fprintf(stderr, "bench_waitsize: bad PID '%s'\n", argv[3]);
        return 2;
    }
    const char *log = argc == 7 ? argv[5] : NULL;
    FILE *log_f = NULL;
    unsigned long writers = 0, done = 0, done_seen = 0;
    long log_off = 0;
    if (log) {
        writers = strtoul(argv[6], &end, 10);
        if (*end != '\0' || writers == 0) {
            fprintf(stderr, "bench_waitsize: bad WRITERS '%s'\n", argv[6]);
            return 2;
        }
    }
    const struct timespec nap = {0, 2000000};
    unsigned long long last = 0;            /* size when it last grew */
    struct timespec grew;                   /* and when (or a writer
                                               finished) */
    clock_gettime(CLOCK_MONOTONIC, &grew);
    for (;;) {
        unsigned long long size = file_size(argv[1]);
        if (log && done < writers)
            count_done(log, &log_f, &log_off, &done);
        if (size >= want && done >= writers)
            return 0;
        if (!alive(pid))
            return 1;
        struct timespec now;
        clock_gettime(CLOCK_MONOTONIC, &now);
        double idle = (double)(now.tv_sec - grew.tv_sec) +
                      (double)(now.tv_nsec - grew.tv_nsec) / 1e9;
        if (size >= last + STALL_MIN_GROWTH || (last == 0 && size > 0) ||
            done > done_seen) {
            last = size > last ? size : last;
            done_seen = done;
            grew = now;
        } else if (last > 0 && idle >= (double)STALL_S) {
            const char *wall = argc >= 5
                               ? "that wait is taken off its wall time"
                               : "its wall time includes that wait";
            if (size >= want)
                fprintf(stderr, "bench_waitsize: %lu of %lu writers "
                        "reported done, and %s stopped growing for %.1f s: "
                        "stopping the run (%s)\n", done, writers, argv[1],
                        idle, wall);
            else
                fprintf(stderr, "bench_waitsize: %s stopped growing at %llu "
                        "of %llu bytes for %.1f s: stopping the run (%s)\n",
                        argv[1], size, want, idle, wall);
            if (argc >= 5) {
                FILE *f = fopen(argv[4], "w");
                if (f) {
                    fprintf(f, "%.6f\n", idle);
                    fclose(f);
                }
            }
            return 3;
        }
        nanosleep(&nap, NULL);
    }
}
