/*
 * svc_session.c - tracing sessions: config checks, buffers, data source
 * instances, enable/start, free and clone (flushes, stop and timers are in
 * svc_flush.c, the service object and buffer table in svc_service.c).
 *
 * Life of a session (life-of-a-tracing-session steps 4-28):
 *   enable  -> buffers created (global ids), every config data source
 *              matched in every producer that registered it: SMB set up
 *              once per producer (SetupTracing + fd), then SetupDataSource
 *              and StartDataSource with config.target_buffer = global id.
 *   STARTED -> flushes (consumer, periodic); file writes every period.
 *   disable -> DISABLING: final flush (timeout flush_timeout_ms), then
 *              StopDataSource to every instance, wait for the stop acks of
 *              instances that asked for them (data_source_stop_timeout_ms),
 *              scrape, write the file, DISABLED, tell the consumer.
 *   free    -> instances stopped, buffers destroyed, ids released.
 *
 * Flushes: each has a service-wide flush_id sent to the producers; a
 * CommitData with flush_request_id = X acks every flush <= X of that
 * producer. On completion (all acked, or deadline) the SMBs of the
 * session's producers are scraped (smb-abi.md §7) and the outcome counted.
 *
 * Invariants: a buffer id is in at most one session; a producer's
 * `allowed` list holds only ids of live buffers (removed on free).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "ipc.h"
#include "svc_int.h"
#include "svc_log.h"


/* ---------------------------------------------------------------- config */

int svc__check_name_regexes(const Perfetto__Protos__TraceConfig__DataSource *d,
                            size_t index, char *err, size_t errlen)
{
    for (size_t k = 0; k < d->n_producer_name_regex_filter; k++) {
        char why[160];
        const char *re = d->producer_name_regex_filter[k];
        if (svc_regex_check(re, why, sizeof why) < 0) {
            if (err && errlen)
                snprintf(err, errlen, "data source %zu (%s): "
                         "producer_name_regex_filter \"%.100s%s\" refused: %s",
                         index, d->config && d->config->name ?
                         d->config->name : "?", re,
                         strlen(re) > 100 ? "..." : "", why);
            return -EINVAL;
        }
    }
    return 0;
}

/* KB of buffers held by uid's sessions, its clones included. */
static uint64_t uid_buffer_kb(const svc_service *svc, uid_t uid)
{
    uint64_t kb = 0;
    for (size_t i = 0; i < svc->nbufslots; i++)
        if (svc->bufs[i].id && svc->bufs[i].session &&
            svc->bufs[i].session->consumer_uid == uid)
            kb += tb_size(svc->bufs[i].buf) / 1024;
    return kb;
}

/* May uid start one more session? Sessions it started count, clones do
 * not (Perfetto's rule); those the buffer budget bounds. */
static int check_uid_sessions(const svc_service *svc, uid_t uid, char *err,
                              size_t errlen)
{
    if (!svc->max_sessions_per_uid)
        return 0;
    uint32_t n = 0;
    for (size_t i = 0; i < svc->nsessions; i++)
        if (!svc->sessions[i]->is_clone &&
            svc->sessions[i]->consumer_uid == uid)
            n++;
    if (n < svc->max_sessions_per_uid)
        return 0;
    if (err && errlen)
        snprintf(err, errlen, "too many tracing sessions for uid %lu: it has "
                 "%u and a uid may have %u at once (the service's "
                 "--max-sessions-per-uid); stop one of them, or free its "
                 "buffers (a detached session counts until it is freed)",
                 (unsigned long)uid, n, svc->max_sessions_per_uid);
    return -EUSERS;
}

/* May uid take kb more KB of buffers (what = "the config" or "the
 * clone")? The service's budget first, less its reserve unless uid is
 * root or the daemon's own (several users together must not lock the
 * owner out), then the uid's share of it: every uid's but the daemon's
 * own (the share keeps users from locking each other out, not the owner
 * from its own service, which may then clone a session as large as the
 * share). */
