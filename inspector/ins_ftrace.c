/*
 * ins_ftrace.c - trace processor's ftrace stats from FtraceStats packets
 * and bundles' lost_events (rules in ins_ftrace.h).
 *
 * Messages are walked by hand with bounds checks (the ftrace protos are
 * not in protos/): a field that does not decode ends the walk of its
 * message, what was read before stays. Begin values per cpu are kept in a
 * small array (grown on demand, cpu numbers below 65536) for the deltas.
 */
#include "ins_ftrace.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ins_packet.h"

#define MAX_CPU 65536u
#define ZERO_DATA_LENGTH 12  /* FtraceParseStatus ABI_ZERO_DATA_LENGTH */

enum { C_ENTRIES, C_OVERRUN, C_COMMIT_OVERRUN, C_BYTES, C_DROPPED, C_READ,
       C_NOW_TS, C_OLDEST_TS, C_N };

/* Counter names; the first six have deltas. */
static const char *const CNAME[C_N] = {
    "entries", "overrun", "commit_overrun", "bytes", "dropped_events",
    "read_events", "now_ts", "oldest_event_ts"};

typedef struct {
    bool has_begin[C_N];
    int64_t begin[C_N];
} cpu_begin;

struct ins_ftrace {
    ins_db *db;
    cpu_begin *cpus;
    size_t ncpus;
    int64_t kprobe_hits_begin, kprobe_misses_begin;
    uint32_t *err_seqs;         /* sequences that reported setup errors */
    size_t nerr_seqs;
    bool preserve_seen;         /* an FtraceStats had preserve_ftrace_buffer */
    const char *refusal;        /* why trace processor stops at the trace */
};

ins_ftrace *ins_ftrace_create(ins_db *db)
{
    ins_ftrace *f = calloc(1, sizeof(*f));
    if (f)
        f->db = db;
    return f;
}

void ins_ftrace_destroy(ins_ftrace *f)
{
    if (!f)
        return;
    free(f->cpus);
    free(f->err_seqs);
    free(f);
}

static int put(ins_ftrace *f, const char *name, bool has_idx, int64_t idx,
               const char *severity, int64_t value, bool add)
{
    const char *source = strcmp(name, "ftrace_abi_errors_skipped_zero_data_"
                                      "length") == 0 ? "analysis" : "trace";
    return ins_db_stat(f->db, name, has_idx, idx, severity, source, "",
                       value, add) ? -EIO : 0;
}

int ins_ftrace_start(ins_ftrace *f)
{
    static const char *const singles[][2] = {
        {"ftrace_kprobe_hits_begin", "info"},
        {"ftrace_kprobe_hits_end", "info"},
        {"ftrace_kprobe_hits_delta", "info"},
        {"ftrace_kprobe_misses_begin", "info"},
        {"ftrace_kprobe_misses_end", "info"},
        {"ftrace_kprobe_misses_delta", "data_loss"},
        {"ftrace_setup_errors", "notice"},
        {"ftrace_abi_errors_skipped_zero_data_length", "info"},
    };
    for (size_t i = 0; i < sizeof(singles) / sizeof(*singles); i++)
        if (put(f, singles[i][0], false, 0, singles[i][1], 0, false))
            return -EIO;
    return 0;
}

/* a - b wrapping as trace processor's int64 arithmetic does on its
 * machines, without the undefined behaviour of a signed overflow (a file
 * may hold begin 1 and end 2^63). */
static int64_t delta(int64_t a, int64_t b)
{
    return (int64_t)((uint64_t)a - (uint64_t)b);
}

/* seconds (a double's bits) * 1e9 as trace processor converts it. */
static int64_t secs_to_ns(uint64_t bits)
{
    double s;
    memcpy(&s, &bits, sizeof(s));
    double ns = s * 1e9;
    if (ns >= 9223372036854775807.0)
        return INT64_MAX;
    if (!(ns > -9223372036854775807.0))  /* NaN or very negative */
        return ns < 0 ? INT64_MIN : 0;
    return (int64_t)ns;
}

