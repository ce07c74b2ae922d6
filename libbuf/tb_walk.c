/*
 * tb_walk.c - libbuf inner walk: packets of one sequence in ChunkID order
 * (spec trace-buffer.md §5, §7).
 *
 * A walk starts at the sequence's first record and goes up to a target
 * record, consuming fragments (payload_avail) and erasing each record it has
 * exhausted. Read mode stalls the sequence (until the next tb_begin_read) on
 * an incomplete record, a needs-patching begin, or a missing continuation;
 * erase mode (eviction) never stalls and consumes everything up to and
 * including the target. Fragmented packets are reassembled by looking ahead
 * along the sequence; only the fragments of that packet are consumed there,
 * so packets of later records keep their place in the global order.
 *
 * Erase mode and a begin whose continuation is missing or unpatched: the
 * spec flags OVERWRITE; we also consume the collected fragments (as for a
 * loss), so the evicted record counts in chunks_overwritten like any other
 * record whose unread fragments an eviction consumed.
 *
 * Data-loss bits are ORed into the sequence and reported with the next
 * packet read from it. Stats: chunks_read/bytes_read (read mode) or
 * chunks_overwritten/bytes_overwritten (erase mode) for every record whose
 * payload_avail reaches 0, readaheads_* per reassembly attempt.
 */
#include <stdlib.h>

#include "tb_int.h"

#define LOSS(reason) ((uint32_t)TB_LOSS_PRESENT | (uint32_t)(reason))

static uint32_t unread_off(const tb__rec *r)
{
    return (uint32_t)r->payload_size - r->payload_avail;
}

void tb__walk_start(tb_buffer *b, tb__walk *w, uint32_t seq_idx,
                    uint32_t target_off)
{
    tb__seq *s = &b->seqs[seq_idx];
    tb__rec *t = tb__rec_at(b, target_off);
    w->active = true;
    w->seq = seq_idx;
    w->target_off = target_off;
    w->target_outer = (uint32_t)tb__outer(t->size);
    w->cur_off = tb__ring_at(s, 0)->off;
    tb__rec *first = tb__rec_at(b, w->cur_off);
    w->frag_off = unread_off(first);
    if (s->has_last && first->chunk_id != s->last_id + 1 &&
        !(s->last_incomplete && first->chunk_id == s->last_id))
        s->loss |= LOSS(TB_LOSS_READ_GAP);
}

/* consume and took_start run once or twice per packet read: inlined (GCC
 * kept them out of line), reading a 1 MiB buffer that stays in the caches
 * goes 1.07x faster (1.06-1.10 over 10 alternating rounds in one process,
 * bench/ab_libbuf.sh); a fresh 128 MiB one (1.02x) and steady writes
 * (0.98-1.03x) did not move beyond that tool's A/A noise of +-2%. */
static inline __attribute__((always_inline)) void consume(tb_buffer *b,
        uint32_t rec_off, const tb__frag *f, int mode)
{
    tb__rec *r = tb__rec_at(b, rec_off);
    uint32_t n = f->hdr + f->size;
    if (r->payload_avail == 0)
        return;
    r->payload_avail = (uint16_t)(r->payload_avail > n ?
                                  r->payload_avail - n : 0);
    if (r->payload_avail != 0)
        return;
    uint64_t outer = tb__outer(r->size);
    if (mode == TB__READ) {
        b->stats.chunks_read++;
        b->stats.bytes_read += outer;
    } else {
        b->stats.chunks_overwritten++;
        b->stats.bytes_overwritten += outer;
    }
}

static bool ensure_slices(tb_buffer *b, size_t n)
{
    if (n <= b->slices_cap)
        return true;
    tb_slice *s = tb__grow(b->slices, &b->slices_cap, n, sizeof(*s), 16);
    if (!s)
        return false;
    b->slices = s;
    return true;
}

static bool push_cfrag(tb_buffer *b, size_t *n, uint32_t rec_off,
                       const tb__frag *f)
{
    tb__cfrag *c = tb__grow(b->cfrags, &b->cfrags_cap, *n + 1, sizeof(*c),
                            16);
    if (!c)
        return false;
    b->cfrags = c;
    b->cfrags[*n].rec_off = rec_off;
    b->cfrags[*n].frag = *f;
    (*n)++;
    return true;
}

