/*
 * shmtrace_ext.c - `shmtrace` for issue 12 (see shmtrace_ext.h):
 *   record --trigger NAME [--trigger-mode start|stop|clone]
 *          [--trigger-timeout DUR] [--stop-delay DUR]
 *                          a trigger_config built from flags; with clone,
 *                          every trigger hit (ObserveEvents) is cloned into
 *                          OUT.0, OUT.1, ... while the session goes on,
 *                          as Perfetto's `perfetto` does;
 *   record --detach KEY    the service writes OUT itself (write_into_file
 *                          with our fd) and the session outlives us;
 *   record --attach KEY [--stop], --is-detached KEY;
 *   trigger NAME...        ActivateTriggers on the producer socket;
 *   query [--json]         QueryServiceState: producers, data sources,
 *                          sessions (the caller's only), version;
 *   stats [--json]         also prints the service state.
 * JSON comes from cli_json_message, so every field of TraceStats /
 * TracingServiceState is there by its .proto name.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli_exit.h"
#include "cli_json.h"
#include "cli_parse.h"
#include "consumer_ext.h"
#include "ipc.h"
#include "shmtrace_cmd.h"
#include "shmtrace_ext.h"

#define EXIT_FAIL CLI_EXIT_FAIL
#define EXIT_USAGE CLI_EXIT_USAGE
#define EXIT_NO_SERVICE CLI_EXIT_NO_SERVICE
#define DEFAULT_TRIGGER_TIMEOUT_MS 600000u
#define ATTACH_DISABLE_WAIT_MS 30000u

typedef Perfetto__Protos__TraceConfig TraceConfig;
typedef Perfetto__Protos__TraceConfig__TriggerConfig TriggerConfig;
typedef Perfetto__Protos__TraceConfig__TriggerConfig__Trigger Trigger;

static volatile sig_atomic_t g_stop;

static void on_signal(int sig)
{
    (void)sig;
    g_stop = 1;
}

static void catch_signals(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
}

static cons_client *connect_or_say(const char *cmd, const char *socket,
                                   int *status)
{
    int rc = 0;
    cons_client *c = cons_connect(socket, &rc);
    if (!c) {
        *status = shc_connect_error(cmd, socket, rc);
    }
    return c;
}

/* ---------------------------------------------------------------- triggers */

int shx_parse_trigger_mode(const char *s)
{
    if (!strcmp(s, "start"))
        return 1;
    if (!strcmp(s, "stop"))
        return 2;
    if (!strcmp(s, "clone"))
        return 4;
    return -1;
}

int shx_apply_triggers(TraceConfig *cfg, const shx_trig_opts *t, char *err,
                       size_t errlen)
{
    if (t->n == 0)
        return 0;
    TriggerConfig *tc = cfg->trigger_config;
    if (!tc) {
        tc = malloc(sizeof(*tc));
        if (!tc)
            goto oom;
        perfetto__protos__trace_config__trigger_config__init(tc);
        cfg->trigger_config = tc;
    }
    if (t->mode || !tc->has_trigger_mode) {
        tc->has_trigger_mode = true;
        tc->trigger_mode = t->mode ? t->mode : 2;
    }
    if (t->timeout_ms) {
        tc->has_trigger_timeout_ms = true;
        tc->trigger_timeout_ms = t->timeout_ms;
    } else if (!tc->has_trigger_timeout_ms || !tc->trigger_timeout_ms) {
        tc->has_trigger_timeout_ms = true;
        tc->trigger_timeout_ms = cfg->has_duration_ms && cfg->duration_ms ?
                                 cfg->duration_ms :
                                 DEFAULT_TRIGGER_TIMEOUT_MS;
    }
    /* A session with triggers has no duration_ms: the timeout and the
     * stop delay bound it. */
    cfg->has_duration_ms = false;
    cfg->duration_ms = 0;
    Trigger **g = realloc(tc->triggers,
                          (tc->n_triggers + t->n) * sizeof(*g));
    if (!g)
        goto oom;
    tc->triggers = g;
    for (size_t i = 0; i < t->n; i++) {
        Trigger *tr = malloc(sizeof(*tr));
        char *name = strdup(t->names[i]);
        if (!tr || !name) {
            free(tr);
            free(name);
            goto oom;
        }
        perfetto__protos__trace_config__trigger_config__trigger__init(tr);
        tr->name = name;
        tr->has_stop_delay_ms = true;
        tr->stop_delay_ms = t->stop_delay_ms;
        tc->triggers[tc->n_triggers++] = tr;
    }
    return 0;
oom:
    snprintf(err, errlen, "out of memory");
    return -1;
}

