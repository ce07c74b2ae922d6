/*
 * check_svc_loss.c - the per-sequence loss list (TraceStats.
 * shmtrace_sequence_loss, service/svc_loss.c) when there is much of it:
 * loss reports (CommitDataRequest.shmtrace_writer_loss) from several
 * producers, and thousands of writers.
 *
 *   - room: a producer's first loss report is counted when it makes the
 *     session's loss table grow; one producer naming 8,200 writers takes
 *     at most its share of the table (SVC_XLOSS_PER_PRODUCER), so another
 *     producer's report still gets its own entry; what a producer reports
 *     beyond its share, or once the session's table is full, is counted
 *     in its aggregate entry (writer_id 0), never dropped;
 *   - frame: with 3,000 writers (a 180 KB TraceStats before the fold) the
 *     TraceStats stays under SVC_STATS_MAX_BYTES, the writers that lost
 *     the most keep their own entries, the others are folded into
 *     aggregates whose counts add up exactly; with many producers the
 *     aggregates fold further, per buffer; writer_stats takes at most
 *     SVC_WSTATS_MAX_BYTES, and the writers that lost packets (reported
 *     by the producer or inside the buffer) keep their entries first;
 *   - trace: the trace's stats packet and a clone's carry the same bounded
 *     list, and the inspector's sequence and packet_loss tables still add
 *     up to every packet lost;
 *   - seq_cap: chunks a buffer refuses for a uid's bound of sequences
 *     show in its BufferStats and as their writer's loss.
 * Sums and per-entry invariants (protos/common.proto) are checked by
 * list_sums() on every list.
 */
#include <inttypes.h>
#include <sqlite3.h>

#include "svc_fixture.h"
#include "check_ins_util.h"
#include "tb_int.h"         /* tb__set_max_seqs_per_uid */
#include "ipc.h"
#include "tck_main.h"

typedef Perfetto__Protos__TraceStats__ShmtraceSequenceLoss sloss_t;
typedef Perfetto__Protos__CommitDataRequest__ShmtraceWriterLoss wloss_t;

/* A GetTraceStatsResponse (tag and length: 4 bytes) of a TraceStats of
 * SVC_STATS_MAX_BYTES fits one IPC frame. */
_Static_assert(SVC_STATS_MAX_BYTES + 4 <= IPC_MAX_PAYLOAD_BYTES,
               "GetTraceStats fits a frame");

/* ------------------------------------------------------------ helpers */

/* Loss reports (CommitDataRequest.shmtrace_writer_loss) of p for writers
 * first..first+n-1 into buffer buf: packets_of(w) packets and 10 bytes
 * per packet each. */
static void report_loss(svc_service *svc, svc_producer *p, uint32_t buf,
                        uint32_t first, uint32_t n,
                        uint64_t (*packets_of)(uint32_t writer))
{
    wloss_t *l = calloc(n, sizeof(*l));
    wloss_t **lp = calloc(n, sizeof(*lp));
    ck_assert(l && lp);
    for (uint32_t i = 0; i < n; i++) {
        perfetto__protos__commit_data_request__shmtrace_writer_loss__init(
            &l[i]);
        l[i].has_writer_id = l[i].has_target_buffer = true;
        l[i].has_packets = l[i].has_bytes = true;
        l[i].writer_id = first + i;
        l[i].target_buffer = buf;
        l[i].packets = packets_of(first + i);
        l[i].bytes = 10 * l[i].packets;
        lp[i] = &l[i];
    }
    Perfetto__Protos__CommitDataRequest req =
        PERFETTO__PROTOS__COMMIT_DATA_REQUEST__INIT;
    req.has_shmtrace_loss_reporting = req.shmtrace_loss_reporting = true;
    req.n_shmtrace_writer_loss = n;
    req.shmtrace_writer_loss = lp;
    ck_assert_int_eq(svc_producer_commit(svc, p, &req), 0);
    free(l);
    free(lp);
}

static uint64_t one_packet(uint32_t w)
{
    (void)w;
    return 1;
}

static uint64_t forty_two(uint32_t w)
{
    (void)w;
    return 42;
}

/* The losses of the 3,000-writer tests: every tenth writer lost as many
 * packets as its id, the others none. */
static uint64_t tenth_lose_their_id(uint32_t w)
{
    return w % 10 == 0 ? w : 0;
}

/* What writers 1..n lost in all (tenth_lose_their_id). */
static uint64_t tenth_lost(uint32_t n)
{
    uint64_t k = n / 10;
    return 10 * k * (k + 1) / 2;
}

#define MANY_WRITERS 3000u

