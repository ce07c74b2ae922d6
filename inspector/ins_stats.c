/*
 * ins_stats.c - trace processor's stats semantics and per-packet
 * bookkeeping (facts and rules in ins_stats.h).
 *
 * Decoding: TraceStats and TraceConfig with protobuf-c (common.pb-c.h,
 * config.pb-c.h, generated from protos/); the two TracingServiceEvent
 * fields we need (clone_started 10, buffer_cloned 11) are walked by hand.
 *
 * The row definitions (names, severities) are in ins_stat_defs.c.
 *
 * Write path: stats go straight to SQLite (ins_db_stat upserts), so memory
 * does not depend on how many buffers a (hostile) TraceStats lists; the
 * only per-packet counter kept in memory is the skipped-packet total,
 * written by ins_tracker_flush().
 */
#include "ins_stats.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.pb-c.h"
#include "config.pb-c.h"
#include "ins_fevents.h"
#include "ins_ftrace.h"
#include "ins_loss.h"
#include "ins_seq.h"

/* One derived bucket (a buffer index) while applying a TraceStats. */
typedef struct bucket {
    int32_t idx;
    uint32_t packet_loss, incremental_sequences_dropped;
    uint32_t cause[INS_LOSS_CAUSES];
} bucket;

struct ins_tracker {
    ins_db *db;
    bool packet_rows;           /* fill the packet table */
    ins_seq_table seqs;
    uint64_t skipped_incremental; /* packet_skipped_..._invalid */
    bool skipped_dirty;
    uint64_t compressed_skipped;
    int64_t latest_ts;          /* for packets without a timestamp */
    bool clone_trigger_set;
    int64_t clone_trigger_ts;
    bool clone_started_set;
    int64_t clone_started_ts;
    bucket *buckets;            /* scratch for apply_trace_stats */
    uint8_t *loss_blob;         /* last TraceStats with shmtrace_sequence_
                                   loss (packed), written by ins_tracker_
                                   finish */
    size_t loss_len;
    size_t nbuckets, bucket_cap;
    /* The last trace_config (for ins_tracker_finish). */
    bool cfg_seen, cfg_write_into_file;
    uint32_t cfg_file_write_period_ms, cfg_flush_period_ms;
    size_t cfg_nbuffers;
    int64_t service_major;      /* -1: unknown */
    int64_t *overwritten;       /* traced_buf_bytes_overwritten[idx] */
    size_t n_overwritten;
    ins_ftrace *ftrace;         /* ftrace_* stats (ins_ftrace.h) */
    ins_fevents *fevents;       /* stats from the events (ins_fevents.h) */
    /* The latest TracingServiceEvent naming data sources, of kind
     * INS_SLOW_FLUSH (last_flush_slow_data_sources) and INS_SLOW_START
     * (slow_starting_data_sources): their list as text (ds_list), NULL
     * if none came, and its timestamp. */
    char *slow[2];
    int64_t slow_ts[2];
};

enum { INS_SLOW_FLUSH = 0, INS_SLOW_START = 1 };

int ins_tracker_create(ins_db *db, bool packet_rows, ins_tracker **out)
{
    ins_tracker *t = calloc(1, sizeof(*t));
    if (t == NULL)
        return -ENOMEM;
    t->db = db;
    t->packet_rows = packet_rows;
    t->service_major = -1;
    t->ftrace = ins_ftrace_create(db);
    t->fevents = ins_fevents_create(db);
    if (t->ftrace == NULL || t->fevents == NULL) {
        ins_ftrace_destroy(t->ftrace);
        ins_fevents_destroy(t->fevents);
        free(t);
        return -ENOMEM;
    }
    ins_seq_table_init(&t->seqs);
    *out = t;
    return 0;
}

void ins_tracker_destroy(ins_tracker *t)
{
    if (t == NULL)
        return;
    ins_seq_table_free(&t->seqs);
    free(t->buckets);
    free(t->overwritten);
    ins_ftrace_destroy(t->ftrace);
    ins_fevents_destroy(t->fevents);
    free(t->loss_blob);
    free(t->slow[0]);
    free(t->slow[1]);
    free(t);
}

uint64_t ins_tracker_compressed_skipped(const ins_tracker *t)
{
    return t->compressed_skipped;
}

static int stat_set(ins_tracker *t, ins_stat_id id, bool has_idx,
                    int64_t idx, int64_t value, bool add)
{
    const ins_stat_def *d = &ins_stat_defs[id];
    return ins_db_stat(t->db, d->name, has_idx, idx, d->severity, d->source,
                       d->description, value, add);
}

int ins_tracker_start(ins_tracker *t)
{
    for (int i = 0; i < INS_STAT_COUNT; i++) {
        if (ins_stat_defs[i].indexed)
            continue;
        if (stat_set(t, (ins_stat_id)i, false, 0, 0, false) != 0)
            return -EIO;
    }
    int rc = ins_ftrace_start(t->ftrace);
    return rc ? rc : ins_fevents_start(t->fevents);
}

