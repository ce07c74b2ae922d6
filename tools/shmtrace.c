/*
 * shmtrace.c - `shmtrace`, the consumer command line: main(), help, clone
 * and stats (record is in shmtrace_record.c, shared helpers in
 * shmtrace_common.c).
 *
 *   record  EnableTracing with a TraceConfig (a text-format file and/or
 *           flags), wait for the duration or Ctrl-C (-> DisableTracing),
 *           ReadBuffers into a Perfetto trace file, FreeBuffers. With
 *           --long the buffers are read every --period ms while tracing
 *           (long-trace mode: the file grows, the ring never has to hold
 *           the whole trace). A config with write_into_file = true is
 *           honoured the Perfetto way: the output fd goes with
 *           EnableTracing and the service writes the file itself.
 *   clone   CloneSession (by --session-id or --session-name; default: the
 *           service's choice) into a file, while tracing goes on.
 *   stats   GetTraceStats and QueryServiceState, printed.
 *   query, trigger, and record's trigger/detach/attach options live in
 *           shmtrace_ext.c.
 *
 * Progress (elapsed, bytes, packets, losses) is drawn on stderr once a
 * second only when stderr is a terminal; the one-line loss summary is
 * always printed at the end. Exit codes: see usage().
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli_exit.h"
#include "cli_json.h"
#include "cli_outfile.h"
#include "cli_parse.h"
#include "cli_report.h"
#include "consumer_client.h"
#include "ipc.h"
#include "rec_config.h"
#include "shmtrace_ext.h"
#include "textproto.h"
#include "shmtrace_cmd.h"

static void usage_main(FILE *f)
{
    fprintf(f,
"Usage: shmtrace COMMAND [OPTIONS]\n"
"Record Perfetto-format traces from a shmtraced (or Perfetto traced)\n"
"tracing service.\n"
"\n"
"Commands:\n"
"  record   start a tracing session and write the trace to a file\n"
"  clone    snapshot a running session into a file\n"
"  stats    print the service's trace statistics and state\n"
"  query    print the service's state (producers, data sources, sessions)\n"
"  trigger  activate triggers (trigger_config of running sessions)\n"
"  help     this help; `shmtrace help COMMAND`: that command's help\n"
"\n"
"The consumer socket is --socket PATH, else $PERFETTO_CONSUMER_SOCK_NAME,\n"
"else shmtrace-consumer.sock in your own runtime directory\n"
"($XDG_RUNTIME_DIR, else /tmp/shmtrace-UID) if a daemon of yours is\n"
"there, else the system daemon's " IPC_SYSTEM_SOCK_DIR "/shmtrace-consumer.sock"
"\n(root: always the system one). shmtrace talks only to a daemon running\n"
"as root or as you, and sees only your own sessions (root: everyone's,\n"
"unless the daemon says otherwise).\n"
"\n"
"Output files: -o FILE creates FILE (mode 0600) or replaces an existing\n"
"regular file; anything else there (symlink, directory, device, FIFO,\n"
"socket) is refused and left alone.\n"
"\n"
"  -h, --help       this help\n"
"  -V, --version    print the version\n"
"\n%s", CLI_EXIT_HELP);
}

static void usage_clone(FILE *f)
{
    fprintf(f,
"Usage: shmtrace clone -o FILE [--session-id N | --session-name S]\n"
"Snapshot the buffers of a running session into FILE (CloneSession);\n"
"the session keeps tracing.\n"
"\n"
"  -o, --out FILE          output trace file; required (appears only if\n"
"                          the whole clone was read)\n"
"  -i, --session-id N      session to clone\n"
"  -n, --session-name S    session to clone, by unique_session_name\n"
"                          (default: the service picks)\n"
"  -s, --socket PATH       consumer socket\n"
"  -j, --json              print the summary as JSON on stdout\n"
"  -h, --help              this help\n"
"\n%s", CLI_EXIT_HELP);
}

static void usage_stats(FILE *f)
{
    fprintf(f,
"Usage: shmtrace stats [-s PATH] [--json]\n"
"Print the service's TraceStats (producers, data sources, sessions,\n"
"buffers and their loss counters), then its state as `shmtrace query`\n"
"shows it (version, producers, data sources, your sessions).\n"
"\n"
"  -s, --socket PATH       consumer socket\n"
"  -j, --json              print the TraceStats as one JSON object, with\n"
"                          the state under \"service_state\"\n"
"  -h, --help              this help\n"
"\n%s", CLI_EXIT_HELP);
}

/* ---- clone -------------------------------------------------------- */