int shx_apply_record_opts(TraceConfig *cfg, const shx_rec_opts *o,
                          bool *modified, char *err, size_t errlen)
{
    if (shx_apply_triggers(cfg, &o->trig, err, errlen) < 0)
        return -1;
    if (o->trig.n)
        *modified = true;
    if (o->detach_key) {
        cfg->has_write_into_file = true;
        cfg->write_into_file = true;
        *modified = true;
    }
    return 0;
}

bool shx_is_clone_snapshot(const TraceConfig *cfg)
{
    const TriggerConfig *tc = cfg->trigger_config;
    return tc && ((tc->has_trigger_mode && tc->trigger_mode == 4) ||
                  (tc->has_use_clone_snapshot_if_available &&
                   tc->use_clone_snapshot_if_available));
}

/* ---------------------------------------------------------------- options */

const char shx_record_help[] =
"Triggers (trigger_config; `shmtrace trigger NAME` or Perfetto's\n"
"`trigger_perfetto NAME` fires them):\n"
"      --trigger NAME      add a trigger (repeatable)\n"
"      --trigger-mode M    stop: trace now, stop --stop-delay after the\n"
"                          first trigger (default); start: start on the\n"
"                          trigger, trace --stop-delay; clone: write a\n"
"                          snapshot FILE.0, FILE.1, ... --stop-delay after\n"
"                          each trigger while tracing goes on\n"
"      --trigger-timeout DUR  end the session if no trigger came (default\n"
"                          --duration, else 10 min); no trigger, no data\n"
"      --stop-delay DUR    delay after the trigger (default 0)\n"
"Detach/attach (the service writes FILE itself):\n"
"      --detach KEY        start the session, detach it under KEY, exit\n"
"      --attach KEY        reattach to the session detached as KEY and\n"
"                          wait for its end (Ctrl-C stops it); no -o\n"
"      --stop              with --attach: stop it now\n"
"      --is-detached KEY   exit 0 if a session of yours is detached as\n"
"                          KEY, else 1\n"
"\n";

int shx_record_option(shx_rec_opts *o, int ch, const char *arg)
{
    switch (ch - SHX_OPT_BASE) {
    case 0:
        if (o->trig.n == sizeof(o->trig.names) / sizeof(o->trig.names[0]) ||
            !*arg)
            break;
        o->trig.names[o->trig.n++] = arg;
        return 1;
    case 1:
        if ((o->trig.mode = shx_parse_trigger_mode(arg)) < 0)
            break;
        return 1;
    case 2:
        if (cli_parse_duration_ms(arg, &o->trig.timeout_ms) < 0 ||
            o->trig.timeout_ms == 0)
            break;
        return 1;
    case 3:
        if (cli_parse_duration_ms(arg, &o->trig.stop_delay_ms) < 0)
            break;
        return 1;
    case 4: o->detach_key = arg; return *arg ? 1 : -1;
    case 5: o->attach_key = arg; return *arg ? 1 : -1;
    case 6: o->stop = true; return 1;
    case 7: o->is_detached_key = arg; return *arg ? 1 : -1;
    default:
        return 0;
    }
    static const char *const names[] = { "--trigger", "--trigger-mode",
                                         "--trigger-timeout", "--stop-delay" };
    fprintf(stderr, "shmtrace record: invalid value '%s' for %s (see "
            "shmtrace record --help)\n", arg, names[ch - SHX_OPT_BASE]);
    return -1;
}