static bucket *bucket_get(ins_tracker *t, int32_t idx)
{
    for (size_t i = 0; i < t->nbuckets; i++)
        if (t->buckets[i].idx == idx)
            return &t->buckets[i];
    if (t->nbuckets == t->bucket_cap) {
        size_t cap = t->bucket_cap ? t->bucket_cap * 2 : 8;
        bucket *nb = realloc(t->buckets, cap * sizeof(*nb));
        if (nb == NULL)
            return NULL;
        t->buckets = nb;
        t->bucket_cap = cap;
    }
    bucket *b = &t->buckets[t->nbuckets++];
    memset(b, 0, sizeof(*b));
    b->idx = idx;
    return b;
}

#define BUF_FIELD(stat, field) \
    {stat, offsetof(Perfetto__Protos__TraceStats__BufferStats, field)}

static const struct {
    ins_stat_id stat;
    size_t offset; /* of the uint64_t in the BufferStats struct */
} BUFFER_FIELDS[] = {
    BUF_FIELD(INS_STAT_BUF_BUFFER_SIZE, buffer_size),
    BUF_FIELD(INS_STAT_BUF_BYTES_WRITTEN, bytes_written),
    BUF_FIELD(INS_STAT_BUF_BYTES_OVERWRITTEN, bytes_overwritten),
    BUF_FIELD(INS_STAT_BUF_BYTES_READ, bytes_read),
    BUF_FIELD(INS_STAT_BUF_PADDING_BYTES_WRITTEN, padding_bytes_written),
    BUF_FIELD(INS_STAT_BUF_PADDING_BYTES_CLEARED, padding_bytes_cleared),
    BUF_FIELD(INS_STAT_BUF_CHUNKS_WRITTEN, chunks_written),
    BUF_FIELD(INS_STAT_BUF_CHUNKS_REWRITTEN, chunks_rewritten),
    BUF_FIELD(INS_STAT_BUF_CHUNKS_OVERWRITTEN, chunks_overwritten),
    BUF_FIELD(INS_STAT_BUF_CHUNKS_DISCARDED, chunks_discarded),
    BUF_FIELD(INS_STAT_BUF_CHUNKS_READ, chunks_read),
    BUF_FIELD(INS_STAT_BUF_CHUNKS_RELOCATED, chunks_relocated),
    BUF_FIELD(INS_STAT_BUF_CHUNKS_COMMITTED_OUT_OF_ORDER,
              chunks_committed_out_of_order),
    BUF_FIELD(INS_STAT_BUF_WRITE_WRAP_COUNT, write_wrap_count),
    BUF_FIELD(INS_STAT_BUF_PATCHES_SUCCEEDED, patches_succeeded),
    BUF_FIELD(INS_STAT_BUF_PATCHES_FAILED, patches_failed),
    BUF_FIELD(INS_STAT_BUF_READAHEADS_SUCCEEDED, readaheads_succeeded),
    BUF_FIELD(INS_STAT_BUF_READAHEADS_FAILED, readaheads_failed),
    BUF_FIELD(INS_STAT_BUF_ABI_VIOLATIONS, abi_violations),
    BUF_FIELD(INS_STAT_BUF_TRACE_WRITER_PACKET_LOSS,
              trace_writer_packet_loss),
};

