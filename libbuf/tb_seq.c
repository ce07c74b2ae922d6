/*
 * tb_seq.c - libbuf sequence table: pri_wri_id -> tb__seq, ChunkID rings,
 * lazy GC of empty sequences (spec trace-buffer.md §3).
 *
 * Lookup is an open-addressing hash (linear probing, load <= 1/2) holding
 * index + 1 into the dense b->seqs array; entries are never deleted one by
 * one, the GC compacts the array and rebuilds the hash. Each sequence's
 * records form a power-of-two ring of {chunk_id, offset}, kept sorted by
 * modular ChunkID order.
 *
 * Failure: allocation failures return NULL / -ENOMEM, a uid at its bound
 * -EDQUOT; either leaves the table unchanged.
 *
 * Memory: unlike the histogram and loss tables (bounded by count,
 * trace_buffer.h), this table was bounded only by the ring: a sequence
 * lives while it has a record (16 bytes at least) or is one of the empty
 * ones GC keeps (at most TB__EMPTY_SEQ_GC_THRESHOLD, GC running after every
 * copy), however many producers come and go. Each costs its tb__seq
 * (80 bytes, in an array that doubles), 2-4 hash slots and its ChunkID
 * ring, which starts at 2 entries (32 bytes) and doubles: about 140-220
 * bytes. A producer reconnecting with one empty chunk per writer id made
 * a 1 MiB ring's buffer take 17x the ring on the heap (65,536 sequences;
 * rings that started at 16 entries made it 31x), a 1 GiB ring's 17 GiB:
 * one local user could take the daemon's memory, and every other user's
 * trace with it.
 *
 * Sequences per uid: so the table also holds at most b->max_seqs_per_uid
 * sequences of each uid (TB_MAX_SEQS_PER_UID: 16384, or one per 256 bytes
 * of ring if that is more). A uid, not a producer or a connection, since
 * the uid is what the service can trust and what a hostile user cannot
 * multiply (it reconnects at will: new producer ids, 32767 writer ids
 * each); so one uid's churn costs the others nothing: their sequences
 * are never refused for it, and none is deleted to make room (GC deletes
 * only empty sequences, the churning uid's first: below). The count of
 * each uid's sequences is kept in b->uids, sorted by uid (binary search;
 * an insert or delete moves the entries after it: usually 1-5 uids, a
 * few thousand at most, as many as the users that trace), changed only
 * when a sequence is made or GC deletes one, never per chunk. b->uids
 * also keeps each uid's shares of the writer tables (tb_share.c) and its
 * loss mark (tb_loss.c): a uid's entry lives while any of them is not
 * zero. A chunk that would make one more sequence for a uid at its bound
 * is refused (tb_write.c, new_seq: counted, its writer's loss noted,
 * tb_loss.c).
 * Measured (2026-12-07, the churn above, the heap the buffer takes
 * including the writer tables' 2.6 MiB, bounded by count, not by the
 * ring): a 1 MiB ring 4.7x (16384 sequences: 2.2 MiB), 16 MiB 0.69x
 * (check_tb_writers asserts <= 5x and <= 1x), 64 MiB 0.57x, 1 GiB 0.53x
 * (4.2 million sequences, 570 MB). Honest use stays out of reach: the
 * floor is twice the 8000 writers of one producer that
 * tests/svc_manywriters.c runs (they need 8000 sequences, up to twice
 * that through a reconnection while the first connection's records are
 * still in the ring); one per 256 bytes of ring is a sequence for every
 * chunk of 256 bytes or more the ring can hold, so only numerous writers
 * whose chunks are nearly all smaller could reach it.
 *
 * GC of empty sequences, fair among uids (tb__seq_gc). An empty sequence
 * still holds its writer's continuity: the last ChunkID consumed (a gap
 * after it flags READ_GAP on the next packet; a chunk consumed already,
 * committed again, is refused instead of read twice; an older one is
 * refused as stale) and loss bits not yet reported. Like Perfetto, GC
 * keeps TB__KEEP_LAST_EMPTY_SEQ (1024) once more than
 * TB__EMPTY_SEQ_GC_THRESHOLD (1152) are empty; it used to keep the
 * newest 1024 whatever their uid, so a uid churning writers (one chunk
 * each, read) pushed out every other uid's empty sequences as soon as it
 * had emptied 1024 after them: their writers lost that state
 * (check_tb_writers: a chunk committed again was read twice, a gap went
 * unflagged). Now the 1024 are shared max-min among the uids of the
 * empty sequences: with c(u) of them, each uid keeps its newest
 * min(c(u), L), L the highest level at which no more than 1024 are kept,
 * and the room left goes to the newest of the uids' next ones; as if
 * the uid keeping the most gave up its oldest, one at a time. A uid with
 * fewer than its share keeps all of its own; one uid alone keeps its
 * newest 1024, as before. The memory bound does not move (1024 kept, at
 * most 1152 between two GCs). Cost per GC (every 128 sequences emptied
 * past 1152): a sort by uid and age where one by age was, and about ten
 * passes over the empty sequences to find L.
 *
 * tb__seq_prefetch / tb__seq_prefetch_head only read the table and issue
 * prefetches: the copy path asks for the metadata of the next copy early.
 */