static cpu_begin *cpu_get(ins_ftrace *f, uint64_t cpu)
{
    if (cpu >= MAX_CPU)
        return NULL;
    if (cpu >= f->ncpus) {
        size_t n = (size_t)cpu + 1;
        cpu_begin *nc = realloc(f->cpus, n * sizeof(*nc));
        if (!nc)
            return NULL;
        memset(nc + f->ncpus, 0, (n - f->ncpus) * sizeof(*nc));
        f->cpus = nc;
        f->ncpus = n;
    }
    return &f->cpus[cpu];
}

static int cpu_stats(ins_ftrace *f, bool is_end, const uint8_t *d, size_t n)
{
    const uint8_t *p = d, *end = d + n, *sub;
    uint32_t num;
    unsigned wt;
    uint64_t v, cpu = 0;
    size_t sn;
    int64_t val[C_N] = {0};
    while (ins_pb_next(&p, end, &num, &wt, &v, &sub, &sn)) {
        if (num == 1 && wt == 0) cpu = v;
        else if (num == 2 && wt == 0) val[C_ENTRIES] = (int64_t)v;
        else if (num == 3 && wt == 0) val[C_OVERRUN] = (int64_t)v;
        else if (num == 4 && wt == 0) val[C_COMMIT_OVERRUN] = (int64_t)v;
        else if (num == 5 && wt == 0) val[C_BYTES] = (int64_t)v;
        else if (num == 6 && wt == 1) val[C_OLDEST_TS] = secs_to_ns(v);
        else if (num == 7 && wt == 1) val[C_NOW_TS] = secs_to_ns(v);
        else if (num == 8 && wt == 0) val[C_DROPPED] = (int64_t)v;
        else if (num == 9 && wt == 0) val[C_READ] = (int64_t)v;
    }
    /* Trace processor's index is the cpu as an int. */
    int64_t idx = (int64_t)(int32_t)(uint32_t)cpu;
    cpu_begin *cb = cpu_get(f, cpu);
    char name[64];
    int rc = 0;
    for (int c = 0; c < C_N && rc == 0; c++) {
        snprintf(name, sizeof(name), "ftrace_cpu_%s_%s", CNAME[c],
                 is_end ? "end" : "begin");
        rc = put(f, name, true, idx, "info", val[c], false);
        if (!is_end && cb) {
            cb->has_begin[c] = true;
            cb->begin[c] = val[c];
        }
        if (is_end && c < C_NOW_TS && cb && cb->has_begin[c] && rc == 0) {
            snprintf(name, sizeof(name), "ftrace_cpu_%s_delta", CNAME[c]);
            bool err = c == C_COMMIT_OVERRUN || c == C_DROPPED;
            rc = put(f, name, true, idx, err ? "error" : "info",
                     delta(val[c], cb->begin[c]), false);
        }
    }
    return rc;
}

static bool seq_had_errors(ins_ftrace *f, uint32_t seq)
{
    for (size_t i = 0; i < f->nerr_seqs; i++)
        if (f->err_seqs[i] == seq)
            return true;
    return false;
}

