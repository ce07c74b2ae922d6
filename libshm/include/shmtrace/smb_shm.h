/*
 * shmtrace/smb_shm.h - the shared-memory object behind an SMB.
 *
 * An SMB is one fd-backed MAP_SHARED mapping shared 1:1 by a producer and
 * the service. smb_shm_create makes a new anonymous object: memfd_create
 * (sealed against shrink/grow, as Perfetto does) where available, else a
 * POSIX shm_open object created O_EXCL with mode 0600 and unlinked at once,
 * so nothing leaks if either side crashes (such an object cannot be
 * sealed, so a service requiring seals refuses it). The fd then travels to
 * the peer (SCM_RIGHTS), which maps it with smb_shm_map.
 *
 * Errors: 0 or a negative errno; smb_strerror() gives a message.
 * Ownership: an smb_shm owns its mapping and its fd (smb_shm_map dups the
 * fd it is given; the caller keeps its own). smb_shm_unmap releases both;
 * calling it on a zeroed (base NULL) or already-unmapped smb_shm is a
 * no-op.
 * Threads: no shared state; an smb_shm is plain data.
 */
#ifndef SHMTRACE_SMB_SHM_H
#define SHMTRACE_SMB_SHM_H

#include <stddef.h>
#include <stdint.h>

#include <shmtrace/api.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct smb_shm {
    uint8_t *base;      /* start of the mapping (page aligned) */
    size_t size;        /* bytes mapped */
    int fd;             /* owned fd; -1 if none */
} smb_shm;

/* smb_shm_map flags. */
#define SMB_SHM_REQUIRE_SEALS 0x1u  /* refuse an fd lacking shrink/grow
                                       seals, -EPERM (service side, for a
                                       producer-provided SMB) */

/* Create and map a zero-filled object of size_bytes (> 0, multiple of
 * 4096). On failure *out is untouched and nothing is left behind.
 * -EINVAL bad size; else the errno of memfd_create/shm_open/ftruncate/mmap. */
SHMTRACE_API int smb_shm_create(size_t size_bytes, smb_shm *out);

/* Map an existing object from fd (size from fstat; must be > 0 and a
 * multiple of 4096, else -EINVAL). The fd is dup'ed. */
SHMTRACE_API int smb_shm_map(int fd, unsigned flags, smb_shm *out);

/* Unmap and close; sets base NULL, size 0, fd -1. */
SHMTRACE_API void smb_shm_unmap(smb_shm *shm);

/* Message for a negative errno returned by any smb_/tw_ call. Static
 * storage, never NULL. */
SHMTRACE_API const char *smb_strerror(int err);

/* libshm's version, "MAJOR.MINOR.PATCH". */
SHMTRACE_API const char *smb_version(void);

#ifdef __cplusplus
}
#endif
#endif /* SHMTRACE_SMB_SHM_H */
