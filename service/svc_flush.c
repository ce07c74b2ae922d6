/*
 * svc_flush.c - flushes, the stop sequence and the service's timers.
 *
 * Flushes: each has a service-wide flush_id sent to the producers; a
 * CommitData with flush_request_id = X acks every flush <= X of that
 * producer. On completion (all acked, or deadline) the SMBs of the
 * session's producers are scraped (smb-abi.md §7) and the outcome counted.
 * Kinds: a consumer's Flush, the stop's final flush, the periodic one, and
 * the one before a CloneSession (reason "trace clone": the clone is made
 * once it is over, svc_ipc_consumer.c).
 *
 * Stop (svc_session_disable): DISABLING -> final flush (flush_timeout_ms)
 * -> StopDataSource to every instance -> wait for the stop acks of the
 * instances that asked for them (data_source_stop_timeout_ms) -> scrape ->
 * write the file -> DISABLED, consumer told. A producer that goes away
 * acks on its own behalf (its SMB was just scraped).
 *
 * Timers: svc_tick() runs every due deadline (flush timeouts, stop
 * timeouts, duration, periodic flushes, clock snapshots and sync markers
 * (svc_clocks.c), file writes);
 * svc_next_deadline_ms() says when the next one is.
 *
 * File passes (write_into_file) run in steps of SVC_FILE_STEP_BYTES, one
 * per tick: while a pass has steps left (svc_has_pending_steps) the daemon
 * ticks again on its next loop iteration, after serving the sockets, so a
 * pass of a large buffer never keeps commits waiting for long (the
 * producers' SMBs would fill and stall them). A pass starts when its
 * period is due, or early when half of the smallest buffer has been
 * written since the last one began (the producers would otherwise lap the
 * ring before it is read). When a quarter of the smallest buffer comes in
 * while a pass is under way, the producers outrun the file: the pass then
 * finishes in one go, so that commits wait and the producers feel the
 * backpressure (their SMBs fill) instead of lapping the ring under the
 * pass. A pass also starts early when the producers went quiet
 * (SVC_FILE_IDLE_MS without a commit) after writing at least
 * SVC_FILE_IDLE_BYTES (less for small buffers), or anything at all after
 * a burst that started an early pass: the end of a burst reaches the file
 * within a tick or two instead of waiting out the period, while the
 * service has nothing else to do. (Without that last rule, the tail that
 * a burst left after its last early pass, under 1 MiB, waited for the
 * period; that fits the recordings of 64 KiB x1 through a warm daemon
 * that took 0.2 s instead of 0.11, 3 of 10 in one series, though later
 * series without the rule did not always show them.) A trickle of
 * commits never starts an early pass, so it still waits for the period
 * rather than getting a pass (and a TraceStats packet) per commit. The
 * stop sequence writes what is left at once.
 */
#include <errno.h>
#include <fcntl.h>
#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "svc_int.h"


/* ---------------------------------------------------------------- flush */

static uint32_t flush_timeout(const svc_session *s)
{
    return s->cfg->has_flush_timeout_ms && s->cfg->flush_timeout_ms ?
           s->cfg->flush_timeout_ms : SVC_DEFAULT_FLUSH_TIMEOUT_MS;
}

void svc__scrape_session(svc_service *svc, svc_session *s)
{
    for (size_t i = 0; i < svc->nproducers; i++) {
        svc_producer *p = svc->producers[i];
        for (size_t k = 0; k < s->ninst; k++) {
            if (s->inst[k].producer_id == p->id) {
                svc__scrape(svc, p, s);
                break;
            }
        }
    }
}

static void finalize_disable(svc_service *svc, svc_session *s);
static void stop_phase(svc_service *svc, svc_session *s);

/* A stop's or a clone's flush f ended without the acks of f->pending:
 * notes last_flush_slow_data_sources for the next read pass (as
 * Perfetto's service does, which names them in its trace and its log):
 * the session's data sources on those producers, at most
 * SVC_SLOW_DS_MAX; the oldest of SVC_EV_FLUSH_MAX such events goes.
 * Nothing is noted when memory runs out: the flush's outcome is counted
 * anyway (flushes_failed, final_flush_outcome). */
