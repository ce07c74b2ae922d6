/*
 * svc_loss.c - exact per-sequence loss accounting of a session, written
 * into every TraceStats as shmtrace_sequence_loss (protos/common.proto).
 *
 * Sources, per (producer, writer) of the session:
 *   - each buffer's tb_get_seq_loss (libbuf): packets offered, read,
 *     pending, lost inside the buffer by cause;
 *   - CommitDataRequest.shmtrace_writer_loss from libshm producers:
 *     packets their writers dropped before any fragment reached the SMB
 *     (cause producer_smb_full), kept here as svc_xloss entries;
 *   - packets the service refused after reading them (cause invalid);
 *   - packets it read but could not write because the session's file
 *     reached max_file_size_bytes (cause file_full: the session stops
 *     there, and what its buffers still hold is read and counted, not
 *     dropped unseen);
 *   - producers that went away: what their sequences still have pending
 *     can never complete (cause producer_gone).
 * Producer-level facts (does it report its drops? did it go away while the
 * session ran? its pid, recorded when it joined the session) live in an
 * entry with writer_id 0. Once the session is stopped, or in a clone (a
 * frozen snapshot), pending packets are lost: producer_gone if their
 * producer left, else reassembly (fragments left at stop).
 *
 * Everything from producers is untrusted: a loss report names a writer id
 * in 1..32767 and a buffer the producer may write into, else it is
 * ignored; counts only add up (saturating). Entries are found through a
 * hash (a producer may name all 32767 writers in every report) and are
 * bounded (svc_int.h): one producer gets at most SVC_XLOSS_PER_PRODUCER
 * writer entries, and the session makes no more once it holds
 * SVC_XLOSS_MAX entries, so that one producer cannot take the room of the
 * others. What a writer without an entry of its own loses is counted in
 * its producer's fold entry for that buffer (key XKEY_FOLD | buffer
 * index), which, like the producer's facts entry, is always made: there
 * is at most one per buffer the producer may write into, i.e. per data
 * source instance. Nothing reported is dropped.
 *
 * The list written (svc__loss_fill) has to fit the TraceStats into
 * SVC_STATS_MAX_BYTES (GetTraceStats answers in one IPC frame), and the
 * same bounded list goes into the trace's stats packets and clones. When
 * one entry per writer would not fit, the writers that lost the most keep
 * their own entry and the others are folded into aggregate entries, one
 * per producer and buffer (or, if even those do not fit, one per buffer),
 * with writer_id 0 and a sequence id no packet carries; one producer's
 * carries that producer's pid, by which a reader ties the folded writers
 * (their packets' trusted_pid) even when none of them kept an entry. An
 * aggregate's counts are the sums of its writers', so the invariant of
 * protos/common.proto holds for it too and the entries still add up to
 * every packet offered, read and lost. A producer's fold entry always
 * ends up in its aggregate. So does libbuf's overflow entry of a buffer
 * (producer 0, writer 0: the writers past its per-buffer table, any
 * producer's), in that buffer's producer-0 aggregate.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "svc_int.h"
#include "svc_packet.h"

typedef Perfetto__Protos__TraceStats__ShmtraceSequenceLoss svc_sloss;
typedef Perfetto__Protos__TraceStats__ShmtraceLossCause svc_scause;

enum { X_SMB_FULL = 0, X_GONE, X_INVALID, X_FILE_FULL, X_NUM };
static const char *const x_names[X_NUM] = {
    "producer_smb_full", "producer_gone", "invalid", "file_full",
};

/* Keys: producer << 16 | writer (1..32767) for a writer's entry,
 * producer << 16 for the producer's facts, producer << 16 | XKEY_FOLD |
 * buffer index (a fold entry) for what its writers without an entry lost
 * in that buffer. An aggregate of the list is known to the session's
 * sequence ids (svc__seq_id) by the same key (producer 0: a buffer's
 * aggregate), which no writer has (writer ids never reach XKEY_FOLD,
 * buffer indexes stay below it). */
#define XKEY_FOLD 0x8000u
_Static_assert(SVC_MAX_WRITER_ID < XKEY_FOLD &&
               SVC_MAX_BUFFERS_PER_SESSION <= XKEY_FOLD, "loss keys");

