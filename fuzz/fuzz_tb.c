/*
 * fuzz_tb.c - libFuzzer target: libbuf's untrusted entry points
 * (tb_copy_chunk_untrusted, tb_try_patch_chunk) and its read side
 * (tb_read_next_packet, tb_clone_readonly, the eviction callback).
 *
 * The input is a tape of operations on one small buffer (4 KiB..256 KiB,
 * ring or discard, so wraps and fills happen). A hostile producer
 * (producer 1) commits chunks whose header fields and payload bytes come
 * straight from the tape, and patches them; an honest producer
 * (producer 2, writer 1) commits well-formed chunks built by the target,
 * packets whole or split across two chunks, packet k carrying k and a known
 * pattern. Between writes the tape asks for reads, clones and full drains.
 *
 * Invariants (FZ_CHECK, beyond "no crash" under ASan+UBSan):
 *  - every honest packet that comes out (read, clone read, eviction
 *    callback) is intact: right size, its k, its pattern;
 *  - conservation: an honest packet comes out at most once (read or
 *    evicted, never both, never twice) and in order (k strictly grows);
 *    any gap in k on the read side carries a previous_packet_dropped bit:
 *    nothing is lost silently, whatever the hostile producer does;
 *  - the hostile producer gets out at most the bytes it put in;
 *  - every packet's slices add up to its size; memory stays bounded: the
 *    buffer keeps its size, the per-writer table holds only writers seen.
 */
#include "config.h"

#include <shmtrace/trace_buffer.h>

#include "fuzz_util.h"

#define HOSTILE 1
#define HONEST 2
#define MAX_PKT 220u

typedef struct fz_tb {
    tb_buffer *b;
    /* honest writer */
    uint32_t next_cid;
    uint32_t next_k;
    bool pending;            /* packet next_k-1 has a tail still to write */
    uint32_t pending_off;    /* bytes of it already written */
    uint8_t *seen;           /* per k: came out (read or evicted) */
    uint32_t seen_cap;
    int64_t last_read_k;     /* main reader */
    uint64_t hostile_in, hostile_out;
    uint8_t writers[65536 / 8]; /* hostile writer ids used */
    uint32_t n_writers;
} fz_tb;

static uint32_t pkt_size(uint32_t k)
{
    return 4 + (k * 37u) % (MAX_PKT - 4);
}

static uint8_t pkt_byte(uint32_t k, uint32_t i)
{
    if (i < 4)
        return (uint8_t)(k >> (8 * i));
    return (uint8_t)(k * 7u + i);
}

/* Gather a packet into out (size <= cap); returns its size. */
static size_t gather(const tb_packet *pk, uint8_t *out, size_t cap)
{
    size_t total = 0;
    for (size_t i = 0; i < pk->nslices; i++) {
        FZ_CHECK(pk->slices[i].size == 0 || pk->slices[i].data != NULL,
                 "slice %zu", i);
        if (total + pk->slices[i].size <= cap)
            memcpy(out + total, pk->slices[i].data, pk->slices[i].size);
        total += pk->slices[i].size;
    }
    FZ_CHECK(total == pk->size, "slices %zu != size %zu", total, pk->size);
    return total;
}

/* An honest packet: intact; returns its k. */
static uint32_t check_honest(const tb_packet *pk)
{
    uint8_t buf[MAX_PKT];
    size_t n = gather(pk, buf, sizeof buf);
    FZ_CHECK(n >= 4 && n <= MAX_PKT, "honest packet of %zu bytes", n);
    uint32_t k = (uint32_t)buf[0] | (uint32_t)buf[1] << 8 |
                 (uint32_t)buf[2] << 16 | (uint32_t)buf[3] << 24;
    FZ_CHECK(n == pkt_size(k), "packet %u: %zu bytes, wrote %u", k, n,
             pkt_size(k));
    for (uint32_t i = 4; i < n; i++)
        FZ_CHECK(buf[i] == pkt_byte(k, i), "packet %u byte %u", k, i);
    return k;
}

static void mark_seen(fz_tb *z, uint32_t k, const char *how)
{
    FZ_CHECK(k < z->next_k, "%s packet %u never written", how, k);
    FZ_CHECK(k < z->seen_cap, "k %u", k);
    FZ_CHECK(!z->seen[k], "%s packet %u came out twice", how, k);
    z->seen[k] = 1;
}