int shx_record_early(shx_rec_opts *o, const char *socket, bool quiet,
                     int *done)
{
    *done = 1;
    if (o->attach_key && o->is_detached_key) {
        fprintf(stderr, "shmtrace record: --attach and --is-detached exclude "
                "each other\n");
        return EXIT_USAGE;
    }
    if (o->is_detached_key)
        return shx_is_detached(socket, o->is_detached_key);
    if (o->attach_key)
        return shx_attach(socket, o->attach_key, o->stop, quiet);
    if (o->stop) {
        fprintf(stderr, "shmtrace record: --stop goes with --attach KEY\n");
        return EXIT_USAGE;
    }
    if (o->trig.n == 0 && (o->trig.mode || o->trig.timeout_ms ||
                           o->trig.stop_delay_ms)) {
        fprintf(stderr, "shmtrace record: --trigger-mode, --trigger-timeout "
                "and --stop-delay need --trigger NAME\n");
        return EXIT_USAGE;
    }
    *done = 0;
    return 0;
}

/* ---------------------------------------------------------------- detach */

int shx_detach(cons_client *c, const char *key, const char *out)
{
    int rc = cons_detach(c, key);
    if (rc < 0) {
        fprintf(stderr, "shmtrace record: cannot detach the session as "
                "\"%s\": %s\n", key, rc == -EPROTO ?
                "the service refused (another session of yours is detached "
                "under this key?)" : strerror(-rc));
        return EXIT_FAIL;
    }
    fprintf(stderr, "shmtrace record: session detached as \"%s\"; the "
            "service keeps writing %s. `shmtrace record --attach %s "
            "[--stop]` takes it back.\n", key, out, key);
    return 0;
}

int shx_is_detached(const char *socket, const char *key)
{
    int status = 0;
    cons_client *c = connect_or_say("record", socket, &status);
    if (!c)
        return status;
    int rc = cons_attach(c, key, NULL);
    if (rc == 0) {
        /* It was: put it back as it was. */
        rc = cons_detach(c, key);
        status = rc < 0 ? EXIT_FAIL : 0;
        if (rc < 0)
            fprintf(stderr, "shmtrace record: re-detaching \"%s\" failed: "
                    "%s\n", key, strerror(-rc));
        else
            printf("detached: %s\n", key);
    } else if (rc == -EPROTO) {
        printf("not detached: %s\n", key);
        status = EXIT_FAIL;
    } else {
        fprintf(stderr, "shmtrace record: Attach failed: %s\n",
                strerror(-rc));
        status = EXIT_FAIL;
    }
    cons_destroy(c);
    return status;
}

int shx_attach(const char *socket, const char *key, bool stop, bool quiet)
{
    int status = 0;
    cons_client *c = connect_or_say("record", socket, &status);
    if (!c)
        return status;
    TraceConfig *cfg = NULL;
    int rc = cons_attach(c, key, &cfg);
    if (rc < 0) {
        fprintf(stderr, "shmtrace record: no session of yours is detached "
                "as \"%s\"%s%s\n", key, rc == -EPROTO ? "" : ": ",
                rc == -EPROTO ? "" : strerror(-rc));
        cons_destroy(c);
        return EXIT_FAIL;
    }
    if (!quiet)
        fprintf(stderr, "shmtrace record: attached to \"%s\"%s%s\n", key,
                cfg && cfg->unique_session_name ? ", session " : "",
                cfg && cfg->unique_session_name ? cfg->unique_session_name
                                                : "");
    catch_signals();
    if (stop)
        g_stop = 1;
    bool disabled = false;
    uint64_t deadline = 0;
    const char *end_err = NULL;
    while (!cons_ended(c, &end_err)) {
        if (g_stop && !disabled) {
            disabled = true;
            deadline = ipc_now_ms() + ATTACH_DISABLE_WAIT_MS;
            if (cons_flush(c, 0) < 0 && !quiet)
                fprintf(stderr, "shmtrace record: final flush incomplete\n");
            rc = cons_disable(c);
            if (rc < 0 && rc != -ENOTCONN)
                fprintf(stderr, "shmtrace record: DisableTracing failed: "
                        "%s\n", strerror(-rc));
            continue;
        }
        if (disabled && ipc_now_ms() > deadline) {
            fprintf(stderr, "shmtrace record: the session did not end within "
                    "%u s\n", ATTACH_DISABLE_WAIT_MS / 1000);
            status = EXIT_FAIL;
            break;
        }
        cons_poll(c, 100);
    }
    if (end_err) {
        fprintf(stderr, "shmtrace record: the session ended with an error: "
                "%s\n", end_err);
        status = EXIT_FAIL;
    } else if (status == 0 && !quiet) {
        fprintf(stderr, "shmtrace record: session \"%s\" ended; the service "
                "wrote its trace file%s%s\n", key,
                cfg && cfg->output_path ? " " : "",
                cfg && cfg->output_path ? cfg->output_path : "");
    }
    cons_free_buffers(c);
    cons_destroy(c);
    if (cfg)
        perfetto__protos__trace_config__free_unpacked(cfg, NULL);
    return status;
}

