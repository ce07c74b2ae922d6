/*
 * svc_tracecheck.c - checks a trace file written by shmtraced / shmtrace.
 *
 * Reads a Perfetto trace (a stream of Trace.packet records: 0x0A, varint
 * length, TracePacket) and, for every producer sequence
 * (trusted_packet_sequence_id != 1), follows the for_testing.seq_value of
 * shmtrace-producer's packets: each must be the previous + 1, or come with
 * previous_packet_dropped != 0 (a flagged gap). A gap without the flag is
 * a silent loss; a value that does not increase is a duplicate. Both fail.
 * The payload of shmtrace-producer's packets must be its pattern
 * (payload.str byte k = 'a' + (seq_value + k) % 26): payload_damaged
 * counts those that are not, and fails. The last trace_stats packet is
 * summarised too.
 *
 * Loss accounting: lost_in_gaps counts the packets missing between two
 * read ones; lost_leading those before a sequence's first read packet
 * (flagged or not on that packet: leading_flagged / leading_silent; a ring
 * buffer that wrapped loses beginnings too, so neither fails the check);
 * with --per-sequence N, lost_trailing those after its last (N - 1 - last).
 * No later data packet can flag those; the writer instead writes a loss
 * marker at flush/stop when it can: a packet on the sequence with
 * previous_packet_dropped and no for_testing.seq_value. Markers are
 * counted (loss_markers), not taken as data packets; a sequence whose
 * trailing loss is followed by a marker counts in trailing_flagged, one
 * without in trailing_silent (only a failure with --require-trailing-flag:
 * the marker is best effort). A marker also flags the gap (or the
 * beginning) before the next data packet of its sequence: a flush during a
 * drop episode writes one mid-sequence. A sequence with markers only (all
 * its packets lost) counts in orphan_markers and has all N as trailing.
 *
 * Exact loss accounting (--conservation): the last trace_stats packet's
 * shmtrace_sequence_loss entries (protos/common.proto) must account for
 * every missing seq_value of each sequence: lost_packets = leading +
 * inner gaps (+ trailing with --per-sequence, exactly; without it,
 * lost_packets >= the gaps and the rest is reported as lost_after_last),
 * and the causes must add up to lost_packets. A sequence whose packets
 * were all lost must have an entry with lost_packets = N. Every entry,
 * aggregates included, must keep the list's invariant: packets_offered =
 * packets_read + packets_pending + lost_packets - the causes outside the
 * buffer (producer_smb_full, invalid, file_full); and a sequence with an
 * entry of its own must have packets_read - invalid - file_full packets
 * in the trace (read_conservation).
 *
 * Folded lists (thousands of writers: service/svc_loss.c keeps entries
 * for the writers that lost most and sums the others into aggregates,
 * writer_id 0, one per producer and buffer or one per buffer): a sequence
 * without an entry of its own is folded, and is accounted through its
 * aggregate. It is tied to the one aggregate that can hold it: the same
 * buffer (TraceStats.writer_stats) and either a per-buffer aggregate or
 * one of the sequence's process: the aggregate's pid when the list gives
 * it, else one whose producer has no listed writer in another process
 * (trusted_pid of the listed writers' packets). Per aggregate, over its folded
 * sequences: packets in the trace = packets_read - invalid - file_full,
 * and lost_packets = their missing seq_values (as for one sequence) plus,
 * with --per-sequence N, N for each of its writers that left no packet in
 * the trace (lost_packets - missing must be a multiple of N: unseen
 * writers). When some folded sequence could belong to several aggregates,
 * the folded sequences and the aggregates are checked as one group
 * instead (folded_untied). Reported: loss_aggregates, folded_sequences,
 * folded_untied, folded_unseen_writers.
 *
 * Output: one "key=value" per line (scripts grep them), then a verdict.
 * Exit: 0 ok, 1 check failed, 2 usage or unreadable/undecodable file.
 */
#include <errno.h>
#include <getopt.h>
#include <stdint.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trace.pb-c.h"

