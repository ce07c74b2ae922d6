/*
 * feat_svc_harness.h - shared by the issue-12 Check tests of the service
 * core (check_svc_trigger.c, check_svc_attach.c): svc_ops that record what
 * the service asked for, TraceConfig builders with a trigger_config, and a
 * reader that decodes a session's packets and counts what the tests ask.
 * Time is virtual: tests call svc_tick(svc, t0 + ms) with t0 taken right
 * after the action that armed a timer (timers are armed with svc_now_ms(),
 * which is <= the t0 the test reads afterwards).
 */
#ifndef FEAT_SVC_HARNESS_H
#define FEAT_SVC_HARNESS_H

#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "svc_int.h"
#include "svc_service.h"
#include "trace.pb-c.h"

typedef struct {
    int setup_ds, start_ds, stop_ds, flush, disabled, clone_hits, clears;
    uint64_t clone_tsid, clear_ids[8];
    size_t nclear_ids;
    char hit_name[64], hit_producer[64];
    uint64_t hit_delay, hit_boot_ns;
    int32_t hit_uid;
} fh_rec;

static fh_rec FR;

static inline int fh_setup_tracing(void *c, void *conn, int fd, uint32_t kb)
{
    return 0;
}
static inline int fh_setup_ds(void *c, void *conn, uint64_t id,
                       const Perfetto__Protos__DataSourceConfig *cfg)
{
    FR.setup_ds++;
    return 0;
}
static inline int fh_start_ds(void *c, void *conn, uint64_t id,
                       const Perfetto__Protos__DataSourceConfig *cfg)
{
    FR.start_ds++;
    return 0;
}
static inline int fh_stop_ds(void *c, void *conn, uint64_t id)
{
    FR.stop_ds++;
    return 0;
}
static inline int fh_flush(void *c, void *conn, const uint64_t *ids, size_t n,
                    uint64_t fid, uint64_t flags)
{
    FR.flush++;
    return 0;
}
static inline void fh_flush_done(void *c, void *consumer, uint64_t tok, bool ok)
{
}
static inline void fh_disabled(void *c, void *consumer, svc_session *s,
                        const char *err)
{
    FR.disabled++;
}
static inline void fh_clone_hit(void *c, void *consumer, uint64_t tsid,
                         const svc_trigger_hit *h)
{
    FR.clone_hits++;
    FR.clone_tsid = tsid;
    snprintf(FR.hit_name, sizeof(FR.hit_name), "%s", h->name);
    snprintf(FR.hit_producer, sizeof(FR.hit_producer), "%s",
             h->producer_name);
    FR.hit_delay = h->delay_ms;
    FR.hit_boot_ns = h->boot_time_ns;
    FR.hit_uid = h->producer_uid;
}
static inline int fh_clear(void *c, void *conn, const uint64_t *ids, size_t n)
{
    FR.clears++;
    FR.nclear_ids = n < 8 ? n : 8;
    memcpy(FR.clear_ids, ids, FR.nclear_ids * sizeof(*ids));
    return 0;
}

static const svc_ops FH_OPS = {
    .setup_tracing = fh_setup_tracing,
    .setup_data_source = fh_setup_ds,
    .start_data_source = fh_start_ds,
    .stop_data_source = fh_stop_ds,
    .flush = fh_flush,
    .flush_done = fh_flush_done,
    .session_disabled = fh_disabled,
    .clone_trigger_hit = fh_clone_hit,
    .clear_incremental_state = fh_clear,
};

static inline svc_service *fh_service(void)
{
    memset(&FR, 0, sizeof(FR));
    svc_service *svc = svc_create(&FH_OPS, NULL, 1234);
    ck_assert_ptr_nonnull(svc);
    return svc;
}

/* ---------------------------------------------------------------- config */

#define FH_MAX_TRIG 3

typedef struct {
    Perfetto__Protos__TraceConfig cfg;
    Perfetto__Protos__TraceConfig__BufferConfig buf, *bufp[1];
    Perfetto__Protos__TraceConfig__DataSource ds, *dsp[1];
    Perfetto__Protos__DataSourceConfig dsc;
    Perfetto__Protos__TraceConfig__TriggerConfig tc;
    Perfetto__Protos__TraceConfig__TriggerConfig__Trigger t[FH_MAX_TRIG],
        *tp[FH_MAX_TRIG];
    Perfetto__Protos__TraceConfig__IncrementalStateConfig ic;
} fh_cfg;

static inline void fh_cfg_init(fh_cfg *c)
{
    memset(c, 0, sizeof(*c));
    perfetto__protos__trace_config__init(&c->cfg);
    perfetto__protos__trace_config__buffer_config__init(&c->buf);
    c->buf.has_size_kb = true;
    c->buf.size_kb = 64;
    c->bufp[0] = &c->buf;
    c->cfg.n_buffers = 1;
    c->cfg.buffers = c->bufp;
    perfetto__protos__trace_config__data_source__init(&c->ds);
    perfetto__protos__data_source_config__init(&c->dsc);
    c->dsc.name = "test.ds";
    c->ds.config = &c->dsc;
    c->dsp[0] = &c->ds;
    c->cfg.n_data_sources = 1;
    c->cfg.data_sources = c->dsp;
}

