/*
 * check_svc_attach.c - Detach/Attach, ChangeTraceConfig, QueryServiceState
 * and cloning a write_into_file session into a file (service/svc_attach.c),
 * on the service core without sockets.
 */
#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>

#include "feat_svc_harness.h"
#include "ipc.pb-c.h"

START_TEST(test_detach_attach_by_uid_and_key)
{
    svc_service *svc = fh_service();
    fh_cfg c;
    fh_cfg_init(&c);
    int ca, cb, cc;
    svc_session *s = svc_session_enable(svc, &ca, &c.cfg, -1, NULL, 0);
    svc_session *s2 = svc_session_enable(svc, &cb, &c.cfg, -1, NULL, 0);
    ck_assert_ptr_nonnull(s);
    ck_assert_ptr_nonnull(s2);
    svc_session_set_consumer_uid(s, 1000);
    svc_session_set_consumer_uid(s2, 1000);
    ck_assert_int_eq(svc_session_detach(svc, s, ""), -EINVAL);
    ck_assert_int_eq(svc_session_detach(svc, s, NULL), -EINVAL);
    ck_assert_int_eq(svc_session_detach(svc, s, "k"), 0);
    ck_assert_ptr_null(svc_session_by_consumer(svc, &ca));
    /* Same uid, same key: refused; another key is fine. */
    ck_assert_int_eq(svc_session_detach(svc, s2, "k"), -EEXIST);
    ck_assert_int_eq(svc_session_detach(svc, s2, "k2"), 0);
    /* Another uid or another key finds nothing. */
    ck_assert_ptr_null(svc_session_attach(svc, &cc, 1001, "k"));
    ck_assert_ptr_null(svc_session_attach(svc, &cc, 1000, "x"));
    ck_assert_ptr_null(svc_session_attach(svc, &cc, 1000, ""));
    ck_assert_ptr_eq(svc_session_attach(svc, &cc, 1000, "k"), s);
    ck_assert_ptr_eq(svc_session_by_consumer(svc, &cc), s);
    ck_assert_ptr_null(svc_session_attach(svc, &cc, 1000, "k")); /* taken */
    /* A session that ends while detached tells nobody, and is still
     * attachable afterwards. */
    svc_session_disable(svc, s2);
    fh_settle(svc, svc_now_ms());
    ck_assert(svc_session_is_disabled(s2));
    ck_assert_ptr_eq(svc_session_attach(svc, &cb, 1000, "k2"), s2);
    /* Clones cannot be detached. */
    svc_session *k = svc_session_clone(svc, NULL, svc_session_id(s), NULL,
                                       NULL, 0);
    ck_assert_ptr_nonnull(k);
    ck_assert_int_eq(svc_session_detach(svc, k, "c"), -EINVAL);
    svc_destroy(svc);
}
END_TEST

START_TEST(test_change_config_widens_producer_filter)
{
    svc_service *svc = fh_service();
    fh_producer(svc, "alpha", "test.ds", 1000);
    fh_producer(svc, "beta", "test.ds", 1000);
    fh_cfg c;
    fh_cfg_init(&c);
    char *only_alpha[] = { "alpha" };
    c.ds.n_producer_name_filter = 1;
    c.ds.producer_name_filter = only_alpha;
    svc_session *s = svc_session_enable(svc, NULL, &c.cfg, -1, NULL, 0);
    ck_assert_ptr_nonnull(s);
    ck_assert_int_eq(FR.start_ds, 1);
    fh_cfg n;
    fh_cfg_init(&n);
    char *both[] = { "alpha", "beta" };
    n.ds.n_producer_name_filter = 2;
    n.ds.producer_name_filter = both;
    n.buf.size_kb = 999;                 /* ignored: only filters change */
    char err[128] = "";
    ck_assert_int_eq(svc_session_change_config(svc, s, &n.cfg, err,
                                               sizeof(err)), 0);
    ck_assert_int_eq(FR.start_ds, 2);    /* beta now */
    const Perfetto__Protos__TraceConfig *now = svc_session_config(s);
    ck_assert_uint_eq(now->data_sources[0]->n_producer_name_filter, 2);
    ck_assert_uint_eq(now->buffers[0]->size_kb, 64);
    /* Again with the same filters: nothing new. */
    ck_assert_int_eq(svc_session_change_config(svc, s, &n.cfg, err,
                                               sizeof(err)), 0);
    ck_assert_int_eq(FR.start_ds, 2);
    /* A regex filter glibc would crash on (a backreference) is refused
     * here as at EnableTracing, and the filters stay as they were. */
    char *crash[] = { "(|)(\\2\\2)*.*" };
    n.ds.n_producer_name_regex_filter = 1;
    n.ds.producer_name_regex_filter = crash;
    char rerr[512] = "";
    ck_assert_int_eq(svc_session_change_config(svc, s, &n.cfg, rerr,
                                               sizeof(rerr)), -EINVAL);
    ck_assert_msg(strstr(rerr, "backreference") != NULL, "%s", rerr);
    ck_assert_uint_eq(svc_session_config(s)->data_sources[0]->
                      n_producer_name_regex_filter, 0);
    n.ds.n_producer_name_regex_filter = 0;
    svc_session_disable(svc, s);
    fh_settle(svc, svc_now_ms());
    ck_assert_int_eq(svc_session_change_config(svc, s, &n.cfg, err,
                                               sizeof(err)), -EINVAL);
    ck_assert(strstr(err, "not running") != NULL);
    svc_destroy(svc);
}
END_TEST

