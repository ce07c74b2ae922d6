/*
 * svc_prealloc.h - disk space reserved ahead of a write_into_file
 * session's writes.
 *
 * Before each batch is written (svc_fwrite.c's thread, or svc_read.c when
 * there is none), the file gets its next SVC_PREALLOC_STEP bytes reserved
 * past where the batch ends, with fallocate(FALLOC_FL_KEEP_SIZE): the file's
 * size does not change, so readers see nothing, but the page-cache writes
 * that follow land in blocks the filesystem has already allocated. On ext4
 * that takes the per-page delayed-allocation work (space reservation,
 * extent-status tree) out of the kernel's copy: measured 2026-12-05 on this
 * machine's ext4, 512 MiB written in 1 MiB write() calls, alternating:
 * 138-140 ns of CPU per KiB written without, 112-115 with (fallocate's own
 * cost included); with the fsync that writes it out, 168-174 against
 * 144-151, and the whole machine's busy time did not go up.
 *
 * What is reserved past the end is given back when the session's file is
 * done (svc_prealloc_trim: ftruncate to the file's own size, which frees
 * blocks past the end: checked on ext4 and tmpfs). So only a daemon killed
 * in the middle of a session leaves up to one step reserved past the end. (A
 * process appending to the same file between the trim's fstat and its
 * ftruncate would lose those bytes; nothing but the service writes a
 * trace file while its session runs.)
 * Reservation stops for good on the first error (a pipe or /dev/null:
 * ENODEV/ESPIPE; a filesystem without it: EOPNOTSUPP; a full disk:
 * ENOSPC, where the writes report their own errors), never past
 * max_file_size_bytes, and never on the file of a clone. It goes through
 * the consumer's own descriptor, so with the consumer's rights.
 *
 * Tried and not kept (2026-12-05, same machine): O_DIRECT instead of the
 * page cache. On its own it looks cheap (256 MiB in 1 MiB write() calls:
 * 39-46 ns of CPU per KiB against 112-245 buffered), but the packets must
 * first be copied into an aligned staging area, and the writer thread then
 * waits for the disk: per 1 KiB packet (1 producer, 256 MB, perfetto
 * consumer, two builds alternating, 4 recordings each, twice; each
 * daemon's first recording, on a cold ring, left out) the service took
 * 457-672 ns of CPU against 340-546, at 463-599 MB/s against 697-880.
 * Holding writes back to 4 MiB did not make it cheaper (325-484 against
 * 300-453 ns).
 * Nor did writes that start at aligned file offsets (so that this 6.18
 * kernel's ext4 could back them with large folios, fewer buffer heads):
 * 256 MiB in 1 MiB write() calls from offset 0 against after a first
 * write of 1000 bytes cost the same within the noise, 107-199 against
 * 113-196 ns of CPU per KiB, with the space reserved or not (2026-12-05
 * 10:20 UTC, three rounds of each; the first write of each set, ~1500 ns
 * per KiB while the host backed fresh pages, left out).
 */
#ifndef SHMTRACE_SVC_PREALLOC_H
#define SHMTRACE_SVC_PREALLOC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SVC_PREALLOC_STEP (8u << 20)

typedef struct {
    bool on;           /* false: nothing more is reserved (zeroed = off) */
    bool reserved;     /* a reservation succeeded: trim at the end */
    int64_t next;      /* where the next batch's first byte lands */
    int64_t end;       /* reserved up to here */
    int64_t limit;     /* never past here; 0 = no limit */
} svc_prealloc;

/* A file whose next byte lands at `base`; limit_bytes > 0: the session
 * writes at most that many bytes. */
void svc_prealloc_init(svc_prealloc *, int64_t base, uint64_t limit_bytes);
/* Before `bytes` are written through fd: reserve ahead if needed. */
void svc_prealloc_ahead(svc_prealloc *, int fd, size_t bytes);
/* After the last write: give back what lies past the file's end. */
void svc_prealloc_trim(svc_prealloc *, int fd);

#endif
