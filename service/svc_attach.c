/*
 * svc_attach.c - the consumer-facing extras of the service core: Detach /
 * Attach, ChangeTraceConfig and QueryServiceState (Perfetto's semantics,
 * tracing_service_impl.cc DetachConsumer/AttachConsumer/ChangeTraceConfig
 * and ConsumerEndpointImpl::QueryServiceState).
 *
 * Detach: the session forgets its consumer (ops then see consumer NULL)
 * and keeps running, typically writing into its file; it is keyed by the
 * uid of the consumer that created it and the key. Attach by another
 * connection of the same uid with the same key hands it the session back.
 *
 * QueryServiceState builds a TracingServiceState: producers, registered
 * data sources with the descriptor exactly as the producer sent it, and
 * only the sessions the caller owns (root sees all; the count of all
 * sessions is still given, so `perfetto --query` can tell the user some
 * are hidden).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config.h"
#include "ipc.pb-c.h"
#include "svc_int.h"

void svc_session_set_consumer_uid(svc_session *s, uid_t uid)
{
    s->consumer_uid = uid;
}

uid_t svc_session_consumer_uid(const svc_session *s)
{
    return s->consumer_uid;
}

bool svc_session_running(const svc_session *s)
{
    return !s->is_clone && s->state == SVC_SESSION_STARTED;
}

const Perfetto__Protos__TraceConfig *svc_session_config(const svc_session *s)
{
    return s->cfg;
}

static svc_session *find_detached(svc_service *svc, uid_t uid,
                                  const char *key)
{
    for (size_t i = 0; i < svc->nsessions; i++) {
        svc_session *s = svc->sessions[i];
        if (s->detach_key && s->consumer_uid == uid &&
            strcmp(s->detach_key, key) == 0)
            return s;
    }
    return NULL;
}

int svc_session_detach(svc_service *svc, svc_session *s, const char *key)
{
    if (!key || !key[0] || s->is_clone)
        return -EINVAL;
    if (find_detached(svc, s->consumer_uid, key))
        return -EEXIST;
    char *k = strdup(key);
    if (!k)
        return -ENOMEM;
    free(s->detach_key);
    s->detach_key = k;
    s->consumer = NULL;
    return 0;
}

svc_session *svc_session_attach(svc_service *svc, void *consumer, uid_t uid,
                                const char *key)
{
    if (!key || !key[0])
        return NULL;
    svc_session *s = find_detached(svc, uid, key);
    if (!s)
        return NULL;
    free(s->detach_key);
    s->detach_key = NULL;
    s->consumer = consumer;
    return s;
}

/* ---------------------------------------------------------------- change */

int svc_session_change_config(svc_service *svc, svc_session *s,
        const Perfetto__Protos__TraceConfig *ncfg, char *err, size_t errlen)
{
    if (!ncfg || s->is_clone || (s->state != SVC_SESSION_STARTED &&
                                 s->state != SVC_SESSION_CONFIGURED)) {
        svc__set_err(err, errlen, "ChangeTraceConfig: the session is not "
                "running%.0llu%.0llu", 0, 0);
        return -EINVAL;
    }
    /* A shallow copy of the current config whose data sources take the new
     * filters, deep-copied through the wire format. */
    Perfetto__Protos__TraceConfig tmp = *s->cfg;
    size_t n = s->cfg->n_data_sources;
    Perfetto__Protos__TraceConfig__DataSource *ds = NULL, **dsp = NULL;
    if (n) {
        ds = calloc(n, sizeof(*ds));
        dsp = calloc(n, sizeof(*dsp));
        if (!ds || !dsp) {
            free(ds);
            free(dsp);
            return -ENOMEM;
        }
    }
    for (size_t i = 0; i < n; i++) {
        ds[i] = *s->cfg->data_sources[i];
        dsp[i] = &ds[i];
        const char *name = ds[i].config ? ds[i].config->name : NULL;
        for (size_t j = 0; name && j < ncfg->n_data_sources; j++) {
            const Perfetto__Protos__TraceConfig__DataSource *d =
                ncfg->data_sources[j];
            if (d->config && d->config->name &&
                strcmp(d->config->name, name) == 0) {
                int rrc = svc__check_name_regexes(d, j, err, errlen);
                if (rrc < 0) {
                    free(ds);
                    free(dsp);
                    return rrc;
                }
                ds[i].n_producer_name_filter = d->n_producer_name_filter;
                ds[i].producer_name_filter = d->producer_name_filter;
                ds[i].n_producer_name_regex_filter =
                    d->n_producer_name_regex_filter;
                ds[i].producer_name_regex_filter =
                    d->producer_name_regex_filter;
                break;
            }
        }
    }
    tmp.data_sources = dsp;
    size_t len = perfetto__protos__trace_config__get_packed_size(&tmp);
    uint8_t *buf = malloc(len ? len : 1);
    Perfetto__Protos__TraceConfig *c = NULL;
    if (buf) {
        perfetto__protos__trace_config__pack(&tmp, buf);
        c = perfetto__protos__trace_config__unpack(NULL, len, buf);
    }
    free(buf);
    free(ds);
    free(dsp);
    if (!c)
        return -ENOMEM;
    perfetto__protos__trace_config__free_unpacked(s->cfg, NULL);
    s->cfg = c;
    svc__session_rematch(svc, s);
    return 0;
}

