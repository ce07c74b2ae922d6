/*
 * check_tw.c - TraceWriter: encoder, fragmentation, patches, chunk and
 * writer ids, threads, drop and stall policies, scraping, two processes.
 *
 * Packets go through the real path: tw_writer -> SMB (memfd) -> arbiter ->
 * transport -> smb_reader -> libbuf tb_buffer -> tb_read_next_packet, and
 * are compared byte for byte (or decoded with protobuf-c, an independent
 * encoder/decoder).
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <sys/wait.h>

#include "check_smb_harness.h"
#include "trace.pb-c.h"
#include "tw_int.h"

#define KiB 1024u
#define MiB (1024u * 1024u)

static void free_tp(Perfetto__Protos__TracePacket *tp)
{
    perfetto__protos__trace_packet__free_unpacked(tp, NULL);
}

static Perfetto__Protos__TracePacket *unpack(const hb_pkt *k)
{
    Perfetto__Protos__TracePacket *tp =
        perfetto__protos__trace_packet__unpack(NULL, k->size, k->data);
    ck_assert_msg(tp != NULL, "packet of %zu bytes does not parse", k->size);
    return tp;
}

/* --- encoder ------------------------------------------------------------- */

START_TEST(test_encode_small_packets_match_protobuf_c)
{
    hb h;
    hb_init(&h, 256 * KiB, 4096, 4 * MiB);
    tw_writer *w = tw_writer_create(h.arb, HB_TARGET, TW_POLICY_DROP);
    ck_assert_ptr_nonnull(w);
    ck_assert_uint_eq(tw_writer_id(w), 1);
    for (uint32_t i = 0; i < 1000; i++) {
        tw_packet_begin(w);
        tw_add_varint(w, 8, 1000000000ull + i);
        tw_begin_nested(w, 900);
        tw_add_string(w, 1, "hello");
        tw_add_varint(w, 2, i);
        tw_end_nested(w);
        tw_packet_end(w);
    }
    ck_assert_int_eq(tw_writer_flush(w), 0);
    hb_pkts ps = hb_read_all(&h);
    size_t straddled = 0;
    ck_assert_uint_eq(ps.n, 1000);
    for (uint32_t i = 0; i < ps.n; i++) {
        Perfetto__Protos__TracePacket *tp = unpack(&ps.v[i]);
        ck_assert(tp->has_timestamp);
        ck_assert_uint_eq(tp->timestamp, 1000000000ull + i);
        ck_assert_ptr_nonnull(tp->for_testing);
        ck_assert_str_eq(tp->for_testing->str, "hello");
        ck_assert_uint_eq(tp->for_testing->seq_value, i);
        ck_assert_int_eq(tp->has_first_packet_on_sequence, i == 0);
        ck_assert(!tp->has_previous_packet_dropped);
        if (i > 0) {
            /* Same fields in field-number order: protobuf-c's bytes,
             * unless the packet straddled two chunks: then the nested
             * size was patched and stays a 4-byte redundant varint. */
            uint8_t ref[64];
            size_t n = perfetto__protos__trace_packet__pack(tp, ref);
            if (n == ps.v[i].size)
                ck_assert_mem_eq(ref, ps.v[i].data, n);
            else
                ck_assert_uint_eq(n + 3, ps.v[i].size);
            straddled += n != ps.v[i].size;
        }
        free_tp(tp);
    }
    ck_assert_uint_eq(ps.v[0].writer_id, 1);
    ck_assert_uint_gt(straddled, 0);  /* 19 KB over 4 KiB chunks */
    hb_pkts_free(&ps);
    tw_writer_stats st;
    tw_writer_get_stats(w, &st);
    ck_assert_uint_eq(st.packets_written, 1000);
    ck_assert_uint_eq(st.packets_lost, 0);
    ck_assert_uint_eq(st.misuse, 0);
    tw_writer_destroy(w);
    ck_assert_uint_eq(h.registered, 1);
    ck_assert_uint_eq(h.unregistered, 1);
    hb_fini(&h);
}
END_TEST

START_TEST(test_encode_field_types)
{
    hb h;
    hb_init(&h, 64 * KiB, 4096, MiB);
    tw_writer *w = tw_writer_create(h.arb, HB_TARGET, TW_POLICY_DROP);
    uint8_t blob[300];
    hb_fill(blob, sizeof(blob), 3);
    tw_packet_begin(w);              /* the first packet carries field 87 */
    tw_packet_end(w);
    tw_packet_begin(w);
    tw_add_varint(w, 1, 0);
    tw_add_varint(w, 2, UINT64_MAX);
    tw_add_int64(w, 3, -1);
    tw_add_sint64(w, 4, -2);
    tw_add_fixed32(w, 5, 0xDEADBEEF);
    tw_add_fixed64(w, 6, 0x0123456789ABCDEFull);
    tw_add_double(w, 7, 1.5);
    tw_add_bytes(w, 8, blob, sizeof(blob));
    tw_add_string(w, 9, "");
    tw_add_varint(w, 0x1FFFFFFF, 5);             /* largest field number */
    tw_append_raw(w, "\x50\x07", 2);             /* field 10 = 7 */
    tw_packet_end(w);
    tw_writer_flush(w);

    hb_pkts ps = hb_read_all(&h);
    ck_assert_uint_eq(ps.n, 2);
    ck_assert_uint_eq(ps.v[0].size, 3);          /* B8 05 01 */
    ck_assert_mem_eq(ps.v[0].data, "\xB8\x05\x01", 3);
    const uint8_t *p = ps.v[1].data, *end = p + ps.v[1].size;
    hb_field f;
    double d = 1.5;
    uint64_t dbits;
    memcpy(&dbits, &d, 8);
    struct { uint32_t field, wt; uint64_t v; } want[] = {
        {1, 0, 0}, {2, 0, UINT64_MAX}, {3, 0, UINT64_MAX}, {4, 0, 3},
        {5, 5, 0xDEADBEEF}, {6, 1, 0x0123456789ABCDEFull}, {7, 1, dbits},
        {8, 2, sizeof(blob)}, {9, 2, 0}, {0x1FFFFFFF, 0, 5}, {10, 0, 7},
    };
    for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
        ck_assert(hb_next_field(&p, end, &f));
        ck_assert_uint_eq(f.field, want[i].field);
        ck_assert_uint_eq(f.wt, want[i].wt);
        ck_assert_uint_eq(f.v, want[i].v);
        if (f.field == 8)
            ck_assert_mem_eq(f.p, blob, sizeof(blob));
    }
    ck_assert(!hb_next_field(&p, end, &f));
    /* -1 as int64 is a 10-byte varint, as protobuf encodes it. */
    ck_assert_uint_eq(ps.v[1].size,
                      2 + 11 + 11 + 2 + 5 + 9 + 9 + 3 + 300 + 2 + 6 + 2);
    hb_pkts_free(&ps);
    tw_writer_destroy(w);
    hb_fini(&h);
}
END_TEST

