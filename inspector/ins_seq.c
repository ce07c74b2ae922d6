/*
 * ins_seq.c - sequence hash table (design in ins_seq.h).
 */
#include "ins_seq.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

void ins_seq_table_init(ins_seq_table *t)
{
    memset(t, 0, sizeof(*t));
}

void ins_seq_table_free(ins_seq_table *t)
{
    if (t == NULL)
        return;
    free(t->slots);
    memset(t, 0, sizeof(*t));
}

static size_t slot_of(uint32_t id, size_t cap)
{
    uint32_t h = id * 2654435761u; /* Knuth multiplicative hash */
    return (size_t)h & (cap - 1);
}

static int grow(ins_seq_table *t)
{
    size_t ncap = t->cap ? t->cap * 2 : 16;
    ins_seq *ns = calloc(ncap, sizeof(*ns));
    if (ns == NULL)
        return -ENOMEM;
    for (size_t i = 0; i < t->cap; i++) {
        if (!t->slots[i].used)
            continue;
        size_t j = slot_of(t->slots[i].seq_id, ncap);
        while (ns[j].used)
            j = (j + 1) & (ncap - 1);
        ns[j] = t->slots[i];
    }
    free(t->slots);
    t->slots = ns;
    t->cap = ncap;
    return 0;
}

ins_seq *ins_seq_get(ins_seq_table *t, uint32_t seq_id, bool create)
{
    if (t->cap) {
        size_t j = slot_of(seq_id, t->cap);
        while (t->slots[j].used) {
            if (t->slots[j].seq_id == seq_id)
                return &t->slots[j];
            j = (j + 1) & (t->cap - 1);
        }
    }
    if (!create)
        return NULL;
    if (t->count >= INS_SEQ_MAX) {
        errno = ENOSPC;
        return NULL;
    }
    if ((t->count + 1) * 2 > t->cap && grow(t) != 0) {
        errno = ENOMEM;
        return NULL;
    }
    size_t j = slot_of(seq_id, t->cap);
    while (t->slots[j].used)
        j = (j + 1) & (t->cap - 1);
    memset(&t->slots[j], 0, sizeof(t->slots[j]));
    t->slots[j].used = true;
    t->slots[j].seq_id = seq_id;
    t->count++;
    return &t->slots[j];
}

ins_seq *ins_seq_next(ins_seq_table *t, size_t *i)
{
    while (*i < t->cap) {
        ins_seq *s = &t->slots[(*i)++];
        if (s->used)
            return s;
    }
    return NULL;
}
