/*
 * svc_read.c - reading a session: buffers -> TracePackets for the consumer.
 *
 * One read pass (wire-formats.md §3, order not to be depended on):
 *   0. the clock snapshots taken since the last pass, and a sync marker
 *      when one is due (svc_clocks.c says when they are taken);
 *   1. first pass only: trace_config echo, trace_uuid,
 *      system_info (svc_sysinfo.c),
 *      tracing_started service event (and a clone's source's
 *      all_data_sources_started);
 *   2. the lifecycle events noted since the last pass (emit_lifecycle):
 *      all_data_sources_started once the data sources that ack their start
 *      did (svc_start.c), slow_starting_data_sources if some did not in
 *      time, flush_started and all_data_sources_flushed of every flush,
 *      tracing_disabled once disabled;
 *   3. the packets of every buffer, in config order: each copied out of the
 *      buffer into a scratch area, validated (svc_packet.c: invalid ->
 *      invalid_packets++, and its sequence's next packet is flagged), then
 *      followed by the trusted trailer (uid, sequence id, pid,
 *      previous_packet_dropped);
 *   4. when the pass drained everything: read_tracing_buffers_completed
 *      (as Perfetto's ReadBuffers), and if one is due a TraceStats packet:
 *      one, as Perfetto's service (ReadBuffers, should_emit_stats): due
 *      once per snapshot period (svc_clocks.c: the first at the start,
 *      then every snapshot_interval_ms, 10 s by default), at
 *      tracing_disabled and in a clone. Before, every pass that drained
 *      the buffers wrote one: 164 in a 256 MB recording of 1 KiB packets
 *      (a pass per ~1.6 MB), each up to ~56 KiB with many writers
 *      (svc_stats.c), where Perfetto's trace has two. Counters are never
 *      lost by it: the last one, at tracing_disabled, holds them all, and
 *      GetTraceStats answers at any time.
 * Service packets use sequence 1, trusted_uid = the service's uid,
 * timestamp_clock_id = 6 (BOOTTIME) and a BOOTTIME timestamp: the time of
 * reading, except service events, stamped with the time they happened
 * (trace processor drops ftrace data older than tracing_started).
 *
 * Sequence ids (svc_seqmap): (producer_id << 16 | writer_id) -> 2, 3, ...
 * in order of first use; an open-addressing table (keys are never 0 since
 * writer ids are >= 1... producer ids >= 1 make the key non-zero anyway).
 *
 * File mode (svc_session_write_file, or svc_session_write_file_step for one
 * step of at most max_bytes: the periodic pass runs in steps, svc_tick):
 * the same pass, each packet framed as
 * Trace.packet (0x0A, varint length) and written with one writev() per
 * ~1 MiB of staged bytes or 1024 pieces; max_file_size_bytes stops at the
 * first packet that would reach it. A packet of >= SVC_FILE_IN_PLACE_MIN
 * bytes (8 KiB; svc_set_file_in_place_min) is validated where it lies in
 * its trace buffer (svc_packet_check_slices) and its slices are handed
 * to writev() as they are, between its header and its trailer staged in
 * the batch: the page cache copy is the only one. Reads never change the
 * bytes behind a slice (trace_buffer.h), and nothing writes to the buffers
 * during a pass, so the slices stay good until the writev(). A smaller
 * packet is copied once, from the buffer straight behind its header in the
 * batch, validated before the copy (in one piece and over 128 bytes) or
 * after it, and dropped if invalid (session_read). Every record framed is
 * counted (packets_written_to_file, bytes_written_to_file) and so is every
 * one whose last previous_packet_dropped is non-zero, the trailer's or
 * the packet's own (svc_packet_check reads it during the validation):
 * GetTraceStats reports them (svc_stats_add_file), so that the consumer
 * need not read the file back to count it.
 * With shmtraced --direct-io (svc_direct.c) no packet is written in
 * place: every one is copied into fewer, larger batches
 * (SVC_FILE_DIRECT_BATCHES of SVC_FILE_DIRECT_BATCH), each written with
 * one O_DIRECT pwrite() of whole 4 KiB blocks, its last < 4 KiB carried
 * to the start of the next one (batch_start), and always by the writer
 * thread when there is one.
 * What the kernel's side costs (2026-12-05, ext4, CPU per KiB written by
 * a micro outside the tree, 256 MB per round): pieces as a 1 KiB packet
 * makes them (1024 bytes from the buffer, 20 staged: trailer and next
 * header) 168-174 ns, and one 4 MiB write() 123-143 ns, over six rounds;
 * 1024 pieces of 1 KiB 154-157 ns in three. Copying each packet
 * into the batch and writing 1 MiB in one piece cost 161-167 ns with the
 * copy (three rounds): no better in that micro. In the daemon it is: the
 * threshold was 512 bytes until 2026-12-05, when copying packets under
 * 8 KiB instead made the session one of small packets (its batches
 * written on this thread, from a ring read within the last megabyte:
 * svc_flush.c) and took 1 KiB packets from 463-572 to 355-436 ns of
 * service CPU each (bench-vs-perfetto's 1 KiB rows, two runs of each
 * build alternating, both consumers, x1 and x4), with the same or more
 * MB/s. Per packet size (x1, `/tmp` daemon runs of 256 MB, 4-5
 * recordings each, two rounds alternating): 2 KiB 555-831 ns copied
 * against 630-979 in place, 4 KiB 1100-1583 against 1181-1688, 8 KiB
 * 1969-2845 against 2040-4440 (no clear difference), 16 KiB 4291-6350
 * against 4018-7199 (in place no worse).
 * Nor is it the thread that made the difference: 1 KiB packets in place
 * but written on this thread, with the 1 MiB passes of small sessions,
 * cost 411 ns per packet against 372 copied (medians of 12 recordings,
 * 1 producer, builds alternating, 2026-12-05): the kernel's copy from
 * many ring pieces costs more than a copy here and one piece.
 * With the service's writer thread (svc_set_file_writer_thread, on in
 * shmtraced) a full batch is handed to that thread and the session fills
 * its next batch meanwhile: a batch of slices always, a batch of copied
 * packets while the main thread is saturated and they average 512 bytes
 * or more (copied_out says why; else it is written here). The slices
 * stay good through later commits because the buffers' write fence
 * waits for the batches that cover the bytes a commit or patch would
 * change (svc_fwrite.h). A
 * session has SVC_FILE_BATCHES batches, used in turn, and fills another
 * while those in flight hold at most SVC_FILE_IN_FLIGHT_BYTES (or just one
 * is in flight): a batch ends at SVC_FILE_IOV pieces, about 512 packets of
 * 1 KiB, so two batches left the main loop waiting for the thread every
 * 512 KiB; with up to 4 MiB in flight, 1 KiB x1 went from 0.186 to 0.154 s
 * per 256 MB and 1 KiB x4 from 0.196 to 0.183 s (medians of 10 recordings
 * through two warm daemons, alternating, perfetto consumer; 64 KiB
 * packets, whose batches are ~4 MiB, keep two in flight: 0.123 and 0.119
 * s for x1, the same within noise).
 *
 * Cost per packet (no allocation in steady state): the scratch area and the
 * file batch live in the session and are reused; the sequence map sits
 * behind a one-entry cache (consecutive packets mostly share a sequence).
 * The file batch's per-packet steps (room, header, take, would-wait) are
 * inline (the header of a packet under 16 KiB too), their rare branches
 * not. Instructions the daemon ran for a recording of 200,000 packets of
 * 64 B (callgrind, memcpy left out: it counts rep movsb per byte),
 * 2026-12-08: 674 per packet before, 596 with libbuf's whole-packet fast
 * path (tb_read_next_packet), 572 with these inline; service CPU per
 * packet (1 producer, 2 M packets, daemon builds alternating, 6
 * recordings each) 116.5 against 131.5 ns with the first, 98.5 against
 * 128.5 with both.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include "svc_int.h"
#include "svc_packet.h"
#include "svc_sysinfo.h"

/* Staging bytes per writev(). Smaller batches, so that a small-packet
 * session's batch (reused, written on the main thread) stays in a 1 MiB
 * L2, were no better (2026-12-05, 1 KiB x1, 12 recordings each, builds
 * alternating): 128 KiB and 256 KiB 456 ns of service CPU per packet
 * against 425. What the copy into the batch costs at most: a build that
 * skipped it and the validation (the file then held garbage) took 303.5
 * against 364 ns (12 each): about 60 ns, the most a read-through path for
 * file sessions (packets from the scratch copy straight to the batch,
 * skipping the ring) could save before its own costs. */
