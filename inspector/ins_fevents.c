/*
 * ins_fevents.c - trace processor's analysis stats from the ftrace events
 * (rules and design in ins_fevents.h).
 *
 * ins_fevents_bundle decodes a bundle's events into a scratch array, in
 * the order trace processor's tokenizer pushes them (compact switches,
 * compact wakings, own events), sorts it by timestamp keeping that order
 * for ties (a natural merge sort: the groups come sorted), and replays it
 * against the cpu's state (replay()). Decoding counts the tokenizer's
 * errors; the replay counts the parser's and the sched tracker's.
 */
#include "ins_fevents.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ins_ftrace.h"
#include "ins_packet.h"

#define SCHED_SWITCH_FIELD 4   /* FtraceEvent.sched_switch */

enum { EV_OTHER, EV_SWITCH, EV_COMPACT_SWITCH, EV_COMPACT_WAKING };

typedef struct {
    int64_t ts;
    uint32_t cpu;
    uint8_t kind;
    bool has_pid;          /* EV_SWITCH: the FtraceEvent has a pid */
    uint32_t prev_pid, next_pid;
} fevent;

typedef struct {
    bool has_switch;       /* a switch was replayed (last_utid is set) */
    bool slice_open;       /* ... and it started a slice */
    uint32_t last_pid;     /* its next_pid */
    bool seen_bundle;      /* the cpu's first bundle was read */
    bool has_last_ts;
    int64_t last_ts;       /* its latest replayed event */
} cpu_sched;

struct ins_fevents {
    ins_db *db;
    cpu_sched *cpus;
    size_t ncpus;
    fevent *ev;            /* the bundle being replayed */
    size_t nev, capev;
    fevent *tmp;           /* scratch for sorting it */
    size_t captmp;
    fevent *journal;       /* every event replayed so far, in order */
    size_t njournal, capjournal;
    bool journal_dropped;  /* past INS_FEVENTS_JOURNAL_MAX */
    bool catch_up;         /* a point moved: the journal is replayed once,
                              at the end or before it is dropped */
    int64_t replayed_drop, replayed_soft;  /* the points the replay uses */
    uint32_t bundle_cpu;   /* the cpu of the bundle being decoded */
    bool bundle_over;      /* it has more than INS_FEVENTS_BUNDLE_MAX */
    bool any_bundle;
    bool drop_known;
    int64_t drop_before;   /* tracing_started */
    bool early;            /* events replayed before it was known */
    int64_t early_min;     /* ... the earliest of them */
    bool has_latest_start;
    int64_t latest_start;  /* ftrace_latest_data_start_ns */
    bool above_soft;       /* switches replayed as past the soft-drop point */
    int64_t above_soft_min;
    const char *inexact;
    const char *refused;   /* why trace processor refuses the trace */
    int64_t tokenizer_errors, missing_event_id, parse_errors;
    int64_t before_start, switch_skipped, waking_skipped, mismatched;
};

ins_fevents *ins_fevents_create(ins_db *db)
{
    ins_fevents *f = calloc(1, sizeof(*f));
    if (f)
        f->db = db;
    return f;
}

void ins_fevents_destroy(ins_fevents *f)
{
    if (!f)
        return;
    free(f->cpus);
    free(f->ev);
    free(f->tmp);
    free(f->journal);
    free(f);
}

static const struct {
    const char *name, *severity, *source;
} ROWS[] = {
    {"ftrace_bundle_tokenizer_errors", "error", "analysis"},
    {"ftrace_missing_event_id", "info", "analysis"},
    {"compact_sched_has_parse_errors", "error", "trace"},
    {"ftrace_packet_before_tracing_start", "info", "analysis"},
    {"compact_sched_switch_skipped", "info", "analysis"},
    {"compact_sched_waking_skipped", "info", "analysis"},
    {"mismatched_sched_switch_tids", "error", "analysis"},
};
#define N_ROWS (sizeof(ROWS) / sizeof(*ROWS))

static int put_rows(ins_fevents *f, const int64_t *values)
{
    for (size_t i = 0; i < N_ROWS; i++)
        if (ins_db_stat(f->db, ROWS[i].name, false, 0, ROWS[i].severity,
                        ROWS[i].source, "", values[i], false))
            return -EIO;
    return 0;
}

int ins_fevents_start(ins_fevents *f)
{
    int64_t zero[N_ROWS] = {0};
    return put_rows(f, zero);
}

