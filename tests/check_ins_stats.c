/*
 * check_ins_stats.c - trace processor's stats semantics on traces this
 * test writes itself with protobuf-c: TraceStats values -> the exact stats
 * rows; previous_packet_dropped bitmasks -> derived stats and data_loss
 * rows; incremental state; service events; the buffer and sequence tables;
 * ftrace stats (FtraceStats begin/end, bundles' lost_events).
 * Rules: ../shared/spec/stats-schema.md (and inspector/ins_stats.h).
 */
#include "check_ins_util.h"

#include "config.pb-c.h"
#include "ins_fevents.h"
#include "ins_stats.h"
#include "tck_main.h"

typedef ck_session session;

static int64_t rows(session *s, const char *where)
{
    return ck_q_int(s->conn, -1, NULL, "select count(*) from stats where %s",
                    where);
}

START_TEST(test_stats_single_rows_exist_at_zero)
{
    session s;
    ck_session_open(&s);
    ck_write_seq_packet(s.f, 2, 100, 0, 0);
    ck_session_inspect(&s);
    ck_assert_int_eq(rows(&s, "name like 'traced_%' and idx is null"), 15);
    ck_assert_int_eq(rows(&s, "name like 'traced_%' and idx is null "
                          "and value != 0"), 0);
    ck_assert_int_eq(rows(&s, "idx is not null"), 0);
    /* Every single stat's severity/source per stats.h. */
    ck_assert_int_eq(rows(&s, "name in ('traced_final_flush_failed', "
                          "'traced_flushes_failed') and severity = "
                          "'data_loss' and source = 'trace'"), 2);
    ck_assert_int_eq(rows(&s, "name like 'traced_%' and severity = 'info' "
                          "and source = 'trace' and idx is null"), 13);
    ck_session_close(&s);
}
END_TEST

/* Distinct value per field: buffer b, BufferStats field number k -> 1000 *
 * (b + 1) + k. */
static void fill_buffer(tbufstats *b, uint64_t base)
{
    perfetto__protos__trace_stats__buffer_stats__init(b);
#define F(name, k) b->has_##name = 1; b->name = base + (k)
    F(bytes_written, 1); F(chunks_written, 2); F(chunks_overwritten, 3);
    F(write_wrap_count, 4); F(patches_succeeded, 5); F(patches_failed, 6);
    F(readaheads_succeeded, 7); F(readaheads_failed, 8);
    F(abi_violations, 9); F(chunks_rewritten, 10);
    F(chunks_committed_out_of_order, 11); F(buffer_size, 12);
    F(bytes_overwritten, 13); F(bytes_read, 14);
    F(padding_bytes_written, 15); F(padding_bytes_cleared, 16);
    F(chunks_read, 17); F(chunks_discarded, 18);
    F(trace_writer_packet_loss, 19); F(chunks_relocated, 20);
#undef F
}

/* TraceStats with two buffers: b[0] filled from 1000, b[1] from 2000. */
typedef struct {
    tbufstats b[2];
    tbufstats *bp[2];
    tstats st;
} two_buffers;

static void two_buffers_init(two_buffers *t)
{
    fill_buffer(&t->b[0], 1000);
    fill_buffer(&t->b[1], 2000);
    t->bp[0] = &t->b[0];
    t->bp[1] = &t->b[1];
    perfetto__protos__trace_stats__init(&t->st);
    t->st.n_buffer_stats = 2;
    t->st.buffer_stats = t->bp;
}

static const struct {
    const char *name;
    int field;
} BUF_STATS[] = {
    {"traced_buf_bytes_written", 1}, {"traced_buf_chunks_written", 2},
    {"traced_buf_chunks_overwritten", 3}, {"traced_buf_write_wrap_count", 4},
    {"traced_buf_patches_succeeded", 5}, {"traced_buf_patches_failed", 6},
    {"traced_buf_readaheads_succeeded", 7},
    {"traced_buf_readaheads_failed", 8}, {"traced_buf_abi_violations", 9},
    {"traced_buf_chunks_rewritten", 10},
    {"traced_buf_chunks_committed_out_of_order", 11},
    {"traced_buf_buffer_size", 12}, {"traced_buf_bytes_overwritten", 13},
    {"traced_buf_bytes_read", 14}, {"traced_buf_padding_bytes_written", 15},
    {"traced_buf_padding_bytes_cleared", 16}, {"traced_buf_chunks_read", 17},
    {"traced_buf_chunks_discarded", 18},
    {"traced_buf_trace_writer_packet_loss", 19},
    {"traced_buf_chunks_relocated", 20},
};

START_TEST(test_stats_trace_stats_values)
{
    session s;
    ck_session_open(&s);
    two_buffers t;
    two_buffers_init(&t);
#define T(name, v) t.st.has_##name = 1; t.st.name = (v)
    T(producers_connected, 3); T(producers_seen, 7);
    T(data_sources_registered, 4); T(data_sources_seen, 9);
    T(tracing_sessions, 2); T(total_buffers, 5); T(chunks_discarded, 11);
    T(patches_discarded, 12); T(invalid_packets, 13);
    T(flushes_requested, 14); T(flushes_succeeded, 15); T(flushes_failed, 16);
    T(final_flush_outcome,
      PERFETTO__PROTOS__TRACE_STATS__FINAL_FLUSH_OUTCOME__FINAL_FLUSH_FAILED);
#undef T
    ck_write_stats_packet(s.f, 5000, &t.st);
    ck_session_inspect(&s);
    for (size_t i = 0; i < sizeof(BUF_STATS) / sizeof(*BUF_STATS); i++) {
        for (int b = 0; b < 2; b++) {
            int64_t want = 1000 * (b + 1) + BUF_STATS[i].field;
            ck_assert_msg(ck_stat(s.conn, BUF_STATS[i].name, b, -1) == want,
                          "%s[%d] != %lld", BUF_STATS[i].name, b,
                          (long long)want);
        }
    }
    ck_assert_int_eq(ck_stat(s.conn, "traced_producers_connected", -1, -1), 3);
    ck_assert_int_eq(ck_stat(s.conn, "traced_producers_seen", -1, -1), 7);
    ck_assert_int_eq(ck_stat(s.conn, "traced_data_sources_registered", -1,
                             -1), 4);
    ck_assert_int_eq(ck_stat(s.conn, "traced_data_sources_seen", -1, -1), 9);
    ck_assert_int_eq(ck_stat(s.conn, "traced_tracing_sessions", -1, -1), 2);
    ck_assert_int_eq(ck_stat(s.conn, "traced_total_buffers", -1, -1), 5);
    ck_assert_int_eq(ck_stat(s.conn, "traced_chunks_discarded", -1, -1), 11);
    ck_assert_int_eq(ck_stat(s.conn, "traced_patches_discarded", -1, -1), 12);
    ck_assert_int_eq(ck_stat(s.conn, "traced_flushes_requested", -1, -1), 14);
    ck_assert_int_eq(ck_stat(s.conn, "traced_flushes_succeeded", -1, -1), 15);
    ck_assert_int_eq(ck_stat(s.conn, "traced_flushes_failed", -1, -1), 16);
    ck_assert_int_eq(ck_stat(s.conn, "traced_final_flush_failed", -1, -1), 1);
    ck_assert_int_eq(ck_stat(s.conn, "traced_final_flush_succeeded", -1, -1),
                     0);
    /* 20 BufferStats rows per buffer, nothing derived (no writer_stats),
     * no filter rows, invalid_packets maps to no traced_ stat. */
    ck_assert_int_eq(rows(&s, "idx is not null"), 40);
    ck_assert_int_eq(rows(&s, "name = 'traced_buf_sequence_packet_loss'"), 0);
    ck_assert_int_eq(rows(&s, "name = 'traced_buf_bytes_filtered_out'"), 0);
    ck_assert_int_eq(rows(&s, "value = 13"), 0);
    ck_assert_int_eq(rows(&s, "name = 'traced_buf_patches_failed' and "
                          "severity = 'data_loss'"), 2);
    ck_session_close(&s);
}
END_TEST

