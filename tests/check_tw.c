/*
 * check_tw.c - TraceWriter: encoder, chunk bytes (incl. the spec's worked
 * example), fragmentation and patches, seeded random packets (also with
 * drops), chunk and writer ids. check_tw_flow.c has threads, exhaustion
 * policies, scraping and two processes.
 *
 * Packets go through the real path: tw_writer -> SMB (memfd) -> arbiter ->
 * transport -> smb_reader -> libbuf tb_buffer -> tb_read_next_packet, and
 * are compared byte for byte (or decoded with protobuf-c, an independent
 * encoder/decoder).
 */
#include <errno.h>
#include <stdio.h>

#include "check_smb_harness.h"
#include "trace.pb-c.h"
#include "tw_int.h"
#include "bstr.h"
#include "tck_main.h"

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

/* Varints of every length (1..10 bytes, both sides of each boundary) and
 * small bytes fields of every size 0..40 (the writer's inline copies)
 * decode to what was written. */
START_TEST(test_encode_varint_lengths_and_small_bytes)
{
    hb h;
    uint8_t blob[40];
    hb_fill(blob, sizeof(blob), 5);
    hb_init(&h, 64 * KiB, 4096, MiB);
    tw_writer *w = tw_writer_create(h.arb, HB_TARGET, TW_POLICY_DROP);
    tw_packet_begin(w);
    tw_packet_end(w);
    for (uint32_t k = 0; k < 64; k++) {
        uint64_t v = (uint64_t)1 << k;
        tw_packet_begin(w);
        tw_add_varint(w, 1, v - 1);
        tw_add_varint(w, 2, v);
        tw_add_varint(w, 3, v | (v - 1));
        tw_add_bytes(w, 4, blob, k % 41);
        tw_packet_end(w);
    }
    ck_assert_int_eq(tw_writer_flush(w), 0);
    hb_pkts ps = hb_read_all(&h);
    ck_assert_uint_eq(ps.n, 65);
    for (uint32_t k = 0; k < 64; k++) {
        uint64_t v = (uint64_t)1 << k;
        const uint8_t *p = ps.v[k + 1].data, *end = p + ps.v[k + 1].size;
        hb_field f;
        ck_assert(hb_next_field(&p, end, &f));
        ck_assert_uint_eq(f.field, 1);
        ck_assert_uint_eq(f.v, v - 1);
        ck_assert(hb_next_field(&p, end, &f));
        ck_assert_uint_eq(f.field, 2);
        ck_assert_uint_eq(f.v, v);
        ck_assert(hb_next_field(&p, end, &f));
        ck_assert_uint_eq(f.field, 3);
        ck_assert_uint_eq(f.v, v | (v - 1));
        ck_assert(hb_next_field(&p, end, &f));
        ck_assert_uint_eq(f.field, 4);
        ck_assert_uint_eq(f.v, k % 41);
        ck_assert_mem_eq(f.p, blob, k % 41);
        ck_assert(p == end);
    }
    hb_pkts_free(&ps);
    tw_writer_destroy(w);
    hb_fini(&h);
}
END_TEST

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
    ck_assert_uint_eq(hb_read_count(&h), 1);
    tw_writer_destroy(w);
    hb_fini(&h);
}
END_TEST

/* Nesting beyond TW_MAX_NESTING is ignored, and the packet's end closes
 * it all (tw_packet_end tests depth alone: overflow_depth only grows at
 * TW_MAX_NESTING): the next packets nest as usual and decode. */
START_TEST(test_packet_end_closes_overflowed_nesting)
{
    hb h;
    hb_init(&h, 64 * KiB, 4096, MiB);
    tw_writer *w = tw_writer_create(h.arb, HB_TARGET, TW_POLICY_DROP);
    tw_writer_stats st;
    const char *s = "nested";
    for (uint32_t k = 0; k < 4; k++) {
        tw_packet_begin(w);
        tw_begin_nested(w, 900);
        tw_add_varint(w, 2, k);
        if (k % 2 == 0) {
            /* with 900 one level (k = 0) or two (k = 2) too deep */
            for (uint32_t i = 0; i < TW_MAX_NESTING + k / 2; i++)
                tw_begin_nested(w, 5);
            tw_add_varint(w, 3, 7);
            if (k == 2)              /* closed by hand, then the end */
                for (uint32_t i = 0; i < TW_MAX_NESTING + 2; i++)
                    tw_end_nested(w);
        } else {
            tw_begin_nested(w, 5);
            write_nested(w, 3, strlen(s), s);
            tw_end_nested(w);
            tw_end_nested(w);
        }
        tw_packet_end(w);
    }
    ck_assert_int_eq(tw_writer_flush(w), 0);
    tw_writer_get_stats(w, &st);
    ck_assert_uint_eq(st.misuse, 1 + 2);
    hb_pkts ps = hb_read_all(&h);
    ck_assert_uint_eq(ps.n, 4);
    for (uint32_t k = 1; k < 4; k += 2) {
        Perfetto__Protos__TracePacket *tp = unpack(&ps.v[k]);
        ck_assert_ptr_nonnull(tp->for_testing);
        ck_assert_uint_eq(tp->for_testing->seq_value, k);
        check_nested(tp->for_testing->payload, 3, strlen(s), s);
        free_tp(tp);
    }
    hb_pkts_free(&ps);
    tw_writer_destroy(w);
    hb_fini(&h);
}
END_TEST

/* Where the writer has asked for its chunk's lines (w->pf): inside the
 * held chunk, with begin_limit at least 130 bytes before its end; and,
 * once a small packet has begun (`small`), ahead of pos (packet_begin_slow
 * asks once pos nears pf) by at most TW_PREFETCH_AHEAD and a line. */