START_TEST(test_query_state)
{
    svc_service *svc = fh_service();
    svc_producer_params pp = { .name = "prodA", .sdk_version = "sdk 1.2" };
    svc_producer *p = svc_producer_connect(svc, NULL, 1000, 77, &pp);
    ck_assert_ptr_nonnull(p);
    /* A descriptor with a field we do not model (track_event_descriptor,
     * 6): it must come back byte for byte. */
    Perfetto__Protos__DataSourceDescriptor d =
        PERFETTO__PROTOS__DATA_SOURCE_DESCRIPTOR__INIT;
    d.name = "track_event";
    uint8_t raw[256];
    size_t n = perfetto__protos__data_source_descriptor__pack(&d, raw);
    static const uint8_t extra[] = { 0x32, 0x05, 0x0a, 0x03, 'c', 'a', 't' };
    memcpy(raw + n, extra, sizeof(extra));
    n += sizeof(extra);
    Perfetto__Protos__DataSourceDescriptor *du =
        perfetto__protos__data_source_descriptor__unpack(NULL, n, raw);
    ck_assert_ptr_nonnull(du);
    ck_assert_int_eq(svc_producer_register_ds(svc, p, du, NULL, 0), 0);
    perfetto__protos__data_source_descriptor__free_unpacked(du, NULL);
    fh_cfg c;
    fh_cfg_init(&c);
    c.cfg.unique_session_name = "mine";
    svc_session *s1 = svc_session_enable(svc, NULL, &c.cfg, -1, NULL, 0);
    c.cfg.unique_session_name = "theirs";
    svc_session *s2 = svc_session_enable(svc, NULL, &c.cfg, -1, NULL, 0);
    svc_session_set_consumer_uid(s1, 1000);
    svc_session_set_consumer_uid(s2, 2000);

    Perfetto__Protos__TracingServiceState *st =
        svc_query_state(svc, 1000, false);
    ck_assert_ptr_nonnull(st);
    ck_assert_int_eq(st->num_sessions, 2);
    ck_assert_int_eq(st->num_sessions_started, 2);
    ck_assert(st->supports_tracing_sessions);
    ck_assert(strstr(st->tracing_service_version, "shmtraced") != NULL);
    ck_assert_uint_eq(st->n_producers, 1);
    ck_assert_str_eq(st->producers[0]->name, "prodA");
    ck_assert_str_eq(st->producers[0]->sdk_version, "sdk 1.2");
    ck_assert_int_eq(st->producers[0]->pid, 77);
    ck_assert_int_eq(st->producers[0]->uid, 1000);
    ck_assert_uint_eq(st->n_data_sources, 1);
    ck_assert_int_eq(st->data_sources[0]->producer_id, svc_producer_id(p));
    uint8_t back[256];
    size_t m = perfetto__protos__data_source_descriptor__pack(
        st->data_sources[0]->ds_descriptor, back);
    ck_assert_uint_eq(m, n);
    ck_assert_mem_eq(back, raw, n);
    ck_assert_uint_eq(st->n_tracing_sessions, 1);      /* only its own */
    ck_assert_str_eq(st->tracing_sessions[0]->unique_session_name, "mine");
    ck_assert_str_eq(st->tracing_sessions[0]->state, "STARTED");
    ck_assert(st->tracing_sessions[0]->is_started);
    ck_assert_uint_eq(st->tracing_sessions[0]->n_buffer_size_kb, 1);
    ck_assert_uint_eq(st->tracing_sessions[0]->buffer_size_kb[0], 64);
    ck_assert_int_gt(st->tracing_sessions[0]->start_realtime_ns, 0);
    /* It packs (the IPC reply) */
    Perfetto__Protos__QueryServiceStateResponse r =
        PERFETTO__PROTOS__QUERY_SERVICE_STATE_RESPONSE__INIT;
    r.service_state = st;
    ck_assert_uint_gt(perfetto__protos__query_service_state_response__get_packed_size(&r), 0);
    svc_query_free(st);
    st = svc_query_state(svc, 0, true);                /* root, sessions */
    ck_assert_uint_eq(st->n_tracing_sessions, 2);
    ck_assert_uint_eq(st->n_producers, 0);
    ck_assert_uint_eq(st->n_data_sources, 0);
    svc_query_free(st);
    svc_destroy(svc);
}
END_TEST

