/*
 * tb_mem.c - ring memory of the trace buffers: allocation, huge pages, and
 * reuse across buffers (tb_set_ring_cache_limit).
 *
 * A ring is one anonymous private mapping. Its first lap used to cost more
 * than the copies themselves: one page fault per 4 KiB, the kernel zeroing
 * each page, and at tb_destroy a munmap of 32768 pages per 128 MiB. Two
 * things remove most of that:
 *
 * - MADV_HUGEPAGE on every ring (transparent huge pages in "madvise" mode,
 *   Debian's default): one fault per 2 MiB, a munmap that frees 64 huge
 *   pages. The kernel still zeroes fresh memory once: about half of a
 *   fresh ring's first lap (bench_tb: lap 1 0.55-0.67x memcpy, laps 2-4
 *   1.0-1.1x, the same lap into a cached ring 1.3x). The ring is left to
 *   fault in as the writer reaches it: MADV_POPULATE_WRITE at allocation
 *   zeroes all of it before the first copy, and the lines are out of the
 *   caches again when the writer gets there (first lap 9-13% slower,
 *   tb_create included), while Linux zeroes the 4 KiB at the faulting
 *   address of a huge page last, so what the writer copies next is still
 *   cached.
 *
 * - A cache of released rings (off by default; shmtraced turns it on): a
 *   ring freed by tb_destroy is kept, up to the limit in bytes, and handed
 *   to the next tb_create / tb_clone_readonly of the same size, already
 *   faulted in. While cached it is marked MADV_FREE, so under memory
 *   pressure the kernel may take its pages back (they then read as zero
 *   and fault again on reuse) instead of swapping or killing.
 *
 * Reuse does not clear the memory: nothing in libbuf reads a ring outside
 * [0, used_size), which every buffer grows from 0 by writing its own
 * records (tb_int.h: records tile that range), so bytes left over from an
 * earlier buffer are never parsed nor returned. tests/check_tb_mem checks
 * that a ring full of garbage behaves exactly like a fresh one.
 *
 * Threads: the cache is shared by all buffers of the process; a spin lock
 * (C11 atomic_flag) guards it, held for a few loads and stores only.
 */
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/mman.h>

#include "tb_int.h"

#define TB__CACHE_SLOTS 4

typedef struct {
    uint8_t *mem;
    size_t size;
} tb__cached_ring;

static tb__cached_ring cache[TB__CACHE_SLOTS];
static size_t cache_bytes;
static size_t cache_limit;
static atomic_flag cache_lock = ATOMIC_FLAG_INIT;

static void lock(void)
{
    while (atomic_flag_test_and_set_explicit(&cache_lock,
                                             memory_order_acquire))
        ;
}

static void unlock(void)
{
    atomic_flag_clear_explicit(&cache_lock, memory_order_release);
}

/* Takes a cached ring of exactly `size` bytes; NULL if none. */
static uint8_t *cache_take(size_t size)
{
    uint8_t *mem = NULL;
    lock();
    for (int i = 0; i < TB__CACHE_SLOTS; i++) {
        if (cache[i].mem && cache[i].size == size) {
            mem = cache[i].mem;
            cache[i].mem = NULL;
            cache_bytes -= size;
            break;
        }
    }
    unlock();
    return mem;
}

/* Keeps the ring if it fits under the limit; false if the caller must
 * unmap it. */
static bool cache_put(uint8_t *mem, size_t size)
{
    bool kept = false;
    lock();
    if (cache_bytes + size <= cache_limit) {
        for (int i = 0; i < TB__CACHE_SLOTS && !kept; i++) {
            if (!cache[i].mem) {
                cache[i].mem = mem;
                cache[i].size = size;
                cache_bytes += size;
                kept = true;
            }
        }
    }
    unlock();
    return kept;
}

uint8_t *tb__mem_alloc(size_t size)
{
    uint8_t *mem = cache_take(size);
    if (mem)
        return mem;
    void *m = mmap(NULL, size, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (m == MAP_FAILED)
        return NULL;
#ifdef MADV_HUGEPAGE
    (void)madvise(m, size, MADV_HUGEPAGE); /* advice: failure is harmless */
#endif
    return m;
}

void tb__mem_free(uint8_t *mem, size_t size)
{
    if (!mem)
        return;
    if (cache_limit >= size) {
#ifdef MADV_FREE
        (void)madvise(mem, size, MADV_FREE);
#endif
        if (cache_put(mem, size))
            return;
    }
    munmap(mem, size);
}

SHMTRACE_API void tb_set_ring_cache_limit(size_t bytes)
{
    tb__cached_ring drop[TB__CACHE_SLOTS];
    int ndrop = 0;
    lock();
    cache_limit = bytes;
    for (int i = 0; i < TB__CACHE_SLOTS && cache_bytes > cache_limit; i++) {
        if (cache[i].mem) {
            drop[ndrop++] = cache[i];
            cache_bytes -= cache[i].size;
            cache[i].mem = NULL;
        }
    }
    unlock();
    for (int i = 0; i < ndrop; i++)
        munmap(drop[i].mem, drop[i].size);
}
