/*
 * arbiter.c - chunk arbiter: page cursor, WriterID pool, commit batching.
 *
 * Design (trace-writer.md §1, §2, §7):
 *
 *   acquire  under the mutex, scan pages from `cursor` for one lap, taking
 *            up to the number of chunks asked for (a writer crossing a run
 *            of chunks of one large packet asks for several at once); a
 *            page whose word is 0 is partitioned with the arbiter's layout
 *            and its chunk 0 taken in one CAS (0 -> layout<<28 | chunk 0
 *            BeingWritten, the end state of the ABI's two transitions);
 *            free chunks are tried in ascending index with the ABI's Free
 *            -> BeingWritten CAS, then the header is stamped. Chunk size
 *            and count of the arbiter's layout are computed once (no
 *            division on the scan). The cursor stays on the page of the
 *            last success, or on the last page visited after a fruitless
 *            lap. If nothing is free and a batch is pending, the batch is
 *            sent first (the service may be waiting for those very chunks)
 *            and the lap is retried once.
 *   return   BeingWritten -> Complete, append {page, chunk, buffer} to the
 *            pending batch, add the chunk size to bytes_pending. On a
 *            one-chunk page (Div1) whose word is exactly {layout, chunk 0
 *            BeingWritten} the transition is a release store, not a CAS:
 *            nobody else may write that word then (see complete_chunk).
 *   exchange return some chunks, then acquire some, under one lock (the
 *            writer's chunk handoff: one lock per handoff, or per run of
 *            up to 16 chunks of a large packet, at most 1/4 of the SMB).
 *   send     when the batch has patches (unless batch_patches), when
 *            bytes_pending >= batch_bytes
 *            (0: always) or >= half the SMB (as Perfetto), on flush, before
 *            giving up an acquisition.
 *            The commit callback runs with the mutex held, so batches are
 *            delivered one at a time and in order (a patch never overtakes
 *            the commit of its chunk).
 *
 * Prefault: an arbiter that maps the SMB itself (from_fd, create_shm)
 * maps every page of it at once with MADV_POPULATE_WRITE (SMBs up to
 * SMB_PREFAULT_MAX; advice, failure is harmless). The writers touch every
 * page anyway: the cursor goes round the whole SMB (a window that kept the
 * search to the first pages grew to the whole 4 MiB SMB within the first
 * burst of every bench recording, and was dropped). One call instead of a
 * page fault per 4 KiB: on this project's VMs a first write to a fresh
 * shared page costs ~11 us by fault and ~5.5 us after the populate
 * (1 KiB x4 recordings of bench_vs_run.sh, six each way, alternating:
 * producer CPU per packet median 720 ns against 816 without).
 * Contents are not changed; the memory is committed now instead of over
 * the first lap, and charged to the producer that maps it. Before that,
 * where shmem THP is "never", the whole 2 MiB pages of the SMB become
 * huge pages (smb__shm_back_huge, smb_shm.c): the populate is then one
 * fault per 2 MiB, and the service's first reads too.
 *
 * Pending batch storage: three growable arrays (chunks, patch groups,
 * patches). Groups refer to their patches by index until the batch is sent
 * (the patch array may move when it grows); send fixes the pointers up.
 *
 * Locking: `mu` (adaptive: spins briefly before it sleeps,
 * arbiter_mutex_init) guards every field below it in struct smb_arbiter.
 * The SMB itself is shared with the service and only touched through the
 * ABI's atomics.
 */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include <shmtrace/smb_shm.h>

#include "arbiter_int.h"
#include "smb_shm_int.h"

/* Larger SMBs are left to fault in as the writers reach them. */
#define SMB_PREFAULT_MAX (64u * 1024 * 1024)

#define ID_WORDS ((SMB_MAX_WRITER_ID + 1 + 63) / 64)

