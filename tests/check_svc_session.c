/*
 * check_svc_session.c - the service core without sockets: sessions and
 * buffers from a TraceConfig, data source matching across producers,
 * CommitData through the SMB reader (honest and lying), reading with the
 * trusted fields, flush / scrape / disable, clone, stats.
 *
 * The svc_ops callbacks record what the service asked for; chunks are
 * written into the SMB by hand with the ABI layout (smb-abi.md §2-§4).
 */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "svc_int.h"
#include "svc_packet.h"
#include "svc_service.h"
#include "trace.pb-c.h"

/* ------------------------------------------------------------ recorder */

typedef struct {
    int setup_tracing, setup_ds, start_ds, stop_ds, flush, flush_done_ok,
        flush_done_fail, disabled;
    int smb_fd;
    uint32_t last_target_buffer;
    uint64_t last_session_id, last_instance, last_flush_id;
} rec_t;

static rec_t R;

static int r_setup_tracing(void *c, void *conn, int fd, uint32_t kb)
{
    R.setup_tracing++;
    R.smb_fd = fd;
    return 0;
}
static int r_setup_ds(void *c, void *conn, uint64_t id,
                      const Perfetto__Protos__DataSourceConfig *cfg)
{
    R.setup_ds++;
    return 0;
}
static int r_start_ds(void *c, void *conn, uint64_t id,
                      const Perfetto__Protos__DataSourceConfig *cfg)
{
    R.start_ds++;
    R.last_target_buffer = cfg->target_buffer;
    R.last_session_id = cfg->tracing_session_id;
    R.last_instance = id;
    return 0;
}
static int r_stop_ds(void *c, void *conn, uint64_t id)
{
    R.stop_ds++;
    return 0;
}
static int r_flush(void *c, void *conn, const uint64_t *ids, size_t n,
                   uint64_t fid, uint64_t flags)
{
    R.flush++;
    R.last_flush_id = fid;
    return 0;
}
static void r_flush_done(void *c, void *consumer, uint64_t tok, bool ok)
{
    if (ok)
        R.flush_done_ok++;
    else
        R.flush_done_fail++;
}
static void r_disabled(void *c, void *consumer, svc_session *s,
                       const char *err)
{
    R.disabled++;
}

static const svc_ops OPS = {
    r_setup_tracing, r_setup_ds, r_start_ds, r_stop_ds, r_flush,
    r_flush_done, r_disabled,
};

/* ------------------------------------------------------------ config */

typedef struct {
    Perfetto__Protos__TraceConfig cfg;
    Perfetto__Protos__TraceConfig__BufferConfig buf[2], *bufp[2];
    Perfetto__Protos__TraceConfig__DataSource ds, *dsp[1];
    Perfetto__Protos__DataSourceConfig dsc;
} cfg_t;

static void cfg_init(cfg_t *c, uint32_t size_kb, int fill_policy)
{
    memset(c, 0, sizeof(*c));
    perfetto__protos__trace_config__init(&c->cfg);
    for (int i = 0; i < 2; i++) {
        perfetto__protos__trace_config__buffer_config__init(&c->buf[i]);
        c->buf[i].has_size_kb = true;
        c->buf[i].size_kb = size_kb;
        c->buf[i].has_fill_policy = true;
        c->buf[i].fill_policy = fill_policy;
        c->bufp[i] = &c->buf[i];
    }
    c->cfg.n_buffers = 1;
    c->cfg.buffers = c->bufp;
    perfetto__protos__trace_config__data_source__init(&c->ds);
    perfetto__protos__data_source_config__init(&c->dsc);
    c->dsc.name = "test.ds";
    c->ds.config = &c->dsc;
    c->dsp[0] = &c->ds;
    c->cfg.n_data_sources = 1;
    c->cfg.data_sources = c->dsp;
}

static svc_producer *add_producer(svc_service *svc, const char *name,
                                  pid_t pid)
{
    svc_producer_params pp = { .name = name };
    svc_producer *p = svc_producer_connect(svc, NULL, 1000, pid, &pp);
    ck_assert_ptr_nonnull(p);
    Perfetto__Protos__DataSourceDescriptor d =
        PERFETTO__PROTOS__DATA_SOURCE_DESCRIPTOR__INIT;
    d.name = "test.ds";
    ck_assert_int_eq(svc_producer_register_ds(svc, p, &d, NULL, 0), 0);
    return p;
}

/* ------------------------------------------------------------ SMB */

/* Writes one Div1 chunk at page `page` holding packets with seq_value
 * first..first+n-1; state 3 (Complete) or 1 (BeingWritten). */
static void write_chunk(svc_producer *p, uint32_t page, uint16_t writer,
                        uint32_t chunk_id, uint32_t first, unsigned n,
                        unsigned state)
{
    size_t size, psz;
    uint8_t *base = svc_producer_smb(p, &size, &psz);
    ck_assert_ptr_nonnull(base);
    uint8_t *pg = base + (size_t)page * psz;
    uint8_t *ch = pg + 8;
    uint8_t *pay = ch + 8;
    size_t off = 0;
    for (unsigned i = 0; i < n; i++) {
        uint32_t v = first + i;
        /* TracePacket { for_testing (900) { seq_value (2): v } } */
        uint8_t pkt[16];
        size_t k = 0;
        pkt[k++] = 0xA2;
        pkt[k++] = 0x38;
        pkt[k++] = 0x03;
        pkt[k++] = 0x10;
        pkt[k++] = (uint8_t)(0x80 | (v & 0x7f));
        pkt[k++] = (uint8_t)(v >> 7);
        pay[off++] = (uint8_t)k;
        memcpy(pay + off, pkt, k);
        off += k;
    }
    memcpy(ch, &chunk_id, 4);
    memcpy(ch + 4, &writer, 2);
    uint16_t packets = (uint16_t)n;
    memcpy(ch + 6, &packets, 2);
    uint32_t word = (1u << 28) | state;
    atomic_store((_Atomic uint32_t *)(void *)pg, word);
}

static uint32_t page_word(svc_producer *p, uint32_t page)
{
    size_t size, psz;
    uint8_t *base = svc_producer_smb(p, &size, &psz);
    return atomic_load((_Atomic uint32_t *)(void *)(base + page * psz));
}

static void commit(svc_service *svc, svc_producer *p, uint32_t page,
                   uint32_t chunk, uint32_t target, uint64_t flush_id)
{
    Perfetto__Protos__CommitDataRequest req =
        PERFETTO__PROTOS__COMMIT_DATA_REQUEST__INIT;
    Perfetto__Protos__CommitDataRequest__ChunksToMove m =
        PERFETTO__PROTOS__COMMIT_DATA_REQUEST__CHUNKS_TO_MOVE__INIT, *mp = &m;
    m.has_page = m.has_chunk = m.has_target_buffer = true;
    m.page = page;
    m.chunk = chunk;
    m.target_buffer = target;
    req.n_chunks_to_move = 1;
    req.chunks_to_move = &mp;
    if (flush_id) {
        req.has_flush_request_id = true;
        req.flush_request_id = flush_id;
    }
    ck_assert_int_eq(svc_producer_commit(svc, p, &req), 0);
}