enum { RA_SUCCESS, RA_NOT_ENOUGH_DATA, RA_LOSS };

/* Loss accounting (tb_loss.c): the head record gave up one first fragment;
 * in erase mode, or for `cause` >= 0, that packet is lost. */
static inline __attribute__((always_inline)) void took_start(tb_buffer *b,
        tb__seq *s, int cause, uint64_t bytes)
{
    tb__centry *e = tb__ring_at(s, 0);
    if (e->npk)
        e->npk--;
    if (cause >= 0)
        tb__lose(b, s, s->key, cause, 1, bytes);
}

/* Reassembles the packet begun by fragment f0 of the head record. On
 * success (and on loss, and in erase mode on not-enough-data) consumes the
 * collected fragments; on RA_LOSS *reason is the loss bit. *nbytes = bytes
 * of the collected fragments; *patch_failed: not enough data because a
 * record waits for a patch that failed. */
static int reassemble(tb_buffer *b, tb__seq *s, const tb__frag *f0,
                      int mode, tb_packet *out, uint32_t *reason,
                      uint64_t *nbytes, bool *patch_failed)
{
    tb__rec *head = tb__rec_at(b, tb__ring_at(s, 0)->off);
    size_t n = 0;
    int res = RA_NOT_ENOUGH_DATA;
    if (!push_cfrag(b, &n, tb__ring_at(s, 0)->off, f0)) {
        *reason = TB_LOSS_CHUNK_CORRUPTED; /* out of memory: drop it */
        res = RA_LOSS;
        goto done;
    }
    if (head->flags & TB_CHUNK_NEEDS_PATCHING) {
        *patch_failed = (head->facts & TB__FACT_PATCH_FAILED) != 0;
        goto done;
    }
    uint32_t prev_id = head->chunk_id;
    for (uint32_t i = 1; i < s->count; i++) {
        uint32_t off = tb__ring_at(s, i)->off;
        tb__rec *r = tb__rec_at(b, off);
        if (r->flags & TB_CHUNK_NEEDS_PATCHING) {
            *patch_failed = (r->facts & TB__FACT_PATCH_FAILED) != 0;
            goto done; /* not enough data */
        }
        if (r->chunk_id != prev_id + 1) {
            *reason = TB_LOSS_REASSEMBLY_GAP;
            res = RA_LOSS;
            goto done;
        }
        prev_id = r->chunk_id;
        uint32_t pos = unread_off(r);
        tb__frag f;
        int t = tb__next_frag(tb__payload(b, off), r->payload_size, &pos,
                              r->flags, &f);
        if (t == TB__FRAG_CORRUPT) {
            *reason = TB_LOSS_CHUNK_CORRUPTED;
            res = RA_LOSS;
            goto done;
        }
        if (t != TB__FRAG_OK)
            continue; /* an empty record in the middle */
        if (f.role == TB__CONT || f.role == TB__END) {
            if (!push_cfrag(b, &n, off, &f)) {
                *reason = TB_LOSS_CHUNK_CORRUPTED;
                res = RA_LOSS;
                goto done;
            }
            if (f.role == TB__END) {
                res = RA_SUCCESS;
                goto done;
            }
            continue;
        }
        *reason = TB_LOSS_REASSEMBLY_BROKEN_CHAIN;
        res = RA_LOSS;
        goto done;
    }
done:
    if (res == RA_NOT_ENOUGH_DATA && mode == TB__READ && !*patch_failed)
        return res; /* touch nothing: wait for the rest */
    size_t nslices = 0, size = 0;
    if (res == RA_SUCCESS && out && !ensure_slices(b, n)) {
        *reason = TB_LOSS_CHUNK_CORRUPTED;
        res = RA_LOSS;
    }
    for (size_t i = 0; i < n; i++) {
        const tb__cfrag *c = &b->cfrags[i];
        *nbytes += c->frag.hdr + c->frag.size;
        if (res == RA_SUCCESS && out && c->frag.size > 0) {
            b->slices[nslices].data = tb__payload(b, c->rec_off) +
                                      c->frag.pos + c->frag.hdr;
            b->slices[nslices].size = c->frag.size;
            size += c->frag.size;
            nslices++;
        }
        consume(b, c->rec_off, &c->frag, mode);
    }
    if (res == RA_SUCCESS && out) {
        out->slices = b->slices;
        out->nslices = nslices;
        out->size = size;
    }
    return res;
}