struct smb_arbiter {
    /* Immutable after create. */
    uint8_t *base;
    size_t size;
    uint32_t page_size;
    uint32_t num_pages;
    uint32_t layout;
    uint32_t layout_chunks;       /* chunks per page under `layout` */
    uint32_t chunk_size;          /* their size, header included */
    uint32_t max_take;            /* chunks one exchange may take: 1/4 of
                                     the SMB, at least 1 */
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

/* The arbiter's lock: held for a chunk handoff (tens of ns), taken by
 * every writer thread of the process. glibc's adaptive mutex spins a
 * little before it sleeps: a writer that finds it held mostly gets it
 * within the spin, without the futex sleep and wake-up. bench_tw --quick,
 * 2 threads writing small packets through one arbiter (2026-12-06, six
 * runs of each build, alternating): 17.1-19.3 ns per packet per thread
 * against 19.5-23.8 with the default mutex; futex calls 308 against 1615
 * in one run of each (strace -c); 1 thread 9.5-11.1 either way. */
static int arbiter_mutex_init(pthread_mutex_t *mu)
{
#ifdef PTHREAD_ADAPTIVE_MUTEX_INITIALIZER_NP
    pthread_mutexattr_t attr;
    int rc;
    if (pthread_mutexattr_init(&attr) != 0)
        return -1;
    rc = pthread_mutexattr_settype(&attr, PTHREAD_MUTEX_ADAPTIVE_NP);
    if (rc == 0)
        rc = pthread_mutex_init(mu, &attr);
    pthread_mutexattr_destroy(&attr);
    return rc;
#else
    return pthread_mutex_init(mu, NULL);
#endif
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
    if (arbiter_mutex_init(&arb->mu) != 0) {
        free(arb);
        errno = ENOMEM;
        return NULL;
    }
    arb->base = base;
    arb->size = size;
    arb->page_size = page_size;
    arb->num_pages = (uint32_t)(size / page_size);
    arb->layout = layout;
    arb->layout_chunks = smb_layout_num_chunks(layout);
    arb->chunk_size = smb_chunk_size(page_size, layout);
    arb->max_take = arb->num_pages * arb->layout_chunks / 4;
    if (arb->max_take == 0)
        arb->max_take = 1;
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

static void prefault(const smb_shm *shm)
{
    if (shm->size > SMB_PREFAULT_MAX)
        return;
    (void)smb__shm_back_huge(shm);
#ifdef MADV_POPULATE_WRITE
    (void)madvise(shm->base, shm->size, MADV_POPULATE_WRITE);
#endif
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
    prefault(shm);
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

/* Stamp a chunk just taken (Free -> BeingWritten won), as the ABI helper
 * does: writer_id and chunk_id relaxed, then packets release. */
static void stamp(smb_chunk_header *c, uint16_t writer_id, uint32_t chunk_id,
                  uint16_t packets)
{
    atomic_store_explicit(&c->writer_id, writer_id, memory_order_relaxed);
    atomic_store_explicit(&c->chunk_id, chunk_id, memory_order_relaxed);
    atomic_store_explicit(&c->packets, packets, memory_order_release);
}

/* Take up to `want` free chunks of page `page` (ascending index) into out[]
 * with ids chunk_id, chunk_id + 1, ...; returns how many. An unpartitioned
 * page (word 0) is partitioned with arb->layout and its chunk 0 taken in
 * ONE store, 0 -> layout<<28 | BeingWritten<<0: the end state of the ABI's
 * two transitions (partition, then Free -> BeingWritten), with no state in
 * between for anybody to see; so is the one chunk of a Div1 page of our
 * layout when it is Free (see below why no CAS is needed). Every other
 * chunk is one Free -> BeingWritten CAS on the word last seen (acq_rel; a
 * lost race reloads the word and retries, SMB_CAS_ATTEMPTS times in all,
 * as the ABI helpers: the service may be moving another chunk of the
 * page).
 * `own_only`: skip a page of another layout (only a hostile peer makes
 * one), so that every chunk taken has the arbiter's chunk size. (mu held)
 */
/* Chunk idx (of csize bytes) of page ph, just made BeingWritten by us:
 * stamp its header and describe it in *loc. */
static void take_chunk(smb_page_header *ph, uint32_t page, uint32_t idx,
                       uint32_t csize, uint16_t writer_id, uint32_t chunk_id,
                       uint16_t packets, smb__chunk_loc *loc)
{
    smb_chunk_header *c = (smb_chunk_header *)(void *)((uint8_t *)ph +
            SMB_PAGE_HEADER_SIZE + idx * csize);
    stamp(c, writer_id, chunk_id, packets);
    loc->hdr = c;
    loc->payload = smb_chunk_payload(c);
    loc->payload_size = csize - SMB_CHUNK_HEADER_SIZE;
    loc->page = page;
    loc->idx = idx;
}

static size_t take_from_page(smb_arbiter *arb, uint32_t page,
                             uint16_t writer_id, uint32_t chunk_id,
                             uint16_t packets, size_t want, bool own_only,
                             smb__chunk_loc *out)
{
    smb_page_header *ph = smb_page_at(arb->base, arb->page_size, page);
    uint32_t word = atomic_load_explicit(&ph->header_bitmap,
                                         memory_order_acquire);
    uint32_t mine = arb->layout << SMB_LAYOUT_SHIFT;
    size_t got = 0;
    int attempts = SMB_CAS_ATTEMPTS;

    /* A page with no chunk in use: unpartitioned (word 0), or of our
     * layout with its one chunk Free (Div1). Nobody else writes such a
     * word: the service only moves Complete and BeingRead chunks, and the
     * other writers of this SMB wait for mu. So it is taken with a plain
     * store, not a locked CAS, which would first wait for the stores of
     * the previous chunk's copy to drain (66% of lap_locked's samples in
     * bench_tw, 64 KiB packets on 4 KiB pages). The acquire load orders
     * our writes to the chunk after the service's reads of it, which
     * ended with its release of the chunk. */
    if (word == 0 || (arb->layout_chunks == 1 &&
                      word == (mine | SMB_CHUNK_FREE))) {
        uint32_t w1 = mine | SMB_CHUNK_BEING_WRITTEN;
        atomic_store_explicit(&ph->header_bitmap, w1, memory_order_relaxed);
        take_chunk(ph, page, 0, arb->chunk_size, writer_id, chunk_id,
                   packets, &out[0]);
        got = 1;
        word = w1;
    }
    for (uint32_t i = got; got < want && word != 0; ) {
        uint32_t layout = smb_word_layout(word), nchunks, csize;
        if (layout == arb->layout) {
            nchunks = arb->layout_chunks;
            csize = arb->chunk_size;
        } else if (own_only) {
            break;
        } else {                     /* not ours: a peer's doing */
            nchunks = smb_layout_num_chunks(layout);
            csize = smb_chunk_size(arb->page_size, layout);
        }
        while (i < nchunks &&
               smb_word_chunk_state(word, i) != SMB_CHUNK_FREE)
            i++;
        if (i >= nchunks)
            break;
        if (!atomic_compare_exchange_strong_explicit(&ph->header_bitmap,
                &word, smb_word_set_chunk_state(word, i,
                                                SMB_CHUNK_BEING_WRITTEN),
                memory_order_acq_rel, memory_order_acquire)) {
            if (--attempts == 0)
                break;
            continue;                /* word reloaded: look again */
        }
        word = smb_word_set_chunk_state(word, i, SMB_CHUNK_BEING_WRITTEN);
        /* Only this arbiter partitions pages, always with arb->layout.
         * Even if a hostile peer repartitioned the page, chunk i (i <
         * the chunk count of the layout the CAS saw) of that layout's
         * size lies inside the page. */
        take_chunk(ph, page, i, csize, writer_id, chunk_id + (uint32_t)got,
                   packets, &out[got]);
        got++;
        i++;
    }
    return got;
}

/* One lap from the cursor for up to `want` chunks; returns how many were
 * taken (mu held). The cursor stays on the page of the last success, or
 * on the last page visited after a fruitless lap.
 * The load of each page's header word holds 28% of this function's
 * samples in bench_tw (64 KiB packets on 4 KiB pages: the 64 KiB copy
 * pushed those lines out of L1). Tried and not kept (2026-12-05): asking
 * for the header lines of the run's pages (up to 32, with write intent)
 * before the loop: 4 KiB pages 0.67 / 0.74 / 0.77x memcpy against 0.72 /
 * 0.75 / 0.82x (64 KiB / 256 KiB / 1 MiB, medians of five bench_tw
 * --large runs each, alternating). */
static size_t lap_locked(smb_arbiter *arb, uint16_t writer_id,
                         uint32_t chunk_id, uint16_t packets, size_t want,
                         bool own_only, smb__chunk_loc *out)
{
    uint32_t page = arb->cursor, last = page;
    size_t got = 0;
    for (uint32_t n = 0; n < arb->num_pages && got < want; n++) {
        size_t k = take_from_page(arb, page, writer_id,
                                  chunk_id + (uint32_t)got, packets,
                                  want - got, own_only, out + got);
        if (k > 0) {
            got += k;
            last = page;
        }
        if (got < want && ++page == arb->num_pages)
            page = 0;
    }
    if (got == 0)
        last = arb->cursor == 0 ? arb->num_pages - 1 : arb->cursor - 1;
    arb->cursor = last;
    return got;
}

/* BeingWritten -> Complete. A page of the arbiter's layout with one chunk
 * per page (Div1, the default) is the writer's alone while its chunk is
 * BeingWritten: no other writer touches a page with no Free chunk and the
 * service only moves Complete / BeingRead chunks. So when the word is
 * exactly {layout, chunk 0 BeingWritten}, a release store of {layout,
 * Complete} is the ABI transition without the locked CAS (which would
 * also drain the store buffer the writer's memcpy just filled). Any other
 * word (other layouts, a peer's doing) takes the ABI helper's CAS.
 * The load itself holds 42% of smb__arbiter_exchange's samples in
 * bench_tw (64 KiB packets, 4 KiB pages; it seems to wait behind the
 * copy's stores); a store without it was tried (2026-12-05):
 * 0.66-0.71x memcpy against 0.69-0.71x in three alternating runs, no
 * gain. Not kept: the check is what keeps a page some other party
 * changed out of a plain store. */
static void complete_chunk(smb_arbiter *arb, smb_page_header *ph,
                           uint32_t idx)
{
    uint32_t mine = arb->layout << SMB_LAYOUT_SHIFT;
    if (arb->layout_chunks == 1 && idx == 0 &&
        atomic_load_explicit(&ph->header_bitmap, memory_order_relaxed) ==
            (mine | SMB_CHUNK_BEING_WRITTEN)) {
        atomic_store_explicit(&ph->header_bitmap, mine | SMB_CHUNK_COMPLETE,
                              memory_order_release);
        return;
    }
    smb_release_chunk_as_complete(ph, idx);
}

/* Mark returned chunks Complete and queue them (mu held); false if some
 * could not be queued (out of memory: they stay Complete, the scraper finds
 * them; the caller sends at once). */
static bool queue_locked(smb_arbiter *arb, const smb__chunk_loc *ret,
                         size_t nret, uint32_t target_buffer)
{
    bool room = grow((void **)&arb->chunks, &arb->chunks_cap,
                     arb->nchunks + nret, sizeof(*arb->chunks)) == 0;
    bool ok = true;
    for (size_t i = 0; i < nret; i++) {
        const smb__chunk_loc *loc = &ret[i];
        if (loc->hdr == NULL)
            continue;
        complete_chunk(arb, smb_page_at(arb->base, arb->page_size,
                                        loc->page), loc->idx);
        arb->stats.chunks_returned++;
        if (!room) {
            ok = false;
            continue;
        }
        smb_commit_chunk *cc = &arb->chunks[arb->nchunks++];
        cc->page = loc->page;
        cc->chunk = loc->idx;
        cc->target_buffer = target_buffer;
        arb->bytes_pending += loc->payload_size + SMB_CHUNK_HEADER_SIZE;
    }
    return ok;
}

static void queue_patches_locked(smb_arbiter *arb,
                                 const smb_chunk_patches *groups,
                                 size_t ngroups)
{
    size_t npatches = 0;
    for (size_t i = 0; i < ngroups; i++)
        npatches += groups[i].npatches;
    if (grow((void **)&arb->groups, &arb->groups_cap, arb->ngroups + ngroups,
             sizeof(*arb->groups)) != 0 ||
        grow((void **)&arb->patches, &arb->patches_cap,
             arb->npatches + npatches, sizeof(*arb->patches)) != 0)
        return;
    for (size_t i = 0; i < ngroups; i++) {
        smb_chunk_patches *g = &arb->groups[arb->ngroups++];
        *g = groups[i];
        g->patches = (const smb_patch *)(uintptr_t)arb->npatches;
        memcpy(arb->patches + arb->npatches, groups[i].patches,
               groups[i].npatches * sizeof(smb_patch));
        arb->npatches += groups[i].npatches;
    }
}

size_t smb__arbiter_exchange(smb_arbiter *arb, const smb__chunk_loc *ret,
                             size_t nret, uint32_t target_buffer,
                             const smb_chunk_patches *groups, size_t ngroups,
                             uint16_t writer_id, uint32_t chunk_id,
                             uint16_t packets, size_t want,
                             smb__chunk_loc *out)
{
    size_t got = 0;
    bool oom = false;

    pthread_mutex_lock(&arb->mu);
    if (nret > 0 && !queue_locked(arb, ret, nret, target_buffer))
        oom = true;
    if (ngroups > 0)
        queue_patches_locked(arb, groups, ngroups);
    if (nret > 0 || ngroups > 0) {
        if (oom || (arb->ngroups > 0 && !arb->batch_patches) ||
            arb->bytes_pending >= arb->batch_bytes ||
            arb->bytes_pending >= arb->size / 2)
            send_locked(arb, 0);
    }
    if (want > arb->max_take)
        want = arb->max_take;
    if (want > 0) {
        bool own = want > 1;
        got = lap_locked(arb, writer_id, chunk_id, packets, want, own, out);
        if (got == 0 && (arb->nchunks > 0 || arb->ngroups > 0)) {
            send_locked(arb, 0);
            got = lap_locked(arb, writer_id, chunk_id, packets, want, own,
                             out);
        }
        arb->stats.chunks_acquired += got;
        if (got == 0)
            arb->stats.acquire_failures++;
    }
    pthread_mutex_unlock(&arb->mu);
    return got;
}

uint32_t smb__arbiter_chunk_payload(const smb_arbiter *arb)
{
    return arb->chunk_size - SMB_CHUNK_HEADER_SIZE;
}

bool smb__arbiter_acquire_chunk(smb_arbiter *arb, uint16_t writer_id,
                                uint32_t chunk_id, uint16_t packets,
                                smb__chunk_loc *out)
{
    return smb__arbiter_exchange(arb, NULL, 0, 0, NULL, 0, writer_id,
                                 chunk_id, packets, 1, out) == 1;
}

void smb__arbiter_return_chunk(smb_arbiter *arb, const smb__chunk_loc *loc,
                               uint32_t target_buffer,
                               const smb_chunk_patches *groups,
                               size_t ngroups)
{
    smb__arbiter_exchange(arb, loc, loc != NULL, target_buffer, groups,
                          ngroups, 0, 0, 0, 0, NULL);
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