static int cmd_clone(int argc, char **argv)
{
    const char *out = NULL, *socket = NULL, *name = NULL;
    uint64_t id = UINT64_MAX;
    static const struct option lopts[] = {
        { "out", required_argument, 0, 'o' },
        { "session-id", required_argument, 0, 'i' },
        { "session-name", required_argument, 0, 'n' },
        { "socket", required_argument, 0, 's' },
        { "json", no_argument, 0, 'j' },
        { "help", no_argument, 0, 'h' },
        { 0, 0, 0, 0 },
    };
    int ch;
    bool json = false;
    optind = 1;
    opterr = 0;
    while ((ch = getopt_long(argc, argv, ":o:i:n:s:jh", lopts, NULL)) != -1) {
        switch (ch) {
        case 'o': out = optarg; break;
        case 'i':
            if (cli_parse_u64(optarg, &id) < 0) {
                shc_bad_value("clone", "--session-id", optarg);
                return EXIT_USAGE;
            }
            break;
        case 'n': name = optarg; break;
        case 's': socket = optarg; break;
        case 'j': json = true; break;
        case 'h': usage_clone(stdout); return 0;
        default:
            cli_bad_option("shmtrace clone", ch, optopt, argv[optind - 1]);
            return EXIT_USAGE;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "shmtrace clone: unexpected argument '%s'\n"
                CLI_TRY_HELP("shmtrace clone"), argv[optind]);
        return EXIT_USAGE;
    }
    if (!out) {
        fprintf(stderr, "shmtrace clone: missing -o FILE (the trace "
                "file to write)\n" CLI_TRY_HELP("shmtrace clone"));
        return EXIT_USAGE;
    }
    if (name && id != UINT64_MAX) {
        fprintf(stderr, "shmtrace clone: give --session-id or "
                "--session-name, not both\n");
        return EXIT_USAGE;
    }
    char err[512];
    cons_out o;
    memset(&o, 0, sizeof o);
    uint64_t t0 = ipc_now_ms();
    bool unreachable = false;
    int rc = cons_clone_to_file(socket, id, name, out, &o, &unreachable, err,
                                sizeof err);
    if (rc < 0) {
        fprintf(stderr, "shmtrace clone: %s; nothing written\n", err);
        cons_out_fini(&o);
        return unreachable ? EXIT_NO_SERVICE : EXIT_FAIL;
    }
    if (json)
        cli_json_summary("clone", out, &o, o.last_stats,
                           ipc_now_ms() - t0, "complete");
    else
        shc_print_summary("cloned", out, &o, o.last_stats,
                      (double)(ipc_now_ms() - t0) / 1000.0);
    cons_out_fini(&o);
    return 0;
}

/* ---- stats -------------------------------------------------------- */

static void print_stats(const Perfetto__Protos__TraceStats *st)
{
    printf("producers_connected      %u\n", st->producers_connected);
    printf("producers_seen           %" PRIu64 "\n", st->producers_seen);
    printf("data_sources_registered  %u\n", st->data_sources_registered);
    printf("data_sources_seen        %" PRIu64 "\n", st->data_sources_seen);
    printf("tracing_sessions         %u\n", st->tracing_sessions);
    printf("total_buffers            %u\n", st->total_buffers);
    printf("chunks_discarded         %" PRIu64 "\n", st->chunks_discarded);
    printf("patches_discarded        %" PRIu64 "\n", st->patches_discarded);
    printf("invalid_packets          %" PRIu64 "\n", st->invalid_packets);
    printf("flushes                  %" PRIu64 " requested, %" PRIu64
           " succeeded, %" PRIu64 " failed\n", st->flushes_requested,
           st->flushes_succeeded, st->flushes_failed);
    if (st->has_shmtrace_writer_stats_left_out)
        printf("writer_stats             %zu writers, %u left out to keep "
               "the reply under one IPC frame (their chunk histograms; "
               "their losses are still counted)\n", st->n_writer_stats,
               st->shmtrace_writer_stats_left_out);
    for (size_t i = 0; i < st->n_buffer_stats; i++) {
        const Perfetto__Protos__TraceStats__BufferStats *b =
            st->buffer_stats[i];
        printf("buffer %zu: size %" PRIu64 ", written %" PRIu64 " bytes in %"
               PRIu64 " chunks, read %" PRIu64 " bytes, overwritten %" PRIu64
               " chunks (%" PRIu64 " bytes), discarded %" PRIu64
               ", abi violations %" PRIu64 ", patches %" PRIu64 " ok / %"
               PRIu64 " failed, producer losses %" PRIu64 "\n",
               i, b->buffer_size, b->bytes_written, b->chunks_written,
               b->bytes_read, b->chunks_overwritten, b->bytes_overwritten,
               b->chunks_discarded, b->abi_violations, b->patches_succeeded,
               b->patches_failed, b->trace_writer_packet_loss);
        if (b->has_shmtrace_seq_cap_chunks)
            printf("buffer %zu: %" PRIu64 " of the discarded chunks (%" PRIu64
                   " packets) were refused because their uid had its bound "
                   "of sequences in the buffer (new writers of a user that "
                   "keeps reconnecting; counted as their writers' discard "
                   "losses)\n", i, b->shmtrace_seq_cap_chunks,
                   b->shmtrace_seq_cap_packets);
    }
}