/* ------------------------------------------------------------ reading */

typedef struct {
    int n, n_service, n_stats, n_config, n_uuid;
    uint32_t seq_of_value[64];
    int32_t pid_of_value[64];
    uint32_t dropped_of_value[64];
    int values;
    uint64_t invalid_packets;
    uint64_t chunks_discarded;
    uint64_t abi_violations;
} readout_t;

static int collect(void *ctx, const uint8_t *data, size_t size)
{
    readout_t *r = ctx;
    Perfetto__Protos__TracePacket *p =
        perfetto__protos__trace_packet__unpack(NULL, size, data);
    ck_assert_ptr_nonnull(p);
    ck_assert(p->has_trusted_packet_sequence_id);
    ck_assert(p->has_trusted_uid);
    r->n++;
    if (p->trusted_packet_sequence_id == 1) {
        r->n_service++;
        if (p->trace_stats) {
            r->n_stats++;
            r->invalid_packets = p->trace_stats->invalid_packets;
            r->chunks_discarded = p->trace_stats->chunks_discarded;
            if (p->trace_stats->n_buffer_stats)
                r->abi_violations =
                    p->trace_stats->buffer_stats[0]->abi_violations;
        }
        if (p->trace_config)
            r->n_config++;
        if (p->trace_uuid)
            r->n_uuid++;
    } else if (p->for_testing) {
        uint32_t v = p->for_testing->seq_value;
        if (v < 64) {
            r->seq_of_value[v] = p->trusted_packet_sequence_id;
            r->pid_of_value[v] = p->trusted_pid;
            r->dropped_of_value[v] = p->previous_packet_dropped;
        }
        r->values++;
    }
    perfetto__protos__trace_packet__free_unpacked(p, NULL);
    return 0;
}

static void read_all(svc_service *svc, svc_session *s, readout_t *r)
{
    memset(r, 0, sizeof(*r));
    bool more = false;
    ck_assert_int_eq(svc_session_read(svc, s, 0, collect, r, &more), 0);
    ck_assert(!more);
}

static svc_service *svc_new(void)
{
    memset(&R, 0, sizeof(R));
    svc_service *svc = svc_create(&OPS, NULL, getuid());
    ck_assert_ptr_nonnull(svc);
    return svc;
}

/* ------------------------------------------------------------ config */

START_TEST(test_config_rejects_bad_buffers)
{
    svc_service *svc = svc_new();
    cfg_t c;
    char err[256];
    cfg_init(&c, 64, 0);
    c.cfg.n_buffers = 0;
    ck_assert_ptr_null(svc_session_enable(svc, NULL, &c.cfg, -1, err,
                                          sizeof(err)));
    ck_assert_ptr_nonnull(strstr(err, "no buffers"));
    cfg_init(&c, 0, 0);
    ck_assert_ptr_null(svc_session_enable(svc, NULL, &c.cfg, -1, err,
                                          sizeof(err)));
    ck_assert_ptr_nonnull(strstr(err, "size_kb"));
    cfg_init(&c, 64, 7);
    ck_assert_ptr_null(svc_session_enable(svc, NULL, &c.cfg, -1, err,
                                          sizeof(err)));
    ck_assert_ptr_nonnull(strstr(err, "fill_policy"));
    cfg_init(&c, 64, 0);
    c.dsc.has_target_buffer = true;
    c.dsc.target_buffer = 1;
    ck_assert_ptr_null(svc_session_enable(svc, NULL, &c.cfg, -1, err,
                                          sizeof(err)));
    ck_assert_ptr_nonnull(strstr(err, "target_buffer"));
    cfg_init(&c, 64, 0);
    c.cfg.has_write_into_file = true;
    c.cfg.write_into_file = true;
    ck_assert_ptr_null(svc_session_enable(svc, NULL, &c.cfg, -1, err,
                                          sizeof(err)));
    ck_assert_ptr_nonnull(strstr(err, "write_into_file"));
    ck_assert_uint_eq(svc_session_count(svc), 0);
    svc_destroy(svc);
}
END_TEST

START_TEST(test_config_creates_buffers_with_global_ids)
{
    svc_service *svc = svc_new();
    cfg_t c;
    cfg_init(&c, 64, 2);
    c.cfg.n_buffers = 2;
    svc_session *s1 = svc_session_enable(svc, NULL, &c.cfg, -1, NULL, 0);
    svc_session *s2 = svc_session_enable(svc, NULL, &c.cfg, -1, NULL, 0);
    ck_assert_ptr_nonnull(s1);
    ck_assert_ptr_nonnull(s2);
    ck_assert_uint_ne(s1->buf_ids[0], s1->buf_ids[1]);
    ck_assert_uint_ne(s1->buf_ids[0], s2->buf_ids[0]);
    ck_assert_uint_ne(s1->buf_ids[1], s2->buf_ids[1]);
    tb_buffer *b = svc__buffer(svc, s2->buf_ids[1], NULL);
    ck_assert_ptr_nonnull(b);
    ck_assert_int_eq(tb_policy(b), TB_DISCARD);
    ck_assert_uint_eq(tb_size(b), 65536);
    Perfetto__Protos__TraceStats *st = svc_stats_build(svc, NULL);
    ck_assert_uint_eq(st->total_buffers, 4);
    ck_assert_uint_eq(st->tracing_sessions, 2);
    svc_stats_free(st);
    uint32_t freed = s1->buf_ids[0];
    svc_session_free(svc, s1);
    ck_assert_ptr_null(svc__buffer(svc, freed, NULL));
    ck_assert_ptr_nonnull(svc__buffer(svc, s2->buf_ids[0], NULL));
    svc_destroy(svc);
}
END_TEST

/* ------------------------------------------------------------ matching */