static void note_slow_flush(svc_service *svc, svc_session *s,
                            const svc_flush *f)
{
    if (s->nslow_flushes == SVC_EV_FLUSH_MAX) {
        svc__slow_flush_free(&s->slow_flushes[0]);
        memmove(s->slow_flushes, s->slow_flushes + 1,
                (SVC_EV_FLUSH_MAX - 1) * sizeof(*s->slow_flushes));
        s->nslow_flushes--;
    }
    svc_slow_flush *g = realloc(s->slow_flushes, (s->nslow_flushes + 1) *
                                                 sizeof(*g));
    if (!g)
        return;
    s->slow_flushes = g;
    svc_slow_flush *e = &g[s->nslow_flushes];
    memset(e, 0, sizeof(*e));
    e->at = svc__boottime_ns();
    for (size_t k = 0; k < f->npending && e->n < SVC_SLOW_DS_MAX; k++) {
        svc_producer *p = svc__producer_by_id(svc, f->pending[k]);
        if (!p)
            continue;
        for (size_t j = 0; j < s->ninst && e->n < SVC_SLOW_DS_MAX; j++) {
            if (s->inst[j].producer_id == p->id &&
                !svc__slow_add(e, p->name, s->inst[j].name))
                break;
        }
    }
    s->nslow_flushes++;
}

/* Removes flush i from s and acts on its outcome. */
static void flush_complete(svc_service *svc, svc_session *s, size_t i,
                           bool ok)
{
    svc_flush f = s->flushes[i];
    s->flushes[i] = s->flushes[--s->nflushes];
    if (!ok && (f.kind == SVC_FLUSH_DISABLE || f.kind == SVC_FLUSH_CLONE))
        note_slow_flush(svc, s, &f);
    free(f.pending);
    svc__scrape_session(svc, s);
    if (ok)
        s->flushes_succeeded++;
    else
        s->flushes_failed++;
    /* all_data_sources_flushed, with a clock snapshot, as Perfetto's
     * CompleteFlush (the stop's: stop_phase) */
    if (f.kind != SVC_FLUSH_DISABLE) {
        svc__clocks_snapshot(s);
        svc__ev_note(&s->ev_flushed, svc__boottime_ns());
    }
    switch (f.kind) {
    case SVC_FLUSH_CONSUMER:
        if (svc->ops.flush_done)
            svc->ops.flush_done(svc->ops_ctx, s->consumer, f.token, ok);
        break;
    case SVC_FLUSH_DISABLE:
        s->final_flush_outcome = ok ? 1 : 2;
        stop_phase(svc, s);
        break;
    case SVC_FLUSH_CLONE:
        if (svc->ops.clone_flush_done)
            svc->ops.clone_flush_done(svc->ops_ctx, f.token, false);
        break;
    default:
        break;
    }
}

static int flush_start(svc_service *svc, svc_session *s, int kind,
                       uint32_t timeout_ms, uint64_t flags, uint64_t token)
{
    svc_flush *g = realloc(s->flushes, (s->nflushes + 1) * sizeof(*g));
    if (!g)
        return -ENOMEM;
    s->flushes = g;
    svc_flush *f = &s->flushes[s->nflushes];
    memset(f, 0, sizeof(*f));
    f->flush_id = ++svc->last_flush_id;
    f->kind = kind;
    f->token = token;
    f->deadline_ms = svc_now_ms() + (timeout_ms ? timeout_ms :
                                     flush_timeout(s));
    f->pending = calloc(svc->nproducers ? svc->nproducers : 1,
                        sizeof(*f->pending));
    uint64_t *ids = calloc(s->ninst ? s->ninst : 1, sizeof(*ids));
    if (!f->pending || !ids) {
        free(f->pending);
        free(ids);
        return -ENOMEM;
    }
    s->nflushes++;
    s->flushes_requested++;
    svc__ev_note(&s->ev_flush_started, svc__boottime_ns());
    for (size_t pi = 0; pi < svc->nproducers; pi++) {
        svc_producer *p = svc->producers[pi];
        size_t n = 0;
        for (size_t k = 0; k < s->ninst; k++)
            if (s->inst[k].producer_id == p->id &&
                s->inst[k].state == SVC_INST_STARTED && !s->inst[k].no_flush)
                ids[n++] = s->inst[k].instance_id;
        if (n == 0)
            continue;
        if (svc->ops.flush && svc->ops.flush(svc->ops_ctx, p->conn, ids, n,
                                             f->flush_id, flags) < 0)
            continue;        /* cannot reach it: scraping covers it */
        f->pending[f->npending++] = p->id;
    }
    free(ids);
    if (f->npending == 0)
        flush_complete(svc, s, s->nflushes - 1, true);
    return 0;
}

