/*
 * check_svc_prealloc.c - disk space reserved ahead of a write_into_file
 * session's writes (service/svc_prealloc.c):
 *   - writes get SVC_PREALLOC_STEP reserved past their end, the file's size
 *     untouched (readers see nothing), again when less than half a step is
 *     left;
 *   - never past the session's max_file_size_bytes;
 *   - the trim gives back what lies past the end, and nothing else;
 *   - descriptors that cannot reserve (/dev/null, a pipe) turn it off;
 * (through the service core: check_svc_session's
 * test_file_space_reserved_while_running_and_trimmed_at_stop). Files are
 * made in /tmp; where its filesystem cannot reserve (fallocate fails), the
 * tests that need it say so and pass.
 */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "svc_fixture.h"
#include "svc_prealloc.h"
#include "tck_main.h"

#define KIB 1024
#define MIB (1024 * 1024)

static int temp_file(void)
{
    int mine;
    int fd = svf_temp_file(&mine);
    close(mine);
    return fd;
}

static long long size_of(int fd)
{
    struct stat st;
    ck_assert_int_eq(fstat(fd, &st), 0);
    return (long long)st.st_size;
}

/* Writes n bytes the way a batch goes out: reserve, then write. */
static void write_batch(svc_prealloc *p, int fd, size_t n)
{
    static char buf[256 * KIB];
    memset(buf, 'x', sizeof(buf));
    svc_prealloc_ahead(p, fd, n);
    while (n > 0) {
        size_t k = n < sizeof(buf) ? n : sizeof(buf);
        ck_assert_int_eq(write(fd, buf, k), (ssize_t)k);
        n -= k;
    }
}

START_TEST(test_reserves_ahead_without_changing_the_size)
{
    if (!svf_can_reserve("check_svc_prealloc"))
        return;
    int fd = temp_file();
    /* the file's first bytes are someone else's: the session starts after */
    ck_assert_int_eq(write(fd, "before", 6), 6);
    svc_prealloc p;
    svc_prealloc_init(&p, 6, 0);
    write_batch(&p, fd, 100 * KIB);
    ck_assert_int_eq(size_of(fd), 6 + 100 * KIB);
    ck_assert_int_eq(p.end, 6 + 100 * KIB + SVC_PREALLOC_STEP);
    ck_assert_int_ge(svf_allocated(fd), p.end - 4096);
    /* more than half a step left: nothing new */
    int64_t end = p.end;
    write_batch(&p, fd, SVC_PREALLOC_STEP / 2 - 200 * KIB);
    ck_assert_int_eq(p.end, end);
    /* less than half a step left: a step past the end of this batch */
    write_batch(&p, fd, 300 * KIB);
    ck_assert_int_eq(p.end, p.next + SVC_PREALLOC_STEP);
    ck_assert_int_eq(size_of(fd), p.next);
    ck_assert_int_ge(svf_allocated(fd), p.end - 4096);
    svc_prealloc_trim(&p, fd);
    ck_assert_int_eq(size_of(fd), 6 + 200 * KIB + SVC_PREALLOC_STEP / 2);
    /* given back: what is left is the data, to the block */
    ck_assert_int_lt(svf_allocated(fd), size_of(fd) + 64 * KIB);
    ck_assert(!p.on);
    /* after the trim nothing more is reserved */
    write_batch(&p, fd, 4 * KIB);
    ck_assert_int_lt(svf_allocated(fd), size_of(fd) + 64 * KIB);
    close(fd);
}
END_TEST

START_TEST(test_never_past_the_size_limit)
{
    if (!svf_can_reserve("check_svc_prealloc"))
        return;
    int fd = temp_file();
    svc_prealloc p;
    svc_prealloc_init(&p, 0, 1 * MIB);
    write_batch(&p, fd, 100 * KIB);
    ck_assert_int_eq(p.end, 1 * MIB);
    ck_assert_int_le(svf_allocated(fd), 1 * MIB + 64 * KIB);
    write_batch(&p, fd, 924 * KIB);          /* up to the limit */
    ck_assert_int_eq(p.end, 1 * MIB);
    svc_prealloc_trim(&p, fd);
    ck_assert_int_eq(size_of(fd), 1 * MIB);  /* the data stays */
    close(fd);
}
END_TEST

START_TEST(test_trim_keeps_every_written_byte)
{
    if (!svf_can_reserve("check_svc_prealloc"))
        return;
    int fd = temp_file();
    svc_prealloc p;
    svc_prealloc_init(&p, 0, 0);
    write_batch(&p, fd, 3 * MIB + 5);
    svc_prealloc_trim(&p, fd);
    ck_assert_int_eq(size_of(fd), 3 * MIB + 5);
    char c = 0;
    ck_assert_int_eq(pread(fd, &c, 1, 3 * MIB + 4), 1);
    ck_assert_int_eq(c, 'x');
    /* a second trim, and a trim of a state that never reserved: nothing */
    svc_prealloc_trim(&p, fd);
    svc_prealloc q = {0};
    svc_prealloc_trim(&q, fd);
    ck_assert_int_eq(size_of(fd), 3 * MIB + 5);
    close(fd);
}
END_TEST

START_TEST(test_turns_off_where_it_cannot_reserve)
{
    svc_prealloc p;
    int null = open("/dev/null", O_WRONLY);
    ck_assert_int_ge(null, 0);
    svc_prealloc_init(&p, 0, 0);
    svc_prealloc_ahead(&p, null, 4096);
    ck_assert(!p.on);
    ck_assert(!p.reserved);
    svc_prealloc_trim(&p, null);
    close(null);
    int pfd[2];
    ck_assert_int_eq(pipe(pfd), 0);
    svc_prealloc_init(&p, 0, 0);
    svc_prealloc_ahead(&p, pfd[1], 4096);
    ck_assert(!p.on);
    svc_prealloc_trim(&p, pfd[1]);
    close(pfd[0]);
    close(pfd[1]);
    /* zeroed (a clone's file): never reserves */
    svc_prealloc z = {0};
    int fd = temp_file();
    svc_prealloc_ahead(&z, fd, 4096);
    ck_assert_int_eq(svf_allocated(fd), 0);
    close(fd);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("svc_prealloc");
    TCK_CASE(s, "prealloc", test_reserves_ahead_without_changing_the_size,
             test_never_past_the_size_limit,
             test_trim_keeps_every_written_byte,
             test_turns_off_where_it_cannot_reserve);
    return s;
}

TCK_MAIN(suite)
