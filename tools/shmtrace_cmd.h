/*
 * shmtrace_cmd.h - what the parts of `shmtrace` share: the Ctrl-C state,
 * value errors, the end-of-run summary, connection errors, and the record
 * command (shmtrace_record.c) that main() in shmtrace.c dispatches to.
 * Private to the shmtrace program.
 */
#ifndef SHMTRACE_CMD_H
#define SHMTRACE_CMD_H

#include <signal.h>
#include <stdint.h>
#include <stdio.h>

#include "cli_exit.h"
#include "consumer_client.h"

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
extern volatile sig_atomic_t shc_stop;
void shc_on_signal(int sig);

/* "shmtrace CMD: invalid value 'VAL' for OPT" plus the --help hint. */
void shc_bad_value(const char *cmd, const char *opt, const char *val);
/* 1234567 -> "1,234,567" into out (>= 32 bytes). */
const char *shc_thousands(uint64_t v, char *out);
/* The end-of-run summary and the exact loss line on stderr (st may be
 * NULL; secs < 0: no duration). */
void shc_print_summary(const char *what, const char *path, const cons_out *o,
                       const Perfetto__Protos__TraceStats *st, double secs);
/* A failed cons_connect, worded for the user; returns the exit status:
 * CLI_EXIT_NO_SERVICE, or CLI_EXIT_FAIL for a limit of this process
 * (cons_connect_failure_is_local). */
int shc_connect_error(const char *cmd, const char *socket, int rc);

/* shmtrace_record.c */
void shc_usage_record(FILE *f);
int shc_cmd_record(int argc, char **argv);

#endif /* SHMTRACE_CMD_H */
