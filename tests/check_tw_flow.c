/*
 * check_tw_flow.c - TraceWriter in motion: 8 threads, SMB exhaustion (drop
 * and stall policies, shutdown), scraping while writing and reading, and
 * two real processes sharing an SMB.
 *
 * Packets go the real way: tw_writer -> SMB (memfd) -> arbiter ->
 * transport -> smb_reader -> libbuf tb_buffer -> tb_read_next_packet.
 */
#include <errno.h>
#include <stdio.h>
#include <sys/wait.h>

#include "check_smb_harness.h"
#include "tck_main.h"

#define KiB 1024u
#define MiB (1024u * 1024u)

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
    /* Exact accounting across the process boundary: what the writer
     * reported (packets that never reached the SMB) plus what the buffer
     * counted lost or still holds is every packet not read, exactly. */
    size_t nl = 0;
    const tb_seq_loss *l = tb_get_seq_loss(h.buf, &nl);
    uint64_t buf_lost = 0, pending = 0;
    for (size_t k = 0; k < nl; k++) {
        if (l[k].writer_id != wid)
            continue;
        pending += l[k].packets_pending;
        for (int c = 0; c < TB_NUM_CAUSES; c++)
            buf_lost += l[k].lost_packets[c];
    }
    ck_assert_uint_lt(wid, 256);
    ck_assert_uint_gt(h.rep_lost[wid], 0);
    ck_assert_uint_gt(h.rep_lost_bytes[wid], h.rep_lost[wid]);
    ck_assert_uint_le(h.rep_lost[wid], st.packets_lost);
    ck_assert_uint_eq(got + h.rep_lost[wid] + buf_lost + pending, total);
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

/* --- trailing loss marker ------------------------------------------------ */

/* Fill a paused 4-chunk SMB with a drop-policy writer until packets are
 * lost (and a few more are lost after that); returns packets written. */
static uint32_t fill_until_lost(tw_writer *w)
{
    tw_writer_stats st;
    uint32_t i = 0, after = 0;
    for (; i < 5000 && after < 20; i++) {
        tw_packet_begin(w);
        tw_add_varint(w, 2, i);
        tw_add_bytes(w, 1, "0123456789012345678901234567890123456789", 40);
        tw_packet_end(w);
        tw_writer_get_stats(w, &st);
        after += st.packets_lost > 0;
    }
    ck_assert_uint_gt(st.packets_lost, 0);
    return i;
}

/* Packets of writer `wid`, the last one in *last (NULL if none). */
static size_t data_packets(hb_pkts *ps, uint16_t wid, const hb_pkt **last)
{
    size_t n = 0;
    uint64_t v;
    *last = NULL;
    for (size_t i = 0; i < ps->n; i++) {
        if (ps->v[i].writer_id != wid)
            continue;
        *last = &ps->v[i];
        n += hb_find_varint(&ps->v[i], 2, &v);
    }
    return n;
}

static void assert_is_marker(const hb_pkt *k)
{
    const uint8_t *p = k->data, *end = k->data + k->size;
    hb_field f;
    ck_assert_ptr_nonnull(k);
    ck_assert(hb_next_field(&p, end, &f));
    ck_assert_uint_eq(f.field, 42);
    ck_assert_uint_eq(f.wt, 0);
    ck_assert_uint_eq(f.v, 257);
    ck_assert(!hb_next_field(&p, end, &f));   /* nothing else */
}

START_TEST(test_marker_flush_flags_trailing_loss)
{
    hb h;
    tw_writer_stats st;
    const hb_pkt *last;
    hb_init_ex(&h, 16 * KiB, 4096, 0, MiB, HB_QUEUED, 0);
    hb_pause(&h);
    tw_writer *w = tw_writer_create(h.arb, HB_TARGET, TW_POLICY_DROP);
    uint16_t wid = tw_writer_id(w);
    uint32_t total = fill_until_lost(w);
    hb_drain_and_stop(&h);           /* the SMB has room again */
    ck_assert_int_eq(tw_writer_flush(w), 0);
    ck_assert_int_eq(tw_writer_flush(w), 0);   /* nothing pending now */
    tw_writer_get_stats(w, &st);
    ck_assert_uint_eq(st.loss_markers, 1);
    ck_assert_uint_eq(st.loss_markers_failed, 0);
    tw_writer_destroy(w);
    hb_pkts ps = hb_read_all(&h);
    size_t got = data_packets(&ps, wid, &last);
    assert_is_marker(last);
    ck_assert_uint_eq(got + st.packets_lost, total);
    ck_assert_uint_eq(ps.n, got + 1);
    ck_assert_uint_eq(tb_get_stats(h.buf)->abi_violations, 0);
    hb_pkts_free(&ps);
    hb_fini(&h);
}
END_TEST