static int check_buffer_budget(const svc_service *svc, uid_t uid,
        uint64_t kb, const char *what, char *err, size_t errlen)
{
    bool owner = uid == 0 || uid == svc->uid;
    uint64_t total = svc->max_total_buffer_kb;
    uint64_t kept = owner ? 0 : svc->reserved_buffer_kb;
    uint64_t open = total > kept ? total - kept : 0;
    if (svc->total_buffer_kb + kb > open) {
        if (err && errlen) {
            char limit[128];
            if (svc->total_buffer_kb + kb <= total)   /* the kept part */
                snprintf(limit, sizeof limit, "keeps the last %llu KB of "
                         "its %llu KB for root and its own uid",
                         (unsigned long long)kept, (unsigned long long)total);
            else
                snprintf(limit, sizeof limit, "allows %llu KB",
                         (unsigned long long)total);
            snprintf(err, errlen, "%s needs %llu KB of buffers, but the "
                     "service holds %llu KB in all sessions and %s; ask for "
                     "less, or try again when sessions have ended", what,
                     (unsigned long long)kb,
                     (unsigned long long)svc->total_buffer_kb, limit);
        }
        return -ENOMEM;
    }
    uint64_t max = uid == svc->uid ? 0 : svc->max_buffer_kb_per_uid;
    uint64_t held = max ? uid_buffer_kb(svc, uid) : 0;
    if (max && held + kb > max) {
        if (err && errlen)
            snprintf(err, errlen, "%s needs %llu KB of buffers, but uid %lu "
                     "holds %llu KB in its sessions and clones, and a uid "
                     "may hold %llu KB (the service's --max-buffers-per-uid)"
                     "; ask for less, or end or free a session of yours",
                     what, (unsigned long long)kb, (unsigned long)uid,
                     (unsigned long long)held, (unsigned long long)max);
        return -EDQUOT;
    }
    return 0;
}

static int check_config(const svc_service *svc, uid_t uid,
        const Perfetto__Protos__TraceConfig *cfg, char *err, size_t errlen)
{
    if (cfg->n_buffers == 0) {
        svc__set_err(err, errlen, "the config has no buffers (add buffers { "
                "size_kb: N })%.0llu%.0llu", 0, 0);
        return -EINVAL;
    }
    if (cfg->n_buffers > SVC_MAX_BUFFERS_PER_SESSION) {
        svc__set_err(err, errlen, "too many buffers: %llu (max %llu)",
                cfg->n_buffers, SVC_MAX_BUFFERS_PER_SESSION);
        return -EINVAL;
    }
    bool guard = cfg->has_enable_extra_guardrails &&
                 cfg->enable_extra_guardrails;
    uint64_t total_kb = 0;
    for (size_t i = 0; i < cfg->n_buffers; i++) {
        const Perfetto__Protos__TraceConfig__BufferConfig *b = cfg->buffers[i];
        uint64_t kb = b->has_size_kb ? b->size_kb : 0;
        if (kb == 0 || kb * 1024 > 0xFFFFFFFFull) {
            svc__set_err(err, errlen, "buffer %llu: size_kb %llu is invalid "
                    "(must be 1..4194303)", i, kb);
            return -EINVAL;
        }
        if (guard && kb % 4) {
            svc__set_err(err, errlen, "buffer %llu: size_kb %llu is not a "
                    "multiple of 4 (extra guardrails)", i, kb);
            return -EINVAL;
        }
        if (b->has_fill_policy && b->fill_policy != 0 &&
            b->fill_policy != 1 && b->fill_policy != 2) {
            svc__set_err(err, errlen, "buffer %llu: unknown fill_policy %llu "
                    "(use RING_BUFFER or DISCARD)", i,
                    (unsigned long long)b->fill_policy);
            return -EINVAL;
        }
        total_kb += kb;
    }
    if (guard) {
        uint64_t max_kb = SVC_GUARDRAIL_TOTAL_KB;
        if (cfg->guardrail_overrides &&
            cfg->guardrail_overrides->has_max_tracing_buffer_size_kb &&
            cfg->guardrail_overrides->max_tracing_buffer_size_kb > max_kb)
            max_kb = cfg->guardrail_overrides->max_tracing_buffer_size_kb;
        if (total_kb > max_kb) {
            svc__set_err(err, errlen, "buffers total %llu KB exceed the "
                    "guardrail of %llu KB", total_kb, max_kb);
            return -EINVAL;
        }
    }
    int lrc = check_uid_sessions(svc, uid, err, errlen);
    if (lrc == 0)
        lrc = check_buffer_budget(svc, uid, total_kb, "the config", err,
                                  errlen);
    if (lrc < 0)
        return lrc;
    for (size_t i = 0; i < cfg->n_data_sources; i++) {
        const Perfetto__Protos__TraceConfig__DataSource *d =
            cfg->data_sources[i];
        if (!d->config || !d->config->name || !d->config->name[0]) {
            svc__set_err(err, errlen, "data source %llu has no name%.0llu", i, 0);
            return -EINVAL;
        }
        uint64_t tb = d->config->has_target_buffer ?
                      d->config->target_buffer : 0;
        if (tb >= cfg->n_buffers) {
            svc__set_err(err, errlen, "data source %llu: target_buffer %llu "
                    "does not exist", i, tb);
            return -EINVAL;
        }
        int rrc = svc__check_name_regexes(d, i, err, errlen);
        if (rrc < 0)
            return rrc;
    }
    int trc = svc__trigger_check_config(cfg, err, errlen);
    if (trc < 0)
        return trc;
    uint64_t dur = cfg->has_duration_ms ? cfg->duration_ms : 0;
    if (dur > (guard ? SVC_GUARDRAIL_DURATION_MS : SVC_MAX_DURATION_MS)) {
        svc__set_err(err, errlen, "duration_ms %llu is too long (max %llu)", dur,
                guard ? SVC_GUARDRAIL_DURATION_MS : SVC_MAX_DURATION_MS);
        return -EINVAL;
    }
    if (cfg->unique_session_name && cfg->unique_session_name[0]) {
        /* Names are per uid: another user's names are neither revealed
         * nor able to block this one. */
        for (size_t i = 0; i < svc->nsessions; i++) {
            const char *n = svc->sessions[i]->cfg->unique_session_name;
            if (!svc->sessions[i]->is_clone && svc->sessions[i]->consumer_uid == uid &&
                n &&
                strcmp(n, cfg->unique_session_name) == 0) {
                svc__set_err(err, errlen, "a session with this "
                        "unique_session_name is already running%.0llu%.0llu",
                        0, 0);
                return -EEXIST;
            }
        }
    }
    return 0;
}