int svc_session_flush(svc_service *svc, svc_session *s, uint32_t timeout_ms,
                      uint64_t flags, uint64_t token)
{
    if (s->is_clone || s->state != SVC_SESSION_STARTED)
        return -EINVAL;
    return flush_start(svc, s, SVC_FLUSH_CONSUMER, timeout_ms, flags, token);
}

int svc__flush_for_clone(svc_service *svc, svc_session *s, uint64_t token)
{
    if (s->is_clone || s->state != SVC_SESSION_STARTED)
        return 0;
    return flush_start(svc, s, SVC_FLUSH_CLONE, 0, SVC_FLUSH_FLAGS_CLONE,
                       token) == 0 ? 1 : 0;
}

/* Producer p acked flush_id (and every earlier one). */
void svc__flush_ack(svc_service *svc, svc_producer *p, uint64_t flush_id)
{
    if (flush_id > p->last_flush_acked)
        p->last_flush_acked = flush_id;
    for (size_t si = 0; si < svc->nsessions; si++) {
        svc_session *s = svc->sessions[si];
        for (size_t i = 0; i < s->nflushes;) {
            svc_flush *f = &s->flushes[i];
            if (f->flush_id <= flush_id) {
                for (size_t k = 0; k < f->npending; k++)
                    if (f->pending[k] == p->id) {
                        f->pending[k] = f->pending[--f->npending];
                        break;
                    }
            }
            if (f->npending == 0) {
                flush_complete(svc, s, i, true);
                i = 0;           /* the array changed */
                if (si >= svc->nsessions || svc->sessions[si] != s)
                    return;
                continue;
            }
            i++;
        }
    }
}

/* ---------------------------------------------------------------- stop */

static void stop_phase(svc_service *svc, svc_session *s)
{
    bool waiting = false;
    if (!s->ev_flushed_ns) {
        svc__clocks_snapshot(s);
        s->ev_flushed_ns = svc__boottime_ns();  /* the final flush ended */
        svc__ev_note(&s->ev_flushed, s->ev_flushed_ns);
    }
    for (size_t k = 0; k < s->ninst; k++) {
        svc_instance *in = &s->inst[k];
        if (in->state != SVC_INST_STARTED)
            continue;
        svc_producer *p = svc__producer_by_id(svc, in->producer_id);
        if (p && svc->ops.stop_data_source)
            svc->ops.stop_data_source(svc->ops_ctx, p->conn,
                                      in->instance_id);
        if (p && in->notify_on_stop) {
            in->state = SVC_INST_STOPPING;
            waiting = true;
        } else {
            in->state = SVC_INST_STOPPED;
        }
    }
    if (waiting) {
        uint32_t t = s->cfg->has_data_source_stop_timeout_ms &&
                     s->cfg->data_source_stop_timeout_ms ?
                     s->cfg->data_source_stop_timeout_ms :
                     SVC_DEFAULT_STOP_TIMEOUT_MS;
        s->stop_deadline_ms = svc_now_ms() + t;
        return;
    }
    finalize_disable(svc, s);
}

/* Why s's file is not whole, for its consumer and the daemon's log: the
 * cause, what the file holds (a regular file's size; short writes count),
 * what to do about it. Any failed write ends the session (file_step). */
