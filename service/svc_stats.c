/*
 * svc_stats.c - TraceStats for GetTraceStats and the trace's stats packet.
 *
 * What feeds what (stats-schema.md): buffer_stats = tb_get_stats of every
 * buffer of the session in config order (when no session is given: the
 * buffers of every session the viewer may access, svc__may_access), and
 * shmtrace_seq_cap_chunks / _packets from its seq_cap_* when non-zero
 * (chunks refused for their uid's bound of sequences in the buffer);
 * service-wide counters (producers, data sources,
 * sessions, service-level chunk/patch rejects) from svc_service; per
 * session: invalid_packets, flushes_*, final_flush_outcome.
 *
 * Chunk usage histograms (trace-buffer.md §10, wire-formats.md §5), per
 * session unless builtin_data_sources.disable_chunk_usage_histograms:
 * chunk_payload_histogram_def = the 10 bucket thresholds (TB_HIST_
 * THRESHOLDS; the overflow bucket is implicit), and one writer_stats entry
 * per (buffer, writer) that tb_get_writer_stats knows, in config order of
 * the buffers: sequence_id (the writer's trusted_packet_sequence_id, given
 * now if it was not read yet), buffer (index in the config), and 11 counts
 * and 11 sums. Trace processors attribute per-sequence losses to buffers
 * through these entries. Clones start with empty histograms, hence no
 * entries; with the histograms disabled there is no writer_stats at all.
 * writer_stats takes at most SVC_WSTATS_MAX_BYTES of the TraceStats
 * (svc_int.h), so that the loss list (svc_loss.c) has room: beyond it,
 * the writers whose sequences lost packets keep their entries first (the
 * trace processor attributes a sequence's flagged losses to a buffer only
 * through its entry: those of libbuf's tb_get_seq_loss and of the
 * session's loss table), then those with the most chunks; how many were
 * left out is shmtrace_writer_stats_left_out (protos/common.proto).
 * libbuf keeps at most TB_HIST_MAX_WRITERS histograms per buffer; the
 * writers past them share its overflow entry (producer 0, writer 0),
 * listed like a writer under a sequence id no packet carries (the
 * trace processor attributes nothing to it; its samples stay counted).
 *
 * GetTraceStats of a write_into_file session also carries shmtrace_file
 * (svc_stats_add_file): the records, bytes and flagged records the
 * service framed into the file, and whether that file is finished; the
 * trace's own stats packet does not (it would count everything but
 * itself).
 *
 * Ownership: svc_stats_build allocates one TraceStats with its arrays
 * (one block per array: each writer entry carries its histogram arrays,
 * svc_wentry); svc_stats_free releases all of it.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "svc_int.h"
#include "svc_packet.h"

typedef Perfetto__Protos__TraceStats__BufferStats svc_bstats;
typedef Perfetto__Protos__TraceStats__WriterStats svc_wstats;

/* One writer_stats entry with its arrays; ws first (svc_stats_free). */
typedef struct {
    svc_wstats ws;
    uint64_t counts[TB_HIST_BUCKETS];
    int64_t sums[TB_HIST_BUCKETS];
} svc_wentry;

static const int64_t svc_hist_def[TB_HIST_BUCKETS - 1] = TB_HIST_THRESHOLDS;

static bool histograms_enabled(const svc_session *s)
{
    const Perfetto__Protos__TraceConfig__BuiltinDataSource *b =
        s->cfg->builtin_data_sources;
    return !(b && b->has_disable_chunk_usage_histograms &&
             b->disable_chunk_usage_histograms);
}

/* e := the writer_stats entry of h, of the session's buffer bi. */
static void wentry_fill(svc_wentry *e, svc_session *s, uint32_t bi,
                        const tb_writer_stats *h)
{
    perfetto__protos__trace_stats__writer_stats__init(&e->ws);
    e->ws.has_sequence_id = true;
    e->ws.sequence_id = svc__seq_id(&s->seqs, h->producer_id, h->writer_id,
                                    bi);
    e->ws.has_buffer = true;
    e->ws.buffer = bi;
    for (size_t q = 0; q < TB_HIST_BUCKETS; q++) {
        e->counts[q] = h->count[q];
        e->sums[q] = (int64_t)h->sum[q];
    }
    e->ws.n_chunk_payload_histogram_counts = TB_HIST_BUCKETS;
    e->ws.chunk_payload_histogram_counts = e->counts;
    e->ws.n_chunk_payload_histogram_sum = TB_HIST_BUCKETS;
    e->ws.chunk_payload_histogram_sum = e->sums;
}

