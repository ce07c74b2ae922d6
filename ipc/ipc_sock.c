/*
 * ipc_sock.c - socket names, listening and connecting (ipc_sock_*).
 *
 * Names: a --flag value, else Perfetto's environment variables
 * (PERFETTO_PRODUCER_SOCK_NAME / PERFETTO_CONSUMER_SOCK_NAME), else our own
 * default. We deliberately do not default to Perfetto's /run/perfetto or
 * /tmp/perfetto-*: a shmtraced must never steal a system traced's socket by
 * accident; pointing both sides at one name (the environment variables,
 * honoured by Perfetto's binaries and ours alike) is the interop switch.
 * "@name" is a Linux abstract socket, as in Perfetto's sock_utils.
 *
 * Defaults nobody can squat: a socket name in a directory other users can
 * write (the old /tmp/shmtrace-*.sock) can be taken by whoever binds it
 * first, and root's producers would then hand their data to that user's
 * daemon. So the default lives in a directory only the daemon's user can
 * write: root's daemon in /run/shmtrace (created 0755, must be root's and
 * not group/other-writable), another user's in $XDG_RUNTIME_DIR (checked
 * the same way) or /tmp/shmtrace-<uid> (created 0700, checked). A user's
 * clients look in their own directory first, then in the system one, so
 * they reach their own daemon or the system's. Whatever the name, clients
 * check the daemon's uid (SO_PEERCRED) before trusting it.
 *
 * Ownership of a path (listen): a path that answers connect() belongs to a
 * live instance -> -EADDRINUSE; a socket nobody listens on is stale and is
 * replaced; anything that is not a socket is never unlinked (-EEXIST).
 */
#include "config.h"

#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include "ipc_int.h"

#define CONNECT_TIMEOUT_S 3

static const char *sock_base(ipc_sock_kind kind)
{
    return kind == IPC_SOCK_PRODUCER ? IPC_PRODUCER_SOCK_BASENAME
                                     : IPC_CONSUMER_SOCK_BASENAME;
}

static const char *system_dir(void)
{
    const char *e = getenv(IPC_SYSTEM_SOCK_DIR_ENV);
    return e && e[0] == '/' ? e : IPC_SYSTEM_SOCK_DIR;
}

/* A directory of ours that nobody else can write: lstat (no symlink),
 * owner = euid, no group/other write bit. 0, or -EPERM / -errno. */
static int check_private_dir(const char *dir, struct stat *st)
{
    if (lstat(dir, st) < 0)
        return -errno;
    if (!S_ISDIR(st->st_mode) || st->st_uid != geteuid() ||
        (st->st_mode & 022))
        return -EPERM;
    return 0;
}

/* The user's default directory (euid != 0) into out. */
static int user_dir(char *out, size_t len)
{
    const char *xdg = getenv("XDG_RUNTIME_DIR");
    struct stat st;
    if (xdg && xdg[0] == '/' && check_private_dir(xdg, &st) == 0) {
        int n = snprintf(out, len, "%s", xdg);
        return n < 0 || (size_t)n >= len ? -ENAMETOOLONG : 0;
    }
    snprintf(out, len, "/tmp/shmtrace-%lu", (unsigned long)geteuid());
    return 0;
}

static int join(char *out, size_t len, const char *dir, const char *base)
{
    int n = snprintf(out, len, "%s/%s", dir, base);
    return n < 0 || (size_t)n >= len ? -ENAMETOOLONG : 0;
}

static bool is_socket(const char *path)
{
    struct stat st;
    return lstat(path, &st) == 0 && S_ISSOCK(st.st_mode);
}

/* Copy name into out after the sockaddr_un length check. */
static int put_name(const char *name, char *out, size_t out_len)
{
    size_t len = strlen(name);
    if (len == 0)
        return -EINVAL;
    if (len >= sizeof(((struct sockaddr_un *)0)->sun_path) || len >= out_len)
        return -ENAMETOOLONG;
    memcpy(out, name, len + 1);
    return 0;
}

/* Flag, then environment; 1 if one of them named the socket. */
static int explicit_name(ipc_sock_kind kind, const char *override, char *out,
                         size_t out_len)
{
    const char *env = getenv(kind == IPC_SOCK_PRODUCER ? IPC_PRODUCER_SOCK_ENV
                                                       : IPC_CONSUMER_SOCK_ENV);
    const char *name = override && *override ? override
                       : env && *env          ? env
                                              : NULL;
    if (!name)
        return 0;
    int rc = put_name(name, out, out_len);
    return rc < 0 ? rc : 1;
}

int ipc_sock_path(ipc_sock_kind kind, const char *override, char *out,
                  size_t out_len)
{
    int rc = explicit_name(kind, override, out, out_len);
    if (rc != 0)
        return rc < 0 ? rc : 0;
    char own[256], sys[256];
    if ((rc = join(sys, sizeof sys, system_dir(), sock_base(kind))) < 0)
        return rc;
    if (geteuid() == 0)
        return put_name(sys, out, out_len);
    char dir[200];
    if ((rc = user_dir(dir, sizeof dir)) < 0 ||
        (rc = join(own, sizeof own, dir, sock_base(kind))) < 0)
        return rc;
    if (!is_socket(own) && is_socket(sys))
        return put_name(sys, out, out_len);
    return put_name(own, out, out_len);
}

