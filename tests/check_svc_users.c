/*
 * check_svc_users.c - isolation between users in the service core, and
 * the output-file rule (issue 10), without sockets: the consumer's uid is
 * passed in as the IPC glue passes SO_PEERCRED's.
 *
 *   clone:   only the caller's own sessions (root: all, unless
 *            svc_set_root_access(false)); someone else's session fails
 *            with the very words of a missing one;
 *   names:   unique_session_name is unique per uid;
 *   stats:   sessions and buffers only of sessions the viewer may access
 *            (QueryServiceState's session list too);
 *   limits:  per uid, at most svc_set_uid_limits' sessions (clones not
 *            counted) and KB of buffers (clones counted, and checked:
 *            they copy; the daemon's own uid has the whole budget);
 *            another uid is never held back by them;
 *   files:   output_path only for the daemon's own uid, regular files
 *            only; an fd passed with EnableTracing must be a regular file
 *            (or /dev/null) open for writing; ipc_file_open_output.
 * The end-to-end versions, with a real second uid, are e2e_sec_*.sh.
 */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "ipc.h"
#include "ipc.pb-c.h"
#include "svc_int.h"
#include "svc_fixture.h"
#include "svc_service.h"
#include "tck_main.h"

#define ROOT 0
#define ALICE 1001
#define MALLORY 1002

/* The fixture's one-buffer config, with a unique_session_name (or none). */
static void cfg_named(svf_cfg *c, const char *name)
{
    svf_cfg_init(c, 64, 0);
    c->cfg.unique_session_name = (char *)name;
}

static svc_session *enable(svc_service *svc, uid_t uid, const char *name)
{
    svf_cfg c;
    cfg_named(&c, name);
    char err[256] = "";
    svc_session *s = svc_session_enable_uid(svc, NULL, uid, &c.cfg, -1, err,
                                            sizeof(err));
    ck_assert_msg(s != NULL, "enable %s: %s", name, err);
    return s;
}

static svc_session *clone_as(svc_service *svc, uid_t uid, uint64_t id,
                             const char *name, char *err, size_t len)
{
    err[0] = 0;
    return svc_session_clone_uid(svc, NULL, uid, id, name, err, len);
}

/* ------------------------------------------------------------ clone */

START_TEST(test_users_clone_confined)
{
    svc_service *svc = svc_create(NULL, NULL, ROOT);
    svc_session *a = enable(svc, ALICE, "a");
    svc_session *r = enable(svc, ROOT, "r");
    char err[256], err2[256];
    /* Mallory: by name, by id, by default: nothing. */
    ck_assert_ptr_null(clone_as(svc, MALLORY, 0, "a", err, sizeof err));
    ck_assert_ptr_null(clone_as(svc, MALLORY, 0, "nosuch", err2,
                                sizeof err2));
    ck_assert_str_eq(err, "no tracing session named 'a' to clone among yours "
                     "(it may have ended)");
    ck_assert_str_eq(err2,
                     "no tracing session named 'nosuch' to clone among "
                     "yours (it may have ended)");
    ck_assert_ptr_null(clone_as(svc, MALLORY, svc_session_id(a), NULL, err,
                                sizeof err));
    snprintf(err2, sizeof err2, "no tracing session %llu to clone among yours (it "
             "may have ended)",
             (unsigned long long)svc_session_id(a));
    ck_assert_str_eq(err, err2);
    ck_assert_ptr_null(clone_as(svc, MALLORY, UINT64_MAX, NULL, err,
                                sizeof err));
    ck_assert_str_eq(err, "no tracing session to clone among yours");
    /* Alice: her own, by any selector; never root's. */
    svc_session *c = clone_as(svc, ALICE, 0, "a", err, sizeof err);
    ck_assert_ptr_nonnull(c);
    ck_assert_int_eq(c->consumer_uid, ALICE);
    svc_session_free(svc, c);
    ck_assert_ptr_null(clone_as(svc, ALICE, 0, "r", err, sizeof err));
    ck_assert_ptr_null(clone_as(svc, ALICE, svc_session_id(r), NULL, err,
                                sizeof err));
    c = clone_as(svc, ALICE, UINT64_MAX, NULL, err, sizeof err);
    ck_assert_ptr_nonnull(c);
    ck_assert_str_eq(c->cfg->unique_session_name, "a");
    svc_session_free(svc, c);
    /* Root: its own first, anyone's by default policy... */
    c = clone_as(svc, ROOT, UINT64_MAX, NULL, err, sizeof err);
    ck_assert_ptr_nonnull(c);
    ck_assert_str_eq(c->cfg->unique_session_name, "r");
    svc_session_free(svc, c);
    c = clone_as(svc, ROOT, 0, "a", err, sizeof err);
    ck_assert_ptr_nonnull(c);
    svc_session_free(svc, c);
    /* ... and not once the daemon says so. */
    svc_set_root_access(svc, false);
    ck_assert_ptr_null(clone_as(svc, ROOT, 0, "a", err, sizeof err));
    ck_assert_ptr_null(clone_as(svc, ROOT, svc_session_id(a), NULL, err,
                                sizeof err));
    svc_destroy(svc);
}
END_TEST