/* Recursive nested payloads: depth levels, each with a string of `len`. */
static void write_nested(tw_writer *w, unsigned depth, size_t len,
                         const char *s)
{
    tw_add_bytes(w, 1, s, len);
    tw_add_varint(w, 3, depth);
    if (depth > 0) {
        tw_begin_nested(w, 2);
        write_nested(w, depth - 1, len, s);
        tw_end_nested(w);
    }
}

static void check_nested(const Perfetto__Protos__TestEvent__TestPayload *p,
                         unsigned depth, size_t len, const char *s)
{
    ck_assert_uint_eq(p->n_str, 1);
    ck_assert_uint_eq(strlen(p->str[0]), len);
    ck_assert_mem_eq(p->str[0], s, len);
    ck_assert_uint_eq(p->remaining_nesting_depth, depth);
    if (depth > 0) {
        ck_assert_uint_eq(p->n_nested, 1);
        check_nested(p->nested[0], depth - 1, len, s);
    } else {
        ck_assert_uint_eq(p->n_nested, 0);
    }
}

START_TEST(test_encode_nested_messages)
{
    /* Small bodies (compacted 1-byte sizes), bodies > 127 (4-byte
     * redundant varints) and bodies spanning chunks (patches). */
    static const size_t lens[] = {1, 20, 120, 200, 1500, 5000};
    char *s = malloc(5001);
    hb h;
    hb_init(&h, 256 * KiB, 4096, 8 * MiB);
    tw_writer *w = tw_writer_create(h.arb, HB_TARGET, TW_POLICY_DROP);
    for (size_t i = 0; i < 5000; i++)
        s[i] = (char)('a' + i % 26);
    s[5000] = 0;
    for (size_t k = 0; k < 6; k++) {
        tw_packet_begin(w);
        tw_begin_nested(w, 900);
        tw_add_varint(w, 2, (uint32_t)k);
        tw_begin_nested(w, 5);
        write_nested(w, 6, lens[k], s);
        tw_end_nested(w);
        tw_end_nested(w);
        tw_packet_end(w);
    }
    tw_writer_flush(w);
    hb_pkts ps = hb_read_all(&h);
    ck_assert_uint_eq(ps.n, 6);
    for (size_t k = 0; k < 6; k++) {
        Perfetto__Protos__TracePacket *tp = unpack(&ps.v[k]);
        ck_assert_ptr_nonnull(tp->for_testing);
        ck_assert_uint_eq(tp->for_testing->seq_value, k);
        check_nested(tp->for_testing->payload, 6, lens[k], s);
        free_tp(tp);
    }
    ck_assert_uint_gt(h.patches, 0);
    ck_assert_uint_eq(tb_get_stats(h.buf)->patches_failed, 0);
    ck_assert_uint_gt(tb_get_stats(h.buf)->patches_succeeded, 0);
    hb_pkts_free(&ps);
    tw_writer_destroy(w);
    hb_fini(&h);
    free(s);
}
END_TEST

START_TEST(test_encode_misuse_is_counted_not_fatal)
{
    hb h;
    hb_init(&h, 64 * KiB, 4096, MiB);
    tw_writer *w = tw_writer_create(h.arb, HB_TARGET, TW_POLICY_DROP);
    tw_writer_stats st;
    tw_add_varint(w, 1, 1);          /* outside a packet */
    tw_end_nested(w);
    tw_packet_end(w);
    tw_packet_begin(w);
    tw_add_varint(w, 0, 1);          /* field 0 */
    tw_add_string(w, 1, NULL);
    for (int i = 0; i < TW_MAX_NESTING + 3; i++)
        tw_begin_nested(w, 2);       /* 3 levels too deep */
    tw_add_varint(w, 1, 1);
    ck_assert_int_eq(tw_writer_flush(w), -EBUSY);
    tw_packet_end(w);                /* closes everything still open */
    tw_writer_get_stats(w, &st);
    ck_assert_uint_eq(st.misuse, 8);
    tw_writer_flush(w);
    hb_pkts ps = hb_read_all(&h);
    ck_assert_uint_eq(ps.n, 1);
    hb_pkts_free(&ps);
    tw_writer_destroy(w);
    hb_fini(&h);
}
END_TEST

/* --- chunk bytes --------------------------------------------------------- */

static smb_chunk_header *chunk_of_page(hb *h, uint32_t page)
{
    smb_page_header *ph = smb_page_at(h->shm.base, h->page_size, page);
    return smb_chunk_at(ph, h->page_size, SMB_LAYOUT_DIV1, 0);
}

