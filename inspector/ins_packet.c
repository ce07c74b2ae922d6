/*
 * ins_packet.c - streaming Trace/TracePacket framing decoder (design in
 * ins_packet.h).
 *
 * Per record: read the tag and length with at most 11 buffered bytes, then
 * walk the packet's fields with `remaining` counting down to 0. Scalars of
 * interest are decoded in place, three submessages are copied into
 * reusable blobs, everything else is skipped through the reader (so a
 * 1 GiB packet costs no memory). Any varint or length that does not fit the
 * packet is MALFORMED; running out of input inside a record is TRUNCATED.
 */
#include "ins_packet.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int ins_varint(const uint8_t **p, const uint8_t *end, uint64_t *out)
{
    const uint8_t *q = *p;
    uint64_t v = 0;
    for (unsigned shift = 0; shift < 70 && q < end; shift += 7) {
        uint8_t b = *q++;
        v |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) {
            *p = q;
            *out = v;
            return 0;
        }
    }
    return -1;
}

bool ins_pb_next(const uint8_t **p, const uint8_t *end, uint32_t *num,
                 unsigned *wt, uint64_t *v, const uint8_t **d, size_t *n)
{
    uint64_t tag;
    if (*p >= end || ins_varint(p, end, &tag) != 0)
        return false;
    *num = (uint32_t)(tag >> 3);
    *wt = (unsigned)(tag & 7);
    *d = NULL;
    *n = 0;
    switch (*wt) {
    case 0:
        return ins_varint(p, end, v) == 0;
    case 1:
    case 5: {
        size_t k = *wt == 1 ? 8 : 4;
        if ((size_t)(end - *p) < k)
            return false;
        *v = 0;
        for (size_t i = 0; i < k; i++)
            *v |= (uint64_t)(*p)[i] << (8 * i);
        *p += k;
        return true;
    }
    case 2:
        if (ins_varint(p, end, v) != 0 || *v > (uint64_t)(end - *p))
            return false;
        *d = *p;
        *n = (size_t)*v;
        *p += *n;
        return true;
    default:
        return false;
    }
}

void ins_decoder_init(ins_decoder *d, ins_reader *r)
{
    memset(d, 0, sizeof(*d));
    d->reader = r;
}

/* Every blob of a packet, once: reset and free walk this list. */
static const size_t BLOBS[] = {
    offsetof(ins_packet, trace_stats),   offsetof(ins_packet, trace_config),
    offsetof(ins_packet, service_event), offsetof(ins_packet, system_info),
    offsetof(ins_packet, ftrace_stats),  offsetof(ins_packet, ftrace_bundle),
    offsetof(ins_packet, clock_snapshot), offsetof(ins_packet, compressed),
};
#define N_BLOBS (sizeof(BLOBS) / sizeof(*BLOBS))

static ins_blob *blob_at(ins_packet *p, size_t i)
{
    return (ins_blob *)((char *)p + BLOBS[i]);
}

void ins_packet_free(ins_packet *pkt)
{
    if (pkt == NULL)
        return;
    for (size_t i = 0; i < N_BLOBS; i++)
        free(blob_at(pkt, i)->data);
    memset(pkt, 0, sizeof(*pkt));
}

const char *ins_packet_field_name(uint32_t field)
{
    switch (field) {
    case INS_TP_CLOCK_SNAPSHOT: return "clock_snapshot";
    case INS_TP_TRACK_EVENT: return "track_event";
    case INS_TP_TRACE_CONFIG: return "trace_config";
    case INS_TP_TRACE_STATS: return "trace_stats";
    case INS_TP_SYNC_MARKER: return "synchronization_marker";
    case INS_TP_SYSTEM_INFO: return "system_info";
    case INS_TP_COMPRESSED_PACKETS: return "compressed_packets";
    case INS_TP_SERVICE_EVENT: return "service_event";
    case INS_TP_TRACE_UUID: return "trace_uuid";
    case INS_TP_CLONE_SNAPSHOT_TRIGGER: return "clone_snapshot_trigger";
    case INS_TP_TRACE_PROVENANCE: return "trace_provenance";
    case INS_TP_PROTOVMS: return "protovms";
    case INS_TP_ZSTD_COMPRESSED_PACKETS: return "zstd_compressed_packets";
    case INS_TP_FOR_TESTING: return "for_testing";
    case 1: return "ftrace_events";
    case 2: return "process_tree";
    case 9: return "process_stats";
    case 38: return "sys_stats";
    case 44: return "chrome_events";
    case 51: return "extension_descriptor";
    case 60: return "track_descriptor";
    case 95: return "remote_clock_sync"; /* not decoded */
    default: return NULL;
    }
}