void *svc_pb_copy(const ProtobufCMessage *msg)
{
    size_t n = protobuf_c_message_get_packed_size(msg);
    uint8_t *tmp = malloc(n ? n : 1);
    if (!tmp)
        return NULL;
    protobuf_c_message_pack(msg, tmp);
    ProtobufCMessage *c = protobuf_c_message_unpack(msg->descriptor, NULL,
                                                    n, tmp);
    free(tmp);
    return c;
}

/* The session owns its config: a deep copy. */
static Perfetto__Protos__TraceConfig *copy_config(
        const Perfetto__Protos__TraceConfig *cfg)
{
    return svc_pb_copy(&cfg->base);
}

/* ---------------------------------------------------------------- matching */

static bool name_filter_ok(const Perfetto__Protos__TraceConfig__DataSource *d,
                           const char *producer_name)
{
    if (d->n_producer_name_filter == 0 && d->n_producer_name_regex_filter == 0)
        return true;
    for (size_t i = 0; i < d->n_producer_name_filter; i++)
        if (strcmp(d->producer_name_filter[i], producer_name) == 0)
            return true;
    for (size_t i = 0; i < d->n_producer_name_regex_filter; i++)
        if (svc_regex_full_match(d->producer_name_regex_filter[i],
                                 producer_name))
            return true;
    return false;
}

/* A DataSourceConfig.SessionInitiator value, by its short name. */
#define SVC_DS_INITIATOR(x) \
    PERFETTO__PROTOS__DATA_SOURCE_CONFIG__SESSION_INITIATOR__SESSION_INITIATOR_##x