struct svc_xloss {
    uint32_t key;
    uint32_t buffer_index;
    uint64_t packets[X_NUM], bytes[X_NUM];
    uint32_t nwriters;           /* facts: its writer entries */
    bool reports;                /* facts: producer reports its drops */
    bool gone;                   /* facts: producer disconnected */
    bool has_pid;                /* facts: pid known (joined the session) */
    int32_t pid;                 /* facts: its process (socket credentials) */
};

static uint64_t sat_add(uint64_t a, uint64_t b)
{
    return a + b < a ? UINT64_MAX : a + b;
}

static bool key_is_writer(uint32_t key)
{
    uint32_t w = key & 0xFFFFu;
    return w != 0 && w < XKEY_FOLD;
}

static bool key_is_fold(uint32_t key)
{
    return (key & XKEY_FOLD) != 0;
}

static size_t xslot(uint32_t key, size_t cap)
{
    return (size_t)((key * 0x9E3779B1u) >> 8) & (cap - 1);
}

static svc_xloss *xfind(const svc_session *s, uint32_t key)
{
    if (!s->xhash_cap)
        return NULL;
    for (size_t j = xslot(key, s->xhash_cap); s->xhash[j];
         j = (j + 1) & (s->xhash_cap - 1))
        if (s->xloss[s->xhash[j] - 1].key == key)
            return &s->xloss[s->xhash[j] - 1];
    return NULL;
}

static int xhash_rebuild(svc_session *s, size_t cap)
{
    uint32_t *h = calloc(cap, sizeof(*h));
    if (!h)
        return -ENOMEM;
    for (size_t i = 0; i < s->nxloss; i++) {
        size_t j = xslot(s->xloss[i].key, cap);
        while (h[j])
            j = (j + 1) & (cap - 1);
        h[j] = (uint32_t)i + 1;
    }
    free(s->xhash);
    s->xhash = h;
    s->xhash_cap = cap;
    return 0;
}

/* The entry of key, made if missing (no bound here: xwriter bounds
 * writers' entries); NULL only without memory. Making one may move the
 * others: pointers from earlier calls go stale. */
static svc_xloss *xget(svc_session *s, uint32_t key, uint32_t bi)
{
    svc_xloss *found = xfind(s, key);
    if (found)
        return found;
    if ((s->nxloss + 1) * 2 > s->xhash_cap &&
        xhash_rebuild(s, s->xhash_cap ? s->xhash_cap * 2 : 64) < 0)
        return NULL;
    if (s->nxloss == s->xloss_cap) {
        size_t cap = s->xloss_cap ? s->xloss_cap * 2 : 16;
        svc_xloss *v = realloc(s->xloss, cap * sizeof(*v));
        if (!v)
            return NULL;
        s->xloss = v;
        s->xloss_cap = cap;
    }
    svc_xloss *e = &s->xloss[s->nxloss++];
    memset(e, 0, sizeof(*e));
    e->key = key;
    e->buffer_index = bi;
    size_t j = xslot(key, s->xhash_cap);
    while (s->xhash[j])
        j = (j + 1) & (s->xhash_cap - 1);
    s->xhash[j] = (uint32_t)s->nxloss;
    return e;
}

/* The entry that counts what writer `key` loses in buffer bi: its own,
 * or, once its producer or the session has no room for another writer
 * entry, its producer's fold entry of bi. NULL only without memory. */
static svc_xloss *xwriter(svc_session *s, uint32_t key, uint32_t bi)
{
    svc_xloss *e = xfind(s, key);
    if (e)
        return e;
    uint32_t pkey = key & 0xFFFF0000u;
    svc_xloss *pe = xget(s, pkey, 0);
    if (!pe)
        return NULL;
    if (pe->nwriters < SVC_XLOSS_PER_PRODUCER && s->nxloss < SVC_XLOSS_MAX) {
        pe->nwriters++;
        if ((e = xget(s, key, bi)) != NULL)
            return e;
        xfind(s, pkey)->nwriters--;
    }
    return xget(s, pkey | XKEY_FOLD | bi, bi);
}

