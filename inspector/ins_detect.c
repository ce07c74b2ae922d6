/*
 * ins_detect.c - format detection from magic numbers (see ins_detect.h).
 *
 * Order matters: a plausible first record first, then binary magics, then
 * text classes (JSON and systrace are text too). Only the first 512 bytes are ever looked at.
 */
#include "ins_detect.h"

#include <string.h>

static int starts_with(const uint8_t *d, size_t n, const char *magic,
                       size_t mlen)
{
    return n >= mlen && memcmp(d, magic, mlen) == 0;
}

/* Printable ASCII/UTF-8 text (no NUL, few control bytes). */
static int looks_like_text(const uint8_t *d, size_t n)
{
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) {
        uint8_t c = d[i];
        if (c == 0)
            return 0;
        if (c < 0x20 && c != '\n' && c != '\r' && c != '\t' && c != '\f')
            bad++;
    }
    return bad * 32 <= n;
}

/* Varint at d[*i] (bounded by n); -1 if it runs out, -2 if too long. */
static int peek_varint(const uint8_t *d, size_t n, size_t *i, uint64_t *out)
{
    uint64_t v = 0;
    for (unsigned shift = 0; shift < 70; shift += 7) {
        if (*i >= n)
            return -1;
        uint8_t b = d[(*i)++];
        v |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) {
            *out = v;
            return 0;
        }
    }
    return -2;
}

/* d[0] == 0x0A: does a TracePacket plausibly follow? (A text file that
 * starts with a newline also starts with 0x0A.) Walk the first packet's
 * fields as far as the sample goes: every tag needs a field number and a
 * wire type of 0/1/2/5, and lengths must fit the packet. Running out of
 * sample counts as plausible. */
static int plausible_record(const uint8_t *d, size_t n)
{
    size_t i = 1;
    uint64_t len, tag, v;
    int rc = peek_varint(d, n, &i, &len);
    if (rc != 0)
        return rc == -1;
    size_t pkt_end = len > n - i ? n : i + (size_t)len;
    uint64_t left = len;
    while (i < pkt_end) {
        size_t start = i;
        if ((rc = peek_varint(d, pkt_end, &i, &tag)) != 0)
            return rc == -1;
        unsigned wt = (unsigned)(tag & 7);
        if (tag >> 3 == 0)
            return 0;
        if (wt == 0) {
            if ((rc = peek_varint(d, pkt_end, &i, &v)) != 0)
                return rc == -1;
        } else if (wt == 2) {
            if ((rc = peek_varint(d, pkt_end, &i, &v)) != 0)
                return rc == -1;
            if (v > left - (i - start))
                return 0;
            i += (size_t)v;
        } else if (wt == 1 || wt == 5) {
            i += wt == 1 ? 8 : 4;
        } else {
            return 0;
        }
        if (i - start > left)
            return 0;
        left -= i - start;
    }
    return 1;
}

ins_format ins_detect_format(const uint8_t *d, size_t n)
{
    if (n == 0)
        return INS_FORMAT_EMPTY;
    if (d[0] == 0x0A && plausible_record(d, n))
        return INS_FORMAT_PROTO_TRACE;
    if (starts_with(d, n, "\x1f\x8b", 2))
        return INS_FORMAT_GZIP;
    if (starts_with(d, n, "\x28\xb5\x2f\xfd", 4))
        return INS_FORMAT_ZSTD;
    if (starts_with(d, n, "\xfd" "7zXZ", 5))
        return INS_FORMAT_XZ;
    if (starts_with(d, n, "BZh", 3))
        return INS_FORMAT_BZIP2;
    if (starts_with(d, n, "PK\x03\x04", 4))
        return INS_FORMAT_ZIP;
    if (starts_with(d, n, "SQLite format 3", 16))
        return INS_FORMAT_SQLITE;
    if (starts_with(d, n, "\x7f" "ELF", 4))
        return INS_FORMAT_ELF;

    size_t look = n < 512 ? n : 512;
    if (!looks_like_text(d, look))
        return INS_FORMAT_UNKNOWN_BINARY;
    size_t i = 0;
    if (starts_with(d, n, "\xef\xbb\xbf", 3))
        i = 3; /* UTF-8 BOM */
    while (i < look && (d[i] == ' ' || d[i] == '\t' || d[i] == '\n' ||
                        d[i] == '\r'))
        i++;
    if (i < look && (d[i] == '{' || d[i] == '['))
        return INS_FORMAT_JSON;
    if (starts_with(d + i, look - i, "# tracer", 8))
        return INS_FORMAT_SYSTRACE;
    if (i < look && d[i] == '<')
        return INS_FORMAT_HTML;
    return INS_FORMAT_TEXT;
}

const char *ins_format_name(ins_format f)
{
    switch (f) {
    case INS_FORMAT_PROTO_TRACE: return "Perfetto protobuf trace";
    case INS_FORMAT_EMPTY: return "an empty file";
    case INS_FORMAT_GZIP: return "gzip-compressed data";
    case INS_FORMAT_ZSTD: return "zstd-compressed data";
    case INS_FORMAT_XZ: return "xz-compressed data";
    case INS_FORMAT_BZIP2: return "bzip2-compressed data";
    case INS_FORMAT_ZIP: return "a ZIP archive";
    case INS_FORMAT_SQLITE: return "an SQLite database";
    case INS_FORMAT_JSON: return "JSON text (a JSON trace?)";
    case INS_FORMAT_SYSTRACE: return "systrace/ftrace text";
    case INS_FORMAT_HTML: return "HTML/XML text";
    case INS_FORMAT_ELF: return "an ELF executable";
    case INS_FORMAT_TEXT: return "plain text";
    case INS_FORMAT_UNKNOWN_BINARY: return "unrecognised binary data";
    }
    return "unrecognised data";
}

const char *ins_format_hint(ins_format f)
{
    switch (f) {
    case INS_FORMAT_GZIP:
        return "decompress it first (gunzip -k FILE) and inspect the result";
    case INS_FORMAT_ZSTD:
        return "decompress it first (zstd -d FILE) and inspect the result";
    case INS_FORMAT_XZ:
        return "decompress it first (xz -dk FILE) and inspect the result";
    case INS_FORMAT_BZIP2:
        return "decompress it first (bunzip2 -k FILE) and inspect the result";
    case INS_FORMAT_ZIP:
        return "extract the trace from the archive first (unzip FILE)";
    case INS_FORMAT_SQLITE:
        return "this looks like an inspector output already: open it with "
               "sqlite3";
    case INS_FORMAT_EMPTY:
        return "the trace was not written (did the session record anything?)";
    default:
        return "shmtrace-inspect reads Perfetto-format traces (a sequence "
               "of Trace.packet records, first byte 0x0A)";
    }
}
