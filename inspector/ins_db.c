/*
 * ins_db.c - SQLite output (design in ins_db.h).
 *
 * Statement table: every SQL the inspector runs per packet/stat is listed
 * in STMT_SQL below and prepared once; the schema itself comes from
 * sql/schema.sql (embedded, passed in by the caller).
 *
 * Stats upsert: UPDATE ... WHERE name=? AND idx IS ? first; when it changed
 * no row, INSERT. (`idx IS ?` matches NULL for single stats and uses the
 * stats_by_name index.)
 */
#include "ins_db.h"

#include <errno.h>
#include <fcntl.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

enum {
    ST_BEGIN,
    ST_COMMIT,
    ST_PACKET,
    ST_LOSS,
    ST_SEQ,
    ST_STAT_SET,
    ST_STAT_ADD,
    ST_STAT_INSERT,
    ST_BUFCFG,
    ST_INFO,
    ST_LOSS_SEQ,
    ST_LOSS_CAUSE,
    ST_COUNT
};

static const char *const STMT_SQL[ST_COUNT] = {
    [ST_BEGIN] = "BEGIN",
    [ST_COMMIT] = "COMMIT",
    [ST_PACKET] = "INSERT INTO packet(id, file_offset, ts, clock_id, seq_id,"
                  " producer_uid, producer_pid, size, previous_packet_dropped,"
                  " sequence_flags, first_packet_on_sequence, kind,"
                  " container_id) VALUES(?,?,?,?,?,?,?,?,?,?,?,?,?)",
    [ST_LOSS] = "INSERT INTO data_loss(seq_id, packet_id, ts, bits, reasons,"
                " counted) VALUES(?,?,?,?,?,?)",
    [ST_SEQ] = "INSERT OR REPLACE INTO sequence(seq_id, uid, pid, packets,"
               " bytes, first_ts, last_ts, flagged_packets, loss_events,"
               " first_packet_id, last_packet_id, buffer)"
               " VALUES(?,?,?,?,?,?,?,?,?,?,?,?)",
    [ST_STAT_SET] = "UPDATE stats SET value = ?1 WHERE name = ?2 AND idx IS ?3",
    [ST_STAT_ADD] = "UPDATE stats SET value = value + ?1"
                    " WHERE name = ?2 AND idx IS ?3",
    [ST_STAT_INSERT] = "INSERT INTO stats(name, idx, severity, source, value,"
                       " description) VALUES(?,?,?,?,?,?)",
    [ST_BUFCFG] = "INSERT OR REPLACE INTO buffer_config(idx, size_kb,"
                  " fill_policy, mode) VALUES(?,?,?,?)",
    [ST_INFO] = "INSERT OR REPLACE INTO trace_info(key, value) VALUES(?,?)",
    /* exact loss lists: one of each per entry, so prepared once (a
     * statement prepared per entry made 300,000 entries take 9 s) */
    [ST_LOSS_SEQ] = "INSERT INTO sequence(seq_id, packets, bytes,"
                    " flagged_packets, loss_events, buffer, lost_packets,"
                    " lost_bytes, producer_counts_known, producer_id,"
                    " loss_kind, packets_offered, packets_read,"
                    " packets_pending, pid)"
                    " VALUES(?1,0,0,0,0,?2,?3,?4,?5,?6,?7,?8,?9,?10,?11)"
                    " ON CONFLICT(seq_id) DO UPDATE SET"
                    " lost_packets = excluded.lost_packets,"
                    " lost_bytes = excluded.lost_bytes,"
                    " producer_counts_known = excluded.producer_counts_known,"
                    " producer_id = excluded.producer_id,"
                    " loss_kind = excluded.loss_kind,"
                    " packets_offered = excluded.packets_offered,"
                    " packets_read = excluded.packets_read,"
                    " packets_pending = excluded.packets_pending,"
                    " buffer = coalesce(sequence.buffer, excluded.buffer),"
                    " pid = coalesce(sequence.pid, excluded.pid)",
    [ST_LOSS_CAUSE] = "INSERT INTO packet_loss(seq_id, cause, packets, bytes)"
                      " VALUES(?,?,?,?)",
};

