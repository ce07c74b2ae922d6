/*
 * svc_fwrite.c - the file writer thread (design in svc_fwrite.h).
 *
 * One thread per service, started with the first batch, with all signals
 * blocked (they stay the main loop's). The queue is FIFO over all
 * sessions, so each file gets its batches in the order they were built.
 * A batch stays at the head of the queue while it is written: the queue
 * is exactly the set of batches in flight, which the fence walks.
 *
 * `inflight` lets the fence skip the mutex when nothing is in flight:
 * only the main thread increments it (submit) and only the main thread
 * reads it there, so a zero it reads is never stale in the unsafe
 * direction; the release/acquire pair orders the writer's writev before
 * the main thread's next stores into the buffers.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <unistd.h>
#include <sys/eventfd.h>

#include "svc_fwrite.h"

/* Slices this close after a span's end extend it (record headers and
 * short slices copied into the batch lie between them). */
#define SVC_FW_SPAN_GAP (64u * 1024)

struct svc_fwriter {
    pthread_mutex_t mu;
    pthread_cond_t work;         /* queue non-empty, or stop */
    pthread_cond_t done;         /* a batch was written */
    svc_fw_batch *head, *tail;   /* in flight, oldest first */
    atomic_uint inflight;
    bool started, stop;
    pthread_t thread;
    int efd;                     /* written after each batch; -1: none */
};

/* writev() until all of v[0..n) is out (short writes, EINTR); -errno. */
static int writev_all(int fd, struct iovec *v, int n)
{
    while (n > 0) {
        ssize_t done = writev(fd, v, n);
        if (done < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        /* a short write: skip what went out, resume mid-piece */
        while (n > 0 && (size_t)done >= v->iov_len) {
            done -= (ssize_t)v->iov_len;
            v++;
            n--;
        }
        if (n > 0) {
            v->iov_base = (uint8_t *)v->iov_base + done;
            v->iov_len -= (size_t)done;
        }
    }
    return 0;
}

/* A direct batch (svc_direct.c): buf[0, direct_len) at direct_off. A
 * file system that took O_DIRECT and refuses the write (EINVAL) gets it
 * through the page cache, and the flag is cleared for what follows. */
static int write_direct(svc_fw_batch *b)
{
    size_t done = 0;
    bool retried = false;
    while (done < b->direct_len) {
        ssize_t k = pwrite(b->fd, b->buf + done, b->direct_len - done,
                           (off_t)(b->direct_off + (int64_t)done));
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0 && errno == EINVAL && !retried) {
            int fl = fcntl(b->fd, F_GETFL);
            if (fl < 0 || !(fl & O_DIRECT) ||
                fcntl(b->fd, F_SETFL, fl & ~O_DIRECT) != 0)
                return -EINVAL;
            retried = true;
            continue;
        }
        if (k <= 0)
            return k < 0 ? -errno : -EIO;
        done += (size_t)k;
    }
    return 0;
}

int svc_fw_write_batch(svc_fw_batch *b)
{
    if (b->direct) {
        if (b->pa)
            svc_prealloc_ahead(b->pa, b->fd, b->direct_len);
        return write_direct(b);
    }
    if (b->pa)
        svc_prealloc_ahead(b->pa, b->fd, b->len + b->slice_bytes);
    return writev_all(b->fd, b->iov, b->niov);
}

static void *writer_main(void *arg)
{
    svc_fwriter *fw = arg;
#ifdef __linux__
    pthread_setname_np(pthread_self(), "shmtraced-fw");
#endif
    pthread_mutex_lock(&fw->mu);
    for (;;) {
        while (!fw->head && !fw->stop)
            pthread_cond_wait(&fw->work, &fw->mu);
        if (!fw->head)
            break;
        svc_fw_batch *b = fw->head;
        pthread_mutex_unlock(&fw->mu);
        int err = svc_fw_write_batch(b);
        pthread_mutex_lock(&fw->mu);
        b->err = err;
        b->busy = false;
        fw->head = b->next;
        if (!fw->head)
            fw->tail = NULL;
        b->next = NULL;
        atomic_fetch_sub_explicit(&fw->inflight, 1, memory_order_release);
        pthread_cond_broadcast(&fw->done);
        if (fw->efd >= 0) {
            uint64_t one = 1;
            if (write(fw->efd, &one, sizeof(one)) < 0) {
                /* EAGAIN: the counter is full, the loop is awake anyway */
            }
        }
    }
    pthread_mutex_unlock(&fw->mu);
    return NULL;
}

svc_fwriter *svc_fw_create(void)
{
    svc_fwriter *fw = calloc(1, sizeof(*fw));
    if (!fw)
        return NULL;
    pthread_mutex_init(&fw->mu, NULL);
    pthread_cond_init(&fw->work, NULL);
    pthread_cond_init(&fw->done, NULL);
    atomic_init(&fw->inflight, 0);
    fw->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    return fw;
}

int svc_fw_event_fd(const svc_fwriter *fw)
{
    return fw ? fw->efd : -1;
}