/* ---------------------------------------------------------------- query */

static const char *state_name(const svc_session *s)
{
    if (s->is_clone)
        return "CLONED_READ_ONLY";
    switch (s->state) {
    case SVC_SESSION_CONFIGURED: return "CONFIGURED";
    case SVC_SESSION_STARTED: return "STARTED";
    case SVC_SESSION_DISABLING: return "STOP_WAIT";
    default: return "DISABLED";
    }
}

typedef Perfetto__Protos__TracingServiceState tss;

void svc_query_free(tss *st)
{
    if (!st)
        return;
    for (size_t i = 0; i < st->n_producers; i++)
        free(st->producers[i]);
    free(st->producers);
    for (size_t i = 0; i < st->n_data_sources; i++) {
        if (st->data_sources[i]->ds_descriptor)
            perfetto__protos__data_source_descriptor__free_unpacked(
                st->data_sources[i]->ds_descriptor, NULL);
        free(st->data_sources[i]);
    }
    free(st->data_sources);
    for (size_t i = 0; i < st->n_tracing_sessions; i++) {
        free(st->tracing_sessions[i]->buffer_size_kb);
        free(st->tracing_sessions[i]);
    }
    free(st->tracing_sessions);
    free(st);
}

tss *svc_query_state(svc_service *svc, uid_t caller_uid, bool sessions_only)
{
    tss *st = calloc(1, sizeof(*st));
    if (!st)
        return NULL;
    perfetto__protos__tracing_service_state__init(st);
    st->tracing_service_version = "shmtraced " PACKAGE_VERSION;
    st->has_num_sessions = st->has_num_sessions_started = true;
    st->num_sessions = (int32_t)svc->nsessions;
    for (size_t i = 0; i < svc->nsessions; i++)
        st->num_sessions_started +=
            svc->sessions[i]->state == SVC_SESSION_STARTED &&
            !svc->sessions[i]->is_clone;
    st->has_supports_tracing_sessions = true;
    st->supports_tracing_sessions = true;
    if (!sessions_only && svc->nproducers) {
        st->producers = calloc(svc->nproducers, sizeof(*st->producers));
        if (!st->producers)
            goto oom;
        size_t nds = 0;
        for (size_t i = 0; i < svc->nproducers; i++)
            nds += svc->producers[i]->nds;
        if (nds && !(st->data_sources = calloc(nds,
                                               sizeof(*st->data_sources))))
            goto oom;
        for (size_t i = 0; i < svc->nproducers; i++) {
            const svc_producer *p = svc->producers[i];
            Perfetto__Protos__TracingServiceState__Producer *pr =
                malloc(sizeof(*pr));
            if (!pr)
                goto oom;
            perfetto__protos__tracing_service_state__producer__init(pr);
            st->producers[st->n_producers++] = pr;
            pr->has_id = pr->has_pid = pr->has_uid = true;
            pr->id = p->id;
            pr->name = p->name ? p->name : "";
            pr->sdk_version = p->sdk_version ? p->sdk_version : "";
            pr->pid = (int32_t)p->pid;
            pr->uid = (int32_t)p->uid;
            for (size_t k = 0; k < p->nds; k++) {
                Perfetto__Protos__TracingServiceState__DataSource *d =
                    malloc(sizeof(*d));
                if (!d)
                    goto oom;
                perfetto__protos__tracing_service_state__data_source__init(d);
                st->data_sources[st->n_data_sources++] = d;
                d->has_producer_id = true;
                d->producer_id = p->id;
                d->ds_descriptor =
                    perfetto__protos__data_source_descriptor__unpack(NULL,
                            p->ds[k].desc_len, p->ds[k].desc);
                if (!d->ds_descriptor)
                    goto oom;
            }
        }
    }
    if (svc->nsessions) {
        st->tracing_sessions = calloc(svc->nsessions,
                                      sizeof(*st->tracing_sessions));
        if (!st->tracing_sessions)
            goto oom;
    }
    for (size_t i = 0; i < svc->nsessions; i++) {
        const svc_session *s = svc->sessions[i];
        if (!svc__may_access(svc, caller_uid, s))
            continue;
        Perfetto__Protos__TracingServiceState__TracingSession *t =
            malloc(sizeof(*t));
        if (!t)
            goto oom;
        perfetto__protos__tracing_service_state__tracing_session__init(t);
        st->tracing_sessions[st->n_tracing_sessions++] = t;
        t->has_id = t->has_consumer_uid = t->has_duration_ms = true;
        t->id = s->id;
        t->consumer_uid = (int32_t)s->consumer_uid;
        t->duration_ms = s->cfg->has_duration_ms ? s->cfg->duration_ms : 0;
        t->has_num_data_sources = true;
        t->num_data_sources = (uint32_t)s->ninst;
        t->unique_session_name = s->cfg->unique_session_name ?
                                 s->cfg->unique_session_name : "";
        t->state = (char *)state_name(s);
        t->has_is_started = s->state == SVC_SESSION_STARTED && !s->is_clone;
        t->is_started = t->has_is_started;
        if (s->start_realtime_ns) {
            t->has_start_realtime_ns = true;
            t->start_realtime_ns = (int64_t)s->start_realtime_ns;
        }
        if (s->cfg->has_bugreport_score) {
            t->has_bugreport_score = true;
            t->bugreport_score = s->cfg->bugreport_score;
        }
        t->bugreport_filename = s->cfg->bugreport_filename;
        if (s->cfg->n_buffers) {
            t->buffer_size_kb = calloc(s->cfg->n_buffers, sizeof(uint32_t));
            if (!t->buffer_size_kb)
                goto oom;
            t->n_buffer_size_kb = s->cfg->n_buffers;
            for (size_t b = 0; b < s->cfg->n_buffers; b++)
                t->buffer_size_kb[b] = s->cfg->buffers[b]->size_kb;
        }
    }
    return st;
oom:
    svc_query_free(st);
    return NULL;
}