START_TEST(test_match_all_producers_and_late_registration)
{
    svc_service *svc = svc_new();
    svc_producer *p1 = add_producer(svc, "one", 11);
    svc_producer *p2 = add_producer(svc, "two", 12);
    ck_assert_uint_ne(svc_producer_id(p1), svc_producer_id(p2));
    cfg_t c;
    cfg_init(&c, 64, 0);
    svc_session *s = svc_session_enable(svc, NULL, &c.cfg, -1, NULL, 0);
    ck_assert_ptr_nonnull(s);
    ck_assert_int_eq(R.setup_tracing, 2);      /* one SMB per producer */
    ck_assert_int_eq(R.start_ds, 2);
    ck_assert_int_eq(R.setup_ds, 2);
    ck_assert_uint_eq(R.last_target_buffer, s->buf_ids[0]);
    ck_assert_uint_eq(R.last_session_id, svc_session_id(s));
    svc_producer *p3 = add_producer(svc, "three", 13);   /* late */
    ck_assert_int_eq(R.start_ds, 3);
    ck_assert_int_eq(R.setup_tracing, 3);
    ck_assert(svc__producer_may_write(p3, s->buf_ids[0]));
    /* A second session reuses the SMBs: no new SetupTracing. */
    svc_session *s2 = svc_session_enable(svc, NULL, &c.cfg, -1, NULL, 0);
    ck_assert_ptr_nonnull(s2);
    ck_assert_int_eq(R.setup_tracing, 3);
    ck_assert_int_eq(R.start_ds, 6);
    svc_destroy(svc);
}
END_TEST

START_TEST(test_deferred_start_waits_for_start_tracing)
{
    svc_service *svc = svc_new();
    add_producer(svc, "one", 11);
    cfg_t c;
    cfg_init(&c, 64, 0);
    c.cfg.has_deferred_start = true;
    c.cfg.deferred_start = true;
    svc_session *s = svc_session_enable(svc, NULL, &c.cfg, -1, NULL, 0);
    ck_assert_ptr_nonnull(s);
    ck_assert_int_eq(R.start_ds, 0);
    ck_assert_int_eq(svc_session_flush(svc, s, 100, 0, 1), -EINVAL);
    ck_assert_int_eq(svc_session_start(svc, s), 0);
    ck_assert_int_eq(R.start_ds, 1);
    ck_assert_int_eq(svc_session_start(svc, s), 0);      /* idempotent */
    ck_assert_int_eq(R.start_ds, 1);
    /* A deferred session disabled before it started ends at once. */
    svc_session *d = svc_session_enable(svc, NULL, &c.cfg, -1, NULL, 0);
    ck_assert_int_eq(svc_session_disable(svc, d), 0);
    ck_assert(svc_session_is_disabled(d));
    ck_assert_int_eq(R.disabled, 1);
    svc_destroy(svc);
}
END_TEST

START_TEST(test_match_producer_name_filter)
{
    svc_service *svc = svc_new();
    add_producer(svc, "one", 11);
    add_producer(svc, "two", 12);
    cfg_t c;
    cfg_init(&c, 64, 0);
    char *names[] = {"two"};
    c.ds.n_producer_name_filter = 1;
    c.ds.producer_name_filter = names;
    ck_assert_ptr_nonnull(svc_session_enable(svc, NULL, &c.cfg, -1, NULL, 0));
    ck_assert_int_eq(R.start_ds, 1);
    svc_destroy(svc);
}
END_TEST

START_TEST(test_register_ds_rejects_bad_descriptors)
{
    svc_service *svc = svc_new();
    svc_producer *p = add_producer(svc, "one", 11);
    Perfetto__Protos__DataSourceDescriptor d =
        PERFETTO__PROTOS__DATA_SOURCE_DESCRIPTOR__INIT;
    char err[128];
    ck_assert_int_lt(svc_producer_register_ds(svc, p, &d, err, sizeof(err)),
                     0);
    d.name = "test.ds";
    ck_assert_int_eq(svc_producer_register_ds(svc, p, &d, err, sizeof(err)),
                     -EEXIST);
    ck_assert_int_eq(svc_producer_register_writer(svc, p, 0, 1), -EINVAL);
    ck_assert_int_eq(svc_producer_register_writer(svc, p, 40000, 1), -EINVAL);
    svc_destroy(svc);
}
END_TEST

/* ------------------------------------------------------------ commit+read */

START_TEST(test_read_adds_trusted_fields_and_sequences)
{
    svc_service *svc = svc_new();
    svc_producer *p1 = add_producer(svc, "one", 11);
    svc_producer *p2 = add_producer(svc, "two", 12);
    cfg_t c;
    cfg_init(&c, 64, 0);
    svc_session *s = svc_session_enable(svc, NULL, &c.cfg, -1, NULL, 0);
    uint32_t b = s->buf_ids[0];
    write_chunk(p1, 0, 1, 0, 0, 3, 3);     /* values 0..2, writer 1 */
    commit(svc, p1, 0, 0, b, 0);
    ck_assert_uint_eq(page_word(p1, 0), 0);   /* chunk freed */
    write_chunk(p2, 0, 1, 0, 10, 2, 3);    /* values 10..11 */
    commit(svc, p2, 0, 0, b, 0);
    write_chunk(p1, 1, 2, 0, 20, 1, 3);    /* writer 2 of producer 1 */
    commit(svc, p1, 1, 0, b, 0);
    readout_t r;
    read_all(svc, s, &r);
    ck_assert_int_eq(r.values, 6);
    ck_assert_int_eq(r.n_config, 1);
    ck_assert_int_eq(r.n_uuid, 1);
    ck_assert_int_eq(r.n_stats, 1);
    ck_assert_uint_eq(r.seq_of_value[0], 2);          /* first use */
    ck_assert_uint_eq(r.seq_of_value[2], 2);
    ck_assert_uint_eq(r.seq_of_value[10], 3);
    ck_assert_uint_eq(r.seq_of_value[20], 4);
    ck_assert_int_eq(r.pid_of_value[0], 11);
    ck_assert_int_eq(r.pid_of_value[10], 12);
    ck_assert_uint_eq(r.dropped_of_value[0], 0);
    /* A second pass: no config again, nothing left but the stats. */
    read_all(svc, s, &r);
    ck_assert_int_eq(r.values, 0);
    ck_assert_int_eq(r.n_config, 0);
    ck_assert_int_eq(r.n_stats, 1);
    svc_destroy(svc);
}
END_TEST

START_TEST(test_read_in_bounded_batches)
{
    svc_service *svc = svc_new();
    svc_producer *p = add_producer(svc, "one", 11);
    cfg_t c;
    cfg_init(&c, 64, 0);
    svc_session *s = svc_session_enable(svc, NULL, &c.cfg, -1, NULL, 0);
    for (uint32_t i = 0; i < 8; i++) {
        write_chunk(p, i, 1, i, i * 4, 4, 3);
        commit(svc, p, i, 0, s->buf_ids[0], 0);
    }
    readout_t r;
    memset(&r, 0, sizeof(r));
    bool more = true;
    int rounds = 0;
    while (more && rounds < 100) {
        ck_assert_int_eq(svc_session_read(svc, s, 40, collect, &r, &more), 0);
        rounds++;
    }
    ck_assert_int_eq(r.values, 32);
    ck_assert_int_gt(rounds, 2);
    svc_destroy(svc);
}
END_TEST