/* Sets up and starts one instance of config entry `di` in producer p. */
static int start_instance(svc_service *svc, svc_session *s, svc_producer *p,
                          const svc_dsreg *r, size_t di)
{
    const Perfetto__Protos__TraceConfig__DataSource *d =
        s->cfg->data_sources[di];
    uint32_t bi = d->config->has_target_buffer ? d->config->target_buffer : 0;
    uint32_t gid = s->buf_ids[bi];
    if (p->smb_fd < 0) {
        int rc = svc__smb_setup(svc, p, s->cfg);
        if (rc < 0) {
            char why[128];
            if (rc == -EDQUOT)
                snprintf(why, sizeof why, "its uid's producers hold all "
                         "the shared memory a uid may have (%u GiB)",
                         SVC_MAX_SMB_BYTES_PER_UID >> 30);
            else
                snprintf(why, sizeof why, "%s", strerror(-rc));
            char dsn[SVC_LOG_NAME_BYTES], pn[SVC_LOG_NAME_BYTES];
            fprintf(stderr, "shmtraced: session %llu: data source \"%s\" "
                    "of producer \"%s\" (uid %lu pid %ld) not started: %s\n",
                    (unsigned long long)s->id,
                    svc_log_str(dsn, sizeof dsn, r->name, SVC_LOG_NAME_MAX),
                    svc_log_str(pn, sizeof pn, p->name, SVC_LOG_NAME_MAX),
                    (unsigned long)p->uid, (long)p->pid, why);
            return rc;
        }
        if (svc->ops.setup_tracing)
            svc->ops.setup_tracing(svc->ops_ctx, p->conn, p->smb_fd,
                                   (uint32_t)(p->smb_page_size / 1024));
    }
    svc_instance *g = realloc(s->inst, (s->ninst + 1) * sizeof(*g));
    if (!g)
        return -ENOMEM;
    s->inst = g;
    svc_instance *in = &s->inst[s->ninst];
    memset(in, 0, sizeof(*in));
    in->name = strdup(r->name);
    if (!in->name || svc__producer_allow(p, gid) < 0 ||
        svc__session_use_producer(s, p->id) < 0) {
        free(in->name);
        return -ENOMEM;
    }
    svc__loss_producer_joined(s, p);
    in->instance_id = ++svc->last_instance_id;
    in->producer_id = p->id;
    in->buffer_id = gid;
    in->buffer_index = bi;
    in->notify_on_stop = r->will_notify_on_stop;
    in->no_flush = r->no_flush;
    in->start_pending = r->will_notify_on_start;   /* svc_start.c */
    in->state = SVC_INST_STARTED;
    s->ninst++;
    /* A shallow copy is enough to re-encode with the fields the service
     * owns set as Perfetto's service sets them (SetupDataSource in
     * tracing_service_impl.cc): the buffer, the session, its duration,
     * the stop timeout and guardrails, the suspend-aware duration when the
     * session asks for it (else the consumer's), and session_initiator
     * reset: a consumer must not tell producers that a trusted system
     * component started the session (a producer may grant such a session
     * more), and no consumer of shmtraced is one. */
    const Perfetto__Protos__TraceConfig *tc = s->cfg;
    Perfetto__Protos__DataSourceConfig c = *d->config;
    c.has_target_buffer = true;
    c.target_buffer = gid;
    c.has_tracing_session_id = true;
    c.tracing_session_id = s->id;
    c.has_trace_duration_ms = true;
    c.trace_duration_ms = tc->has_duration_ms ? tc->duration_ms : 0;
    if (tc->has_prefer_suspend_clock_for_duration &&
        tc->prefer_suspend_clock_for_duration) {
        c.has_prefer_suspend_clock_for_duration = true;
        c.prefer_suspend_clock_for_duration = true;
    }
    c.has_stop_timeout_ms = true;
    c.stop_timeout_ms = tc->has_data_source_stop_timeout_ms &&
                        tc->data_source_stop_timeout_ms ?
                        tc->data_source_stop_timeout_ms :
                        SVC_DEFAULT_STOP_TIMEOUT_MS;
    c.has_enable_extra_guardrails = true;
    c.enable_extra_guardrails = tc->has_enable_extra_guardrails &&
                                tc->enable_extra_guardrails;
    c.has_session_initiator = true;
    c.session_initiator = SVC_DS_INITIATOR(UNSPECIFIED);
    if (svc->ops.setup_data_source)
        svc->ops.setup_data_source(svc->ops_ctx, p->conn, in->instance_id, &c);
    if (svc->ops.start_data_source)
        svc->ops.start_data_source(svc->ops_ctx, p->conn, in->instance_id, &c);
    return 0;
}

static bool has_instance(const svc_session *s, uint16_t producer_id,
                         const char *name, uint32_t buffer_id)
{
    for (size_t i = 0; i < s->ninst; i++)
        if (s->inst[i].producer_id == producer_id &&
            s->inst[i].buffer_id == buffer_id &&
            strcmp(s->inst[i].name, name) == 0)
            return true;
    return false;
}

static void match_producer(svc_service *svc, svc_session *s, svc_producer *p,
                           const svc_dsreg *only)
{
    for (size_t di = 0; di < s->cfg->n_data_sources; di++) {
        const Perfetto__Protos__TraceConfig__DataSource *d =
            s->cfg->data_sources[di];
        for (size_t k = 0; k < p->nds; k++) {
            const svc_dsreg *r = &p->ds[k];
            if (only && r != only)
                continue;
            if (strcmp(r->name, d->config->name) != 0 ||
                !name_filter_ok(d, p->name))
                continue;
            uint32_t bi = d->config->has_target_buffer ?
                          d->config->target_buffer : 0;
            if (has_instance(s, p->id, r->name, s->buf_ids[bi]))
                continue;
            start_instance(svc, s, p, r, di);
        }
    }
}

/* Every connected producer again (ChangeTraceConfig widened a filter). */
void svc__session_rematch(svc_service *svc, svc_session *s)
{
    if (s->is_clone || s->state != SVC_SESSION_STARTED)
        return;
    for (size_t i = 0; i < svc->nproducers; i++)
        match_producer(svc, s, svc->producers[i], NULL);
}

void svc__session_match_new_ds(svc_service *svc, svc_producer *p,
                               const svc_dsreg *r)
{
    for (size_t i = 0; i < svc->nsessions; i++) {
        svc_session *s = svc->sessions[i];
        if (!s->is_clone && s->state == SVC_SESSION_STARTED)
            match_producer(svc, s, p, r);
    }
}

/* ---------------------------------------------------------------- enable */

static void session_unlink(svc_service *svc, svc_session *s)
{
    for (size_t i = 0; i < svc->nsessions; i++)
        if (svc->sessions[i] == s) {
            svc->sessions[i] = svc->sessions[--svc->nsessions];
            return;
        }
}

#define SVC_PRODUCER_BITMAP_BYTES (65536 / 8)

