/*
 * fuzz_ipc_frame.c - libFuzzer target: the IPC frame decoder (ipc/,
 * ipc_decoder_*), the first code every byte from a socket goes through.
 *
 * Input: byte 0 picks how the rest is cut into recv()-sized slices (one
 * byte, small, large, or slice lengths read from a second stream at the
 * end of the input); the rest is the byte stream a peer sent. Slices go in
 * through ipc_decoder_write_ptr/commit exactly as the channel does, and
 * every complete frame is popped after each slice.
 *
 * Invariants (FZ_CHECK):
 *  - decoded frames re-encode: ipc_frame_pack(frame) succeeds and a fresh
 *    decoder turns those bytes back into one frame that packs to the same
 *    bytes (a round trip through our own codec is the identity);
 *  - a full receive buffer never stalls: it yields a frame or the fatal
 *    -EMSGSIZE, which then latches (no space, same error again);
 *  - accounting: frames + empty + dropped frames never exceed what the
 *    stream could hold (each costs at least a 4-byte header), and the
 *    slicing does not change what is decoded (the same stream fed in one
 *    piece gives the same frames, byte for byte).
 *  - bounded memory: the decoder's space never exceeds IPC_FRAME_MAX_BYTES.
 */
#include "config.h"

#include <errno.h>

#include "ipc.h"

#include "fuzz_util.h"

typedef Perfetto__Protos__IPCFrame Frame;

typedef struct packed {
    uint8_t *b;
    size_t n;
} packed;

/* Pack f; check it decodes back to a frame that packs identically. */
static packed roundtrip(const Frame *f)
{
    packed p = {NULL, 0};
    int rc = ipc_frame_pack(f, &p.b, &p.n);
    FZ_CHECK(rc == 0, "a decoded frame does not re-encode: %d", rc);
    ipc_decoder *d = ipc_decoder_create();
    FZ_CHECK(d != NULL, "decoder");
    FZ_CHECK(ipc_decoder_feed(d, p.b, p.n) == 0, "re-encoded frame fits");
    Frame *g = NULL;
    FZ_CHECK(ipc_decoder_next(d, &g) == 1 && g != NULL,
             "re-encoded frame (%zu bytes) does not decode", p.n);
    uint8_t *b2;
    size_t n2;
    FZ_CHECK(ipc_frame_pack(g, &b2, &n2) == 0, "second pack");
    FZ_CHECK(n2 == p.n && memcmp(b2, p.b, n2) == 0,
             "decode(encode(frame)) changed the frame (%zu vs %zu bytes)",
             n2, p.n);
    free(b2);
    perfetto__protos__ipcframe__free_unpacked(g, NULL);
    FZ_CHECK(ipc_decoder_next(d, &g) == 0, "one frame in, two out");
    ipc_decoder_destroy(d);
    return p;
}

typedef struct run {
    packed *frames;
    size_t n, cap;
    bool fatal;
} run;

static void keep(run *r, packed p)
{
    if (r->n == r->cap) {
        r->cap = r->cap ? 2 * r->cap : 16;
        r->frames = realloc(r->frames, r->cap * sizeof *r->frames);
        FZ_CHECK(r->frames != NULL, "oom");
    }
    r->frames[r->n++] = p;
}

/* Pop every complete frame; returns false once fatal. */
static bool pop_all(ipc_decoder *d, run *r)
{
    for (;;) {
        Frame *f = NULL;
        int rc = ipc_decoder_next(d, &f);
        if (rc == 1) {
            FZ_CHECK(f != NULL, "rc 1 without a frame");
            keep(r, roundtrip(f));
            perfetto__protos__ipcframe__free_unpacked(f, NULL);
            continue;
        }
        FZ_CHECK(f == NULL, "frame with rc %d", rc);
        if (rc == 0)
            return true;
        FZ_CHECK(rc == -EMSGSIZE, "decoder rc %d", rc);
        size_t avail;
        ipc_decoder_write_ptr(d, &avail);
        FZ_CHECK(avail == 0, "fatal decoder still offers %zu bytes", avail);
        FZ_CHECK(ipc_decoder_next(d, &f) == -EMSGSIZE && f == NULL,
                 "fatal error did not latch");
        r->fatal = true;
        return false;
    }
}

/* Feed stream in slices chosen by mode/lens; decode everything. */
static void decode(const uint8_t *s, size_t n, uint8_t mode,
                   const uint8_t *lens, size_t nlens, run *r)
{
    ipc_decoder *d = ipc_decoder_create();
    FZ_CHECK(d != NULL, "decoder");
    size_t off = 0, li = 0;
    while (off < n) {
        size_t avail;
        uint8_t *w = ipc_decoder_write_ptr(d, &avail);
        FZ_CHECK(avail <= IPC_FRAME_MAX_BYTES, "space %zu", avail);
        if (avail == 0) {
            /* Full: must hold a frame, or be fatal. */
            size_t before = r->n;
            if (!pop_all(d, r))
                break;
            FZ_CHECK(r->n > before, "full receive buffer yields nothing");
            continue;
        }
        size_t want;
        switch (mode % 4) {
        case 0: want = n; break;
        case 1: want = 1; break;
        case 2: want = 1 + (mode >> 2); break;
        default: want = nlens ? 1 + lens[li++ % nlens] * 16u : n; break;
        }
        if (want > n - off)
            want = n - off;
        if (want > avail)
            want = avail;
        memcpy(w, s + off, want);
        ipc_decoder_commit(d, want);
        off += want;
        if (!pop_all(d, r))
            break;
    }
    uint64_t total = r->n + ipc_decoder_dropped_frames(d) +
                     ipc_decoder_empty_frames(d);
    FZ_CHECK(total * IPC_FRAME_HEADER_BYTES <= n,
             "%llu frames out of %zu bytes", (unsigned long long)total, n);
    ipc_decoder_destroy(d);
}

static void run_free(run *r)
{
    for (size_t i = 0; i < r->n; i++)
        free(r->frames[i].b);
    free(r->frames);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    uint8_t mode = data[0];
    const uint8_t *s = data + 1;
    size_t n = size - 1, nlens = 0;
    const uint8_t *lens = NULL;
    if (mode % 4 == 3 && n >= 1) {
        /* last byte: how many slice lengths precede it at the end */
        nlens = s[n - 1];
        if (nlens > n - 1)
            nlens = n - 1;
        lens = s + n - 1 - nlens;
        n = n - 1 - nlens;
    }
    run sliced = {0}, whole = {0};
    decode(s, n, mode, lens, nlens, &sliced);
    decode(s, n, 0, NULL, 0, &whole);
    FZ_CHECK(sliced.fatal == whole.fatal, "slicing changed the outcome");
    FZ_CHECK(sliced.n == whole.n, "slicing changed the frame count: %zu vs %zu",
             sliced.n, whole.n);
    for (size_t i = 0; i < sliced.n; i++)
        FZ_CHECK(sliced.frames[i].n == whole.frames[i].n &&
                     memcmp(sliced.frames[i].b, whole.frames[i].b,
                            whole.frames[i].n) == 0,
                 "slicing changed frame %zu", i);
    run_free(&sliced);
    run_free(&whole);
    return 0;
}