START_TEST(test_read_drops_invalid_packets_and_flags_next)
{
    svc_service *svc = svc_new();
    svc_producer *p = add_producer(svc, "one", 11);
    cfg_t c;
    cfg_init(&c, 64, 0);
    svc_session *s = svc_session_enable(svc, NULL, &c.cfg, -1, NULL, 0);
    write_chunk(p, 0, 1, 0, 0, 3, 3);
    /* Make packet 1 claim trusted_packet_sequence_id: field 10 (0x50). */
    size_t size, psz;
    uint8_t *base = svc_producer_smb(p, &size, &psz);
    uint8_t *pay = base + 16;
    size_t second = 1 + pay[0];
    pay[second + 1] = 0x50;         /* tag byte of packet 1 */
    pay[second + 2] = 0x01;
    pay[second + 3] = 0x08;         /* then field 1 varint... */
    pay[second + 4] = 0x01;
    pay[second + 5] = 0x08;
    pay[second + 6] = 0x01;
    commit(svc, p, 0, 0, s->buf_ids[0], 0);
    readout_t r;
    read_all(svc, s, &r);
    ck_assert_int_eq(r.values, 2);
    ck_assert_uint_eq(r.invalid_packets, 1);
    ck_assert_uint_eq(r.dropped_of_value[0], 0);
    ck_assert_uint_ne(r.dropped_of_value[2], 0);     /* not silent */
    svc_destroy(svc);
}
END_TEST

/* ------------------------------------------------------------ stats */

/* The histogram bucket i holds thr[i-1] < v <= thr[i]. */
static void assert_one_sample_in_right_bucket(const uint64_t *counts,
                                              const int64_t *sums)
{
    static const int64_t thr[] = TB_HIST_THRESHOLDS;
    uint64_t total = 0;
    for (size_t q = 0; q < TB_HIST_BUCKETS; q++) {
        total += counts[q];
        if (!counts[q])
            continue;
        ck_assert_int_gt(sums[q], q ? thr[q - 1] : 0);
        if (q < TB_HIST_BUCKETS - 1)
            ck_assert_int_le(sums[q], thr[q]);
    }
    ck_assert_uint_eq(total, 1);
}

START_TEST(test_stats_writer_histograms)
{
    svc_service *svc = svc_new();
    svc_producer *p = add_producer(svc, "one", 11);
    cfg_t c;
    cfg_init(&c, 64, 0);
    svc_session *s = svc_session_enable(svc, NULL, &c.cfg, -1, NULL, 0);
    ck_assert_ptr_nonnull(s);
    write_chunk(p, 0, 1, 0, 0, 3, 3);              /* writer 1: 3 packets */
    commit(svc, p, 0, 0, s->buf_ids[0], 0);
    write_chunk(p, 1, 2, 0, 10, 20, 3);            /* writer 2: 20 */
    commit(svc, p, 1, 0, s->buf_ids[0], 0);
    /* Built before any read: the writers get their sequence ids now. */
    Perfetto__Protos__TraceStats *st = svc_stats_build(svc, s);
    ck_assert_ptr_nonnull(st);
    ck_assert_uint_eq(st->n_chunk_payload_histogram_def, 10);
    ck_assert_int_eq(st->chunk_payload_histogram_def[0], 8);
    ck_assert_int_eq(st->chunk_payload_histogram_def[9], 16384);
    ck_assert_uint_eq(st->n_writer_stats, 2);
    int64_t sum[2] = {0, 0};
    uint64_t seq[2];
    for (size_t i = 0; i < 2; i++) {
        const Perfetto__Protos__TraceStats__WriterStats *w =
            st->writer_stats[i];
        ck_assert(w->has_sequence_id && w->has_buffer);
        ck_assert_uint_eq(w->buffer, 0);
        ck_assert_uint_eq(w->n_chunk_payload_histogram_counts, 11);
        ck_assert_uint_eq(w->n_chunk_payload_histogram_sum, 11);
        assert_one_sample_in_right_bucket(w->chunk_payload_histogram_counts,
                                          w->chunk_payload_histogram_sum);
        for (size_t q = 0; q < 11; q++)
            sum[i] += w->chunk_payload_histogram_sum[q];
        seq[i] = w->sequence_id;
    }
    ck_assert_int_gt(sum[1], sum[0]);              /* 20 packets vs 3 */
    ck_assert_uint_ne(seq[0], seq[1]);
    svc_stats_free(st);
    /* The packets carry the same sequence ids. */
    readout_t r;
    read_all(svc, s, &r);
    ck_assert_uint_eq(r.seq_of_value[0], seq[0]);
    ck_assert_uint_eq(r.seq_of_value[10], seq[1]);
    /* A second chunk of writer 1 adds a sample to its entry. */
    write_chunk(p, 2, 1, 1, 3, 3, 3);
    commit(svc, p, 2, 0, s->buf_ids[0], 0);
    st = svc_stats_build(svc, s);
    ck_assert_uint_eq(st->n_writer_stats, 2);
    uint64_t n = 0;
    for (size_t q = 0; q < 11; q++)
        n += st->writer_stats[0]->chunk_payload_histogram_counts[q];
    ck_assert_uint_eq(n, 2);
    svc_stats_free(st);
    /* Service-wide stats (no session) carry no histograms. */
    st = svc_stats_build(svc, NULL);
    ck_assert_uint_eq(st->n_writer_stats, 0);
    ck_assert_uint_eq(st->n_chunk_payload_histogram_def, 0);
    svc_stats_free(st);
    svc_destroy(svc);
}
END_TEST

START_TEST(test_stats_histograms_can_be_disabled)
{
    svc_service *svc = svc_new();
    svc_producer *p = add_producer(svc, "one", 11);
    cfg_t c;
    cfg_init(&c, 64, 0);
    Perfetto__Protos__TraceConfig__BuiltinDataSource b =
        PERFETTO__PROTOS__TRACE_CONFIG__BUILTIN_DATA_SOURCE__INIT;
    b.has_disable_chunk_usage_histograms = true;
    b.disable_chunk_usage_histograms = true;
    c.cfg.builtin_data_sources = &b;
    svc_session *s = svc_session_enable(svc, NULL, &c.cfg, -1, NULL, 0);
    ck_assert_ptr_nonnull(s);
    write_chunk(p, 0, 1, 0, 0, 3, 3);
    commit(svc, p, 0, 0, s->buf_ids[0], 0);
    Perfetto__Protos__TraceStats *st = svc_stats_build(svc, s);
    ck_assert_ptr_nonnull(st);
    ck_assert_uint_eq(st->n_writer_stats, 0);
    ck_assert_uint_eq(st->n_chunk_payload_histogram_def, 0);
    ck_assert_uint_eq(st->n_buffer_stats, 1);      /* the rest is there */
    svc_stats_free(st);
    readout_t r;
    read_all(svc, s, &r);
    ck_assert_int_eq(r.values, 3);
    svc_destroy(svc);
}
END_TEST

