/*
 * ins_inflate.h - a small, bounded inflater for TracePacket.compressed_packets
 * (field 50): zlib-wrapped (RFC 1950) or gzip-wrapped (RFC 1952) DEFLATE
 * (RFC 1951), the two formats trace processor accepts there. Written here
 * because zlib is not a dependency of the project; about 300 lines, one
 * job.
 *
 * Design: canonical-Huffman decoding one bit at a time (count/symbol
 * tables), output into one growing heap buffer that is also the history
 * window; the output may not exceed INS_INFLATE_MAX_BYTES (a bound against
 * compression bombs). Every read of input and every back-reference is
 * bounds-checked: corrupt input gives an error, never a crash. The
 * trailer checksum (Adler-32 / CRC-32) is verified.
 *
 * Ownership: on success *out is malloc()ed and the caller frees it.
 * Errors: -EBADMSG (corrupt or unsupported stream: *why says which),
 * -EFBIG (output over the bound), -ENOMEM.
 */
#ifndef INS_INFLATE_H
#define INS_INFLATE_H

#include <stddef.h>
#include <stdint.h>

#define INS_INFLATE_MAX_BYTES (64u * 1024u * 1024u)

int ins_inflate(const uint8_t *in, size_t in_len, uint8_t **out,
                size_t *out_len, const char **why);

#endif /* INS_INFLATE_H */