START_TEST(test_chunk_header_and_framing_bytes)
{
    hb h;
    hb_init_ex(&h, 64 * KiB, 4096, 0, MiB, HB_QUEUED, 0);
    hb_pause(&h);                    /* chunks stay in the SMB */
    tw_writer *w = tw_writer_create(h.arb, HB_TARGET, TW_POLICY_DROP);
    tw_packet_begin(w);
    tw_add_varint(w, 8, 5);
    tw_packet_end(w);
    smb_chunk_header *c = chunk_of_page(&h, 0);
    uint8_t *pl = smb_chunk_payload(c);
    smb_page_header *ph = smb_page_at(h.shm.base, 4096, 0);
    uint32_t word = atomic_load(&ph->header_bitmap);
    ck_assert_uint_eq(smb_word_layout(word), SMB_LAYOUT_DIV1);
    ck_assert_uint_eq(smb_word_chunk_state(word, 0), SMB_CHUNK_BEING_WRITTEN);
    ck_assert_uint_eq(atomic_load(&c->chunk_id), 0);
    ck_assert_uint_eq(atomic_load(&c->writer_id), 1);
    /* one packet + the inflated slot */
    ck_assert_uint_eq(atomic_load(&c->packets), 2);
    /* 1-byte compacted size 5: B8 05 01 40 05 */
    ck_assert_mem_eq(pl, "\x05\xB8\x05\x01\x40\x05", 6);
    tw_packet_begin(w);              /* reuses the inflated slot */
    ck_assert_uint_eq(atomic_load(&c->packets), 2);
    tw_add_varint(w, 8, 6);
    tw_packet_end(w);
    ck_assert_uint_eq(atomic_load(&c->packets), 3);
    ck_assert_mem_eq(pl + 6, "\x02\x40\x06", 3);
    tw_writer_flush(w);
    word = atomic_load(&ph->header_bitmap);
    ck_assert_uint_eq(smb_word_chunk_state(word, 0), SMB_CHUNK_COMPLETE);
    ck_assert_uint_eq(pl[9], 0);     /* the empty filler fragment */
    ck_assert_uint_eq(h.chunks, 1);
    hb_resume(&h);
    hb_drain_and_stop(&h);
    hb_pkts ps = hb_read_all(&h);
    ck_assert_uint_eq(ps.n, 2);
    hb_pkts_free(&ps);
    tw_writer_destroy(w);
    hb_fini(&h);
}
END_TEST

/* trace-writer.md §11, byte for byte. */
START_TEST(test_chunk_spec_worked_example)
{
    hb h;
    char *s = malloc(5991);
    hb_init_ex(&h, 256 * KiB, 4096, 0, 4 * MiB, HB_QUEUED, 0);
    hb_pause(&h);
    h.record = true;
    tw_writer *w = tw_writer_create(h.arb, HB_TARGET, TW_POLICY_DROP);
    for (int i = 0; i < 7; i++) {    /* chunks 0..6 */
        tw_packet_begin(w);
        tw_add_varint(w, 8, (uint64_t)i);
        tw_packet_end(w);
        tw_writer_flush(w);
    }
    for (int i = 0; i < 5991; i++)
        s[i] = (char)('A' + (i * 7) % 58);
    tw_packet_begin(w);
    tw_begin_nested(w, 900);
    tw_add_bytes(w, 1, s, 5991);
    tw_end_nested(w);
    tw_packet_end(w);

    smb_chunk_header *c7 = chunk_of_page(&h, 7), *c8 = chunk_of_page(&h, 8);
    uint8_t *p7 = smb_chunk_payload(c7), *p8 = smb_chunk_payload(c8);
    ck_assert_uint_eq(atomic_load(&c7->chunk_id), 7);
    ck_assert_uint_eq(atomic_load(&c7->packets), 0x1801);
    ck_assert_mem_eq(p7, "\xEC\x9F\x80\x00\xA2\x38", 6);
    ck_assert_mem_eq(p7 + 10, "\x0A\xE7\x2E", 3);
    ck_assert_mem_eq(p7 + 13, s, 4067);
    ck_assert_uint_eq(atomic_load(&c8->chunk_id), 8);
    ck_assert_uint_eq(atomic_load(&c8->packets), 0x0402);
    ck_assert_mem_eq(p8, "\x84\x8F\x80\x00", 4);
    ck_assert_mem_eq(p8 + 4, s + 4067, 1924);
    /* The patch went out when P was finalized. */
    ck_assert_uint_eq(h.nrec, 1);
    ck_assert_uint_eq(h.rec_groups[0].chunk_id, 7);
    ck_assert_uint_eq(h.rec_groups[0].writer_id, 1);
    ck_assert_uint_eq(h.rec_groups[0].target_buffer, HB_TARGET);
    ck_assert_uint_eq(h.rec_groups[0].npatches, 1);
    ck_assert_uint_eq(h.rec_groups[0].has_more_patches, 0);
    ck_assert_uint_eq(h.rec_patches[0][0].offset, 6);
    ck_assert_mem_eq(h.rec_patches[0][0].data, "\xEA\xAE\x80\x00", 4);
    tw_writer_flush(w);
    ck_assert_uint_eq(p8[4 + 1924], 0);   /* returned inflated: 00 */
    hb_resume(&h);
    hb_drain_and_stop(&h);
    hb_pkts ps = hb_read_all(&h);
    ck_assert_uint_eq(ps.n, 8);
    ck_assert_uint_eq(ps.v[7].size, 6000);
    Perfetto__Protos__TracePacket *tp = unpack(&ps.v[7]);
    ck_assert_uint_eq(strlen(tp->for_testing->str), 5991);
    ck_assert_mem_eq(tp->for_testing->str, s, 5991);
    free_tp(tp);
    hb_pkts_free(&ps);
    tw_writer_destroy(w);
    hb_fini(&h);
    free(s);
}
END_TEST

/* --- fragmentation ------------------------------------------------------- */