/* One (buffer, writer) while choosing which keep their entry. */
typedef struct {
    const tb_writer_stats *h;
    uint32_t buffer;
    uint32_t wire;               /* its bytes in the TraceStats */
    bool lost;                   /* its sequence lost packets */
    bool kept;
    uint64_t chunks;
} svc_wpick;

/* Losers first, then the most chunks, then as listed. */
static int by_worth(const void *va, const void *vb)
{
    const svc_wpick *a = *(const svc_wpick *const *)va;
    const svc_wpick *b = *(const svc_wpick *const *)vb;
    if (a->lost != b->lost)
        return a->lost ? -1 : 1;
    if (a->chunks != b->chunks)
        return a->chunks > b->chunks ? -1 : 1;
    return a < b ? -1 : a > b;
}

/* Is any in-buffer loss count of writer key (producer << 16 | writer) in
 * l[0..n) non-zero? l is sorted by key (by_loss_key). */
static bool buffer_lost(const tb_seq_loss *const *l, size_t n, uint32_t key)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        uint32_t k = ((uint32_t)l[mid]->producer_id << 16) |
                     l[mid]->writer_id;
        if (k == key) {
            for (int c = 0; c < TB_NUM_CAUSES; c++)
                if (l[mid]->lost_packets[c])
                    return true;
            return false;
        }
        if (k < key)
            lo = mid + 1;
        else
            hi = mid;
    }
    return false;
}

static int by_loss_key(const void *va, const void *vb)
{
    const tb_seq_loss *a = *(const tb_seq_loss *const *)va;
    const tb_seq_loss *b = *(const tb_seq_loss *const *)vb;
    uint32_t ka = ((uint32_t)a->producer_id << 16) | a->writer_id;
    uint32_t kb = ((uint32_t)b->producer_id << 16) | b->writer_id;
    return ka < kb ? -1 : ka > kb;
}

/* Marks which of the nw writers in pk keep their entry within
 * SVC_WSTATS_MAX_BYTES (the rest fit in total: all). 0 or -ENOMEM. */
static int choose_writers(svc_service *svc, svc_session *s, svc_wpick *pk,
                           size_t nw, size_t total)
{
    if (total <= SVC_WSTATS_MAX_BYTES) {
        for (size_t k = 0; k < nw; k++)
            pk[k].kept = true;
        return 0;
    }
    svc_wpick **rank = calloc(nw, sizeof(*rank));
    if (!rank)
        return -ENOMEM;
    for (size_t k = 0, i = 0; i < s->nbufs; i++) {
        tb_buffer *b = svc__buffer(svc, s->buf_ids[i], NULL);
        size_t nl = 0;
        const tb_seq_loss *l = b ? tb_get_seq_loss(b, &nl) : NULL;
        const tb_seq_loss **sl = nl ? calloc(nl, sizeof(*sl)) : NULL;
        if (nl && !sl) {
            free(rank);
            return -ENOMEM;
        }
        for (size_t j = 0; j < nl; j++)
            sl[j] = &l[j];
        if (nl)
            qsort(sl, nl, sizeof(*sl), by_loss_key);
        for (; k < nw && pk[k].buffer == i; k++) {
            uint32_t key = ((uint32_t)pk[k].h->producer_id << 16) |
                           pk[k].h->writer_id;
            pk[k].lost = buffer_lost(sl, nl, key) ||
                         svc__loss_writer_lost(s, key);
            rank[k] = &pk[k];
        }
        free(sl);
    }
    qsort(rank, nw, sizeof(*rank), by_worth);
    size_t room = SVC_WSTATS_MAX_BYTES;
    for (size_t r = 0; r < nw; r++)
        if (rank[r]->wire <= room) {
            rank[r]->kept = true;
            room -= rank[r]->wire;
        }
    free(rank);
    return 0;
}

/* writer_stats of session s (histograms enabled), at most
 * SVC_WSTATS_MAX_BYTES of them (choose_writers), in buffer then
 * first-seen order; 0 or -ENOMEM. */
