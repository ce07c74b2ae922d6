/*
 * smb_shm_int.h - internals of smb_shm.c reachable by the tests (not
 * exported from libshm.so: no SHMTRACE_API, built -fvisibility=hidden; the
 * tests link the static convenience library libshm_core.la).
 */
#ifndef SHMTRACE_SMB_SHM_INT_H
#define SHMTRACE_SMB_SHM_INT_H

#include <stdbool.h>
#include <stddef.h>

#include <shmtrace/smb_shm.h>

/* The POSIX shm_open fallback smb_shm_create uses when memfd_create is
 * missing or refused: a 0600 object, unlinked at once, close-on-exec. */
int smb__shm_create_posix(size_t size, smb_shm *out);

/* The size of a PMD-mapped transparent huge page (x86-64, and arm64 with
 * 4 KiB pages); mappings of SMBs at least this large start at a multiple
 * of it. */
#define SMB_SHM_HUGE ((size_t)2 << 20)

/* Backs the whole 2 MiB pages of shm with huge pages where shmem THP would
 * not on its own (shmem_enabled "never"; MADV_COLLAPSE, Linux 6.1+, is
 * allowed then, not under "deny"): allocates them (fallocate) and
 * collapses them. For a fresh SMB only, before anything is written: the
 * pages are then zero. true if done; false changes nothing that matters
 * (small pages, as before). See smb_shm.c. */
bool smb__shm_back_huge(const smb_shm *shm);

#endif /* SHMTRACE_SMB_SHM_INT_H */
