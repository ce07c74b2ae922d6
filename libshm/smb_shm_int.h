/*
 * smb_shm_int.h - internals of smb_shm.c reachable by the tests (not
 * exported from libshm.so: no SHMTRACE_API, built -fvisibility=hidden; the
 * tests link the static convenience library libshm_core.la).
 */
#ifndef SHMTRACE_SMB_SHM_INT_H
#define SHMTRACE_SMB_SHM_INT_H

#include <stddef.h>

#include <shmtrace/smb_shm.h>

/* The POSIX shm_open fallback smb_shm_create uses when memfd_create is
 * missing or refused: a 0600 object, unlinked at once, close-on-exec. */
int smb__shm_create_posix(size_t size, smb_shm *out);

#endif /* SHMTRACE_SMB_SHM_INT_H */