int ipc_sock_service_path(ipc_sock_kind kind, const char *override,
                          char *out, size_t out_len, char *err,
                          size_t errlen)
{
    if (err && errlen)
        err[0] = 0;
    int rc = explicit_name(kind, override, out, out_len);
    if (rc != 0)
        return rc < 0 ? rc : 0;
    char dir[200];
    mode_t mode;
    if (geteuid() == 0) {
        if (snprintf(dir, sizeof dir, "%s", system_dir()) >=
            (int)sizeof dir)
            return -ENAMETOOLONG;
        mode = 0755;   /* others reach the sockets; the socket modes rule */
    } else {
        if ((rc = user_dir(dir, sizeof dir)) < 0)
            return rc;
        mode = 0700;
    }
    if (mkdir(dir, mode) < 0 && errno != EEXIST) {
        rc = -errno;
        if (err && errlen)
            snprintf(err, errlen, "cannot create the socket directory %s: "
                     "%s", dir, strerror(-rc));
        return rc;
    }
    struct stat st;
    rc = check_private_dir(dir, &st);
    if (rc < 0) {
        if (err && errlen && rc == -EPERM)
            snprintf(err, errlen, "the socket directory %s is not a "
                     "directory of uid %lu that only it can write (it is %s "
                     "of uid %lu, mode %04o): someone else may have taken "
                     "it; remove it, or choose sockets with --producer-socket"
                     "/--consumer-socket", dir, (unsigned long)geteuid(),
                     S_ISDIR(st.st_mode) ? "a directory"
                                         : ipc_file_kind(st.st_mode),
                     (unsigned long)st.st_uid, (unsigned)(st.st_mode & 07777));
        else if (err && errlen)
            snprintf(err, errlen, "socket directory %s: %s", dir,
                     strerror(-rc));
        return rc;
    }
    char path[256];
    if ((rc = join(path, sizeof path, dir, sock_base(kind))) < 0)
        return rc;
    return put_name(path, out, out_len);
}

int ipc_sock_check_peer(int fd, uid_t *peer_uid)
{
    struct ucred cr;
    socklen_t len = sizeof cr;
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &len) < 0)
        return -errno;
    if (peer_uid)
        *peer_uid = cr.uid;
    return cr.uid == 0 || cr.uid == geteuid() ? 0 : -EPERM;
}

void ipc_sock_describe_error(const char *path, int err, char *out,
                             size_t out_len)
{
    uid_t peer = (uid_t)-1;
    if (err == -EPERM) {
        int fd = ipc_sock_connect(path);
        if (fd >= 0) {
            ipc_sock_check_peer(fd, &peer);
            close(fd);
        }
        char who[32] = "another user";
        if (peer != (uid_t)-1)
            snprintf(who, sizeof who, "uid %lu", (unsigned long)peer);
        snprintf(out, out_len, "the service at %s runs as %s, neither root "
                 "nor you (uid %lu): refusing to use it (another user may "
                 "have taken that socket name; check the path)", path, who,
                 (unsigned long)geteuid());
        return;
    }
    snprintf(out, out_len, "cannot connect to the tracing service at %s: %s",
             path, strerror(err < 0 ? -err : err));
}

/* Fill addr for name; returns the address length or -ENAMETOOLONG. */
static int make_addr(const char *name, struct sockaddr_un *addr)
{
    memset(addr, 0, sizeof *addr);
    addr->sun_family = AF_UNIX;
    size_t len = strlen(name);
    if (len == 0)
        return -EINVAL;
    if (len >= sizeof addr->sun_path)
        return -ENAMETOOLONG;
    memcpy(addr->sun_path, name, len);
    if (name[0] == '@') {
        addr->sun_path[0] = '\0'; /* abstract: no trailing NUL counted */
        return (int)(offsetof(struct sockaddr_un, sun_path) + len);
    }
    return (int)(offsetof(struct sockaddr_un, sun_path) + len + 1);
}

int ipc_sock_connect(const char *path)
{
    struct sockaddr_un addr;
    int alen = make_addr(path, &addr);
    if (alen < 0)
        return alen;
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    /* Blocking connect bounded by SO_SNDTIMEO (Linux applies it to AF_UNIX
     * connect when the listener's backlog is full). */
    struct timeval tv = { .tv_sec = CONNECT_TIMEOUT_S, .tv_usec = 0 };
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    int rc;
    do {
        rc = connect(fd, (struct sockaddr *)&addr, (socklen_t)alen);
    } while (rc < 0 && errno == EINTR);
    if (rc < 0) {
        rc = -errno;
        close(fd);
        return rc;
    }
    memset(&tv, 0, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    rc = ipc__set_nonblock_cloexec(fd);
    if (rc < 0) {
        close(fd);
        return rc;
    }
    return fd;
}

int ipc_sock_listen(const char *path, mode_t mode)
{
    struct sockaddr_un addr;
    int alen = make_addr(path, &addr);
    if (alen < 0)
        return alen;
    bool abstract = path[0] == '@';
    if (!abstract) {
        struct stat st;
        if (lstat(path, &st) == 0) {
            if (!S_ISSOCK(st.st_mode))
                return -EEXIST;
            int probe = ipc_sock_connect(path);
            if (probe >= 0) {
                close(probe);
                return -EADDRINUSE; /* another instance is alive */
            }
            if (probe != -ECONNREFUSED && probe != -ENOENT)
                return probe;
            if (unlink(path) < 0 && errno != ENOENT)
                return -errno; /* stale but not ours to remove */
        }
    }
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0)
        return -errno;
    /* The socket file is born with its mode: a chmod() by name after
     * bind() would follow whatever a writer of the directory swapped in.
     * (umask is process-wide; services listen before starting threads.) */
    int rc;
    mode_t old_mask = umask(~mode & 0777);
    rc = bind(fd, (struct sockaddr *)&addr, (socklen_t)alen);
    int e = errno;
    umask(old_mask);
    if (rc < 0) {
        close(fd);
        return -e;
    }
    if (listen(fd, 64) < 0) {
        rc = -errno;
        if (!abstract)
            unlink(path);
        close(fd);
        return rc;
    }
    return fd;
}