/* ------------------------------------------------------------ lying */

START_TEST(test_commit_lies_are_counted_not_fatal)
{
    svc_service *svc = svc_new();
    svc_producer *p = add_producer(svc, "one", 11);
    svc_producer *q = svc_producer_connect(svc, NULL, 1000, 99, NULL);
    Perfetto__Protos__CommitDataRequest empty =
        PERFETTO__PROTOS__COMMIT_DATA_REQUEST__INIT;
    ck_assert_int_eq(svc_producer_commit(svc, q, &empty), -EPERM); /* no SMB */
    cfg_t c;
    cfg_init(&c, 64, 0);
    svc_session *s = svc_session_enable(svc, NULL, &c.cfg, -1, NULL, 0);
    cfg_t c2;
    cfg_init(&c2, 64, 0);
    c2.dsc.name = "nobody.registers.this";
    svc_session *other = svc_session_enable(svc, NULL, &c2.cfg, -1, NULL, 0);
    uint32_t b = s->buf_ids[0];
    size_t size, psz;
    svc_producer_smb(p, &size, &psz);
    uint32_t npages = (uint32_t)(size / psz);
    commit(svc, p, npages, 0, b, 0);          /* page out of range */
    commit(svc, p, UINT32_MAX, 0, b, 0);
    write_chunk(p, 0, 1, 0, 0, 2, 3);
    commit(svc, p, 0, 5, b, 0);               /* chunk index > layout */
    write_chunk(p, 1, 1, 1, 2, 2, 1);         /* BeingWritten */
    commit(svc, p, 1, 0, b, 0);
    ck_assert_uint_eq(page_word(p, 1) & 3, 1);    /* untouched */
    uint64_t before = svc->chunks_discarded;
    commit(svc, p, 0, 0, other->buf_ids[0], 0);   /* not its buffer */
    ck_assert_uint_eq(svc->chunks_discarded, before + 1);
    write_chunk(p, 0, 1, 0, 0, 2, 3);
    commit(svc, p, 0, 0, 77777, 0);                /* no such buffer */
    ck_assert_uint_eq(svc->chunks_discarded, before + 2);
    /* Garbage chunk: count says 5 fragments, payload has none valid. */
    write_chunk(p, 2, 1, 2, 0, 1, 3);
    uint8_t *base = svc_producer_smb(p, NULL, NULL);
    memset(base + 2 * psz + 16, 0xFF, psz - 16);
    uint16_t count = 5;
    memcpy(base + 2 * psz + 8 + 6, &count, 2);
    commit(svc, p, 2, 0, b, 0);
    /* Patches: bad writer id, too many, wrong size. */
    Perfetto__Protos__CommitDataRequest req =
        PERFETTO__PROTOS__COMMIT_DATA_REQUEST__INIT;
    Perfetto__Protos__CommitDataRequest__ChunkToPatch cp =
        PERFETTO__PROTOS__COMMIT_DATA_REQUEST__CHUNK_TO_PATCH__INIT, *cpp = &cp;
    Perfetto__Protos__CommitDataRequest__ChunkToPatch__Patch pt =
        PERFETTO__PROTOS__COMMIT_DATA_REQUEST__CHUNK_TO_PATCH__PATCH__INIT,
        *ptp = &pt;
    uint8_t three[3] = {1, 2, 3};
    pt.has_offset = true;
    pt.has_data = true;
    pt.data.data = three;
    pt.data.len = 3;
    cp.has_writer_id = cp.has_target_buffer = true;
    cp.writer_id = 1;
    cp.target_buffer = b;
    cp.n_patches = 1;
    cp.patches = &ptp;
    req.n_chunks_to_patch = 1;
    req.chunks_to_patch = &cpp;
    uint64_t pd = svc->patches_discarded;
    ck_assert_int_eq(svc_producer_commit(svc, p, &req), 0);
    ck_assert_uint_eq(svc->patches_discarded, pd + 1);
    cp.writer_id = 0;
    ck_assert_int_eq(svc_producer_commit(svc, p, &req), 0);
    ck_assert_uint_eq(svc->patches_discarded, pd + 2);
    readout_t r;
    read_all(svc, s, &r);
    ck_assert_int_eq(r.values, 0);
    ck_assert_uint_ge(r.abi_violations, 1);
    svc_destroy(svc);
}
END_TEST

/* ------------------------------------------------------------ flush */

START_TEST(test_flush_acked_succeeds)
{
    svc_service *svc = svc_new();
    svc_producer *p = add_producer(svc, "one", 11);
    cfg_t c;
    cfg_init(&c, 64, 0);
    svc_session *s = svc_session_enable(svc, NULL, &c.cfg, -1, NULL, 0);
    ck_assert_int_eq(svc_session_flush(svc, s, 1000, 0, 5), 0);
    ck_assert_int_eq(R.flush, 1);
    ck_assert_int_eq(R.flush_done_ok, 0);
    write_chunk(p, 0, 1, 0, 0, 2, 3);
    commit(svc, p, 0, 0, s->buf_ids[0], R.last_flush_id);
    ck_assert_int_eq(R.flush_done_ok, 1);
    ck_assert_uint_eq(s->flushes_succeeded, 1);
    svc_destroy(svc);
}
END_TEST

START_TEST(test_flush_timeout_scrapes_silent_producer)
{
    svc_service *svc = svc_new();
    svc_producer *p = add_producer(svc, "one", 11);
    cfg_t c;
    cfg_init(&c, 64, 0);
    svc_session *s = svc_session_enable(svc, NULL, &c.cfg, -1, NULL, 0);
    ck_assert_int_eq(svc_producer_register_writer(svc, p, 1, s->buf_ids[0]),
                     0);
    /* A chunk still being written, 3 fragments started: 2 are complete. */
    write_chunk(p, 0, 1, 0, 0, 3, 1);
    ck_assert_int_eq(svc_session_flush(svc, s, 1000, 0, 9), 0);
    ck_assert_uint_ne(svc_next_deadline_ms(svc), 0);
    svc_tick(svc, svc_now_ms() + 60000);
    ck_assert_int_eq(R.flush_done_fail, 1);
    ck_assert_uint_eq(s->flushes_failed, 1);
    ck_assert_uint_eq(page_word(p, 0) & 3, 1);     /* scraping never frees */
    readout_t r;
    read_all(svc, s, &r);
    ck_assert_int_eq(r.values, 2);                 /* 0 and 1 recovered */
    svc_destroy(svc);
}
END_TEST