/* Apply a decoded TraceStats (freed by the caller). */
static int apply_trace_stats(ins_tracker *t,
                             const Perfetto__Protos__TraceStats *ts)
{
    int rc = 0;
#define SET1(stat, v) rc |= stat_set(t, stat, false, 0, (int64_t)(v), false)
    SET1(INS_STAT_PRODUCERS_CONNECTED, ts->producers_connected);
    SET1(INS_STAT_PRODUCERS_SEEN, ts->producers_seen);
    SET1(INS_STAT_DATA_SOURCES_REGISTERED, ts->data_sources_registered);
    SET1(INS_STAT_DATA_SOURCES_SEEN, ts->data_sources_seen);
    SET1(INS_STAT_TRACING_SESSIONS, ts->tracing_sessions);
    SET1(INS_STAT_TOTAL_BUFFERS, ts->total_buffers);
    SET1(INS_STAT_CHUNKS_DISCARDED, ts->chunks_discarded);
    SET1(INS_STAT_PATCHES_DISCARDED, ts->patches_discarded);
    SET1(INS_STAT_FLUSHES_REQUESTED, ts->flushes_requested);
    SET1(INS_STAT_FLUSHES_SUCCEEDED, ts->flushes_succeeded);
    SET1(INS_STAT_FLUSHES_FAILED, ts->flushes_failed);
#undef SET1
    if (ts->filter_stats) {
        const Perfetto__Protos__TraceStats__FilterStats *f = ts->filter_stats;
        for (size_t i = 0; i < f->n_bytes_discarded_per_buffer; i++)
            rc |= stat_set(t, INS_STAT_BUF_BYTES_FILTERED_OUT, true,
                           (int32_t)i,
                           (int64_t)f->bytes_discarded_per_buffer[i], false);
    }
    if (ts->final_flush_outcome ==
        PERFETTO__PROTOS__TRACE_STATS__FINAL_FLUSH_OUTCOME__FINAL_FLUSH_SUCCEEDED)
        rc |= stat_set(t, INS_STAT_FINAL_FLUSH_SUCCEEDED, false, 0, 1, true);
    else if (ts->final_flush_outcome ==
             PERFETTO__PROTOS__TRACE_STATS__FINAL_FLUSH_OUTCOME__FINAL_FLUSH_FAILED)
        rc |= stat_set(t, INS_STAT_FINAL_FLUSH_FAILED, false, 0, 1, true);

    if (ts->n_buffer_stats > t->n_overwritten) {
        int64_t *no = realloc(t->overwritten,
                              ts->n_buffer_stats * sizeof(*no));
        if (no == NULL)
            return -ENOMEM;
        memset(no + t->n_overwritten, 0,
               (ts->n_buffer_stats - t->n_overwritten) * sizeof(*no));
        t->overwritten = no;
        t->n_overwritten = ts->n_buffer_stats;
    }
    for (size_t b = 0; b < ts->n_buffer_stats && rc == 0; b++) {
        const uint8_t *bs = (const uint8_t *)ts->buffer_stats[b];
        t->overwritten[b] = (int64_t)ts->buffer_stats[b]->bytes_overwritten;
        for (size_t f = 0; f < sizeof(BUFFER_FIELDS) / sizeof(*BUFFER_FIELDS);
             f++) {
            uint64_t v;
            memcpy(&v, bs + BUFFER_FIELDS[f].offset, sizeof(v));
            rc |= stat_set(t, BUFFER_FIELDS[f].stat, true, (int32_t)b,
                           (int64_t)v, false);
        }
    }

    /* Derived per-buffer loss stats from the sequences seen so far. */
    t->nbuckets = 0;
    for (size_t w = 0; w < ts->n_writer_stats && rc == 0; w++) {
        const Perfetto__Protos__TraceStats__WriterStats *ws =
            ts->writer_stats[w];
        ins_seq *s = ins_seq_get(&t->seqs, (uint32_t)ws->sequence_id, false);
        if (s == NULL || !s->tp_seen)
            continue;
        if (s->in_table && (!s->has_buffer ||
                            s->buffer != (int64_t)ws->buffer)) {
            s->has_buffer = true;
            s->buffer = (int64_t)ws->buffer;
            s->dirty = true;
        }
        bucket *bk = bucket_get(t, (int32_t)ws->buffer);
        if (bk == NULL) {
            rc = -ENOMEM;
            break;
        }
        bk->packet_loss += s->loss_count;
        bk->incremental_sequences_dropped +=
            s->needs_incremental_skipped > 0 &&
            s->needs_incremental_skipped == s->needs_incremental_total;
        for (int c = 0; c < INS_LOSS_CAUSES; c++)
            bk->cause[c] += s->cause_count[c];
    }
    for (size_t i = 0; i < t->nbuckets && rc == 0; i++) {
        const bucket *bk = &t->buckets[i];
        rc |= stat_set(t, INS_STAT_BUF_SEQUENCE_PACKET_LOSS, true, bk->idx,
                       bk->packet_loss, false);
        rc |= stat_set(t, INS_STAT_BUF_INCREMENTAL_SEQUENCES_DROPPED, true,
                       bk->idx, bk->incremental_sequences_dropped, false);
        for (int c = 0; c < INS_LOSS_CAUSES; c++)
            rc |= stat_set(t, (ins_stat_id)(INS_STAT_BUF_DATA_LOSS_READ_GAP + c),
                           true, bk->idx, bk->cause[c], false);
    }
    return rc ? (rc == -ENOMEM ? -ENOMEM : -EIO) : 0;
}

/* Our buffer_config table; a config that does not decode is ignored (it
 * changes no stat). */