START_TEST(test_stats_last_packet_wins)
{
    session s;
    ck_session_open(&s);
    two_buffers t;
    two_buffers_init(&t);
    t.st.has_producers_connected = 1;
    t.st.producers_connected = 3;
    t.st.has_final_flush_outcome = 1;
    t.st.final_flush_outcome =
        PERFETTO__PROTOS__TRACE_STATS__FINAL_FLUSH_OUTCOME__FINAL_FLUSH_SUCCEEDED;
    ck_write_stats_packet(s.f, 100, &t.st);
    /* Second TraceStats: one buffer, producers_connected absent. */
    tbufstats c0;
    fill_buffer(&c0, 5000);
    tbufstats *bufs2[] = {&c0};
    tstats st2 = PERFETTO__PROTOS__TRACE_STATS__INIT;
    st2.n_buffer_stats = 1;
    st2.buffer_stats = bufs2;
    st2.has_final_flush_outcome = 1;
    st2.final_flush_outcome =
        PERFETTO__PROTOS__TRACE_STATS__FINAL_FLUSH_OUTCOME__FINAL_FLUSH_SUCCEEDED;
    ck_write_stats_packet(s.f, 200, &st2);
    ck_session_inspect(&s);
    ck_assert_int_eq(ck_stat(s.conn, "traced_producers_connected", -1, -1), 0);
    ck_assert_int_eq(ck_stat(s.conn, "traced_buf_chunks_read", 0, -1), 5017);
    ck_assert_int_eq(ck_stat(s.conn, "traced_buf_chunks_read", 1, -1), 2017);
    ck_assert_int_eq(ck_stat(s.conn, "traced_final_flush_succeeded", -1, -1),
                     2);
    ck_assert_int_eq(rows(&s, "name = 'traced_buf_chunks_read'"), 2);
    ck_session_close(&s);
}
END_TEST

START_TEST(test_stats_filter_bytes)
{
    session s;
    ck_session_open(&s);
    uint64_t per_buf[] = {10, 0, 30};
    Perfetto__Protos__TraceStats__FilterStats fs =
        PERFETTO__PROTOS__TRACE_STATS__FILTER_STATS__INIT;
    fs.n_bytes_discarded_per_buffer = 3;
    fs.bytes_discarded_per_buffer = per_buf;
    tstats st = PERFETTO__PROTOS__TRACE_STATS__INIT;
    st.filter_stats = &fs;
    ck_write_stats_packet(s.f, 100, &st);
    ck_session_inspect(&s);
    ck_assert_int_eq(ck_stat(s.conn, "traced_buf_bytes_filtered_out", 0, -1),
                     10);
    ck_assert_int_eq(ck_stat(s.conn, "traced_buf_bytes_filtered_out", 1, -1),
                     0);
    ck_assert_int_eq(ck_stat(s.conn, "traced_buf_bytes_filtered_out", 2, -1),
                     30);
    ck_assert_int_eq(rows(&s, "name = 'traced_buf_bytes_filtered_out'"), 3);
    ck_session_close(&s);
}
END_TEST

static void write_writer_stats(FILE *f, uint64_t ts, const uint64_t *seqs,
                               const uint32_t *bufs, size_t n)
{
    twriter w[8];
    twriter *wp[8];
    ck_assert_uint_le(n, 8);
    for (size_t i = 0; i < n; i++) {
        perfetto__protos__trace_stats__writer_stats__init(&w[i]);
        w[i].has_sequence_id = 1;
        w[i].sequence_id = seqs[i];
        w[i].has_buffer = 1;
        w[i].buffer = bufs[i];
        wp[i] = &w[i];
    }
    tstats st = PERFETTO__PROTOS__TRACE_STATS__INIT;
    st.n_writer_stats = n;
    st.writer_stats = wp;
    ck_write_stats_packet(f, ts, &st);
}

START_TEST(test_stats_derived_loss)
{
    session s;
    ck_session_open(&s);
    /* seq 2 -> buffer 0; its first packet is flagged (ignored). */
    ck_write_seq_packet(s.f, 2, 10, 65, 0);
    ck_write_seq_packet(s.f, 2, 11, 0, 0);
    ck_write_seq_packet(s.f, 2, 12, 65, 0);          /* present|overwrite */
    ck_write_seq_packet(s.f, 2, 13, 2 | 64 | 256, 0); /* gap|overwrite|smb */
    /* seq 3 -> buffer 1. */
    ck_write_seq_packet(s.f, 3, 20, 0, 0);
    ck_write_seq_packet(s.f, 3, 21, 4 | 8 | 16 | 32 | 128, 0);
    ck_write_seq_packet(s.f, 3, 22, 1, 0);           /* legacy "true" */
    uint64_t seqs[] = {2, 3, 99};
    uint32_t bufs[] = {0, 1, 0};
    write_writer_stats(s.f, 30, seqs, bufs, 3);
    /* After the last TraceStats: not counted. */
    ck_write_seq_packet(s.f, 2, 40, 64, 0);
    ck_session_inspect(&s);
    ck_assert_int_eq(ck_stat(s.conn, "traced_buf_sequence_packet_loss", 0, -1),
                     2);
    ck_assert_int_eq(ck_stat(s.conn, "traced_buf_sequence_packet_loss", 1, -1),
                     2);
    ck_assert_int_eq(ck_stat(s.conn, "traced_buf_data_loss_overwrite", 0, -1),
                     2);
    ck_assert_int_eq(ck_stat(s.conn, "traced_buf_data_loss_read_gap", 0, -1),
                     1);
    ck_assert_int_eq(ck_stat(s.conn, "traced_buf_data_loss_smb_full", 0, -1),
                     1);
    ck_assert_int_eq(ck_stat(s.conn, "traced_buf_data_loss_chunk_corrupted",
                             1, -1), 1);
    ck_assert_int_eq(ck_stat(s.conn, "traced_buf_data_loss_orphan_continuation",
                             1, -1), 1);
    ck_assert_int_eq(ck_stat(s.conn, "traced_buf_data_loss_reassembly_gap",
                             1, -1), 1);
    ck_assert_int_eq(ck_stat(s.conn,
                             "traced_buf_data_loss_reassembly_broken_chain",
                             1, -1), 1);
    ck_assert_int_eq(ck_stat(s.conn, "traced_buf_data_loss_writer_abort",
                             1, -1), 1);
    ck_assert_int_eq(ck_stat(s.conn, "traced_buf_data_loss_overwrite", 1, -1),
                     0);
    ck_assert_int_eq(ck_stat(s.conn,
                             "traced_buf_incremental_sequences_dropped", 0,
                             -1), 0);
    /* 10 derived stats for each of the two buckets, all 'trace' except the
     * two analysis ones. */
    ck_assert_int_eq(rows(&s, "idx is not null"), 20);
    ck_assert_int_eq(rows(&s, "source = 'analysis' and idx is not null"), 4);
    /* data_loss rows: all 6 flagged packets, reasons decoded. */
    ck_assert_int_eq(ck_q_int(s.conn, -1, NULL, "select count(*) from "
                              "data_loss"), 6);
    ck_assert_int_eq(ck_q_int(s.conn, -1, NULL, "select count(*) from "
                              "data_loss where counted = 0 and seq_id = 2 "
                              "and ts = 10"), 1);
    char r[128];
    ck_q_text(s.conn, r, sizeof(r), "select reasons from data_loss where "
              "ts = 13");
    ck_assert_str_eq(r, "read_gap,overwrite,smb_full");
    ck_q_text(s.conn, r, sizeof(r), "select reasons from data_loss where "
              "ts = 21");
    ck_assert_str_eq(r, "chunk_corrupted,orphan_continuation,reassembly_gap,"
                        "reassembly_broken_chain,writer_abort");
    ck_assert_int_eq(ck_q_int(s.conn, -1, NULL, "select loss_events from "
                              "sequence where seq_id = 2"), 3);
    ck_assert_int_eq(ck_q_int(s.conn, -1, NULL, "select buffer from "
                              "sequence where seq_id = 3"), 1);
    ck_session_close(&s);
}
END_TEST