START_TEST(test_disable_stops_and_notifies)
{
    svc_service *svc = svc_new();
    svc_producer *p = add_producer(svc, "one", 11);
    cfg_t c;
    cfg_init(&c, 64, 0);
    c.cfg.has_flush_timeout_ms = true;
    c.cfg.flush_timeout_ms = 100;
    svc_session *s = svc_session_enable(svc, NULL, &c.cfg, -1, NULL, 0);
    ck_assert_int_eq(svc_session_disable(svc, s), 0);
    ck_assert_int_eq(R.flush, 1);
    ck_assert_int_eq(R.disabled, 0);
    Perfetto__Protos__CommitDataRequest req =
        PERFETTO__PROTOS__COMMIT_DATA_REQUEST__INIT;
    req.has_flush_request_id = true;
    req.flush_request_id = R.last_flush_id;
    ck_assert_int_eq(svc_producer_commit(svc, p, &req), 0);
    ck_assert_int_eq(R.stop_ds, 1);
    ck_assert_int_eq(R.disabled, 1);
    ck_assert(svc_session_is_disabled(s));
    ck_assert_int_eq(s->final_flush_outcome, 1);
    svc_destroy(svc);
}
END_TEST

START_TEST(test_duration_disables_after_failed_final_flush)
{
    svc_service *svc = svc_new();
    add_producer(svc, "one", 11);
    cfg_t c;
    cfg_init(&c, 64, 0);
    c.cfg.has_duration_ms = true;
    c.cfg.duration_ms = 10;
    svc_session *s = svc_session_enable(svc, NULL, &c.cfg, -1, NULL, 0);
    svc_tick(svc, svc_now_ms() + 20);          /* duration: final flush */
    ck_assert_int_eq(R.flush, 1);
    svc_tick(svc, svc_now_ms() + 60000);       /* nobody answers */
    ck_assert_int_eq(R.disabled, 1);
    ck_assert_int_eq(s->final_flush_outcome, 2);
    svc_destroy(svc);
}
END_TEST

/* ------------------------------------------------------------ faults */

START_TEST(test_producer_disconnect_scrapes_its_data)
{
    svc_service *svc = svc_new();
    svc_producer *p = add_producer(svc, "one", 11);
    svc_producer *q = add_producer(svc, "two", 12);
    cfg_t c;
    cfg_init(&c, 64, 0);
    svc_session *s = svc_session_enable(svc, NULL, &c.cfg, -1, NULL, 0);
    svc_producer_register_writer(svc, p, 1, s->buf_ids[0]);
    write_chunk(p, 0, 1, 0, 0, 4, 3);          /* complete, not committed */
    write_chunk(q, 0, 1, 0, 10, 2, 3);
    commit(svc, q, 0, 0, s->buf_ids[0], 0);
    ck_assert_int_eq(svc_session_flush(svc, s, 1000, 0, 1), 0);
    svc_producer_disconnect(svc, p);           /* killed mid-flush */
    ck_assert_int_eq(R.flush_done_ok, 0);      /* q still owes an ack */
    readout_t r;
    read_all(svc, s, &r);
    ck_assert_int_eq(r.values, 6);             /* its 4 scraped + q's 2 */
    svc_destroy(svc);
}
END_TEST

START_TEST(test_clone_is_a_snapshot)
{
    svc_service *svc = svc_new();
    svc_producer *p = add_producer(svc, "one", 11);
    cfg_t c;
    cfg_init(&c, 64, 0);
    svc_session *s = svc_session_enable(svc, NULL, &c.cfg, -1, NULL, 0);
    write_chunk(p, 0, 1, 0, 0, 3, 3);
    commit(svc, p, 0, 0, s->buf_ids[0], 0);
    char err[128];
    svc_session *cl = svc_session_clone(svc, NULL, svc_session_id(s), NULL,
                                        err, sizeof(err));
    ck_assert_ptr_nonnull(cl);
    ck_assert_ptr_null(svc_session_clone(svc, NULL, 12345, NULL, err,
                                         sizeof(err)));
    readout_t r;
    read_all(svc, cl, &r);
    ck_assert_int_eq(r.values, 3);
    read_all(svc, s, &r);                      /* original still has them */
    ck_assert_int_eq(r.values, 3);
    write_chunk(p, 0, 1, 1, 3, 1, 3);          /* tracing goes on */
    commit(svc, p, 0, 0, s->buf_ids[0], 0);
    read_all(svc, s, &r);
    ck_assert_int_eq(r.values, 1);
    svc_destroy(svc);
}
END_TEST

static long file_size(int fd)
{
    return (long)lseek(fd, 0, SEEK_END);
}

START_TEST(test_file_mode_writes_trace_records_and_caps_size)
{
    svc_service *svc = svc_new();
    svc_producer *p = add_producer(svc, "one", 11);
    char path[] = "/tmp/svcfileXXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    unlink(path);
    int mine = dup(fd);
    cfg_t c;
    cfg_init(&c, 64, 0);
    c.cfg.has_write_into_file = true;
    c.cfg.write_into_file = true;
    c.cfg.has_file_write_period_ms = true;
    c.cfg.file_write_period_ms = 1;            /* clamped to 100 */
    c.cfg.has_max_file_size_bytes = true;
    c.cfg.max_file_size_bytes = 4000;
    svc_session *s = svc_session_enable(svc, NULL, &c.cfg, fd, NULL, 0);
    ck_assert_ptr_nonnull(s);
    ck_assert(svc_session_writes_file(s));
    ck_assert_uint_eq(s->file_write_period_ms, 100);
    for (uint32_t i = 0; i < 40; i++) {
        write_chunk(p, i % 8, 1, i, i * 10, 10, 3);
        commit(svc, p, i % 8, 0, s->buf_ids[0], 0);
    }
    svc_tick(svc, svc_now_ms() + 150);         /* a periodic file write */
    long size = file_size(mine);
    ck_assert_int_gt(size, 0);
    ck_assert_int_lt(size, 4000);              /* whole packets, < limit */
    ck_assert(s->file_full);
    ck_assert_int_eq(R.flush, 1);              /* file full: disabling */
    /* The file is a sequence of Trace.packet records. */
    uint8_t *buf = malloc((size_t)size);
    ck_assert_int_eq(pread(mine, buf, (size_t)size, 0), size);
    long off = 0;
    int records = 0;
    while (off < size) {
        ck_assert_uint_eq(buf[off], 0x0A);
        off++;
        uint64_t len = 0;
        int shift = 0;
        while (buf[off] & 0x80) {
            len |= (uint64_t)(buf[off++] & 0x7f) << shift;
            shift += 7;
        }
        len |= (uint64_t)buf[off++] << shift;
        Perfetto__Protos__TracePacket *pk =
            perfetto__protos__trace_packet__unpack(NULL, len, buf + off);
        ck_assert_ptr_nonnull(pk);
        perfetto__protos__trace_packet__free_unpacked(pk, NULL);
        off += (long)len;
        records++;
    }
    ck_assert_int_eq(off, size);
    ck_assert_int_gt(records, 3);
    free(buf);
    close(mine);
    svc_destroy(svc);
}
END_TEST