struct ins_db {
    sqlite3 *conn;
    sqlite3_stmt *st[ST_COUNT];
    bool in_txn;
};

const char *ins_db_errmsg(const ins_db *db)
{
    return db && db->conn ? sqlite3_errmsg(db->conn) : "no database";
}

static const char *kind_of(mode_t m)
{
    return S_ISDIR(m) ? "a directory" : S_ISLNK(m) ? "a symbolic link"
         : S_ISCHR(m) ? "a character device" : S_ISBLK(m) ? "a block device"
         : S_ISFIFO(m) ? "a FIFO" : S_ISSOCK(m) ? "a socket"
         : "not a regular file";
}

/* Only regular files are ever replaced: lstat (a symlink is refused, not
 * followed), and the database and its -wal/-shm/-journal companions must
 * each be a regular file or absent before any of them is unlinked. */
static int remove_existing(const char *path, bool force, char *err,
                           size_t errlen)
{
    static const char *const suffix[] = {"", "-wal", "-shm", "-journal"};
    char p[4096];
    struct stat sb;
    if (lstat(path, &sb) != 0)
        return 0;
    if (!S_ISREG(sb.st_mode)) {
        snprintf(err, errlen, "refusing to write %s: it is %s, not a regular "
                 "file (only regular files are created or replaced)", path,
                 kind_of(sb.st_mode));
        return S_ISDIR(sb.st_mode) ? -EISDIR : -EEXIST;
    }
    if (!force) {
        snprintf(err, errlen, "%s already exists (use --force to replace "
                 "it)", path);
        return -EEXIST;
    }
    for (size_t i = 0; i < sizeof(suffix) / sizeof(suffix[0]); i++) {
        if (snprintf(p, sizeof(p), "%s%s", path, suffix[i]) >=
            (int)sizeof(p)) {
            snprintf(err, errlen, "output path too long");
            return -ENAMETOOLONG;
        }
        if (lstat(p, &sb) == 0 && !S_ISREG(sb.st_mode)) {
            snprintf(err, errlen, "refusing to replace %s: %s is %s, not a "
                     "regular file", path, p, kind_of(sb.st_mode));
            return -EEXIST;
        }
    }
    for (size_t i = 0; i < sizeof(suffix) / sizeof(suffix[0]); i++) {
        snprintf(p, sizeof(p), "%s%s", path, suffix[i]);
        if (unlink(p) != 0 && errno != ENOENT) {
            int e = errno;
            snprintf(err, errlen, "cannot replace %s: %s", p, strerror(e));
            return -e;
        }
    }
    return 0;
}

/* Create the database file ourselves, new (O_EXCL: nothing swapped in
 * since remove_existing can be followed), so SQLite only opens our own
 * empty regular file. */
static int create_new(const char *path, char *err, size_t errlen)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
                  0644);
    if (fd < 0) {
        int e = errno;
        snprintf(err, errlen, "cannot create %s: %s", path, strerror(e));
        return -e;
    }
    close(fd);
    return 0;
}

static int exec(ins_db *db, const char *sql, char *err, size_t errlen)
{
    char *msg = NULL;
    if (sqlite3_exec(db->conn, sql, NULL, NULL, &msg) != SQLITE_OK) {
        snprintf(err, errlen, "%s", msg ? msg : sqlite3_errmsg(db->conn));
        sqlite3_free(msg);
        return -EIO;
    }
    return 0;
}

