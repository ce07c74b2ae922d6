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
 * index (loss_idx). Refusals tokenize the refused payload
 * (tb__count_starts), which the accepting path never does twice.
 *
 * Bound (trace_buffer.h, TB_LOSS_MAX_WRITERS): entries are never dropped,
 * and producers that reconnect bring new keys, so the table stops making
 * writers' entries when it is full and counts every later writer in one
 * aggregate entry (key 0) instead. A sequence caches the aggregate's index
 * like its own, so the hot paths do not change; a refused chunk of such
 * a writer (no sequence) costs one hash miss. Sums move nothing between
 * entries: the aggregate's identity holds because each of its writers'
 * would.
 *
 * Refused for the uid's sequence bound (tb_seq.c): the chunk's packets
 * are lost to DISCARD in its writer's entry, like any refusal, and its
 * writer, which has no sequence to carry a loss bit, is marked in
 * b->loss_gap (one byte per entry, made when first needed), so that the
 * sequence it gets later starts with PRESENT | READ_GAP and its first
 * packet read says so. A writer in the aggregate cannot be marked alone:
 * its uid is marked instead (b->uids, agg_gap), for good, and every later
 * new sequence of that uid in the aggregate starts with the loss, whether
 * its own writer lost chunks or not; other uids' never do. The counts are
 * exact either way (the aggregate's as a whole).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "tb_int.h"

_Static_assert(TB_LOSS_MAX_WRITERS >= 2 &&
               TB_LOSS_MAX_WRITERS < UINT32_MAX / 2, "loss table bound");

static uint32_t lslot(uint32_t key, uint32_t cap)
{
    return (uint32_t)((key * 0x9E3779B1u) >> 9) & (cap - 1);
}

static int lhash_grow(tb_buffer *b)
{
    uint32_t cap = b->lhash_cap ? b->lhash_cap * 2 : 64;
    uint32_t *h = calloc(cap, sizeof(*h));
    if (!h)
        return -ENOMEM;
    for (uint32_t i = 0; i < b->nloss; i++) {
        uint32_t key = ((uint32_t)b->lossv[i].producer_id << 16) |
                       b->lossv[i].writer_id;
        uint32_t j = lslot(key, cap);
        while (h[j] != 0)
            j = (j + 1) & (cap - 1);
        h[j] = i + 1;
    }
    free(b->lhash);
    b->lhash = h;
    b->lhash_cap = cap;
    return 0;
}

/* Appends an empty entry for key; its index + 1, 0 when out of memory. */
static uint32_t loss_new(tb_buffer *b, uint32_t key)
{
    if ((uint64_t)(b->nloss + 1) * 2 > b->lhash_cap && lhash_grow(b) < 0)
        return 0;
    tb_seq_loss *v = tb__grow(b->lossv, &b->loss_cap, (size_t)b->nloss + 1,
                              sizeof(*v), 16);
    if (!v)
        return 0;
    b->lossv = v;
    tb_seq_loss *e = &b->lossv[b->nloss];
    memset(e, 0, sizeof(*e));
    e->producer_id = (uint16_t)(key >> 16);
    e->writer_id = (uint16_t)key;
    uint32_t j = lslot(key, b->lhash_cap);
    while (b->lhash[j] != 0)
        j = (j + 1) & (b->lhash_cap - 1);
    b->lhash[j] = ++b->nloss;
    return b->nloss;
}

/* The entry of key (found or created), cached in s when s is given; NULL
 * only when out of memory (the loss is then not attributed). Once
 * TB_LOSS_MAX_WRITERS - 1 writers have an entry, a new writer gets the
 * aggregate entry (key 0, created the first time; in lhash too, but no
 * lookup asks for key 0): checked only when an entry would be made. */
tb_seq_loss *tb__loss_entry(tb_buffer *b, tb__seq *s, uint32_t key)
{
    if (s && s->loss_idx)
        return &b->lossv[s->loss_idx - 1];
    if (b->lhash_cap) {
        uint32_t j = lslot(key, b->lhash_cap);
        while (b->lhash[j] != 0) {
            tb_seq_loss *e = &b->lossv[b->lhash[j] - 1];
            if ((((uint32_t)e->producer_id << 16) | e->writer_id) == key) {
                if (s)
                    s->loss_idx = b->lhash[j];
                return e;
            }
            j = (j + 1) & (b->lhash_cap - 1);
        }
    }
    uint32_t idx;
    if (b->nloss < TB_LOSS_MAX_WRITERS - 1) {
        idx = loss_new(b, key);
    } else {
        if (b->loss_over == 0)
            b->loss_over = loss_new(b, 0);
        idx = b->loss_over;
    }
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
    tb_seq_loss *e = tb__loss_entry(b, s, key);
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
    tb_seq_loss *e = tb__loss_entry(b, NULL, key);
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
 * writer was marked by tb__loss_gap_set (the mark is taken), or if it is
 * counted in the aggregate and its uid is marked (that mark stays: which
 * of the uid's aggregate writers lost chunks is not known). */
uint32_t tb__loss_gap_take(tb_buffer *b, tb__seq *s)
{
    const tb__uid_seqs *u = tb__uid_find(b, s->uid);
    bool agg = u && u->agg_gap;
    if (!b->loss_gap && !agg)
        return 0; /* no writer of it was ever refused: the usual case */
    tb_seq_loss *e = tb__loss_entry(b, s, s->key);
    if (!e)
        return 0;
    uint32_t i = (uint32_t)(e - b->lossv);
    if (i + 1 == b->loss_over)
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
        if (pending == 0)
            continue;
        tb_seq_loss *e = tb__loss_entry(b, s, s->key);
        if (e)
            e->packets_pending += pending;
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
