/*
 * textproto.c - protobuf text format parser over protobuf-c descriptors
 * (tp_parse). See textproto.h for the grammar.
 *
 * Messages are built the way protobuf_c_message_unpack builds them, with
 * malloc, so protobuf_c_message_free_unpacked(msg, NULL) frees everything:
 * sub-messages and strings are separate allocations, repeated fields are
 * malloc'd arrays with their n_ count, optional scalars set their has_
 * flag, oneof members set the case field (quantifier_offset).
 * Recursion depth is bounded (MAX_DEPTH) since config files are input.
 */
#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "textproto.h"

#define MAX_DEPTH 32

typedef struct parser {
    const char *p;
    int line;
    char *err;
    size_t err_len;
    bool failed;
} parser;

static int fail(parser *ps, const char *fmt, ...)
{
    if (!ps->failed) {
        int n = snprintf(ps->err, ps->err_len, "line %d: ", ps->line);
        va_list ap;
        va_start(ap, fmt);
        if (n >= 0 && (size_t)n < ps->err_len)
            vsnprintf(ps->err + n, ps->err_len - (size_t)n, fmt, ap);
        va_end(ap);
        ps->failed = true;
    }
    return -EINVAL;
}

static void skip_ws(parser *ps)
{
    for (;;) {
        char c = *ps->p;
        if (c == '\n') {
            ps->line++;
            ps->p++;
        } else if (isspace((unsigned char)c)) {
            ps->p++;
        } else if (c == '#') {
            while (*ps->p && *ps->p != '\n')
                ps->p++;
        } else {
            return;
        }
    }
}

static bool is_ident_start(char c)
{
    return isalpha((unsigned char)c) || c == '_';
}

/* Read an identifier into buf; false if none. */
static bool read_ident(parser *ps, char *buf, size_t len)
{
    skip_ws(ps);
    if (!is_ident_start(*ps->p))
        return false;
    size_t n = 0;
    while (isalnum((unsigned char)*ps->p) || *ps->p == '_' ||
           *ps->p == '.') {
        if (n + 1 < len)
            buf[n++] = *ps->p;
        ps->p++;
    }
    buf[n] = 0;
    return true;
}

static bool accept(parser *ps, char c)
{
    skip_ws(ps);
    if (*ps->p == c) {
        ps->p++;
        return true;
    }
    return false;
}

/* One quoted string (with C escapes), appended to *s (malloc'd). */
static int read_quoted(parser *ps, char **s, size_t *slen)
{
    char q = *ps->p++;
    for (;;) {
        char c = *ps->p;
        if (c == 0 || c == '\n')
            return fail(ps, "unterminated string");
        ps->p++;
        if (c == q)
            break;
        if (c == '\\') {
            char e = *ps->p++;
            switch (e) {
            case 'n': c = '\n'; break;
            case 't': c = '\t'; break;
            case 'r': c = '\r'; break;
            case 'a': c = '\a'; break;
            case 'b': c = '\b'; break;
            case 'f': c = '\f'; break;
            case 'v': c = '\v'; break;
            case '\\': case '\'': case '"': case '?': c = e; break;
            case '0': case '1': case '2': case '3':
            case '4': case '5': case '6': case '7': {
                /* Octal, up to three digits (\NNN <= \377). */
                int v = e - '0', k = 1;
                while (k < 3 && *ps->p >= '0' && *ps->p <= '7') {
                    v = v * 8 + (*ps->p++ - '0');
                    k++;
                }
                if (v > 0xff)
                    return fail(ps, "octal escape above \\377");
                c = (char)v;
                break;
            }
            case 'x': {
                int v = 0, k = 0;
                while (k < 2 && isxdigit((unsigned char)*ps->p)) {
                    char h = *ps->p++;
                    v = v * 16 + (isdigit((unsigned char)h)
                                      ? h - '0'
                                      : tolower((unsigned char)h) - 'a' + 10);
                    k++;
                }
                if (!k)
                    return fail(ps, "bad \\x escape");
                c = (char)v;
                break;
            }
            default:
                return fail(ps, "unknown escape \\%c", e ? e : '0');
            }
        }
        char *n = realloc(*s, *slen + 2);
        if (!n)
            return fail(ps, "out of memory");
        *s = n;
        (*s)[(*slen)++] = c;
        (*s)[*slen] = 0;
    }
    return 0;
}

