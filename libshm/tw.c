/*
 * tw.c - TraceWriter: chunk ownership, fragmentation, patches, drop mode,
 * and the zero-copy protobuf encoder (trace-writer.md §3-§10).
 *
 * Packet framing inside a chunk (smb-abi.md §6):
 *
 *   [size:1|4][packet bytes...][size:1|4][packet bytes...] ... [00]
 *    ^ fragment size field, reserved zeroed at packet begin, back-filled at
 *      packet end: 1 byte when the fragment started in this chunk and is
 *      < 127 bytes, else a 4-byte redundant varint. The trailing 00 is the
 *      empty fragment appended when a chunk is handed back "inflated"
 *      (below).
 *
 * Short size fields: most packets are small, so a packet that begins with
 * more than 130 bytes left in the chunk reserves 1 byte, not 4, and `end`
 * becomes its 126-byte limit (short_field; the chunk's end is kept in
 * chunk_end). The fast paths need no extra test: a write that would pass
 * the limit finds no room and takes the slow path, which first widens the
 * field (widen_size_field: the bytes so far move on 3, open nested size
 * fields with them, `end` is the chunk's end again) and goes on as for a
 * 4-byte field. A packet that ends under the limit just stores its length
 * byte: no bytes move. Otherwise (little room left, a continuation, drop
 * mode) 4 bytes are reserved and, if the packet ends < 127 bytes in the
 * chunk it began in, compacted to 1 at its end (the bytes move back 3).
 *
 * Packet count: +1 when a fragment is started (release store of the whole
 * `packets` word from a local mirror: single writer, no RMW). When a packet
 * ends with room left the count is bumped once more ("inflated") so that a
 * scraper, which distrusts the last counted fragment of an uncommitted
 * chunk, still takes the finished packet; the next packet reuses that slot.
 * A chunk takes at most 1022 packets, leaving room for that slot.
 *
 * Crossing a chunk (next_buffer): acquire chunk next_chunk_id with {count 1,
 * FirstPacketContinuesFromPrev} FIRST; then close the old chunk's fragment
 * (4-byte varint, LastPacketContinuesOnNext), turn every open nested size
 * field still inside it into a patch entry (NeedsPatching), hand it back.
 * A packet begin that needs a fresh chunk hands the full one back and
 * takes the next in the same arbiter call (smb__arbiter_exchange).
 *
 * Bulk writes (put_bulk): a write that, beyond the room left, needs more
 * than one continuation payload (P = payload - 4) needs exactly
 * ceil(rest / P) more chunks, all but the last filled to the end. They are
 * taken in runs of up to TW_BULK_CHUNKS (at most 1/4 of the SMB) by one
 * exchange, which also hands back the previous run: one arbiter lock per
 * run instead of two per chunk. A middle chunk is written as its final
 * fragment size (P), one memcpy and its final header {1, both continuation
 * flags}, with no writer state. Runs only take chunks of the arbiter's own
 * size. The last run goes back when the write ends: a filled chunk is
 * never left BeingWritten after the call that filled it (a scraper skips
 * count-1 chunks; a cut packet is only counted if its first fragment was
 * committed). No chunk is taken that the bytes do not fill, so ids stay
 * dense.
 *
 * If no chunk can be had: stamp the open fragment with the drop sentinel
 * FF FF FF 7F, detach the open size fields, hand the chunk back and write
 * the rest of the packet into a 1 KiB garbage buffer (drop mode). Drop mode
 * is left at a later packet begin; that packet carries
 * previous_packet_dropped = 257.
 *
 * Trailing loss marker: a loss after a writer's last real packet has no
 * next packet to carry the flag. So tw_writer_flush and tw_writer_destroy,
 * when a loss is still unsignalled (drop mode, or signal_loss pending),
 * first try to write one minimal packet holding only
 * previous_packet_dropped = 257 (plus first_packet_on_sequence if the
 * sequence never got one). Getting a chunk for it stalls at most about
 * TW_MARKER_BUDGET_US in total (backing off like acquire), never when the
 * arbiter is shut down, whatever the policy. If no chunk comes in that
 * time the marker is given up: the loss stays counted in packets_lost
 * (and in the buffer's trace_writer_packet_loss when a packet was cut).
 * Without a pending loss nothing extra is written.
 *
 * Loss reporting: a packet lost before any of its fragments reached the
 * SMB (begun in drop mode, or cut in the chunk where it began: the drop
 * sentinel replaces its first fragment) is invisible to the service's
 * buffer, so at its end it is reported to the arbiter
 * (smb__arbiter_note_loss: packets and bytes, sent with the next batch as
 * CommitDataRequest.shmtrace_writer_loss). A packet cut after its first
 * fragment was handed back is not reported: the service's buffer counts it
 * (its reassembly fails). Each lost packet is thus counted exactly once.
 *
 * Fast path (tw_add_* with room in the chunk): a few stores and a pointer
 * bump; no lock, no atomic RMW, no allocation, no indirect call. Packet
 * begin and end have a frameless common case (a short size field, nothing
 * pending) and a full version for everything else (packet_begin_slow,
 * packet_end_slow). The writer asks ahead for the held chunk's lines, for
 * writing, since the service on another core touched them last: at packet
 * begin, 2 KiB past pos once pos is within 1 KiB of what was asked for
 * (tw_packet_begin's limit test covers it: begin_limit), and for a field
 * of 256 bytes or more, 2 KiB past its end (prefetch_for).
 */
#include "config.h"

#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tw_int.h"

#define LIKELY(x)   __builtin_expect(!!(x), 1)
#define UNLIKELY(x) __builtin_expect(!!(x), 0)

#define FIELD_PREVIOUS_PACKET_DROPPED  42u
#define FIELD_FIRST_PACKET_ON_SEQUENCE 87u
#define FIELD_SEQUENCE_FLAGS 13u
#define SEQ_INCREMENTAL_STATE_CLEARED 1u
#define LOSS_PRESENT_SMB_FULL          257u   /* 1 | 256 */

#define WT_VARINT  0u
#define WT_FIXED64 1u
#define WT_LEN     2u
#define WT_FIXED32 5u

#define MAX_FIELD  0x1FFFFFFFu

static void next_buffer(tw_writer *w, bool tried);