START_TEST(test_stats_incremental_sequences_dropped)
{
    session s;
    ck_session_open(&s);
    /* seq 4: needs state, never cleared -> every such packet skipped. */
    ck_write_seq_packet(s.f, 4, 1, 0, 2);
    ck_write_seq_packet(s.f, 4, 2, 0, 2);
    /* seq 5: cleared then needs -> fine. */
    ck_write_seq_packet(s.f, 5, 1, 0, 1);
    ck_write_seq_packet(s.f, 5, 2, 0, 2);
    /* seq 6: needs (skipped), cleared, needs (kept), loss, needs (skipped).
     * Partially skipped -> not dropped. */
    ck_write_seq_packet(s.f, 6, 1, 0, 2);
    ck_write_seq_packet(s.f, 6, 2, 0, 1 | 2);
    ck_write_seq_packet(s.f, 6, 3, 64, 2);
    uint64_t seqs[] = {4, 5, 6};
    uint32_t bufs[] = {0, 0, 0};
    write_writer_stats(s.f, 30, seqs, bufs, 3);
    ck_session_inspect(&s);
    ck_assert_int_eq(ck_stat(s.conn,
                             "traced_buf_incremental_sequences_dropped", 0,
                             -1), 1);
    ck_assert_int_eq(ck_stat(s.conn,
                             "packet_skipped_seq_needs_incremental_state_"
                             "invalid", -1, -1), 4);
    ck_assert_int_eq(ck_stat(s.conn, "traced_buf_sequence_packet_loss", 0, -1),
                     1);
    ck_session_close(&s);
}
END_TEST

START_TEST(test_stats_clone_events)
{
    session s;
    ck_session_open(&s);
    Perfetto__Protos__TracingServiceEvent ev =
        PERFETTO__PROTOS__TRACING_SERVICE_EVENT__INIT;
    tpkt p = PERFETTO__PROTOS__TRACE_PACKET__INIT;
    p.has_trusted_packet_sequence_id = 1;
    p.trusted_packet_sequence_id = 1;
    p.has_timestamp = 1;
    p.service_event = &ev;
    ev.event_type_case =
        PERFETTO__PROTOS__TRACING_SERVICE_EVENT__EVENT_TYPE_CLONE_STARTED;
    ev.clone_started = 1;
    p.timestamp = 500;
    ck_write_packet(s.f, &p);
    ev.event_type_case =
        PERFETTO__PROTOS__TRACING_SERVICE_EVENT__EVENT_TYPE_BUFFER_CLONED;
    ev.buffer_cloned = 1;
    p.timestamp = 600;
    ck_write_packet(s.f, &p);
    ev.buffer_cloned = 0;
    p.timestamp = 650;
    ck_write_packet(s.f, &p);
    /* clone_snapshot_trigger (field 113) is not in our protos: append the
     * raw field (empty message) to a packet. */
    tpkt t = PERFETTO__PROTOS__TRACE_PACKET__INIT;
    t.has_trusted_packet_sequence_id = 1;
    t.trusted_packet_sequence_id = 1;
    t.has_timestamp = 1;
    t.timestamp = 400;
    const uint8_t trigger[] = {0x8a, 0x07, 0x00};
    ck_write_packet_extra(s.f, &t, trigger, sizeof(trigger));
    ck_session_inspect(&s);
    ck_assert_int_eq(ck_stat(s.conn, "traced_clone_started_timestamp_ns", -1,
                             -1), 500);
    ck_assert_int_eq(ck_stat(s.conn, "traced_buf_clone_done_timestamp_ns", 1,
                             -1), 600);
    ck_assert_int_eq(ck_stat(s.conn, "traced_buf_clone_done_timestamp_ns", 0,
                             -1), 650);
    ck_assert_int_eq(ck_stat(s.conn, "traced_clone_trigger_timestamp_ns", -1,
                             -1), 400);
    char kind[64];
    ck_q_text(s.conn, kind, sizeof(kind), "select kind from packet where "
              "id = 3");
    ck_assert_str_eq(kind, "clone_snapshot_trigger");
    ck_session_close(&s);
}
END_TEST

/* A service event naming data sources (which = 7 slow start, 8 slow
 * last flush) at ts: n entries of prod[i] / ds[i]. */
static void put_ds_event(FILE *f, int which, int64_t ts, size_t n,
                         char **prod, char **ds)
{
    Perfetto__Protos__TracingServiceEvent__DataSources__DataSource e[64];
    Perfetto__Protos__TracingServiceEvent__DataSources__DataSource *ep[64];
    ck_assert_uint_le(n, 64);
    for (size_t i = 0; i < n; i++) {
        perfetto__protos__tracing_service_event__data_sources__data_source__init(
            &e[i]);
        e[i].producer_name = prod[i];
        e[i].data_source_name = ds[i];
        ep[i] = &e[i];
    }
    Perfetto__Protos__TracingServiceEvent__DataSources dss =
        PERFETTO__PROTOS__TRACING_SERVICE_EVENT__DATA_SOURCES__INIT;
    dss.n_data_source = n;
    dss.data_source = ep;
    Perfetto__Protos__TracingServiceEvent ev =
        PERFETTO__PROTOS__TRACING_SERVICE_EVENT__INIT;
    if (which == 8) {
        ev.event_type_case = PERFETTO__PROTOS__TRACING_SERVICE_EVENT__EVENT_TYPE_LAST_FLUSH_SLOW_DATA_SOURCES;
        ev.last_flush_slow_data_sources = &dss;
    } else {
        ev.event_type_case = PERFETTO__PROTOS__TRACING_SERVICE_EVENT__EVENT_TYPE_SLOW_STARTING_DATA_SOURCES;
        ev.slow_starting_data_sources = &dss;
    }
    tpkt p = PERFETTO__PROTOS__TRACE_PACKET__INIT;
    p.has_trusted_packet_sequence_id = 1;
    p.trusted_packet_sequence_id = 1;
    p.has_timestamp = 1;
    p.timestamp = (uint64_t)ts;
    p.service_event = &ev;
    ck_write_packet(f, &p);
}

/* trace_info's value of key into v ("" if none). */
static void info_text(sqlite3 *db, const char *key, char *v, size_t n)
{
    ck_q_text(db, v, n, "select value from trace_info where key = %Q",
              key);
}

/* last_flush_slow_data_sources / slow_starting_data_sources: the latest
 * of each into trace_info as "producer/data source, ..." (trace
 * processor keeps the slow start ones as metadata, the slow flush ones
 * nowhere); what the trace says is printable ASCII there, at most 2048
 * bytes; a malformed event costs nothing else. */