/* ---------------------------------------------------------------- snapshots */

int shx_snapshots(cons_client *c, const char *socket, const char *out,
                  unsigned *count)
{
    cons_clone_hit h;
    int status = 0;
    while (cons_take_clone_hit(c, &h)) {
        char path[4096];
        snprintf(path, sizeof path, "%s.%u", out, (*count)++);
        int fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        if (fd < 0) {
            fprintf(stderr, "shmtrace record: cannot create %s: %s\n", path,
                    strerror(errno));
            cons_clone_hit_free(&h);
            status = EXIT_FAIL;
            continue;
        }
        int rc = 0;
        cons_client *k = cons_connect(socket, &rc);
        char err[768] = "";
        bool was_file = false;
        cons_out o;
        cons_out_init(&o, fd);
        if (k)
            rc = cons_clone_ex(k, h.tsid, NULL, &h, fd, &was_file, err,
                               sizeof err);
        else
            cons_connect_error(socket, rc, err, sizeof err);
        if (k && rc == 0 && !was_file) {
            rc = cons_read(k, cons_out_packet, &o);
            if (rc == 0)
                rc = cons_out_flush(&o);
            cons_free_buffers(k);
        } else if (rc == 0) {
            cons_out_scan_fd(&o, fd);
        }
        if (rc < 0) {
            fprintf(stderr, "shmtrace record: snapshot for trigger %s "
                    "failed: %s\n", h.name, err[0] ? err : strerror(-rc));
            status = EXIT_FAIL;
        } else {
            fprintf(stderr, "shmtrace record: trigger \"%s\" from %s: "
                    "snapshot of %" PRIu64 " packets (%.1f MB) in %s\n",
                    h.name, h.producer[0] ? h.producer : "?", o.packets,
                    (double)o.bytes / 1e6, path);
        }
        cons_out_fini(&o);
        cons_destroy(k);
        close(fd);
        cons_clone_hit_free(&h);
    }
    return status;
}

/* ---------------------------------------------------------------- trigger */

static void usage_trigger(FILE *f)
{
    fprintf(f,
"Usage: shmtrace trigger [OPTIONS] NAME...\n"
"Activate triggers: every session whose trigger_config names one of them\n"
"reacts (START_TRACING starts, STOP_TRACING stops after stop_delay_ms,\n"
"CLONE_SNAPSHOT snapshots). Sent on the PRODUCER socket, like Perfetto's\n"
"`trigger_perfetto`, so the trace records this program as the producer.\n"
"\n"
"  -s, --socket PATH         producer socket (default\n"
"                            $PERFETTO_PRODUCER_SOCK_NAME, else\n"
"                            shmtrace-producer.sock in your own runtime\n"
"                            directory ($XDG_RUNTIME_DIR, else\n"
"                            /tmp/shmtrace-UID) if a daemon of yours is\n"
"                            there, else the system daemon's\n"
"                            " IPC_SYSTEM_SOCK_DIR "/shmtrace-producer.sock\n"
"                            (root: always the system one))\n"
"  -N, --producer-name NAME  producer name the triggers come from (matched\n"
"                            by producer_name_regex; default\n"
"                            shmtrace-trigger)\n"
"  -h, --help                this help\n"
"\n"
"Sent means the service took them, whether or not a session was waiting\n"
"for one (that session's trace says what it did with it).\n"
"\n%s", CLI_EXIT_HELP);
}

