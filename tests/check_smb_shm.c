/*
 * check_smb_shm.c - the POSIX shm_open fallback of smb_shm.c (used when
 * memfd_create is missing or refused), white-box through smb_shm_int.h
 * (linked from the internal libshm_core.la); and the huge-page advice on
 * every SMB mapping, read back from /proc/self/smaps, and the 2 MiB pages
 * smb__shm_back_huge gives a fresh SMB.
 */
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/utsname.h>
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

/* The rest of the line that starts with `field` (e.g. "VmFlags:") in
 * /proc/self/smaps for the VMA that holds addr, into out (n bytes): 0, or
 * -1 if there is no such line (no such VMA, no smaps). (Holds, not starts
 * at: the kernel may merge a new anonymous mapping with a neighbour of
 * the same flags.) */
static int smaps_field(const void *addr, const char *field, char *out,
                       size_t n)
{
    FILE *f = fopen("/proc/self/smaps", "r");
    char line[512];
    int in_vma = 0, res = -1;
    if (f == NULL)
        return -1;
    while (fgets(line, sizeof(line), f) != NULL) {
        unsigned long lo, hi;
        if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2 &&
            strchr(line, ':') > strchr(line, ' ')) {
            unsigned long a = (unsigned long)(uintptr_t)addr;
            in_vma = lo <= a && a < hi;
            continue;
        }
        if (in_vma && strncmp(line, field, strlen(field)) == 0) {
            snprintf(out, n, "%s", line + strlen(field));
            res = 0;
            break;
        }
    }
    fclose(f);
    return res;
}

/* Whether the VMA that holds addr lists `flag` in its VmFlags line: 1 yes,
 * 0 no, -1 no such VMA or no smaps. */
static int vma_has_flag(const void *addr, const char *flag)
{
    char flags[256], want[8];
    if (smaps_field(addr, "VmFlags:", flags, sizeof(flags)) < 0)
        return -1;
    snprintf(want, sizeof(want), " %s", flag);
    for (char *p = flags; (p = strstr(p, want)) != NULL; p += strlen(want))
        if (p[strlen(want)] == ' ' || p[strlen(want)] == '\n')
            return 1;
    return 0;
}

