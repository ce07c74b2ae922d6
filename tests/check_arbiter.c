/*
 * check_arbiter.c - the chunk arbiter: creation, page partitioning on
 * demand, the page cursor, commit batching, flush, writer registration and
 * shutdown; the writer's internal exchange (runs of chunks under one lock);
 * the prefault of an SMB the arbiter maps.
 */
#include "config.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <sys/mman.h>
#include <unistd.h>

#include "arbiter_int.h"
#include "check_smb_harness.h"
#include "tck_main.h"

/* A transport that only records (chunks stay Complete in the SMB). */
typedef struct {
    size_t batches, chunks, groups;
    uint64_t flush_ids[16];
    size_t nflush;
    smb_commit_chunk last[64];
    size_t nlast;
    int fail;
} rec;

static int rec_commit(void *ctx, const smb_commit_batch *b)
{
    rec *r = ctx;
    r->batches++;
    r->chunks += b->nchunks;
    r->groups += b->npatch_groups;
    r->nlast = b->nchunks < 64 ? b->nchunks : 64;
    memcpy(r->last, b->chunks, r->nlast * sizeof(*b->chunks));
    if (b->flush_request_id && r->nflush < 16)
        r->flush_ids[r->nflush++] = b->flush_request_id;
    return r->fail;
}

static smb_arbiter *rec_arbiter(rec *r, smb_shm *shm, size_t size,
                                uint32_t page, uint32_t layout,
                                uint32_t batch)
{
    smb_transport t = {r, rec_commit, NULL, NULL};
    memset(r, 0, sizeof(*r));
    return hb_arbiter_new(shm, size, page, &t, layout, batch);
}

START_TEST(test_create_validates_arguments)
{
    _Alignas(4096) static uint8_t mem[16384];
    rec r;
    smb_transport t = {&r, rec_commit, NULL, NULL};
    smb_transport nocommit = {&r, NULL, NULL, NULL};
    smb_arbiter_options bad;
    memset(&bad, 0, sizeof(bad));
    bad.page_layout = 6;
    errno = 0;
    ck_assert_ptr_null(smb_arbiter_create(NULL, 16384, 4096, &t, NULL));
    ck_assert_int_eq(errno, EINVAL);
    ck_assert_ptr_null(smb_arbiter_create(mem, 16384, 3000, &t, NULL));
    ck_assert_ptr_null(smb_arbiter_create(mem, 10000, 4096, &t, NULL));
    ck_assert_ptr_null(smb_arbiter_create(mem, 2048, 4096, &t, NULL));
    ck_assert_ptr_null(smb_arbiter_create(mem + 8, 8192, 4096, &t, NULL));
    ck_assert_ptr_null(smb_arbiter_create(mem, 16384, 4096, NULL, NULL));
    ck_assert_ptr_null(smb_arbiter_create(mem, 16384, 4096, &nocommit,
                                          NULL));
    ck_assert_ptr_null(smb_arbiter_create(mem, 16384, 4096, &t, &bad));
    smb_arbiter *a = smb_arbiter_create(mem, 16384, 4096, &t, NULL);
    ck_assert_ptr_nonnull(a);
    ck_assert_int_eq(smb_arbiter_fd(a), -1);
    ck_assert_ptr_eq(smb_arbiter_base(a), mem);
    ck_assert_uint_eq(smb_arbiter_size(a), 16384);
    ck_assert_uint_eq(smb_arbiter_page_size(a), 4096);
    smb_arbiter_destroy(a);
    smb_arbiter_destroy(NULL);
    errno = 0;
    ck_assert_ptr_null(smb_arbiter_create_from_fd(-1, 4096, &t, NULL));
    ck_assert_int_eq(errno, EINVAL);
    ck_assert_ptr_null(smb_arbiter_create_shm(10000, 4096, &t, NULL));
}
END_TEST