START_TEST(test_bugreport_session_choice)
{
    svc_service *svc = fh_service();
    fh_cfg c;
    fh_cfg_init(&c);
    ck_assert_ptr_nonnull(svc_session_enable(svc, NULL, &c.cfg, -1, NULL,
                                             0));
    ck_assert_uint_eq(svc_bugreport_session_id(svc), 0);   /* no score */
    c.cfg.has_bugreport_score = true;
    c.cfg.bugreport_score = 5;
    c.cfg.bugreport_filename = "a.pftrace";
    svc_session *s5 = svc_session_enable(svc, NULL, &c.cfg, -1, NULL, 0);
    c.cfg.bugreport_score = 9;
    svc_session *s9 = svc_session_enable(svc, NULL, &c.cfg, -1, NULL, 0);
    c.cfg.bugreport_score = 9;
    ck_assert_ptr_nonnull(svc_session_enable(svc, NULL, &c.cfg, -1, NULL,
                                             0));
    ck_assert_uint_eq(svc_bugreport_session_id(svc), svc_session_id(s9));
    svc_session_disable(svc, s9);
    fh_settle(svc, svc_now_ms());
    ck_assert_uint_ne(svc_bugreport_session_id(svc), svc_session_id(s9));
    ck_assert_uint_ne(svc_bugreport_session_id(svc), svc_session_id(s5));
    Perfetto__Protos__TracingServiceState *st = svc_query_state(svc, 0, true);
    size_t scored = 0;
    for (size_t i = 0; i < st->n_tracing_sessions; i++)
        if (st->tracing_sessions[i]->has_bugreport_score) {
            scored++;
            ck_assert_str_eq(st->tracing_sessions[i]->bugreport_filename,
                             "a.pftrace");
        }
    ck_assert_uint_eq(scored, 3);
    svc_query_free(st);
    /* Filenames are restricted as in Perfetto. */
    c.cfg.bugreport_filename = "../etc/x";
    char err[128] = "";
    ck_assert_ptr_null(svc_session_enable(svc, NULL, &c.cfg, -1, err,
                                          sizeof(err)));
    ck_assert(strstr(err, "bugreport_filename") != NULL);
    svc_destroy(svc);
}
END_TEST

static size_t file_size(int fd)
{
    struct stat sb;
    ck_assert_int_eq(fstat(fd, &sb), 0);
    return (size_t)sb.st_size;
}

/* An unlinked temporary file, read-write. */
static int temp_file(void)
{
    char path[] = "/tmp/feat_clone.XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    unlink(path);
    return fd;
}

/* A write_into_file session writing into fd (owned by it), or with fd -1
 * into output_path; its buffers written to the file once. */