static int apply_trace_config(ins_tracker *t, const ins_packet *p)
{
    Perfetto__Protos__TraceConfig *tc = perfetto__protos__trace_config__unpack(
        NULL, p->trace_config.len, p->trace_config.data);
    if (tc == NULL)
        return 0;
    int rc = 0;
    for (size_t i = 0; i < tc->n_buffers && rc == 0; i++) {
        const Perfetto__Protos__TraceConfig__BufferConfig *b = tc->buffers[i];
        const char *policy =
            b->fill_policy ==
                    PERFETTO__PROTOS__TRACE_CONFIG__BUFFER_CONFIG__FILL_POLICY__DISCARD
                ? "DISCARD"
                : "RING_BUFFER";
        const char *mode =
            b->experimental_mode ==
                    PERFETTO__PROTOS__TRACE_CONFIG__BUFFER_CONFIG__EXPERIMENTAL_MODE__TRACE_BUFFER_V2
                ? "V2"
                : "V1";
        rc = ins_db_put_buffer_config(t->db, (int64_t)i, b->size_kb, policy,
                                      mode);
    }
    /* Trace processor's config checks (ins_stats.h). */
    t->cfg_seen = true;
    t->cfg_write_into_file = tc->write_into_file;
    t->cfg_file_write_period_ms = tc->file_write_period_ms;
    t->cfg_flush_period_ms = tc->flush_period_ms;
    t->cfg_nbuffers = tc->n_buffers;
    for (size_t i = 0; i < tc->n_buffers && rc == 0 && tc->write_into_file;
         i++)
        if (tc->buffers[i]->fill_policy ==
            PERFETTO__PROTOS__TRACE_CONFIG__BUFFER_CONFIG__FILL_POLICY__DISCARD)
            rc = stat_set(t, INS_STAT_CONFIG_WRITE_INTO_FILE_DISCARD, true,
                          (int64_t)i, 1, true);
    if (rc == 0)
        rc = ins_db_info_int(t->db, "write_into_file", tc->write_into_file);
    if (rc == 0 && tc->has_duration_ms)
        rc = ins_db_info_int(t->db, "duration_ms", tc->duration_ms);
    perfetto__protos__trace_config__free_unpacked(tc, NULL);
    return rc;
}

/* A ClockSnapshot choosing a primary trace clock other than BOOTTIME:
 * trace processor then converts every timestamp, which the ftrace
 * analysis does not (ins_fevents.h). */
static void check_trace_clock(ins_tracker *t, const ins_packet *p)
{
    const uint8_t *q = p->clock_snapshot.data, *d;
    const uint8_t *end = q + p->clock_snapshot.len;
    uint32_t num;
    unsigned wt;
    uint64_t v;
    size_t n;
    while (ins_pb_next(&q, end, &num, &wt, &v, &d, &n))
        if (num == 2 && wt == 0 && v != INS_CLOCK_BOOTTIME)
            ins_fevents_inexact(t->fevents, "a ClockSnapshot chose a "
                                "primary trace clock other than boottime");
}

/* c if printable ASCII, else '?': text from the trace goes into trace_info,
 * which sqlite3 shows on terminals. */
static inline char printable(uint8_t c)
{
    return c >= 0x20 && c < 0x7f ? (char)c : '?';
}

/* At most this much of a data source list goes into trace_info (it comes
 * from the trace; the services list at most 32 entries). */
#define INS_DS_LIST_MAX 2048

/* TracingServiceEvent.DataSources [q, q + len) as text: "producer/data
 * source" entries joined by ", ", printable ASCII only (others as '?'),
 * cut at INS_DS_LIST_MAX bytes (then ending in "..."); "(none named)" if
 * it names none (or cannot be read). NULL: no memory. */
static char *ds_list(const uint8_t *q, size_t len)
{
    char *out = malloc(INS_DS_LIST_MAX + 4);
    size_t o = 0;
    bool cut = false;
    const uint8_t *end = q + len, *d;
    uint32_t num;
    unsigned wt;
    uint64_t v;
    size_t n;
    if (out == NULL)
        return NULL;
    while (!cut && ins_pb_next(&q, end, &num, &wt, &v, &d, &n)) {
        if (num != 1 || wt != 2)
            continue;
        const uint8_t *names[2] = {NULL, NULL}, *e = d + n, *f;
        size_t lens[2] = {0, 0}, m;
        while (ins_pb_next(&d, e, &num, &wt, &v, &f, &m))
            if ((num == 1 || num == 2) && wt == 2)
                names[num - 1] = f, lens[num - 1] = m;
        if (o > 0 && o + 2 <= INS_DS_LIST_MAX) {
            out[o++] = ',';
            out[o++] = ' ';
        }
        for (int k = 0; k < 2 && !cut; k++) {
            if (k == 1 && o < INS_DS_LIST_MAX)
                out[o++] = '/';
            for (size_t i = 0; i < lens[k]; i++) {
                if (o >= INS_DS_LIST_MAX) {
                    cut = true;
                    break;
                }
                out[o++] = printable(names[k][i]);
            }
        }
    }
    if (cut)
        memcpy(out + o, "...", 3), o += 3;
    out[o] = 0;
    if (o == 0)                  /* empty, or not readable */
        snprintf(out, INS_DS_LIST_MAX, "(none named)");
    return out;
}

