/*
 * check_ins_util.h - helpers shared by the inspector's Check tests
 * (header-only, static functions): temp dirs, trace writing with
 * protobuf-c, running the inspector, and SQLite queries on its output.
 *
 * Traces written here are real Perfetto framing: `0A <varint len>
 * <TracePacket>` records, packed with the code generated from protos/.
 * Every helper ck_assert()s on failure, so tests stay short.
 */
#ifndef CHECK_INS_UTIL_H
#define CHECK_INS_UTIL_H

#include <check.h>
#include <errno.h>
#include <inttypes.h>
#include <sqlite3.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common.pb-c.h"
#include "ins_inspect.h"
#include "trace.pb-c.h"

typedef Perfetto__Protos__TracePacket tpkt;
typedef Perfetto__Protos__TraceStats tstats;
typedef Perfetto__Protos__TraceStats__BufferStats tbufstats;
typedef Perfetto__Protos__TraceStats__WriterStats twriter;

/* A fresh directory under $TMPDIR (or /tmp); caller frees the string. */
static inline char *ck_tmpdir(void)
{
    const char *base = getenv("TMPDIR");
    char *p = NULL;
    ck_assert(asprintf(&p, "%s/check_ins.XXXXXX", base ? base : "/tmp") > 0);
    ck_assert_ptr_nonnull(mkdtemp(p));
    return p;
}

/* Remove DIR and the files in it (one level, as the tests create). */
static inline void ck_rmdir(char *dir)
{
    char *cmd = NULL;
    ck_assert(asprintf(&cmd, "rm -rf '%s'", dir) > 0);
    ck_assert_int_eq(system(cmd), 0);
    free(cmd);
    free(dir);
}

static inline char *ck_path(const char *dir, const char *name)
{
    char *p = NULL;
    ck_assert(asprintf(&p, "%s/%s", dir, name) > 0);
    return p;
}

/* $top_srcdir/tests/data/NAME (top_srcdir defaults to ".."). */
static inline char *ck_data(const char *name)
{
    const char *top = getenv("top_srcdir");
    char *p = NULL;
    ck_assert(asprintf(&p, "%s/tests/data/%s", top ? top : "..", name) > 0);
    return p;
}

static inline size_t ck_put_varint(uint8_t *out, uint64_t v)
{
    size_t n = 0;
    do {
        out[n++] = (uint8_t)((v & 0x7f) | (v > 0x7f ? 0x80 : 0));
        v >>= 7;
    } while (v);
    return n;
}

/* Append one Trace.packet record holding PKT (packed) plus EXTRA raw
 * TracePacket bytes (may be NULL) to F. */
static inline void ck_write_packet_extra(FILE *f, const tpkt *pkt,
                                         const uint8_t *extra,
                                         size_t extra_len)
{
    size_t n = perfetto__protos__trace_packet__get_packed_size(pkt);
    uint8_t *buf = malloc(n + 1);
    ck_assert_ptr_nonnull(buf);
    ck_assert_uint_eq(perfetto__protos__trace_packet__pack(pkt, buf), n);
    uint8_t hdr[11];
    hdr[0] = 0x0A;
    size_t h = 1 + ck_put_varint(hdr + 1, n + extra_len);
    ck_assert_uint_eq(fwrite(hdr, 1, h, f), h);
    if (n)
        ck_assert_uint_eq(fwrite(buf, 1, n, f), n);
    if (extra_len)
        ck_assert_uint_eq(fwrite(extra, 1, extra_len, f), extra_len);
    free(buf);
}

static inline void ck_write_packet(FILE *f, const tpkt *pkt)
{
    ck_write_packet_extra(f, pkt, NULL, 0);
}

/* A producer packet on SEQ with optional loss bits. */
static inline void ck_write_seq_packet(FILE *f, uint32_t seq, uint64_t ts,
                                       uint32_t dropped, uint32_t flags)
{
    tpkt p = PERFETTO__PROTOS__TRACE_PACKET__INIT;
    p.has_timestamp = 1;
    p.timestamp = ts;
    p.has_trusted_uid = 1;
    p.trusted_uid = 1000;
    p.has_trusted_packet_sequence_id = 1;
    p.trusted_packet_sequence_id = seq;
    p.has_trusted_pid = 1;
    p.trusted_pid = 4242;
    if (dropped) {
        p.has_previous_packet_dropped = 1;
        p.previous_packet_dropped = dropped;
    }
    if (flags) {
        p.has_sequence_flags = 1;
        p.sequence_flags = flags;
    }
    uint8_t payload[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    p.has_track_event = 1;
    p.track_event.len = sizeof(payload);
    p.track_event.data = payload;
    ck_write_packet(f, &p);
}

/* The service's TraceStats packet (sequence 1). */
static inline void ck_write_stats_packet(FILE *f, uint64_t ts,
                                         tstats *stats)
{
    tpkt p = PERFETTO__PROTOS__TRACE_PACKET__INIT;
    p.has_timestamp = 1;
    p.timestamp = ts;
    p.has_timestamp_clock_id = 1;
    p.timestamp_clock_id = 6;
    p.has_trusted_uid = 1;
    p.trusted_uid = 0;
    p.has_trusted_packet_sequence_id = 1;
    p.trusted_packet_sequence_id = 1;
    p.trace_stats = stats;
    ck_write_packet(f, &p);
}

static inline FILE *ck_fopen(const char *path, const char *mode)
{
    FILE *f = fopen(path, mode);
    ck_assert_msg(f != NULL, "fopen %s: %s", path, strerror(errno));
    return f;
}

/* Inspect TRACE into DB (replacing it); returns the exit status. */
static inline ins_exit ck_inspect(const char *trace, const char *db,
                                  ins_result *res)
{
    ins_options o = {.input_path = trace, .output_path = db, .force = true,
                     .progress = 0};
    ins_result local;
    return ins_inspect(&o, res ? res : &local);
}

static inline sqlite3 *ck_db_open(const char *path)
{
    sqlite3 *db = NULL;
    ck_assert_int_eq(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL),
                     SQLITE_OK);
    return db;
}

