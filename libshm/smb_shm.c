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
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <shmtrace/smb_shm.h>

#include "smb_shm_int.h"

static int map_fd(int fd, size_t size, smb_shm *out)
{
    void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
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
