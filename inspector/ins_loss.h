/*
 * ins_loss.h - shmtraced's exact loss list (TraceStats field 6000,
 * shmtrace_sequence_loss, protos/common.proto) into the tables: the
 * sequence table's lost_* / loss_* / packets_* columns and packet_loss.
 *
 * The list has one entry per (producer, writer, buffer) sequence, unless
 * the service folded it (service/svc_loss.c: thousands of writers would
 * not fit one IPC frame): then the writers that lost most keep their own
 * entry and the others are summed into aggregate entries (writer_id 0,
 * one per producer and buffer, or per buffer with producer_id 0, under a
 * sequence id no packet carries). Rows (sql/schema.sql):
 *  - an own entry: loss_kind 'writer', lost_packets its exact count;
 *  - an aggregate: a row of its own, loss_kind 'aggregate', packets 0,
 *    lost_packets and packets_offered/read/pending the sums of its writers;
 *  - a producer sequence without an entry while the list has aggregates:
 *    loss_kind 'folded', lost_packets NULL (its losses are in an
 *    aggregate: counted once there, never twice), loss_aggregate the
 *    aggregate's seq_id when the trace tells which (ins_db_tie_folded).
 * trace_info gets loss_list = 'per_writer' | 'folded', and for a folded
 * list loss_aggregates, loss_folded_sequences, loss_untied_sequences.
 *
 * The list comes from the trace: entries are validated only as far as the
 * tables need (sequence ids 0 and 1 are skipped); a hostile list can only
 * produce wrong numbers, never a wrong query (everything is bound).
 * One thread; nothing is kept after the call.
 */
#ifndef INS_LOSS_H
#define INS_LOSS_H

#include <stddef.h>
#include <stdint.h>

#include "ins_db.h"

/* Write the rows of the TraceStats packed in [stats, stats + len) (the
 * last one of the trace with a loss list). A TraceStats that does not
 * decode (it was validated when read; only memory can fail here) writes
 * nothing and returns 0. Returns 0 or -EIO (database: ins_db_errmsg). */
int ins_loss_apply(ins_db *db, const uint8_t *stats, size_t len);

#endif /* INS_LOSS_H */
