/*
 * svc_start.c - data source start acks: when a session's data sources have
 * all started, and which ones are slow to.
 *
 * A data source registered with will_notify_on_start is not started when
 * the service sends StartDataSource, but when its producer answers with
 * NotifyDataSourceStarted (traced_probes' ftrace, every data source of
 * Perfetto's SDK, a libshm producer that asks for it). As Perfetto's
 * service does (MaybeNotifyAllDataSourcesStarted,
 * OnAllDataSourceStartedTimeout):
 *
 * - An instance of such a data source is start_pending from its
 *   StartDataSource until its own producer acks it. An ack names the
 *   instance by id; one from another producer, or for an instance not
 *   waiting, changes nothing (a producer cannot speak for another's).
 * - When a started session has no instance start_pending (at once if none
 *   asked to notify, or none exist), it is "all started": the time is
 *   noted, the consumer is told (ObservableEvents.all_data_sources_started,
 *   which `perfetto --background-wait` and --notify-fd wait for), and the
 *   next read pass writes TracingServiceEvent.all_data_sources_started
 *   stamped with that time; a clock snapshot is taken then, kept if the
 *   clocks drifted since the pending one (svc_clocks.c). Once per
 *   session: an instance started later (a producer that connects
 *   mid-session) does not repeat it. An instance that goes away unacked
 *   (its producer disconnects or unregisters the data source) no longer
 *   holds the others back.
 * - SVC_START_ACK_TIMEOUT_MS (20 s) after the start, if the session is
 *   still running and not all started, the instances still waiting are
 *   named (producer, data source; at most SVC_SLOW_DS_MAX) in a
 *   slow_starting_data_sources event for the next read pass and in the
 *   daemon's log. A late ack still makes the session all started.
 *
 * The instance keeps its SVC_INST_STARTED state meanwhile: a data source
 * slow to ack is flushed, stopped and cleared like any other.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "svc_int.h"
#include "svc_log.h"

void svc__start_check(svc_service *svc, svc_session *s)
{
    if (s->ev_all_started_ns || s->is_clone ||
        s->state != SVC_SESSION_STARTED)
        return;
    for (size_t k = 0; k < s->ninst; k++)
        if (s->inst[k].start_pending)
            return;
    s->ev_all_started_ns = svc__boottime_ns();
    s->start_ack_deadline_ms = 0;
    svc__clocks_snapshot(s);      /* as Perfetto's, kept if clocks drifted */
    if (svc->ops.all_ds_started)
        svc->ops.all_ds_started(svc->ops_ctx, s->consumer, s);
}

void svc_producer_ds_started(svc_service *svc, svc_producer *p,
                             uint64_t instance_id)
{
    if (!p)
        return;
    for (size_t si = 0; si < svc->nsessions; si++) {
        svc_session *s = svc->sessions[si];
        for (size_t k = 0; k < s->ninst; k++) {
            svc_instance *in = &s->inst[k];
            if (in->producer_id == p->id && in->instance_id == instance_id &&
                in->start_pending) {
                in->start_pending = false;
                svc__start_check(svc, s);
                return;              /* instance ids are service-wide */
            }
        }
    }
}

bool svc_session_all_started(const svc_session *s)
{
    return s->ev_all_started_ns != 0;
}

uint64_t svc__start_deadline(const svc_session *s)
{
    return s->state == SVC_SESSION_STARTED ? s->start_ack_deadline_ms : 0;
}

/* The instances of s still start_pending, as a slow_starting event now,
 * and in the log: the first SVC_SLOW_DS_MAX of them each (a producer
 * chooses how many data sources it has: the log stays bounded), then how
 * many more. Nothing is noted when memory runs out (the log still names
 * them). */
static void note_slow_start(svc_service *svc, svc_session *s)
{
    svc_slow_flush *e = calloc(1, sizeof(*e));
    size_t named = 0, more = 0;
    if (e)
        e->at = svc__boottime_ns();
    for (size_t k = 0; k < s->ninst; k++) {
        const svc_instance *in = &s->inst[k];
        if (!in->start_pending)
            continue;
        if (named == SVC_SLOW_DS_MAX) {
            more++;
            continue;
        }
        named++;
        svc_producer *p = svc__producer_by_id(svc, in->producer_id);
        const char *pname = p && p->name ? p->name : "";
        char dsn[SVC_LOG_NAME_BYTES], pn[SVC_LOG_NAME_BYTES];
        fprintf(stderr, "shmtraced: session %llu: data source \"%s\" of "
                "producer \"%s\" did not start within %u s (no "
                "NotifyDataSourceStarted)\n", (unsigned long long)s->id,
                svc_log_str(dsn, sizeof dsn, in->name, SVC_LOG_NAME_MAX),
                svc_log_str(pn, sizeof pn, pname, SVC_LOG_NAME_MAX),
                SVC_START_ACK_TIMEOUT_MS / 1000u);
        if (e)
            (void)svc__slow_add(e, pname, in->name);
    }
    if (more)
        fprintf(stderr, "shmtraced: session %llu: %zu more data sources "
                "did not start within %u s\n", (unsigned long long)s->id,
                more, SVC_START_ACK_TIMEOUT_MS / 1000u);
    svc__slow_list_drop(&s->slow_start);  /* one deadline: none there */
    s->slow_start = e;
}

void svc__start_tick(svc_service *svc, svc_session *s, uint64_t now)
{
    uint64_t d = svc__start_deadline(s);
    if (!d || d > now)
        return;
    s->start_ack_deadline_ms = 0;
    if (!s->ev_all_started_ns)
        note_slow_start(svc, s);
}
