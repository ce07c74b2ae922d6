/*
 * svc_daemon_fixture.h - a whole shmtraced daemon (svc_daemon: the
 * service core behind its ProducerPort and ConsumerPort) on private
 * sockets in a fresh temporary directory, driven by the test's own
 * ipc_loop. For Check tests that talk to the daemon over real sockets
 * (check_svc_ipc, features/check_svc_ipc_ext); header-only, like the
 * other fixtures (tests/README.md).
 *
 *     svd_fx f;
 *     svd_start(&f, "mytest");   // /tmp/mytestXXXXXX/{p,c}.sock
 *     ... ipc_client_create on f.ppath / f.cpath, svd_run_until(...) ...
 *     svd_stop(&f);              // daemon, loop, sockets, directory
 */
#ifndef TESTS_SVC_DAEMON_FIXTURE_H
#define TESTS_SVC_DAEMON_FIXTURE_H

#include <check.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "svc_ipc.h"

typedef struct {
    char dir[64], ppath[128], cpath[128];
    ipc_loop *loop;
    svc_daemon *d;
} svd_fx;

static inline void svd_start(svd_fx *f, const char *tag)
{
    memset(f, 0, sizeof(*f));
    snprintf(f->dir, sizeof(f->dir), "/tmp/%sXXXXXX", tag);
    ck_assert_ptr_nonnull(mkdtemp(f->dir));
    snprintf(f->ppath, sizeof(f->ppath), "%s/p.sock", f->dir);
    snprintf(f->cpath, sizeof(f->cpath), "%s/c.sock", f->dir);
    f->loop = ipc_loop_create();
    ck_assert_ptr_nonnull(f->loop);
    int err = 0;
    f->d = svc_daemon_create(f->loop, f->ppath, f->cpath, &err);
    ck_assert_msg(f->d != NULL, "daemon: %d", err);
}

/* Destroys the daemon and the loop (the caller destroys its clients
 * first), then removes the sockets and the directory. */
static inline void svd_stop(svd_fx *f)
{
    svc_daemon_destroy(f->d);
    ipc_loop_destroy(f->loop);
    unlink(f->ppath);
    unlink(f->cpath);
    rmdir(f->dir);
}

/* Runs the loop until *flag or max_iters rounds of at most 10 ms. */
static inline void svd_run_until(svd_fx *f, bool *flag, int max_iters)
{
    for (int i = 0; i < max_iters && !*flag; i++)
        ipc_loop_run_once(f->loop, 10);
    ck_assert_msg(*flag, "condition not reached");
}

#endif /* TESTS_SVC_DAEMON_FIXTURE_H */
