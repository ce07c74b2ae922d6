/*
 * check_svc_loss.c - the session's loss accounting (TraceStats.
 * shmtrace_sequence_loss, service/svc_loss.c) under loss reports
 * (CommitDataRequest.shmtrace_writer_loss) from several producers:
 *
 *   - room: a producer's first loss report is counted when it makes the
 *     session's loss table grow.
 * Sums and per-entry invariants (protos/common.proto) are checked by
 * list_sums() on every list.
 */
#include "svc_fixture.h"
#include "tck_main.h"

typedef Perfetto__Protos__TraceStats__ShmtraceSequenceLoss sloss_t;
typedef Perfetto__Protos__CommitDataRequest__ShmtraceWriterLoss wloss_t;

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
    size_t entries;
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
        t.entries++;
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

static Suite *svc_loss_suite(void)
{
    Suite *s = suite_create("svc_loss");
    TCK_CASE(s, "room", test_loss_first_report_of_a_producer_counted);
    return s;
}

TCK_MAIN(svc_loss_suite)
