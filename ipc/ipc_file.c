/*
 * ipc_file.c - opening output files safely (ipc_file_*).
 *
 * Every program that writes a trace (shmtrace record/clone, the inspector's
 * kept clone, shmtraced's own output_path files) opens it here, so one rule
 * holds everywhere: an output is a regular file. An existing path that is
 * anything else (a symbolic link, a directory, a device node such as
 * /dev/full, a FIFO, a socket) is refused with a message naming what it
 * is, and never truncated, replaced or written.
 *
 * How: lstat() first, so a device or FIFO is not even opened (opening some
 * devices has side effects; opening a FIFO for writing blocks); then
 * open(O_CREAT | O_NOFOLLOW | O_NONBLOCK) without O_TRUNC, and fstat() the
 * descriptor, which closes the race of a path swapped between the two
 * calls; only then O_NONBLOCK is cleared and the file truncated. New files
 * get mode 0600 (a trace may hold other processes' data: the owner widens
 * it if she wants).
 *
 * Descriptors another user passes to the service (ipc_file_check_fd,
 * ipc_file_check_not_fuse): a FUSE file system is served by a program,
 * which may belong to that user (with user_allow_other in
 * /etc/fuse.conf) and may simply never answer: the service's fstat() or
 * write() on such a file would wait for good, and every user's tracing
 * with it. Whether fd is on FUSE is read from /proc/self/fdinfo (its
 * mount id) and /proc/self/mountinfo (that mount's type), which the
 * kernel answers without asking the file system.
 *
 * It lives in the IPC library only because that is the one internal
 * library every program (service, tools, inspector) links.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "ipc_int.h"

const char *ipc_file_kind(mode_t mode)
{
    if (S_ISREG(mode))
        return "a regular file";
    if (S_ISDIR(mode))
        return "a directory";
    if (S_ISLNK(mode))
        return "a symbolic link";
    if (S_ISCHR(mode))
        return "a character device";
    if (S_ISBLK(mode))
        return "a block device";
    if (S_ISFIFO(mode))
        return "a FIFO";
    if (S_ISSOCK(mode))
        return "a socket";
    return "not a regular file";
}

static int refuse(const char *path, mode_t mode, char *err, size_t errlen)
{
    if (err && errlen)
        snprintf(err, errlen, "refusing to write %s: it is %s, not a regular "
                 "file (only regular files are created or replaced)", path,
                 ipc_file_kind(mode));
    return -EEXIST;
}

int ipc_file_fstype(int fd, char *out, size_t len)
{
    char path[64], line[4096];
    snprintf(path, sizeof path, "/proc/self/fdinfo/%d", fd);
    FILE *f = fopen(path, "re");
    if (!f)
        return -errno;
    long mnt_id = -1;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "mnt_id: %ld", &mnt_id) == 1)
            break;
    fclose(f);
    if (mnt_id < 0)
        return -ENODATA;
    f = fopen("/proc/self/mountinfo", "re");
    if (!f)
        return -errno;
    int rc = -ENOENT;
    /* "ID PARENT MAJ:MIN ROOT POINT OPTS [OPTIONAL...] - FSTYPE SRC SUPER";
     * paths have their spaces escaped (\040), so the first " - " is the
     * separator. A line longer than the buffer is skipped whole. */
    bool line_start = true;
    while (fgets(line, sizeof line, f)) {
        bool whole = strchr(line, '\n') != NULL;
        bool first = line_start;
        line_start = whole;
        char *end;
        long id = strtol(line, &end, 10);
        if (!first || end == line || id != mnt_id)
            continue;
        char *sep = strstr(line, " - ");
        if (!sep)
            break;
        char *type = sep + 3;
        size_t n = strcspn(type, " \n");
        if (n == 0 || n >= len) {
            rc = -ENAMETOOLONG;
            break;
        }
        memcpy(out, type, n);
        out[n] = '\0';
        rc = 0;
        break;
    }
    fclose(f);
    return rc;
}

bool ipc_file_fstype_is_fuse(const char *fstype)
{
    return strcmp(fstype, "fuse") == 0 || strcmp(fstype, "fuseblk") == 0 ||
           strncmp(fstype, "fuse.", 5) == 0;
}

int ipc_file_check_not_fuse(int fd, const char *what, char *err,
                            size_t errlen)
{
    char fstype[64];
    if (ipc_file_fstype(fd, fstype, sizeof fstype) < 0 ||
        !ipc_file_fstype_is_fuse(fstype))
        return 0;   /* not FUSE, or /proc cannot tell: as before */
    if (err && errlen)
        snprintf(err, errlen, "%s is on a FUSE file system (%s), whose "
                 "server could make the tracing service wait for good, and "
                 "every user's tracing with it; write the trace to a local "
                 "file system, or let the client write it (a config "
                 "without write_into_file)", what, fstype);
    return -EPERM;
}

int ipc_file_check_fd(int fd, const char *what, char *err, size_t errlen)
{
    struct stat st;
    if (fstat(fd, &st) < 0) {
        int e = errno;
        if (err && errlen)
            snprintf(err, errlen, "%s: %s", what, strerror(e));
        return -e;
    }
    /* The null device is harmless (perfetto -o /dev/null is a common
     * idiom); a FIFO, socket or terminal could block the writer. */
    bool null_dev = S_ISCHR(st.st_mode) && major(st.st_rdev) == 1 &&
                    minor(st.st_rdev) == 3;
    if (!S_ISREG(st.st_mode) && !null_dev) {
        if (err && errlen)
            snprintf(err, errlen, "%s is %s, not a regular file", what,
                     ipc_file_kind(st.st_mode));
        return -EINVAL;
    }
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0 || ((fl & O_ACCMODE) != O_WRONLY &&
                   (fl & O_ACCMODE) != O_RDWR)) {
        if (err && errlen)
            snprintf(err, errlen, "%s is not open for writing", what);
        return -EBADF;
    }
    return 0;
}

int ipc_file_open_output(const char *path, bool read_back, char *err,
                         size_t errlen)
{
    struct stat st;
    if (lstat(path, &st) == 0 && !S_ISREG(st.st_mode))
        return refuse(path, st.st_mode, err, errlen);
    int fd = open(path, (read_back ? O_RDWR : O_WRONLY) | O_CREAT |
                  O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC, 0600);
    if (fd < 0) {
        int e = errno;
        /* Swapped after lstat(): say what it became. */
        if ((e == ELOOP || e == EISDIR || e == ENXIO) &&
            lstat(path, &st) == 0 && !S_ISREG(st.st_mode))
            return refuse(path, st.st_mode, err, errlen);
        if (err && errlen)
            snprintf(err, errlen, "cannot create %s: %s", path, strerror(e));
        return -e;
    }
    if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
        int rc = refuse(path, st.st_mode, err, errlen);
        close(fd);
        return rc;
    }
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) < 0 ||
        ftruncate(fd, 0) < 0) {
        int e = errno;
        if (err && errlen)
            snprintf(err, errlen, "cannot truncate %s: %s", path,
                     strerror(e));
        close(fd);
        return -e;
    }
    return fd;
}
