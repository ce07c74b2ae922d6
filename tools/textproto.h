/*
 * textproto.h - protobuf text format -> protobuf-c message, driven by the
 * message descriptors (so the accepted subset of TraceConfig is exactly what
 * protos/config.proto declares: wire-formats.md section 6).
 *
 * Grammar accepted (the subset Perfetto's config files use):
 *   message  := { field [',' | ';'] }
 *   field    := NAME ':' scalar
 *             | NAME [':'] ( '{' message '}' | '<' message '>' )
 *             | NAME ':' '[' scalar { ',' scalar } ']'   (repeated scalars)
 *   scalar   := INT (decimal, 0x hex, optional '-') | FLOAT | "string"
 *               | 'string' | true | false | ENUM_NAME
 *   comments: '#' to end of line. Adjacent strings concatenate.
 *   string escapes: \n \t \r \a \b \f \v \\ \' \" \? \NNN (octal) \xHH.
 * This is a superset of what Perfetto's own parser (`perfetto --txt`)
 * takes, which has no lists, no '<>', no hex numbers, and enums by name.
 * Errors name the line and the problem (unknown field, wrong type, out of
 * range, duplicate singular field, ...).
 */
#ifndef SHMTRACE_TEXTPROTO_H
#define SHMTRACE_TEXTPROTO_H

#include <stddef.h>

#include <protobuf-c/protobuf-c.h>

/* Parse text (NUL-terminated) as a desc message. On success *out is a
 * malloc'd message: free it with protobuf_c_message_free_unpacked(*out,
 * NULL). On failure returns -EINVAL and writes a message to err. */
int tp_parse(const char *text, const ProtobufCMessageDescriptor *desc,
             ProtobufCMessage **out, char *err, size_t err_len);

#endif /* SHMTRACE_TEXTPROTO_H */
