/*
 * ins_inspect.c - the inspection driver (design in ins_inspect.h).
 *
 * Batching: a transaction is committed every batch_packets packets (and at
 * the end or on error), after the tracker wrote its pending sequence rows,
 * so the database on disk is always a consistent prefix of the trace.
 */
#include "ins_inspect.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "ins_db.h"
#include "ins_inflate.h"
#include "ins_packet.h"
#include "ins_reader.h"
#include "ins_schema.h"
#include "ins_stats.h"

#ifndef INS_VERSION
#define INS_VERSION "unknown"
#endif

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

typedef struct progress {
    bool enabled;
    double start, last;
    bool shown;
} progress;

static void progress_tick(progress *pg, uint64_t bytes, uint64_t total,
                          uint64_t packets, bool final)
{
    if (!pg->enabled)
        return;
    double t = now_s();
    /* Only long inputs get a progress line: start after 1 s. */
    if (!final && (t - pg->start < 1.0 || t - pg->last < 0.25))
        return;
    if (final && !pg->shown)
        return;
    pg->last = t;
    pg->shown = true;
    double mib = (double)bytes / (1024.0 * 1024.0);
    double rate = mib / (t - pg->start > 0 ? t - pg->start : 1e-9);
    if (total)
        fprintf(stderr, "\rinspecting: %.1f / %.1f MiB (%3.0f%%), %" PRIu64
                " packets, %.0f MiB/s ", mib,
                (double)total / (1024.0 * 1024.0),
                100.0 * (double)bytes / (double)total, packets, rate);
    else
        fprintf(stderr, "\rinspecting: %.1f MiB, %" PRIu64
                " packets, %.0f MiB/s ", mib, packets, rate);
    if (final)
        fputc('\n', stderr);
    fflush(stderr);
}

static ins_exit finish_error(ins_result *res, ins_exit st, const char *fmt,
                             const char *a, const char *b)
{
    res->status = st;
    snprintf(res->message, sizeof(res->message), fmt, a, b);
    return st;
}

/* Nesting bound for compressed_packets inside compressed_packets. */
#define INS_MAX_CONTAINER_DEPTH 4

/* Feed the packets inside P's compressed_packets (zlib/gzip DEFLATE of a
 * Trace) to the tracker, right after P, numbering them on from OUTER's
 * counter. *PACKETS counts what was fed. Returns 0, -EBADMSG with ERR set
 * (does not inflate / bad packet inside), or a tracker error. */
static int expand_container(ins_tracker *t, ins_decoder *outer,
                            const ins_packet *p, int depth,
                            uint64_t *packets, char *err, size_t errlen)
{
    uint8_t *data = NULL;
    size_t len = 0;
    const char *why = NULL;
    int rc = ins_inflate(p->compressed.data, p->compressed.len, &data, &len,
                         &why);
    if (rc == -ENOMEM)
        return rc;
    if (rc != 0) {
        snprintf(err, errlen, "packet #%" PRIu64 " at offset %" PRIu64
                 ": its compressed_packets do not inflate (%s)", p->id,
                 p->offset, why);
        return -EBADMSG;
    }
    ins_reader r;
    ins_reader_init_mem(&r, data, len);
    ins_decoder d;
    ins_decoder_init(&d, &r);
    d.next_id = outer->next_id;
    ins_packet inner;
    memset(&inner, 0, sizeof(inner));
    for (;;) {
        ins_decode_status st = ins_decoder_next(&d, &inner);
        if (st == INS_DECODE_END)
            break;
        if (st != INS_DECODE_PACKET) {
            snprintf(err, errlen, "packet #%" PRIu64 " at offset %" PRIu64
                     ": inside its compressed_packets: %s", p->id, p->offset,
                     d.error);
            rc = -EBADMSG;
            break;
        }
        inner.offset = p->offset;
        inner.in_container = true;
        inner.container_id = p->id;
        if (inner.compressed.present && depth >= INS_MAX_CONTAINER_DEPTH) {
            snprintf(err, errlen, "packet #%" PRIu64 " at offset %" PRIu64
                     ": compressed packets nested more than %d deep", p->id,
                     p->offset, INS_MAX_CONTAINER_DEPTH);
            rc = -EBADMSG;
            break;
        }
        rc = ins_tracker_on_packet(t, &inner, err, errlen);
        if (rc != 0)
            break;
        (*packets)++;
        if (inner.compressed.present) {
            rc = expand_container(t, &d, &inner, depth + 1, packets, err,
                                  errlen);
            if (rc != 0)
                break;
        }
    }
    outer->next_id = d.next_id;
    ins_packet_free(&inner);
    ins_reader_free(&r);
    return rc;
}

