/*
 * trng.h - the deterministic pseudo-random streams of the tests (fuzzers,
 * hostile producers, pattern fills): Marsaglia's xorshift generators, so
 * that a seed reproduces a run exactly. Header only, no Check dependency
 * (test programs outside Check use it too). Never zero-seed: the stream
 * would stay at zero.
 */
#ifndef TESTS_TRNG_H
#define TESTS_TRNG_H

#include <stdint.h>

/* xorshift64 (shifts 13, 7, 17): advances *state and returns it. */
static inline uint64_t trng_next64(uint64_t *state)
{
    uint64_t x = *state;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return *state = x;
}

/* xorshift32 (shifts 13, 17, 5): advances *state and returns it. */
static inline uint32_t trng_next32(uint32_t *state)
{
    uint32_t x = *state;
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    return *state = x;
}

#endif /* TESTS_TRNG_H */