typedef struct {
    uint32_t seq_id;
    uint64_t count;
    int64_t last;            /* -1 before the first */
    uint64_t first;
    bool first_flagged;
    bool marker_after_last;  /* a loss marker after the last data packet */
    uint64_t markers;
    uint64_t gaps_flagged, gaps_silent, lost, dups, flagged_packets;
} seqstat;

/* Every packet of a producer sequence (data, markers and any other), with
 * the process that wrote it: what the loss list's packets_read counts. */
typedef struct {
    uint32_t seq_id;
    int32_t pid;
    bool has_pid;
    uint64_t packets;
} seqpk;

/* The sequence's counter, created on first sight (NULL: out of memory).
 * The one found last time (*last) is tried first: packets come in runs. */
static seqpk *pk_get(seqpk **v, size_t *n, size_t *cap, size_t *last,
                     uint32_t seq_id)
{
    if (*last < *n && (*v)[*last].seq_id == seq_id)
        return &(*v)[*last];
    for (size_t i = 0; i < *n; i++)
        if ((*v)[i].seq_id == seq_id)
            return &(*v)[*last = i];
    if (*n == *cap) {
        size_t c = *cap ? *cap * 2 : 64;
        seqpk *nv = realloc(*v, c * sizeof(*nv));
        if (!nv)
            return NULL;
        *v = nv;
        *cap = c;
    }
    memset(&(*v)[*n], 0, sizeof(**v));
    (*v)[*n].seq_id = seq_id;
    return &(*v)[*last = (*n)++];
}

static void usage(FILE *f)
{
    fprintf(f,
"usage: svc_tracecheck [options] TRACE\n"
"Checks seq_value continuity per sequence and previous_packet_dropped.\n"
"  --expect-total N        exactly N test packets must be read\n"
"  --expect-sequences N    exactly N producer sequences\n"
"  --complete N            every sequence holds exactly seq_values 0..N-1\n"
"  --min-total N           at least N test packets\n"
"  --per-sequence N        each sequence was written with N packets (for\n"
"                          lost_trailing)\n"
"  --require-loss          some loss must be visible (flag or stats)\n"
"  --require-stats         a trace_stats packet must be present\n"
"  --conservation          the stats' per-sequence loss counts must match\n"
"                          the seq_value gaps exactly (see the source)\n"
"  --require-trailing-flag with --per-sequence: every trailing loss must be\n"
"                          followed by a loss marker\n"
"  --verbose               one line per sequence\n"
"  -h, --help              this help\n"
"Exit: 0 ok, 1 check failed, 2 usage/unreadable file.\n");
}

/* The sequence's entry, created on first sight (NULL: out of memory). */
static seqstat *seq_get(seqstat **seqs, size_t *n, uint32_t seq_id)
{
    for (size_t i = 0; i < *n; i++)
        if ((*seqs)[i].seq_id == seq_id)
            return &(*seqs)[i];
    seqstat *v = realloc(*seqs, (*n + 1) * sizeof(*v));
    if (!v)
        return NULL;
    *seqs = v;
    seqstat *s = &v[(*n)++];
    memset(s, 0, sizeof(*s));
    s->seq_id = seq_id;
    s->last = -1;
    return s;
}

static int read_varint(FILE *f, uint64_t *out)
{
    uint64_t v = 0;
    for (int i = 0; i < 10; i++) {
        int c = fgetc(f);
        if (c == EOF)
            return i == 0 ? 0 : -1;
        v |= (uint64_t)(c & 0x7f) << (7 * i);
        if (!(c & 0x80)) {
            *out = v;
            return 1;
        }
    }
    return -1;
}

typedef Perfetto__Protos__TraceStats__ShmtraceSequenceLoss sloss;

#define CFAIL(...) do { bad++; \
        fprintf(stderr, "svc_tracecheck: FAIL: " __VA_ARGS__); \
        fputc('\n', stderr); } while (0)

/* Packets of an entry's causes named NAMES (NULL-terminated). */
static uint64_t cause_packets(const sloss *l, const char *const *names)
{
    uint64_t n = 0;
    for (size_t c = 0; c < l->n_causes; c++)
        for (size_t k = 0; names[k]; k++)
            if (l->causes[c]->cause &&
                strcmp(l->causes[c]->cause, names[k]) == 0)
                n += l->causes[c]->packets;
    return n;
}