static void on_evict(void *ctx, const tb_packet *pk, const tb_seq_props *p)
{
    fz_tb *z = ctx;
    if (p->producer_id == HONEST)
        mark_seen(z, check_honest(pk), "evicted");
    else
        (void)gather(pk, NULL, 0);
}

/* Main reader: up to max packets. */
static void read_some(fz_tb *z, uint32_t max)
{
    tb_packet pk;
    tb_seq_props props;
    uint32_t dropped;
    tb_begin_read(z->b);
    for (uint32_t i = 0; i < max; i++) {
        if (!tb_read_next_packet(z->b, &pk, &props, &dropped))
            break;
        if (props.producer_id == HONEST) {
            FZ_CHECK(props.writer_id == 1, "writer %u", props.writer_id);
            uint32_t k = check_honest(&pk);
            mark_seen(z, k, "read");
            FZ_CHECK((int64_t)k > z->last_read_k, "packet %u after %lld", k,
                     (long long)z->last_read_k);
            if ((int64_t)k != z->last_read_k + 1)
                FZ_CHECK(dropped != 0, "packets %lld..%u lost silently",
                         (long long)z->last_read_k + 1, k - 1);
            z->last_read_k = k;
        } else {
            FZ_CHECK(props.producer_id == HOSTILE, "producer %u",
                     props.producer_id);
            z->hostile_out += gather(&pk, NULL, 0);
            FZ_CHECK(z->hostile_out <= z->hostile_in,
                     "hostile producer got out %llu bytes, put in %llu",
                     (unsigned long long)z->hostile_out,
                     (unsigned long long)z->hostile_in);
        }
    }
}

/* A read-only clone read whole: honest packets intact and in order. */
static void read_clone(fz_tb *z)
{
    tb_buffer *c = tb_clone_readonly(z->b);
    if (c == NULL)
        return;
    FZ_CHECK(tb_size(c) == tb_size(z->b), "clone size");
    tb_packet pk;
    tb_seq_props props;
    int64_t last = -1;
    tb_begin_read(c);
    while (tb_read_next_packet(c, &pk, &props, NULL)) {
        if (props.producer_id == HONEST) {
            uint32_t k = check_honest(&pk);
            FZ_CHECK(k < z->next_k, "clone: packet %u never written", k);
            FZ_CHECK((int64_t)k > last, "clone: %u after %lld", k,
                     (long long)last);
            last = k;
        } else {
            (void)gather(&pk, NULL, 0);
        }
    }
    /* A clone refuses writes. */
    uint8_t one[8] = {4, 1, 2, 3, 4};
    tb_copy_chunk_untrusted(c, HONEST, 0, 0, 1, 0, 1, 0, true, one, 5);
    tb_begin_read(c);
    while (tb_read_next_packet(c, &pk, &props, NULL))
        FZ_CHECK(props.producer_id != HONEST || check_honest(&pk) < z->next_k,
                 "clone accepted a write");
    tb_destroy(c);
}

/* The honest writer: one chunk of 0..3 packets, maybe finishing the packet
 * of the previous chunk, maybe leaving its last packet to the next one. */
static void honest_chunk(fz_tb *z, uint8_t shape)
{
    uint8_t chunk[4 * (MAX_PKT + 8)];
    size_t n = 0;
    uint16_t nfrag = 0;
    uint8_t flags = 0;
    if (z->pending) {
        uint32_t k = z->next_k - 1, sz = pkt_size(k);
        n += fz_put_varint(chunk + n, sz - z->pending_off);
        for (uint32_t i = z->pending_off; i < sz; i++)
            chunk[n++] = pkt_byte(k, i);
        nfrag++;
        flags |= TB_CHUNK_FIRST_PACKET_CONTINUES_FROM_PREV;
        z->pending = false;
    }
    uint32_t whole = shape & 3u;
    if (whole == 0 && nfrag == 0)
        whole = 1;
    for (uint32_t p = 0; p < whole && z->next_k < z->seen_cap; p++) {
        uint32_t k = z->next_k++, sz = pkt_size(k);
        n += fz_put_varint(chunk + n, sz);
        for (uint32_t i = 0; i < sz; i++)
            chunk[n++] = pkt_byte(k, i);
        nfrag++;
    }
    if ((shape & 4u) && z->next_k < z->seen_cap) {
        uint32_t k = z->next_k++, sz = pkt_size(k), part = 1 + sz / 2;
        n += fz_put_varint(chunk + n, part);
        for (uint32_t i = 0; i < part; i++)
            chunk[n++] = pkt_byte(k, i);
        nfrag++;
        flags |= TB_CHUNK_LAST_PACKET_CONTINUES_ON_NEXT;
        z->pending = true;
        z->pending_off = part;
    }
    if (nfrag == 0)
        return;
    tb_copy_chunk_untrusted(z->b, HONEST, 1000, 2, 1, z->next_cid++, nfrag,
                            flags, true, chunk, n);
}