START_TEST(test_smb_mappings_advise_huge_pages)
{
#ifdef MADV_HUGEPAGE
    /* A kernel without transparent huge pages refuses the advice (the
     * mapping works all the same): then there is nothing to check. */
    void *probe = mmap(NULL, 4096, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ck_assert_ptr_ne(probe, MAP_FAILED);
    int have = madvise(probe, 4096, MADV_HUGEPAGE) == 0;
    int smaps = vma_has_flag(probe, "hg");
    munmap(probe, 4096);
    if (!have || smaps < 0) {
        fprintf(stderr, "test_smb_mappings_advise_huge_pages: no %s here; "
                "not checked\n", have ? "/proc/self/smaps"
                                       : "MADV_HUGEPAGE in this kernel");
        return;
    }
    /* The producer's mapping (smb_shm_create) and the service's
     * (smb_shm_map of the fd it was sent) both carry the advice, so that
     * with shmem THP in "advise" mode each maps the SMB with huge pages. */
    smb_shm a, b;
    ck_assert_int_eq(smb_shm_create(4u << 20, &a), 0);
    ck_assert_int_eq(vma_has_flag(a.base, "hg"), 1);
    ck_assert_int_eq(smb_shm_map(a.fd, 0, &b), 0);
    ck_assert_int_eq(vma_has_flag(b.base, "hg"), 1);
    /* advice only: the memory is the same, and reads as zeros */
    b.base[(2u << 20) + 5] = 0x5a;
    ck_assert_uint_eq(a.base[(2u << 20) + 5], 0x5a);
    ck_assert_uint_eq(a.base[0], 0);
    smb_shm_unmap(&b);
    smb_shm_unmap(&a);
    /* and the check itself can fail: a plain mapping has no such flag */
    void *plain = mmap(NULL, 4096, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ck_assert_ptr_ne(plain, MAP_FAILED);
    ck_assert_int_eq(vma_has_flag(plain, "hg"), 0);
    munmap(plain, 4096);
#endif
}
END_TEST

/* The kB of `field` (e.g. "ShmemPmdMapped:") in /proc/self/smaps for the
 * mapping holding addr; -1 if not found. */
static long smaps_kb(const void *addr, const char *field)
{
    char v[64];
    return smaps_field(addr, field, v, sizeof(v)) == 0
               ? strtol(v, NULL, 10) : -1;
}

/* The word in brackets of shmem_enabled ("never", "advise", ...), or "". */
static void shmem_thp_mode(char *out, size_t n)
{
    char buf[128] = "";
    FILE *f = fopen("/sys/kernel/mm/transparent_hugepage/shmem_enabled", "r");
    out[0] = '\0';
    if (f == NULL)
        return;
    if (fgets(buf, sizeof(buf), f) != NULL) {
        char *a = strchr(buf, '['), *b = a ? strchr(a, ']') : NULL;
        if (a && b && (size_t)(b - a) < n) {
            memcpy(out, a + 1, (size_t)(b - a - 1));
            out[b - a - 1] = '\0';
        }
    }
    fclose(f);
}

/* SMBs of 2 MiB and more are mapped at 2 MiB boundaries on both sides;
 * with shmem THP "never" smb__shm_back_huge gives a fresh SMB 2 MiB pages
 * (the producer's prefault calls it), which both sides then map whole;
 * with THP on for faults it leaves the SMB to it. The memory stays zero
 * and shared. */
START_TEST(test_smb_back_huge)
{
    char mode[32];
    smb_shm a, b, c;
    shmem_thp_mode(mode, sizeof(mode));
    ck_assert_int_eq(smb_shm_create(4u << 20, &a), 0);
    ck_assert_uint_eq((uintptr_t)a.base % SMB_SHM_HUGE, 0);
    ck_assert_int_eq(smb_shm_map(a.fd, 0, &b), 0);
    ck_assert_uint_eq((uintptr_t)b.base % SMB_SHM_HUGE, 0);
    ck_assert_int_eq(smb_shm_create(3u << 20, &c), 0);  /* one 2 MiB page */
    ck_assert_uint_eq((uintptr_t)c.base % SMB_SHM_HUGE, 0);
    errno = 0;
    bool huge = smb__shm_back_huge(&b);
    int err = errno;
    errno = 0;
    bool huge3 = smb__shm_back_huge(&c);
    int err3 = errno;
    if (strcmp(mode, "never") == 0) {
        /* no free 2 MiB block even after compaction: a busy machine */
        bool busy = (!huge && (err == EAGAIN || err == ENOMEM)) ||
                    (!huge3 && (err3 == EAGAIN || err3 == ENOMEM));
        if (busy) {
            fprintf(stderr, "test_smb_back_huge: no free 2 MiB pages now "
                    "(%s); not checked\n", strerror(huge ? err3 : err));
        } else if (!huge) {
            /* MADV_COLLAPSE is Linux 6.1+; an older kernel refuses it */
            struct utsname u;
            int major = 0, minor = 0;
            ck_assert_int_eq(uname(&u), 0);
            sscanf(u.release, "%d.%d", &major, &minor);
            fprintf(stderr, "test_smb_back_huge: no collapse on Linux %s "
                    "(%s)\n", u.release, strerror(err));
            ck_assert(major < 6 || (major == 6 && minor < 1));
        } else {
            ck_assert(huge3);
            ck_assert_int_eq(smaps_kb(b.base, "ShmemPmdMapped:"), 4096);
            ck_assert_int_eq(smaps_kb(c.base, "ShmemPmdMapped:"), 2048);
            /* the creator's mapping, first touched now, maps them whole */
            volatile uint8_t x = a.base[(2u << 20) + 100];
            (void)x;
            ck_assert_int_ge(smaps_kb(a.base, "ShmemPmdMapped:"), 2048);
        }
    } else {
        ck_assert(!huge);   /* "advise" & co.: faults do it; "deny": no */
        ck_assert(!huge3);
    }
    for (size_t i = 0; i < b.size; i += 4096)
        ck_assert_uint_eq(b.base[i], 0);
    for (size_t i = 0; i < c.size; i += 4096)
        ck_assert_uint_eq(c.base[i], 0);
    b.base[(3u << 20) + 7] = 0x5a;
    ck_assert_uint_eq(a.base[(3u << 20) + 7], 0x5a);
    smb_shm_unmap(&c);
    smb_shm_unmap(&b);
    smb_shm_unmap(&a);
}
END_TEST

static Suite *smb_shm_suite(void)
{
    Suite *s = suite_create("smb_shm");
    TCK_CASE(s, "posix", test_posix_shm_private_and_unlinked,
             test_posix_shm_many_objects_distinct);
    TCK_CASE(s, "huge", test_smb_mappings_advise_huge_pages,
             test_smb_back_huge);
    return s;
}

TCK_MAIN(smb_shm_suite)
