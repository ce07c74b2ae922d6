/*
 * check_smb.c - the SMB ABI (constants, layouts, offsets, the chunk state
 * machine incl. illegal transitions), the shared-memory object, and the
 * service-side reader fed hostile pages.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "check_smb_harness.h"
#include "tck_main.h"

/* --- ABI constants and layouts ---------------------------------------- */

START_TEST(test_abi_constants)
{
    ck_assert_uint_eq(SMB_MIN_PAGE_SIZE, 4096);
    ck_assert_uint_eq(SMB_MAX_PAGE_SIZE, 65536);
    ck_assert_uint_eq(SMB_MAX_CHUNKS_PER_PAGE, 14);
    ck_assert_uint_eq(SMB_PACKET_HEADER_SIZE, 4);
    ck_assert_uint_eq(SMB_PACKET_SIZE_DROP_PACKET, 268435455u);
    ck_assert_uint_eq(SMB_CHUNK_ALIGNMENT, 4);
    ck_assert_uint_eq(SMB_MAX_CHUNK_SIZE, 65536);
    ck_assert_uint_eq(SMB_MAX_PACKETS_PER_CHUNK, 1023);
    ck_assert_uint_eq(SMB_MAX_WRITER_ID, 32767);
    ck_assert_uint_eq(SMB_MAX_CHUNK_ID, 0xFFFFFFFFu);
    ck_assert_uint_eq(SMB_LAYOUT_MASK, 0x70000000u);
    ck_assert_uint_eq(SMB_LAYOUT_SHIFT, 28);
    ck_assert_uint_eq(SMB_ALL_CHUNKS_MASK, 0x0FFFFFFFu);
    ck_assert_uint_eq(SMB_CHUNK_FREE, 0);
    ck_assert_uint_eq(SMB_CHUNK_BEING_WRITTEN, 1);
    ck_assert_uint_eq(SMB_CHUNK_BEING_READ, 2);
    ck_assert_uint_eq(SMB_CHUNK_COMPLETE, 3);
    ck_assert_uint_eq(SMB_FLAG_FIRST_PACKET_CONTINUES_FROM_PREV, 1);
    ck_assert_uint_eq(SMB_FLAG_LAST_PACKET_CONTINUES_ON_NEXT, 2);
    ck_assert_uint_eq(SMB_FLAG_NEEDS_PATCHING, 4);
    ck_assert_uint_eq(smb_make_packets(1, 0x6), 0x1801);
    ck_assert_uint_eq(smb_make_packets(2, 0x1), 0x0402);
    ck_assert_uint_eq(smb_packets_count(0x1801), 1);
    ck_assert_uint_eq(smb_packets_flags(0x1801), 6);
    ck_assert_uint_eq(smb_make_packets(1023, 0x3F), 0xFFFF);
    /* libbuf uses the same flag and sentinel values. */
    ck_assert_uint_eq(TB_CHUNK_FIRST_PACKET_CONTINUES_FROM_PREV,
                      SMB_FLAG_FIRST_PACKET_CONTINUES_FROM_PREV);
    ck_assert_uint_eq(TB_CHUNK_LAST_PACKET_CONTINUES_ON_NEXT,
                      SMB_FLAG_LAST_PACKET_CONTINUES_ON_NEXT);
    ck_assert_uint_eq(TB_CHUNK_NEEDS_PATCHING, SMB_FLAG_NEEDS_PATCHING);
    ck_assert_uint_eq(TB_PACKET_SIZE_DROP_PACKET,
                      SMB_PACKET_SIZE_DROP_PACKET);
}
END_TEST

START_TEST(test_abi_struct_offsets)
{
    ck_assert_uint_eq(sizeof(smb_page_header), 8);
    ck_assert_uint_eq(offsetof(smb_page_header, header_bitmap), 0);
    ck_assert_uint_eq(offsetof(smb_page_header, reserved), 4);
    ck_assert_uint_eq(sizeof(smb_chunk_header), 8);
    ck_assert_uint_eq(_Alignof(smb_chunk_header), 4);
    ck_assert_uint_eq(offsetof(smb_chunk_header, chunk_id), 0);
    ck_assert_uint_eq(offsetof(smb_chunk_header, writer_id), 4);
    ck_assert_uint_eq(offsetof(smb_chunk_header, packets), 6);
    /* Little-endian byte placement of a header. */
    _Alignas(8) uint8_t mem[8];
    smb_chunk_header *c = (smb_chunk_header *)(void *)mem;
    atomic_store(&c->chunk_id, 0x11223344u);
    atomic_store(&c->writer_id, 0x5566);
    atomic_store(&c->packets, smb_make_packets(3, 0x4));
    ck_assert_mem_eq(mem, "\x44\x33\x22\x11\x66\x55\x03\x10", 8);
}
END_TEST

START_TEST(test_abi_layout_chunk_sizes)
{
    static const uint32_t nchunks[8] = {0, 1, 2, 4, 7, 14, 0, 0};
    static const struct { uint32_t page, sizes[5]; } tab[] = {
        {4096, {4088, 2044, 1020, 584, 292}},
        {8192, {8184, 4092, 2044, 1168, 584}},
        {16384, {16376, 8188, 4092, 2336, 1168}},
        {32768, {32760, 16380, 8188, 4680, 2340}},
        {65536, {65528, 32764, 16380, 9360, 4680}},
    };
    for (uint32_t l = 0; l < 8; l++)
        ck_assert_uint_eq(smb_layout_num_chunks(l), nchunks[l]);
    for (size_t i = 0; i < 5; i++) {
        for (uint32_t l = 1; l <= 5; l++) {
            uint32_t cs = smb_chunk_size(tab[i].page, l);
            ck_assert_uint_eq(cs, tab[i].sizes[l - 1]);
            ck_assert_uint_eq(cs % 4, 0);
            ck_assert_uint_le(8 + cs * nchunks[l], tab[i].page);
        }
        ck_assert_uint_eq(smb_chunk_size(tab[i].page, 0), 0);
        ck_assert_uint_eq(smb_chunk_size(tab[i].page, 6), 0);
        ck_assert_uint_eq(smb_chunk_size(tab[i].page, 7), 0);
    }
    /* Chunk i starts at page offset 8 + i * chunk_size. */
    _Alignas(4096) static uint8_t page[4096];
    smb_page_header *ph = (smb_page_header *)(void *)page;
    for (uint32_t i = 0; i < 7; i++)
        ck_assert_ptr_eq((uint8_t *)smb_chunk_at(ph, 4096, SMB_LAYOUT_DIV7,
                                                 i), page + 8 + 584 * i);
    ck_assert(smb_page_size_valid(4096));
    ck_assert(smb_page_size_valid(65536));
    ck_assert(!smb_page_size_valid(4095));
    ck_assert(!smb_page_size_valid(6000));
    ck_assert(!smb_page_size_valid(131072));
    ck_assert(!smb_page_size_valid(0));
}
END_TEST