/* A scalar token: string (possibly concatenated) or bare word/number. */
typedef struct token {
    bool is_string;
    char *text;   /* malloc'd */
    size_t len;
} token;

static int read_scalar(parser *ps, token *t)
{
    skip_ws(ps);
    memset(t, 0, sizeof *t);
    if (*ps->p == '"' || *ps->p == '\'') {
        t->is_string = true;
        t->text = calloc(1, 1);
        if (!t->text)
            return fail(ps, "out of memory");
        while (*ps->p == '"' || *ps->p == '\'') {
            if (read_quoted(ps, &t->text, &t->len) < 0)
                return -EINVAL;
            skip_ws(ps);
        }
        return 0;
    }
    const char *s = ps->p;
    while (isalnum((unsigned char)*ps->p) || *ps->p == '_' ||
           *ps->p == '-' || *ps->p == '+' || *ps->p == '.')
        ps->p++;
    if (ps->p == s)
        return fail(ps, "expected a value");
    t->len = (size_t)(ps->p - s);
    t->text = strndup(s, t->len);
    return t->text ? 0 : fail(ps, "out of memory");
}

static int parse_message(parser *ps, const ProtobufCMessageDescriptor *d,
                         ProtobufCMessage *m, char close, int depth);

static const ProtobufCFieldDescriptor *find_field(
    const ProtobufCMessageDescriptor *d, const char *name)
{
    for (unsigned i = 0; i < d->n_fields; i++)
        if (strcmp(d->fields[i].name, name) == 0)
            return &d->fields[i];
    return NULL;
}

static size_t scalar_size(ProtobufCType t)
{
    switch (t) {
    case PROTOBUF_C_TYPE_INT32: case PROTOBUF_C_TYPE_SINT32:
    case PROTOBUF_C_TYPE_SFIXED32: case PROTOBUF_C_TYPE_UINT32:
    case PROTOBUF_C_TYPE_FIXED32: case PROTOBUF_C_TYPE_FLOAT:
    case PROTOBUF_C_TYPE_ENUM:
        return 4;
    case PROTOBUF_C_TYPE_INT64: case PROTOBUF_C_TYPE_SINT64:
    case PROTOBUF_C_TYPE_SFIXED64: case PROTOBUF_C_TYPE_UINT64:
    case PROTOBUF_C_TYPE_FIXED64: case PROTOBUF_C_TYPE_DOUBLE:
        return 8;
    case PROTOBUF_C_TYPE_BOOL:
        return sizeof(protobuf_c_boolean);
    case PROTOBUF_C_TYPE_STRING: case PROTOBUF_C_TYPE_MESSAGE:
        return sizeof(void *);
    case PROTOBUF_C_TYPE_BYTES:
        return sizeof(ProtobufCBinaryData);
    }
    return 0;
}

