/*
 * tb_share.c - libbuf: the own entries of the bounded per-writer tables
 * (loss accounting, tb_loss.c; chunk histograms, tb_write.c) shared
 * fairly among uids (trace_buffer.h: TB_LOSS_MAX_WRITERS,
 * TB_HIST_MAX_WRITERS).
 *
 * The problem. Each table holds at most MAX - 1 writers' own entries plus
 * one aggregate (overflow) entry, key 0, always the last, that counts
 * every writer without an entry of its own. Handed out first come, first
 * served, the own entries were one hostile uid's for the asking: 8191
 * writers (reconnecting producers, one tiny chunk per writer id) and
 * every other uid's writers were counted in the aggregate for the
 * buffer's life, with no loss attributed to them by name.
 *
 * The way out. The aggregate is a plain sum of its writers' counts, so an
 * own entry can be folded into it at any time: its counts are added to
 * the aggregate's, the sums over the table do not change, and the
 * aggregate's identity (trace_buffer.h) still holds as a whole, since it
 * is the sum of two that held. What the folded writer still has pending
 * was offered to the entry folded, so the one sequence that may hold it
 * (its writer's: a sequence caches its entry's index) is pointed at the
 * aggregate too, and those packets are read or lost there. The freed
 * slot takes the newcomer, re-keyed in the table's hash.
 *
 * The rule: max-min fairness. While the table has room, every writer gets
 * an entry, as before. Once the own entries are all taken, a writer
 * without one whose uid holds at least two fewer than the uid holding the
 * most (the top) takes one of the top's (folded into the aggregate);
 * otherwise it is counted in the aggregate. "Two fewer" so that each
 * move narrows the gap: two uids that both keep making writers settle
 * one apart and never trade an entry back and forth. So a uid whose
 * writers keep coming keeps at least (MAX - 1) / (uids holding entries)
 * - 1 of them, a uid with fewer writers than that loses none, and a
 * buffer written by one uid never folds anything (that uid is always the
 * top): the honest single-user case is exactly what it was.
 *
 * Which of the top's entries: a clock hand sweeps the own entries from
 * where the last search stopped; among the next TB__SHARE_LOOK of the
 * top's entries it meets it takes the first that the table's `spare`
 * callback says costs the least to fold (a writer with no sequence left:
 * its counts are final, only their attribution by name goes), else the
 * first it met (about the oldest of the lap). A writer folded and seen
 * again later is a new writer to the table: it may get an entry again,
 * which counts from then on (its past stays in the aggregate).
 *
 * Costs. Nothing on the hot paths: the sequences cache their entries, and
 * all of this runs when a writer without an entry appears in a full
 * table: a binary search in b->uids for its uid's count, the top's
 * count (cached; counted again over b->uids after a fold), and for a
 * fold a sweep of at most the own entries once. Folds are bounded: each
 * lowers the sum of the squares of the uids' counts, whose sum stays
 * MAX - 1; in practice each uid that arrives takes its share once.
 * Memory: a uid per own entry (the owner array), and two counts per uid
 * in b->uids (tb_seq.c keeps a uid's entry while it holds any).
 *
 * Also here: tb__index_find and tb__index_remove, the lookup of a key in
 * the tables' index hashes (linear probing) and the removal that
 * re-keying a slot needs.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "tb_int.h"

/* How many of the top uid's entries a fold looks at for a spare one. */
#define TB__SHARE_LOOK 32u

static tb__share *share_of(tb_buffer *b, int tab)
{
    return tab == TB__TAB_LOSS ? &b->loss_share : &b->hist_share;
}

/* Own entries of table tab that uid's writers hold. */
uint32_t tb__share_held(const tb_buffer *b, int tab, uint32_t uid)
{
    const tb__uid_seqs *u = tb__uid_find(b, uid);
    return u ? u->held[tab] : 0;
}

/* The top uid of tab, counted again over b->uids. */
static void find_top(tb_buffer *b, tb__share *sh, int tab)
{
    sh->top_uid = 0;
    sh->top_n = 0;
    for (uint32_t i = 0; i < b->nuids; i++)
        if (b->uids[i].held[tab] > sh->top_n) {
            sh->top_n = b->uids[i].held[tab];
            sh->top_uid = b->uids[i].uid;
        }
    sh->top_known = true;
}

/* Own entry idx of table tab (just appended) is held by uid. 0, or
 * -ENOMEM with nothing changed (the caller then makes no entry). */
int tb__share_add(tb_buffer *b, int tab, uint32_t idx, uint32_t uid)
{
    tb__share *sh = share_of(b, tab);
    uint32_t *o = tb__grow(sh->owner, &sh->owner_cap, (size_t)idx + 1,
                           sizeof(*o), 16);
    if (!o)
        return -ENOMEM;
    sh->owner = o;
    tb__uid_seqs *u = tb__uid_get(b, uid);
    if (!u)
        return -ENOMEM;
    o[idx] = uid;
    u->held[tab]++;
    if (sh->top_known && u->held[tab] > sh->top_n) {
        sh->top_n = u->held[tab];
        sh->top_uid = uid;
    }
    return 0;
}