START_TEST(test_stats_slow_data_sources)
{
    session s;
    ck_session_open(&s);
    char *p1[] = {"one", "t\x01wo"}, *d1[] = {"test.ds", "b\xff" "ad"};
    put_ds_event(s.f, 8, 100, 2, p1, d1);
    char *p2[] = {"late"}, *d2[] = {"ds.z"};
    put_ds_event(s.f, 8, 300, 1, p2, d2);
    char *p3[] = {"early"}, *d3[] = {"old"};
    put_ds_event(s.f, 8, 200, 1, p3, d3);       /* older: not kept */
    char *p4[] = {"s"}, *d4[] = {"start.ds"};
    put_ds_event(s.f, 7, 50, 1, p4, d4);
    /* service_event { last_flush_slow_data_sources { data_source (16
     * bytes claimed, 3 there) } }, raw */
    tpkt t = PERFETTO__PROTOS__TRACE_PACKET__INIT;
    t.has_trusted_packet_sequence_id = 1;
    t.trusted_packet_sequence_id = 1;
    t.has_timestamp = 1;
    t.timestamp = 250;
    const uint8_t bad[] = {0xaa, 0x04, 0x07, 0x42, 0x05, 0x0a, 0x10, 0x0a,
                           0x01, 0x41};
    ck_write_packet_extra(s.f, &t, bad, sizeof(bad));  /* older: skipped */
    ck_session_inspect(&s);
    char v[4096];
    info_text(s.conn, "last_flush_slow_data_sources", v, sizeof(v));
    ck_assert_str_eq(v, "late/ds.z");
    info_text(s.conn, "slow_starting_data_sources", v, sizeof(v));
    ck_assert_str_eq(v, "s/start.ds");
    ck_session_close(&s);

    /* Both entries, made printable; then a list too long, cut. */
    ck_session_open(&s);
    put_ds_event(s.f, 8, 100, 2, p1, d1);
    ck_session_inspect(&s);
    info_text(s.conn, "last_flush_slow_data_sources", v, sizeof(v));
    ck_assert_str_eq(v, "one/test.ds, t?wo/b?ad");
    ck_assert_int_eq(ck_q_int(s.conn, -1, NULL, "select count(*) from "
                              "trace_info where key = "
                              "'slow_starting_data_sources'"), 0);
    ck_session_close(&s);

    ck_session_open(&s);
    static char name[64][60];
    char *pl[64], *dl[64];
    for (int i = 0; i < 64; i++) {
        snprintf(name[i], sizeof(name[i]), "producer-%02d-%045d", i, 0);
        pl[i] = name[i];
        dl[i] = "ds";
    }
    put_ds_event(s.f, 8, 100, 64, pl, dl);
    ck_session_inspect(&s);
    info_text(s.conn, "last_flush_slow_data_sources", v, sizeof(v));
    ck_assert_uint_eq(strlen(v), 2048 + 3);
    ck_assert_str_eq(v + 2048, "...");
    ck_assert(strncmp(v, "producer-00-", 12) == 0);
    ck_session_close(&s);

    /* The latest one cannot be read: it says so, nothing else breaks. */
    ck_session_open(&s);
    put_ds_event(s.f, 8, 100, 2, p1, d1);
    t.timestamp = 400;
    ck_write_packet_extra(s.f, &t, bad, sizeof(bad));
    ck_session_inspect(&s);
    info_text(s.conn, "last_flush_slow_data_sources", v, sizeof(v));
    ck_assert_str_eq(v, "(none named)");
    ck_assert_int_eq(ck_q_int(s.conn, -1, NULL, "select count(*) from "
                              "packet"), 2);
    ck_session_close(&s);
}
END_TEST

/* Trace processor returns before looking at trace_stats in a packet that
 * has a clock_snapshot; so do we. */
START_TEST(test_stats_clock_snapshot_packet_skips_stats)
{
    session s;
    ck_session_open(&s);
    Perfetto__Protos__ClockSnapshot cs = PERFETTO__PROTOS__CLOCK_SNAPSHOT__INIT;
    tstats st = PERFETTO__PROTOS__TRACE_STATS__INIT;
    st.has_producers_connected = 1;
    st.producers_connected = 9;
    tpkt p = PERFETTO__PROTOS__TRACE_PACKET__INIT;
    p.has_trusted_packet_sequence_id = 1;
    p.trusted_packet_sequence_id = 1;
    p.clock_snapshot = &cs;
    p.trace_stats = &st;
    ck_write_packet(s.f, &p);
    ck_session_inspect(&s);
    ck_assert_int_eq(ck_stat(s.conn, "traced_producers_connected", -1, -1), 0);
    ck_session_close(&s);
}
END_TEST

/* Raw protobuf helpers for the ftrace messages (not in protos/). */
static size_t put_tag(uint8_t *o, uint32_t field, unsigned wt)
{
    return ck_put_varint(o, (uint64_t)field << 3 | wt);
}

static size_t put_var(uint8_t *o, uint32_t field, uint64_t v)
{
    size_t n = put_tag(o, field, 0);
    return n + ck_put_varint(o + n, v);
}

static size_t put_dbl(uint8_t *o, uint32_t field, double d)
{
    size_t n = put_tag(o, field, 1);
    memcpy(o + n, &d, 8);   /* little-endian hosts */
    return n + 8;
}

static size_t put_len(uint8_t *o, uint32_t field, const uint8_t *d, size_t len)
{
    size_t n = put_tag(o, field, 2);
    n += ck_put_varint(o + n, len);
    memcpy(o + n, d, len);
    return n + len;
}

/* A packet on sequence 7 whose field FIELD holds BODY. */
static void write_raw(FILE *f, uint32_t field, const uint8_t *body, size_t n)
{
    uint8_t extra[512];
    size_t e = put_len(extra, field, body, n);
    tpkt p = PERFETTO__PROTOS__TRACE_PACKET__INIT;
    p.has_trusted_packet_sequence_id = 1;
    p.trusted_packet_sequence_id = 7;
    ck_write_packet_extra(f, &p, extra, e);
}

/* SystemInfo (a hostile one): the machine's facts into trace_info under
 * trace processor's metadata names, text made printable; the service's
 * major version decides config_write_into_file_no_flush (v54+ flushes
 * before its file writes); a malformed field ends the walk, keeping
 * what came before it. */
static void write_system_info(FILE *f, const char *version, bool tail)
{
    uint8_t uts[128], body[512];
    size_t u = 0, n = 0;
    u += put_len(uts + u, 1, (const uint8_t *)"Linux", 5);
    u += put_len(uts + u, 3, (const uint8_t *)"6.1\x1b[31m\n", 9);
    u += put_len(uts + u, 4, (const uint8_t *)"x86_64", 6);
    u += put_var(uts + u, 9, 1);                  /* unknown: skipped */
    n += put_len(body + n, 1, uts, u);
    n += put_len(body + n, 4, (const uint8_t *)version, strlen(version));
    n += put_var(body + n, 7, (uint64_t)(int64_t)-300);   /* UTC-5 */
    n += put_var(body + n, 16, 1ull << 33);
    if (tail) {
        n += put_tag(body + n, 5, 7);             /* no such wire type */
        n += put_var(body + n, 16, 7);            /* never read */
    }
    write_raw(f, 45, body, n);
}

static void write_file_config(FILE *f)
{
    Perfetto__Protos__TraceConfig tc = PERFETTO__PROTOS__TRACE_CONFIG__INIT;
    tc.has_write_into_file = 1;
    tc.write_into_file = 1;
    tpkt p = PERFETTO__PROTOS__TRACE_PACKET__INIT;
    p.has_trusted_packet_sequence_id = 1;
    p.trusted_packet_sequence_id = 1;
    p.trace_config = &tc;
    ck_write_packet(f, &p);
}