START_TEST(test_fragment_sizes_1B_to_8MiB)
{
    static const size_t sizes[] = {
        1, 2, 3, 126, 127, 128, 129, 1000, 4068, 4069, 4070, 4071, 4072,
        4073, 4074, 4075, 4076, 4077, 4078, 4079, 4080, 4081, 4090, 8150,
        8160, 8170, 12240, 65536, 100000, 1 * MiB, 3 * MiB + 17, 8 * MiB,
    };
    const size_t n = sizeof(sizes) / sizeof(sizes[0]);
    uint8_t *data = malloc(8 * MiB + 64); /* + i offsets below */
    hb h;
    hb_init(&h, 256 * KiB, 4096, 40 * MiB);
    tw_writer *w = tw_writer_create(h.arb, HB_TARGET, TW_POLICY_DROP);
    hb_fill(data, 8 * MiB + 64, 5);
    tw_packet_begin(w);              /* absorb first_packet_on_sequence */
    tw_packet_end(w);
    for (size_t i = 0; i < n; i++) {
        tw_packet_begin(w);
        tw_append_raw(w, data + i, sizes[i]);
        tw_packet_end(w);
        /* And the same size as a nested message (patched length). */
        tw_packet_begin(w);
        tw_begin_nested(w, 900);
        tw_append_raw(w, data + i, sizes[i]);
        tw_end_nested(w);
        tw_packet_end(w);
    }
    tw_writer_flush(w);
    hb_pkts ps = hb_read_all(&h);
    ck_assert_uint_eq(ps.n, 1 + 2 * n);
    for (size_t i = 0; i < n; i++) {
        const hb_pkt *raw = &ps.v[1 + 2 * i], *nest = &ps.v[2 + 2 * i];
        ck_assert_uint_eq(raw->size, sizes[i]);
        ck_assert(memcmp(raw->data, data + i, sizes[i]) == 0);
        /* A2 38 + size (1 byte if compacted, else 4) + body */
        size_t hdr = sizes[i] <= 127 ? 3 : 6;
        ck_assert_uint_eq(nest->size, hdr + sizes[i]);
        const uint8_t *p = nest->data, *end = p + nest->size;
        hb_field f;
        ck_assert(hb_next_field(&p, end, &f));
        ck_assert_uint_eq(f.field, 900);
        ck_assert_uint_eq(f.v, sizes[i]);
        ck_assert(memcmp(f.p, data + i, sizes[i]) == 0);
    }
    const tb_stats *st = tb_get_stats(h.buf);
    ck_assert_uint_eq(st->abi_violations, 0);
    ck_assert_uint_eq(st->patches_failed, 0);
    ck_assert_uint_gt(st->patches_succeeded, 0);
    hb_pkts_free(&ps);
    tw_writer_destroy(w);
    hb_fini(&h);
    free(data);
}
END_TEST

START_TEST(test_fragment_other_layouts_and_pages)
{
    /* Div14 pages of 4 KiB (284-byte payloads) and 64 KiB Div4 pages. */
    static const struct { uint32_t page, layout; } cfg[] = {
        {4096, SMB_LAYOUT_DIV14}, {4096, SMB_LAYOUT_DIV7},
        {65536, SMB_LAYOUT_DIV4}, {8192, SMB_LAYOUT_DIV2},
    };
    uint8_t data[20000];
    hb_fill(data, sizeof(data), 9);
    for (size_t c = 0; c < 4; c++) {
        hb h;
        hb_init_ex(&h, 256 * KiB, cfg[c].page, cfg[c].layout, 4 * MiB,
                   HB_SYNC, 0);
        tw_writer *w = tw_writer_create(h.arb, HB_TARGET, TW_POLICY_DROP);
        for (uint32_t i = 0; i < 300; i++) {
            tw_packet_begin(w);
            tw_begin_nested(w, 900);
            tw_add_varint(w, 2, i);
            tw_add_bytes(w, 1, data, (i * 67) % sizeof(data));
            tw_end_nested(w);
            tw_packet_end(w);
        }
        tw_writer_flush(w);
        hb_pkts ps = hb_read_all(&h);
        ck_assert_uint_eq(ps.n, 300);
        for (uint32_t i = 0; i < 300; i++) {
            Perfetto__Protos__TracePacket *tp = unpack(&ps.v[i]);
            size_t len = (i * 67) % sizeof(data);
            ck_assert_uint_eq(tp->for_testing->seq_value, i);
            ck_assert_uint_eq(strlen(tp->for_testing->str) <= len, 1);
            free_tp(tp);
        }
        hb_pkts_free(&ps);
        tw_writer_destroy(w);
        hb_fini(&h);
    }
}
END_TEST

/* --- ids ---------------------------------------------------------------- */

START_TEST(test_ids_chunk_id_wraps)
{
    hb h;
    uint8_t data[3000];
    hb_fill(data, sizeof(data), 1);
    hb_init(&h, 64 * KiB, 4096, 4 * MiB);
    tw_writer *w = tw_writer_create(h.arb, HB_TARGET, TW_POLICY_DROP);
    w->next_chunk_id = 0xFFFFFFFDu;  /* white-box: start near the wrap */
    for (uint32_t i = 0; i < 20; i++) {
        tw_packet_begin(w);
        tw_add_varint(w, 2, i);
        tw_add_bytes(w, 1, data, sizeof(data));
        tw_packet_end(w);
    }
    tw_writer_flush(w);
    ck_assert_uint_lt(w->next_chunk_id, 100);   /* it wrapped */
    hb_pkts ps = hb_read_all(&h);
    ck_assert_uint_eq(ps.n, 20);
    for (uint32_t i = 0; i < 20; i++) {
        uint64_t v;
        ck_assert(hb_find_varint(&ps.v[i], 2, &v));
        ck_assert_uint_eq(v, i);
    }
    hb_pkts_free(&ps);
    tw_writer_destroy(w);
    hb_fini(&h);
}
END_TEST

