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

/* Parses a varint of at most 10 bytes from [p, end). Returns the number of
 * bytes used, or 0 if it is truncated or longer than 10 bytes. */
static uint32_t parse_varint(const uint8_t *p, const uint8_t *end,
                             uint64_t *value)
{
    uint64_t v = 0;
    for (uint32_t i = 0; i < 10 && p + i < end; i++) {
        uint8_t byte = p[i];
        v |= (uint64_t)(byte & 0x7Fu) << (7u * i);
        if (!(byte & 0x80u)) {
            *value = v;
            return i + 1;
        }
    }
    return 0;
}

static int frag_role(bool first, bool last, uint8_t flags)
{
    bool cont_from_prev = flags & TB_CHUNK_FIRST_PACKET_CONTINUES_FROM_PREV;
    bool cont_on_next = flags & TB_CHUNK_LAST_PACKET_CONTINUES_ON_NEXT;
    if (last && cont_on_next)
        return (first && cont_from_prev) ? TB__CONT : TB__BEGIN;
    if (first && cont_from_prev)
        return TB__END;
    return TB__WHOLE;
}

/* Tokenizes the fragment at *off. On TB__FRAG_OK advances *off past it and
 * fills *out; otherwise leaves *off unchanged. */
int tb__next_frag(const uint8_t *payload, uint32_t payload_size,
                  uint32_t *off, uint8_t flags, tb__frag *out)
{
    uint32_t pos = *off;
    if (pos >= payload_size)
        return TB__FRAG_NONE;
    const uint8_t *end = payload + payload_size;
    uint64_t size = 0;
    uint32_t hdr = parse_varint(payload + pos, end, &size);
    if (hdr == 0)
        return TB__FRAG_CORRUPT;
    if (size == TB_PACKET_SIZE_DROP_PACKET)
        return TB__FRAG_DROP;
    if (size > (uint64_t)(payload_size - pos - hdr))
        return TB__FRAG_CORRUPT;
    uint32_t next = pos + hdr + (uint32_t)size;
    out->pos = pos;
    out->hdr = hdr;
    out->size = (uint32_t)size;
    out->role = frag_role(pos == 0, next >= payload_size, flags);
    *off = next;
    return TB__FRAG_OK;
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
