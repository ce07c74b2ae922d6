/*
 * svc_ipc.c - the daemon (see svc_ipc.h): one ipc_loop, the producer and
 * consumer hosts with their ports (svc_ipc_producer.c,
 * svc_ipc_consumer.c), the service core, a 10 ms tick driving its timers
 * (and an extra tick on the next loop iteration while a file pass has
 * steps left, svc_flush.c, or when the file writer thread finished a
 * batch a pass waits for), and the clean shutdown.
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "svc_ipc_int.h"

void svc__reply_empty(ipc_call *call)
{
    ipc_call_reply(call, NULL, false);
}

/* ================================================================ daemon */

static void tick(void *vd);
static void log_refusal(void *ctx, uid_t uid, bool dropped,
                        const char *why);

/* The next step of a file pass, one loop iteration later (the sockets
 * are polled in between). */
static void step(void *vd)
{
    svc_daemon *d = vd;
    d->step_timer = 0;
    tick(d);
}

static void tick(void *vd)
{
    svc_daemon *d = vd;
    uint64_t now = svc_now_ms();
    svc_tick(d->svc, now);
    if (!d->step_timer && svc_has_pending_steps(d->svc))
        d->step_timer = ipc_loop_add_timer(d->loop, 0, 0, step, d);
    if (!d->shutting_down)
        return;
    /* Done when every session is disabled (files written) and every
     * session read over IPC was collected by its consumer. */
    if ((svc_all_sessions_disabled(d->svc) &&
         svc_sessions_owing_reads(d->svc) == 0) ||
        now >= d->shutdown_deadline_ms)
        ipc_loop_quit(d->loop);
}

/* The writer thread wrote a batch: a pass that waited for it goes on. */
static void on_file_written(ipc_loop *loop, int fd, short revents, void *vd)
{
    (void)loop;
    (void)revents;
    uint64_t n;
    while (read(fd, &n, sizeof(n)) == (ssize_t)sizeof(n)) {
    }
    tick(vd);
}

int svc_daemon_set_file_writer(svc_daemon *d, bool on)
{
    if (d->fw_fd >= 0) {
        ipc_loop_unwatch_fd(d->loop, d->fw_fd);
        d->fw_fd = -1;
    }
    int rc = svc_set_file_writer_thread(d->svc, on);
    if (rc < 0 || !on)
        return rc;
    int fd = svc_file_writer_fd(d->svc);
    if (fd >= 0 && ipc_loop_watch_fd(d->loop, fd, POLLIN, on_file_written,
                                     d) == 0)
        d->fw_fd = fd;
    return 0;
}

svc_daemon *svc_daemon_create(ipc_loop *loop, const char *producer_path,
                              const char *consumer_path, int *err)
{
    static const svc_ops ops = {
        .setup_tracing = svc__op_setup_tracing,
        .setup_data_source = svc__op_setup_ds,
        .start_data_source = svc__op_start_ds,
        .stop_data_source = svc__op_stop_ds,
        .flush = svc__op_flush,
        .flush_done = svc__op_flush_done,
        .session_disabled = svc__op_session_disabled,
        .clone_trigger_hit = svc__op_clone_trigger_hit,
        .clear_incremental_state = svc__op_clear_incremental,
        .all_ds_started = svc__op_all_ds_started,
        .clone_flush_done = svc__op_clone_flush_done,
    };
    int e = 0;
    svc_daemon *d = calloc(1, sizeof(*d));
    if (!d) {
        if (err)
            *err = -ENOMEM;
        return NULL;
    }
    d->loop = loop;
    d->fw_fd = -1;
    uid_t owner = getuid();   /* the service's uid: its buffers' and
                                 connections' reserve is this uid's */
    d->svc = svc_create(&ops, d, owner);
    if (!d->svc) {
        e = -ENOMEM;
        goto fail;
    }
    d->phost = ipc_host_create(loop, producer_path, 0660, &e);
    if (!d->phost)
        goto fail;
    d->chost = ipc_host_create(loop, consumer_path, 0600, &e);
    if (!d->chost)
        goto fail;
    d->prefused.socket = "producer";
    d->crefused.socket = "consumer";
    ipc_host_set_refused_cb(d->phost, log_refusal, &d->prefused);
    ipc_host_set_refused_cb(d->chost, log_refusal, &d->crefused);
    svc_daemon_set_max_conns_per_uid(d, SVC_MAX_CONNS_PER_UID);
    ipc_host_set_reserved_conns(d->phost, SVC_RESERVED_CONNS, 0, owner);
    ipc_host_set_reserved_conns(d->chost, SVC_RESERVED_CONNS, 0, owner);
    if ((e = ipc_host_expose_service(d->phost, &svc__producer_port, d)) < 0 ||
        (e = ipc_host_expose_service(d->chost, &svc__consumer_port, d)) < 0)
        goto fail;
    d->tick_timer = ipc_loop_add_timer(loop, SVC_TICK_MS, SVC_TICK_MS, tick,
                                       d);
    if (!d->tick_timer) {
        e = -ENOMEM;
        goto fail;
    }
    return d;
fail:
    if (err)
        *err = e ? e : -ENOMEM;
    svc_daemon_destroy(d);
    return NULL;
}

void svc_daemon_set_max_conns_per_uid(svc_daemon *d, uint32_t n)
{
    ipc_host_set_max_conns_per_uid(d->phost, n);
    ipc_host_set_max_conns_per_uid(d->chost, n);
}

/* The connections turned away since the last line, if any. */
static void log_unlogged(svc_refusal_log *l)
{
    if (l->unlogged)
        fprintf(stderr, "shmtraced: %s socket: %llu more connections "
                "refused or dropped since the last line about it\n",
                l->socket, (unsigned long long)l->unlogged);
    l->unlogged = 0;
}

/* A connection refused (a limit, or no descriptors left) or dropped (it
 * did not read its replies): one line a second at most, with the number
 * turned away since the last line. */
static void log_refusal(void *ctx, uid_t uid, bool dropped, const char *why)
{
    svc_refusal_log *l = ctx;
    uint64_t now = ipc_now_ms();
    if (l->last_log_ms && now - l->last_log_ms < 1000) {
        l->unlogged++;
        return;
    }
    log_unlogged(l);
    fprintf(stderr, "shmtraced: %s socket: %s a connection of uid %ld: %s\n",
            l->socket, dropped ? "dropped" : "refused",
            uid == (uid_t)-1 ? -1L : (long)uid, why);
    l->last_log_ms = now;
}

void svc_daemon_destroy(svc_daemon *d)
{
    if (!d)
        return;
    log_unlogged(&d->prefused);
    log_unlogged(&d->crefused);
    if (d->tick_timer)
        ipc_loop_cancel_timer(d->loop, d->tick_timer);
    if (d->step_timer)
        ipc_loop_cancel_timer(d->loop, d->step_timer);
    if (d->fw_fd >= 0)
        ipc_loop_unwatch_fd(d->loop, d->fw_fd);
    /* Hosts first: their on_disconnect callbacks use the service. */
    ipc_host_destroy(d->chost);
    ipc_host_destroy(d->phost);
    svc_destroy(d->svc);
    free(d->clones);
    free(d->uid_queued);
    free(d);
}

void svc_daemon_shutdown(svc_daemon *d)
{
    if (d->shutting_down)
        return;
    d->shutting_down = true;
    d->shutdown_deadline_ms = svc_now_ms() + SVC_SHUTDOWN_GRACE_MS;
    svc_disable_all_sessions(d->svc);
}

svc_service *svc_daemon_service(svc_daemon *d)
{
    return d->svc;
}