START_TEST(test_abi_page_word_helpers)
{
    uint32_t w = SMB_LAYOUT_DIV4 << 28;
    ck_assert_uint_eq(smb_word_layout(w), SMB_LAYOUT_DIV4);
    ck_assert(!smb_word_all_complete(w));
    for (uint32_t i = 0; i < 4; i++)
        w = smb_word_set_chunk_state(w, i, SMB_CHUNK_COMPLETE);
    ck_assert_uint_eq(w, 0x300000FFu);
    ck_assert(smb_word_all_complete(w));
    w = smb_word_set_chunk_state(w, 2, SMB_CHUNK_BEING_READ);
    ck_assert_uint_eq(smb_word_chunk_state(w, 2), SMB_CHUNK_BEING_READ);
    ck_assert(!smb_word_all_complete(w));
    ck_assert(!smb_word_all_complete(0));     /* 0 chunks: never */
    ck_assert(smb_word_all_complete((SMB_LAYOUT_DIV14 << 28) |
                                    SMB_ALL_CHUNKS_COMPLETE));
}
END_TEST

START_TEST(test_abi_redundant_varint)
{
    static const struct { uint32_t v; const char *b; } ex[] = {
        {0, "\x80\x80\x80\x00"}, {1, "\x81\x80\x80\x00"},
        {300, "\xAC\x82\x80\x00"}, {4080, "\xF0\x9F\x80\x00"},
        {0x0FFFFFFF, "\xFF\xFF\xFF\x7F"},
    };
    for (size_t i = 0; i < 5; i++) {
        uint8_t b[4];
        smb_write_redundant_varint(b, ex[i].v);
        ck_assert_mem_eq(b, ex[i].b, 4);
        ck_assert_uint_ne(b[0], 0);
    }
}
END_TEST

/* --- state machine -------------------------------------------------------- */

static _Alignas(4096) uint8_t g_page[4096];

static smb_page_header *fresh_page(void)
{
    memset(g_page, 0, sizeof(g_page));
    return (smb_page_header *)(void *)g_page;
}

START_TEST(test_state_full_cycle)
{
    smb_page_header *ph = fresh_page();
    ck_assert(smb_try_partition_page(ph, SMB_LAYOUT_DIV4));
    ck_assert_uint_eq(atomic_load(&ph->header_bitmap), 0x30000000u);
    smb_chunk_header *c = smb_try_acquire_chunk_for_writing(ph, 4096, 2, 9,
            77, smb_make_packets(1, 1));
    ck_assert_ptr_eq(c, smb_chunk_at(ph, 4096, SMB_LAYOUT_DIV4, 2));
    ck_assert_uint_eq(atomic_load(&c->writer_id), 9);
    ck_assert_uint_eq(atomic_load(&c->chunk_id), 77);
    ck_assert_uint_eq(atomic_load(&c->packets), 0x0401);
    ck_assert_uint_eq(smb_word_chunk_state(atomic_load(&ph->header_bitmap),
                                           2), SMB_CHUNK_BEING_WRITTEN);
    ck_assert_int_eq(smb_release_chunk_as_complete(ph, 2), 0);
    uint32_t cs = 0;
    ck_assert_ptr_eq(smb_try_acquire_chunk_for_reading(ph, 4096, 2, &cs), c);
    ck_assert_uint_eq(cs, 1020);
    ck_assert_uint_eq(smb_word_chunk_state(atomic_load(&ph->header_bitmap),
                                           2), SMB_CHUNK_BEING_READ);
    ck_assert_int_eq(smb_release_chunk_as_free(ph, 4096, 2), 0);
    /* Header zeroed, and the all-Free page is unpartitioned (word 0). */
    ck_assert_uint_eq(atomic_load(&c->writer_id), 0);
    ck_assert_uint_eq(atomic_load(&c->chunk_id), 0);
    ck_assert_uint_eq(atomic_load(&c->packets), 0);
    ck_assert_uint_eq(atomic_load(&ph->header_bitmap), 0);
}
END_TEST

START_TEST(test_state_free_keeps_layout_while_others_busy)
{
    smb_page_header *ph = fresh_page();
    ck_assert(smb_try_partition_page(ph, SMB_LAYOUT_DIV2));
    ck_assert_ptr_nonnull(smb_try_acquire_chunk_for_writing(ph, 4096, 0, 1,
                                                            0, 0));
    ck_assert_ptr_nonnull(smb_try_acquire_chunk_for_writing(ph, 4096, 1, 1,
                                                            1, 0));
    ck_assert_int_eq(smb_release_chunk_as_complete(ph, 1), 0);
    ck_assert_ptr_nonnull(smb_try_acquire_chunk_for_reading(ph, 4096, 1,
                                                            NULL));
    ck_assert_int_eq(smb_release_chunk_as_free(ph, 4096, 1), 0);
    ck_assert_uint_eq(atomic_load(&ph->header_bitmap), 0x20000001u);
}
END_TEST

