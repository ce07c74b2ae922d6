/*
 * ipc_arena.c - a bump allocator for decoding one message with protobuf-c
 * (ipc_arena.h says when and why).
 *
 * alloc carves 16-byte aligned pieces from the block; what does not fit
 * gets an extra block of its own from malloc (a header links it into the
 * arena's list). free does nothing: everything goes at ipc_arena_end,
 * which frees the extra blocks and, if there were any, replaces the block
 * by one as large as the whole message needed (at most
 * IPC_ARENA_KEEP_MAX). protobuf-c treats a NULL from alloc as out of
 * memory and fails the decode, as with malloc.
 *
 * Under AddressSanitizer the block is poisoned except for the pieces
 * handed out, each followed by a 16-byte poisoned gap: a read or write
 * past a decoded field is still caught, as it would be with malloc
 * (extra blocks are malloc's own, with its red zones).
 */
#include "config.h"

#include <stdlib.h>

#include "ipc_arena.h"

#define ALIGN 16u

#if defined(__SANITIZE_ADDRESS__)
#define ARENA_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define ARENA_ASAN 1
#endif
#endif
#ifdef ARENA_ASAN
#include <sanitizer/asan_interface.h>
#define REDZONE ALIGN
#define POISON(p, n) ASAN_POISON_MEMORY_REGION((p), (n))
#define UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION((p), (n))
#else
#define REDZONE 0u
#define POISON(p, n) ((void)(p), (void)(n))
#define UNPOISON(p, n) ((void)(p), (void)(n))
#endif

struct ipc_arena_extra {
    ipc_arena_extra *next;
    max_align_t pad[];           /* keeps what follows aligned */
};

static size_t round_up(size_t n)
{
    return (n + ALIGN - 1) & ~(size_t)(ALIGN - 1);
}

static void *arena_alloc(void *data, size_t size)
{
    ipc_arena *a = data;
    size_t n = round_up(size ? size : 1) + REDZONE;
    if (n < size)
        return NULL;                             /* overflow */
    if (a->block && a->cap - a->used >= n) {
        void *p = a->block + a->used;
        a->used += n;
        UNPOISON(p, size);
        return p;
    }
    if (n > SIZE_MAX - sizeof(ipc_arena_extra))
        return NULL;
    ipc_arena_extra *e = malloc(sizeof(*e) + n);
    if (!e)
        return NULL;
    e->next = a->extra;
    a->extra = e;
    a->extra_bytes += n;
    return e->pad;
}

static void arena_free(void *data, void *p)
{
    (void)data;
    (void)p;
}

void ipc_arena_init(ipc_arena *a)
{
    a->pc.alloc = arena_alloc;
    a->pc.free = arena_free;
    a->pc.allocator_data = a;
    a->block = NULL;
    a->cap = a->used = 0;
    a->extra = NULL;
    a->extra_bytes = 0;
    a->busy = false;
}

ProtobufCAllocator *ipc_arena_begin(ipc_arena *a)
{
    if (a->busy)
        return NULL;
    a->busy = true;
    a->used = 0;
    return &a->pc;
}

void ipc_arena_end(ipc_arena *a)
{
    if (a->extra) {
        size_t want = a->used + a->extra_bytes;
        while (a->extra) {
            ipc_arena_extra *e = a->extra;
            a->extra = e->next;
            free(e);
        }
        a->extra_bytes = 0;
        if (want > IPC_ARENA_KEEP_MAX)
            want = IPC_ARENA_KEEP_MAX;
        if (want > a->cap) {
            uint8_t *g = malloc(want);    /* nothing to keep: no realloc */
            if (g) {
                if (a->block)
                    UNPOISON(a->block, a->cap);
                free(a->block);
                a->block = g;
                a->cap = want;
            }
        }
    }
    if (a->block)
        POISON(a->block, a->cap);
    a->used = 0;
    a->busy = false;
}

void ipc_arena_fini(ipc_arena *a)
{
    ipc_arena_end(a);
    if (a->block)
        UNPOISON(a->block, a->cap);
    free(a->block);
    a->block = NULL;
    a->cap = 0;
}