#define SVC_FILE_BATCH (1u << 20)
#define SVC_FILE_IOV 1024           /* pieces per writev() (IOV_MAX) */
#define SVC_FILE_IN_PLACE_SLICE 128 /* their slices this small: copied */
/* filew_reserve asks for the batch's lines (for writing) up to this far
 * past the packet it reserves: the batch was last read by the writer
 * thread or the kernel's copy on the other core, and the copies into it
 * seemed to wait for each line (in a 64 B x4 recording 66% of
 * tb_read_next_packet's samples sat on a store at its entry: the store
 * buffer full, most likely).
 * 2026-12-06, one warm daemon per build, recordings alternating: 64 B x4
 * 69-77 ns of service CPU per packet against 72-85 (eight each; medians
 * 71.5 / 74) and 68-78 against 69-82 (six); 1 KiB x4 563-680 against
 * 592-673 (six; medians 589 / 616); 64 B x1 59-64 against 60-66. */
#define SVC_FILE_PREFETCH_AHEAD 1024

#define SVC_EV(x) PERFETTO__PROTOS__TRACING_SERVICE_EVENT__EVENT_TYPE_##x

/* ---------------------------------------------------------------- seqmap */

static uint32_t hash32(uint32_t k)
{
    k ^= k >> 16;
    k *= 0x7feb352dU;
    k ^= k >> 15;
    k *= 0x846ca68bU;
    k ^= k >> 16;
    return k;
}

static int seqmap_grow(svc_seqmap *m)
{
    size_t cap = m->cap ? m->cap * 2 : 64;
    uint32_t *keys = calloc(cap, sizeof(*keys));
    uint32_t *ids = calloc(cap, sizeof(*ids));
    uint32_t *bi = calloc(cap, sizeof(*bi));
    uint32_t *loss = calloc(cap, sizeof(*loss));
    if (!keys || !ids || !bi || !loss) {
        free(keys);
        free(ids);
        free(bi);
        free(loss);
        return -ENOMEM;
    }
    for (size_t i = 0; i < m->cap; i++) {
        if (!m->keys[i])
            continue;
        size_t j = hash32(m->keys[i]) & (cap - 1);
        while (keys[j])
            j = (j + 1) & (cap - 1);
        keys[j] = m->keys[i];
        ids[j] = m->ids[i];
        bi[j] = m->buffer_index[i];
        loss[j] = m->pending_loss[i];
    }
    free(m->keys);
    free(m->ids);
    free(m->buffer_index);
    free(m->pending_loss);
    m->keys = keys;
    m->last_key = 0;             /* slots moved */
    m->ids = ids;
    m->buffer_index = bi;
    m->pending_loss = loss;
    m->cap = cap;
    return 0;
}

/* Slot of key, creating it; SIZE_MAX on no memory. */
static size_t seqmap_slot(svc_seqmap *m, uint32_t key, uint32_t buffer_index)
{
    if ((m->count + 1) * 2 > m->cap && seqmap_grow(m) < 0)
        return SIZE_MAX;
    size_t j = hash32(key) & (m->cap - 1);
    while (m->keys[j] && m->keys[j] != key)
        j = (j + 1) & (m->cap - 1);
    if (!m->keys[j]) {
        m->keys[j] = key;
        m->ids[j] = m->next_id++;
        m->buffer_index[j] = buffer_index;
        m->pending_loss[j] = 0;
        m->count++;
    }
    return j;
}

/* seqmap_slot behind a one-entry cache (keys are never 0). */
static size_t seqmap_lookup(svc_seqmap *m, uint32_t key, uint32_t bi)
{
    if (key == m->last_key)
        return m->last_slot;
    size_t j = seqmap_slot(m, key, bi);
    if (j != SIZE_MAX) {
        m->last_key = key;
        m->last_slot = j;
    }
    return j;
}

uint32_t svc__seq_id(svc_seqmap *m, uint16_t producer_id, uint16_t writer_id,
                     uint32_t buffer_index)
{
    uint32_t key = ((uint32_t)producer_id << 16) | writer_id;
    if (m->next_id == 0)
        m->next_id = 2;
    size_t j = seqmap_slot(m, key ? key : 1u << 31, buffer_index);
    return j == SIZE_MAX ? 0 : m->ids[j];
}

void svc__seqmap_free(svc_seqmap *m)
{
    free(m->keys);
    free(m->ids);
    free(m->buffer_index);
    free(m->pending_loss);
    memset(m, 0, sizeof(*m));
}

int svc__seqmap_copy(svc_seqmap *dst, const svc_seqmap *src)
{
    svc__seqmap_free(dst);
    dst->next_id = src->next_id ? src->next_id : 2;
    if (!src->cap)
        return 0;
    dst->keys = malloc(src->cap * sizeof(uint32_t));
    dst->ids = malloc(src->cap * sizeof(uint32_t));
    dst->buffer_index = malloc(src->cap * sizeof(uint32_t));
    dst->pending_loss = calloc(src->cap, sizeof(uint32_t));
    if (!dst->keys || !dst->ids || !dst->buffer_index || !dst->pending_loss) {
        svc__seqmap_free(dst);
        return -ENOMEM;
    }
    memcpy(dst->keys, src->keys, src->cap * sizeof(uint32_t));
    memcpy(dst->ids, src->ids, src->cap * sizeof(uint32_t));
    memcpy(dst->buffer_index, src->buffer_index, src->cap * sizeof(uint32_t));
    dst->cap = src->cap;
    dst->count = src->count;
    return 0;
}

/* ---------------------------------------------------------------- helpers */

