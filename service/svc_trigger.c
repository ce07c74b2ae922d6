/*
 * svc_trigger.c - TraceConfig.trigger_config and
 * incremental_state_config.clear_period_ms for shmtraced's sessions.
 *
 * Triggers (Perfetto's semantics, tracing_service_impl.cc ActivateTriggers):
 *   START_TRACING  the session is configured but its data sources start only
 *                  when a trigger arrives; it then lasts stop_delay_ms (0 =
 *                  until stopped). No trigger within trigger_timeout_ms: the
 *                  session is disabled and returns no data.
 *   STOP_TRACING   the session traces normally; the first trigger stops it
 *                  stop_delay_ms later (replacing the timeout). No trigger
 *                  within trigger_timeout_ms: disabled, and no data at all.
 *   CLONE_SNAPSHOT the session traces until trigger_timeout_ms; each trigger
 *                  asks its consumer, stop_delay_ms later, to clone it
 *                  (svc_ops.clone_trigger_hit -> ObservableEvents); the
 *                  session itself never returns data, only its clones do.
 * A trigger matches a session if the name is in its config, the producer's
 * name fully matches producer_name_regex (if set), a random draw in [0,1)
 * is >= skip_probability, and fewer than max_per_24_h triggers of that name
 * matched any session in the last 24 hours (a service-wide history of
 * (time, name hash), bounded: see SVC_TRIG_HISTORY_MAX). Every match is
 * recorded and becomes a `trigger` packet (TracePacket field 46) on the
 * service sequence, timestamped when it arrived; a clone takes the source's
 * received triggers with it (the source starts a fresh list, as Perfetto
 * does so that long CLONE_SNAPSHOT sessions neither repeat nor hoard them)
 * and a clone made for a trigger also carries `clone_snapshot_trigger`
 * (field 113).
 *
 * Incremental state: with clear_period_ms the session sends every producer
 * ClearIncrementalState for its instances every period while started.
 *
 * Everything here runs on the service thread; timers are folded into
 * svc_next_deadline_ms/svc_tick through svc__trigger_deadline/_tick.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "svc_int.h"
#include "svc_log.h"

#define SVC_TRIG_HISTORY_MAX   65536u
#define SVC_TRIG_MAX_RECEIVED  4096u   /* per session, kept for the trace */
#define SVC_TRIG_MAX_PENDING   64u     /* CLONE_SNAPSHOT hits in flight */
#define SVC_TRIG_DAY_NS        (24ull * 3600 * 1000000000ull)
#define SVC_MIN_CLEAR_PERIOD_MS 10u

typedef Perfetto__Protos__TraceConfig__TriggerConfig trig_cfg;

static int config_mode(const Perfetto__Protos__TraceConfig *cfg)
{
    const trig_cfg *t = cfg->trigger_config;
    if (!t)
        return SVC_TRIG_NONE;
    if (t->has_use_clone_snapshot_if_available &&
        t->use_clone_snapshot_if_available)
        return SVC_TRIG_CLONE;
    return t->has_trigger_mode ? (int)t->trigger_mode : SVC_TRIG_NONE;
}