int svc__session_use_producer(svc_session *s, uint16_t producer_id)
{
    if (!s->producers_used &&
        !(s->producers_used = calloc(1, SVC_PRODUCER_BITMAP_BYTES)))
        return -ENOMEM;
    s->producers_used[producer_id >> 3] |= (uint8_t)(1u << (producer_id & 7));
    return 0;
}

bool svc__session_used_producer(const svc_session *s, uint16_t producer_id)
{
    return s->producers_used &&
           (s->producers_used[producer_id >> 3] >> (producer_id & 7)) & 1;
}

static void session_destroy(svc_service *svc, svc_session *s)
{
    for (size_t i = 0; i < s->nbufs; i++)
        if (s->buf_ids[i])
            svc__buffer_remove(svc, s->buf_ids[i]);
    for (size_t i = 0; i < s->ninst; i++)
        free(s->inst[i].name);
    svc__trigger_free(&s->trig);
    free(s->detach_key);
    free(s->buf_cloned_ns);
    for (size_t i = 0; i < s->nflushes; i++)
        free(s->flushes[i].pending);
    free(s->flushes);
    for (uint32_t i = 0; i < s->nslow_flushes; i++)
        svc__slow_flush_free(&s->slow_flushes[i]);
    free(s->slow_flushes);
    svc__slow_list_drop(&s->slow_start);
    free(s->inst);
    free(s->buf_ids);
    free(s->producers_used);
    svc__seqmap_free(&s->seqs);
    svc__loss_free(s);
    free(s->scratch);
    svc__file_wait(svc, s);      /* nothing in flight to its file */
    /* a direct session freed before its end (its consumer gone, or its
     * enable failed): its tail too, and O_DIRECT off the descriptor the
     * consumer shares (svc_direct.c) */
    svc__direct_finish(s);
    svc__file_batches_free(svc, s);
    if (s->out_fd >= 0) {
        svc_prealloc_trim(&s->prealloc, s->out_fd);
        close(s->out_fd);
    }
    perfetto__protos__trace_config__free_unpacked(s->cfg, NULL);
    free(s);
}

static svc_session *session_new(svc_service *svc, void *consumer,
        uid_t uid, const Perfetto__Protos__TraceConfig *cfg)
{
    svc_session **g = realloc(svc->sessions,
                              (svc->nsessions + 1) * sizeof(*g));
    if (!g)
        return NULL;
    svc->sessions = g;
    svc_session *s = calloc(1, sizeof(*s));
    if (!s)
        return NULL;
    s->out_fd = -1;
    s->consumer = consumer;
    s->consumer_uid = uid;
    s->cfg = copy_config(cfg);
    s->buf_ids = calloc(cfg->n_buffers ? cfg->n_buffers : 1,
                        sizeof(*s->buf_ids));
    if (!s->cfg || !s->buf_ids) {
        if (s->cfg)
            perfetto__protos__trace_config__free_unpacked(s->cfg, NULL);
        free(s->buf_ids);
        free(s);
        return NULL;
    }
    s->id = ++svc->last_session_id;
    s->seqs.next_id = 2;
    uint64_t r[2] = {0, 0};
    if (getrandom(r, sizeof(r), 0) != (ssize_t)sizeof(r)) {
        r[0] = svc_now_ms() ^ ((uint64_t)getpid() << 32);
        r[1] = s->id ^ (uint64_t)(uintptr_t)s;
    }
    s->uuid_msb = (int64_t)r[0];
    s->uuid_lsb = (int64_t)r[1];
    svc->sessions[svc->nsessions++] = s;
    return s;
}

static void session_start(svc_service *svc, svc_session *s);

int svc__check_passed_fd(const svc_service *svc, uid_t uid, int fd,
                         const char *what, char *msg, size_t len)
{
    /* Another user's file system could block the service (FUSE): checked
     * before anything (fstat included) touches the file. */
    int rc = uid != svc->uid ? ipc_file_check_not_fuse(fd, what, msg, len)
                             : 0;
    return rc < 0 ? rc : ipc_file_check_fd(fd, what, msg, len);
}

/* The file of a write_into_file session: the consumer's fd (checked), or
 * output_path opened by the service for its own uid only. Returns the fd,
 * -1 when the session writes no file, or -2 on refusal (err set). Closes
 * out_fd when it is not used. */
