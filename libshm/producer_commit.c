/*
 * producer_commit.c - libshm's transport seam over IPC: arbiter batches
 * become CommitDataRequest IPCs, writer (un)registrations become
 * RegisterTraceWriter / UnregisterTraceWriter.
 *
 * Called on writer threads with the arbiter's mutex held, so this only
 * serializes and queues (prod__enqueue); the library thread sends. One
 * batch = one CommitData IPC; the arbiter is created with batch_bytes =
 * 1/16 of the SMB (a page at least, 256 KiB at most) and batch_patches
 * (producer_client.c), so chunks and patches go out once per that many
 * bytes of chunks (never per packet). A batch whose CommitDataRequest would not fit
 * one IPC frame is split in halves (the flush id goes with the last half).
 *
 * CommitDataRequest (common/commit_data_request.proto):
 *   chunks_to_move=1 {page=1, chunk=2, target_buffer=3}
 *   chunks_to_patch=2 {target_buffer=1, writer_id=2, chunk_id=3,
 *                      patches=4 {offset=1, data=2}, has_more_patches=5}
 *   flush_request_id=3
 *   shmtrace_writer_loss=6000 {writer_id=1, target_buffer=2, packets=3,
 *                              bytes=4}, shmtrace_loss_reporting=6001
 *   (our extension, protos/common.proto: always set, so the service knows
 *   this producer's own drops are counted; losses go with the last part of
 *   a split batch)
 */
#include "config.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common.pb-c.h"
#include "producer_int.h"

typedef Perfetto__Protos__CommitDataRequest Req;
typedef Perfetto__Protos__CommitDataRequest__ChunksToMove Move;
typedef Perfetto__Protos__CommitDataRequest__ChunkToPatch Patch;
typedef Perfetto__Protos__CommitDataRequest__ChunkToPatch__Patch PatchOne;
typedef Perfetto__Protos__CommitDataRequest__ShmtraceWriterLoss Loss;

/* Serialize chunks [c0, c1) and groups [g0, g1) (+flush id). */
static int encode(const smb_commit_batch *b, size_t c0, size_t c1, size_t g0,
                  size_t g1, uint64_t flush_id, uint8_t **out, size_t *len)
{
    int rc = -ENOMEM;
    Req req = PERFETTO__PROTOS__COMMIT_DATA_REQUEST__INIT;
    size_t nc = c1 - c0, ng = g1 - g0, np = 0;
    for (size_t g = g0; g < g1; g++)
        np += b->patch_groups[g].npatches;
    Move *moves = calloc(nc ? nc : 1, sizeof *moves);
    Move **mp = calloc(nc ? nc : 1, sizeof *mp);
    Patch *groups = calloc(ng ? ng : 1, sizeof *groups);
    Patch **gp = calloc(ng ? ng : 1, sizeof *gp);
    PatchOne *ps = calloc(np ? np : 1, sizeof *ps);
    PatchOne **pp = calloc(np ? np : 1, sizeof *pp);
    bool last = c1 == b->nchunks && g1 == b->npatch_groups;
    size_t nl = last ? b->nlosses : 0;
    Loss *ls = calloc(nl ? nl : 1, sizeof *ls);
    Loss **lp = calloc(nl ? nl : 1, sizeof *lp);
    if (!moves || !mp || !groups || !gp || !ps || !pp || !ls || !lp)
        goto out;
    for (size_t i = 0; i < nl; i++) {
        perfetto__protos__commit_data_request__shmtrace_writer_loss__init(
            &ls[i]);
        ls[i].has_writer_id = ls[i].has_target_buffer = true;
        ls[i].has_packets = ls[i].has_bytes = true;
        ls[i].writer_id = b->losses[i].writer_id;
        ls[i].target_buffer = b->losses[i].target_buffer;
        ls[i].packets = b->losses[i].packets;
        ls[i].bytes = b->losses[i].bytes;
        lp[i] = &ls[i];
    }
    req.n_shmtrace_writer_loss = nl;
    req.shmtrace_writer_loss = lp;
    req.has_shmtrace_loss_reporting = true;
    req.shmtrace_loss_reporting = true;
    for (size_t i = 0; i < nc; i++) {
        const smb_commit_chunk *c = &b->chunks[c0 + i];
        perfetto__protos__commit_data_request__chunks_to_move__init(
            &moves[i]);
        moves[i].has_page = moves[i].has_chunk = true;
        moves[i].has_target_buffer = true;
        moves[i].page = c->page;
        moves[i].chunk = c->chunk;
        moves[i].target_buffer = c->target_buffer;
        mp[i] = &moves[i];
    }
    size_t k = 0;
    for (size_t i = 0; i < ng; i++) {
        const smb_chunk_patches *g = &b->patch_groups[g0 + i];
        Patch *o = &groups[i];
        perfetto__protos__commit_data_request__chunk_to_patch__init(o);
        o->has_target_buffer = o->has_writer_id = o->has_chunk_id = true;
        o->target_buffer = g->target_buffer;
        o->writer_id = g->writer_id;
        o->chunk_id = g->chunk_id;
        if (g->has_more_patches) {
            o->has_has_more_patches = true;
            o->has_more_patches = true;
        }
        o->patches = &pp[k];
        o->n_patches = g->npatches;
        for (uint32_t j = 0; j < g->npatches; j++, k++) {
            perfetto__protos__commit_data_request__chunk_to_patch__patch__init(
                &ps[k]);
            ps[k].has_offset = ps[k].has_data = true;
            ps[k].offset = g->patches[j].offset;
            ps[k].data.data = (uint8_t *)g->patches[j].data;
            ps[k].data.len = 4;
            pp[k] = &ps[k];
        }
        gp[i] = o;
    }
    req.n_chunks_to_move = nc;
    req.chunks_to_move = mp;
    req.n_chunks_to_patch = ng;
    req.chunks_to_patch = gp;
    if (flush_id) {
        req.has_flush_request_id = true;
        req.flush_request_id = flush_id;
    }
    size_t n = perfetto__protos__commit_data_request__get_packed_size(&req);
    uint8_t *buf = malloc(n ? n : 1);
    if (!buf)
        goto out;
    perfetto__protos__commit_data_request__pack(&req, buf);
    *out = buf;
    *len = n;
    rc = 0;
out:
    free(moves);
    free(mp);
    free(groups);
    free(gp);
    free(ps);
    free(pp);
    free(ls);
    free(lp);
    return rc;
}