void svc__loss_commit(svc_service *svc, svc_producer *p,
                      const Perfetto__Protos__CommitDataRequest *req)
{
    if (req->has_shmtrace_loss_reporting && req->shmtrace_loss_reporting)
        p->reports_loss = true;
    for (size_t i = 0; i < req->n_shmtrace_writer_loss; i++) {
        const Perfetto__Protos__CommitDataRequest__ShmtraceWriterLoss *l =
            req->shmtrace_writer_loss[i];
        uint32_t wid = l->has_writer_id ? l->writer_id : 0;
        uint32_t tbid = l->has_target_buffer ? l->target_buffer : 0;
        svc_session *s = NULL;
        if (wid == 0 || wid > SVC_MAX_WRITER_ID ||
            !svc__producer_may_write(p, tbid) ||
            !svc__buffer(svc, tbid, &s) || !s)
            continue;
        uint32_t bi = 0;
        while (bi < s->nbufs && s->buf_ids[bi] != tbid)
            bi++;
        /* The producer's entry first: making an entry may move the
         * others, so e must be the last one made. */
        svc_xloss *pe = xget(s, (uint32_t)p->id << 16, 0);
        if (pe)
            pe->reports = true;
        if (!(l->has_packets && l->packets) && !(l->has_bytes && l->bytes))
            continue;           /* nothing lost: no entry needed */
        svc_xloss *e = xwriter(s, ((uint32_t)p->id << 16) | wid, bi);
        if (!e)
            continue;
        e->packets[X_SMB_FULL] = sat_add(e->packets[X_SMB_FULL],
                                         l->has_packets ? l->packets : 0);
        e->bytes[X_SMB_FULL] = sat_add(e->bytes[X_SMB_FULL],
                                       l->has_bytes ? l->bytes : 0);
    }
}

void svc__loss_producer_gone(svc_service *svc, svc_producer *p)
{
    for (size_t si = 0; si < svc->nsessions; si++) {
        svc_session *s = svc->sessions[si];
        bool had = false;
        for (size_t k = 0; k < s->ninst && !had; k++)
            had = s->inst[k].producer_id == p->id;
        svc_xloss *pe = had ? xget(s, (uint32_t)p->id << 16, 0) : NULL;
        if (pe) {
            /* Gone while the session ran: what it left unfinished is its
             * loss. Leaving after the stop costs nothing. */
            pe->gone |= s->state == SVC_SESSION_STARTED;
            pe->reports |= p->reports_loss;
        }
    }
}

void svc__loss_producer_joined(svc_session *s, const svc_producer *p)
{
    svc_xloss *pe = xget(s, (uint32_t)p->id << 16, 0);
    if (pe) {                    /* else (no memory) its pid stays unknown */
        pe->has_pid = true;
        pe->pid = (int32_t)p->pid;
    }
}

static void loss_after_read(svc_session *s, uint32_t key, uint32_t bi,
                            uint64_t bytes, int cause)
{
    svc_xloss *e = key_is_writer(key) ? xwriter(s, key, bi) : NULL;
    if (e) {
        e->packets[cause] = sat_add(e->packets[cause], 1);
        e->bytes[cause] = sat_add(e->bytes[cause], bytes);
    }
}

void svc__loss_invalid(svc_session *s, uint32_t key, uint32_t bi,
                       uint64_t bytes)
{
    loss_after_read(s, key, bi, bytes, X_INVALID);
}

void svc__loss_file_full(svc_session *s, uint32_t key, uint32_t bi,
                         uint64_t bytes)
{
    loss_after_read(s, key, bi, bytes, X_FILE_FULL);
}

void svc__loss_free(svc_session *s)
{
    free(s->xloss);
    free(s->xhash);
    s->xloss = NULL;
    s->xhash = NULL;
    s->nxloss = s->xloss_cap = s->xhash_cap = 0;
}