void svc_fw_destroy(svc_fwriter *fw)
{
    if (!fw)
        return;
    if (fw->started) {
        pthread_mutex_lock(&fw->mu);
        fw->stop = true;
        pthread_cond_signal(&fw->work);
        pthread_mutex_unlock(&fw->mu);
        pthread_join(fw->thread, NULL);   /* it empties the queue first */
    }
    if (fw->efd >= 0)
        close(fw->efd);
    pthread_cond_destroy(&fw->done);
    pthread_cond_destroy(&fw->work);
    pthread_mutex_destroy(&fw->mu);
    free(fw);
}

static int start(svc_fwriter *fw)
{
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int rc = pthread_create(&fw->thread, NULL, writer_main, fw);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0)
        return -rc;
    fw->started = true;
    return 0;
}

int svc_fw_submit(svc_fwriter *fw, svc_fw_batch *b)
{
    if (!fw->started && start(fw) < 0)
        return -EAGAIN;
    pthread_mutex_lock(&fw->mu);
    b->busy = true;
    b->err = 0;
    b->next = NULL;
    if (fw->tail)
        fw->tail->next = b;
    else
        fw->head = b;
    fw->tail = b;
    atomic_fetch_add_explicit(&fw->inflight, 1, memory_order_relaxed);
    pthread_cond_signal(&fw->work);
    pthread_mutex_unlock(&fw->mu);
    return 0;
}

int svc_fw_wait(svc_fwriter *fw, svc_fw_batch *b)
{
    pthread_mutex_lock(&fw->mu);
    while (b->busy)
        pthread_cond_wait(&fw->done, &fw->mu);
    int err = b->err;
    b->err = 0;
    pthread_mutex_unlock(&fw->mu);
    return err;
}

uint32_t svc_fw_in_flight(svc_fwriter *fw, const svc_fw_batch *b, int n,
                          size_t *bytes)
{
    uint32_t mask = 0;
    size_t sum = 0;
    pthread_mutex_lock(&fw->mu);
    for (int i = 0; i < n && i < 32; i++) {
        if (!b[i].busy)
            continue;
        mask |= (uint32_t)1 << i;
        sum += b[i].len + b[i].slice_bytes;
    }
    pthread_mutex_unlock(&fw->mu);
    *bytes = sum;
    return mask;
}

void svc_fw_drain(svc_fwriter *fw)
{
    if (!fw || atomic_load_explicit(&fw->inflight, memory_order_acquire) == 0)
        return;
    pthread_mutex_lock(&fw->mu);
    while (fw->head)
        pthread_cond_wait(&fw->done, &fw->mu);
    pthread_mutex_unlock(&fw->mu);
}

static bool covers(const svc_fw_batch *b, const uint8_t *p, size_t n)
{
    for (int i = 0; i < b->nspans; i++)
        if ((uintptr_t)p < (uintptr_t)b->span[i].hi &&
            (uintptr_t)b->span[i].lo < (uintptr_t)p + n)
            return true;
    return false;
}

/* Does a batch in flight hold a slice in [p, p + n)? (mu held) */
static bool in_flight_locked(const svc_fwriter *fw, const uint8_t *p,
                             size_t n)
{
    for (const svc_fw_batch *b = fw->head; b; b = b->next)
        if (covers(b, p, n))
            return true;
    return false;
}

void svc_fw_fence(void *fwriter, const uint8_t *p, size_t n)
{
    svc_fwriter *fw = fwriter;
    if (atomic_load_explicit(&fw->inflight, memory_order_acquire) == 0)
        return;
    pthread_mutex_lock(&fw->mu);
    while (in_flight_locked(fw, p, n))
        pthread_cond_wait(&fw->done, &fw->mu);
    pthread_mutex_unlock(&fw->mu);
}

bool svc_fw_busy(void *fwriter, const uint8_t *p, size_t n)
{
    svc_fwriter *fw = fwriter;
    bool hit;
    if (atomic_load_explicit(&fw->inflight, memory_order_acquire) == 0)
        return false;
    pthread_mutex_lock(&fw->mu);
    hit = in_flight_locked(fw, p, n);
    pthread_mutex_unlock(&fw->mu);
    return hit;
}

void svc_fw_note_span(svc_fw_batch *b, const uint8_t *p, size_t n)
{
    const uint8_t *e = p + n;
    if (b->nspans > 0) {
        svc_fw_span *l = &b->span[b->nspans - 1];
        if ((uintptr_t)p >= (uintptr_t)l->lo &&
            (uintptr_t)p <= (uintptr_t)l->hi + SVC_FW_SPAN_GAP) {
            if ((uintptr_t)e > (uintptr_t)l->hi)
                l->hi = e;
            return;
        }
        if (b->nspans == SVC_FW_SPANS) {
            /* no room: the last span grows to cover it (more waits,
             * never fewer) */
            if ((uintptr_t)p < (uintptr_t)l->lo)
                l->lo = p;
            if ((uintptr_t)e > (uintptr_t)l->hi)
                l->hi = e;
            return;
        }
    }
    b->span[b->nspans].lo = p;
    b->span[b->nspans].hi = e;
    b->nspans++;
}
