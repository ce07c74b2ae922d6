/*
 * svc_packet.c - TracePacket validator and trusted trailer (svc_packet.h).
 *
 * The validator walks the top-level fields with every offset bounded by
 * `size`; it never reads outside [p, p + size). Perfetto's
 * packet_stream_validator applies the same rules.
 */
#include <string.h>

#include "svc_packet.h"

#define SVC_MAX_FIELD_LEN 268435455u

/* The reserved fields as a bitmap (all are < 192), one test instead of a
 * switch per field. */
#define RES_BIT(f) (1ull << ((f) & 63))
static const uint64_t reserved_map[3] = {
    RES_BIT(3) | RES_BIT(10) | RES_BIT(33) | RES_BIT(35) | RES_BIT(36) |
        RES_BIT(50),
    RES_BIT(69) | RES_BIT(79) | RES_BIT(98) | RES_BIT(124) | RES_BIT(125),
    RES_BIT(133),
};

static inline bool is_reserved_field(uint64_t field)
{
    return field < 192 && ((reserved_map[field >> 6] >> (field & 63)) & 1);
}

/* Reads a varint of at most 10 bytes; false if longer or truncated. Most
 * tags and many values take one byte: that case first; then two (tags of
 * fields 16-2047, such as for_testing's 900, and lengths under 16 KiB). */
static inline bool read_varint(const uint8_t *p, size_t size, size_t *pos,
                               uint64_t *out)
{
    if (*pos < size && p[*pos] < 0x80) {
        *out = p[(*pos)++];
        return true;
    }
    if (*pos < size && size - *pos >= 2 && p[*pos + 1] < 0x80) {
        *out = (uint64_t)(p[*pos] & 0x7f) | (uint64_t)p[*pos + 1] << 7;
        *pos += 2;
        return true;
    }
    uint64_t v = 0;
    for (unsigned i = 0; i < 10; i++) {
        if (*pos >= size)
            return false;
        uint8_t b = p[(*pos)++];
        v |= (uint64_t)(b & 0x7f) << (7 * i);     /* 7 * 9 = 63 max */
        if (!(b & 0x80)) {
            *out = v;
            return true;
        }
    }
    return false;
}

/* Skips a varint (the value of a wire-type-0 field, which the check does
 * not need): the same answer as read_varint. With 8 bytes left, the
 * varint's length comes from one load (the first byte without its top bit:
 * a nanosecond timestamp takes 9 bytes, one loop turn each otherwise). */
static inline bool skip_varint(const uint8_t *p, size_t size, size_t *pos)
{
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    if (size - *pos >= 8) {
        uint64_t x;
        memcpy(&x, p + *pos, 8);
        uint64_t stops = ~x & 0x8080808080808080ull;
        if (stops) {
            *pos += (size_t)(__builtin_ctzll(stops) >> 3) + 1;
            return true;
        }
        /* 8 bytes with the continuation bit: at most 2 more */
        *pos += 8;
        for (unsigned i = 0; i < 2; i++) {
            if (*pos >= size)
                return false;
            if (!(p[(*pos)++] & 0x80))
                return true;
        }
        return false;
    }
#endif
    uint64_t v;
    return read_varint(p, size, pos, &v);
}

bool svc_packet_validate_untrusted(const uint8_t *p, size_t size)
{
    bool flagged;
    return svc_packet_check(p, size, &flagged);
}

bool svc_packet_check(const uint8_t *p, size_t size, bool *flagged)
{
    size_t pos = 0;
    *flagged = false;
    while (pos < size) {
        uint64_t tag, v;
        if (!read_varint(p, size, &pos, &tag))
            return false;
        uint64_t field = tag >> 3;
        unsigned wire = (unsigned)(tag & 7);
        if (field == 0 || is_reserved_field(field))
            return false;
        switch (wire) {
        case 0:
            if (field == SVC_FIELD_PREVIOUS_PACKET_DROPPED) {
                if (!read_varint(p, size, &pos, &v))
                    return false;
                *flagged = v != 0;                  /* last one wins */
            } else if (!skip_varint(p, size, &pos)) {
                return false;
            }
            break;
        case 1:
            if (size - pos < 8)
                return false;
            pos += 8;
            break;
        case 5:
            if (size - pos < 4)
                return false;
            pos += 4;
            break;
        case 2:
            if (!read_varint(p, size, &pos, &v))
                return false;
            if (v > SVC_MAX_FIELD_LEN || v > size - pos)
                return false;
            pos += (size_t)v;
            break;
        default:
            return false;
        }
    }
    return true;
}

