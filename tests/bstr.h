/*
 * bstr.h - a growable byte string for tests that write protobuf bytes by
 * hand: raw bytes, canonical varints, field tags and Trace.packet records
 * (field 1, length-delimited). Header only, no Check dependency, so test
 * threads may use it too: running out of memory aborts the test.
 *
 *   bstr body = {0}, file = {0};
 *   bs_tag(&body, 10, 0); bs_varint(&body, 2);   // sequence id 2
 *   bs_record(&file, &body);                      // 0A 02 50 02
 *   ... free(body.d); free(file.d);
 */
#ifndef TESTS_BSTR_H
#define TESTS_BSTR_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    uint8_t *d;
    size_t n, cap;
} bstr;

static inline void bs_put(bstr *b, const void *src, size_t n)
{
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2 + 64;
        b->d = realloc(b->d, b->cap);
        if (b->d == NULL)
            abort();
    }
    if (n)
        memcpy(b->d + b->n, src, n);
    b->n += n;
}

/* Canonical (shortest) varint. */
static inline void bs_varint(bstr *b, uint64_t v)
{
    uint8_t t[10];
    size_t k = 0;
    while (v >= 0x80) {
        t[k++] = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    t[k++] = (uint8_t)v;
    bs_put(b, t, k);
}

/* Field tag: field number and wire type. */
static inline void bs_tag(bstr *b, uint32_t field, unsigned wt)
{
    bs_varint(b, ((uint64_t)field << 3) | wt);
}

/* body as one Trace.packet record appended to out. */
static inline void bs_record(bstr *out, const bstr *body)
{
    bs_tag(out, 1, 2);
    bs_varint(out, body->n);
    if (body->n)
        bs_put(out, body->d, body->n);
}

#endif /* TESTS_BSTR_H */