#include <assert.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "tb_int.h"

static void hash_put(uint32_t *hash, uint32_t cap, uint32_t key,
                     uint32_t idx)
{
    uint32_t i = tb__seq_hash_slot(key, cap);
    while (hash[i] != 0)
        i = (i + 1) & (cap - 1);
    hash[i] = idx + 1;
}

static int hash_rebuild(tb_buffer *b, uint32_t cap)
{
    uint32_t *h = calloc(cap, sizeof(*h));
    if (!h)
        return -ENOMEM;
    for (uint32_t i = 0; i < b->nseqs; i++)
        hash_put(h, cap, b->seqs[i].key, i);
    free(b->hash);
    b->hash = h;
    b->hash_cap = cap;
    return 0;
}

tb__seq *tb__seq_find(const tb_buffer *b, uint32_t key)
{
    if (b->hash_cap == 0)
        return NULL;
    uint32_t i = tb__seq_hash_slot(key, b->hash_cap);
    for (;;) {
        uint32_t v = b->hash[i];
        if (v == 0)
            return NULL;
        if (b->seqs[v - 1].key == key)
            return &b->seqs[v - 1];
        i = (i + 1) & (b->hash_cap - 1);
    }
}

uint32_t tb__default_max_seqs_per_uid(size_t size)
{
    return TB_MAX_SEQS_PER_UID(size);
}

/* A bound of one's own (tests): applies to the sequences made from now on
 * (a uid already past it keeps its sequences). */
void tb__set_max_seqs_per_uid(tb_buffer *b, uint32_t n)
{
    b->max_seqs_per_uid = n;
}