/* The same walk over a packet in pieces (the slices of a reassembled
 * packet, read in place): a cursor over the pieces with byte reads and
 * skips. Every read is bounded by its piece; the total bounds the walk. */
typedef struct {
    const tb_slice *pc;
    size_t n, i, off;   /* piece i, offset in it */
    size_t left;        /* bytes after the cursor */
} svc_cursor;

static bool cur_byte(svc_cursor *c, uint8_t *out)
{
    if (c->left == 0)
        return false;
    while (c->off >= c->pc[c->i].size) {
        c->i++;
        c->off = 0;
    }
    *out = c->pc[c->i].data[c->off++];
    c->left--;
    return true;
}

static bool cur_varint(svc_cursor *c, uint64_t *out)
{
    uint64_t v = 0;
    for (unsigned i = 0; i < 10; i++) {
        uint8_t b;
        if (!cur_byte(c, &b))
            return false;
        v |= (uint64_t)(b & 0x7f) << (7 * i);
        if (!(b & 0x80)) {
            *out = v;
            return true;
        }
    }
    return false;
}

static bool cur_skip(svc_cursor *c, uint64_t n)
{
    if (n > c->left)
        return false;
    c->left -= (size_t)n;
    while (n > 0) {
        size_t room = c->pc[c->i].size - c->off;
        if (n < room) {
            c->off += (size_t)n;
            break;
        }
        n -= room;
        c->i++;
        c->off = 0;
    }
    return true;
}

bool svc_packet_validate_slices(const tb_slice *pieces, size_t n)
{
    bool flagged;
    return svc_packet_check_slices(pieces, n, &flagged);
}

bool svc_packet_check_slices(const tb_slice *pieces, size_t n,
                             bool *flagged)
{
    if (n == 1)
        return svc_packet_check(pieces[0].data, pieces[0].size, flagged);
    *flagged = false;
    svc_cursor c = { pieces, n, 0, 0, 0 };
    for (size_t i = 0; i < n; i++)
        c.left += pieces[i].size;
    while (c.left > 0) {
        uint64_t tag, v;
        if (!cur_varint(&c, &tag))
            return false;
        uint64_t field = tag >> 3;
        unsigned wire = (unsigned)(tag & 7);
        if (field == 0 || is_reserved_field(field))
            return false;
        switch (wire) {
        case 0:
            if (!cur_varint(&c, &v))
                return false;
            if (field == SVC_FIELD_PREVIOUS_PACKET_DROPPED)
                *flagged = v != 0;                  /* last one wins */
            break;
        case 1:
            if (!cur_skip(&c, 8))
                return false;
            break;
        case 5:
            if (!cur_skip(&c, 4))
                return false;
            break;
        case 2:
            if (!cur_varint(&c, &v) || v > SVC_MAX_FIELD_LEN ||
                !cur_skip(&c, v))
                return false;
            break;
        default:
            return false;
        }
    }
    return true;
}

size_t svc_varint(uint8_t *out, uint64_t v)
{
    size_t n = 0;
    while (v >= 0x80) {
        out[n++] = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    out[n++] = (uint8_t)v;
    return n;
}

size_t svc_packet_trailer(uint8_t *out, int32_t uid, uint32_t seq_id,
                          int32_t pid, uint32_t previous_packet_dropped)
{
    size_t n = 0;
    /* int32 fields: negative values are sign-extended 10-byte varints. */
    out[n++] = 0x18;                                /* trusted_uid = 3 */
    n += svc_varint(out + n, (uint64_t)(int64_t)uid);
    out[n++] = 0x50;                                /* sequence id = 10 */
    n += svc_varint(out + n, seq_id);
    out[n++] = 0xF8;                                /* trusted_pid = 79 */
    out[n++] = 0x04;
    n += svc_varint(out + n, (uint64_t)(int64_t)pid);
    if (previous_packet_dropped) {
        out[n++] = 0xD0;                            /* field 42, varint */
        out[n++] = 0x02;
        n += svc_varint(out + n, previous_packet_dropped);
    }
    return n;
}
