/*
 * ipc_sock.c - socket names, listening and connecting (ipc_sock_*).
 *
 * Names: a --flag value, else Perfetto's environment variables
 * (PERFETTO_PRODUCER_SOCK_NAME / PERFETTO_CONSUMER_SOCK_NAME), else our own
 * defaults $XDG_RUNTIME_DIR/shmtrace-{producer,consumer}.sock or
 * /tmp/shmtrace-{producer,consumer}.sock. We deliberately do not default to
 * Perfetto's /run/perfetto/traced-*.sock or /tmp/perfetto-*: a shmtraced
 * must never steal a system traced's socket by accident; pointing both
 * sides at one name (the environment variables, honoured by Perfetto's
 * binaries and ours alike) is the interop switch. "@name" is a Linux
 * abstract socket, as in Perfetto's sock_utils.
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

int ipc_sock_path(ipc_sock_kind kind, const char *override, char *out,
                  size_t out_len)
{
    const char *env = kind == IPC_SOCK_PRODUCER ? IPC_PRODUCER_SOCK_ENV
                                                : IPC_CONSUMER_SOCK_ENV;
    const char *base = kind == IPC_SOCK_PRODUCER
                           ? IPC_PRODUCER_SOCK_BASENAME
                           : IPC_CONSUMER_SOCK_BASENAME;
    const char *name = NULL;
    char tmp[256];
    if (override && *override) {
        name = override;
    } else if (getenv(env) && *getenv(env)) {
        name = getenv(env);
    } else {
        const char *xdg = getenv("XDG_RUNTIME_DIR");
        struct stat st;
        if (xdg && xdg[0] == '/' && stat(xdg, &st) == 0 &&
            S_ISDIR(st.st_mode)) {
            int n = snprintf(tmp, sizeof tmp, "%s/%s", xdg, base);
            if (n < 0 || (size_t)n >= sizeof tmp)
                return -ENAMETOOLONG;
        } else {
            snprintf(tmp, sizeof tmp, "/tmp/%s", base);
        }
        name = tmp;
    }
    size_t len = strlen(name);
    if (len == 0)
        return -EINVAL;
    if (len >= sizeof(((struct sockaddr_un *)0)->sun_path) || len >= out_len)
        return -ENAMETOOLONG;
    memcpy(out, name, len + 1);
    return 0;
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
    int rc;
    if (bind(fd, (struct sockaddr *)&addr, (socklen_t)alen) < 0) {
        rc = -errno;
        close(fd);
        return rc;
    }
    /* Nobody can connect before listen(), so chmod here is race-free. */
    if (!abstract && chmod(path, mode) < 0) {
        rc = -errno;
        unlink(path);
        close(fd);
        return rc;
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
