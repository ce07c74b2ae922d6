/*
 * ipc_loop.c - single-threaded poll() event loop (ipc_loop_*).
 *
 * Design:
 *   - watches: array of pointers to heap records {fd, events, fn, ctx,
 *     dead}. Removing a watch marks it dead; dead records are reaped at the
 *     start of the next iteration, so callbacks may add/remove watches
 *     (their own included) while we iterate. The pollfd array is rebuilt
 *     each iteration from the live watches (few fds: a daemon has a handful
 *     of clients; O(n) is fine and keeps the loop trivially correct).
 *   - timers: unsorted array of {id, due_ms, period_ms, fn, ctx, dead};
 *     each iteration runs the due ones. Ids increase from 1, never reused.
 *   - posted tasks are zero-delay one-shot timers; the thread-safe post
 *     appends to a mutex-protected list and writes a byte to a self-pipe,
 *     which the loop drains and turns into tasks.
 * Invariants: only the loop thread touches watches/timers; the mutex guards
 * only ts_tasks and the quit flag is atomic.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ipc_int.h"

typedef struct watch {
    int fd;
    short events;
    ipc_fd_fn fn;
    void *ctx;
    bool dead;
} watch;

typedef struct timer {
    uint64_t id;
    uint64_t due_ms;
    uint32_t period_ms;
    ipc_task_fn fn;
    void *ctx;
    bool dead;
} timer;

typedef struct ts_task {
    struct ts_task *next;
    ipc_task_fn fn;
    void *ctx;
} ts_task;

struct ipc_loop {
    watch **watches;       /* live and dead watch records */
    size_t n_watches, cap_watches;
    timer *timers;         /* by value; dead ones reaped per iteration */
    size_t n_timers, cap_timers;
    uint64_t next_timer_id;
    struct pollfd *pfds;   /* scratch, rebuilt each iteration */
    watch **pfd_watch;     /* pfds[i] belongs to pfd_watch[i] */
    size_t cap_pfds;
    int wake_rd, wake_wr;  /* self-pipe for the thread-safe post and quit */
    pthread_mutex_t ts_mu; /* guards ts_head/ts_tail */
    ts_task *ts_head, *ts_tail;
    atomic_bool quit;
};

const char *ipc_strerror(int err)
{
    if (err == 0)
        return "success";
    return strerror(err < 0 ? -err : err);
}

uint64_t ipc_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

int ipc__set_nonblock_cloexec(int fd)
{
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0)
        return -errno;
    int fdfl = fcntl(fd, F_GETFD);
    if (fdfl < 0 || fcntl(fd, F_SETFD, fdfl | FD_CLOEXEC) < 0)
        return -errno;
    return 0;
}

static void drain_wake_pipe(ipc_loop *loop, int fd, short revents, void *ctx)
{
    (void)fd; (void)revents; (void)ctx;
    uint8_t buf[64];
    while (read(loop->wake_rd, buf, sizeof buf) > 0) {
    }
    pthread_mutex_lock(&loop->ts_mu);
    ts_task *t = loop->ts_head;
    loop->ts_head = loop->ts_tail = NULL;
    pthread_mutex_unlock(&loop->ts_mu);
    while (t) {
        ts_task *next = t->next;
        /* Order kept: each becomes a zero-delay timer, run in id order
         * below because due times tie and timers run in array order. */
        if (ipc_loop_post(loop, t->fn, t->ctx) < 0)
            t->fn(t->ctx); /* out of memory: run now rather than lose it */
        free(t);
        t = next;
    }
}

ipc_loop *ipc_loop_create(void)
{
    ipc_loop *loop = calloc(1, sizeof *loop);
    if (!loop)
        return NULL;
    int p[2];
    if (pipe(p) < 0) {
        free(loop);
        return NULL;
    }
    loop->wake_rd = p[0];
    loop->wake_wr = p[1];
    ipc__set_nonblock_cloexec(p[0]);
    ipc__set_nonblock_cloexec(p[1]);
    pthread_mutex_init(&loop->ts_mu, NULL);
    loop->next_timer_id = 1;
    atomic_init(&loop->quit, false);
    if (ipc_loop_watch_fd(loop, loop->wake_rd, POLLIN, drain_wake_pipe,
                          NULL) < 0) {
        ipc_loop_destroy(loop);
        errno = ENOMEM;
        return NULL;
    }
    return loop;
}