START_TEST(test_state_illegal_transitions_refused)
{
    smb_page_header *ph = fresh_page();
    /* Nothing on an unpartitioned page. */
    ck_assert_ptr_null(smb_try_acquire_chunk_for_writing(ph, 4096, 0, 1, 0,
                                                         0));
    ck_assert_ptr_null(smb_try_acquire_chunk_for_reading(ph, 4096, 0, NULL));
    ck_assert_int_eq(smb_release_chunk_as_complete(ph, 0), -EINVAL);
    ck_assert_int_eq(smb_release_chunk_as_free(ph, 4096, 0), -EINVAL);
    /* Reserved layouts cannot be partitioned to. */
    ck_assert(!smb_try_partition_page(ph, 0));
    ck_assert(!smb_try_partition_page(ph, 6));
    ck_assert(!smb_try_partition_page(ph, 7));
    ck_assert(smb_try_partition_page(ph, SMB_LAYOUT_DIV1));
    ck_assert(!smb_try_partition_page(ph, SMB_LAYOUT_DIV2)); /* twice */
    /* Out of layout. */
    ck_assert_ptr_null(smb_try_acquire_chunk_for_writing(ph, 4096, 1, 1, 0,
                                                         0));
    ck_assert_ptr_null(smb_try_acquire_chunk_for_writing(ph, 4096, 13, 1, 0,
                                                         0));
    /* Free: cannot complete, read or free. */
    ck_assert_int_eq(smb_release_chunk_as_complete(ph, 0), -EINVAL);
    ck_assert_ptr_null(smb_try_acquire_chunk_for_reading(ph, 4096, 0, NULL));
    ck_assert_int_eq(smb_release_chunk_as_free(ph, 4096, 0), -EINVAL);
    /* BeingWritten: cannot acquire again, read or free. */
    ck_assert_ptr_nonnull(smb_try_acquire_chunk_for_writing(ph, 4096, 0, 1,
                                                            0, 0));
    ck_assert_ptr_null(smb_try_acquire_chunk_for_writing(ph, 4096, 0, 2, 0,
                                                         0));
    ck_assert_ptr_null(smb_try_acquire_chunk_for_reading(ph, 4096, 0, NULL));
    ck_assert_int_eq(smb_release_chunk_as_free(ph, 4096, 0), -EINVAL);
    ck_assert_int_eq(smb_release_complete_chunk_as_free(ph, 4096, 0),
                     -EINVAL);
    /* Complete: cannot complete twice, write, or free without reading. */
    ck_assert_int_eq(smb_release_chunk_as_complete(ph, 0), 0);
    ck_assert_int_eq(smb_release_chunk_as_complete(ph, 0), -EINVAL);
    ck_assert_ptr_null(smb_try_acquire_chunk_for_writing(ph, 4096, 0, 1, 0,
                                                         0));
    ck_assert_int_eq(smb_release_chunk_as_free(ph, 4096, 0), -EINVAL);
    /* BeingRead: cannot read again, complete, or write. */
    ck_assert_ptr_nonnull(smb_try_acquire_chunk_for_reading(ph, 4096, 0,
                                                            NULL));
    ck_assert_ptr_null(smb_try_acquire_chunk_for_reading(ph, 4096, 0, NULL));
    ck_assert_int_eq(smb_release_chunk_as_complete(ph, 0), -EINVAL);
    ck_assert_ptr_null(smb_try_acquire_chunk_for_writing(ph, 4096, 0, 1, 0,
                                                         0));
    ck_assert_int_eq(smb_release_complete_chunk_as_free(ph, 4096, 0),
                     -EINVAL);
    ck_assert_int_eq(smb_release_chunk_as_free(ph, 4096, 0), 0);
    ck_assert_uint_eq(atomic_load(&ph->header_bitmap), 0);
}
END_TEST

START_TEST(test_state_emulation_complete_to_free)
{
    smb_page_header *ph = fresh_page();
    ck_assert(smb_try_partition_page(ph, SMB_LAYOUT_DIV14));
    ck_assert_ptr_nonnull(smb_try_acquire_chunk_for_writing(ph, 4096, 13, 1,
                                                            0, 0));
    ck_assert_int_eq(smb_release_chunk_as_complete(ph, 13), 0);
    ck_assert_int_eq(smb_release_complete_chunk_as_free(ph, 4096, 13), 0);
    ck_assert_uint_eq(atomic_load(&ph->header_bitmap), 0);
}
END_TEST

/* Many threads race Free->BeingWritten on one Div14 page: each chunk is
 * won exactly once. */
static smb_page_header *g_race_page;
static _Atomic int g_wins[14];

static void *race_main(void *p)
{
    (void)p;
    for (uint32_t i = 0; i < 14; i++)
        if (smb_try_acquire_chunk_for_writing(g_race_page, 4096, i, 1, i, 0))
            atomic_fetch_add(&g_wins[i], 1);
    return NULL;
}

START_TEST(test_state_concurrent_acquire_is_exclusive)
{
    for (int round = 0; round < 200; round++) {
        pthread_t t[4];
        g_race_page = fresh_page();
        for (int i = 0; i < 14; i++)
            atomic_store(&g_wins[i], 0);
        smb_try_partition_page(g_race_page, SMB_LAYOUT_DIV14);
        for (int i = 0; i < 4; i++)
            pthread_create(&t[i], NULL, race_main, NULL);
        for (int i = 0; i < 4; i++)
            pthread_join(t[i], NULL);
        for (int i = 0; i < 14; i++)
            ck_assert_int_eq(atomic_load(&g_wins[i]), 1);
        ck_assert_uint_eq(atomic_load(&g_race_page->header_bitmap),
                          0x50000000u | 0x05555555u);
    }
}
END_TEST

/* --- shared memory ------------------------------------------------------- */

START_TEST(test_shm_create_map_unmap)
{
    smb_shm a, b;
    ck_assert_int_eq(smb_shm_create(64 * 1024, &a), 0);
    ck_assert_ptr_nonnull(a.base);
    ck_assert_uint_eq(a.size, 64 * 1024);
    ck_assert_int_ge(a.fd, 0);
    ck_assert_uint_eq(((uintptr_t)a.base) & 4095, 0);
    for (size_t i = 0; i < a.size; i += 4096)
        ck_assert_uint_eq(a.base[i], 0);          /* zero = all free */
    struct stat st;
    ck_assert_int_eq(fstat(a.fd, &st), 0);
    ck_assert_uint_eq(st.st_mode & 0777, 0600);
    ck_assert_int_eq(smb_shm_map(a.fd, SMB_SHM_REQUIRE_SEALS, &b), 0);
    ck_assert_ptr_ne(a.base, b.base);
    ck_assert_int_ne(a.fd, b.fd);                 /* dup'ed */
    ck_assert_uint_eq(b.size, a.size);
    a.base[12345] = 0x5A;
    ck_assert_uint_eq(b.base[12345], 0x5A);       /* same memory */
#ifdef F_GET_SEALS
    int seals = fcntl(a.fd, F_GET_SEALS);
    if (seals >= 0) {   /* memfd: sealed against resizing */
        ck_assert(seals & F_SEAL_SHRINK);
        ck_assert(seals & F_SEAL_GROW);
        ck_assert_int_ne(ftruncate(a.fd, 4096), 0);
    }
#endif
    smb_shm_unmap(&a);
    ck_assert_ptr_null(a.base);
    ck_assert_int_eq(a.fd, -1);
    smb_shm_unmap(&a);                            /* no-op */
    ck_assert_uint_eq(b.base[12345], 0x5A);       /* b still maps it */
    smb_shm_unmap(&b);
    smb_shm_unmap(NULL);
}
END_TEST