static bool is_buffer_cause(const char *name)
{
    static const char *const names[] = {"overwrite", "discard",
        "abi_violation", "corrupted", "patch_failed", "reassembly"};
    for (size_t i = 0; i < sizeof(names) / sizeof(*names); i++)
        if (strcmp(name, names[i]) == 0)
            return true;
    return false;
}

/* Sums over a list (optionally of one producer only), its entries'
 * invariants checked on the way: lost_packets and lost_bytes are the sums
 * of the causes; with `running` (the session still runs, no producer
 * left), packets_offered = read + pending + the causes inside the buffer. */
typedef struct {
    uint64_t offered, read, pending, lost, lost_bytes, smb_full;
    size_t writers, aggregates, buffer_aggregates;
} list_sums_t;

static list_sums_t list_sums(const Perfetto__Protos__TraceStats *st,
                             int producer, bool running)
{
    list_sums_t t = {0};
    for (size_t i = 0; i < st->n_shmtrace_sequence_loss; i++) {
        const sloss_t *l = st->shmtrace_sequence_loss[i];
        if (producer >= 0 && l->producer_id != (uint32_t)producer)
            continue;
        uint64_t causes = 0, cause_bytes = 0, in_buffer = 0;
        for (size_t c = 0; c < l->n_causes; c++) {
            causes += l->causes[c]->packets;
            cause_bytes += l->causes[c]->bytes;
            if (is_buffer_cause(l->causes[c]->cause))
                in_buffer += l->causes[c]->packets;
            if (strcmp(l->causes[c]->cause, "producer_smb_full") == 0)
                t.smb_full += l->causes[c]->packets;
        }
        ck_assert_uint_eq(causes, l->lost_packets);
        ck_assert_uint_eq(cause_bytes, l->lost_bytes);
        if (running)
            ck_assert_uint_eq(l->packets_offered, l->packets_read +
                              l->packets_pending + in_buffer);
        ck_assert(l->has_sequence_id && l->sequence_id > 1);
        t.offered += l->packets_offered;
        t.read += l->packets_read;
        t.pending += l->packets_pending;
        t.lost += l->lost_packets;
        t.lost_bytes += l->lost_bytes;
        if (l->writer_id != 0)
            t.writers++;
        else if (l->producer_id != 0)
            t.aggregates++;
        else
            t.buffer_aggregates++;
    }
    return t;
}

/* The entry of (producer, writer), or NULL. */
static const sloss_t *entry_of(const Perfetto__Protos__TraceStats *st,
                               uint32_t producer, uint32_t writer)
{
    for (size_t i = 0; i < st->n_shmtrace_sequence_loss; i++)
        if (st->shmtrace_sequence_loss[i]->producer_id == producer &&
            st->shmtrace_sequence_loss[i]->writer_id == writer)
            return st->shmtrace_sequence_loss[i];
    return NULL;
}

/* packets of `cause` in entry l. */
static uint64_t cause_packets(const sloss_t *l, const char *cause)
{
    uint64_t n = 0;
    for (size_t c = 0; l && c < l->n_causes; c++)
        if (strcmp(l->causes[c]->cause, cause) == 0)
            n += l->causes[c]->packets;
    return n;
}

/* Writers 1..n of p each write one chunk of one packet (value = writer
 * id) into the session's buffer. */
static void writers_write(svf_fx *f, svc_producer *p, uint32_t n)
{
    for (uint32_t w = 1; w <= n; w++)
        svf_put(f, p, 0, (uint16_t)w, 0, w, 1);
}

/* A session of n writers: writers 1..n of producer 0 wrote a packet
 * each into a 1 MiB buffer and every tenth reported losing as many as its
 * id (chunk usage histograms, hence writer_stats, unless told not). */
static svc_session *many_writers(svf_fx *f, uint32_t n, bool histograms)
{
    static Perfetto__Protos__TraceConfig__BuiltinDataSource builtin =
        PERFETTO__PROTOS__TRACE_CONFIG__BUILTIN_DATA_SOURCE__INIT;
    builtin.has_disable_chunk_usage_histograms = true;
    builtin.disable_chunk_usage_histograms = true;
    if (!histograms)
        f->c.cfg.builtin_data_sources = &builtin;
    f->c.buf[0].size_kb = 1024;
    svc_session *s = svf_enable(f);
    writers_write(f, f->p[0], n);
    report_loss(f->svc, f->p[0], f->buf, 1, n, tenth_lose_their_id);
    return s;
}

/* The checks of a list of an n-writer session (many_writers): under the
 * bound, sums exact (read: how many of the packets were read), and, if
 * folded, one aggregate with a sequence id of its own and no folded writer
 * that lost more than a listed one. */
