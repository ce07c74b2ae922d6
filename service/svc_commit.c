/*
 * svc_commit.c - a producer's SMB on the service side: creation, CommitData
 * and scraping, through the SMB reader (service/smb_reader.h).
 *
 * SMB: created by the service on the first data source set up in the
 * producer (memfd, sealed against shrink/grow as Perfetto does, else an
 * unlinked POSIX shm object), sized per smb-abi.md §1: TraceConfig
 * producers[name] > InitializeConnection hints > defaults (4 KiB pages,
 * 256 KiB); page a power-of-two multiple of 4 KiB up to 32 KiB, size a
 * multiple of the page up to 32 MiB, else both defaults. Two departures
 * from Perfetto's traced, which producers cannot tell from a config's
 * choice (they accept the sizes the service sets, SetupTracing):
 *   - the default size follows the session that sets the SMB up: 1/64 of
 *     its buffers, a power of two from 256 KiB (buffers of 16 MiB or less,
 *     as before) to 2 MiB (128 MiB or more). An SMB absorbs what a producer
 *     writes while the service is not draining it; at 256 KiB a busy
 *     producer fills it in under a millisecond, and one without a size
 *     hint (Perfetto's C SDK sends none) then drops. Perfetto's refgen
 *     (2 threads, no sleep, drop policy) through a 128 MiB session on the
 *     2-core bench machine, 2 s recordings: 2.0-4.4 M packets kept at
 *     256 KiB, 4.4-6.4 M at 1 MiB, 6.4-9.3 M at 2 MiB (2026-12-04). The
 *     cost is memory, per producer: at most 1/64 of what the session
 *     already holds for its buffers (README);
 *   - when nobody names a page size and the SMB is at least
 *     SVC_SMB_LARGE_PAGE_FROM (2 MiB), the pages are 32 KiB (64 pages or
 *     more): every chunk costs the same on both sides (a commit entry, a
 *     copy, a ring record, a fragment split), so 8x fewer chunks per byte
 *     took a third of the service's CPU off 1 KiB packets
 *     (bench-vs-perfetto).
 * A uid's producers hold at most SVC_MAX_SMB_BYTES_PER_UID of SMBs in all:
 * the service creates them and keeps them mapped, so without a bound one
 * user's hundreds of producers asking 32 MiB each would hold gigabytes of
 * the daemon's memory. Past it a producer gets the default (256 KiB, 4 KiB
 * pages), and none at all when even that does not fit (svc__smb_setup
 * fails with -EDQUOT: the data source is not set up, and the log says so).
 *
 * CommitData (smb-abi.md §8): the reader bounds page/chunk indices, checks
 * states and copies; the resolve callback here does the service's checks
 * (target buffer exists, producer allowed to write it, writer registered for
 * it) and counts service-level rejects in TraceStats.chunks_discarded.
 * Patches: writer id 1..32767, buffer exists, <= 1024 per chunk, data
 * exactly 4 bytes; refused ones count in patches_discarded. A
 * flush_request_id acks flushes after the chunks were moved.
 *
 * Scraping (smb-abi.md §7): chunks resolve by their writer's registered
 * buffer, restricted to one session when asked.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "svc_int.h"
#include "smb_reader.h"
#include <shmtrace/smb_shm.h>

/* ---------------------------------------------------------------- sizing */

static bool page_ok(uint64_t page)
{
    if (page < 4096 || page > SVC_SMB_PAGE_MAX || page % 4096)
        return false;
    uint64_t k = page / 4096;
    return (k & (k - 1)) == 0;
}

/* The default SMB size for a session with config cfg (above). */
static uint64_t default_size(const Perfetto__Protos__TraceConfig *cfg)
{
    uint64_t kb = 0;
    for (size_t i = 0; cfg && i < cfg->n_buffers; i++)
        if (cfg->buffers[i]->has_size_kb)
            kb += cfg->buffers[i]->size_kb;
    uint64_t want = kb * 1024 / SVC_SMB_BUFFER_SHARE, size;
    for (size = SVC_SMB_SIZE_DEFAULT;
         size < SVC_SMB_SIZE_SCALED_MAX && size * 2 <= want; size *= 2) {
    }
    return size;
}

