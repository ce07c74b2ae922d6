/*
 * tb_buffer.c - libbuf buffer lifecycle and the outer read walk
 * (spec trace-buffer.md §1, §7, §11).
 *
 * Memory: one anonymous private mapping per buffer (tb_mem.c: huge pages,
 * reuse of released rings); everything inside it is addressed by 32-bit offsets, so a clone
 * is a copy of [0, used_size) plus the sequence table.
 *
 * Outer read walk: from the read cursor, records in buffer order; for each
 * chunk record an inner walk (tb_walk.c) yields the packets of its sequence
 * up to it; then the cursor moves past that record. Reading stops at the
 * write cursor (or at the end when the writer sits at offset 0).
 *
 * Read floor: a pass begins at the oldest record, but records read by an
 * earlier pass are only erased, not removed, and stepping over each costs
 * a cache miss (32768 of them in a 128 MiB ring of 4 KiB chunks, for every
 * tb_begin_read of a service that reads in steps). So the reader keeps
 * rd_floor, the position up to which every record it passed was erased,
 * and the next tb_begin_read starts there; evict() drops the floor when a
 * write lands on it (tb_int.h).
 *
 * Read resume: a sequence stalls a pass when its next packet continues in
 * a chunk not yet committed (or a chunk is incomplete); the floor then
 * stays at its record, and every later pass stepped again over all the
 * records read since (a 1 KiB x4 recording through shmtraced, 2026-12-06:
 * 139825 of the 166382 records visited were erased, about 213 per pass,
 * against 7 of 24763 with one writer). When a pass went from the floor to
 * the write cursor, the records it left unread are exactly those of the
 * sequences that stalled in it; so the next pass walks those sequences
 * first, each from its oldest record up to its last one in the region
 * (the prologue), and then starts where the last pass stopped. If the
 * floor goes away meanwhile (a write lands on it, a rewind), or a
 * sequence cannot be walked to its end in a few tries, the pass falls
 * back to stepping from the floor or the oldest record, as before.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "tb_int.h"

static tb_buffer *alloc_buffer(size_t size, tb_fill_policy policy)
{
    tb_buffer *b = calloc(1, sizeof(*b));
    if (!b)
        return NULL;
    uint8_t *mem = tb__mem_alloc(size);
    if (!mem) {
        free(b);
        errno = ENOMEM;
        return NULL;
    }
    b->mem = mem;
    b->size = size;
    b->policy = policy;
    b->generation = 1;
    b->rewind_at = tb__default_rewind_at(size);
    b->max_seqs_per_uid = tb__default_max_seqs_per_uid(size);
    b->stats.buffer_size = size;
    return b;
}

SHMTRACE_API tb_buffer *tb_create(size_t size, tb_fill_policy policy)
{
    if (size == 0 || size > TB__MAX_SIZE ||
        (policy != TB_RING_BUFFER && policy != TB_DISCARD)) {
        errno = EINVAL;
        return NULL;
    }
    size = (size + 4095u) & ~(size_t)4095u;
    return alloc_buffer(size, policy);
}

SHMTRACE_API void tb_destroy(tb_buffer *b)
{
    if (!b)
        return;
    tb__seq_free_all(b);
    free(b->slices);
    free(b->cfrags);
    free(b->hist);
    free(b->hhash);
    tb__share_free(&b->hist_share);
    free(b->pro_keys);
    free(b->rw_items);
    tb__loss_free(b);
    tb__mem_free(b->mem, b->size);
    free(b);
}

SHMTRACE_API tb_buffer *tb_clone_readonly(const tb_buffer *src)
{
    if (!src) {
        errno = EINVAL;
        return NULL;
    }
    tb_buffer *b = alloc_buffer(src->size, src->policy);
    if (!b)
        return NULL;
    memcpy(b->mem, src->mem, src->used_size);
    b->used_size = src->used_size;
    b->wr = src->wr;
    b->rd = (b->wr == b->used_size) ? 0 : b->wr;
    b->read_only = true;
    b->discard_stop = src->discard_stop;
    b->generation = src->generation;
    b->empty_seqs = src->empty_seqs;
    b->seq_age = src->seq_age;
    b->stats = src->stats;
    b->stats.bytes_read = 0;
    b->stats.chunks_read = 0;
    b->stats.readaheads_succeeded = 0;
    b->stats.readaheads_failed = 0;
    b->stats.hist_chunks_untracked = 0; /* histograms are not cloned */
    if (tb__seq_clone_all(b, src) < 0 || tb__loss_clone(b, src) < 0) {
        tb_destroy(b);
        errno = ENOMEM;
        return NULL;
    }
    return b;
}

