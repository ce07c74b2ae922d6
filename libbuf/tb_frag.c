/*
 * tb_frag.c - libbuf fragment tokenizer (untrusted payload bytes).
 *
 * A chunk payload is a run of fragments, each a varint size (any encoding of
 * up to 10 bytes; writers use 4-byte redundant varints) followed by that many
 * bytes. The role of a fragment comes from the chunk flags and its position
 * (smb-abi.md §6): the last fragment of a chunk flagged 0x2 begins a packet
 * (or continues one if it is also the first and 0x1 is set); the first one of
 * a chunk flagged 0x1 ends one; everything else is a whole packet.
 *
 * Every read is bounded by payload_size; nothing here writes.
 */
#include "tb_int.h"

/* Facts of a payload that tiles into n fragments: first/last sizes and the
 * number of non-empty fragments. Same result as tb__compute_facts. */
uint8_t tb__facts_from_summary(uint32_t n, uint32_t first_size,
                               uint32_t last_size, uint32_t nonempty,
                               uint8_t flags)
{
    uint8_t facts = TB__FACT_VALID;
    if (n == 0)
        return facts;
    int first = tb__frag_role(true, n == 1, flags);
    int last = tb__frag_role(n == 1, true, flags);
    uint32_t whole = tb__whole_in_summary(first, last, n, first_size,
                                          last_size, nonempty);
    if (whole > 0)
        facts |= TB__FACT_WHOLE;
    if (first == TB__END || first == TB__CONT)
        facts |= TB__FACT_ORPHAN;
    if (last == TB__BEGIN)
        facts |= TB__FACT_BEGIN;
    return facts;
}

/* Facts (TB__FACT_*) of a payload whose fragments tile [0, payload_size)
 * exactly, as the copy path guarantees. */
uint8_t tb__compute_facts(const uint8_t *payload, uint32_t payload_size,
                          uint8_t flags)
{
    uint8_t facts = TB__FACT_VALID;
    uint32_t off = 0;
    tb__frag f;
    int r;
    while ((r = tb__next_frag(payload, payload_size, &off, flags, &f)) ==
           TB__FRAG_OK) {
        if (f.role == TB__WHOLE && f.size > 0)
            facts |= TB__FACT_WHOLE;
        else if ((f.role == TB__END || f.role == TB__CONT) && f.pos == 0)
            facts |= TB__FACT_ORPHAN;
        else if (f.role == TB__BEGIN)
            facts |= TB__FACT_BEGIN;
    }
    if (r != TB__FRAG_NONE)
        return 0; /* does not tile: never use the fast path */
    return facts;
}
