/*
 * ins_db.h - the inspector's SQLite output (schema: sql/schema.sql).
 *
 * Design: one connection, WAL journal, synchronous=NORMAL, a bounded page
 * cache (INS_DB_CACHE_KIB) and temp data on disk, so memory does not grow
 * with the trace. All writes go through statements prepared once at open.
 * Writes happen inside a transaction the caller brackets with
 * ins_db_begin()/ins_db_commit() (one transaction per batch of packets);
 * whatever was committed survives a later error.
 *
 * Ownership: ins_db_open() returns a handle that ins_db_close() frees
 * (NULL-safe). Strings passed in are copied by SQLite (SQLITE_TRANSIENT).
 * Errors: SQLite result codes are mapped to -EIO; ins_db_errmsg() has the
 * text. One thread.
 */
#ifndef INS_DB_H
#define INS_DB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define INS_DB_CACHE_KIB 8192

typedef struct ins_db ins_db;

/* Row of the sequence table. has_* false = NULL. */
typedef struct ins_seq_row {
    uint32_t seq_id;
    bool has_uid, has_pid, has_ts, has_buffer;
    int32_t uid, pid;
    uint64_t packets, bytes, flagged_packets, loss_events;
    int64_t first_ts, last_ts;
    uint64_t first_packet_id, last_packet_id;
    int64_t buffer;
} ins_seq_row;

/* Row of the packet table. */
typedef struct ins_packet_row {
    uint64_t id, file_offset, size;
    bool has_ts, has_clock_id, has_seq_id, has_uid, has_pid;
    int64_t ts;
    uint32_t clock_id, seq_id;
    int32_t uid, pid;
    uint32_t previous_packet_dropped, sequence_flags;
    bool first_packet_on_sequence;
    const char *kind; /* NULL = NULL */
    bool has_container;
    uint64_t container_id;
} ins_packet_row;

/* Create PATH as a fresh database with the schema (SCHEMA_SQL). If PATH
 * exists it is replaced only when FORCE is true (with its -wal/-shm),
 * otherwise -EEXIST. ERR receives a message on failure. */
int ins_db_open(const char *path, bool force, const char *schema_sql,
                ins_db **out, char *err, size_t errlen);

/* Commit what is pending, checkpoint and close. Returns 0 or -EIO. */
int ins_db_close(ins_db *db);

int ins_db_begin(ins_db *db);
int ins_db_commit(ins_db *db);

int ins_db_insert_packet(ins_db *db, const ins_packet_row *row);
int ins_db_insert_data_loss(ins_db *db, bool has_seq, uint32_t seq_id,
                            uint64_t packet_id, bool has_ts, int64_t ts,
                            uint32_t bits, const char *reasons, bool counted);
int ins_db_put_sequence(ins_db *db, const ins_seq_row *row);

/* Set (ADD=false) or add to (ADD=true) the stat NAME at IDX (HAS_IDX false
 * = single stat, idx NULL), creating the row with SEVERITY, SOURCE and
 * DESCRIPTION if it does not exist. */
int ins_db_stat(ins_db *db, const char *name, bool has_idx, int64_t idx,
                const char *severity, const char *source,
                const char *description, int64_t value, bool add);

int ins_db_put_buffer_config(ins_db *db, int64_t idx, int64_t size_kb,
                             const char *fill_policy, const char *mode);

/* trace_info rows: integer or text value. */
int ins_db_info_int(ins_db *db, const char *key, int64_t value);
int ins_db_info_text(ins_db *db, const char *key, const char *value);
/* Exact loss accounting rows (packet_loss, sequence.lost_* and loss_*;
 * sql/schema.sql says what each column means). */
int ins_db_put_packet_loss(ins_db *db, uint32_t seq_id, const char *cause,
                           uint64_t packets, uint64_t bytes);

/* One entry of shmtraced's loss list (TraceStats.shmtrace_sequence_loss):
 * a writer's own counts, or (aggregate) the sums of the writers the
 * service folded into one entry (writer_id 0, a sequence id no packet
 * carries). */
typedef struct ins_loss_row {
    uint32_t seq_id;
    int64_t buffer;
    uint32_t producer_id;        /* 0 in a per-buffer aggregate */
    bool aggregate;
    uint64_t packets_offered, packets_read, packets_pending;
    uint64_t lost_packets, lost_bytes;
    bool producer_counts_known;
    bool has_pid;                /* an aggregate of one producer: its pid */
    int32_t pid;
} ins_loss_row;

/* The entry into its sequence row (made with packets = 0 if no packet
 * carried its id: a writer that lost everything, or an aggregate). */
int ins_db_set_sequence_loss(ins_db *db, const ins_loss_row *row);

/* After the last ins_db_set_sequence_loss, if the list has aggregates:
 * every producer sequence without an entry of its own is marked folded
 * (loss_kind 'folded') and tied to its aggregate (loss_aggregate) when
 * exactly one aggregate can hold it (same buffer; same producer, known
 * from the aggregate's own pid, else from the pid of that producer's
 * listed writers). OUT: *folded the
 * sequences marked, *untied those of them left without loss_aggregate
 * (either may be NULL). 0 or -EIO. */
int ins_db_tie_folded(ins_db *db, uint64_t *folded, uint64_t *untied);

/* Last SQLite error text (static until the next call). */
const char *ins_db_errmsg(const ins_db *db);

#endif /* INS_DB_H */