int svc__trigger_check_config(const Perfetto__Protos__TraceConfig *cfg,
                              char *err, size_t errlen)
{
    const trig_cfg *t = cfg->trigger_config;
    if (cfg->incremental_state_config &&
        cfg->incremental_state_config->has_clear_period_ms &&
        cfg->incremental_state_config->clear_period_ms &&
        cfg->incremental_state_config->clear_period_ms <
            SVC_MIN_CLEAR_PERIOD_MS) {
        svc__set_err(err, errlen, "incremental_state_config.clear_period_ms "
                "%llu is too short (min %llu ms)",
                cfg->incremental_state_config->clear_period_ms,
                SVC_MIN_CLEAR_PERIOD_MS);
        return -EINVAL;
    }
    for (const char *c = cfg->bugreport_filename; c && *c; c++) {
        if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') ||
              (*c >= '0' && *c <= '9') || *c == '-' || *c == '_' ||
              *c == '.')) {
            svc__set_err(err, errlen, "bugreport_filename contains invalid "
                    "characters (use [a-zA-Z0-9-_.])%.0llu%.0llu", 0, 0);
            return -EINVAL;
        }
    }
    if (!t)
        return 0;
    int raw = t->has_trigger_mode ? (int)t->trigger_mode : 0;
    if (raw != 0 && raw != SVC_TRIG_START && raw != SVC_TRIG_STOP &&
        raw != SVC_TRIG_CLONE) {
        svc__set_err(err, errlen, "trigger_config: unknown trigger_mode %llu "
                "(use START_TRACING, STOP_TRACING or CLONE_SNAPSHOT)%.0llu",
                (unsigned long long)raw, 0);
        return -EINVAL;
    }
    if (t->has_use_clone_snapshot_if_available &&
        t->use_clone_snapshot_if_available && raw != SVC_TRIG_STOP) {
        svc__set_err(err, errlen, "trigger_config: trigger_mode must be "
                "STOP_TRACING when use_clone_snapshot_if_available=true"
                "%.0llu%.0llu", 0, 0);
        return -EINVAL;
    }
    int mode = config_mode(cfg);
    if (mode == SVC_TRIG_NONE)
        return 0;
    uint32_t timeout = t->has_trigger_timeout_ms ? t->trigger_timeout_ms : 0;
    bool guard = cfg->has_enable_extra_guardrails &&
                 cfg->enable_extra_guardrails;
    uint64_t max = guard ? SVC_GUARDRAIL_DURATION_MS : SVC_MAX_DURATION_MS;
    if (timeout == 0 || timeout > max) {
        svc__set_err(err, errlen, "trigger_config needs a positive "
                "trigger_timeout_ms of at most %llu ms (got %llu)", max,
                timeout);
        return -EINVAL;
    }
    if (cfg->has_duration_ms && cfg->duration_ms) {
        svc__set_err(err, errlen, "duration_ms must not be set with a "
                "trigger_config (trigger_timeout_ms and stop_delay_ms bound "
                "the session)%.0llu%.0llu", 0, 0);
        return -EINVAL;
    }
    if ((mode == SVC_TRIG_STOP || mode == SVC_TRIG_CLONE) &&
        cfg->has_write_into_file && cfg->write_into_file) {
        svc__set_err(err, errlen, "trigger mode STOP_TRACING/CLONE_SNAPSHOT "
                "and write_into_file together are unsupported (as in "
                "Perfetto)%.0llu%.0llu", 0, 0);
        return -EINVAL;
    }
    for (size_t i = 0; i < t->n_triggers; i++) {
        const char *ni = t->triggers[i]->name ? t->triggers[i]->name : "";
        for (size_t j = 0; j < i; j++) {
            const char *nj = t->triggers[j]->name ? t->triggers[j]->name : "";
            if (strcmp(ni, nj) == 0) {
                if (err && errlen)
                    snprintf(err, errlen, "duplicate trigger name: %s", ni);
                return -EINVAL;
            }
        }
        const char *re = t->triggers[i]->producer_name_regex;
        char why[160];
        if (re && re[0] && svc_regex_check(re, why, sizeof why) < 0) {
            if (err && errlen)
                snprintf(err, errlen, "trigger %s: producer_name_regex "
                         "\"%.100s%s\" refused: %s", ni, re,
                         strlen(re) > 100 ? "..." : "", why);
            return -EINVAL;
        }
    }
    return 0;
}