START_TEST(test_shm_errors_are_clear)
{
    smb_shm s;
    memset(&s, 0, sizeof(s));
    ck_assert_int_eq(smb_shm_create(0, &s), -EINVAL);
    ck_assert_int_eq(smb_shm_create(5000, &s), -EINVAL);
    ck_assert_int_eq(smb_shm_create(4096, NULL), -EINVAL);
    ck_assert_int_eq(smb_shm_map(-1, 0, &s), -EINVAL);
    ck_assert_int_eq(smb_shm_map(1000000, 0, &s), -EBADF);
    ck_assert_ptr_null(s.base);
    /* An object of a size that is not a multiple of 4096. */
    int fd = memfd_create("odd", 0);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(ftruncate(fd, 5000), 0);
    ck_assert_int_eq(smb_shm_map(fd, 0, &s), -EINVAL);
    /* An unsealed memfd when seals are required. */
    ck_assert_int_eq(ftruncate(fd, 8192), 0);
    ck_assert_int_eq(smb_shm_map(fd, SMB_SHM_REQUIRE_SEALS, &s), -EPERM);
    ck_assert_int_eq(smb_shm_map(fd, 0, &s), 0);
    smb_shm_unmap(&s);
    close(fd);
    ck_assert_str_eq(smb_strerror(-EINVAL), strerror(EINVAL));
    ck_assert_str_eq(smb_strerror(-EBADF), strerror(EBADF));
    ck_assert_str_eq(smb_strerror(0), "success");
    ck_assert_str_eq(smb_version(), PACKAGE_VERSION);
}
END_TEST

START_TEST(test_shm_shared_across_fork)
{
    smb_shm s;
    ck_assert_int_eq(smb_shm_create(8192, &s), 0);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        smb_shm m;
        if (smb_shm_map(s.fd, SMB_SHM_REQUIRE_SEALS, &m) != 0)
            _exit(1);
        memcpy(m.base + 4096, "from the child", 15);
        _exit(0);
    }
    int status;
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    ck_assert_str_eq((char *)s.base + 4096, "from the child");
    smb_shm_unmap(&s);
}
END_TEST

/* --- reader vs hostile memory -------------------------------------------- */

typedef struct {
    smb_shm shm;
    smb_reader *r;
    tb_buffer *buf;
    uint32_t page_size;
} rfix;

static tb_buffer *rfix_resolve(void *ctx, uint32_t target, uint16_t wid)
{
    rfix *f = ctx;
    (void)wid;
    return target == 0 || target == 1 ? f->buf : NULL;
}

static void rfix_init(rfix *f, size_t size, uint32_t page_size)
{
    ck_assert_int_eq(smb_shm_create(size, &f->shm), 0);
    f->page_size = page_size;
    f->r = smb_reader_create(f->shm.base, size, page_size, 3, 1000, 1);
    ck_assert_ptr_nonnull(f->r);
    f->buf = tb_create(1024 * 1024, TB_RING_BUFFER);
}

static void rfix_fini(rfix *f)
{
    smb_reader_destroy(f->r);
    tb_destroy(f->buf);
    smb_shm_unmap(&f->shm);
}

START_TEST(test_reader_create_rejects_bad_geometry)
{
    _Alignas(4096) static uint8_t mem[8192];
    errno = 0;
    ck_assert_ptr_null(smb_reader_create(NULL, 8192, 4096, 1, 0, 0));
    ck_assert_int_eq(errno, EINVAL);
    ck_assert_ptr_null(smb_reader_create(mem, 8192, 3000, 1, 0, 0));
    ck_assert_ptr_null(smb_reader_create(mem, 6000, 4096, 1, 0, 0));
    ck_assert_ptr_null(smb_reader_create(mem, 0, 4096, 1, 0, 0));
    smb_reader_destroy(NULL);
}
END_TEST

/* A well-formed Complete chunk with one 5-byte packet. */
static void put_chunk(rfix *f, uint32_t page, uint32_t layout, uint32_t idx,
                      uint16_t writer, uint32_t chunk_id)
{
    smb_page_header *ph = smb_page_at(f->shm.base, f->page_size, page);
    smb_try_partition_page(ph, layout);
    smb_chunk_header *c = smb_try_acquire_chunk_for_writing(ph, f->page_size,
            idx, writer, chunk_id, smb_make_packets(1, 0));
    ck_assert_ptr_nonnull(c);
    memcpy(smb_chunk_payload(c), "\x05\x40\x01\x50\x02\x00", 6);
    ck_assert_int_eq(smb_release_chunk_as_complete(ph, idx), 0);
}

START_TEST(test_reader_commit_validates_requests)
{
    rfix f;
    rfix_init(&f, 4 * 4096, 4096);
    const smb_reader_stats *st = smb_reader_get_stats(f.r);
    /* page out of range, chunk out of layout, unpartitioned page */
    ck_assert_int_eq(smb_reader_commit_chunk(f.r, 4, 0, 1, rfix_resolve, &f),
                     -ERANGE);
    ck_assert_int_eq(smb_reader_commit_chunk(f.r, UINT32_MAX, 0, 1,
                     rfix_resolve, &f), -ERANGE);
    ck_assert_int_eq(smb_reader_commit_chunk(f.r, 0, 0, 1, rfix_resolve, &f),
                     -ERANGE);
    put_chunk(&f, 0, SMB_LAYOUT_DIV2, 1, 5, 0);
    ck_assert_int_eq(smb_reader_commit_chunk(f.r, 0, 2, 1, rfix_resolve, &f),
                     -ERANGE);
    ck_assert_uint_eq(st->bad_requests, 4);
    /* chunk 0 is Free: not complete */
    ck_assert_int_eq(smb_reader_commit_chunk(f.r, 0, 0, 1, rfix_resolve, &f),
                     -EAGAIN);
    ck_assert_uint_eq(st->not_complete, 1);
    /* unknown target buffer: discarded but freed */
    ck_assert_int_eq(smb_reader_commit_chunk(f.r, 0, 1, 9, rfix_resolve, &f),
                     -ENOENT);
    ck_assert_uint_eq(st->chunks_discarded, 1);
    ck_assert_uint_eq(atomic_load(&smb_page_at(f.shm.base, 4096, 0)
                                   ->header_bitmap), 0);
    /* good one */
    put_chunk(&f, 1, SMB_LAYOUT_DIV1, 0, 5, 1);
    ck_assert_int_eq(smb_reader_commit_chunk(f.r, 1, 0, 1, rfix_resolve, &f),
                     0);
    ck_assert_uint_eq(st->chunks_moved, 1);
    ck_assert_uint_eq(st->abi_violations, 0);
    /* a chunk committed twice: the second time it is Free */
    ck_assert_int_eq(smb_reader_commit_chunk(f.r, 1, 0, 1, rfix_resolve, &f),
                     -ERANGE);
    tb_begin_read(f.buf);
    tb_packet p;
    tb_seq_props props;
    ck_assert(tb_read_next_packet(f.buf, &p, &props, NULL));
    ck_assert_uint_eq(p.size, 5);
    ck_assert_uint_eq(props.producer_id, 3);
    ck_assert_uint_eq(props.writer_id, 5);
    ck_assert_uint_eq(props.uid, 1000);
    rfix_fini(&f);
}
END_TEST

