/*
 * fuzz_honest.h - the honest producer the libbuf and SMB-reader targets
 * run beside their hostile one, and the checks on what comes back out.
 *
 * The honest writer emits packets k = 0, 1, 2, ... of pkt_size(k) bytes:
 * 4 bytes of k (little endian), then a pattern of k. fzh_chunk builds its
 * next chunk payload: maybe the tail of the packet the previous chunk left
 * open (FIRST_PACKET_CONTINUES_FROM_PREV), 0..3 whole packets, maybe the
 * head of a packet continued in the next chunk
 * (LAST_PACKET_CONTINUES_ON_NEXT); chunk ids count 0, 1, 2, ...
 *
 * fzh_read reads a buffer and checks, for the honest sequence: each packet
 * intact; each k comes out at most once over reads and evictions
 * (fzh_on_evict); k strictly grows; a gap in k carries a
 * previous_packet_dropped bit (nothing lost silently). For the hostile
 * producer: never more bytes out than it put in.
 *
 * fzh_check_accounting checks libbuf's exact loss accounting (trace_buffer.h,
 * tb_get_seq_loss) on a buffer: for every sequence, packets_offered =
 * packets_read + packets_pending + all lost packets; for the honest one,
 * offered = the packets it started and read = the packets fzh_read got.
 */
#ifndef SHMTRACE_FUZZ_HONEST_H
#define SHMTRACE_FUZZ_HONEST_H

#include <shmtrace/trace_buffer.h>

#include "fuzz_util.h"

#define FZH_MAX_PKT 200u
/* Largest chunk payload fzh_chunk builds (fits a 1 KiB SMB chunk). */
#define FZH_MAX_CHUNK (4u * (FZH_MAX_PKT + 4u))

typedef struct fz_honest {
    uint16_t producer_id, writer_id;
    uint32_t next_cid, next_k;
    bool pending;           /* packet next_k - 1 has a tail to write */
    uint32_t pending_off;   /* bytes of it already written */
    uint8_t *seen;          /* per k: came out (read or evicted) */
    uint32_t seen_cap;
    int64_t last_read_k;
    uint64_t read_count;    /* honest packets fzh_read got */
    uint16_t hostile_id;    /* the other producer */
    uint64_t hostile_in, hostile_out;
} fz_honest;

static inline void fzh_init(fz_honest *h, uint16_t producer_id,
                            uint16_t hostile_id, size_t input_size)
{
    memset(h, 0, sizeof *h);
    h->producer_id = producer_id;
    h->writer_id = 1;
    h->hostile_id = hostile_id;
    h->seen_cap = (uint32_t)(4 * input_size + 8);
    h->seen = calloc(h->seen_cap, 1);
    FZ_CHECK(h->seen != NULL, "oom");
    h->last_read_k = -1;
}

static inline void fzh_free(fz_honest *h)
{
    free(h->seen);
}

static inline uint32_t fzh_pkt_size(uint32_t k)
{
    return 4 + (k * 37u) % (FZH_MAX_PKT - 4);
}

static inline uint8_t fzh_pkt_byte(uint32_t k, uint32_t i)
{
    return i < 4 ? (uint8_t)(k >> (8 * i)) : (uint8_t)(k * 7u + i);
}

/* Next chunk payload into out (FZH_MAX_CHUNK bytes); returns its size, 0
 * when there is nothing to write. */
