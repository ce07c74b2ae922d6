/*
 * ins_fevents.h - trace processor's `analysis` stats that come from the
 * ftrace events themselves (ins_fevents_*): it reads every event of every
 * FtraceEventBundle (TracePacket.ftrace_events, 1), its own and the
 * compact_sched ones, as trace processor's tokenizer and parser do.
 * Facts: Perfetto's ftrace_tokenizer.cc, ftrace_parser.cc and
 * ftrace_sched_event_tracker.cc at ec5d16b (the spec's snapshot).
 *
 *  - ftrace_bundle_tokenizer_errors (error): a bundle without a cpu, an
 *    event without a timestamp.
 *  - ftrace_missing_event_id (info): an event without a length-delimited
 *    field (its event).
 *  - compact_sched_has_parse_errors (error, source trace): per bundle, once
 *    for its switches and once for its wakings when a packed array does
 *    not decode, the arrays differ in length, or a comm index is past the
 *    intern table (the events before it count).
 *  - ftrace_packet_before_tracing_start (info): events (compact ones too)
 *    stamped before the TracingServiceEvent tracing_started (its packet's
 *    timestamp; 0 without one); they are dropped, and count for nothing
 *    below.
 *  - compact_sched_switch_skipped (info): a compact sched_switch with no
 *    switch before it on its cpu (it has no prev_* to start a slice).
 *  - compact_sched_waking_skipped (info): a compact sched_waking with no
 *    switch before it on its cpu.
 *  - mismatched_sched_switch_tids (error): a sched_switch FtraceEvent
 *    whose prev_pid is not the next_pid of the switch before it on its
 *    cpu, when that one started a slice (lost events, usually).
 * "Before" is in trace processor's order: by timestamp, ties in the order
 * its tokenizer pushed them (a bundle's compact switches, then its compact
 * wakings, then its own events). Switches earlier than the soft-drop
 * point (ftrace_latest_data_start_ns: the latest first bundle's
 * previous_bundle_end_timestamp or last_read_event_timestamp, or
 * tracing_started if later) start no slice, and a sched_switch FtraceEvent
 * there is not parsed at all.
 *
 * Design: a bundle holds one cpu's events. Its events are put in that
 * order (a stable sort by timestamp of the bundle's events) and replayed
 * against the cpu's state: whether it had a switch, the last next_pid,
 * whether a slice is open. This is trace processor's order as long as
 * each cpu's bundles come in time order in the file, which the services
 * write; a bundle that starts before the end of its cpu's previous one
 * makes the result approximate (below). Trace processor knows the drop
 * and soft-drop points before it parses anything; we learn them as the
 * file goes (tracing_started, each cpu's first bundle). So the first
 * INS_FEVENTS_JOURNAL_MAX events are kept, and replayed again from the
 * start whenever a point moves; the services write both before most of
 * the data. A point that moves later is checked at the end: if it passed
 * an event already replayed, the result is approximate.
 *
 * Exact when trace processor's clocks agree with ours: every timestamp is
 * taken as BOOTTIME, as trace processor takes it when no bundle names an
 * ftrace_clock, no ClockSnapshot chooses another primary trace clock, and
 * the service's packets carry no other clock. When one of those does not
 * hold, when a cpu's bundles are out of order, when a point moved past
 * events already replayed and no longer kept, when a bundle holds more
 * than INS_FEVENTS_BUNDLE_MAX events, or when
 * preserve_ftrace_buffer was set (trace processor then keeps early data
 * in some cases), the counts are still written and trace_info's
 * ftrace_analysis says "approximate" and why; otherwise it says "exact".
 * No bundles, no row.
 *
 * Hostile input: every field is bounds-checked (ins_pb_next); a message
 * that does not decode ends its walk, keeping what came before; cpus at
 * or above INS_FTRACE_MAX_BUNDLE_CPU (1024) are ignored, and since trace
 * processor then refuses the whole trace, ftrace_analysis says "not
 * comparable" (as for the FtraceStats it refuses: ins_ftrace_refusal).
 *
 * Ownership: ins_fevents_create borrows DB; ins_fevents_destroy frees.
 */
#ifndef INS_FEVENTS_H
#define INS_FEVENTS_H

#include <stddef.h>
#include <stdint.h>

#include "ins_db.h"

/* Events kept for replaying them again (24 bytes each). */
#define INS_FEVENTS_JOURNAL_MAX (1u << 20)
/* Events analysed per bundle (24 bytes each, twice while sorting): a
 * bundle is one cpu's read of its ring buffer, a few thousand events
 * (traced_probes reads at most a few MB per cpu and tick), while a
 * crafted 64 KB compressed packet can hold millions of one-byte compact
 * events. Past it the bundle's remaining events are not counted and the
 * analysis says approximate. */
#define INS_FEVENTS_BUNDLE_MAX (1u << 18)

typedef struct ins_fevents ins_fevents;

/* NULL on no memory. */
ins_fevents *ins_fevents_create(ins_db *db);
void ins_fevents_destroy(ins_fevents *f);
/* The rows at 0 (trace processor has them from the start). 0 or -EIO. */
int ins_fevents_start(ins_fevents *f);
/* One FtraceEventBundle. 0 or -ENOMEM. */
int ins_fevents_bundle(ins_fevents *f, const uint8_t *data, size_t len);
/* A TracingServiceEvent with tracing_started, stamped ts (the last one
 * wins, as in trace processor's metadata). */
void ins_fevents_tracing_started(ins_fevents *f, int64_t ts);
/* The counts cannot be exact, because of why (a static string; the
 * first reason is kept). */
void ins_fevents_inexact(ins_fevents *f, const char *why);
/* Trace processor refuses the whole trace, because of why (a static
 * string; the first is kept): ftrace_analysis then says "not comparable"
 * and why, whatever else holds. */
void ins_fevents_refused(ins_fevents *f, const char *why);
/* Write the counts and trace_info's ftrace_analysis. 0 or -EIO. */
int ins_fevents_finish(ins_fevents *f);

#endif /* INS_FEVENTS_H */