START_TEST(test_reader_bad_headers_are_violations)
{
    rfix f;
    rfix_init(&f, 4 * 4096, 4096);
    const smb_reader_stats *st = smb_reader_get_stats(f.r);
    put_chunk(&f, 0, SMB_LAYOUT_DIV1, 0, 5, 0);
    smb_chunk_header *c = smb_chunk_at(smb_page_at(f.shm.base, 4096, 0), 4096,
                                       SMB_LAYOUT_DIV1, 0);
    atomic_store(&c->writer_id, 0);                  /* invalid writer */
    ck_assert_int_eq(smb_reader_commit_chunk(f.r, 0, 0, 1, rfix_resolve, &f),
                     -EPROTO);
    ck_assert_uint_eq(st->abi_violations, 1);
    ck_assert_uint_eq(atomic_load(&smb_page_at(f.shm.base, 4096, 0)
                                   ->header_bitmap), 0);   /* freed */
    put_chunk(&f, 0, SMB_LAYOUT_DIV1, 0, 40000, 0);  /* writer > 32767 */
    ck_assert_int_eq(smb_reader_commit_chunk(f.r, 0, 0, 1, rfix_resolve, &f),
                     -EPROTO);
    put_chunk(&f, 0, SMB_LAYOUT_DIV1, 0, 5, 0);
    atomic_store(&c->packets, smb_make_packets(1, 0x20)); /* flag bit 5 */
    ck_assert_int_eq(smb_reader_commit_chunk(f.r, 0, 0, 1, rfix_resolve, &f),
                     -EPROTO);
    ck_assert_uint_eq(st->abi_violations, 3);
    /* Lying count: libbuf keeps the valid prefix and counts it. */
    put_chunk(&f, 0, SMB_LAYOUT_DIV1, 0, 5, 0);
    atomic_store(&c->packets, smb_make_packets(1000, 0));
    memset(smb_chunk_payload(c) + 6, 0xFF, 4080 - 6);  /* endless varint */
    ck_assert_int_eq(smb_reader_commit_chunk(f.r, 0, 0, 1, rfix_resolve, &f),
                     0);
    ck_assert_uint_ge(tb_get_stats(f.buf)->abi_violations, 1);
    rfix_fini(&f);
}
END_TEST

START_TEST(test_reader_patch_validation)
{
    rfix f;
    rfix_init(&f, 4 * 4096, 4096);
    const smb_reader_stats *st = smb_reader_get_stats(f.r);
    smb_patch p[2] = {{0, {1, 2, 3, 4}}, {2, {5, 6, 7, 8}}};
    smb_chunk_patches g = {1, 0, 0, 0, 0, 1, p};
    ck_assert_int_eq(smb_reader_apply_patches(f.r, &g, rfix_resolve, &f),
                     -EPROTO);                       /* writer 0 */
    g.writer_id = 32768;
    ck_assert_int_eq(smb_reader_apply_patches(f.r, &g, rfix_resolve, &f),
                     -EPROTO);
    g.writer_id = 5;
    g.npatches = 0;
    ck_assert_int_eq(smb_reader_apply_patches(f.r, &g, rfix_resolve, &f),
                     -EPROTO);
    g.npatches = 1025;
    ck_assert_int_eq(smb_reader_apply_patches(f.r, &g, rfix_resolve, &f),
                     -EPROTO);
    ck_assert_uint_eq(st->patches_discarded, 4);
    g.npatches = 1;
    g.target_buffer = 9;
    ck_assert_int_eq(smb_reader_apply_patches(f.r, &g, rfix_resolve, &f),
                     -ENOENT);
    g.target_buffer = 1;
    ck_assert_int_eq(smb_reader_apply_patches(f.r, &g, rfix_resolve, &f),
                     -ESRCH);                        /* no such chunk */
    ck_assert_uint_eq(st->patches_failed, 1);
    /* A real chunk: patch its payload in the buffer. */
    put_chunk(&f, 0, SMB_LAYOUT_DIV1, 0, 5, 0);
    smb_chunk_header *c = smb_chunk_at(smb_page_at(f.shm.base, 4096, 0), 4096,
                                       SMB_LAYOUT_DIV1, 0);
    atomic_store(&c->packets, smb_make_packets(1, SMB_FLAG_NEEDS_PATCHING));
    ck_assert_int_eq(smb_reader_commit_chunk(f.r, 0, 0, 1, rfix_resolve, &f),
                     0);
    p[0].offset = 1;
    memcpy(p[0].data, "\x48\x07\x50\x03", 4);
    ck_assert_int_eq(smb_reader_apply_patches(f.r, &g, rfix_resolve, &f), 0);
    tb_begin_read(f.buf);
    tb_packet pk;
    ck_assert(tb_read_next_packet(f.buf, &pk, NULL, NULL));
    ck_assert_uint_eq(pk.size, 5);
    uint8_t got[5];
    size_t off = 0;
    for (size_t i = 0; i < pk.nslices; i++) {
        memcpy(got + off, pk.slices[i].data, pk.slices[i].size);
        off += pk.slices[i].size;
    }
    ck_assert_mem_eq(got, "\x48\x07\x50\x03\x00", 5);
    rfix_fini(&f);
}
END_TEST

START_TEST(test_reader_emulation_data)
{
    rfix f;
    rfix_init(&f, 4096, 4096);
    const smb_reader_stats *st = smb_reader_get_stats(f.r);
    /* chunk_id 1, writer 5, count 1, then one 5-byte packet */
    uint8_t chunk[14] = {1, 0, 0, 0, 5, 0, 1, 0,
                         0x05, 0x40, 0x01, 0x50, 0x02, 0x00};
    ck_assert_int_eq(smb_reader_commit_data(f.r, chunk, 7, true, 1,
                     rfix_resolve, &f), -EINVAL);
    ck_assert_int_eq(smb_reader_commit_data(f.r, chunk, 65536, true, 1,
                     rfix_resolve, &f), -EINVAL);
    ck_assert_int_eq(smb_reader_commit_data(f.r, NULL, 14, true, 1,
                     rfix_resolve, &f), -EINVAL);
    ck_assert_uint_eq(st->bad_requests, 3);
    ck_assert_int_eq(smb_reader_commit_data(f.r, chunk, 14, true, 9,
                     rfix_resolve, &f), -ENOENT);
    chunk[5] = 0x80;                                 /* writer 32773 */
    ck_assert_int_eq(smb_reader_commit_data(f.r, chunk, 14, true, 1,
                     rfix_resolve, &f), -EPROTO);
    ck_assert_uint_eq(st->abi_violations, 1);
    chunk[5] = 0;
    ck_assert_int_eq(smb_reader_commit_data(f.r, chunk, 14, true, 1,
                     rfix_resolve, &f), 0);
    tb_begin_read(f.buf);
    tb_packet p;
    tb_seq_props props;
    ck_assert(tb_read_next_packet(f.buf, &p, &props, NULL));
    ck_assert_uint_eq(p.size, 5);
    ck_assert_uint_eq(props.writer_id, 5);
    rfix_fini(&f);
}
END_TEST