/* Header fields: everything else is the packet's payload (its `kind`). */
static int is_header_field(uint32_t f)
{
    switch (f) {
    case INS_TP_TRUSTED_UID: case INS_TP_TIMESTAMP: case INS_TP_TRUSTED_SEQ_ID:
    case INS_TP_INTERNED_DATA: case INS_TP_SEQUENCE_FLAGS:
    case INS_TP_INCREMENTAL_STATE_CLEARED:
    case INS_TP_PREVIOUS_PACKET_DROPPED: case INS_TP_TIMESTAMP_CLOCK_ID:
    case INS_TP_TRACE_PACKET_DEFAULTS: case INS_TP_TRUSTED_PID:
    case INS_TP_FIRST_PACKET_ON_SEQUENCE: case INS_TP_MACHINE_ID:
        return 1;
    default:
        return 0;
    }
}

static ins_decode_status fail(ins_decoder *d, ins_decode_status st,
                              uint64_t offset, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

#include <stdarg.h>
static ins_decode_status fail(ins_decoder *d, ins_decode_status st,
                              uint64_t offset, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(d->error, sizeof(d->error), fmt, ap);
    va_end(ap);
    d->error_offset = offset;
    return st;
}

/* Make min(n, remaining) bytes available. Returns the usable count (may be
 * smaller at end of input) or a negative errno. */
static long need(ins_reader *r, uint64_t n, uint64_t remaining)
{
    size_t want = (size_t)(n < remaining ? n : remaining);
    if (ins_reader_avail(r) >= want)
        return (long)want;
    long got = ins_reader_ensure(r, want);
    if (got < 0)
        return got;
    return got < (long)want ? got : (long)want;
}

static ins_decode_status io_fail(ins_decoder *d, long err)
{
    return fail(d, INS_DECODE_IO_ERROR, ins_reader_offset(d->reader),
                "read error: %s", strerror((int)-err));
}

static void blob_reset(ins_blob *b)
{
    b->len = 0;
    b->present = false;
}

/* A present blob always has a buffer, even for 0 bytes: its readers may
 * form data + len (NULL + 0 is undefined behaviour). */
static int blob_store(ins_blob *b, const uint8_t *src, size_t n)
{
    if (n > b->cap || b->data == NULL) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < n)
            cap *= 2;
        uint8_t *nd = realloc(b->data, cap);
        if (nd == NULL)
            return -ENOMEM;
        b->data = nd;
        b->cap = cap;
    }
    if (n)
        memcpy(b->data, src, n);
    b->len = n;
    b->present = true;
    return 0;
}

/* Clear the packet for the next decode, keeping the blobs' buffers. */
static void packet_reset(ins_packet *p)
{
    ins_blob keep[N_BLOBS];
    for (size_t i = 0; i < N_BLOBS; i++)
        keep[i] = *blob_at(p, i);
    memset(p, 0, sizeof(*p));
    for (size_t i = 0; i < N_BLOBS; i++) {
        *blob_at(p, i) = keep[i];
        blob_reset(blob_at(p, i));
    }
}

static void set_scalar(ins_packet *p, uint32_t field, uint64_t v)
{
    switch (field) {
    case INS_TP_TRUSTED_UID:
        p->trusted_uid = (int32_t)(uint32_t)v;
        p->has_uid = true;
        break;
    case INS_TP_TIMESTAMP:
        p->timestamp = v;
        p->has_timestamp = true;
        break;
    case INS_TP_TRUSTED_SEQ_ID:
        p->seq_id = (uint32_t)v;
        p->has_seq_id = true;
        break;
    case INS_TP_SEQUENCE_FLAGS: p->sequence_flags = (uint32_t)v; break;
    case INS_TP_INCREMENTAL_STATE_CLEARED:
        p->incremental_state_cleared = v != 0;
        break;
    case INS_TP_PREVIOUS_PACKET_DROPPED:
        p->previous_packet_dropped = (uint32_t)v;
        break;
    case INS_TP_TIMESTAMP_CLOCK_ID: p->clock_id = (uint32_t)v; break;
    case INS_TP_TRUSTED_PID:
        p->trusted_pid = (int32_t)(uint32_t)v;
        p->has_pid = true;
        break;
    case INS_TP_FIRST_PACKET_ON_SEQUENCE:
        p->first_packet_on_sequence = v != 0;
        break;
    case INS_TP_MACHINE_ID: p->machine_id = (uint32_t)v; break;
    default: break;
    }
}