/* Convert token to the field's scalar type, stored at dst. */
static int convert(parser *ps, const ProtobufCFieldDescriptor *f, token *t,
                   void *dst)
{
    if (f->type == PROTOBUF_C_TYPE_STRING) {
        if (!t->is_string)
            return fail(ps, "%s: expected a quoted string", f->name);
        *(char **)dst = t->text;
        t->text = NULL;
        return 0;
    }
    if (f->type == PROTOBUF_C_TYPE_BYTES) {
        if (!t->is_string)
            return fail(ps, "%s: expected a quoted string", f->name);
        ProtobufCBinaryData *b = dst;
        b->data = (uint8_t *)t->text;
        b->len = t->len;
        t->text = NULL;
        return 0;
    }
    if (t->is_string)
        return fail(ps, "%s: expected a %s, not a string", f->name,
                    f->type == PROTOBUF_C_TYPE_ENUM ? "enum name"
                                                    : "number");
    if (f->type == PROTOBUF_C_TYPE_BOOL) {
        bool v;
        if (!strcmp(t->text, "true") || !strcmp(t->text, "1"))
            v = true;
        else if (!strcmp(t->text, "false") || !strcmp(t->text, "0"))
            v = false;
        else
            return fail(ps, "%s: expected true or false", f->name);
        *(protobuf_c_boolean *)dst = v;
        return 0;
    }
    if (f->type == PROTOBUF_C_TYPE_ENUM) {
        const ProtobufCEnumDescriptor *e = f->descriptor;
        if (is_ident_start(t->text[0])) {
            const ProtobufCEnumValue *v =
                protobuf_c_enum_descriptor_get_value_by_name(e, t->text);
            if (!v)
                return fail(ps, "%s: unknown value %s", f->name, t->text);
            *(int32_t *)dst = v->value;
            return 0;
        }
        /* numeric enum: fall through as int32 */
    }
    if (f->type == PROTOBUF_C_TYPE_FLOAT ||
        f->type == PROTOBUF_C_TYPE_DOUBLE) {
        char *end;
        double v = strtod(t->text, &end);
        if (*end)
            return fail(ps, "%s: bad number %s", f->name, t->text);
        if (f->type == PROTOBUF_C_TYPE_FLOAT)
            *(float *)dst = (float)v;
        else
            *(double *)dst = v;
        return 0;
    }
    char *end;
    errno = 0;
    bool neg = t->text[0] == '-';
    bool is_signed = f->type == PROTOBUF_C_TYPE_INT32 ||
                     f->type == PROTOBUF_C_TYPE_SINT32 ||
                     f->type == PROTOBUF_C_TYPE_SFIXED32 ||
                     f->type == PROTOBUF_C_TYPE_INT64 ||
                     f->type == PROTOBUF_C_TYPE_SINT64 ||
                     f->type == PROTOBUF_C_TYPE_SFIXED64 ||
                     f->type == PROTOBUF_C_TYPE_ENUM;
    if (neg && !is_signed)
        return fail(ps, "%s: must not be negative", f->name);
    long long sv = 0;
    unsigned long long uv = 0;
    if (is_signed)
        sv = strtoll(t->text, &end, 0);
    else
        uv = strtoull(t->text, &end, 0);
    if (*end || end == t->text || errno)
        return fail(ps, "%s: bad number %s", f->name, t->text);
    if (scalar_size(f->type) == 4) {
        if (is_signed && (sv < INT32_MIN || sv > INT32_MAX))
            return fail(ps, "%s: %s out of range", f->name, t->text);
        if (!is_signed && uv > UINT32_MAX)
            return fail(ps, "%s: %s out of range", f->name, t->text);
        if (is_signed)
            *(int32_t *)dst = (int32_t)sv;
        else
            *(uint32_t *)dst = (uint32_t)uv;
    } else {
        if (is_signed)
            *(int64_t *)dst = (int64_t)sv;
        else
            *(uint64_t *)dst = (uint64_t)uv;
    }
    return 0;
}

/* Address of a new element slot for field f in m (appending to repeated
 * fields, or the singular slot with duplicate detection). */
static void *slot(parser *ps, const ProtobufCFieldDescriptor *f,
                  ProtobufCMessage *m)
{
    uint8_t *base = (uint8_t *)m;
    size_t sz = scalar_size(f->type);
    if (f->label == PROTOBUF_C_LABEL_REPEATED) {
        size_t *n = (size_t *)(base + f->quantifier_offset);
        void **arr = (void **)(base + f->offset);
        if (*n >= 100000) {
            fail(ps, "%s: too many values", f->name);
            return NULL;
        }
        void *na = realloc(*arr, (*n + 1) * sz);
        if (!na) {
            fail(ps, "out of memory");
            return NULL;
        }
        *arr = na;
        memset((uint8_t *)na + *n * sz, 0, sz);
        return (uint8_t *)na + (*n)++ * sz;
    }
    if (f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF) {
        uint32_t *c = (uint32_t *)(base + f->quantifier_offset);
        if (*c != 0) {
            fail(ps, "%s: a member of this oneof is already set", f->name);
            return NULL;
        }
        *c = f->id;
        return base + f->offset;
    }
    bool set;
    if (f->type == PROTOBUF_C_TYPE_MESSAGE)
        set = *(void **)(base + f->offset) != NULL;
    else if (f->type == PROTOBUF_C_TYPE_STRING)
        set = *(char **)(base + f->offset) != NULL &&
              *(char **)(base + f->offset) != f->default_value;
    else
        set = f->quantifier_offset &&
              *(protobuf_c_boolean *)(base + f->quantifier_offset);
    if (set) {
        fail(ps, "%s: set twice", f->name);
        return NULL;
    }
    if (f->quantifier_offset && f->type != PROTOBUF_C_TYPE_MESSAGE &&
        f->type != PROTOBUF_C_TYPE_STRING)
        *(protobuf_c_boolean *)(base + f->quantifier_offset) = true;
    return base + f->offset;
}

