/*
 * cli_report.c - progress line, --json summary and early-end report of
 * `shmtrace record`/`clone` (see cli_report.h).
 */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include "cli_json.h"
#include "cli_report.h"
#include "ipc.h"

void cli_progress_draw(cli_progress *pg, cons_client *c, const cons_out *o,
                       bool final)
{
    if (!pg->enabled)
        return;
    if (final) {
        fputs("\r\033[K", stderr); /* the summary line replaces it */
        return;
    }
    uint64_t now = ipc_now_ms();
    if (now - pg->last_ms < 1000)
        return;
    pg->last_ms = now;
    Perfetto__Protos__TraceStats *st = NULL;
    cons_losses l;
    memset(&l, 0, sizeof l);
    if (cons_get_stats(c, &st) == 0)
        cons_losses_from_stats(st, &l);
    /* The service writes the file: shmtraced says what it holds so far
     * (TraceStats.shmtrace_file), else the follow has counted it. */
    uint64_t packets = o->packets, flagged = o->flagged_packets;
    if (pg->service_fd >= 0 && st && st->shmtrace_file) {
        packets = st->shmtrace_file->packets;
        flagged = st->shmtrace_file->flagged_packets;
    }
    uint64_t el = now - pg->start_ms;
    char when[64], where[96];
    if (pg->duration_ms)
        snprintf(when, sizeof when, "%6.1f s, %.0f s left",
                 (double)el / 1000.0,
                 el >= pg->duration_ms
                     ? 0.0 : (double)(pg->duration_ms - el) / 1000.0);
    else
        snprintf(when, sizeof when, "%6.1f s, Ctrl-C stops",
                 (double)el / 1000.0);
    /* Without --long nothing reaches the file before the end: show what
     * the service holds instead of a file that stays empty. */
    struct stat fst;
    if (pg->reading)
        snprintf(where, sizeof where, "file %.1f MB, %" PRIu64 " packets",
                 (double)o->bytes / 1e6, o->packets);
    else if (pg->service_fd >= 0 && fstat(pg->service_fd, &fst) == 0)
        snprintf(where, sizeof where, "file %.1f MB, %" PRIu64 " packets "
                 "(the service writes it)", (double)fst.st_size / 1e6,
                 packets);
    else
        snprintf(where, sizeof where, "in the service's buffers, "
                 "read at the end");
    fprintf(stderr,
            "\r\033[K[%s] traced %.1f MB | %s | losses: %" PRIu64
            " flagged, %" PRIu64 " overwritten, %" PRIu64 " discarded, %"
            PRIu64 " in producers", when, (double)l.bytes_written / 1e6,
            where, flagged, l.chunks_overwritten,
            l.chunks_discarded, l.trace_writer_packet_loss);
    perfetto__protos__trace_stats__free_unpacked(st, NULL);
}

void cli_json_summary(const char *cmd, const char *path, const cons_out *o,
                      const Perfetto__Protos__TraceStats *st,
                      uint64_t elapsed_ms, const char *status)
{
    cons_losses l;
    cons_losses_from_stats(st, &l);
    printf("{\"command\":");
    cli_json_string(stdout, cmd);
    printf(",\"status\":");
    cli_json_string(stdout, status);
    printf(",\"file\":");
    cli_json_string(stdout, path);
    printf(",\"seconds\":%.3f,\"packets\":%" PRIu64 ",\"bytes\":%" PRIu64
           ",\"packets_flagged_previous_packet_dropped\":%" PRIu64
           ",\"malformed_packets\":%" PRIu64
           ",\"losses\":{\"chunks_overwritten\":%" PRIu64
           ",\"chunks_discarded\":%" PRIu64 ",\"abi_violations\":%" PRIu64
           ",\"trace_writer_packet_loss\":%" PRIu64
           ",\"patches_failed\":%" PRIu64 ",\"invalid_packets\":%" PRIu64
           "},\"trace_stats\":",
           (double)elapsed_ms / 1000.0, o->packets, o->bytes,
           o->flagged_packets, o->malformed, l.chunks_overwritten,
           l.chunks_discarded, l.abi_violations, l.trace_writer_packet_loss,
           l.patches_failed, l.invalid_packets);
    cli_json_message(stdout, st ? &st->base : NULL);
    printf("}\n");
    fflush(stdout);
}

void cli_keep_partial(cli_outfile *of, cons_out *o, bool keep, bool json,
                      const char *why, uint64_t elapsed_ms,
                      bool service_wrote)
{
    char err[512];
    if (keep && service_wrote && of->fd >= 0) {
        int rc = cons_out_scan_fd(o, of->fd);
        if ((rc == 0 || rc == -EBADMSG) &&
            ftruncate(of->fd, (off_t)o->bytes) < 0)
            o->packets = 0;
    }
    if (keep && o->packets > 0 && (service_wrote || cons_out_flush(o) == 0) &&
        cli_outfile_commit(of, err, sizeof err) == 0) {
        fprintf(stderr, "shmtrace record: %s: %s holds the %" PRIu64
                " whole packets (%.1f MB) recorded in the first %.1f s; the "
                "rest of the session is not in it\n", why, of->path,
                o->packets, (double)o->bytes / 1e6,
                (double)elapsed_ms / 1000.0);
        if (json)
            cli_json_summary("record", of->path, o, o->last_stats,
                               elapsed_ms, "partial");
        return;
    }
    cli_outfile_abort(of);
    fprintf(stderr, "shmtrace record: %s: nothing written (%s not "
            "created)\n", why, of->path);
}