void ins_fevents_tracing_started(ins_fevents *f, int64_t ts)
{
    f->drop_known = true;
    f->drop_before = ts;
}

void ins_fevents_inexact(ins_fevents *f, const char *why)
{
    if (!f->inexact)
        f->inexact = why;
}

void ins_fevents_refused(ins_fevents *f, const char *why)
{
    if (!f->refused)
        f->refused = why;
}

static cpu_sched *cpu_get(ins_fevents *f, uint32_t cpu)
{
    if (cpu >= f->ncpus) {
        size_t n = (size_t)cpu + 1;
        cpu_sched *nc = realloc(f->cpus, n * sizeof(*nc));
        if (!nc)
            return NULL;
        memset(nc + f->ncpus, 0, (n - f->ncpus) * sizeof(*nc));
        f->cpus = nc;
        f->ncpus = n;
    }
    return &f->cpus[cpu];
}

/* Room for `need` events in *arr (capacity *cap, doubling from `first`);
 * -ENOMEM leaves the array as it was. */
static int reserve(fevent **arr, size_t *cap, size_t need, size_t first)
{
    if (need <= *cap)
        return 0;
    size_t ncap = *cap ? *cap : first;
    while (ncap < need)
        ncap *= 2;
    fevent *n = realloc(*arr, ncap * sizeof(*n));
    if (!n)
        return -ENOMEM;
    *arr = n;
    *cap = ncap;
    return 0;
}

/* The next event of the bundle; NULL past INS_FEVENTS_BUNDLE_MAX (the
 * bundle is analysed up to there: bundle_over) or on no memory. */
static fevent *push(ins_fevents *f, int64_t ts, int kind)
{
    if (f->nev >= INS_FEVENTS_BUNDLE_MAX) {
        f->bundle_over = true;
        return NULL;
    }
    if (reserve(&f->ev, &f->capev, f->nev + 1, 256))
        return NULL;
    fevent *e = &f->ev[f->nev];
    memset(e, 0, sizeof(*e));
    e->ts = ts;
    e->cpu = f->bundle_cpu;
    f->nev++;
    e->kind = (uint8_t)kind;
    return e;
}

/* ---- the replay: trace processor's parser and sched tracker ---- */

/* Events before this are dropped: tracing_started, 0 while unknown (as
 * in trace processor when there is none). */
static int64_t drop_ts(const ins_fevents *f)
{
    return f->drop_known ? f->drop_before : 0;
}

/* Switches start slices only from here on. */
static int64_t soft_drop_ts(const ins_fevents *f)
{
    int64_t d = drop_ts(f);
    return f->has_latest_start && f->latest_start > d ? f->latest_start : d;
}

/* One event, against the points as points_check() last took them. */
static void replay(ins_fevents *f, cpu_sched *c, const fevent *e)
{
    if (e->ts < f->replayed_drop) {
        f->before_start++;
        return;
    }
    if (!f->drop_known) {
        if (!f->early || e->ts < f->early_min)
            f->early_min = e->ts;
        f->early = true;
    }
    bool raw_only = e->ts < f->replayed_soft;
    if (!raw_only && (e->kind == EV_SWITCH || e->kind == EV_COMPACT_SWITCH)) {
        /* The end checks that the point did not move past this one. */
        if (!f->above_soft || e->ts < f->above_soft_min)
            f->above_soft_min = e->ts;
        f->above_soft = true;
    }
    switch (e->kind) {
    case EV_COMPACT_SWITCH:
        if (!c->has_switch) {
            f->switch_skipped++;     /* no prev_*: no slice */
        } else if (!raw_only) {
            c->slice_open = true;
        }
        c->has_switch = true;
        c->last_pid = e->next_pid;
        break;
    case EV_SWITCH:
        /* Not parsed before the soft-drop point, nor without a pid. */
        if (raw_only || !e->has_pid)
            break;
        if (c->slice_open && e->prev_pid != c->last_pid)
            f->mismatched++;
        c->has_switch = true;
        c->slice_open = true;
        c->last_pid = e->next_pid;
        break;
    case EV_COMPACT_WAKING:
        if (!c->has_switch)
            f->waking_skipped++;
        break;
    default:
        break;
    }
}

/* Replay the journal again from the start: the drop or soft-drop point
 * moved (trace processor knows both before it parses anything). Not at
 * each move, which a file can make as often as it has packets (a point
 * moved back and forth between bundles made every short packet replay
 * the whole journal: hours for a few KB), but once when it is needed:
 * at the end, or before the journal is dropped (catch_up). */
