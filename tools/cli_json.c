/*
 * cli_json.c - protobuf-c messages as JSON (see cli_json.h).
 *
 * Walks the message descriptor: for each field, the quantifier says where
 * the "is set" information lives (has_* flag, NULL pointer, repeated
 * count), the type how to print one value. Recursion depth is bounded by
 * the message types (the CLI only prints replies of the service, already
 * unpacked by protobuf-c).
 */
#include "config.h"

#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "cli_json.h"

void cli_json_string(FILE *f, const char *s)
{
    if (!s) {
        fputs("null", f);
        return;
    }
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        switch (*p) {
        case '"': fputs("\\\"", f); break;
        case '\\': fputs("\\\\", f); break;
        case '\n': fputs("\\n", f); break;
        case '\t': fputs("\\t", f); break;
        case '\r': fputs("\\r", f); break;
        default:
            if (*p < 0x20)
                fprintf(f, "\\u%04x", *p);
            else
                fputc(*p, f);
        }
    }
    fputc('"', f);
}

static size_t value_size(const ProtobufCFieldDescriptor *fd)
{
    switch (fd->type) {
    case PROTOBUF_C_TYPE_INT32: case PROTOBUF_C_TYPE_SINT32:
    case PROTOBUF_C_TYPE_SFIXED32: case PROTOBUF_C_TYPE_UINT32:
    case PROTOBUF_C_TYPE_FIXED32: case PROTOBUF_C_TYPE_ENUM:
        return 4;
    case PROTOBUF_C_TYPE_FLOAT: return sizeof(float);
    case PROTOBUF_C_TYPE_BOOL: return sizeof(protobuf_c_boolean);
    case PROTOBUF_C_TYPE_DOUBLE: return sizeof(double);
    case PROTOBUF_C_TYPE_STRING: case PROTOBUF_C_TYPE_MESSAGE:
        return sizeof(void *);
    case PROTOBUF_C_TYPE_BYTES: return sizeof(ProtobufCBinaryData);
    default: return 8;
    }
}

static void print_value(FILE *f, const ProtobufCFieldDescriptor *fd,
                        const void *v)
{
    switch (fd->type) {
    case PROTOBUF_C_TYPE_INT32: case PROTOBUF_C_TYPE_SINT32:
    case PROTOBUF_C_TYPE_SFIXED32:
        fprintf(f, "%" PRId32, *(const int32_t *)v);
        break;
    case PROTOBUF_C_TYPE_UINT32: case PROTOBUF_C_TYPE_FIXED32:
        fprintf(f, "%" PRIu32, *(const uint32_t *)v);
        break;
    case PROTOBUF_C_TYPE_INT64: case PROTOBUF_C_TYPE_SINT64:
    case PROTOBUF_C_TYPE_SFIXED64:
        fprintf(f, "%" PRId64, *(const int64_t *)v);
        break;
    case PROTOBUF_C_TYPE_UINT64: case PROTOBUF_C_TYPE_FIXED64:
        fprintf(f, "%" PRIu64, *(const uint64_t *)v);
        break;
    case PROTOBUF_C_TYPE_FLOAT: fprintf(f, "%.9g", *(const float *)v); break;
    case PROTOBUF_C_TYPE_DOUBLE:
        fprintf(f, "%.17g", *(const double *)v);
        break;
    case PROTOBUF_C_TYPE_BOOL:
        fputs(*(const protobuf_c_boolean *)v ? "true" : "false", f);
        break;
    case PROTOBUF_C_TYPE_ENUM: {
        int32_t e = *(const int32_t *)v;
        const ProtobufCEnumValue *ev =
            protobuf_c_enum_descriptor_get_value(fd->descriptor, e);
        if (ev)
            cli_json_string(f, ev->name);
        else
            fprintf(f, "%" PRId32, e);
        break;
    }
    case PROTOBUF_C_TYPE_STRING:
        cli_json_string(f, *(char *const *)v);
        break;
    case PROTOBUF_C_TYPE_BYTES: {
        const ProtobufCBinaryData *b = v;
        fputc('"', f);
        for (size_t i = 0; i < b->len; i++)
            fprintf(f, "%02x", b->data[i]);
        fputc('"', f);
        break;
    }
    case PROTOBUF_C_TYPE_MESSAGE:
        cli_json_message(f, *(const ProtobufCMessage *const *)v);
        break;
    }
}

void cli_json_message(FILE *f, const ProtobufCMessage *m)
{
    if (!m) {
        fputs("null", f);
        return;
    }
    const ProtobufCMessageDescriptor *d = m->descriptor;
    const char *base = (const char *)m;
    bool first = true;
    fputc('{', f);
    for (unsigned i = 0; i < d->n_fields; i++) {
        const ProtobufCFieldDescriptor *fd = &d->fields[i];
        const void *v = base + fd->offset;
        size_t n = 1;
        if (fd->label == PROTOBUF_C_LABEL_REPEATED) {
            n = *(const size_t *)(base + fd->quantifier_offset);
            if (n == 0)
                continue;
            v = *(void *const *)v;
        } else if (fd->flags & PROTOBUF_C_FIELD_FLAG_ONEOF) {
            if (*(const uint32_t *)(base + fd->quantifier_offset) != fd->id)
                continue;
        } else if (fd->type == PROTOBUF_C_TYPE_STRING ||
                   fd->type == PROTOBUF_C_TYPE_MESSAGE) {
            if (*(void *const *)v == NULL)
                continue;
        } else if (fd->label == PROTOBUF_C_LABEL_OPTIONAL &&
                   fd->quantifier_offset) {
            if (!*(const protobuf_c_boolean *)(base + fd->quantifier_offset))
                continue;
        }
        fprintf(f, "%s\"%s\":", first ? "" : ",", fd->name);
        first = false;
        if (fd->label == PROTOBUF_C_LABEL_REPEATED) {
            fputc('[', f);
            for (size_t k = 0; k < n; k++) {
                if (k)
                    fputc(',', f);
                print_value(f, fd, (const char *)v + k * value_size(fd));
            }
            fputc(']', f);
        } else {
            print_value(f, fd, v);
        }
    }
    fputc('}', f);
}