/* Keeps the list of a DataSources event of kind `which` if it is the
 * latest so far. */
static void note_ds_list(ins_tracker *t, int which, const uint8_t *q,
                         size_t len, int64_t ts)
{
    if (t->slow[which] != NULL && ts < t->slow_ts[which])
        return;
    char *text = ds_list(q, len);
    if (text == NULL)
        return;
    free(t->slow[which]);
    t->slow[which] = text;
    t->slow_ts[which] = ts;
}

/* TracingServiceEvent: tracing_started (2, for the ftrace analysis),
 * clone_started (10) and buffer_cloned (11); the data sources of
 * slow_starting_data_sources (7) and last_flush_slow_data_sources (8),
 * the latest of each, into trace_info at the end (ins_tracker_finish). */
static int apply_service_event(ins_tracker *t, const ins_packet *p,
                               int64_t ts)
{
    const uint8_t *q = p->service_event.data;
    const uint8_t *end = q + p->service_event.len;
    int rc = 0;
    while (q < end && rc == 0) {
        uint64_t tag, v;
        if (ins_varint(&q, end, &tag) != 0)
            return 0;
        unsigned wt = (unsigned)(tag & 7);
        if (wt == 0) {
            if (ins_varint(&q, end, &v) != 0)
                return 0;
            if (tag >> 3 == 2 && v) {
                if (p->clock_id != 0 && p->clock_id != INS_CLOCK_BOOTTIME)
                    ins_fevents_inexact(t->fevents, "the service's "
                                        "tracing_started is stamped with "
                                        "another clock than boottime");
                ins_fevents_tracing_started(t->fevents, ts);
            } else if (tag >> 3 == 10) {
                /* Parsed in timestamp order: the latest one wins. */
                if (!t->clone_started_set || ts >= t->clone_started_ts) {
                    t->clone_started_set = true;
                    t->clone_started_ts = ts;
                    rc = stat_set(t, INS_STAT_CLONE_STARTED_TIMESTAMP_NS,
                                  false, 0, ts, false);
                }
            } else if (tag >> 3 == 11) {
                rc = stat_set(t, INS_STAT_BUF_CLONE_DONE_TIMESTAMP_NS, true,
                              (int32_t)(uint32_t)v, ts, false);
            }
        } else if (wt == 2) {
            if (ins_varint(&q, end, &v) != 0 || v > (uint64_t)(end - q))
                return 0;
            if (tag >> 3 == 7 || tag >> 3 == 8)
                note_ds_list(t, tag >> 3 == 8 ? INS_SLOW_FLUSH
                                              : INS_SLOW_START,
                             q, (size_t)v, ts);
            q += v;
        } else if (wt == 1 || wt == 5) {
            size_t n = wt == 1 ? 8 : 4;
            if ((size_t)(end - q) < n)
                return 0;
            q += n;
        } else {
            return 0;
        }
    }
    return rc;
}

static int on_packet(ins_tracker *t, const ins_packet *p,
                     const Perfetto__Protos__TraceStats *ts_msg, char *err,
                     size_t errlen);
static int apply_system_info(ins_tracker *t, const ins_packet *p);

static int packet_row(ins_tracker *t, const ins_packet *p)
{
    char fallback[24];
    const char *kind = NULL;
    if (p->payload_field) {
        kind = ins_packet_field_name(p->payload_field);
        if (kind == NULL) {
            snprintf(fallback, sizeof(fallback), "field_%" PRIu32,
                     p->payload_field);
            kind = fallback;
        }
    }
    ins_packet_row row = {
        .id = p->id,
        .file_offset = p->offset,
        .size = p->size,
        .has_ts = p->has_timestamp,
        .ts = (int64_t)p->timestamp,
        .has_clock_id = p->clock_id != 0,
        .clock_id = p->clock_id,
        .has_seq_id = p->has_seq_id,
        .seq_id = p->seq_id,
        .has_uid = p->has_uid,
        .uid = p->trusted_uid,
        .has_pid = p->has_pid,
        .pid = p->trusted_pid,
        .previous_packet_dropped = p->previous_packet_dropped,
        .sequence_flags = p->sequence_flags,
        .first_packet_on_sequence = p->first_packet_on_sequence,
        .kind = kind,
        .has_container = p->in_container,
        .container_id = p->container_id,
    };
    return ins_db_insert_packet(t->db, &row);
}