int shx_cmd_trigger(int argc, char **argv)
{
    const char *socket = NULL, *pname = "shmtrace-trigger";
    static const struct option lopts[] = {
        { "socket", required_argument, 0, 's' },
        { "producer-name", required_argument, 0, 'N' },
        { "help", no_argument, 0, 'h' },
        { 0, 0, 0, 0 },
    };
    int ch;
    optind = 1;
    while ((ch = getopt_long(argc, argv, "s:N:h", lopts, NULL)) != -1) {
        switch (ch) {
        case 's': socket = optarg; break;
        case 'N': pname = optarg; break;
        case 'h': usage_trigger(stdout); return 0;
        default: usage_trigger(stderr); return EXIT_USAGE;
        }
    }
    if (optind >= argc) {
        fprintf(stderr, "shmtrace trigger: no trigger name (see shmtrace "
                "trigger --help)\n");
        return EXIT_USAGE;
    }
    for (int i = optind; i < argc; i++)
        if (!argv[i][0]) {
            fprintf(stderr, "shmtrace trigger: empty trigger name\n");
            return EXIT_USAGE;
        }
    char err[512] = "";
    bool unreachable = false;
    int rc = cons_activate_triggers(socket, pname,
                                    (const char *const *)argv + optind,
                                    (size_t)(argc - optind), &unreachable,
                                    err, sizeof err);
    if (rc < 0) {
        fprintf(stderr, "shmtrace trigger: %s\n", err);
        return unreachable ? EXIT_NO_SERVICE : EXIT_FAIL;
    }
    return 0;
}

/* ---------------------------------------------------------------- query */

static void print_state(FILE *f, const Perfetto__Protos__TracingServiceState *s)
{
    fprintf(f, "service: %s\n", s->tracing_service_version ?
            s->tracing_service_version : "?");
    fprintf(f, "sessions: %d (started: %d)\n", s->num_sessions,
            s->num_sessions_started);
    fprintf(f, "\nproducers:\n  %-5s %-8s %-8s %-32s %s\n", "ID", "PID",
            "UID", "NAME", "SDK");
    for (size_t i = 0; i < s->n_producers; i++) {
        const Perfetto__Protos__TracingServiceState__Producer *p =
            s->producers[i];
        fprintf(f, "  %-5d %-8d %-8d %-32s %s\n", p->id, p->pid, p->uid,
                p->name ? p->name : "", p->sdk_version ? p->sdk_version : "");
    }
    fprintf(f, "\ndata sources:\n  %-40s %s\n", "NAME", "PRODUCER");
    for (size_t i = 0; i < s->n_data_sources; i++) {
        const Perfetto__Protos__TracingServiceState__DataSource *d =
            s->data_sources[i];
        const char *pn = "?";
        for (size_t k = 0; k < s->n_producers; k++)
            if (s->producers[k]->id == d->producer_id)
                pn = s->producers[k]->name ? s->producers[k]->name : "";
        fprintf(f, "  %-40s %s (%d)\n",
                d->ds_descriptor && d->ds_descriptor->name ?
                d->ds_descriptor->name : "?", pn, d->producer_id);
    }
    /* shmtraced keeps its reply within a byte budget and says so */
    if (s->shmtrace_data_sources_cut)
        fprintf(f, "  (%u of them listed with their descriptors cut to the "
                "name: the service's reply has a size budget)\n",
                s->shmtrace_data_sources_cut);
    if (s->shmtrace_data_sources_left_out)
        fprintf(f, "  (%u more registered but not listed: the service's "
                "reply has a size budget)\n",
                s->shmtrace_data_sources_left_out);
    fprintf(f, "\nsessions:\n  %-6s %-7s %-17s %-10s %-7s %-4s %s\n", "ID",
            "UID", "STATE", "BUF KB", "DUR s", "#DS", "NAME");
    for (size_t i = 0; i < s->n_tracing_sessions; i++) {
        const Perfetto__Protos__TracingServiceState__TracingSession *t =
            s->tracing_sessions[i];
        uint64_t kb = 0;
        for (size_t b = 0; b < t->n_buffer_size_kb; b++)
            kb += t->buffer_size_kb[b];
        fprintf(f, "  %-6" PRIu64 " %-7d %-17s %-10" PRIu64 " %-7u %-4u "
                "%s\n", t->id, t->consumer_uid, t->state ? t->state : "?",
                kb, t->duration_ms / 1000, t->num_data_sources,
                t->unique_session_name ? t->unique_session_name : "");
    }
    if ((int)s->n_tracing_sessions < s->num_sessions)
        fprintf(f, "  (%d more owned by other users are not shown)\n",
                s->num_sessions - (int)s->n_tracing_sessions);
}