/* Parses a file of Trace.packet records into r (collect()). */
static void read_file_records(int fd, readout_t *r)
{
    memset(r, 0, sizeof(*r));
    long size = file_size(fd);
    uint8_t *buf = malloc((size_t)size + 1);
    ck_assert_int_eq(pread(fd, buf, (size_t)size, 0), size);
    long off = 0;
    while (off < size) {
        ck_assert_uint_eq(buf[off], 0x0A);
        off++;
        uint64_t len = 0;
        int shift = 0;
        while (buf[off] & 0x80) {
            len |= (uint64_t)(buf[off++] & 0x7f) << shift;
            shift += 7;
        }
        len |= (uint64_t)buf[off++] << shift;
        ck_assert_int_le(off + (long)len, size);
        collect(r, buf + off, len);
        off += (long)len;
    }
    free(buf);
}

/* File mode copies packets straight into the write batch and validates
 * them there: an invalid one leaves no bytes behind and flags the next. */
START_TEST(test_file_mode_drops_invalid_packets_in_place)
{
    svc_service *svc = svc_new();
    svc_producer *p = add_producer(svc, "one", 11);
    char path[] = "/tmp/svcfileXXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    unlink(path);
    int mine = dup(fd);
    cfg_t c;
    cfg_init(&c, 64, 0);
    c.cfg.has_write_into_file = true;
    c.cfg.write_into_file = true;
    svc_session *s = svc_session_enable(svc, NULL, &c.cfg, fd, NULL, 0);
    ck_assert_ptr_nonnull(s);
    write_chunk(p, 0, 1, 0, 0, 3, 3);
    size_t size, psz;
    uint8_t *base = svc_producer_smb(p, &size, &psz);
    uint8_t *pay = base + 16;
    size_t second = 1 + pay[0];
    pay[second + 1] = 0x50;         /* packet 1 claims a sequence id */
    pay[second + 2] = 0x01;
    pay[second + 3] = 0x08;
    pay[second + 4] = 0x01;
    pay[second + 5] = 0x08;
    pay[second + 6] = 0x01;
    commit(svc, p, 0, 0, s->buf_ids[0], 0);
    ck_assert_int_eq(svc_session_write_file(svc, s), 0);
    /* a second pass appends behind the first, reusing the batch */
    write_chunk(p, 1, 1, 1, 3, 2, 3);
    commit(svc, p, 1, 0, s->buf_ids[0], 0);
    ck_assert_int_eq(svc_session_write_file(svc, s), 0);
    readout_t r;
    read_file_records(mine, &r);
    ck_assert_int_eq(r.values, 4);                   /* 0, 2, 3, 4 */
    ck_assert_uint_eq(r.invalid_packets, 1);
    ck_assert_uint_eq(r.dropped_of_value[0], 0);
    ck_assert_uint_ne(r.dropped_of_value[2], 0);     /* not silent */
    ck_assert_uint_eq(r.dropped_of_value[3], 0);
    ck_assert_uint_eq(r.seq_of_value[4], r.seq_of_value[0]);
    ck_assert_int_eq((long)s->bytes_written_to_file, file_size(mine));
    close(mine);
    svc_destroy(svc);
}
END_TEST

/* A chunk on `page` holding raw fragment bytes (count fragments, flags as
 * in the ABI: 1 = first continues from prev, 2 = last continues on next). */
static void write_raw_chunk(svc_producer *p, uint32_t page, uint16_t writer,
                            uint32_t chunk_id, const uint8_t *frags,
                            size_t len, unsigned count, unsigned flags)
{
    size_t size, psz;
    uint8_t *pg = svc_producer_smb(p, &size, &psz) + (size_t)page * psz;
    ck_assert_uint_le(len, psz - 16);
    memcpy(pg + 16, frags, len);
    memcpy(pg + 8, &chunk_id, 4);
    memcpy(pg + 12, &writer, 2);
    uint16_t packets = (uint16_t)(count | flags << 10);
    memcpy(pg + 14, &packets, 2);
    atomic_store((_Atomic uint32_t *)(void *)pg, (1u << 28) | 3u);
}

/* TracePacket { for_testing { seq_value: v, str: L letters } } (or with a
 * top-level field 10 the service alone may write, if bad). */
static size_t big_packet(uint8_t *out, uint32_t v, size_t L, bool bad)
{
    uint8_t inner[8192];
    size_t k = 0;
    inner[k++] = 0x10;
    k += svc_varint(inner + k, v);
    inner[k++] = 0x0A;
    k += svc_varint(inner + k, L);
    for (size_t i = 0; i < L; i++)
        inner[k++] = (uint8_t)('a' + (v + i) % 26);
    size_t n = 0;
    if (bad) {
        out[n++] = 0x50;                    /* trusted_packet_sequence_id */
        out[n++] = 0x07;
    }
    out[n++] = 0xA2;
    out[n++] = 0x38;
    n += svc_varint(out + n, k);
    memcpy(out + n, inner, k);
    return n + k;
}

/* Checks the file's test packets: values 0..n-1 in order except `skip`,
 * each str intact; returns how many, and the flag on skip + 1. */
static int check_big_file(int fd, uint32_t n, uint32_t skip,
                          uint32_t *flag_after_skip)
{
    long size = file_size(fd);
    uint8_t *buf = malloc((size_t)size + 1);
    ck_assert_int_eq(pread(fd, buf, (size_t)size, 0), size);
    long off = 0;
    uint32_t want = 0;
    int seen = 0;
    while (off < size) {
        ck_assert_uint_eq(buf[off++], 0x0A);
        uint64_t len = 0;
        int shift = 0;
        while (buf[off] & 0x80) {
            len |= (uint64_t)(buf[off++] & 0x7f) << shift;
            shift += 7;
        }
        len |= (uint64_t)buf[off++] << shift;
        ck_assert_int_le(off + (long)len, size);
        Perfetto__Protos__TracePacket *p =
            perfetto__protos__trace_packet__unpack(NULL, len, buf + off);
        ck_assert_ptr_nonnull(p);
        if (p->trusted_packet_sequence_id != 1 && p->for_testing) {
            if (want == skip)
                want++;
            ck_assert_uint_eq(p->for_testing->seq_value, want);
            ck_assert_ptr_nonnull(p->for_testing->str);
            size_t L = strlen(p->for_testing->str);
            ck_assert_uint_eq(L, 500 + (want * 37) % 3000);
            bool intact = true;
            for (size_t i = 0; i < L; i++)
                intact &= p->for_testing->str[i] ==
                          (char)('a' + (want + i) % 26);
            ck_assert_msg(intact, "packet %u: str damaged", want);
            if (want == skip + 1)
                *flag_after_skip = p->previous_packet_dropped;
            want++;
            seen++;
        }
        perfetto__protos__trace_packet__free_unpacked(p, NULL);
        off += (long)len;
    }
    ck_assert_uint_eq(want, n);
    free(buf);
    return seen;
}

