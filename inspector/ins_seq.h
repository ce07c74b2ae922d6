/*
 * ins_seq.h - per-sequence state, keyed by trusted_packet_sequence_id.
 *
 * Two roles in one entry:
 *  - trace processor's SequenceScopedState (tp_seen, loss counters,
 *    incremental-state validity), which the derived traced_buf_* stats are
 *    computed from; it exists for every id a packet carried, including 0
 *    for packets without field 10, exactly like trace processor's map;
 *  - the facts of our `sequence` table (only for packets that carry
 *    field 10).
 *
 * Storage: open addressing, linear probing, power-of-two capacity, grown
 * at 50 % load, at most INS_SEQ_MAX entries (a bound on memory against a
 * hostile trace: ~10 MiB); ins_seq_get() returns NULL past it.
 * Ownership: the table owns its entries; pointers stay valid until the next
 * ins_seq_get() that inserts. One thread.
 */
#ifndef INS_SEQ_H
#define INS_SEQ_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define INS_SEQ_MAX 65536u
#define INS_LOSS_CAUSES 8 /* DataLossReason bits 2 .. 256 */

typedef struct ins_seq {
    uint32_t seq_id;
    bool used;                /* slot occupied */
    /* trace processor's view */
    bool tp_seen;             /* a (non-compressed) packet had this id */
    bool incremental_valid;   /* false until incremental state cleared */
    uint32_t loss_count;      /* flagged packets except the first */
    uint32_t cause_count[INS_LOSS_CAUSES];
    uint32_t needs_incremental_total;
    uint32_t needs_incremental_skipped;
    /* facts for the sequence table */
    bool in_table;            /* a packet carried field 10 with this id */
    bool dirty;               /* changed since last written */
    bool has_uid, has_pid, has_ts, has_buffer;
    int32_t uid, pid;
    uint64_t packets, bytes, flagged_packets, loss_events;
    int64_t first_ts, last_ts;
    uint64_t first_packet_id, last_packet_id;
    int64_t buffer;
} ins_seq;

typedef struct ins_seq_table {
    ins_seq *slots;
    size_t cap;   /* power of two, 0 before the first insert */
    size_t count;
} ins_seq_table;

void ins_seq_table_init(ins_seq_table *t);
void ins_seq_table_free(ins_seq_table *t);

/* Find SEQ_ID; if absent and CREATE, insert a zeroed entry. Returns NULL
 * when absent and !CREATE, or when the table is full (INS_SEQ_MAX) or
 * memory ran out (errno ENOSPC / ENOMEM). */
ins_seq *ins_seq_get(ins_seq_table *t, uint32_t seq_id, bool create);

/* Iterate: call with *I = 0, returns entries until NULL. */
ins_seq *ins_seq_next(ins_seq_table *t, size_t *i);

#endif /* INS_SEQ_H */
