/*
 * fuzz_textproto.c - libFuzzer target: the text-format TraceConfig parser
 * (tools/textproto.c, tp_parse), which reads `shmtrace record -c FILE`.
 * It only calls the public tp_parse, so it follows the parser as it grows.
 *
 * Input: the config text (cut at the first NUL, as a C string would be).
 *
 * Invariants (FZ_CHECK):
 *  - success or -EINVAL, nothing else; a failure says why, starting with
 *    "line N: " with N within the text; on failure *out stays NULL;
 *  - a parsed config is a sound message: it packs, the bytes unpack, and
 *    re-packing gives the same bytes;
 *  - parsing is deterministic and local: the same text parsed again, or
 *    with a comment line appended, gives the same outcome and the same
 *    bytes; with a blank line prepended, an error moves down one line.
 */
#include "config.h"

#include <errno.h>

#include "config.pb-c.h"
#include "textproto.h"

#include "fuzz_util.h"

#define TC_DESC (&perfetto__protos__trace_config__descriptor)

typedef struct outcome {
    int rc;
    uint8_t *bytes;
    size_t n;
    long line;
} outcome;

static outcome parse(const char *text, size_t lines)
{
    outcome o = {0, NULL, 0, 0};
    ProtobufCMessage *m = NULL;
    char err[512];
    err[0] = '\0';
    o.rc = tp_parse(text, TC_DESC, &m, err, sizeof err);
    FZ_CHECK(o.rc == 0 || o.rc == -EINVAL, "tp_parse returned %d", o.rc);
    if (o.rc != 0) {
        FZ_CHECK(m == NULL, "a failed parse returned a message");
        FZ_CHECK(strncmp(err, "line ", 5) == 0 && err[5] >= '1' &&
                     err[5] <= '9',
                 "error does not name its line: \"%s\"", err);
        o.line = strtol(err + 5, NULL, 10);
        FZ_CHECK(o.line >= 1 && (size_t)o.line <= lines,
                 "error on line %ld of %zu: %s", o.line, lines, err);
        FZ_CHECK(strlen(err) > 8, "error without a reason: \"%s\"", err);
        return o;
    }
    FZ_CHECK(m != NULL && m->descriptor == TC_DESC, "parsed message");
    o.n = protobuf_c_message_get_packed_size(m);
    o.bytes = malloc(o.n ? o.n : 1);
    FZ_CHECK(o.bytes != NULL, "oom");
    FZ_CHECK(protobuf_c_message_pack(m, o.bytes) == o.n, "pack size");
    protobuf_c_message_free_unpacked(m, NULL);
    ProtobufCMessage *u = protobuf_c_message_unpack(TC_DESC, NULL, o.n,
                                                    o.bytes);
    FZ_CHECK(u != NULL, "a parsed config (%zu bytes) does not unpack", o.n);
    size_t n2 = protobuf_c_message_get_packed_size(u);
    uint8_t *b2 = malloc(n2 ? n2 : 1);
    FZ_CHECK(b2 != NULL, "oom");
    protobuf_c_message_pack(u, b2);
    FZ_CHECK(n2 == o.n && memcmp(b2, o.bytes, n2) == 0,
             "unpack(pack(config)) re-packs differently");
    free(b2);
    protobuf_c_message_free_unpacked(u, NULL);
    return o;
}

static void same(const outcome *a, const outcome *b, const char *what)
{
    FZ_CHECK(a->rc == b->rc, "%s changed the outcome (%d vs %d)", what,
             a->rc, b->rc);
    FZ_CHECK(a->n == b->n && (a->n == 0 || memcmp(a->bytes, b->bytes,
                                                  a->n) == 0),
             "%s changed the parsed config", what);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    size_t len = strnlen((const char *)data, size);
    char *text = malloc(len + 8);
    FZ_CHECK(text != NULL, "oom");
    text[0] = '\n';
    memcpy(text + 1, data, len);
    text[len + 1] = '\0';
    size_t lines = 1;
    for (size_t i = 0; i < len; i++)
        lines += data[i] == '\n';

    outcome a = parse(text + 1, lines);
    outcome b = parse(text + 1, lines);
    same(&a, &b, "parsing again");

    outcome c = parse(text, lines + 1); /* a blank line first */
    same(&a, &c, "a blank first line");
    if (a.rc != 0)
        FZ_CHECK(c.line == a.line + 1, "error on line %ld, then %ld", a.line,
                 c.line);

    memcpy(text + 1 + len, "\n#x\n", 5); /* a comment line last */
    outcome d = parse(text + 1, lines + 2);
    same(&a, &d, "a trailing comment");

    free(a.bytes);
    free(b.bytes);
    free(c.bytes);
    free(d.bytes);
    free(text);
    return 0;
}
