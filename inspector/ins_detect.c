/*
 * ins_detect.c - format detection from magic numbers (see ins_detect.h).
 *
 * Order matters: binary magics first, then text classes (JSON and systrace
 * are text too). Only the first 512 bytes are ever looked at.
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

ins_format ins_detect_format(const uint8_t *d, size_t n)
{
    if (n == 0)
        return INS_FORMAT_EMPTY;
    if (d[0] == 0x0A)
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