bool svc__trigger_setup(svc_service *svc, svc_session *s)
{
    svc_trig_state *t = &s->trig;
    const Perfetto__Protos__TraceConfig__IncrementalStateConfig *ic =
        s->cfg->incremental_state_config;
    t->clear_period_ms = ic && ic->has_clear_period_ms ?
                         ic->clear_period_ms : 0;
    t->mode = config_mode(s->cfg);
    if (t->mode == SVC_TRIG_NONE)
        return false;
    uint32_t timeout = s->cfg->trigger_config->trigger_timeout_ms;
    if (t->mode == SVC_TRIG_START) {
        t->start_timeout_ms = svc_now_ms() + timeout;
        return true;
    }
    /* STOP/CLONE: no trigger -> the session ends at the timeout. Perfetto
     * writes the timeout into the config's duration_ms (and so into the
     * trace_config echo); we do the same. */
    s->cfg->has_duration_ms = true;
    s->cfg->duration_ms = timeout;
    (void)svc;
    return false;
}

/* ---------------------------------------------------------------- history */

static uint64_t fnv1a(const char *s)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (; *s; s++) {
        h ^= (uint8_t)*s;
        h *= 0x100000001b3ull;
    }
    return h;
}

/* Drops entries older than 24 h; returns how many of `hash` remain. */
static size_t history_count(svc_service *svc, uint64_t now_ns, uint64_t hash)
{
    while (svc->trig_hist_len) {
        uint64_t ns = svc->trig_hist[svc->trig_hist_head].ns;
        if (now_ns >= ns && now_ns - ns <= SVC_TRIG_DAY_NS)
            break;
        svc->trig_hist_head = (svc->trig_hist_head + 1) % svc->trig_hist_cap;
        svc->trig_hist_len--;
    }
    size_t n = 0;
    for (size_t i = 0; i < svc->trig_hist_len; i++)
        if (svc->trig_hist[(svc->trig_hist_head + i) % svc->trig_hist_cap]
                .hash == hash)
            n++;
    return n;
}

static void history_add(svc_service *svc, uint64_t now_ns, uint64_t hash)
{
    if (svc->trig_hist_len == svc->trig_hist_cap) {
        if (svc->trig_hist_cap >= SVC_TRIG_HISTORY_MAX) {
            /* Full: forget the oldest (a flood of triggers can only make
             * max_per_24_h more permissive, never grow our memory). */
            svc->trig_hist_head = (svc->trig_hist_head + 1) %
                                  svc->trig_hist_cap;
            svc->trig_hist_len--;
        } else {
            size_t cap = svc->trig_hist_cap ? svc->trig_hist_cap * 2 : 64;
            void *g = malloc(cap * sizeof(*svc->trig_hist));
            if (!g)
                return;
            for (size_t i = 0; i < svc->trig_hist_len; i++)
                memcpy((char *)g + i * sizeof(*svc->trig_hist),
                       &svc->trig_hist[(svc->trig_hist_head + i) %
                                       svc->trig_hist_cap],
                       sizeof(*svc->trig_hist));
            free(svc->trig_hist);
            svc->trig_hist = g;
            svc->trig_hist_cap = cap;
            svc->trig_hist_head = 0;
        }
    }
    size_t at = (svc->trig_hist_head + svc->trig_hist_len) %
                svc->trig_hist_cap;
    svc->trig_hist[at].ns = now_ns;
    svc->trig_hist[at].hash = hash;
    svc->trig_hist_len++;
}

static double random_unit(svc_service *svc)
{
    if (!svc->rng) {
        uint64_t seed = 0;
        if (getrandom(&seed, sizeof(seed), 0) != (ssize_t)sizeof(seed))
            seed = svc__boottime_ns();
        svc->rng = seed | 1;
    }
    uint64_t x = svc->rng;            /* xorshift64* */
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    svc->rng = x;
    return (double)((x * 0x2545F4914F6CDD1Dull) >> 11) / 9007199254740992.0;
}

/* ---------------------------------------------------------------- activate */

static int info_copy(svc_trig_info *dst, const svc_trigger_hit *h)
{
    memset(dst, 0, sizeof(*dst));
    dst->name = strdup(h->name ? h->name : "");
    dst->producer_name = strdup(h->producer_name ? h->producer_name : "");
    if (!dst->name || !dst->producer_name) {
        free(dst->name);
        free(dst->producer_name);
        dst->name = dst->producer_name = NULL;
        return -ENOMEM;
    }
    dst->producer_uid = h->producer_uid;
    dst->stop_delay_ms = h->delay_ms;
    dst->boot_time_ns = h->boot_time_ns;
    return 0;
}