/* *out: the whole fragment f of payload, in one slice (b->slices has room
 * for one). */
static inline void out_whole(tb_buffer *b, tb_packet *out,
                             const uint8_t *payload, const tb__frag *f)
{
    b->slices[0].data = payload + f->pos + f->hdr;
    b->slices[0].size = f->size;
    out->slices = b->slices;
    out->nslices = 1;
    out->size = f->size;
}

/* Next packet of the walk's sequence, up to its target. Returns false when
 * the target was reached, the sequence ran out, or (read mode) it stalled. */
bool tb__walk_next(tb_buffer *b, tb__walk *w, int mode, tb_packet *out)
{
    tb__seq *s = &b->seqs[w->seq];
    if (mode == TB__READ && s->skip_gen == b->generation)
        return false;
    for (;;) {
        tb__rec *r = tb__rec_at(b, w->cur_off);
        uint8_t *payload = tb__payload(b, w->cur_off);
        tb__frag f;
        int t = tb__next_frag(payload, r->payload_size, &w->frag_off,
                              r->flags, &f);
        if (t != TB__FRAG_OK) {
            bool end = w->cur_off == w->target_off;
            if (t == TB__FRAG_CORRUPT)
                s->loss |= LOSS(TB_LOSS_CHUNK_CORRUPTED);
            if ((r->flags & TB__F_INCOMPLETE) && mode == TB__READ) {
                s->skip_gen = b->generation;
                end = true;
            } else {
                tb__seq_erase_head(b, s);
            }
            if (end || s->count == 0)
                return false;
            w->cur_off = tb__ring_at(s, 0)->off;
            w->frag_off = unread_off(tb__rec_at(b, w->cur_off));
            continue;
        }
        switch (f.role) {
        case TB__WHOLE:
            consume(b, w->cur_off, &f, mode);
            if (f.size == 0)
                continue;
            took_start(b, s, mode == TB__ERASE ? TB_CAUSE_OVERWRITE : -1,
                       f.hdr + f.size);
            /* The next call starts with a load of the next fragment's
             * header, a new line (often not cached: the ring is much larger
             * than the caches); ask for it now, so that the miss overlaps
             * whatever the caller does with this packet. */
            if (w->frag_off < r->payload_size)
                __builtin_prefetch(payload + w->frag_off, 0);
            if (out) {
                if (!ensure_slices(b, 1))
                    continue; /* cannot happen after the first packet */
                out_whole(b, out, payload, &f);
            }
            return true;
        case TB__CONT:
        case TB__END:
            s->loss |= LOSS(TB_LOSS_ORPHAN_CONTINUATION);
            consume(b, w->cur_off, &f, mode);
            continue;
        default: { /* TB__BEGIN */
            uint32_t reason = 0;
            uint64_t nbytes = 0;
            bool pfail = false;
            int res = reassemble(b, s, &f, mode, out, &reason, &nbytes,
                                 &pfail);
            if (res == RA_SUCCESS) {
                took_start(b, s, mode == TB__ERASE ? TB_CAUSE_OVERWRITE : -1,
                           nbytes);
                b->stats.readaheads_succeeded++;
                return true;
            }
            b->stats.readaheads_failed++;
            if (res == RA_NOT_ENOUGH_DATA) {
                if (mode == TB__READ && !pfail) {
                    s->skip_gen = b->generation;
                    return false;
                }
                /* Erase mode, or a record whose patch failed (it will
                 * never be whole): the packet is lost, not waited for. */
                took_start(b, s, pfail ? TB_CAUSE_PATCH_FAILED
                                       : TB_CAUSE_OVERWRITE, nbytes);
                s->loss |= LOSS(mode == TB__READ ? TB_LOSS_CHUNK_CORRUPTED
                                                 : TB_LOSS_OVERWRITE);
                continue;
            }
            took_start(b, s, reason == TB_LOSS_CHUNK_CORRUPTED
                                 ? TB_CAUSE_CORRUPTED : TB_CAUSE_REASSEMBLY,
                       nbytes);
            s->loss |= LOSS(reason);
            continue;
        }
        }
    }
}