/* Random garbage everywhere: page words, headers, payloads. The reader
 * may copy some of it (libbuf judges the fragments) but must not crash,
 * and every malformed header or word must be counted. */
START_TEST(test_reader_garbage_pages_counted_no_crash)
{
    static const uint32_t pages[] = {4096, 16384, 65536};
    uint32_t x = 12345;
    for (size_t ps = 0; ps < 3; ps++) {
        rfix f;
        rfix_init(&f, 4 * 65536, pages[ps]);
        uint32_t np = (uint32_t)(f.shm.size / pages[ps]);
        for (int round = 0; round < 30; round++) {
            for (size_t i = 0; i < f.shm.size; i += 4) {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                memcpy(f.shm.base + i, &x, 4);
            }
            if (round % 3 == 0) {    /* mostly Complete states: get read */
                for (uint32_t p = 0; p < np; p++) {
                    smb_page_header *ph = smb_page_at(f.shm.base, pages[ps],
                                                      p);
                    uint32_t w = atomic_load(&ph->header_bitmap);
                    atomic_store(&ph->header_bitmap,
                                 (w & 0xF0000000u) | 0x0FFFFFFFu);
                }
            }
            smb_reader_scrape(f.r, rfix_resolve, &f);
            for (uint32_t p = 0; p < np + 2; p++)
                for (uint32_t c = 0; c < 16; c++)
                    smb_reader_commit_chunk(f.r, p, c, 1, rfix_resolve, &f);
            smb_chunk_patches g = {1, x, (uint16_t)(x % 40000), 0, 0,
                                   1 + x % 3, NULL};
            smb_patch pp[3] = {{x % 5000, {1, 2, 3, 4}}, {x, {0}},
                               {UINT32_MAX, {9, 9, 9, 9}}};
            g.patches = pp;
            smb_reader_apply_patches(f.r, &g, rfix_resolve, &f);
        }
        const smb_reader_stats *st = smb_reader_get_stats(f.r);
        ck_assert_uint_gt(st->abi_violations, 0);
        ck_assert_uint_gt(st->bad_requests, 0);
        /* Read whatever libbuf accepted: must not crash either. */
        tb_packet pk;
        tb_begin_read(f.buf);
        while (tb_read_next_packet(f.buf, &pk, NULL, NULL))
            ;
        rfix_fini(&f);
    }
}
END_TEST

START_TEST(test_reader_lying_page_words)
{
    rfix f;
    rfix_init(&f, 2 * 4096, 4096);
    const smb_reader_stats *st = smb_reader_get_stats(f.r);
    smb_page_header *ph = smb_page_at(f.shm.base, 4096, 0);
    /* Reserved layout 6 with all state bits set: no chunks at all. */
    atomic_store(&ph->header_bitmap, 0x6FFFFFFFu);
    ck_assert_int_eq(smb_reader_commit_chunk(f.r, 0, 0, 1, rfix_resolve, &f),
                     -ERANGE);
    ck_assert_uint_eq(smb_reader_scrape(f.r, rfix_resolve, &f), 0);
    ck_assert_uint_ge(st->abi_violations, 1);
    /* Div1 with bit 31 and states for chunks that do not exist. */
    atomic_store(&ph->header_bitmap, 0x9000000Fu | 0x3u);
    uint64_t before = st->abi_violations;
    smb_reader_commit_chunk(f.r, 0, 0, 1, rfix_resolve, &f);
    ck_assert_uint_gt(st->abi_violations, before);
    /* BeingWritten chunk with count < 2 is not scraped. */
    memset(f.shm.base, 0, 4096);
    smb_try_partition_page(ph, SMB_LAYOUT_DIV1);
    smb_chunk_header *c = smb_try_acquire_chunk_for_writing(ph, 4096, 0, 5, 0,
            smb_make_packets(1, 0));
    ck_assert_ptr_nonnull(c);
    ck_assert_uint_eq(smb_reader_scrape(f.r, rfix_resolve, &f), 0);
    rfix_fini(&f);
}
END_TEST

/* The service's own transitions (smb_reader_acquire_for_reading /
 * smb_reader_release_as_free): plain stores on a Div1 page, the ABI's CAS
 * on any other; both leave the words the ABI's helpers leave. */