START_TEST(test_users_names_per_uid)
{
    svc_service *svc = svc_create(NULL, NULL, ROOT);
    enable(svc, ROOT, "x");
    /* Someone else's name neither leaks nor blocks. */
    svc_session *m = enable(svc, MALLORY, "x");
    ck_assert_ptr_nonnull(m);
    svf_cfg c;
    cfg_named(&c, "x");
    char err[256];
    ck_assert_ptr_null(svc_session_enable_uid(svc, NULL, MALLORY, &c.cfg, -1,
                                              err, sizeof err));
    ck_assert_ptr_nonnull(strstr(err, "already running"));
    /* Each clones its own "x". */
    svc_session *k = clone_as(svc, MALLORY, 0, "x", err, sizeof err);
    ck_assert_ptr_nonnull(k);
    ck_assert_int_eq(k->consumer_uid, MALLORY);
    svc_session_free(svc, k);
    svc_destroy(svc);
}
END_TEST

/* ------------------------------------------------------------ stats */

START_TEST(test_users_stats_confined)
{
    svc_service *svc = svc_create(NULL, NULL, ROOT);
    svc_producer_params pp = { .name = "p" };
    ck_assert_ptr_nonnull(svc_producer_connect(svc, NULL, ALICE, 42, &pp));
    svc_session *a = enable(svc, ALICE, "a");
    enable(svc, ROOT, "r");
    enable(svc, ROOT, "r2");
    struct { uid_t who; bool root_access; uint32_t sessions; } want[] = {
        { MALLORY, true, 0 }, { ALICE, true, 1 }, { ROOT, true, 3 },
        { ROOT, false, 2 }, { ALICE, false, 1 },
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        svc_set_root_access(svc, want[i].root_access);
        /* QueryServiceState lists sessions by the same rule. */
        Perfetto__Protos__TracingServiceState *q =
            svc_query_state(svc, want[i].who, true);
        ck_assert_ptr_nonnull(q);
        ck_assert_uint_eq(q->n_tracing_sessions, want[i].sessions);
        svc_query_free(q);
        Perfetto__Protos__TraceStats *st =
            svc_stats_build_for(svc, NULL, want[i].who);
        ck_assert_ptr_nonnull(st);
        ck_assert_uint_eq(st->tracing_sessions, want[i].sessions);
        ck_assert_uint_eq(st->total_buffers, want[i].sessions);
        ck_assert_uint_eq(st->n_buffer_stats, want[i].sessions);
        ck_assert_uint_eq(st->producers_connected, 1);  /* anyone's */
        svc_stats_free(st);
    }
    /* With a session: its buffers, and its owner's view of the rest. */
    svc_set_root_access(svc, true);
    Perfetto__Protos__TraceStats *st = svc_stats_build(svc, a);
    ck_assert_uint_eq(st->n_buffer_stats, 1);
    ck_assert_uint_eq(st->tracing_sessions, 1);
    svc_stats_free(st);
    svc_destroy(svc);
}
END_TEST

/* ------------------------------------------------------------ files */

static char tmpdir[64];

static void mk_tmpdir(void)
{
    tck_mkdtemp(tmpdir, sizeof tmpdir, "check_svc_users");
}