static void replay_all(ins_fevents *f)
{
    for (size_t i = 0; i < f->ncpus; i++) {
        f->cpus[i].has_switch = false;
        f->cpus[i].slice_open = false;
        f->cpus[i].last_pid = 0;
    }
    f->before_start = f->switch_skipped = f->waking_skipped = 0;
    f->mismatched = 0;
    f->early = f->above_soft = false;
    for (size_t i = 0; i < f->njournal; i++)
        replay(f, &f->cpus[f->journal[i].cpu], &f->journal[i]);
    f->catch_up = false;
}

/* Take both points as they stand: if they moved since the last replay,
 * the journal is to be replayed again with them (while it is kept; past
 * it, the end says whether the move mattered). Until then new bundles
 * only join the journal. */
static void points_check(ins_fevents *f)
{
    if (drop_ts(f) == f->replayed_drop && soft_drop_ts(f) == f->replayed_soft)
        return;
    f->replayed_drop = drop_ts(f);
    f->replayed_soft = soft_drop_ts(f);
    if (!f->journal_dropped)
        f->catch_up = true;
}

/* Past the bound (or out of memory): no more replays from the start, so
 * the one owed is done first, with the points as they stand. */
static void journal_drop(ins_fevents *f)
{
    if (f->catch_up)
        replay_all(f);
    free(f->journal);
    f->journal = NULL;
    f->njournal = f->capjournal = 0;
    f->journal_dropped = true;
}

/* Keep the bundle's events for a replay again, up to the bound. */
static void journal_add(ins_fevents *f)
{
    if (f->journal_dropped)
        return;
    if (f->njournal + f->nev > INS_FEVENTS_JOURNAL_MAX) {
        journal_drop(f);
        return;
    }
    if (reserve(&f->journal, &f->capjournal, f->njournal + f->nev, 1024)) {
        journal_drop(f);
        return;
    }
    memcpy(f->journal + f->njournal, f->ev, f->nev * sizeof(*f->ev));
    f->njournal += f->nev;
}

/* The end of the sorted run starting at i (timestamps not decreasing). */
static size_t run_end(const fevent *ev, size_t i, size_t n)
{
    while (i + 1 < n && ev[i].ts <= ev[i + 1].ts)
        i++;
    return i + 1;
}

/* Sort the bundle's events by timestamp, keeping push order for ties: a
 * natural merge sort (stable). Its groups come sorted already (compact
 * timestamps are deltas; a cpu's events are in time order), so this is
 * one pass or a few merges, where qsort took half the inspector's time
 * on ftrace traces. */
static int sort_events(ins_fevents *f)
{
    size_t n = f->nev;
    if (run_end(f->ev, 0, n) == n)
        return 0;
    if (reserve(&f->tmp, &f->captmp, n, n))
        return -ENOMEM;
    for (;;) {
        size_t i = 0, runs = 0;
        while (i < n) {
            size_t mid = run_end(f->ev, i, n);
            size_t end = mid < n ? run_end(f->ev, mid, n) : n;
            size_t a = i, b = mid, o = i;
            while (a < mid && b < end)   /* ties: the left one first */
                f->tmp[o++] = f->ev[b].ts < f->ev[a].ts ? f->ev[b++]
                                                        : f->ev[a++];
            while (a < mid)
                f->tmp[o++] = f->ev[a++];
            while (b < end)
                f->tmp[o++] = f->ev[b++];
            i = end;
            runs++;
        }
        memcpy(f->ev, f->tmp, n * sizeof(*f->ev));
        if (runs == 1)
            return 0;
    }
}

/* ---- decoding a bundle ---- */

/* A packed array: the last occurrence of its field, as trace processor's
 * decoder takes it. */
typedef struct {
    const uint8_t *p, *end;
    bool bad;
} packed;

static bool packed_next(packed *a, uint64_t *v)
{
    if (a->bad || a->p >= a->end)
        return false;
    if (*a->p < 0x80) {   /* most values (prio, state, comm) are one byte */
        *v = *a->p++;
        return true;
    }
    if (ins_varint(&a->p, a->end, v) != 0) {
        a->bad = true;
        return false;
    }
    return true;
}

static void packed_set(packed *a, unsigned wt, const uint8_t *d, size_t n)
{
    a->bad = wt != 2;   /* not a packed array */
    a->p = wt == 2 ? d : NULL;
    a->end = wt == 2 ? d + n : NULL;
}