static const char *status_word(ins_decode_status st)
{
    switch (st) {
    case INS_DECODE_TRUNCATED: return "truncated";
    case INS_DECODE_MALFORMED: return "malformed";
    case INS_DECODE_IO_ERROR: return "io_error";
    default: return "complete";
    }
}

ins_exit ins_inspect_fd(int fd, const char *name, const ins_options *o,
                        ins_result *res)
{
    memset(res, 0, sizeof(*res));
    struct stat sb;
    if (fstat(fd, &sb) == 0 && S_ISREG(sb.st_mode))
        res->input_bytes = (uint64_t)sb.st_size;

    ins_reader reader;
    if (ins_reader_init(&reader, fd, 0) != 0)
        return finish_error(res, INS_EXIT_INPUT, "%s: out of memory%s", name,
                            "");
    long peek = ins_reader_ensure(&reader, 64);
    if (peek < 0) {
        ins_reader_free(&reader);
        return finish_error(res, INS_EXIT_INPUT, "cannot read %s: %s", name,
                            strerror((int)-peek));
    }
    res->format = ins_detect_format(ins_reader_ptr(&reader), (size_t)peek);
    if (res->format != INS_FORMAT_PROTO_TRACE) {
        ins_reader_free(&reader);
        res->status = INS_EXIT_INPUT;
        snprintf(res->message, sizeof(res->message),
                 "%s is %s, not a Perfetto trace: %s", name,
                 ins_format_name(res->format),
                 ins_format_hint(res->format));
        return res->status;
    }

    char err[512] = "";
    ins_db *db = NULL;
    if (ins_db_open(o->output_path, o->force, ins_schema_sql, &db, err,
                    sizeof(err)) != 0) {
        ins_reader_free(&reader);
        return finish_error(res, INS_EXIT_OUTPUT, "%s%s", err, "");
    }
    ins_tracker *tracker = NULL;
    ins_packet pkt;
    memset(&pkt, 0, sizeof(pkt));
    ins_decoder dec;
    ins_decoder_init(&dec, &reader);
    uint32_t batch = o->batch_packets ? o->batch_packets
                                      : INS_DEFAULT_BATCH_PACKETS;
    progress pg = {.enabled = o->progress > 0 ||
                              (o->progress < 0 && isatty(STDERR_FILENO)),
                   .start = now_s()};
    pg.last = pg.start;

    int rc = ins_tracker_create(db, !o->no_packet_rows, &tracker);
    if (rc == 0)
        rc = ins_db_begin(db);
    if (rc == 0)
        rc = ins_db_info_text(db, "input", name);
    if (rc == 0)
        rc = ins_db_info_text(db, "inspector_version", INS_VERSION);
    if (rc == 0 && res->input_bytes)
        rc = ins_db_info_int(db, "input_bytes", (int64_t)res->input_bytes);
    if (rc == 0)
        rc = ins_tracker_start(tracker);
    if (rc == 0)
        rc = ins_db_info_text(db, "status", "in_progress");
    if (rc == 0)
        rc = ins_db_commit(db);
    if (rc == 0)
        rc = ins_db_begin(db);

    ins_decode_status st = INS_DECODE_END;
    ins_exit result = INS_EXIT_OK;
    uint32_t in_batch = 0;
    uint64_t expanded = 0;
    while (rc == 0) {
        st = ins_decoder_next(&dec, &pkt);
        if (st != INS_DECODE_PACKET)
            break;
        rc = ins_tracker_on_packet(tracker, &pkt, err, sizeof(err));
        if (rc != 0)
            break;
        res->packets++;
        if (pkt.compressed.present) {
            rc = expand_container(tracker, &dec, &pkt, 1, &res->packets, err,
                                  sizeof(err));
            if (rc != 0)
                break;
            expanded++;
        }
        res->bytes_decoded = ins_reader_offset(&reader);
        if (++in_batch >= batch) {
            in_batch = 0;
            rc = ins_tracker_flush(tracker);
            if (rc == 0)
                rc = ins_db_commit(db);
            if (rc == 0)
                rc = ins_db_begin(db);
            progress_tick(&pg, res->bytes_decoded, res->input_bytes,
                          res->packets, false);
        } else if ((in_batch & 4095) == 0) {
            progress_tick(&pg, res->bytes_decoded, res->input_bytes,
                          res->packets, false);
        }
    }
    progress_tick(&pg, res->bytes_decoded, res->input_bytes, res->packets,
                  true);

    /* Classify the stop. */
    const char *status = "complete";
    if (rc == -EBADMSG || rc == -ENOSPC) {
        result = INS_EXIT_CORRUPT;
        status = rc == -EBADMSG ? "malformed" : "too_many_sequences";
        res->error_offset = pkt.offset;
        snprintf(res->message, sizeof(res->message), "%s: %s", name, err);
        rc = 0; /* the database is fine: commit what came before */
    } else if (rc == -ENOMEM) {
        result = INS_EXIT_OUTPUT;
        snprintf(res->message, sizeof(res->message), "out of memory");
    } else if (rc != 0) {
        result = INS_EXIT_OUTPUT;
        snprintf(res->message, sizeof(res->message),
                 "writing %s failed: %s", o->output_path, ins_db_errmsg(db));
    } else if (st != INS_DECODE_END) {
        result = st == INS_DECODE_IO_ERROR ? INS_EXIT_INPUT
                                           : INS_EXIT_CORRUPT;
        status = status_word(st);
        res->error_offset = dec.error_offset;
        snprintf(res->message, sizeof(res->message),
                 "%s: %s (offset %" PRIu64 ")", name, dec.error,
                 dec.error_offset);
    }

    res->compressed_skipped =
        tracker ? ins_tracker_compressed_skipped(tracker) : 0;
    if (rc == 0 && result != INS_EXIT_OUTPUT) {
        rc = ins_tracker_flush(tracker);
        if (rc == 0)
            rc = ins_tracker_finish(tracker);
        if (rc == 0)
            rc = ins_db_info_text(db, "status", status);
        if (rc == 0)
            rc = ins_db_info_int(db, "packets", (int64_t)res->packets);
        if (rc == 0)
            rc = ins_db_info_int(db, "bytes_decoded",
                                 (int64_t)res->bytes_decoded);
        if (rc == 0)
            rc = ins_db_info_int(db, "compressed_packets_skipped",
                                 (int64_t)res->compressed_skipped);
        if (rc == 0)
            rc = ins_db_info_int(db, "compressed_packets_expanded",
                                 (int64_t)expanded);
        if (rc == 0 && result != INS_EXIT_OK) {
            rc = ins_db_info_text(db, "error", res->message);
            if (rc == 0)
                rc = ins_db_info_int(db, "error_offset",
                                     (int64_t)res->error_offset);
        }
        if (rc == 0)
            rc = ins_db_commit(db);
        if (rc != 0) {
            result = INS_EXIT_OUTPUT;
            snprintf(res->message, sizeof(res->message),
                     "writing %s failed: %s", o->output_path,
                     ins_db_errmsg(db));
        }
    }
    ins_tracker_destroy(tracker);
    ins_packet_free(&pkt);
    ins_reader_free(&reader);
    if (ins_db_close(db) != 0 && result == INS_EXIT_OK) {
        result = INS_EXIT_OUTPUT;
        snprintf(res->message, sizeof(res->message), "closing %s failed",
                 o->output_path);
    }
    res->status = result;
    return result;
}

