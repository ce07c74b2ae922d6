/*
 * svc_direct.c - write_into_file with O_DIRECT (shmtraced --direct-io):
 * the trace file's bytes go from the session's file batches to the disk
 * without the kernel's copy into the page cache.
 *
 * Why: that copy is the largest single cost of a session file. In a
 * profile of 1 KiB x4 recordings it was 22% of the service's CPU
 * (copy_folio_from_iter_atomic), plus ext4's buffer heads and page
 * allocation, and into memory a VM's host had taken back (free page
 * reporting) a buffered write cost 1.8 us per KiB instead of 0.12. Direct
 * writes cost the block layer and the device's notification instead:
 * per KiB of CPU (4 MiB pwrite()s to ext4 on this project's VMs, a micro)
 * 23-47 ns against 115 buffered, but only from about 1 MiB per write up
 * (256 KiB writes: 122 ns), so a direct session fills batches of
 * SVC_FILE_DIRECT_BATCH (4 MiB) instead of SVC_FILE_BATCH (1 MiB). The
 * price is throughput: the disk's (1.2-1.9 GB/s one write at a time
 * here) instead of the page cache's, and the page cache does not hold
 * the file afterwards. Hence off by default.
 *
 * How: O_DIRECT wants the memory, the file offset and the length of each
 * write aligned (SVC_FILE_DIRECT_ALIGN, 4 KiB, a multiple of what
 * statx's STATX_DIOALIGN reports on the file systems that have it). The
 * batches are page aligned (the session's arena, svc_read.c), every
 * packet is copied into them (no slices of the trace buffers, which are
 * not aligned), and each batch is written with pwrite() at the offset
 * where its first byte goes:
 *   cut    when a batch is handed out (main thread), its length is cut
 *          down to a multiple of the alignment; the bytes past the cut
 *          (the tail, < 4 KiB) are kept in the session;
 *   start  the next batch begins with that tail, so its first byte is
 *          aligned again (the tail goes to the disk with it);
 *   pause  before the service reads the file back (a clone into a file,
 *          svc_attach.c) the tail is written through the page cache
 *          (O_DIRECT cleared; reads through an O_DIRECT descriptor would
 *          need aligned buffers), then resume sets O_DIRECT again: the
 *          next direct write of that block makes the kernel write the
 *          cached page back and drop it first, so both stay coherent;
 *   finish at the session's last file write the tail is written through
 *          the page cache and O_DIRECT is cleared for good, so the file
 *          ends exactly where the trace ends, and the descriptor's
 *          position is put at its end (pwrite() does not move it). After
 *          a failed write the tail is not written (it would follow a
 *          hole); the position then says how much the file holds. A
 *          session freed before its end (session_destroy) finishes too.
 * While the session runs, the file holds all but its last < 4 KiB.
 * The batches are 2 x 4 MiB in the session's 8 MiB arena (svc_read.c):
 * a first version with 8 x 4 MiB in turn missed the caches (memmove 37%
 * of the service's samples against 23% buffered).
 * Measured (bench_vs_perfetto.sh in A/B mode, 2026-12-07, README): 1.1-
 * 1.2x less service CPU per 1 KiB packet at x4, 1.2-1.35x per 64 KiB,
 * none to speak of at x1 or for 64 B; 0.88-1.06x the MB/s.
 *
 * When it is not used (the session writes as every other one does):
 * the option is off; the session is a clone; the descriptor is not a
 * regular file, is open with O_APPEND (pwrite() would append, and the
 * tail's block could not be written again), or its first byte would not
 * be aligned; the file system refuses O_DIRECT (fcntl fails) or reports
 * an alignment above 4 KiB.
 * The daemon's log says which, once per session.
 * A direct write that fails with EINVAL (a file system that accepted the
 * flag and not the write) is retried through the page cache and the
 * session goes on without O_DIRECT (svc_fwrite.c).
 * The flag is on the open file description, which the consumer shares:
 * a consumer that wrote to or read its descriptor during the session
 * would need aligned buffers; perfetto and shmtrace record do neither.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "svc_int.h"

/* The direct I/O alignment the file system asks for, in bytes (memory,
 * offset); 0 if it does not say (no statx or no STATX_DIOALIGN). */
static void dio_align(int fd, uint32_t *mem, uint32_t *off)
{
    *mem = *off = 0;
#if defined(STATX_DIOALIGN)
    struct statx sx;
    if (statx(fd, "", AT_EMPTY_PATH, STATX_DIOALIGN, &sx) == 0 &&
        (sx.stx_mask & STATX_DIOALIGN)) {
        *mem = sx.stx_dio_mem_align;
        *off = sx.stx_dio_offset_align;
    }
#else
    (void)fd;
#endif
}

