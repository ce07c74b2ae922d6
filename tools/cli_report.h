/*
 * cli_report.h - what `shmtrace record`/`clone` tell the user while and
 * after they run (cli_*): the progress line on a terminal, the --json
 * summary, and the report of a run that ended early (whole packets kept,
 * or nothing written). The one-line loss summary stays in shmtrace.c.
 */
#ifndef SHMTRACE_CLI_REPORT_H
#define SHMTRACE_CLI_REPORT_H

#include <stdbool.h>
#include <stdint.h>

#include "cli_outfile.h"
#include "consumer_client.h"

typedef struct cli_progress {
    bool enabled;          /* stderr is a terminal and not --quiet */
    uint64_t start_ms, last_ms;
    uint32_t duration_ms;  /* 0: until Ctrl-C */
    bool reading;          /* --long: we read into the file while tracing */
    int service_fd;        /* write_into_file: the file the service writes */
} cli_progress;

/* Redraw the progress line (at most once a second; asks the service for
 * its TraceStats); final erases it for the summary. */
void cli_progress_draw(cli_progress *pg, cons_client *c, const cons_out *o,
                       bool final);
/* The summary as one JSON object (one line) on stdout: command, status
 * ("complete", "cut_short", "partial"), file, seconds, packets, bytes,
 * loss counters and the whole TraceStats (st may be NULL). */
void cli_json_summary(const char *cmd, const char *path, const cons_out *o,
                      const Perfetto__Protos__TraceStats *st,
                      uint64_t elapsed_ms, const char *status);
/* A record that ends early (interrupted twice, service gone, a session
 * ended with an error: why says which): keep FILE only if it holds whole
 * packets -- what we read (flushed here), or what the service wrote
 * (service_wrote: cut at its last whole record) -- and say what it holds;
 * else remove it and say nothing was written. keep false: always remove. */
void cli_keep_partial(cli_outfile *of, cons_out *o, bool keep, bool json,
                      const char *why, uint64_t elapsed_ms,
                      bool service_wrote);

#endif /* SHMTRACE_CLI_REPORT_H */
