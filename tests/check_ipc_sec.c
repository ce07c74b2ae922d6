/*
 * check_ipc_sec.c - the socket trust rules of ipc_sock.c with a real
 * second uid (issue 10): a client trusts only a daemon running as root or
 * as its own euid (SO_PEERCRED), and a daemon's default directory is one
 * only its user can write.
 *
 * The second uid is SEC_UID (64001: unused, and not the 64000 the e2e
 * scripts use, so both can run at once); it is taken with setresgid/
 * setresuid in a forked child, which reports through its exit status.
 * Needs root: as anyone else the program exits 77 (SKIP) saying why.
 */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ipc.h"
#include "tck_main.h"

#define SEC_UID 64001

static char tmpdir[64];

/* A temp dir the second uid can traverse. */
static void mk_tmpdir(void)
{
    tck_mkdtemp(tmpdir, sizeof tmpdir, "check_ipc_sec");
    ck_assert_int_eq(chmod(tmpdir, 0755), 0);
}

static void rm_tmpdir(void)
{
    char user_tmp[64];
    snprintf(user_tmp, sizeof user_tmp, "/tmp/shmtrace-%d", SEC_UID);
    tck_rmdir(tmpdir);
    tck_rmdir(user_tmp);
}

/* Become SEC_UID for good (in a child). */
static void become_user(void)
{
    if (setgroups(0, NULL) < 0 || setresgid(SEC_UID, SEC_UID, SEC_UID) < 0 ||
        setresuid(SEC_UID, SEC_UID, SEC_UID) < 0)
        _exit(90);
}

static int wait_child(pid_t pid)
{
    int st;
    ck_assert_int_eq(waitpid(pid, &st, 0), pid);
    ck_assert(WIFEXITED(st));
    return WEXITSTATUS(st);
}

/* The second uid connects to root's socket: trusted (root). */
START_TEST(test_sec_user_trusts_root)
{
    mk_tmpdir();
    char path[128];
    snprintf(path, sizeof path, "%s/root.sock", tmpdir);
    int ls = ipc_sock_listen(path, 0666);
    ck_assert_int_ge(ls, 0);
    pid_t pid = fork();
    if (pid == 0) {
        become_user();
        int fd = ipc_sock_connect(path);
        if (fd < 0)
            _exit(10);
        uid_t peer = 12345;
        _exit(ipc_sock_check_peer(fd, &peer) == 0 && peer == 0 ? 0 : 11);
    }
    ck_assert_int_eq(wait_child(pid), 0);
    close(ls);
    rm_tmpdir();
}
END_TEST

/* Root connects to the second uid's daemon: refused, and told why. */
START_TEST(test_sec_root_refuses_user_daemon)
{
    mk_tmpdir();
    char dir[128], path[160];
    snprintf(dir, sizeof dir, "%s/user", tmpdir);
    ck_assert_int_eq(mkdir(dir, 0755), 0);
    ck_assert_int_eq(chown(dir, SEC_UID, SEC_UID), 0);
    snprintf(path, sizeof path, "%s/user.sock", dir);
    int pipefd[2];
    ck_assert_int_eq(pipe(pipefd), 0);
    pid_t pid = fork();
    if (pid == 0) {
        become_user();
        int ls = ipc_sock_listen(path, 0666);
        char c = ls >= 0 ? 'y' : 'n';
        if (write(pipefd[1], &c, 1) != 1)
            _exit(1);
        pause();                     /* until killed */
        _exit(0);
    }
    char c = 0;
    ck_assert_int_eq(read(pipefd[0], &c, 1), 1);
    ck_assert_int_eq(c, 'y');
    int fd = ipc_sock_connect(path);
    ck_assert_int_ge(fd, 0);
    uid_t peer = 0;
    ck_assert_int_eq(ipc_sock_check_peer(fd, &peer), -EPERM);
    ck_assert_uint_eq(peer, SEC_UID);
    close(fd);
    ipc_loop *loop = ipc_loop_create();
    int err = 0;
    ck_assert_ptr_null(ipc_client_connect(loop, path, "ConsumerPort", NULL,
                                          NULL, &err));
    ck_assert_int_eq(err, -EPERM);
    char msg[512], want[64];
    ipc_sock_describe_error(path, err, msg, sizeof msg);
    snprintf(want, sizeof want, "runs as uid %d, neither root nor you",
             SEC_UID);
    ck_assert_msg(strstr(msg, want) != NULL, "%s", msg);
    ipc_loop_destroy(loop);
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    close(pipefd[0]);
    close(pipefd[1]);
    rm_tmpdir();
}
END_TEST

/* The second uid's daemon: its $XDG_RUNTIME_DIR only if it is its own and
 * private, else /tmp/shmtrace-UID, created 0700, refused when squatted. */