/* Says once per session why --direct-io did not take. */
static void refused(const svc_session *s, const char *why, int err)
{
    fprintf(stderr, "shmtraced: session %llu: --direct-io: %s%s%s%s; its "
            "file is written through the page cache\n",
            (unsigned long long)s->id, why, err ? " (" : "",
            err ? strerror(err) : "", err ? ")" : "");
}

void svc__direct_open(svc_session *s)
{
    struct stat st;
    s->direct = false;
    if (s->out_fd < 0 || s->is_clone)
        return;
    if (fstat(s->out_fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        refused(s, "the output is not a regular file", 0);
        return;
    }
    if (s->out_base < 0 || s->out_base % SVC_FILE_DIRECT_ALIGN != 0) {
        refused(s, "the trace would not start on a 4 KiB boundary of the "
                "file (it holds other bytes before it)", 0);
        return;
    }
    uint32_t mem, off;
    dio_align(s->out_fd, &mem, &off);
    if (mem > SVC_FILE_DIRECT_ALIGN || off > SVC_FILE_DIRECT_ALIGN) {
        refused(s, "the file system wants direct writes aligned to more "
                "than 4 KiB", 0);
        return;
    }
    int fl = fcntl(s->out_fd, F_GETFL);
    if (fl >= 0 && (fl & O_APPEND)) {
        /* Linux's pwrite() appends there whatever the offset: the block
         * that held the tail could not be written again in place */
        refused(s, "the file is open for appending (O_APPEND)", 0);
        return;
    }
    if (fl < 0 || fcntl(s->out_fd, F_SETFL, fl | O_DIRECT) != 0) {
        refused(s, "the file system takes no O_DIRECT", errno);
        return;
    }
    s->direct = true;
    s->direct_off = s->out_base;
    s->direct_tail_len = 0;
}

void svc__direct_cut(svc_session *s, svc_fw_batch *b)
{
    size_t aligned = b->len & ~(size_t)(SVC_FILE_DIRECT_ALIGN - 1);
    s->direct_tail_len = (uint32_t)(b->len - aligned);
    memcpy(s->direct_tail, b->buf + aligned, s->direct_tail_len);
    b->direct = true;
    b->direct_len = aligned;
    b->direct_off = s->direct_off;
    s->direct_off += (int64_t)aligned;
}

size_t svc__direct_start(const svc_session *s, svc_fw_batch *b)
{
    if (!s->direct || !s->direct_tail_len)
        return 0;
    memcpy(b->buf, s->direct_tail, s->direct_tail_len);
    b->len = s->direct_tail_len;
    return s->direct_tail_len;
}

/* Writes the tail where it goes, through the page cache (O_DIRECT off). */
static int write_tail(svc_session *s)
{
    int fl = fcntl(s->out_fd, F_GETFL);
    if (fl >= 0 && (fl & O_DIRECT))
        (void)fcntl(s->out_fd, F_SETFL, fl & ~O_DIRECT);
    size_t done = 0;
    while (done < s->direct_tail_len) {
        ssize_t k = pwrite(s->out_fd, s->direct_tail + done,
                           s->direct_tail_len - done,
                           (off_t)(s->direct_off + (int64_t)done));
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return k < 0 ? -errno : -EIO;
        done += (size_t)k;
    }
    return 0;
}

int svc__direct_pause(svc_session *s)
{
    return s->direct ? write_tail(s) : 0;
}

void svc__direct_resume(svc_session *s)
{
    int fl;
    if (s->direct && (fl = fcntl(s->out_fd, F_GETFL)) >= 0)
        (void)fcntl(s->out_fd, F_SETFL, fl | O_DIRECT);
}

int svc__direct_finish(svc_session *s)
{
    if (!s->direct)
        return 0;
    int rc = 0, fl;
    if (!s->file_failed) {
        rc = write_tail(s);          /* clears O_DIRECT */
        if (rc == 0)
            s->direct_off += s->direct_tail_len;
    } else if ((fl = fcntl(s->out_fd, F_GETFL)) >= 0) {
        /* after a failed write the tail would follow a hole: not written
         * (the error says how much the file holds) */
        (void)fcntl(s->out_fd, F_SETFL, fl & ~O_DIRECT);
    }
    s->direct = false;
    s->direct_tail_len = 0;
    (void)lseek(s->out_fd, (off_t)s->direct_off, SEEK_SET);
    return rc;
}
