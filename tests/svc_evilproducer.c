/*
 * svc_evilproducer.c - a hostile producer for the e2e tests.
 *
 * Speaks ProducerPort correctly enough to be given an SMB and a data
 * source instance, then lies: it fills its SMB with random page words,
 * chunk headers and fragments, commits pages/chunks out of range, in the
 * wrong state and for buffers it was never given, sends patches with bad
 * sizes and writer ids, registers absurd trace writers, and invokes
 * methods with undecodable arguments. It acks flushes so that honest
 * sessions are not slowed down, and exits 0 after --seconds.
 *
 * The service must survive all of it, keep every honest producer's data,
 * and count what it rejected (abi_violations, chunks_discarded,
 * patches_discarded).
 */
#include <errno.h>
#include <getopt.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ipc.h"
#include "trng.h"

#define EVIL_CMD(x) PERFETTO__PROTOS__GET_ASYNC_COMMAND_RESPONSE__CMD_##x

typedef struct {
    ipc_loop *loop;
    ipc_client *c;
    const char *ds_name;
    uint8_t *smb;
    size_t smb_size, page_size;
    uint32_t target_buffer;
    bool started;
    uint64_t deadline_ms;
    uint64_t rng;
    uint64_t bursts;
} evil_t;

static uint64_t rnd(evil_t *e)
{
    return trng_next64(&e->rng);
}

static void on_cmd(ipc_client *c, int st, const ProtobufCMessage *msg,
                   bool more, void *ctx)
{
    evil_t *e = ctx;
    if (st != 0 || !msg)
        return;
    const Perfetto__Protos__GetAsyncCommandResponse *r = (const void *)msg;
    if (r->cmd_case == EVIL_CMD(SETUP_TRACING)) {
        int fd = ipc_client_take_fd(c);
        struct stat sb;
        if (fd >= 0 && fstat(fd, &sb) == 0 && sb.st_size > 0) {
            e->smb_size = (size_t)sb.st_size;
            e->page_size = r->setup_tracing->shared_buffer_page_size_kb * 1024u;
            if (!e->page_size || e->smb_size % e->page_size)
                e->page_size = 4096;
            e->smb = mmap(NULL, e->smb_size, PROT_READ | PROT_WRITE,
                          MAP_SHARED, fd, 0);
            if (e->smb == MAP_FAILED)
                e->smb = NULL;
        }
        if (fd >= 0)
            close(fd);
    } else if (r->cmd_case == EVIL_CMD(START_DATA_SOURCE)) {
        e->target_buffer = r->start_data_source->config->target_buffer;
        e->started = true;
    } else if (r->cmd_case == EVIL_CMD(FLUSH)) {
        Perfetto__Protos__CommitDataRequest req =
            PERFETTO__PROTOS__COMMIT_DATA_REQUEST__INIT;
        req.has_flush_request_id = true;
        req.flush_request_id = r->flush->request_id;
        ipc_client_invoke(c, "CommitData", &req.base, -1, NULL, NULL, NULL);
    }
}

static void garbage_burst(evil_t *e)
{
    if (!e->smb)
        return;
    size_t npages = e->smb_size / e->page_size;
    /* Scribble over a few pages: random words that claim Complete. */
    for (int k = 0; k < 4; k++) {
        uint8_t *pg = e->smb + (rnd(e) % npages) * e->page_size;
        for (size_t i = 8; i < e->page_size; i += 8) {
            uint64_t v = rnd(e);
            memcpy(pg + i, &v, 8);
        }
        uint32_t layout = (uint32_t)(rnd(e) % 8);
        uint32_t word = (layout << 28) | (uint32_t)(rnd(e) & 0x0FFFFFFF);
        if (rnd(e) % 2)
            word = (layout << 28) | 0x0FFFFFFF;     /* "all complete" */
        atomic_store((_Atomic uint32_t *)(void *)pg, word);
    }
    Perfetto__Protos__CommitDataRequest req =
        PERFETTO__PROTOS__COMMIT_DATA_REQUEST__INIT;
    Perfetto__Protos__CommitDataRequest__ChunksToMove m[16], *mp[16];
    for (int i = 0; i < 16; i++) {
        perfetto__protos__commit_data_request__chunks_to_move__init(&m[i]);
        m[i].has_page = m[i].has_chunk = m[i].has_target_buffer = true;
        m[i].page = (uint32_t)(i % 4 == 0 ? rnd(e) : rnd(e) % (npages + 2));
        m[i].chunk = (uint32_t)(i % 5 == 0 ? rnd(e) : rnd(e) % 16);
        switch (i % 3) {
        case 0: m[i].target_buffer = e->target_buffer; break;
        case 1: m[i].target_buffer = (uint32_t)(rnd(e) % 64); break;
        default: m[i].target_buffer = (uint32_t)rnd(e); break;
        }
        mp[i] = &m[i];
    }
    req.n_chunks_to_move = 16;
    req.chunks_to_move = mp;
    Perfetto__Protos__CommitDataRequest__ChunkToPatch cp =
        PERFETTO__PROTOS__COMMIT_DATA_REQUEST__CHUNK_TO_PATCH__INIT, *cpp = &cp;
    Perfetto__Protos__CommitDataRequest__ChunkToPatch__Patch pt =
        PERFETTO__PROTOS__COMMIT_DATA_REQUEST__CHUNK_TO_PATCH__PATCH__INIT,
        *ptp = &pt;
    uint8_t pdata[7] = {1, 2, 3, 4, 5, 6, 7};
    pt.has_offset = pt.has_data = true;
    pt.offset = (uint32_t)rnd(e);
    pt.data.data = pdata;
    pt.data.len = (size_t)(rnd(e) % 8);
    cp.has_writer_id = cp.has_target_buffer = cp.has_chunk_id = true;
    cp.writer_id = (uint32_t)(rnd(e) % 70000);
    cp.target_buffer = e->target_buffer;
    cp.chunk_id = (uint32_t)rnd(e);
    cp.n_patches = 1;
    cp.patches = &ptp;
    req.n_chunks_to_patch = 1;
    req.chunks_to_patch = &cpp;
    ipc_client_invoke(e->c, "CommitData", &req.base, -1, NULL, NULL, NULL);

    Perfetto__Protos__RegisterTraceWriterRequest rw =
        PERFETTO__PROTOS__REGISTER_TRACE_WRITER_REQUEST__INIT;
    rw.has_trace_writer_id = rw.has_target_buffer = true;
    rw.trace_writer_id = (uint32_t)rnd(e);
    rw.target_buffer = (uint32_t)rnd(e);
    ipc_client_invoke(e->c, "RegisterTraceWriter", &rw.base, -1, NULL, NULL,
                      NULL);
    /* Undecodable arguments for a few methods. */
    uint8_t junk[32];
    for (size_t i = 0; i < sizeof(junk); i++)
        junk[i] = (uint8_t)rnd(e);
    static const char *methods[] = {"CommitData", "RegisterDataSource",
        "NotifyDataSourceStopped", "UnregisterDataSource", "Sync"};
    ipc_client_invoke_raw(e->c, methods[rnd(e) % 5], junk,
                          (size_t)(rnd(e) % sizeof(junk)), -1, NULL, NULL,
                          NULL);
    e->bursts++;
}

