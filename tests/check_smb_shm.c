/*
 * check_smb_shm.c - the POSIX shm_open fallback of smb_shm.c (used when
 * memfd_create is missing or refused), white-box through smb_shm_int.h
 * (linked from the internal libshm_core.la).
 */
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "smb_shm_int.h"
#include "tck_main.h"

/* Names of shmtrace objects currently in /dev/shm (0 if none). */
static int count_shmtrace_objects(void)
{
    DIR *d = opendir("/dev/shm");
    struct dirent *e;
    int n = 0;
    if (d == NULL)
        return 0;
    while ((e = readdir(d)) != NULL)
        if (strncmp(e->d_name, "shmtrace-", 9) == 0)
            n++;
    closedir(d);
    return n;
}

START_TEST(test_posix_shm_private_and_unlinked)
{
    smb_shm a, b;
    struct stat st;
    int before = count_shmtrace_objects();
    ck_assert_int_eq(smb__shm_create_posix(3 * 4096, &a), 0);
    ck_assert_ptr_nonnull(a.base);
    ck_assert_uint_eq(a.size, 3 * 4096);
    ck_assert_int_ge(a.fd, 0);
    /* unlinked at once: nothing left behind in the namespace */
    ck_assert_int_eq(count_shmtrace_objects(), before);
    ck_assert_int_eq(fstat(a.fd, &st), 0);
    ck_assert_uint_eq(st.st_mode & 0777, 0600);
    ck_assert_int_eq(fcntl(a.fd, F_GETFD) & FD_CLOEXEC, FD_CLOEXEC);
    for (size_t i = 0; i < a.size; i++)
        ck_assert_uint_eq(a.base[i], 0);
    /* It cannot be sealed against shrinking, so a service requiring seals
     * refuses it (the producer could shrink it under the service). */
    ck_assert_int_eq(smb_shm_map(a.fd, SMB_SHM_REQUIRE_SEALS, &b), -EPERM);
    /* mapped by the peer from the fd: same memory */
    ck_assert_int_eq(smb_shm_map(a.fd, 0, &b), 0);
    a.base[4096] = 0x77;
    ck_assert_uint_eq(b.base[4096], 0x77);
    smb_shm_unmap(&a);
    smb_shm_unmap(&b);
}
END_TEST

START_TEST(test_posix_shm_many_objects_distinct)
{
    smb_shm s[8];
    for (int i = 0; i < 8; i++) {
        ck_assert_int_eq(smb__shm_create_posix(4096, &s[i]), 0);
        s[i].base[0] = (uint8_t)i;
    }
    for (int i = 0; i < 8; i++) {
        ck_assert_uint_eq(s[i].base[0], i);
        smb_shm_unmap(&s[i]);
    }
}
END_TEST

static Suite *smb_shm_suite(void)
{
    Suite *s = suite_create("smb_shm");
    TCK_CASE(s, "posix", test_posix_shm_private_and_unlinked,
             test_posix_shm_many_objects_distinct);
    return s;
}

TCK_MAIN(smb_shm_suite)