int ins_ftrace_stats(ins_ftrace *f, uint32_t seq_id, const uint8_t *data,
                     size_t len)
{
    const uint8_t *p = data, *end = data + len, *sub;
    uint32_t num;
    unsigned wt;
    uint64_t v, phase = 0;
    size_t n;
    /* First pass: the phase (it may come after the cpu stats). */
    while (ins_pb_next(&p, end, &num, &wt, &v, &sub, &n))
        if (num == 1 && wt == 0)
            phase = v;
    if (phase != 1 && phase != 2) {
        if (!f->refusal)
            f->refusal = "an FtraceStats has a phase other than start or "
                         "end of trace";
        return 0;
    }
    bool is_end = phase == 2;
    int rc = 0;
    int64_t hits = 0, misses = 0, setup_errors = 0, zero_len = 0;
    int64_t critical = 0;   /* parse errors trace processor rejects */
    p = data;
    while (rc == 0 && ins_pb_next(&p, end, &num, &wt, &v, &sub, &n)) {
        if (num == 2 && wt == 2) {
            rc = cpu_stats(f, is_end, sub, n);
        } else if (num == 10 && wt == 2) {
            const uint8_t *q = sub, *qe = sub + n, *s2;
            uint32_t k;
            unsigned w;
            uint64_t x;
            size_t m;
            while (ins_pb_next(&q, qe, &k, &w, &x, &s2, &m)) {
                if (k == 1 && w == 0) hits = (int64_t)x;
                else if (k == 2 && w == 0) misses = (int64_t)x;
            }
        } else if ((num == 6 || num == 7) && wt == 2) {
            setup_errors++;
        } else if ((num == 5 || num == 13) && wt == 2 && n > 0) {
            setup_errors++;
        } else if (num == 8 && wt == 0 && v) {
            f->preserve_seen = true;
        } else if (num == 9 && wt == 0) {
            zero_len += v == ZERO_DATA_LENGTH;
            critical += v != ZERO_DATA_LENGTH;
        } else if (num == 9) {
            /* Not a varint (packed, say): trace processor's decoder of
             * this unpacked repeated enum reads one value that is no
             * status it knows (PBZERO_UNKNOWN_ENUM_VALUE): critical. */
            critical++;
        }
    }
    if (rc)
        return rc;
    if (critical && !f->refusal)
        f->refusal = "an FtraceStats reports critical ftrace parse errors "
                     "(ftrace_parse_errors other than ABI_ZERO_DATA_LENGTH)";
    const char *ph = is_end ? "end" : "begin";
    char name[64];
    snprintf(name, sizeof(name), "ftrace_kprobe_hits_%s", ph);
    rc |= put(f, name, false, 0, "info", hits, false);
    snprintf(name, sizeof(name), "ftrace_kprobe_misses_%s", ph);
    rc |= put(f, name, false, 0, "info", misses, false);
    if (!is_end) {
        f->kprobe_hits_begin = hits;
        f->kprobe_misses_begin = misses;
    } else {
        if (f->kprobe_hits_begin)
            rc |= put(f, "ftrace_kprobe_hits_delta", false, 0, "info",
                      delta(hits, f->kprobe_hits_begin), false);
        if (f->kprobe_misses_begin)
            rc |= put(f, "ftrace_kprobe_misses_delta", false, 0, "data_loss",
                      delta(misses, f->kprobe_misses_begin), false);
    }
    if (!is_end && setup_errors && !seq_had_errors(f, seq_id)) {
        uint32_t *ns = realloc(f->err_seqs,
                               (f->nerr_seqs + 1) * sizeof(*ns));
        if (!ns)
            return -ENOMEM;
        f->err_seqs = ns;
        f->err_seqs[f->nerr_seqs++] = seq_id;
        rc |= put(f, "ftrace_setup_errors", false, 0, "notice",
                  setup_errors, true);
    }
    if (zero_len)
        rc |= put(f, "ftrace_abi_errors_skipped_zero_data_length", false, 0,
                  "info", zero_len, true);
    return rc ? -EIO : 0;
}

int ins_ftrace_bundle(ins_ftrace *f, const uint8_t *data, size_t len)
{
    const uint8_t *p = data, *end = data + len, *sub;
    uint32_t num;
    unsigned wt;
    uint64_t v, cpu = 0;
    size_t n;
    bool has_cpu = false, lost = false;
    while (ins_pb_next(&p, end, &num, &wt, &v, &sub, &n)) {
        if (num == 1 && wt == 0) {
            has_cpu = true;
            cpu = v;
        } else if (num == 3 && wt == 0) {
            lost = v != 0;
        }
    }
    if (!has_cpu || cpu >= INS_FTRACE_MAX_BUNDLE_CPU || !lost)
        return 0;
    return put(f, "ftrace_cpu_has_data_loss", true, (int64_t)cpu,
               "data_loss", 1, false);
}

bool ins_ftrace_preserve_seen(const ins_ftrace *f)
{
    return f->preserve_seen;
}

const char *ins_ftrace_refusal(const ins_ftrace *f)
{
    return f->refusal;
}
