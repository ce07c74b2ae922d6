/*
 * svc_fwrite.h - the file writer thread of write_into_file sessions.
 *
 * A file pass (svc_read.c) gathers a batch: staged bytes (packet headers,
 * trailers, small packets copied whole) and slices of large packets that
 * point into the trace buffers, as one iovec array. svc_fw_submit hands
 * the batch to a thread that writev()s it, so that the kernel's copy into
 * the page cache (half of the service's CPU per byte) runs beside the
 * main loop's copies out of the producers' shared memory instead of after
 * them. Each session owns a few batches (svc_read.c) and fills one while
 * the others are written.
 *
 * The slices stay valid because the trace buffers' write fence
 * (tb_set_write_fence) calls svc_fw_fence before libbuf stores into bytes
 * of packets already read: it waits until no batch in flight covers them.
 * Each batch records the memory its slices cover as a few spans
 * (svc_fw_note_span; neighbouring slices merge, so a span may cover more
 * than the slices, never less). Nothing else writes into the buffers'
 * memory, and tb_destroy waits for the writer first (svc__buffer_remove),
 * so a producer cannot change a packet between its validation on the main
 * thread and its writev.
 *
 * Plain writev, not pwritev2(RWF_DONTCACHE) (Linux 6.14+: the written
 * pages are dropped once they reach the disk). Measured 2026-12-04
 * through shmtraced, 1 KiB x4, 1 GiB recordings with the perfetto
 * consumer, alternating: the recycled pages are still cached, and under
 * perf the kernel's copy went from 36% to 17% of the service's samples;
 * but the writing thread then starts the writeback itself (the block
 * device's notification, a VM exit here, 5% of the samples, and more slab
 * and ext4 work), which the kernel's flusher threads otherwise do outside
 * the service. With a warm page cache (the usual case, and
 * bench-vs-perfetto's) service CPU went up, 505-592 against 381-429 ns
 * per packet; only into memory the host had taken back (the first
 * recording after 8 s idle) did it go down, 706-734 against 849-963.
 */
#ifndef SHMTRACE_SVC_FWRITE_H
#define SHMTRACE_SVC_FWRITE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#include "svc_prealloc.h"

#define SVC_FW_SPANS 8

typedef struct {
    const uint8_t *lo, *hi;
} svc_fw_span;

typedef struct svc_fw_batch {
    uint8_t *buf;                /* staged bytes, cap bytes */
    bool buf_heap;               /* buf from malloc (else the session's
                                    batch arena, svc_read.c) */
    size_t len, cap;
    struct iovec *iov;           /* SVC_FILE_IOV entries (svc_read.c) */
    int niov;
    int fd;                      /* where the batch goes */
    svc_prealloc *pa;            /* its file's reservation, or NULL */
    svc_fw_span span[SVC_FW_SPANS];
    int nspans;
    size_t slice_bytes;          /* bytes of the slices (not in buf) */
    size_t pf;                   /* buf asked for up to here (svc_read.c) */
    /* O_DIRECT (svc_direct.c): buf[0, direct_len) is written with one
     * pwrite() at direct_off, instead of iov with writev(). */
    bool direct;
    size_t direct_len;
    int64_t direct_off;
    size_t direct_head;          /* the last batch's tail, at buf[0] */
    /* owned by the writer while busy (guarded by its mutex) */
    bool busy;                   /* queued or being written */
    int err;                     /* -errno of the writev, kept until reaped */
    struct svc_fw_batch *next;   /* queue link */
} svc_fw_batch;

typedef struct svc_fwriter svc_fwriter;

/* A writer; its thread starts with the first batch. NULL: no memory. */
svc_fwriter *svc_fw_create(void);
/* An eventfd that becomes readable after each batch is written (the
 * main loop's cue to go on with a pass that waited); -1 if none. */
int svc_fw_event_fd(const svc_fwriter *);
/* Waits for every batch, stops the thread. */
void svc_fw_destroy(svc_fwriter *);
/* Queues b (b->fd, b->iov, b->niov) to be written. < 0: the thread could
 * not start; the caller writes b itself (svc_fw_write_batch). */
int svc_fw_submit(svc_fwriter *, svc_fw_batch *b);
/* Waits until b is written (at once if it is not in flight); returns and
 * clears its error. */
int svc_fw_wait(svc_fwriter *, svc_fw_batch *b);
/* Which of b[0..n) (n <= 32) are in flight, as a bit mask (bit i: b[i]),
 * and the bytes they hold (staged + slices) in *bytes: one look under the
 * writer's lock. */
uint32_t svc_fw_in_flight(svc_fwriter *, const svc_fw_batch *b, int n,
                          size_t *bytes);
/* Waits until every batch in flight is written. */
void svc_fw_drain(svc_fwriter *);
/* tb_write_fence_fn: waits while a batch in flight covers [p, p + n). */
void svc_fw_fence(void *fwriter, const uint8_t *p, size_t n);
/* tb_write_probe_fn: would svc_fw_fence wait for [p, p + n) now? Never
 * waits. */
bool svc_fw_busy(void *fwriter, const uint8_t *p, size_t n);
/* A slice [p, p + n) of b that points outside b->buf. */
void svc_fw_note_span(svc_fw_batch *b, const uint8_t *p, size_t n);
/* Writes b (b->fd, b->iov, b->niov) whole, short writes and EINTR
 * resumed, after reserving its file's space ahead (b->pa, if set:
 * svc_prealloc.h); -errno. The thread's way and the caller's. */
int svc_fw_write_batch(svc_fw_batch *b);

#endif
