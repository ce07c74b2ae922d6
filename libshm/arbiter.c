/*
 * arbiter.c - chunk arbiter: page cursor, WriterID pool, commit batching.
 *
 * Design (trace-writer.md §1, §2, §7):
 *
 *   acquire  under the mutex, scan pages from `cursor` for one lap; a page
 *            whose word is 0 is partitioned with the arbiter's layout (CAS
 *            0 -> layout<<28); free chunks are tried in ascending index with
 *            the ABI's Free -> BeingWritten CAS, which also stamps the
 *            header. The cursor stays on the page of the last success, or
 *            on the last page visited after a fruitless lap. If nothing is
 *            free and a batch is pending, the batch is sent first (the
 *            service may be waiting for those very chunks) and the lap is
 *            retried once.
 *   return   BeingWritten -> Complete, append {page, chunk, buffer} to the
 *            pending batch, add the chunk size to bytes_pending.
 *   send     when the batch has patches (unless batch_patches), when
 *            bytes_pending >= batch_bytes
 *            (0: always) or >= half the SMB (as Perfetto), on flush, before
 *            giving up an acquisition.
 *            The commit callback runs with the mutex held, so batches are
 *            delivered one at a time and in order (a patch never overtakes
 *            the commit of its chunk).
 *
 * Pending batch storage: three growable arrays (chunks, patch groups,
 * patches). Groups refer to their patches by index until the batch is sent
 * (the patch array may move when it grows); send fixes the pointers up.
 *
 * Locking: `mu` guards every field below it in struct smb_arbiter. The SMB
 * itself is shared with the service and only touched through the ABI's
 * atomics.
 */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include <shmtrace/smb_shm.h>

#include "arbiter_int.h"

#define ID_WORDS ((SMB_MAX_WRITER_ID + 1 + 63) / 64)

struct smb_arbiter {
    /* Immutable after create. */
    uint8_t *base;
    size_t size;
    uint32_t page_size;
    uint32_t num_pages;
    uint32_t layout;
    uint32_t batch_bytes;
    bool batch_patches;           /* patches wait for batch_bytes too */
    smb_transport transport;
    smb_shm shm;                  /* owned mapping (base NULL if borrowed) */

    pthread_mutex_t mu;
    /* --- guarded by mu --- */
    uint32_t cursor;              /* page where the next search starts */
    _Atomic bool shut_down;       /* also read without mu (writers) */
    uint16_t last_writer_id;      /* next-fit start */
    uint64_t ids_in_use[ID_WORDS];
    smb_commit_chunk *chunks;     /* pending batch */
    size_t nchunks, chunks_cap;
    smb_chunk_patches *groups;    /* .patches holds an index until sent */
    size_t ngroups, groups_cap;
    smb_patch *patches;
    size_t npatches, patches_cap;
    size_t bytes_pending;
    smb_writer_loss *losses;      /* writer loss deltas for the next batch */
    size_t nlosses, losses_cap;
    smb_arbiter_stats stats;
};

static int grow(void **arr, size_t *cap, size_t need, size_t elem)
{
    size_t ncap;
    void *p;
    if (need <= *cap)
        return 0;
    ncap = *cap ? *cap * 2 : 16;
    while (ncap < need)
        ncap *= 2;
    p = realloc(*arr, ncap * elem);
    if (p == NULL)
        return -ENOMEM;
    *arr = p;
    *cap = ncap;
    return 0;
}

static smb_arbiter *arbiter_new(uint8_t *base, size_t size,
                                uint32_t page_size,
                                const smb_transport *transport,
                                const smb_arbiter_options *options)
{
    smb_arbiter *arb;
    uint32_t layout = options ? options->page_layout : 0;

    if (layout == 0)
        layout = SMB_LAYOUT_DIV1;
    if (base == NULL || transport == NULL || transport->commit == NULL ||
        !smb_page_size_valid(page_size) || size < page_size ||
        size % page_size != 0 || size / page_size > UINT32_MAX ||
        ((uintptr_t)base & 4095u) != 0 ||
        smb_layout_num_chunks(layout) == 0) {
        errno = EINVAL;
        return NULL;
    }
    arb = calloc(1, sizeof(*arb));
    if (arb == NULL)
        return NULL;
    if (pthread_mutex_init(&arb->mu, NULL) != 0) {
        free(arb);
        errno = ENOMEM;
        return NULL;
    }
    arb->base = base;
    arb->size = size;
    arb->page_size = page_size;
    arb->num_pages = (uint32_t)(size / page_size);
    arb->layout = layout;
    arb->batch_bytes = options ? options->batch_bytes : 0;
    arb->batch_patches = options && options->batch_patches;
    arb->transport = *transport;
    arb->shm.fd = -1;
    return arb;
}