START_TEST(test_ids_writer_ids_next_fit_and_recycled)
{
    hb h;
    hb_init(&h, 64 * KiB, 4096, MiB);
    tw_writer *a = tw_writer_create(h.arb, HB_TARGET, TW_POLICY_DROP);
    tw_writer *b = tw_writer_create(h.arb, HB_TARGET, TW_POLICY_DROP);
    ck_assert_uint_eq(tw_writer_id(a), 1);
    ck_assert_uint_eq(tw_writer_id(b), 2);
    tw_writer_destroy(a);
    a = tw_writer_create(h.arb, HB_TARGET, TW_POLICY_DROP);
    ck_assert_uint_eq(tw_writer_id(a), 3);      /* next-fit, not 1 */
    tw_writer_destroy(a);
    tw_writer_destroy(b);

    /* Exhaust the pool: 32767 ids, then a null writer. */
    tw_writer **all = calloc(SMB_MAX_WRITER_ID, sizeof(*all));
    for (uint32_t i = 0; i < SMB_MAX_WRITER_ID; i++) {
        all[i] = tw_writer_create(h.arb, HB_TARGET, TW_POLICY_DROP);
        ck_assert_uint_ne(tw_writer_id(all[i]), 0);
    }
    /* next-fit from 3: 4..32767, then wraps to 1, 2, 3 */
    ck_assert_uint_eq(tw_writer_id(all[0]), 4);
    ck_assert_uint_eq(tw_writer_id(all[SMB_MAX_WRITER_ID - 1]), 3);
    tw_writer *nw = tw_writer_create(h.arb, HB_TARGET, TW_POLICY_DROP);
    ck_assert_ptr_nonnull(nw);
    ck_assert_uint_eq(tw_writer_id(nw), 0);
    tw_packet_begin(nw);             /* a null writer swallows packets */
    tw_add_bytes(nw, 1, "x", 1);
    for (int i = 0; i < 1000; i++)
        tw_append_raw(nw, "0123456789", 10);
    tw_packet_end(nw);
    ck_assert_int_eq(tw_writer_flush(nw), 0);
    tw_writer_destroy(nw);
    smb_arbiter_stats as;
    smb_arbiter_get_stats(h.arb, &as);
    ck_assert_uint_eq(as.null_writers, 1);
    uint16_t freed = tw_writer_id(all[100]);
    tw_writer_destroy(all[100]);
    all[100] = tw_writer_create(h.arb, HB_TARGET, TW_POLICY_DROP);
    ck_assert_uint_eq(tw_writer_id(all[100]), freed);
    for (uint32_t i = 0; i < SMB_MAX_WRITER_ID; i++)
        tw_writer_destroy(all[i]);
    free(all);
    ck_assert_uint_eq(h.registered, h.unregistered);
    hb_pkts ps = hb_read_all(&h);
    ck_assert_uint_eq(ps.n, 0);      /* nothing reached the buffer */
    hb_fini(&h);
}
END_TEST

START_TEST(test_ids_create_rejects_bad_arguments)
{
    hb h;
    hb_init(&h, 64 * KiB, 4096, MiB);
    errno = 0;
    ck_assert_ptr_null(tw_writer_create(h.arb, 0, TW_POLICY_DROP));
    ck_assert_int_eq(errno, EINVAL);
    ck_assert_ptr_null(tw_writer_create(h.arb, 1, (tw_policy)7));
    ck_assert_ptr_null(tw_writer_create(NULL, 1, TW_POLICY_DROP));
    tw_writer_destroy(NULL);
    hb_fini(&h);
}
END_TEST

/* --- threads ------------------------------------------------------------- */

#define NTHREADS 8
#define PER_THREAD 100000u

typedef struct {
    smb_arbiter *arb;
    uint16_t id;
    uint32_t thread;
} thr_arg;

static void *thr_main(void *p)
{
    thr_arg *a = p;
    tw_writer *w = tw_writer_create(a->arb, HB_TARGET,
                                    TW_POLICY_STALL_THEN_ABORT);
    a->id = tw_writer_id(w);
    for (uint32_t i = 0; i < PER_THREAD; i++) {
        tw_packet_begin(w);
        tw_add_varint(w, 8, ((uint64_t)a->thread << 32) | i);
        if (i % 1000 == 0)
            tw_add_bytes(w, 11, "......................................",
                         1 + i % 37);
        tw_packet_end(w);
    }
    tw_writer_destroy(w);
    return NULL;
}

START_TEST(test_threads_8x100k_every_packet_once_in_order)
{
    hb h;
    pthread_t t[NTHREADS];
    thr_arg a[NTHREADS];
    uint32_t next[NTHREADS] = {0};
    hb_init(&h, 256 * KiB, 4096, 64 * MiB);
    for (uint32_t i = 0; i < NTHREADS; i++) {
        a[i].arb = h.arb;
        a[i].thread = i;
        ck_assert_int_eq(pthread_create(&t[i], NULL, thr_main, &a[i]), 0);
    }
    for (uint32_t i = 0; i < NTHREADS; i++)
        pthread_join(t[i], NULL);
    hb_pkts ps = hb_read_all(&h);
    HB_CHECK_EQ(ps.n, NTHREADS * PER_THREAD);
    for (size_t i = 0; i < ps.n; i++) {
        uint64_t v;
        HB_CHECK(hb_find_varint(&ps.v[i], 8, &v));
        uint32_t th = (uint32_t)(v >> 32), seq = (uint32_t)v;
        HB_CHECK((th) < (NTHREADS));
        HB_CHECK_EQ(ps.v[i].writer_id, a[th].id);
        HB_CHECK_EQ(seq, next[th]);
        next[th]++;
        HB_CHECK_EQ(ps.v[i].dropped, 0);
    }
    hb_pkts_free(&ps);
    HB_CHECK_EQ(tb_get_stats(h.buf)->abi_violations, 0);
    hb_fini(&h);
}
END_TEST

/* --- buffer exhaustion -------------------------------------------------- */

/* Per-sequence check on writer `wid`: seq numbers increase; a jump <=> 257
 * on that packet. Returns the number of packets of that writer. */
static size_t check_losses(hb_pkts *ps, uint16_t wid, uint32_t total,
                           uint64_t *gaps)
{
    uint64_t expect = 0;
    size_t n = 0;
    *gaps = 0;
    for (size_t i = 0; i < ps->n; i++) {
        uint64_t seq, dropped = 0;
        bool flagged;
        if (ps->v[i].writer_id != wid)
            continue;
        n++;
        flagged = hb_find_varint(&ps->v[i], 42, &dropped);
        HB_CHECK(hb_find_varint(&ps->v[i], 2, &seq));
        HB_CHECK((seq) >= (expect));
        HB_CHECK((seq) < (total));
        if (seq > expect) {
            ck_assert_msg(flagged, "packet %llu after a gap not flagged",
                          (unsigned long long)seq);
            HB_CHECK_EQ(dropped, 257);
            (*gaps)++;
        } else {
            ck_assert_msg(!flagged, "packet %llu flagged without a gap",
                          (unsigned long long)seq);
        }
        expect = seq + 1;
    }
    return n;
}

