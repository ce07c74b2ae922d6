/*
 * check_tw_incremental.c - TraceWriter side of ClearIncrementalState:
 * tw_writer_clear_incremental_state() marks the next packet actually
 * written with sequence_flags = SEQ_INCREMENTAL_STATE_CLEARED (13 = 1),
 * once per request (requests before that packet coalesce), a packet lost
 * to a full SMB does not consume the request, and requests from another
 * thread while the writer writes are safe.
 *
 * Packets go writer -> SMB -> arbiter -> reader -> tb_buffer through the
 * shared harness (tests/check_smb_harness.h) and are decoded with
 * protobuf-c.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>

#include "check_smb_harness.h"
#include "trace.pb-c.h"

#define KiB 1024u
#define MiB (1024u * 1024u)

/* Packets of the harness: count, and which carry the clear flag. */
static size_t read_flags(hb *h, bool *cleared, size_t max, uint32_t *vals)
{
    hb_pkts ps = hb_read_all(h);
    ck_assert_uint_le(ps.n, max);
    for (size_t i = 0; i < ps.n; i++) {
        Perfetto__Protos__TracePacket *tp =
            perfetto__protos__trace_packet__unpack(NULL, ps.v[i].size,
                                                   ps.v[i].data);
        ck_assert_ptr_nonnull(tp);
        cleared[i] = tp->has_sequence_flags && tp->sequence_flags == 1;
        if (tp->has_sequence_flags)
            ck_assert_uint_eq(tp->sequence_flags, 1);
        vals[i] = tp->for_testing ? tp->for_testing->seq_value : UINT32_MAX;
        perfetto__protos__trace_packet__free_unpacked(tp, NULL);
    }
    size_t n = ps.n;
    hb_pkts_free(&ps);
    return n;
}

static void write_one(tw_writer *w, uint32_t i, int *was_cleared)
{
    tw_packet_begin(w);
    if (was_cleared)
        *was_cleared = tw_packet_incremental_state_cleared(w);
    tw_begin_nested(w, 900);
    tw_add_varint(w, 2, i);
    tw_end_nested(w);
    tw_packet_end(w);
}

START_TEST(test_clear_marks_next_packet_once)
{
    hb h;
    hb_init(&h, 64 * KiB, 4096, MiB);
    tw_writer *w = tw_writer_create(h.arb, HB_TARGET, TW_POLICY_DROP);
    ck_assert_ptr_nonnull(w);
    int c[6];
    write_one(w, 0, &c[0]);
    tw_writer_clear_incremental_state(w);
    tw_writer_clear_incremental_state(w);   /* coalesces with the first */
    write_one(w, 1, &c[1]);
    write_one(w, 2, &c[2]);
    tw_writer_clear_incremental_state(w);
    write_one(w, 3, &c[3]);
    write_one(w, 4, &c[4]);
    /* Outside a packet the query says no. */
    ck_assert_int_eq(tw_packet_incremental_state_cleared(w), 0);
    ck_assert_int_eq(tw_packet_incremental_state_cleared(NULL), 0);
    tw_writer_clear_incremental_state(NULL);  /* harmless */
    ck_assert_int_eq(tw_writer_flush(w), 0);
    bool cl[8];
    uint32_t v[8];
    size_t n = read_flags(&h, cl, 8, v);
    ck_assert_uint_eq(n, 5);
    static const bool want[5] = { false, true, false, true, false };
    for (size_t i = 0; i < n; i++) {
        ck_assert_uint_eq(v[i], i);
        ck_assert_int_eq(cl[i], want[i]);
        ck_assert_int_eq(c[i], want[i]);
    }
    tw_writer_destroy(w);
    hb_fini(&h);
}
END_TEST

/* A request while the SMB is full: the lost packets do not consume it,
 * the first packet written after the service caught up carries it. */