static int send_range(prod__smb *s, const smb_commit_batch *b, size_t c0,
                      size_t c1, size_t g0, size_t g1, uint64_t flush_id)
{
    uint8_t *buf;
    size_t len;
    int rc = encode(b, c0, c1, g0, g1, flush_id, &buf, &len);
    if (rc < 0)
        return rc;
    if (len > IPC_MAX_PAYLOAD_BYTES) {
        free(buf);
        size_t nc = c1 - c0, ng = g1 - g0;
        if (nc + ng <= 1)
            return -EMSGSIZE; /* one patch group over 128 KiB: cannot be */
        size_t cm = c0 + nc / 2, gm = g0 + ng / 2;
        rc = send_range(s, b, c0, cm, g0, gm, 0);
        int rc2 = send_range(s, b, cm, c1, gm, g1, flush_id);
        return rc < 0 ? rc : rc2;
    }
    pthread_mutex_lock(&s->p->mu);
    s->p->stats.chunks_committed += c1 - c0;
    for (size_t g = g0; g < g1; g++)
        s->p->stats.patches_sent += b->patch_groups[g].npatches;
    if (flush_id)
        s->p->stats.flush_acks++;
    pthread_mutex_unlock(&s->p->mu);
    return prod__enqueue(s->p, s->gen, "CommitData", buf, len);
}

static int t_commit(void *ctx, const smb_commit_batch *batch)
{
    prod__smb *s = ctx;
    int rc = send_range(s, batch, 0, batch->nchunks, 0, batch->npatch_groups,
                        batch->flush_request_id);
    if (rc == -EMSGSIZE) {
        pthread_mutex_lock(&s->p->mu);
        s->p->stats.commits_dropped++;
        pthread_mutex_unlock(&s->p->mu);
    }
    return rc;
}

static void send_writer(prod__smb *s, const char *method, uint16_t id,
                        uint32_t target_buffer, bool with_buffer)
{
    Perfetto__Protos__RegisterTraceWriterRequest r =
        PERFETTO__PROTOS__REGISTER_TRACE_WRITER_REQUEST__INIT;
    Perfetto__Protos__UnregisterTraceWriterRequest u =
        PERFETTO__PROTOS__UNREGISTER_TRACE_WRITER_REQUEST__INIT;
    const ProtobufCMessage *m;
    if (with_buffer) {
        r.has_trace_writer_id = r.has_target_buffer = true;
        r.trace_writer_id = id;
        r.target_buffer = target_buffer;
        m = &r.base;
    } else {
        u.has_trace_writer_id = true;
        u.trace_writer_id = id;
        m = &u.base;
    }
    size_t n = protobuf_c_message_get_packed_size(m);
    uint8_t *buf = malloc(n ? n : 1);
    if (!buf)
        return;
    protobuf_c_message_pack(m, buf);
    prod__enqueue(s->p, s->gen, method, buf, n);
}

static void t_register(void *ctx, uint16_t writer_id, uint32_t target_buffer)
{
    send_writer(ctx, "RegisterTraceWriter", writer_id, target_buffer, true);
}

static void t_unregister(void *ctx, uint16_t writer_id)
{
    send_writer(ctx, "UnregisterTraceWriter", writer_id, 0, false);
}

void prod__make_transport(prod__smb *s, smb_transport *out)
{
    memset(out, 0, sizeof *out);
    out->ctx = s;
    out->commit = t_commit;
    out->register_writer = t_register;
    out->unregister_writer = t_unregister;
}