int ins_db_open(const char *path, bool force, const char *schema_sql,
                ins_db **out, char *err, size_t errlen)
{
    *out = NULL;
    int rc = remove_existing(path, force, err, errlen);
    if (rc != 0)
        return rc;
    if ((rc = create_new(path, err, errlen)) != 0)
        return rc;
    ins_db *db = calloc(1, sizeof(*db));
    if (db == NULL) {
        snprintf(err, errlen, "out of memory");
        return -ENOMEM;
    }
    int flags = SQLITE_OPEN_READWRITE;
#ifdef SQLITE_OPEN_NOFOLLOW
    flags |= SQLITE_OPEN_NOFOLLOW;
#endif
    if (sqlite3_open_v2(path, &db->conn, flags, NULL) != SQLITE_OK) {
        snprintf(err, errlen, "cannot create %s: %s", path,
                 db->conn ? sqlite3_errmsg(db->conn) : "out of memory");
        ins_db_close(db);
        return -EIO;
    }
    char pragmas[256];
    snprintf(pragmas, sizeof(pragmas),
             "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;"
             " PRAGMA cache_size=-%d; PRAGMA temp_store=FILE;",
             INS_DB_CACHE_KIB);
    if (exec(db, pragmas, err, errlen) != 0 ||
        exec(db, schema_sql, err, errlen) != 0) {
        ins_db_close(db);
        return -EIO;
    }
    for (int i = 0; i < ST_COUNT; i++) {
        if (sqlite3_prepare_v2(db->conn, STMT_SQL[i], -1, &db->st[i],
                               NULL) != SQLITE_OK) {
            snprintf(err, errlen, "preparing '%s': %s", STMT_SQL[i],
                     sqlite3_errmsg(db->conn));
            ins_db_close(db);
            return -EIO;
        }
    }
    *out = db;
    return 0;
}

/* Step a statement to completion and reset it. */
static int run(ins_db *db, int which)
{
    sqlite3_stmt *s = db->st[which];
    int rc = sqlite3_step(s);
    sqlite3_reset(s);
    sqlite3_clear_bindings(s);
    return rc == SQLITE_DONE ? 0 : -EIO;
}

int ins_db_close(ins_db *db)
{
    if (db == NULL)
        return 0;
    int rc = 0;
    if (db->in_txn && ins_db_commit(db) != 0)
        rc = -EIO;
    for (int i = 0; i < ST_COUNT; i++)
        sqlite3_finalize(db->st[i]);
    if (db->conn) {
        sqlite3_exec(db->conn, "PRAGMA wal_checkpoint(TRUNCATE)", NULL, NULL,
                     NULL);
        if (sqlite3_close(db->conn) != SQLITE_OK)
            rc = -EIO;
    }
    free(db);
    return rc;
}

int ins_db_begin(ins_db *db)
{
    if (db->in_txn)
        return 0;
    int rc = run(db, ST_BEGIN);
    if (rc == 0)
        db->in_txn = true;
    return rc;
}

int ins_db_commit(ins_db *db)
{
    if (!db->in_txn)
        return 0;
    int rc = run(db, ST_COMMIT);
    if (rc == 0)
        db->in_txn = false;
    return rc;
}

static void bind_opt_int(sqlite3_stmt *s, int col, bool has, int64_t v)
{
    if (has)
        sqlite3_bind_int64(s, col, v);
    else
        sqlite3_bind_null(s, col);
}

int ins_db_insert_packet(ins_db *db, const ins_packet_row *r)
{
    sqlite3_stmt *s = db->st[ST_PACKET];
    sqlite3_bind_int64(s, 1, (int64_t)r->id);
    sqlite3_bind_int64(s, 2, (int64_t)r->file_offset);
    bind_opt_int(s, 3, r->has_ts, r->ts);
    bind_opt_int(s, 4, r->has_clock_id, r->clock_id);
    bind_opt_int(s, 5, r->has_seq_id, r->seq_id);
    bind_opt_int(s, 6, r->has_uid, r->uid);
    bind_opt_int(s, 7, r->has_pid, r->pid);
    sqlite3_bind_int64(s, 8, (int64_t)r->size);
    sqlite3_bind_int64(s, 9, r->previous_packet_dropped);
    sqlite3_bind_int64(s, 10, r->sequence_flags);
    sqlite3_bind_int(s, 11, r->first_packet_on_sequence ? 1 : 0);
    if (r->kind)
        sqlite3_bind_text(s, 12, r->kind, -1, SQLITE_STATIC);
    else
        sqlite3_bind_null(s, 12);
    bind_opt_int(s, 13, r->has_container, (int64_t)r->container_id);
    return run(db, ST_PACKET);
}