/* ---------------------------------------------------------------- clone */

uint64_t svc_bugreport_session_id(const svc_service *svc)
{
    const svc_session *best = NULL;
    for (size_t i = 0; i < svc->nsessions; i++) {
        const svc_session *s = svc->sessions[i];
        int32_t score = s->cfg->has_bugreport_score ? s->cfg->bugreport_score
                                                    : 0;
        if (s->is_clone || s->state != SVC_SESSION_STARTED || score <= 0)
            continue;
        if (!best || score > best->cfg->bugreport_score ||
            (score == best->cfg->bugreport_score && s->id < best->id))
            best = s;
    }
    return best ? best->id : 0;
}

static svc_session *session_by_id(svc_service *svc, uint64_t id)
{
    for (size_t i = 0; i < svc->nsessions; i++)
        if (svc->sessions[i]->id == id && !svc->sessions[i]->is_clone)
            return svc->sessions[i];
    return NULL;
}

/* Copies what src wrote so far into fd: bytes_written_to_file bytes from
 * out_base, where its first byte went. They are read back through src's
 * own descriptor, so with the access its consumer opened the file with,
 * never by opening the file again: the daemon, often root, reopening it
 * (/proc/self/fd) could read a file the consumer may only write, and an
 * fd positioned after someone's data would have handed that data to the
 * clone. A file passed write-only cannot be cloned: the error says so.
 * The caller has the batches in flight and a direct source's tail
 * written first. */