/* A trace a test writes (f, into dir/t.pftrace), then inspects into
 * dir/t.db (conn, read-only): ck_session_open, write, ck_session_inspect
 * (must succeed), query, ck_session_close (removes dir). ts is the test's
 * own (a timestamp to count up from). */
typedef struct {
    char *dir, *trace, *db;
    FILE *f;
    sqlite3 *conn;
    uint64_t ts;
} ck_session;

static inline void ck_session_open(ck_session *s)
{
    memset(s, 0, sizeof(*s));
    s->dir = ck_tmpdir();
    s->trace = ck_path(s->dir, "t.pftrace");
    s->db = ck_path(s->dir, "t.db");
    s->f = ck_fopen(s->trace, "wb");
}

static inline void ck_session_inspect(ck_session *s)
{
    fclose(s->f);
    s->f = NULL;
    ck_assert_int_eq(ck_inspect(s->trace, s->db, NULL), INS_EXIT_OK);
    s->conn = ck_db_open(s->db);
}

static inline void ck_session_close(ck_session *s)
{
    if (s->conn)
        sqlite3_close(s->conn);
    free(s->trace);
    free(s->db);
    ck_rmdir(s->dir);
}

/* First column of the first row of SQL (printf-style) as int64; ROWS gets
 * the number of rows (may be NULL). NULL or no row -> MISSING. */
/* Prepares the SQL FMT (sqlite3 printf-style, so %Q quotes); the text is
 * freed here: ck_q_* only report it when it does not prepare. */
static inline sqlite3_stmt *ck_q_prepare(sqlite3 *db, const char *fmt,
                                         va_list ap)
{
    char *sql = sqlite3_vmprintf(fmt, ap);
    sqlite3_stmt *st = NULL;
    ck_assert_msg(sqlite3_prepare_v2(db, sql, -1, &st, NULL) == SQLITE_OK,
                  "%s: %s", sql, sqlite3_errmsg(db));
    sqlite3_free(sql);
    return st;
}

static inline int64_t ck_q_int(sqlite3 *db, int64_t missing, int *rows,
                               const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    sqlite3_stmt *st = ck_q_prepare(db, fmt, ap);
    va_end(ap);
    int64_t v = missing;
    int n = 0;
    while (sqlite3_step(st) == SQLITE_ROW) {
        if (n++ == 0 && sqlite3_column_type(st, 0) != SQLITE_NULL)
            v = sqlite3_column_int64(st, 0);
    }
    sqlite3_finalize(st);
    if (rows)
        *rows = n;
    return v;
}

/* First column of the first row as text into OUT ("" if none/NULL). */
static inline void ck_q_text(sqlite3 *db, char *out, size_t outlen,
                             const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    sqlite3_stmt *st = ck_q_prepare(db, fmt, ap);
    va_end(ap);
    out[0] = '\0';
    if (sqlite3_step(st) == SQLITE_ROW && sqlite3_column_text(st, 0))
        snprintf(out, outlen, "%s", (const char *)sqlite3_column_text(st, 0));
    sqlite3_finalize(st);
}

/* Value of stat NAME at IDX (-1 = single stat, idx NULL); MISSING when the
 * row does not exist. */
static inline int64_t ck_stat(sqlite3 *db, const char *name, int64_t idx,
                              int64_t missing)
{
    if (idx < 0)
        return ck_q_int(db, missing, NULL, "select value from stats where "
                        "name = %Q and idx is null", name);
    return ck_q_int(db, missing, NULL, "select value from stats where "
                    "name = %Q and idx = %lld", name, (long long)idx);
}

static inline long ck_file_size(const char *path)
{
    struct stat sb;
    ck_assert_int_eq(stat(path, &sb), 0);
    return (long)sb.st_size;
}

#endif /* CHECK_INS_UTIL_H */
