/*
 * shmtrace.c - `shmtrace`, the consumer command line: record, clone, stats.
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

#define EXIT_FAIL CLI_EXIT_FAIL
#define EXIT_USAGE CLI_EXIT_USAGE
#define EXIT_NO_SERVICE CLI_EXIT_NO_SERVICE

#define DEFAULT_BUFFER_KB (32u * 1024)
#define DEFAULT_DATA_SOURCE "shmtrace.synthetic"
#define DEFAULT_PERIOD_MS 1000u
/* How long to wait for the session's end after DisableTracing (the service
 * waits up to data_source_stop_timeout_ms, default 5 s, plus the final
 * flush). */
#define DISABLE_WAIT_MS 30000u

typedef Perfetto__Protos__TraceConfig TraceConfig;

/* 1 after the first Ctrl-C/SIGTERM (stop, read, write the trace), 2 after
 * the second (stop waiting: keep what is already in the file, if whole,
 * and exit 130). A third one does not wait for anything. */
static volatile sig_atomic_t g_stop;

static void on_signal(int sig)
{
    (void)sig;
    if (g_stop >= 2) {
        cli_outfile_abort_from_signal();
        static const char msg[] = "\nshmtrace: interrupted three times, "
                                  "exiting at once; nothing written\n";
        ssize_t rc = write(STDERR_FILENO, msg, sizeof msg - 1);
        (void)rc;
        _exit(CLI_EXIT_INTERRUPTED);
    }
    g_stop++;
}

static const char *exit_codes_help = CLI_EXIT_HELP;

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
"\n%s", exit_codes_help);
}

static void usage_record(FILE *f)
{
    fprintf(f,
"Usage: shmtrace record -o FILE [OPTIONS]\n"
"Start a tracing session, stop it after --duration (or the config's\n"
"duration_ms, or Ctrl-C) and write the trace to FILE.\n"
"\n"
"  -o, --out FILE          output trace file (Perfetto format), - for\n"
"                          stdout; required\n"
"  -c, --config FILE       a TraceConfig (any that Perfetto accepts), - for\n"
"                          stdin; binary (protobuf) or text format: a file\n"
"                          of printable characters only is read as text.\n"
"                          It reaches the service exactly as given, plus\n"
"                          what the flags below set\n"
"      --txt               the config is text format (as perfetto --txt)\n"
"      --background        detach: print the PID of the process that goes\n"
"                          on tracing in the background, exit 0\n"
"  -b, --buffer-size SIZE  size of buffer 0: NUMBER[k|m|g] (KiB if no\n"
"                          unit; default 32m without -c, 4k to 4095m)\n"
"  -f, --fill-policy P     ring | discard for buffer 0 (default ring)\n"
"  -t, --duration DUR      NUMBER[ms|s|m|h] (seconds if no unit; more\n"
"                          than 0; without -t: until Ctrl-C)\n"
"  -d, --data-source NAME  enable data source NAME (repeatable; default\n"
"                          " DEFAULT_DATA_SOURCE " when neither -d nor -c)\n"
"  -n, --session-name S    unique_session_name (for `shmtrace clone`)\n"
"  -l, --long              long-trace mode: read the buffers every\n"
"                          --period ms into FILE while tracing\n"
"  -p, --period MS         read period in long-trace mode (default the\n"
"                          config's file_write_period_ms, else 1000)\n"
"  -s, --socket PATH       consumer socket\n"
"  -q, --quiet             no progress display\n"
"  -j, --json              print the summary as one JSON object on\n"
"                          stdout (with the service's TraceStats)\n"
"  -h, --help              this help\n"
"\n"
"%s"
"Config file example:\n"
"  buffers { size_kb: 65536 fill_policy: RING_BUFFER }\n"
"  data_sources { config { name: \"shmtrace.synthetic\" target_buffer: 0 } }\n"
"  duration_ms: 10000\n"
"With write_into_file: true the service writes the trace itself, into\n"
"FILE, which shmtrace opens with your rights and passes to it; a config's\n"
"output_path is ignored (the service does not create files for users).\n"
"A data source that no producer has registered is warned about, with\n"
"the list of those registered.\n"
"\n"
"Progress (elapsed and remaining time, bytes, packets, losses) is shown\n"
"on a terminal; a one-line loss summary is printed at the end. FILE\n"
"appears only when the run succeeds: it is written as FILE.partial.XXXXXX\n"
"and renamed at the end, so a failed run leaves no file behind and an\n"
"older FILE intact. Ctrl-C (or SIGTERM) stops the session and still\n"
"writes the trace; a second Ctrl-C stops waiting (exit 130): with --long\n"
"or write_into_file FILE keeps the whole packets already in it, else\n"
"nothing is written. If the service ends the session early (shmtraced\n"
"stopped or killed), FILE keeps what was read, the message says so, and\n"
"the exit status is 1 (not when a trigger ended it).\n"
"\n%s", shx_record_help, exit_codes_help);
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
"\n%s", exit_codes_help);
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
"\n%s", exit_codes_help);
}