static int session_file(svc_service *svc, uid_t uid,
        const Perfetto__Protos__TraceConfig *cfg, int out_fd, char *err,
        size_t errlen)
{
    bool to_file = cfg->has_write_into_file && cfg->write_into_file;
    char msg[400];
    if (!to_file) {
        if (out_fd >= 0)
            close(out_fd);
        return -1;
    }
    if (out_fd >= 0) {
        if (svc__check_passed_fd(svc, uid, out_fd, "the file passed with "
                                 "EnableTracing", msg, sizeof msg) < 0) {
            if (err && errlen)
                snprintf(err, errlen, "write_into_file: %s (pass a regular "
                         "file opened for writing)", msg);
            close(out_fd);
            return -2;
        }
        return out_fd;
    }
    if (!cfg->output_path || !cfg->output_path[0]) {
        svc__set_err(err, errlen, "write_into_file needs an output file (pass "
                "an fd or set output_path)%.0llu%.0llu", 0, 0);
        return -2;
    }
    if (uid != svc->uid) {
        /* The daemon (often root) cannot prove that this user may create
         * that path: it would be creating or truncating it with its own
         * rights. The client opens the file with the user's rights. */
        if (err && errlen)
            snprintf(err, errlen, "output_path %s refused: the service "
                     "(uid %lu) does not create files for another user "
                     "(uid %lu); let the client open the file and pass it "
                     "with EnableTracing (shmtrace record -o FILE does)",
                     cfg->output_path, (unsigned long)svc->uid,
                     (unsigned long)uid);
        return -2;
    }
    /* read-write: a clone reads the session's file back through it */
    int fd = ipc_file_open_output(cfg->output_path, true, msg, sizeof msg);
    if (fd < 0) {
        if (err && errlen)
            snprintf(err, errlen, "output_path: %s", msg);
        return -2;
    }
    return fd;
}

svc_session *svc_session_enable(svc_service *svc, void *consumer,
        const Perfetto__Protos__TraceConfig *cfg, int out_fd, char *err,
        size_t errlen)
{
    return svc_session_enable_uid(svc, consumer, svc->uid, cfg, out_fd, err,
                                  errlen);
}

svc_session *svc_session_enable_uid(svc_service *svc, void *consumer,
        uid_t uid, const Perfetto__Protos__TraceConfig *cfg, int out_fd,
        char *err, size_t errlen)
{
    if (!cfg) {
        svc__set_err(err, errlen, "EnableTracing without a trace_config"
                "%.0llu%.0llu", 0, 0);
        if (out_fd >= 0)
            close(out_fd);
        return NULL;
    }
    if (check_config(svc, uid, cfg, err, errlen) < 0) {
        if (out_fd >= 0)
            close(out_fd);
        return NULL;
    }
    out_fd = session_file(svc, uid, cfg, out_fd, err, errlen);
    if (out_fd == -2)
        return NULL;
    svc_session *s = session_new(svc, consumer, uid, cfg);
    if (!s) {
        svc__set_err(err, errlen, "out of memory%.0llu%.0llu", 0, 0);
        if (out_fd >= 0)
            close(out_fd);
        return NULL;
    }
    s->out_fd = out_fd;
    if (out_fd >= 0) {
        s->out_base = svc__file_base(out_fd);
        svc_prealloc_init(&s->prealloc, s->out_base,
                          cfg->has_max_file_size_bytes ?
                          cfg->max_file_size_bytes : 0);
        if (svc->file_direct)
            svc__direct_open(s);
    }
    for (size_t i = 0; i < cfg->n_buffers; i++) {
        const Perfetto__Protos__TraceConfig__BufferConfig *b = cfg->buffers[i];
        tb_fill_policy pol = b->has_fill_policy && b->fill_policy == 2 ?
                             TB_DISCARD : TB_RING_BUFFER;
        tb_buffer *buf = tb_create((size_t)b->size_kb * 1024, pol);
        uint32_t id = buf ? svc__buffer_add(svc, buf, s) : 0;
        if (!id) {
            svc__set_err(err, errlen, "cannot allocate buffer %llu (%llu KB): "
                    "out of memory", i, b->size_kb);
            session_unlink(svc, s);
            session_destroy(svc, s);
            return NULL;
        }
        s->buf_ids[i] = id;
        s->nbufs = i + 1;
        svc->total_buffer_kb += tb_size(buf) / 1024;
    }
    /* A START_TRACING trigger_config waits like deferred_start (whichever
     * comes first starts the session). */
    bool wait_trigger = svc__trigger_setup(svc, s);
    if ((cfg->has_deferred_start && cfg->deferred_start) || wait_trigger) {
        s->state = SVC_SESSION_CONFIGURED;   /* svc_session_start() */
        return s;
    }
    session_start(svc, s);
    return s;
}

/* Arms the timers and starts the data sources (EnableTracing, or
 * StartTracing for a deferred_start session). */