/* A writer of uid without an entry in table tab, whose nown own entries
 * are all taken. Returns the index of the own entry to fold into the
 * aggregate and give to it, or TB__NO_ENTRY: it is counted in the
 * aggregate (its uid holds at least the top's count less one, or out of
 * memory). With an index, uid has its entry in b->uids, so
 * tb__share_move cannot fail. */
uint32_t tb__share_pick(tb_buffer *b, int tab, uint32_t uid, uint32_t nown,
                        bool (*spare)(const tb_buffer *b, uint32_t idx))
{
    tb__share *sh = share_of(b, tab);
    if (!sh->top_known)
        find_top(b, sh, tab);
    if (nown == 0 || tb__share_held(b, tab, uid) + 1 >= sh->top_n)
        return TB__NO_ENTRY;
    if (!tb__uid_get(b, uid))
        return TB__NO_ENTRY;
    uint32_t first = TB__NO_ENTRY, pick = TB__NO_ENTRY, seen = 0;
    uint32_t i = sh->hand < nown ? sh->hand : 0;
    for (uint32_t step = 0; step < nown;
         step++, i = i + 1 < nown ? i + 1 : 0) {
        if (sh->owner[i] != sh->top_uid)
            continue;
        if (first == TB__NO_ENTRY)
            first = i;
        if (spare(b, i)) {
            pick = i;
            break;
        }
        if (++seen == TB__SHARE_LOOK)
            break;
    }
    if (pick == TB__NO_ENTRY)
        pick = first; /* found: the top holds top_n > 0 of them */
    if (pick == TB__NO_ENTRY) {
        tb__uid_release(b, uid); /* cannot happen; be safe */
        return TB__NO_ENTRY;
    }
    sh->hand = pick + 1 < nown ? pick + 1 : 0;
    return pick;
}

/* Own entry idx of table tab, folded into the aggregate, now belongs to a
 * writer of uid (after tb__share_pick gave idx for uid). */
void tb__share_move(tb_buffer *b, int tab, uint32_t idx, uint32_t uid)
{
    tb__share *sh = share_of(b, tab);
    uint32_t old = sh->owner[idx];
    tb__uid_seqs *u = tb__uid_find(b, old);
    if (u && u->held[tab] > 0)
        u->held[tab]--;
    u = tb__uid_find(b, uid);
    if (u) /* always: tb__share_pick made it */
        u->held[tab]++;
    sh->owner[idx] = uid;
    sh->top_known = false; /* a tie may have a new top: count again */
    tb__uid_release(b, old);
}

/* dst: a copy of src, whose first nown entries are own entries. 0 or
 * -ENOMEM. */
int tb__share_clone(tb__share *dst, const tb__share *src, uint32_t nown)
{
    *dst = *src;
    dst->owner = NULL;
    dst->owner_cap = 0;
    if (nown == 0)
        return 0;
    dst->owner = malloc((size_t)nown * sizeof(*dst->owner));
    if (!dst->owner)
        return -ENOMEM;
    memcpy(dst->owner, src->owner, (size_t)nown * sizeof(*dst->owner));
    dst->owner_cap = nown;
    return 0;
}

void tb__share_free(tb__share *sh)
{
    free(sh->owner);
    memset(sh, 0, sizeof(*sh));
}

uint32_t tb__index_find(const uint32_t *hash, uint32_t cap, unsigned shift,
                        uint32_t key, const tb_buffer *b,
                        uint32_t (*key_at)(const tb_buffer *b, uint32_t idx))
{
    if (cap == 0)
        return 0;
    for (uint32_t j = tb__index_slot(key, shift, cap); hash[j] != 0;
         j = (j + 1) & (cap - 1))
        if (key_at(b, hash[j] - 1) == key)
            return hash[j];
    return 0;
}

/* Removes key, held at index idx, from an index hash (values index + 1,
 * linear probing, slots from tb__index_slot with `shift`), and moves back
 * the entries after it that its slot kept from their home (so that no
 * lookup stops early at the hole). key_at gives the key of an index. */
void tb__index_remove(uint32_t *hash, uint32_t cap, unsigned shift,
                      uint32_t key, uint32_t idx, const tb_buffer *b,
                      uint32_t (*key_at)(const tb_buffer *b, uint32_t idx))
{
    uint32_t mask = cap - 1, hole = tb__index_slot(key, shift, cap);
    while (hash[hole] != idx + 1) {
        if (hash[hole] == 0)
            return; /* not there: cannot happen */
        hole = (hole + 1) & mask;
    }
    for (uint32_t j = (hole + 1) & mask; hash[j] != 0; j = (j + 1) & mask) {
        uint32_t home = tb__index_slot(key_at(b, hash[j] - 1), shift, cap);
        /* j's entry may fill the hole unless its home lies in (hole, j]. */
        bool stays = hole < j ? (home > hole && home <= j)
                              : (home > hole || home <= j);
        if (stays)
            continue;
        hash[hole] = hash[j];
        hole = j;
    }
    hash[hole] = 0;
}