void ipc_loop_destroy(ipc_loop *loop)
{
    if (!loop)
        return;
    for (size_t i = 0; i < loop->n_watches; i++)
        free(loop->watches[i]);
    free(loop->watches);
    free(loop->timers);
    free(loop->pfds);
    free(loop->pfd_watch);
    ts_task *t = loop->ts_head;
    while (t) {
        ts_task *next = t->next;
        free(t);
        t = next;
    }
    pthread_mutex_destroy(&loop->ts_mu);
    close(loop->wake_rd);
    close(loop->wake_wr);
    free(loop);
}

static watch *find_watch(ipc_loop *loop, int fd)
{
    for (size_t i = 0; i < loop->n_watches; i++)
        if (!loop->watches[i]->dead && loop->watches[i]->fd == fd)
            return loop->watches[i];
    return NULL;
}

int ipc_loop_watch_fd(ipc_loop *loop, int fd, short events, ipc_fd_fn fn,
                      void *ctx)
{
    if (fd < 0 || !fn)
        return -EINVAL;
    if (find_watch(loop, fd))
        return -EEXIST;
    if (loop->n_watches == loop->cap_watches) {
        size_t cap = loop->cap_watches ? loop->cap_watches * 2 : 16;
        watch **w = realloc(loop->watches, cap * sizeof *w);
        if (!w)
            return -ENOMEM;
        loop->watches = w;
        loop->cap_watches = cap;
    }
    watch *w = calloc(1, sizeof *w);
    if (!w)
        return -ENOMEM;
    w->fd = fd;
    w->events = events;
    w->fn = fn;
    w->ctx = ctx;
    loop->watches[loop->n_watches++] = w;
    return 0;
}

int ipc_loop_set_events(ipc_loop *loop, int fd, short events)
{
    watch *w = find_watch(loop, fd);
    if (!w)
        return -ENOENT;
    w->events = events;
    return 0;
}

void ipc_loop_unwatch_fd(ipc_loop *loop, int fd)
{
    watch *w = find_watch(loop, fd);
    if (w)
        w->dead = true;
}

uint64_t ipc_loop_add_timer(ipc_loop *loop, uint32_t delay_ms,
                            uint32_t period_ms, ipc_task_fn fn, void *ctx)
{
    if (!fn)
        return 0;
    if (loop->n_timers == loop->cap_timers) {
        size_t cap = loop->cap_timers ? loop->cap_timers * 2 : 16;
        timer *t = realloc(loop->timers, cap * sizeof *t);
        if (!t)
            return 0;
        loop->timers = t;
        loop->cap_timers = cap;
    }
    timer *t = &loop->timers[loop->n_timers++];
    t->id = loop->next_timer_id++;
    t->due_ms = ipc_now_ms() + delay_ms;
    t->period_ms = period_ms;
    t->fn = fn;
    t->ctx = ctx;
    t->dead = false;
    return t->id;
}

void ipc_loop_cancel_timer(ipc_loop *loop, uint64_t timer_id)
{
    for (size_t i = 0; i < loop->n_timers; i++)
        if (loop->timers[i].id == timer_id)
            loop->timers[i].dead = true;
}

int ipc_loop_post(ipc_loop *loop, ipc_task_fn fn, void *ctx)
{
    return ipc_loop_add_timer(loop, 0, 0, fn, ctx) ? 0 : -ENOMEM;
}

static void wake(ipc_loop *loop)
{
    uint8_t b = 1;
    /* A full pipe already guarantees a wake-up: ignore EAGAIN. */
    ssize_t rc = write(loop->wake_wr, &b, 1);
    (void)rc;
}