static void session_start(svc_service *svc, svc_session *s)
{
    const Perfetto__Protos__TraceConfig *cfg = s->cfg;
    bool to_file = s->out_fd >= 0;
    uint64_t now = svc_now_ms();
    svc__suspend_start(svc, s);
    if (cfg->has_duration_ms && cfg->duration_ms)
        s->duration_deadline_ms = svc__timer_now(svc, s, now,
                s->duration_suspend_aware) + cfg->duration_ms;
    if (to_file) {
        uint32_t per = cfg->has_file_write_period_ms ?
                       cfg->file_write_period_ms : 0;
        if (per == 0)
            per = SVC_DEFAULT_FILE_PERIOD_MS;
        if (per < SVC_MIN_FILE_PERIOD_MS)
            per = SVC_MIN_FILE_PERIOD_MS;
        s->file_write_period_ms = per;
        s->next_file_write_ms = now + per;
        svc__file_pass_mark(svc, s);
        s->max_file_size_bytes = cfg->has_max_file_size_bytes ?
                                 cfg->max_file_size_bytes : 0;
    }
    s->flush_period_ms = cfg->has_flush_period_ms ? cfg->flush_period_ms : 0;
    if (to_file) {
        /* write_flush_mode (file mode only): AUTO/UNSPECIFIED flush every
         * 5 s (or at each write when writes are rarer), ENABLED at each
         * write, DISABLED falls back to flush_period_ms. */
        int mode = cfg->has_write_flush_mode ? (int)cfg->write_flush_mode : 0;
        if (mode == 0 || mode == 1)
            s->flush_period_ms = s->file_write_period_ms <= 5000 ?
                                 5000 : s->file_write_period_ms;
        else if (mode == 3)
            s->flush_period_ms = s->file_write_period_ms;
    }
    if (s->flush_period_ms)
        s->next_periodic_flush_ms = now + s->flush_period_ms;
    struct timespec rt;
    clock_gettime(CLOCK_REALTIME, &rt);
    s->start_realtime_ns = (uint64_t)rt.tv_sec * 1000000000u +
                           (uint64_t)rt.tv_nsec;
    s->state = SVC_SESSION_STARTED;
    s->ev_started_ns = svc__boottime_ns();
    s->start_ack_deadline_ms = now + SVC_START_ACK_TIMEOUT_MS;
    svc__clocks_start(s, svc__timer_now(svc, s, now,
                                        s->snapshot_suspend_aware));
    for (size_t i = 0; i < svc->nproducers; i++)
        match_producer(svc, s, svc->producers[i], NULL);
    svc__start_check(svc, s);
}

int svc_session_start(svc_service *svc, svc_session *s)
{
    if (s->state != SVC_SESSION_CONFIGURED)
        return s->state == SVC_SESSION_STARTED ? 0 : -EINVAL;
    session_start(svc, s);
    return 0;
}

void svc__session_drop_ds(svc_service *svc, svc_producer *p, const char *name)
{
    for (size_t si = 0; si < svc->nsessions; si++) {
        svc_session *s = svc->sessions[si];
        for (size_t k = 0; k < s->ninst;) {
            svc_instance *in = &s->inst[k];
            if (in->producer_id == p->id && strcmp(in->name, name) == 0) {
                if (in->state == SVC_INST_STARTED &&
                    svc->ops.stop_data_source)
                    svc->ops.stop_data_source(svc->ops_ctx, p->conn,
                                              in->instance_id);
                free(in->name);
                s->inst[k] = s->inst[--s->ninst];
            } else {
                k++;
            }
        }
        svc__start_check(svc, s);   /* it may have been the last unacked */
    }
}

/* ---------------------------------------------------------------- free */

void svc_session_free(svc_service *svc, svc_session *s)
{
    if (!s)
        return;
    for (size_t k = 0; k < s->ninst; k++) {
        svc_instance *in = &s->inst[k];
        svc_producer *p = svc__producer_by_id(svc, in->producer_id);
        if (p && in->state == SVC_INST_STARTED && svc->ops.stop_data_source)
            svc->ops.stop_data_source(svc->ops_ctx, p->conn, in->instance_id);
    }
    /* A clone waiting for this session's flush hears that it is gone
     * (the daemon answers it later, from its loop, without the session). */
    for (size_t i = 0; i < s->nflushes; i++)
        if (s->flushes[i].kind == SVC_FLUSH_CLONE && svc->ops.clone_flush_done)
            svc->ops.clone_flush_done(svc->ops_ctx, s->flushes[i].token,
                                      true);
    session_unlink(svc, s);
    session_destroy(svc, s);
}

/* ---------------------------------------------------------------- clone */

static svc_session *clone_impl(svc_service *svc, void *consumer, uid_t uid,
        bool trusted, uint64_t session_id, const char *unique_name,
        char *err, size_t errlen);

svc_session *svc_session_clone(svc_service *svc, void *consumer,
        uint64_t session_id, const char *unique_name, char *err,
        size_t errlen)
{
    return clone_impl(svc, consumer, svc->uid, true, session_id,
                      unique_name, err, errlen);
}

/* The session a CloneSession names, among those uid may access: pass 0
 * looks at uid's own sessions, pass 1 at the others it may reach (root). */