/* Walk the LEN bytes of one TracePacket body. */
static ins_decode_status decode_body(ins_decoder *d, ins_packet *p,
                                     uint64_t len)
{
    ins_reader *r = d->reader;
    uint64_t remaining = len;
    uint64_t end_offset = ins_reader_offset(r) + len;

    while (remaining > 0) {
        uint64_t field_offset = ins_reader_offset(r);
        long avail = need(r, 20, remaining);
        if (avail < 0)
            return io_fail(d, avail);
        /* Fewer bytes than asked for only happens at end of input. */
        int short_input = (uint64_t)avail < (remaining < 20 ? remaining : 20);
        const uint8_t *start = ins_reader_ptr(r), *q = start;
        const uint8_t *lim = start + avail;
        uint64_t tag;
        if (ins_varint(&q, lim, &tag) != 0) {
            if (short_input)
                goto truncated;
            return fail(d, INS_DECODE_MALFORMED, field_offset,
                        "packet #%" PRIu64 ": bad field tag", p->id);
        }
        uint32_t field = (uint32_t)(tag >> 3);
        unsigned wt = (unsigned)(tag & 7);
        if ((tag >> 3) == 0 || (tag >> 3) > 0x1fffffff)
            return fail(d, INS_DECODE_MALFORMED, field_offset,
                        "packet #%" PRIu64 ": invalid field number %" PRIu64,
                        p->id, tag >> 3);
        if (p->payload_field == 0 && !is_header_field(field))
            p->payload_field = field;

        uint64_t v = 0;
        switch (wt) {
        case 0:
            if (ins_varint(&q, lim, &v) != 0) {
                if (short_input)
                    goto truncated;
                return fail(d, INS_DECODE_MALFORMED, field_offset,
                            "packet #%" PRIu64 ": field %" PRIu32
                            " has a bad varint", p->id, field);
            }
            set_scalar(p, field, v);
            break;
        case 1:
        case 5: {
            size_t n = wt == 1 ? 8 : 4;
            if ((uint64_t)(lim - q) < n) {
                if ((uint64_t)(q - start) + n > remaining)
                    return fail(d, INS_DECODE_MALFORMED, field_offset,
                                "packet #%" PRIu64 ": field %" PRIu32
                                " runs past the end of the packet",
                                p->id, field);
                goto truncated;
            }
            q += n;
            break;
        }
        case 2: {
            if (ins_varint(&q, lim, &v) != 0) {
                if (short_input)
                    goto truncated;
                return fail(d, INS_DECODE_MALFORMED, field_offset,
                            "packet #%" PRIu64 ": field %" PRIu32
                            " has a bad length", p->id, field);
            }
            uint64_t hdr = (uint64_t)(q - start);
            if (v > remaining - hdr)
                return fail(d, INS_DECODE_MALFORMED, field_offset,
                            "packet #%" PRIu64 ": field %" PRIu32
                            " claims %" PRIu64 " bytes, only %" PRIu64
                            " left in the packet", p->id, field, v,
                            remaining - hdr);
            ins_reader_consume(r, (size_t)hdr);
            remaining -= hdr;
            ins_blob *blob = NULL;
            if (field == INS_TP_TRACE_STATS)
                blob = &p->trace_stats;
            else if (field == INS_TP_TRACE_CONFIG)
                blob = &p->trace_config;
            else if (field == INS_TP_SERVICE_EVENT)
                blob = &p->service_event;
            else if (field == INS_TP_SYSTEM_INFO)
                blob = &p->system_info;
            else if (field == INS_TP_FTRACE_STATS)
                blob = &p->ftrace_stats;
            else if (field == INS_TP_FTRACE_EVENTS)
                blob = &p->ftrace_bundle;
            else if (field == INS_TP_COMPRESSED_PACKETS) {
                blob = &p->compressed;
                p->has_compressed_packets = true;
            } else if (field == INS_TP_CLOCK_SNAPSHOT) {
                blob = &p->clock_snapshot;
                p->has_clock_snapshot = true;
            }
            else if (field == INS_TP_ZSTD_COMPRESSED_PACKETS) {
                p->has_compressed_packets = true;
                p->has_zstd_packets = true;
            }
            else if (field == INS_TP_CLONE_SNAPSHOT_TRIGGER)
                p->has_clone_snapshot_trigger = true;
            if (blob != NULL) {
                if (v > INS_READER_MAX_BYTES)
                    return fail(d, INS_DECODE_MALFORMED, field_offset,
                                "packet #%" PRIu64 ": field %" PRIu32
                                " is %" PRIu64 " bytes, more than the %u "
                                "the inspector decodes", p->id, field, v,
                                INS_READER_MAX_BYTES);
                long got = ins_reader_ensure(r, (size_t)v);
                if (got < 0)
                    return io_fail(d, got);
                if ((uint64_t)got < v)
                    goto truncated;
                if (blob_store(blob, ins_reader_ptr(r), (size_t)v) != 0)
                    return io_fail(d, -ENOMEM);
                ins_reader_consume(r, (size_t)v);
            } else {
                int rc = ins_reader_skip(r, v);
                if (rc == -ENODATA)
                    goto truncated;
                if (rc < 0)
                    return io_fail(d, rc);
            }
            remaining -= v;
            continue;
        }
        default:
            return fail(d, INS_DECODE_MALFORMED, field_offset,
                        "packet #%" PRIu64 ": field %" PRIu32
                        " has wire type %u (groups/invalid are not allowed)",
                        p->id, field, wt);
        }
        uint64_t used = (uint64_t)(q - start);
        if (used > remaining)
            return fail(d, INS_DECODE_MALFORMED, field_offset,
                        "packet #%" PRIu64 ": field %" PRIu32
                        " runs past the end of the packet", p->id, field);
        ins_reader_consume(r, (size_t)used);
        remaining -= used;
    }
    (void)end_offset;
    return INS_DECODE_PACKET;

truncated:
    return fail(d, INS_DECODE_TRUNCATED, p->offset,
                "packet #%" PRIu64 " at offset %" PRIu64 " declares %" PRIu64
                " bytes but the input ends before its end (offset %" PRIu64
                "): the trace is truncated", p->id, p->offset, len,
                end_offset);
}

