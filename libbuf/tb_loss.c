/*
 * tb_loss.c - libbuf exact per-sequence loss accounting (the contract is in
 * <shmtrace/trace_buffer.h>, tb_get_seq_loss).
 *
 * Unit: the packet, counted at its first fragment (whole non-empty, or
 * begin). Each ring entry of a sequence carries npk, the first fragments
 * of its record not consumed yet: set at copy time from the tokenization
 * the copy does anyway (O(1), tb__starts_from_summary), decremented by the
 * walk when it consumes one from the head record (read or erase), and
 * charged in one go when the fast erase path evicts an untouched record.
 * Whatever a record still holds when it is erased is charged to
 * CORRUPTED (its fragments stopped tokenizing). So every offered packet
 * ends in exactly one of: read, pending (npk still in a ring), lost[cause].
 *
 * Entries live in their own table (b->lossv) keyed by pri_wri_id through a
 * small open-addressing hash, so they survive sequence GC and can be found
 * for chunks refused before any sequence exists; a sequence caches its
 * index (loss_idx), and while a writer has a sequence every lookup of it
 * goes through that cache (tb__loss_entry), so that all its packets are
 * offered, read and lost in one entry. Refusals tokenize the refused
 * payload (tb__count_starts), which the accepting path never does twice.
 *
 * Bound (trace_buffer.h, TB_LOSS_MAX_WRITERS): producers that reconnect
 * bring new keys, so the table holds at most MAX - 1 writers' own entries
 * and one aggregate entry (key 0, made when first needed, always the
 * last) counting every writer without one. Once full, the own entries are
 * shared fairly among uids (tb_share.c): a new writer may take one of
 * the uid holding the most, whose counts are first added to the
 * aggregate's (loss_fold), the folded writer's sequence then pointing at
 * the aggregate. A sequence caches the aggregate's index like its own,
 * so the hot paths do not change; a refused chunk of a writer without an
 * entry (no sequence) costs a hash miss and a look at its uid's share.
 * Nothing is lost between entries: the aggregate's identity holds
 * because each of its writers' and of the entries folded into it would.
 *
 * Refused for the uid's sequence bound (tb_seq.c): the chunk's packets
 * are lost to DISCARD in its writer's entry, like any refusal, and its
 * writer, which has no sequence to carry a loss bit, is marked in
 * b->loss_gap (one byte per entry, made when first needed), so that the
 * sequence it gets later starts with PRESENT | READ_GAP and its first
 * packet read says so. A writer in the aggregate cannot be marked alone:
 * its uid is marked instead (b->uids, agg_gap), for good, and so is the
 * uid of a marked writer whose entry is folded (the fold prefers
 * unmarked ones). Every later new sequence of a marked uid whose writer
 * is in the aggregate, or new to the table (a folded writer back gets a
 * new entry), starts with the loss, whether its own writer lost chunks or
 * not; other uids' never do. The counts are exact either way (the
 * aggregate's as a whole).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "tb_int.h"

_Static_assert(TB_LOSS_MAX_WRITERS >= 2 &&
               TB_LOSS_MAX_WRITERS < UINT32_MAX / 2, "loss table bound");

#define LOSS_HASH_SHIFT 9u

static uint32_t loss_key(const tb_seq_loss *e)
{
    return ((uint32_t)e->producer_id << 16) | e->writer_id;
}

static uint32_t loss_key_at(const tb_buffer *b, uint32_t idx)
{
    return loss_key(&b->lossv[idx]);
}

static int lhash_grow(tb_buffer *b)
{
    uint32_t cap = b->lhash_cap ? b->lhash_cap * 2 : 64;
    uint32_t *h = calloc(cap, sizeof(*h));
    if (!h)
        return -ENOMEM;
    for (uint32_t i = 0; i < b->nloss; i++)
        tb__index_put(h, cap, LOSS_HASH_SHIFT, loss_key_at(b, i), i);
    free(b->lhash);
    b->lhash = h;
    b->lhash_cap = cap;
    return 0;
}

/* Index + 1 of key's entry (key 0: the aggregate), 0 if it has none. */
static uint32_t loss_find(const tb_buffer *b, uint32_t key)
{
    return tb__index_find(b->lhash, b->lhash_cap, LOSS_HASH_SHIFT, key, b,
                          loss_key_at);
}

