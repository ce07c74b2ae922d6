/*
 * svc_prealloc.c - disk space reserved ahead of a write_into_file session's
 * writes (design and measurements in svc_prealloc.h).
 *
 * The state is touched by one thread at a time: the file writer thread
 * while a batch of the session is in flight (batches of one session are
 * written in order by that one thread), the main thread otherwise (the
 * synchronous path, and the trim after every batch was waited for).
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "svc_prealloc.h"

void svc_prealloc_init(svc_prealloc *p, int64_t base, uint64_t limit_bytes)
{
    p->on = true;
    p->reserved = false;
    p->next = base;
    p->end = base;
    p->limit = limit_bytes ? base + (int64_t)limit_bytes : 0;
}

void svc_prealloc_ahead(svc_prealloc *p, int fd, size_t bytes)
{
    if (!p->on)
        return;
    p->next += (int64_t)bytes;
    /* reserve again once less than half a step is left */
    if (p->next + (int64_t)(SVC_PREALLOC_STEP / 2) <= p->end)
        return;
    int64_t want = p->next + SVC_PREALLOC_STEP;
    if (p->limit && want > p->limit)
        want = p->limit;
    if (want <= p->end)
        return;
#ifdef FALLOC_FL_KEEP_SIZE
    if (fallocate(fd, FALLOC_FL_KEEP_SIZE, (off_t)p->end,
                  (off_t)(want - p->end)) == 0) {
        p->end = want;
        p->reserved = true;
        return;
    }
    if (errno == EINTR)
        return;                   /* next batch */
#else
    (void)fd;
#endif
    p->on = false;
}

void svc_prealloc_trim(svc_prealloc *p, int fd)
{
    p->on = false;
    if (!p->reserved)
        return;
    p->reserved = false;
    /* Blocks past the end are freed by truncating to the same size. */
    struct stat st;
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size < p->end &&
        ftruncate(fd, st.st_size) != 0) {
        /* nothing more to do: the blocks stay reserved */
    }
}
