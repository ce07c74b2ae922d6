/*
 * fuzz_scan.c - libFuzzer target: the trace file scanner of `shmtrace
 * record` (tools/cons_scan.c), which counts the packets of a file the
 * service wrote (write_into_file) and so reads whatever is in it.
 *
 * Input: the file's bytes, written to a memfd.
 *
 * Invariants (FZ_CHECK): the walk by headers (cons__scan_fd_sparse, with
 * windows of 20 bytes, 64 bytes and the product's 4 KiB, so that packets
 * are both inside one window and walked field by field) gives exactly the
 * answers of the read() path (cons_out_scan_fd_read): the same return
 * code, packets, bytes, flagged and malformed packets, position reached,
 * and the same last TraceStats (by its packed bytes); cons_out_scan_fd,
 * whichever way it goes, gives them too; the return code is 0 or
 * -EBADMSG. ASan/UBSan catch any read outside what was asked for.
 */
#include "config.h"

#include <errno.h>
#include <sys/mman.h>
#include <unistd.h>

#include "consumer_client.h"
#include "consumer_int.h"

#include "fuzz_util.h"

typedef struct answer {
    int rc;
    cons_out o;
    uint8_t *stats;
    size_t nstats;
} answer;

static void take(answer *a)
{
    if (a->o.last_stats) {
        ProtobufCMessage *m = &a->o.last_stats->base;
        a->nstats = protobuf_c_message_get_packed_size(m);
        a->stats = malloc(a->nstats ? a->nstats : 1);
        FZ_CHECK(a->stats != NULL, "oom");
        protobuf_c_message_pack(m, a->stats);
    }
}

static void same(const answer *a, const answer *b, const char *what)
{
    FZ_CHECK(a->rc == b->rc, "%s: rc %d, read() %d", what, a->rc, b->rc);
    FZ_CHECK(a->o.packets == b->o.packets && a->o.bytes == b->o.bytes &&
                 a->o.flagged_packets == b->o.flagged_packets &&
                 a->o.malformed == b->o.malformed &&
                 a->o.scanned == b->o.scanned,
             "%s: packets %llu/%llu bytes %llu/%llu flagged %llu/%llu "
             "malformed %llu/%llu scanned %llu/%llu", what,
             (unsigned long long)a->o.packets,
             (unsigned long long)b->o.packets,
             (unsigned long long)a->o.bytes, (unsigned long long)b->o.bytes,
             (unsigned long long)a->o.flagged_packets,
             (unsigned long long)b->o.flagged_packets,
             (unsigned long long)a->o.malformed,
             (unsigned long long)b->o.malformed,
             (unsigned long long)a->o.scanned,
             (unsigned long long)b->o.scanned);
    FZ_CHECK(a->nstats == b->nstats &&
                 (a->nstats == 0 ||
                  memcmp(a->stats, b->stats, a->nstats) == 0),
             "%s: last TraceStats differ", what);
}

static void done(answer *a)
{
    free(a->stats);
    cons_out_fini(&a->o);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    int fd = memfd_create("fuzz_scan", MFD_CLOEXEC);
    FZ_CHECK(fd >= 0, "memfd_create");
    size_t off = 0;
    while (off < size) {
        ssize_t n = write(fd, data + off, size - off);
        FZ_CHECK(n > 0, "write");
        off += (size_t)n;
    }
    answer ref;
    memset(&ref, 0, sizeof ref);
    ref.rc = cons_out_scan_fd_read(&ref.o, fd);
    FZ_CHECK(ref.rc == 0 || ref.rc == -EBADMSG, "read() path rc %d",
             ref.rc);
    take(&ref);
    static const size_t windows[] = { 20, 64, 0 };
    for (size_t i = 0; i < sizeof windows / sizeof windows[0]; i++) {
        answer a;
        memset(&a, 0, sizeof a);
        a.rc = cons__scan_fd_sparse(&a.o, fd, windows[i]);
        take(&a);
        same(&a, &ref, windows[i] == 20 ? "window 20"
                       : windows[i] == 64 ? "window 64" : "window 4096");
        done(&a);
    }
    answer d;
    memset(&d, 0, sizeof d);
    d.rc = cons_out_scan_fd(&d.o, fd);
    take(&d);
    same(&d, &ref, "cons_out_scan_fd");
    done(&d);
    done(&ref);
    close(fd);
    return 0;
}