typedef struct {
    smb_arbiter *arb;
    uint32_t total;
    uint16_t id;
    tw_writer_stats st;
} staller_arg;

/* A stall-policy writer sharing the SMB with a dropping one. */
static void *staller_main(void *p)
{
    staller_arg *a = p;
    tw_writer *w = tw_writer_create(a->arb, HB_TARGET,
                                    TW_POLICY_STALL_THEN_ABORT);
    a->id = tw_writer_id(w);
    for (uint32_t i = 0; i < a->total; i++) {
        tw_packet_begin(w);
        tw_add_varint(w, 2, i);
        tw_add_bytes(w, 1, "abcdefghijklmnopqrstuvwxyz", 26);
        tw_packet_end(w);
    }
    tw_writer_flush(w);
    tw_writer_get_stats(w, &a->st);
    tw_writer_destroy(w);
    return NULL;
}

static void *resume_later(void *p)
{
    usleep(50000);
    hb_resume(p);
    return NULL;
}

START_TEST(test_exhaust_drop_policy_flags_losses)
{
    hb h;
    uint8_t data[200];
    const uint32_t total = 6000;
    pthread_t th, tr;
    staller_arg sa;
    hb_fill(data, sizeof(data), 2);
    /* 4 chunks of 4 KiB; the service is paused, then slow. */
    hb_init_ex(&h, 16 * KiB, 4096, 0, 16 * MiB, HB_QUEUED, 0);
    hb_pause(&h);
    hb_set_delay(&h, 100);
    tw_writer *w = tw_writer_create(h.arb, HB_TARGET, TW_POLICY_DROP);
    uint32_t i = 0;
    /* First a packet bigger than the whole SMB: with nobody draining it
     * must be cut mid-write (drop sentinel in its last chunk). */
    tw_packet_begin(w);
    tw_add_varint(w, 2, i++);
    for (int k = 0; k < 100; k++)
        tw_add_bytes(w, 1, data, sizeof(data));
    tw_packet_end(w);
    for (; i < 1000; i++) {          /* SMB full: dropped, never blocks */
        tw_packet_begin(w);
        tw_add_varint(w, 2, i);
        tw_add_bytes(w, 1, data, 20 + i % 150);
        tw_packet_end(w);
    }
    /* A stalling writer joins; the service resumes later, slowly. */
    sa.arb = h.arb;
    sa.total = 3000;
    ck_assert_int_eq(pthread_create(&th, NULL, staller_main, &sa), 0);
    ck_assert_int_eq(pthread_create(&tr, NULL, resume_later, &h), 0);
    pthread_join(tr, NULL);          /* the slow service is running */
    for (; i < total - 500; i++) {
        tw_packet_begin(w);
        tw_add_varint(w, 2, i);
        tw_add_bytes(w, 1, data, 20 + i % 150);
        tw_packet_end(w);
        if (i % 500 == 0)
            usleep(2000);
    }
    pthread_join(th, NULL);
    hb_drain_and_stop(&h);           /* now an instant service: the
                                        writer must get chunks again */
    for (; i < total; i++) {
        tw_packet_begin(w);
        tw_add_varint(w, 2, i);
        tw_add_bytes(w, 1, data, 20 + i % 150);
        tw_packet_end(w);
    }
    tw_writer_flush(w);
    tw_writer_stats st;
    tw_writer_get_stats(w, &st);
    uint16_t wid = tw_writer_id(w);
    tw_writer_destroy(w);

    hb_pkts ps = hb_read_all(&h);
    uint64_t gaps, other_gaps;
    size_t got = check_losses(&ps, wid, total, &gaps);
    ck_assert_uint_gt(gaps, 0);
    ck_assert_uint_gt(st.packets_lost, 0);
    ck_assert_uint_ge(st.drop_episodes, gaps);
    /* Every packet is either read back or counted as lost. */
    ck_assert_uint_eq(got + st.packets_lost, total);
    /* The big packet was cut mid-write: the sentinel reached libbuf. */
    ck_assert_uint_ge(tb_get_stats(h.buf)->trace_writer_packet_loss, 1);
    ck_assert_uint_eq(tb_get_stats(h.buf)->abi_violations, 0);
    /* The stalling sequence lost nothing. */
    ck_assert_uint_eq(check_losses(&ps, sa.id, sa.total, &other_gaps),
                      sa.total);
    ck_assert_uint_eq(other_gaps, 0);
    ck_assert_uint_eq(sa.st.packets_lost, 0);
    ck_assert_uint_eq(ps.n, got + sa.total);
    hb_pkts_free(&ps);
    hb_fini(&h);
}
END_TEST

START_TEST(test_exhaust_stall_policy_loses_nothing)
{
    hb h;
    uint8_t data[300];
    const uint32_t total = 5000;
    hb_fill(data, sizeof(data), 4);
    hb_init_ex(&h, 16 * KiB, 4096, 0, 16 * MiB, HB_QUEUED, 0);
    hb_pause(&h);
    hb_set_delay(&h, 100);
    tw_writer *w = tw_writer_create(h.arb, HB_TARGET,
                                    TW_POLICY_STALL_THEN_ABORT);
    pthread_t tr;
    ck_assert_int_eq(pthread_create(&tr, NULL, resume_later, &h), 0);
    for (uint32_t i = 0; i < total; i++) {
        tw_packet_begin(w);
        tw_add_varint(w, 2, i);
        tw_add_bytes(w, 1, data, i % 300);
        if (i % 997 == 0)            /* and a packet larger than the SMB */
            for (int k = 0; k < 100; k++)
                tw_add_bytes(w, 1, data, sizeof(data));
        tw_packet_end(w);
    }
    pthread_join(tr, NULL);
    tw_writer_flush(w);
    tw_writer_stats st;
    tw_writer_get_stats(w, &st);
    tw_writer_destroy(w);
    hb_drain_and_stop(&h);
    hb_pkts ps = hb_read_all(&h);
    HB_CHECK_EQ(ps.n, total);
    for (uint32_t i = 0; i < total; i++) {
        uint64_t seq, d;
        HB_CHECK(hb_find_varint(&ps.v[i], 2, &seq));
        HB_CHECK_EQ(seq, i);
        HB_CHECK(!hb_find_varint(&ps.v[i], 42, &d));
        HB_CHECK_EQ(ps.v[i].dropped, 0);
    }
    HB_CHECK_EQ(st.packets_lost, 0);
    HB_CHECK((st.stalls) > (0));
    hb_pkts_free(&ps);
    hb_fini(&h);
}
END_TEST