static svc_session *file_session(svc_service *svc, int fd, char *output_path)
{
    fh_cfg c;
    fh_cfg_init(&c);
    c.cfg.has_write_into_file = true;
    c.cfg.write_into_file = true;
    c.cfg.output_path = output_path;
    char err[300] = "";
    svc_session *s = svc_session_enable(svc, NULL, &c.cfg, fd, err,
                                        sizeof(err));
    ck_assert_msg(s != NULL, "%s", err);
    ck_assert_int_eq(svc_session_write_file(svc, s), 0);
    return s;
}

/* The n bytes at offset ao of fa are those at offset bo of fb. */
static void assert_same_bytes(int fa, off_t ao, int fb, off_t bo, size_t n)
{
    uint8_t *x = malloc(n), *y = malloc(n);
    ck_assert_int_eq(pread(fa, x, n, ao), (ssize_t)n);
    ck_assert_int_eq(pread(fb, y, n, bo), (ssize_t)n);
    ck_assert_mem_eq(x, y, n);
    free(x);
    free(y);
}

START_TEST(test_clone_of_file_session_goes_into_fd)
{
    svc_service *svc = fh_service();
    int fa = temp_file(), fb = temp_file();
    svc_session *s = file_session(svc, dup(fa), NULL);
    size_t na = file_size(fa);
    ck_assert_uint_gt(na, 0);
    svc_session *k = svc_session_clone(svc, NULL, svc_session_id(s), NULL,
                                       NULL, 0);
    ck_assert_ptr_nonnull(k);
    char err[128] = "";
    ck_assert_int_eq(svc_session_clone_file(svc, k, dup(fb), err,
                                            sizeof(err)), 1);
    size_t nb = file_size(fb);
    ck_assert_uint_gt(nb, na);           /* the source's file, then more */
    assert_same_bytes(fa, 0, fb, 0, na);
    /* A source without a file: the fd is closed, read over IPC (0). */
    fh_cfg c2;
    fh_cfg_init(&c2);
    svc_session *s2 = svc_session_enable(svc, NULL, &c2.cfg, -1, NULL, 0);
    svc_session *k2 = svc_session_clone(svc, NULL, svc_session_id(s2), NULL,
                                        NULL, 0);
    ck_assert_ptr_nonnull(k2);
    ck_assert_int_eq(svc_session_clone_file(svc, k2, dup(fb), err,
                                            sizeof(err)), 0);
    ck_assert_int_eq(svc_session_clone_file(svc, k2, -1, err,
                                            sizeof(err)), 0);
    /* A file session cloned without an fd: a clear error. */
    svc_session *k3 = svc_session_clone(svc, NULL, svc_session_id(s), NULL,
                                        NULL, 0);
    ck_assert_int_eq(svc_session_clone_file(svc, k3, -1, err, sizeof(err)),
                     -EINVAL);
    ck_assert(strstr(err, "file descriptor") != NULL);
    close(fa);
    close(fb);
    svc_destroy(svc);
}
END_TEST

/* A file session's fd positioned after another user's data (written
 * by this test): the session writes after it, and a clone copies only
 * what the session wrote, read back through the session's own fd. */
static const char SECRET[] = "not the session's: must never reach a clone";

static int file_with_secret(char *path, int flags)
{
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(write(fd, SECRET, sizeof(SECRET)),
                     (ssize_t)sizeof(SECRET));
    close(fd);
    fd = open(path, flags);
    ck_assert_int_ge(fd, 0);
    unlink(path);
    if (!(flags & O_APPEND))
        ck_assert_int_eq(lseek(fd, 0, SEEK_END), (off_t)sizeof(SECRET));
    return fd;
}

static bool holds_secret(int fd)
{
    size_t n = file_size(fd);
    char *x = malloc(n + 1);
    ck_assert_int_eq(pread(fd, x, n, 0), (ssize_t)n);
    x[n] = 0;
    bool hit = memmem(x, n, SECRET, sizeof(SECRET) - 1) != NULL;
    free(x);
    return hit;
}

