/*
 * smb_shm.c - creating and mapping the shared-memory object of an SMB.
 *
 * Creation: memfd_create("shmtrace_smb", MFD_CLOEXEC | MFD_ALLOW_SEALING),
 * fchmod 0600 (memfds start as 0777), ftruncate, seal F_SEAL_SHRINK |
 * F_SEAL_GROW | F_SEAL_SEAL (so the peer can trust the size it maps), mmap
 * MAP_SHARED. Without memfd (or if the kernel
 * refuses it) a POSIX shm object is created with a random name, O_EXCL,
 * mode 0600, and unlinked at once: the fd is the only handle, so nothing
 * outlives the processes. Memory from ftruncate reads as zeros, which the
 * ABI defines as "all pages free".
 *
 * Mapping: fstat gives the size, which must be a non-zero multiple of 4096.
 * With SMB_SHM_REQUIRE_SEALS the fd must carry the shrink and grow seals
 * whenever the kernel knows seals (F_GET_SEALS succeeds): an unsealed
 * object, e.g. from shm_open, could be shrunk by the (untrusted) producer
 * and fault the service. Only where F_GET_SEALS itself fails is the fd
 * accepted unsealed.
 *
 * Huge pages: every mapping, the creator's and the peer's, gets
 * MADV_HUGEPAGE. Where shmem THP is in "advise" mode
 * (/sys/kernel/mm/transparent_hugepage/shmem_enabled; Debian's default is
 * "never", and there the advice changes nothing) an SMB of 2 MiB or more
 * is then backed and mapped by 2 MiB pages. Measured 2026-12-04 on the
 * project's 2-core VM: populating a 4 MiB SMB took 0.2-0.4 ms instead of
 * 5-7, and the peer's first read of each 4 KiB 0.05 us instead of 1.2-2.3
 * (one fault per 2 MiB instead of per 4 KiB, each also a shadow-paging
 * exit to the host there). Through shmtraced, one daemon, the setting
 * toggled between recordings (perfetto consumer, 5-6 recordings each way,
 * CPU per packet from the threads' schedstat): 64 B x4, 64 MB per
 * recording: service 52-59 instead of 79-91 ns, producers 125-143 instead
 * of 161-171; 1 KiB x4, 256 MB: service 374-416 instead of 450-515,
 * producers 371-402 instead of 508-619; 64 B x1: service 51-54 instead of
 * 55-63. In a small SMB (below 2 MiB: Perfetto's default of 256 KiB) no
 * huge page fits, and nothing changes. It changes no bound: the peer
 * maps the sealed size only; a read of a hole the producer punched
 * allocates a huge page instead of a small one, within that size.
 *
 * Where shmem THP is "never" (Debian's default) the advice does nothing,
 * but MADV_COLLAPSE (Linux 6.1+) still turns existing pages into 2 MiB
 * ones: smb__shm_back_huge, which the producer's prefault (arbiter.c)
 * calls on its fresh SMB, allocates the whole 2 MiB pages (fallocate,
 * without mapping them) and collapses them. Both sides then map the SMB
 * 2 MiB at a time, since every mapping of 2 MiB or more starts at a 2 MiB
 * boundary (map_aligned; the kernel aligns shmem mappings only where THP
 * is on). Measured 2026-12-04 on the project's 2-core VM (shmem THP
 * "never"): a 4 MiB SMB cost its producer 12 ms to populate and the
 * service 5.9 ms for its first read of every page (a shadow-paging exit
 * to the host per 4 KiB), against 2-9 ms for fallocate plus collapse,
 * 0.2-0.3 ms to populate and 0.3-1.2 ms for the service's first read.
 * Through shmtraced (bench_vs_run.sh, 4 producers with 4 MiB SMBs, perfetto
 * consumer, recordings 2-4 of two daemons each way, alternating), 64 B
 * x4, 64 MB: service 61-80 against 89-133 ns per packet, producers
 * 126-155 against 164-217; 1 KiB x4, 256 MB: service 430-453 against
 * 507-636, producers 350-455 against 455-586. The memory is what the
 * populate committed anyway. On a machine short of free 2 MiB blocks the
 * collapse compacts memory first (synchronously, once, in the producer's
 * setup) or fails, and the SMB stays on small pages.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <shmtrace/smb_shm.h>

#include "smb_shm_int.h"

/* Linux 6.1's value; C libraries before glibc 2.37 do not name it (an
 * older kernel refuses it with EINVAL: small pages, as before). */
#if defined(__linux__) && !defined(MADV_COLLAPSE)
#define MADV_COLLAPSE 25
#endif

/* A MAP_SHARED mapping of fd at an address that is a multiple of
 * SMB_SHM_HUGE when size is at least that: the only place a 2 MiB page can
 * be mapped whole (a shmem mapping is aligned by the kernel only where
 * shmem THP is enabled). The slack of the reservation is given back. */
static void *map_aligned(int fd, size_t size)
{
    if (size < SMB_SHM_HUGE)
        return mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    size_t span = size + SMB_SHM_HUGE;
    uint8_t *r = mmap(NULL, span, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS,
                      -1, 0);
    if (r == MAP_FAILED)
        return MAP_FAILED;
    uintptr_t a = ((uintptr_t)r + SMB_SHM_HUGE - 1) &
                  ~(uintptr_t)(SMB_SHM_HUGE - 1);
    uint8_t *p = mmap((void *)a, size, PROT_READ | PROT_WRITE,
                      MAP_SHARED | MAP_FIXED, fd, 0);
    if (p == MAP_FAILED) {
        int e = errno;
        munmap(r, span);
        errno = e;
        return MAP_FAILED;
    }
    if (p > r)
        munmap(r, (size_t)(p - r));
    if (p + size < r + span)
        munmap(p + size, (size_t)(r + span - (p + size)));
    return p;
}