static inline size_t fzh_chunk(fz_honest *h, uint8_t shape, uint8_t *out,
                               uint16_t *nfrag, uint8_t *flags,
                               uint32_t *cid)
{
    size_t n = 0;
    *nfrag = 0;
    *flags = 0;
    if (h->pending) {
        uint32_t k = h->next_k - 1, sz = fzh_pkt_size(k);
        n += fz_put_varint(out + n, sz - h->pending_off);
        for (uint32_t i = h->pending_off; i < sz; i++)
            out[n++] = fzh_pkt_byte(k, i);
        (*nfrag)++;
        *flags |= TB_CHUNK_FIRST_PACKET_CONTINUES_FROM_PREV;
        h->pending = false;
    }
    uint32_t whole = shape & 3u;
    if (whole == 0 && *nfrag == 0)
        whole = 1;
    for (uint32_t p = 0; p < whole && h->next_k < h->seen_cap; p++) {
        uint32_t k = h->next_k++, sz = fzh_pkt_size(k);
        n += fz_put_varint(out + n, sz);
        for (uint32_t i = 0; i < sz; i++)
            out[n++] = fzh_pkt_byte(k, i);
        (*nfrag)++;
    }
    if ((shape & 4u) && h->next_k < h->seen_cap) {
        uint32_t k = h->next_k++, sz = fzh_pkt_size(k), part = 1 + sz / 2;
        n += fz_put_varint(out + n, part);
        for (uint32_t i = 0; i < part; i++)
            out[n++] = fzh_pkt_byte(k, i);
        (*nfrag)++;
        *flags |= TB_CHUNK_LAST_PACKET_CONTINUES_ON_NEXT;
        h->pending = true;
        h->pending_off = part;
    }
    if (*nfrag == 0)
        return 0;
    FZ_CHECK(n <= FZH_MAX_CHUNK, "honest chunk of %zu bytes", n);
    *cid = h->next_cid++;
    return n;
}

/* Gather a packet into out (when it fits cap); returns its size. */
static inline size_t fzh_gather(const tb_packet *pk, uint8_t *out, size_t cap)
{
    size_t total = 0;
    for (size_t i = 0; i < pk->nslices; i++) {
        FZ_CHECK(pk->slices[i].size == 0 || pk->slices[i].data != NULL,
                 "slice %zu", i);
        if (out != NULL && total + pk->slices[i].size <= cap)
            memcpy(out + total, pk->slices[i].data, pk->slices[i].size);
        total += pk->slices[i].size;
    }
    FZ_CHECK(total == pk->size, "slices %zu != size %zu", total, pk->size);
    return total;
}

/* An honest packet: intact; returns its k. */
static inline uint32_t fzh_check(const tb_packet *pk)
{
    uint8_t buf[FZH_MAX_PKT];
    size_t n = fzh_gather(pk, buf, sizeof buf);
    FZ_CHECK(n >= 4 && n <= FZH_MAX_PKT, "honest packet of %zu bytes", n);
    uint32_t k = (uint32_t)buf[0] | (uint32_t)buf[1] << 8 |
                 (uint32_t)buf[2] << 16 | (uint32_t)buf[3] << 24;
    FZ_CHECK(n == fzh_pkt_size(k), "packet %u: %zu bytes, wrote %u", k, n,
             fzh_pkt_size(k));
    for (uint32_t i = 4; i < n; i++)
        FZ_CHECK(buf[i] == fzh_pkt_byte(k, i), "packet %u byte %u", k, i);
    return k;
}

static inline void fzh_mark_seen(fz_honest *h, uint32_t k, const char *how)
{
    FZ_CHECK(k < h->next_k, "%s packet %u never written", how, k);
    FZ_CHECK(!h->seen[k], "%s packet %u came out twice", how, k);
    h->seen[k] = 1;
}

/* tb_set_evict_callback(buf, fzh_on_evict, h) */
static inline void fzh_on_evict(void *ctx, const tb_packet *pk,
                                const tb_seq_props *p)
{
    fz_honest *h = ctx;
    if (p->producer_id == h->producer_id)
        fzh_mark_seen(h, fzh_check(pk), "evicted");
    else
        (void)fzh_gather(pk, NULL, 0);
}

