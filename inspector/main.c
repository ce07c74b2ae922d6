/*
 * main.c - shmtrace-inspect: a Perfetto-format trace into an SQLite
 * database with trace processor's `stats` table (see --help).
 *
 * All the work is in ins_inspect.c; this file parses the command line,
 * prints the outcome and maps it to the documented exit codes.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli_exit.h"
#include "cli_parse.h"
#include "ins_inspect.h"
#include "ins_live.h"

#ifndef INS_VERSION
#define INS_VERSION "unknown"
#endif
#ifndef INS_PKGDATADIR
#define INS_PKGDATADIR "/usr/local/share/shmtrace"
#endif

static void usage(FILE *out)
{
    fprintf(out,
"Usage: shmtrace-inspect [OPTIONS] TRACE\n"
"       shmtrace-inspect [OPTIONS] --live -o FILE [--session-name S]\n"
"Turn a Perfetto-format trace (a shmtrace or Perfetto trace file) into an\n"
"SQLite database whose `stats` table matches Perfetto trace processor's,\n"
"plus packet, sequence, data_loss, buffer_config and the buffer view.\n"
"\n"
"  TRACE                 trace file; - reads standard input\n"
"  -o, --output FILE     database to create (default: TRACE.db)\n"
"  -f, --force           replace FILE if it already exists (only ever a\n"
"                        regular file: a symlink, directory, device, FIFO\n"
"                        or socket at FILE is refused and left alone)\n"
"      --no-packets      leave the packet table empty (faster, smaller)\n"
"      --batch N         packets per transaction (default %u)\n"
"      --progress        always show progress on stderr\n"
"      --no-progress     never show progress (default: on a terminal,\n"
"                        for inputs taking more than a second)\n"
"  -q, --quiet           no summary line\n"
"\n"
"Live sessions (a snapshot through CloneSession; the session goes on):\n"
"      --live            inspect a running session instead of a file\n"
"      --session-name S  the session with unique_session_name S\n"
"      --session-id N    the session with id N (default: the service\n"
"                        picks, e.g. the only one)\n"
"      --socket PATH     consumer socket (default $PERFETTO_CONSUMER_SOCK_NAME,\n"
"                        else as `shmtrace --help` says); only a service\n"
"                        running as root or as you is used, and it lets\n"
"                        you clone only your own sessions\n"
"      --keep-trace F    also keep the cloned trace in F (written only if\n"
"                        the whole clone was read)\n"
"\n"
"  -h, --help            this text\n"
"  -V, --version         print the version\n"
"\n"
"Then query it with sqlite3, e.g. the canned queries in\n"
"%s:\n"
"  sqlite3 trace.db < %s/data_loss.sql\n"
"  sqlite3 trace.db \"select * from stats where severity = 'data_loss'"
" and value != 0\"\n"
"\n"
"On a truncated or corrupt trace (exit 5) the database keeps every packet\n"
"before the problem, whose byte offset is printed and kept in trace_info;\n"
"when the input is not a trace (exit 4) the message names what it looks\n"
"like (gzip, SQLite, JSON, text...) and no database is written.\n"
"\n" CLI_EXIT_HELP,
            INS_DEFAULT_BATCH_PACKETS, INS_PKGDATADIR, INS_PKGDATADIR);
}

int main(int argc, char **argv)
{
    enum { OPT_NO_PACKETS = 256, OPT_BATCH, OPT_PROGRESS, OPT_NO_PROGRESS,
           OPT_LIVE, OPT_SESSION_NAME, OPT_SESSION_ID, OPT_SOCKET,
           OPT_KEEP_TRACE };
    static const struct option longopts[] = {
        {"output", required_argument, NULL, 'o'},
        {"force", no_argument, NULL, 'f'},
        {"no-packets", no_argument, NULL, OPT_NO_PACKETS},
        {"batch", required_argument, NULL, OPT_BATCH},
        {"progress", no_argument, NULL, OPT_PROGRESS},
        {"no-progress", no_argument, NULL, OPT_NO_PROGRESS},
        {"quiet", no_argument, NULL, 'q'},
        {"live", no_argument, NULL, OPT_LIVE},
        {"session-name", required_argument, NULL, OPT_SESSION_NAME},
        {"session-id", required_argument, NULL, OPT_SESSION_ID},
        {"socket", required_argument, NULL, OPT_SOCKET},
        {"keep-trace", required_argument, NULL, OPT_KEEP_TRACE},
        {"help", no_argument, NULL, 'h'},
        {"version", no_argument, NULL, 'V'},
        {NULL, 0, NULL, 0}};
    ins_options o = {.progress = -1};
    ins_live_options lo = {.session_id = UINT64_MAX};
    bool quiet = false, live = false;
    int c;
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":o:fqhV", longopts, NULL)) != -1) {
        switch (c) {
        case 'o': o.output_path = optarg; break;
        case 'f': o.force = true; break;
        case 'q': quiet = true; break;
        case OPT_NO_PACKETS: o.no_packet_rows = true; break;
        case OPT_BATCH: {
            char *end;
            unsigned long v = strtoul(optarg, &end, 10);
            if (*end || v == 0 || v > 100000000ul) {
                fprintf(stderr, "shmtrace-inspect: --batch wants a number "
                        "from 1 to 100000000, not '%s'\n", optarg);
                return INS_EXIT_USAGE;
            }
            o.batch_packets = (uint32_t)v;
            break;
        }
        case OPT_LIVE: live = true; break;
        case OPT_SESSION_NAME: lo.session_name = optarg; live = true; break;
        case OPT_SESSION_ID: {
            char *end;
            errno = 0;
            unsigned long long v = strtoull(optarg, &end, 10);
            if (*end || end == optarg || errno) {
                fprintf(stderr, "shmtrace-inspect: --session-id wants a "
                        "number, not '%s'\n", optarg);
                return INS_EXIT_USAGE;
            }
            lo.session_id = v;
            live = true;
            break;
        }
        case OPT_SOCKET: lo.socket = optarg; break;
        case OPT_KEEP_TRACE: lo.keep_trace = optarg; break;
        case OPT_PROGRESS: o.progress = 1; break;
        case OPT_NO_PROGRESS: o.progress = 0; break;
        case 'h': usage(stdout); return INS_EXIT_OK;
        case 'V': printf("shmtrace-inspect %s\n", INS_VERSION);
            return INS_EXIT_OK;
        default:
            cli_bad_option("shmtrace-inspect", c, optopt, argv[optind - 1]);
            return INS_EXIT_USAGE;
        }
    }
    if (live) {
        if (optind != argc || o.output_path == NULL) {
            fprintf(stderr, "shmtrace-inspect: --live takes no TRACE and "
                    "needs -o FILE\n" CLI_TRY_HELP("shmtrace-inspect"));
            return INS_EXIT_USAGE;
        }
        if (lo.session_name && lo.session_id != UINT64_MAX) {
            fprintf(stderr, "shmtrace-inspect: give --session-name or "
                    "--session-id, not both\n");
            return INS_EXIT_USAGE;
        }
        ins_result res;
        ins_exit st = ins_live(&lo, &o, &res);
        if (st != INS_EXIT_OK)
            fprintf(stderr, "shmtrace-inspect: %s\n", res.message);
        else if (!quiet)
            fprintf(stderr, "shmtrace-inspect: wrote %s: %" PRIu64
                    " packets from the live session\n", o.output_path,
                    res.packets);
        return (int)st;
    }
    if (lo.socket || lo.keep_trace) {
        fprintf(stderr, "shmtrace-inspect: --socket and --keep-trace go "
                "with --live\n");
        return INS_EXIT_USAGE;
    }
    if (optind != argc - 1) {
        fprintf(stderr, "shmtrace-inspect: %s\n"
                CLI_TRY_HELP("shmtrace-inspect"), optind == argc
                ? "which trace? (give a TRACE file)" : "one TRACE at a time");
        return INS_EXIT_USAGE;
    }
    o.input_path = argv[optind];
    char *default_out = NULL;
    if (o.output_path == NULL) {
        if (strcmp(o.input_path, "-") == 0) {
            fprintf(stderr, "shmtrace-inspect: reading stdin needs "
                    "-o FILE\n");
            return INS_EXIT_USAGE;
        }
        size_t n = strlen(o.input_path) + 4;
        default_out = malloc(n);
        if (default_out == NULL)
            return INS_EXIT_OUTPUT;
        snprintf(default_out, n, "%s.db", o.input_path);
        o.output_path = default_out;
    }

    ins_result res;
    ins_exit st = ins_inspect(&o, &res);
    if (st != INS_EXIT_OK) {
        fprintf(stderr, "shmtrace-inspect: %s\n", res.message);
        if (st == INS_EXIT_CORRUPT)
            fprintf(stderr, "shmtrace-inspect: %s holds the %" PRIu64
                    " packets before offset %" PRIu64 " (trace_info.status "
                    "says why)\n", o.output_path, res.packets,
                    res.error_offset);
    } else if (!quiet) {
        fprintf(stderr, "shmtrace-inspect: wrote %s: %" PRIu64 " packets, %"
                PRIu64 " bytes of trace\n", o.output_path, res.packets,
                res.bytes_decoded);
    }
    if (res.compressed_skipped && !quiet)
        fprintf(stderr, "shmtrace-inspect: warning: %" PRIu64 " packets hold "
                "zstd_compressed_packets, which shmtrace-inspect does not "
                "expand (gzip/zlib ones it does); "
                "stats derived from their contents are missing\n",
                res.compressed_skipped);
    free(default_out);
    return (int)st;
}
