/*
 * shmtraced.c - the shmtrace tracing service daemon.
 *
 * Listens on the producer and consumer sockets (Perfetto's IPC wire
 * protocol), owns the trace buffers, moves producers' chunks out of their
 * shared memory into the buffers, and serves consumers (svc_ipc.c over the
 * core in svc_*.c). Single-threaded: one ipc_loop runs everything.
 * SIGTERM/SIGINT (via signalfd) stop it cleanly: running sessions are
 * disabled (final flush, files written, consumers told) before it exits.
 */
#include "config.h"

#include <errno.h>
#include <getopt.h>
#include <stdbool.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <shmtrace/trace_buffer.h>

#include "cli_exit.h"
#include "svc_ipc.h"

static void usage(FILE *f)
{
    fprintf(f,
"Usage: shmtraced [--producer-socket PATH] [--consumer-socket PATH]\n"
"                 [--allow-abstract-sockets] [--no-root-access]\n"
"                 [--ring-cache MIB] [--no-writer-thread] [--direct-io]\n"
"                 [--max-sessions-per-uid N] [--max-buffers-per-uid MIB]\n"
"                 [--max-connections-per-uid N]\n"
"\n"
"The shmtrace tracing service. Producers connect to the producer socket\n"
"and write into shared memory; consumers (shmtrace record, perfetto)\n"
"connect to the consumer socket to start sessions and read traces.\n"
"\n"
"  --producer-socket PATH    producer socket (mode 0660)\n"
"  --consumer-socket PATH    consumer socket (mode 0600)\n"
"  --allow-abstract-sockets  accept '@name' (Linux abstract) socket names.\n"
"                            WARNING: an abstract socket has no file, so\n"
"                            no file permission protects it: every local\n"
"                            user (of this network namespace) can connect,\n"
"                            and a name nobody holds can be taken by anyone\n"
"  --no-root-access          root's consumers get only their own sessions,\n"
"                            like everyone else (default: root may clone\n"
"                            and see every user's sessions)\n"
"  --ring-cache MIB          keep up to MIB MiB of released trace buffers\n"
"                            for the next sessions (reclaimable by the\n"
"                            kernel; default 512, 0 = off)\n"
"  --no-writer-thread        write_into_file sessions write their file on\n"
"                            the main thread (default: a writer thread\n"
"                            writes it while the main thread keeps taking\n"
"                            the producers' chunks)\n"
"  --direct-io               write_into_file sessions write their files with\n"
"                            O_DIRECT where the file system takes it: no\n"
"                            copy into the page cache (less service CPU,\n"
"                            most for large packets), but the disk's\n"
"                            throughput instead of the page cache's, and\n"
"                            the file is not cached afterwards (default:\n"
"                            off; see README, --direct-io)\n"
"\n"
"Limits per user, so that one user cannot lock the others out (0 lifts a\n"
"limit):\n"
"  --max-sessions-per-uid N  sessions a uid may have at once, detached ones\n"
"                            included, clones not (default 5, as Perfetto;\n"
"                            every uid)\n"
"  --max-buffers-per-uid MIB MiB of trace buffers a uid may hold in its\n"
"                            sessions and clones (default 2048: half the\n"
"                            4096 MiB the service holds in all; every uid\n"
"                            but the daemon's own)\n"
"  --max-connections-per-uid N  connections a uid may have open on each\n"
"                            socket (default 512: half the 1024 a socket\n"
"                            serves; every uid); the next is refused and\n"
"                            told why\n"
"\n"
"Whatever the limits, the last %u MiB of buffers and the last %u\n"
"connections of each socket are kept for root and the daemon's own uid.\n"
"\n"
"  -h, --help                this help\n"
"  -V, --version             print the version\n"
"\n"
"Sockets, first match wins: the flag; $PERFETTO_PRODUCER_SOCK_NAME /\n"
"$PERFETTO_CONSUMER_SOCK_NAME; else shmtrace-{producer,consumer}.sock in a\n"
"directory only this user can write: as root " IPC_SYSTEM_SOCK_DIR
" (created 0755),\nas another user $XDG_RUNTIME_DIR, else /tmp/shmtrace-UID "
"(created 0700).\nThe daemon refuses to start if that directory belongs to "
"someone else or\nothers can write it, if another instance owns a socket, "
"and replaces stale\nsockets. Clients (shmtrace, shmtrace-inspect, libshm "
"producers) talk only to\na daemon running as root or as their own user.\n"
"\n"
"Users: a session belongs to the uid of the consumer that started it.\n"
"Only that uid can clone it (shmtrace clone, live inspection) and\n"
"GetTraceStats shows a consumer only its own sessions and buffers, plus\n"
"counts anyone may know (producers, data sources, rejected chunks). A\n"
"consumer reads, flushes and stops only the session of its connection.\n"
"Root may reach every session unless --no-root-access.\n"
"\n"
"Files: with write_into_file the consumer opens the file itself, with its\n"
"own rights, and passes the descriptor with EnableTracing (shmtrace record\n"
"does). A config's output_path is opened by the daemon only for a consumer\n"
"of the daemon's own uid, and only as a regular file (never a symlink,\n"
"device or FIFO); anyone else's output_path is refused. A passed file\n"
"must be a regular file (or /dev/null) open for writing, and another\n"
"user's must not be on FUSE, whose server could stall the daemon.\n"
"\n"
"SIGTERM or SIGINT stops the daemon cleanly.\n"
"\n"
"shmtraced exits 0 after a clean stop and 1 when it cannot start (the\n"
"message says why: socket in use, directory not its own, path too long,\n"
"...).\n"
"\n" CLI_EXIT_HELP, SVC_RESERVED_BUFFER_KB / 1024u, SVC_RESERVED_CONNS);
}