int svc__loss_copy(svc_session *dst, const svc_session *src)
{
    svc__loss_free(dst);
    if (!src->nxloss)
        return 0;
    dst->xloss = malloc(src->nxloss * sizeof(*dst->xloss));
    if (!dst->xloss)
        return -ENOMEM;
    memcpy(dst->xloss, src->xloss, src->nxloss * sizeof(*src->xloss));
    dst->nxloss = dst->xloss_cap = src->nxloss;
    return xhash_rebuild(dst, src->xhash_cap);
}

/* Producer facts for key's producer: reports its drops, gone. */
static void producer_facts(svc_service *svc, const svc_session *s,
                           uint32_t key, bool *reports, bool *gone)
{
    const svc_xloss *pe = xfind(s, key & 0xFFFF0000u);
    svc_producer *p = svc__producer_by_id(svc, (uint16_t)(key >> 16));
    *gone = pe && pe->gone;
    *reports = (pe && pe->reports) || (p && p->reports_loss);
}

/* ---------------------------------------------------------- the list */

/* One entry being built, with its cause array (moved only by
 * entry_move: the pointers lead into it). */
typedef struct {
    svc_sloss sl;
    svc_scause c[TB_NUM_CAUSES + X_NUM];
    svc_scause *cp[TB_NUM_CAUSES + X_NUM];
} svc_lentry;

/* What the list's fold needs to know of an entry besides itself. */
typedef struct {
    uint32_t buffer;
    uint32_t producer;
    size_t wire;                 /* its bytes in the TraceStats */
    bool fold_only;              /* a fold entry: only in an aggregate */
    bool kept;                   /* listed on its own */
} svc_lmeta;

static void add_cause(svc_lentry *e, const char *name, uint64_t packets,
                      uint64_t bytes)
{
    if (packets == 0 && bytes == 0)
        return;
    for (size_t i = 0; i < e->sl.n_causes; i++)
        if (strcmp(e->c[i].cause, name) == 0) {
            e->c[i].packets = sat_add(e->c[i].packets, packets);
            e->c[i].bytes = sat_add(e->c[i].bytes, bytes);
            goto total;
        }
    svc_scause *c = &e->c[e->sl.n_causes];
    perfetto__protos__trace_stats__shmtrace_loss_cause__init(c);
    c->cause = (char *)name;
    c->has_packets = c->has_bytes = true;
    c->packets = packets;
    c->bytes = bytes;
    e->cp[e->sl.n_causes++] = c;
total:
    e->sl.lost_packets = sat_add(e->sl.lost_packets, packets);
    e->sl.lost_bytes = sat_add(e->sl.lost_bytes, bytes);
}

static void entry_init(svc_lentry *e, uint32_t sequence_id, uint32_t key,
                       uint32_t bi)
{
    perfetto__protos__trace_stats__shmtrace_sequence_loss__init(&e->sl);
    e->sl.has_sequence_id = e->sl.has_buffer = true;
    e->sl.sequence_id = sequence_id;
    e->sl.buffer = bi;
    e->sl.has_producer_id = e->sl.has_writer_id = true;
    e->sl.producer_id = key >> 16;
    e->sl.writer_id = key_is_writer(key) ? key & 0xFFFFu : 0;
    e->sl.has_packets_offered = e->sl.has_packets_read = true;
    e->sl.has_packets_pending = true;
    e->sl.has_lost_packets = e->sl.has_lost_bytes = true;
    e->sl.has_producer_counts_known = true;
    e->sl.causes = e->cp;
}

/* A writer's entry, with its sequence id. */
static void writer_init(svc_lentry *e, svc_session *s, uint32_t key,
                        uint32_t bi)
{
    entry_init(e, svc__seq_id(&s->seqs, (uint16_t)(key >> 16),
                              (uint16_t)key, bi), key, bi);
}

static void entry_move(svc_lentry *dst, const svc_lentry *src)
{
    *dst = *src;
    for (size_t i = 0; i < dst->sl.n_causes; i++)
        dst->cp[i] = &dst->c[i];
    dst->sl.causes = dst->cp;
}

static void add_x(svc_lentry *e, const svc_xloss *x)
{
    for (int c = 0; x && c < X_NUM; c++)
        add_cause(e, x_names[c], x->packets[c], x->bytes[c]);
}

