/*
 * check_smb_harness.h - in-process producer -> SMB -> service harness for
 * the libshm Check tests.
 *
 * A harness owns an SMB (a real memfd/shm object), an arbiter whose
 * transport hands every commit batch to the service-side smb_reader, and
 * one libbuf tb_buffer (buffer id HB_TARGET). Two delivery modes:
 *
 *   HB_SYNC    the commit callback applies the batch at once (in the
 *              writer's thread, under the arbiter lock): an infinitely
 *              fast service.
 *   HB_QUEUED  the callback deep-copies the batch into a queue; a reader
 *              thread applies queued batches, `delay_us` apart, and only
 *              while not paused (hb_pause / hb_resume): a slow service.
 *
 * Reading back: hb_read_all() concatenates every packet libbuf returns.
 * Everything is static: each test program includes this header once.
 */
#ifndef CHECK_SMB_HARNESS_H
#define CHECK_SMB_HARNESS_H

#include <check.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <shmtrace/arbiter.h>
#include <shmtrace/smb_abi.h>
#include <shmtrace/smb_shm.h>
#include <shmtrace/trace_buffer.h>
#include <shmtrace/trace_writer.h>

#include "smb_reader.h"
#include "trng.h"

/* ck_assert records its location on every success (a write to Check's
 * temporary file), far too slow inside loops over millions of packets:
 * HB_CHECK only reports failures. */