static void check_prefetch_mark(const tw_writer *w, bool small)
{
    if (w->hdr == NULL)
        return;
    uintptr_t pay = (uintptr_t)w->loc.payload;
    uintptr_t cend = pay + w->loc.payload_size;
    uintptr_t pf = (uintptr_t)w->pf, pos = (uintptr_t)w->pos;
    ck_assert_uint_ge(pf, pay);
    ck_assert_uint_le(pf, cend);
    ck_assert_uint_le(w->begin_limit, cend - 130);
    if (small) {
        ck_assert_uint_ge(pf, pos);
        ck_assert_uint_le(pf, pos + TW_PREFETCH_AHEAD + 64);
    }
}

/* Flush, then read every packet back: exactly n, the k-th stamped k
 * (timestamp field 8). The caller frees the packets. */
static hb_pkts read_stamped(hb *h, tw_writer *w, uint32_t n)
{
    ck_assert_int_eq(tw_writer_flush(w), 0);
    hb_pkts ps = hb_read_all(h);
    ck_assert_uint_eq(ps.n, n);
    for (uint32_t k = 0; k < n; k++) {
        Perfetto__Protos__TracePacket *tp = unpack(&ps.v[k]);
        ck_assert_uint_eq(tp->timestamp, k);
        free_tp(tp);
    }
    return ps;
}

/* Small packets: the mark stays ahead of the writer, chunk after chunk,
 * and the packets decode. */
START_TEST(test_prefetch_ahead_of_small_packets)
{
    hb h;
    hb_init(&h, 256 * KiB, 4096, 4 * MiB);
    tw_writer *w = tw_writer_create(h.arb, HB_TARGET, TW_POLICY_DROP);
    uint32_t chunks0 = 0;
    for (uint32_t k = 0; k < 2000; k++) {
        tw_packet_begin(w);
        check_prefetch_mark(w, true);
        tw_add_varint(w, 8, k);
        tw_add_bytes(w, 1, "0123456789abcdef0123456789ABCDEF", 1 + k % 32);
        tw_packet_end(w);            /* may have moved to the next chunk */
        check_prefetch_mark(w, false);
        if (k == 0)
            chunks0 = (uint32_t)w->stats.chunks_used;
    }
    ck_assert_uint_gt(w->stats.chunks_used, chunks0 + 5);
    hb_pkts ps = read_stamped(&h, w, 2000);
    hb_pkts_free(&ps);
    tw_writer_destroy(w);
    hb_fini(&h);
}
END_TEST

/* test_prefetch_stays_inside_the_held_chunk's string length for packet k:
 * 200 B to 3 KiB, or 64 B to 1063 B for the raw-encoded ones (k % 5 == 4,
 * 2-byte length varints). */
static size_t big_field_len(uint32_t k)
{
    size_t len = 200 + (k * 977u) % 2873u;
    return k % 5 == 4 ? len % 1000 + 64 : len;
}

/* The writer asks ahead for the lines of large fields' chunk (prefetch_for)
 * only inside the chunk it holds: after every packet, the prefetch mark
 * lies within the held chunk's payload; and the packets (fields of 200 B
 * to 3 KiB, some straddling chunks, some written raw) decode intact. */
START_TEST(test_prefetch_stays_inside_the_held_chunk)
{
    hb h;
    static uint8_t blob[3072], raw[1100];
    for (size_t i = 0; i < sizeof(blob); i++)
        blob[i] = (uint8_t)('a' + i % 26);
    hb_init(&h, 256 * KiB, 4096, 4 * MiB);
    tw_writer *w = tw_writer_create(h.arb, HB_TARGET, TW_POLICY_DROP);
    size_t asked = 0;
    for (uint32_t k = 0; k < 400; k++) {
        size_t len = big_field_len(k);
        tw_packet_begin(w);
        tw_add_varint(w, 8, k);
        if (k % 5 == 4) {            /* the same, encoded here, raw */
            uint8_t *p = raw;            /* lengths as 2-byte varints,
                                            redundant ones under 128 */
            *p++ = 0xa2, *p++ = 0x38;    /* for_testing (900), len + 6 */
            *p++ = (uint8_t)(0x80 | ((len + 6) & 0x7f));
            *p++ = (uint8_t)((len + 6) >> 7);
            *p++ = 0x2a;                 /* payload (5), len + 3 */
            *p++ = (uint8_t)(0x80 | ((len + 3) & 0x7f));
            *p++ = (uint8_t)((len + 3) >> 7);
            *p++ = 0x0a;                 /* str (1), len */
            *p++ = (uint8_t)(0x80 | (len & 0x7f));
            *p++ = (uint8_t)(len >> 7);
            memcpy(p, blob, len);
            tw_append_raw(w, raw, (size_t)(p + len - raw));
        } else {
            tw_begin_nested(w, 900);
            tw_add_varint(w, 2, k);
            tw_begin_nested(w, 5);
            tw_add_bytes(w, 1, blob, len);
            tw_end_nested(w);
            tw_end_nested(w);
        }
        tw_packet_end(w);
        if (w->hdr != NULL && w->pf != w->loc.payload)
            asked++;
        check_prefetch_mark(w, false);
    }
    ck_assert_uint_gt(asked, 0);     /* the case was exercised */
    hb_pkts ps = read_stamped(&h, w, 400);
    for (uint32_t k = 0; k < 400; k++) {
        Perfetto__Protos__TracePacket *tp = unpack(&ps.v[k]);
        size_t len = big_field_len(k);
        ck_assert_ptr_nonnull(tp->for_testing);
        ck_assert_ptr_nonnull(tp->for_testing->payload);
        ck_assert_uint_eq(tp->for_testing->payload->n_str, 1);
        ck_assert_uint_eq(strlen(tp->for_testing->payload->str[0]), len);
        ck_assert_mem_eq(tp->for_testing->payload->str[0], blob, len);
        if (k % 5 != 4)
            ck_assert_uint_eq(tp->for_testing->seq_value, k);
        free_tp(tp);
    }
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
    ck_assert_uint_eq(hb_read_count(&h), 2);
    tw_writer_destroy(w);
    hb_fini(&h);
}
END_TEST