int ins_tracker_on_packet(ins_tracker *t, const ins_packet *p, char *err,
                          size_t errlen)
{
    int rc = 0;
    /* Validate before changing anything, so a packet that is refused
     * leaves no trace in the tables or the counters. */
    Perfetto__Protos__TraceStats *ts_msg = NULL;
    if (p->trace_stats.present && !p->has_compressed_packets &&
        !p->has_clock_snapshot) {
        ts_msg = perfetto__protos__trace_stats__unpack(
            NULL, p->trace_stats.len, p->trace_stats.data);
        if (ts_msg == NULL) {
            snprintf(err, errlen, "packet #%" PRIu64 " at offset %" PRIu64
                     ": its trace_stats does not decode", p->id, p->offset);
            return -EBADMSG;
        }
    }
    rc = on_packet(t, p, ts_msg, err, errlen);
    perfetto__protos__trace_stats__free_unpacked(ts_msg, NULL);
    return rc;
}

static int on_packet(ins_tracker *t, const ins_packet *p,
                     const Perfetto__Protos__TraceStats *ts_msg, char *err,
                     size_t errlen)
{
    int rc;
    ins_seq *s = NULL;
    bool first_seen = false;
    if (p->has_seq_id || !p->has_compressed_packets) {
        s = ins_seq_get(&t->seqs, p->seq_id, true);
        if (s == NULL) {
            snprintf(err, errlen, "packet #%" PRIu64 ": more than %u "
                     "sequences; the inspector stops here", p->id,
                     INS_SEQ_MAX);
            return errno == ENOMEM ? -ENOMEM : -ENOSPC;
        }
    }
    if (p->has_timestamp && (int64_t)p->timestamp > t->latest_ts)
        t->latest_ts = (int64_t)p->timestamp;
    uint32_t ppd = p->previous_packet_dropped;

    /* Our sequence table and data_loss rows. */
    if (p->has_seq_id) {
        bool first_row = !s->in_table;
        s->in_table = true;
        s->dirty = true;
        s->packets++;
        s->bytes += p->size;
        if (first_row)
            s->first_packet_id = p->id;
        s->last_packet_id = p->id;
        if (p->has_uid) {
            s->has_uid = true;
            s->uid = p->trusted_uid;
        }
        if (p->has_pid) {
            s->has_pid = true;
            s->pid = p->trusted_pid;
        }
        if (p->has_timestamp) {
            if (!s->has_ts)
                s->first_ts = (int64_t)p->timestamp;
            s->has_ts = true;
            s->last_ts = (int64_t)p->timestamp;
        }
        if (ppd) {
            s->flagged_packets++;
            if (!first_row)
                s->loss_events++;
        }
    }

    if (p->has_compressed_packets) {
        /* Trace processor parses the packets inside instead of this one
         * (ins_inspect.c feeds them to us after it); zstd ones we cannot
         * expand, so they are counted and reported. */
        if (p->has_zstd_packets && !p->compressed.present)
            t->compressed_skipped++;
        goto loss_row;
    }

    /* ftrace stats: trace processor takes them at tokenization. */
    if (p->ftrace_stats.present &&
        (rc = ins_ftrace_stats(t->ftrace, p->seq_id, p->ftrace_stats.data,
                               p->ftrace_stats.len)) != 0)
        return rc;
    if (p->ftrace_bundle.present &&
        ((rc = ins_ftrace_bundle(t->ftrace, p->ftrace_bundle.data,
                                 p->ftrace_bundle.len)) != 0 ||
         (rc = ins_fevents_bundle(t->fevents, p->ftrace_bundle.data,
                                  p->ftrace_bundle.len)) != 0))
        return rc;
    if (p->clock_snapshot.present)
        check_trace_clock(t, p);

    /* Trace processor's sequence-scoped state. */
    first_seen = !s->tp_seen;
    s->tp_seen = true;
    if (p->has_seq_id && !first_seen && ppd) {
        s->loss_count++;
        for (int c = 0; c < INS_LOSS_CAUSES; c++)
            if (ppd & (2u << c))
                s->cause_count[c]++;
    }
    if (p->incremental_state_cleared || (p->sequence_flags & 1u)) {
        if (p->has_seq_id)
            s->incremental_valid = true;
    } else if (ppd) {
        if (p->has_seq_id)
            s->incremental_valid = false;
    }
    if (p->has_clock_snapshot)
        goto loss_row;
    if (ts_msg != NULL && (rc = apply_trace_stats(t, ts_msg)) != 0)
        return rc;
    if (ts_msg != NULL && ts_msg->n_shmtrace_sequence_loss > 0) {
        uint8_t *copy = malloc(p->trace_stats.len ? p->trace_stats.len : 1);
        if (copy == NULL)
            return -ENOMEM;
        memcpy(copy, p->trace_stats.data, p->trace_stats.len);
        free(t->loss_blob);
        t->loss_blob = copy;
        t->loss_len = p->trace_stats.len;
    }
    if ((p->sequence_flags & 2u) && p->seq_id != 0) {
        s->needs_incremental_total++;
        if (!s->incremental_valid) {
            s->needs_incremental_skipped++;
            t->skipped_incremental++;
            t->skipped_dirty = true;
            goto loss_row;
        }
    }
    if (p->trace_config.present && (rc = apply_trace_config(t, p)) != 0)
        return rc;
    if (p->system_info.present && (rc = apply_system_info(t, p)) != 0)
        return rc;
    int64_t ts = p->has_timestamp ? (int64_t)p->timestamp : t->latest_ts;
    if (p->service_event.present &&
        (rc = apply_service_event(t, p, ts)) != 0)
        return rc;
    if (p->has_clone_snapshot_trigger &&
        (!t->clone_trigger_set || ts < t->clone_trigger_ts)) {
        /* The first trigger in timestamp order. */
        t->clone_trigger_set = true;
        t->clone_trigger_ts = ts;
        if ((rc = stat_set(t, INS_STAT_CLONE_TRIGGER_TIMESTAMP_NS, false, 0,
                           ts, false)) != 0)
            return rc;
    }

loss_row:
    if (t->packet_rows && (rc = packet_row(t, p)) != 0)
        return rc;
    if (ppd) {
        char reasons[160];
        bool counted = p->has_seq_id && !p->has_compressed_packets &&
                       !first_seen;
        rc = ins_db_insert_data_loss(t->db, p->has_seq_id, p->seq_id, p->id,
                                     p->has_timestamp,
                                     (int64_t)p->timestamp, ppd,
                                     ins_loss_reasons(ppd, reasons,
                                                      sizeof(reasons)),
                                     counted);
        if (rc != 0)
            return rc;
    }
    return 0;
}