START_TEST(test_stats_system_info)
{
    session s;
    ck_session_open(&s);
    write_file_config(s.f);
    write_system_info(s.f, "Perfetto v58.2-shmtraced-0.1.0 (x)", true);
    ck_session_inspect(&s);
    char v[128];
    ck_q_text(s.conn, v, sizeof v, "select value from trace_info where key "
              "= 'system_release'");
    ck_assert_str_eq(v, "6.1?[31m?");
    ck_q_text(s.conn, v, sizeof v, "select value from trace_info where key "
              "= 'system_machine'");
    ck_assert_str_eq(v, "x86_64");
    ck_q_text(s.conn, v, sizeof v, "select value from trace_info where key "
              "= 'tracing_service_version'");
    ck_assert_str_eq(v, "Perfetto v58.2-shmtraced-0.1.0 (x)");
    ck_assert_int_eq(ck_q_int(s.conn, -1, NULL, "select value from "
                              "trace_info where key = 'timezone_off_mins'"),
                     -300);
    ck_assert_int_eq(ck_q_int(s.conn, -1, NULL, "select value from "
                              "trace_info where key = 'system_ram_bytes'"),
                     (int64_t)1 << 33);
    ck_assert_int_eq(ck_stat(s.conn, "config_write_into_file_no_flush", -1,
                             -2), 0);
    ck_session_close(&s);

    /* A service before v54 (or of no known version): the error. */
    ck_session_open(&s);
    write_file_config(s.f);
    write_system_info(s.f, "Perfetto v53.0 (old)", false);
    ck_session_inspect(&s);
    ck_assert_int_eq(ck_stat(s.conn, "config_write_into_file_no_flush", -1,
                             -2), 1);
    ck_assert_int_eq(ck_q_int(s.conn, -1, NULL, "select value from "
                              "trace_info where key = 'system_ram_bytes'"),
                     (int64_t)1 << 33);
    ck_session_close(&s);
}
END_TEST

START_TEST(test_stats_ftrace)
{
    session s;
    ck_session_open(&s);
    uint8_t cpu[128], msg[256], kp[16];
    /* START_OF_TRACE: cpu 0, kprobe hits 3, one failed and one unknown
     * event (setup errors), one zero-data-length parse error. */
    size_t c = put_var(cpu, 1, 0);
    c += put_var(cpu + c, 2, 5);            /* entries */
    c += put_var(cpu + c, 9, 10);           /* read_events */
    c += put_dbl(cpu + c, 7, 1.5);          /* now_ts, seconds */
    c += put_dbl(cpu + c, 6, 1e30);         /* oldest_event_ts: clamped */
    size_t k = put_var(kp, 1, 3);
    size_t m = put_var(msg, 1, 1);
    m += put_len(msg + m, 2, cpu, c);
    m += put_len(msg + m, 10, kp, k);
    m += put_len(msg + m, 7, (const uint8_t *)"a/b", 3);
    m += put_len(msg + m, 6, (const uint8_t *)"c/d", 3);
    m += put_var(msg + m, 9, 12);
    write_raw(s.f, 34, msg, m);
    /* A bundle from cpu 1 that lost events. */
    uint8_t b[16];
    size_t bn = put_var(b, 1, 1);
    bn += put_var(b + bn, 3, 1);
    write_raw(s.f, 1, b, bn);
    /* END_OF_TRACE: cpu 0 entries 9, read 30, commit_overrun 2; kprobe
     * hits 7, misses 1 (misses began at 0: no delta). */
    c = put_var(cpu, 1, 0);
    c += put_var(cpu + c, 2, 9);
    c += put_var(cpu + c, 9, 30);
    c += put_var(cpu + c, 4, 2);
    k = put_var(kp, 1, 7);
    k += put_var(kp + k, 2, 1);
    m = put_var(msg, 1, 2);
    m += put_len(msg + m, 2, cpu, c);
    m += put_len(msg + m, 10, kp, k);
    m += put_len(msg + m, 7, (const uint8_t *)"x/y", 3); /* END: not counted */
    write_raw(s.f, 34, msg, m);
    ck_session_inspect(&s);
    sqlite3 *db = s.conn;
    ck_assert_int_eq(ck_stat(db, "ftrace_cpu_entries_begin", 0, -1), 5);
    ck_assert_int_eq(ck_stat(db, "ftrace_cpu_entries_end", 0, -1), 9);
    ck_assert_int_eq(ck_stat(db, "ftrace_cpu_entries_delta", 0, -1), 4);
    ck_assert_int_eq(ck_stat(db, "ftrace_cpu_read_events_delta", 0, -1), 20);
    ck_assert_int_eq(ck_stat(db, "ftrace_cpu_commit_overrun_delta", 0, -1),
                     2);
    ck_assert_int_eq(ck_stat(db, "ftrace_cpu_now_ts_begin", 0, -1),
                     1500000000);
    ck_assert_int_eq(ck_stat(db, "ftrace_cpu_oldest_event_ts_begin", 0, -1),
                     INT64_MAX);
    ck_assert_int_eq(ck_stat(db, "ftrace_kprobe_hits_begin", -1, -1), 3);
    ck_assert_int_eq(ck_stat(db, "ftrace_kprobe_hits_delta", -1, -1), 4);
    ck_assert_int_eq(ck_stat(db, "ftrace_kprobe_misses_delta", -1, -1), 0);
    ck_assert_int_eq(ck_stat(db, "ftrace_setup_errors", -1, -1), 2);
    ck_assert_int_eq(ck_stat(db,
                     "ftrace_abi_errors_skipped_zero_data_length", -1, -1), 1);
    ck_assert_int_eq(ck_stat(db, "ftrace_cpu_has_data_loss", 1, -1), 1);
    ck_assert_int_eq(rows(&s, "name = 'ftrace_cpu_commit_overrun_delta' and "
                          "severity = 'error'"), 1);
    ck_assert_int_eq(rows(&s, "name = 'ftrace_cpu_has_data_loss' and "
                          "severity = 'data_loss'"), 1);
    ck_session_close(&s);
}
END_TEST

/* ---- the ftrace analysis rows (ins_fevents.h) ---- */

/* A packet on sequence SEQ, stamped TS, whose field FIELD holds BODY. */
static void write_raw_ts(FILE *f, uint32_t seq, uint64_t ts, uint32_t field,
                         const uint8_t *body, size_t n)
{
    uint8_t extra[1024];
    size_t e = put_len(extra, field, body, n);
    tpkt p = PERFETTO__PROTOS__TRACE_PACKET__INIT;
    p.has_trusted_packet_sequence_id = 1;
    p.trusted_packet_sequence_id = seq;
    p.has_timestamp = 1;
    p.timestamp = ts;
    ck_write_packet_extra(f, &p, extra, e);
}

/* Packed varints VALS[0..n) as field FIELD. */
static size_t put_packed(uint8_t *o, uint32_t field, const uint64_t *vals,
                         size_t n)
{
    uint8_t tmp[128];
    size_t t = 0;
    for (size_t i = 0; i < n; i++)
        t += ck_put_varint(tmp + t, vals[i]);
    return put_len(o, field, tmp, t);
}

/* An FtraceEvent at TS with pid 1; SWITCH: a sched_switch PREV -> NEXT,
 * else a print. NO_TS: without its timestamp; NO_EVENT: without any. */