static int fill_writer_stats(svc_service *svc, svc_session *s,
                             Perfetto__Protos__TraceStats *st)
{
    size_t nw = 0, n;
    for (size_t i = 0; i < s->nbufs; i++) {
        tb_buffer *b = svc__buffer(svc, s->buf_ids[i], NULL);
        if (b && tb_get_writer_stats(b, &n))
            nw += n;
    }
    st->n_chunk_payload_histogram_def = TB_HIST_BUCKETS - 1;
    st->chunk_payload_histogram_def = (int64_t *)svc_hist_def;
    if (!nw)
        return 0;
    svc_wentry *we = calloc(nw, sizeof(*we));
    svc_wstats **wsp = calloc(nw, sizeof(*wsp));
    svc_wpick *pk = calloc(nw, sizeof(*pk));
    if (!we || !wsp || !pk) {
        free(we);
        free(wsp);
        free(pk);
        return -ENOMEM;
    }
    size_t k = 0, total = 0;
    for (size_t i = 0; i < s->nbufs; i++) {
        tb_buffer *b = svc__buffer(svc, s->buf_ids[i], NULL);
        const tb_writer_stats *h = b ? tb_get_writer_stats(b, &n) : NULL;
        for (size_t j = 0; h && j < n && k < nw; j++, k++) {
            wentry_fill(&we[k], s, (uint32_t)i, &h[j]);
            size_t len = protobuf_c_message_get_packed_size(&we[k].ws.base);
            pk[k].h = &h[j];
            pk[k].buffer = (uint32_t)i;
            pk[k].wire = (uint32_t)(2 + svc_varint_len(len) + len); /* tag 18 */
            for (size_t q = 0; q < TB_HIST_BUCKETS; q++)
                pk[k].chunks += h[j].count[q];
            total += pk[k].wire;
        }
    }
    nw = k;
    int rc = choose_writers(svc, s, pk, nw, total);
    if (rc < 0) {
        free(we);
        free(wsp);
        free(pk);
        return rc;
    }
    /* The kept entries, moved down in place (their arrays' pointers lead
     * into the entry, so they are set again). */
    size_t w = 0;
    for (k = 0; k < nw; k++) {
        if (!pk[k].kept)
            continue;
        if (w != k) {
            we[w] = we[k];
            we[w].ws.chunk_payload_histogram_counts = we[w].counts;
            we[w].ws.chunk_payload_histogram_sum = we[w].sums;
        }
        wsp[w] = &we[w].ws;
        w++;
    }
    free(pk);
    if (w < nw) {
        st->has_shmtrace_writer_stats_left_out = true;
        st->shmtrace_writer_stats_left_out = (uint32_t)(nw - w);
    }
    if (w == 0) {
        free(we);
        free(wsp);
        return 0;
    }
    st->n_writer_stats = w;
    st->writer_stats = wsp;
    return 0;
}

static void fill_buffer_stats(svc_bstats *o, const tb_stats *t)
{
    perfetto__protos__trace_stats__buffer_stats__init(o);
#define SVC_SET(f) do { o->has_##f = true; o->f = t->f; } while (0)
    SVC_SET(buffer_size);
    SVC_SET(bytes_written);
    SVC_SET(bytes_overwritten);
    SVC_SET(bytes_read);
    SVC_SET(padding_bytes_written);
    SVC_SET(padding_bytes_cleared);
    SVC_SET(chunks_written);
    SVC_SET(chunks_rewritten);
    SVC_SET(chunks_overwritten);
    SVC_SET(chunks_discarded);
    SVC_SET(chunks_read);
    SVC_SET(chunks_committed_out_of_order);
    SVC_SET(write_wrap_count);
    SVC_SET(patches_succeeded);
    SVC_SET(patches_failed);
    SVC_SET(readaheads_succeeded);
    SVC_SET(readaheads_failed);
    SVC_SET(abi_violations);
    SVC_SET(trace_writer_packet_loss);
    SVC_SET(chunks_relocated);
#undef SVC_SET
    /* shmtrace's own (protos/common.proto), only when there is any */
    if (t->seq_cap_chunks) {
        o->has_shmtrace_seq_cap_chunks = true;
        o->shmtrace_seq_cap_chunks = t->seq_cap_chunks;
        o->has_shmtrace_seq_cap_packets = true;
        o->shmtrace_seq_cap_packets = t->seq_cap_packets;
    }
}

/* A buffer slot the viewer may see in service-wide figures. */
static bool slot_visible(const svc_service *svc, const svc_bufslot *b,
                         uid_t viewer)
{
    return b->id && b->session && svc__may_access(svc, viewer, b->session);
}

Perfetto__Protos__TraceStats *svc_stats_build(svc_service *svc,
                                              svc_session *s)
{
    return svc_stats_build_for(svc, s, s ? s->consumer_uid : svc->uid);
}