static void check_many_writers_list(const Perfetto__Protos__TraceStats *st,
                                    uint16_t pid, uint32_t n, uint64_t read,
                                    bool running, bool folded)
{
    ck_assert_uint_le(perfetto__protos__trace_stats__get_packed_size(st),
                      SVC_STATS_MAX_BYTES);
    list_sums_t t = list_sums(st, -1, running);
    ck_assert_uint_eq(t.offered, n);
    ck_assert_uint_eq(t.read, read);
    ck_assert_uint_eq(t.read + t.pending, running ? n : read);
    ck_assert_uint_eq(t.lost, tenth_lost(n));
    ck_assert_uint_eq(t.smb_full, tenth_lost(n));
    ck_assert_uint_eq(t.lost_bytes, 10 * tenth_lost(n));
    ck_assert_uint_eq(t.buffer_aggregates, 0);
    if (!folded) {
        ck_assert_uint_eq(t.writers, n);
        ck_assert_uint_eq(t.aggregates, 0);
        return;
    }
    ck_assert_uint_gt(t.writers, 100);
    ck_assert_uint_lt(t.writers, n);
    ck_assert_uint_eq(t.aggregates, 1);
    bool *listed = calloc(n + 1, sizeof(*listed));
    ck_assert_ptr_nonnull(listed);
    uint64_t min_listed = UINT64_MAX, max_folded = 0;
    const sloss_t *agg = entry_of(st, pid, 0);
    ck_assert_ptr_nonnull(agg);
    /* One producer's aggregate says its process: the fixture's first
     * producer has pid 11 (svf_fixture). Writers' entries do not. */
    ck_assert(agg->has_pid);
    ck_assert_int_eq(agg->pid, 11);
    for (size_t i = 0; i < st->n_shmtrace_sequence_loss; i++) {
        const sloss_t *l = st->shmtrace_sequence_loss[i];
        ck_assert(l->writer_id == 0 || !l->has_pid);
        if (l->writer_id == 0)
            continue;
        ck_assert_uint_eq(l->producer_id, pid);
        ck_assert_uint_le(l->writer_id, n);
        listed[l->writer_id] = true;
        ck_assert_uint_eq(l->lost_packets, tenth_lose_their_id(l->writer_id));
        if (l->lost_packets < min_listed)
            min_listed = l->lost_packets;
        ck_assert_uint_ne(l->sequence_id, agg->sequence_id);
    }
    for (uint32_t w = 1; w <= n; w++)
        if (!listed[w] && tenth_lose_their_id(w) > max_folded)
            max_folded = tenth_lose_their_id(w);
    free(listed);
    ck_assert_uint_le(max_folded, min_listed);
    for (size_t i = 0; i < st->n_writer_stats; i++)
        ck_assert_uint_ne(st->writer_stats[i]->sequence_id,
                          agg->sequence_id);
}

/* svc_stats_build of s, which must succeed and stay under
 * SVC_STATS_MAX_BYTES (a GetTraceStats reply fits one IPC frame). */
static Perfetto__Protos__TraceStats *bounded_stats(svf_fx *f, svc_session *s)
{
    Perfetto__Protos__TraceStats *st = svc_stats_build(f->svc, s);
    ck_assert_ptr_nonnull(st);
    ck_assert_uint_le(perfetto__protos__trace_stats__get_packed_size(st),
                      SVC_STATS_MAX_BYTES);
    return st;
}

/* Writers first, first + 10, ... up to last of producer pid (buffer 0)
 * each have exactly one writer_stats entry. */
static void check_writers_listed(svc_session *s,
                                 const Perfetto__Protos__TraceStats *st,
                                 uint16_t pid, uint32_t first, uint32_t last)
{
    for (uint32_t w = first; w <= last; w += 10) {
        uint32_t seq = svc__seq_id(&s->seqs, pid, (uint16_t)w, 0);
        size_t found = 0;
        for (size_t i = 0; i < st->n_writer_stats; i++)
            found += st->writer_stats[i]->sequence_id == seq;
        ck_assert_msg(found == 1, "writer %u listed %zu times", w, found);
    }
}

/* writer_stats of an n-writer session of producer pid whose every tenth
 * writer lost packets (many_writers, or tenth_lose_their_id otherwise):
 * bounded by SVC_WSTATS_MAX_BYTES, every writer either listed once or
 * counted as left out, and every writer that lost packets listed (its
 * sequence's losses are attributed to its buffer only through its
 * entry). */