/* The WHOLE case of tb__walk_next's first iteration, with the same
 * effects, for tb_read_next_packet to try first: most packets read are
 * small whole fragments in the middle of a record, and the general path
 * (its loop, the outer walk's bookkeeping, the out-parameters cleared
 * first) cost about as much as the packet itself. */
bool tb__walk_next_whole(tb_buffer *b, tb__walk *w, tb_packet *out)
{
    tb__seq *s = &b->seqs[w->seq];
    tb__rec *r = tb__rec_at(b, w->cur_off);
    uint8_t *payload = tb__payload(b, w->cur_off);
    uint32_t pos = w->frag_off;
    tb__frag f;
    if (s->skip_gen == b->generation || b->slices_cap == 0 ||
        tb__next_frag(payload, r->payload_size, &pos, r->flags, &f) !=
            TB__FRAG_OK ||
        f.role != TB__WHOLE || f.size == 0)
        return false;
    w->frag_off = pos;
    consume(b, w->cur_off, &f, TB__READ);
    took_start(b, s, -1, 0);
    if (pos < r->payload_size)
        __builtin_prefetch(payload + pos, 0);  /* as tb__walk_next */
    out_whole(b, out, payload, &f);
    return true;
}

/* Evicts the record at off (a chunk record in the eviction range): every
 * record of its sequence up to and including it is consumed in erase mode. */
void tb__erase_target(tb_buffer *b, uint32_t off)
{
    tb__rec *r = tb__rec_at(b, off);
    tb__seq *s = tb__seq_find(b, r->pri_wri_id);
    if (!s || s->count == 0)
        return; /* cannot happen: every chunk record is in its sequence */
    if (!b->evict_fn && tb__ring_at(s, 0)->off == off &&
        r->payload_avail == r->payload_size &&
        (r->facts & (TB__FACT_VALID | TB__FACT_BEGIN)) == TB__FACT_VALID) {
        /* Fast path: same effects as the walk below, from copy-time facts. */
        if (s->has_last && r->chunk_id != s->last_id + 1 &&
            !(s->last_incomplete && r->chunk_id == s->last_id))
            s->loss |= LOSS(TB_LOSS_READ_GAP);
        if (r->facts & TB__FACT_ORPHAN)
            s->loss |= LOSS(TB_LOSS_ORPHAN_CONTINUATION);
        if (r->facts & TB__FACT_WHOLE)
            s->loss |= LOSS(TB_LOSS_OVERWRITE);
        if (r->payload_size > 0) {
            b->stats.chunks_overwritten++;
            b->stats.bytes_overwritten += tb__outer(r->size);
        }
        tb__centry *ce = tb__ring_at(s, 0);
        if (ce->npk) {
            tb_seq_loss *le = tb__loss_of(b, s);
            if (le) {
                le->lost_packets[TB_CAUSE_OVERWRITE] += ce->npk;
                le->lost_bytes[TB_CAUSE_OVERWRITE] += r->payload_size;
            }
            ce->npk = 0;
        }
        tb__seq_erase_head(b, s);
        return;
    }
    tb__walk w;
    uint32_t seq_idx = (uint32_t)(s - b->seqs);
    tb__walk_start(b, &w, seq_idx, off);
    bool any = false;
    tb_packet pkt;
    tb_packet *outp = b->evict_fn ? &pkt : NULL;
    while (tb__walk_next(b, &w, TB__ERASE, outp)) {
        any = true;
        if (b->evict_fn) {
            tb__seq *cs = &b->seqs[seq_idx];
            tb_seq_props props = {cs->producer_id, cs->writer_id, cs->uid,
                                  cs->pid};
            b->evict_fn(b->evict_ctx, &pkt, &props);
        }
    }
    if (any)
        b->seqs[seq_idx].loss |= LOSS(TB_LOSS_OVERWRITE);
}