static size_t put_fevent(uint8_t *o, uint64_t ts, bool sw, uint64_t prev,
                         uint64_t next, bool no_ts, bool no_event)
{
    uint8_t ev[64], body[32];
    size_t n = 0, b = 0;
    if (!no_ts)
        n += put_var(ev + n, 1, ts);
    n += put_var(ev + n, 2, 1);
    if (sw) {
        b += put_var(body + b, 2, prev);
        b += put_var(body + b, 6, next);
        n += put_len(ev + n, 4, body, b);
    } else if (!no_event) {
        n += put_len(ev + n, 3, (const uint8_t *)"\x12\x01x", 3);
    }
    return put_len(o, 2, ev, n);
}

static const uint64_t ZEROS[4], PIDS[4] = {5, 6, 7, 8};
static const uint64_t PRIOS[4] = {120, 120, 120, 120};

/* A CompactSched with one interned comm: NSW switches at SW_TS (deltas)
 * with comm indexes SW_COMM, NWK wakings at WK_TS with NWK_PID pids (the
 * other arrays NWK long). Arrays of at most 4. */
static size_t put_compact(uint8_t *o, const uint64_t *sw_ts,
                          const uint64_t *sw_comm, size_t nsw,
                          const uint64_t *wk_ts, size_t nwk, size_t nwk_pid)
{
    size_t c = put_len(o, 5, (const uint8_t *)"comm", 4);
    c += put_packed(o + c, 1, sw_ts, nsw);
    c += put_packed(o + c, 2, ZEROS, nsw);
    c += put_packed(o + c, 3, PIDS, nsw);
    c += put_packed(o + c, 4, PRIOS, nsw);
    c += put_packed(o + c, 6, sw_comm, nsw);
    c += put_packed(o + c, 7, wk_ts, nwk);
    c += put_packed(o + c, 8, PIDS, nwk_pid);
    c += put_packed(o + c, 9, ZEROS, nwk);
    c += put_packed(o + c, 10, PRIOS, nwk);
    c += put_packed(o + c, 11, ZEROS, nwk);
    return c;
}

/* TracingServiceEvent tracing_started, stamped TS, on sequence 1. */
static void write_tracing_started(FILE *f, uint64_t ts)
{
    uint8_t b[4];
    write_raw_ts(f, 1, ts, 69, b, put_var(b, 2, 1));
}

/* The bundles of test_stats_ftrace_analysis (TRACING_STARTED: where the
 * service event goes: 0 first, 1 last, 2 nowhere). Expected, as trace
 * processor computes them (checked against trace_processor_shell on
 * this file when written):
 *   cpu 0, first bundle, previous_bundle_end_timestamp 1500: compact
 *     switches at 900 (dropped: before tracing_started 1000), 1200 (its
 *     cpu's first: skipped) and 2000; compact wakings at 1100 (before
 *     the first switch: skipped) and 2500; a print at 950 (dropped).
 *   cpu 1: sched_switch FtraceEvents at 1400 (before the soft-drop point
 *     1500: not parsed), 1700 (10 -> 11) written before 1600 (0 -> 10),
 *     1800 (99 -> 12: mismatched); an event without a timestamp (tokenizer
 *     error), one without an event (missing id).
 *   a bundle without a cpu (tokenizer error).
 *   cpu 2: a compact switch whose comm index is past the intern table
 *     (parse error), wakings whose arrays differ in length (parse error;
 *     the first, at 3100, is read, and skipped: no switch on cpu 2).
 *   cpu 3: a compact switch (its cpu's first: skipped) and a compact
 *     waking at the same time, 5000: the switch was pushed first, so the
 *     waking follows it and is not skipped.
 */
static void write_fevents_trace(FILE *f, int tracing_started)
{
    uint8_t b[512], cs[256];
    size_t n, c;
    if (tracing_started == 0)
        write_tracing_started(f, 1000);
    /* cpu 0 */
    static const uint64_t sw_ts[] = {900, 300, 800};   /* deltas */
    static const uint64_t wk_ts[] = {1100, 1400};
    c = put_compact(cs, sw_ts, ZEROS, 3, wk_ts, 2, 2);
    n = put_var(b, 1, 0);
    n += put_var(b + n, 10, 1500);
    n += put_len(b + n, 4, cs, c);
    n += put_fevent(b + n, 950, false, 0, 0, false, false);
    write_raw_ts(f, 7, 3000, 1, b, n);
    /* cpu 1 */
    n = put_var(b, 1, 1);
    n += put_fevent(b + n, 1400, true, 7, 0, false, false);
    n += put_fevent(b + n, 1700, true, 10, 11, false, false);  /* sorted */
    n += put_fevent(b + n, 1600, true, 0, 10, false, false);
    n += put_fevent(b + n, 1800, true, 99, 12, false, false);
    n += put_fevent(b + n, 1900, false, 0, 0, true, false);
    n += put_fevent(b + n, 1950, false, 0, 0, false, true);
    write_raw_ts(f, 7, 3000, 1, b, n);
    /* no cpu */
    n = put_fevent(b, 2000, false, 0, 0, false, false);
    write_raw_ts(f, 7, 3000, 1, b, n);
    /* cpu 2 */
    static const uint64_t one_ts[] = {3000}, seven[] = {7};
    static const uint64_t two_ts[] = {3100, 10};
    c = put_compact(cs, one_ts, seven, 1, two_ts, 2, 1);
    n = put_var(b, 1, 2);
    n += put_len(b + n, 4, cs, c);
    write_raw_ts(f, 7, 3200, 1, b, n);
    /* cpu 3: a compact switch and waking at the same time */
    static const uint64_t at5000[] = {5000};
    c = put_compact(cs, at5000, ZEROS, 1, at5000, 1, 1);
    n = put_var(b, 1, 3);
    n += put_len(b + n, 4, cs, c);
    write_raw_ts(f, 7, 5100, 1, b, n);
    if (tracing_started == 1)
        write_tracing_started(f, 1000);
}

static void check_fevents(sqlite3 *db)
{
    ck_assert_int_eq(ck_stat(db, "ftrace_packet_before_tracing_start", -1,
                             -1), 2);
    ck_assert_int_eq(ck_stat(db, "compact_sched_switch_skipped", -1, -1), 2);
    ck_assert_int_eq(ck_stat(db, "compact_sched_waking_skipped", -1, -1), 2);
    ck_assert_int_eq(ck_stat(db, "mismatched_sched_switch_tids", -1, -1), 1);
    ck_assert_int_eq(ck_stat(db, "ftrace_bundle_tokenizer_errors", -1, -1), 2);
    ck_assert_int_eq(ck_stat(db, "ftrace_missing_event_id", -1, -1), 1);
    ck_assert_int_eq(ck_stat(db, "compact_sched_has_parse_errors", -1, -1),
                     2);
}

/* Hostile FtraceStats: counters whose end - begin overflows an int64
 * wrap as in trace processor (they were a signed overflow, undefined
 * behaviour UBSan stopped on); a phase other than start/end, or a parse
 * error other than ABI_ZERO_DATA_LENGTH (packed too), make trace
 * processor refuse the whole trace: the counts are written and
 * ftrace_analysis says they are not comparable, and why. */