static void rm_tmpdir(void)
{
    tck_rmdir(tmpdir);
}

static svc_session *enable_file(svc_service *svc, uid_t uid,
                                const char *path, int fd, char *err,
                                size_t len)
{
    svf_cfg c;
    cfg_named(&c, NULL);
    c.cfg.has_write_into_file = true;
    c.cfg.write_into_file = true;
    c.cfg.output_path = (char *)path;
    err[0] = 0;
    return svc_session_enable_uid(svc, NULL, uid, &c.cfg, fd, err, len);
}

START_TEST(test_users_output_path_rule)
{
    mk_tmpdir();
    svc_service *svc = svc_create(NULL, NULL, ROOT);
    char path[128], link[128], err[512];
    snprintf(path, sizeof path, "%s/out", tmpdir);
    /* Another uid: refused, nothing created. */
    ck_assert_ptr_null(enable_file(svc, ALICE, path, -1, err, sizeof err));
    ck_assert_ptr_nonnull(strstr(err, "does not create files for another "
                                      "user"));
    ck_assert_ptr_nonnull(strstr(err, "pass it"));
    ck_assert_int_eq(access(path, F_OK), -1);
    /* The daemon's own uid: created, regular, 0600. */
    svc_session *s = enable_file(svc, ROOT, path, -1, err, sizeof err);
    ck_assert_msg(s != NULL, "%s", err);
    struct stat st;
    ck_assert_int_eq(lstat(path, &st), 0);
    ck_assert(S_ISREG(st.st_mode));
    ck_assert_uint_eq(st.st_mode & 0777, 0600);
    svc_session_free(svc, s);
    /* ... but never through a symlink or into a FIFO. */
    snprintf(link, sizeof link, "%s/link", tmpdir);
    ck_assert_int_eq(symlink(path, link), 0);
    ck_assert_ptr_null(enable_file(svc, ROOT, link, -1, err, sizeof err));
    ck_assert_ptr_nonnull(strstr(err, "symbolic link"));
    snprintf(link, sizeof link, "%s/fifo", tmpdir);
    ck_assert_int_eq(mkfifo(link, 0600), 0);
    ck_assert_ptr_null(enable_file(svc, ROOT, link, -1, err, sizeof err));
    ck_assert_ptr_nonnull(strstr(err, "FIFO"));
    /* Passed fds: a regular file or /dev/null, open for writing. */
    int fd = open(path, O_WRONLY);
    s = enable_file(svc, ALICE, NULL, fd, err, sizeof err);
    ck_assert_msg(s != NULL, "%s", err);
    svc_session_free(svc, s);
    fd = open("/dev/null", O_WRONLY);
    s = enable_file(svc, ALICE, NULL, fd, err, sizeof err);
    ck_assert_msg(s != NULL, "%s", err);
    svc_session_free(svc, s);
    fd = open(path, O_RDONLY);
    ck_assert_ptr_null(enable_file(svc, ALICE, NULL, fd, err, sizeof err));
    ck_assert_ptr_nonnull(strstr(err, "not open for writing"));
    int pfd[2];
    ck_assert_int_eq(pipe(pfd), 0);
    ck_assert_ptr_null(enable_file(svc, ALICE, NULL, pfd[1], err,
                                   sizeof err));
    ck_assert_ptr_nonnull(strstr(err, "FIFO"));
    close(pfd[0]);
    ck_assert_uint_eq(svc_session_count(svc), 0);
    svc_destroy(svc);
    rm_tmpdir();
}
END_TEST