/* Bytes of one shmtrace_sequence_loss entry in a TraceStats: tag (field
 * 6000: 3 bytes), length, the message. */
static size_t entry_wire(const svc_sloss *sl)
{
    size_t n = protobuf_c_message_get_packed_size(&sl->base);
    return 3 + svc_varint_len(n) + n;
}

/* Adds member m's counts to aggregate a. */
static void agg_add(svc_lentry *a, const svc_lentry *m)
{
    a->sl.packets_offered = sat_add(a->sl.packets_offered,
                                    m->sl.packets_offered);
    a->sl.packets_read = sat_add(a->sl.packets_read, m->sl.packets_read);
    a->sl.packets_pending = sat_add(a->sl.packets_pending,
                                    m->sl.packets_pending);
    a->sl.producer_counts_known &= m->sl.producer_counts_known;
    for (size_t c = 0; c < m->sl.n_causes; c++)
        add_cause(a, m->c[c].cause, m->c[c].packets, m->c[c].bytes);
}

/* The aggregates of the entries not kept, one per (buffer, producer), or
 * per buffer with by_buffer (producer_id 0), in that order; `order` lists
 * the entries sorted by buffer then producer. Into out[] (their count
 * returned) with their sequence ids, or, with out NULL, only their bytes
 * added to *bytes, sequence ids counted at their largest. */
static size_t fold(svc_session *s, const svc_lentry *le,
                   const svc_lmeta *m, const size_t *order, size_t n,
                   bool by_buffer, svc_lentry *out, size_t *bytes)
{
    size_t nout = 0;
    svc_lentry tmp;
    for (size_t i = 0; i < n;) {
        uint32_t bi = m[order[i]].buffer;
        uint32_t prod = by_buffer ? 0 : m[order[i]].producer;
        size_t j = i;
        svc_lentry *a = NULL;
        for (; j < n && m[order[j]].buffer == bi &&
               (by_buffer || m[order[j]].producer == prod); j++) {
            size_t x = order[j];
            if (m[x].kept)
                continue;
            if (!a) {
                a = out ? &out[nout] : &tmp;
                uint32_t key = (prod << 16) | XKEY_FOLD | bi;
                entry_init(a, out ? svc__seq_id(&s->seqs, (uint16_t)prod,
                                                (uint16_t)(key & 0xFFFFu),
                                                bi) : UINT32_MAX, key, bi);
                a->sl.producer_counts_known = true;
                /* One producer's: its pid, so that a reader can tie the
                 * folded writers by their packets' trusted_pid. */
                const svc_xloss *pe = prod ? xfind(s, prod << 16) : NULL;
                if (pe && pe->has_pid) {
                    a->sl.has_pid = true;
                    a->sl.pid = pe->pid;
                }
            }
            agg_add(a, &le[x]);
        }
        if (a) {
            nout++;
            if (bytes)
                *bytes += entry_wire(&a->sl);
        }
        i = j;
    }
    return nout;
}

/* Entries in order of loss, the largest first (then of bytes, then as
 * listed), and in order of place (buffer, producer, as listed). */
typedef struct {
    uint64_t lost, lost_bytes;
    size_t i;
} svc_lrank;

static int by_loss(const void *va, const void *vb)
{
    const svc_lrank *a = va, *b = vb;
    if (a->lost != b->lost)
        return a->lost > b->lost ? -1 : 1;
    if (a->lost_bytes != b->lost_bytes)
        return a->lost_bytes > b->lost_bytes ? -1 : 1;
    return a->i < b->i ? -1 : a->i > b->i;
}

typedef struct {
    uint32_t buffer, producer;
    size_t i;
} svc_lplace;

static int by_place(const void *va, const void *vb)
{
    const svc_lplace *a = va, *b = vb;
    if (a->buffer != b->buffer)
        return a->buffer < b->buffer ? -1 : 1;
    if (a->producer != b->producer)
        return a->producer < b->producer ? -1 : 1;
    return a->i < b->i ? -1 : a->i > b->i;
}