/* Size field widths (tw.c, "Short size fields"): packets of 1..300 bytes
 * written three ways (raw bytes, 2-byte varint fields, a nested message),
 * so that each way crosses the 126-byte limit of a 1-byte field at every
 * offset. In the chunks: a whole fragment of >= 127 bytes has a 4-byte
 * field, a flat one of < 127 bytes a 1-byte field (a nested one may be
 * either: it passed 126 bytes before its own size field shrank). Read back,
 * every packet is what was written. */
enum { SF_RAW, SF_VARINTS, SF_NESTED, SF_KINDS };

static size_t sf_expected(int kind, size_t L, const uint8_t *data,
                          uint8_t *out)
{
    size_t n = 0;
    switch (kind) {
    case SF_RAW:
        memcpy(out, data, L);
        return L;
    case SF_VARINTS:
        for (size_t i = 0; i < (L + 1) / 2; i++) {
            out[n++] = 0x08;
            out[n++] = (uint8_t)(i & 0x7F);
        }
        return n;
    default:
        out[n++] = 0xA2;
        out[n++] = 0x38;
        if (L >= 128) {              /* not compacted: redundant varint */
            out[n++] = (uint8_t)(L | 0x80);
            out[n++] = (uint8_t)((L >> 7) | 0x80);
            out[n++] = 0x80;
            out[n++] = 0x00;
        } else {
            out[n++] = (uint8_t)L;
        }
        memcpy(out + n, data, L);
        return n + L;
    }
}