/* Reading is a chase through fragment headers written long ago (not
 * cached): as each record's walk starts, ask for the lines up to 8 KiB past
 * its end, each line once (b->rd_pf_end remembers how far earlier calls
 * got). bench_tb --quick, read of 128 MiB against memcpy in the same run
 * (2026-12-05, the earlier host): the 4 KiB after the next record, as until
 * then, 0.63-0.74x; up to 4 KiB past the record's end 0.86-0.94x, 8 KiB
 * 0.90-0.93x, 16 KiB 0.83-0.92x. At most 4 KiB of lines per record
 * (TB__READ_PREFETCH_MAX): records of 32 KiB (the service's, read soon
 * after they were written, still cached) otherwise had every line
 * prefetched, which read them at 0.91x the speed of the fixed window
 * (bench/ab_libbuf.sh -w svc1k); capped 1.00x, and bench_tb's read at
 * 0.96x of uncapped. In an hour when that host ran slow (bench_tb's read
 * 0.69x), 16 and 32 KiB ahead with 8 KiB per record read at 0.98x and
 * 0.96x of this (bench/ab_libbuf.sh -w read, 8 rounds).
 * Which cache: records more than TB__READ_RECENT_BYTES behind the write
 * cursor come from memory and are asked into L1 (prefetcht0); newer ones,
 * likely still in L3, into L2 (prefetcht1). Until 2026-12-05 all went to
 * L2: on the earlier host (AMD EPYC, 1 MiB L2) L1 had read 1.35x slower,
 * the lines holding the miss buffers the header chase needs. On its
 * successor (AMD EPYC family 26, 2 MiB L2, from 2026-12-05 15:54 UTC)
 * the prefetcht1 loop held 44% of tb_read_next_packet's samples and the
 * first header load 61% of tb__walk_next's; bench/ab_libbuf.sh, 8-12
 * rounds against all-L2: all-L1 read 1.09-1.65x (prefetchnta and
 * prefetchw the same), but svc1k (4 MiB behind) 0.939-0.989x; this split
 * read 1.76x, svc1k 1.024x, read64 0.998x (10 rounds each). The
 * 8 MiB is a guess at what of a 32 MiB L3 a reader can count on. */
#ifndef TB__READ_PREFETCH_AHEAD
#define TB__READ_PREFETCH_AHEAD 8192u
#endif
#define TB__READ_PREFETCH_MAX 4096u
#define TB__READ_RECENT_BYTES (8u << 20)
static void prefetch_ahead(tb_buffer *b, size_t next_rec)
{
    size_t from, end = tb__prefetch_window(&b->rd_pf_end, next_rec,
                                           TB__READ_PREFETCH_AHEAD,
                                           b->used_size,
                                           TB__READ_PREFETCH_MAX, &from);
    size_t behind = next_rec < b->wr ? b->wr - next_rec
                                     : b->wr + (b->used_size - next_rec);
    if (behind > TB__READ_RECENT_BYTES)
        for (size_t a = from; a < end; a += 64)
            __builtin_prefetch(b->mem + a, 0, 3); /* prefetcht0: to L1 */
    else
        for (size_t a = from; a < end; a += 64)
            __builtin_prefetch(b->mem + a, 0, 2); /* prefetcht1: to L2 */
}

/* The keys of the sequences that stalled in the current generation (the
 * pass that is ending) into pro_keys; false if they do not fit (no
 * memory: no resume). */
static bool collect_stalled(tb_buffer *b)
{
    b->pro_n = 0;
    for (uint32_t i = 0; i < b->nseqs; i++) {
        const tb__seq *s = &b->seqs[i];
        if (s->count == 0 || s->skip_gen != b->generation)
            continue;
        uint32_t *k = tb__grow(b->pro_keys, &b->pro_cap,
                               (size_t)b->pro_n + 1, sizeof(*k), 16);
        if (!k)
            return false;
        b->pro_keys = k;
        b->pro_keys[b->pro_n++] = s->key;
    }
    return true;
}

/* Is off in the prologue's region [rd_floor, rd_resume], in ring order?
 * (While the prologue runs the floor stays where tb_begin_read found it,
 * or is dropped: prologue_step.) */