/* trigger_config with mode and timeout, no triggers yet. */
static inline void fh_cfg_triggers(fh_cfg *c, int mode, uint32_t timeout_ms)
{
    perfetto__protos__trace_config__trigger_config__init(&c->tc);
    c->tc.has_trigger_mode = true;
    c->tc.trigger_mode = mode;
    c->tc.has_trigger_timeout_ms = true;
    c->tc.trigger_timeout_ms = timeout_ms;
    c->tc.triggers = c->tp;
    c->cfg.trigger_config = &c->tc;
}

static inline Perfetto__Protos__TraceConfig__TriggerConfig__Trigger *
fh_cfg_add_trigger(fh_cfg *c, const char *name, uint32_t stop_delay_ms)
{
    ck_assert_uint_lt(c->tc.n_triggers, FH_MAX_TRIG);
    Perfetto__Protos__TraceConfig__TriggerConfig__Trigger *t =
        &c->t[c->tc.n_triggers];
    perfetto__protos__trace_config__trigger_config__trigger__init(t);
    t->name = (char *)name;
    t->has_stop_delay_ms = true;
    t->stop_delay_ms = stop_delay_ms;
    c->tp[c->tc.n_triggers++] = t;
    return t;
}

static inline svc_producer *fh_producer(svc_service *svc, const char *name,
                                 const char *ds_name, uid_t uid)
{
    svc_producer_params pp = { .name = name };
    svc_producer *p = svc_producer_connect(svc, NULL, uid, 4321, &pp);
    ck_assert_ptr_nonnull(p);
    Perfetto__Protos__DataSourceDescriptor d =
        PERFETTO__PROTOS__DATA_SOURCE_DESCRIPTOR__INIT;
    d.name = (char *)ds_name;
    ck_assert_int_eq(svc_producer_register_ds(svc, p, &d, NULL, 0), 0);
    return p;
}

/* ---------------------------------------------------------------- read */

typedef struct {
    size_t packets, triggers, clone_triggers, clone_started, buffer_cloned;
    char trig_name[4][64], trig_producer[4][64];
    uint64_t trig_delay[4];
    int32_t trig_uid[4];
    uint64_t trig_ts[4];
    char clone_name[64];
} fh_read;

static inline int fh_emit(void *ctx, const uint8_t *p, size_t n)
{
    fh_read *r = ctx;
    Perfetto__Protos__TracePacket *tp =
        perfetto__protos__trace_packet__unpack(NULL, n, p);
    ck_assert_ptr_nonnull(tp);
    r->packets++;
    if (tp->trigger) {
        ck_assert_uint_eq(tp->trusted_packet_sequence_id, 1);
        ck_assert(tp->has_timestamp);
        ck_assert_uint_eq(tp->timestamp_clock_id, 6);
        if (r->triggers < 4) {
            size_t i = r->triggers;
            snprintf(r->trig_name[i], 64, "%s", tp->trigger->trigger_name);
            snprintf(r->trig_producer[i], 64, "%s",
                     tp->trigger->producer_name);
            r->trig_delay[i] = tp->trigger->stop_delay_ms;
            r->trig_uid[i] = tp->trigger->trusted_producer_uid;
            r->trig_ts[i] = tp->timestamp;
        }
        r->triggers++;
    }
    if (tp->service_event && tp->service_event->event_type_case ==
        PERFETTO__PROTOS__TRACING_SERVICE_EVENT__EVENT_TYPE_CLONE_STARTED) {
        ck_assert(tp->has_timestamp && tp->timestamp > 0);
        r->clone_started++;
    }
    if (tp->service_event && tp->service_event->event_type_case ==
        PERFETTO__PROTOS__TRACING_SERVICE_EVENT__EVENT_TYPE_BUFFER_CLONED) {
        ck_assert(tp->has_timestamp && tp->timestamp > 0);
        r->buffer_cloned++;
    }
    if (tp->clone_snapshot_trigger) {
        r->clone_triggers++;
        snprintf(r->clone_name, 64, "%s",
                 tp->clone_snapshot_trigger->trigger_name);
    }
    perfetto__protos__trace_packet__free_unpacked(tp, NULL);
    return 0;
}

static inline fh_read fh_read_all(svc_service *svc, svc_session *s)
{
    fh_read r;
    memset(&r, 0, sizeof(r));
    bool more = true;
    while (more)
        ck_assert_int_eq(svc_session_read(svc, s, 0, fh_emit, &r, &more), 0);
    return r;
}

/* Drives timers far enough that a disabling session finishes (flush and
 * stop timeouts). */
static inline void fh_settle(svc_service *svc, uint64_t t0)
{
    for (uint64_t t = t0; t < t0 + 40000; t += 1000)
        svc_tick(svc, t);
}

#endif /* FEAT_SVC_HARNESS_H */