/* A string field of SystemInfo or Utsname into trace_info as key: printable
 * ASCII only (others as '?'), at most INS_SYSINFO_MAX bytes, since it
 * comes from the trace and is shown on terminals by sqlite3. */
#define INS_SYSINFO_MAX 256
static int put_sysinfo_text(ins_tracker *t, const char *key,
                            const uint8_t *q, size_t n)
{
    char v[INS_SYSINFO_MAX + 1];
    if (n > INS_SYSINFO_MAX)
        n = INS_SYSINFO_MAX;
    for (size_t i = 0; i < n; i++)
        v[i] = printable(q[i]);
    v[n] = 0;
    return ins_db_info_text(t->db, key, v);
}

/* fn(t, field number, wire type, value, body) for each field of the
 * message [q, q + len): a varint's value in v; a length-delimited field's
 * body at body, v bytes. Stops at fn's first non-zero rc (returned), or
 * at a malformed field (0: the walk keeps what it read before it). */
typedef int (*field_fn)(ins_tracker *t, uint64_t field, unsigned wt,
                        uint64_t v, const uint8_t *body);
static int walk_fields(ins_tracker *t, const uint8_t *q, size_t len,
                       field_fn fn)
{
    const uint8_t *end = q + len;
    while (q < end) {
        uint64_t tag, v = 0;
        const uint8_t *body = NULL;
        if (ins_varint(&q, end, &tag) != 0)
            return 0;
        unsigned wt = (unsigned)(tag & 7);
        if (wt == 0) {
            if (ins_varint(&q, end, &v) != 0)
                return 0;
        } else if (wt == 2) {
            if (ins_varint(&q, end, &v) != 0 || v > (uint64_t)(end - q))
                return 0;
            body = q;
            q += v;
        } else if (wt == 1 || wt == 5) {
            size_t n = wt == 1 ? 8 : 4;
            if ((size_t)(end - q) < n)
                return 0;
            q += n;
        } else {
            return 0;
        }
        int rc = fn(t, tag >> 3, wt, v, body);
        if (rc != 0)
            return rc;
    }
    return 0;
}

/* "Perfetto vNN.M-..." -> NN, as trace processor reads it (digits, then
 * '.' or '-'), else -1. */
static int64_t service_major(const uint8_t *q, size_t n)
{
    static const char prefix[] = "Perfetto v";
    size_t k = sizeof(prefix) - 1;
    if (n <= k || memcmp(q, prefix, k) != 0)
        return -1;
    int64_t m = 0;
    size_t i = k;
    while (i < n && q[i] >= '0' && q[i] <= '9' && m < 100000000)
        m = m * 10 + (q[i++] - '0');
    return i > k && i < n && (q[i] == '.' || q[i] == '-') ? m : -1;
}

/* A Utsname field (SystemInfo field 1) into trace_info: sysname,
 * version, release, machine (fields 1-4). */
static int utsname_field(ins_tracker *t, uint64_t field, unsigned wt,
                         uint64_t v, const uint8_t *body)
{
    static const char *const keys[] = {
        NULL, "system_name", "system_version", "system_release",
        "system_machine",
    };
    if (wt == 2 && field >= 1 && field <= 4)
        return put_sysinfo_text(t, keys[field], body, (size_t)v);
    return 0;
}