START_TEST(test_sec_user_service_dir)
{
    mk_tmpdir();
    char xdg[128], want[192];
    snprintf(xdg, sizeof xdg, "%s/xdg", tmpdir);
    ck_assert_int_eq(mkdir(xdg, 0700), 0);
    ck_assert_int_eq(chown(xdg, SEC_UID, SEC_UID), 0);
    unsetenv("PERFETTO_PRODUCER_SOCK_NAME");
    unsetenv("PERFETTO_CONSUMER_SOCK_NAME");
    char tmpd[64];
    snprintf(tmpd, sizeof tmpd, "/tmp/shmtrace-%d", SEC_UID);
    rmdir(tmpd);
    pid_t pid = fork();
    if (pid == 0) {
        become_user();
        char p[108], err[512];
        setenv("XDG_RUNTIME_DIR", xdg, 1);
        snprintf(want, sizeof want, "%s/shmtrace-producer.sock", xdg);
        if (ipc_sock_service_path(IPC_SOCK_PRODUCER, NULL, p, sizeof p, err,
                                  sizeof err) < 0 || strcmp(p, want))
            _exit(10);
        if (ipc_sock_path(IPC_SOCK_PRODUCER, NULL, p, sizeof p) < 0 ||
            strcmp(p, want))
            _exit(11);
        /* Not its own: root's tmpdir as XDG -> /tmp/shmtrace-UID. */
        setenv("XDG_RUNTIME_DIR", tmpdir, 1);
        snprintf(want, sizeof want, "%s/shmtrace-consumer.sock", tmpd);
        if (ipc_sock_service_path(IPC_SOCK_CONSUMER, NULL, p, sizeof p, err,
                                  sizeof err) < 0 || strcmp(p, want))
            _exit(12);
        _exit(0);
    }
    ck_assert_int_eq(wait_child(pid), 0);
    struct stat st;
    ck_assert_int_eq(lstat(tmpd, &st), 0);
    ck_assert(S_ISDIR(st.st_mode));
    ck_assert_uint_eq(st.st_uid, SEC_UID);
    ck_assert_uint_eq(st.st_mode & 0777, 0700);
    /* Squatted (root's here; another user's alike): refused. */
    ck_assert_int_eq(rmdir(tmpd), 0);
    ck_assert_int_eq(mkdir(tmpd, 0700), 0);
    pid = fork();
    if (pid == 0) {
        become_user();
        unsetenv("XDG_RUNTIME_DIR");
        char p[108], err[512];
        int rc = ipc_sock_service_path(IPC_SOCK_CONSUMER, NULL, p, sizeof p,
                                       err, sizeof err);
        _exit(rc == -EPERM && strstr(err, "someone else may have taken it")
              ? 0 : 13);
    }
    ck_assert_int_eq(wait_child(pid), 0);
    rm_tmpdir();
}
END_TEST

/* Root's daemon: the system directory, refused when it is not root's or
 * others can write it. */
START_TEST(test_sec_root_service_dir)
{
    mk_tmpdir();
    char sys[128], p[108], err[512], want[192];
    snprintf(sys, sizeof sys, "%s/run", tmpdir);
    setenv("SHMTRACE_SYSTEM_SOCK_DIR", sys, 1);
    unsetenv("PERFETTO_PRODUCER_SOCK_NAME");
    ck_assert_int_eq(ipc_sock_service_path(IPC_SOCK_PRODUCER, NULL, p,
                                           sizeof p, err, sizeof err), 0);
    snprintf(want, sizeof want, "%s/shmtrace-producer.sock", sys);
    ck_assert_str_eq(p, want);
    struct stat st;
    ck_assert_int_eq(lstat(sys, &st), 0);
    ck_assert_uint_eq(st.st_mode & 0777, 0755);
    ck_assert_int_eq(chmod(sys, 0777), 0);
    ck_assert_int_eq(ipc_sock_service_path(IPC_SOCK_PRODUCER, NULL, p,
                                           sizeof p, err, sizeof err),
                     -EPERM);
    ck_assert_int_eq(chmod(sys, 0755), 0);
    ck_assert_int_eq(chown(sys, SEC_UID, SEC_UID), 0);
    ck_assert_int_eq(ipc_sock_service_path(IPC_SOCK_PRODUCER, NULL, p,
                                           sizeof p, err, sizeof err),
                     -EPERM);
    ck_assert_msg(strstr(err, sys) != NULL, "%s", err);
    unsetenv("SHMTRACE_SYSTEM_SOCK_DIR");
    rm_tmpdir();
}
END_TEST

static Suite *sec_suite(void)
{
    Suite *s = suite_create("ipc_sec");
    TCK_CASE(s, "sockets", test_sec_user_trusts_root,
             test_sec_root_refuses_user_daemon, test_sec_user_service_dir,
             test_sec_root_service_dir);
    return s;
}

int main(void)
{
    if (geteuid() != 0) {
        fprintf(stderr, "SKIP: check_ipc_sec needs root to act as a second "
                "uid (%d)\n", SEC_UID);
        return 77;
    }
    if (getpwuid(SEC_UID) != NULL) {
        fprintf(stderr, "SKIP: uid %d belongs to an account here\n",
                SEC_UID);
        return 77;
    }
    return tck_run(sec_suite());
}