START_TEST(test_clone_reads_back_only_what_the_session_wrote)
{
    /* 0: O_RDWR at the end; 1: O_RDWR | O_APPEND at offset 0; 2: O_WRONLY
     * at the end (cannot be read back: refused, nothing copied) */
    static const int flags[3] = {O_RDWR, O_RDWR | O_APPEND, O_WRONLY};
    for (int k = 0; k < 3; k++) {
        svc_service *svc = fh_service();
        ck_assert_int_eq(svc_set_file_writer_thread(svc, k != 1), 0);
        char a[] = "/tmp/feat_cloneS.XXXXXX";
        int fa = file_with_secret(a, flags[k]);
        int fb = temp_file();
        svc_session *s = file_session(svc, dup(fa), NULL);
        size_t na = file_size(fa) - sizeof(SECRET);
        ck_assert_uint_gt(na, 0);
        svc_session *clone = svc_session_clone(svc, NULL, svc_session_id(s),
                                               NULL, NULL, 0);
        ck_assert_ptr_nonnull(clone);
        char err[300] = "";
        int rc = svc_session_clone_file(svc, clone, dup(fb), err,
                                        sizeof(err));
        ck_assert(!holds_secret(fb));
        if (k == 2) {
            ck_assert_int_eq(rc, -EBADF);
            ck_assert_msg(strstr(err, "write-only") != NULL, "%s", err);
            ck_assert_uint_eq(file_size(fb), 0);
        } else {
            ck_assert_msg(rc == 1, "case %d: %d %s", k, rc, err);
            /* the session's bytes, as they are in its file after the
             * other data, then the clone's own */
            ck_assert_uint_gt(file_size(fb), na);
            assert_same_bytes(fa, sizeof(SECRET), fb, 0, na);
        }
        close(fa);
        close(fb);
        svc_destroy(svc);
    }
}
END_TEST

/* A session whose file the service opened itself (output_path, the
 * daemon's own uid): it opens it read-write, so the clone can read it. */
START_TEST(test_clone_of_an_output_path_session)
{
    svc_service *svc = fh_service();
    char dir[] = "/tmp/feat_opath.XXXXXX", path[96], err[300] = "";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(path, sizeof(path), "%s/out.pftrace", dir);
    int fb = temp_file();
    svc_session *s = file_session(svc, -1, path);
    int fa = open(path, O_RDONLY);
    ck_assert_int_ge(fa, 0);
    size_t na = file_size(fa);
    ck_assert_uint_gt(na, 0);
    svc_session *clone = svc_session_clone(svc, NULL, svc_session_id(s),
                                           NULL, NULL, 0);
    ck_assert_ptr_nonnull(clone);
    ck_assert_msg(svc_session_clone_file(svc, clone, dup(fb), err,
                                         sizeof(err)) == 1, "%s", err);
    ck_assert_uint_gt(file_size(fb), na);
    assert_same_bytes(fa, 0, fb, 0, na);
    close(fa);
    close(fb);
    svc_destroy(svc);
    ck_assert_int_eq(unlink(path), 0);
    ck_assert_int_eq(rmdir(dir), 0);
}
END_TEST

/* The source's file cut short after it was written: a clear error. */
START_TEST(test_clone_of_a_truncated_file_says_so)
{
    svc_service *svc = fh_service();
    int fa = temp_file(), fb = temp_file();
    svc_session *s = file_session(svc, dup(fa), NULL);
    size_t na = file_size(fa);
    ck_assert_int_eq(ftruncate(fa, (off_t)(na / 2)), 0);
    svc_session *clone = svc_session_clone(svc, NULL, svc_session_id(s),
                                           NULL, NULL, 0);
    ck_assert_ptr_nonnull(clone);
    char err[300] = "", want[300];
    ck_assert_int_eq(svc_session_clone_file(svc, clone, dup(fb), err,
                                            sizeof(err)), -EIO);
    snprintf(want, sizeof(want), "holds %zu of the %zu bytes", na / 2, na);
    ck_assert_msg(strstr(err, want) != NULL, "%s", err);
    close(fa);
    close(fb);
    svc_destroy(svc);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("svc_attach");
    TCase *tc = tcase_create("attach");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_detach_attach_by_uid_and_key);
    tcase_add_test(tc, test_change_config_widens_producer_filter);
    tcase_add_test(tc, test_query_state);
    tcase_add_test(tc, test_clone_of_file_session_goes_into_fd);
    tcase_add_test(tc, test_clone_reads_back_only_what_the_session_wrote);
    tcase_add_test(tc, test_clone_of_a_truncated_file_says_so);
    tcase_add_test(tc, test_clone_of_an_output_path_session);
    tcase_add_test(tc, test_bugreport_session_choice);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