static int parse_value(parser *ps, const ProtobufCFieldDescriptor *f,
                       ProtobufCMessage *m)
{
    token t;
    if (read_scalar(ps, &t) < 0) {
        free(t.text);
        return -EINVAL;
    }
    void *dst = slot(ps, f, m);
    int rc = dst ? convert(ps, f, &t, dst) : -EINVAL;
    free(t.text);
    return rc;
}

static int parse_field(parser *ps, const ProtobufCMessageDescriptor *d,
                       ProtobufCMessage *m, int depth)
{
    char name[128];
    if (!read_ident(ps, name, sizeof name))
        return fail(ps, "expected a field name");
    const ProtobufCFieldDescriptor *f = find_field(d, name);
    if (!f)
        return fail(ps, "unknown field '%s' in %s", name, d->name);
    bool colon = accept(ps, ':');
    if (f->type == PROTOBUF_C_TYPE_MESSAGE) {
        char close;
        if (accept(ps, '{'))
            close = '}';
        else if (accept(ps, '<'))
            close = '>';
        else
            return fail(ps, "%s: expected '{'", name);
        if (depth >= MAX_DEPTH)
            return fail(ps, "nesting too deep");
        const ProtobufCMessageDescriptor *sd = f->descriptor;
        ProtobufCMessage *sub = calloc(1, sd->sizeof_message);
        if (!sub)
            return fail(ps, "out of memory");
        protobuf_c_message_init(sd, sub);
        void **dst = slot(ps, f, m);
        if (!dst) {
            free(sub);
            return -EINVAL;
        }
        *dst = sub;
        return parse_message(ps, sd, sub, close, depth + 1);
    }
    if (!colon)
        return fail(ps, "%s: expected ':'", name);
    if (f->label == PROTOBUF_C_LABEL_REPEATED && accept(ps, '[')) {
        if (accept(ps, ']'))
            return 0;
        do {
            if (parse_value(ps, f, m) < 0)
                return -EINVAL;
        } while (accept(ps, ','));
        if (!accept(ps, ']'))
            return fail(ps, "%s: expected ']'", name);
        return 0;
    }
    return parse_value(ps, f, m);
}

static int parse_message(parser *ps, const ProtobufCMessageDescriptor *d,
                         ProtobufCMessage *m, char close, int depth)
{
    for (;;) {
        skip_ws(ps);
        if (close && *ps->p == close) {
            ps->p++;
            return 0;
        }
        if (!*ps->p)
            return close ? fail(ps, "missing '%c'", close) : 0;
        if (parse_field(ps, d, m, depth) < 0)
            return -EINVAL;
        if (!accept(ps, ','))
            accept(ps, ';');
    }
}

int tp_parse(const char *text, const ProtobufCMessageDescriptor *desc,
             ProtobufCMessage **out, char *err, size_t err_len)
{
    parser ps = { text, 1, err, err_len, false };
    if (err_len)
        err[0] = 0;
    ProtobufCMessage *m = calloc(1, desc->sizeof_message);
    if (!m) {
        snprintf(err, err_len, "out of memory");
        return -ENOMEM;
    }
    protobuf_c_message_init(desc, m);
    if (parse_message(&ps, desc, m, 0, 0) < 0) {
        protobuf_c_message_free_unpacked(m, NULL);
        return -EINVAL;
    }
    *out = m;
    return 0;
}