static void check_writer_stats(svc_session *s,
                               const Perfetto__Protos__TraceStats *st,
                               uint16_t pid, uint32_t n)
{
    size_t bytes = 0;
    for (size_t i = 0; i < st->n_writer_stats; i++)
        bytes += protobuf_c_message_get_packed_size(
                     &st->writer_stats[i]->base) + 3;
    ck_assert_uint_le(bytes, SVC_WSTATS_MAX_BYTES);
    ck_assert(st->has_shmtrace_writer_stats_left_out);
    ck_assert_uint_gt(st->shmtrace_writer_stats_left_out, 0);
    ck_assert_uint_eq(st->n_writer_stats + st->shmtrace_writer_stats_left_out,
                      n);
    check_writers_listed(s, st, pid, 10, n);
}

/* ------------------------------------------------------------ room */

/* A producer's first report that makes the table grow is counted: the
 * entry of its writer was made before its producer's, whose making could
 * move the table and leave the count written to freed memory (another
 * producer's 14 writers and its own entry make 15; this one's writer is
 * the 16th, its producer's entry the 17th, which doubles the table). */
SVF_TEST(test_loss_first_report_of_a_producer_counted, 2)
{
    svc_session *s = svf_enable(f);
    report_loss(f->svc, f->p[0], f->buf, 1, 14, one_packet);
    report_loss(f->svc, f->p[1], f->buf, 1, 1, forty_two);
    Perfetto__Protos__TraceStats *st = svc_stats_build(f->svc, s);
    ck_assert_ptr_nonnull(st);
    const sloss_t *l = entry_of(st, svc_producer_id(f->p[1]), 1);
    ck_assert_ptr_nonnull(l);
    ck_assert_uint_eq(l->lost_packets, 42);
    ck_assert_uint_eq(list_sums(st, -1, true).lost, 14 + 42);
    svc_stats_free(st);
}

/* One CommitData naming 8,200 writers does not crowd out another
 * producer's report of 42 packets (the review's reproduction): each
 * producer has its share; the rest of the 8,200 is counted in the
 * producer's aggregate, again when reported again. */
SVF_TEST(test_loss_reports_leave_room_for_other_producers, 2)
{
    svc_session *s = svf_enable(f);
    svc_producer *evil = f->p[0], *honest = f->p[1];
    report_loss(f->svc, evil, f->buf, 1, 8200, one_packet);
    report_loss(f->svc, honest, f->buf, 1, 1, forty_two);
    report_loss(f->svc, evil, f->buf, 1, 8200, one_packet);
    Perfetto__Protos__TraceStats *st = svc_stats_build(f->svc, s);
    ck_assert_ptr_nonnull(st);
    const sloss_t *h = entry_of(st, svc_producer_id(honest), 1);
    ck_assert_ptr_nonnull(h);
    ck_assert_uint_eq(cause_packets(h, "producer_smb_full"), 42);
    ck_assert_uint_eq(h->lost_bytes, 420);
    ck_assert(h->producer_counts_known);
    list_sums_t e = list_sums(st, svc_producer_id(evil), true);
    ck_assert_uint_eq(e.lost, 2 * 8200);
    ck_assert_uint_eq(e.smb_full, 2 * 8200);
    ck_assert_uint_eq(e.lost_bytes, 2 * 82000);
    ck_assert_uint_eq(e.aggregates, 1);
    ck_assert_uint_lt(e.writers, 8200);
    const sloss_t *agg = entry_of(st, svc_producer_id(evil), 0);
    ck_assert(agg->producer_counts_known);
    ck_assert_uint_eq(agg->lost_packets, 2 * (8200 - e.writers));
    svc_stats_free(st);
}

/* Once the session's table is full (many producers, each naming more
 * writers than its share), a report still counts, in its producer's
 * aggregate, for the buffer it names. */
SVF_TEST(test_loss_reports_counted_when_the_table_is_full, 1)
{
    svc_session *s = svf_enable(f);
    enum { NP = SVC_XLOSS_MAX / SVC_XLOSS_PER_PRODUCER + 1,
           NW = SVC_XLOSS_PER_PRODUCER + 100 };
    svc_producer *p[NP];
    char name[NP][16];
    for (int i = 0; i < NP; i++) {
        snprintf(name[i], sizeof(name[i]), "many%d", i);
        p[i] = svf_add_producer(f->svc, name[i], 100 + i);
        report_loss(f->svc, p[i], f->buf, 1, NW, one_packet);
    }
    report_loss(f->svc, f->p[0], f->buf, 7, 1, forty_two);
    Perfetto__Protos__TraceStats *st = svc_stats_build(f->svc, s);
    ck_assert_ptr_nonnull(st);
    list_sums_t all = list_sums(st, -1, true);
    ck_assert_uint_eq(all.lost, NP * NW + 42);
    ck_assert_uint_eq(all.lost_bytes, 10 * (NP * NW + 42));
    for (int i = 0; i < NP; i++)
        ck_assert_uint_eq(list_sums(st, svc_producer_id(p[i]), true).lost,
                          NW);
    list_sums_t late = list_sums(st, svc_producer_id(f->p[0]), true);
    ck_assert_uint_eq(late.lost, 42);
    ck_assert_uint_eq(late.writers, 0);
    const sloss_t *l = entry_of(st, svc_producer_id(f->p[0]), 0);
    ck_assert_ptr_nonnull(l);
    ck_assert_uint_eq(l->lost_packets, 42);
    ck_assert_uint_eq(l->buffer, 0);
    svc_stats_free(st);
}