static void info_free(svc_trig_info *i)
{
    free(i->name);
    free(i->producer_name);
    i->name = i->producer_name = NULL;
}

static int record_trigger(svc_session *s, const svc_trigger_hit *h)
{
    svc_trig_state *t = &s->trig;
    if (t->nreceived >= SVC_TRIG_MAX_RECEIVED)
        return -ENOSPC;
    svc_trig_info *g = realloc(t->received,
                               (t->nreceived + 1) * sizeof(*g));
    if (!g)
        return -ENOMEM;
    t->received = g;
    if (info_copy(&g[t->nreceived], h) < 0)
        return -ENOMEM;
    t->nreceived++;
    return 0;
}

static void schedule_clone(svc_session *s, const svc_trigger_hit *h,
                           uint64_t now_ms)
{
    svc_trig_state *t = &s->trig;
    if (t->npending >= SVC_TRIG_MAX_PENDING) {
        char tn[SVC_LOG_NAME_BYTES];
        fprintf(stderr, "shmtraced: session %llu: too many snapshots pending, "
                "trigger \"%s\" not acted on\n", (unsigned long long)s->id,
                svc_log_str(tn, sizeof tn, h->name, SVC_LOG_NAME_MAX));
        return;
    }
    svc_trig_pending *g = realloc(t->pending, (t->npending + 1) * sizeof(*g));
    if (!g)
        return;
    t->pending = g;
    if (info_copy(&g[t->npending].info, h) < 0)
        return;
    g[t->npending].due_ms = now_ms + h->delay_ms;
    t->npending++;
}

/* The session's session_start() lives in svc_session.c. */
static void start_now(svc_service *svc, svc_session *s, uint32_t stop_delay)
{
    s->cfg->has_duration_ms = true;
    s->cfg->duration_ms = stop_delay;
    s->trig.start_timeout_ms = 0;
    svc_session_start(svc, s);
}

size_t svc_activate_triggers(svc_service *svc, const char *producer_name,
                             uid_t producer_uid, const char *const *names,
                             size_t n)
{
    size_t matched_total = 0;
    const char *pname = producer_name ? producer_name : "";
    for (size_t k = 0; k < n; k++) {
        const char *name = names[k];
        if (!name)
            continue;
        uint64_t now_ns = svc__boottime_ns(), now_ms = svc_now_ms();
        uint64_t hash = fnv1a(name);
        size_t in_window = history_count(svc, now_ns, hash);
        bool matched = false;
        for (size_t si = 0; si < svc->nsessions; si++) {
            svc_session *s = svc->sessions[si];
            const trig_cfg *tc = s->cfg->trigger_config;
            if (s->is_clone || !tc)
                continue;
            const Perfetto__Protos__TraceConfig__TriggerConfig__Trigger *tr =
                NULL;
            for (size_t i = 0; i < tc->n_triggers && !tr; i++)
                if (tc->triggers[i]->name &&
                    strcmp(tc->triggers[i]->name, name) == 0)
                    tr = tc->triggers[i];
            if (!tr)
                continue;
            if (tr->producer_name_regex && tr->producer_name_regex[0] &&
                !svc_regex_full_match(tr->producer_name_regex, pname))
                continue;
            if (tr->has_skip_probability && tr->skip_probability > 0 &&
                random_unit(svc) < tr->skip_probability)
                continue;
            if (tr->has_max_per_24_h && tr->max_per_24_h &&
                in_window >= tr->max_per_24_h)
                continue;
            /* Once disabled, nothing more happens to a session. */
            if (s->state == SVC_SESSION_DISABLED ||
                s->state == SVC_SESSION_DISABLING)
                continue;
            matched = true;
            matched_total++;
            bool first = s->trig.nreceived == 0;
            uint32_t delay = tr->has_stop_delay_ms ? tr->stop_delay_ms : 0;
            svc_trigger_hit h = { name, pname, (int32_t)producer_uid, now_ns,
                                  delay };
            record_trigger(s, &h);
            /* Logged only when it changes something (a producer may send
             * the same trigger in a loop). */
            const char *what = NULL;
            switch (s->trig.mode) {
            case SVC_TRIG_START:
                if (s->state == SVC_SESSION_CONFIGURED) {
                    start_now(svc, s, delay);
                    what = "starts";
                }
                break;
            case SVC_TRIG_STOP:
                /* Only the first trigger stops; the stop delay replaces
                 * the trigger timeout. */
                if (first) {
                    s->duration_deadline_ms = svc__timer_now(svc, s,
                            now_ms, s->duration_suspend_aware) + delay;
                    what = "stops";
                }
                break;
            case SVC_TRIG_CLONE:
                schedule_clone(s, &h, now_ms);
                what = "snapshots";
                break;
            default:
                break;
            }
            if (what) {
                char tn[SVC_LOG_NAME_BYTES], pn[SVC_LOG_NAME_BYTES];
                fprintf(stderr, "shmtraced: trigger \"%s\" from \"%s\" %s "
                        "session %llu (in %u ms)\n",
                        svc_log_str(tn, sizeof tn, name, SVC_LOG_NAME_MAX),
                        svc_log_str(pn, sizeof pn, pname, SVC_LOG_NAME_MAX),
                        what, (unsigned long long)s->id, delay);
            }
        }
        if (matched)
            history_add(svc, now_ns, hash);
    }
    return matched_total;
}