static int copy_file(const svc_session *src, int fd, char *err,
                     size_t errlen)
{
    int fl = fcntl(src->out_fd, F_GETFL);
    if (fl < 0 || (fl & O_ACCMODE) == O_WRONLY) {
        if (err && errlen)
            snprintf(err, errlen, "cannot clone this write_into_file "
                     "session: its trace file was passed write-only, so "
                     "the service cannot read back what it wrote (open it "
                     "read-write, as perfetto -o and shmtrace record do)");
        return -EBADF;
    }
    uint8_t buf[65536];
    uint64_t left = src->bytes_written_to_file, done = 0;
    int rc = 0;
    while (left) {
        ssize_t n = pread(src->out_fd, buf,
                          left < sizeof(buf) ? left : sizeof(buf),
                          (off_t)(src->out_base + (int64_t)done));
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            rc = n < 0 ? -errno : -EIO;
            if (n == 0 && err && errlen)
                snprintf(err, errlen, "cannot clone this write_into_file "
                         "session: its trace file holds %llu of the %llu "
                         "bytes the service wrote to it (truncated since, "
                         "or not a regular file)", (unsigned long long)done,
                         (unsigned long long)src->bytes_written_to_file);
            else if (err && errlen)
                snprintf(err, errlen, "cannot read the session's trace "
                         "file: %s", strerror(-rc));
            return rc;
        }
        for (ssize_t w = 0; w < n;) {
            ssize_t k = write(fd, buf + w, (size_t)(n - w));
            if (k < 0 && errno == EINTR)
                continue;
            if (k <= 0) {
                rc = k < 0 ? -errno : -EIO;
                break;
            }
            w += k;
        }
        if (rc < 0)
            break;
        done += (uint64_t)n;
        left -= (uint64_t)n;
    }
    if (rc < 0 && err && errlen)
        snprintf(err, errlen, "cannot copy the session's trace file: %s",
                 strerror(-rc));
    return rc;
}

int svc_session_clone_file(svc_service *svc, svc_session *clone, int fd,
                           char *err, size_t errlen)
{
    svc_session *src = clone->is_clone ?
                       session_by_id(svc, clone->cloned_from) : NULL;
    if (!src || src->out_fd < 0) {
        if (fd >= 0)
            close(fd);
        return 0;
    }
    if (fd < 0) {
        svc__set_err(err, errlen, "cannot clone a write_into_file session "
                "without an output file descriptor%.0llu%.0llu", 0, 0);
        return -EINVAL;
    }
    /* Written here, on the service's thread: a FIFO nobody reads (or a
     * socket, a terminal) would block it, and with it every session of
     * every user. The same rule as EnableTracing's file (svc_session.c). */
    char msg[400];
    int rc = svc__check_passed_fd(svc, clone->consumer_uid, fd,
                                  "the file passed with CloneSession", msg,
                                  sizeof msg);
    if (rc < 0) {
        if (err && errlen)
            snprintf(err, errlen, "cannot clone a write_into_file session "
                     "into it: %s (pass a regular file opened for writing)",
                     msg);
        close(fd);
        return rc;
    }
    /* Batches in flight reach the file first (their errors stay theirs).
     * Then a direct source (svc_direct.c), which has its last < 4 KiB in
     * memory and whose descriptor reads aligned buffers only, writes that
     * tail after them, and O_DIRECT is off while the file is read back. */
    if (svc->fw)
        svc_fw_drain(svc->fw);
    rc = svc__direct_pause(src);
    if (rc < 0)
        svc__set_err(err, errlen, "cannot write the end of the session's "
                     "trace file (errno %llu)%.0llu",
                     (unsigned long long)-rc, 0);
    else
        rc = copy_file(src, fd, err, errlen);
    svc__direct_resume(src);
    if (rc < 0) {
        close(fd);
        return rc;
    }
    clone->out_fd = fd;
    rc = svc_session_write_file(svc, clone);
    if (rc < 0) {
        svc__set_err(err, errlen, "writing the clone failed (errno %llu)"
                "%.0llu", (unsigned long long)-rc, 0);
        return rc;
    }
    return 1;
}
