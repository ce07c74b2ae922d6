/*
 * shmtrace_record.c - `shmtrace record`: EnableTracing with a TraceConfig
 * (a text or binary file, stdin, and/or flags; sent as given plus only
 * what the flags add), wait for the duration or Ctrl-C (-> DisableTracing),
 * ReadBuffers into a Perfetto trace file, FreeBuffers. With --long the
 * buffers are read every --period ms while tracing (long-trace mode). A
 * config with write_into_file = true is honoured the Perfetto way: we open
 * the output and pass its fd with EnableTracing, and the service writes
 * the file itself. The output is written whole or not at all
 * (cli_outfile); trigger/detach/attach options come from shmtrace_ext.c.
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

void shc_usage_record(FILE *f)
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
"the exit status is 1 (not when a trigger ended it). So with\n"
"write_into_file when the service cannot write FILE whole (a full file\n"
"system, its file size limit): the session ends there, the error says\n"
"why, and FILE keeps the whole packets written until then.\n"
"\n%s", shx_record_help, CLI_EXIT_HELP);
}

/* ---- record ------------------------------------------------------- */

/* Does the service count what it writes into the file itself
 * (TraceStats.shmtrace_file, shmtraced)? Then the file need not be
 * followed while it grows. */
static bool service_counts_file(cons_client *c)
{
    Perfetto__Protos__TraceStats *st = NULL;
    bool yes = cons_get_stats(c, &st) == 0 && st->shmtrace_file != NULL;
    perfetto__protos__trace_stats__free_unpacked(st, NULL);
    return yes;
}

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
    if (shc_stop >= 2)
        return -ECANCELED;
    return cons_out_packet(packet, len, out);
}

int shc_cmd_record(int argc, char **argv)
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
                shc_bad_value("record", "--fill-policy", optarg);
                return EXIT_USAGE;
            }
            break;
        case 't':
            if (cli_parse_duration_ms(optarg, &ro.duration_ms) < 0) {
                shc_bad_value("record", "--duration", optarg);
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
                shc_bad_value("record", "--data-source", optarg);
                return EXIT_USAGE;
            }
            ds_list[ro.n_data_sources++] = optarg;
            break;
        case 'n': ro.session_name = optarg; break;
        case 'l': ro.long_mode = true; break;
        case 'p':
            if (cli_parse_u64(optarg, &v) < 0 || v == 0 || v > 3600000) {
                shc_bad_value("record", "--period", optarg);
                return EXIT_USAGE;
            }
            ro.period_ms = (uint32_t)v;
            break;
        case 's': ro.socket = optarg; break;
        case 'q': ro.quiet = true; break;
        case 'T': ro.txt = true; break;
        case 'B': ro.background = true; break;
        case 'j': ro.json = true; break;
        case 'h': shc_usage_record(stdout); return 0;
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
        status = shc_connect_error("record", ro.socket, rc);
        goto out;
    }
    rcfg_warn_unknown_data_sources(c, cfg);
    if (cons_out_init(&o, of.fd) < 0)
        goto out;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = shc_on_signal;
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
    /* The service writes the file: count its records as they come, so
     * that the count at the end has only the last period's bytes left.
     * Following more often (every 10 ms while the file grew by 1 MiB or
     * more) was tried on 2026-12-06: the wait from SIGTERM to our exit
     * went from 18-19 to 3-5 ms in 256 MB recordings of 1 KiB packets,
     * but the recording itself took as much longer (the scan then runs
     * while the producer and the service want both CPUs): 87-105 ms in
     * all against 92-97. Not kept.
     * A service that counts the file itself (service_counts_file, asked
     * at the first period) is not followed at all: the progress line
     * shows its count (cli_progress_draw), and its count is taken at the
     * end (cons_out_take_file_counts). */
    bool follow = service_writes, probed = false;
    bool disabled = false;
    uint64_t disable_deadline = 0;
    const char *end_err = NULL;
    while (!cons_ended(c, &end_err) && shc_stop < 2) {
        if (disabled && ipc_now_ms() > disable_deadline) {
            fprintf(stderr, "shmtrace record: the service did not end the "
                    "session within %u s of DisableTracing; reading what "
                    "it has\n", DISABLE_WAIT_MS / 1000);
            break;
        }
        if (shc_stop && !disabled) {
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
        if (follow && ipc_now_ms() >= next_read) {
            if (!probed) {
                probed = true;
                follow = !service_counts_file(c);
            }
            /* an error is the final count's to report, from where it is */
            if (follow)
                follow = cons_out_scan_follow(&o, of.fd) == 0;
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
    if (shc_stop >= 2) {
        cli_progress_draw(&pg, c, &o, true);
        status = CLI_EXIT_INTERRUPTED;
        cli_keep_partial(&of, &o, ro.long_mode || service_writes, ro.json,
                     "interrupted twice", elapsed_ms, service_writes);
        goto out;
    }
    if (end_err) {
        cli_progress_draw(&pg, c, &o, true);
        if (cons_ended_by_disconnect(c)) {
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
        /* The service wrote the file until the error (one it could not
         * write whole: a full disk, its file size limit): keep the whole
         * packets in it, as when the connection is lost; a config it
         * rejected left nothing, and nothing is kept. */
        if (service_writes) {
            cli_keep_partial(&of, &o, true, ro.json,
                             "the session ended with an error", elapsed_ms,
                             true);
            goto out;
        }
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
    /* The service's stats, unless the packets we read carried some. (The
     * file the service wrote is scanned below, which replaces
     * o.last_stats: not taken from it here.) */
    Perfetto__Protos__TraceStats *st = service_writes ? NULL : o.last_stats;
    Perfetto__Protos__TraceStats *fetched = NULL;
    if (!st && cons_get_stats(c, &fetched) == 0)
        st = fetched;
    cons_free_buffers(c);
    struct stat fst;
    if (service_writes && fstat(of.fd, &fst) == 0 && S_ISREG(fst.st_mode) &&
        !cons_out_take_file_counts(&o, st, (uint64_t)fst.st_size)) {
        /* The service wrote the file and did not count it: count what is
         * in it (a pipe or terminal cannot be read back). */
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
        shc_print_summary("wrote", ro.out, &o, st, (double)elapsed_ms / 1000.0);
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