enum { S_TS, S_STATE, S_PID, S_PRIO, S_COMM, W_TS, W_PID, W_CPU, W_PRIO,
       W_COMM, N_ARR };
#define ARR_COMM 4      /* the comm index, in either group of five */
#define ARR_PID 2       /* next_pid / pid */

/* Five arrays walked in step (timestamps delta-encoded); a parse error
 * is counted once, the events before it are kept. */
static int compact_group(ins_fevents *f, packed *arr, uint64_t ntable,
                         int kind)
{
    int64_t acc = 0;
    bool error = false;
    for (;;) {
        bool all = true;
        for (size_t i = 0; i < 5; i++)
            all = all && !arr[i].bad && arr[i].p < arr[i].end;
        if (!all)
            break;
        uint64_t v[5];
        bool ok = true;
        for (size_t i = 0; i < 5; i++)
            ok = packed_next(&arr[i], &v[i]) && ok;
        if (!ok)
            break;
        acc = (int64_t)((uint64_t)acc + v[0]);
        if (v[ARR_COMM] >= ntable) {
            error = true;
            break;
        }
        fevent *e = push(f, acc, kind);
        if (!e && f->bundle_over)
            return 0;             /* not a parse error: the rest not read */
        if (!e)
            return -ENOMEM;
        e->next_pid = (uint32_t)v[ARR_PID];   /* an int32, as a uint32 */
    }
    for (size_t i = 0; i < 5; i++)
        if (arr[i].bad || arr[i].p < arr[i].end)
            error = true;
    f->parse_errors += error;
    return 0;
}

static int compact_sched(ins_fevents *f, const uint8_t *data, size_t len)
{
    /* CompactSched's field numbers, in the order of the enum above
     * (waking_common_flags, 12, is optional and not walked in step). */
    static const uint32_t FIELD[N_ARR] = {1, 2, 3, 4, 6, 7, 8, 9, 10, 11};
    packed arr[N_ARR];
    memset(arr, 0, sizeof(arr));
    uint64_t ntable = 0, v;
    const uint8_t *p = data, *end = data + len, *d;
    uint32_t num;
    unsigned wt;
    size_t n;
    while (ins_pb_next(&p, end, &num, &wt, &v, &d, &n)) {
        if (num == 5) {
            ntable += wt == 2;
            continue;
        }
        for (size_t i = 0; i < N_ARR; i++)
            if (FIELD[i] == num)
                packed_set(&arr[i], wt, d, n);
    }
    int rc = compact_group(f, arr + S_TS, ntable, EV_COMPACT_SWITCH);
    return rc ? rc : compact_group(f, arr + W_TS, ntable, EV_COMPACT_WAKING);
}

/* SchedSwitchFtraceEvent's prev_pid (2) and next_pid (6). */
static void switch_pids(fevent *e, const uint8_t *data, size_t len)
{
    const uint8_t *p = data, *end = data + len, *d;
    uint32_t num;
    unsigned wt;
    uint64_t v;
    size_t n;
    while (ins_pb_next(&p, end, &num, &wt, &v, &d, &n)) {
        if (num == 2 && wt == 0)
            e->prev_pid = (uint32_t)v;
        else if (num == 6 && wt == 0)
            e->next_pid = (uint32_t)v;
    }
}

static int ftrace_event(ins_fevents *f, const uint8_t *data, size_t len)
{
    const uint8_t *p = data, *end = data + len, *d, *body = NULL;
    uint32_t num, event_id = 0;
    unsigned wt;
    uint64_t v, ts = 0;
    size_t n, body_len = 0;
    bool has_ts = false, has_pid = false;
    while (ins_pb_next(&p, end, &num, &wt, &v, &d, &n)) {
        if (num == 1 && wt == 0 && !has_ts) {
            has_ts = true;
            ts = v;
        } else if (num == 2 && wt == 0) {
            has_pid = true;
        } else if (wt == 2 && event_id == 0) {
            event_id = num;
            body = d;
            body_len = n;
        }
    }
    if (!has_ts) {
        f->tokenizer_errors++;
        return 0;
    }
    if (event_id == 0) {
        f->missing_event_id++;
        return 0;
    }
    bool is_switch = event_id == SCHED_SWITCH_FIELD;
    fevent *e = push(f, (int64_t)ts, is_switch ? EV_SWITCH : EV_OTHER);
    if (!e)
        return f->bundle_over ? 0 : -ENOMEM;
    e->has_pid = has_pid;
    if (is_switch)
        switch_pids(e, body, body_len);
    return 0;
}

