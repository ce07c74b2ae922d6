/*
 * svc_packet.h - producer packet checks and the service's trusted trailer.
 *
 * svc_packet_validate_untrusted: the TracePacket validator of
 * wire-formats.md §3. Top-level fields only (nested bytes are skipped):
 * a packet is invalid if it carries a field only the service may write
 * {3, 10, 33, 35, 36, 50, 69, 79, 98, 124, 125, 133}, field number 0, a wire
 * type other than 0/1/2/5, a length > 268435455, a varint longer than 10
 * bytes, or ends in the middle of a field.
 *
 * svc_packet_validate_slices: the same over a packet in pieces (the slices
 * of a packet read in place from a trace buffer). svc_packet_check and
 * svc_packet_check_slices: the same, also reading the value of
 * previous_packet_dropped (42) where the others skip varint values.
 *
 * svc_packet_trailer: the bytes appended to a valid packet ("last one wins"
 * in protobuf): trusted_uid (3), trusted_packet_sequence_id (10),
 * trusted_pid (79), previous_packet_dropped (42) only when non-zero.
 * Pure functions, no state, any thread.
 */
#ifndef SHMTRACE_SVC_PACKET_H
#define SHMTRACE_SVC_PACKET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <shmtrace/trace_buffer.h>

#define SVC_TRAILER_MAX 48   /* 4 fields, each tag <= 2 + varint <= 10 */

bool svc_packet_validate_untrusted(const uint8_t *p, size_t size);

/* The same check over a packet in n slices (in order), without gathering
 * them: the same answer as on their concatenation. */
bool svc_packet_validate_slices(const tb_slice *slices, size_t n);

/* The same two checks, also telling whether the packet flags a loss of
 * its own: *flagged = its last top-level previous_packet_dropped is
 * non-zero (false when it has none; meaningless when the packet is
 * invalid). A file session counts the flagged records it writes with it
 * (svc_read.c). */
#define SVC_FIELD_PREVIOUS_PACKET_DROPPED 42u
bool svc_packet_check(const uint8_t *p, size_t size, bool *flagged);
bool svc_packet_check_slices(const tb_slice *slices, size_t n,
                             bool *flagged);

/* Writes the trailer into out (>= SVC_TRAILER_MAX bytes); returns length. */
size_t svc_packet_trailer(uint8_t *out, int32_t uid, uint32_t seq_id,
                          int32_t pid, uint32_t previous_packet_dropped);

/* Protobuf varint encoder; returns bytes written (<= 10). */
size_t svc_varint(uint8_t *out, uint64_t v);

/* Bytes svc_varint() writes for v. */
static inline size_t svc_varint_len(uint64_t v)
{
    size_t n = 1;
    for (; v >= 0x80; v >>= 7)
        n++;
    return n;
}

#endif /* SHMTRACE_SVC_PACKET_H */