int ins_db_insert_data_loss(ins_db *db, bool has_seq, uint32_t seq_id,
                            uint64_t packet_id, bool has_ts, int64_t ts,
                            uint32_t bits, const char *reasons, bool counted)
{
    sqlite3_stmt *s = db->st[ST_LOSS];
    bind_opt_int(s, 1, has_seq, seq_id);
    sqlite3_bind_int64(s, 2, (int64_t)packet_id);
    bind_opt_int(s, 3, has_ts, ts);
    sqlite3_bind_int64(s, 4, bits);
    sqlite3_bind_text(s, 5, reasons, -1, SQLITE_TRANSIENT);
    sqlite3_bind_int(s, 6, counted ? 1 : 0);
    return run(db, ST_LOSS);
}

int ins_db_put_sequence(ins_db *db, const ins_seq_row *r)
{
    sqlite3_stmt *s = db->st[ST_SEQ];
    sqlite3_bind_int64(s, 1, r->seq_id);
    bind_opt_int(s, 2, r->has_uid, r->uid);
    bind_opt_int(s, 3, r->has_pid, r->pid);
    sqlite3_bind_int64(s, 4, (int64_t)r->packets);
    sqlite3_bind_int64(s, 5, (int64_t)r->bytes);
    bind_opt_int(s, 6, r->has_ts, r->first_ts);
    bind_opt_int(s, 7, r->has_ts, r->last_ts);
    sqlite3_bind_int64(s, 8, (int64_t)r->flagged_packets);
    sqlite3_bind_int64(s, 9, (int64_t)r->loss_events);
    sqlite3_bind_int64(s, 10, (int64_t)r->first_packet_id);
    sqlite3_bind_int64(s, 11, (int64_t)r->last_packet_id);
    bind_opt_int(s, 12, r->has_buffer, r->buffer);
    return run(db, ST_SEQ);
}

int ins_db_stat(ins_db *db, const char *name, bool has_idx, int64_t idx,
                const char *severity, const char *source,
                const char *description, int64_t value, bool add)
{
    int which = add ? ST_STAT_ADD : ST_STAT_SET;
    sqlite3_stmt *s = db->st[which];
    sqlite3_bind_int64(s, 1, value);
    sqlite3_bind_text(s, 2, name, -1, SQLITE_STATIC);
    bind_opt_int(s, 3, has_idx, idx);
    if (run(db, which) != 0)
        return -EIO;
    if (sqlite3_changes(db->conn) > 0)
        return 0;
    s = db->st[ST_STAT_INSERT];
    sqlite3_bind_text(s, 1, name, -1, SQLITE_STATIC);
    bind_opt_int(s, 2, has_idx, idx);
    sqlite3_bind_text(s, 3, severity, -1, SQLITE_STATIC);
    sqlite3_bind_text(s, 4, source, -1, SQLITE_STATIC);
    sqlite3_bind_int64(s, 5, value);
    sqlite3_bind_text(s, 6, description ? description : "", -1,
                      SQLITE_STATIC);
    return run(db, ST_STAT_INSERT);
}

int ins_db_put_buffer_config(ins_db *db, int64_t idx, int64_t size_kb,
                             const char *fill_policy, const char *mode)
{
    sqlite3_stmt *s = db->st[ST_BUFCFG];
    sqlite3_bind_int64(s, 1, idx);
    sqlite3_bind_int64(s, 2, size_kb);
    sqlite3_bind_text(s, 3, fill_policy, -1, SQLITE_STATIC);
    sqlite3_bind_text(s, 4, mode, -1, SQLITE_STATIC);
    return run(db, ST_BUFCFG);
}

int ins_db_info_int(ins_db *db, const char *key, int64_t value)
{
    sqlite3_stmt *s = db->st[ST_INFO];
    sqlite3_bind_text(s, 1, key, -1, SQLITE_STATIC);
    sqlite3_bind_int64(s, 2, value);
    return run(db, ST_INFO);
}