static void *shutdown_later(void *p)
{
    usleep(20000);
    smb_arbiter_shutdown(p);
    return NULL;
}

START_TEST(test_exhaust_stall_gives_up_after_shutdown)
{
    /* Nobody drains the SMB and then the connection goes away: a stalling
     * writer must not hang (or abort) but drop from then on. */
    hb h;
    pthread_t t;
    hb_init_ex(&h, 4 * KiB * 4, 4096, 0, MiB, HB_QUEUED, 0);
    hb_pause(&h);
    tw_writer *w = tw_writer_create(h.arb, HB_TARGET,
                                    TW_POLICY_STALL_THEN_ABORT);
    ck_assert_int_eq(pthread_create(&t, NULL, shutdown_later, h.arb), 0);
    for (uint32_t i = 0; i < 1000; i++) {
        tw_packet_begin(w);
        tw_add_bytes(w, 1, "0123456789012345678901234567890123456789", 40);
        tw_packet_end(w);
    }
    pthread_join(t, NULL);
    tw_writer_stats st;
    tw_writer_get_stats(w, &st);
    ck_assert_uint_gt(st.stalls, 0);
    ck_assert_uint_gt(st.packets_lost, 0);
    tw_writer_destroy(w);
    hb_drain_and_stop(&h);
    hb_pkts ps = hb_read_all(&h);
    ck_assert_uint_eq(ps.n + st.packets_lost, 1000);
    hb_pkts_free(&ps);
    hb_fini(&h);
}
END_TEST

/* --- scraping ------------------------------------------------------------- */

START_TEST(test_scrape_then_commit_delivers_each_packet_once)
{
    hb h;
    hb_init(&h, 64 * KiB, 4096, 4 * MiB);
    tw_writer *w = tw_writer_create(h.arb, HB_TARGET, TW_POLICY_DROP);
    for (uint32_t i = 0; i < 10; i++) {
        tw_packet_begin(w);
        tw_add_varint(w, 2, i);
        tw_packet_end(w);
    }
    tw_packet_begin(w);              /* an open packet is not scraped */
    tw_add_varint(w, 2, 10);
    ck_assert_uint_eq(smb_reader_scrape(h.reader, hb_resolve, &h), 1);
    hb_pkts ps = hb_read_all(&h);
    ck_assert_uint_eq(ps.n, 10);
    hb_pkts_free(&ps);
    tw_packet_end(w);
    for (uint32_t i = 11; i < 20; i++) {
        tw_packet_begin(w);
        tw_add_varint(w, 2, i);
        tw_packet_end(w);
    }
    tw_writer_flush(w);
    ps = hb_read_all(&h);
    ck_assert_uint_eq(ps.n, 10);
    for (uint32_t i = 0; i < 10; i++) {
        uint64_t seq;
        ck_assert(hb_find_varint(&ps.v[i], 2, &seq));
        ck_assert_uint_eq(seq, 10 + i);
    }
    hb_pkts_free(&ps);
    ck_assert_uint_eq(tb_get_stats(h.buf)->abi_violations, 0);
    tw_writer_destroy(w);
    hb_fini(&h);
}
END_TEST

/* A live service: commits and scrapes interleave with the writer at
 * random points, and a consumer reads while packets are still being
 * written (scraped chunks re-committed later). Every packet must come out
 * exactly once, in order: what the inflated packet count is for. */
START_TEST(test_scrape_concurrent_with_writer_and_reader)
{
    hb h;
    uint8_t data[6000];
    const uint32_t total = 20000;
    hb_fill(data, sizeof(data), 6);
    hb_init_ex(&h, 64 * KiB, 4096, 0, 32 * MiB, HB_QUEUED, 0);
    hb_set_scrape(&h, 50, true);
    tw_writer *w = tw_writer_create(h.arb, HB_TARGET,
                                    TW_POLICY_STALL_THEN_ABORT);
    for (uint32_t i = 0; i < total; i++) {
        tw_packet_begin(w);
        tw_add_varint(w, 2, i);
        if (i % 100 == 99) {         /* now and then a multi-chunk one */
            tw_begin_nested(w, 900);
            tw_add_bytes(w, 1, data, sizeof(data));
            tw_end_nested(w);
        } else {
            tw_add_bytes(w, 1, data, i % 64);
        }
        tw_packet_end(w);
        if (i % 1000 == 0)
            usleep(1000);            /* give the scraper idle windows */
        if (i == total / 2) {        /* surely scraped mid-chunk once */
            uint64_t s0, s1;
            pthread_mutex_lock(&h.mu);
            s0 = h.scrapes;
            pthread_mutex_unlock(&h.mu);
            do {
                usleep(100);
                pthread_mutex_lock(&h.mu);
                s1 = h.scrapes;
                pthread_mutex_unlock(&h.mu);
            } while (s1 < s0 + 2);
        }
    }
    tw_writer_flush(w);
    tw_writer_destroy(w);
    hb_drain_and_stop(&h);
    hb_collect(&h, &h.live);
    HB_CHECK(smb_reader_get_stats(h.reader)->chunks_scraped > 0);
    uint32_t expect = 0;
    for (size_t k = 0; k < h.live.n; k++) {
        uint64_t seq;
        HB_CHECK(hb_find_varint(&h.live.v[k], 2, &seq));
        if (seq != expect)
            ck_abort_msg("packet %zu: seq %llu, expected %u", k,
                         (unsigned long long)seq, expect);
        expect++;
    }
    HB_CHECK_EQ(h.live.n, total);
    HB_CHECK_EQ(tb_get_stats(h.buf)->abi_violations, 0);
    hb_fini(&h);
}
END_TEST