/* File mode writes packets of >= 512 bytes from the buffer itself
 * (writev): whole ones and ones reassembled from two chunks, more than one
 * writev's worth of pieces in one pass; an invalid one leaves nothing
 * behind and flags the next. */
START_TEST(test_file_mode_large_packets_in_place)
{
    svc_service *svc = svc_new();
    svc_producer *p = add_producer(svc, "one", 11);
    char path[] = "/tmp/svcfileXXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    unlink(path);
    int mine = dup(fd);
    cfg_t c;
    cfg_init(&c, 4096, 0);
    c.cfg.has_write_into_file = true;
    c.cfg.write_into_file = true;
    svc_session *s = svc_session_enable(svc, NULL, &c.cfg, fd, NULL, 0);
    ck_assert_ptr_nonnull(s);
    uint32_t target = s->buf_ids[0];
    static uint8_t pk[8192], fr[8192];
    const uint32_t n = 1300, bad = 17;
    uint32_t id = 0;
    for (uint32_t v = 0; v < n; v++) {
        size_t L = 500 + (v * 37) % 3000;
        size_t len = big_packet(pk, v, L, v == bad);
        if (v % 5 == 4) {
            /* in two chunks: begin fragment, then end fragment */
            size_t half = len / 2, k = svc_varint(fr, half);
            memcpy(fr + k, pk, half);
            write_raw_chunk(p, 0, 1, id, fr, k + half, 1, 2);
            commit(svc, p, 0, 0, target, 0);
            id++;
            k = svc_varint(fr, len - half);
            memcpy(fr + k, pk + half, len - half);
            write_raw_chunk(p, 0, 1, id, fr, k + len - half, 1, 1);
        } else {
            size_t k = svc_varint(fr, len);
            memcpy(fr + k, pk, len);
            write_raw_chunk(p, 0, 1, id, fr, k + len, 1, 0);
        }
        commit(svc, p, 0, 0, target, 0);
        id++;
        if (v == 600)           /* a pass in the middle too */
            ck_assert_int_eq(svc_session_write_file(svc, s), 0);
    }
    ck_assert_int_eq(svc_session_write_file(svc, s), 0);
    uint32_t flag = 0;
    ck_assert_int_eq(check_big_file(mine, n, bad, &flag), (int)n - 1);
    ck_assert_uint_ne(flag, 0);                      /* not silent */
    ck_assert_uint_eq(s->invalid_packets, 1);
    ck_assert_int_eq((long)s->bytes_written_to_file, file_size(mine));
    close(mine);
    svc_destroy(svc);
}
END_TEST

START_TEST(test_periodic_flush_by_period_and_file_mode)
{
    svc_service *svc = svc_new();
    add_producer(svc, "one", 11);
    cfg_t c;
    cfg_init(&c, 64, 0);
    c.cfg.has_flush_period_ms = true;
    c.cfg.flush_period_ms = 200;
    svc_session *s = svc_session_enable(svc, NULL, &c.cfg, -1, NULL, 0);
    ck_assert_ptr_nonnull(s);
    svc_tick(svc, svc_now_ms() + 250);
    ck_assert_int_eq(R.flush, 1);
    /* File mode, write_flush_mode unspecified: every 5 s whatever
     * flush_period_ms says. */
    cfg_t f;
    cfg_init(&f, 64, 0);
    f.cfg.has_write_into_file = true;
    f.cfg.write_into_file = true;
    f.cfg.has_flush_period_ms = true;
    f.cfg.flush_period_ms = 200;
    int fd = open("/dev/null", O_WRONLY);
    svc_session *fs = svc_session_enable(svc, NULL, &f.cfg, fd, NULL, 0);
    ck_assert_ptr_nonnull(fs);
    ck_assert_uint_eq(fs->flush_period_ms, 5000);
    svc_destroy(svc);
}
END_TEST

START_TEST(test_smb_sizes_clamped)
{
    svc_service *svc = svc_new();
    svc_producer_params pp = { .page_size_hint_bytes = 12288,
                               .smb_size_hint_bytes = 1 << 20 };
    svc_producer *p = svc_producer_connect(svc, NULL, 0, 1, &pp);
    size_t page, size;
    svc__smb_sizes(p, NULL, &page, &size);
    ck_assert_uint_eq(page, 4096);             /* 12 KiB not a power of 2 */
    ck_assert_uint_eq(size, 256 * 1024);
    p->page_hint_bytes = 16384;
    p->size_hint_bytes = 1u << 30;
    svc__smb_sizes(p, NULL, &page, &size);
    ck_assert_uint_eq(page, 16384);
    ck_assert_uint_eq(size, 32u << 20);
    svc_destroy(svc);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("svc_session");
    struct { const char *name; const TTest *t[8]; } groups[] = {
        {"config", {test_config_rejects_bad_buffers,
                    test_config_creates_buffers_with_global_ids,
                    test_smb_sizes_clamped}},
        {"matching", {test_match_all_producers_and_late_registration,
                      test_deferred_start_waits_for_start_tracing,
                      test_match_producer_name_filter,
                      test_register_ds_rejects_bad_descriptors}},
        {"read", {test_read_adds_trusted_fields_and_sequences,
                  test_read_in_bounded_batches,
                  test_read_drops_invalid_packets_and_flags_next}},
        {"untrusted", {test_commit_lies_are_counted_not_fatal}},
        {"stats", {test_stats_writer_histograms,
                   test_stats_histograms_can_be_disabled}},
        {"flush", {test_flush_acked_succeeds,
                   test_flush_timeout_scrapes_silent_producer,
                   test_disable_stops_and_notifies,
                   test_duration_disables_after_failed_final_flush}},
        {"faults", {test_producer_disconnect_scrapes_its_data,
                    test_clone_is_a_snapshot}},
        {"file", {test_file_mode_writes_trace_records_and_caps_size,
                  test_periodic_flush_by_period_and_file_mode,
                  test_file_mode_drops_invalid_packets_in_place,
                  test_file_mode_large_packets_in_place}},
    };
    for (size_t g = 0; g < sizeof(groups) / sizeof(groups[0]); g++) {
        TCase *tc = tcase_create(groups[g].name);
        for (size_t i = 0; i < 8 && groups[g].t[i]; i++)
            tcase_add_test(tc, groups[g].t[i]);
        suite_add_tcase(s, tc);
    }
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