static void bad_value(const char *cmd, const char *opt, const char *val)
{
    fprintf(stderr, "shmtrace %s: invalid value '%s' for %s\nTry 'shmtrace "
            "%s --help' for more information.\n", cmd, val, opt, cmd);
}

/* 1234567 -> "1,234,567" into out (>= 32 bytes). */
static const char *thousands(uint64_t v, char *out)
{
    char tmp[32];
    int n = snprintf(tmp, sizeof(tmp), "%" PRIu64, v), o = 0;
    for (int i = 0; i < n; i++) {
        if (i > 0 && (n - i) % 3 == 0)
            out[o++] = ',';
        out[o++] = tmp[i];
    }
    out[o] = '\0';
    return out;
}

/* The exact loss, in one line a person understands, from the stats'
 * shmtrace_sequence_loss (protos/common.proto), and what to change. */
static void print_loss_line(const Perfetto__Protos__TraceStats *st)
{
    static const struct { const char *cause, *text, *advice; } names[] = {
        {"overwrite", "overwritten in the ring before they were read",
         "a bigger buffer (-b), or reading it while tracing and more often "
         "(--long -p MS, a shorter period)"},
        {"discard", "refused by the full DISCARD buffer",
         "a bigger buffer (-b) or a ring buffer (-f ring)"},
        {"producer_smb_full", "dropped in the producer (shared memory full)",
         "a bigger shared memory buffer for the producer or the stall "
         "policy"},
        {"producer_gone", "lost with a producer that went away", NULL},
        {"reassembly", "left incomplete (a fragment never arrived)", NULL},
        {"abi_violation", "in malformed chunks", NULL},
        {"corrupted", "in corrupted chunks", NULL},
        {"patch_failed", "waiting for a patch that failed", NULL},
        {"invalid", "refused by the service as invalid", NULL},
    };
    enum { NC = sizeof(names) / sizeof(*names) };
    uint64_t by[NC] = {0}, lost = 0, delivered = 0, unknown = 0;
    if (!st || st->n_shmtrace_sequence_loss == 0)
        return;
    for (size_t i = 0; i < st->n_shmtrace_sequence_loss; i++) {
        const Perfetto__Protos__TraceStats__ShmtraceSequenceLoss *l =
            st->shmtrace_sequence_loss[i];
        uint64_t invalid = 0;
        for (size_t c = 0; c < l->n_causes; c++) {
            const char *name = l->causes[c]->cause ? l->causes[c]->cause : "";
            for (size_t k = 0; k < NC; k++)
                if (strcmp(name, names[k].cause) == 0)
                    by[k] += l->causes[c]->packets;
            if (strcmp(name, "invalid") == 0)
                invalid += l->causes[c]->packets;
        }
        lost += l->lost_packets;
        delivered += l->packets_read > invalid ? l->packets_read - invalid
                                               : 0;
        unknown += !l->producer_counts_known;
    }
    char a[32], b[32], c[32];
    if (lost == 0) {
        fprintf(stderr, "shmtrace: no packet lost: all %s packets of %zu "
                "writer(s) are in the trace%s\n", thousands(delivered, a),
                st->n_shmtrace_sequence_loss,
                unknown ? " (drops inside non-libshm producers cannot be "
                          "counted)" : "");
        return;
    }
    uint64_t total = delivered + lost;
    fprintf(stderr, "shmtrace: lost %s of %s packets (%.1f%%):",
            thousands(lost, a), thousands(total, b),
            100.0 * (double)lost / (double)(total ? total : 1));
    const char *sep = " ";
    for (size_t k = 0; k < NC; k++) {
        if (!by[k])
            continue;
        fprintf(stderr, "%s%s %s", sep, thousands(by[k], c), names[k].text);
        sep = ", ";
    }
    if (unknown)
        fprintf(stderr, "; drops inside %s non-libshm writer(s) cannot be "
                "counted", thousands(unknown, c));
    fputc('\n', stderr);
    sep = "shmtrace: to lose less: ";
    for (size_t k = 0; k < NC; k++) {
        if (!by[k] || !names[k].advice)
            continue;
        fprintf(stderr, "%s%s", sep, names[k].advice);
        sep = "; ";
    }
    if (strcmp(sep, "; ") == 0)
        fputc('\n', stderr);
}