static const char *const OUTSIDE[] = {"producer_smb_full", "invalid",
                                      "file_full", NULL};
static const char *const READ_NOT_WRITTEN[] = {"invalid", "file_full",
                                               NULL};

static bool is_aggregate(const sloss *l)
{
    return l->has_writer_id && l->writer_id == 0;
}

static const sloss *entry_of(const Perfetto__Protos__TraceStats *st,
                             uint32_t seq_id)
{
    const sloss *l = NULL;
    for (size_t j = 0; j < st->n_shmtrace_sequence_loss; j++)
        if (st->shmtrace_sequence_loss[j]->sequence_id == seq_id)
            l = st->shmtrace_sequence_loss[j];
    return l;
}

static const seqpk *pk_of(const seqpk *pks, size_t npks, uint32_t seq_id)
{
    for (size_t i = 0; i < npks; i++)
        if (pks[i].seq_id == seq_id)
            return &pks[i];
    return NULL;
}

/* The buffer writer_stats gives SEQ_ID, or -1. */
static int64_t buffer_of(const Perfetto__Protos__TraceStats *st,
                         uint32_t seq_id)
{
    for (size_t i = 0; i < st->n_writer_stats; i++)
        if (st->writer_stats[i]->sequence_id == seq_id &&
            st->writer_stats[i]->has_buffer)
            return st->writer_stats[i]->buffer;
    return -1;
}

/* Can aggregate A hold the folded sequence q (see the top comment)? */
static bool may_hold(const Perfetto__Protos__TraceStats *st, const sloss *a,
                     uint32_t seq_id, const seqpk *pks, size_t npks)
{
    int64_t b = buffer_of(st, seq_id);
    if (b >= 0 && (uint32_t)b != a->buffer)
        return false;
    if (a->producer_id == 0)
        return true;
    const seqpk *q = pk_of(pks, npks, seq_id);
    /* The aggregate's own pid (its producer's), when the list says it. */
    if (a->has_pid && q && q->has_pid)
        return a->pid == q->pid;
    for (size_t j = 0; j < st->n_shmtrace_sequence_loss; j++) {
        const sloss *w = st->shmtrace_sequence_loss[j];
        if (is_aggregate(w) || w->producer_id != a->producer_id)
            continue;
        const seqpk *wp = pk_of(pks, npks, w->sequence_id);
        if (wp && q && wp->has_pid && q->has_pid && wp->pid != q->pid)
            return false;
    }
    return true;
}

/* What the sequences of one group (an aggregate's, or all folded ones)
 * add up to. */
typedef struct {
    uint64_t lost, read_in_trace, missing, in_trace;
    size_t seqs;
} group;