/* ---- small helpers ----------------------------------------------------- */

static inline uint64_t logical_pos(const tw_writer *w)
{
    return w->anchor_logical + (uint64_t)(w->pos - w->anchor);
}

static inline uint8_t *enc_varint(uint8_t *p, uint64_t v)
{
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    if (v >= (1ull << 56)) {
        /* 9 or 10 bytes (e.g. wall-clock ns): the first 8 at once, byte
         * k = bits 7k..7k+6 | 0x80, instead of 8 dependent loop turns. */
        uint64_t t = (v & 0x7Full) | ((v << 1) & 0x7F00ull) |
                     ((v << 2) & 0x7F0000ull) | ((v << 3) & 0x7F000000ull) |
                     ((v << 4) & 0x7F00000000ull) |
                     ((v << 5) & 0x7F0000000000ull) |
                     ((v << 6) & 0x7F000000000000ull) |
                     ((v << 7) & 0x7F00000000000000ull) |
                     0x8080808080808080ull;
        memcpy(p, &t, 8);
        p += 8;
        v >>= 56;
    }
#endif
    while (v >= 0x80) {
        *p++ = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    *p++ = (uint8_t)v;
    return p;
}

/* Small copies without a library call. copy_small: n <= 32 bytes, the
 * source and destination apart (tw_add_bytes: the caller's data into the
 * chunk). */
static inline void copy_small(uint8_t *dst, const uint8_t *src, size_t n)
{
    if (n >= 16) {                   /* 16..32: two overlapping 16s */
        uint8_t a[16], b[16];
        memcpy(a, src, 16);
        memcpy(b, src + n - 16, 16);
        memcpy(dst, a, 16);
        memcpy(dst + n - 16, b, 16);
    } else if (n >= 8) {
        uint64_t a, b;
        memcpy(&a, src, 8);
        memcpy(&b, src + n - 8, 8);
        memcpy(dst, &a, 8);
        memcpy(dst + n - 8, &b, 8);
    } else {
        for (size_t i = 0; i < n; i++)
            dst[i] = src[i];
    }
}

/* Compaction of a size field (the body moves back 3 bytes over the 4-byte
 * field, len < 128): forward in 16-byte steps, each step loading before it
 * stores (the store lands 3 bytes back, on bytes already loaded). Reads and
 * writes up to 15 bytes past the body, so only with that much room before
 * `limit` (the chunk end); the bytes written past it are free space. */
static inline void compact3(uint8_t *field, size_t len, const uint8_t *limit)
{
    uint8_t *src = field + 4;
    if ((size_t)(limit - (src + len)) >= 16) {
        for (size_t i = 0; i < len; i += 16) {
            uint8_t t[16];
            memcpy(t, src + i, 16);
            memcpy(field + 1 + i, t, 16);
        }
    } else {
        memmove(field + 1, src, len);
    }
}

static inline void publish_packets(tw_writer *w)
{
    atomic_store_explicit(&w->hdr->packets,
                          smb_make_packets(w->count, w->flags),
                          memory_order_release);
}

/* The open packet outgrows its 1-byte size field (see the file comment):
 * move its bytes on 3 to make the field 4 bytes (still zero: a scraper
 * reads the same as for a field reserved at 4), and with them the open
 * nested size fields; logical offsets are unchanged (pos and anchor move
 * together). Room: the packet began with > 130 bytes left and its bytes
 * end at most 127 past the field. */
static void widen_size_field(tw_writer *w)
{
    uint8_t *body = w->frag_field + 1;
    memmove(body + 3, body, (size_t)(w->pos - body));
    memset(body, 0, 3);
    w->pos += 3;
    w->anchor += 3;
    for (uint32_t i = 0; i < w->depth; i++)
        if (w->stack[i].kind == SF_CHUNK)
            w->stack[i].field += 3;
    w->end = w->chunk_end;
    w->short_field = false;
}

static size_t put_bulk(tw_writer *w, const uint8_t *src, size_t n);

static void put_slow(tw_writer *w, const uint8_t *src, size_t n)
{
    if (UNLIKELY(w->short_field) && n > (size_t)(w->end - w->pos))
        widen_size_field(w);
    while (n > 0) {
        size_t room = (size_t)(w->end - w->pos), k;
        if (room == 0) {
            bool tried = false;
            /* The held chunk is full and the rest needs 2+ chunks: take
             * and hand back the run of chunks in batches. */
            if (w->hdr != NULL && w->loc.payload_size == w->bulk_payload &&
                n > w->bulk_payload - SMB_PACKET_HEADER_SIZE) {
                k = put_bulk(w, src, n);
                src += k;
                n -= k;
                if (n == 0 || w->pos < w->end)
                    continue;
                tried = true;        /* no chunk was free at once */
            }
            next_buffer(w, tried);
            continue;
        }
        k = room < n ? room : n;
        memcpy(w->pos, src, k);
        w->pos += k;
        src += k;
        n -= k;
    }
}

static inline void put(tw_writer *w, const void *src, size_t n)
{
    if (LIKELY((size_t)(w->end - w->pos) >= n)) {
        memcpy(w->pos, src, n);
        w->pos += n;
    } else {
        put_slow(w, src, n);
    }
}

static inline bool field_ok(tw_writer *w, uint32_t field)
{
    if (UNLIKELY(!w->in_packet || field - 1u >= MAX_FIELD)) {
        w->stats.misuse++;
        return false;
    }
    return true;
}

/* ---- patches ------------------------------------------------------------ */

static tw_patch_entry *patch_entry(tw_writer *w, uint32_t seq)
{
    return &w->patches[seq - w->patches_base_seq];
}

static inline bool patch_ready(const tw_writer *w)
{
    return w->patches_head < w->patches_n &&
           w->patches[w->patches_head].data[0] != 0;
}

/* New patch entry for a size field at payload offset `off` of chunk
 * `chunk_id`; returns its sequence number, or false if out of memory. */
static bool patch_add(tw_writer *w, uint32_t chunk_id, uint32_t off,
                      uint32_t *seq)
{
    tw_patch_entry *e;
    if (w->patches_n == w->patches_cap) {
        uint32_t ncap = w->patches_cap ? w->patches_cap * 2 : 16;
        tw_patch_entry *p = realloc(w->patches, ncap * sizeof(*p));
        if (p == NULL)
            return false;
        w->patches = p;
        w->patches_cap = ncap;
    }
    e = &w->patches[w->patches_n];
    e->chunk_id = chunk_id;
    e->offset = (uint16_t)off;
    memset(e->data, 0, sizeof(e->data));
    *seq = w->patches_base_seq + w->patches_n;
    w->patches_n++;
    w->stats.patches_created++;
    return true;
}

/* Pop ready patch entries from the front of the FIFO into groups (at most
 * TW_HB_PATCHES patches in TW_HB_GROUPS groups; per chunk,
 * trace-writer.md §6); returns the number of groups. */
enum { TW_HB_PATCHES = 64, TW_HB_GROUPS = 8 };

static size_t collect_patches(tw_writer *w, smb_patch *tmp,
                              smb_chunk_patches *groups)
{
    size_t np = 0, ng = 0;
    while (patch_ready(w) && np < TW_HB_PATCHES) {
        tw_patch_entry *e = &w->patches[w->patches_head];
        if (ng == 0 || groups[ng - 1].chunk_id != e->chunk_id) {
            if (ng == TW_HB_GROUPS)
                break;
            groups[ng].target_buffer = w->target_buffer;
            groups[ng].chunk_id = e->chunk_id;
            groups[ng].writer_id = w->writer_id;
            groups[ng].has_more_patches = 0;
            groups[ng].reserved = 0;
            groups[ng].npatches = 0;
            groups[ng].patches = &tmp[np];
            ng++;
        }
        tmp[np].offset = e->offset;
        memcpy(tmp[np].data, e->data, 4);
        np++;
        groups[ng - 1].npatches++;
        w->patches_head++;
    }
    if (ng > 0 && w->patches_head < w->patches_n &&
        w->patches[w->patches_head].chunk_id == groups[ng - 1].chunk_id)
        groups[ng - 1].has_more_patches = 1;
    if (w->patches_head == w->patches_n) {
        w->patches_base_seq += w->patches_n;
        w->patches_head = w->patches_n = 0;
    }
    return ng;
}

/* Hand back the filled chunks put_bulk left (full[0..nfull)), then the held
 * chunk (if `with_chunk`), together with the ready patch entries at the
 * front of the FIFO, grouped per chunk (trace-writer.md §6).
 * With `want` > 0 (only with the chunk) the first call also takes a new
 * chunk into *nl (same lock: one arbiter call per handoff); returns
 * whether it did. */
static bool hand_back_take(tw_writer *w, bool with_chunk, uint16_t packets,
                           size_t want, smb__chunk_loc *nl)
{
    smb_patch tmp[TW_HB_PATCHES];
    smb_chunk_patches groups[TW_HB_GROUPS];
    size_t nret = w->nfull, got = 0;

    if (with_chunk)
        w->full[nret++] = w->loc;    /* after the older filled ones */
    w->nfull = 0;
    do {
        size_t ng = collect_patches(w, tmp, groups);
        if (nret > 0 || ng > 0 || want > 0)
            got += smb__arbiter_exchange(w->arb, w->full, nret,
                                         w->target_buffer, groups, ng,
                                         w->writer_id, w->next_chunk_id,
                                         packets, want, nl);
        nret = 0;
        want = 0;
    } while (patch_ready(w));
    return got > 0;
}

static void hand_back(tw_writer *w, bool with_chunk)
{
    hand_back_take(w, with_chunk, 0, 0, NULL);
}

/* ---- chunks ------------------------------------------------------------- */

static void stall_sleep(uint32_t us)
{
    struct timespec ts;
    if (us == 0) {
        sched_yield();
        return;
    }
    ts.tv_sec = us / 1000000u;
    ts.tv_nsec = (long)(us % 1000000u) * 1000L;
    nanosleep(&ts, NULL);
}

/* Get chunk next_chunk_id into *loc under the writer's policy. `tried`:
 * the caller's own exchange already made the first attempt (and failed). */
static bool acquire(tw_writer *w, uint16_t packets, smb__chunk_loc *loc,
                    bool tried)
{
    uint32_t sleep_us = 0;
    uint64_t slept_us = 0;
    for (unsigned stalls = 0;; stalls++) {
        if (!tried && smb__arbiter_acquire_chunk(w->arb, w->writer_id,
                                                 w->next_chunk_id, packets,
                                                 loc))
            return true;
        tried = false;
        if (w->policy == TW_POLICY_DROP || smb__arbiter_is_shut_down(w->arb))
            return false;
        bool exhausted = stalls >= TW_MAX_STALLS &&
                         slept_us >= TW_MAX_STALL_US;
        if (w->policy == TW_POLICY_STALL_THEN_DROP &&
            (w->dropping || exhausted))
            return false;
        if (exhausted) {
            fprintf(stderr, "shmtrace: writer %u found no free SMB chunk "
                    "in %llu s (%u stalls, policy stall-then-abort): the "
                    "service is not draining the shared memory; aborting\n",
                    (unsigned)w->writer_id,
                    (unsigned long long)(slept_us / 1000000u), stalls);
            abort();
        }
        stall_sleep(sleep_us);
        slept_us += sleep_us;
        /* 0, 8, 72, 584 us, then every TW_STALL_SLEEP_MAX_US: a service
         * busy for a while (a file pass that the producers outran holds
         * the commits back) is noticed within 2 ms once it drains. */
        sleep_us = (sleep_us + 1) * 8;
        if (sleep_us > TW_STALL_SLEEP_MAX_US)
            sleep_us = TW_STALL_SLEEP_MAX_US;
        w->stats.stalls++;
        smb__arbiter_count_stall(w->arb);
    }
}

/* Like acquire, but bounded by TW_MARKER_BUDGET_US of sleep whatever the
 * policy, and never once the arbiter is shut down. */
static bool acquire_bounded(tw_writer *w, smb__chunk_loc *loc)
{
    uint32_t sleep_us = 0, slept_us = 0;
    for (;;) {
        if (smb__arbiter_is_shut_down(w->arb))
            return false;
        if (smb__arbiter_acquire_chunk(w->arb, w->writer_id,
                                       w->next_chunk_id, 0, loc))
            return true;
        if (slept_us >= TW_MARKER_BUDGET_US)
            return false;
        if (sleep_us > TW_MARKER_BUDGET_US - slept_us)
            sleep_us = TW_MARKER_BUDGET_US - slept_us;
        stall_sleep(sleep_us);
        slept_us += sleep_us;
        sleep_us = (sleep_us + 1) * 8;
        if (sleep_us > 2000u)        /* poll often: others want chunks */
            sleep_us = 2000u;
    }
}

/* Address one past the held chunk's payload. */
static inline uintptr_t held_chunk_end(const tw_writer *w)
{
    return (uintptr_t)w->loc.payload + w->loc.payload_size;
}

/* w->begin_limit for the held chunk and w->pf (see tw_int.h). */
static void set_begin_limit(tw_writer *w)
{
    uintptr_t cend = held_chunk_end(w);
    uintptr_t lim = cend - (uintptr_t)w->loc.payload > 130 ? cend - 130 : 0;
    uintptr_t pf = (uintptr_t)w->pf;
    if (pf < cend) {
        uintptr_t want = pf > (uintptr_t)w->loc.payload + TW_PREFETCH_AHEAD / 2
                         ? pf - TW_PREFETCH_AHEAD / 2
                         : (uintptr_t)w->loc.payload;
        if (want < lim)
            lim = want;
    }
    w->begin_limit = lim;
}

/* Ask for the held chunk's lines for writing, from where earlier calls
 * stopped (w->pf) up to TW_PREFETCH_AHEAD past pos + n, at most
 * TW_PREFETCH_MAX bytes of lines per call, never past the chunk: at packet
 * begin (n = 0, packet_begin_slow, once pos reaches begin_limit) and for a
 * field of TW_PREFETCH_MIN bytes or more that fits in the chunk
 * (prefetch_for). Those lines were last touched by the service on another
 * core, which read the chunk out and cleared its header: each store into
 * one waits for the line to come back, and the copy's stores filled the store
 * buffer, so that the writer's next store, or a load the buffer could not
 * forward, waited for all of them. shmtrace-producer through shmtraced
 * (perfetto consumer, builds alternating, 2026-12-05), producer CPU per
 * packet: with fields alone, 1 KiB packets 312 ns against 421 with 1
 * producer (medians of 16 recordings of 256 MB), 398 against 460 with 4
 * (12); adding packet begin, 64 B packets 81.5 against 112.5 (16
 * recordings of 64 MB; fields alone 118) and 98.5 against 130 with 4
 * (12), 1 KiB the same as with fields alone (267 against 270.5). bench_tw,
 * where the stand-in service runs on the writer's thread: small packets
 * 9.6 against 8.9 ns (11 rounds alternating; 3.8 more instructions per
 * packet), 64 KiB packets on 4 KiB pages unchanged (70.9 against 71.1 ns
 * per page with fields alone). Not for fields that do not fit (they fill
 * chunk after chunk in put_bulk): asking for the rest of the chunk first
 * was 3% slower in bench_tw on 4 KiB pages, and asking ahead inside
 * put_bulk's copies made 64 KiB packets slower end to end (10.5 against
 * 8.3 us of producer CPU per packet). */
static __attribute__((noinline)) void prefetch_chunk(tw_writer *w,
                                                      size_t n)
{
    uintptr_t pos = (uintptr_t)w->pos;
    uintptr_t cend = held_chunk_end(w);
    uintptr_t from = (uintptr_t)w->pf > pos ? (uintptr_t)w->pf : pos;
    uintptr_t lim = cend - pos > n + TW_PREFETCH_AHEAD
                    ? pos + n + TW_PREFETCH_AHEAD : cend;
    from &= ~(uintptr_t)63;
    if (lim > from && lim - from > TW_PREFETCH_MAX)
        lim = from + TW_PREFETCH_MAX;
    for (uintptr_t a = from; a < lim; a += 64) {
#if defined(__x86_64__) || defined(__i386__)
        /* 0F 0D /1: a no-op where the CPU lacks it */
        __asm__ __volatile__("prefetchw %0"
                             : : "m"(*(const uint8_t *)a));
#else
        __builtin_prefetch((const void *)a, 1, 3);
#endif
    }
    if (lim > from) {
        w->pf = (uint8_t *)lim;
        set_begin_limit(w);
    }
}

static inline void prefetch_for(tw_writer *w, size_t n)
{
    if (n >= TW_PREFETCH_MIN && w->hdr != NULL && !w->dropping &&
        held_chunk_end(w) - (uintptr_t)w->pos >= n &&
        (uintptr_t)w->pf < (uintptr_t)w->pos + n + TW_PREFETCH_AHEAD / 2)
        prefetch_chunk(w, n);
}

/* Hold the chunk just acquired as chunk next_chunk_id (which moves on:
 * ids wrap at 2^32). */
static void adopt_chunk(tw_writer *w, const smb__chunk_loc *loc,
                        uint16_t count, uint8_t flags)
{
    w->loc = *loc;
    w->hdr = loc->hdr;
    w->chunk_id = w->next_chunk_id++;
    w->stats.chunks_used++;
    w->count = count;
    w->flags = flags;
    w->inflated = false;
    w->pos = loc->payload;
    w->end = loc->payload + loc->payload_size;
    w->pf = loc->payload;
    set_begin_limit(w);
}

static void drop_chunk_state(tw_writer *w)
{
    w->hdr = NULL;
    w->loc.hdr = NULL;
    w->pos = w->end = w->garbage;
    w->begin_limit = 0;
}

/* Return the held chunk (inflated: append the empty fragment first). */
static void return_chunk(tw_writer *w)
{
    if (w->inflated) {
        *w->pos++ = 0;               /* room is guaranteed: see packet_end */
        w->inflated = false;
    }
    hand_back(w, true);
    drop_chunk_state(w);
}

/* return_chunk, and take a fresh chunk (packets {0, 0}) into *nl in the
 * same arbiter call; false if none was free at once (the caller then
 * applies its policy, acquire(..., tried = true)). */
static bool return_chunk_take(tw_writer *w, smb__chunk_loc *nl)
{
    bool ok;
    if (w->inflated) {
        *w->pos++ = 0;
        w->inflated = false;
    }
    ok = hand_back_take(w, true, 0, 1, nl);
    drop_chunk_state(w);
    return ok;
}

static void to_garbage(tw_writer *w)
{
    w->pos = w->garbage;
    w->end = w->garbage + TW_GARBAGE_SIZE;
    w->begin_limit = 0;
}

static void enter_drop(tw_writer *w)
{
    w->dropping = true;
    w->signal_loss = true;
    w->retry = false;
    w->stats.drop_episodes++;
    to_garbage(w);
}

/* The held chunk's open fragment continues in the next chunk (§4 steps
 * 2-3): close it with a 4-byte size, flag it, turn every open nested size
 * field still inside it into a patch entry, publish the header. */
static void close_continuing(tw_writer *w)
{
    smb_write_redundant_varint(w->frag_field,
            (uint32_t)(w->pos - (w->frag_field + 4)));
    w->flags |= SMB_FLAG_LAST_PACKET_CONTINUES_ON_NEXT;
    for (uint32_t i = 0; i < w->depth; i++) {
        tw_nested *n = &w->stack[i];
        uint32_t seq;
        if (n->kind != SF_CHUNK)
            continue;
        if (patch_add(w, w->chunk_id, (uint32_t)(n->field - w->loc.payload),
                      &seq)) {
            n->kind = SF_PATCH;
            n->patch_seq = seq;
            w->flags |= SMB_FLAG_NEEDS_PATCHING;
        } else {
            n->kind = SF_DETACHED;   /* OOM: size lost, chunk stays */
            w->stats.misuse++;
        }
    }
    publish_packets(w);
}

/* Reserve the open fragment's size field at pos, zeroed: 1 byte, with
 * `end` the packet's 126-byte limit (short: the file comment), or 4 bytes.
 * `logical`: the packet offset of the fragment's first byte. */
static inline void open_fragment(tw_writer *w, bool short_field,
                                 bool continues, uint64_t logical)
{
    w->frag_field = w->pos;
    if (short_field) {
        *w->pos++ = 0;
        w->chunk_end = w->end;
        w->end = w->pos + 126;
        w->short_field = true;
    } else {
        memset(w->pos, 0, 4);
        w->pos += 4;
    }
    w->frag_continues = continues;
    w->anchor = w->pos;
    w->anchor_logical = logical;
}

/* Start the continuation fragment in the chunk just adopted; `logical`:
 * the packet offset its first byte has. */
static void open_continuation(tw_writer *w, uint64_t logical)
{
    open_fragment(w, false, true, logical);
}

/* A packet begins in the held chunk: it takes the inflated slot, else one
 * more in the count. */
static inline void count_packet_start(tw_writer *w)
{
    if (w->inflated) {
        w->inflated = false;
    } else {
        w->count++;
        publish_packets(w);
    }
    w->stats.packets_written++;
}

/* A packet with a short size field ends: store its length (< 127 by the
 * limit) and give `end` back the chunk's end. */
static inline void close_short_field(tw_writer *w)
{
    w->frag_field[0] = (uint8_t)(w->pos - (w->frag_field + 1));
    w->end = w->chunk_end;
    w->short_field = false;
}

/* Out of room inside a packet: move on to the next chunk (§4) or drop (§9).
 * `tried`: put_bulk's exchange just failed to get one (see acquire). */
static void next_buffer(tw_writer *w, bool tried)
{
    uint64_t logical = logical_pos(w);
    smb__chunk_loc nl;

    if (w->dropping) {
        to_garbage(w);               /* wrap; retry a chunk at next packet */
        w->retry = true;
    } else if (acquire(w, smb_make_packets(1,
                       SMB_FLAG_FIRST_PACKET_CONTINUES_FROM_PREV), &nl,
                       tried)) {
        close_continuing(w);
        return_chunk(w);
        adopt_chunk(w, &nl, 1, SMB_FLAG_FIRST_PACKET_CONTINUES_FROM_PREV);
        open_continuation(w, logical);
        return;
    } else {
        smb_write_redundant_varint(w->frag_field,
                                   SMB_PACKET_SIZE_DROP_PACKET);
        for (uint32_t i = 0; i < w->depth; i++)
            if (w->stack[i].kind == SF_CHUNK)
                w->stack[i].kind = SF_DETACHED;
        return_chunk(w);
        enter_drop(w);
        w->stats.packets_lost++;
        w->lost_unseen = !w->frag_continues;
    }
    w->anchor = w->pos;
    w->anchor_logical = logical;
}

/* put_slow with the held chunk full, of the arbiter's own chunk size
 * (every chunk put_bulk takes has it), and more than one continuation
 * payload (P = payload - 4 bytes) left to write: the rest needs exactly
 * ceil(n / P) more chunks, every one but the last filled to the end. So
 * they are taken up to TW_BULK_CHUNKS at a time, filled with one memcpy
 * each, and handed back together: each arbiter call returns the previous
 * run and takes the next (one lock per run instead of two per chunk). No
 * chunk is taken that the bytes do not fill. The last run goes back
 * before this returns: no filled chunk stays with the writer after the
 * write (a scraper skips BeingWritten chunks of count 1, and a packet's
 * first fragment must reach the service for a cut packet to be counted).
 * Returns the bytes written; fewer than n when no chunk was free at once
 * (the filled ones are handed back by then): put_slow's next_buffer then
 * applies the policy.
 * Tried on 2026-12-06 and not kept (bench_tw --large, 64 KiB packets on
 * 4 KiB pages, three runs each, alternating with the code as it is):
 * marking each middle chunk Complete right after its copy, while its
 * header line is still in L1, instead of in the arbiter's queue_locked
 * (0.74-0.76x memcpy against 0.75-0.76x, and 0.64x in a slow phase);
 * runs of up to 32 chunks and half the SMB, so that a 64 KiB packet (17
 * chunks) takes one exchange instead of two (0.72-0.75x against 0.73x;
 * again on 2026-12-07 with a third of the SMB, `bench_tw --size 65536
 * --quick` alternating three times: 0.65 / 0.66 / 0.73x against 0.73 /
 * 0.74 / 0.74x). A profile of that case (perf, DWARF call graphs) puts
 * the writer's memmove level with the baseline's (35% against 36.5% of
 * the samples); the gap is the handoff: the arbiter's exchanges (about
 * three per packet, each a lock taken right behind a copy), chunk states
 * and the stand-in service. */
static size_t put_bulk(tw_writer *w, const uint8_t *src, size_t n)
{
    smb__chunk_loc got[TW_BULK_CHUNKS];
    const size_t P = w->loc.payload_size - SMB_PACKET_HEADER_SIZE;
    const uint16_t cont = smb_make_packets(1,
            SMB_FLAG_FIRST_PACKET_CONTINUES_FROM_PREV);
    const uint16_t middle = smb_make_packets(1,
            SMB_FLAG_FIRST_PACKET_CONTINUES_FROM_PREV |
            SMB_FLAG_LAST_PACKET_CONTINUES_ON_NEXT);
    const uint64_t logical0 = logical_pos(w);
    uint8_t pvarint[4];
    size_t done = 0;

    smb_write_redundant_varint(pvarint, (uint32_t)P);
    while (done < n && w->pos == w->end) {
        size_t want = (n - done + P - 1) / P, ngot, i, k;
        if (want > TW_BULK_CHUNKS)
            want = TW_BULK_CHUNKS;
        ngot = smb__arbiter_exchange(w->arb, w->full, w->nfull,
                                     w->target_buffer, NULL, 0,
                                     w->writer_id, w->next_chunk_id, cont,
                                     want, got);
        w->nfull = 0;
        if (ngot == 0)
            break;
        /* The held chunk (full): its fragment continues. */
        close_continuing(w);
        w->full[w->nfull++] = w->loc;
        /* All but the last are middle chunks: this write fills them to
         * the end and goes on (ngot <= ceil(left / P)), so their one
         * fragment is P bytes with both continuation flags and no nested
         * size field lies in them: size, bytes, header; no writer state.
         */
        for (i = 0; i + 1 < ngot; i++) {
            uint8_t *p = got[i].payload;
            memcpy(p, pvarint, 4);
            memcpy(p + SMB_PACKET_HEADER_SIZE, src + done, P);
            done += P;
            atomic_store_explicit(&got[i].hdr->packets, middle,
                                  memory_order_release);
            w->full[w->nfull++] = got[i];
        }
        w->next_chunk_id += (uint32_t)i;     /* ids wrap at 2^32 */
        w->stats.chunks_used += i;
        /* The last one is held, its fragment open (closed at the next
         * crossing only once that crossing has its chunk). */
        adopt_chunk(w, &got[i], 1, SMB_FLAG_FIRST_PACKET_CONTINUES_FROM_PREV);
        open_continuation(w, logical0 + done);
        k = (size_t)(w->end - w->pos);   /* == P unless want was 1 */
        k = n - done < k ? n - done : k;
        memcpy(w->pos, src + done, k);
        w->pos += k;
        done += k;
    }
    if (w->nfull > 0)
        hand_back(w, false);         /* the last run, before we return */
    return done;
}

/* ---- lifecycle ---------------------------------------------------------- */

tw_writer *tw_writer_create(smb_arbiter *arb, uint32_t target_buffer,
                            tw_policy policy)
{
    tw_writer *w;
    if (arb == NULL || target_buffer == 0 ||
        (policy != TW_POLICY_DROP && policy != TW_POLICY_STALL_THEN_ABORT &&
         policy != TW_POLICY_STALL_THEN_DROP)) {
        errno = EINVAL;
        return NULL;
    }
    w = calloc(1, sizeof(*w));
    if (w == NULL)
        return NULL;
    w->arb = arb;
    w->target_buffer = target_buffer;
    w->policy = policy;
    w->writer_id = smb__arbiter_alloc_writer(arb, target_buffer);
    w->bulk_payload = smb__arbiter_chunk_payload(arb);
    to_garbage(w);
    w->anchor = w->pos;
    if (w->writer_id == 0)
        w->dropping = true;          /* null writer: never gets a chunk */
    return w;
}

/* Hand back the held chunk (or ready patches) and flush the arbiter. */
static int commit_held(tw_writer *w)
{
    if (w->hdr != NULL)
        return_chunk(w);
    else if (patch_ready(w))
        hand_back(w, false);
    return smb_arbiter_flush(w->arb, 0);
}

/* Flag a loss no later packet has flagged yet: see the file comment. */
static void write_loss_marker(tw_writer *w)
{
    smb__chunk_loc nl;

    if (w->in_packet || w->writer_id == 0 ||
        !(w->dropping || w->signal_loss))
        return;
    if (w->dropping || w->hdr == NULL ||
        (size_t)(w->end - w->pos) < TW_MIN_BYTES_FOR_PACKET ||
        w->count >= TW_MAX_PACKETS_PER_CHUNK) {
        if (w->hdr != NULL)
            return_chunk(w);
        if (!acquire_bounded(w, &nl)) {
            w->stats.loss_markers_failed++;
            return;                  /* still pending: a later packet */
        }
        adopt_chunk(w, &nl, 0, 0);
        w->dropping = false;
        w->retry = false;
    }
    w->signal_loss = true;
    tw_packet_begin(w);              /* writes 42 = 257 and clears it */
    tw_packet_end(w);
    w->stats.packets_written--;      /* not a caller's packet */
    w->stats.loss_markers++;
}

void tw_writer_destroy(tw_writer *w)
{
    if (w == NULL)
        return;
    if (w->in_packet)
        tw_packet_end(w);
    write_loss_marker(w);
    if (w->hdr != NULL || patch_ready(w) || w->loss_noted)
        commit_held(w);              /* loss reports go before we leave */
    smb__arbiter_free_writer(w->arb, w->writer_id);
    free(w->patches);
    free(w);
}

uint16_t tw_writer_id(const tw_writer *w)
{
    return w->writer_id;
}

void tw_writer_get_stats(const tw_writer *w, tw_writer_stats *out)
{
    *out = w->stats;
}

int tw_writer_flush(tw_writer *w)
{
    if (w->in_packet)
        return -EBUSY;
    if (w->writer_id == 0)
        return 0;
    write_loss_marker(w);
    return commit_held(w);
}

/* ---- packets ------------------------------------------------------------ */

/* tw_packet_begin in full: any state (see tw_packet_begin for the common
 * case). */
static __attribute__((noinline)) void packet_begin_slow(tw_writer *w)
{
    smb__chunk_loc nl;

    if (UNLIKELY(w->in_packet)) {
        w->stats.misuse++;
        tw_packet_end(w);
    }
    if (UNLIKELY(w->dropping)) {
        /* Retry a real chunk only now and then (garbage nearly full or
         * wrapped); a null writer (id 0) just wraps its garbage. */
        if (w->retry ||
            (size_t)(w->end - w->pos) < TW_MIN_BYTES_FOR_PACKET) {
            if (w->writer_id != 0 && acquire(w, 0, &nl, false)) {
                adopt_chunk(w, &nl, 0, 0);
                w->dropping = false;
            } else {
                to_garbage(w);
            }
            w->retry = false;
        }
    } else if (UNLIKELY(w->hdr == NULL ||
                        (size_t)(w->end - w->pos) < TW_MIN_BYTES_FOR_PACKET ||
                        w->count >= TW_MAX_PACKETS_PER_CHUNK)) {
        bool tried = w->hdr != NULL;
        if ((tried && return_chunk_take(w, &nl)) ||
            acquire(w, 0, &nl, tried))
            adopt_chunk(w, &nl, 0, 0);
        else
            enter_drop(w);
    }
    if (UNLIKELY(patch_ready(w)) && !w->dropping)
        hand_back(w, false);
    /* Ask for the next lines of the chunk, TW_PREFETCH_AHEAD past pos,
     * once pos is within TW_PREFETCH_AHEAD / 2 of what was asked for. */
    if (LIKELY(!w->dropping) && w->hdr != NULL &&
        (uintptr_t)w->pos >= w->begin_limit &&
        (uintptr_t)w->pf < held_chunk_end(w))
        prefetch_chunk(w, 0);

    open_fragment(w, !w->dropping && w->end - w->pos > 130, false, 0);
    w->in_packet = true;             /* depth and overflow_depth are 0:
                                        tw_packet_end closes them all */
    if (LIKELY(!w->dropping)) {
        count_packet_start(w);
        if (UNLIKELY(w->signal_loss)) {
            tw_add_varint(w, FIELD_PREVIOUS_PACKET_DROPPED,
                          LOSS_PRESENT_SMB_FULL);
            w->signal_loss = false;
        }
    } else {
        w->stats.packets_lost++;
        w->lost_unseen = true;
    }
    if (UNLIKELY(!w->first_done)) {
        tw_add_varint(w, FIELD_FIRST_PACKET_ON_SEQUENCE, 1);
        w->first_done = true;
    }
    /* A relaxed load per packet; the exchange only when a clear is asked.
     * A dropped packet leaves the request for the next written one. */
    if (UNLIKELY(w->packet_cleared))
        w->packet_cleared = false;
    if (UNLIKELY(atomic_load_explicit(&w->clear_req, memory_order_relaxed)) &&
        !w->dropping &&
        atomic_exchange_explicit(&w->clear_req, false,
                                 memory_order_acquire)) {
        tw_add_varint(w, FIELD_SEQUENCE_FLAGS, SEQ_INCREMENTAL_STATE_CLEARED);
        w->packet_cleared = true;
    }
}

/* The common case, with no stack frame: a chunk with room for a short
 * size field and for another packet (pos below begin_limit: more than 130
 * bytes left), its next lines asked for already, nothing to signal or
 * hand back. In that state packet_begin_slow does exactly this. (No chunk
 * held means begin_limit 0.) */
void tw_packet_begin(tw_writer *w)
{
    if (UNLIKELY(w->in_packet || w->dropping || w->signal_loss ||
                 !w->first_done || w->packet_cleared ||
                 (uintptr_t)w->pos >= w->begin_limit ||
                 w->count >= TW_MAX_PACKETS_PER_CHUNK ||
                 w->patches_head != w->patches_n ||
                 atomic_load_explicit(&w->clear_req,
                                      memory_order_relaxed))) {
        packet_begin_slow(w);
        return;
    }
    open_fragment(w, true, false, 0);
    w->in_packet = true;
    count_packet_start(w);
}

void tw_writer_clear_incremental_state(tw_writer *w)
{
    if (w)
        atomic_store_explicit(&w->clear_req, true, memory_order_release);
}

int tw_packet_incremental_state_cleared(const tw_writer *w)
{
    return w && w->in_packet && w->packet_cleared;
}

/* tw_packet_end in full: any state (see tw_packet_end). */
static __attribute__((noinline)) void packet_end_slow(tw_writer *w)
{
    uint32_t len;

    if (UNLIKELY(!w->in_packet)) {
        w->stats.misuse++;
        return;
    }
    while (w->depth > 0)             /* overflow_depth > 0 needs depth */
        tw_end_nested(w);
    w->in_packet = false;
    if (UNLIKELY(w->dropping)) {
        if (w->lost_unseen && w->writer_id != 0) {
            smb__arbiter_note_loss(w->arb, w->writer_id, w->target_buffer,
                                   1, logical_pos(w));
            w->loss_noted = true;
        }
        w->lost_unseen = false;
        return;
    }
    if (LIKELY(w->short_field)) {
        close_short_field(w);        /* pos < chunk_end: inflated below */
    } else {
        len = (uint32_t)(w->pos - (w->frag_field + 4));
        if (len < 127 && !w->frag_continues) {
            w->frag_field[0] = (uint8_t)len;
            compact3(w->frag_field, len, w->end);
            w->pos -= 3;
        } else {
            smb_write_redundant_varint(w->frag_field, len);
        }
    }
    if (w->pos == w->end) {
        return_chunk(w);
    } else {
        w->count++;                  /* inflate: see the file comment */
        w->inflated = true;
        publish_packets(w);
    }
    if (UNLIKELY(patch_ready(w)))
        hand_back(w, false);
}

/* The common case inline: a short size field (so a chunk, not dropping,
 * room past the limit), nothing nested open, no patch waiting.
 * Nothing nested is depth == 0 alone (overflow_depth grows only at
 * TW_MAX_NESTING, depth shrinks only once it is 0). Testing both, adjacent
 * in the struct, the compiler read them with one 8-byte load, which the
 * 4-byte store of depth that tw_end_nested had just made cannot be
 * forwarded to: the load waited until every older store had reached the
 * cache, the packet's whole copy into the SMB included (a third of
 * shmtrace-producer's samples sat on that load, 1 KiB packets through
 * shmtraced, 2026-12-05). On its own this moved the wait to the writer's
 * next stores; prefetch_for removed it. */
void tw_packet_end(tw_writer *w)
{
    if (UNLIKELY(!w->short_field || w->depth != 0 ||
                 w->patches_head != w->patches_n)) {
        packet_end_slow(w);
        return;
    }
    close_short_field(w);
    w->in_packet = false;
    w->count++;                      /* inflate: see the file comment */
    w->inflated = true;
    publish_packets(w);
}

/* ---- fields ------------------------------------------------------------- */

void tw_add_varint(tw_writer *w, uint32_t field, uint64_t v)
{
    if (!field_ok(w, field))
        return;
    if (LIKELY(w->end - w->pos >= 16)) {
        uint8_t *p = enc_varint(w->pos, ((uint64_t)field << 3) | WT_VARINT);
        w->pos = enc_varint(p, v);
    } else {
        uint8_t tmp[16], *p = enc_varint(tmp, ((uint64_t)field << 3));
        p = enc_varint(p, v);
        put_slow(w, tmp, (size_t)(p - tmp));
    }
}

void tw_add_int64(tw_writer *w, uint32_t field, int64_t v)
{
    tw_add_varint(w, field, (uint64_t)v);
}

void tw_add_sint64(tw_writer *w, uint32_t field, int64_t v)
{
    tw_add_varint(w, field, ((uint64_t)v << 1) ^ (uint64_t)(v >> 63));
}

static void add_fixed(tw_writer *w, uint32_t field, uint32_t wt,
                      uint64_t v, size_t n)
{
    uint8_t tmp[16], *p;
    if (!field_ok(w, field))
        return;
    p = enc_varint(tmp, ((uint64_t)field << 3) | wt);
    for (size_t i = 0; i < n; i++)
        *p++ = (uint8_t)(v >> (8 * i));
    put(w, tmp, (size_t)(p - tmp));
}

void tw_add_fixed32(tw_writer *w, uint32_t field, uint32_t v)
{
    add_fixed(w, field, WT_FIXED32, v, 4);
}

void tw_add_fixed64(tw_writer *w, uint32_t field, uint64_t v)
{
    add_fixed(w, field, WT_FIXED64, v, 8);
}

void tw_add_double(tw_writer *w, uint32_t field, double v)
{
    uint64_t bits;
    memcpy(&bits, &v, sizeof(bits));
    add_fixed(w, field, WT_FIXED64, bits, 8);
}

void tw_add_bytes(tw_writer *w, uint32_t field, const void *data,
                  size_t size)
{
    if (!field_ok(w, field))
        return;
    if (size > 0 && data == NULL) {
        w->stats.misuse++;
        return;
    }
    if (LIKELY((size_t)(w->end - w->pos) >= size + 15)) {
        uint8_t *p = enc_varint(w->pos, ((uint64_t)field << 3) | WT_LEN);
        p = enc_varint(p, size);
        if (size <= 32) {
            copy_small(p, data, size);
        } else {
            prefetch_for(w, size);
            memcpy(p, data, size);
        }
        w->pos = p + size;
    } else {
        prefetch_for(w, size);       /* a 1-byte size field's 126-byte
                                        limit sends most fields here */
        uint8_t tmp[16], *p = enc_varint(tmp, ((uint64_t)field << 3) | WT_LEN);
        p = enc_varint(p, size);
        put_slow(w, tmp, (size_t)(p - tmp));
        if (size > 0)
            put_slow(w, data, size);
    }
}

void tw_add_string(tw_writer *w, uint32_t field, const char *str)
{
    if (str == NULL) {
        w->stats.misuse++;
        return;
    }
    tw_add_bytes(w, field, str, strlen(str));
}

void tw_append_raw(tw_writer *w, const void *data, size_t size)
{
    if (UNLIKELY(!w->in_packet || (size > 0 && data == NULL))) {
        w->stats.misuse++;
        return;
    }
    prefetch_for(w, size);
    if (size > 0)
        put(w, data, size);
}

void tw_begin_nested(tw_writer *w, uint32_t field)
{
    uint8_t tmp[8], *p;
    tw_nested *n;

    if (!field_ok(w, field))
        return;
    if (UNLIKELY(w->depth == TW_MAX_NESTING || w->overflow_depth > 0)) {
        w->overflow_depth++;         /* body gets written flat */
        w->stats.misuse++;
        return;
    }
    p = enc_varint(tmp, ((uint64_t)field << 3) | WT_LEN);
    put(w, tmp, (size_t)(p - tmp));
    if (UNLIKELY(w->end - w->pos < 4)) {
        if (w->short_field)
            widen_size_field(w);
        if (w->end - w->pos < 4)
            next_buffer(w, false);   /* a size field never straddles */
    }
    n = &w->stack[w->depth++];
    n->kind = SF_CHUNK;
    n->field = w->pos;
    w->pos += 4;
    n->body_start = logical_pos(w);
}

void tw_end_nested(tw_writer *w)
{
    tw_nested *n;
    uint64_t len;

    if (UNLIKELY(w->overflow_depth > 0)) {
        w->overflow_depth--;
        return;
    }
    if (UNLIKELY(!w->in_packet || w->depth == 0)) {
        w->stats.misuse++;
        return;
    }
    n = &w->stack[--w->depth];
    len = logical_pos(w) - n->body_start;
    if (UNLIKELY(len > SMB_MAX_MESSAGE_LENGTH)) {
        w->stats.misuse++;           /* cannot be encoded in 4 bytes */
        len = SMB_MAX_MESSAGE_LENGTH;
    }
    switch (n->kind) {
    case SF_CHUNK:
        if (len <= 127 && !w->dropping) {
            n->field[0] = (uint8_t)len;
            compact3(n->field, (size_t)len, w->end);
            w->pos -= 3;
        } else {
            smb_write_redundant_varint(n->field, (uint32_t)len);
        }
        break;
    case SF_PATCH:
        smb_write_redundant_varint(patch_entry(w, n->patch_seq)->data,
                                   (uint32_t)len);
        break;
    default:
        break;
    }
}