/* ------------------------------------------------------------ frame */

/* n more producers ("lossy0".., pids 100..), each reporting that its
 * writer 1 lost 42 packets into the session's buffer. */
static void lossy_producers(svf_fx *f, int n)
{
    for (int i = 0; i < n; i++) {
        char name[16];
        snprintf(name, sizeof(name), "lossy%d", i);
        svc_producer *p = svf_add_producer(f->svc, name, 100 + i);
        report_loss(f->svc, p, f->buf, 1, 1, forty_two);
    }
}

/* 3,000 writers: the list is folded to keep the TraceStats under the
 * bound (it was 180 KB, more than an IPC frame); the largest losers keep
 * their own entries, the aggregate adds up. */
SVF_TEST(test_loss_list_of_many_writers_fits, 1)
{
    svc_session *s = many_writers(f, MANY_WRITERS, true);
    Perfetto__Protos__TraceStats *st = svc_stats_build(f->svc, s);
    ck_assert_ptr_nonnull(st);
    check_writer_stats(s, st, svc_producer_id(f->p[0]), MANY_WRITERS);
    check_many_writers_list(st, svc_producer_id(f->p[0]), MANY_WRITERS, 0,
                            true, true);
    /* Built again: the same aggregate, with the same sequence id. */
    Perfetto__Protos__TraceStats *again = svc_stats_build(f->svc, s);
    ck_assert_uint_eq(again->n_shmtrace_sequence_loss,
                      st->n_shmtrace_sequence_loss);
    ck_assert_uint_eq(entry_of(again, svc_producer_id(f->p[0]), 0)
                          ->sequence_id,
                      entry_of(st, svc_producer_id(f->p[0]), 0)
                          ->sequence_id);
    svc_stats_free(again);
    svc_stats_free(st);
}

/* The aggregate keeps its producer's pid once the producer has gone (its
 * writers' packets are still in the buffer, with that trusted_pid). */
SVF_TEST(test_loss_aggregate_pid_outlives_its_producer, 1)
{
    svc_session *s = many_writers(f, MANY_WRITERS, true);
    uint16_t prod = svc_producer_id(f->p[0]);
    svc_producer_disconnect(f->svc, f->p[0]);
    f->p[0] = NULL;
    Perfetto__Protos__TraceStats *st = svc_stats_build(f->svc, s);
    ck_assert_ptr_nonnull(st);
    const sloss_t *agg = entry_of(st, prod, 0);
    ck_assert_ptr_nonnull(agg);
    ck_assert(agg->has_pid);
    ck_assert_int_eq(agg->pid, 11);
    svc_stats_free(st);
}

/* A few writers: every one listed, no aggregate (nothing folded). */
SVF_TEST(test_loss_list_of_few_writers_unfolded, 1)
{
    svc_session *s = svf_enable(f);
    writers_write(f, f->p[0], 20);
    report_loss(f->svc, f->p[0], f->buf, 1, 20, tenth_lose_their_id);
    Perfetto__Protos__TraceStats *st = svc_stats_build(f->svc, s);
    list_sums_t t = list_sums(st, -1, true);
    ck_assert_uint_eq(t.writers, 20);
    ck_assert_uint_eq(t.aggregates + t.buffer_aggregates, 0);
    ck_assert_uint_eq(t.lost, 30);
    svc_stats_free(st);
}

/* So many producers that even one aggregate per producer does not fit
 * in the room writer_stats (3,300 writers, SVC_WSTATS_MAX_BYTES of them)
 * leaves: one aggregate per buffer (producer_id 0), still exact. */