/* --conservation (top comment). Returns 1 if it failed, else 0. */
static int check_conservation(const Perfetto__Protos__TraceStats *st,
                              const seqstat *seqs, size_t nseqs,
                              const seqpk *pks, size_t npks,
                              long long per_seq, int verbose)
{
    uint64_t bad = 0, read_bad = 0, acc_lost = 0, after_last = 0;
    size_t nl = st ? st->n_shmtrace_sequence_loss : 0, naggs = 0;
    for (size_t i = 0; i < nl; i++) {
        const sloss *l = st->shmtrace_sequence_loss[i];
        uint64_t sum = 0;
        for (size_t c = 0; c < l->n_causes; c++)
            sum += l->causes[c]->packets;
        if (sum != l->lost_packets)
            CFAIL("sequence %u: causes add up to %llu, lost_packets %llu",
                  l->sequence_id, (unsigned long long)sum,
                  (unsigned long long)l->lost_packets);
        uint64_t outside = cause_packets(l, OUTSIDE);
        if (l->packets_offered + outside !=
            l->packets_read + l->packets_pending + l->lost_packets)
            CFAIL("%s %u: offered %llu + outside the buffer %llu != read "
                  "%llu + pending %llu + lost %llu",
                  is_aggregate(l) ? "aggregate" : "sequence",
                  l->sequence_id, (unsigned long long)l->packets_offered,
                  (unsigned long long)outside,
                  (unsigned long long)l->packets_read,
                  (unsigned long long)l->packets_pending,
                  (unsigned long long)l->lost_packets);
        acc_lost += l->lost_packets;
        naggs += is_aggregate(l);
        for (size_t c = 0; verbose && c < l->n_causes; c++)
            printf("loss seq %u: %s=%llu\n", l->sequence_id,
                   l->causes[c]->cause,
                   (unsigned long long)l->causes[c]->packets);
    }
    /* Sequences with an entry of their own. */
    for (size_t i = 0; i < npks && st; i++) {
        const sloss *l = entry_of(st, pks[i].seq_id);
        if (!l || is_aggregate(l))
            continue;
        uint64_t exp = l->packets_read - cause_packets(l, READ_NOT_WRITTEN);
        if (exp != pks[i].packets) {
            read_bad++;
            CFAIL("sequence %u: %llu packets in the trace, its entry "
                  "read %llu of which %llu were not written",
                  pks[i].seq_id, (unsigned long long)pks[i].packets,
                  (unsigned long long)l->packets_read,
                  (unsigned long long)cause_packets(l, READ_NOT_WRITTEN));
        }
    }
    /* Folded sequences: tied to an aggregate (tie[] holds its index in
     * the list) or, if several could hold one, all in one group. */
    size_t *tie = calloc(nseqs ? nseqs : 1, sizeof(*tie));
    group *g = calloc(nl ? nl : 1, sizeof(*g));
    if (!tie || !g) {
        free(tie);
        free(g);
        return 1;
    }
    size_t folded = 0, untied = 0;
    for (size_t i = 0; i < nseqs; i++) {
        tie[i] = SIZE_MAX;
        if (!naggs || entry_of(st, seqs[i].seq_id))
            continue;
        folded++;
        size_t cand = SIZE_MAX, ncand = 0;
        for (size_t j = 0; j < nl; j++)
            if (is_aggregate(st->shmtrace_sequence_loss[j]) &&
                may_hold(st, st->shmtrace_sequence_loss[j], seqs[i].seq_id,
                         pks, npks)) {
                cand = j;
                ncand++;
            }
        if (ncand == 1)
            tie[i] = cand;
        else
            untied++;
    }
    /* Producer sequences with packets but no data packet or marker (no
     * seqstat) count in the trace too. */
    for (size_t i = 0; i < npks && naggs; i++) {
        if (entry_of(st, pks[i].seq_id))
            continue;
        bool known = false;
        for (size_t k = 0; k < nseqs && !known; k++)
            known = seqs[k].seq_id == pks[i].seq_id;
        if (!known) {
            folded++;
            untied++;
        }
    }
    bool pooled = untied > 0;
    group all = {0};
    for (size_t j = 0; j < nl; j++) {
        const sloss *a = st->shmtrace_sequence_loss[j];
        if (!is_aggregate(a))
            continue;
        group *t = pooled ? &all : &g[j];
        t->lost += a->lost_packets;
        t->read_in_trace += a->packets_read -
                            cause_packets(a, READ_NOT_WRITTEN);
    }
    for (size_t i = 0; i < npks && naggs; i++) {
        if (entry_of(st, pks[i].seq_id))
            continue;
        size_t k = 0;
        while (k < nseqs && seqs[k].seq_id != pks[i].seq_id)
            k++;
        group *t = pooled || k == nseqs ? &all : &g[tie[k]];
        t->in_trace += pks[i].packets;
    }
    /* Each folded sequence's missing seq_values, as for one sequence. */
    for (size_t i = 0; i < nseqs && naggs; i++) {
        const seqstat *q = &seqs[i];
        if (entry_of(st, q->seq_id))
            continue;
        group *t = pooled ? &all : &g[tie[i]];
        uint64_t gaps = (q->count ? q->first : 0) + q->lost;
        t->missing += per_seq > 0 ?
            (q->count ? gaps + (uint64_t)(per_seq - 1 - q->last)
                      : (uint64_t)per_seq) : gaps;
        t->seqs++;
    }
    uint64_t unseen = 0;
    for (size_t j = 0; j <= nl && naggs; j++) {
        group *t = j == nl ? &all : &g[j];
        if (j == nl ? !pooled : (pooled ||
                                 !is_aggregate(st->shmtrace_sequence_loss[j])))
            continue;
        uint32_t id = j == nl ? 0 : st->shmtrace_sequence_loss[j]->sequence_id;
        if (t->read_in_trace != t->in_trace) {
            read_bad++;
            CFAIL("aggregate %u: its writers have %llu packets in the "
                  "trace, it read %llu not counted lost", id,
                  (unsigned long long)t->in_trace,
                  (unsigned long long)t->read_in_trace);
        }
        if (t->lost < t->missing)
            CFAIL("aggregate %u: lost_packets %llu, but %llu packets of "
                  "its %zu folded sequences are missing", id,
                  (unsigned long long)t->lost,
                  (unsigned long long)t->missing, t->seqs);
        else if (per_seq > 0 && (t->lost - t->missing) % per_seq != 0)
            CFAIL("aggregate %u: lost_packets %llu = %llu missing in its "
                  "%zu folded sequences + %llu, not whole writers of %lld",
                  id, (unsigned long long)t->lost,
                  (unsigned long long)t->missing, t->seqs,
                  (unsigned long long)(t->lost - t->missing), per_seq);
        else if (per_seq > 0)
            unseen += (t->lost - t->missing) / (uint64_t)per_seq;
        else
            after_last += t->lost - t->missing;
    }
    free(g);
    /* Sequences with an entry of their own (or, without aggregates, with
     * none: then nothing of theirs was counted lost). */
    for (size_t i = 0; i < nseqs; i++) {
        const seqstat *q = &seqs[i];
        const sloss *l = st ? entry_of(st, q->seq_id) : NULL;
        if (!l && naggs)
            continue;
        uint64_t gaps = (q->count ? q->first : 0) + q->lost;
        uint64_t got = l ? l->lost_packets : 0;
        if (per_seq > 0) {
            uint64_t exp = q->count ?
                gaps + (uint64_t)(per_seq - 1 - q->last) :
                (uint64_t)per_seq;
            if (got != exp)
                CFAIL("sequence %u: lost_packets %llu, but %llu of its "
                      "%lld packets are missing", q->seq_id,
                      (unsigned long long)got, (unsigned long long)exp,
                      per_seq);
        } else {
            if (got < gaps)
                CFAIL("sequence %u: lost_packets %llu, but %llu packets "
                      "are missing before its last", q->seq_id,
                      (unsigned long long)got, (unsigned long long)gaps);
            else
                after_last += got - gaps;
        }
    }
    free(tie);
    printf("stats_lost_packets=%llu\nlost_after_last=%llu\n"
           "loss_aggregates=%zu\nfolded_sequences=%zu\nfolded_untied=%zu\n"
           "folded_unseen_writers=%llu\nread_conservation=%s\n"
           "conservation=%s\n", (unsigned long long)acc_lost,
           (unsigned long long)after_last, naggs, folded, untied,
           (unsigned long long)unseen, read_bad ? "BROKEN" : "exact",
           bad ? "BROKEN" : "exact");
    return bad ? 1 : 0;
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"expect-total", required_argument, NULL, 't'},
        {"expect-sequences", required_argument, NULL, 's'},
        {"complete", required_argument, NULL, 'c'},
        {"per-sequence", required_argument, NULL, 'n'},
        {"min-total", required_argument, NULL, 'm'},
        {"require-loss", no_argument, NULL, 'l'},
        {"require-stats", no_argument, NULL, 'r'},
        {"require-trailing-flag", no_argument, NULL, 'T'},
        {"verbose", no_argument, NULL, 'v'},
        {"conservation", no_argument, NULL, 'C'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    long long per_seq = -1;
    long long expect_total = -1, expect_seqs = -1, complete = -1,
              min_total = -1;
    int require_loss = 0, require_stats = 0, require_tflag = 0, verbose = 0;
    int conservation = 0;
    int o;
    while ((o = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (o) {
        case 't': expect_total = atoll(optarg); break;
        case 's': expect_seqs = atoll(optarg); break;
        case 'c': complete = atoll(optarg); break;
        case 'n': per_seq = atoll(optarg); break;
        case 'm': min_total = atoll(optarg); break;
        case 'l': require_loss = 1; break;
        case 'r': require_stats = 1; break;
        case 'T': require_tflag = 1; break;
        case 'v': verbose = 1; break;
        case 'C': conservation = 1; break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (optind + 1 != argc) {
        usage(stderr);
        return 2;
    }
    FILE *f = fopen(argv[optind], "rb");
    if (!f) {
        fprintf(stderr, "svc_tracecheck: %s: %s\n", argv[optind],
                strerror(errno));
        return 2;
    }
    seqstat *seqs = NULL;
    size_t nseqs = 0;
    seqpk *pks = NULL;
    size_t npks = 0, pk_cap = 0, pk_last = 0;
    uint64_t packets = 0, service_packets = 0, test_packets = 0;
    uint64_t payload_checked = 0, payload_damaged = 0;
    uint64_t stats_packets = 0, config_packets = 0, other_packets = 0;
    uint64_t loss_markers = 0, orphan_markers = 0;
    Perfetto__Protos__TraceStats *last_stats = NULL;
    uint8_t *buf = NULL;
    size_t cap = 0;
    int rc;
    for (;;) {
        int tag = fgetc(f);
        if (tag == EOF)
            break;
        uint64_t len;
        if (tag != 0x0A || (rc = read_varint(f, &len)) != 1 ||
            len > (256u << 20)) {
            fprintf(stderr, "svc_tracecheck: bad record at packet %llu\n",
                    (unsigned long long)packets);
            return 2;
        }
        if (len > cap) {
            cap = len * 2;
            buf = realloc(buf, cap);
            if (!buf)
                return 2;
        }
        if (len && fread(buf, 1, len, f) != len) {
            fprintf(stderr, "svc_tracecheck: truncated packet %llu\n",
                    (unsigned long long)packets);
            return 2;
        }
        Perfetto__Protos__TracePacket *p =
            perfetto__protos__trace_packet__unpack(NULL, len, buf);
        if (!p) {
            fprintf(stderr, "svc_tracecheck: undecodable packet %llu\n",
                    (unsigned long long)packets);
            return 2;
        }
        packets++;
        uint32_t seq = p->has_trusted_packet_sequence_id ?
                       p->trusted_packet_sequence_id : 0;
        if (seq > 1) {
            seqpk *k = pk_get(&pks, &npks, &pk_cap, &pk_last, seq);
            if (!k)
                return 2;
            k->packets++;
            if (p->has_trusted_pid) {
                k->has_pid = true;
                k->pid = p->trusted_pid;
            }
        }
        if (seq == 1) {
            service_packets++;
            if (p->trace_stats) {
                stats_packets++;
                if (last_stats)
                    perfetto__protos__trace_stats__free_unpacked(last_stats,
                                                                 NULL);
                /* keep a copy: repack / unpack */
                size_t n = perfetto__protos__trace_stats__get_packed_size(
                        p->trace_stats);
                uint8_t *t = malloc(n ? n : 1);
                perfetto__protos__trace_stats__pack(p->trace_stats, t);
                last_stats = perfetto__protos__trace_stats__unpack(NULL, n, t);
                free(t);
            }
            if (p->trace_config)
                config_packets++;
        } else if (p->for_testing && p->for_testing->has_seq_value) {
            test_packets++;
            seqstat *s = seq_get(&seqs, &nseqs, seq);
            if (!s)
                return 2;
            if (s->count == 0)
                s->first = p->for_testing->seq_value;
            int64_t v = p->for_testing->seq_value;
            /* shmtrace-producer's payload: byte k is 'a' + (v + k) % 26 */
            const Perfetto__Protos__TestEvent__TestPayload *pl =
                p->for_testing->payload;
            if (pl && pl->n_str == 1 && pl->str[0]) {
                const char *str = pl->str[0];
                bool ok = true;
                for (size_t k = 0; str[k]; k++)
                    ok &= str[k] == (char)('a' + ((uint64_t)v + k) % 26);
                payload_checked++;
                payload_damaged += !ok;
            }
            /* A loss marker since the previous data packet flags this
             * gap (or this beginning) as well. */
            bool flagged = (p->has_previous_packet_dropped &&
                            p->previous_packet_dropped != 0) ||
                           s->marker_after_last;
            s->flagged_packets += flagged;
            if (s->last < 0)
                s->first_flagged = flagged;
            if (s->last >= 0 && v <= s->last) {
                s->dups++;
            } else if (s->last >= 0 && v != s->last + 1) {
                s->lost += (uint64_t)(v - s->last - 1);
                if (flagged)
                    s->gaps_flagged++;
                else
                    s->gaps_silent++;
            }
            if (v > s->last)
                s->last = v;
            s->marker_after_last = false;
            s->count++;
        } else if (seq != 0 && !p->for_testing &&
                   p->has_previous_packet_dropped &&
                   p->previous_packet_dropped != 0) {
            /* A loss marker: flags losses no data packet follows. */
            loss_markers++;
            seqstat *s = seq_get(&seqs, &nseqs, seq);
            if (!s)
                return 2;
            s->markers++;
            s->marker_after_last = true;
        } else {
            other_packets++;
        }
        perfetto__protos__trace_packet__free_unpacked(p, NULL);
    }
    fclose(f);
    free(buf);

    uint64_t gaps_flagged = 0, gaps_silent = 0, lost = 0, dups = 0,
             flagged = 0, incomplete = 0;
    uint64_t leading = 0, leading_flagged = 0, leading_silent = 0,
             trailing = 0, trailing_flagged = 0, trailing_silent = 0;
    for (size_t i = 0; i < nseqs; i++) {
        orphan_markers += seqs[i].count == 0;
        gaps_flagged += seqs[i].gaps_flagged;
        gaps_silent += seqs[i].gaps_silent;
        lost += seqs[i].lost;
        dups += seqs[i].dups;
        flagged += seqs[i].flagged_packets;
        if (seqs[i].first > 0) {
            leading += seqs[i].first;
            leading_flagged += seqs[i].first_flagged;
            leading_silent += !seqs[i].first_flagged;
        }
        if (per_seq > 0 && seqs[i].last + 1 < per_seq) {
            trailing += (uint64_t)(per_seq - 1 - seqs[i].last);
            if (seqs[i].marker_after_last)
                trailing_flagged++;
            else
                trailing_silent++;
        }
        if (complete >= 0 && (seqs[i].count != (uint64_t)complete ||
                              seqs[i].first != 0))
            incomplete++;
    }
    for (size_t i = 0; verbose && i < nseqs; i++)
        printf("seq %u: count=%llu first=%llu last=%lld gaps_flagged=%llu "
               "gaps_silent=%llu lost=%llu flagged=%llu markers=%llu "
               "trailing_flagged=%d\n", seqs[i].seq_id,
               (unsigned long long)seqs[i].count,
               (unsigned long long)seqs[i].first, (long long)seqs[i].last,
               (unsigned long long)seqs[i].gaps_flagged,
               (unsigned long long)seqs[i].gaps_silent,
               (unsigned long long)seqs[i].lost,
               (unsigned long long)seqs[i].flagged_packets,
               (unsigned long long)seqs[i].markers,
               (int)seqs[i].marker_after_last);
    uint64_t abi = 0, overwritten = 0, discarded = 0, wl = 0, wraps = 0;
    if (last_stats) {
        for (size_t i = 0; i < last_stats->n_buffer_stats; i++) {
            abi += last_stats->buffer_stats[i]->abi_violations;
            overwritten += last_stats->buffer_stats[i]->chunks_overwritten;
            discarded += last_stats->buffer_stats[i]->chunks_discarded;
            wl += last_stats->buffer_stats[i]->trace_writer_packet_loss;
            wraps += last_stats->buffer_stats[i]->write_wrap_count;
        }
    }
    printf("packets=%llu\nservice_packets=%llu\ntest_packets=%llu\n"
           "sequences=%zu\nconfig_packets=%llu\nstats_packets=%llu\n"
           "other_packets=%llu\ngaps_flagged=%llu\ngaps_silent=%llu\n"
           "lost_in_gaps=%llu\nduplicates=%llu\nflagged_packets=%llu\n",
           (unsigned long long)packets, (unsigned long long)service_packets,
           (unsigned long long)test_packets, nseqs,
           (unsigned long long)config_packets,
           (unsigned long long)stats_packets,
           (unsigned long long)other_packets,
           (unsigned long long)gaps_flagged, (unsigned long long)gaps_silent,
           (unsigned long long)lost, (unsigned long long)dups,
           (unsigned long long)flagged);
    printf("lost_leading=%llu\nleading_flagged=%llu\nleading_silent=%llu\n",
           (unsigned long long)leading, (unsigned long long)leading_flagged,
           (unsigned long long)leading_silent);
    printf("loss_markers=%llu\norphan_markers=%llu\n",
           (unsigned long long)loss_markers,
           (unsigned long long)orphan_markers);
    if (per_seq > 0)
        printf("lost_trailing=%llu\ntrailing_flagged=%llu\n"
               "trailing_silent=%llu\n", (unsigned long long)trailing,
               (unsigned long long)trailing_flagged,
               (unsigned long long)trailing_silent);
    if (last_stats)
        printf("stats_abi_violations=%llu\nstats_chunks_overwritten=%llu\n"
               "stats_buf_chunks_discarded=%llu\n"
               "stats_writer_packet_loss=%llu\n"
               "stats_write_wrap_count=%llu\nstats_invalid_packets=%llu\n"
               "stats_chunks_discarded=%llu\nstats_flushes_failed=%llu\n",
               (unsigned long long)abi, (unsigned long long)overwritten,
               (unsigned long long)discarded, (unsigned long long)wl,
               (unsigned long long)wraps,
               (unsigned long long)last_stats->invalid_packets,
               (unsigned long long)last_stats->chunks_discarded,
               (unsigned long long)last_stats->flushes_failed);
    printf("payload_checked=%llu\npayload_damaged=%llu\n",
           (unsigned long long)payload_checked,
           (unsigned long long)payload_damaged);
    int fail = 0;
#define CHECK(cond, ...) do { if (!(cond)) { fail = 1; \
        fprintf(stderr, "svc_tracecheck: FAIL: " __VA_ARGS__); \
        fputc('\n', stderr); } } while (0)
    CHECK(gaps_silent == 0, "%llu silent gap(s): packets lost without "
          "previous_packet_dropped", (unsigned long long)gaps_silent);
    CHECK(dups == 0, "%llu duplicate/out-of-order packet(s)",
          (unsigned long long)dups);
    CHECK(payload_damaged == 0, "%llu packet(s) with a damaged payload",
          (unsigned long long)payload_damaged);
    if (expect_total >= 0)
        CHECK(test_packets == (uint64_t)expect_total,
              "read %llu test packets, expected %lld",
              (unsigned long long)test_packets, expect_total);
    if (min_total >= 0)
        CHECK(test_packets >= (uint64_t)min_total,
              "read %llu test packets, expected at least %lld",
              (unsigned long long)test_packets, min_total);
    if (expect_seqs >= 0)
        CHECK(nseqs == (size_t)expect_seqs, "%zu sequences, expected %lld",
              nseqs, expect_seqs);
    if (complete >= 0)
        CHECK(incomplete == 0, "%llu sequence(s) not complete 0..%lld",
              (unsigned long long)incomplete, complete - 1);
    if (require_stats)
        CHECK(last_stats != NULL, "no trace_stats packet");
    if (require_tflag)
        CHECK(trailing_silent == 0, "%llu sequence(s) lost packets after "
              "their last one without a loss marker",
              (unsigned long long)trailing_silent);
    if (require_loss)
        CHECK(flagged + loss_markers + overwritten + discarded + wl > 0,
              "no loss visible although one was expected");
    if (conservation) {
        CHECK(last_stats != NULL, "no trace_stats packet");
        fail |= check_conservation(last_stats, seqs, nseqs, pks, npks,
                                   per_seq, verbose);
    }
    if (last_stats)
        perfetto__protos__trace_stats__free_unpacked(last_stats, NULL);
    free(seqs);
    free(pks);
    printf("verdict=%s\n", fail ? "FAIL" : "OK");
    return fail;
}