/* A SystemInfo field: tracing_service_version's major
 * (config_write_into_file_no_flush at the end), and the machine's facts
 * into trace_info under trace processor's metadata names:
 * tracing_service_version, system_name / _version / _release / _machine
 * (utsname), timezone_off_mins, system_ram_bytes. */
static int system_info_field(ins_tracker *t, uint64_t field, unsigned wt,
                             uint64_t v, const uint8_t *body)
{
    if (field == 4 && wt == 2) {
        t->service_major = service_major(body, (size_t)v);
        return put_sysinfo_text(t, "tracing_service_version", body,
                                (size_t)v);
    }
    if (field == 1 && wt == 2)
        return walk_fields(t, body, (size_t)v, utsname_field);
    if (field == 7 && wt == 0)   /* int32: negative is sign-extended */
        return ins_db_info_int(t->db, "timezone_off_mins",
                               (int64_t)(int32_t)(uint32_t)v);
    if (field == 16 && wt == 0)
        return ins_db_info_int(t->db, "system_ram_bytes",
                               v > (uint64_t)INT64_MAX ? INT64_MAX
                                                       : (int64_t)v);
    return 0;
}

static int apply_system_info(ins_tracker *t, const ins_packet *p)
{
    return walk_fields(t, p->system_info.data, p->system_info.len,
                       system_info_field);
}

/* Trace processor's end-of-trace config checks (ins_stats.h). */
static int finish_config(ins_tracker *t)
{
    if (!t->cfg_seen || !t->cfg_write_into_file)
        return 0;
    int rc = 0;
    if (t->cfg_file_write_period_ms < 24u * 60 * 60 * 1000) {
        for (size_t i = 0; i < t->cfg_nbuffers && i < t->n_overwritten &&
                           rc == 0; i++)
            if (t->overwritten[i] > 0)
                rc = stat_set(t, INS_STAT_LONG_TRACE_MODE_BYTES_OVERWRITTEN,
                              true, (int64_t)i, t->overwritten[i], false);
    }
    if (rc == 0 && t->cfg_flush_period_ms == 0 &&
        (t->service_major < 0 || t->service_major < 54))
        rc = stat_set(t, INS_STAT_CONFIG_WRITE_INTO_FILE_NO_FLUSH, false, 0,
                      1, true);
    return rc ? -EIO : 0;
}

int ins_tracker_finish(ins_tracker *t)
{
    int rc = finish_config(t);
    /* Exact loss accounting from the last TraceStats that carried it
     * (ins_loss.h). Traces without it (Perfetto's service) leave those
     * columns NULL: unknown, not 0. */
    if (rc == 0 && t->loss_blob != NULL)
        rc = ins_loss_apply(t->db, t->loss_blob, t->loss_len);
    if (rc == 0 && ins_ftrace_preserve_seen(t->ftrace))
        ins_fevents_inexact(t->fevents, "preserve_ftrace_buffer was set");
    if (rc == 0 && ins_ftrace_refusal(t->ftrace))
        ins_fevents_refused(t->fevents, ins_ftrace_refusal(t->ftrace));
    if (rc == 0 && t->slow[INS_SLOW_FLUSH] != NULL)
        rc = ins_db_info_text(t->db, "last_flush_slow_data_sources",
                              t->slow[INS_SLOW_FLUSH]);
    if (rc == 0 && t->slow[INS_SLOW_START] != NULL)
        rc = ins_db_info_text(t->db, "slow_starting_data_sources",
                              t->slow[INS_SLOW_START]);
    return rc ? rc : ins_fevents_finish(t->fevents);
}

int ins_tracker_flush(ins_tracker *t)
{
    size_t i = 0;
    ins_seq *s;
    while ((s = ins_seq_next(&t->seqs, &i)) != NULL) {
        if (!s->in_table || !s->dirty)
            continue;
        ins_seq_row row = {
            .seq_id = s->seq_id,
            .has_uid = s->has_uid, .uid = s->uid,
            .has_pid = s->has_pid, .pid = s->pid,
            .packets = s->packets, .bytes = s->bytes,
            .has_ts = s->has_ts, .first_ts = s->first_ts,
            .last_ts = s->last_ts,
            .flagged_packets = s->flagged_packets,
            .loss_events = s->loss_events,
            .first_packet_id = s->first_packet_id,
            .last_packet_id = s->last_packet_id,
            .has_buffer = s->has_buffer, .buffer = s->buffer,
        };
        if (ins_db_put_sequence(t->db, &row) != 0)
            return -EIO;
        s->dirty = false;
    }
    if (t->skipped_dirty) {
        if (stat_set(t, INS_STAT_PACKET_SKIPPED_INCREMENTAL_INVALID, false, 0,
                     (int64_t)t->skipped_incremental, false) != 0)
            return -EIO;
        t->skipped_dirty = false;
    }
    return 0;
}