typedef struct {
    svc_daemon *d;
    int sfd;
} sig_ctx;

static void on_signal(ipc_loop *loop, int fd, short revents, void *vctx)
{
    sig_ctx *c = vctx;
    struct signalfd_siginfo si;
    while (read(fd, &si, sizeof(si)) == (ssize_t)sizeof(si)) {
        fprintf(stderr, "shmtraced: signal %u, stopping (writing what is "
                "owed)\n", si.ssi_signo);
        svc_daemon_shutdown(c->d);
    }
}

/* A limit flag's value: 0..max. */
static int parse_limit(const char *flag, const char *arg, unsigned long max,
                       unsigned long *out)
{
    char *end;
    errno = 0;
    unsigned long v = strtoul(arg, &end, 10);
    if (errno || end == arg || *end || arg[0] == '-' || v > max) {
        fprintf(stderr, "shmtraced: %s: '%s' is not a number from 0 to "
                "%lu\n", flag, arg, max);
        fputs(CLI_TRY_HELP("shmtraced"), stderr);
        return -1;
    }
    *out = v;
    return 0;
}

/* Each connection takes a descriptor (a producer's SMB another): with the
 * usual soft limit of 1024 (systemd's default for services) the sockets'
 * 2 x 1024 connections could never be reached, and the service would
 * run out of descriptors first. Raise the soft limit to the hard one. */