START_TEST(test_users_open_output_regular_only)
{
    mk_tmpdir();
    char p[128], q[128], err[512];
    /* New: created 0600. Existing regular: truncated. */
    snprintf(p, sizeof p, "%s/new", tmpdir);
    int fd = ipc_file_open_output(p, false, err, sizeof err);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(write(fd, "abc", 3), 3);
    close(fd);
    fd = ipc_file_open_output(p, true, err, sizeof err);
    ck_assert_int_ge(fd, 0);
    struct stat st;
    ck_assert_int_eq(fstat(fd, &st), 0);
    ck_assert_int_eq(st.st_size, 0);
    ck_assert_uint_eq(st.st_mode & 0777, 0600);
    ck_assert_int_eq(fcntl(fd, F_GETFL) & (O_ACCMODE | O_NONBLOCK), O_RDWR);
    close(fd);
    /* Everything else: refused, left as it was. */
    snprintf(q, sizeof q, "%s/link", tmpdir);
    ck_assert_int_eq(symlink(p, q), 0);
    ck_assert_int_eq(ipc_file_open_output(q, false, err, sizeof err),
                     -EEXIST);
    ck_assert_ptr_nonnull(strstr(err, "a symbolic link, not a regular"));
    snprintf(q, sizeof q, "%s/dangling", tmpdir);
    ck_assert_int_eq(symlink("/nonexistent/x", q), 0);
    ck_assert_int_eq(ipc_file_open_output(q, false, err, sizeof err),
                     -EEXIST);
    snprintf(q, sizeof q, "%s/dir", tmpdir);
    ck_assert_int_eq(mkdir(q, 0700), 0);
    ck_assert_int_eq(ipc_file_open_output(q, false, err, sizeof err),
                     -EEXIST);
    ck_assert_ptr_nonnull(strstr(err, "a directory"));
    snprintf(q, sizeof q, "%s/fifo", tmpdir);
    ck_assert_int_eq(mkfifo(q, 0600), 0);
    ck_assert_int_eq(ipc_file_open_output(q, false, err, sizeof err),
                     -EEXIST);
    ck_assert_ptr_nonnull(strstr(err, "a FIFO"));
    snprintf(q, sizeof q, "%s/sock", tmpdir);
    int ls = ipc_sock_listen(q, 0600);
    ck_assert_int_ge(ls, 0);
    ck_assert_int_eq(ipc_file_open_output(q, false, err, sizeof err),
                     -EEXIST);
    ck_assert_ptr_nonnull(strstr(err, "a socket"));
    close(ls);
    ck_assert_int_eq(ipc_file_open_output("/dev/null", false, err,
                                          sizeof err), -EEXIST);
    ck_assert_ptr_nonnull(strstr(err, "a character device"));
    ck_assert_int_eq(lstat(p, &st), 0);
    ck_assert(S_ISREG(st.st_mode));
    rm_tmpdir();
}
END_TEST

/* ------------------------------------------------------------ limits */

/* A config of size_kb KB in one buffer, enabled as uid: NULL and err on
 * refusal. */
static svc_session *try_enable(svc_service *svc, uid_t uid, uint32_t size_kb,
                               char *err, size_t len)
{
    svf_cfg c;
    svf_cfg_init(&c, size_kb, 0);
    err[0] = 0;
    return svc_session_enable_uid(svc, NULL, uid, &c.cfg, -1, err, len);
}

/* Five sessions per uid by default (Perfetto's limit): the sixth is
 * refused with the count, the limit and what to do; clones do not count;
 * other uids, root included, go on; a freed session makes room; 0 lifts
 * the limit. */
START_TEST(test_users_sessions_per_uid)
{
    svc_service *svc = svc_create(NULL, NULL, ROOT);
    char err[512];
    svc_session *m[SVC_MAX_SESSIONS_PER_UID_DEFAULT];
    for (unsigned i = 0; i < SVC_MAX_SESSIONS_PER_UID_DEFAULT; i++) {
        m[i] = try_enable(svc, MALLORY, 64, err, sizeof err);
        ck_assert_msg(m[i] != NULL, "session %u: %s", i, err);
    }
    size_t before = svc_session_count(svc);
    ck_assert_ptr_null(try_enable(svc, MALLORY, 64, err, sizeof err));
    ck_assert_msg(strstr(err, "too many tracing sessions for uid 1002: it "
                         "has 5 and a uid may have 5 at once") &&
                  strstr(err, "--max-sessions-per-uid"), "%s", err);
    ck_assert_uint_eq(svc_session_count(svc), before);
    /* Her clones are not sessions she started. */
    svc_session *c = clone_as(svc, MALLORY, svc_session_id(m[0]), NULL, err,
                              sizeof err);
    ck_assert_msg(c != NULL, "%s", err);
    ck_assert_ptr_nonnull(try_enable(svc, ALICE, 64, err, sizeof err));
    ck_assert_ptr_nonnull(try_enable(svc, ROOT, 64, err, sizeof err));
    /* One of hers freed: room for one more, not two. */
    svc_session_free(svc, m[1]);
    ck_assert_ptr_nonnull(try_enable(svc, MALLORY, 64, err, sizeof err));
    ck_assert_ptr_null(try_enable(svc, MALLORY, 64, err, sizeof err));
    svc_set_uid_limits(svc, 0, 0);
    ck_assert_ptr_nonnull(try_enable(svc, MALLORY, 64, err, sizeof err));
    svc_session_free(svc, c);
    svc_destroy(svc);
}
END_TEST