SVF_TEST(test_loss_list_folds_per_buffer_with_many_producers, 1)
{
    f->c.buf[0].size_kb = 1024;
    svc_session *s = svf_enable(f);
    writers_write(f, f->p[0], 3300);
    enum { NP = 2000 };
    lossy_producers(f, NP);
    Perfetto__Protos__TraceStats *st = bounded_stats(f, s);
    list_sums_t t = list_sums(st, -1, true);
    ck_assert_uint_eq(t.buffer_aggregates, 1);
    ck_assert_uint_eq(t.aggregates, 0);
    ck_assert_uint_eq(t.offered, 3300);
    ck_assert_uint_eq(t.lost, NP * 42);
    ck_assert_uint_eq(t.smb_full, NP * 42);
    const sloss_t *b = entry_of(st, 0, 0);
    ck_assert_uint_eq(b->buffer, 0);
    ck_assert(!b->has_pid);       /* all producers': no one process */
    svc_stats_free(st);
}

/* writer_stats past its share (SVC_WSTATS_MAX_BYTES): 6,000 writers of
 * two chunks each, of which every tenth reported a loss (outside the
 * buffer) and every tenth from the fifth wrote a second chunk whose
 * packet claims more bytes than the chunk has (an ABI violation: a loss
 * inside the buffer). Every one of these 1,200 losers keeps its
 * writer_stats entry, although the others committed as many chunks or
 * more; the loss list still counts the losses. */
SVF_TEST(test_writer_stats_keep_losers_first, 1)
{
    enum { N = 6000 };
    svc_session *s = many_writers(f, N, true);
    size_t size, psz;
    uint8_t *smb = svc_producer_smb(f->p[0], &size, &psz);
    ck_assert_ptr_nonnull(smb);
    for (uint32_t w = 1; w <= N; w++) {
        svf_write_chunk(f->p[0], 0, (uint16_t)w, 1, w, 1, 3);
        if (w % 10 == 5) {
            smb[16] = 0xFF;       /* the packet's length: 16383 bytes */
            smb[17] = 0x7F;
        }
        svf_commit(f->svc, f->p[0], 0, 0, f->buf, 0);
    }
    Perfetto__Protos__TraceStats *st = bounded_stats(f, s);
    uint16_t pid = svc_producer_id(f->p[0]);
    check_writer_stats(s, st, pid, N);
    check_writers_listed(s, st, pid, 5, N);
    uint64_t abi = 0;
    for (size_t i = 0; i < st->n_shmtrace_sequence_loss; i++)
        abi += cause_packets(st->shmtrace_sequence_loss[i], "abi_violation");
    ck_assert_uint_eq(abi, N / 10);
    list_sums_t t = list_sums(st, -1, true);
    ck_assert_uint_eq(t.lost, tenth_lost(N) + N / 10);
    svc_stats_free(st);
}

/* More writers than libbuf keeps per buffer (TB_LOSS_MAX_WRITERS): those
 * past its table share its overflow entry (producer 0, writer 0), which
 * the list puts in the buffer's producer-0 aggregate, never as an entry
 * of its own beside that aggregate (with 2,000 more producers the list
 * folds per buffer: one producer-0 entry, not two); every packet offered,
 * read and lost is still counted once. */
SVF_TEST(test_loss_list_takes_libbuf_overflow, 1)
{
    enum { N = TB_LOSS_MAX_WRITERS + 500, NP = 2000 };
    svc_session *s = many_writers(f, N, false);
    lossy_producers(f, NP);
    Perfetto__Protos__TraceStats *st = bounded_stats(f, s);
    list_sums_t t = list_sums(st, -1, true);
    ck_assert_uint_eq(t.offered, N);
    ck_assert_uint_eq(t.read + t.pending, N);
    ck_assert_uint_eq(t.lost, tenth_lost(N) + NP * 42);
    ck_assert_uint_eq(t.buffer_aggregates, 1);
    const sloss_t *b = entry_of(st, 0, 0);
    ck_assert_ptr_nonnull(b);
    ck_assert_uint_ge(b->packets_offered, N - (TB_LOSS_MAX_WRITERS - 1));
    size_t producer0 = 0;
    for (size_t i = 0; i < st->n_shmtrace_sequence_loss; i++)
        producer0 += st->shmtrace_sequence_loss[i]->producer_id == 0;
    ck_assert_uint_eq(producer0, 1);
    svc_stats_free(st);
}

/* ------------------------------------------------------------ trace */

/* svc_session_read callback keeping the last TraceStats packet (packed)
 * and, into a FILE if given, every packet as a Trace.packet record. */
typedef struct {
    uint8_t *stats;
    size_t stats_len;
    FILE *out;
} keep_stats_t;