ins_exit ins_inspect(const ins_options *o, ins_result *res)
{
    if (strcmp(o->input_path, "-") == 0)
        return ins_inspect_fd(STDIN_FILENO, "<stdin>", o, res);
    int fd = open(o->input_path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        memset(res, 0, sizeof(*res));
        res->status = INS_EXIT_INPUT;
        snprintf(res->message, sizeof(res->message), "cannot open %s: %s",
                 o->input_path, strerror(errno));
        return res->status;
    }
    struct stat sb, ob;
    if (fstat(fd, &sb) == 0 && S_ISDIR(sb.st_mode)) {
        close(fd);
        memset(res, 0, sizeof(*res));
        res->status = INS_EXIT_INPUT;
        snprintf(res->message, sizeof(res->message),
                 "%s is a directory, not a trace file", o->input_path);
        return res->status;
    }
    if (stat(o->output_path, &ob) == 0 && ob.st_dev == sb.st_dev &&
        ob.st_ino == sb.st_ino) {
        /* --force would delete the trace we are reading. */
        close(fd);
        memset(res, 0, sizeof(*res));
        res->status = INS_EXIT_OUTPUT;
        snprintf(res->message, sizeof(res->message),
                 "the output %s is the input trace itself: choose another "
                 "-o FILE", o->output_path);
        return res->status;
    }
    ins_exit st = ins_inspect_fd(fd, o->input_path, o, res);
    close(fd);
    return st;
}
