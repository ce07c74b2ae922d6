/*
 * cli_outfile.h - output files that appear whole or not at all (cli_outfile_*).
 *
 * `shmtrace record`/`clone` and `shmtrace-inspect --live --keep-trace`
 * write into a temporary file next to the destination (FILE.partial.XXXXXX,
 * same directory so the rename is atomic) and rename it over FILE only when
 * they decide to keep it. A run that fails therefore leaves nothing behind
 * and never clobbers an older FILE; one the user interrupts twice can be
 * unlinked from the signal handler (cli_outfile_abort_from_signal). "-"
 * means standard output: written directly, nothing to rename or remove.
 *
 * An existing FILE that is not a regular file (a symlink, a directory, a
 * device, a FIFO, a socket) is refused and left alone before anything
 * starts, so a long recording cannot end in a failed rename; the
 * temporary file is created with O_EXCL (never through a symlink) and
 * the rename replaces a name, never writes through one. Files are created
 * with mode 0600.
 */
#ifndef SHMTRACE_CLI_OUTFILE_H
#define SHMTRACE_CLI_OUTFILE_H

#include <stddef.h>

typedef struct cli_outfile {
    const char *path; /* the destination, as given */
    char *tmp;        /* the temporary name; NULL for stdout or when closed */
    int fd;           /* -1 when closed */
} cli_outfile;

/* Create the temporary file (mode 0600). 0, or a negative
 * errno with err naming the file and the cause. */
int cli_outfile_open(cli_outfile *of, const char *path, char *err,
                     size_t errlen);
/* Close and rename into place. 0, or a negative errno with err set (the
 * temporary file is removed then). */
int cli_outfile_commit(cli_outfile *of, char *err, size_t errlen);
/* Close and remove the temporary file (no-op when already done). */
void cli_outfile_abort(cli_outfile *of);
/* Async-signal-safe: remove the temporary file of the outfile opened last
 * (before an _exit from a signal handler). */
void cli_outfile_abort_from_signal(void);

#endif /* SHMTRACE_CLI_OUTFILE_H */