smb_arbiter *smb_arbiter_create(uint8_t *base, size_t size,
                                uint32_t page_size,
                                const smb_transport *transport,
                                const smb_arbiter_options *options)
{
    return arbiter_new(base, size, page_size, transport, options);
}

static smb_arbiter *adopt_shm(smb_shm *shm, uint32_t page_size,
                              const smb_transport *transport,
                              const smb_arbiter_options *options)
{
    smb_arbiter *arb = arbiter_new(shm->base, shm->size, page_size,
                                   transport, options);
    if (arb == NULL) {
        int saved = errno;
        smb_shm_unmap(shm);
        errno = saved;
        return NULL;
    }
    arb->shm = *shm;
    return arb;
}

smb_arbiter *smb_arbiter_create_from_fd(int fd, uint32_t page_size,
                                        const smb_transport *transport,
                                        const smb_arbiter_options *options)
{
    smb_shm shm;
    int rc = smb_shm_map(fd, 0, &shm);
    if (rc != 0) {
        errno = -rc;
        return NULL;
    }
    return adopt_shm(&shm, page_size, transport, options);
}

smb_arbiter *smb_arbiter_create_shm(size_t size, uint32_t page_size,
                                    const smb_transport *transport,
                                    const smb_arbiter_options *options)
{
    smb_shm shm;
    int rc;
    if (!smb_page_size_valid(page_size) || size % page_size != 0) {
        errno = EINVAL;
        return NULL;
    }
    rc = smb_shm_create(size, &shm);
    if (rc != 0) {
        errno = -rc;
        return NULL;
    }
    return adopt_shm(&shm, page_size, transport, options);
}

void smb_arbiter_destroy(smb_arbiter *arb)
{
    if (arb == NULL)
        return;
    pthread_mutex_destroy(&arb->mu);
    free(arb->chunks);
    free(arb->groups);
    free(arb->patches);
    free(arb->losses);
    smb_shm_unmap(&arb->shm);
    free(arb);
}

int smb_arbiter_fd(const smb_arbiter *arb)
{
    return arb->shm.fd;
}

uint8_t *smb_arbiter_base(const smb_arbiter *arb)
{
    return arb->base;
}

size_t smb_arbiter_size(const smb_arbiter *arb)
{
    return arb->size;
}

uint32_t smb_arbiter_page_size(const smb_arbiter *arb)
{
    return arb->page_size;
}

/* Send the pending batch (mu held). */
static int send_locked(smb_arbiter *arb, uint64_t flush_request_id)
{
    smb_commit_batch b;
    int rc;

    if (arb->nchunks == 0 && arb->ngroups == 0 && arb->nlosses == 0 &&
        flush_request_id == 0)
        return 0;
    for (size_t i = 0; i < arb->ngroups; i++)
        arb->groups[i].patches =
            arb->patches + (uintptr_t)arb->groups[i].patches;
    b.chunks = arb->chunks;
    b.nchunks = arb->nchunks;
    b.patch_groups = arb->groups;
    b.npatch_groups = arb->ngroups;
    b.flush_request_id = flush_request_id;
    b.losses = arb->losses;
    b.nlosses = arb->nlosses;
    rc = arb->transport.commit(arb->transport.ctx, &b);
    arb->stats.batches_sent++;
    arb->stats.patches_sent += arb->npatches;
    if (rc < 0)
        arb->stats.batch_send_errors++;
    arb->nchunks = arb->ngroups = arb->npatches = 0;
    if (rc >= 0)
        arb->nlosses = 0;     /* else kept: reported with the next batch */
    arb->bytes_pending = 0;
    return rc;
}