static void print_summary(const char *what, const char *path,
                          const cons_out *o, const Perfetto__Protos__TraceStats *st,
                          double secs)
{
    cons_losses l;
    cons_losses_from_stats(st, &l);
    fprintf(stderr,
            "shmtrace: %s %" PRIu64 " packets (%.1f MB) to %s%s%.1f s; "
            "losses: %" PRIu64 " packets flagged previous_packet_dropped, %"
            PRIu64 " chunks overwritten, %" PRIu64 " chunks discarded, %"
            PRIu64 " abi violations, %" PRIu64 " chunks cut by a writer "
            "(SMB full)%s\n",
            what, o->packets, (double)o->bytes / 1e6, path,
            secs >= 0 ? " in " : "", secs >= 0 ? secs : 0.0,
            o->flagged_packets, l.chunks_overwritten, l.chunks_discarded,
            l.abi_violations, l.trace_writer_packet_loss,
            st ? "" : " (no trace stats available)");
    print_loss_line(st);
}

/* A failed cons_connect, worded for the user (-EPERM: a daemon of
 * another user holds the socket name, ipc_sock_describe_error). */
static void connect_error(const char *cmd, const char *socket, int rc)
{
    char path[108] = "", msg[512];
    ipc_sock_path(IPC_SOCK_CONSUMER, socket, path, sizeof path);
    if (rc == -EPERM) {
        ipc_sock_describe_error(path, rc, msg, sizeof msg);
        fprintf(stderr, "shmtrace %s: %s\n", cmd, msg);
    } else {
        fprintf(stderr, "shmtrace %s: " CONS_NO_SERVICE_FMT "\n", cmd, path,
                strerror(-rc));
    }
}

/* ---- record ------------------------------------------------------- */

typedef struct rec_opts {
    const char *out, *config, *socket, *session_name;
    uint32_t buffer_kb;
    int fill_policy;       /* -1 unset */
    uint32_t duration_ms;
    bool has_duration;
    const char **data_sources;
    size_t n_data_sources;
    bool long_mode, quiet, json, txt, background;
    uint32_t period_ms;
    shx_rec_opts x;        /* triggers, detach/attach: shmtrace_ext.c */
} rec_opts;

/* Apply flags to cfg (allocating with malloc, as the parser does): only
 * what a flag asks for, nothing else (the config reaches the service as
 * given). *modified tells whether anything changed. Without a config file
 * there is a default buffer and data source. */
