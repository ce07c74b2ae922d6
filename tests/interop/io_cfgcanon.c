/*
 * io_cfgcanon.c - canonical form of a binary TraceConfig, for the interop
 * suite's config-equality check (io_config_equal.sh).
 *
 * Usage: io_cfgcanon [--strip-uuid] [--strip-perfetto-cmd] IN OUT
 *
 * Decodes IN (a TraceConfig as a trace's trace_config packet holds it) with
 * protos/config.proto, optionally clears fields, re-encodes into OUT. Two
 * configs with the same content give the same OUT bytes whatever order the
 * encoder that wrote them used (protobuf-c encodes in field-number order,
 * repeated fields in their order). Prints:
 *   unknown_fields=N   fields (at any depth) config.proto does not know:
 *                      must be 0, else shmtrace misses part of TraceConfig
 *   cmd_fields=...     what --strip-perfetto-cmd removed
 *   buffers=, buffers_with_experimental_mode=, duration_ms=,
 *   buffer0_size_kb=   a few facts for the CLI tests
 *
 * --strip-uuid clears trace_uuid_msb/lsb (27, 28: random per trace).
 * --strip-perfetto-cmd clears what Perfetto's `perfetto` command adds to
 * every config it sends (statsd_logging 31, statsd_metadata 7,
 * enable_extra_guardrails 4) and fails unless they hold the values it
 * always adds on Linux (STATSD_LOGGING_DISABLED, empty, false), so that
 * nothing else hides behind the stripping.
 * Exit: 0 ok, 1 check failed, 2 usage or undecodable input.
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.pb-c.h"

static size_t count_unknown(const ProtobufCMessage *m)
{
    if (!m)
        return 0;
    size_t n = m->n_unknown_fields;
    const ProtobufCMessageDescriptor *d = m->descriptor;
    for (unsigned i = 0; i < d->n_fields; i++) {
        const ProtobufCFieldDescriptor *f = &d->fields[i];
        if (f->type != PROTOBUF_C_TYPE_MESSAGE)
            continue;
        const uint8_t *base = (const uint8_t *)m;
        if (f->label == PROTOBUF_C_LABEL_REPEATED) {
            size_t cnt = *(const size_t *)(base + f->quantifier_offset);
            ProtobufCMessage *const *arr =
                *(ProtobufCMessage *const *const *)(base + f->offset);
            for (size_t k = 0; k < cnt; k++)
                n += count_unknown(arr[k]);
        } else {
            if ((f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF) &&
                *(const uint32_t *)(base + f->quantifier_offset) != f->id)
                continue;
            n += count_unknown(*(ProtobufCMessage *const *)(base + f->offset));
        }
    }
    return n;
}

static unsigned char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    size_t cap = 65536, n = 0;
    unsigned char *b = malloc(cap);
    size_t got;
    while (b && (got = fread(b + n, 1, cap - n, f)) > 0) {
        n += got;
        if (n == cap) {
            unsigned char *nb = realloc(b, cap *= 2);
            if (!nb) {
                free(b);
                b = NULL;
            }
            b = nb;
        }
    }
    fclose(f);
    *len = n;
    return b;
}

int main(int argc, char **argv)
{
    bool strip_uuid = false, strip_cmd = false;
    int i = 1;
    for (; i < argc && argv[i][0] == '-' && argv[i][1] == '-'; i++) {
        if (!strcmp(argv[i], "--strip-uuid"))
            strip_uuid = true;
        else if (!strcmp(argv[i], "--strip-perfetto-cmd"))
            strip_cmd = true;
        else
            break;
    }
    if (argc - i != 2) {
        fprintf(stderr, "usage: io_cfgcanon [--strip-uuid] "
                "[--strip-perfetto-cmd] IN OUT\n");
        return 2;
    }
    size_t len = 0;
    unsigned char *buf = slurp(argv[i], &len);
    if (!buf) {
        perror(argv[i]);
        return 2;
    }
    Perfetto__Protos__TraceConfig *c =
        perfetto__protos__trace_config__unpack(NULL, len, buf);
    free(buf);
    if (!c) {
        fprintf(stderr, "io_cfgcanon: %s is not a TraceConfig\n", argv[i]);
        return 2;
    }
    int rc = 0;
    printf("unknown_fields=%zu\n", count_unknown(&c->base));
    size_t with_mode = 0;
    for (size_t b = 0; b < c->n_buffers; b++)
        with_mode += c->buffers[b]->has_experimental_mode;
    printf("buffers=%zu\nbuffers_with_experimental_mode=%zu\n", c->n_buffers,
           with_mode);
    printf("duration_ms=%u\n", c->duration_ms);
    if (c->n_buffers)
        printf("buffer0_size_kb=%u\n", c->buffers[0]->size_kb);
    if (strip_uuid) {
        c->has_trace_uuid_msb = c->has_trace_uuid_lsb = false;
        c->trace_uuid_msb = c->trace_uuid_lsb = 0;
    }
    if (strip_cmd) {
        bool ok = c->has_statsd_logging &&
                  c->statsd_logging ==
                      PERFETTO__PROTOS__TRACE_CONFIG__STATSD_LOGGING__STATSD_LOGGING_DISABLED &&
                  (!c->has_enable_extra_guardrails ||
                   !c->enable_extra_guardrails) &&
                  (!c->statsd_metadata ||
                   protobuf_c_message_get_packed_size(
                       &c->statsd_metadata->base) == 0);
        printf("cmd_fields=statsd_logging:%d,enable_extra_guardrails:%d,"
               "statsd_metadata:%s\n", c->statsd_logging,
               c->enable_extra_guardrails,
               c->statsd_metadata ? "present" : "absent");
        if (!ok) {
            fprintf(stderr, "io_cfgcanon: the fields perfetto adds do not "
                    "hold the values it always adds\n");
            rc = 1;
        }
        c->has_statsd_logging = false;
        c->statsd_logging = 0;
        c->has_enable_extra_guardrails = false;
        c->enable_extra_guardrails = 0;
        if (c->statsd_metadata) {
            protobuf_c_message_free_unpacked(&c->statsd_metadata->base, NULL);
            c->statsd_metadata = NULL;
        }
    }
    size_t n = perfetto__protos__trace_config__get_packed_size(c);
    unsigned char *out = malloc(n ? n : 1);
    perfetto__protos__trace_config__pack(c, out);
    FILE *f = fopen(argv[i + 1], "wb");
    if (!f || fwrite(out, 1, n, f) != n || fclose(f) != 0) {
        perror(argv[i + 1]);
        rc = 2;
    }
    free(out);
    perfetto__protos__trace_config__free_unpacked(c, NULL);
    return rc;
}