static void raise_fd_limit(void)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) < 0 || rl.rlim_cur >= rl.rlim_max)
        return;
    rlim_t want = rl.rlim_max == RLIM_INFINITY ? 65536 : rl.rlim_max;
    if (want > rl.rlim_cur) {
        rl.rlim_cur = want;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"producer-socket", required_argument, NULL, 'p'},
        {"consumer-socket", required_argument, NULL, 'c'},
        {"allow-abstract-sockets", no_argument, NULL, 'A'},
        {"no-root-access", no_argument, NULL, 'R'},
        {"ring-cache", required_argument, NULL, 'r'},
        {"no-writer-thread", no_argument, NULL, 'W'},
        {"direct-io", no_argument, NULL, 'D'},
        {"max-sessions-per-uid", required_argument, NULL, 'S'},
        {"max-buffers-per-uid", required_argument, NULL, 'B'},
        {"max-connections-per-uid", required_argument, NULL, 'C'},
        {"help", no_argument, NULL, 'h'},
        {"version", no_argument, NULL, 'V'},
        {NULL, 0, NULL, 0},
    };
    const char *pflag = NULL, *cflag = NULL;
    bool allow_abstract = false, root_access = true, writer_thread = true;
    bool direct_io = false;
    /* A session's buffers are released at its end; the next session of the
     * same size takes them back already faulted in (tb_mem.c), instead of
     * paying a page fault and the kernel's zeroing per page again. */
    unsigned long ring_cache_mib = 512;
    unsigned long uid_sessions = SVC_MAX_SESSIONS_PER_UID_DEFAULT;
    unsigned long uid_buffer_mib = SVC_MAX_BUFFER_KB_PER_UID_DEFAULT / 1024;
    unsigned long uid_conns = SVC_MAX_CONNS_PER_UID;
    char *end;
    int o;
    opterr = 0;
    while ((o = getopt_long(argc, argv, ":hV", opts, NULL)) != -1) {
        switch (o) {
        case 'p': pflag = optarg; break;
        case 'c': cflag = optarg; break;
        case 'A': allow_abstract = true; break;
        case 'R': root_access = false; break;
        case 'W': writer_thread = false; break;
        case 'D': direct_io = true; break;
        case 'r':
            errno = 0;
            ring_cache_mib = strtoul(optarg, &end, 10);
            if (errno || end == optarg || *end || optarg[0] == '-' ||
                ring_cache_mib > 65536) {
                fprintf(stderr, "shmtraced: --ring-cache: '%s' is not a "
                        "number of MiB from 0 to 65536\n", optarg);
                fputs(CLI_TRY_HELP("shmtraced"), stderr);
                return CLI_EXIT_USAGE;
            }
            break;
        case 'S':
            if (parse_limit("--max-sessions-per-uid", optarg, 1000000,
                            &uid_sessions) < 0)
                return CLI_EXIT_USAGE;
            break;
        case 'B':
            if (parse_limit("--max-buffers-per-uid", optarg, 4096,
                            &uid_buffer_mib) < 0)
                return CLI_EXIT_USAGE;
            break;
        case 'C':
            if (parse_limit("--max-connections-per-uid", optarg,
                            IPC_HOST_MAX_CONNS, &uid_conns) < 0)
                return CLI_EXIT_USAGE;
            break;
        case 'h': usage(stdout); return 0;
        case 'V': printf("shmtraced %s\n", PACKAGE_VERSION); return 0;
        default:
            if (o == ':')
                fprintf(stderr, "shmtraced: option '%s' needs a value\n",
                        argv[optind - 1]);
            else if (optopt)
                fprintf(stderr, "shmtraced: unknown option '-%c'\n", optopt);
            else
                fprintf(stderr, "shmtraced: unknown option '%s'\n",
                        argv[optind - 1]);
            fputs(CLI_TRY_HELP("shmtraced"), stderr);
            return CLI_EXIT_USAGE;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "shmtraced: unexpected argument '%s'\n"
                CLI_TRY_HELP("shmtraced"), argv[optind]);
        return CLI_EXIT_USAGE;
    }
    char ppath[108], cpath[108], perr[512];
    int rc;
    if ((rc = ipc_sock_service_path(IPC_SOCK_PRODUCER, pflag, ppath,
                                    sizeof(ppath), perr, sizeof perr)) < 0 ||
        (rc = ipc_sock_service_path(IPC_SOCK_CONSUMER, cflag, cpath,
                                    sizeof(cpath), perr, sizeof perr)) < 0) {
        if (perr[0])
            fprintf(stderr, "shmtraced: %s\n", perr);
        else
            fprintf(stderr, "shmtraced: socket path: %s%s\n",
                    ipc_strerror(rc), rc == -ENAMETOOLONG ?
                    " (use a shorter path)" : "");
        return 1;
    }
    if (!allow_abstract && (ppath[0] == '@' || cpath[0] == '@')) {
        fprintf(stderr, "shmtraced: %s is an abstract socket name, which no "
                "file permission protects (any local user can connect); "
                "pass --allow-abstract-sockets to use it anyway\n",
                ppath[0] == '@' ? ppath : cpath);
        return CLI_EXIT_USAGE;
    }
    tb_set_ring_cache_limit((size_t)ring_cache_mib << 20);
    raise_fd_limit();
    signal(SIGPIPE, SIG_IGN);
    /* A trace file past the daemon's file size limit (RLIMIT_FSIZE, e.g.
     * systemd's LimitFSIZE or `ulimit -f`): the write then fails with
     * EFBIG and ends that session, with the cause, instead of SIGXFSZ
     * killing the daemon and every user's sessions. */
    signal(SIGXFSZ, SIG_IGN);
    sigset_t mask;
    sigemptyset(&mask);
    sigaddset(&mask, SIGTERM);
    sigaddset(&mask, SIGINT);
    sigprocmask(SIG_BLOCK, &mask, NULL);
    int sfd = signalfd(-1, &mask, SFD_NONBLOCK | SFD_CLOEXEC);
    if (sfd < 0) {
        perror("shmtraced: signalfd");
        return 1;
    }
    ipc_loop *loop = ipc_loop_create();
    if (!loop) {
        perror("shmtraced: event loop");
        return 1;
    }
    int err = 0;
    svc_daemon *d = svc_daemon_create(loop, ppath, cpath, &err);
    if (!d) {
        if (err == -EADDRINUSE)
            fprintf(stderr, "shmtraced: another service is listening on %s "
                    "or %s: stop it or choose other sockets "
                    "(--producer-socket/--consumer-socket)\n", ppath, cpath);
        else
            fprintf(stderr, "shmtraced: cannot listen on %s / %s: %s\n",
                    ppath, cpath, ipc_strerror(err));
        ipc_loop_destroy(loop);
        close(sfd);
        return 1;
    }
    svc_set_root_access(svc_daemon_service(d), root_access);
    svc_set_file_direct(svc_daemon_service(d), direct_io);
    svc_set_uid_limits(svc_daemon_service(d), (uint32_t)uid_sessions,
                       (uint64_t)uid_buffer_mib * 1024);
    svc_daemon_set_max_conns_per_uid(d, (uint32_t)uid_conns);
    if (writer_thread && svc_daemon_set_file_writer(d, true) < 0)
        fprintf(stderr, "shmtraced: no memory for the file writer thread: "
                "files are written on the main thread\n");
    sig_ctx sc = { d, sfd };
    ipc_loop_watch_fd(loop, sfd, POLLIN, on_signal, &sc);
    fprintf(stderr, "shmtraced: producer socket %s, consumer socket %s\n",
            ppath, cpath);
    rc = ipc_loop_run(loop);
    ipc_loop_unwatch_fd(loop, sfd);
    svc_daemon_destroy(d);
    ipc_loop_destroy(loop);
    close(sfd);
    if (rc < 0) {
        fprintf(stderr, "shmtraced: event loop failed: %s\n",
                ipc_strerror(rc));
        return 1;
    }
    return 0;
}
