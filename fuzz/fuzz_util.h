/*
 * fuzz_util.h - shared helpers of the libFuzzer targets in fuzz/.
 *
 * fz_in consumes the fuzzer's input from the front like a tape: every
 * target reads its operations and their arguments with fz_u8/fz_u16/
 * fz_u32/fz_bytes, which return zeros (or fewer bytes) once the tape is
 * empty, so every input, however short, is a valid program.
 *
 * FZ_CHECK is the targets' assertion: an invariant that does not hold
 * prints where and what, then abort()s, which libFuzzer reports as a crash
 * and saves as a reproducer (assert() would vanish under -DNDEBUG).
 */
#ifndef SHMTRACE_FUZZ_UTIL_H
#define SHMTRACE_FUZZ_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FZ_CHECK(cond, ...)                                               \
    do {                                                                  \
        if (!(cond)) {                                                    \
            fprintf(stderr, "%s:%d: invariant failed: %s: ", __FILE__,    \
                    __LINE__, #cond);                                     \
            fprintf(stderr, __VA_ARGS__);                                 \
            fputc('\n', stderr);                                          \
            abort();                                                      \
        }                                                                 \
    } while (0)

typedef struct fz_in {
    const uint8_t *p;
    size_t n;
} fz_in;

static inline bool fz_empty(const fz_in *in)
{
    return in->n == 0;
}

static inline uint8_t fz_u8(fz_in *in)
{
    if (in->n == 0)
        return 0;
    in->n--;
    return *in->p++;
}

static inline uint16_t fz_u16(fz_in *in)
{
    uint16_t lo = fz_u8(in);
    return (uint16_t)(lo | (uint16_t)fz_u8(in) << 8);
}

static inline uint32_t fz_u32(fz_in *in)
{
    uint32_t lo = fz_u16(in);
    return lo | (uint32_t)fz_u16(in) << 16;
}

/* Up to n bytes from the tape (fewer when it runs out); *got says how
 * many. The pointer stays valid for the whole input. */
static inline const uint8_t *fz_bytes(fz_in *in, size_t n, size_t *got)
{
    const uint8_t *p = in->p;
    if (n > in->n)
        n = in->n;
    in->p += n;
    in->n -= n;
    *got = n;
    return p;
}

/* Protobuf varint into out (at most 10 bytes); returns its length. */
static inline size_t fz_put_varint(uint8_t *out, uint64_t v)
{
    size_t n = 0;
    do {
        out[n++] = (uint8_t)((v & 0x7f) | (v > 0x7f ? 0x80 : 0));
        v >>= 7;
    } while (v);
    return n;
}

#endif /* SHMTRACE_FUZZ_UTIL_H */
