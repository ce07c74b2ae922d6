/*
 * svc_clocks.c - when a session's clock snapshots and sync markers are
 * taken (the read pass emits them: svc_read.c).
 *
 * Why: trace processor converts a timestamp of another clock (MONOTONIC,
 * REALTIME, ...) to the trace's BOOTTIME with the latest ClockSnapshot at
 * or before it. One snapshot at the start goes wrong for the rest of a
 * long trace once the clocks drift apart (a suspend stops MONOTONIC, not
 * BOOTTIME; NTP slews REALTIME). The sync marker (TracePacket field 36,
 * 16 fixed bytes) lets a reader find packet boundaries again in a damaged
 * or cut trace. Perfetto's service takes both periodically; so do we, as
 * it does (tracing_service_impl.cc: PeriodicSnapshotTask,
 * MaybeSnapshotClocksIntoRingBuffer, SnapshotClocks, EmitSyncMarker):
 *
 *   when     at session start (the periodic task's immediate first run),
 *            every builtin_data_sources.snapshot_interval_ms (default
 *            10 s, at least SVC_SNAPSHOT_MIN_MS here) while the session
 *            runs, and at all_data_sources_started (svc_start.c),
 *            all_data_sources_flushed and tracing_disabled;
 *   keep     a snapshot is kept if none is pending, or if some clock moved
 *            by 10 ms or more against BOOTTIME since the last pending one
 *            (else the older one, valid for more of the buffered data,
 *            stays); at most SVC_CLOCK_SNAPS pending, the oldest dropped;
 *   emit     the next read pass emits the pending snapshots in the order
 *            taken, then a sync marker if one is due (one per interval),
 *            before anything else of the pass. A first pass with none
 *            pending (a deferred start read before starting) takes one
 *            then;
 *   clone    a clone starts with the source's pending snapshots (they
 *            cover the data it copies, and the source's trace has not
 *            had them yet) and one taken at the clone, as Perfetto takes
 *            one at the clone's tracing_disabled.
 * builtin_data_sources.disable_clock_snapshotting: no snapshots at all;
 * sync markers stay (as in Perfetto).
 * The same period makes a TraceStats packet due (stats_due: at the start,
 * at every period, in a clone; svc_flush.c adds tracing_disabled), which
 * the next read pass that drains the buffers emits (svc_read.c).
 *
 * Suspend-aware timers. Perfetto's duration_ms counts system activity
 * (CLOCK_MONOTONIC: a suspend stops it) unless the config asks for
 * prefer_suspend_clock_for_duration (then CLOCK_BOOTTIME, so a 24 h trace
 * does not last for weeks of suspends; it moves TriggerConfig.stop_delay_ms
 * to that clock too), and builtin_data_sources.prefer_suspend_clock_for_
 * snapshot does the same for the periodic snapshots (one that fell due
 * during a suspend is taken right after it). The service's timers are
 * MONOTONIC ms; such a session keeps those two on a timeline of MONOTONIC
 * plus the time suspended since it started (BOOTTIME - MONOTONIC, against
 * its value then: svc__timer_now), and svc_next_deadline_ms converts them
 * back. A poll() timeout does not count a suspend either, so while one of
 * them is armed the main loop wakes at least every SVC_SUSPEND_CHECK_MS:
 * such a timer fires within that time after a resume (Perfetto uses a
 * timerfd on CLOCK_BOOTTIME, which fires at once).
 */
#include <time.h>

#include "svc_int.h"

/* BuiltinClock ids of a snapshot, in this order (BOOTTIME first: the
 * drift rule compares the others against it). */
const uint32_t svc__clock_ids[SVC_CLOCK_IDS] = {6, 1, 2, 3, 4, 5};
static const clockid_t clock_of[SVC_CLOCK_IDS] = {
    CLOCK_BOOTTIME, CLOCK_REALTIME, CLOCK_REALTIME_COARSE, CLOCK_MONOTONIC,
    CLOCK_MONOTONIC_COARSE, CLOCK_MONOTONIC_RAW,
};

#define DRIFT_NS 10000000          /* 10 ms, as Perfetto */

void svc__clocks_capture(svc_clock_snap *out)
{
    for (size_t i = 0; i < SVC_CLOCK_IDS; i++) {
        struct timespec ts;
        clock_gettime(clock_of[i], &ts);
        out->ts[i] = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
    }
}

static bool snapshots_disabled(const svc_session *s)
{
    const Perfetto__Protos__TraceConfig__BuiltinDataSource *b =
        s->cfg ? s->cfg->builtin_data_sources : NULL;
    return b && b->has_disable_clock_snapshotting &&
           b->disable_clock_snapshotting;
}

/* Whether some clock moved by DRIFT_NS or more against BOOTTIME between
 * a and b. */
static bool drifted(const svc_clock_snap *a, const svc_clock_snap *b)
{
    int64_t boot = (int64_t)(b->ts[0] - a->ts[0]);
    for (size_t i = 1; i < SVC_CLOCK_IDS; i++) {
        int64_t d = (int64_t)(b->ts[i] - a->ts[i]) - boot;
        if (d >= DRIFT_NS || d <= -DRIFT_NS)
            return true;
    }
    return false;
}