/* Appends an empty entry for key, held by uid (key 0: the aggregate, held
 * by none); its index + 1, 0 when out of memory (nothing changed). */
static uint32_t loss_new(tb_buffer *b, uint32_t key, uint32_t uid)
{
    if ((uint64_t)(b->nloss + 1) * 2 > b->lhash_cap && lhash_grow(b) < 0)
        return 0;
    tb_seq_loss *v = tb__grow(b->lossv, &b->loss_cap, (size_t)b->nloss + 1,
                              sizeof(*v), 16);
    if (!v)
        return 0;
    b->lossv = v;
    if (key != 0 && tb__share_add(b, TB__TAB_LOSS, b->nloss, uid) < 0)
        return 0;
    tb_seq_loss *e = &b->lossv[b->nloss];
    memset(e, 0, sizeof(*e));
    e->producer_id = (uint16_t)(key >> 16);
    e->writer_id = (uint16_t)key;
    tb__index_put(b->lhash, b->lhash_cap, LOSS_HASH_SHIFT, key, b->nloss);
    return ++b->nloss;
}

/* Folding costs least for a writer with no sequence (its counts are
 * final) and no gap mark (which would go to its uid: tb__loss_gap_take). */
static bool loss_spare(const tb_buffer *b, uint32_t idx)
{
    if (idx < b->loss_gap_n && b->loss_gap[idx])
        return false;
    return tb__seq_find(b, loss_key_at(b, idx)) == NULL;
}

/* Own entry idx is folded into the aggregate (which exists) and becomes
 * key's, empty (tb_share.c). Its writer's sequence, if any, counts in the
 * aggregate from now on, with the packets it has pending; a gap mark
 * goes to the writer's uid, as for a writer refused in the aggregate. */
static void loss_fold(tb_buffer *b, uint32_t idx, uint32_t key)
{
    tb_seq_loss *e = &b->lossv[idx], *agg = &b->lossv[b->loss_over - 1];
    uint32_t old = loss_key(e);
    agg->packets_offered += e->packets_offered;
    agg->packets_read += e->packets_read;
    agg->packets_pending += e->packets_pending;
    for (int c = 0; c < TB_NUM_CAUSES; c++) {
        agg->lost_packets[c] += e->lost_packets[c];
        agg->lost_bytes[c] += e->lost_bytes[c];
    }
    tb__seq *s = tb__seq_find(b, old);
    if (s && s->loss_idx == idx + 1)
        s->loss_idx = b->loss_over;
    if (idx < b->loss_gap_n && b->loss_gap[idx]) {
        b->loss_gap[idx] = 0;
        (void)tb__uid_mark_agg_gap(b, b->loss_share.owner[idx]);
    }
    tb__index_remove(b->lhash, b->lhash_cap, LOSS_HASH_SHIFT, old, idx, b,
                     loss_key_at);
    memset(e, 0, sizeof(*e));
    e->producer_id = (uint16_t)(key >> 16);
    e->writer_id = (uint16_t)key;
    tb__index_put(b->lhash, b->lhash_cap, LOSS_HASH_SHIFT, key, idx);
}

/* The entry of key, which has none, for a writer of uid: a new own entry
 * while there is room, else one of the top uid's folded (tb_share.c) or
 * the aggregate (made the first time). Index + 1, 0 when out of memory. */
static uint32_t loss_make(tb_buffer *b, uint32_t key, uint32_t uid)
{
    if (b->nloss < TB_LOSS_MAX_WRITERS - 1)
        return loss_new(b, key, uid);
    if (b->loss_over == 0 && (b->loss_over = loss_new(b, 0, 0)) == 0)
        return 0;
    uint32_t idx = tb__share_pick(b, TB__TAB_LOSS, uid,
                                  TB_LOSS_MAX_WRITERS - 1, loss_spare);
    if (idx == TB__NO_ENTRY)
        return b->loss_over;
    loss_fold(b, idx, key);
    tb__share_move(b, TB__TAB_LOSS, idx, uid);
    return idx + 1;
}

/* The entry of key, a writer of uid (found or made), cached in its
 * sequence: s, or found here when NULL, so that all of a writer's counts
 * go through one cached index while it has a sequence (the uid is then
 * the sequence's). NULL only when out of memory (the loss is then not
 * attributed). The bound is checked only when an entry would be made. */