START_TEST(test_clear_survives_dropped_packets)
{
    hb h;
    hb_init_ex(&h, 4 * 4096, 4096, 0, 8 * MiB, HB_QUEUED, 0);
    hb_pause(&h);
    tw_writer *w = tw_writer_create(h.arb, HB_TARGET, TW_POLICY_DROP);
    uint8_t blob[1000];
    hb_fill(blob, sizeof(blob), 5);
    uint32_t i = 0;
    tw_writer_stats st;
    do {                                   /* fill the SMB until a loss */
        tw_packet_begin(w);
        tw_begin_nested(w, 900);
        tw_add_varint(w, 2, i++);
        tw_add_bytes(w, 1, blob, sizeof(blob));
        tw_end_nested(w);
        tw_packet_end(w);
        tw_writer_get_stats(w, &st);
    } while (st.packets_lost == 0 && i < 10000);
    ck_assert_uint_gt(st.packets_lost, 0);
    tw_writer_clear_incremental_state(w);
    int cleared = -1;
    write_one(w, i++, &cleared);           /* still dropping: lost */
    ck_assert_int_eq(cleared, 0);
    hb_drain_and_stop(&h);
    /* Written packets now; the first one that reaches the SMB is marked. */
    int first_cleared = -1;
    for (int k = 0; k < 50; k++) {
        int c;
        write_one(w, i++, &c);
        if (c) {
            first_cleared = k;
            break;
        }
    }
    ck_assert_int_ge(first_cleared, 0);
    tw_writer_flush(w);
    hb_pkts ps = hb_read_all(&h);
    size_t flagged = 0;
    for (size_t k = 0; k < ps.n; k++) {
        Perfetto__Protos__TracePacket *tp =
            perfetto__protos__trace_packet__unpack(NULL, ps.v[k].size,
                                                   ps.v[k].data);
        ck_assert_ptr_nonnull(tp);
        flagged += tp->has_sequence_flags && tp->sequence_flags == 1;
        perfetto__protos__trace_packet__free_unpacked(tp, NULL);
    }
    hb_pkts_free(&ps);
    ck_assert_uint_eq(flagged, 1);
    tw_writer_destroy(w);
    hb_fini(&h);
}
END_TEST

typedef struct {
    tw_writer *w;
    atomic_bool stop;
    unsigned requests;
} req_ctx;

static void *requester(void *arg)
{
    req_ctx *r = arg;
    while (!atomic_load(&r->stop) && r->requests < 2000) {
        tw_writer_clear_incremental_state(r->w);
        r->requests++;
        sched_yield();
    }
    return NULL;
}

/* Requests from another thread while the writer writes (the IPC thread of
 * a producer): every flagged packet answers some request, never more
 * flagged packets than requests, and a request made after the requester
 * stopped is answered by the next packet. Run under TSan/ASan too. */
START_TEST(test_clear_from_another_thread)
{
    hb h;
    hb_init(&h, 256 * KiB, 4096, 16 * MiB);
    tw_writer *w = tw_writer_create(h.arb, HB_TARGET, TW_POLICY_DROP);
    req_ctx r = { .w = w, .requests = 0 };
    atomic_init(&r.stop, false);
    pthread_t t;
    ck_assert_int_eq(pthread_create(&t, NULL, requester, &r), 0);
    uint32_t i;
    size_t seen = 0;
    for (i = 0; i < 20000; i++) {
        int c;
        write_one(w, i, &c);
        seen += c != 0;
    }
    atomic_store(&r.stop, true);
    pthread_join(t, NULL);
    tw_writer_clear_incremental_state(w);
    int last;
    write_one(w, i++, &last);
    ck_assert_int_eq(last, 1);
    seen++;
    tw_writer_flush(w);
    hb_pkts ps = hb_read_all(&h);
    size_t flagged = 0;
    for (size_t k = 0; k < ps.n; k++) {
        Perfetto__Protos__TracePacket *tp =
            perfetto__protos__trace_packet__unpack(NULL, ps.v[k].size,
                                                   ps.v[k].data);
        ck_assert_ptr_nonnull(tp);
        flagged += tp->has_sequence_flags && tp->sequence_flags == 1;
        perfetto__protos__trace_packet__free_unpacked(tp, NULL);
    }
    ck_assert_uint_eq(ps.n, i);
    hb_pkts_free(&ps);
    ck_assert_uint_eq(flagged, seen);
    ck_assert_uint_ge(flagged, 1);
    ck_assert_uint_le(flagged, r.requests + 1);
    tw_writer_destroy(w);
    hb_fini(&h);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("tw_incremental");
    TCase *tc = tcase_create("clear");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_clear_marks_next_packet_once);
    tcase_add_test(tc, test_clear_survives_dropped_packets);
    tcase_add_test(tc, test_clear_from_another_thread);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