static int keep_stats(void *ctx, const uint8_t *data, size_t size)
{
    keep_stats_t *k = ctx;
    if (k->out) {
        uint8_t hdr[11];
        hdr[0] = 0x0A;
        size_t n = 1 + ck_put_varint(hdr + 1, size);
        SVF_CHECK(fwrite(hdr, 1, n, k->out) == n);
        SVF_CHECK(fwrite(data, 1, size, k->out) == size);
    }
    Perfetto__Protos__TracePacket *p =
        perfetto__protos__trace_packet__unpack(NULL, size, data);
    SVF_CHECK(p != NULL);
    if (p->trace_stats) {
        free(k->stats);
        k->stats_len =
            perfetto__protos__trace_stats__get_packed_size(p->trace_stats);
        k->stats = malloc(k->stats_len);
        perfetto__protos__trace_stats__pack(p->trace_stats, k->stats);
    }
    perfetto__protos__trace_packet__free_unpacked(p, NULL);
    return 0;
}

/* The whole of session s read; its last TraceStats (caller frees with
 * perfetto__protos__trace_stats__free_unpacked). */
static Perfetto__Protos__TraceStats *read_stats(svf_fx *f, svc_session *s,
                                                FILE *out)
{
    keep_stats_t k = { .out = out };
    bool more = false;
    ck_assert_int_eq(svc_session_read(f->svc, s, 0, keep_stats, &k, &more),
                     0);
    ck_assert(!more);
    ck_assert_ptr_nonnull(k.stats);
    Perfetto__Protos__TraceStats *st =
        perfetto__protos__trace_stats__unpack(NULL, k.stats_len, k.stats);
    free(k.stats);
    ck_assert_ptr_nonnull(st);
    return st;
}

/* The trace's stats packet and a clone's carry the same bounded list as
 * GetTraceStats: 5,000 writers without histograms (a clone has none)
 * need the fold in both. */
SVF_TEST(test_loss_list_bounded_in_trace_and_clone, 1)
{
    enum { N = 5000 };
    svc_session *s = many_writers(f, N, false);
    uint16_t pid = svc_producer_id(f->p[0]);
    char err[128];
    svc_session *cl = svc_session_clone(f->svc, NULL, svc_session_id(s),
                                        NULL, err, sizeof(err));
    ck_assert_ptr_nonnull(cl);
    Perfetto__Protos__TraceStats *st = read_stats(f, s, NULL);
    check_many_writers_list(st, pid, N, N, true, true);
    /* The same list as the stats built now (nothing changed since). */
    Perfetto__Protos__TraceStats *now = svc_stats_build(f->svc, s);
    ck_assert_uint_eq(now->n_shmtrace_sequence_loss,
                      st->n_shmtrace_sequence_loss);
    for (size_t i = 0; i < st->n_shmtrace_sequence_loss; i++) {
        ck_assert_uint_eq(now->shmtrace_sequence_loss[i]->sequence_id,
                          st->shmtrace_sequence_loss[i]->sequence_id);
        ck_assert_uint_eq(now->shmtrace_sequence_loss[i]->lost_packets,
                          st->shmtrace_sequence_loss[i]->lost_packets);
    }
    svc_stats_free(now);
    perfetto__protos__trace_stats__free_unpacked(st, NULL);
    /* The clone: a frozen snapshot, read whole. */
    st = read_stats(f, cl, NULL);
    check_many_writers_list(st, pid, N, N, false, true);
    perfetto__protos__trace_stats__free_unpacked(st, NULL);
}

/* The inspector reads a folded list and its tables still add up: every
 * packet lost is in sequence.lost_packets and in packet_loss, the
 * aggregate as a sequence of its own with no packet. */
SVF_TEST(test_loss_list_folded_adds_up_in_the_inspector, 1)
{
    svc_session *s = many_writers(f, MANY_WRITERS, true);
    char *dir = ck_tmpdir();
    char *trace = ck_path(dir, "t.pftrace"), *dbp = ck_path(dir, "t.db");
    FILE *out = ck_fopen(trace, "wb");
    Perfetto__Protos__TraceStats *st = read_stats(f, s, out);
    ck_assert_int_eq(fclose(out), 0);
    check_many_writers_list(st, svc_producer_id(f->p[0]), MANY_WRITERS,
                            MANY_WRITERS, true, true);
    const sloss_t *agg = entry_of(st, svc_producer_id(f->p[0]), 0);
    ck_assert_int_eq(ck_inspect(trace, dbp, NULL), INS_EXIT_OK);
    sqlite3 *db = ck_db_open(dbp);
    ck_assert_int_eq(ck_q_int(db, -1, NULL, "SELECT sum(lost_packets) FROM "
                              "sequence WHERE seq_id > 1"),
                     (int64_t)tenth_lost(MANY_WRITERS));
    ck_assert_int_eq(ck_q_int(db, -1, NULL, "SELECT sum(packets) FROM "
                              "packet_loss"),
                     (int64_t)tenth_lost(MANY_WRITERS));
    ck_assert_int_eq(ck_q_int(db, -1, NULL, "SELECT sum(packets) FROM "
                              "sequence WHERE seq_id > 1"), MANY_WRITERS);
    ck_assert_int_eq(ck_q_int(db, -1, NULL, "SELECT packets FROM sequence "
                              "WHERE seq_id = %u", agg->sequence_id), 0);
    ck_assert_int_eq(ck_q_int(db, -1, NULL, "SELECT lost_packets FROM "
                              "sequence WHERE seq_id = %u",
                              agg->sequence_id),
                     (int64_t)agg->lost_packets);
    sqlite3_close(db);
    perfetto__protos__trace_stats__free_unpacked(st, NULL);
    free(trace);
    free(dbp);
    ck_rmdir(dir);
}