/* --- two processes ------------------------------------------------------- */

/* The child's transport: batches travel over a pipe, like CommitData. */
static int pipe_commit(void *ctx, const smb_commit_batch *b)
{
    int fd = *(int *)ctx;
    for (size_t i = 0; i < b->nchunks; i++)
        if (write(fd, &b->chunks[i], sizeof(b->chunks[i])) !=
            (ssize_t)sizeof(b->chunks[i]))
            return -EIO;
    return 0;
}

START_TEST(test_fork_child_writes_parent_drains)
{
    smb_shm shm;
    int pfd[2];
    const uint32_t total = 20000;
    ck_assert_int_eq(smb_shm_create(32 * KiB, &shm), 0);
    ck_assert_int_eq(pipe(pfd), 0);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        /* child: map the SMB from the fd, as a producer does after
         * SetupTracing, and write with the stall policy. */
        close(pfd[0]);
        smb_transport t = {&pfd[1], pipe_commit, NULL, NULL};
        smb_arbiter *arb = smb_arbiter_create_from_fd(shm.fd, 4096, &t,
                                                      NULL);
        if (arb == NULL)
            _exit(2);
        tw_writer *w = tw_writer_create(arb, HB_TARGET,
                                        TW_POLICY_STALL_THEN_ABORT);
        uint8_t data[500];
        hb_fill(data, sizeof(data), 8);
        for (uint32_t i = 0; i < total; i++) {
            tw_packet_begin(w);
            tw_add_varint(w, 2, i);
            tw_add_bytes(w, 1, data, i % 500);
            tw_packet_end(w);
        }
        tw_writer_destroy(w);
        smb_arbiter_destroy(arb);
        _exit(0);
    }
    close(pfd[1]);
    smb_reader *r = smb_reader_create(shm.base, shm.size, 4096, HB_PRODUCER,
                                      1000, pid);
    hb h;
    memset(&h, 0, sizeof(h));
    h.buf = tb_create(32 * MiB, TB_RING_BUFFER);
    smb_commit_chunk cc;
    while (read(pfd[0], &cc, sizeof(cc)) == (ssize_t)sizeof(cc))
        HB_CHECK(smb_reader_commit_chunk(r, cc.page, cc.chunk,
                 cc.target_buffer, hb_resolve, &h) == 0);
    int status;
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    HB_CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    hb_pkts ps = hb_read_all(&h);
    HB_CHECK_EQ(ps.n, total);
    uint8_t data[500];
    hb_fill(data, sizeof(data), 8);
    for (uint32_t i = 0; i < total; i++) {
        const uint8_t *p = ps.v[i].data, *end = p + ps.v[i].size;
        hb_field f;
        if (i == 0) {
            HB_CHECK(hb_next_field(&p, end, &f));
            HB_CHECK_EQ(f.field, 87);
        }
        HB_CHECK(hb_next_field(&p, end, &f));
        HB_CHECK_EQ(f.field, 2);
        HB_CHECK_EQ(f.v, i);
        HB_CHECK(hb_next_field(&p, end, &f));
        HB_CHECK_EQ(f.v, i % 500);
        HB_CHECK(memcmp(f.p, data, i % 500) == 0);
    }
    HB_CHECK_EQ(smb_reader_get_stats(r)->abi_violations, 0);
    hb_pkts_free(&ps);
    smb_reader_destroy(r);
    tb_destroy(h.buf);
    smb_shm_unmap(&shm);
    close(pfd[0]);
}
END_TEST

static Suite *tw_suite(void)
{
    Suite *s = suite_create("tw");
    TCase *tc;

    tc = tcase_create("encode");
    tcase_add_test(tc, test_encode_small_packets_match_protobuf_c);
    tcase_add_test(tc, test_encode_field_types);
    tcase_add_test(tc, test_encode_nested_messages);
    tcase_add_test(tc, test_encode_misuse_is_counted_not_fatal);
    suite_add_tcase(s, tc);

    tc = tcase_create("chunk");
    tcase_add_test(tc, test_chunk_header_and_framing_bytes);
    tcase_add_test(tc, test_chunk_spec_worked_example);
    suite_add_tcase(s, tc);

    tc = tcase_create("fragment");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_fragment_sizes_1B_to_8MiB);
    tcase_add_test(tc, test_fragment_other_layouts_and_pages);
    suite_add_tcase(s, tc);

    tc = tcase_create("ids");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_ids_chunk_id_wraps);
    tcase_add_test(tc, test_ids_writer_ids_next_fit_and_recycled);
    tcase_add_test(tc, test_ids_create_rejects_bad_arguments);
    suite_add_tcase(s, tc);

    tc = tcase_create("threads");
    tcase_set_timeout(tc, 240);
    tcase_add_test(tc, test_threads_8x100k_every_packet_once_in_order);
    suite_add_tcase(s, tc);

    tc = tcase_create("exhaust");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_exhaust_drop_policy_flags_losses);
    tcase_add_test(tc, test_exhaust_stall_policy_loses_nothing);
    tcase_add_test(tc, test_exhaust_stall_gives_up_after_shutdown);
    suite_add_tcase(s, tc);

    tc = tcase_create("scrape");
    tcase_add_test(tc, test_scrape_then_commit_delivers_each_packet_once);
    tcase_add_test(tc, test_scrape_concurrent_with_writer_and_reader);
    suite_add_tcase(s, tc);

    tc = tcase_create("fork");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_fork_child_writes_parent_drains);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(tw_suite());
    int failed;
    srunner_run_all(sr, CK_NORMAL);
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
