/*
 * ins_detect.h - guess a file's format from its first bytes.
 *
 * A Perfetto trace is a bare Trace message: a run of `0A <varint len>
 * <TracePacket>` records, so its first byte is 0x0A (field 1, wire type 2),
 * the same test trace processor uses. Anything else is named as precisely
 * as the magic numbers allow, so the error can tell the user what they
 * passed (a gzip'ed trace, an SQLite file we wrote, a JSON trace, ...).
 */
#ifndef INS_DETECT_H
#define INS_DETECT_H

#include <stddef.h>
#include <stdint.h>

typedef enum ins_format {
    INS_FORMAT_PROTO_TRACE = 0, /* Perfetto protobuf trace */
    INS_FORMAT_EMPTY,           /* zero bytes */
    INS_FORMAT_GZIP,
    INS_FORMAT_ZSTD,
    INS_FORMAT_XZ,
    INS_FORMAT_BZIP2,
    INS_FORMAT_ZIP,
    INS_FORMAT_SQLITE,
    INS_FORMAT_JSON,
    INS_FORMAT_SYSTRACE,       /* ftrace text ("# tracer:") */
    INS_FORMAT_HTML,
    INS_FORMAT_ELF,
    INS_FORMAT_TEXT,           /* other printable text */
    INS_FORMAT_UNKNOWN_BINARY
} ins_format;

/* Classify the first N bytes of a file (N may be 0). Never fails. */
ins_format ins_detect_format(const uint8_t *data, size_t n);

/* Human name of a format, e.g. "gzip-compressed data". Static string. */
const char *ins_format_name(ins_format f);

/* What to do about it, one sentence for the error message. Static. */
const char *ins_format_hint(ins_format f);

#endif /* INS_DETECT_H */