START_TEST(test_reader_service_transitions)
{
    rfix f;
    rfix_init(&f, 2 * 4096, 4096);
    smb_page_header *ph = smb_page_at(f.shm.base, 4096, 0);
    const uint32_t div1 = SMB_LAYOUT_DIV1 << SMB_LAYOUT_SHIFT;
    uint32_t size = 0, word;

    put_chunk(&f, 0, SMB_LAYOUT_DIV1, 0, 5, 7);
    word = atomic_load(&ph->header_bitmap);
    ck_assert_uint_eq(word, div1 | SMB_CHUNK_COMPLETE);
    /* chunk 1 does not exist on a Div1 page */
    ck_assert_ptr_null(smb_reader_acquire_for_reading(ph, 4096, 1, word,
                                                      &size));
    smb_chunk_header *c = smb_reader_acquire_for_reading(ph, 4096, 0, word,
                                                         &size);
    ck_assert_ptr_eq(c, (void *)(f.shm.base + SMB_PAGE_HEADER_SIZE));
    ck_assert_uint_eq(size, 4096 - SMB_PAGE_HEADER_SIZE);
    ck_assert_uint_eq(atomic_load(&ph->header_bitmap),
                      div1 | SMB_CHUNK_BEING_READ);
    ck_assert_uint_eq(atomic_load(&c->chunk_id), 7);
    /* not Complete any more: a second acquisition is refused */
    ck_assert_ptr_null(smb_reader_acquire_for_reading(ph, 4096, 0,
            atomic_load(&ph->header_bitmap), NULL));
    ck_assert_int_eq(smb_reader_release_as_free(ph, 4096, 0), 0);
    ck_assert_uint_eq(atomic_load(&ph->header_bitmap), 0);
    ck_assert_uint_eq(atomic_load(&c->chunk_id), 0);
    ck_assert_uint_eq(atomic_load(&c->writer_id), 0);
    ck_assert_uint_eq(atomic_load(&c->packets), 0);
    /* released twice: refused, the word stays free */
    ck_assert_int_eq(smb_reader_release_as_free(ph, 4096, 0), -EINVAL);
    ck_assert_uint_eq(atomic_load(&ph->header_bitmap), 0);

    /* A BeingWritten Div1 chunk is the producer's: nothing changes. */
    smb_try_partition_page(ph, SMB_LAYOUT_DIV1);
    ck_assert_ptr_nonnull(smb_try_acquire_chunk_for_writing(ph, 4096, 0, 5,
            8, smb_make_packets(1, 0)));
    word = atomic_load(&ph->header_bitmap);
    ck_assert_ptr_null(smb_reader_acquire_for_reading(ph, 4096, 0, word,
                                                      NULL));
    ck_assert_uint_eq(atomic_load(&ph->header_bitmap), word);
    ck_assert_int_eq(smb_reader_release_as_free(ph, 4096, 0), -EINVAL);
    ck_assert_uint_eq(atomic_load(&ph->header_bitmap), word);

    /* Div4: chunk 2 Complete beside a BeingWritten chunk 0 goes through
     * the CAS and leaves chunk 0 and the layout alone. */
    atomic_store(&ph->header_bitmap, 0);
    put_chunk(&f, 0, SMB_LAYOUT_DIV4, 2, 5, 9);
    ck_assert_ptr_nonnull(smb_try_acquire_chunk_for_writing(ph, 4096, 0, 6,
            1, smb_make_packets(1, 0)));
    word = atomic_load(&ph->header_bitmap);
    c = smb_reader_acquire_for_reading(ph, 4096, 2, word, &size);
    ck_assert_ptr_nonnull(c);
    ck_assert_uint_eq(size, smb_chunk_size(4096, SMB_LAYOUT_DIV4));
    ck_assert_uint_eq(atomic_load(&c->chunk_id), 9);
    ck_assert_uint_eq(smb_word_chunk_state(atomic_load(&ph->header_bitmap),
                                           2), SMB_CHUNK_BEING_READ);
    ck_assert_int_eq(smb_reader_release_as_free(ph, 4096, 2), 0);
    word = atomic_load(&ph->header_bitmap);
    ck_assert_uint_eq(smb_word_layout(word), SMB_LAYOUT_DIV4);
    ck_assert_uint_eq(smb_word_chunk_state(word, 2), SMB_CHUNK_FREE);
    ck_assert_uint_eq(smb_word_chunk_state(word, 0), SMB_CHUNK_BEING_WRITTEN);
    rfix_fini(&f);
}
END_TEST

/* A producer that rewrites its page word while the service reads the
 * chunk (here: from the resolve callback, between the two transitions). */
typedef struct {
    rfix f;
    uint32_t page, new_word;
} hostile_fix;

static tb_buffer *hostile_resolve(void *ctx, uint32_t target, uint16_t wid)
{
    hostile_fix *h = ctx;
    atomic_store(&smb_page_at(h->f.shm.base, 4096, h->page)->header_bitmap,
                 h->new_word);
    return rfix_resolve(&h->f, target, wid);
}

START_TEST(test_reader_word_changed_while_reading)
{
    hostile_fix h;
    const uint32_t div1 = SMB_LAYOUT_DIV1 << SMB_LAYOUT_SHIFT;
    const uint32_t words[] = {
        div1 | SMB_CHUNK_BEING_WRITTEN,       /* taken back */
        div1 | SMB_CHUNK_FREE,                /* freed by the producer */
        (SMB_LAYOUT_DIV2 << SMB_LAYOUT_SHIFT) | SMB_CHUNK_BEING_READ << 2,
        0x9000000Fu,                          /* reserved bits */
    };
    rfix_init(&h.f, 4 * 4096, 4096);
    const smb_reader_stats *st = smb_reader_get_stats(h.f.r);
    for (uint32_t i = 0; i < 4; i++) {
        uint64_t before = st->abi_violations;
        h.page = i;
        h.new_word = words[i];
        put_chunk(&h.f, i, SMB_LAYOUT_DIV1, 0, 5, i);
        /* moved all the same (from the private copy), counted */
        ck_assert_int_eq(smb_reader_commit_chunk(h.f.r, i, 0, 1,
                                                 hostile_resolve, &h), 0);
        ck_assert_uint_eq(st->abi_violations, before + 1);
        /* the service did not free what it no longer held */
        ck_assert_uint_eq(atomic_load(&smb_page_at(h.f.shm.base, 4096, i)
                                       ->header_bitmap), words[i]);
    }
    ck_assert_uint_eq(st->chunks_moved, 4);
    rfix_fini(&h.f);
}
END_TEST

/* Blocks the object behind f's SMB holds (512-byte units). */
static long shm_blocks(const rfix *f)
{
    struct stat st;
    ck_assert_int_eq(fstat(f->shm.fd, &st), 0);
    return (long)st.st_blocks;
}

/* With the SMB's fd, a scrape visits only the pages the producer wrote:
 * it finds the same chunks as the full walk, and leaves the pages never
 * written unallocated (the full walk's reads of their headers make the
 * kernel allocate them, which shows the test measures something). */
START_TEST(test_reader_scrape_skips_holes)
{
    /* SMBs under 2 MiB: where shmem THP is on, a larger one could be
     * backed by a huge page at its first write, and have no holes */
    static const uint32_t pages[] = {4096, 32768};
    for (size_t ps = 0; ps < 2; ps++) {
        rfix f;
        rfix_init(&f, 32 * (size_t)pages[ps], pages[ps]);
        put_chunk(&f, 5, SMB_LAYOUT_DIV1, 0, 5, 10);
        put_chunk(&f, 6, SMB_LAYOUT_DIV2, 1, 6, 20);
        put_chunk(&f, 31, SMB_LAYOUT_DIV1, 0, 7, 30);
        long written = shm_blocks(&f);
        ck_assert_int_lt(written, 32 * (long)pages[ps] / 512);
        smb_reader_set_fd(f.r, f.shm.fd);
        ck_assert_uint_eq(smb_reader_scrape(f.r, rfix_resolve, &f), 3);
        ck_assert_int_eq(shm_blocks(&f), written);
        /* a fd lseek cannot search (a pipe): every page, as without one */
        int pfd[2];
        ck_assert_int_eq(pipe(pfd), 0);
        smb_reader_set_fd(f.r, pfd[0]);
        ck_assert_uint_eq(smb_reader_scrape(f.r, rfix_resolve, &f), 3);
        close(pfd[0]);
        close(pfd[1]);
        ck_assert_int_gt(shm_blocks(&f), written);
        /* and without one */
        smb_reader_set_fd(f.r, -1);
        ck_assert_uint_eq(smb_reader_scrape(f.r, rfix_resolve, &f), 3);
        /* the chunks came through once each (libbuf drops the copies) */
        tb_begin_read(f.buf);
        tb_packet p;
        tb_seq_props props;
        uint32_t writers = 0, n = 0;
        while (tb_read_next_packet(f.buf, &p, &props, NULL)) {
            ck_assert_uint_eq(p.size, 5);
            writers |= 1u << props.writer_id;
            n++;
        }
        ck_assert_uint_eq(n, 3);
        ck_assert_uint_eq(writers, 1u << 5 | 1u << 6 | 1u << 7);
        rfix_fini(&f);
    }
}
END_TEST