START_TEST(test_chunk_size_field_widths)
{
    enum { MAXL = 300 };
    uint8_t *data = malloc(MAXL), *exp = malloc(MAXL + 8);
    size_t npk = SF_KINDS * MAXL, *len = calloc(npk, sizeof(*len));
    int *kind = calloc(npk, sizeof(*kind));
    hb h;
    hb_fill(data, MAXL, 3);
    hb_init_ex(&h, 1 * MiB, 4096, 0, 4 * MiB, HB_QUEUED, 0);
    hb_pause(&h);                    /* chunks stay in the SMB */
    tw_writer *w = tw_writer_create(h.arb, HB_TARGET, TW_POLICY_DROP);
    tw_packet_begin(w);              /* absorb first_packet_on_sequence */
    tw_packet_end(w);
    for (size_t L = 1, k = 0; L <= MAXL; L++) {
        for (int kd = 0; kd < SF_KINDS; kd++, k++) {
            tw_packet_begin(w);
            if (kd == SF_RAW) {
                tw_append_raw(w, data, L);
            } else if (kd == SF_VARINTS) {
                for (size_t i = 0; i < (L + 1) / 2; i++)
                    tw_add_varint(w, 1, i & 0x7F);
            } else {
                tw_begin_nested(w, 900);
                tw_append_raw(w, data, L);
                tw_end_nested(w);
            }
            tw_packet_end(w);
            kind[k] = kd;
            len[k] = sf_expected(kd, L, data, exp);
        }
    }
    tw_writer_flush(w);
    tw_writer_stats st;
    tw_writer_get_stats(w, &st);
    ck_assert_uint_eq(st.packets_lost, 0);

    /* Walk the chunks' fragments (page i holds chunk i: nothing freed). */
    size_t i = 0, wide = 0, narrow = 0;
    bool first = true;               /* the sequence's first packet */
    for (uint32_t c = 0; c < st.chunks_used; c++) {
        smb_chunk_header *ch = chunk_of_page(&h, c);
        uint16_t pk = atomic_load(&ch->packets);
        uint32_t count = smb_packets_count(pk), fl = smb_packets_flags(pk);
        const uint8_t *p = smb_chunk_payload(ch);
        const uint8_t *end = p + 4096 - sizeof(smb_page_header) -
                             sizeof(smb_chunk_header);
        ck_assert_uint_eq(atomic_load(&ch->chunk_id), c);
        for (uint32_t f = 0; f < count; f++) {
            const uint8_t *q = p;
            uint64_t v;
            ck_assert(hb_varint(&q, end, &v));
            size_t hl = (size_t)(q - p);
            bool cont_in = f == 0 &&
                           (fl & SMB_FLAG_FIRST_PACKET_CONTINUES_FROM_PREV);
            bool cont_out = f + 1 == count &&
                            (fl & SMB_FLAG_LAST_PACKET_CONTINUES_ON_NEXT);
            ck_assert_uint_le(v, (uint64_t)(end - q));
            p = q + v;
            if (cont_in || cont_out) {
                ck_assert_uint_eq(hl, 4);
                if (cont_in && !cont_out)
                    i++;             /* a spanning packet ends */
                continue;
            }
            if (v == 0)
                continue;            /* the filler of an inflated chunk */
            if (first) {
                first = false;
                continue;
            }
            ck_assert_uint_lt(i, npk);
            /* a nested size field of a spanning packet stays 4 bytes */
            ck_assert(v == len[i] || (kind[i] == SF_NESTED &&
                                      v == len[i] + 3 && len[i] < 132));
            if (v >= 127)
                ck_assert_msg(hl == 4, "packet %zu: %zu bytes, %zu-byte "
                              "size field", i, (size_t)v, hl);
            else if (kind[i] != SF_NESTED)
                ck_assert_msg(hl == 1, "packet %zu: %zu bytes, %zu-byte "
                              "size field", i, (size_t)v, hl);
            wide += hl == 4;
            narrow += hl == 1;
            i++;
        }
    }
    ck_assert_uint_eq(i, npk);
    ck_assert_uint_gt(wide, 400);    /* both widths were exercised */
    ck_assert_uint_gt(narrow, 300);

    hb_resume(&h);
    hb_drain_and_stop(&h);
    hb_pkts ps = hb_read_all(&h);
    ck_assert_uint_eq(ps.n, 1 + npk);
    for (size_t L = 1, k = 0; L <= MAXL; L++) {
        for (int kd = 0; kd < SF_KINDS; kd++, k++) {
            size_t n = sf_expected(kd, L, data, exp);
            const hb_pkt *got = &ps.v[1 + k];
            if (kd == SF_NESTED) {   /* its size field: 1 or 4 bytes */
                const uint8_t *q = got->data, *e = q + got->size;
                hb_field f;
                ck_assert(hb_next_field(&q, e, &f));
                ck_assert_uint_eq(f.field, 900);
                ck_assert_uint_eq(f.v, L);
                ck_assert(memcmp(f.p, data, L) == 0);
                ck_assert(!hb_next_field(&q, e, &f));
                continue;
            }
            ck_assert_msg(got->size == n && memcmp(got->data, exp, n) == 0,
                          "kind %d, L %zu: %zu bytes back, %zu written", kd,
                          L, got->size, n);
        }
    }
    ck_assert_uint_eq(tb_get_stats(h.buf)->abi_violations, 0);
    hb_pkts_free(&ps);
    tw_writer_destroy(w);
    hb_fini(&h);
    free(data);
    free(exp);
    free(len);
    free(kind);
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

START_TEST(test_fragment_nested_field_at_every_chunk_end_offset)
{
    /* A nested message whose tag and 4-byte size land on each of the last
     * bytes of a chunk: the size never straddles two chunks, and a size
     * left in the old chunk is patched. */
    uint8_t pre[4100], body[100];
    hb h;
    hb_fill(pre, sizeof(pre), 12);
    hb_fill(body, sizeof(body), 13);
    hb_init(&h, 64 * KiB, 4096, 4 * MiB);
    tw_writer *w = tw_writer_create(h.arb, HB_TARGET, TW_POLICY_DROP);
    tw_packet_begin(w);
    tw_packet_end(w);
    for (size_t len = 4055; len <= 4085; len++) {
        tw_writer_flush(w);          /* each packet starts a fresh chunk */
        tw_packet_begin(w);
        tw_append_raw(w, pre, len);
        tw_begin_nested(w, 900);
        tw_add_bytes(w, 1, body, sizeof(body));
        tw_end_nested(w);
        tw_packet_end(w);
    }
    tw_writer_flush(w);
    hb_pkts ps = hb_read_all(&h);
    ck_assert_uint_eq(ps.n, 1 + 31);
    for (size_t k = 0; k < 31; k++) {
        const hb_pkt *pk = &ps.v[1 + k];
        size_t len = 4055 + k;
        HB_CHECK(pk->size > len);
        HB_CHECK(memcmp(pk->data, pre, len) == 0);
        const uint8_t *p = pk->data + len, *end = pk->data + pk->size;
        hb_field f, g;
        HB_CHECK(hb_next_field(&p, end, &f));
        HB_CHECK_EQ(f.field, 900);
        HB_CHECK_EQ(f.v, 102);
        HB_CHECK(p == end);
        p = f.p;
        HB_CHECK(hb_next_field(&p, f.p + f.v, &g));
        HB_CHECK_EQ(g.v, sizeof(body));
        HB_CHECK(memcmp(g.p, body, sizeof(body)) == 0);
    }
    ck_assert_uint_gt(h.patches, 0);
    ck_assert_uint_eq(tb_get_stats(h.buf)->patches_failed, 0);
    hb_pkts_free(&ps);
    tw_writer_destroy(w);
    hb_fini(&h);
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

/* --- random ------------------------------------------------------------- */

/* Seeded random packets (random fields, nesting up to 6 deep, bodies from
 * 0 bytes to 20 KB) on random page sizes and layouts. The test keeps a
 * canonical encoding of what it wrote (1-byte-or-more minimal varint
 * sizes); what comes back is re-encoded canonically (fields >= 1000 are
 * nested messages) and must be identical. */

static uint32_t rnd(uint32_t *x)
{
    return trng_next32(x);
}

/* Write one random message body with tw and canonically into *ref. */
static void rand_body(tw_writer *w, bstr *ref, uint32_t *x, int depth,
                      const uint8_t *blob)
{
    int nfields = (int)(rnd(x) % 6);
    for (int i = 0; i < nfields; i++) {
        uint32_t kind = rnd(x) % 8;
        if (kind < 2 && depth < 6) {
            uint32_t field = 1000 + rnd(x) % 50;
            bstr sub = {NULL, 0, 0};
            tw_begin_nested(w, field);
            rand_body(w, &sub, x, depth + 1, blob);
            tw_end_nested(w);
            bs_varint(ref, (uint64_t)field << 3 | 2);
            bs_varint(ref, sub.n);
            bs_put(ref, sub.d, sub.n);
            free(sub.d);
        } else if (kind < 5) {
            uint32_t field = 1 + rnd(x) % 999;
            uint64_t v = (uint64_t)rnd(x) << (rnd(x) % 33);
            tw_add_varint(w, field, v);
            bs_varint(ref, (uint64_t)field << 3);
            bs_varint(ref, v);
        } else if (kind < 6) {
            uint32_t field = 1 + rnd(x) % 999, v = rnd(x);
            tw_add_fixed32(w, field, v);
            bs_varint(ref, (uint64_t)field << 3 | 5);
            bs_put(ref, &v, 4);
        } else {
            uint32_t field = 1 + rnd(x) % 999;
            size_t len = rnd(x) % 8 == 0 ? rnd(x) % 20000 : rnd(x) % 300;
            const uint8_t *d = blob + rnd(x) % 1000;
            tw_add_bytes(w, field, d, len);
            bs_varint(ref, (uint64_t)field << 3 | 2);
            bs_varint(ref, len);
            bs_put(ref, d, len);
        }
    }
}

/* Canonical re-encoding of a tw-written message. */
static void canon(bstr *out, const uint8_t *p, const uint8_t *end)
{
    hb_field f;
    while (hb_next_field(&p, end, &f)) {
        bs_varint(out, (uint64_t)f.field << 3 | f.wt);
        if (f.wt == 2 && f.field >= 1000) {
            bstr sub = {NULL, 0, 0};
            canon(&sub, f.p, f.p + f.v);
            bs_varint(out, sub.n);
            bs_put(out, sub.d, sub.n);
            free(sub.d);
        } else if (f.wt == 2) {
            bs_varint(out, f.v);
            bs_put(out, f.p, f.v);
        } else if (f.wt == 0) {
            bs_varint(out, f.v);
        } else {
            uint32_t v = (uint32_t)f.v;
            HB_CHECK_EQ(f.wt, 5);
            bs_put(out, &v, 4);
        }
    }
}

START_TEST(test_random_packets_roundtrip)
{
    static const struct { uint32_t page, layout; } cfg[] = {
        {4096, SMB_LAYOUT_DIV1}, {4096, SMB_LAYOUT_DIV14},
        {8192, SMB_LAYOUT_DIV4}, {16384, SMB_LAYOUT_DIV7},
        {32768, SMB_LAYOUT_DIV2}, {65536, SMB_LAYOUT_DIV1},
    };
    uint8_t *blob = malloc(22000);
    uint32_t x = 0xC0FFEE + (uint32_t)_i;
    hb_fill(blob, 22000, 77);
    hb h;
    hb_init_ex(&h, 4 * cfg[_i].page * 4, cfg[_i].page, cfg[_i].layout,
               32 * MiB, HB_SYNC, 0);
    tw_writer *w = tw_writer_create(h.arb, HB_TARGET, TW_POLICY_DROP);
    const int npk = 1500;
    bstr *refs = calloc(npk, sizeof(*refs));
    tw_packet_begin(w);
    tw_packet_end(w);
    for (int i = 0; i < npk; i++) {
        tw_packet_begin(w);
        rand_body(w, &refs[i], &x, 0, blob);
        tw_packet_end(w);
        if (rnd(&x) % 50 == 0)
            tw_writer_flush(w);
    }
    tw_writer_flush(w);
    tw_writer_stats st;
    tw_writer_get_stats(w, &st);
    HB_CHECK_EQ(st.packets_lost, 0);
    HB_CHECK_EQ(st.misuse, 0);
    hb_pkts ps = hb_read_all(&h);
    size_t k = 1, nonempty = 0;
    for (int i = 0; i < npk; i++) {
        bstr c = {NULL, 0, 0};
        if (refs[i].n == 0)
            continue;    /* empty packets are fillers: readers skip them */
        nonempty++;
        HB_CHECK(k < ps.n);
        canon(&c, ps.v[k].data, ps.v[k].data + ps.v[k].size);
        if (c.n != refs[i].n || (c.n && memcmp(c.d, refs[i].d, c.n) != 0))
            ck_abort_msg("config %d packet %d differs (%zu vs %zu bytes)",
                         _i, i, c.n, refs[i].n);
        k++;
        free(c.d);
    }
    HB_CHECK_EQ(ps.n, 1 + nonempty);
    for (int i = 0; i < npk; i++)
        free(refs[i].d);
    HB_CHECK_EQ(tb_get_stats(h.buf)->abi_violations, 0);
    HB_CHECK_EQ(tb_get_stats(h.buf)->patches_failed, 0);
    free(refs);
    hb_pkts_free(&ps);
    tw_writer_destroy(w);
    hb_fini(&h);
    free(blob);
}
END_TEST

/* The same random packets through a tiny SMB and a paused-then-slow
 * service with the drop policy: whatever comes back is intact, gaps are
 * flagged with 257 on the next packet, and nothing is lost silently. */
START_TEST(test_random_packets_with_drops)
{
    uint8_t *blob = malloc(22000);
    uint32_t x = 0xBADC0DE + (uint32_t)_i;
    const uint32_t npk = 3000;
    hb_fill(blob, 22000, 78);
    hb h;
    hb_init_ex(&h, 4 * 4096, 4096, _i % 2 ? SMB_LAYOUT_DIV4 : 0, 32 * MiB,
               HB_QUEUED, 0);
    hb_pause(&h);
    tw_writer *w = tw_writer_create(h.arb, HB_TARGET, TW_POLICY_DROP);
    bstr *refs = calloc(npk, sizeof(*refs));
    for (uint32_t i = 0; i < npk; i++) {
        if (i == npk / 3)
            hb_resume(&h);
        if (i == 2 * npk / 3)
            hb_drain_and_stop(&h);   /* instant service from here on */
        tw_packet_begin(w);
        tw_add_varint(w, 999, i);
        rand_body(w, &refs[i], &x, 0, blob);
        tw_packet_end(w);
    }
    tw_writer_flush(w);
    hb_drain_and_stop(&h);
    tw_writer_stats st;
    tw_writer_get_stats(w, &st);
    hb_pkts ps = hb_read_all(&h);
    uint64_t expect = 0;
    size_t got = 0, gaps = 0;
    for (size_t k = 0; k < ps.n; k++) {
        const uint8_t *p = ps.v[k].data, *end = p + ps.v[k].size;
        hb_field f;
        bool flagged = false;
        HB_CHECK(hb_next_field(&p, end, &f));
        if (f.field == 87)               /* first packet of the sequence */
            HB_CHECK(hb_next_field(&p, end, &f));
        if (f.field == 42) {
            HB_CHECK_EQ(f.v, 257);
            flagged = true;
            HB_CHECK(hb_next_field(&p, end, &f));
        }
        HB_CHECK_EQ(f.field, 999);
        HB_CHECK(f.v >= expect && f.v < npk);
        if (f.v != expect) {
            HB_CHECK(flagged);
            gaps++;
        } else {
            HB_CHECK(!flagged);
        }
        bstr c = {NULL, 0, 0};
        canon(&c, p, end);
        const bstr *r = &refs[f.v];
        if (c.n != r->n || (c.n && memcmp(c.d, r->d, c.n) != 0))
            ck_abort_msg("packet %llu corrupted", (unsigned long long)f.v);
        free(c.d);
        expect = f.v + 1;
        got++;
    }
    HB_CHECK(gaps > 0);
    HB_CHECK_EQ(got + st.packets_lost, npk);
    HB_CHECK_EQ(tb_get_stats(h.buf)->abi_violations, 0);
    for (uint32_t i = 0; i < npk; i++)
        free(refs[i].d);
    free(refs);
    hb_pkts_free(&ps);
    tw_writer_destroy(w);
    hb_fini(&h);
    free(blob);
}
END_TEST

/* --- bulk: large writes take and hand back runs of chunks --------------- */

static uint8_t *bulk_varint(uint8_t *p, uint64_t v)
{
    while (v >= 0x80) {
        *p++ = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    *p++ = (uint8_t)v;
    return p;
}

/* Expected bytes of {8: ts, 900: {1: blob[0..n)}} as the writer encodes it
 * when the nested message crosses chunks (its size stays 4 bytes). */
static size_t bulk_expect(uint8_t *out, uint64_t ts, const uint8_t *blob,
                          size_t n)
{
    uint8_t *p = out;
    size_t body;
    *p++ = 8 << 3;
    p = bulk_varint(p, ts);
    *p++ = 0xA2;
    *p++ = 0x38;                     /* 900 << 3 | 2 */
    uint8_t len[10];
    body = 1 + (size_t)(bulk_varint(len, n) - len) + n;
    smb_write_redundant_varint(p, (uint32_t)body);
    p += 4;
    *p++ = 0x0A;
    p = bulk_varint(p, n);
    memcpy(p, blob, n);
    return (size_t)(p - out) + n;
}

static void bulk_packet(tw_writer *w, uint64_t ts, const uint8_t *blob,
                        size_t n)
{
    tw_packet_begin(w);
    tw_add_varint(w, 8, ts);
    tw_begin_nested(w, 900);
    tw_add_bytes(w, 1, blob, n);
    tw_end_nested(w);
    tw_packet_end(w);
}

/* A 100 KiB field on 4 KiB pages: the chunks it fills are taken and handed
 * back in runs (few commit batches), all of them before the call returns
 * (the packet is still open): middle chunks carry count 1, both
 * continuation flags and a 4076-byte fragment; the packet comes back byte
 * for byte. */
START_TEST(test_bulk_run_headers_all_committed_in_the_call)
{
    const size_t n = 100 * KiB;
    uint8_t *blob = malloc(n), *want = malloc(n + 64);
    uint8_t size4076[4];
    hb h;
    hb_fill(blob, n, 11);
    smb_write_redundant_varint(size4076, 4076);
    hb_init_ex(&h, 64 * 4096, 4096, 0, 32 * MiB, HB_QUEUED, 0);
    hb_pause(&h);                    /* returned chunks stay Complete */
    tw_writer *w = tw_writer_create(h.arb, HB_TARGET, TW_POLICY_DROP);
    tw_packet_begin(w);
    tw_add_varint(w, 8, 5);
    tw_begin_nested(w, 900);
    tw_add_bytes(w, 1, blob, n);
    /* Inside the packet: every filled chunk is committed already. */
    ck_assert_uint_eq(w->nfull, 0);
    tw_writer_stats st;
    tw_writer_get_stats(w, &st);
    ck_assert_uint_eq(st.chunks_used, 26);   /* 102420 B / 4076 + 1 */
    ck_assert_uint_eq(w->loc.page, 25);      /* Div1: page i = chunk i */
    ck_assert_uint_eq(w->chunk_id, 25);
    for (uint32_t p = 0; p < 26; p++) {
        smb_page_header *ph = smb_page_at(h.shm.base, 4096, p);
        smb_chunk_header *c = smb_chunk_at(ph, 4096, SMB_LAYOUT_DIV1, 0);
        uint16_t pk = atomic_load(&c->packets);
        ck_assert_uint_eq(atomic_load(&ph->header_bitmap),
                          (SMB_LAYOUT_DIV1 << SMB_LAYOUT_SHIFT) |
                          (p == 25 ? SMB_CHUNK_BEING_WRITTEN
                                   : SMB_CHUNK_COMPLETE));
        ck_assert_uint_eq(atomic_load(&c->chunk_id), p);
        ck_assert_uint_eq(smb_packets_count(pk), 1);
        if (p == 0)
            ck_assert_uint_eq(pk, smb_make_packets(1,
                    SMB_FLAG_LAST_PACKET_CONTINUES_ON_NEXT |
                    SMB_FLAG_NEEDS_PATCHING));
        else if (p < 25)
            ck_assert_uint_eq(pk, smb_make_packets(1,
                    SMB_FLAG_FIRST_PACKET_CONTINUES_FROM_PREV |
                    SMB_FLAG_LAST_PACKET_CONTINUES_ON_NEXT));
        if (p > 0 && p < 25)
            ck_assert_mem_eq(smb_chunk_payload(c), size4076, 4);
    }
    smb_arbiter_stats as;
    smb_arbiter_get_stats(h.arb, &as);
    ck_assert_uint_eq(as.chunks_acquired, 26);
    ck_assert_uint_eq(as.chunks_returned, 25);
    ck_assert_uint_le(as.batches_sent, 4);   /* not one per chunk */
    tw_end_nested(w);
    tw_packet_end(w);
    ck_assert_int_eq(tw_writer_flush(w), 0);
    hb_drain_and_stop(&h);
    hb_pkts ps = hb_read_all(&h);
    ck_assert_uint_eq(ps.n, 1);
    size_t wn = bulk_expect(want, 5, blob, n);
    /* the first packet starts with first_packet_on_sequence (87 = 1) */
    ck_assert_uint_eq(ps.v[0].size, wn + 3);
    ck_assert_mem_eq(ps.v[0].data, "\xB8\x05\x01", 3);
    ck_assert_mem_eq(ps.v[0].data + 3, want, wn);
    ck_assert_uint_eq(tb_get_stats(h.buf)->abi_violations, 0);
    ck_assert_uint_eq(tb_get_stats(h.buf)->patches_failed, 0);
    hb_pkts_free(&ps);
    tw_writer_destroy(w);
    hb_fini(&h);
    free(blob);
    free(want);
}
END_TEST

/* 1 MiB packets through a 16-chunk SMB (bulk runs of 4) and a service
 * thread that frees chunks only as their commits arrive, stall policy
 * (Div1 and Div2 pages): nothing lost, everything intact. */
START_TEST(test_bulk_stall_hands_back_before_waiting)
{
    const size_t n = MiB;
    const int npk = 6;
    uint8_t *blob = malloc(n + npk), *want = malloc(n + 64);
    hb h;
    hb_fill(blob, n + npk, 12);
    hb_init_ex(&h, 16 * 4096, 4096, _i ? SMB_LAYOUT_DIV2 : 0, 64 * MiB,
               HB_QUEUED, 0);
    tw_writer *w = tw_writer_create(h.arb, HB_TARGET,
                                    TW_POLICY_STALL_THEN_ABORT);
    for (int i = 0; i < npk; i++)
        bulk_packet(w, (uint64_t)i, blob + i, n);
    ck_assert_int_eq(tw_writer_flush(w), 0);
    hb_drain_and_stop(&h);
    tw_writer_stats st;
    tw_writer_get_stats(w, &st);
    ck_assert_uint_eq(st.packets_lost, 0);
    hb_pkts ps = hb_read_all(&h);
    ck_assert_uint_eq(ps.n, npk);
    for (int i = 0; i < npk; i++) {
        size_t wn = bulk_expect(want, (uint64_t)i, blob + i, n);
        const uint8_t *d = ps.v[i].data;
        size_t dn = ps.v[i].size;
        if (i == 0) {                /* starts with 87 = 1 */
            ck_assert_uint_eq(dn, wn + 3);
            ck_assert_mem_eq(d, "\xB8\x05\x01", 3);
            d += 3;
            dn -= 3;
        }
        ck_assert_uint_eq(dn, wn);
        ck_assert_mem_eq(d, want, wn);
    }
    ck_assert_uint_eq(tb_get_stats(h.buf)->abi_violations, 0);
    hb_pkts_free(&ps);
    tw_writer_destroy(w);
    hb_fini(&h);
    free(blob);
    free(want);
}
END_TEST

/* Resume the paused service once the writer has stalled. */
static void *bulk_resume_on_stall(void *arg)
{
    hb *h = arg;
    smb_arbiter_stats as;
    for (;;) {
        smb_arbiter_get_stats(h->arb, &as);
        if (as.stalls > 0)
            break;
        usleep(1000);
    }
    hb_resume(h);
    return NULL;
}

/* 8-chunk SMB (bulk runs of 2), paused service, stall policy: a 32 KiB
 * field fills 7 chunks and holds the 8th; all 7 are committed when the
 * call returns (so a producer that dies now leaves them to the service).
 * A 3000-byte field then needs a 9th chunk while none is free: the writer
 * stalls until the service runs, and nothing is lost. */
START_TEST(test_bulk_committed_then_stall)
{
    const size_t n = 4063 + 6 * 4076 + 4000;
    uint8_t *blob = malloc(n), small[3000];
    hb h;
    pthread_t th;
    hb_fill(blob, n, 14);
    hb_fill(small, sizeof(small), 15);
    hb_init_ex(&h, 8 * 4096, 4096, 0, 32 * MiB, HB_QUEUED, 0);
    hb_pause(&h);
    tw_writer *w = tw_writer_create(h.arb, HB_TARGET,
                                    TW_POLICY_STALL_THEN_ABORT);
    tw_packet_begin(w);
    tw_begin_nested(w, 900);
    tw_add_bytes(w, 1, blob, n);
    ck_assert_uint_eq(w->nfull, 0);
    ck_assert_uint_eq(w->chunk_id, 7);
    pthread_mutex_lock(&h.mu);
    ck_assert_uint_eq(h.chunks, 7);
    pthread_mutex_unlock(&h.mu);
    ck_assert_int_eq(pthread_create(&th, NULL, bulk_resume_on_stall, &h),
                     0);
    tw_add_bytes(w, 2, small, sizeof(small));    /* stalls */
    tw_end_nested(w);
    tw_packet_end(w);
    pthread_join(th, NULL);
    tw_writer_stats st;
    tw_writer_get_stats(w, &st);
    ck_assert_uint_gt(st.stalls, 0);
    ck_assert_uint_eq(st.packets_lost, 0);
    ck_assert_int_eq(tw_writer_flush(w), 0);
    hb_drain_and_stop(&h);
    hb_pkts ps = hb_read_all(&h);
    ck_assert_uint_eq(ps.n, 1);
    /* 87=1 (3) 900 tag+size (6) 1: tag+len (4) + n, 2: tag+len (3) */
    ck_assert_uint_eq(ps.v[0].size, 3 + 6 + 4 + n + 3 + sizeof(small));
    ck_assert_mem_eq(ps.v[0].data + 13, blob, n);
    ck_assert_mem_eq(ps.v[0].data + 13 + n + 3, small, sizeof(small));
    hb_pkts_free(&ps);
    tw_writer_destroy(w);
    hb_fini(&h);
    free(blob);
}
END_TEST

/* Drop policy, a paused service and a packet larger than the SMB: the
 * bulk path fills what it can get, then the packet is cut (sentinel,
 * counted once: by the service's buffer); nothing stays held; the next
 * packet carries 257. */
START_TEST(test_bulk_drop_mid_packet_is_counted)
{
    const size_t n = 200 * KiB;
    uint8_t *blob = malloc(n);
    hb h;
    hb_fill(blob, n, 13);
    hb_init_ex(&h, 16 * 4096, 4096, 0, 32 * MiB, HB_QUEUED, 0);
    hb_pause(&h);
    tw_writer *w = tw_writer_create(h.arb, HB_TARGET, TW_POLICY_DROP);
    bulk_packet(w, 1, blob, n);
    ck_assert_uint_eq(w->nfull, 0);
    ck_assert_ptr_null(w->hdr);      /* dropping: no chunk held */
    tw_writer_stats st;
    tw_writer_get_stats(w, &st);
    ck_assert_uint_eq(st.packets_lost, 1);
    ck_assert_uint_eq(st.chunks_used, 16);
    smb_arbiter_stats as;
    smb_arbiter_get_stats(h.arb, &as);
    ck_assert_uint_eq(as.chunks_returned, 16);
    hb_drain_and_stop(&h);           /* frees everything, then sync */
    tw_packet_begin(w);
    tw_add_varint(w, 999, 7);
    tw_packet_end(w);
    ck_assert_int_eq(tw_writer_flush(w), 0);
    hb_pkts ps = hb_read_all(&h);
    ck_assert_uint_eq(ps.n, 1);
    const uint8_t *p = ps.v[0].data, *end = p + ps.v[0].size;
    hb_field f;
    ck_assert(hb_next_field(&p, end, &f));
    ck_assert_uint_eq(f.field, 42);
    ck_assert_uint_eq(f.v, 257);
    ck_assert_uint_eq(tb_get_stats(h.buf)->trace_writer_packet_loss, 1);
    hb_pkts_free(&ps);
    tw_writer_destroy(w);
    hb_fini(&h);
    free(blob);
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
    for (int i = 0; i < 5000; i++) { /* every garbage fill level */
        tw_packet_begin(nw);
        tw_append_raw(nw, "0123456789012345678901234567890123456789",
                      (size_t)(i % 41));
        tw_packet_end(nw);
    }
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

static Suite *tw_suite(void)
{
    Suite *s = suite_create("tw");
    TCK_CASE(s, "encode", test_encode_small_packets_match_protobuf_c,
             test_encode_field_types, test_encode_nested_messages,
             test_encode_varint_lengths_and_small_bytes,
             test_encode_misuse_is_counted_not_fatal,
             test_packet_end_closes_overflowed_nesting,
             test_prefetch_ahead_of_small_packets,
             test_prefetch_stays_inside_the_held_chunk);
    TCK_CASE(s, "chunk", test_chunk_header_and_framing_bytes,
             test_chunk_size_field_widths, test_chunk_spec_worked_example);
    TCase *tc = TCK_CASE(s, "fragment", test_fragment_sizes_1B_to_8MiB,
                         test_fragment_nested_field_at_every_chunk_end_offset,
                         test_fragment_other_layouts_and_pages);
    tcase_set_timeout(tc, 120);
    tc = tck_loop_case(s, "random", test_random_packets_roundtrip, 0, 6);
    tcase_add_loop_test(tc, test_random_packets_with_drops, 0, 4);
    tcase_set_timeout(tc, 120);
    tc = TCK_CASE(s, "bulk", test_bulk_run_headers_all_committed_in_the_call,
                  test_bulk_committed_then_stall,
                  test_bulk_drop_mid_packet_is_counted);
    tcase_add_loop_test(tc, test_bulk_stall_hands_back_before_waiting, 0, 2);
    tcase_set_timeout(tc, 120);
    tc = TCK_CASE(s, "ids", test_ids_chunk_id_wraps,
                  test_ids_writer_ids_next_fit_and_recycled,
                  test_ids_create_rejects_bad_arguments);
    tcase_set_timeout(tc, 120);
    return s;
}

TCK_MAIN(tw_suite)