START_TEST(test_stats_ftrace_hostile_stats)
{
    session s;
    ck_session_open(&s);
    uint8_t cpu[64], msg[128], kp[16];
    for (int phase = 1; phase <= 2; phase++) {
        uint64_t big = phase == 1 ? 1 : (uint64_t)1 << 63;
        size_t c = put_var(cpu, 1, 0);
        c += put_var(cpu + c, 2, big);          /* entries */
        size_t k = put_var(kp, 1, big);         /* kprobe hits */
        size_t m = put_var(msg, 1, (uint64_t)phase);
        m += put_len(msg + m, 2, cpu, c);
        m += put_len(msg + m, 10, kp, k);
        write_raw(s.f, 34, msg, m);
    }
    ck_session_inspect(&s);
    ck_assert_int_eq(ck_stat(s.conn, "ftrace_cpu_entries_delta", 0, -1),
                     INT64_MAX);
    ck_assert_int_eq(ck_stat(s.conn, "ftrace_kprobe_hits_delta", -1, -1),
                     INT64_MAX);
    ck_assert_int_eq(ck_q_int(s.conn, -1, NULL, "select count(*) from "
                              "trace_info where key = 'ftrace_analysis'"), 0);
    ck_session_close(&s);

    static const char *const why[] = {
        "an FtraceStats has a phase other than start or end of trace",
        "an FtraceStats reports critical ftrace parse errors "
        "(ftrace_parse_errors other than ABI_ZERO_DATA_LENGTH)",
        "an FtraceStats reports critical ftrace parse errors "
        "(ftrace_parse_errors other than ABI_ZERO_DATA_LENGTH)",
        "a bundle names a cpu of 1024 or more",
    };
    for (int t = 0; t < 4; t++) {
        ck_session_open(&s);
        size_t m = put_var(msg, 1, t == 0 ? 3 : 1);
        if (t == 1) {
            m += put_var(msg + m, 9, 12);      /* tolerated, counted */
            m += put_var(msg + m, 9, 5);       /* critical */
        } else if (t == 2) {
            static const uint64_t twelves[] = {12, 12};
            m += put_packed(msg + m, 9, twelves, 2);   /* not a varint */
        }
        write_raw(s.f, 34, msg, m);
        uint8_t b[32];
        size_t n = put_var(b, 1, t == 3 ? 1024 : 0);
        n += put_fevent(b + n, 10, false, 0, 0, false, false);
        write_raw_ts(s.f, 7, 20, 1, b, n);
        ck_session_inspect(&s);
        char v[256], want[256];
        snprintf(want, sizeof want, "not comparable: trace processor refuses "
                 "the whole trace (%s)", why[t]);
        ck_q_text(s.conn, v, sizeof v, "select value from trace_info where "
                  "key = 'ftrace_analysis'");
        ck_assert_str_eq(v, want);
        ck_assert_int_eq(ck_stat(s.conn, "ftrace_abi_errors_skipped_zero_"
                                 "data_length", -1, -1), t == 1);
        ck_session_close(&s);
    }
}
END_TEST

/* A bundle of cpu CPU with N compact switches, 1 ns apart from TS0
 * (each array N one-byte entries). */
static void write_big_compact_bundle(FILE *f, uint32_t cpu, uint64_t ts0,
                                     size_t nsw)
{
    size_t cap = 16 + 6 * (nsw + 16);
    uint8_t *arr = malloc(nsw + 10), *cs = malloc(cap), *b = malloc(cap + 32);
    uint8_t *extra = malloc(cap + 64);
    ck_assert(arr && cs && b && extra);
    size_t c = put_len(cs, 5, (const uint8_t *)"comm", 4);
    static const struct { uint32_t field; uint8_t v; } A[] = {
        {1, 1}, {2, 0}, {3, 5}, {4, 120}, {6, 0}};
    for (size_t a = 0; a < 5; a++) {
        size_t len = nsw;
        memset(arr, A[a].v, nsw + 10);
        if (A[a].field == 1)         /* the first delta is ts0 itself */
            len = ck_put_varint(arr, ts0) + nsw - 1;
        c += put_len(cs + c, A[a].field, arr, len);
    }
    size_t n = put_var(b, 1, cpu);
    n += put_len(b + n, 4, cs, c);
    size_t e = put_len(extra, 1, b, n);
    tpkt p = PERFETTO__PROTOS__TRACE_PACKET__INIT;
    p.has_trusted_packet_sequence_id = 1;
    p.trusted_packet_sequence_id = 7;
    p.has_timestamp = 1;
    p.timestamp = ts0;
    ck_write_packet_extra(f, &p, extra, e);
    free(arr);
    free(cs);
    free(b);
    free(extra);
}

START_TEST(test_stats_ftrace_analysis)
{
    char v[128];
    /* tracing_started first, then last in the file (the replay from the
     * start gives the same answers), both exact. */
    for (int where = 0; where < 2; where++) {
        session s;
        ck_session_open(&s);
        write_fevents_trace(s.f, where);
        ck_session_inspect(&s);
        check_fevents(s.conn);
        ck_q_text(s.conn, v, sizeof v, "select value from trace_info where "
                  "key = 'ftrace_analysis'");
        ck_assert_str_eq(v, "exact");
        ck_assert_int_eq(rows(&s, "name = 'mismatched_sched_switch_tids' "
                              "and severity = 'error' and source = "
                              "'analysis'"), 1);
        ck_assert_int_eq(rows(&s, "name = 'compact_sched_has_parse_errors' "
                              "and severity = 'error' and source = "
                              "'trace'"), 1);
        ck_session_close(&s);
    }
    /* No tracing_started: nothing dropped. The switch at 900 is then
     * cpu 0's first (the one skipped), and its waking at 1100 follows it:
     * only cpu 2's waking is skipped. */
    session s;
    ck_session_open(&s);
    write_fevents_trace(s.f, 2);
    ck_session_inspect(&s);
    ck_assert_int_eq(ck_stat(s.conn, "ftrace_packet_before_tracing_start",
                             -1, -1), 0);
    ck_assert_int_eq(ck_stat(s.conn, "compact_sched_switch_skipped", -1, -1),
                     2);
    ck_assert_int_eq(ck_stat(s.conn, "compact_sched_waking_skipped", -1, -1),
                     1);
    ck_session_close(&s);
    /* An ftrace_clock trace processor converts with: approximate, why. */
    ck_session_open(&s);
    uint8_t b[32];
    size_t n = put_var(b, 1, 0);
    n += put_var(b + n, 5, 2);                     /* FTRACE_CLOCK_GLOBAL */
    n += put_fevent(b + n, 10, false, 0, 0, false, false);
    write_raw_ts(s.f, 7, 20, 1, b, n);
    n = put_var(b, 1, 3);                          /* a bundle, no events */
    write_raw_ts(s.f, 7, 30, 1, b, n);
    ck_session_inspect(&s);
    ck_q_text(s.conn, v, sizeof v, "select value from trace_info where key "
              "= 'ftrace_analysis'");
    ck_assert_str_eq(v, "approximate: a bundle names an ftrace_clock other "
                        "than boottime");
    ck_session_close(&s);
    /* The drop point moved 40000 times (tracing_started at 1001 and 1000
     * in turn, a bundle after each), behind a cpu with 200000 switches:
     * the answers are those of the last point, as when it came first (cpu
     * 5's first switch is one more skipped). Replaying the events at each
     * move took minutes here (hours for a few KB compressed); they are
     * replayed once, at the end. */
    ck_session_open(&s);
    write_fevents_trace(s.f, 2);
    write_big_compact_bundle(s.f, 5, 10000, 200000);
    for (int i = 0; i < 20000; i++) {
        write_tracing_started(s.f, 1001);
        n = put_var(b, 1, 0);
        write_raw_ts(s.f, 7, 300000, 1, b, n);
        write_tracing_started(s.f, 1000);
        write_raw_ts(s.f, 7, 300000, 1, b, n);
    }
    ck_session_inspect(&s);
    ck_assert_int_eq(ck_stat(s.conn, "ftrace_packet_before_tracing_start",
                             -1, -1), 2);
    ck_assert_int_eq(ck_stat(s.conn, "compact_sched_switch_skipped", -1, -1),
                     3);
    ck_assert_int_eq(ck_stat(s.conn, "compact_sched_waking_skipped", -1, -1),
                     2);
    ck_assert_int_eq(ck_stat(s.conn, "mismatched_sched_switch_tids", -1, -1),
                     1);
    ck_q_text(s.conn, v, sizeof v, "select value from trace_info where key "
              "= 'ftrace_analysis'");
    ck_assert_str_eq(v, "exact");
    ck_session_close(&s);
    /* A bundle past INS_FEVENTS_BUNDLE_MAX events is analysed up to it
     * (memory stays bounded) and says so. */
    ck_session_open(&s);
    write_big_compact_bundle(s.f, 0, 10000, INS_FEVENTS_BUNDLE_MAX + 10);
    ck_session_inspect(&s);
    ck_assert_int_eq(ck_stat(s.conn, "compact_sched_switch_skipped", -1, -1),
                     1);
    ck_assert_int_eq(ck_stat(s.conn, "compact_sched_has_parse_errors", -1,
                             -1), 0);
    ck_q_text(s.conn, v, sizeof v, "select value from trace_info where key "
              "= 'ftrace_analysis'");
    ck_assert_str_eq(v, "approximate: a bundle holds more events than the "
                        "inspector analyses in one (the rest of it is not "
                        "counted)");
    ck_session_close(&s);
    /* No bundles: no row. */
    ck_session_open(&s);
    ck_write_seq_packet(s.f, 2, 100, 0, 0);
    ck_session_inspect(&s);
    ck_assert_int_eq(ck_q_int(s.conn, -1, NULL, "select count(*) from "
                              "trace_info where key = 'ftrace_analysis'"), 0);
    ck_assert_int_eq(ck_stat(s.conn, "compact_sched_switch_skipped", -1, -1),
                     0);
    ck_session_close(&s);
}
END_TEST