static int apply_flags(TraceConfig *cfg, const rec_opts *ro, bool *modified)
{
    bool no_config = ro->config == NULL;
    if (cfg->n_buffers == 0 &&
        (no_config || ro->buffer_kb || ro->fill_policy >= 0)) {
        cfg->buffers = calloc(1, sizeof *cfg->buffers);
        Perfetto__Protos__TraceConfig__BufferConfig *b =
            calloc(1, sizeof *b);
        if (!cfg->buffers || !b) {
            free(b);
            return -ENOMEM;
        }
        perfetto__protos__trace_config__buffer_config__init(b);
        b->has_size_kb = true;
        b->size_kb = DEFAULT_BUFFER_KB;
        cfg->buffers[0] = b;
        cfg->n_buffers = 1;
        *modified = true;
    }
    if (ro->buffer_kb) {
        cfg->buffers[0]->has_size_kb = true;
        cfg->buffers[0]->size_kb = ro->buffer_kb;
        *modified = true;
    }
    if (ro->fill_policy >= 0) {
        cfg->buffers[0]->has_fill_policy = true;
        cfg->buffers[0]->fill_policy = ro->fill_policy;
        *modified = true;
    }
    if (ro->has_duration) {
        cfg->has_duration_ms = true;
        cfg->duration_ms = ro->duration_ms;
        *modified = true;
    }
    if (ro->session_name) {
        *modified = true;
        free(cfg->unique_session_name);
        cfg->unique_session_name = strdup(ro->session_name);
        if (!cfg->unique_session_name)
            return -ENOMEM;
    }
    size_t nds = ro->n_data_sources;
    const char *deflt = DEFAULT_DATA_SOURCE;
    const char **names = ro->data_sources;
    if (nds == 0 && no_config && cfg->n_data_sources == 0) {
        nds = 1;
        names = &deflt;
    }
    if (nds)
        *modified = true;
    for (size_t i = 0; i < nds; i++) {
        Perfetto__Protos__TraceConfig__DataSource **a = realloc(
            cfg->data_sources, (cfg->n_data_sources + 1) * sizeof *a);
        if (!a)
            return -ENOMEM;
        cfg->data_sources = a;
        Perfetto__Protos__TraceConfig__DataSource *ds = calloc(1, sizeof *ds);
        Perfetto__Protos__DataSourceConfig *dc = calloc(1, sizeof *dc);
        char *name = strdup(names[i]);
        if (!ds || !dc || !name) {
            free(ds);
            free(dc);
            free(name);
            return -ENOMEM;
        }
        perfetto__protos__trace_config__data_source__init(ds);
        perfetto__protos__data_source_config__init(dc);
        dc->name = name;
        dc->has_target_buffer = true;
        dc->target_buffer = 0;
        ds->config = dc;
        cfg->data_sources[cfg->n_data_sources++] = ds;
    }
    return 0;
}

/* ReadBuffers callback of --long: a second Ctrl-C stops writing. */
static int rec_packet(const uint8_t *packet, size_t len, void *out)
{
    if (g_stop >= 2)
        return -ECANCELED;
    return cons_out_packet(packet, len, out);
}

