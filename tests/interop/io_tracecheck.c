/*
 * io_tracecheck.c - content checker for the interop suite (tests/interop/).
 *
 * Reads a Perfetto trace file (Trace.packet records) with a bounds-checked
 * protobuf wire walker (no schema needed: it must read what Perfetto's
 * producers write as well as ours) and prints "key=value" lines the
 * scripts assert on:
 *
 *   packets, kind.N          packets, and packets per top-level TracePacket
 *                            field number N (2 process_tree, 7 sys_stats,
 *                            11 track_event, 33 trace_config, 900 for_testing)
 *   flagged                  packets with previous_packet_dropped != 0
 *   test_packets, test_writers
 *                            for_testing packets; sequences that carry them
 *   test_gaps, test_dups     seq_value missing / not increasing, per sequence
 *                            (contiguous from each sequence's first value)
 *   test_bad_counter         counter whose low 32 bits are not seq_value
 *                            (refgen: counter = worker << 32 | i)
 *   test_bad_str             str not --str-len letters (when given), or
 *                            with --str-pattern not 'a'+(seq_value+k)%26
 *                            at each k (io_libshm_producer's strings)
 *   te_begin, te_end, te_instant, te_tracks
 *                            track_event types (per sequence + track_uuid)
 *   te_unmatched_end         an END with no open slice after the track's
 *                            first BEGIN (an END before it is a slice begun
 *                            before tracing started: te_leading_end)
 *   te_open                  slices still open at the end of the trace
 *   proc_found, proc_count   --cmdline S: a process_tree process whose
 *                            cmdline contains S; processes listed
 *   meminfo, ftrace_events   sys_stats.meminfo entries; ftrace events
 *   ftrace_compact           ftrace bundles with compact_sched data (how
 *                            traced_probes encodes sched_switch/waking)
 *   found                    --find S: packets whose bytes contain S
 *   truncated                1 if the file ended inside a record
 *
 * --dump-config FILE writes the (first) trace_config packet's bytes.
 * Exit: 0 read fine, 2 usage or unreadable/undecodable file.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const uint8_t *p, *end;
} rd;

/* One field; false at the end or on malformed input (r->p = NULL). */
typedef struct {
    uint32_t num;
    int wt;
    uint64_t v;              /* varint / fixed */
    const uint8_t *data;     /* length-delimited */
    size_t len;
} fld;

static bool varint(rd *r, uint64_t *out)
{
    uint64_t v = 0;
    for (int s = 0; s < 64; s += 7) {
        if (r->p >= r->end)
            return false;
        uint8_t b = *r->p++;
        v |= (uint64_t)(b & 0x7f) << s;
        if (!(b & 0x80)) {
            *out = v;
            return true;
        }
    }
    return false;
}

static bool next_field(rd *r, fld *f, bool *bad)
{
    if (r->p >= r->end)
        return false;
    uint64_t tag;
    if (!varint(r, &tag))
        goto fail;
    f->num = (uint32_t)(tag >> 3);
    f->wt = (int)(tag & 7);
    f->data = NULL;
    f->len = 0;
    switch (f->wt) {
    case 0:
        if (!varint(r, &f->v))
            goto fail;
        return true;
    case 1:
        if (r->end - r->p < 8)
            goto fail;
        memcpy(&f->v, r->p, 8);
        r->p += 8;
        return true;
    case 5:
        if (r->end - r->p < 4)
            goto fail;
        f->v = (uint64_t)r->p[0] | (uint64_t)r->p[1] << 8 |
               (uint64_t)r->p[2] << 16 | (uint64_t)r->p[3] << 24;
        r->p += 4;
        return true;
    case 2: {
        uint64_t n;
        if (!varint(r, &n) || n > (uint64_t)(r->end - r->p))
            goto fail;
        f->data = r->p;
        f->len = (size_t)n;
        r->p += n;
        return true;
    }
    default:
        break;
    }
fail:
    *bad = true;
    r->p = r->end;
    return false;
}

#define MAX_SEQ 4096
#define MAX_TRACKS 4096

typedef struct {
    uint32_t seq;
    int64_t last;
} tseq;

typedef struct {
    uint32_t seq;
    uint64_t uuid;
    int depth;
    bool seen_begin;
} ttrack;

static tseq g_tseq[MAX_SEQ];
static size_t g_ntseq;
static ttrack g_tracks[MAX_TRACKS];
static size_t g_ntracks;
static uint64_t g_kind[1024];
static uint64_t g_packets, g_flagged, g_test, g_gaps, g_dups, g_bad_counter,
    g_bad_str, g_te_begin, g_te_end, g_te_instant, g_te_unmatched,
    g_te_leading, g_proc_count, g_meminfo, g_ftrace_events, g_malformed,
    g_ftrace_compact;
static bool g_proc_found;
static const char *g_cmdline;
static const char *g_find;
static uint64_t g_found;
static long g_str_len = -1;
static bool g_str_pattern;
static FILE *g_dump;
static bool g_dumped;