START_TEST(test_create_shm_and_from_fd_share_memory)
{
    rec r;
    memset(&r, 0, sizeof(r));
    smb_transport t = {&r, rec_commit, NULL, NULL};
    smb_arbiter *own = smb_arbiter_create_shm(64 * 1024, 8192, &t, NULL);
    ck_assert_ptr_nonnull(own);
    ck_assert_int_ge(smb_arbiter_fd(own), 0);
    smb_arbiter *peer = smb_arbiter_create_from_fd(smb_arbiter_fd(own),
                                                   8192, &t, NULL);
    ck_assert_ptr_nonnull(peer);
    ck_assert_uint_eq(smb_arbiter_size(peer), 64 * 1024);
    smb_arbiter_base(own)[100] = 42;
    ck_assert_uint_eq(smb_arbiter_base(peer)[100], 42);
    smb_arbiter_destroy(peer);
    smb_arbiter_destroy(own);
}
END_TEST

/* Pages of fd's object present in memory (mincore on a mapping of our
 * own, which touches nothing). */
static size_t pages_in_core(int fd, size_t size)
{
    void *m = mmap(NULL, size, PROT_READ, MAP_SHARED, fd, 0);
    ck_assert_ptr_ne(m, MAP_FAILED);
    unsigned char vec[256];
    ck_assert_uint_le(size / 4096, sizeof(vec));
    ck_assert_int_eq(mincore(m, size, vec), 0);
    size_t n = 0;
    for (size_t i = 0; i < size / 4096; i++)
        n += vec[i] & 1u;
    munmap(m, size);
    return n;
}

