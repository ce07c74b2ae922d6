/*
 * cli_exit.h - the one table of exit codes of every shmtrace program
 * (shmtrace, shmtrace-producer, shmtrace-inspect, shmtraced), and its text
 * for --help. README.md carries the same table; tests/cli_docs.sh checks
 * that every program's --help prints CLI_EXIT_HELP and that the README
 * agrees, so the three cannot drift apart.
 *
 * Header only (constants and a string literal): the daemon and the
 * producer include it without linking the consumer library.
 */
#ifndef SHMTRACE_CLI_EXIT_H
#define SHMTRACE_CLI_EXIT_H

#include <errno.h>

enum {
    CLI_EXIT_OK = 0,
    CLI_EXIT_FAIL = 1,        /* failure while running: the message says */
    CLI_EXIT_USAGE = 2,       /* bad option, value or config */
    CLI_EXIT_NO_SERVICE = 3,  /* the tracing service could not be reached */
    CLI_EXIT_NOT_TRACE = 4,   /* input unreadable or not a Perfetto trace */
    CLI_EXIT_CORRUPT = 5,     /* truncated/corrupt: output kept up to it */
    CLI_EXIT_INTERRUPTED = 130 /* interrupted (128 + SIGINT) */
};

/* Printed at the end of every program's --help, word for word. */
#define CLI_EXIT_HELP \
"Exit status (the same in every shmtrace program):\n" \
"  0    success\n" \
"  1    failure while running (the message says what failed and what the\n" \
"       output file holds)\n" \
"  2    usage error: bad option or value, invalid config\n" \
"  3    the tracing service could not be reached (the message names the\n" \
"       socket)\n" \
"  4    the input is unreadable or not a Perfetto trace\n" \
"  5    the trace is truncated or corrupt: the output holds everything\n" \
"       before the byte offset printed\n" \
"  130  interrupted (Ctrl-C twice)\n"

/* A client that could not reach the service because of a limit of its
 * own (errno err: EMFILE, ENFILE, ENOMEM, ENOBUFS) exits CLI_EXIT_FAIL,
 * not CLI_EXIT_NO_SERVICE, and says which limit, with CLI_LOCAL_LIMIT_FMT
 * (socket path, strerror(err), this hint); NULL for any other errno.
 * Here, header only, for the producer, which does not link the consumer
 * library. */
#define CLI_LOCAL_LIMIT_FMT \
    "cannot connect to the tracing service at %s: %s (a limit of this " \
    "process, not of the service: %s)"
static inline const char *cli_local_limit_hint(int err)
{
    switch (err) {
    case EMFILE: return "raise its open files limit, ulimit -n";
    case ENFILE: return "the system's open files limit, fs.file-max, is "
                        "reached";
    case ENOMEM:
    case ENOBUFS: return "free some memory";
    default: return NULL;
    }
}

/* One line for a bad option, as GNU tools do. */
#define CLI_TRY_HELP(prog) "Try '" prog " --help' for more information.\n"

#endif /* SHMTRACE_CLI_EXIT_H */