/* One lap; true and *out filled on success (mu held). */
static bool lap_locked(smb_arbiter *arb, uint16_t writer_id,
                       uint32_t chunk_id, uint16_t packets,
                       smb__chunk_loc *out)
{
    uint32_t start = arb->cursor;
    for (uint32_t n = 0; n < arb->num_pages; n++) {
        uint32_t page = (start + n) % arb->num_pages;
        smb_page_header *ph = smb_page_at(arb->base, arb->page_size, page);
        uint32_t word = atomic_load_explicit(&ph->header_bitmap,
                                             memory_order_relaxed);
        uint32_t layout, nchunks;

        if (word == 0) {
            smb_try_partition_page(ph, arb->layout);
            word = atomic_load_explicit(&ph->header_bitmap,
                                        memory_order_acquire);
        }
        layout = smb_word_layout(word);
        nchunks = smb_layout_num_chunks(layout);
        for (uint32_t i = 0; i < nchunks; i++) {
            smb_chunk_header *c;
            if (smb_word_chunk_state(word, i) != SMB_CHUNK_FREE)
                continue;
            c = smb_try_acquire_chunk_for_writing(ph, arb->page_size, i,
                    writer_id, chunk_id, packets);
            if (c == NULL)
                continue;
            /* Only this arbiter partitions pages, always with
             * arb->layout, so `layout` is the one the CAS saw. Even if a
             * hostile peer repartitioned the page in between, chunk i
             * (i < both chunk counts) plus our payload size stays inside
             * the page: 8 + i*cs' + cs <= 8 + n*cs <= page_size. */
            out->hdr = c;
            out->payload = smb_chunk_payload(c);
            out->payload_size = smb_chunk_size(arb->page_size, layout) -
                                SMB_CHUNK_HEADER_SIZE;
            out->page = page;
            out->idx = i;
            arb->cursor = page;
            return true;
        }
    }
    arb->cursor = (start + arb->num_pages - 1) % arb->num_pages;
    return false;
}

bool smb__arbiter_acquire_chunk(smb_arbiter *arb, uint16_t writer_id,
                                uint32_t chunk_id, uint16_t packets,
                                smb__chunk_loc *out)
{
    bool ok;
    pthread_mutex_lock(&arb->mu);
    ok = lap_locked(arb, writer_id, chunk_id, packets, out);
    if (!ok && (arb->nchunks > 0 || arb->ngroups > 0)) {
        send_locked(arb, 0);
        ok = lap_locked(arb, writer_id, chunk_id, packets, out);
    }
    if (ok)
        arb->stats.chunks_acquired++;
    else
        arb->stats.acquire_failures++;
    pthread_mutex_unlock(&arb->mu);
    return ok;
}

void smb__arbiter_return_chunk(smb_arbiter *arb, const smb__chunk_loc *loc,
                               uint32_t target_buffer,
                               const smb_chunk_patches *groups,
                               size_t ngroups)
{
    size_t npatches = 0;
    bool oom = false;

    for (size_t i = 0; i < ngroups; i++)
        npatches += groups[i].npatches;
    pthread_mutex_lock(&arb->mu);
    if (loc != NULL && loc->hdr != NULL) {
        smb_page_header *ph = smb_page_at(arb->base, arb->page_size,
                                          loc->page);
        smb_release_chunk_as_complete(ph, loc->idx);
        arb->stats.chunks_returned++;
        if (grow((void **)&arb->chunks, &arb->chunks_cap, arb->nchunks + 1,
                 sizeof(*arb->chunks)) == 0) {
            smb_commit_chunk *cc = &arb->chunks[arb->nchunks++];
            cc->page = loc->page;
            cc->chunk = loc->idx;
            cc->target_buffer = target_buffer;
            arb->bytes_pending += loc->payload_size + SMB_CHUNK_HEADER_SIZE;
        } else {
            oom = true;   /* chunk stays Complete: the scraper finds it */
        }
    }
    if (ngroups > 0 &&
        grow((void **)&arb->groups, &arb->groups_cap, arb->ngroups + ngroups,
             sizeof(*arb->groups)) == 0 &&
        grow((void **)&arb->patches, &arb->patches_cap,
             arb->npatches + npatches, sizeof(*arb->patches)) == 0) {
        for (size_t i = 0; i < ngroups; i++) {
            smb_chunk_patches *g = &arb->groups[arb->ngroups++];
            *g = groups[i];
            g->patches = (const smb_patch *)(uintptr_t)arb->npatches;
            memcpy(arb->patches + arb->npatches, groups[i].patches,
                   groups[i].npatches * sizeof(smb_patch));
            arb->npatches += groups[i].npatches;
        }
    }
    if (oom || (arb->ngroups > 0 && !arb->batch_patches) ||
        arb->bytes_pending >= arb->batch_bytes ||
        arb->bytes_pending >= arb->size / 2)
        send_locked(arb, 0);
    pthread_mutex_unlock(&arb->mu);
}