/* ------------------------------------------------------------ seq_cap */

/* The chunks a buffer refuses for a uid's bound of sequences (libbuf
 * TB_MAX_SEQS_PER_UID, lowered to 2 here) reach the TraceStats: in the
 * buffer's chunks_discarded and shmtrace_seq_cap_chunks / _packets (absent
 * while there are none), and as the writer's "discard" loss; the uid's
 * existing sequences still take chunks. */
SVF_TEST(test_loss_seq_cap_reported, 1)
{
    svc_session *s = svf_enable(f);
    tb_buffer *b = svc__buffer(f->svc, f->buf, NULL);
    ck_assert_ptr_nonnull(b);
    tb__set_max_seqs_per_uid(b, 2);
    writers_write(f, f->p[0], 2);
    Perfetto__Protos__TraceStats *st = bounded_stats(f, s);
    ck_assert_uint_eq(st->n_buffer_stats, 1);
    ck_assert(!st->buffer_stats[0]->has_shmtrace_seq_cap_chunks);
    ck_assert(!st->buffer_stats[0]->has_shmtrace_seq_cap_packets);
    ck_assert_uint_eq(st->buffer_stats[0]->chunks_discarded, 0);
    svc_stats_free(st);

    svf_put(f, f->p[0], 0, 3, 0, 100, 4);   /* a third writer: refused */
    svf_put(f, f->p[0], 0, 1, 1, 200, 1);   /* an existing one: taken */
    st = bounded_stats(f, s);
    const Perfetto__Protos__TraceStats__BufferStats *bs = st->buffer_stats[0];
    ck_assert(bs->has_shmtrace_seq_cap_chunks);
    ck_assert_uint_eq(bs->shmtrace_seq_cap_chunks, 1);
    ck_assert(bs->has_shmtrace_seq_cap_packets);
    ck_assert_uint_eq(bs->shmtrace_seq_cap_packets, 4);
    ck_assert_uint_eq(bs->chunks_discarded, 1);
    ck_assert_uint_eq(bs->chunks_written, 3);
    uint16_t pid = svc_producer_id(f->p[0]);
    const sloss_t *l = entry_of(st, pid, 3);
    ck_assert_ptr_nonnull(l);
    ck_assert_uint_eq(l->packets_offered, 4);
    ck_assert_uint_eq(cause_packets(l, "discard"), 4);
    ck_assert_uint_eq(entry_of(st, pid, 1)->packets_offered, 2);
    list_sums_t t = list_sums(st, -1, true);
    ck_assert_uint_eq(t.offered, 7);
    ck_assert_uint_eq(t.lost, 4);
    svc_stats_free(st);
}

static Suite *svc_loss_suite(void)
{
    Suite *s = suite_create("svc_loss");
    TCK_CASE(s, "room", test_loss_first_report_of_a_producer_counted,
             test_loss_reports_leave_room_for_other_producers,
             test_loss_reports_counted_when_the_table_is_full);
    TCase *tc = TCK_CASE(s, "frame", test_loss_list_of_many_writers_fits,
                         test_loss_list_of_few_writers_unfolded,
                         test_loss_aggregate_pid_outlives_its_producer,
                         test_loss_list_folds_per_buffer_with_many_producers,
                         test_writer_stats_keep_losers_first,
                         test_loss_list_takes_libbuf_overflow);
    tcase_set_timeout(tc, 60);
    tc = TCK_CASE(s, "trace", test_loss_list_bounded_in_trace_and_clone,
                  test_loss_list_folded_adds_up_in_the_inspector);
    tcase_set_timeout(tc, 60);
    TCK_CASE(s, "seq_cap", test_loss_seq_cap_reported);
    return s;
}

TCK_MAIN(svc_loss_suite)