/* KB of buffers per uid: a config past the uid's share is refused naming
 * what it holds and may hold; a clone counts (it copies the buffers) and
 * is refused the same way; another uid still gets its own share. */
START_TEST(test_users_buffers_per_uid)
{
    svc_service *svc = svc_create(NULL, NULL, ROOT);
    svc_set_uid_limits(svc, 0, 1024);
    char err[512];
    svc_session *a = try_enable(svc, MALLORY, 512, err, sizeof err);
    ck_assert_msg(a != NULL, "%s", err);
    ck_assert_ptr_null(try_enable(svc, MALLORY, 768, err, sizeof err));
    ck_assert_msg(strstr(err, "the config needs 768 KB of buffers, but uid "
                         "1002 holds 512 KB in its sessions and clones, and "
                         "a uid may hold 1024 KB") &&
                  strstr(err, "--max-buffers-per-uid"), "%s", err);
    /* Within the share: fine, up to the last KB. */
    svc_session *b = try_enable(svc, MALLORY, 256, err, sizeof err);
    ck_assert_msg(b != NULL, "%s", err);
    /* A clone of a (512 KB) would pass the share: refused, nothing made. */
    size_t before = svc_session_count(svc);
    ck_assert_ptr_null(clone_as(svc, MALLORY, svc_session_id(a), NULL, err,
                                sizeof err));
    ck_assert_msg(strstr(err, "the clone needs 512 KB of buffers, but uid "
                         "1002 holds 768 KB"), "%s", err);
    ck_assert_uint_eq(svc_session_count(svc), before);
    /* A clone of b (256 KB) fits exactly. */
    svc_session *cb = clone_as(svc, MALLORY, svc_session_id(b), NULL, err,
                               sizeof err);
    ck_assert_msg(cb != NULL, "%s", err);
    /* Alice has a share of her own. */
    ck_assert_ptr_nonnull(try_enable(svc, ALICE, 1024, err, sizeof err));
    ck_assert_ptr_null(try_enable(svc, ALICE, 4, err, sizeof err));
    /* The daemon's own uid (root here) has the whole budget: past the
     * share, its clone of Mallory's session too. */
    ck_assert_ptr_nonnull(try_enable(svc, ROOT, 2048, err, sizeof err));
    svc_session *rc = clone_as(svc, ROOT, svc_session_id(a), NULL, err,
                               sizeof err);
    ck_assert_msg(rc != NULL, "%s", err);
    /* Freeing gives the KB back. */
    svc_session_free(svc, cb);
    svc_session_free(svc, b);
    ck_assert_ptr_nonnull(try_enable(svc, MALLORY, 512, err, sizeof err));
    svc_destroy(svc);
}
END_TEST

/* Several users together cannot take the service's whole budget: the
 * last reserved KB are for root and the daemon's own uid, which can still
 * record and clone once the others hold the rest; nobody passes the
 * total. Here the daemon runs as DAEMON, the budget is 4096 KB with 1024
 * kept, and no per-uid share. */