/* Exact loss accounting (shmtrace_sequence_loss): one packet_loss row, and
 * the sequence's totals (a sequence whose packets were all lost gets a row
 * with packets = 0). cause comes from the trace: bound, never formatted. */
int ins_db_put_packet_loss(ins_db *db, uint32_t seq_id, const char *cause,
                           uint64_t packets, uint64_t bytes)
{
    sqlite3_stmt *s = db->st[ST_LOSS_CAUSE];
    sqlite3_bind_int64(s, 1, seq_id);
    sqlite3_bind_text(s, 2, cause, -1, SQLITE_TRANSIENT);
    sqlite3_bind_int64(s, 3, (int64_t)packets);
    sqlite3_bind_int64(s, 4, (int64_t)bytes);
    return run(db, ST_LOSS_CAUSE);
}

int ins_db_set_sequence_loss(ins_db *db, const ins_loss_row *r)
{
    sqlite3_stmt *s = db->st[ST_LOSS_SEQ];
    sqlite3_bind_int64(s, 1, r->seq_id);
    sqlite3_bind_int64(s, 2, r->buffer);
    sqlite3_bind_int64(s, 3, (int64_t)r->lost_packets);
    sqlite3_bind_int64(s, 4, (int64_t)r->lost_bytes);
    sqlite3_bind_int(s, 5, r->producer_counts_known);
    sqlite3_bind_int64(s, 6, r->producer_id);
    sqlite3_bind_text(s, 7, r->aggregate ? "aggregate" : "writer", -1,
                      SQLITE_STATIC);
    sqlite3_bind_int64(s, 8, (int64_t)r->packets_offered);
    sqlite3_bind_int64(s, 9, (int64_t)r->packets_read);
    sqlite3_bind_int64(s, 10, (int64_t)r->packets_pending);
    if (r->aggregate && r->has_pid && r->producer_id != 0)
        sqlite3_bind_int64(s, 11, r->pid);
    else
        sqlite3_bind_null(s, 11);
    return run(db, ST_LOSS_SEQ);
}

/* Folded sequences (ins_db.h). A candidate aggregate for sequence q: the
 * same buffer (any, if q's is unknown), and either a per-buffer aggregate
 * (producer 0) or one whose producer has no listed writer with a pid other
 * than q's (a listed writer none of whose packets is in the trace has no
 * pid, and tells nothing: with writer_stats bounded, thousands do). Only
 * a single candidate ties q: two producers in one process, or several
 * producers none of whose writers kept an entry, leave it NULL rather
 * than guessed.
 *
 * Cost: a file may hold hundreds of thousands of sequences and of
 * aggregates (a 248 KB one with 20,000 sequences and one aggregate took
 * 26 s of CPU when each sequence scanned the table). So each aggregate
 * first gets the one pid it requires (ins_agg.pid_req: its producer's
 * listed writers' only pid; NULL: any; aggregates whose producer's
 * writers have several pids can tie nothing and are left out), and a
 * sequence's candidates are two index ranges of ins_agg, (buffer,
 * pid_req = its pid) and (buffer, pid_req NULL), each asked only its
 * min and max seq_id (O(log n) each; one candidate when exactly one
 * range is non-empty and its min is its max). */
#define INS_AGG_Q(fn, where)                                                 \
    "(SELECT " fn "(seq_id) FROM ins_agg WHERE " where ")"
#define INS_AGG_PICK(b)                                                      \
    "CASE WHEN " INS_AGG_Q("min", b "pid_req = sequence.pid") " IS NULL"     \
    "  AND " INS_AGG_Q("min", b "pid_req IS NULL") " = "                     \
             INS_AGG_Q("max", b "pid_req IS NULL")                           \
    " THEN " INS_AGG_Q("min", b "pid_req IS NULL")                           \
    " WHEN " INS_AGG_Q("min", b "pid_req IS NULL") " IS NULL"                \
    "  AND " INS_AGG_Q("min", b "pid_req = sequence.pid") " = "              \
             INS_AGG_Q("max", b "pid_req = sequence.pid")                    \
    " THEN " INS_AGG_Q("min", b "pid_req = sequence.pid") " END"