static void usage_query(FILE *f)
{
    fprintf(f,
"Usage: shmtrace query [--json] [-s PATH]\n"
"Print the service's state (QueryServiceState, what `perfetto --query`\n"
"shows): version, connected producers, registered data sources, and your\n"
"tracing sessions (root sees all).\n"
"\n"
"  -j, --json              one JSON object (TracingServiceState fields)\n"
"  -s, --socket PATH       consumer socket\n"
"  -h, --help              this help\n"
"\n%s", CLI_EXIT_HELP);
}

int shx_cmd_query(int argc, char **argv)
{
    const char *socket = NULL;
    bool json = false;
    static const struct option lopts[] = {
        { "json", no_argument, 0, 'j' },
        { "socket", required_argument, 0, 's' },
        { "help", no_argument, 0, 'h' },
        { 0, 0, 0, 0 },
    };
    int ch;
    optind = 1;
    while ((ch = getopt_long(argc, argv, "js:h", lopts, NULL)) != -1) {
        switch (ch) {
        case 'j': json = true; break;
        case 's': socket = optarg; break;
        case 'h': usage_query(stdout); return 0;
        default: usage_query(stderr); return EXIT_USAGE;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "shmtrace query: unexpected argument '%s' (see "
                "shmtrace query --help)\n", argv[optind]);
        return EXIT_USAGE;
    }
    int status = 0;
    cons_client *c = connect_or_say("query", socket, &status);
    if (!c)
        return status;
    Perfetto__Protos__TracingServiceState *st = NULL;
    int rc = cons_query(c, false, &st);
    cons_destroy(c);
    if (rc < 0) {
        fprintf(stderr, "shmtrace query: QueryServiceState failed: %s\n",
                strerror(-rc));
        return EXIT_FAIL;
    }
    if (json) {
        cli_json_message(stdout, &st->base);
        fputc('\n', stdout);
    } else {
        print_state(stdout, st);
    }
    perfetto__protos__tracing_service_state__free_unpacked(st, NULL);
    return 0;
}

int shx_stats_extra(cons_client *c, const Perfetto__Protos__TraceStats *ts,
                    bool json)
{
    Perfetto__Protos__TracingServiceState *st = NULL;
    int rc = cons_query(c, false, &st);
    if (rc < 0 && rc != -EPROTO) {
        fprintf(stderr, "shmtrace stats: QueryServiceState failed: %s\n",
                strerror(-rc));
        return EXIT_FAIL;
    }
    if (json) {
        /* The TraceStats object (as `stats --json` always printed it) with
         * the state added under "service_state", on one line. */
        char *buf = NULL;
        size_t len = 0;
        FILE *m = open_memstream(&buf, &len);
        if (!m) {
            if (st)
                perfetto__protos__tracing_service_state__free_unpacked(st,
                                                                       NULL);
            return EXIT_FAIL;
        }
        cli_json_message(m, &ts->base);
        fclose(m);
        if (len && buf[len - 1] == '}' && st) {
            fwrite(buf, 1, len - 1, stdout);
            fputs(len > 2 ? ",\"service_state\":" : "\"service_state\":",
                  stdout);
            cli_json_message(stdout, &st->base);
            fputs("}\n", stdout);
        } else {
            fwrite(buf, 1, len, stdout);
            fputc('\n', stdout);
        }
        free(buf);
    } else if (st) {
        printf("\n");
        print_state(stdout, st);
    }
    if (st)
        perfetto__protos__tracing_service_state__free_unpacked(st, NULL);
    return 0;
}