static void tick(void *ctx)
{
    evil_t *e = ctx;
    if (ipc_now_ms() >= e->deadline_ms) {
        ipc_loop_quit(e->loop);
        return;
    }
    if (e->started && ipc_client_tx_queued_bytes(e->c) < (1u << 20))
        garbage_burst(e);
}

static void on_bound(ipc_client *c, bool ok, void *ctx)
{
    evil_t *e = ctx;
    if (!ok) {
        ipc_loop_quit(e->loop);
        return;
    }
    Perfetto__Protos__InitializeConnectionRequest ic =
        PERFETTO__PROTOS__INITIALIZE_CONNECTION_REQUEST__INIT;
    ic.producer_name = "evil";
    ipc_client_invoke(c, "InitializeConnection", &ic.base, -1, NULL, NULL,
                      NULL);
    ipc_client_invoke(c, "GetAsyncCommand", NULL, -1,
                      &perfetto__protos__get_async_command_response__descriptor,
                      on_cmd, e);
    Perfetto__Protos__RegisterDataSourceRequest rr =
        PERFETTO__PROTOS__REGISTER_DATA_SOURCE_REQUEST__INIT;
    Perfetto__Protos__DataSourceDescriptor dd =
        PERFETTO__PROTOS__DATA_SOURCE_DESCRIPTOR__INIT;
    dd.name = (char *)e->ds_name;
    rr.data_source_descriptor = &dd;
    ipc_client_invoke(c, "RegisterDataSource", &rr.base, -1, NULL, NULL, NULL);
}

static void on_disconnect(ipc_client *c, int err, void *ctx)
{
    evil_t *e = ctx;
    ipc_loop_quit(e->loop);
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"seconds", required_argument, NULL, 's'},
        {"data-source", required_argument, NULL, 'd'},
        {"seed", required_argument, NULL, 'r'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    evil_t e = { .ds_name = "shmtrace.synthetic", .rng = 0x9E3779B97F4A7C15u };
    double seconds = 2;
    int o;
    while ((o = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (o) {
        case 's': seconds = atof(optarg); break;
        case 'd': e.ds_name = optarg; break;
        case 'r': e.rng = strtoull(optarg, NULL, 0) | 1; break;
        case 'h':
            printf("usage: svc_evilproducer [--seconds S] [--data-source N] "
                   "[--seed X]\nA hostile producer for shmtraced's tests: "
                   "garbage SMB contents and lying commits.\n");
            return 0;
        default: return 2;
        }
    }
    char path[108];
    if (ipc_sock_path(IPC_SOCK_PRODUCER, NULL, path, sizeof(path)) < 0)
        return 2;
    e.loop = ipc_loop_create();
    static const ipc_client_cbs cbs = { on_bound, on_disconnect };
    int err = 0;
    e.c = ipc_client_connect(e.loop, path, IPC_PRODUCER_PORT, &cbs, &e, &err);
    if (!e.c) {
        fprintf(stderr, "svc_evilproducer: cannot connect to %s: %s\n", path,
                ipc_strerror(err));
        return 1;
    }
    e.deadline_ms = ipc_now_ms() + (uint64_t)(seconds * 1000);
    ipc_loop_add_timer(e.loop, 1, 1, tick, &e);
    ipc_loop_run(e.loop);
    fprintf(stderr, "svc_evilproducer: %llu bursts\n",
            (unsigned long long)e.bursts);
    ipc_client_destroy(e.c);
    ipc_loop_destroy(e.loop);
    if (e.smb)
        munmap(e.smb, e.smb_size);
    return 0;
}