int smb_arbiter_flush(smb_arbiter *arb, uint64_t flush_request_id)
{
    int rc;
    pthread_mutex_lock(&arb->mu);
    rc = send_locked(arb, flush_request_id);
    pthread_mutex_unlock(&arb->mu);
    return rc;
}

void smb_arbiter_shutdown(smb_arbiter *arb)
{
    atomic_store(&arb->shut_down, true);
}

void smb_arbiter_get_stats(smb_arbiter *arb, smb_arbiter_stats *out)
{
    pthread_mutex_lock(&arb->mu);
    *out = arb->stats;
    pthread_mutex_unlock(&arb->mu);
}

static bool id_used(const smb_arbiter *arb, uint32_t id)
{
    return (arb->ids_in_use[id / 64] >> (id % 64)) & 1u;
}

uint16_t smb__arbiter_alloc_writer(smb_arbiter *arb, uint32_t target_buffer)
{
    uint16_t id = 0;
    pthread_mutex_lock(&arb->mu);
    if (!atomic_load(&arb->shut_down)) {
        uint32_t cand = arb->last_writer_id;
        for (uint32_t n = 0; n < SMB_MAX_WRITER_ID; n++) {
            cand = cand >= SMB_MAX_WRITER_ID ? 1 : cand + 1;
            if (!id_used(arb, cand)) {
                id = (uint16_t)cand;
                break;
            }
        }
    }
    if (id != 0) {
        arb->ids_in_use[id / 64] |= (uint64_t)1 << (id % 64);
        arb->last_writer_id = id;
        arb->stats.writers_created++;
        if (arb->transport.register_writer != NULL)
            arb->transport.register_writer(arb->transport.ctx, id,
                                           target_buffer);
    } else {
        arb->stats.null_writers++;
    }
    pthread_mutex_unlock(&arb->mu);
    return id;
}

void smb__arbiter_free_writer(smb_arbiter *arb, uint16_t writer_id)
{
    if (writer_id == 0 || writer_id > SMB_MAX_WRITER_ID)
        return;
    pthread_mutex_lock(&arb->mu);
    arb->ids_in_use[writer_id / 64] &= ~((uint64_t)1 << (writer_id % 64));
    if (arb->transport.unregister_writer != NULL)
        arb->transport.unregister_writer(arb->transport.ctx, writer_id);
    pthread_mutex_unlock(&arb->mu);
}

bool smb__arbiter_is_shut_down(smb_arbiter *arb)
{
    return atomic_load_explicit(&arb->shut_down, memory_order_relaxed);
}

void smb__arbiter_note_loss(smb_arbiter *arb, uint16_t writer_id,
                            uint32_t target_buffer, uint64_t packets,
                            uint64_t bytes)
{
    pthread_mutex_lock(&arb->mu);
    size_t i = 0;
    while (i < arb->nlosses && (arb->losses[i].writer_id != writer_id ||
                                arb->losses[i].target_buffer != target_buffer))
        i++;
    if (i == arb->nlosses &&
        grow((void **)&arb->losses, &arb->losses_cap, arb->nlosses + 1,
             sizeof(*arb->losses)) == 0) {
        memset(&arb->losses[i], 0, sizeof(arb->losses[i]));
        arb->losses[i].writer_id = writer_id;
        arb->losses[i].target_buffer = target_buffer;
        arb->nlosses++;
    }
    if (i < arb->nlosses) {
        arb->losses[i].packets += packets;
        arb->losses[i].bytes += bytes;
    }
    pthread_mutex_unlock(&arb->mu);
}

void smb__arbiter_count_stall(smb_arbiter *arb)
{
    pthread_mutex_lock(&arb->mu);
    arb->stats.stalls++;
    pthread_mutex_unlock(&arb->mu);
}