#define DAEMON 999
START_TEST(test_users_buffer_reserve)
{
    svc_service *svc = svc_create(NULL, NULL, DAEMON);
    svc_set_uid_limits(svc, 0, 0);
    svc_set_buffer_budget(svc, 4096, 1024);
    char err[512];
    svc_session *m = try_enable(svc, MALLORY, 2048, err, sizeof err);
    ck_assert_msg(m != NULL, "%s", err);
    svc_session *a = try_enable(svc, ALICE, 1024, err, sizeof err);
    ck_assert_msg(a != NULL, "%s", err);
    /* 3072 KB held: the rest is kept. */
    ck_assert_ptr_null(try_enable(svc, ALICE, 4, err, sizeof err));
    ck_assert_msg(strstr(err, "the config needs 4 KB of buffers, but the "
                         "service holds 3072 KB in all sessions and keeps "
                         "the last 1024 KB of its 4096 KB for root and its "
                         "own uid"), "%s", err);
    ck_assert_ptr_null(clone_as(svc, MALLORY, svc_session_id(m), NULL, err,
                                sizeof err));
    ck_assert_msg(strstr(err, "the clone needs 2048 KB"), "%s", err);
    /* The owner gets in: root and the daemon's uid, up to the total. */
    svc_session *r = try_enable(svc, ROOT, 512, err, sizeof err);
    ck_assert_msg(r != NULL, "%s", err);
    svc_session *d = try_enable(svc, DAEMON, 256, err, sizeof err);
    ck_assert_msg(d != NULL, "%s", err);
    svc_session *rc = clone_as(svc, ROOT, svc_session_id(d), NULL, err,
                               sizeof err);
    ck_assert_msg(rc != NULL, "%s", err);
    ck_assert_ptr_null(try_enable(svc, ROOT, 4, err, sizeof err));
    ck_assert_msg(strstr(err, "holds 4096 KB in all sessions and allows "
                         "4096 KB"), "%s", err);
    /* Freed KB are the others' again, up to the kept part. */
    svc_session_free(svc, m);
    ck_assert_ptr_nonnull(try_enable(svc, ALICE, 1024, err, sizeof err));
    ck_assert_ptr_null(try_enable(svc, MALLORY, 1024, err, sizeof err));
    /* Nothing kept: the others may take it all. */
    svc_set_buffer_budget(svc, 4096, 0);
    ck_assert_ptr_nonnull(try_enable(svc, MALLORY, 1024, err, sizeof err));
    svc_destroy(svc);
}
END_TEST

/* The file system of a descriptor, from /proc (never from the file
 * system itself): FUSE is told apart by its type. */
START_TEST(test_users_fstype_from_proc)
{
    char t[64];
    int fd = open("/proc/self/status", O_RDONLY | O_CLOEXEC);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(ipc_file_fstype(fd, t, sizeof t), 0);
    ck_assert_str_eq(t, "proc");
    char err[512] = "";
    ck_assert_int_eq(ipc_file_check_not_fuse(fd, "x", err, sizeof err), 0);
    ck_assert_str_eq(err, "");
    close(fd);
    char shm[] = "/dev/shm/check_svc_users.XXXXXX";   /* POSIX shm: tmpfs */
    fd = mkstemp(shm);
    ck_assert_int_ge(fd, 0);
    unlink(shm);
    ck_assert_int_eq(ipc_file_fstype(fd, t, sizeof t), 0);
    ck_assert_str_eq(t, "tmpfs");
    ck_assert_int_eq(ipc_file_fstype(fd, t, 4), -ENAMETOOLONG);
    close(fd);
    ck_assert_int_lt(ipc_file_fstype(-1, t, sizeof t), 0);
    ck_assert(ipc_file_fstype_is_fuse("fuse"));
    ck_assert(ipc_file_fstype_is_fuse("fuseblk"));
    ck_assert(ipc_file_fstype_is_fuse("fuse.sshfs"));
    ck_assert(!ipc_file_fstype_is_fuse("fusectl"));
    ck_assert(!ipc_file_fstype_is_fuse("ext4"));
    ck_assert(!ipc_file_fstype_is_fuse("tmpfs"));
}
END_TEST

static Suite *users_suite(void)
{
    Suite *s = suite_create("svc_users");
    TCK_CASE(s, "isolation", test_users_clone_confined,
             test_users_names_per_uid, test_users_stats_confined);
    TCK_CASE(s, "limits", test_users_sessions_per_uid,
             test_users_buffers_per_uid,
             test_users_buffer_reserve);
    TCK_CASE(s, "files", test_users_output_path_rule,
             test_users_open_output_regular_only,
             test_users_fstype_from_proc);
    return s;
}

TCK_MAIN(users_suite)