/* Bytes the list may take: what SVC_STATS_MAX_BYTES leaves beside what st
 * holds already (svc_stats_build fills buffer_stats and writer_stats
 * first) and SVC_STATS_TAIL_BYTES for what is set after the list. */
static size_t list_budget(const Perfetto__Protos__TraceStats *st)
{
    size_t used = perfetto__protos__trace_stats__get_packed_size(st) +
                  SVC_STATS_TAIL_BYTES;
    return used < SVC_STATS_MAX_BYTES ? SVC_STATS_MAX_BYTES - used : 0;
}

/* Puts the n entries le[] into st: all of them if they fit the budget and
 * none is a fold entry (le then belongs to st), else the largest losers
 * on their own and the rest folded (a new block; le stays the caller's).
 * 1 if st took le, 0 if not, -ENOMEM. */
static int list_put(svc_session *s, Perfetto__Protos__TraceStats *st,
                    svc_lentry *le, svc_lmeta *m, size_t n)
{
    size_t budget = list_budget(st), listed = 0;
    bool folds = false;
    for (size_t i = 0; i < n; i++) {
        m[i].kept = !m[i].fold_only;
        m[i].wire = m[i].fold_only ? 0 : entry_wire(&le[i].sl);
        listed += m[i].wire;
        folds |= m[i].fold_only;
    }
    if (!folds && listed <= budget) {
        svc_sloss **lp = calloc(n, sizeof(*lp));
        if (!lp)
            return -ENOMEM;
        for (size_t i = 0; i < n; i++)
            lp[i] = &le[i].sl;
        st->n_shmtrace_sequence_loss = n;
        st->shmtrace_sequence_loss = lp;
        return 1;
    }
    svc_lplace *pl = calloc(n, sizeof(*pl));
    svc_lrank *rk = calloc(n, sizeof(*rk));
    size_t *order = calloc(n, sizeof(*order));
    if (!pl || !rk || !order) {
        free(pl);
        free(rk);
        free(order);
        return -ENOMEM;
    }
    for (size_t i = 0; i < n; i++)
        pl[i] = (svc_lplace){ m[i].buffer, m[i].producer, i };
    qsort(pl, n, sizeof(*pl), by_place);
    for (size_t i = 0; i < n; i++)
        order[i] = pl[i].i;
    free(pl);
    size_t agg = 0;
    bool by_buffer = false;
    fold(s, le, m, order, n, false, NULL, &agg);
    if (listed + agg > budget) {
        /* Not all writers fit: the largest losers keep their own entry in
         * the room the aggregates of everything leave. */
        for (size_t i = 0; i < n; i++)
            m[i].kept = false;
        agg = 0;
        fold(s, le, m, order, n, false, NULL, &agg);
        if (agg > budget) {
            by_buffer = true;
            agg = 0;
            fold(s, le, m, order, n, true, NULL, &agg);
        }
        size_t room = budget > agg ? budget - agg : 0, nr = 0;
        for (size_t i = 0; i < n; i++)
            if (!m[i].fold_only)
                rk[nr++] = (svc_lrank){ le[i].sl.lost_packets,
                                        le[i].sl.lost_bytes, i };
        qsort(rk, nr, sizeof(*rk), by_loss);
        for (size_t r = 0; r < nr && m[rk[r].i].wire <= room; r++) {
            m[rk[r].i].kept = true;
            room -= m[rk[r].i].wire;
        }
    }
    free(rk);
    size_t nkept = 0;
    for (size_t i = 0; i < n; i++)
        nkept += m[i].kept;
    size_t nagg = fold(s, le, m, order, n, by_buffer, NULL, NULL);
    svc_lentry *out = calloc(nkept + nagg, sizeof(*out));
    svc_sloss **lp = calloc(nkept + nagg, sizeof(*lp));
    if (!out || !lp) {
        free(out);
        free(lp);
        free(order);
        return -ENOMEM;
    }
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (m[i].kept)
            entry_move(&out[k++], &le[i]);
    fold(s, le, m, order, n, by_buffer, out + k, NULL);
    free(order);
    for (size_t i = 0; i < nkept + nagg; i++)
        lp[i] = &out[i].sl;
    st->n_shmtrace_sequence_loss = nkept + nagg;
    st->shmtrace_sequence_loss = lp;
    return 0;
}