static void file_error_text(const svc_session *s, char *out, size_t n)
{
    int e = s->file_errno ? s->file_errno : EIO;
    const char *hint = "";
    char held[64] = "";
    struct stat st;
    switch (e) {
    case ENOSPC:
    case EDQUOT:
        hint = ": free space on its file system (or the owner's quota), or "
               "record to another one";
        break;
    case EFBIG:
        hint = ": the file reached the largest size the service may write "
               "(its file size limit, RLIMIT_FSIZE, or the file system's): "
               "set max_file_size_bytes below that, or raise the limit";
        break;
    case EIO:
        hint = ": an I/O error (see the kernel's log)";
        break;
    default:
        break;
    }
    if (fstat(s->out_fd, &st) == 0 && S_ISREG(st.st_mode)) {
        int64_t at = svc__file_base(s->out_fd) - s->out_base;
        snprintf(held, sizeof held, " with %lld bytes in it",
                 (long long)(at > 0 ? at : 0));
    }
    snprintf(out, n, "writing the trace file failed%s (%s)%s; the session "
             "ended there", held, strerror(e), hint);
}

static void finalize_disable(svc_service *svc, svc_session *s)
{
    char file_err[512];
    s->stop_deadline_ms = 0;
    svc__scrape_session(svc, s);
    s->state = SVC_SESSION_DISABLED;
    svc__clocks_snapshot(s);
    s->stats_due = true;
    s->ev_disabled_ns = svc__boottime_ns();
    if (!s->ev_flushed_ns) {
        s->ev_flushed_ns = s->ev_disabled_ns;
        svc__ev_note(&s->ev_flushed, s->ev_flushed_ns);
    }
    s->duration_deadline_ms = 0;
    s->next_periodic_flush_ms = 0;
    s->next_snapshot_ms = 0;
    const char *error = NULL;
    if (s->out_fd >= 0) {
        /* any failed write sets file_failed (svc__file_fail): this last
         * one, or an earlier one, which ended the session (file_step) */
        svc_session_write_file(svc, s);
        if (s->file_failed) {
            file_error_text(s, file_err, sizeof file_err);
            error = file_err;
            fprintf(stderr, "shmtraced: session %llu: %s\n",
                    (unsigned long long)s->id, file_err);
        } else if (s->file_full) {
            /* the config's own limit: no error for the consumer, but the
             * packets it kept out are said (and counted as file_full) */
            fprintf(stderr, "shmtraced: session %llu: the trace file "
                    "reached max_file_size_bytes (%llu); the session ended "
                    "there, %llu packet(s) of its buffers not written\n",
                    (unsigned long long)s->id,
                    (unsigned long long)s->max_file_size_bytes,
                    (unsigned long long)s->file_full_packets);
        }
        s->next_file_write_ms = 0;
        /* the last write (all of it waited for): what was reserved past
         * the end goes back before the consumer hears the session ended */
        svc_prealloc_trim(&s->prealloc, s->out_fd);
    }
    if (!s->notified_disabled) {
        s->notified_disabled = true;
        if (svc->ops.session_disabled)
            svc->ops.session_disabled(svc->ops_ctx, s->consumer, s, error);
    }
}

int svc_session_disable(svc_service *svc, svc_session *s)
{
    if (s->state == SVC_SESSION_CONFIGURED && !s->is_clone) {
        finalize_disable(svc, s);          /* never started: nothing owed */
        return 0;
    }
    if (s->is_clone || s->state != SVC_SESSION_STARTED)
        return 0;
    s->state = SVC_SESSION_DISABLING;
    s->duration_deadline_ms = 0;
    int rc = flush_start(svc, s, SVC_FLUSH_DISABLE, 0, SVC_FLUSH_FLAGS_STOP,
                         0);
    if (rc < 0)
        stop_phase(svc, s);
    return 0;
}

void svc__session_instance_stopped(svc_service *svc, svc_producer *p,
                                   uint64_t instance_id)
{
    for (size_t si = 0; si < svc->nsessions; si++) {
        svc_session *s = svc->sessions[si];
        bool waiting = false, hit = false;
        for (size_t k = 0; k < s->ninst; k++) {
            svc_instance *in = &s->inst[k];
            if (in->producer_id == p->id && in->instance_id == instance_id &&
                in->state == SVC_INST_STOPPING) {
                in->state = SVC_INST_STOPPED;
                hit = true;
            }
            waiting |= in->state == SVC_INST_STOPPING;
        }
        if (hit && !waiting && s->state == SVC_SESSION_DISABLING &&
            s->stop_deadline_ms)           /* in the stop phase */
            finalize_disable(svc, s);
    }
}