static int map_fd(int fd, size_t size, smb_shm *out)
{
    void *p = map_aligned(fd, size);
    if (p == MAP_FAILED)
        return -errno;
#ifdef MADV_HUGEPAGE
    (void)madvise(p, size, MADV_HUGEPAGE); /* advice: failure is harmless */
#endif
    out->base = p;
    out->size = size;
    out->fd = fd;
    return 0;
}

/* Does shmem THP give a mapping with MADV_HUGEPAGE 2 MiB pages by itself
 * (shmem_enabled "always", "within_size", "advise" or "force")? Read once. */
static bool shmem_thp_on_fault(void)
{
    static _Atomic int known = -1;  /* racing threads both read the file */
    if (atomic_load_explicit(&known, memory_order_relaxed) < 0) {
        char buf[128] = "";
        int fd = open("/sys/kernel/mm/transparent_hugepage/shmem_enabled",
                      O_RDONLY | O_CLOEXEC);
        if (fd >= 0) {
            ssize_t n = read(fd, buf, sizeof(buf) - 1);
            buf[n > 0 ? n : 0] = '\0';
            close(fd);
        }
        atomic_store_explicit(&known, strstr(buf, "[always]") ||
                              strstr(buf, "[within_size]") ||
                              strstr(buf, "[advise]") ||
                              strstr(buf, "[force]"),
                              memory_order_relaxed);
    }
    return atomic_load_explicit(&known, memory_order_relaxed) == 1;
}

bool smb__shm_back_huge(const smb_shm *shm)
{
#ifdef MADV_COLLAPSE
    size_t huge = shm->size / SMB_SHM_HUGE * SMB_SHM_HUGE;
    if (shm->base == NULL || shm->fd < 0 || huge == 0 ||
        (uintptr_t)shm->base % SMB_SHM_HUGE != 0 || shmem_thp_on_fault())
        return false;
    if (fallocate(shm->fd, 0, 0, (off_t)huge) != 0)
        return false;
    return madvise(shm->base, huge, MADV_COLLAPSE) == 0;
#else
    (void)shm;
    return false;
#endif
}

#ifdef HAVE_MEMFD_CREATE
static int create_memfd(size_t size, smb_shm *out)
{
    int fd = memfd_create("shmtrace_smb", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    int rc;
    if (fd < 0)
        return -errno;
    if (fchmod(fd, 0600) != 0 || ftruncate(fd, (off_t)size) != 0 ||
        fcntl(fd, F_ADD_SEALS,
              F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
        rc = -errno;
        close(fd);
        return rc;
    }
    rc = map_fd(fd, size, out);
    if (rc != 0)
        close(fd);
    return rc;
}
#endif

int smb__shm_create_posix(size_t size, smb_shm *out)
{
    char name[64];
    struct timespec ts;
    int fd = -1, rc;

    for (int attempt = 0; attempt < 16; attempt++) {
        clock_gettime(CLOCK_MONOTONIC, &ts);
        snprintf(name, sizeof(name), "/shmtrace-%ld-%ld-%d", (long)getpid(),
                 (long)ts.tv_nsec, attempt);
        fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
        if (fd >= 0 || errno != EEXIST)
            break;
    }
    if (fd < 0)
        return -errno;
    shm_unlink(name);                /* the fd is now the only handle */
    if (ftruncate(fd, (off_t)size) != 0) {
        rc = -errno;
        close(fd);
        return rc;
    }
    rc = map_fd(fd, size, out);
    if (rc != 0)
        close(fd);
    return rc;
}

int smb_shm_create(size_t size_bytes, smb_shm *out)
{
    if (out == NULL || size_bytes == 0 || size_bytes % 4096 != 0)
        return -EINVAL;
#ifdef HAVE_MEMFD_CREATE
    if (create_memfd(size_bytes, out) == 0)
        return 0;
#endif
    return smb__shm_create_posix(size_bytes, out);
}

int smb_shm_map(int fd, unsigned flags, smb_shm *out)
{
    struct stat st;
    int dupfd, rc;

    if (out == NULL || fd < 0)
        return -EINVAL;
    if (fstat(fd, &st) != 0)
        return -errno;
    if (st.st_size <= 0 || st.st_size % 4096 != 0)
        return -EINVAL;
#ifdef F_GET_SEALS
    if (flags & SMB_SHM_REQUIRE_SEALS) {
        int seals = fcntl(fd, F_GET_SEALS);
        const int need = F_SEAL_SHRINK | F_SEAL_GROW;
        if (seals >= 0 && (seals & need) != need)
            return -EPERM;
    }
#endif
    dupfd = fcntl(fd, F_DUPFD_CLOEXEC, 0);
    if (dupfd < 0)
        return -errno;
    rc = map_fd(dupfd, (size_t)st.st_size, out);
    if (rc != 0)
        close(dupfd);
    return rc;
}

void smb_shm_unmap(smb_shm *shm)
{
    if (shm == NULL || shm->base == NULL)
        return;
    munmap(shm->base, shm->size);
    if (shm->fd >= 0)
        close(shm->fd);
    shm->base = NULL;
    shm->size = 0;
    shm->fd = -1;
}

const char *smb_strerror(int err)
{
    if (err == 0)
        return "success";
    if (err < 0)
        err = -err;
    return strerror(err);
}

const char *smb_version(void)
{
    return PACKAGE_VERSION;
}