ins_decode_status ins_decoder_next(ins_decoder *d, ins_packet *p)
{
    ins_reader *r = d->reader;
    for (;;) {
        long avail = ins_reader_ensure(r, 11);
        if (avail < 0)
            return io_fail(d, avail);
        if (avail == 0)
            return INS_DECODE_END;
        uint64_t rec_offset = ins_reader_offset(r);
        const uint8_t *start = ins_reader_ptr(r), *q = start;
        const uint8_t *lim = start + avail;
        uint64_t tag, len;
        if (ins_varint(&q, lim, &tag) != 0) {
            if (avail < 11)
                return fail(d, INS_DECODE_TRUNCATED, rec_offset,
                            "the input ends inside a record header at "
                            "offset %" PRIu64 ": the trace is truncated",
                            rec_offset);
            return fail(d, INS_DECODE_MALFORMED, rec_offset,
                        "bad record tag at offset %" PRIu64, rec_offset);
        }
        unsigned wt = (unsigned)(tag & 7);
        if (tag >> 3 == 0 || wt == 3 || wt == 4 || wt > 5)
            return fail(d, INS_DECODE_MALFORMED, rec_offset,
                        "not a Trace record at offset %" PRIu64
                        " (tag 0x%" PRIx64 ", expected 0x0a = "
                        "Trace.packet)", rec_offset, tag);
        if (wt == 2 && ins_varint(&q, lim, &len) != 0) {
            if (avail < 11)
                return fail(d, INS_DECODE_TRUNCATED, rec_offset,
                            "the input ends inside a record header at "
                            "offset %" PRIu64 ": the trace is truncated",
                            rec_offset);
            return fail(d, INS_DECODE_MALFORMED, rec_offset,
                        "bad record length at offset %" PRIu64, rec_offset);
        }
        if (tag != 0x0A) {
            /* Another Trace field: skip it as protobuf says. */
            uint64_t skip = 0, v;
            if (wt == 0 && ins_varint(&q, lim, &v) != 0)
                return fail(d, INS_DECODE_MALFORMED, rec_offset,
                            "bad varint at offset %" PRIu64, rec_offset);
            skip = wt == 1 ? 8 : wt == 5 ? 4 : wt == 2 ? len : 0;
            ins_reader_consume(r, (size_t)(q - start));
            int rc = ins_reader_skip(r, skip);
            if (rc == -ENODATA)
                return fail(d, INS_DECODE_TRUNCATED, rec_offset,
                            "the input ends inside the Trace field at "
                            "offset %" PRIu64, rec_offset);
            if (rc < 0)
                return io_fail(d, rc);
            continue;
        }
        ins_reader_consume(r, (size_t)(q - start));
        packet_reset(p);
        p->id = d->next_id;
        p->offset = rec_offset;
        p->size = len;
        ins_decode_status st = decode_body(d, p, len);
        if (st != INS_DECODE_PACKET)
            return st;
        d->next_id++;
        return INS_DECODE_PACKET;
    }
}
