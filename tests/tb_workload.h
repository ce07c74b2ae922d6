/*
 * tb_workload.h - a seeded libbuf workload for tests that compare two
 * buffers fed the same input (check_tb_mem: fresh ring against a reused
 * one full of garbage; check_tb_rewind: a ring that rewinds against one
 * that never has to).
 *
 * 5 writers of producers 1..2 write packets of 1..1800 bytes split over
 * chunks of 64..2047 payload bytes (4-byte varint headers); some chunks
 * are scraped first (incomplete, trailing garbage) and committed again,
 * some need a patch; the buffer is drained at random moments (on average
 * every `drain_every` chunks), cloned and drained at the end. The outcome
 * hashes every packet read (bytes, producer, writer, pid, loss flags), in
 * the order of its sequence: one chain per writer, combined at the end,
 * since the order between sequences is not part of the contract (a pass
 * that resumes walks the sequences that stalled first, tb_buffer.c).
 */
#ifndef TESTS_TB_WORKLOAD_H
#define TESTS_TB_WORKLOAD_H

#include "tb_testutil.h"
#include "trng.h"

#define WORKLOAD_WRITERS 8     /* writer ids 1..5 used */

typedef struct {
    uint64_t hash;               /* the chains combined (workload) */
    size_t packets;
    size_t flagged;
    uint64_t chain[WORKLOAD_WRITERS];
} outcome;

/* The outcome's chains as one value. */
static inline uint64_t outcome_hash(const outcome *o)
{
    uint64_t h = 0;
    for (int i = 0; i < WORKLOAD_WRITERS; i++)
        h = (h ^ o->chain[i]) * 1099511628211u;
    return h;
}

static inline void drain(tb_buffer *b, outcome *o)
{
    tb_packet pkt;
    tb_seq_props props;
    uint32_t loss;
    tb_begin_read(b);
    while (tb_read_next_packet(b, &pkt, &props, &loss)) {
        ck_assert_uint_lt(props.writer_id, WORKLOAD_WRITERS);
        uint64_t h = o->chain[props.writer_id] * 1000003u;
        for (size_t i = 0; i < pkt.nslices; i++)
            for (size_t k = 0; k < pkt.slices[i].size; k++)
                h = (h ^ pkt.slices[i].data[k]) * 1099511628211u;
        h ^= (uint64_t)props.producer_id << 48 ^
             (uint64_t)props.writer_id << 32 ^ (uint64_t)props.pid << 8 ^
             loss;
        o->chain[props.writer_id] = h;
        o->packets++;
        o->flagged += loss != 0;
    }
}

static inline void workload(tb_buffer *b, uint32_t seed, uint32_t drain_every,
                            outcome *o, tb_stats *stats)
{
    uint32_t r = seed * 2654435761u | 1;   /* trng_next32 state */
    uint32_t ids[6] = {0};
    uint32_t left[6] = {0};          /* bytes of the open packet to go */
    uint8_t seedb[6] = {0};
    static tbt_chunk c;
    for (int step = 0; step < 2500; step++) {
        uint16_t w = (uint16_t)(1 + trng_next32(&r) % 5);
        uint16_t prod = (uint16_t)(1 + w % 2);
        uint32_t cap = 64 + trng_next32(&r) % 1984;
        uint8_t flags = left[w] ? TB_F1 : 0;
        tbt_reset(&c);
        while (c.size + 5 < cap) {
            if (!left[w]) {
                left[w] = 1 + trng_next32(&r) % 1800;
                seedb[w] = (uint8_t)trng_next32(&r);
            }
            uint32_t room = cap - (uint32_t)c.size - 4;
            uint32_t n = left[w] < room ? left[w] : room;
            tbt_frag4(&c, n, seedb[w]);
            seedb[w] = (uint8_t)(seedb[w] + n);
            left[w] -= n;
            if (left[w]) {
                flags |= TB_F2;
                break;
            }
        }
        uint32_t id = ids[w]++;
        uint32_t roll = trng_next32(&r) % 16;
        if (roll == 0) {
            /* scraped first (incomplete, with trailing garbage) */
            tb_copy_chunk_untrusted(b, prod, 1000 + prod, 40 + prod, w, id,
                                    c.nfrags, flags, false, c.data,
                                    c.size + trng_next32(&r) % 32);
        }
        if (roll == 1 && (flags & TB_F2) && c.size > 8) {
            /* needs a patch: the last 4 bytes go in out of band */
            uint8_t saved[4];
            memcpy(saved, c.data + c.size - 4, 4);
            memset(c.data + c.size - 4, 0, 4);
            tb_copy_chunk_untrusted(b, prod, 1000 + prod, 40 + prod, w, id,
                                    c.nfrags, flags | TB_F4, true, c.data,
                                    c.size);
            tb_patch p = {(uint32_t)c.size - 4, {0}};
            memcpy(p.data, saved, 4);
            tb_try_patch_chunk(b, prod, w, id, &p, 1, false);
        } else {
            tb_copy_chunk_untrusted(b, prod, 1000 + prod, 40 + prod, w, id,
                                    c.nfrags, flags, true, c.data, c.size);
        }
        if (trng_next32(&r) % drain_every == 0)
            drain(b, o);
    }
    tb_buffer *clone = tb_clone_readonly(b);
    ck_assert_ptr_nonnull(clone);
    outcome oc = {0};
    drain(clone, &oc);
    tb_destroy(clone);
    drain(b, o);
    o->hash = outcome_hash(o) ^ (outcome_hash(&oc) * 31u + oc.packets);
    *stats = *tb_get_stats(b);
}

#endif /* TESTS_TB_WORKLOAD_H */