/* Read up to max packets of b (the main reader), checking everything. */
static inline void fzh_read(fz_honest *h, tb_buffer *b, uint32_t max)
{
    tb_packet pk;
    tb_seq_props props;
    uint32_t dropped;
    tb_begin_read(b);
    for (uint32_t i = 0; i < max; i++) {
        if (!tb_read_next_packet(b, &pk, &props, &dropped))
            break;
        if (props.producer_id == h->producer_id) {
            FZ_CHECK(props.writer_id == h->writer_id, "writer %u",
                     props.writer_id);
            uint32_t k = fzh_check(&pk);
            fzh_mark_seen(h, k, "read");
            FZ_CHECK((int64_t)k > h->last_read_k, "packet %u after %lld", k,
                     (long long)h->last_read_k);
            if ((int64_t)k != h->last_read_k + 1)
                FZ_CHECK(dropped != 0, "packets %lld..%u lost silently",
                         (long long)h->last_read_k + 1, k - 1);
            h->last_read_k = k;
            h->read_count++;
        } else {
            FZ_CHECK(props.producer_id == h->hostile_id, "producer %u",
                     props.producer_id);
            h->hostile_out += fzh_gather(&pk, NULL, 0);
            FZ_CHECK(h->hostile_out <= h->hostile_in,
                     "hostile producer got out %llu bytes, put in %llu",
                     (unsigned long long)h->hostile_out,
                     (unsigned long long)h->hostile_in);
        }
    }
}

/* The loss accounting of b adds up (see the top); honest_here: b is the
 * buffer the honest producer writes and fzh_read reads. */
static inline void fzh_check_accounting(const fz_honest *h,
                                        const tb_buffer *b, bool honest_here)
{
    size_t n = 0;
    const tb_seq_loss *e = tb_get_seq_loss(b, &n);
    bool honest_seen = false;
    for (size_t i = 0; i < n; i++) {
        uint64_t lost = 0;
        for (int c = 0; c < TB_NUM_CAUSES; c++)
            lost += e[i].lost_packets[c];
        if (getenv("FUZZ_DEBUG"))
            fprintf(stderr, "  seq %u/%u offered %llu read %llu pending %llu"
                    " lost %llu\n", e[i].producer_id, e[i].writer_id,
                    (unsigned long long)e[i].packets_offered,
                    (unsigned long long)e[i].packets_read,
                    (unsigned long long)e[i].packets_pending,
                    (unsigned long long)lost);
        FZ_CHECK(e[i].packets_offered ==
                     e[i].packets_read + e[i].packets_pending + lost,
                 "sequence %u/%u: offered %llu != read %llu + pending %llu "
                 "+ lost %llu", e[i].producer_id, e[i].writer_id,
                 (unsigned long long)e[i].packets_offered,
                 (unsigned long long)e[i].packets_read,
                 (unsigned long long)e[i].packets_pending,
                 (unsigned long long)lost);
        if (!honest_here || e[i].producer_id != h->producer_id)
            continue;
        honest_seen = true;
        FZ_CHECK(e[i].packets_offered == h->next_k,
                 "honest: %llu packets offered, %u written",
                 (unsigned long long)e[i].packets_offered, h->next_k);
        FZ_CHECK(e[i].packets_read == h->read_count,
                 "honest: %llu packets counted read, %llu read",
                 (unsigned long long)e[i].packets_read,
                 (unsigned long long)h->read_count);
    }
    if (honest_here && h->next_k > 0)
        FZ_CHECK(honest_seen, "honest sequence missing from the accounting");
}

/* A read-only clone read whole: honest packets intact and in order; the
 * clone refuses writes. */
static inline void fzh_read_clone(fz_honest *h, tb_buffer *b)
{
    tb_buffer *c = tb_clone_readonly(b);
    if (c == NULL)
        return;
    FZ_CHECK(tb_size(c) == tb_size(b), "clone size");
    uint8_t one[8] = {4, 1, 2, 3, 4};
    tb_copy_chunk_untrusted(c, h->producer_id, 0, 0, h->writer_id, 0, 1, 0,
                            true, one, 5); /* must be refused */
    tb_packet pk;
    tb_seq_props props;
    int64_t last = -1;
    tb_begin_read(c);
    while (tb_read_next_packet(c, &pk, &props, NULL)) {
        if (props.producer_id == h->producer_id) {
            uint32_t k = fzh_check(&pk);
            FZ_CHECK(k < h->next_k, "clone: packet %u never written", k);
            FZ_CHECK((int64_t)k > last, "clone: %u after %lld", k,
                     (long long)last);
            last = k;
        } else {
            (void)fzh_gather(&pk, NULL, 0);
        }
    }
    fzh_check_accounting(h, c, false);
    tb_destroy(c);
}

#endif /* SHMTRACE_FUZZ_HONEST_H */