START_TEST(test_stats_buffer_config_and_view)
{
    session s;
    ck_session_open(&s);
    Perfetto__Protos__TraceConfig__BufferConfig c0, c1;
    perfetto__protos__trace_config__buffer_config__init(&c0);
    perfetto__protos__trace_config__buffer_config__init(&c1);
    c0.has_size_kb = 1;
    c0.size_kb = 64;
    c1.has_size_kb = 1;
    c1.size_kb = 128;
    c1.has_fill_policy = 1;
    c1.fill_policy =
        PERFETTO__PROTOS__TRACE_CONFIG__BUFFER_CONFIG__FILL_POLICY__DISCARD;
    c1.has_experimental_mode = 1;
    c1.experimental_mode =
        PERFETTO__PROTOS__TRACE_CONFIG__BUFFER_CONFIG__EXPERIMENTAL_MODE__TRACE_BUFFER_V2;
    Perfetto__Protos__TraceConfig__BufferConfig *cb[] = {&c0, &c1};
    Perfetto__Protos__TraceConfig cfg = PERFETTO__PROTOS__TRACE_CONFIG__INIT;
    cfg.n_buffers = 2;
    cfg.buffers = cb;
    tpkt p = PERFETTO__PROTOS__TRACE_PACKET__INIT;
    p.has_trusted_packet_sequence_id = 1;
    p.trusted_packet_sequence_id = 1;
    p.trace_config = &cfg;
    ck_write_packet(s.f, &p);
    tbufstats b0, b1;
    perfetto__protos__trace_stats__buffer_stats__init(&b0);
    perfetto__protos__trace_stats__buffer_stats__init(&b1);
    b0.has_buffer_size = b1.has_buffer_size = 1;
    b0.buffer_size = 65536;
    b1.buffer_size = 131072;
    b0.has_bytes_written = b1.has_bytes_written = 1;
    b0.bytes_written = 200000; /* wrapped */
    b1.bytes_written = 32768;  /* a quarter */
    tbufstats *bufs[] = {&b0, &b1};
    tstats st = PERFETTO__PROTOS__TRACE_STATS__INIT;
    st.n_buffer_stats = 2;
    st.buffer_stats = bufs;
    ck_write_stats_packet(s.f, 10, &st);
    ck_session_inspect(&s);
    char txt[32];
    ck_q_text(s.conn, txt, sizeof(txt), "select fill_policy from buffer "
              "where idx = 0");
    ck_assert_str_eq(txt, "RING_BUFFER");
    ck_q_text(s.conn, txt, sizeof(txt), "select fill_policy || '/' || mode "
              "from buffer where idx = 1");
    ck_assert_str_eq(txt, "DISCARD/V2");
    ck_assert_int_eq(ck_q_int(s.conn, -1, NULL, "select used from buffer "
                              "where idx = 0"), 65536);
    ck_assert_int_eq(ck_q_int(s.conn, -1, NULL, "select used from buffer "
                              "where idx = 1"), 32768);
    ck_assert_int_eq(ck_q_int(s.conn, -1, NULL, "select cast(used_pct as "
                              "int) from buffer where idx = 1"), 25);
    ck_assert_int_eq(ck_q_int(s.conn, -1, NULL, "select size_kb from "
                              "buffer_config where idx = 1"), 128);
    ck_session_close(&s);
}
END_TEST

START_TEST(test_stats_reason_names)
{
    char buf[256];
    ck_assert_str_eq(ins_loss_reasons(65, buf, sizeof(buf)),
                     "present,overwrite");
    ck_assert_str_eq(ins_loss_reasons(1, buf, sizeof(buf)), "present");
    ck_assert_str_eq(ins_loss_reasons(0, buf, sizeof(buf)), "");
    ck_assert_str_eq(ins_loss_reasons(0x401, buf, sizeof(buf)),
                     "present,0x400");
    ck_assert_str_eq(ins_loss_reasons(0x1ff, buf, sizeof(buf)),
                     "present,read_gap,chunk_corrupted,orphan_continuation,"
                     "reassembly_gap,reassembly_broken_chain,overwrite,"
                     "writer_abort,smb_full");
    /* A short buffer truncates, never overflows. */
    char tiny[8];
    ins_loss_reasons(0x1ff, tiny, sizeof(tiny));
    ck_assert_uint_lt(strlen(tiny), sizeof(tiny));
}
END_TEST

START_TEST(test_stats_definitions)
{
    int traced = 0, indexed = 0;
    for (int i = 0; i < INS_STAT_COUNT; i++) {
        const ins_stat_def *d = &ins_stat_defs[i];
        ck_assert_ptr_nonnull(d->name);
        ck_assert_ptr_nonnull(d->description);
        if (strncmp(d->name, "traced_", 7) == 0) {
            traced++;
            indexed += d->indexed;
        }
    }
    ck_assert_int_eq(traced, 47);
    ck_assert_int_eq(indexed, 32);
}
END_TEST

static Suite *stats_suite(void)
{
    Suite *s = suite_create("ins_stats");
    TCK_CASE(s, "trace_stats", test_stats_single_rows_exist_at_zero,
             test_stats_trace_stats_values, test_stats_last_packet_wins,
             test_stats_filter_bytes,
             test_stats_clock_snapshot_packet_skips_stats,
             test_stats_definitions);
    TCK_CASE(s, "derived_loss", test_stats_derived_loss,
             test_stats_incremental_sequences_dropped,
             test_stats_reason_names);
    TCK_CASE(s, "service_events", test_stats_clone_events,
             test_stats_slow_data_sources);
    TCK_CASE(s, "ftrace_hostile", test_stats_ftrace_hostile_stats);
    TCK_CASE(s, "tables", test_stats_buffer_config_and_view,
             test_stats_ftrace, test_stats_system_info,
             test_stats_ftrace_analysis);
    return s;
}

TCK_MAIN(stats_suite)
