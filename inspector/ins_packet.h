/*
 * ins_packet.h - streaming decoder of the Trace / TracePacket framing.
 *
 * Decision (documented here as the brief asks): the outer framing is
 * decoded by hand, streaming, and only the top level of each TracePacket is
 * walked; the few submessages the inspector needs (trace_stats 35,
 * trace_config 33, service_event 69) are copied out and decoded later with
 * protobuf-c generated code (ins_stats.c). Reasons: a TracePacket can be
 * larger than any buffer we want to hold (payload fields are skipped
 * without being stored), protobuf-c would allocate every packet, and the
 * hot loop is a handful of varints per packet. (The same decoder reads the
 * Trace bytes inside a compressed_packets field, through an in-memory
 * ins_reader.)
 *
 * Wire facts (../shared/spec/wire-formats.md §1, §2): a trace file is
 * `0A <varint len> <TracePacket>` records; other Trace fields are skipped;
 * protobuf "last one wins" applies to the trusted fields the service
 * appends. A record whose length runs past the end of input is truncated; a
 * TracePacket whose fields do not parse exactly to its end is malformed.
 * Both stop the decoder with the absolute offset of the problem.
 *
 * compressed_packets (50) is copied too and expanded by the caller
 * (ins_inflate); zstd_compressed_packets (133) is only flagged.
 *
 * Limits: a copied submessage may be at most INS_READER_MAX_BYTES; bigger
 * ones are treated as malformed (no real trace comes close).
 */
#ifndef INS_PACKET_H
#define INS_PACKET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ins_reader.h"

/* TracePacket field numbers we look at (wire-formats.md §2). */
enum {
    INS_TP_TRUSTED_UID = 3,
    INS_TP_CLOCK_SNAPSHOT = 6,
    INS_TP_TIMESTAMP = 8,
    INS_TP_TRUSTED_SEQ_ID = 10,
    INS_TP_TRACK_EVENT = 11,
    INS_TP_INTERNED_DATA = 12,
    INS_TP_SEQUENCE_FLAGS = 13,
    INS_TP_FTRACE_EVENTS = 1,
    INS_TP_TRACE_CONFIG = 33,
    INS_TP_FTRACE_STATS = 34,
    INS_TP_TRACE_STATS = 35,
    INS_TP_SYNC_MARKER = 36,
    INS_TP_INCREMENTAL_STATE_CLEARED = 41,
    INS_TP_PREVIOUS_PACKET_DROPPED = 42,
    INS_TP_SYSTEM_INFO = 45,
    INS_TP_COMPRESSED_PACKETS = 50,
    INS_TP_TIMESTAMP_CLOCK_ID = 58,
    INS_TP_TRACE_PACKET_DEFAULTS = 59,
    INS_TP_SERVICE_EVENT = 69,
    INS_TP_TRUSTED_PID = 79,
    INS_TP_FIRST_PACKET_ON_SEQUENCE = 87,
    INS_TP_TRACE_UUID = 89,
    INS_TP_MACHINE_ID = 98,
    INS_TP_CLONE_SNAPSHOT_TRIGGER = 113,
    INS_TP_TRACE_PROVENANCE = 124,
    INS_TP_PROTOVMS = 125,
    INS_TP_ZSTD_COMPRESSED_PACKETS = 133,
    INS_TP_FOR_TESTING = 900
};

/* BuiltinClock BOOTTIME: trace processor's default trace clock. */
#define INS_CLOCK_BOOTTIME 6

/* A copied submessage: bytes owned by the decoder, valid until the next
 * ins_decoder_next(). present = the field occurred (last one kept). */
typedef struct ins_blob {
    uint8_t *data;
    size_t len;
    size_t cap;
    bool present;
} ins_blob;