tb_seq_loss *tb__loss_entry(tb_buffer *b, tb__seq *s, uint32_t key,
                            uint32_t uid)
{
    if (!s)
        s = tb__seq_find(b, key);
    if (s && s->loss_idx)
        return &b->lossv[s->loss_idx - 1];
    if (s)
        uid = s->uid;
    uint32_t idx = loss_find(b, key);
    if (idx == 0)
        idx = loss_make(b, key, uid);
    if (idx == 0)
        return NULL;
    if (s)
        s->loss_idx = idx;
    return &b->lossv[idx - 1];
}

void tb__lose(tb_buffer *b, tb__seq *s, uint32_t key, int cause,
              uint64_t packets, uint64_t bytes)
{
    if (key == 0 || (packets == 0 && bytes == 0))
        return;
    tb_seq_loss *e = tb__loss_entry(b, s, key, s ? s->uid : 0);
    if (!e)
        return;
    e->lost_packets[cause] += packets;
    e->lost_bytes[cause] += bytes;
}

#define GAP_LOSS ((uint32_t)TB_LOSS_PRESENT | (uint32_t)TB_LOSS_READ_GAP)

/* A chunk of key, a writer without a sequence, was refused: uid had its
 * bound of sequences. Marks the writer so that its next sequence starts
 * with a read-gap loss; a writer in the aggregate marks its uid instead.
 * Out of memory, the mark is lost (the counts are kept: refuse() made
 * the entry). */
void tb__loss_gap_set(tb_buffer *b, uint32_t key, uint32_t uid)
{
    tb_seq_loss *e = tb__loss_entry(b, NULL, key, uid);
    if (!e)
        return;
    uint32_t i = (uint32_t)(e - b->lossv);
    if (i + 1 == b->loss_over) {
        (void)tb__uid_mark_agg_gap(b, uid);
        return;
    }
    if (i >= b->loss_gap_n) {
        size_t n = b->loss_cap; /* > i */
        uint8_t *g = realloc(b->loss_gap, n);
        if (!g)
            return;
        memset(g + b->loss_gap_n, 0, n - b->loss_gap_n);
        b->loss_gap = g;
        b->loss_gap_n = n;
    }
    b->loss_gap[i] = 1;
}

/* The loss bits a sequence just made starts with: a read gap if its
 * writer was marked by tb__loss_gap_set (the mark is taken), or if its
 * uid is marked and it is counted in the aggregate or new to the table
 * (an entry made just now: it may be a writer folded earlier, whose
 * refusal the aggregate holds). The uid's mark stays: which of its
 * writers lost chunks is not known. */
uint32_t tb__loss_gap_take(tb_buffer *b, tb__seq *s)
{
    const tb__uid_seqs *u = tb__uid_find(b, s->uid);
    bool agg = u && u->agg_gap;
    if (!b->loss_gap && !agg)
        return 0; /* no writer of it was ever refused: the usual case */
    bool known = s->loss_idx != 0 || loss_find(b, s->key) != 0;
    tb_seq_loss *e = tb__loss_entry(b, s, s->key, s->uid);
    if (!e)
        return 0;
    uint32_t i = (uint32_t)(e - b->lossv);
    if (i + 1 == b->loss_over || !known)
        return agg ? GAP_LOSS : 0;
    if (i < b->loss_gap_n && b->loss_gap[i]) {
        b->loss_gap[i] = 0;
        return GAP_LOSS;
    }
    return 0;
}

/* First fragments among n fragments tiling a payload exactly, from the
 * copy-time summary (same role rules as tb__facts_from_summary). */
uint32_t tb__starts_from_summary(uint32_t n, uint32_t first_size,
                                 uint32_t last_size, uint32_t nonempty,
                                 uint8_t flags)
{
    if (n == 0)
        return 0;
    int first = tb__frag_role(true, n == 1, flags);
    int last = tb__frag_role(n == 1, true, flags);
    uint32_t whole = tb__whole_in_summary(first, last, n, first_size,
                                          last_size, nonempty);
    return whole + (last == TB__BEGIN);
}

/* First fragments at payload offsets >= from among the first nfrags
 * fragments of an untrusted payload, roles taken against the valid prefix
 * as the copy path does. *bad (may be NULL) = declared fragments that did
 * not tokenize (0 when the drop sentinel stopped it). */