static void on_test(uint32_t seq, const uint8_t *d, size_t n, bool *bad)
{
    rd r = { d, d + n };
    fld f;
    bool has_seq = false;
    uint64_t seqv = 0, counter = 0;
    bool has_counter = false;
    size_t slen = 0;
    const uint8_t *sdata = NULL;
    bool str_ok = true, has_str = false;
    while (next_field(&r, &f, bad)) {
        if (f.num == 2 && f.wt == 0) {
            has_seq = true;
            seqv = f.v;
        } else if (f.num == 3 && f.wt == 0) {
            has_counter = true;
            counter = f.v;
        } else if (f.num == 1 && f.wt == 2) {
            has_str = true;
            slen = f.len;
            sdata = f.data;
            for (size_t i = 0; i < f.len; i++)
                if (!((f.data[i] >= 'a' && f.data[i] <= 'z') ||
                      (f.data[i] >= 'A' && f.data[i] <= 'Z')))
                    str_ok = false;
        }
    }
    if (!has_seq)
        return; /* a loss marker, or not a numbered test packet */
    g_test++;
    if (has_counter && (uint32_t)counter != (uint32_t)seqv)
        g_bad_counter++;
    if (g_str_len >= 0 && (!has_str || !str_ok || (long)slen != g_str_len))
        g_bad_str++;
    if (g_str_pattern) {
        bool ok = has_str && slen > 0;
        for (size_t k = 0; ok && k < slen; k++)
            ok = sdata[k] == (uint8_t)('a' + (seqv + k) % 26);
        if (!ok)
            g_bad_str++;
    }
    tseq *s = NULL;
    for (size_t i = 0; i < g_ntseq; i++)
        if (g_tseq[i].seq == seq)
            s = &g_tseq[i];
    if (!s) {
        if (g_ntseq == MAX_SEQ)
            return;
        s = &g_tseq[g_ntseq++];
        s->seq = seq;
        s->last = (int64_t)seqv;
        return;
    }
    if ((int64_t)seqv <= s->last)
        g_dups++;
    else
        g_gaps += (uint64_t)((int64_t)seqv - s->last - 1);
    if ((int64_t)seqv > s->last)
        s->last = (int64_t)seqv;
}

static void on_track_event(uint32_t seq, const uint8_t *d, size_t n,
                           bool *bad)
{
    rd r = { d, d + n };
    fld f;
    uint64_t type = 0, uuid = 0;
    while (next_field(&r, &f, bad)) {
        if (f.num == 9 && f.wt == 0)
            type = f.v;
        else if (f.num == 11 && f.wt == 0)
            uuid = f.v;
    }
    ttrack *t = NULL;
    for (size_t i = 0; i < g_ntracks; i++)
        if (g_tracks[i].seq == seq && g_tracks[i].uuid == uuid)
            t = &g_tracks[i];
    if (!t) {
        if (g_ntracks == MAX_TRACKS)
            return;
        t = &g_tracks[g_ntracks++];
        memset(t, 0, sizeof *t);
        t->seq = seq;
        t->uuid = uuid;
    }
    if (type == 1) {
        g_te_begin++;
        t->depth++;
        t->seen_begin = true;
    } else if (type == 2) {
        g_te_end++;
        if (t->depth > 0)
            t->depth--;
        else if (t->seen_begin)
            g_te_unmatched++;
        else
            g_te_leading++;
    } else if (type == 3) {
        g_te_instant++;
    }
}

static void on_process_tree(const uint8_t *d, size_t n, bool *bad)
{
    rd r = { d, d + n };
    fld f;
    while (next_field(&r, &f, bad)) {
        if (f.num != 1 || f.wt != 2)
            continue;
        g_proc_count++;
        rd pr = { f.data, f.data + f.len };
        fld pf;
        while (next_field(&pr, &pf, bad)) {
            if (pf.num == 3 && pf.wt == 2 && g_cmdline &&
                memmem(pf.data, pf.len, g_cmdline, strlen(g_cmdline)))
                g_proc_found = true;
        }
    }
}

static void on_sys_stats(const uint8_t *d, size_t n, bool *bad)
{
    rd r = { d, d + n };
    fld f;
    while (next_field(&r, &f, bad))
        if (f.num == 1 && f.wt == 2)
            g_meminfo++;
}

static void on_ftrace(const uint8_t *d, size_t n, bool *bad)
{
    rd r = { d, d + n };
    fld f;
    while (next_field(&r, &f, bad)) {
        if (f.num == 2 && f.wt == 2)
            g_ftrace_events++;
        else if (f.num == 4 && f.wt == 2 && f.len > 0)
            g_ftrace_compact++;
    }
}

