/*
 * svc_stats.c - TraceStats for GetTraceStats and the trace's stats packet.
 *
 * What feeds what (stats-schema.md): buffer_stats = tb_get_stats of every
 * buffer of the session in config order (all sessions' buffers when no
 * session is given); service-wide counters (producers, data sources,
 * sessions, service-level chunk/patch rejects) from svc_service; per
 * session: invalid_packets, flushes_*, final_flush_outcome; writer_stats =
 * one entry per sequence seen so far (sequence_id, buffer index) so that
 * trace processors can attribute per-sequence losses to buffers. The
 * chunk payload histograms are not kept (libbuf does not expose them), so
 * chunk_payload_histogram_def is absent and the histogram arrays are empty.
 *
 * Ownership: svc_stats_build allocates one TraceStats with its arrays;
 * svc_stats_free releases all of it.
 */
#include <stdlib.h>
#include <string.h>

#include "svc_int.h"

typedef Perfetto__Protos__TraceStats__BufferStats svc_bstats;
typedef Perfetto__Protos__TraceStats__WriterStats svc_wstats;

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
}

Perfetto__Protos__TraceStats *svc_stats_build(svc_service *svc,
                                              const svc_session *s)
{
    Perfetto__Protos__TraceStats *st = calloc(1, sizeof(*st));
    if (!st)
        return NULL;
    perfetto__protos__trace_stats__init(st);
    size_t nb = 0;
    for (size_t i = 0; i < svc->nbufslots; i++)
        if (svc->bufs[i].id && (!s || svc->bufs[i].session == s))
            nb++;
    svc_bstats *bs = calloc(nb ? nb : 1, sizeof(*bs));
    svc_bstats **bsp = calloc(nb ? nb : 1, sizeof(*bsp));
    size_t nw = s ? s->seqs.count : 0;
    svc_wstats *ws = calloc(nw ? nw : 1, sizeof(*ws));
    svc_wstats **wsp = calloc(nw ? nw : 1, sizeof(*wsp));
    if (!bs || !bsp || !ws || !wsp) {
        free(bs);
        free(bsp);
        free(ws);
        free(wsp);
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
        for (size_t i = 0; i < svc->nbufslots; i++) {
            if (!svc->bufs[i].id)
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
    k = 0;
    for (size_t i = 0; s && i < s->seqs.cap; i++) {
        if (!s->seqs.keys[i])
            continue;
        perfetto__protos__trace_stats__writer_stats__init(&ws[k]);
        ws[k].has_sequence_id = true;
        ws[k].sequence_id = s->seqs.ids[i];
        ws[k].has_buffer = true;
        ws[k].buffer = s->seqs.buffer_index[i];
        wsp[k] = &ws[k];
        k++;
    }
    if (k == 0)
        free(ws);
    st->n_writer_stats = k;
    st->writer_stats = wsp;

    uint32_t nds = 0;
    for (size_t i = 0; i < svc->nproducers; i++)
        nds += (uint32_t)svc->producers[i]->nds;
    uint32_t total_buffers = 0;
    for (size_t i = 0; i < svc->nbufslots; i++)
        total_buffers += svc->bufs[i].id != 0;
    st->has_producers_connected = true;
    st->producers_connected = (uint32_t)svc->nproducers;
    st->has_producers_seen = true;
    st->producers_seen = svc->producers_seen;
    st->has_data_sources_registered = true;
    st->data_sources_registered = nds;
    st->has_data_sources_seen = true;
    st->data_sources_seen = svc->data_sources_seen;
    st->has_tracing_sessions = true;
    st->tracing_sessions = (uint32_t)svc->nsessions;
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

void svc_stats_free(Perfetto__Protos__TraceStats *st)
{
    if (!st)
        return;
    /* Arrays were allocated in one block each (see svc_stats_build). */
    free(st->n_buffer_stats ? st->buffer_stats[0] : NULL);
    free(st->buffer_stats);
    free(st->n_writer_stats ? st->writer_stats[0] : NULL);
    free(st->writer_stats);
    free(st);
}