/* One decoded TracePacket (top level only). */
typedef struct ins_packet {
    uint64_t id;            /* 0-based ordinal in the file */
    uint64_t offset;        /* absolute offset of the record's 0x0A tag */
    uint64_t size;          /* encoded TracePacket bytes (no tag/length) */
    uint64_t timestamp;     /* field 8 */
    uint32_t clock_id;      /* field 58 (0 = not set) */
    int32_t trusted_uid;    /* field 3 */
    uint32_t seq_id;        /* field 10 (0 when absent) */
    int32_t trusted_pid;    /* field 79 */
    uint32_t machine_id;    /* field 98 */
    uint32_t previous_packet_dropped; /* field 42, DataLossReason bits */
    uint32_t sequence_flags;          /* field 13 */
    uint32_t payload_field; /* first field that is not header (0 = none) */
    bool has_timestamp, has_uid, has_seq_id, has_pid;
    bool first_packet_on_sequence;    /* field 87 */
    bool incremental_state_cleared;   /* field 41 */
    bool has_clock_snapshot;          /* field 6 */
    bool has_compressed_packets;      /* field 50 or 133 */
    bool has_zstd_packets;            /* field 133 (not expanded) */
    bool in_container;                /* came out of a compressed_packets */
    uint64_t container_id;            /* ... whose packet id this is */
    bool has_clone_snapshot_trigger;  /* field 113 */
    ins_blob trace_stats;   /* field 35 */
    ins_blob trace_config;  /* field 33 */
    ins_blob service_event; /* field 69 */
    ins_blob system_info;   /* field 45 (tracing_service_version) */
    ins_blob ftrace_stats;  /* field 34 */
    ins_blob ftrace_bundle; /* field 1 (ins_ftrace.c, ins_fevents.c) */
    ins_blob clock_snapshot; /* field 6 (its primary_trace_clock) */
    ins_blob compressed;    /* field 50: zlib/gzip DEFLATE of Trace bytes */
} ins_packet;

typedef enum ins_decode_status {
    INS_DECODE_PACKET = 1,   /* *pkt filled */
    INS_DECODE_END = 0,      /* clean end of input */
    INS_DECODE_TRUNCATED = -1,
    INS_DECODE_MALFORMED = -2,
    INS_DECODE_IO_ERROR = -3
} ins_decode_status;

typedef struct ins_decoder {
    ins_reader *reader;     /* borrowed */
    uint64_t next_id;
    uint64_t error_offset;  /* where the problem is (for errors) */
    char error[256];        /* what is wrong (for errors) */
} ins_decoder;

void ins_decoder_init(ins_decoder *d, ins_reader *r);

/* Decode the next TracePacket into PKT (its blobs are reused, so the same
 * PKT should be passed every call). Returns one of ins_decode_status; on a
 * negative status d->error and d->error_offset say what and where, and the
 * reader position is unspecified. */
ins_decode_status ins_decoder_next(ins_decoder *d, ins_packet *pkt);

/* Free the blobs owned by PKT. NULL-safe. */
void ins_packet_free(ins_packet *pkt);

/* Name of a TracePacket payload field for the packet table's `kind`
 * ("track_event", "trace_stats", ...), NULL when we have no name. */
const char *ins_packet_field_name(uint32_t field);

/* Decode a varint from [*p, end). Returns 0 and advances *p, or -1 if it
 * runs past END or is longer than 10 bytes. Shared with ins_stats.c. */
int ins_varint(const uint8_t **p, const uint8_t *end, uint64_t *out);

/* The next field of the message bytes [*p, end): its number, wire type,
 * and value (varint or fixed) or bytes (*d, *n; length-delimited). false
 * at the end or on malformed input (a bad tag, varint or length, or a
 * wire type that does not exist); *p then stays unusable. Shared with
 * ins_ftrace.c and ins_fevents.c, which walk messages not in protos/. */
bool ins_pb_next(const uint8_t **p, const uint8_t *end, uint32_t *num,
                 unsigned *wt, uint64_t *v, const uint8_t **d, size_t *n);

#endif /* INS_PACKET_H */