static void hostile_chunk(fz_tb *z, fz_in *in)
{
    uint8_t sel = fz_u8(in);
    uint16_t wid = (sel & 0x80) ? fz_u16(in) : (uint16_t)(sel & 3);
    uint32_t cid = (sel & 0x40) ? fz_u32(in) : fz_u8(in);
    uint16_t nfrag = (sel & 0x20) ? fz_u16(in) : fz_u8(in);
    uint8_t flags = fz_u8(in);
    bool complete = !(sel & 0x10);
    size_t want = (sel & 0x08) ? fz_u16(in) : fz_u8(in), got;
    const uint8_t *src = fz_bytes(in, want, &got);
    if (!(z->writers[wid / 8] & (1u << (wid % 8)))) {
        z->writers[wid / 8] |= (uint8_t)(1u << (wid % 8));
        z->n_writers++;
    }
    z->hostile_in += got;
    tb_copy_chunk_untrusted(z->b, HOSTILE, 1001, 1, wid, cid, nfrag, flags,
                            complete, got ? src : NULL, got);
}

static void hostile_patch(fz_tb *z, fz_in *in)
{
    tb_patch p[16];
    uint16_t wid = fz_u8(in) & 3;
    uint32_t cid = fz_u8(in);
    size_t np = fz_u8(in) % 17;
    bool more = np & 1;
    for (size_t i = 0; i < np; i++) {
        p[i].offset = fz_u16(in);
        for (int j = 0; j < 4; j++)
            p[i].data[j] = fz_u8(in);
    }
    tb_try_patch_chunk(z->b, HOSTILE, wid, cid, np ? p : NULL, np, more);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fz_in in = {data, size};
    fz_tb z;
    memset(&z, 0, sizeof z);
    uint8_t hdr = fz_u8(&in);
    size_t bsize = 4096u * (1u + (hdr & 63u));
    z.b = tb_create(bsize, (hdr & 0x80) ? TB_DISCARD : TB_RING_BUFFER);
    FZ_CHECK(z.b != NULL, "tb_create(%zu)", bsize);
    z.seen_cap = (uint32_t)(3 * size + 8);
    z.seen = calloc(z.seen_cap, 1);
    z.last_read_k = -1;
    tb_set_evict_callback(z.b, on_evict, &z);

    while (!fz_empty(&in)) {
        uint8_t op = fz_u8(&in);
        switch (op % 8) {
        case 0: case 1: hostile_chunk(&z, &in); break;
        case 2: hostile_patch(&z, &in); break;
        case 3: case 4: honest_chunk(&z, op >> 3); break;
        case 5: read_some(&z, 1u + (op >> 3)); break;
        case 6: read_clone(&z); break;
        default: read_some(&z, UINT32_MAX); break;
        }
        FZ_CHECK(tb_size(z.b) == bsize, "buffer size changed");
        FZ_CHECK(tb_used_size(z.b) <= bsize, "used %zu > size %zu",
                 tb_used_size(z.b), bsize);
    }
    read_some(&z, UINT32_MAX);
    size_t nw = 0;
    tb_get_writer_stats(z.b, &nw);
    FZ_CHECK(nw <= z.n_writers + 1u, "%zu writer entries for %u writers", nw,
             z.n_writers + 1u);
    tb_destroy(z.b);
    free(z.seen);
    return 0;
}