int ipc_loop_post_threadsafe(ipc_loop *loop, ipc_task_fn fn, void *ctx)
{
    ts_task *t = malloc(sizeof *t);
    if (!t)
        return -ENOMEM;
    t->next = NULL;
    t->fn = fn;
    t->ctx = ctx;
    pthread_mutex_lock(&loop->ts_mu);
    if (loop->ts_tail)
        loop->ts_tail->next = t;
    else
        loop->ts_head = t;
    loop->ts_tail = t;
    pthread_mutex_unlock(&loop->ts_mu);
    wake(loop);
    return 0;
}

void ipc_loop_quit(ipc_loop *loop)
{
    atomic_store_explicit(&loop->quit, true, memory_order_release);
    wake(loop);
}

static void reap(ipc_loop *loop)
{
    size_t j = 0;
    for (size_t i = 0; i < loop->n_watches; i++) {
        if (loop->watches[i]->dead)
            free(loop->watches[i]);
        else
            loop->watches[j++] = loop->watches[i];
    }
    loop->n_watches = j;
    j = 0;
    for (size_t i = 0; i < loop->n_timers; i++)
        if (!loop->timers[i].dead)
            loop->timers[j++] = loop->timers[i];
    loop->n_timers = j;
}

/* Run due timers. Timers added by callbacks get new slots at the end and
 * are considered in the same pass only if due (zero-delay posts are). */
static int run_timers(ipc_loop *loop)
{
    int ran = 0;
    uint64_t now = ipc_now_ms();
    size_t n = loop->n_timers; /* tasks posted now run next iteration */
    for (size_t i = 0; i < n; i++) {
        timer *t = &loop->timers[i];
        if (t->dead || t->due_ms > now)
            continue;
        ipc_task_fn fn = t->fn;
        void *ctx = t->ctx;
        if (t->period_ms)
            t->due_ms = now + t->period_ms;
        else
            t->dead = true;
        fn(ctx); /* may realloc loop->timers: t is stale afterwards */
        ran++;
    }
    return ran;
}

int ipc_loop_run_once(ipc_loop *loop, int timeout_ms)
{
    reap(loop);
    /* Timeout: the nearest timer bounds the wait. */
    uint64_t now = ipc_now_ms();
    for (size_t i = 0; i < loop->n_timers; i++) {
        uint64_t due = loop->timers[i].due_ms;
        int wait = due <= now ? 0
                   : (due - now > 3600000u ? 3600000 : (int)(due - now));
        if (timeout_ms < 0 || wait < timeout_ms)
            timeout_ms = wait;
    }
    if (loop->cap_pfds < loop->n_watches) {
        size_t cap = loop->cap_watches;
        struct pollfd *p = realloc(loop->pfds, cap * sizeof *p);
        if (!p)
            return -ENOMEM;
        loop->pfds = p;
        watch **pw = realloc(loop->pfd_watch, cap * sizeof *pw);
        if (!pw)
            return -ENOMEM;
        loop->pfd_watch = pw;
        loop->cap_pfds = cap;
    }
    size_t n = loop->n_watches;
    for (size_t i = 0; i < n; i++) {
        loop->pfds[i].fd = loop->watches[i]->fd;
        loop->pfds[i].events = loop->watches[i]->events;
        loop->pfds[i].revents = 0;
        loop->pfd_watch[i] = loop->watches[i];
    }
    int rc = poll(loop->pfds, n, timeout_ms);
    if (rc < 0 && errno != EINTR)
        return -errno;
    int ran = 0;
    for (size_t i = 0; rc > 0 && i < n; i++) {
        watch *w = loop->pfd_watch[i];
        short rev = loop->pfds[i].revents;
        /* A watch removed by an earlier callback of this pass is skipped:
         * its record stays allocated (dead) until the next reap. */
        if (!rev || w->dead)
            continue;
        w->fn(loop, w->fd, rev, w->ctx);
        ran++;
    }
    ran += run_timers(loop);
    return ran;
}

int ipc_loop_run(ipc_loop *loop)
{
    while (!atomic_exchange_explicit(&loop->quit, false,
                                     memory_order_acq_rel)) {
        int rc = ipc_loop_run_once(loop, -1);
        if (rc < 0)
            return rc;
    }
    return 0;
}
