/*
 * ins_loss.c - shmtraced's exact loss list into the tables (what the rows
 * mean: ins_loss.h and sql/schema.sql).
 *
 * Two passes over the decoded list: every entry (own or aggregate) goes
 * to its sequence row and its causes to packet_loss; then, if any entry
 * was an aggregate, the sequences left without an entry are marked folded
 * and tied to their aggregate in SQL (ins_db_tie_folded), since that needs
 * the pids the sequence rows already hold.
 */
#include "ins_loss.h"

#include <errno.h>
#include <stdbool.h>

#include "common.pb-c.h"

typedef Perfetto__Protos__TraceStats__ShmtraceSequenceLoss ins_sloss;

/* An aggregate entry: writer_id present and 0 (no writer has id 0). */
static bool is_aggregate(const ins_sloss *l)
{
    return l->has_writer_id && l->writer_id == 0;
}

static int put_entry(ins_db *db, const ins_sloss *l)
{
    ins_loss_row row = {
        .seq_id = l->sequence_id,
        .buffer = (int64_t)l->buffer,
        .producer_id = l->producer_id,
        .aggregate = is_aggregate(l),
        .packets_offered = l->packets_offered,
        .packets_read = l->packets_read,
        .packets_pending = l->packets_pending,
        .lost_packets = l->lost_packets,
        .lost_bytes = l->lost_bytes,
        .producer_counts_known = l->producer_counts_known,
        .has_pid = l->has_pid,
        .pid = l->pid,
    };
    int rc = ins_db_set_sequence_loss(db, &row);
    for (size_t c = 0; c < l->n_causes && rc == 0; c++) {
        const Perfetto__Protos__TraceStats__ShmtraceLossCause *k =
            l->causes[c];
        if (k->packets == 0 || k->cause == NULL)
            continue;
        rc = ins_db_put_packet_loss(db, l->sequence_id, k->cause,
                                    k->packets, k->bytes);
    }
    return rc;
}

int ins_loss_apply(ins_db *db, const uint8_t *stats, size_t len)
{
    Perfetto__Protos__TraceStats *ts =
        perfetto__protos__trace_stats__unpack(NULL, len, stats);
    if (ts == NULL)
        return 0;
    int rc = 0;
    int64_t aggregates = 0;
    if (ts->has_shmtrace_writer_stats_left_out)
        rc = ins_db_info_int(db, "writer_stats_left_out",
                             ts->shmtrace_writer_stats_left_out);
    uint64_t cap_chunks = 0, cap_packets = 0;
    bool capped = false;
    for (size_t i = 0; i < ts->n_buffer_stats; i++) {
        const Perfetto__Protos__TraceStats__BufferStats *b =
            ts->buffer_stats[i];
        capped |= b->has_shmtrace_seq_cap_chunks;
        cap_chunks += b->shmtrace_seq_cap_chunks;    /* wraps, never UB */
        cap_packets += b->shmtrace_seq_cap_packets;
    }
    if (capped && rc == 0 &&
        (rc = ins_db_info_int(db, "seq_cap_chunks", (int64_t)cap_chunks)) ==
            0)
        rc = ins_db_info_int(db, "seq_cap_packets", (int64_t)cap_packets);
    for (size_t i = 0; i < ts->n_shmtrace_sequence_loss && rc == 0; i++) {
        const ins_sloss *l = ts->shmtrace_sequence_loss[i];
        if (!l->has_sequence_id || l->sequence_id <= 1)
            continue;
        aggregates += is_aggregate(l);
        rc = put_entry(db, l);
    }
    perfetto__protos__trace_stats__free_unpacked(ts, NULL);
    if (rc != 0)
        return rc;
    if (aggregates == 0)
        return ins_db_info_text(db, "loss_list", "per_writer");
    uint64_t folded = 0, untied = 0;
    if ((rc = ins_db_tie_folded(db, &folded, &untied)) != 0 ||
        (rc = ins_db_info_text(db, "loss_list", "folded")) != 0 ||
        (rc = ins_db_info_int(db, "loss_aggregates", aggregates)) != 0 ||
        (rc = ins_db_info_int(db, "loss_folded_sequences",
                              (int64_t)folded)) != 0)
        return rc;
    return ins_db_info_int(db, "loss_untied_sequences", (int64_t)untied);
}