void svc__clocks_snapshot(svc_session *s)
{
    if (snapshots_disabled(s))
        return;
    svc_clock_snap now;
    svc__clocks_capture(&now);
    if (s->nclock_snaps > 0 &&
        !drifted(&s->clock_snaps[s->nclock_snaps - 1], &now))
        return;
    if (s->nclock_snaps == SVC_CLOCK_SNAPS) {
        for (size_t i = 1; i < SVC_CLOCK_SNAPS; i++)
            s->clock_snaps[i - 1] = s->clock_snaps[i];
        s->nclock_snaps--;
    }
    s->clock_snaps[s->nclock_snaps++] = now;
}

void svc__clocks_start(svc_session *s, uint64_t now_ms)
{
    const Perfetto__Protos__TraceConfig__BuiltinDataSource *b =
        s->cfg ? s->cfg->builtin_data_sources : NULL;
    uint32_t per = b && b->has_snapshot_interval_ms ? b->snapshot_interval_ms
                                                    : 0;
    if (per == 0)
        per = SVC_SNAPSHOT_DEFAULT_MS;
    if (per < SVC_SNAPSHOT_MIN_MS)
        per = SVC_SNAPSHOT_MIN_MS;
    s->snapshot_interval_ms = per;
    s->next_snapshot_ms = now_ms + per;
    s->sync_marker_due = true;
    s->stats_due = true;
    svc__clocks_snapshot(s);
}

void svc__clocks_tick(svc_session *s, uint64_t now_ms)
{
    if (!s->next_snapshot_ms || s->next_snapshot_ms > now_ms)
        return;
    if (s->state != SVC_SESSION_STARTED) {
        s->next_snapshot_ms = 0;
        return;
    }
    s->next_snapshot_ms = now_ms + s->snapshot_interval_ms;
    s->sync_marker_due = true;
    s->stats_due = true;
    svc__clocks_snapshot(s);
}

void svc__clocks_clone(svc_session *s, const svc_session *src)
{
    for (uint32_t i = 0; i < src->nclock_snaps; i++)
        s->clock_snaps[i] = src->clock_snaps[i];
    s->nclock_snaps = src->nclock_snaps;
    s->stats_due = true;
    svc__clocks_snapshot(s);
}

/* ---------------------------------------------------- suspend-aware timers */

int64_t svc__suspend_offset_ns(const svc_service *svc)
{
    if (svc->suspend_clock)
        return svc->suspend_clock(svc->suspend_clock_ctx);
    struct timespec b, m;
    clock_gettime(CLOCK_MONOTONIC, &m);
    clock_gettime(CLOCK_BOOTTIME, &b);
    return ((int64_t)b.tv_sec - (int64_t)m.tv_sec) * 1000000000 +
           ((int64_t)b.tv_nsec - (int64_t)m.tv_nsec);
}

void svc__set_suspend_clock(svc_service *svc, int64_t (*fn)(void *ctx),
                            void *ctx)
{
    svc->suspend_clock = fn;
    svc->suspend_clock_ctx = ctx;
}

void svc__suspend_start(const svc_service *svc, svc_session *s)
{
    const Perfetto__Protos__TraceConfig *cfg = s->cfg;
    const Perfetto__Protos__TraceConfig__BuiltinDataSource *b =
        cfg ? cfg->builtin_data_sources : NULL;
    s->duration_suspend_aware = cfg &&
        cfg->has_prefer_suspend_clock_for_duration &&
        cfg->prefer_suspend_clock_for_duration;
    s->snapshot_suspend_aware = b &&
        b->has_prefer_suspend_clock_for_snapshot &&
        b->prefer_suspend_clock_for_snapshot;
    if (s->duration_suspend_aware || s->snapshot_suspend_aware)
        s->suspend_base_ns = svc__suspend_offset_ns(svc);
}

/* ms suspended since the session started (never negative: the two clocks
 * are read one after the other, a few ns apart). */
static uint64_t suspended_ms(const svc_service *svc, const svc_session *s)
{
    int64_t d = svc__suspend_offset_ns(svc) - s->suspend_base_ns;
    return d > 0 ? (uint64_t)d / 1000000u : 0;
}

uint64_t svc__timer_now(const svc_service *svc, const svc_session *s,
                        uint64_t now, bool aware)
{
    return aware ? now + suspended_ms(svc, s) : now;
}

uint64_t svc__timer_deadline(const svc_service *svc, const svc_session *s,
                             uint64_t d, bool aware, uint64_t now)
{
    if (!d || !aware)
        return d;
    uint64_t slept = suspended_ms(svc, s);
    uint64_t mono = d > slept ? d - slept : 1;   /* due: at once */
    uint64_t check = now + SVC_SUSPEND_CHECK_MS;
    return mono < check ? mono : check;
}
