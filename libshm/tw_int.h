/*
 * tw_int.h - TraceWriter internals (private to tw*.c).
 *
 * Byte cursor. `pos`/`end` bound the buffer packet bytes go to: the payload
 * of the chunk the writer holds, or the 1 KiB garbage buffer while the
 * writer drops (or is a null writer). The logical offset of a byte address
 * p inside the open packet is  anchor_logical + (p - anchor): it is what
 * nested message sizes are computed from, across chunk boundaries.
 *
 * Nested messages: a stack of open size fields. A size field lives in the
 * chunk it was reserved in (kind SF_CHUNK, address valid while the writer
 * holds that chunk), in a patch entry (SF_PATCH: the chunk was handed back
 * mid-packet, trace-writer.md §4) or nowhere (SF_DETACHED: the packet was
 * lost; the size is computed and thrown away).
 *
 * Patch entries form a FIFO in creation order (`patches[head..n)`). An
 * entry is ready once data[0] != 0 (every redundant varint starts with a
 * non-zero byte).
 *
 * Bulk (tw.c, put_bulk): `full[0..nfull)` are the filled chunks of the
 * current run, oldest first, handed back by the next exchange and at the
 * end of the write (empty outside put_bulk); a hand-back returns them
 * before the held chunk.
 *
 * Threads: a writer belongs to one thread; nothing here is shared.
 */
#ifndef SHMTRACE_TW_INT_H
#define SHMTRACE_TW_INT_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include <shmtrace/trace_writer.h>

#include "arbiter_int.h"

#define TW_GARBAGE_SIZE         1024u
#define TW_STALL_SLEEP_MAX_US 2000u  /* longest single stall wait */
#define TW_MIN_BYTES_FOR_PACKET 12u     /* 4 (size) + 8, trace-writer.md §3 */
#define TW_MAX_PACKETS_PER_CHUNK 1022u  /* 1023 - 1 for the inflated slot */
#define TW_MARKER_BUDGET_US     64000u  /* max stall for a loss marker */
#define TW_BULK_CHUNKS          16u     /* chunks per arbiter call, bulk */
#define TW_PREFETCH_MIN         256u    /* fields this large ask ahead */
#define TW_PREFETCH_AHEAD       2048u   /* SMB bytes asked for past pos
                                           (past a large field's end) */
#define TW_PREFETCH_MAX         4096u   /* at most this much per call */

enum { SF_CHUNK = 0, SF_PATCH = 1, SF_DETACHED = 2 };

typedef struct tw_nested {
    uint64_t body_start;     /* logical offset of the first body byte */
    uint8_t *field;          /* SF_CHUNK: the 4 bytes in the chunk */
    uint32_t patch_seq;      /* SF_PATCH: sequence number of the entry */
    uint8_t kind;            /* SF_* */
} tw_nested;

typedef struct tw_patch_entry {
    uint32_t chunk_id;
    uint16_t offset;         /* from the chunk payload start */
    uint8_t data[4];         /* 0 0 0 0 until the size is known */
} tw_patch_entry;

struct tw_writer {
    /* --- hot: the packet path --- */
    uint8_t *pos;
    uint8_t *end;
    uint8_t *anchor;
    uint64_t anchor_logical;
    uint8_t *frag_field;         /* size field of the open fragment: 4
                                    bytes, or 1 while short_field */
    uint8_t *chunk_end;          /* the chunk's end while short_field */
    smb_chunk_header *hdr;       /* == loc.hdr; NULL: no chunk */
    uint16_t count;              /* mirror of the header's packet count */
    uint8_t flags;               /* mirror of the header's flags */
    /* Stored by the packet path (tw_packet_begin / _end): */
    bool inflated;               /* count already includes the next packet */
    bool in_packet;
    bool short_field;            /* the open fragment's size field is 1
                                    byte and `end` the packet's 126-byte
                                    limit (tw.c: widen_size_field) */
    bool frag_continues;         /* open fragment continues a packet */
    bool retry;                  /* garbage wrapped: retry a chunk */
    /* Only read by the packet path, and kept apart from the flags above:
     * tw_packet_begin may test these four with one 4-byte load, which
     * would wait for the byte stores of the previous tw_packet_end if it
     * overlapped them (no store-to-load forwarding). */
    _Alignas(4) bool dropping;   /* writing into garbage */
    bool signal_loss;            /* next packet carries 257 */
    bool first_done;             /* first_packet_on_sequence written */
    bool packet_cleared;         /* the open packet carries
                                    SEQ_INCREMENTAL_STATE_CLEARED */
    _Atomic bool clear_req;      /* ClearIncrementalState asked (any
                                    thread); consumed by a written packet */
    bool lost_unseen;            /* open packet lost with no fragment in
                                    the SMB: reported at its end */
    bool loss_noted;             /* a loss report may still be queued */
    uint32_t depth;              /* open nested messages (stack size) */
    uint32_t overflow_depth;     /* nested beyond TW_MAX_NESTING (ignored);
                                    > 0 only while depth == TW_MAX_NESTING */
    uint32_t patches_head;       /* FIFO of patch entries */
    uint32_t patches_n;
    uint32_t patches_base_seq;   /* sequence number of patches[0] */
    uint8_t *pf;                 /* lines below asked for, for writing */
    /* tw_packet_begin's common case needs pos below this: 130 bytes
     * before the held chunk's end, or, while the chunk's lines are not all
     * asked for, TW_PREFETCH_AHEAD / 2 before pf (0: no chunk held). */
    uintptr_t begin_limit;

    /* --- cold --- */
    smb_arbiter *arb;
    uint32_t target_buffer;
    uint32_t next_chunk_id;
    uint32_t chunk_id;           /* id of the held chunk */
    uint16_t writer_id;          /* 0: null writer */
    tw_policy policy;
    smb__chunk_loc loc;
    uint32_t bulk_payload;       /* the arbiter's chunk payload size */
    uint32_t nfull;              /* filled chunks of put_bulk's run */
    smb__chunk_loc full[TW_BULK_CHUNKS + 1];   /* + the held one */
    tw_patch_entry *patches;
    uint32_t patches_cap;
    tw_writer_stats stats;
    tw_nested stack[TW_MAX_NESTING];
    uint8_t garbage[TW_GARBAGE_SIZE];
};

#endif /* SHMTRACE_TW_INT_H */