/* Producer p goes away: keep what it wrote, forget its instances. */
size_t svc__producer_gone(svc_service *svc, svc_producer *p)
{
    size_t scraped = p->smb_base ? svc__scrape(svc, p, NULL) : 0;
    svc__loss_producer_gone(svc, p);
    for (size_t si = 0; si < svc->nsessions; si++) {
        svc_session *s = svc->sessions[si];
        for (size_t k = 0; k < s->ninst;) {
            if (s->inst[k].producer_id == p->id) {
                free(s->inst[k].name);
                s->inst[k] = s->inst[--s->ninst];
            } else {
                k++;
            }
        }
        svc__start_check(svc, s);   /* its unacked starts no longer count */
    }
    /* Acks every pending flush on its behalf: its data was just scraped. */
    svc__flush_ack(svc, p, UINT64_MAX);
    for (size_t si = 0; si < svc->nsessions; si++) {
        svc_session *s = svc->sessions[si];
        bool waiting = false;
        for (size_t k = 0; k < s->ninst; k++)
            waiting |= s->inst[k].state == SVC_INST_STOPPING;
        if (s->state == SVC_SESSION_DISABLING && s->stop_deadline_ms &&
            !waiting)
            finalize_disable(svc, s);
    }
    return scraped;
}

/* ---------------------------------------------------------------- timers */

uint64_t svc_next_deadline_ms(const svc_service *svc)
{
    uint64_t d = 0, now = 0;
    for (size_t si = 0; si < svc->nsessions; si++) {
        const svc_session *s = svc->sessions[si];
        if ((s->duration_suspend_aware || s->snapshot_suspend_aware) &&
            !now)
            now = svc_now_ms();
        d = svc__min_deadline(d, svc__timer_deadline(svc, s,
                s->duration_deadline_ms, s->duration_suspend_aware, now));
        d = svc__min_deadline(d, s->stop_deadline_ms);
        d = svc__min_deadline(d, s->next_file_write_ms);
        d = svc__min_deadline(d, s->next_periodic_flush_ms);
        d = svc__min_deadline(d, svc__timer_deadline(svc, s,
                s->next_snapshot_ms, s->snapshot_suspend_aware, now));
        for (size_t i = 0; i < s->nflushes; i++)
            d = svc__min_deadline(d, s->flushes[i].deadline_ms);
        d = svc__min_deadline(d, svc__trigger_deadline(s));
        d = svc__min_deadline(d, svc__start_deadline(s));
    }
    return d;
}

static bool due(uint64_t deadline, uint64_t now)
{
    return deadline && deadline <= now;
}

/* Bytes written into the session's buffers so far (tb stats), and the
 * smallest buffer's size. */
static uint64_t buffers_written(svc_service *svc, const svc_session *s,
                                uint64_t *smallest)
{
    uint64_t sum = 0, min = 0;
    for (size_t i = 0; i < s->nbufs; i++) {
        tb_buffer *b = svc__buffer(svc, s->buf_ids[i], NULL);
        const tb_stats *st = b ? tb_get_stats(b) : NULL;
        if (!st)
            continue;
        sum += st->bytes_written;
        if (!min || st->buffer_size < min)
            min = st->buffer_size;
    }
    if (smallest)
        *smallest = min;
    return sum;
}

void svc__file_pass_mark(svc_service *svc, svc_session *s)
{
    uint64_t smallest = 0;
    s->file_mark_written = buffers_written(svc, s, &smallest);
    s->file_early_bytes = smallest / 2;
}

