/*
 * shmtrace_common.c - helpers every `shmtrace` command uses: the Ctrl-C
 * state machine (first: stop and write; second: keep what is whole, exit
 * 130; third: exit at once), value errors, the end-of-run summary with the
 * exact loss line (from TraceStats.shmtrace_sequence_loss and what to
 * change), and connection errors that name the socket.
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

volatile sig_atomic_t shc_stop;

void shc_on_signal(int sig)
{
    (void)sig;
    if (shc_stop >= 2) {
        cli_outfile_abort_from_signal();
        static const char msg[] = "\nshmtrace: interrupted three times, "
                                  "exiting at once; nothing written\n";
        ssize_t rc = write(STDERR_FILENO, msg, sizeof msg - 1);
        (void)rc;
        _exit(CLI_EXIT_INTERRUPTED);
    }
    shc_stop++;
}

void shc_bad_value(const char *cmd, const char *opt, const char *val)
{
    fprintf(stderr, "shmtrace %s: invalid value '%s' for %s\nTry 'shmtrace "
            "%s --help' for more information.\n", cmd, val, opt, cmd);
}

/* 1234567 -> "1,234,567" into out (>= 32 bytes). */
const char *shc_thousands(uint64_t v, char *out)
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
 * shmtrace_sequence_loss (protos/common.proto), and what to change. An
 * entry with writer_id 0 is a group of writers (the service folds writers
 * when there are too many to list): its counts are sums like the rest,
 * but it is counted as a group, not as one writer. */
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
        {"file_full", "not written: the file reached max_file_size_bytes",
         "a larger max_file_size_bytes in the config, or none"},
    };
    enum { NC = sizeof(names) / sizeof(*names) };
    uint64_t by[NC] = {0}, lost = 0, delivered = 0;
    uint64_t writers = 0, groups = 0, unknown = 0, unknown_groups = 0;
    if (!st || st->n_shmtrace_sequence_loss == 0)
        return;
    for (size_t i = 0; i < st->n_shmtrace_sequence_loss; i++) {
        const Perfetto__Protos__TraceStats__ShmtraceSequenceLoss *l =
            st->shmtrace_sequence_loss[i];
        uint64_t after_read = 0;   /* read out of the buffer, then lost */
        for (size_t c = 0; c < l->n_causes; c++) {
            const char *name = l->causes[c]->cause ? l->causes[c]->cause : "";
            for (size_t k = 0; k < NC; k++)
                if (strcmp(name, names[k].cause) == 0)
                    by[k] += l->causes[c]->packets;
            if (strcmp(name, "invalid") == 0 ||
                strcmp(name, "file_full") == 0)
                after_read += l->causes[c]->packets;
        }
        lost += l->lost_packets;
        delivered += l->packets_read > after_read
                     ? l->packets_read - after_read : 0;
        bool group = l->writer_id == 0;
        writers += !group;
        groups += group;
        unknown += !group && !l->producer_counts_known;
        unknown_groups += group && !l->producer_counts_known;
    }
    char a[32], b[32], c[32], g[80] = "";
    if (groups)
        snprintf(g, sizeof g, " and %s group(s) of other writers",
                 shc_thousands(groups, c));
    if (lost == 0) {
        fprintf(stderr, "shmtrace: no packet lost: all %s packets of %s "
                "writer(s)%s are in the trace%s\n",
                shc_thousands(delivered, a), shc_thousands(writers, b), g,
                unknown || unknown_groups ?
                    " (drops inside non-libshm producers cannot be counted)"
                    : "");
        return;
    }
    uint64_t total = delivered + lost;
    fprintf(stderr, "shmtrace: lost %s of %s packets (%.1f%%):",
            shc_thousands(lost, a), shc_thousands(total, b),
            100.0 * (double)lost / (double)(total ? total : 1));
    const char *sep = " ";
    for (size_t k = 0; k < NC; k++) {
        if (!by[k])
            continue;
        fprintf(stderr, "%s%s %s", sep, shc_thousands(by[k], c), names[k].text);
        sep = ", ";
    }
    if (unknown && !unknown_groups)
        fprintf(stderr, "; drops inside %s non-libshm writer(s) cannot be "
                "counted", shc_thousands(unknown, c));
    else if (unknown_groups)
        fprintf(stderr, "; drops inside non-libshm producers cannot be "
                "counted (%s writer(s) and %s group(s) of writers)",
                shc_thousands(unknown, c), shc_thousands(unknown_groups, b));
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

void shc_print_summary(const char *what, const char *path,
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

/* A failed cons_connect, worded for the user (cons_connect_error). */
int shc_connect_error(const char *cmd, const char *socket, int rc)
{
    char msg[768];
    cons_connect_error(socket, rc, msg, sizeof msg);
    fprintf(stderr, "shmtrace %s: %s\n", cmd, msg);
    return cons_connect_failure_is_local(rc) ? CLI_EXIT_FAIL
                                             : CLI_EXIT_NO_SERVICE;
}
