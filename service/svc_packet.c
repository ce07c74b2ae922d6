/*
 * svc_packet.c - TracePacket validator and trusted trailer (svc_packet.h).
 *
 * The validator walks the top-level fields with every offset bounded by
 * `size`; it never reads outside [p, p + size). Perfetto's
 * packet_stream_validator applies the same rules.
 */
#include "svc_packet.h"

#define SVC_MAX_FIELD_LEN 268435455u

static bool is_reserved_field(uint64_t field)
{
    switch (field) {
    case 3: case 10: case 33: case 35: case 36: case 50: case 69: case 79:
    case 98: case 124: case 125: case 133:
        return true;
    default:
        return false;
    }
}

/* Reads a varint of at most 10 bytes; false if longer or truncated. */
static bool read_varint(const uint8_t *p, size_t size, size_t *pos,
                        uint64_t *out)
{
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

bool svc_packet_validate_untrusted(const uint8_t *p, size_t size)
{
    size_t pos = 0;
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
            if (!read_varint(p, size, &pos, &v))
                return false;
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