size_t svc_producer_activate_triggers(svc_service *svc, svc_producer *p,
                                      const char *const *names, size_t n)
{
    return svc_activate_triggers(svc, p->name, p->uid, names, n);
}

/* ---------------------------------------------------------------- timers */

uint64_t svc__trigger_deadline(const svc_session *s)
{
    const svc_trig_state *t = &s->trig;
    uint64_t d = t->start_timeout_ms;
    for (size_t i = 0; i < t->npending; i++)
        d = svc__min_deadline(d, t->pending[i].due_ms ? t->pending[i].due_ms : 1);
    if (s->state == SVC_SESSION_STARTED && t->clear_period_ms && !s->is_clone)
        d = svc__min_deadline(d, t->next_clear_ms ? t->next_clear_ms : 1);
    return d;
}

static void clear_incremental(svc_service *svc, svc_session *s)
{
    if (!svc->ops.clear_incremental_state || !s->ninst)
        return;
    uint64_t *ids = malloc(s->ninst * sizeof(*ids));
    if (!ids)
        return;
    /* One command per producer with all of its instances in the session. */
    for (size_t k = 0; k < s->ninst; k++) {
        uint16_t pid = s->inst[k].producer_id;
        bool seen = false;
        for (size_t j = 0; j < k && !seen; j++)
            seen = s->inst[j].producer_id == pid &&
                   s->inst[j].state == SVC_INST_STARTED;
        if (seen || s->inst[k].state != SVC_INST_STARTED)
            continue;
        size_t n = 0;
        for (size_t j = k; j < s->ninst; j++)
            if (s->inst[j].producer_id == pid &&
                s->inst[j].state == SVC_INST_STARTED)
                ids[n++] = s->inst[j].instance_id;
        svc_producer *p = svc__producer_by_id(svc, pid);
        if (p && n) {
            svc->ops.clear_incremental_state(svc->ops_ctx, p->conn, ids, n);
            s->trig.clears_sent++;
        }
    }
    free(ids);
}