static int cmd_record(int argc, char **argv)
{
    rec_opts ro;
    memset(&ro, 0, sizeof ro);
    ro.fill_policy = -1;
    static const struct option lopts[] = {
        { "out", required_argument, 0, 'o' },
        { "config", required_argument, 0, 'c' },
        { "buffer-size", required_argument, 0, 'b' },
        { "fill-policy", required_argument, 0, 'f' },
        { "duration", required_argument, 0, 't' },
        { "data-source", required_argument, 0, 'd' },
        { "session-name", required_argument, 0, 'n' },
        { "long", no_argument, 0, 'l' },
        { "period", required_argument, 0, 'p' },
        { "socket", required_argument, 0, 's' },
        { "quiet", no_argument, 0, 'q' },
        { "txt", no_argument, 0, 'T' },
        { "background", no_argument, 0, 'B' },
        { "json", no_argument, 0, 'j' },
        { "help", no_argument, 0, 'h' },
        SHX_RECORD_LONG_OPTIONS,
        { 0, 0, 0, 0 },
    };
    const char *ds_list[64];
    char why[128];
    int ch;
    uint64_t v;
    optind = 1;
    opterr = 0;
    while ((ch = getopt_long(argc, argv, ":o:c:b:f:t:d:n:lp:s:qjh", lopts,
                             NULL)) != -1) {
        switch (ch) {
        case 'o': ro.out = optarg; break;
        case 'c': ro.config = optarg; break;
        case 'b':
            if (cli_parse_buffer_kb(optarg, &ro.buffer_kb, why,
                                    sizeof why) < 0) {
                fprintf(stderr, "shmtrace record: --buffer-size '%s' %s\n"
                        CLI_TRY_HELP("shmtrace record"), optarg, why);
                return EXIT_USAGE;
            }
            break;
        case 'f':
            if (!strcmp(optarg, "ring"))
                ro.fill_policy = 1;
            else if (!strcmp(optarg, "discard"))
                ro.fill_policy = 2;
            else {
                bad_value("record", "--fill-policy", optarg);
                return EXIT_USAGE;
            }
            break;
        case 't':
            if (cli_parse_duration_ms(optarg, &ro.duration_ms) < 0) {
                bad_value("record", "--duration", optarg);
                return EXIT_USAGE;
            }
            if (ro.duration_ms == 0) {
                fprintf(stderr, "shmtrace record: --duration '%s' is 0: give "
                        "a duration above 0, or no -t to record until "
                        "Ctrl-C\n", optarg);
                return EXIT_USAGE;
            }
            ro.has_duration = true;
            break;
        case 'd':
            if (ro.n_data_sources == 64 || !*optarg) {
                bad_value("record", "--data-source", optarg);
                return EXIT_USAGE;
            }
            ds_list[ro.n_data_sources++] = optarg;
            break;
        case 'n': ro.session_name = optarg; break;
        case 'l': ro.long_mode = true; break;
        case 'p':
            if (cli_parse_u64(optarg, &v) < 0 || v == 0 || v > 3600000) {
                bad_value("record", "--period", optarg);
                return EXIT_USAGE;
            }
            ro.period_ms = (uint32_t)v;
            break;
        case 's': ro.socket = optarg; break;
        case 'q': ro.quiet = true; break;
        case 'T': ro.txt = true; break;
        case 'B': ro.background = true; break;
        case 'j': ro.json = true; break;
        case 'h': usage_record(stdout); return 0;
        default:
            if (ch >= SHX_OPT_BASE) {
                if (shx_record_option(&ro.x, ch, optarg) > 0)
                    break;
                return EXIT_USAGE;
            }
            cli_bad_option("shmtrace record", ch, optopt, argv[optind - 1]);
            return EXIT_USAGE;
        }
    }
    ro.data_sources = ds_list;
    if (optind == argc) {
        int done = 0, xs = shx_record_early(&ro.x, ro.socket, ro.quiet,
                                            &done);
        if (done)
            return xs;
    }
    if (optind < argc) {
        fprintf(stderr, "shmtrace record: unexpected argument '%s'\n"
                CLI_TRY_HELP("shmtrace record"), argv[optind]);
        return EXIT_USAGE;
    }
    if (!ro.out) {
        fprintf(stderr, "shmtrace record: missing -o FILE (the trace "
                "file to write)\n" CLI_TRY_HELP("shmtrace record"));
        return EXIT_USAGE;
    }
    if (ro.json && strcmp(ro.out, "-") == 0) {
        fprintf(stderr, "shmtrace record: --json and -o - both want "
                "stdout: write the trace to a file\n");
        return EXIT_USAGE;
    }
    if (ro.background && !strcmp(ro.out, "-")) {
        fprintf(stderr, "shmtrace record: --background cannot write the "
                "trace to stdout (-o -); give a file\n");
        return EXIT_USAGE;
    }
    if (ro.txt && !ro.config) {
        fprintf(stderr, "shmtrace record: --txt needs -c CONFIG\n");
        return EXIT_USAGE;
    }
    /* Build the config: the one given, plus what the flags set. */
    rcfg rcf;
    char cerr[512];
    if (ro.config ? rcfg_load(&rcf, ro.config, ro.txt, cerr, sizeof cerr) < 0
                  : rcfg_empty(&rcf) < 0) {
        fprintf(stderr, "shmtrace record: %s\n",
                ro.config ? cerr : "out of memory");
        return EXIT_USAGE;
    }
    TraceConfig *cfg = rcf.cfg;
    int status = EXIT_FAIL;
    cli_outfile of = { ro.out, NULL, -1 };
    cons_client *c = NULL;
    cons_out o;
    memset(&o, 0, sizeof o);
    uint8_t *cfg_bytes = NULL;
    size_t cfg_len = 0;
    char err[512];
    if (apply_flags(cfg, &ro, &rcf.modified) < 0) {
        fprintf(stderr, "shmtrace record: out of memory\n");
        goto out;
    }
    bool xmod = false;       /* the config changed (triggers, --detach) */
    if (shx_apply_record_opts(cfg, &ro.x, &xmod, err, sizeof err) < 0) {
        fprintf(stderr, "shmtrace record: %s\n", err);
        goto out;
    }
    /* write_into_file: we open -o FILE with the user's rights and pass
     * the fd (Perfetto's way); the service never opens a path for us. */
    bool service_writes = cfg->write_into_file;
    if (cfg->write_into_file && cfg->output_path && cfg->output_path[0]) {
        fprintf(stderr, "shmtrace record: ignoring the config's output_path "
                "%s: the trace goes to -o %s, which shmtrace opens and "
                "hands to the service\n", cfg->output_path, ro.out);
    }
    if (cfg->output_path) {
        free(cfg->output_path);
        cfg->output_path = NULL;
        rcf.modified = true;
    }
    /* -o - onto a pipe or a terminal: the service takes only regular files
     * (a reader that stalls would stall it for every user), so we read the
     * buffers over IPC every period instead and write them out ourselves. */
    struct stat ost;
    if (service_writes && strcmp(ro.out, "-") == 0 &&
        (fstat(STDOUT_FILENO, &ost) < 0 || !S_ISREG(ost.st_mode))) {
        service_writes = false;
        cfg->has_write_into_file = false;
        cfg->write_into_file = false;
        ro.long_mode = true;
        rcf.modified = true;
    }
    /* The bytes to send: the config as given, re-encoded only if a flag
     * (ours or the trigger/detach ones) or the rules above changed it. */
    rcf.modified |= xmod;
    if (rcfg_final(&rcf, &cfg_bytes, &cfg_len) < 0) {
        fprintf(stderr, "shmtrace record: out of memory\n");
        goto out;
    }
    bool clone_mode = shx_is_clone_snapshot(cfg);
    unsigned snapshots = 0;
    uint32_t period = ro.period_ms ? ro.period_ms
                      : cfg->file_write_period_ms ? cfg->file_write_period_ms
                                                  : DEFAULT_PERIOD_MS;
    /* FILE.partial.XXXXXX, renamed to FILE when kept (O_RDWR: with
     * write_into_file we read back what the service wrote). First, so a
     * bad -o fails before anything starts. */
    int rc = cli_outfile_open(&of, ro.out, err, sizeof err);
    if (rc < 0) {
        fprintf(stderr, "shmtrace record: %s; nothing written\n", err);
        goto out;
    }
    /* --background: after the output is open (a relative path stays
     * right), before connecting. */
    if (ro.background && rcfg_daemonize() < 0)
        goto out;
    c = cons_connect(ro.socket, &rc);
    if (!c) {
        connect_error("record", ro.socket, rc);
        status = EXIT_NO_SERVICE;
        goto out;
    }
    rcfg_warn_unknown_data_sources(c, cfg);
    if (cons_out_init(&o, of.fd) < 0)
        goto out;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    rc = cons_enable_raw(c, cfg_bytes, cfg_len, service_writes ? of.fd : -1);
    if (rc < 0) {
        fprintf(stderr, "shmtrace record: EnableTracing failed: %s\n",
                strerror(-rc));
        goto out;
    }
    if (ro.x.detach_key) {
        /* A refused config answers EnableTracing at once: wait for that
         * (or any other reply) before detaching. FILE gets its name now:
         * the service goes on writing it after we exit. */
        cons_poll(c, 200);
        const char *e = NULL;
        if (cons_ended(c, &e)) {
            fprintf(stderr, "shmtrace record: the service refused the "
                    "session: %s\n", e ? e : "no reason given");
            goto out;
        }
        if (cli_outfile_commit(&of, err, sizeof err) < 0) {
            fprintf(stderr, "shmtrace record: %s\n", err);
            goto out;
        }
        status = shx_detach(c, ro.x.detach_key, ro.out);
        goto out;
    }
    if (clone_mode && (rc = cons_observe(c)) < 0) {
        fprintf(stderr, "shmtrace record: ObserveEvents failed: %s\n",
                strerror(-rc));
        goto out;
    }
    cli_progress pg = { !ro.quiet && isatty(STDERR_FILENO), ipc_now_ms(), 0,
                    cfg->has_duration_ms ? cfg->duration_ms : 0,
                    ro.long_mode && !service_writes,
                    service_writes ? of.fd : -1 };
    uint64_t next_read = ipc_now_ms() + period;
    bool disabled = false;
    uint64_t disable_deadline = 0;
    const char *end_err = NULL;
    while (!cons_ended(c, &end_err) && g_stop < 2) {
        if (disabled && ipc_now_ms() > disable_deadline) {
            fprintf(stderr, "shmtrace record: the service did not end the "
                    "session within %u s of DisableTracing; reading what "
                    "it has\n", DISABLE_WAIT_MS / 1000);
            break;
        }
        if (g_stop && !disabled) {
            disabled = true;
            disable_deadline = ipc_now_ms() + DISABLE_WAIT_MS;
            if (pg.enabled)
                fputc('\n', stderr);
            fprintf(stderr, "shmtrace record: stopping: final flush, then "
                    "reading the buffers into %s (Ctrl-C again to stop "
                    "waiting%s)\n", ro.out, ro.long_mode || service_writes
                    ? " and keep the whole packets already in it"
                    : "; nothing is written then");
            rc = cons_disable(c);
            if (rc < 0 && rc != -ENOTCONN)
                fprintf(stderr, "shmtrace record: DisableTracing failed: "
                        "%s\n", strerror(-rc));
            continue;
        }
        cons_poll(c, 100);
        if (clone_mode)
            shx_snapshots(c, ro.socket, ro.out, &snapshots);
        if (ro.long_mode && !service_writes && ipc_now_ms() >= next_read) {
            rc = cons_read(c, rec_packet, &o);
            if (rc == 0)
                rc = cons_out_flush(&o);
            if (rc == -ECANCELED)
                break; /* interrupted twice */
            if (rc < 0 && rc != -ENOTCONN) {
                fprintf(stderr, "shmtrace record: reading buffers into %s "
                        "failed: %s\n", ro.out, strerror(-rc));
                goto fail_nothing;
            }
            next_read = ipc_now_ms() + period;
        }
        if (!cons_ended(c, NULL))
            cli_progress_draw(&pg, c, &o, false);
    }
    uint64_t elapsed_ms = ipc_now_ms() - pg.start_ms;
    if (clone_mode) {
        shx_snapshots(c, ro.socket, ro.out, &snapshots);
        fprintf(stderr, "shmtrace record: %u snapshot(s) written as %s.N; a "
                "CLONE_SNAPSHOT session returns no data of its own\n",
                snapshots, ro.out);
    }
    if (g_stop >= 2) {
        cli_progress_draw(&pg, c, &o, true);
        status = CLI_EXIT_INTERRUPTED;
        cli_keep_partial(&of, &o, ro.long_mode || service_writes, ro.json,
                     "interrupted twice", elapsed_ms, service_writes);
        goto out;
    }
    if (end_err) {
        cli_progress_draw(&pg, c, &o, true);
        if (strstr(end_err, "lost")) {
            fprintf(stderr, "shmtrace record: the connection to the tracing "
                    "service at %s was lost after %.1f s (shmtraced stopped "
                    "or killed?)\n", cons_socket_path(c),
                    (double)elapsed_ms / 1000.0);
            cli_keep_partial(&of, &o, ro.long_mode || service_writes, ro.json,
                         "connection lost", elapsed_ms, service_writes);
            goto out;
        }
        fprintf(stderr, "shmtrace record: the tracing session ended with an "
                "error: %s\n", end_err);
        /* A config the service rejected: nothing to read. */
        if (o.packets == 0)
            goto fail_nothing;
    }
    /* Ended by the service, not by us, before the duration asked for (or,
     * with no duration, at all): say so, keep the trace, exit 1. A
     * max_file_size_bytes limit ends sessions early by design. */
    bool cut_short = !disabled && !end_err &&
                     !(cfg->has_max_file_size_bytes &&
                       cfg->max_file_size_bytes) &&
                     !cfg->trigger_config &&   /* triggers end it early */
                     (pg.duration_ms == 0 ||
                      elapsed_ms + 100 < pg.duration_ms);
    if (!service_writes) {
        rc = cons_read(c, cons_out_packet, &o);
        if (rc == 0)
            rc = cons_out_flush(&o);
        if (rc < 0) {
            fprintf(stderr, "shmtrace record: reading buffers into %s "
                    "failed: %s\n", ro.out, strerror(-rc));
            if (rc == -ENOTCONN && o.packets) {
                cli_keep_partial(&of, &o, true, ro.json, "connection lost",
                             elapsed_ms, false);
                goto out;
            }
            goto fail_nothing;
        }
    }
    Perfetto__Protos__TraceStats *st = o.last_stats;
    Perfetto__Protos__TraceStats *fetched = NULL;
    if (!st && cons_get_stats(c, &fetched) == 0)
        st = fetched;
    cons_free_buffers(c);
    struct stat fst;
    if (service_writes && fstat(of.fd, &fst) == 0 && S_ISREG(fst.st_mode)) {
        /* The service wrote the file: count what is in it (a pipe or
         * terminal cannot be read back). */
        rc = cons_out_scan_fd(&o, of.fd);
        if (rc < 0)
            fprintf(stderr, "shmtrace record: %s: %s\n", ro.out,
                    rc == -EBADMSG ? "not a well-formed trace file"
                                   : strerror(-rc));
        if (!st)
            st = o.last_stats;
    }
    cli_progress_draw(&pg, c, &o, true);
    rc = cli_outfile_commit(&of, err, sizeof err);
    if (rc < 0) {
        fprintf(stderr, "shmtrace record: %s (nothing written)\n", err);
        perfetto__protos__trace_stats__free_unpacked(fetched, NULL);
        goto out;
    }
    status = 0;
    if (cfg->trigger_config && o.packets == 0) {
        /* Withheld by the service, as Perfetto's: a CLONE_SNAPSHOT session
         * (its snapshots hold the data) or no trigger came in time. Its
         * stats would read as total loss: not shown. */
        if (!clone_mode)
            fprintf(stderr, "shmtrace record: no trigger arrived within "
                    "trigger_timeout_ms: the session returns no data (%s "
                    "is empty)\n", ro.out);
        if (ro.json)
            cli_json_summary("record", ro.out, &o, NULL, elapsed_ms,
                             clone_mode ? "snapshots" : "no_trigger");
        perfetto__protos__trace_stats__free_unpacked(fetched, NULL);
        goto out;
    }
    if (ro.json)
        cli_json_summary("record", ro.out, &o, st, elapsed_ms,
                           cut_short ? "cut_short" : "complete");
    else
        print_summary("wrote", ro.out, &o, st, (double)elapsed_ms / 1000.0);
    if (cut_short) {
        char want[64] = "";
        if (pg.duration_ms)
            snprintf(want, sizeof want, ", before the %.1f s asked for",
                     (double)pg.duration_ms / 1000.0);
        fprintf(stderr, "shmtrace record: the service ended the session "
                "after %.1f s%s (shmtraced stopped? see its log); %s holds "
                "everything recorded until then\n",
                (double)elapsed_ms / 1000.0, want, ro.out);
        status = EXIT_FAIL;
    }
    perfetto__protos__trace_stats__free_unpacked(fetched, NULL);
    goto out;
fail_nothing:
    cli_progress_draw(&pg, c, &o, true);
    fprintf(stderr, "shmtrace record: nothing written (%s not created)\n",
            ro.out);
out:
    cli_outfile_abort(&of); /* no-op once committed */
    cons_out_fini(&o);
    cons_destroy(c);
    free(cfg_bytes);
    rcfg_free(&rcf);
    return status;
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
                bad_value("clone", "--session-id", optarg);
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
    int rc = cons_clone_to_file(socket, id, name, out, &o, err, sizeof err);
    if (rc < 0) {
        fprintf(stderr, "shmtrace clone: %s; nothing written\n", err);
        cons_out_fini(&o);
        return strstr(err, "cannot connect") ||
               strstr(err, "refusing to use it") ? EXIT_NO_SERVICE
                                                 : EXIT_FAIL;
    }
    if (json)
        cli_json_summary("clone", out, &o, o.last_stats,
                           ipc_now_ms() - t0, "complete");
    else
        print_summary("cloned", out, &o, o.last_stats,
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
        connect_error("stats", socket, rc);
        return EXIT_NO_SERVICE;
    }
    Perfetto__Protos__TraceStats *st = NULL;
    rc = cons_get_stats(c, &st);
    if (rc == -EPROTO) {
        /* Perfetto's traced answers GetTraceStats only for the caller's
         * own session: show what QueryServiceState tells instead. */
        char **names = NULL;
        size_t n = 0;
        fprintf(stderr, "shmtrace stats: the service refused GetTraceStats "
                "(Perfetto's traced gives it only to the consumer that owns "
                "a session; `perfetto --query` shows its state)\n");
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
            usage_record(stdout);
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
        return cmd_record(argc - 1, argv + 1);
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