/* First index in b->uids whose uid does not precede uid. */
static uint32_t uid_lower_bound(const tb_buffer *b, uint32_t uid)
{
    uint32_t lo = 0, hi = b->nuids;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (b->uids[mid].uid < uid)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* uid's entry, NULL if it has none (no sequence, no mark). */
tb__uid_seqs *tb__uid_find(const tb_buffer *b, uint32_t uid)
{
    uint32_t i = uid_lower_bound(b, uid);
    return (i < b->nuids && b->uids[i].uid == uid) ? &b->uids[i] : NULL;
}

uint32_t tb__uid_num_sequences(const tb_buffer *b, uint32_t uid)
{
    const tb__uid_seqs *u = tb__uid_find(b, uid);
    return u ? u->nseqs : 0;
}

/* uid's entry, made (no sequence, no mark, no table entry) if it has
 * none; NULL when out of memory (the table unchanged). Valid until the
 * next change to b->uids. */
tb__uid_seqs *tb__uid_get(tb_buffer *b, uint32_t uid)
{
    uint32_t i = uid_lower_bound(b, uid);
    if (i < b->nuids && b->uids[i].uid == uid)
        return &b->uids[i];
    tb__uid_seqs *n = tb__grow(b->uids, &b->uids_cap, (size_t)b->nuids + 1,
                               sizeof(*n), 4);
    if (!n)
        return NULL;
    b->uids = n;
    memmove(&n[i + 1], &n[i], (size_t)(b->nuids - i) * sizeof(*n));
    memset(&n[i], 0, sizeof(*n));
    n[i].uid = uid;
    b->nuids++;
    return &n[i];
}

static bool uid_in_use(const tb__uid_seqs *u)
{
    for (int t = 0; t < TB__NTABS; t++)
        if (u->held[t] > 0)
            return true;
    return u->nseqs > 0 || u->agg_gap;
}

/* Deletes b->uids[i] if it keeps nothing any more. */
static void uid_drop_if_unused(tb_buffer *b, uint32_t i)
{
    if (uid_in_use(&b->uids[i]))
        return;
    memmove(&b->uids[i], &b->uids[i + 1],
            (size_t)(b->nuids - i - 1) * sizeof(*b->uids));
    b->nuids--;
}

/* uid's entry goes if it keeps nothing any more (no sequence, no table
 * entry, no mark). */
void tb__uid_release(tb_buffer *b, uint32_t uid)
{
    uint32_t i = uid_lower_bound(b, uid);
    if (i < b->nuids && b->uids[i].uid == uid)
        uid_drop_if_unused(b, i);
}

/* One sequence of uid deleted. */
static void uid_put(tb_buffer *b, uint32_t uid)
{
    uint32_t i = uid_lower_bound(b, uid);
    if (i >= b->nuids || b->uids[i].uid != uid || b->uids[i].nseqs == 0) {
        assert(!"a sequence's uid has no count"); /* cannot happen */
        return;
    }
    b->uids[i].nseqs--;
    uid_drop_if_unused(b, i);
}

/* Marks uid: one of its writers counted in the loss aggregate was refused
 * (tb_loss.c). 0, or -ENOMEM (the mark is not kept). */
int tb__uid_mark_agg_gap(tb_buffer *b, uint32_t uid)
{
    tb__uid_seqs *u = tb__uid_get(b, uid);
    if (!u)
        return -ENOMEM;
    u->agg_gap = true;
    return 0;
}

/* Makes the sequence of key, which has none, for a chunk of uid. Returns
 * 0 (*out = it; valid until the next GC or sequence made), -EDQUOT when
 * uid has b->max_seqs_per_uid sequences already, or -ENOMEM; on error
 * the table is unchanged. */
int tb__seq_create(tb_buffer *b, uint32_t key, uint16_t producer_id,
                   uint16_t writer_id, uint32_t uid, int32_t pid,
                   tb__seq **out)
{
    assert(!tb__seq_find(b, key));
    if (tb__uid_num_sequences(b, uid) >= b->max_seqs_per_uid)
        return -EDQUOT;
    if ((uint64_t)(b->nseqs + 1) * 2 > b->hash_cap) {
        uint32_t cap = b->hash_cap ? b->hash_cap * 2 : 64;
        if (hash_rebuild(b, cap) < 0)
            return -ENOMEM;
    }
    tb__seq *n = tb__grow(b->seqs, &b->seqs_cap, (size_t)b->nseqs + 1,
                          sizeof(*n), 16);
    if (!n)
        return -ENOMEM;
    b->seqs = n;
    tb__uid_seqs *u = tb__uid_get(b, uid);
    if (!u)
        return -ENOMEM;
    u->nseqs++;
    tb__seq *s = &b->seqs[b->nseqs];
    memset(s, 0, sizeof(*s));
    s->key = key;
    s->producer_id = producer_id;
    s->writer_id = writer_id;
    s->uid = uid;
    s->pid = pid;
    hash_put(b->hash, b->hash_cap, key, b->nseqs);
    b->nseqs++;
    *out = s;
    return 0;
}

static int ring_grow(tb__seq *s)
{
    uint32_t cap = s->cap ? s->cap * 2 : TB__SEQ_RING_MIN;
    tb__centry *n = malloc((size_t)cap * sizeof(*n));
    if (!n)
        return -ENOMEM;
    for (uint32_t i = 0; i < s->count; i++)
        n[i] = *tb__ring_at(s, i);
    free(s->ring);
    s->ring = n;
    s->cap = cap;
    s->head = 0;
    return 0;
}

/* Inserts {chunk_id, off} at list position pos (0 = head, count = tail). */
int tb__seq_insert(tb__seq *s, uint32_t pos, uint32_t chunk_id,
                   uint32_t off)
{
    if (s->count == s->cap && ring_grow(s) < 0)
        return -ENOMEM;
    for (uint32_t i = s->count; i > pos; i--)
        *tb__ring_at(s, i) = *tb__ring_at(s, i - 1);
    tb__centry *e = tb__ring_at(s, pos);
    e->chunk_id = chunk_id;
    e->off = off;
    e->npk = 0;
    e->last_body = TB__LAST_BODY_UNKNOWN;
    s->count++;
    return 0;
}

/* First list position whose ChunkID does not precede chunk_id. */
uint32_t tb__seq_lower_bound(const tb__seq *s, uint32_t chunk_id)
{
    uint32_t lo = 0, hi = s->count;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (tb__id_cmp(tb__ring_at(s, mid)->chunk_id, chunk_id) < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* O(1) when ChunkIDs are contiguous up to the tail (the common case),
 * O(log n) otherwise. */
bool tb__seq_find_chunk(const tb__seq *s, uint32_t chunk_id, uint32_t *idx)
{
    if (s->count == 0)
        return false;
    uint32_t dist = tb__ring_at(s, s->count - 1)->chunk_id - chunk_id;
    if (dist < s->count) {
        uint32_t guess = s->count - 1 - dist;
        if (tb__ring_at(s, guess)->chunk_id == chunk_id) {
            *idx = guess;
            return true;
        }
    }
    uint32_t i = tb__seq_lower_bound(s, chunk_id);
    if (i < s->count && tb__ring_at(s, i)->chunk_id == chunk_id) {
        *idx = i;
        return true;
    }
    return false;
}

/* Erases the first record of s: last_consumed := it, header zeroed with size
 * and payload_size kept. No stats: callers account reads/overwrites. */
void tb__seq_erase_head(tb_buffer *b, tb__seq *s)
{
    tb__centry *e = tb__ring_at(s, 0);
    tb__rec *r = tb__rec_at(b, e->off);
    if (e->npk) /* first fragments that never tokenized: see tb_loss.c */
        tb__lose(b, s, s->key, TB_CAUSE_CORRUPTED, e->npk, 0);
    s->has_last = true;
    s->last_id = r->chunk_id;
    s->last_payload_size = r->payload_size;
    s->last_incomplete = (r->flags & TB__F_INCOMPLETE) != 0;
    s->head = (s->head + 1) & (s->cap - 1);
    s->count--;
    if (s->count == 0) {
        s->age = ++b->seq_age;
        if (!s->counted_empty) {
            s->counted_empty = true;
            b->empty_seqs++;
        }
    }
    uint16_t size = r->size, payload_size = r->payload_size;
    memset(r, 0, sizeof(*r));
    r->size = size;
    r->payload_size = payload_size;
}

/* Empty sequences by uid, each uid's newest first. */
static int cmp_uid_newest(const void *a, const void *b)
{
    const tb__seq *x = *(tb__seq *const *)a, *y = *(tb__seq *const *)b;
    if (x->uid != y->uid)
        return x->uid < y->uid ? -1 : 1;
    return (x->age < y->age) - (x->age > y->age);
}

static int cmp_newest(const void *a, const void *b)
{
    const tb__seq *x = *(tb__seq *const *)a, *y = *(tb__seq *const *)b;
    return (x->age < y->age) - (x->age > y->age);
}

/* How many of the n empty sequences (sorted by cmp_uid_newest) are kept
 * with at most `level` per uid: the sum over uids of min(count, level). */
static uint32_t kept_at_level(tb__seq *const *empty, uint32_t n,
                              uint32_t level)
{
    uint32_t kept = 0, rank = 0;
    for (uint32_t i = 0; i < n; i++) {
        rank = (i > 0 && empty[i]->uid == empty[i - 1]->uid) ? rank + 1 : 0;
        kept += rank < level;
    }
    return kept;
}

static void gc_delete(tb_buffer *b, tb__seq *s)
{
    uid_put(b, s->uid);
    free(s->ring);
    s->ring = NULL;
    s->key = 0; /* mark: no live sequence has key 0 */
}

/* Once more than TB__EMPTY_SEQ_GC_THRESHOLD sequences are empty, deletes
 * all but TB__KEEP_LAST_EMPTY_SEQ of them, shared max-min among their
 * uids (see the top): each uid keeps its newest, up to the level `level`
 * where the next one per uid would not fit; the room left goes to the
 * newest of the uids' next ones. With one uid: its newest KEEP. Runs at
 * the end of a copy, and before a chunk is refused for its uid's bound
 * (tb_write.c, new_seq): never while a caller holds a tb__seq pointer. */
void tb__seq_gc(tb_buffer *b)
{
    if (b->empty_seqs <= TB__EMPTY_SEQ_GC_THRESHOLD)
        return;
    uint32_t n = 0;
    tb__seq **empty = malloc((size_t)b->nseqs * sizeof(*empty));
    if (!empty)
        return; /* retried on the next copy */
    for (uint32_t i = 0; i < b->nseqs; i++)
        if (b->seqs[i].count == 0)
            empty[n++] = &b->seqs[i];
    if (n < TB__EMPTY_SEQ_GC_THRESHOLD) {
        free(empty);
        return;
    }
    qsort(empty, n, sizeof(*empty), cmp_uid_newest);
    uint32_t lo = 0, hi = TB__KEEP_LAST_EMPTY_SEQ;
    while (lo < hi) { /* the highest level that keeps no more than KEEP */
        uint32_t mid = lo + (hi - lo + 1) / 2;
        if (kept_at_level(empty, n, mid) <= TB__KEEP_LAST_EMPTY_SEQ)
            lo = mid;
        else
            hi = mid - 1;
    }
    uint32_t level = lo;
    uint32_t room = TB__KEEP_LAST_EMPTY_SEQ - kept_at_level(empty, n, level);
    /* Each uid's first `level` stay, those after its next one go; the
     * next ones (one per uid with more) move to the front of `empty`. */
    uint32_t nnext = 0, rank = 0, prev_uid = 0;
    for (uint32_t i = 0; i < n; i++) {
        tb__seq *s = empty[i];
        rank = (i > 0 && s->uid == prev_uid) ? rank + 1 : 0;
        prev_uid = s->uid;
        if (rank < level)
            s->counted_empty = true;
        else if (rank == level)
            empty[nnext++] = s;
        else
            gc_delete(b, s);
    }
    qsort(empty, nnext, sizeof(*empty), cmp_newest);
    for (uint32_t i = 0; i < nnext; i++) {
        if (i < room)
            empty[i]->counted_empty = true;
        else
            gc_delete(b, empty[i]);
    }
    free(empty);
    uint32_t j = 0;
    for (uint32_t i = 0; i < b->nseqs; i++)
        if (b->seqs[i].key != 0)
            b->seqs[j++] = b->seqs[i];
    b->nseqs = j;
    b->empty_seqs = TB__KEEP_LAST_EMPTY_SEQ;
    memset(b->hash, 0, (size_t)b->hash_cap * sizeof(*b->hash));
    for (uint32_t i = 0; i < b->nseqs; i++)
        hash_put(b->hash, b->hash_cap, b->seqs[i].key, i);
    b->walk.active = false; /* it may hold a stale index */
}

void tb__seq_free_all(tb_buffer *b)
{
    for (uint32_t i = 0; i < b->nseqs; i++)
        free(b->seqs[i].ring);
    free(b->seqs);
    free(b->hash);
    free(b->uids);
    b->seqs = NULL;
    b->hash = NULL;
    b->uids = NULL;
    b->nseqs = b->seqs_cap = b->hash_cap = 0;
    b->nuids = b->uids_cap = 0;
}

int tb__seq_clone_all(tb_buffer *dst, const tb_buffer *src)
{
    dst->max_seqs_per_uid = src->max_seqs_per_uid;
    if (src->nuids) {
        dst->uids = malloc((size_t)src->nuids * sizeof(*dst->uids));
        if (!dst->uids)
            return -ENOMEM;
        memcpy(dst->uids, src->uids, (size_t)src->nuids * sizeof(*src->uids));
        dst->nuids = src->nuids;
        dst->uids_cap = src->nuids;
        for (uint32_t i = dst->nuids; i-- > 0;) {
            dst->uids[i].held[TB__TAB_HIST] = 0; /* histograms: not cloned */
            uid_drop_if_unused(dst, i);
        }
    }
    if (src->nseqs == 0)
        return 0;
    dst->seqs = calloc(src->seqs_cap, sizeof(*dst->seqs));
    dst->hash = malloc((size_t)src->hash_cap * sizeof(*dst->hash));
    if (!dst->seqs || !dst->hash)
        return -ENOMEM;
    dst->seqs_cap = src->seqs_cap;
    dst->hash_cap = src->hash_cap;
    memcpy(dst->hash, src->hash, (size_t)src->hash_cap * sizeof(*src->hash));
    for (uint32_t i = 0; i < src->nseqs; i++) {
        tb__seq *d = &dst->seqs[i];
        const tb__seq *s = &src->seqs[i];
        *d = *s;
        d->hist_idx = 0; /* the histogram is not cloned */
        d->ring = NULL;
        d->cap = d->head = d->count = 0;
        dst->nseqs = i + 1;
        if (s->count == 0)
            continue;
        uint32_t cap = TB__SEQ_RING_MIN;
        while (cap < s->count)
            cap *= 2;
        d->ring = malloc((size_t)cap * sizeof(*d->ring));
        if (!d->ring)
            return -ENOMEM;
        d->cap = cap;
        for (uint32_t k = 0; k < s->count; k++)
            d->ring[k] = *tb__ring_at(s, k);
        d->count = s->count;
    }
    return 0;
}

uint32_t tb__num_sequences(const tb_buffer *b)
{
    return b->nseqs;
}
