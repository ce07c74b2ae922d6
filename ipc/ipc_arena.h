/*
 * ipc_arena.h - a bump allocator for decoding one message with protobuf-c.
 *
 * protobuf-c allocates every sub-message, repeated array and string of a
 * decoded message on its own and frees them one by one. A producer's
 * CommitData names each chunk in a sub-message: a commit of 2 MiB of
 * 4 KiB chunks is ~520 allocations and as many frees, about a quarter of
 * one per 1 KiB packet. With an arena they are carved from one block that
 * is reused from message to message and dropped at once. Measured through
 * shmtraced (2026-12-06, one warm daemon per build, recordings
 * alternating, medians of ten, service CPU per packet): 1 KiB x1 434
 * against 441.5 ns, 1 KiB x4 552.5 against 556, 64 B x1 63.5 against
 * 65.5. Used as
 *
 *   ProtobufCAllocator *al = ipc_arena_begin(&arena);  (NULL: in use)
 *   msg = protobuf_c_message_unpack(desc, al, len, data);
 *   ... use msg ...
 *   ipc_arena_end(&arena);   (instead of protobuf_c_message_free_unpacked)
 *
 * A message larger than the block gets extra blocks from malloc for that
 * one use; at the end they are freed and the block grows to what the
 * message needed (up to IPC_ARENA_KEEP_MAX), so the next one fits. A
 * begin while the arena is in use (a handler that decodes again) returns
 * NULL: that decode uses malloc, as without an arena.
 */
#ifndef SHMTRACE_IPC_ARENA_H
#define SHMTRACE_IPC_ARENA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <protobuf-c/protobuf-c.h>

/* The most the reused block keeps between messages. */
#define IPC_ARENA_KEEP_MAX (1u << 20)

typedef struct ipc_arena_extra ipc_arena_extra;

typedef struct ipc_arena {
    ProtobufCAllocator pc;       /* handed to protobuf-c while in use */
    uint8_t *block;              /* reused from message to message */
    size_t cap, used;
    ipc_arena_extra *extra;      /* this use's overflow blocks */
    size_t extra_bytes;          /* what they hold */
    bool busy;
} ipc_arena;

void ipc_arena_init(ipc_arena *a);
/* The allocator to decode one message with, or NULL if a is in use. */
ProtobufCAllocator *ipc_arena_begin(ipc_arena *a);
/* Everything allocated since begin is gone. */
void ipc_arena_end(ipc_arena *a);
void ipc_arena_fini(ipc_arena *a);

#endif /* SHMTRACE_IPC_ARENA_H */
