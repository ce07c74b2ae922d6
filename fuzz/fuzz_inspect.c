/*
 * fuzz_inspect.c - libFuzzer target: the inspector's trace reader, the
 * whole ins_inspect_fd pipeline (reader, format detection, TracePacket
 * decoder, zlib inflate of compressed_packets, tracker, SQLite writer) over
 * a hostile trace file.
 *
 * Input: the trace bytes, given through a memfd as shmtrace-inspect reads
 * a file. The database goes to a private directory (tmpfs when there is
 * one), replaced on every run.
 *
 * Invariants (FZ_CHECK):
 *  - the outcome is OK, INPUT (not a trace: format says so) or CORRUPT
 *    with an offset inside the input, never OUTPUT (the database is ours
 *    and fine) and never a crash; a non-OK outcome explains itself;
 *  - bytes decoded never pass the input, and all of it when OK;
 *  - the database agrees with the result: packet rows = packets reported
 *    = trace_info.packets; trace_info.status is "complete" exactly when OK;
 *  - conservation: every complete top-level TracePacket record before the
 *    decoded end (counted here by a separate, minimal walk of the framing)
 *    is a packet row (compressed containers only add rows).
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <sqlite3.h>
#include <sys/mman.h>
#include <unistd.h>

#include "ins_inspect.h"

#include "fuzz_util.h"

static char g_dir[256];
static char g_db[300];

static void cleanup(void)
{
    const char *suffix[] = {"", "-wal", "-shm", "-journal"};
    char p[320];
    for (size_t i = 0; i < 4; i++) {
        snprintf(p, sizeof p, "%s%s", g_db, suffix[i]);
        unlink(p);
    }
    rmdir(g_dir);
}

static void setup(void)
{
    if (g_dir[0])
        return;
    const char *base = access("/dev/shm", W_OK) == 0 ? "/dev/shm"
                       : getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    snprintf(g_dir, sizeof g_dir, "%s/shmtrace-fuzz-inspect-XXXXXX", base);
    FZ_CHECK(mkdtemp(g_dir) != NULL, "mkdtemp %s", g_dir);
    snprintf(g_db, sizeof g_db, "%s/out.db", g_dir);
    atexit(cleanup);
}

/* Varint at p[*i..n); false if it runs off the end or past 10 bytes. */
static bool varint(const uint8_t *p, size_t n, size_t *i, uint64_t *v)
{
    *v = 0;
    for (int s = 0; s < 64 && *i < n; s += 7) {
        uint8_t b = p[(*i)++];
        *v |= (uint64_t)(b & 0x7f) << s;
        if (!(b & 0x80))
            return true;
    }
    return false;
}

/* Complete `Trace.packet` (field 1, length-delimited) records that end at
 * or before `end`, walking the top-level framing only. */
static uint64_t top_level_packets(const uint8_t *p, size_t end)
{
    uint64_t n = 0;
    size_t i = 0;
    while (i < end) {
        uint64_t key, len;
        if (!varint(p, end, &i, &key))
            break;
        switch (key & 7) {
        case 0:
            if (!varint(p, end, &i, &len))
                return n;
            break;
        case 1: i += 8; break;
        case 5: i += 4; break;
        case 2:
            if (!varint(p, end, &i, &len) || len > end - i)
                return n;
            i += len;
            if (key == 0x0a)
                n++;
            break;
        default:
            return n;
        }
    }
    return n;
}

static int64_t query_int(sqlite3 *db, const char *sql)
{
    sqlite3_stmt *st;
    FZ_CHECK(sqlite3_prepare_v2(db, sql, -1, &st, NULL) == SQLITE_OK,
             "%s: %s", sql, sqlite3_errmsg(db));
    int64_t v = -1;
    if (sqlite3_step(st) == SQLITE_ROW)
        v = sqlite3_column_type(st, 0) == SQLITE_NULL
                ? -1 : sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    return v;
}

static bool status_is(sqlite3 *db, const char *want)
{
    sqlite3_stmt *st;
    FZ_CHECK(sqlite3_prepare_v2(db, "SELECT value FROM trace_info WHERE "
                                "key = 'status'", -1, &st, NULL) ==
                 SQLITE_OK, "status query");
    bool eq = false;
    if (sqlite3_step(st) == SQLITE_ROW) {
        const unsigned char *s = sqlite3_column_text(st, 0);
        eq = s && strcmp((const char *)s, want) == 0;
    }
    sqlite3_finalize(st);
    return eq;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    setup();
    int fd = memfd_create("fuzz-trace", MFD_CLOEXEC);
    FZ_CHECK(fd >= 0, "memfd_create: %s", strerror(errno));
    FZ_CHECK(size == 0 || write(fd, data, size) == (ssize_t)size, "write");
    FZ_CHECK(lseek(fd, 0, SEEK_SET) == 0, "lseek");

    ins_options o = {.input_path = "fuzz", .output_path = g_db,
                     .force = true, .progress = 0};
    ins_result r;
    ins_exit st = ins_inspect_fd(fd, "fuzz", &o, &r);
    close(fd);

    FZ_CHECK(st == r.status, "returned %d, result says %d", st, r.status);
    FZ_CHECK(st == INS_EXIT_OK || st == INS_EXIT_INPUT ||
                 st == INS_EXIT_CORRUPT,
             "status %d: %s", st, r.message);
    if (st != INS_EXIT_OK)
        FZ_CHECK(r.message[0] != '\0', "status %d without a message", st);
    if (st == INS_EXIT_INPUT) {
        FZ_CHECK(r.format != INS_FORMAT_PROTO_TRACE,
                 "a trace refused as input: %s", r.message);
        return 0; /* no database by contract */
    }
    FZ_CHECK(r.format == INS_FORMAT_PROTO_TRACE, "format %d inspected",
             r.format);
    FZ_CHECK(r.bytes_decoded <= size, "decoded %llu of %zu bytes",
             (unsigned long long)r.bytes_decoded, size);
    if (st == INS_EXIT_OK)
        FZ_CHECK(r.bytes_decoded == size || r.packets == 0 ||
                     top_level_packets(data, size) ==
                         top_level_packets(data, r.bytes_decoded),
                 "OK but decoded %llu of %zu bytes",
                 (unsigned long long)r.bytes_decoded, size);
    else
        FZ_CHECK(r.error_offset <= size, "error at %llu of %zu bytes",
                 (unsigned long long)r.error_offset, size);

    sqlite3 *db;
    FZ_CHECK(sqlite3_open_v2(g_db, &db, SQLITE_OPEN_READONLY, NULL) ==
                 SQLITE_OK, "open the database");
    int64_t rows = query_int(db, "SELECT count(*) FROM packet");
    int64_t info = query_int(db, "SELECT value FROM trace_info WHERE "
                                 "key = 'packets'");
    FZ_CHECK(rows == (int64_t)r.packets, "%lld packet rows, %llu packets",
             (long long)rows, (unsigned long long)r.packets);
    FZ_CHECK(info == (int64_t)r.packets, "trace_info.packets %lld, %llu",
             (long long)info, (unsigned long long)r.packets);
    FZ_CHECK(status_is(db, "complete") == (st == INS_EXIT_OK),
             "trace_info.status disagrees with status %d", st);
    uint64_t top = top_level_packets(data, r.bytes_decoded);
    FZ_CHECK(top <= r.packets, "%llu records before offset %llu, %llu rows",
             (unsigned long long)top, (unsigned long long)r.bytes_decoded,
             (unsigned long long)r.packets);
    sqlite3_close(db);
    return 0;
}