bool svc__loss_writer_lost(const svc_session *s, uint32_t key)
{
    const svc_xloss *x = key_is_writer(key) ? xfind(s, key) : NULL;
    for (int c = 0; x && c < X_NUM; c++)
        if (x->packets[c])
            return true;
    return false;
}

int svc__loss_fill(svc_service *svc, svc_session *s,
                   Perfetto__Protos__TraceStats *st)
{
    size_t total = s->nxloss, n;
    for (size_t i = 0; i < s->nbufs; i++) {
        tb_buffer *b = svc__buffer(svc, s->buf_ids[i], NULL);
        if (b && tb_get_seq_loss(b, &n))
            total += n;
    }
    if (!total)
        return 0;
    svc_lentry *le = calloc(total, sizeof(*le));
    svc_lmeta *m = calloc(total, sizeof(*m));
    bool *used = calloc(s->nxloss ? s->nxloss : 1, sizeof(*used));
    if (!le || !m || !used) {
        free(le);
        free(m);
        free(used);
        return -ENOMEM;
    }
    bool final = s->state == SVC_SESSION_DISABLED || s->is_clone;
    if (s->seqs.next_id == 0)
        s->seqs.next_id = 2;
    size_t k = 0;
    for (size_t i = 0; i < s->nbufs; i++) {
        tb_buffer *b = svc__buffer(svc, s->buf_ids[i], NULL);
        const tb_seq_loss *l = b ? tb_get_seq_loss(b, &n) : NULL;
        for (size_t j = 0; l && j < n && k < total; j++) {
            uint32_t key = ((uint32_t)l[j].producer_id << 16) |
                           l[j].writer_id;
            svc_lentry *e = &le[k];
            writer_init(e, s, key, (uint32_t)i);
            bool reports, gone;
            producer_facts(svc, s, key, &reports, &gone);
            e->sl.producer_counts_known = reports;
            e->sl.packets_offered = l[j].packets_offered;
            e->sl.packets_read = l[j].packets_read;
            for (int c = 0; c < TB_NUM_CAUSES; c++)
                add_cause(e, tb_loss_cause_name(c), l[j].lost_packets[c],
                          l[j].lost_bytes[c]);
            if (gone || final)
                add_cause(e, gone ? "producer_gone" : "reassembly",
                          l[j].packets_pending, 0);
            else
                e->sl.packets_pending = l[j].packets_pending;
            svc_xloss *xe = xfind(s, key);
            if (xe) {
                add_x(e, xe);
                used[xe - s->xloss] = true;
            }
            /* Key 0: libbuf's overflow entry, the writers past its table
             * (TB_LOSS_MAX_WRITERS) of any producer: only ever in the
             * buffer's producer-0 aggregate. */
            m[k] = (svc_lmeta){ .buffer = (uint32_t)i,
                                .producer = l[j].producer_id,
                                .fold_only = key == 0 };
            k++;
        }
    }
    /* Writers that lost everything before reaching any buffer, and what
     * writers without an entry of their own lost (fold entries). */
    for (size_t x = 0; x < s->nxloss && k < total; x++) {
        uint32_t key = s->xloss[x].key, bi = s->xloss[x].buffer_index;
        if (used[x] || !(key_is_writer(key) || key_is_fold(key)))
            continue;
        svc_lentry *e = &le[k];
        if (key_is_fold(key))
            entry_init(e, 0, key, bi);
        else
            writer_init(e, s, key, bi);
        bool reports, gone;
        producer_facts(svc, s, key, &reports, &gone);
        e->sl.producer_counts_known = reports;
        add_x(e, &s->xloss[x]);
        m[k] = (svc_lmeta){ .buffer = bi, .producer = key >> 16,
                            .fold_only = key_is_fold(key) };
        k++;
    }
    free(used);
    int rc = k ? list_put(s, st, le, m, k) : 0;
    free(m);
    if (rc <= 0)
        free(le);
    return rc < 0 ? rc : 0;
}