#define HB_CHECK(cond)                                                   \
    do {                                                                 \
        if (!(cond))                                                     \
            ck_abort_msg("%s:%d: check failed: %s", __FILE__, __LINE__,  \
                         #cond);                                         \
    } while (0)
#define HB_CHECK_EQ(a, b)                                                \
    do {                                                                 \
        uint64_t a_ = (uint64_t)(a), b_ = (uint64_t)(b);                 \
        if (a_ != b_)                                                    \
            ck_abort_msg("%s:%d: %s == %llu, %s == %llu", __FILE__,      \
                         __LINE__, #a, (unsigned long long)a_, #b,       \
                         (unsigned long long)b_);                        \
    } while (0)

#define HB_TARGET 1u
#define HB_PRODUCER 7u

typedef enum { HB_SYNC, HB_QUEUED } hb_mode;

typedef struct {
    uint8_t *data;
    size_t size;
    uint16_t writer_id;
    uint32_t dropped;     /* libbuf's previous_packet_dropped */
} hb_pkt;

typedef struct {
    hb_pkt *v;
    size_t n, cap;
} hb_pkts;


typedef struct hb_qitem {
    struct hb_qitem *next;
    smb_commit_chunk *chunks;
    size_t nchunks;
    smb_chunk_patches *groups;
    size_t ngroups;
    smb_patch *patches;
    uint64_t flush_id;
} hb_qitem;

typedef struct {
    smb_shm shm;
    uint32_t page_size;
    smb_arbiter *arb;
    smb_reader *reader;
    tb_buffer *buf;
    hb_mode mode;
    /* queued mode */
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    hb_qitem *head, *tail;
    bool stop, paused;
    unsigned delay_us;
    unsigned scrape_us;           /* scrape after this much idle time */
    bool read_live;               /* read the buffer after each scrape */
    uint64_t scrapes;
    hb_pkts live;                 /* packets read by the service thread */
    /* observed */
    uint64_t batches, chunks, patch_groups, patches, last_flush_id;
    uint64_t registered, unregistered;
    bool record;                  /* keep copies of the patch groups */
    smb_chunk_patches rec_groups[64];
    smb_patch rec_patches[64][8];
    size_t nrec;
    /* writer loss reports (smb_commit_batch.losses), writers 1..255 */
    uint64_t rep_lost[256], rep_lost_bytes[256];
} hb;

static inline tb_buffer *hb_resolve(void *ctx, uint32_t target,
                                    uint16_t writer_id)
{
    hb *h = ctx;
    (void)writer_id;
    if (target != 0 && target != HB_TARGET)
        return NULL;
    return h->buf;
}

static inline void hb_apply(hb *h, const smb_commit_batch *b)
{
    smb_reader_commit_batch(h->reader, b, hb_resolve, h);
}

static inline void hb_observe(hb *h, const smb_commit_batch *b)
{
    h->batches++;
    h->chunks += b->nchunks;
    h->patch_groups += b->npatch_groups;
    for (size_t i = 0; i < b->npatch_groups; i++) {
        h->patches += b->patch_groups[i].npatches;
        if (h->record && h->nrec < 64 && b->patch_groups[i].npatches <= 8) {
            h->rec_groups[h->nrec] = b->patch_groups[i];
            memcpy(h->rec_patches[h->nrec], b->patch_groups[i].patches,
                   b->patch_groups[i].npatches * sizeof(smb_patch));
            h->rec_groups[h->nrec].patches = h->rec_patches[h->nrec];
            h->nrec++;
        }
    }
    if (b->flush_request_id)
        h->last_flush_id = b->flush_request_id;
    for (size_t i = 0; i < b->nlosses; i++)
        if (b->losses[i].writer_id < 256) {
            h->rep_lost[b->losses[i].writer_id] += b->losses[i].packets;
            h->rep_lost_bytes[b->losses[i].writer_id] += b->losses[i].bytes;
        }
}

static inline int hb_commit(void *ctx, const smb_commit_batch *b)
{
    hb *h = ctx;
    hb_qitem *q;
    size_t np = 0;

    if (h->mode == HB_SYNC) {
        hb_observe(h, b);
        hb_apply(h, b);
        return 0;
    }
    q = calloc(1, sizeof(*q));
    ck_assert_ptr_nonnull(q);
    for (size_t i = 0; i < b->npatch_groups; i++)
        np += b->patch_groups[i].npatches;
    q->chunks = malloc((b->nchunks + 1) * sizeof(*q->chunks));
    q->groups = malloc((b->npatch_groups + 1) * sizeof(*q->groups));
    q->patches = malloc((np + 1) * sizeof(*q->patches));
    memcpy(q->chunks, b->chunks, b->nchunks * sizeof(*q->chunks));
    q->nchunks = b->nchunks;
    np = 0;
    for (size_t i = 0; i < b->npatch_groups; i++) {
        q->groups[i] = b->patch_groups[i];
        memcpy(q->patches + np, b->patch_groups[i].patches,
               b->patch_groups[i].npatches * sizeof(smb_patch));
        q->groups[i].patches = q->patches + np;
        np += b->patch_groups[i].npatches;
    }
    q->ngroups = b->npatch_groups;
    q->flush_id = b->flush_request_id;
    pthread_mutex_lock(&h->mu);
    hb_observe(h, b);
    if (h->tail)
        h->tail->next = q;
    else
        h->head = q;
    h->tail = q;
    pthread_cond_broadcast(&h->cv);
    pthread_mutex_unlock(&h->mu);
    return 0;
}

static inline void hb_register(void *ctx, uint16_t id,
                               uint32_t target)
{
    hb *h = ctx;
    (void)id;
    ck_assert_uint_eq(target, HB_TARGET);
    h->registered++;
}

static inline void hb_unregister(void *ctx, uint16_t id)
{
    hb *h = ctx;
    (void)id;
    h->unregistered++;
}

static inline void hb_collect(hb *h, hb_pkts *ps);

/* Queued mode's service thread. With scrape_us set it also scrapes the SMB
 * whenever no batch arrived for scrape_us, and (with read_live) reads the
 * buffer after each scrape into `live`, like a streaming consumer. */
static inline void *hb_reader_main(void *arg)
{
    hb *h = arg;
    pthread_mutex_lock(&h->mu);
    for (;;) {
        hb_qitem *q;
        smb_commit_batch b;
        if (h->stop && !h->paused && h->head == NULL)
            break;
        if (h->paused || h->head == NULL) {
            if (h->scrape_us && !h->paused && !h->stop) {
                struct timespec ts;
                clock_gettime(CLOCK_REALTIME, &ts);
                ts.tv_nsec += (long)h->scrape_us * 1000L;
                ts.tv_sec += ts.tv_nsec / 1000000000L;
                ts.tv_nsec %= 1000000000L;
                pthread_cond_timedwait(&h->cv, &h->mu, &ts);
                if (h->head == NULL && !h->paused && !h->stop) {
                    smb_reader_scrape(h->reader, hb_resolve, h);
                    h->scrapes++;
                    if (h->read_live)
                        hb_collect(h, &h->live);
                }
            } else {
                pthread_cond_wait(&h->cv, &h->mu);
            }
            continue;
        }
        q = h->head;
        h->head = q->next;
        if (h->head == NULL)
            h->tail = NULL;
        b.chunks = q->chunks;
        b.nchunks = q->nchunks;
        b.patch_groups = q->groups;
        b.npatch_groups = q->ngroups;
        b.flush_request_id = q->flush_id;
        hb_apply(h, &b);   /* under mu: the tb_buffer is single-threaded */
        free(q->chunks);
        free(q->groups);
        free(q->patches);
        free(q);
        if (h->delay_us) {
            unsigned us = h->delay_us;
            pthread_mutex_unlock(&h->mu);
            usleep(us);
            pthread_mutex_lock(&h->mu);
        }
    }
    pthread_mutex_unlock(&h->mu);
    return NULL;
}

/* A new SMB of `size` bytes in shm and an arbiter on it: pages of
 * page_size, the given page layout and commit batch (0: defaults),
 * committing through t. */
static inline smb_arbiter *hb_arbiter_new(smb_shm *shm, size_t size,
                                          uint32_t page_size,
                                          const smb_transport *t,
                                          uint32_t layout,
                                          uint32_t batch_bytes)
{
    smb_arbiter_options o;
    memset(&o, 0, sizeof(o));
    o.page_layout = layout;
    o.batch_bytes = batch_bytes;
    ck_assert_int_eq(smb_shm_create(size, shm), 0);
    smb_arbiter *arb = smb_arbiter_create(shm->base, size, page_size, t, &o);
    ck_assert_ptr_nonnull(arb);
    return arb;
}

static inline void hb_init_ex(hb *h, size_t smb_size, uint32_t page_size,
                       uint32_t layout, size_t buf_size, hb_mode mode,
                       uint32_t batch_bytes)
{
    smb_transport t = {h, hb_commit, hb_register, hb_unregister};

    memset(h, 0, sizeof(*h));
    h->mode = mode;
    h->page_size = page_size;
    h->arb = hb_arbiter_new(&h->shm, smb_size, page_size, &t, layout,
                            batch_bytes);
    h->reader = smb_reader_create(h->shm.base, h->shm.size, page_size,
                                  HB_PRODUCER, 1000, 42);
    ck_assert_ptr_nonnull(h->reader);
    h->buf = tb_create(buf_size, TB_RING_BUFFER);
    ck_assert_ptr_nonnull(h->buf);
    pthread_mutex_init(&h->mu, NULL);
    pthread_cond_init(&h->cv, NULL);
    if (mode == HB_QUEUED)
        ck_assert_int_eq(pthread_create(&h->thread, NULL, hb_reader_main, h),
                         0);
}

static inline void hb_init(hb *h, size_t smb_size, uint32_t page_size,
                    size_t buf_size)
{
    hb_init_ex(h, smb_size, page_size, 0, buf_size, HB_SYNC, 0);
}

static inline void hb_pause(hb *h)
{
    pthread_mutex_lock(&h->mu);
    h->paused = true;
    pthread_mutex_unlock(&h->mu);
}

static inline void hb_set_delay(hb *h, unsigned us)
{
    pthread_mutex_lock(&h->mu);
    h->delay_us = us;
    pthread_mutex_unlock(&h->mu);
}

static inline void hb_set_scrape(hb *h, unsigned idle_us, bool read_live)
{
    pthread_mutex_lock(&h->mu);
    h->scrape_us = idle_us;
    h->read_live = read_live;
    pthread_cond_broadcast(&h->cv);
    pthread_mutex_unlock(&h->mu);
}

static inline void hb_resume(hb *h)
{
    pthread_mutex_lock(&h->mu);
    h->paused = false;
    pthread_cond_broadcast(&h->cv);
    pthread_mutex_unlock(&h->mu);
}

/* Queued mode: apply everything queued, then stop the reader thread. */
static inline void hb_drain_and_stop(hb *h)
{
    if (h->mode != HB_QUEUED)
        return;
    pthread_mutex_lock(&h->mu);
    h->stop = true;
    h->paused = false;
    h->delay_us = 0;
    pthread_cond_broadcast(&h->cv);
    pthread_mutex_unlock(&h->mu);
    pthread_join(h->thread, NULL);
    h->mode = HB_SYNC;
}

static inline void hb_pkts_free(hb_pkts *ps);

static inline void hb_fini(hb *h)
{
    hb_drain_and_stop(h);
    hb_pkts_free(&h->live);
    smb_arbiter_destroy(h->arb);
    smb_reader_destroy(h->reader);
    tb_destroy(h->buf);
    smb_shm_unmap(&h->shm);
    pthread_mutex_destroy(&h->mu);
    pthread_cond_destroy(&h->cv);
}

/* ---- reading back ------------------------------------------------------ */

/* Append every packet the buffer yields now to *ps. */
static inline void hb_collect(hb *h, hb_pkts *ps)
{
    tb_packet p;
    tb_seq_props props;
    uint32_t dropped;

    tb_begin_read(h->buf);
    while (tb_read_next_packet(h->buf, &p, &props, &dropped)) {
        hb_pkt *k;
        size_t off = 0;
        if (ps->n == ps->cap) {
            ps->cap = ps->cap ? ps->cap * 2 : 64;
            ps->v = realloc(ps->v, ps->cap * sizeof(*ps->v));
            HB_CHECK(ps->v != NULL);
        }
        k = &ps->v[ps->n++];
        k->data = malloc(p.size + 1);
        HB_CHECK(k->data != NULL);
        for (size_t i = 0; i < p.nslices; i++) {
            memcpy(k->data + off, p.slices[i].data, p.slices[i].size);
            off += p.slices[i].size;
        }
        HB_CHECK_EQ(off, p.size);
        k->size = p.size;
        k->writer_id = props.writer_id;
        k->dropped = dropped;
        HB_CHECK_EQ(props.producer_id, HB_PRODUCER);
    }
}

static inline hb_pkts hb_read_all(hb *h)
{
    hb_pkts ps = {NULL, 0, 0};
    hb_collect(h, &ps);
    return ps;
}

static inline void hb_pkts_free(hb_pkts *ps)
{
    for (size_t i = 0; i < ps->n; i++)
        free(ps->v[i].data);
    free(ps->v);
    ps->v = NULL;
    ps->n = ps->cap = 0;
}

/* Reads every packet the buffer holds; returns how many there were. */
static inline size_t hb_read_count(hb *h)
{
    hb_pkts ps = hb_read_all(h);
    size_t n = ps.n;
    hb_pkts_free(&ps);
    return n;
}

/* ---- a tiny protobuf field walker ---------------------------------------- */

typedef struct {
    uint32_t field, wt;
    uint64_t v;            /* varint / fixed value, or length */
    const uint8_t *p;      /* length-delimited body */
} hb_field;

static inline bool hb_varint(const uint8_t **p, const uint8_t *end,
                             uint64_t *v)
{
    uint64_t r = 0;
    for (int s = 0; s < 70 && *p < end; s += 7) {
        uint8_t b = *(*p)++;
        r |= (uint64_t)(b & 0x7F) << s;
        if (!(b & 0x80)) {
            *v = r;
            return true;
        }
    }
    return false;
}

/* Next field of [*p, end); false at the end (asserts well-formedness). */
static inline bool hb_next_field(const uint8_t **p, const uint8_t *end,
                                 hb_field *f)
{
    uint64_t tag;
    if (*p >= end)
        return false;
    HB_CHECK(hb_varint(p, end, &tag));
    f->field = (uint32_t)(tag >> 3);
    f->wt = (uint32_t)(tag & 7);
    switch (f->wt) {
    case 0:
        HB_CHECK(hb_varint(p, end, &f->v));
        break;
    case 1:
        HB_CHECK((size_t)(end - *p) >= 8);
        memcpy(&f->v, *p, 8);
        *p += 8;
        break;
    case 5: {
        uint32_t v32;
        HB_CHECK((size_t)(end - *p) >= 4);
        memcpy(&v32, *p, 4);
        f->v = v32;
        *p += 4;
        break;
    }
    case 2:
        HB_CHECK(hb_varint(p, end, &f->v));
        HB_CHECK(f->v <= (uint64_t)(end - *p));
        f->p = *p;
        *p += f->v;
        break;
    default:
        ck_abort_msg("bad wire type %u", f->wt);
    }
    return true;
}

/* Find a top-level varint field; returns false if absent. */
static inline bool hb_find_varint(const hb_pkt *k, uint32_t field,
                                  uint64_t *v)
{
    const uint8_t *p = k->data, *end = k->data + k->size;
    hb_field f;
    bool found = false;
    while (hb_next_field(&p, end, &f))
        if (f.field == field && f.wt == 0) {
            *v = f.v;
            found = true;
        }
    return found;
}

/* Deterministic pattern bytes for payloads. */
static inline void hb_fill(uint8_t *p, size_t n, uint32_t seed)
{
    uint32_t x = seed * 2654435761u + 1;
    for (size_t i = 0; i < n; i++)
        p[i] = (uint8_t)trng_next32(&x);
}

#endif /* CHECK_SMB_HARNESS_H */