static svc_session *clone_source(svc_service *svc, uid_t uid, bool trusted,
        uint64_t session_id, const char *unique_name)
{
    for (int pass = 0; pass < 2; pass++) {
        for (size_t i = 0; i < svc->nsessions; i++) {
            svc_session *s = svc->sessions[i];
            if (s->is_clone || (!trusted && !svc__may_access(svc, uid, s)) ||
                (pass == 0) != (s->consumer_uid == uid))
                continue;
            if (unique_name && unique_name[0]) {
                if (s->cfg->unique_session_name &&
                    strcmp(s->cfg->unique_session_name, unique_name) == 0)
                    return s;
            } else if (s->id == session_id || session_id == UINT64_MAX) {
                return s;
            }
        }
    }
    return NULL;
}

int svc_session_flush_for_clone(svc_service *svc, uid_t uid,
        uint64_t session_id, const char *unique_name, uint64_t token)
{
    svc_session *src = clone_source(svc, uid, false, session_id,
                                    unique_name);
    return src ? svc__flush_for_clone(svc, src, token) : 0;
}

svc_session *svc_session_clone_uid(svc_service *svc, void *consumer,
        uid_t uid, uint64_t session_id, const char *unique_name, char *err,
        size_t errlen)
{
    return clone_impl(svc, consumer, uid, false, session_id, unique_name,
                      err, errlen);
}

static svc_session *clone_impl(svc_service *svc, void *consumer, uid_t uid,
        bool trusted, uint64_t session_id, const char *unique_name,
        char *err, size_t errlen)
{
    svc_session *src = clone_source(svc, uid, trusted, session_id,
                                    unique_name);
    if (!src) {
        /* The same words whether it does not exist or is not yours. */
        if (err && errlen && unique_name && unique_name[0])
            snprintf(err, errlen, "no tracing session named '%s' to clone "
                     "among yours (it may have ended)", unique_name);
        else if (err && errlen && session_id != UINT64_MAX)
            snprintf(err, errlen, "no tracing session %llu to clone among "
                     "yours (it may have ended)",
                     (unsigned long long)session_id);
        else if (err && errlen)
            snprintf(err, errlen, "no tracing session to clone among yours");
        return NULL;
    }
    uint64_t clone_kb = 0;
    for (size_t i = 0; i < src->nbufs; i++) {
        tb_buffer *src_buf = svc__buffer(svc, src->buf_ids[i], NULL);
        clone_kb += src_buf ? tb_size(src_buf) / 1024 : 0;
    }
    /* A clone copies the source's buffers: it takes its share of the
     * budget like any session (without this check, clones held without
     * end grew the daemon past any bound). */
    if (check_buffer_budget(svc, uid, clone_kb, "the clone", err,
                            errlen) < 0)
        return NULL;
    svc__scrape_session(svc, src);
    svc_session *s = session_new(svc, consumer, uid, src->cfg);
    if (!s) {
        svc__set_err(err, errlen, "out of memory%.0llu%.0llu", 0, 0);
        return NULL;
    }
    s->is_clone = true;
    s->cloned_from = src->id;
    s->clone_started_ns = svc__boottime_ns();
    s->buf_cloned_ns = calloc(src->nbufs ? src->nbufs : 1, sizeof(uint64_t));
    s->state = SVC_SESSION_DISABLED;
    s->notified_disabled = true;
    s->ev_started_ns = src->ev_started_ns;
    s->ev_all_started_ns = src->ev_all_started_ns;
    svc__clocks_clone(s, src);
    for (size_t i = 0; i < src->nbufs; i++) {
        tb_buffer *src_buf = svc__buffer(svc, src->buf_ids[i], NULL);
        tb_buffer *b = src_buf ? tb_clone_readonly(src_buf) : NULL;
        uint32_t id = b ? svc__buffer_add(svc, b, s) : 0;
        if (!id) {
            svc__set_err(err, errlen, "cannot clone buffer %llu: out of memory"
                    "%.0llu", i, 0);
            session_unlink(svc, s);
            session_destroy(svc, s);
            return NULL;
        }
        s->buf_ids[i] = id;
        s->nbufs = i + 1;
        svc->total_buffer_kb += tb_size(b) / 1024;
        if (s->buf_cloned_ns)
            s->buf_cloned_ns[i] = svc__boottime_ns();
    }
    if (src->producers_used &&
        (s->producers_used = malloc(SVC_PRODUCER_BITMAP_BYTES)) != NULL)
        memcpy(s->producers_used, src->producers_used,
               SVC_PRODUCER_BITMAP_BYTES);
    if ((src->producers_used && !s->producers_used) ||
        svc__seqmap_copy(&s->seqs, &src->seqs) < 0 ||
        svc__loss_copy(s, src) < 0) {
        session_unlink(svc, s);
        session_destroy(svc, s);
        svc__set_err(err, errlen, "out of memory%.0llu%.0llu", 0, 0);
        return NULL;
    }
    svc__trigger_clone(s, src, NULL);
    return s;
}