static bool in_region(const tb_buffer *b, uint32_t off)
{
    if (b->rd_floor <= b->rd_resume)
        return off >= b->rd_floor && off <= b->rd_resume;
    return off >= b->rd_floor || off <= b->rd_resume;
}

/* s's last record (in its ChunkID order) that lies in the region. */
static bool last_in_region(const tb_buffer *b, const tb__seq *s,
                           uint32_t *target)
{
    for (uint32_t i = s->count; i-- > 0;) {
        uint32_t off = tb__ring_at(s, i)->off;
        if (in_region(b, off)) {
            *target = off;
            return true;
        }
    }
    return false;
}

/* The prologue is over: the main walk goes on from rd_resume (set by
 * tb_begin_read). With every stalled sequence walked through the region,
 * all of it is erased and the floor moves up to rd_resume. */
static void prologue_done(tb_buffer *b)
{
    b->pro_n = b->pro_i = 0;
    b->rd_contig = b->pro_clean;
    if (b->pro_clean) {
        b->rd_floor = b->rd_resume;
        b->rd_floor_valid = true;
    }
}

/* The outer walk starts at the floor, which, when there is none, goes to
 * the oldest record (nothing lies before that; a resume may rest on it
 * until a write lands on it). */
static void start_at_floor(tb_buffer *b)
{
    if (!b->rd_floor_valid) {
        b->rd_floor = (b->wr == b->used_size) ? 0 : b->wr;
        b->rd_floor_valid = true;
    }
    b->rd = b->rd_floor;
    b->rd_contig = true;
}

/* No prologue after all: step from the floor, as a pass without a resume
 * does (what the prologue walked is erased now and is stepped over). */
static void prologue_abort(tb_buffer *b)
{
    b->pro_n = b->pro_i = 0;
    start_at_floor(b);
}

/* One step of the prologue: starts the walk of the next stalled sequence
 * up to its last record in the region, or moves on to the next sequence
 * once this one has none left there or stalled again. */
static void prologue_step(tb_buffer *b, tb__walk *w)
{
    if (!b->rd_floor_valid) {
        prologue_abort(b);        /* a write landed on the floor */
        return;
    }
    tb__seq *s = tb__seq_find(b, b->pro_keys[b->pro_i]);
    uint32_t target;
    if (s && s->count > 0 && last_in_region(b, s, &target)) {
        if (s->skip_gen != b->generation) {
            if (++b->pro_tries > 3) {
                prologue_abort(b);    /* cannot happen; be safe */
                return;
            }
            tb__walk_start(b, w, (uint32_t)(s - b->seqs), target);
            b->pro_walk = true;
            return;
        }
        b->pro_clean = false;     /* stalled again: its records stay */
    }
    b->pro_tries = 0;
    if (++b->pro_i == b->pro_n)
        prologue_done(b);
}

SHMTRACE_API void tb_begin_read(tb_buffer *b)
{
    if (!b)
        return;
    bool resume = b->rd_resume_valid && b->rd_floor_valid &&
                  b->rd_resume_gen == b->generation && collect_stalled(b);
    b->rd_resume_valid = false;
    b->rd_odd = false;
    b->walk.active = false;
    b->pro_walk = false;
    b->pro_i = b->pro_tries = 0;
    if (resume) {
        b->pro_clean = true;
        b->rd = b->rd_resume;
        if (b->pro_n == 0)
            prologue_done(b);
    } else {
        b->pro_n = 0;
        start_at_floor(b);
    }
    b->generation++;
}

/* A packet of the walk's sequence was read: its sequence's properties and
 * loss bits (cleared: they go with this packet), and its writer's count. */
static inline void delivered(tb_buffer *b, const tb__walk *w,
        tb_seq_props *props, uint32_t *previous_packet_dropped)
{
    tb__seq *s = &b->seqs[w->seq];
    if (props) {
        props->producer_id = s->producer_id;
        props->writer_id = s->writer_id;
        props->uid = s->uid;
        props->pid = s->pid;
    }
    if (previous_packet_dropped)
        *previous_packet_dropped = s->loss;
    s->loss = 0;
    tb_seq_loss *le = tb__loss_of(b, s);
    if (le)
        le->packets_read++;
}

/* The next packet comes first from tb__walk_next_whole when a walk is
 * under way (a small whole packet next in its record); anything else
 * takes the general path below. bench/ab_libbuf.sh, this against the
 * general path alone, 12 rounds each (2026-12-08, AMD EPYC family 26):
 * svc64 (the service's 64 B packets, copied out) 1.24x and 1.26x
 * (medians; ahead in 10 of 12 rounds), svc1k 1.21x, read64 1.03x. */