/* Has half of the smallest buffer been written since the last file pass
 * began? Then the pass is due now, whatever the period says: with a
 * period longer than the time the producers take to fill the ring, what
 * they wrote first would be overwritten before it was read.
 * With the writer thread, a session starts a pass once
 * SVC_FILE_EAGER_BYTES are in: the file is then written while the
 * producers go on, from a ring still in cache, and little is left to
 * write at the end. For large packets (slices written by the thread,
 * svc_read.c): bench-vs-perfetto 64 KiB x1 with the perfetto consumer
 * went from 1575 MB/s to 1831-2412 in three runs. For small packets
 * (copied, written on the main thread) the whole file used to be written
 * after the producers were done, by one thread with the other core idle
 * (a 64 B x4 recording of 64 MB: 50 of its 135 ms); starting early, 64 B
 * x1 went from 0.134 to 0.102 s and 64 B x4 from 0.123-0.130 to
 * 0.117-0.118 s per 64 MB, with the same service CPU (medians of 10
 * recordings through two warm daemons, alternating). Handing small
 * packets' batches to the thread as well gained no time and cost ~20%
 * more service CPU (for packets of 512 bytes or more on average, a
 * saturated main thread now does: svc_read.c, copied_out).
 * Once a session's batches held more copied bytes than slices (small
 * packets: its first pass tells), its passes start after
 * SVC_FILE_EAGER_SMALL_BYTES: a pass then reads packets committed within
 * the last megabyte (likely still in the core's L2: 4 MiB on the VM of
 * that measurement, 1 MiB on the AMD EPYC ones since). 64 B x1 0.106
 * -> 0.087 s and 64 B x4 0.105 -> 0.096 s per 64 MB (medians of 10, warm
 * daemons alternating). Sessions of large packets keep 4 MiB: with 1 MiB
 * passes 1 KiB x1 took 0.171 s against 0.169, 64 KiB x4 0.157 against
 * 0.154 (more passes, each ending with a TraceStats packet); 1 KiB x4
 * 0.186 against 0.197, within the noise of 8 recordings. (1 KiB packets
 * were large then, written in place; since 2026-12-05 packets under
 * SVC_FILE_IN_PLACE_MIN, 8 KiB, are copied, which makes such a session
 * one of small packets: svc_read.c says what that bought.)
 * Smaller passes for such sessions, so that a pass finds its packets in a
 * 1 MiB L2, were tried on 2026-12-05 (1 KiB x1, 256 MB, `/tmp` daemon
 * recordings, perfetto consumer, builds alternating, service CPU per
 * packet, medians): 256 KiB 444 and 512 KiB 446.5 against 418 ns (12
 * recordings each); 32 KiB 364.5 and 64 KiB 381.5 against 403 (12), but
 * 32 KiB over 40 recordings 481.5 against 434. A producer's CommitData
 * holds 256 KiB of chunks with a 4 MiB SMB (libshm/producer_client.c),
 * so below that a pass follows every commit. Not kept. On the next host
 * (AMD EPYC family 26, 2 MiB L2), 512 KiB passes with 512 KiB file
 * batches (svc_read.c): 371.5 against 356.5 ns (32 recordings each,
 * 2026-12-05 17:29 UTC); not kept either. Nor was a
 * TraceStats packet at most once a second instead of at the end of every
 * pass (236 of them in a 256 MB recording of 1 KiB packets): 402 against
 * 376 ns (12). */
static bool file_behind(svc_service *svc, const svc_session *s)
{
    if (s->file_pass_open || !s->file_early_bytes)
        return false;
    uint64_t due = s->file_early_bytes;
    if (svc->fw) {
        uint64_t eager = s->file_staged_bytes > s->file_slice_bytes
                         ? SVC_FILE_EAGER_SMALL_BYTES : SVC_FILE_EAGER_BYTES;
        if (due > eager)
            due = eager;
    }
    return buffers_written(svc, s, NULL) - s->file_mark_written >= due;
}

/* Has a quarter of the smallest buffer come in during the open pass? At
 * its start at most about half was unread (or the early pass would have
 * begun), so the writer is still behind the reader: the producers outrun
 * the file, and the pass must end now. */
static bool file_outrun(svc_service *svc, const svc_session *s)
{
    if (!s->file_pass_open || !s->file_early_bytes)
        return false;
    return buffers_written(svc, s, NULL) - s->file_mark_written >=
           s->file_early_bytes / 2;
}

/* Have the producers gone quiet (no commit for SVC_FILE_IDLE_MS) after
 * writing at least SVC_FILE_IDLE_BYTES, or a sixteenth of the smallest
 * buffer if that is less, since the last pass ended? Then write it now:
 * the service is idle, and the file need not lag by up to a period. */
