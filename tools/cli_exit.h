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

/* One line for a bad option, as GNU tools do. */
#define CLI_TRY_HELP(prog) "Try '" prog " --help' for more information.\n"

#endif /* SHMTRACE_CLI_EXIT_H */