static int cmd_stats(int argc, char **argv)
{
    const char *socket = NULL;
    bool json = false;
    static const struct option lopts[] = {
        { "socket", required_argument, 0, 's' },
        { "json", no_argument, 0, 'j' },
        { "help", no_argument, 0, 'h' },
        { 0, 0, 0, 0 },
    };
    int ch;
    optind = 1;
    opterr = 0;
    while ((ch = getopt_long(argc, argv, ":s:jh", lopts, NULL)) != -1) {
        switch (ch) {
        case 's': socket = optarg; break;
        case 'j': json = true; break;
        case 'h': usage_stats(stdout); return 0;
        default:
            cli_bad_option("shmtrace stats", ch, optopt, argv[optind - 1]);
            return EXIT_USAGE;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "shmtrace stats: unexpected argument '%s'\n"
                CLI_TRY_HELP("shmtrace stats"), argv[optind]);
        return EXIT_USAGE;
    }
    int rc = 0;
    cons_client *c = cons_connect(socket, &rc);
    if (!c) {
        return shc_connect_error("stats", socket, rc);
    }
    Perfetto__Protos__TraceStats *st = NULL;
    rc = cons_get_stats(c, &st);
    if (rc == -EPROTO) {
        /* Perfetto's traced answers GetTraceStats only for the caller's
         * own session; shmtraced refuses it only when the stats do not
         * fit one reply (its log says so): show what QueryServiceState
         * tells instead. */
        char **names = NULL;
        size_t n = 0;
        fprintf(stderr, "shmtrace stats: the service refused GetTraceStats "
                "(Perfetto's traced gives it only to the consumer that owns "
                "a session, and `perfetto --query` shows its state; "
                "shmtraced, when the stats do not fit in one reply: see "
                "its log)\n");
        if (cons_query_data_sources(c, &names, &n) == 0) {
            printf("data_sources_registered  %zu\n", n);
            for (size_t i = 0; i < n; i++)
                printf("data_source              %s\n", names[i]);
            cons_free_names(names, n);
        }
        cons_destroy(c);
        return EXIT_FAIL;
    }
    if (rc < 0) {
        cons_destroy(c);
        fprintf(stderr, "shmtrace stats: GetTraceStats failed: %s\n",
                strerror(-rc));
        return EXIT_FAIL;
    }
    if (!json)
        print_stats(st);
    /* The service state after it; with --json inside the same object. */
    int xs = shx_stats_extra(c, st, json);
    cons_destroy(c);
    perfetto__protos__trace_stats__free_unpacked(st, NULL);
    return xs;
}

int main(int argc, char **argv)
{
    signal(SIGPIPE, SIG_IGN);
    if (argc < 2) {
        fprintf(stderr, "shmtrace: which command? (record, clone, stats, "
                "query, trigger)\n"
                CLI_TRY_HELP("shmtrace"));
        return EXIT_USAGE;
    }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "help") && argc > 2) {
        /* `shmtrace help COMMAND` is `shmtrace COMMAND --help`. */
        if (!strcmp(argv[2], "record"))
            shc_usage_record(stdout);
        else if (!strcmp(argv[2], "clone"))
            usage_clone(stdout);
        else if (!strcmp(argv[2], "stats"))
            usage_stats(stdout);
        else if (!strcmp(argv[2], "query") || !strcmp(argv[2], "trigger")) {
            char *hv[] = { argv[2], "--help", NULL };
            return !strcmp(argv[2], "query") ? shx_cmd_query(2, hv)
                                             : shx_cmd_trigger(2, hv);
        } else {
            fprintf(stderr, "shmtrace: no command '%s' (commands: record, "
                    "clone, stats, query, trigger)\n" CLI_TRY_HELP("shmtrace"), argv[2]);
            return EXIT_USAGE;
        }
        return 0;
    }
    if (!strcmp(cmd, "-h") || !strcmp(cmd, "--help") || !strcmp(cmd, "help")) {
        usage_main(stdout);
        return 0;
    }
    if (!strcmp(cmd, "--version") || !strcmp(cmd, "-V")) {
        printf("shmtrace %s\n", PACKAGE_VERSION);
        return 0;
    }
    if (!strcmp(cmd, "record"))
        return shc_cmd_record(argc - 1, argv + 1);
    if (!strcmp(cmd, "clone"))
        return cmd_clone(argc - 1, argv + 1);
    if (!strcmp(cmd, "stats"))
        return cmd_stats(argc - 1, argv + 1);
    if (!strcmp(cmd, "query"))
        return shx_cmd_query(argc - 1, argv + 1);
    if (!strcmp(cmd, "trigger"))
        return shx_cmd_trigger(argc - 1, argv + 1);
    fprintf(stderr, "shmtrace: unknown command '%s' (commands: record, "
            "clone, stats, query, trigger)\n" CLI_TRY_HELP("shmtrace"), cmd);
    return EXIT_USAGE;
}