START_TEST(test_marker_given_up_then_written_by_destroy)
{
    /* Nobody drains: flush gives up after its bounded stall (the loss is
     * still pending); once the SMB has room, destroy writes the marker. */
    hb h;
    tw_writer_stats st;
    const hb_pkt *last;
    hb_init_ex(&h, 16 * KiB, 4096, 0, MiB, HB_QUEUED, 0);
    hb_pause(&h);
    tw_writer *w = tw_writer_create(h.arb, HB_TARGET, TW_POLICY_DROP);
    uint16_t wid = tw_writer_id(w);
    uint32_t total = fill_until_lost(w);
    tw_writer_flush(w);
    tw_writer_get_stats(w, &st);
    ck_assert_uint_eq(st.loss_markers, 0);
    ck_assert_uint_eq(st.loss_markers_failed, 1);
    hb_drain_and_stop(&h);
    tw_writer_destroy(w);
    hb_pkts ps = hb_read_all(&h);
    size_t got = data_packets(&ps, wid, &last);
    assert_is_marker(last);
    ck_assert_uint_eq(got + st.packets_lost, total);
    ck_assert_uint_eq(ps.n, got + 1);
    hb_pkts_free(&ps);
    hb_fini(&h);
}
END_TEST

START_TEST(test_marker_none_without_pending_loss)
{
    hb h;
    tw_writer_stats st;
    const hb_pkt *last;
    uint64_t v;
    /* No loss at all: flush and destroy add nothing. */
    hb_init(&h, 64 * KiB, 4096, MiB);
    tw_writer *w = tw_writer_create(h.arb, HB_TARGET, TW_POLICY_DROP);
    uint16_t wid = tw_writer_id(w);
    for (uint32_t i = 0; i < 100; i++) {
        tw_packet_begin(w);
        tw_add_varint(w, 2, i);
        tw_packet_end(w);
    }
    tw_writer_flush(w);
    tw_writer_get_stats(w, &st);
    ck_assert_uint_eq(st.loss_markers + st.loss_markers_failed, 0);
    tw_writer_destroy(w);
    hb_pkts ps = hb_read_all(&h);
    ck_assert_uint_eq(data_packets(&ps, wid, &last), 100);
    ck_assert_uint_eq(ps.n, 100);
    hb_pkts_free(&ps);
    hb_fini(&h);

    /* A loss already flagged by a later real packet: no marker either. */
    hb_init_ex(&h, 16 * KiB, 4096, 0, MiB, HB_QUEUED, 0);
    hb_pause(&h);
    w = tw_writer_create(h.arb, HB_TARGET, TW_POLICY_DROP);
    wid = tw_writer_id(w);
    uint32_t total = fill_until_lost(w);
    hb_drain_and_stop(&h);
    /* Drop mode retries a chunk once its garbage wraps: write until a
     * packet gets through (it carries the flag). */
    tw_writer_stats before;
    tw_writer_get_stats(w, &before);
    do {
        tw_packet_begin(w);
        tw_add_varint(w, 2, total++);
        tw_add_bytes(w, 1, "0123456789012345678901234567890123456789", 40);
        tw_packet_end(w);
        tw_writer_get_stats(w, &st);
    } while (st.packets_written == before.packets_written);
    tw_writer_flush(w);
    tw_writer_get_stats(w, &st);
    ck_assert_uint_eq(st.loss_markers + st.loss_markers_failed, 0);
    tw_writer_destroy(w);
    ps = hb_read_all(&h);
    size_t got = data_packets(&ps, wid, &last);
    ck_assert_uint_eq(ps.n, got);
    ck_assert(hb_find_varint(last, 2, &v));
    ck_assert_uint_eq(v, total - 1);
    ck_assert(hb_find_varint(last, 42, &v));
    ck_assert_uint_eq(v, 257);
    ck_assert_uint_eq(got + st.packets_lost, total);
    hb_pkts_free(&ps);
    hb_fini(&h);
}
END_TEST

START_TEST(test_marker_none_after_shutdown)
{
    /* A shut-down arbiter: no stall, no marker; the loss stays counted. */
    hb h;
    tw_writer_stats st;
    hb_init_ex(&h, 16 * KiB, 4096, 0, MiB, HB_QUEUED, 0);
    hb_pause(&h);
    tw_writer *w = tw_writer_create(h.arb, HB_TARGET, TW_POLICY_DROP);
    uint32_t total = fill_until_lost(w);
    smb_arbiter_shutdown(h.arb);
    hb_drain_and_stop(&h);
    tw_writer_flush(w);
    tw_writer_get_stats(w, &st);
    ck_assert_uint_eq(st.loss_markers, 0);
    ck_assert_uint_eq(st.loss_markers_failed, 1);
    tw_writer_destroy(w);
    hb_pkts ps = hb_read_all(&h);
    ck_assert_uint_eq(ps.n + st.packets_lost, total);
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

static Suite *tw_flow_suite(void)
{
    Suite *s = suite_create("tw_flow");
    TCase *tc;

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

    tc = tcase_create("loss_marker");
    tcase_add_test(tc, test_marker_flush_flags_trailing_loss);
    tcase_add_test(tc, test_marker_given_up_then_written_by_destroy);
    tcase_add_test(tc, test_marker_none_without_pending_loss);
    tcase_add_test(tc, test_marker_none_after_shutdown);
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

TCK_MAIN(tw_flow_suite)