void svc__smb_sizes(const svc_producer *p,
                    const Perfetto__Protos__TraceConfig *cfg,
                    size_t *page_out, size_t *size_out)
{
    uint64_t page = 0, size = 0;
    for (size_t i = 0; cfg && i < cfg->n_producers; i++) {
        const Perfetto__Protos__TraceConfig__ProducerConfig *pc =
            cfg->producers[i];
        if (pc->producer_name && strcmp(pc->producer_name, p->name) == 0) {
            if (pc->has_page_size_kb)
                page = (uint64_t)pc->page_size_kb * 1024;
            if (pc->has_shm_size_kb)
                size = (uint64_t)pc->shm_size_kb * 1024;
        }
    }
    if (!page)
        page = p->page_hint_bytes;
    if (!size)
        size = p->size_hint_bytes;
    if (!size)
        size = default_size(cfg);
    if (size > SVC_SMB_SIZE_MAX)
        size = SVC_SMB_SIZE_MAX;
    if (!page)
        page = size >= SVC_SMB_LARGE_PAGE_FROM ? SVC_SMB_PAGE_MAX
                                               : SVC_SMB_PAGE_DEFAULT;
    if (!page_ok(page) || size < page || size % page) {
        page = SVC_SMB_PAGE_DEFAULT;
        size = SVC_SMB_SIZE_DEFAULT;
    }
    *page_out = (size_t)page;
    *size_out = (size_t)size;
}

/* The SMB comes from libshm's smb_shm_create (sealed memfd, else an
 * unlinked POSIX shm object). The producer maps the same fd: unsealed, it
 * could shrink the object and make our reads of the SMB fault (SIGBUS), so
 * an object without the shrink/grow seals (the shm_open fallback) is
 * refused. */
static int smb_create_sealed(size_t size, smb_shm *out)
{
    int rc = smb_shm_create(size, out);
    if (rc < 0)
        return rc;
#ifdef F_GET_SEALS
    int seals = fcntl(out->fd, F_GET_SEALS);
    const int need = F_SEAL_SHRINK | F_SEAL_GROW;
    if (seals >= 0 && (seals & need) == need)
        return 0;
#endif
    smb_shm_unmap(out);
    return -ENOTSUP;
}

/* Bytes of SMB the producers of uid hold. */
static uint64_t uid_smb_bytes(const svc_service *svc, uid_t uid)
{
    uint64_t n = 0;
    for (size_t i = 0; i < svc->nproducers; i++)
        if (svc->producers[i]->uid == uid && svc->producers[i]->smb_fd >= 0)
            n += svc->producers[i]->smb_size;
    return n;
}

int svc__smb_setup(svc_service *svc, svc_producer *p,
                   const Perfetto__Protos__TraceConfig *cfg)
{
    if (p->smb_fd >= 0)
        return 0;
    size_t page, size;
    svc__smb_sizes(p, cfg, &page, &size);
    uint64_t held = uid_smb_bytes(svc, p->uid);
    if (held + size > SVC_MAX_SMB_BYTES_PER_UID) {
        page = SVC_SMB_PAGE_DEFAULT;
        size = SVC_SMB_SIZE_DEFAULT;
        if (held + size > SVC_MAX_SMB_BYTES_PER_UID)
            return -EDQUOT;
    }
    smb_shm shm;
    int rc = smb_create_sealed(size, &shm);
    if (rc < 0)
        return rc;
    smb_reader *r = smb_reader_create(shm.base, size, (uint32_t)page, p->id,
                                      (uint32_t)p->uid, (int32_t)p->pid);
    if (!r) {
        int e = -errno;
        smb_shm_unmap(&shm);
        return e;
    }
    smb_reader_set_fd(r, shm.fd);
    p->smb_fd = shm.fd;
    p->smb_base = shm.base;
    p->smb_size = size;
    p->smb_page_size = page;
    p->smb_reader = r;
    return 0;
}

void svc__smb_teardown(svc_producer *p)
{
    smb_reader_destroy(p->smb_reader);
    p->smb_reader = NULL;
    if (p->smb_base)
        munmap(p->smb_base, p->smb_size);
    p->smb_base = NULL;
    if (p->smb_fd >= 0)
        close(p->smb_fd);
    p->smb_fd = -1;
}

/* ---------------------------------------------------------------- resolve */

typedef struct {
    svc_service *svc;
    svc_producer *p;
    const svc_session *only;     /* scrape: this session's buffers only */
    bool scraping;
} svc_resolve_ctx;