int ins_fevents_bundle(ins_fevents *f, const uint8_t *data, size_t len)
{
    const uint8_t *p = data, *end = data + len, *d, *compact = NULL;
    uint32_t num;
    unsigned wt;
    uint64_t v, cpu = 0, clock = 0, prev_end = 0, last_read = 0;
    size_t n, compact_len = 0;
    bool has_cpu = false, has_prev_end = false, has_last_read = false;
    f->any_bundle = true;
    while (ins_pb_next(&p, end, &num, &wt, &v, &d, &n)) {
        if (num == 1 && wt == 0) {
            has_cpu = true;
            cpu = v;
        } else if (num == 4 && wt == 2) {
            compact = d;
            compact_len = n;
        } else if (num == 5 && wt == 0) {
            clock = v;
        } else if (num == 10 && wt == 0) {
            has_prev_end = true;
            prev_end = v;
        } else if (num == 9 && wt == 0) {
            has_last_read = true;
            last_read = v;
        }
    }
    if (!has_cpu) {
        f->tokenizer_errors++;
        return 0;
    }
    if (cpu >= INS_FTRACE_MAX_BUNDLE_CPU) {
        ins_fevents_refused(f, "a bundle names a cpu of 1024 or more");
        return 0;
    }
    if (clock != 0)
        ins_fevents_inexact(f, "a bundle names an ftrace_clock other than "
                            "boottime");
    cpu_sched *c = cpu_get(f, (uint32_t)cpu);
    if (!c)
        return -ENOMEM;
    f->nev = 0;
    f->bundle_cpu = (uint32_t)cpu;
    f->bundle_over = false;
    int rc = compact ? compact_sched(f, compact, compact_len) : 0;
    for (p = data; rc == 0 && ins_pb_next(&p, end, &num, &wt, &v, &d, &n);)
        if (num == 2 && wt == 2)
            rc = ftrace_event(f, d, n);
    if (rc)
        return rc;
    if (f->bundle_over)
        ins_fevents_inexact(f, "a bundle holds more events than the "
                            "inspector analyses in one (the rest of it is "
                            "not counted)");
    /* The first bundle of each cpu says from when its data is valid
     * (trace processor takes it at tokenization, before any replay). */
    if (!c->seen_bundle) {
        c->seen_bundle = true;
        if (has_prev_end || has_last_read) {
            int64_t t = (int64_t)(has_prev_end ? prev_end : last_read);
            if (!f->has_latest_start || t > f->latest_start)
                f->latest_start = t;
            f->has_latest_start = true;
        }
    }
    points_check(f);
    if (f->nev == 0)   /* (memcpy takes no NULL, even for 0 bytes) */
        return 0;
    if ((rc = sort_events(f)) != 0)
        return rc;
    if (c->has_last_ts && f->ev[0].ts < c->last_ts)
        ins_fevents_inexact(f, "a cpu's ftrace bundles are not in time "
                            "order in the file");
    journal_add(f);
    if (!f->catch_up)      /* else they are in the journal, replayed later */
        for (size_t i = 0; i < f->nev; i++)
            replay(f, c, &f->ev[i]);
    c->has_last_ts = true;
    c->last_ts = f->ev[f->nev - 1].ts;
    return 0;
}

int ins_fevents_finish(ins_fevents *f)
{
    points_check(f);
    if (f->catch_up)
        replay_all(f);
    if (f->early && f->drop_known && f->early_min < f->drop_before)
        ins_fevents_inexact(f, "ftrace events earlier than tracing_started "
                            "came before it in the file");
    if (f->above_soft && f->above_soft_min < soft_drop_ts(f))
        ins_fevents_inexact(f, "a later bundle moved the start of valid "
                            "ftrace data past switches already counted");
    int64_t values[N_ROWS] = {f->tokenizer_errors, f->missing_event_id,
                              f->parse_errors, f->before_start,
                              f->switch_skipped, f->waking_skipped,
                              f->mismatched};
    int rc = put_rows(f, values);
    if (rc == 0 && (f->any_bundle || f->refused)) {
        char text[256] = "exact";
        if (f->refused) {
            snprintf(text, sizeof(text), "not comparable: trace processor "
                     "refuses the whole trace (%s)", f->refused);
        } else if (f->inexact) {
            strcpy(text, "approximate: ");
            strncat(text, f->inexact, sizeof(text) - strlen(text) - 1);
        }
        if (ins_db_info_text(f->db, "ftrace_analysis", text))
            rc = -EIO;
    }
    return rc;
}