static uint64_t boottime_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_BOOTTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static uint64_t clock_ns(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

typedef struct {
    uint8_t *buf;
    size_t cap;
} svc_scratch;

static int scratch_reserve(svc_scratch *s, size_t n)
{
    if (n <= s->cap)
        return 0;
    size_t cap = s->cap ? s->cap : 4096;
    while (cap < n)
        cap *= 2;
    uint8_t *g = realloc(s->buf, cap);
    if (!g)
        return -ENOMEM;
    s->buf = g;
    s->cap = cap;
    return 0;
}

static void service_header(const svc_service *svc,
                           Perfetto__Protos__TracePacket *pk, bool with_ts)
{
    pk->has_trusted_uid = true;
    pk->trusted_uid = (int32_t)svc->uid;
    pk->has_trusted_packet_sequence_id = true;
    pk->trusted_packet_sequence_id = 1;
    pk->has_timestamp_clock_id = true;
    pk->timestamp_clock_id = 6;
    if (with_ts) {
        pk->has_timestamp = true;
        pk->timestamp = boottime_ns();
    }
}

static int emit_service_packet(svc_scratch *sc,
                               const Perfetto__Protos__TracePacket *pk,
                               svc_emit_fn emit, void *ctx)
{
    size_t n = perfetto__protos__trace_packet__get_packed_size(pk);
    if (scratch_reserve(sc, n) < 0)
        return -ENOMEM;
    perfetto__protos__trace_packet__pack(pk, sc->buf);
    return emit(ctx, sc->buf, n);
}

/* Lifecycle events: TracingServiceEvent's field numbers. */
enum {
    EV_ALL_DS_STARTED = 1, EV_TRACING_STARTED = 2, EV_ALL_DS_FLUSHED = 3,
    EV_READ_DONE = 4, EV_TRACING_DISABLED = 5, EV_SLOW_START = 7,
    EV_LAST_FLUSH_SLOW = 8, EV_FLUSH_STARTED = 9,
};

/* A service packet holding ev, stamped `at` (when it happened; 0: now). */
static int emit_service_event(const svc_service *svc, svc_scratch *sc,
                              Perfetto__Protos__TracingServiceEvent *ev,
                              uint64_t at, svc_emit_fn emit, void *ctx)
{
    Perfetto__Protos__TracePacket pk = PERFETTO__PROTOS__TRACE_PACKET__INIT;
    service_header(svc, &pk, true);
    if (at)
        pk.timestamp = at;
    pk.service_event = ev;
    return emit_service_packet(sc, &pk, emit, ctx);
}

/* The data sources of e as last_flush_slow_data_sources (kind
 * EV_LAST_FLUSH_SLOW: svc_flush.c, note_slow_flush) or
 * slow_starting_data_sources (EV_SLOW_START: svc_start.c). */
static int emit_ds_list(const svc_service *svc, svc_scratch *sc,
                        const svc_slow_flush *e, int kind, svc_emit_fn emit,
                        void *ctx)
{
    Perfetto__Protos__TracingServiceEvent__DataSources__DataSource
        d[SVC_SLOW_DS_MAX];
    Perfetto__Protos__TracingServiceEvent__DataSources__DataSource
        *dp[SVC_SLOW_DS_MAX];
    for (uint32_t i = 0; i < e->n; i++) {
        perfetto__protos__tracing_service_event__data_sources__data_source__init(
            &d[i]);
        d[i].producer_name = e->producer[i];
        d[i].data_source_name = e->ds[i];
        dp[i] = &d[i];
    }
    Perfetto__Protos__TracingServiceEvent__DataSources dss =
        PERFETTO__PROTOS__TRACING_SERVICE_EVENT__DATA_SOURCES__INIT;
    dss.n_data_source = e->n;
    dss.data_source = dp;
    Perfetto__Protos__TracingServiceEvent ev =
        PERFETTO__PROTOS__TRACING_SERVICE_EVENT__INIT;
    if (kind == EV_SLOW_START) {
        ev.event_type_case = SVC_EV(SLOW_STARTING_DATA_SOURCES);
        ev.slow_starting_data_sources = &dss;
    } else {
        ev.event_type_case = SVC_EV(LAST_FLUSH_SLOW_DATA_SOURCES);
        ev.last_flush_slow_data_sources = &dss;
    }
    return emit_service_event(svc, sc, &ev, e->at, emit, ctx);
}

/* A service event of kind `ev` (EV_*), stamped `at` (BOOTTIME ns), when it
 * happened, not when read. */
static int emit_event(const svc_service *svc, svc_scratch *sc, int ev_kind,
                      uint64_t at, svc_emit_fn emit, void *ctx)
{
    Perfetto__Protos__TracingServiceEvent ev =
        PERFETTO__PROTOS__TRACING_SERVICE_EVENT__INIT;
    switch (ev_kind) {
    case EV_TRACING_STARTED:
        ev.event_type_case = SVC_EV(TRACING_STARTED);
        ev.tracing_started = true;
        break;
    case EV_ALL_DS_STARTED:
        ev.event_type_case = SVC_EV(ALL_DATA_SOURCES_STARTED);
        ev.all_data_sources_started = true;
        break;
    case EV_ALL_DS_FLUSHED:
        ev.event_type_case = SVC_EV(ALL_DATA_SOURCES_FLUSHED);
        ev.all_data_sources_flushed = true;
        break;
    case EV_READ_DONE:
        ev.event_type_case = SVC_EV(READ_TRACING_BUFFERS_COMPLETED);
        ev.read_tracing_buffers_completed = true;
        break;
    case EV_FLUSH_STARTED:
        ev.event_type_case = SVC_EV(FLUSH_STARTED);
        ev.flush_started = true;
        break;
    default:
        ev.event_type_case = SVC_EV(TRACING_DISABLED);
        ev.tracing_disabled = true;
        break;
    }
    return emit_service_event(svc, sc, &ev, at, emit, ctx);
}

/* The lifecycle events noted since the last pass, in timestamp order (a
 * tie keeps this order: all started, slow starts, flush starts, slow
 * flushes, flush ends, the stop, the read), as Perfetto's
 * EmitLifecycleEvents: all_data_sources_started once every data source
 * started (its start acked, if it acks: svc_start.c; a clone's is in its
 * first pass), slow_starting_data_sources, flush_started and
 * all_data_sources_flushed of every flush (the periodic ones, a
 * consumer's, a clone's, the stop's: svc_flush.c), with
 * last_flush_slow_data_sources before the end of a stop's or clone's
 * flush that some producer did not ack, tracing_disabled once, and
 * read_tracing_buffers_completed, noted at the end of each pass that
 * drained the buffers. Trace processor's sorter takes two flushes and a
 * read as the point up to which it may sort and hand on what it holds
 * (instead of keeping the whole trace until its end). All are dropped
 * unemitted under builtin_data_sources.disable_service_events. Taken off
 * the session before they are emitted: an emit error ends the session's
 * reading anyway. */
static int emit_lifecycle(const svc_service *svc, svc_session *s,
                          svc_scratch *sc, bool events, svc_emit_fn emit,
                          void *ctx)
{
    struct lc_ev { uint64_t at; int kind; uint32_t idx; };
    struct lc_ev v[3 * SVC_EV_FLUSH_MAX + 4];
    size_t n = 0;
    int rc = 0;
    if (s->ev_all_started_ns && !s->emitted_all_started) {
        s->emitted_all_started = true;
        v[n++] = (struct lc_ev){s->ev_all_started_ns, EV_ALL_DS_STARTED, 0};
    }
    if (s->slow_start)
        v[n++] = (struct lc_ev){s->slow_start->at, EV_SLOW_START, 0};
    for (uint32_t i = 0; i < s->ev_flush_started.n; i++)
        v[n++] = (struct lc_ev){s->ev_flush_started.ns[i], EV_FLUSH_STARTED,
                                0};
    for (uint32_t i = 0; i < s->nslow_flushes; i++)
        v[n++] = (struct lc_ev){s->slow_flushes[i].at, EV_LAST_FLUSH_SLOW, i};
    for (uint32_t i = 0; i < s->ev_flushed.n; i++)
        v[n++] = (struct lc_ev){s->ev_flushed.ns[i], EV_ALL_DS_FLUSHED, 0};
    if (s->state == SVC_SESSION_DISABLED && !s->emitted_disabled &&
        !s->is_clone) {
        s->emitted_disabled = true;
        v[n++] = (struct lc_ev){s->ev_disabled_ns, EV_TRACING_DISABLED, 0};
    }
    if (s->ev_read_done_ns)
        v[n++] = (struct lc_ev){s->ev_read_done_ns, EV_READ_DONE, 0};
    s->ev_flush_started.n = s->ev_flushed.n = 0;
    s->ev_read_done_ns = 0;
    for (size_t i = 1; events && i < n; i++) {  /* insertion sort: stable */
        for (size_t k = i; k > 0 && v[k - 1].at > v[k].at; k--) {
            struct lc_ev t = v[k];
            v[k] = v[k - 1];
            v[k - 1] = t;
        }
    }
    for (size_t i = 0; events && i < n && rc >= 0; i++)
        rc = v[i].kind == EV_LAST_FLUSH_SLOW
             ? emit_ds_list(svc, sc, &s->slow_flushes[v[i].idx], v[i].kind,
                            emit, ctx)
             : v[i].kind == EV_SLOW_START
             ? emit_ds_list(svc, sc, s->slow_start, v[i].kind, emit, ctx)
             : emit_event(svc, sc, v[i].kind, v[i].at, emit, ctx);
    for (uint32_t i = 0; i < s->nslow_flushes; i++)
        svc__slow_flush_free(&s->slow_flushes[i]);
    s->nslow_flushes = 0;
    svc__slow_list_drop(&s->slow_start);
    return rc;
}

/* One ClockSnapshot packet of `snap` (svc_clocks.c), BOOTTIME primary. */
static int emit_clock_snapshot(svc_service *svc, svc_scratch *sc,
                               const svc_clock_snap *snap, svc_emit_fn emit,
                               void *ctx)
{
    Perfetto__Protos__ClockSnapshot__Clock c[SVC_CLOCK_IDS];
    Perfetto__Protos__ClockSnapshot__Clock *cp[SVC_CLOCK_IDS];
    for (size_t i = 0; i < SVC_CLOCK_IDS; i++) {
        perfetto__protos__clock_snapshot__clock__init(&c[i]);
        c[i].has_clock_id = true;
        c[i].clock_id = svc__clock_ids[i];
        c[i].has_timestamp = true;
        c[i].timestamp = snap->ts[i];
        cp[i] = &c[i];
    }
    Perfetto__Protos__ClockSnapshot cs = PERFETTO__PROTOS__CLOCK_SNAPSHOT__INIT;
    cs.n_clocks = SVC_CLOCK_IDS;
    cs.clocks = cp;
    cs.has_primary_trace_clock = true;
    cs.primary_trace_clock =
        PERFETTO__PROTOS__BUILTIN_CLOCK__BUILTIN_CLOCK_BOOTTIME;
    Perfetto__Protos__TracePacket pk = PERFETTO__PROTOS__TRACE_PACKET__INIT;
    service_header(svc, &pk, false);
    pk.clock_snapshot = &cs;
    return emit_service_packet(sc, &pk, emit, ctx);
}

/* The sync marker packet: trusted_uid, trusted_packet_sequence_id 1, then
 * synchronization_marker (field 36, 16 bytes) last, byte for byte as the
 * spec fixes it (wire-formats.md §3; a reader scans for the marker, so
 * nothing else goes in this packet). */
static int emit_sync_marker(const svc_service *svc, svc_scratch *sc,
                            svc_emit_fn emit, void *ctx)
{
    static const uint8_t marker[16] = {
        0x82, 0x47, 0x7a, 0x76, 0xb2, 0x8d, 0x42, 0xba,
        0x81, 0xdc, 0x33, 0x32, 0x6d, 0x57, 0xa0, 0x79,
    };
    if (scratch_reserve(sc, 32) < 0)
        return -ENOMEM;
    uint8_t *p = sc->buf;
    uint64_t uid = (uint64_t)(int64_t)(int32_t)svc->uid; /* int32 field */
    *p++ = 0x18;                     /* trusted_uid = 3, varint */
    do {
        *p++ = (uint8_t)((uid & 0x7F) | (uid >= 0x80 ? 0x80 : 0));
        uid >>= 7;
    } while (uid);
    *p++ = 0x50;                     /* trusted_packet_sequence_id = 10 */
    *p++ = 0x01;
    *p++ = 0xA2;                     /* synchronization_marker = 36, len */
    *p++ = 0x02;
    *p++ = sizeof(marker);
    memcpy(p, marker, sizeof(marker));
    p += sizeof(marker);
    return emit(ctx, sc->buf, (size_t)(p - sc->buf));
}

/* The clock snapshots taken since the last pass, then the sync marker if
 * one is due (svc_clocks.c). A first pass with no snapshot pending takes
 * one now (a session read before it started). */
static int emit_clocks(svc_service *svc, svc_session *s, svc_scratch *sc,
                       bool first_pass, svc_emit_fn emit, void *ctx)
{
    int rc = 0;
    if (first_pass && s->nclock_snaps == 0)
        svc__clocks_snapshot(s);
    uint32_t done = 0;
    while (done < s->nclock_snaps &&
           (rc = emit_clock_snapshot(svc, sc, &s->clock_snaps[done], emit,
                                     ctx)) >= 0)
        done++;
    /* Drop what went out, keep the rest (after an error) for later. */
    for (uint32_t i = done; i < s->nclock_snaps; i++)
        s->clock_snaps[i - done] = s->clock_snaps[i];
    s->nclock_snaps -= done;
    if (rc < 0)
        return rc;
    if (s->sync_marker_due) {
        if ((rc = emit_sync_marker(svc, sc, emit, ctx)) < 0)
            return rc;
        s->sync_marker_due = false;
    }
    return 0;
}

static int emit_first_pass(svc_service *svc, svc_session *s, svc_scratch *sc,
                           svc_emit_fn emit, void *ctx)
{
    const Perfetto__Protos__TraceConfig__BuiltinDataSource *b =
        s->cfg->builtin_data_sources;
    int rc;
    if (!(b && b->has_disable_trace_config && b->disable_trace_config)) {
        Perfetto__Protos__TracePacket pk = PERFETTO__PROTOS__TRACE_PACKET__INIT;
        service_header(svc, &pk, false);
        pk.trace_config = s->cfg;
        if ((rc = emit_service_packet(sc, &pk, emit, ctx)) < 0)
            return rc;
    }
    {
        Perfetto__Protos__TracePacket pk = PERFETTO__PROTOS__TRACE_PACKET__INIT;
        Perfetto__Protos__TraceUuid u = PERFETTO__PROTOS__TRACE_UUID__INIT;
        service_header(svc, &pk, false);
        u.has_msb = u.has_lsb = true;
        u.msb = s->uuid_msb;
        u.lsb = s->uuid_lsb;
        pk.trace_uuid = &u;
        if ((rc = emit_service_packet(sc, &pk, emit, ctx)) < 0)
            return rc;
    }
    if (!(b && b->has_disable_system_info && b->disable_system_info)) {
        Perfetto__Protos__TracePacket pk = PERFETTO__PROTOS__TRACE_PACKET__INIT;
        svc_sysinfo si;
        svc_sysinfo_fill(&si);
        service_header(svc, &pk, false);
        pk.system_info = &si.info;
        if ((rc = emit_service_packet(sc, &pk, emit, ctx)) < 0)
            return rc;
    }
    if (!(b && b->has_disable_service_events && b->disable_service_events)) {
        if ((rc = emit_event(svc, sc, EV_TRACING_STARTED, s->ev_started_ns,
                             emit, ctx)) < 0)
            return rc;
        /* A clone's is its source's, before the clone's own events; a
         * session's own goes with the lifecycle events, in timestamp
         * order (a flush may come before the last start ack). */
        if (s->is_clone && s->ev_all_started_ns) {
            s->emitted_all_started = true;
            if ((rc = emit_event(svc, sc, EV_ALL_DS_STARTED,
                                 s->ev_all_started_ns, emit, ctx)) < 0)
                return rc;
        }
    }
    return 0;
}

/* A `trigger` (or, for a clone made on a CLONE_SNAPSHOT trigger,
 * `clone_snapshot_trigger`) packet, timestamped when the trigger arrived. */
typedef struct {
    svc_service *svc;
    svc_scratch *sc;
    svc_emit_fn emit;
    void *ctx;
} svc_trig_emit_ctx;

static int emit_trigger(void *vctx, const svc_trig_info *t, bool clone)
{
    svc_trig_emit_ctx *c = vctx;
    Perfetto__Protos__TracePacket pk = PERFETTO__PROTOS__TRACE_PACKET__INIT;
    Perfetto__Protos__Trigger tr = PERFETTO__PROTOS__TRIGGER__INIT;
    service_header(c->svc, &pk, false);
    pk.has_timestamp = true;
    pk.timestamp = t->boot_time_ns;
    tr.trigger_name = t->name;
    tr.producer_name = t->producer_name;
    tr.has_trusted_producer_uid = tr.has_stop_delay_ms = true;
    tr.trusted_producer_uid = t->producer_uid;
    tr.stop_delay_ms = t->stop_delay_ms;
    if (clone)
        pk.clone_snapshot_trigger = &tr;
    else
        pk.trigger = &tr;
    return emit_service_packet(c->sc, &pk, c->emit, c->ctx);
}

/* A clone's lifecycle (first pass): clone_started, then buffer_cloned
 * per buffer, each at the time it happened, as Perfetto's clones say. */
static int emit_clone_events(const svc_service *svc, const svc_session *s,
                             svc_scratch *sc, svc_emit_fn emit, void *ctx)
{
    for (size_t i = 0; i <= s->nbufs; i++) {
        uint64_t ts = i == 0 ? s->clone_started_ns :
                      s->buf_cloned_ns ? s->buf_cloned_ns[i - 1] : 0;
        if (!ts)
            continue;
        Perfetto__Protos__TracingServiceEvent ev =
            PERFETTO__PROTOS__TRACING_SERVICE_EVENT__INIT;
        if (i == 0) {
            ev.event_type_case = SVC_EV(CLONE_STARTED);
            ev.clone_started = true;
        } else {
            ev.event_type_case = SVC_EV(BUFFER_CLONED);
            ev.buffer_cloned = (uint32_t)(i - 1);
        }
        int rc = emit_service_event(svc, sc, &ev, ts, emit, ctx);
        if (rc < 0)
            return rc;
    }
    return 0;
}

/* ---------------------------------------------------------------- read */

static int emit_stats(svc_service *svc, svc_session *s, svc_scratch *sc,
                      svc_emit_fn emit, void *ctx)
{
    Perfetto__Protos__TraceStats *st = svc_stats_build(svc, s);
    if (!st)
        return -ENOMEM;
    Perfetto__Protos__TracePacket pk = PERFETTO__PROTOS__TRACE_PACKET__INIT;
    service_header(svc, &pk, true);
    pk.trace_stats = st;
    int rc = emit_service_packet(sc, &pk, emit, ctx);
    svc_stats_free(st);
    return rc;
}

/* The file writer (file mode), defined below. */
typedef struct svc_filew svc_filew;
/* Room for a packet of `size` bytes behind its header, plus `slack` bytes
 * that may be written past it but are not committed. */
static int filew_reserve(svc_filew *w, size_t size, size_t slack,
                         uint8_t **dst);
static void filew_commit(svc_filew *w, size_t size, bool flagged);
static int filew_in_place(svc_filew *w, const tb_packet *pkt,
                          const uint8_t *trailer, size_t tlen, bool flagged);
static bool filew_would_wait(svc_filew *w);

/* n <= 128 bytes between buffers apart, without a library call (most
 * packets are small): 16-byte moves from both ends, overlapping in the
 * middle, never outside [0, n). */
static inline void copy_small(uint8_t *d, const uint8_t *s, size_t n)
{
    if (n >= 16) {
        size_t half = n > 64 ? 64 : n > 32 ? 32 : 16;
        for (size_t i = 0; i < half; i += 16) {
            memcpy(d + i, s + i, 16);
            memcpy(d + n - half + i, s + n - half + i, 16);
        }
    } else if (n >= 8) {
        memcpy(d, s, 8);
        memcpy(d + n - 8, s + n - 8, 8);
    } else {
        for (size_t i = 0; i < n; i++)
            d[i] = s[i];
    }
}

/* A packet that failed validation (of `bytes` bytes, from the writer of
 * sequence-map key `key` in buffer `bi`; its sequence-map slot, or
 * SIZE_MAX): counted for the session and for its writer (loss table:
 * invalid), and the next packet of its sequence is flagged, with whatever
 * loss this one carried. Nothing lost silently. */
static void packet_invalid(svc_session *s, uint32_t key, size_t bi,
                           size_t bytes, size_t slot, uint32_t dropped)
{
    s->invalid_packets++;
    svc__loss_invalid(s, key, (uint32_t)bi, bytes);
    if (slot != SIZE_MAX)
        s->seqs.pending_loss[slot] |= dropped | TB_LOSS_PRESENT;
}

/* A packet read out of its buffer that the file has no room for: the
 * session's file reached max_file_size_bytes (s->file_full; the session
 * is disabled after this pass, svc_flush.c). Counted per sequence as
 * cause file_full, like an invalid one, so that the consumer's summary
 * and GetTraceStats say how many packets the limit kept out of the
 * trace; the file gets no further packet, so nothing is flagged. */
static void packet_not_written(svc_session *s, uint32_t key, size_t bi,
                               size_t bytes)
{
    s->file_full = true;
    s->file_full_packets++;
    svc__loss_file_full(s, key, (uint32_t)bi, bytes);
}

/*
 * The read pass. With fw (file mode) a packet is copied straight from the
 * buffer into the file batch behind its Trace.packet header and dropped
 * again if invalid: one copy per byte in user space. A packet of more
 * than 128 bytes in one piece is validated where it lies in the buffer,
 * before the copy (the buffer is the service's own memory: the bytes
 * cannot change between the check and the copy); any other after the
 * copy, in the batch. Checked right behind a copy of ~1 KiB, the
 * validator's first load (the timestamp) waited for the copy's stores:
 * 72% of its samples in a 1 KiB x4 recording, 6.5% of the service's.
 * Ahead of the copy (2026-12-06, one warm daemon per build, recordings
 * alternating, six each): 1 KiB x4 573-614 ns of service CPU per packet
 * against 591-634, 1 KiB x1 415-455 against 423-439 (medians 577 / 593
 * and 417 / 428); 64 B packets 61-66 either way, so those stay as they
 * were. Otherwise a packet goes through the scratch area to emit().
 */
static int session_read(svc_service *svc, svc_session *s, size_t max_bytes,
                        svc_emit_fn emit, void *ctx, bool *more,
                        svc_filew *fw)
{
    svc_scratch sc = { s->scratch, s->scratch_cap };
    size_t budget_used = 0;
    int rc = 0;
    bool events = !(s->cfg->builtin_data_sources &&
                    s->cfg->builtin_data_sources->has_disable_service_events &&
                    s->cfg->builtin_data_sources->disable_service_events);
    if (more)
        *more = false;
    /* Waiting for a trigger (or a CLONE_SNAPSHOT session, read through its
     * clones only): no data at all, not even the service's packets. */
    if (svc__trigger_withholds(s))
        return 0;
    bool first_pass = !s->emitted_config;
    if ((rc = emit_clocks(svc, s, &sc, first_pass, emit, ctx)) < 0)
        goto out;
    if (!s->emitted_config) {
        s->emitted_config = true;
        if ((rc = emit_first_pass(svc, s, &sc, emit, ctx)) < 0)
            goto out;
    }
    if (!(s->cfg->builtin_data_sources &&
          s->cfg->builtin_data_sources->has_disable_trace_config &&
          s->cfg->builtin_data_sources->disable_trace_config)) {
        svc_trig_emit_ctx tc = { svc, &sc, emit, ctx };
        if ((rc = svc__trigger_emit(s, first_pass, emit_trigger, &tc)) < 0)
            goto out;
    }
    if (first_pass && s->is_clone && events &&
        (rc = emit_clone_events(svc, s, &sc, emit, ctx)) < 0)
        goto out;
    if ((rc = emit_lifecycle(svc, s, &sc, events, emit, ctx)) < 0)
        goto out;
    if (s->seqs.next_id == 0)
        s->seqs.next_id = 2;
    for (size_t bi = 0; bi < s->nbufs; bi++) {
        tb_buffer *buf = svc__buffer(svc, s->buf_ids[bi], NULL);
        if (!buf)
            continue;
        tb_begin_read(buf);
        tb_packet pkt;
        tb_seq_props props;
        uint32_t dropped;
        uint8_t tbuf[SVC_TRAILER_MAX];
        struct {
            uint8_t bytes[SVC_TRAILER_MAX];
            size_t len;
            uint32_t uid, seq;
            int32_t pid;
        } tc = { .len = 0 };
        for (;;) {
            if (max_bytes && (budget_used >= max_bytes ||
                              (fw && filew_would_wait(fw)))) {
                if (more)
                    *more = true;
                goto out;
            }
            if (!tb_read_next_packet(buf, &pkt, &props, &dropped))
                break;
            uint32_t key = ((uint32_t)props.producer_id << 16) |
                           props.writer_id;
            size_t slot = seqmap_lookup(&s->seqs, key ? key : 1u << 31,
                                        (uint32_t)bi);
            uint32_t seq = 0;
            if (slot != SIZE_MAX) {
                seq = s->seqs.ids[slot];
                dropped |= s->seqs.pending_loss[slot];
                s->seqs.pending_loss[slot] = 0;
            }
            /* Consecutive packets mostly share a sequence and carry no
             * loss: reuse the trailer encoded for the previous one. */
            const uint8_t *trailer = tc.bytes;
            size_t tlen = tc.len;
            if (dropped || !tc.len || props.uid != tc.uid || seq != tc.seq ||
                props.pid != tc.pid) {
                tlen = svc_packet_trailer(tbuf, (int32_t)props.uid, seq,
                                          props.pid, dropped);
                trailer = tbuf;
                if (!dropped) {
                    memcpy(tc.bytes, tbuf, tlen);
                    tc.len = tlen;
                    tc.uid = props.uid;
                    tc.seq = seq;
                    tc.pid = props.pid;
                }
            }
            size_t total = pkt.size + tlen;
            if (fw && s->file_full) {     /* counted, not copied */
                packet_not_written(s, key, bi, pkt.size);
                continue;
            }
            bool own_flag;   /* the packet's own previous_packet_dropped */
            bool checked = false;        /* validated already */
            if (fw && !s->direct && pkt.size >= svc->file_in_place_min) {
                /* Large packet: validated where it lies in the buffer and
                 * written from there (writev), no copy of ours. */
                if (!svc_packet_check_slices(pkt.slices, pkt.nslices,
                                             &own_flag)) {
                    packet_invalid(s, key, bi, pkt.size, slot, dropped);
                    continue;
                }
                checked = true;
                int w = filew_in_place(fw, &pkt, trailer, tlen,
                                       dropped || own_flag);
                if (w < 0) {
                    rc = w;
                    goto out;
                }
                if (w > 0) {
                    s->packets_read++;
                    budget_used += total;
                    continue;
                }
                /* w == 0: not in place (file full, too many slices):
                 * the copying path below decides, with the check done */
            }
            /* Checked ahead of the copy: a packet in one piece, unless it
             * is small (copy_small's few loads and stores are no wait). */
            if (!checked && pkt.nslices == 1 && pkt.size > 128) {
                if (!svc_packet_check(pkt.slices[0].data, pkt.size,
                                      &own_flag)) {
                    packet_invalid(s, key, bi, pkt.size, slot, dropped);
                    continue;
                }
                checked = true;
            }
            /* The trailer is copied whole (SVC_TRAILER_MAX bytes, a fixed
             * size the compiler inlines, instead of a library call per
             * packet): room for what lies past tlen, never committed. */
            uint8_t *dst = NULL;
            if (fw && (rc = filew_reserve(fw, total, SVC_TRAILER_MAX - tlen,
                                          &dst)) < 0)
                goto out;
            bool direct = dst != NULL;
            if (fw && !direct && checked) {
                /* filew_reserve: the file is full, or this packet would
                 * fill it; a valid one (else it is counted invalid) */
                packet_not_written(s, key, bi, pkt.size);
                continue;
            }
            if (!direct) {
                if (scratch_reserve(&sc, total + SVC_TRAILER_MAX - tlen) <
                    0) {
                    rc = -ENOMEM;
                    goto out;
                }
                dst = sc.buf;
            }
            size_t off = 0;
            if (pkt.nslices == 1 && pkt.size <= 128) {
                copy_small(dst, pkt.slices[0].data, pkt.size);
                off = pkt.size;
            } else {
                for (size_t i = 0; i < pkt.nslices; i++) {
                    memcpy(dst + off, pkt.slices[i].data,
                           pkt.slices[i].size);
                    off += pkt.slices[i].size;
                }
            }
            if (!checked && !svc_packet_check(dst, off, &own_flag)) {
                packet_invalid(s, key, bi, off, slot, dropped);
                continue;
            }
            if (fw && !direct) {
                packet_not_written(s, key, bi, pkt.size);
                continue;
            }
            memcpy(dst + off, trailer, SVC_TRAILER_MAX);
            s->packets_read++;
            budget_used += total;
            if (direct)
                filew_commit(fw, total, dropped || own_flag);
            else if ((rc = emit(ctx, dst, total)) < 0)
                goto out;
        }
    }
    /* Drained: read_tracing_buffers_completed, then the stats if due. */
    s->ev_read_done_ns = svc__boottime_ns();
    if ((rc = emit_lifecycle(svc, s, &sc, events, emit, ctx)) < 0)
        goto out;
    if (s->stats_due && (rc = emit_stats(svc, s, &sc, emit, ctx)) >= 0)
        s->stats_due = false;
out:
    s->scratch = sc.buf;
    s->scratch_cap = sc.cap;
    return rc;
}

int svc_session_read(svc_service *svc, svc_session *s, size_t max_bytes,
                     svc_emit_fn emit, void *ctx, bool *more)
{
    return session_read(svc, s, max_bytes, emit, ctx, more, NULL);
}

/* ---------------------------------------------------------------- file */

struct svc_filew {
    svc_service *svc;
    svc_session *s;
    /* The batch being filled (s->fwb[s->fwb_cur]): buf holds ~1 MiB of
     * staged bytes; iov what the next writev writes, in file order:
     * pieces of buf (headers, trailers, packets copied whole) and packet
     * slices in the trace buffers. seg_open: iov[niov - 1] is a piece of
     * buf ending at len, which the next bytes of buf extend. */
    svc_fw_batch *b;
    size_t hdr;                  /* header length of the reserved packet */
    bool seg_open;
    bool nowait;                 /* flush hands b out, waits for nothing */
    int err;
};

/* The session's batch memory: SVC_FILE_BATCHES batches of
 * SVC_FILE_BATCH bytes in one anonymous mapping that starts on a 2 MiB
 * boundary, with MADV_HUGEPAGE, so that it is backed by 2 MiB pages where
 * transparent huge pages are "madvise" or "always" (advice: elsewhere, or
 * if none is free, 4 KiB pages as before). Each batch is filled once and
 * read once by the kernel's copy per MiB of file; the batches in turn (the
 * writer thread's) spread that over 8 MiB, 2048 small pages. Against
 * malloc's 4 KiB pages (2026-12-06, one warm daemon per build, recordings
 * alternating, medians of ten, service CPU per packet): 1 KiB x1 435.5
 * against 455 ns, 1 KiB x4 540 against 556; 64 B x4 69.5 against 70.5
 * and 64 KiB x1 the same within noise (eight and six each).
 * Mapped at the first batch's first use, untouched parts cost nothing
 * (MAP_NORESERVE); a batch that must outgrow SVC_FILE_BATCH (a packet
 * copied whole that is larger, filew_room) moves to malloc. NULL if the
 * mapping fails: the batches then come from malloc.
 * When a session ends its arena is kept as the service's spare (one;
 * svc->fwb_spare, MADV_FREE meanwhile) and the next session's batches
 * take it, already faulted in: a fresh arena's huge pages were zeroed
 * by the kernel on first touch, 6% of the service's CPU in a profile of
 * a 64 MB recording of 64 B packets (folio_zero_user under filew_emit;
 * on this VM first touches of memory its host had taken back also cost
 * the host's faults). Its bytes are never read before they are written
 * (batch_reset, then filled), so nothing of an earlier session's file
 * can leak into another's. */
#define SVC_FILE_HUGE (2u << 20)
#define SVC_FILE_ARENA ((size_t)SVC_FILE_BATCHES * SVC_FILE_BATCH)

/* A direct session (svc_direct.c) fills SVC_FILE_DIRECT_BATCHES larger
 * batches (a direct write costs less per KiB the larger it is) in the
 * same arena: the same 8 MiB of memory in turn. Fixed by the first
 * batch's allocation (fwb_slot), as the arena's layout. */
static size_t batch_slot(const svc_session *s)
{
    return s->fwb_slot ? s->fwb_slot
                       : s->direct ? SVC_FILE_DIRECT_BATCH : SVC_FILE_BATCH;
}

static int nbatches(const svc_session *s)
{
    return batch_slot(s) == SVC_FILE_DIRECT_BATCH ? SVC_FILE_DIRECT_BATCHES
                                                  : SVC_FILE_BATCHES;
}
_Static_assert(SVC_FILE_DIRECT_BATCHES * (size_t)SVC_FILE_DIRECT_BATCH <=
               (size_t)SVC_FILE_BATCHES * SVC_FILE_BATCH &&
               SVC_FILE_DIRECT_BATCHES >= 2,
               "a direct session's batches fit in the arena, two at least");

static uint8_t *batch_arena_map(void)
{
    size_t span = SVC_FILE_ARENA + SVC_FILE_HUGE;
    uint8_t *m = mmap(NULL, span, PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (m == MAP_FAILED)
        return NULL;
    uint8_t *a = (uint8_t *)(((uintptr_t)m + SVC_FILE_HUGE - 1) &
                             ~(uintptr_t)(SVC_FILE_HUGE - 1));
    if (a > m)
        munmap(m, (size_t)(a - m));
    if (m + span > a + SVC_FILE_ARENA)
        munmap(a + SVC_FILE_ARENA, (size_t)(m + span - (a + SVC_FILE_ARENA)));
#ifdef MADV_HUGEPAGE
    (void)madvise(a, SVC_FILE_ARENA, MADV_HUGEPAGE);
#endif
    return a;
}

/* A batch's memory, on first use: in the session's arena, which is the
 * service's spare one if it has it. */
static int batch_alloc(svc_service *svc, svc_session *s, svc_fw_batch *b)
{
    if (b->buf)
        return 0;
    s->fwb_slot = batch_slot(s);
    if (!s->fwb_arena) {
        s->fwb_arena = svc->fwb_spare ? svc->fwb_spare : batch_arena_map();
        svc->fwb_spare = NULL;
    }
    b->iov = malloc(SVC_FILE_IOV * sizeof(*b->iov));
    if (s->fwb_arena) {
        b->buf = s->fwb_arena + (size_t)(b - s->fwb) * s->fwb_slot;
        b->buf_heap = false;
    } else if (posix_memalign((void **)&b->buf, SVC_FILE_DIRECT_ALIGN,
                              s->fwb_slot) == 0) {
        b->buf_heap = true;          /* aligned: a direct session's too */
    } else {
        b->buf = NULL;
    }
    if (!b->buf || !b->iov) {
        if (b->buf_heap)
            free(b->buf);
        free(b->iov);
        b->buf = NULL;
        b->iov = NULL;
        return -ENOMEM;
    }
    b->cap = s->fwb_slot;
    return 0;
}

/* An empty batch (its memory kept). */
static void batch_reset(svc_fw_batch *b)
{
    b->len = 0;
    b->niov = 0;
    b->nspans = 0;
    b->slice_bytes = 0;
    b->pf = 0;
    b->direct = false;
    b->direct_head = 0;
}

/* The batch the session fills next: empty, or with a direct session's
 * tail at its start (svc_direct.c). */
static void batch_start(svc_session *s, svc_fw_batch *b)
{
    batch_reset(b);
    b->direct_head = svc__direct_start(s, b);
}

/* Must the session wait before it fills batch fwb[cur], counting `extra`
 * more bytes in flight (the batch about to be handed out)? It must while
 * that batch is still in flight, or while two or more are and they hold
 * more than SVC_FILE_IN_FLIGHT_BYTES. *oldest: the first batch in flight
 * from cur on (they were handed out in that order), -1 if none. */
static bool batches_full(svc_service *svc, svc_session *s, int cur,
                         size_t extra, int *oldest)
{
    size_t bytes;
    uint32_t mask = svc_fw_in_flight(svc->fw, s->fwb, SVC_FILE_BATCHES,
                                     &bytes);
    *oldest = -1;
    int nb = nbatches(s);
    for (int i = 0; i < nb && *oldest < 0; i++) {
        int k = (cur + i) % nb;
        if (mask >> k & 1u)
            *oldest = k;
    }
    int n = __builtin_popcount(mask) + (extra > 0);
    return (mask >> cur & 1u) ||
           (n >= 2 && bytes + extra > SVC_FILE_IN_FLIGHT_BYTES);
}

/* Waits (oldest first) until the session may fill fwb[fwb_cur]; returns
 * the first error of a batch it waited for, or the one fwb[fwb_cur] kept
 * from its last write (each batch's error is reaped before it is reused). */
static int batches_wait_room(svc_service *svc, svc_session *s)
{
    int rc = 0, oldest;
    while (batches_full(svc, s, s->fwb_cur, 0, &oldest)) {
        int e = svc_fw_wait(svc->fw, &s->fwb[oldest]);
        if (rc == 0)
            rc = e;
    }
    int e = svc_fw_wait(svc->fw, &s->fwb[s->fwb_cur]);
    return rc < 0 ? rc : e;
}

bool svc__copied_to_thread(uint64_t cpu_ns, uint64_t wall_ns,
                           uint64_t bytes, uint64_t packets)
{
    return wall_ns > 0 && packets > 0 &&
           cpu_ns * 100 >= wall_ns * SVC_FILE_BUSY_PERCENT &&
           bytes >= packets * SVC_FILE_COPIED_OUT_MIN;
}

/* Does a batch of copied packets go to the writer thread?
 * copied_out_now: the answer as it stands; copied_out: the answer for a
 * batch being handed out, which asks each time. Once
 * SVC_FILE_LOAD_WINDOW_NS have gone by since the window began, the
 * answer is made again from what the window saw
 * (svc__copied_to_thread), and a new window begins. A window
 * counts the whole main thread's CPU time, commits and every session,
 * and its waits for the writer thread count as idle: when the thread
 * falls behind, the batches come back here. One clock read per batch,
 * two when a window ends (a ~1 MiB batch holds ~1000 packets of 1 KiB).
 * Why (2026-12-06, Intel Xeon with 2 vCPUs, one warm daemon per build,
 * recordings alternating; service CPU per packet and wall time per 256
 * MB, medians): with every batch of copied packets on the thread, 1 KiB
 * x4 took 133 against 157 ms (eight recordings) at 644 against 579 ns,
 * and 1 KiB x1 103 against 118.5 ms (six) at 480.5 against 425.5 ns:
 * while the main thread is saturated, the other core has room (idle
 * 33% of a 1 KiB x4 recording, perf timeline) and the page cache copy
 * moves there, for ~12% more CPU (the batches cross between cores). With
 * 64 B packets it only cost: x1 67 against 60 ms at 77 against 65.5 ns,
 * x4 the same time at 82 against 75 ns. So neither small packets nor a
 * service with time to spare (the common case: the producers' pace, not
 * the service's, sets the rate) pays for it. */
static bool copied_out_now(const svc_service *svc, const svc_session *s)
{
    if (svc->file_copied_mode != SVC_FILE_COPIED_AUTO)
        return svc->file_copied_mode == SVC_FILE_COPIED_THREAD;
    return s->file_copied_out;
}

void svc__set_load_clock(svc_service *svc, svc_load_clock_fn fn, void *ctx)
{
    svc->load_clock = fn;
    svc->load_clock_ctx = ctx;
}

/* AUTO: a window that is over makes the session's answer again (the
 * thread's CPU time read only then; a test's clocks, both each time). */
static void copied_out_window(const svc_service *svc, svc_session *s)
{
    uint64_t wall, cpu = 0;
    if (svc->load_clock)
        svc->load_clock(svc->load_clock_ctx, &wall, &cpu);
    else
        wall = clock_ns(CLOCK_MONOTONIC);
    if (wall - s->load_wall_ns < SVC_FILE_LOAD_WINDOW_NS)
        return;
    if (!svc->load_clock)
        cpu = clock_ns(CLOCK_THREAD_CPUTIME_ID);
    if (s->load_wall_ns)
        s->file_copied_out = svc__copied_to_thread(
            cpu - s->load_cpu_ns, wall - s->load_wall_ns,
            s->bytes_written_to_file - s->load_bytes,
            s->packets_written_to_file - s->load_packets);
    s->load_cpu_ns = cpu;
    s->load_wall_ns = wall;
    s->load_bytes = s->bytes_written_to_file;
    s->load_packets = s->packets_written_to_file;
}

static bool copied_out(svc_filew *w)
{
    if (w->svc->file_copied_mode == SVC_FILE_COPIED_AUTO)
        copied_out_window(w->svc, w->s);
    return copied_out_now(w->svc, w->s);
}

/* The batch goes out: handed to the writer thread, which writes it while
 * the next batch is filled (svc_fwrite.h), or written here when the
 * service has no writer thread. Returns an error of this write or, with
 * the thread, of an earlier batch it waited for. */
static int filew_flush(svc_filew *w)
{
    svc_fw_batch *b = w->b;
    svc_session *s = w->s;
    int rc = 0;
    if (b->niov > 0) {
        b->fd = s->out_fd;
        b->pa = &s->prealloc;
        if (s->direct)
            svc__direct_cut(s, b);
        s->file_slice_bytes += b->slice_bytes;
        s->file_staged_bytes += b->len - b->direct_head;
        /* Slices of large packets go to the thread; batches of packets
         * copied here go while copied_out says so, else are written
         * here; direct ones always go (a direct write waits for the
         * disk). */
        bool copied = b->slice_bytes < b->len;
        if (w->svc->fw && (b->direct || !copied || copied_out(w)) &&
            svc_fw_submit(w->svc->fw, b) == 0) {
            s->file_copied_out_batches += copied;
            s->fwb_cur = (s->fwb_cur + 1) % nbatches(s);
            b = w->b = &s->fwb[s->fwb_cur];
            if (w->nowait) {  /* the next step waits, or comes back */
                w->seg_open = false;
                return 0;
            }
            rc = batches_wait_room(w->svc, s);
            if (rc == 0)
                rc = batch_alloc(w->svc, s, b);
        } else {
            /* the file gets the batches in flight first */
            if (w->svc->fw)
                rc = svc__file_wait(w->svc, s);
            int e = svc_fw_write_batch(b);
            if (rc == 0)
                rc = e;
        }
    }
    batch_start(s, b);
    w->seg_open = false;
    return rc;
}

/* A step (a pass with a byte budget) ends before its batch fills up
 * when handing it out would leave the session waiting for the writer
 * thread: the main loop goes back to the producers' commits instead. */
static inline bool filew_would_wait(svc_filew *w)
{
    svc_fw_batch *b = w->b;
    if (b->niov + SVC_FILE_IOV / 16 < SVC_FILE_IOV &&
        b->len + b->cap / 8 < b->cap)
        return false;     /* far from full (asked per packet: first) */
    if (!w->svc->fw || (!w->s->direct && b->slice_bytes < b->len &&
                        !copied_out_now(w->svc, w->s)))
        return false;     /* not for the thread (filew_flush) */
    int oldest;
    return batches_full(w->svc, w->s, (w->s->fwb_cur + 1) % nbatches(w->s),
                        b->len + b->slice_bytes, &oldest);
}

/* Room for `need` bytes at the end of buf and `niov` more pieces (flushed
 * first if either is short); need > cap grows buf. The test is inline
 * (it runs per packet), the rest is not. */
static __attribute__((noinline)) int filew_room_slow(svc_filew *w,
                                                     size_t need)
{
    int rc = filew_flush(w);
    if (rc < 0)
        return w->err = rc;
    svc_fw_batch *b = w->b;
    if (b->len + need > b->cap) {
        /* A packet larger than a batch. Empty now, but for a direct
         * session's tail, which moves with it to aligned memory. */
        size_t cap = b->len + need;
        uint8_t *g = NULL;
        if (b->len == 0 && !w->s->direct) {
            g = b->buf_heap ? realloc(b->buf, cap) : malloc(cap);
        } else if (posix_memalign((void **)&g, SVC_FILE_DIRECT_ALIGN,
                                  cap) == 0) {
            memcpy(g, b->buf, b->len);
            if (b->buf_heap)
                free(b->buf);
        } else {
            g = NULL;
        }
        if (!g)
            return w->err = -ENOMEM;
        b->buf = g;
        b->buf_heap = true;
        b->cap = cap;
    }
    return 0;
}

static inline int filew_room(svc_filew *w, size_t need, int niov)
{
    if (w->b->len + need <= w->b->cap && w->b->niov + niov <= SVC_FILE_IOV)
        return 0;
    return filew_room_slow(w, need);
}

/* The n bytes at buf + len (already there) join the file: extend the open
 * piece of buf or start one. The caller made room for one piece. */
static inline void filew_take(svc_filew *w, size_t n)
{
    svc_fw_batch *b = w->b;
    if (w->seg_open) {
        b->iov[b->niov - 1].iov_len += n;
    } else {
        b->iov[b->niov].iov_base = b->buf + b->len;
        b->iov[b->niov].iov_len = n;
        b->niov++;
        w->seg_open = true;
    }
    b->len += n;
}

static inline size_t packet_header(uint8_t *hdr, size_t size)
{
    hdr[0] = 0x0A;                                /* Trace.packet = 1 */
    if (size < 0x80) {                            /* most packets: inline */
        hdr[1] = (uint8_t)size;
        return 2;
    }
    if (size < 0x4000) {
        hdr[1] = (uint8_t)(size | 0x80);
        hdr[2] = (uint8_t)(size >> 7);
        return 3;
    }
    return 1 + svc_varint(hdr + 1, size);
}

/* Bytes packet_header() writes for a packet of size bytes. */
static size_t packet_header_len(size_t size)
{
    return 1 + svc_varint_len(size);
}

/* A record of `framed` bytes joined the file: the counts GetTraceStats
 * reports (svc_stats_add_file). flagged: its last previous_packet_dropped
 * is non-zero. */
static void file_counted(svc_session *s, size_t framed, bool flagged)
{
    s->bytes_written_to_file += framed;
    s->packets_written_to_file++;
    s->flagged_written_to_file += flagged;
}

/* Would `framed` more bytes reach the session's max_file_size_bytes? */
static bool file_would_fill(const svc_session *s, size_t framed)
{
    return s->max_file_size_bytes &&
           s->bytes_written_to_file + framed >= s->max_file_size_bytes;
}

static int filew_emit(void *ctx, const uint8_t *p, size_t size)
{
    svc_filew *w = ctx;
    svc_session *s = w->s;
    if (s->file_full)
        return 0;
    size_t h = packet_header_len(size);
    if (file_would_fill(s, h + size)) {
        s->file_full = true;
        return 0;
    }
    int rc = filew_room(w, h + size, 1);
    if (rc < 0)
        return rc;
    svc_fw_batch *b = w->b;
    packet_header(b->buf + b->len, size);
    memcpy(b->buf + b->len + h, p, size);
    filew_take(w, h + size);
    file_counted(s, h + size, false);     /* the service's own packets */
    return 0;
}

/* Reserves a packet of size bytes in the batch, header written, with
 * `slack` bytes of room past it that filew_commit does not take: *dst is
 * where its bytes go, NULL when the file is (or would become) full, which
 * filew_emit then handles as for any packet. */
static inline int filew_reserve(svc_filew *w, size_t size, size_t slack,
                                uint8_t **dst)
{
    svc_session *s = w->s;
    *dst = NULL;
    if (s->file_full)
        return 0;
    size_t h = packet_header_len(size);
    if (file_would_fill(s, h + size))
        return 0;
    int rc = filew_room(w, h + size + slack, 1);
    if (rc < 0)
        return rc;
    svc_fw_batch *b = w->b;
    size_t ahead = b->len + h + size + SVC_FILE_PREFETCH_AHEAD;
    if (ahead > b->cap)
        ahead = b->cap;
    for (size_t a = b->pf > b->len ? b->pf : b->len & ~(size_t)63;
         a < ahead; a += 64)
        __builtin_prefetch(b->buf + a, 1, 3);
    if (ahead > b->pf)
        b->pf = ahead;
    packet_header(b->buf + b->len, size);
    w->hdr = h;
    *dst = b->buf + b->len + h;
    return 0;
}

static inline void filew_commit(svc_filew *w, size_t size, bool flagged)
{
    filew_take(w, w->hdr + size);
    file_counted(w->s, w->hdr + size, flagged);
}

/* A valid packet written from where it lies: header and trailer go to buf,
 * each slice is a piece of its own (slices under SVC_FILE_IN_PLACE_SLICE
 * bytes are copied into buf instead), and the memory it covers joins the
 * batch's spans (the writer thread's fence). Returns 1 if done, 0 if it
 * must take the copying path (the file is or would become full; too many
 * slices). */
static int filew_in_place(svc_filew *w, const tb_packet *pkt,
                          const uint8_t *trailer, size_t tlen, bool flagged)
{
    svc_session *s = w->s;
    size_t size = pkt->size + tlen;
    size_t h = packet_header_len(size);
    if (s->file_full || pkt->nslices + 2 > SVC_FILE_IOV ||
        file_would_fill(s, h + size))
        return 0;
    size_t small = 0;
    for (size_t i = 0; i < pkt->nslices; i++)
        if (pkt->slices[i].size < SVC_FILE_IN_PLACE_SLICE)
            small += pkt->slices[i].size;
    int rc = filew_room(w, h + small + tlen, (int)pkt->nslices + 2);
    if (rc < 0)
        return rc;
    svc_fw_batch *b = w->b;
    packet_header(b->buf + b->len, size);
    filew_take(w, h);
    for (size_t i = 0; i < pkt->nslices; i++) {
        const tb_slice *sl = &pkt->slices[i];
        if (sl->size < SVC_FILE_IN_PLACE_SLICE) {
            memcpy(b->buf + b->len, sl->data, sl->size);
            filew_take(w, sl->size);
            continue;
        }
        b->iov[b->niov].iov_base = (void *)(uintptr_t)sl->data;
        b->iov[b->niov].iov_len = sl->size;
        b->niov++;
        svc_fw_note_span(b, sl->data, sl->size);
        b->slice_bytes += sl->size;
        w->seg_open = false;
    }
    memcpy(b->buf + b->len, trailer, tlen);
    filew_take(w, tlen);
    file_counted(s, h + size, flagged);
    return 1;
}

int svc_session_write_file_step(svc_service *svc, svc_session *s,
                                size_t max_bytes, bool *more)
{
    *more = false;
    if (s->out_fd < 0)
        return 0;
    /* A step with a budget leaves the batch in flight, and the next one
     * does not wait for it either: it comes back later. */
    if (max_bytes && svc__file_waiting(svc, s)) {
        *more = true;
        return 0;
    }
    svc_fw_batch *b = &s->fwb[s->fwb_cur];
    if (svc->fw) {
        int e = batches_wait_room(svc, s);
        if (e < 0) {
            svc__file_fail(s, e);
            return e;
        }
    }
    if (batch_alloc(svc, s, b) < 0) {
        svc__file_fail(s, -ENOMEM);
        return -ENOMEM;
    }
    batch_start(s, b);
    svc_filew w = { .svc = svc, .s = s, .b = b };
    int rc = session_read(svc, s, max_bytes, filew_emit, &w, more, &w);
    /* Handed out (or written) before we return to the loop: the next
     * commit may need the fence to see the slices. A step with a budget
     * does not wait for the other batch (the next step does, or comes
     * back later); a whole pass does. */
    w.nowait = max_bytes != 0;
    int frc = filew_flush(&w);
    if (rc < 0 || frc < 0) {
        *more = false;
        svc__file_fail(s, rc < 0 ? rc : frc);
    }
    if (rc < 0)
        return rc;
    return frc;
}

bool svc__file_waiting(svc_service *svc, svc_session *s)
{
    int oldest;
    return svc->fw && batches_full(svc, s, s->fwb_cur, 0, &oldest);
}

int svc__file_wait(svc_service *svc, svc_session *s)
{
    int rc = 0;
    for (int i = 0; svc->fw && i < SVC_FILE_BATCHES; i++) {
        int e = svc_fw_wait(svc->fw, &s->fwb[i]);
        if (rc == 0)
            rc = e;
    }
    if (rc < 0)
        svc__file_fail(s, rc);
    return rc;
}

void svc__file_fail(svc_session *s, int rc)
{
    if (!s->file_failed)
        s->file_errno = rc < 0 ? -rc : EIO;
    s->file_failed = true;
}

int64_t svc__file_base(int fd)
{
    int fl = fcntl(fd, F_GETFL);
    if (fl >= 0 && (fl & O_APPEND)) {
        struct stat st;
        return fstat(fd, &st) == 0 ? (int64_t)st.st_size : 0;
    }
    off_t at = lseek(fd, 0, SEEK_CUR);
    return at < 0 ? 0 : (int64_t)at;
}

void svc__file_batches_free(svc_service *svc, svc_session *s)
{
    for (int i = 0; i < SVC_FILE_BATCHES; i++) {
        if (s->fwb[i].buf_heap)
            free(s->fwb[i].buf);
        free(s->fwb[i].iov);
        s->fwb[i].buf = NULL;
        s->fwb[i].iov = NULL;
    }
    if (s->fwb_arena && !svc->fwb_spare) {
        /* kept for the next session (see above); meanwhile the kernel
         * may take its pages back under memory pressure (MADV_FREE: they
         * read as zero then, and fault in again when written) */
#ifdef MADV_FREE
        (void)madvise(s->fwb_arena, SVC_FILE_ARENA, MADV_FREE);
#endif
        svc->fwb_spare = s->fwb_arena;
    } else if (s->fwb_arena) {
        munmap(s->fwb_arena, SVC_FILE_ARENA);
    }
    s->fwb_arena = NULL;
    s->fwb_slot = 0;
}

void svc__file_spare_free(svc_service *svc)
{
    if (svc->fwb_spare)
        munmap(svc->fwb_spare, SVC_FILE_ARENA);
    svc->fwb_spare = NULL;
}

int svc_session_write_file(svc_service *svc, svc_session *s)
{
    bool more;
    int rc;
    do
        rc = svc_session_write_file_step(svc, s, 0, &more);
    while (rc >= 0 && more);
    s->file_pass_open = false;
    /* whole: every batch of it written (or failed) when we return */
    int wrc = svc__file_wait(svc, s);
    /* the last one: a direct session's tail, O_DIRECT off */
    int drc = svc__direct_finish(s);
    if (drc < 0) {
        svc__file_fail(s, drc);
        if (wrc == 0)
            wrc = drc;
    }
    return rc < 0 ? rc : wrc;
}