SHMTRACE_API bool tb_read_next_packet(tb_buffer *b, tb_packet *out,
        tb_seq_props *props, uint32_t *previous_packet_dropped)
{
    tb_packet dummy;
    if (!out)
        out = &dummy;
    if (b && b->walk.active && tb__walk_next_whole(b, &b->walk, out)) {
        if (props)
            memset(props, 0, sizeof(*props));
        delivered(b, &b->walk, props, previous_packet_dropped);
        return true;
    }
    out->slices = NULL;
    out->nslices = 0;
    out->size = 0;
    if (props)
        memset(props, 0, sizeof(*props));
    if (previous_packet_dropped)
        *previous_packet_dropped = 0;
    if (!b)
        return false;
    tb__walk *w = &b->walk;
    /* At most two steps per record (start a walk, move past it), every
     * record is >= 16 bytes, and at most seven per stalled sequence in
     * the prologue (three walks, each started and ended, then moving on):
     * a bound that only a bug could reach. */
    size_t steps = 2 * (b->used_size / TB__REC_HDR_BYTES) +
                   8 * (size_t)b->pro_n + 4;
    while (steps-- > 0) {
        size_t next;
        if (!w->active && b->pro_i < b->pro_n) {
            prologue_step(b, w);
            continue;
        }
        if (!w->active) {
            tb__rec *r = tb__rec_at(b, b->rd);
            b->rd_visits++;
            if (r->pri_wri_id != 0) {
                tb__seq *s = tb__seq_find(b, r->pri_wri_id);
                if (s && s->count > 0) {
                    prefetch_ahead(b, b->rd + tb__outer(r->size));
                    tb__walk_start(b, w, (uint32_t)(s - b->seqs),
                                   (uint32_t)b->rd);
                    b->pro_walk = false;
                    continue;
                }
                b->rd_odd = true;  /* left unread, in no stalled sequence */
            }
            next = b->rd + tb__outer(r->size);
        } else {
            if (tb__walk_next(b, w, TB__READ, out)) {
                delivered(b, w, props, previous_packet_dropped);
                return true;
            }
            w->active = false;
            if (b->pro_walk) {
                b->pro_walk = false;
                continue;         /* the prologue's next step */
            }
            next = (size_t)w->target_off + w->target_outer;
        }
        bool wrap = next >= b->used_size;
        if (next == b->wr || (wrap && b->wr == 0)) {
            /* Everything from this pass's start is stepped over: the next
             * pass may resume here (tb_int.h). */
            b->rd_resume = b->rd;
            b->rd_resume_valid = !b->rd_odd;
            b->rd_resume_gen = b->generation;
            return false;
        }
        /* The floor follows while every record passed was erased. */
        bool erased = tb__rec_at(b, b->rd)->pri_wri_id == 0;
        b->rd = wrap ? 0 : next;
        b->rd_resume_valid = false;   /* until the end is reached again */
        if (b->rd_contig && erased) {
            b->rd_floor = b->rd;
            b->rd_floor_valid = true;
        } else {
            b->rd_contig = false;
        }
    }
    return false;
}

SHMTRACE_API const tb_stats *tb_get_stats(const tb_buffer *b)
{
    return b ? &b->stats : NULL;
}

SHMTRACE_API size_t tb_size(const tb_buffer *b)
{
    return b ? b->size : 0;
}

SHMTRACE_API size_t tb_used_size(const tb_buffer *b)
{
    return b ? b->used_size : 0;
}

SHMTRACE_API tb_fill_policy tb_policy(const tb_buffer *b)
{
    return b ? b->policy : TB_RING_BUFFER;
}

SHMTRACE_API void tb_set_evict_callback(tb_buffer *b, tb_evict_fn fn,
                                        void *ctx)
{
    if (!b)
        return;
    b->evict_fn = fn;
    b->evict_ctx = ctx;
}

SHMTRACE_API void tb_set_write_fence(tb_buffer *b, tb_write_fence_fn fn,
                                     void *ctx)
{
    if (!b)
        return;
    b->fence_fn = fn;
    b->fence_ctx = fn ? ctx : NULL;
}

SHMTRACE_API void tb_set_write_probe(tb_buffer *b, tb_write_probe_fn fn,
                                     void *ctx)
{
    if (!b)
        return;
    b->probe_fn = fn;
    b->probe_ctx = fn ? ctx : NULL;
}