static tb_buffer *resolve(void *vctx, uint32_t target_buffer,
                          uint16_t writer_id)
{
    svc_resolve_ctx *c = vctx;
    uint32_t registered = svc__writer_buffer(c->p, writer_id);
    if (c->scraping) {
        /* Scrapes find the buffer through RegisterTraceWriter only. */
        svc_session *s = NULL;
        tb_buffer *b = registered ? svc__buffer(c->svc, registered, &s) : NULL;
        if (!b || !svc__producer_may_write(c->p, registered) ||
            (c->only && s != c->only))
            return NULL;
        return b;
    }
    tb_buffer *b = svc__buffer(c->svc, target_buffer, NULL);
    if (!b || !svc__producer_may_write(c->p, target_buffer) ||
        (registered && registered != target_buffer)) {
        c->svc->chunks_discarded++;
        return NULL;
    }
    return b;
}

/* ---------------------------------------------------------------- commit */

int svc_producer_commit(svc_service *svc, svc_producer *p,
                        const Perfetto__Protos__CommitDataRequest *req)
{
    if (!p->smb_reader)
        return -EPERM;
    svc_resolve_ctx c = { .svc = svc, .p = p };
    for (size_t i = 0; i < req->n_chunks_to_move; i++) {
        const Perfetto__Protos__CommitDataRequest__ChunksToMove *m =
            req->chunks_to_move[i];
        if (m->has_data) {
            /* SMB emulation is never offered (InitializeConnection says
             * use_shmem_emulation = false): a chunk in the IPC is refused. */
            svc->chunks_discarded++;
            continue;
        }
        if (!m->has_page || !m->has_chunk)
            continue;
        int rc = smb_reader_commit_chunk(p->smb_reader, m->page, m->chunk,
                m->has_target_buffer ? m->target_buffer : 0, resolve, &c);
        if (rc == -EPROTO)
            svc->chunks_discarded++;
    }
    for (size_t i = 0; i < req->n_chunks_to_patch; i++) {
        const Perfetto__Protos__CommitDataRequest__ChunkToPatch *cp =
            req->chunks_to_patch[i];
        uint32_t wid = cp->has_writer_id ? cp->writer_id : 0;
        uint32_t tb = cp->has_target_buffer ? cp->target_buffer : 0;
        if (wid == 0 || wid > SVC_MAX_WRITER_ID ||
            !svc__buffer(svc, tb, NULL) || cp->n_patches == 0 ||
            cp->n_patches > SVC_MAX_PATCHES_PER_CHUNK) {
            svc->patches_discarded += cp->n_patches;
            continue;
        }
        smb_patch *pt = calloc(cp->n_patches, sizeof(*pt));
        if (!pt)
            return -ENOMEM;
        uint32_t n = 0;
        for (size_t k = 0; k < cp->n_patches; k++) {
            const Perfetto__Protos__CommitDataRequest__ChunkToPatch__Patch
                *q = cp->patches[k];
            if (!q->has_data || q->data.len != 4 || !q->has_offset) {
                svc->patches_discarded++;
                continue;
            }
            pt[n].offset = q->offset;
            memcpy(pt[n].data, q->data.data, 4);
            n++;
        }
        if (n) {
            smb_chunk_patches g = {
                .target_buffer = tb,
                .chunk_id = cp->has_chunk_id ? cp->chunk_id : 0,
                .writer_id = (uint16_t)wid,
                .has_more_patches = cp->has_has_more_patches &&
                                    cp->has_more_patches,
                .npatches = n,
                .patches = pt,
            };
            int rc = smb_reader_apply_patches(p->smb_reader, &g, resolve, &c);
            if (rc == -EPROTO)
                svc->patches_discarded += n;
        }
        free(pt);
    }
    svc__loss_commit(svc, p, req);
    svc->last_commit_ms = svc_now_ms();
    svc__file_check(svc);
    if (req->has_flush_request_id && req->flush_request_id)
        svc__flush_ack(svc, p, req->flush_request_id);
    return 0;
}

/* ---------------------------------------------------------------- scrape */

size_t svc__scrape(svc_service *svc, svc_producer *p,
                   const svc_session *only)
{
    if (!p->smb_reader || !p->scraping_enabled)
        return 0;
    svc_resolve_ctx c = { .svc = svc, .p = p, .only = only, .scraping = true };
    return smb_reader_scrape(p->smb_reader, resolve, &c);
}