START_TEST(test_from_fd_prefaults_the_smb)
{
#if defined(MADV_POPULATE_WRITE) && defined(HAVE_MEMFD_CREATE)
    /* Without the feature in the kernel (before 5.14) there is nothing
     * to check: the arbiter's madvise fails harmlessly there. */
    void *probe = mmap(NULL, 4096, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ck_assert_ptr_ne(probe, MAP_FAILED);
    bool have = madvise(probe, 4096, MADV_POPULATE_WRITE) == 0;
    munmap(probe, 4096);
    if (!have) {
        fprintf(stderr, "test_from_fd_prefaults_the_smb: this kernel has no "
                "MADV_POPULATE_WRITE; not checked\n");
        return;
    }
    const size_t size = 256 * 1024;
    int fd = memfd_create("check_arbiter", MFD_CLOEXEC);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(ftruncate(fd, (off_t)size), 0);
    ck_assert_uint_eq(pages_in_core(fd, size), 0);   /* nothing touched */
    rec r;
    memset(&r, 0, sizeof(r));
    smb_transport t = {&r, rec_commit, NULL, NULL};
    smb_arbiter *arb = smb_arbiter_create_from_fd(fd, 4096, &t, NULL);
    ck_assert_ptr_nonnull(arb);
    ck_assert_uint_eq(pages_in_core(fd, size), size / 4096);
    /* populated, not written: the ABI's "all pages free" still holds */
    for (size_t i = 0; i < size; i++)
        ck_assert_uint_eq(smb_arbiter_base(arb)[i], 0);
    smb_arbiter_destroy(arb);
    close(fd);
#endif
}
END_TEST

START_TEST(test_pages_partitioned_on_demand_in_order)
{
    rec r;
    smb_shm shm;
    smb_arbiter *arb = rec_arbiter(&r, &shm, 4 * 4096, 4096,
                                   SMB_LAYOUT_DIV4, 0);
    tw_writer *w = tw_writer_create(arb, 1, TW_POLICY_DROP);
    /* Nothing is partitioned before the first packet. */
    for (int p = 0; p < 4; p++)
        ck_assert_uint_eq(atomic_load(&smb_page_at(shm.base, 4096, p)
                                       ->header_bitmap), 0);
    for (int i = 0; i < 6; i++) {
        tw_packet_begin(w);
        tw_add_varint(w, 1, (uint64_t)i);
        tw_packet_end(w);
        tw_writer_flush(w);          /* one chunk per packet */
    }
    ck_assert_uint_eq(r.chunks, 6);
    /* Page 0 fully used (4 chunks), page 1 has 2; pages 2, 3 untouched. */
    ck_assert_uint_eq(atomic_load(&smb_page_at(shm.base, 4096, 0)
                                   ->header_bitmap), 0x300000FFu);
    ck_assert_uint_eq(atomic_load(&smb_page_at(shm.base, 4096, 1)
                                   ->header_bitmap), 0x3000000Fu);
    ck_assert_uint_eq(atomic_load(&smb_page_at(shm.base, 4096, 2)
                                   ->header_bitmap), 0);
    ck_assert_uint_eq(r.last[0].page, 1);
    ck_assert_uint_eq(r.last[0].chunk, 1);
    ck_assert_uint_eq(r.last[0].target_buffer, 1);
    /* SMB full (16 chunks, none freed): acquisition fails, counted. */
    for (int i = 0; i < 20; i++) {
        tw_packet_begin(w);
        tw_add_varint(w, 1, 1);
        tw_packet_end(w);
        tw_writer_flush(w);
    }
    smb_arbiter_stats st;
    smb_arbiter_get_stats(arb, &st);
    ck_assert_uint_eq(st.chunks_acquired, 16);
    ck_assert_uint_eq(st.chunks_returned, 16);
    ck_assert_uint_gt(st.acquire_failures, 0);
    tw_writer_destroy(w);
    smb_arbiter_destroy(arb);
    smb_shm_unmap(&shm);
}
END_TEST

START_TEST(test_batching_by_bytes_and_flush)
{
    rec r;
    smb_shm shm;
    /* Send once 3 chunks (3 x 4088 bytes, Div1) are pending. */
    smb_arbiter *arb = rec_arbiter(&r, &shm, 16 * 4096, 4096, 0, 3 * 4088);
    tw_writer *w = tw_writer_create(arb, 1, TW_POLICY_DROP);
    for (int i = 0; i < 2; i++) {
        tw_packet_begin(w);
        tw_packet_end(w);
        tw_writer_flush(w);          /* flush sends what is pending */
    }
    ck_assert_uint_eq(r.batches, 2);
    uint8_t big[4096 * 2];
    memset(big, 'x', sizeof(big));
    tw_packet_begin(w);              /* 2 chunks returned inside a packet */
    tw_add_bytes(w, 1, big, sizeof(big));
    ck_assert_uint_eq(r.batches, 2);
    tw_add_bytes(w, 1, big, 4096);
    ck_assert_uint_eq(r.batches, 3);
    ck_assert_uint_eq(r.nlast, 3);
    tw_packet_end(w);
    /* Flush with a request id: sent even when empty. */
    ck_assert_int_eq(smb_arbiter_flush(arb, 0), 0);
    ck_assert_uint_eq(r.batches, 3);
    ck_assert_int_eq(smb_arbiter_flush(arb, 77), 0);
    ck_assert_uint_eq(r.batches, 4);
    ck_assert_uint_eq(r.nflush, 1);
    ck_assert_uint_eq(r.flush_ids[0], 77);
    /* A failing transport is reported and counted. */
    r.fail = -EPIPE;
    ck_assert_int_eq(tw_writer_flush(w), -EPIPE);
    smb_arbiter_stats st;
    smb_arbiter_get_stats(arb, &st);
    ck_assert_uint_eq(st.batch_send_errors, 1);
    tw_writer_destroy(w);
    smb_arbiter_destroy(arb);
    smb_shm_unmap(&shm);
}
END_TEST

START_TEST(test_batch_sent_at_half_the_smb)
{
    rec r;
    smb_shm shm;
    /* batch_bytes huge: only the half-SMB rule (16 KiB of 32) sends. */
    smb_arbiter *arb = rec_arbiter(&r, &shm, 8 * 4096, 4096, 0, 1u << 30);
    tw_writer *w = tw_writer_create(arb, 1, TW_POLICY_DROP);
    uint8_t big[4096];
    memset(big, 'y', sizeof(big));
    tw_packet_begin(w);
    for (int i = 0; i < 4; i++)
        tw_add_bytes(w, 1, big, sizeof(big));   /* 4 chunks returned */
    ck_assert_uint_eq(r.batches, 0);            /* 4 x 4088 < 16384 */
    tw_add_bytes(w, 1, big, sizeof(big));       /* the 5th */
    ck_assert_uint_eq(r.batches, 1);
    ck_assert_uint_eq(r.nlast, 5);
    tw_packet_end(w);
    tw_writer_destroy(w);
    smb_arbiter_destroy(arb);
    smb_shm_unmap(&shm);
}
END_TEST

START_TEST(test_pending_batch_sent_before_giving_up)
{
    /* With batching, a writer that finds no free chunk first sends the
     * pending batch: an instant service frees the chunks, no loss. */
    hb h;
    hb_init_ex(&h, 4 * 4096, 4096, 0, 4 * 1024 * 1024, HB_SYNC, 1 << 30);
    tw_writer *w = tw_writer_create(h.arb, HB_TARGET, TW_POLICY_DROP);
    uint8_t data[1000];
    memset(data, 7, sizeof(data));
    for (uint32_t i = 0; i < 100; i++) {
        tw_packet_begin(w);
        tw_add_varint(w, 2, i);
        tw_add_bytes(w, 1, data, sizeof(data));
        tw_packet_end(w);
    }
    tw_writer_stats st;
    tw_writer_get_stats(w, &st);
    ck_assert_uint_eq(st.packets_lost, 0);
    ck_assert_uint_lt(h.batches, st.chunks_used);  /* really batched */
    tw_writer_flush(w);
    ck_assert_uint_eq(hb_read_count(&h), 100);
    tw_writer_destroy(w);
    hb_fini(&h);
}
END_TEST

/* Patches force a send of their own by default (rule 1 of arbiter.h);
 * with batch_patches they wait in the batch like chunks: 1000-byte nested
 * messages straddle most chunk boundaries, yet nothing is sent before the flush,
 * which carries every chunk and every patch in one batch. */
START_TEST(test_batch_patches_wait_for_the_batch)
{
    uint8_t data[1000];
    memset(data, 3, sizeof(data));
    for (int batch_patches = 0; batch_patches <= 1; batch_patches++) {
        rec r;
        smb_shm shm;
        smb_transport t = {&r, rec_commit, NULL, NULL};
        smb_arbiter_options o;
        memset(&r, 0, sizeof(r));
        memset(&o, 0, sizeof(o));
        o.batch_bytes = 1u << 30;      /* only half the SMB, or a flush */
        o.batch_patches = (uint32_t)batch_patches;
        ck_assert_int_eq(smb_shm_create(64 * 4096, &shm), 0);
        smb_arbiter *arb = smb_arbiter_create(shm.base, 64 * 4096, 4096, &t,
                                              &o);
        ck_assert_ptr_nonnull(arb);
        tw_writer *w = tw_writer_create(arb, 1, TW_POLICY_DROP);
        for (int i = 0; i < 20; i++) {
            tw_packet_begin(w);
            tw_begin_nested(w, 900);   /* its size: patched across chunks */
            tw_add_bytes(w, 1, data, sizeof(data));
            tw_end_nested(w);
            tw_packet_end(w);
        }
        if (batch_patches)
            ck_assert_uint_eq(r.batches, 0);
        else
            ck_assert_uint_ge(r.batches, 3);   /* one per patched chunk */
        size_t before = r.batches;
        ck_assert_int_eq(tw_writer_flush(w), 0);
        ck_assert_uint_eq(r.batches, before + 1);
        ck_assert_uint_ge(r.chunks, 5);        /* ~20 KB in 4 KiB chunks */
        ck_assert_uint_ge(r.groups, 3);
        tw_writer_destroy(w);
        smb_arbiter_destroy(arb);
        smb_shm_unmap(&shm);
    }
}
END_TEST

/* End to end with batch_patches (as the IPC producer runs): packets that
 * straddle chunks are read back whole and in order, some before the
 * flush (batches sent by bytes), the rest after it. */
START_TEST(test_batch_patches_read_back_whole)
{
    hb h;
    hb_init_ex(&h, 64 * 4096, 4096, 0, 4 * 1024 * 1024, HB_SYNC, 0);
    smb_arbiter_destroy(h.arb);
    smb_transport t = {&h, hb_commit, hb_register, hb_unregister};
    smb_arbiter_options o;
    memset(&o, 0, sizeof(o));
    o.batch_bytes = 16 * 4096;
    o.batch_patches = 1;
    h.arb = smb_arbiter_create(h.shm.base, h.shm.size, 4096, &t, &o);
    ck_assert_ptr_nonnull(h.arb);
    tw_writer *w = tw_writer_create(h.arb, HB_TARGET, TW_POLICY_DROP);
    uint8_t data[1000];
    for (uint32_t i = 0; i < 500; i++) {
        memset(data, (int)(i & 0xff), sizeof(data));
        tw_packet_begin(w);
        tw_add_varint(w, 2, i);
        tw_begin_nested(w, 900);       /* its size: patched across chunks */
        tw_add_bytes(w, 1, data, sizeof(data));
        tw_end_nested(w);
        tw_packet_end(w);
    }
    hb_pkts early = hb_read_all(&h);
    ck_assert_uint_gt(early.n, 0);
    ck_assert_uint_lt(early.n, 500);
    ck_assert_uint_lt(h.batches, h.chunks / 8);  /* really batched */
    ck_assert_uint_gt(h.patches, 100);
    tw_writer_flush(w);
    hb_pkts rest = hb_read_all(&h);
    ck_assert_uint_eq(early.n + rest.n, 500);
    for (size_t k = 0; k < 500; k++) {
        const hb_pkt *p = k < early.n ? &early.v[k] : &rest.v[k - early.n];
        uint64_t v;
        ck_assert(hb_find_varint(p, 2, &v));
        ck_assert_uint_eq(v, k);
        ck_assert_uint_eq(p->dropped, 0);
        ck_assert_uint_ge(p->size, 1000 + 6);
        for (size_t b = p->size - 1000; b < p->size; b++)
            ck_assert_uint_eq(p->data[b], (uint8_t)(k & 0xff));
    }
    hb_pkts_free(&early);
    hb_pkts_free(&rest);
    tw_writer_destroy(w);
    hb_fini(&h);
}
END_TEST

START_TEST(test_writers_registered_and_shutdown)
{
    hb h;
    hb_init(&h, 4 * 4096, 4096, 1024 * 1024);
    tw_writer *a = tw_writer_create(h.arb, HB_TARGET, TW_POLICY_DROP);
    tw_writer *b = tw_writer_create(h.arb, HB_TARGET, TW_POLICY_DROP);
    ck_assert_uint_eq(h.registered, 2);
    tw_writer_destroy(a);
    ck_assert_uint_eq(h.unregistered, 1);
    smb_arbiter_shutdown(h.arb);
    a = tw_writer_create(h.arb, HB_TARGET, TW_POLICY_DROP);
    ck_assert_uint_eq(tw_writer_id(a), 0);          /* null writer */
    ck_assert_uint_eq(h.registered, 2);
    tw_packet_begin(a);
    tw_add_varint(a, 1, 1);
    tw_packet_end(a);
    tw_writer_destroy(a);
    tw_writer_destroy(b);
    ck_assert_uint_eq(h.unregistered, 2);
    smb_arbiter_stats st;
    smb_arbiter_get_stats(h.arb, &st);
    ck_assert_uint_eq(st.writers_created, 2);
    ck_assert_uint_eq(st.null_writers, 1);
    hb_fini(&h);
}
END_TEST

static uint32_t word_of(smb_shm *shm, uint32_t page_size, uint32_t page)
{
    return atomic_load(&smb_page_at(shm->base, page_size, page)
                        ->header_bitmap);
}

/* smb__arbiter_exchange: takes a run of chunks with consecutive ids, at
 * most 1/4 of the SMB; returns a run as one batch, in order; a one-chunk
 * page goes BeingWritten -> Complete (the store path) to the same word the
 * ABI's CAS gives. */
START_TEST(test_exchange_runs)
{
    rec r;
    smb_shm shm;
    smb__chunk_loc a[16], b[16];
    const uint32_t D1 = SMB_LAYOUT_DIV1 << SMB_LAYOUT_SHIFT;
    const uint16_t pk = smb_make_packets(1,
            SMB_FLAG_FIRST_PACKET_CONTINUES_FROM_PREV);
    smb_arbiter *arb = rec_arbiter(&r, &shm, 32 * 4096, 4096, 0, 0);
    ck_assert_uint_eq(smb__arbiter_chunk_payload(arb), 4080);
    ck_assert_uint_eq(smb__arbiter_exchange(arb, NULL, 0, 1, NULL, 0, 3,
                                            100, pk, 5, a), 5);
    for (uint32_t i = 0; i < 5; i++) {
        ck_assert_uint_eq(a[i].page, i);
        ck_assert_uint_eq(a[i].idx, 0);
        ck_assert_uint_eq(a[i].payload_size, 4080);
        ck_assert_ptr_eq(a[i].payload, (uint8_t *)a[i].hdr + 8);
        ck_assert_uint_eq(atomic_load(&a[i].hdr->chunk_id), 100 + i);
        ck_assert_uint_eq(atomic_load(&a[i].hdr->writer_id), 3);
        ck_assert_uint_eq(atomic_load(&a[i].hdr->packets), pk);
        ck_assert_uint_eq(word_of(&shm, 4096, i),
                          D1 | SMB_CHUNK_BEING_WRITTEN);
    }
    ck_assert_uint_eq(r.batches, 0);
    /* Return the run, take more: capped at 32 / 4 = 8. */
    ck_assert_uint_eq(smb__arbiter_exchange(arb, a, 5, 1, NULL, 0, 3, 200,
                                            pk, 20, b), 8);
    ck_assert_uint_eq(r.batches, 1);
    ck_assert_uint_eq(r.nlast, 5);
    for (uint32_t i = 0; i < 5; i++) {
        ck_assert_uint_eq(r.last[i].page, i);
        ck_assert_uint_eq(word_of(&shm, 4096, i), D1 | SMB_CHUNK_COMPLETE);
    }
    for (uint32_t i = 0; i < 8; i++) {
        ck_assert_uint_eq(b[i].page, 5 + i);
        ck_assert_uint_eq(atomic_load(&b[i].hdr->chunk_id), 200 + i);
    }
    /* A page of a foreign layout (a peer's doing): a run skips it, a
     * single acquisition takes it with that layout's chunk size. */
    atomic_store(&smb_page_at(shm.base, 4096, 13)->header_bitmap,
                 SMB_LAYOUT_DIV2 << SMB_LAYOUT_SHIFT);
    ck_assert_uint_eq(smb__arbiter_exchange(arb, NULL, 0, 1, NULL, 0, 3,
                                            300, pk, 2, a), 2);
    ck_assert_uint_eq(a[0].page, 14);
    ck_assert_uint_eq(a[1].page, 15);
    ck_assert_uint_eq(smb__arbiter_exchange(arb, NULL, 0, 1, NULL, 0, 3,
                                            302, pk, 1, a + 2), 1);
    ck_assert_uint_eq(a[2].page, 16);    /* the cursor moved on */
    smb_arbiter_stats st;
    smb_arbiter_get_stats(arb, &st);
    ck_assert_uint_eq(st.chunks_acquired, 16);
    ck_assert_uint_eq(st.chunks_returned, 5);
    smb_arbiter_destroy(arb);
    smb_shm_unmap(&shm);

    /* Foreign page met by a single acquisition. */
    arb = rec_arbiter(&r, &shm, 4 * 4096, 4096, 0, 0);
    atomic_store(&smb_page_at(shm.base, 4096, 0)->header_bitmap,
                 SMB_LAYOUT_DIV2 << SMB_LAYOUT_SHIFT);
    ck_assert_uint_eq(smb__arbiter_exchange(arb, NULL, 0, 1, NULL, 0, 3, 0,
                                            pk, 1, a), 1);
    ck_assert_uint_eq(a[0].page, 0);
    ck_assert_uint_eq(a[0].payload_size,
                      smb_chunk_size(4096, SMB_LAYOUT_DIV2) - 8);
    smb__arbiter_exchange(arb, a, 1, 1, NULL, 0, 0, 0, 0, 0, NULL);
    ck_assert_uint_eq(word_of(&shm, 4096, 0),
                      (SMB_LAYOUT_DIV2 << SMB_LAYOUT_SHIFT) |
                      SMB_CHUNK_COMPLETE);
    smb_arbiter_destroy(arb);
    smb_shm_unmap(&shm);
}
END_TEST

/* Several chunks per page (Div4): a run fills a page in ascending index,
 * and returning one chunk leaves its neighbours' states alone (the CAS
 * path). */
START_TEST(test_exchange_multi_chunk_pages)
{
    rec r;
    smb_shm shm;
    smb__chunk_loc a[8];
    const uint32_t D4 = SMB_LAYOUT_DIV4 << SMB_LAYOUT_SHIFT;
    smb_arbiter *arb = rec_arbiter(&r, &shm, 8 * 4096, 4096,
                                   SMB_LAYOUT_DIV4, 0);
    ck_assert_uint_eq(smb__arbiter_exchange(arb, NULL, 0, 1, NULL, 0, 1, 0,
                                            0, 6, a), 6);
    for (uint32_t i = 0; i < 6; i++) {
        ck_assert_uint_eq(a[i].page, i / 4);
        ck_assert_uint_eq(a[i].idx, i % 4);
        ck_assert_uint_eq(atomic_load(&a[i].hdr->chunk_id), i);
    }
    ck_assert_uint_eq(word_of(&shm, 4096, 0), D4 | 0x55u);
    ck_assert_uint_eq(word_of(&shm, 4096, 1), D4 | 0x5u);
    smb__arbiter_exchange(arb, a + 1, 1, 1, NULL, 0, 0, 0, 0, 0, NULL);
    ck_assert_uint_eq(word_of(&shm, 4096, 0), D4 | 0x5Du);
    smb_arbiter_destroy(arb);
    smb_shm_unmap(&shm);
}
END_TEST

static Suite *arbiter_suite(void)
{
    Suite *s = suite_create("arbiter");
    TCK_CASE(s, "create", test_create_validates_arguments,
             test_create_shm_and_from_fd_share_memory,
             test_from_fd_prefaults_the_smb);
    TCK_CASE(s, "pages", test_pages_partitioned_on_demand_in_order);
    TCK_CASE(s, "batching", test_batching_by_bytes_and_flush,
             test_batch_sent_at_half_the_smb,
             test_pending_batch_sent_before_giving_up,
             test_batch_patches_wait_for_the_batch,
             test_batch_patches_read_back_whole);
    TCK_CASE(s, "writers", test_writers_registered_and_shutdown);
    TCK_CASE(s, "exchange", test_exchange_runs,
             test_exchange_multi_chunk_pages);
    return s;
}

TCK_MAIN(arbiter_suite)