static bool file_idle(svc_service *svc, const svc_session *s, uint64_t now)
{
    if (s->file_pass_open || !s->file_early_bytes ||
        now < svc->last_commit_ms + SVC_FILE_IDLE_MS)
        return false;
    uint64_t min = s->file_early_bytes / 8;
    if (min > SVC_FILE_IDLE_BYTES)
        min = SVC_FILE_IDLE_BYTES;
    if (s->file_burst)
        min = 1;
    return buffers_written(svc, s, NULL) - s->file_done_written >= min;
}

/* One step of the file pass (starting one if none is open): at most
 * svc->file_step_bytes, so that commits are served between steps and the
 * producers' shared memory keeps draining while a large pass is written.
 * The period counts from the start of a pass. */
static void file_step(svc_service *svc, svc_session *s, uint64_t now)
{
    size_t budget = svc->file_step_bytes;
    if (!s->file_pass_open) {
        s->next_file_write_ms = now + s->file_write_period_ms;
        svc__file_pass_mark(svc, s);
    } else if (file_outrun(svc, s)) {
        /* The rest of the pass now, in one go: meanwhile commits wait,
         * the SMBs fill and the producers stall (or drop, counted) instead
         * of lapping the ring under the pass (backpressure). */
        budget = 0;
        svc->file_passes_hurried++;
    }
    bool more = false;
    int rc = svc_session_write_file_step(svc, s, budget, &more);
    s->file_pass_open = rc >= 0 && more;
    if (!s->file_pass_open)
        s->file_done_written = buffers_written(svc, s, NULL);
    if (rc < 0 || s->file_full)
        svc_session_disable(svc, s);
}

/* After each commit (svc_commit.c): the ticks come every 10 ms, and the
 * producers can fill tens of MB in that time, so the early pass and the
 * hurried end of a pass are also decided here, as soon as the bytes are
 * in. */
void svc__file_check(svc_service *svc)
{
    for (size_t si = 0; si < svc->nsessions; si++) {
        svc_session *s = svc->sessions[si];
        if (s->out_fd < 0 || !s->next_file_write_ms)
            continue;
        bool behind = file_behind(svc, s);
        s->file_burst |= behind;
        if (behind || file_outrun(svc, s) ||
            (svc->fw && s->file_pass_open && !svc__file_waiting(svc, s)))
            file_step(svc, s, svc_now_ms());
    }
}

bool svc_has_pending_steps(const svc_service *svc)
{
    for (size_t si = 0; si < svc->nsessions; si++)
        if (svc->sessions[si]->file_pass_open &&
            !svc__file_waiting((svc_service *)svc, svc->sessions[si]))
            return true;
    return false;
}

void svc_tick(svc_service *svc, uint64_t now)
{
    for (size_t si = 0; si < svc->nsessions; si++) {
        svc_session *s = svc->sessions[si];
        for (size_t i = 0; i < s->nflushes;) {
            if (due(s->flushes[i].deadline_ms, now)) {
                flush_complete(svc, s, i, false);
                i = 0;
            } else {
                i++;
            }
        }
        if (due(s->stop_deadline_ms, now))
            finalize_disable(svc, s);
        svc__trigger_tick(svc, s, now);
        svc__start_tick(svc, s, now);
        if (due(s->duration_deadline_ms, svc__timer_now(svc, s, now,
                    s->duration_suspend_aware)))
            svc_session_disable(svc, s);
        svc__clocks_tick(s, svc__timer_now(svc, s, now,
                                           s->snapshot_suspend_aware));
        if (due(s->next_periodic_flush_ms, now)) {
            s->next_periodic_flush_ms = now + s->flush_period_ms;
            flush_start(svc, s, SVC_FLUSH_PERIODIC, 0,
                        SVC_FLUSH_FLAGS_PERIODIC, 0);
        }
        if (s->out_fd < 0 || !s->next_file_write_ms)
            continue;
        bool behind = file_behind(svc, s), idle = !behind &&
                                                   file_idle(svc, s, now);
        s->file_burst = (s->file_burst || behind) && !idle;
        if (behind || idle || s->file_pass_open ||
            due(s->next_file_write_ms, now))
            file_step(svc, s, now);
    }
}