uint32_t tb__count_starts(const uint8_t *payload, size_t size,
                          uint32_t nfrags, uint8_t flags, uint32_t from,
                          uint32_t *bad)
{
    uint32_t tok = size > TB__MAX_PAYLOAD ? TB__MAX_PAYLOAD + 1u
                                          : (uint32_t)size;
    uint32_t valid = 0, n = 0;
    tb__frag f;
    if (bad)
        *bad = 0;
    if (!payload)
        return 0;
    while (n < nfrags) {
        int t = tb__next_frag(payload, tok, &valid, flags, &f);
        if (t != TB__FRAG_OK) {
            if (t != TB__FRAG_DROP && bad)
                *bad = nfrags - n;
            break;
        }
        n++;
    }
    uint32_t off = 0, starts = 0;
    for (uint32_t i = 0; i < n; i++) {
        if (tb__next_frag(payload, valid, &off, flags, &f) != TB__FRAG_OK)
            break;
        if (f.pos < from)
            continue;
        if ((f.role == TB__WHOLE && f.size > 0) || f.role == TB__BEGIN)
            starts++;
    }
    return starts;
}

void tb__loss_free(tb_buffer *b)
{
    free(b->lossv);
    free(b->lhash);
    free(b->loss_gap);
    tb__share_free(&b->loss_share);
    b->lossv = NULL;
    b->lhash = NULL;
    b->loss_gap = NULL;
    b->nloss = b->loss_cap = b->lhash_cap = 0;
    b->loss_gap_n = 0;
}

int tb__loss_clone(tb_buffer *dst, const tb_buffer *src)
{
    if (src->nloss == 0)
        return 0;
    dst->lossv = malloc((size_t)src->loss_cap * sizeof(*dst->lossv));
    dst->lhash = malloc((size_t)src->lhash_cap * sizeof(*dst->lhash));
    if (!dst->lossv || !dst->lhash)
        return -ENOMEM;
    memcpy(dst->lossv, src->lossv, (size_t)src->nloss * sizeof(*src->lossv));
    memcpy(dst->lhash, src->lhash, (size_t)src->lhash_cap * sizeof(uint32_t));
    dst->nloss = src->nloss;
    dst->loss_cap = src->loss_cap;
    dst->lhash_cap = src->lhash_cap;
    dst->loss_over = src->loss_over;
    if (tb__share_clone(&dst->loss_share, &src->loss_share,
                        src->nloss - (src->loss_over != 0)) < 0)
        return -ENOMEM;
    if (src->loss_gap_n) {
        dst->loss_gap = malloc(src->loss_gap_n);
        if (!dst->loss_gap)
            return -ENOMEM;
        memcpy(dst->loss_gap, src->loss_gap, src->loss_gap_n);
        dst->loss_gap_n = src->loss_gap_n;
    }
    for (uint32_t i = 0; i < dst->nloss; i++) { /* reads are not cloned */
        dst->lossv[i].packets_offered -= dst->lossv[i].packets_read;
        dst->lossv[i].packets_read = 0;
    }
    return 0;
}

SHMTRACE_API const tb_seq_loss *tb_get_seq_loss(const tb_buffer *cb,
                                                size_t *n)
{
    if (n)
        *n = 0;
    if (!cb || cb->nloss == 0)
        return NULL;
    tb_buffer *b = (tb_buffer *)cb; /* pending is a cache in the entries */
    for (uint32_t i = 0; i < b->nloss; i++)
        b->lossv[i].packets_pending = 0;
    for (uint32_t i = 0; i < b->nseqs; i++) {
        tb__seq *s = &b->seqs[i];
        uint64_t pending = 0;
        for (uint32_t k = 0; k < s->count; k++)
            pending += tb__ring_at(s, k)->npk;
        /* Offered through the entry the sequence caches; one with none
         * (out of memory when its chunks came) offered them to none. */
        if (pending > 0 && s->loss_idx)
            b->lossv[s->loss_idx - 1].packets_pending += pending;
    }
    if (n)
        *n = b->nloss;
    return b->lossv;
}

SHMTRACE_API const char *tb_loss_cause_name(int cause)
{
    static const char *const names[TB_NUM_CAUSES] = {
        "overwrite", "discard", "abi_violation", "corrupted",
        "patch_failed", "reassembly",
    };
    return (cause >= 0 && cause < TB_NUM_CAUSES) ? names[cause] : "?";
}