static const char TIE_FOLDED_SQL[] =
    "DROP TABLE IF EXISTS temp.ins_wpid;"
    "DROP TABLE IF EXISTS temp.ins_agg;"
    "CREATE TEMP TABLE ins_wpid(producer_id INTEGER, npids INTEGER,"
    " pid INTEGER);"
    "INSERT INTO ins_wpid SELECT producer_id, count(DISTINCT pid), max(pid)"
    " FROM sequence WHERE loss_kind = 'writer' AND pid IS NOT NULL"
    " GROUP BY producer_id;"
    "CREATE INDEX temp.ins_wpid_p ON ins_wpid(producer_id);"
    /* Typed columns: an untyped pid_req (CREATE ... AS SELECT CASE) made
     * SQLite scan the index instead of seeking pid_req = ?. */
    "CREATE TEMP TABLE ins_agg(seq_id INTEGER, buffer INTEGER,"
    " pid_req INTEGER);"
    /* An aggregate of one producer holds the writers of its process: its
     * own pid (in the loss list of traces from a newer shmtraced), else
     * that of its producer's listed writers (when they agree), else
     * any. */
    "INSERT INTO ins_agg SELECT a.seq_id, a.buffer,"
    " CASE WHEN a.producer_id = 0 THEN NULL ELSE coalesce(a.pid, w.pid) END"
    " FROM sequence a LEFT JOIN ins_wpid w ON w.producer_id = a.producer_id"
    " WHERE a.loss_kind = 'aggregate'"
    "  AND (a.producer_id = 0 OR a.pid IS NOT NULL OR w.npids IS NULL"
    "       OR w.npids = 1);"
    "CREATE INDEX temp.ins_agg_bp ON ins_agg(buffer, pid_req, seq_id);"
    "CREATE INDEX temp.ins_agg_p ON ins_agg(pid_req, seq_id);"
    "UPDATE sequence SET loss_kind = 'folded', loss_aggregate ="
    " CASE WHEN sequence.buffer IS NULL THEN " INS_AGG_PICK("")
    " ELSE " INS_AGG_PICK("buffer = sequence.buffer AND ") " END"
    " WHERE seq_id > 1 AND loss_kind IS NULL"
    "  AND EXISTS (SELECT 1 FROM sequence a WHERE a.loss_kind = 'aggregate');"
    "DROP TABLE temp.ins_agg;"
    "DROP TABLE temp.ins_wpid;"
    /* lost_packets.sql counts each aggregate's writers: one lookup each,
     * not a scan (it took a minute with 20,000 aggregates). */
    "CREATE INDEX IF NOT EXISTS sequence_by_loss_aggregate"
    " ON sequence(loss_aggregate);";

int ins_db_tie_folded(ins_db *db, uint64_t *folded, uint64_t *untied)
{
    if (sqlite3_exec(db->conn, TIE_FOLDED_SQL, NULL, NULL, NULL) !=
        SQLITE_OK)
        return -EIO;
    sqlite3_stmt *s = NULL;
    int rc = sqlite3_prepare_v2(db->conn,
        "SELECT count(*), count(*) - count(loss_aggregate) FROM sequence "
        "WHERE loss_kind = 'folded'", -1, &s, NULL);
    if (rc == SQLITE_OK && sqlite3_step(s) == SQLITE_ROW) {
        if (folded)
            *folded = (uint64_t)sqlite3_column_int64(s, 0);
        if (untied)
            *untied = (uint64_t)sqlite3_column_int64(s, 1);
    } else {
        rc = SQLITE_ERROR;
    }
    sqlite3_finalize(s);
    return rc == SQLITE_OK ? 0 : -EIO;
}

int ins_db_info_text(ins_db *db, const char *key, const char *value)
{
    sqlite3_stmt *s = db->st[ST_INFO];
    sqlite3_bind_text(s, 1, key, -1, SQLITE_STATIC);
    sqlite3_bind_text(s, 2, value, -1, SQLITE_TRANSIENT);
    return run(db, ST_INFO);
}