void svc__trigger_tick(svc_service *svc, svc_session *s, uint64_t now)
{
    svc_trig_state *t = &s->trig;
    if (t->start_timeout_ms && t->start_timeout_ms <= now) {
        t->start_timeout_ms = 0;
        if (s->state == SVC_SESSION_CONFIGURED) {
            fprintf(stderr, "shmtraced: session %llu: no START_TRACING "
                    "trigger within trigger_timeout_ms, disabling\n",
                    (unsigned long long)s->id);
            svc_session_disable(svc, s);
        }
    }
    for (size_t i = 0; i < t->npending;) {
        if (t->pending[i].due_ms > now) {
            i++;
            continue;
        }
        svc_trig_pending p = t->pending[i];
        t->pending[i] = t->pending[--t->npending];
        if (s->consumer && svc->ops.clone_trigger_hit &&
            s->state == SVC_SESSION_STARTED) {
            svc_trigger_hit h = { p.info.name, p.info.producer_name,
                                  p.info.producer_uid, p.info.boot_time_ns,
                                  p.info.stop_delay_ms };
            svc->ops.clone_trigger_hit(svc->ops_ctx, s->consumer, s->id, &h);
        }
        info_free(&p.info);
    }
    if (s->state != SVC_SESSION_STARTED || !t->clear_period_ms ||
        s->is_clone) {
        t->next_clear_ms = 0;
        return;
    }
    if (!t->next_clear_ms) {
        t->next_clear_ms = now + t->clear_period_ms;
    } else if (t->next_clear_ms <= now) {
        t->next_clear_ms = now + t->clear_period_ms;
        clear_incremental(svc, s);
    }
}

/* ---------------------------------------------------------------- read */

bool svc__trigger_withholds(const svc_session *s)
{
    if (s->is_clone)
        return false;
    const trig_cfg *tc = s->cfg->trigger_config;
    if (tc && tc->n_triggers && s->trig.nreceived == 0)
        return true;
    return s->trig.mode == SVC_TRIG_CLONE;
}

int svc__trigger_emit(svc_session *s, bool first_pass, svc_trig_emit_fn emit,
                      void *ctx)
{
    svc_trig_state *t = &s->trig;
    int rc;
    if (t->has_clone_trigger && first_pass) {
        if ((rc = emit(ctx, &t->clone_trigger, true)) < 0)
            return rc;
    }
    for (; t->nemitted < t->nreceived; t->nemitted++)
        if ((rc = emit(ctx, &t->received[t->nemitted], false)) < 0)
            return rc;
    return 0;
}

/* ---------------------------------------------------------------- clone */

void svc__trigger_clone(svc_session *dst, svc_session *src,
                        const svc_trig_info *clone_trigger)
{
    (void)clone_trigger;
    dst->trig.mode = src->trig.mode;
    dst->trig.received = src->trig.received;
    dst->trig.nreceived = src->trig.nreceived;
    dst->trig.nemitted = 0;
    src->trig.received = NULL;
    src->trig.nreceived = src->trig.nemitted = 0;
}

int svc_session_set_clone_trigger(svc_session *s, const svc_trigger_hit *h)
{
    if (!s->is_clone)
        return -EINVAL;
    if (s->trig.has_clone_trigger)
        info_free(&s->trig.clone_trigger);
    s->trig.has_clone_trigger = false;
    if (info_copy(&s->trig.clone_trigger, h) < 0)
        return -ENOMEM;
    s->trig.has_clone_trigger = true;
    return 0;
}

size_t svc_session_triggers_received(const svc_session *s)
{
    return s->trig.nreceived;
}

void svc__trigger_free(svc_trig_state *t)
{
    for (size_t i = 0; i < t->nreceived; i++)
        info_free(&t->received[i]);
    free(t->received);
    for (size_t i = 0; i < t->npending; i++)
        info_free(&t->pending[i].info);
    free(t->pending);
    if (t->has_clone_trigger)
        info_free(&t->clone_trigger);
    memset(t, 0, sizeof(*t));
}

void svc__trigger_service_free(svc_service *svc)
{
    free(svc->trig_hist);
    svc->trig_hist = NULL;
    svc->trig_hist_len = svc->trig_hist_cap = svc->trig_hist_head = 0;
}