Perfetto__Protos__TraceStats *svc_stats_build_for(svc_service *svc,
        svc_session *s, uid_t viewer)
{
    Perfetto__Protos__TraceStats *st = calloc(1, sizeof(*st));
    if (!st)
        return NULL;
    perfetto__protos__trace_stats__init(st);
    size_t nb = 0;
    for (size_t i = 0; i < svc->nbufslots; i++)
        if (s ? svc->bufs[i].id && svc->bufs[i].session == s
              : slot_visible(svc, &svc->bufs[i], viewer))
            nb++;
    svc_bstats *bs = calloc(nb ? nb : 1, sizeof(*bs));
    svc_bstats **bsp = calloc(nb ? nb : 1, sizeof(*bsp));
    if (!bs || !bsp) {
        free(bs);
        free(bsp);
        free(st);
        return NULL;
    }
    size_t k = 0;
    if (s) {
        for (size_t i = 0; i < s->nbufs; i++) {
            tb_buffer *b = svc__buffer(svc, s->buf_ids[i], NULL);
            if (!b)
                continue;
            fill_buffer_stats(&bs[k], tb_get_stats(b));
            bsp[k] = &bs[k];
            k++;
        }
    } else {
        for (size_t i = 0; i < svc->nbufslots && k < nb; i++) {
            if (!slot_visible(svc, &svc->bufs[i], viewer))
                continue;
            fill_buffer_stats(&bs[k], tb_get_stats(svc->bufs[i].buf));
            bsp[k] = &bs[k];
            k++;
        }
    }
    if (k == 0)
        free(bs);               /* svc_stats_free frees via bsp[0] */
    st->n_buffer_stats = k;
    st->buffer_stats = bsp;
    if (s && histograms_enabled(s) && fill_writer_stats(svc, s, st) < 0) {
        svc_stats_free(st);
        return NULL;
    }
    if (s && svc__loss_fill(svc, s, st) < 0) {
        svc_stats_free(st);
        return NULL;
    }

    uint32_t nds = 0;
    for (size_t i = 0; i < svc->nproducers; i++)
        nds += (uint32_t)svc->producers[i]->nds;
    /* Sessions and buffers: only those the viewer may access. */
    uint32_t total_buffers = 0, nsessions = 0;
    for (size_t i = 0; i < svc->nbufslots; i++)
        total_buffers += slot_visible(svc, &svc->bufs[i], viewer);
    for (size_t i = 0; i < svc->nsessions; i++)
        nsessions += svc__may_access(svc, viewer, svc->sessions[i]);
    st->has_producers_connected = true;
    st->producers_connected = (uint32_t)svc->nproducers;
    st->has_producers_seen = true;
    st->producers_seen = svc->producers_seen;
    st->has_data_sources_registered = true;
    st->data_sources_registered = nds;
    st->has_data_sources_seen = true;
    st->data_sources_seen = svc->data_sources_seen;
    st->has_tracing_sessions = true;
    st->tracing_sessions = nsessions;
    st->has_total_buffers = true;
    st->total_buffers = total_buffers;
    st->has_chunks_discarded = true;
    st->chunks_discarded = svc->chunks_discarded;
    st->has_patches_discarded = true;
    st->patches_discarded = svc->patches_discarded;
    if (s) {
        st->has_invalid_packets = true;
        st->invalid_packets = s->invalid_packets;
        st->has_flushes_requested = true;
        st->flushes_requested = s->flushes_requested;
        st->has_flushes_succeeded = true;
        st->flushes_succeeded = s->flushes_succeeded;
        st->has_flushes_failed = true;
        st->flushes_failed = s->flushes_failed;
        if (s->final_flush_outcome) {
            st->has_final_flush_outcome = true;
            st->final_flush_outcome = s->final_flush_outcome;
        }
    }
    return st;
}

int svc_stats_add_file(Perfetto__Protos__TraceStats *st,
                       const svc_session *s)
{
    if (s->out_fd < 0)
        return 0;
    Perfetto__Protos__TraceStats__ShmtraceFileStats *f = malloc(sizeof(*f));
    if (!f)
        return -ENOMEM;
    perfetto__protos__trace_stats__shmtrace_file_stats__init(f);
    f->has_packets = f->has_bytes = f->has_flagged_packets = true;
    f->packets = s->packets_written_to_file;
    f->bytes = s->bytes_written_to_file;
    f->flagged_packets = s->flagged_written_to_file;
    f->has_complete = true;
    f->complete = s->state == SVC_SESSION_DISABLED && !s->file_failed &&
                  !s->is_clone;
    st->shmtrace_file = f;
    return 0;
}

void svc_stats_free(Perfetto__Protos__TraceStats *st)
{
    if (!st)
        return;
    free(st->shmtrace_file);
    /* Arrays were allocated in one block each (see svc_stats_build). */
    free(st->n_buffer_stats ? st->buffer_stats[0] : NULL);
    free(st->buffer_stats);
    free(st->n_writer_stats ? st->writer_stats[0] : NULL);
    free(st->writer_stats);
    free(st->n_shmtrace_sequence_loss ? st->shmtrace_sequence_loss[0]
                                      : NULL);
    free(st->shmtrace_sequence_loss);
    free(st);
}
