/*
 * ins_ftrace.h - trace processor's ftrace stats (ins_ftrace_*), from the
 * FtraceStats packets (TracePacket.ftrace_stats, 34) and the lost_events
 * flag of FtraceEventBundles (TracePacket.ftrace_events, 1) that
 * traced_probes writes. Facts: Perfetto's stats.h and ftrace_parser.cc /
 * ftrace_tokenizer.cc at ec5d16b; both are handled in file order, as trace
 * processor's tokenizer does.
 *
 *  - Per FtraceStats (phase START_OF_TRACE = begin, END_OF_TRACE = end,
 *    other phases ignored), per cpu_stats entry, indexed by its cpu:
 *    ftrace_cpu_{entries,overrun,commit_overrun,bytes,dropped_events,
 *    read_events,now_ts,oldest_event_ts}_{begin|end} are set (the two
 *    timestamps: seconds * 1e9, oldest clamped to INT64_MAX). At end, for
 *    the six counters whose _begin exists for that cpu, _delta = end -
 *    begin (commit_overrun and dropped_events deltas are `error`).
 *  - ftrace_kprobe_{hits,misses}_{begin|end} (single) from kprobe_stats;
 *    at end, _delta if _begin is non-zero (misses_delta is data_loss).
 *  - At START, once per sequence that reports any: ftrace_setup_errors +1
 *    per failed event, unknown event, atrace_errors, exclusive_feature_error.
 *  - ftrace_abi_errors_skipped_zero_data_length +1 per parse error
 *    FTRACE_STATUS_ABI_ZERO_DATA_LENGTH.
 *  - A bundle with lost_events: ftrace_cpu_has_data_loss[cpu] = 1
 *    (data_loss).
 * The stats that come from the events themselves (before tracing start,
 * compact_sched skips) are ins_fevents.h's.
 *
 * Ownership: ins_ftrace_create borrows DB; ins_ftrace_destroy frees.
 */
#ifndef INS_FTRACE_H
#define INS_FTRACE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Trace processor's tokenizer refuses a FtraceEventBundle of a cpu at or
 * above this (kMaxCpuCount), and with it the whole trace: its lost_events
 * and its events count for nothing here and in ins_fevents.c, which says
 * that trace processor refuses the trace (ins_fevents_refused). */
#define INS_FTRACE_MAX_BUNDLE_CPU 1024u

#include "ins_db.h"

typedef struct ins_ftrace ins_ftrace;

/* NULL on no memory. */
ins_ftrace *ins_ftrace_create(ins_db *db);
void ins_ftrace_destroy(ins_ftrace *f);
/* The single stats' rows at 0 (trace processor has them from the start). */
int ins_ftrace_start(ins_ftrace *f);
/* One FtraceStats message (malformed input is ignored past its damage).
 * 0, or -EIO (database), -ENOMEM. */
int ins_ftrace_stats(ins_ftrace *f, uint32_t seq_id, const uint8_t *data,
                     size_t len);
/* One FtraceEventBundle. 0 or -EIO. */
int ins_ftrace_bundle(ins_ftrace *f, const uint8_t *data, size_t len);
/* Whether an FtraceStats (begin or end) said preserve_ftrace_buffer. */
bool ins_ftrace_preserve_seen(const ins_ftrace *f);
/* Why trace processor would refuse the whole trace ("Trace parse
 * failure"), from the FtraceStats seen: one with a phase other than
 * START/END_OF_TRACE, or with ftrace_parse_errors other than
 * ABI_ZERO_DATA_LENGTH (it rejects such traces unless told
 * --dev-flag ignore-ftrace-parse-errors=true). NULL: none. The counts
 * are still written (they are what the file holds up to the end), but
 * there are no trace processor figures to compare them with. */
const char *ins_ftrace_refusal(const ins_ftrace *f);

#endif /* INS_FTRACE_H */
