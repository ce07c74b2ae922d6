/*
 * cli_outfile.c - whole-or-nothing output files (see cli_outfile.h).
 *
 * The name of the temporary file opened last is also kept in a static
 * buffer so a signal handler can unlink(2) it (async-signal-safe) without
 * touching malloc'd memory.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli_outfile.h"

static char g_sig_tmp[PATH_MAX];
static volatile sig_atomic_t g_sig_tmp_set;

int cli_outfile_open(cli_outfile *of, const char *path, char *err,
                     size_t errlen)
{
    of->path = path;
    of->tmp = NULL;
    of->fd = -1;
    if (strcmp(path, "-") == 0) {
        of->fd = STDOUT_FILENO;
        return 0;
    }
    struct stat st;
    if (lstat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
        snprintf(err, errlen, "%s is a directory: give a file name", path);
        return -EISDIR;
    }
    if (lstat(path, &st) == 0 && !S_ISREG(st.st_mode)) {
        snprintf(err, errlen, "%s exists and is not a regular file (%s): "
                 "refused, left alone", path,
                 S_ISLNK(st.st_mode) ? "a symlink" : S_ISCHR(st.st_mode) ||
                 S_ISBLK(st.st_mode) ? "a device" : S_ISFIFO(st.st_mode)
                 ? "a FIFO" : S_ISSOCK(st.st_mode) ? "a socket" : "special");
        return -EEXIST;
    }
    size_t n = strlen(path) + sizeof ".partial.XXXXXX";
    if (n > sizeof g_sig_tmp) {
        snprintf(err, errlen, "%s: %s", path, strerror(ENAMETOOLONG));
        return -ENAMETOOLONG;
    }
    of->tmp = malloc(n);
    if (!of->tmp) {
        snprintf(err, errlen, "out of memory");
        return -ENOMEM;
    }
    snprintf(of->tmp, n, "%s.partial.XXXXXX", path);
    int fd = mkostemp(of->tmp, O_CLOEXEC);
    if (fd < 0) {
        int e = errno;
        snprintf(err, errlen, "cannot create %s: %s", path, strerror(e));
        free(of->tmp);
        of->tmp = NULL;
        return -e;
    }
    /* mkostemp's mode 0600 stays: a trace can hold anything a producer
     * wrote, so it is readable by its owner only (as the security rules
     * of the outputs want). */
    of->fd = fd;
    g_sig_tmp_set = 0;
    memcpy(g_sig_tmp, of->tmp, n);
    g_sig_tmp_set = 1;
    return 0;
}

static void forget(cli_outfile *of)
{
    if (of->tmp && g_sig_tmp_set && strcmp(of->tmp, g_sig_tmp) == 0)
        g_sig_tmp_set = 0;
    free(of->tmp);
    of->tmp = NULL;
}

int cli_outfile_commit(cli_outfile *of, char *err, size_t errlen)
{
    if (!of->tmp) { /* stdout */
        of->fd = -1;
        return 0;
    }
    int rc = 0;
    if (close(of->fd) < 0) {
        rc = -errno;
        snprintf(err, errlen, "writing %s: %s", of->path, strerror(errno));
    }
    of->fd = -1;
    /* Checked again: something else may have appeared at FILE meanwhile
     * (rename would replace that node, not write through it, but only
     * regular files are ever replaced). */
    struct stat st;
    if (rc == 0 && lstat(of->path, &st) == 0 && !S_ISREG(st.st_mode)) {
        rc = -EEXIST;
        snprintf(err, errlen, "%s appeared meanwhile and is not a regular "
                 "file: refused, left alone", of->path);
    }
    if (rc == 0 && rename(of->tmp, of->path) < 0) {
        rc = -errno;
        snprintf(err, errlen, "cannot rename %s to %s: %s", of->tmp, of->path,
                 strerror(errno));
    }
    if (rc < 0)
        unlink(of->tmp);
    forget(of);
    return rc;
}

void cli_outfile_abort(cli_outfile *of)
{
    if (!of->tmp) {
        of->fd = -1;
        return;
    }
    if (of->fd >= 0)
        close(of->fd);
    of->fd = -1;
    unlink(of->tmp);
    forget(of);
}

void cli_outfile_abort_from_signal(void)
{
    if (g_sig_tmp_set)
        unlink(g_sig_tmp);
}