/* A page with data past its header only (the header's system page a
 * hole) has nothing to scrape: its header reads as zeros. */
START_TEST(test_reader_scrape_data_without_header)
{
    rfix f;
    rfix_init(&f, 16 * 32768, 32768);
    memset(f.shm.base + 2 * 32768 + 8192, 0xAB, 4096);
    put_chunk(&f, 9, SMB_LAYOUT_DIV1, 0, 5, 1);
    smb_reader_set_fd(f.r, f.shm.fd);
    long before = shm_blocks(&f);
    ck_assert_uint_eq(smb_reader_scrape(f.r, rfix_resolve, &f), 1);
    ck_assert_int_eq(shm_blocks(&f), before);
    ck_assert_uint_eq(smb_reader_get_stats(f.r)->abi_violations, 0);
    rfix_fini(&f);
}
END_TEST

/* A chunk of fragments bytes[0..n) (count from the caller) in page `page`
 * (Div1), Complete. */
static void put_raw_chunk(rfix *f, uint32_t page, uint16_t count,
                          const uint8_t *bytes, size_t n)
{
    smb_page_header *ph = smb_page_at(f->shm.base, f->page_size, page);
    smb_try_partition_page(ph, SMB_LAYOUT_DIV1);
    smb_chunk_header *c = smb_try_acquire_chunk_for_writing(ph, f->page_size,
            0, 5, page, smb_make_packets(count, 0));
    ck_assert_ptr_nonnull(c);
    memcpy(smb_chunk_payload(c), bytes, n);
    ck_assert_int_eq(smb_release_chunk_as_complete(ph, 0), 0);
}

/* A committed chunk whose fragments end in the system page its payload
 * starts in is copied that far only: the pages behind, never written,
 * stay unallocated. Fragments past that point, a malformed size and the
 * drop marker are judged by libbuf as before, from the whole payload. */
START_TEST(test_reader_commit_copies_written_part)
{
    rfix f;
    rfix_init(&f, 8 * 32768, 32768);
    const tb_stats *ts = tb_get_stats(f.buf);
    static uint8_t big[7000];
    /* 1: two small fragments (packets of 3 and 5 bytes) */
    put_raw_chunk(&f, 1, 2, (const uint8_t *)"\x03" "abc" "\x05" "defgh", 10);
    long before = shm_blocks(&f);
    ck_assert_int_eq(smb_reader_commit_chunk(f.r, 1, 0, 1, rfix_resolve, &f),
                     0);
    ck_assert_int_eq(shm_blocks(&f), before);
    /* 2: one fragment of 6998 bytes, past the first system page */
    big[0] = 0xD6;              /* 6998 = 0x1B56: varint D6 36 */
    big[1] = 0x36;
    memset(big + 2, 'x', sizeof(big) - 2);
    put_raw_chunk(&f, 2, 1, big, sizeof(big));
    ck_assert_int_eq(smb_reader_commit_chunk(f.r, 2, 0, 1, rfix_resolve, &f),
                     0);
    /* 3: a second fragment claiming more than the chunk holds */
    put_raw_chunk(&f, 3, 2, (const uint8_t *)"\x02" "ab" "\xff\xff\x03", 6);
    ck_assert_int_eq(smb_reader_commit_chunk(f.r, 3, 0, 1, rfix_resolve, &f),
                     0);
    ck_assert_uint_eq(ts->abi_violations, 1);
    /* 4: the drop marker (a writer gave up on its packet) */
    put_raw_chunk(&f, 4, 2, (const uint8_t *)"\x01z\xff\xff\xff\x7f", 6);
    ck_assert_int_eq(smb_reader_commit_chunk(f.r, 4, 0, 1, rfix_resolve, &f),
                     0);
    ck_assert_uint_eq(ts->trace_writer_packet_loss, 1);
    ck_assert_uint_eq(ts->abi_violations, 1);
    static const size_t want[] = {3, 5, 6998, 2, 1};
    tb_begin_read(f.buf);
    tb_packet p;
    size_t n = 0;
    while (tb_read_next_packet(f.buf, &p, NULL, NULL)) {
        ck_assert_uint_lt(n, 5);
        ck_assert_uint_eq(p.size, want[n]);
        n++;
    }
    ck_assert_uint_eq(n, 5);
    rfix_fini(&f);
}
END_TEST

static Suite *smb_suite(void)
{
    Suite *s = suite_create("smb");
    TCK_CASE(s, "abi", test_abi_constants, test_abi_struct_offsets,
             test_abi_layout_chunk_sizes, test_abi_page_word_helpers,
             test_abi_redundant_varint);
    TCK_CASE(s, "state", test_state_full_cycle,
             test_state_free_keeps_layout_while_others_busy,
             test_state_illegal_transitions_refused,
             test_state_emulation_complete_to_free,
             test_state_concurrent_acquire_is_exclusive);
    TCK_CASE(s, "shm", test_shm_create_map_unmap, test_shm_errors_are_clear,
             test_shm_shared_across_fork);
    TCase *tc = TCK_CASE(s, "reader",
                         test_reader_create_rejects_bad_geometry,
                         test_reader_commit_validates_requests,
                         test_reader_bad_headers_are_violations,
                         test_reader_patch_validation,
                         test_reader_emulation_data,
                         test_reader_garbage_pages_counted_no_crash,
                         test_reader_lying_page_words,
                         test_reader_service_transitions,
                         test_reader_word_changed_while_reading,
                         test_reader_scrape_skips_holes,
                         test_reader_scrape_data_without_header,
                         test_reader_commit_copies_written_part);
    tcase_set_timeout(tc, 120);
    return s;
}

TCK_MAIN(smb_suite)