static void on_packet(const uint8_t *d, size_t n)
{
    rd r = { d, d + n };
    fld f;
    bool bad = false;
    uint32_t seq = 0;
    /* First pass: the sequence id (it may follow the payload). */
    while (next_field(&r, &f, &bad))
        if (f.num == 10 && f.wt == 0)
            seq = (uint32_t)f.v;
    g_packets++;
    if (g_find && memmem(d, n, g_find, strlen(g_find)))
        g_found++;
    r.p = d;
    r.end = d + n;
    while (next_field(&r, &f, &bad)) {
        if (f.num < 1024)
            g_kind[f.num]++;
        if (f.num == 42 && f.wt == 0 && f.v)
            g_flagged++;
        if (f.wt != 2)
            continue;
        switch (f.num) {
        case 900: on_test(seq, f.data, f.len, &bad); break;
        case 11: on_track_event(seq, f.data, f.len, &bad); break;
        case 2: on_process_tree(f.data, f.len, &bad); break;
        case 7: on_sys_stats(f.data, f.len, &bad); break;
        case 1: on_ftrace(f.data, f.len, &bad); break;
        case 33:
            if (g_dump && !g_dumped) {
                fwrite(f.data, 1, f.len, g_dump);
                g_dumped = true;
            }
            break;
        default: break;
        }
    }
    if (bad)
        g_malformed++;
}

int main(int argc, char **argv)
{
    const char *path = NULL, *dump = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--dump-config") && i + 1 < argc)
            dump = argv[++i];
        else if (!strcmp(argv[i], "--cmdline") && i + 1 < argc)
            g_cmdline = argv[++i];
        else if (!strcmp(argv[i], "--find") && i + 1 < argc)
            g_find = argv[++i];
        else if (!strcmp(argv[i], "--str-pattern"))
            g_str_pattern = true;
        else if (!strcmp(argv[i], "--str-len") && i + 1 < argc)
            g_str_len = strtol(argv[++i], NULL, 10);
        else if (argv[i][0] == '-' || path) {
            fprintf(stderr, "usage: io_tracecheck [--dump-config FILE] "
                    "[--cmdline S] [--str-len N] [--str-pattern] [--find S] TRACE\n");
            return 2;
        } else
            path = argv[i];
    }
    if (!path) {
        fprintf(stderr, "io_tracecheck: no trace given\n");
        return 2;
    }
    FILE *in = fopen(path, "rb");
    if (!in) {
        fprintf(stderr, "io_tracecheck: %s: %s\n", path, strerror(errno));
        return 2;
    }
    if (dump && !(g_dump = fopen(dump, "wb"))) {
        fprintf(stderr, "io_tracecheck: %s: %s\n", dump, strerror(errno));
        return 2;
    }
    size_t cap = 1 << 20, len = 0;
    uint8_t *buf = malloc(cap);
    size_t got;
    while (buf && (got = fread(buf + len, 1, cap - len, in)) > 0) {
        len += got;
        if (len == cap) {
            uint8_t *nb = realloc(buf, cap * 2);
            if (!nb) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = nb;
            cap *= 2;
        }
    }
    fclose(in);
    if (!buf) {
        fprintf(stderr, "io_tracecheck: out of memory\n");
        return 2;
    }
    rd r = { buf, buf + len };
    fld f;
    bool bad = false;
    while (next_field(&r, &f, &bad))
        if (f.num == 1 && f.wt == 2)
            on_packet(f.data, f.len);
    int open = 0;
    for (size_t i = 0; i < g_ntracks; i++)
        open += g_tracks[i].depth;
    printf("packets=%llu\n", (unsigned long long)g_packets);
    for (unsigned k = 0; k < 1024; k++)
        if (g_kind[k])
            printf("kind.%u=%llu\n", k, (unsigned long long)g_kind[k]);
    printf("flagged=%llu\n", (unsigned long long)g_flagged);
    printf("malformed=%llu\n", (unsigned long long)g_malformed);
    printf("test_packets=%llu\ntest_writers=%zu\ntest_gaps=%llu\n"
           "test_dups=%llu\ntest_bad_counter=%llu\ntest_bad_str=%llu\n",
           (unsigned long long)g_test, g_ntseq, (unsigned long long)g_gaps,
           (unsigned long long)g_dups, (unsigned long long)g_bad_counter,
           (unsigned long long)g_bad_str);
    printf("te_begin=%llu\nte_end=%llu\nte_instant=%llu\nte_tracks=%zu\n"
           "te_unmatched_end=%llu\nte_leading_end=%llu\nte_open=%d\n",
           (unsigned long long)g_te_begin, (unsigned long long)g_te_end,
           (unsigned long long)g_te_instant, g_ntracks,
           (unsigned long long)g_te_unmatched,
           (unsigned long long)g_te_leading, open);
    printf("proc_count=%llu\nproc_found=%d\nmeminfo=%llu\n"
           "ftrace_events=%llu\nftrace_compact=%llu\n",
           (unsigned long long)g_proc_count, g_proc_found ? 1 : 0,
           (unsigned long long)g_meminfo,
           (unsigned long long)g_ftrace_events,
           (unsigned long long)g_ftrace_compact);
    printf("found=%llu\n", (unsigned long long)g_found);
    printf("truncated=%d\n", bad ? 1 : 0);
    free(buf);
    if (g_dump)
        fclose(g_dump);
    return 0;
}
