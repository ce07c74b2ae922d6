/*
 * check_ins_golden.c - the inspector against Perfetto's own answers.
 *
 * tests/data/ holds three traces recorded by the real Perfetto service
 * (ok_v2, ring_loss_v2, discard_v2) with trace processor's stats rows
 * (NAME.stats.csv) and per-sequence facts read from the raw protobuf
 * (NAME.packets.csv); see tests/data/README.perfetto.md. Every traced_% row
 * must be identical (name, idx, severity, source, value), no extra traced_%
 * row may exist, and every sequence row must match.
 */
#include "check_ins_util.h"
#include "tck_main.h"

static const char *const TRACES[] = {"ok_v2", "ring_loss_v2", "discard_v2"};
#define NTRACES (int)(sizeof(TRACES) / sizeof(TRACES[0]))

/* tests/data/NAME.pftrace inspected (all of it) into a temp dir's db. */
typedef struct {
    char *dir, *dbpath;
    sqlite3 *db;
} golden;

static void golden_open(golden *g, const char *name)
{
    char *file = NULL;
    ck_assert(asprintf(&file, "%s.pftrace", name) > 0);
    char *trace = ck_data(file);
    g->dir = ck_tmpdir();
    g->dbpath = ck_path(g->dir, "out.db");
    ins_result res;
    ck_assert_int_eq(ck_inspect(trace, g->dbpath, &res), INS_EXIT_OK);
    ck_assert_uint_eq(res.bytes_decoded, (uint64_t)ck_file_size(trace));
    free(file);
    free(trace);
    g->db = ck_db_open(g->dbpath);
}

static void golden_close(golden *g)
{
    sqlite3_close(g->db);
    free(g->dbpath);
    ck_rmdir(g->dir);
}

/* tests/data/NAME.KIND.csv, trace processor's answers, past its header. */
static FILE *open_answers(const char *name, const char *kind)
{
    char *file = NULL;
    ck_assert(asprintf(&file, "%s.%s.csv", name, kind) > 0);
    char *csv = ck_data(file);
    FILE *f = ck_fopen(csv, "r");
    char header[512];
    ck_assert_ptr_nonnull(fgets(header, sizeof(header), f));
    free(file);
    free(csv);
    return f;
}

/* Split a CSV line of trace processor's output in place (fields are
 * either "quoted" without embedded quotes/commas, or bare). */
static int split_csv(char *line, char **fields, int max)
{
    int n = 0;
    char *p = line;
    while (n < max) {
        if (*p == '"') {
            fields[n++] = ++p;
            p = strchr(p, '"');
            ck_assert_ptr_nonnull(p);
            *p++ = '\0';
        } else {
            fields[n++] = p;
            p += strcspn(p, ",\n");
        }
        if (*p != ',')
            break;
        *p++ = '\0';
    }
    p = strchr(fields[n - 1], '\n');
    if (p)
        *p = '\0';
    return n;
}

/* Stats trace processor computes that are ours to reproduce. */
static int ours(const char *name)
{
    return strncmp(name, "traced_", 7) == 0 ||
           strcmp(name,
                  "packet_skipped_seq_needs_incremental_state_invalid") == 0 ||
           strncmp(name, "config_write_into_file_", 23) == 0 ||
           strcmp(name, "long_trace_mode_bytes_overwritten") == 0;
}

START_TEST(test_golden_stats_rows)
{
    const char *name = TRACES[_i];
    golden g;
    golden_open(&g, name);
    sqlite3 *db = g.db;
    FILE *f = open_answers(name, "stats");
    char line[512];
    int traced_rows = 0, checked = 0;
    while (fgets(line, sizeof(line), f)) {
        char *fl[5];
        ck_assert_int_eq(split_csv(line, fl, 5), 5);
        if (!ours(fl[0]))
            continue;
        bool single = strcmp(fl[1], "[NULL]") == 0;
        int rows = 0;
        char sev[32], src[32];
        int64_t value;
        char *where = single
            ? sqlite3_mprintf("name = %Q and idx is null", fl[0])
            : sqlite3_mprintf("name = %Q and idx = %s", fl[0], fl[1]);
        value = ck_q_int(db, -1, &rows, "select value from stats where %s",
                         where);
        ck_q_text(db, sev, sizeof(sev), "select severity from stats where %s",
                  where);
        ck_q_text(db, src, sizeof(src), "select source from stats where %s",
                  where);
        sqlite3_free(where);
        ck_assert_msg(rows == 1, "%s: %s[%s] has %d rows, want 1", name,
                      fl[0], fl[1], rows);
        ck_assert_msg(value == strtoll(fl[4], NULL, 10),
                      "%s: %s[%s] = %lld, trace processor says %s", name,
                      fl[0], fl[1], (long long)value, fl[4]);
        ck_assert_str_eq(sev, fl[2]);
        ck_assert_str_eq(src, fl[3]);
        if (strncmp(fl[0], "traced_", 7) == 0)
            traced_rows++;
        checked++;
    }
    fclose(f);
    ck_assert_int_gt(traced_rows, 40);
    /* No traced_% row that trace processor does not have. */
    ck_assert_int_eq(ck_q_int(db, -1, NULL, "select count(*) from stats "
                              "where name like 'traced_%%'"), traced_rows);
    golden_close(&g);
    (void)checked;
}
END_TEST

START_TEST(test_golden_sequences)
{
    const char *name = TRACES[_i];
    golden g;
    golden_open(&g, name);
    sqlite3 *db = g.db;
    FILE *f = open_answers(name, "packets");
    char line[512];
    int seqs = 0;
    int64_t total_packets = 0;
    while (fgets(line, sizeof(line), f)) {
        char *fl[8];
        ck_assert_int_eq(split_csv(line, fl, 8), 8);
        const char *seq = fl[0];
        static const char *const COLS[] = {
            NULL, "packets", "bytes", "flagged_packets", "first_ts",
            "last_ts", "uid", "pid"};
        for (int c = 1; c < 8; c++) {
            int rows = 0;
            int64_t v = ck_q_int(db, INT64_MIN, &rows, "select %s from "
                                 "sequence where seq_id = %s", COLS[c], seq);
            ck_assert_int_eq(rows, 1);
            if (fl[c][0] == '\0')
                ck_assert_msg(v == INT64_MIN, "%s seq %s: %s should be NULL",
                              name, seq, COLS[c]);
            else
                ck_assert_msg(v == strtoll(fl[c], NULL, 10),
                              "%s seq %s: %s = %lld, want %s", name, seq,
                              COLS[c], (long long)v, fl[c]);
        }
        /* The packet table agrees with the sequence table. */
        ck_assert_int_eq(ck_q_int(db, -1, NULL, "select count(*) from packet"
                                  " where seq_id = %s", seq),
                         strtoll(fl[1], NULL, 10));
        ck_assert_int_eq(ck_q_int(db, -1, NULL, "select sum(size) from "
                                  "packet where seq_id = %s", seq),
                         strtoll(fl[2], NULL, 10));
        ck_assert_int_eq(ck_q_int(db, -1, NULL, "select count(*) from "
                                  "data_loss where seq_id = %s", seq),
                         strtoll(fl[3], NULL, 10));
        total_packets += strtoll(fl[1], NULL, 10);
        seqs++;
    }
    fclose(f);
    ck_assert_int_eq(ck_q_int(db, -1, NULL, "select count(*) from sequence"),
                     seqs);
    ck_assert_int_eq(ck_q_int(db, -1, NULL, "select count(*) from packet"),
                     total_packets);
    /* loss_events per buffer add up to traced_buf_sequence_packet_loss. */
    ck_assert_int_eq(ck_q_int(db, -1, NULL, "select sum(loss_events) from "
                              "sequence where buffer = 0"),
                     ck_stat(db, "traced_buf_sequence_packet_loss", 0, -2));
    golden_close(&g);
}
END_TEST

/* The facts the reference README states about ring_loss_v2: 28 flagged
 * packets, 4 of them first on their sequence, bits 65 = present|overwrite. */
START_TEST(test_golden_ring_loss_reasons)
{
    golden g;
    golden_open(&g, "ring_loss_v2");
    sqlite3 *db = g.db;
    ck_assert_int_eq(ck_q_int(db, -1, NULL, "select count(*) from data_loss"),
                     28);
    ck_assert_int_eq(ck_q_int(db, -1, NULL, "select count(*) from data_loss "
                              "where counted = 0"), 4);
    ck_assert_int_eq(ck_q_int(db, -1, NULL, "select count(*) from data_loss "
                              "where bits = 65 and reasons = "
                              "'present,overwrite'"), 28);
    ck_assert_int_eq(ck_q_int(db, -1, NULL, "select count(*) from stats "
                              "where severity = 'data_loss' and value != 0"),
                     3);
    /* write_into_file streaming: what the ring overwrote never reached the
     * file (trace processor's long_trace_mode_bytes_overwritten), and no
     * flush_period_ms with an unknown service version is an error. */
    ck_assert_int_eq(ck_stat(db, "long_trace_mode_bytes_overwritten", 0, -2),
                     557056);
    ck_assert_int_eq(ck_stat(db, "config_write_into_file_no_flush", -1, -2),
                     1);
    char policy[32];
    ck_q_text(db, policy, sizeof(policy), "select fill_policy from buffer "
              "where idx = 0");
    ck_assert_str_eq(policy, "RING_BUFFER");
    ck_assert_int_eq(ck_q_int(db, -1, NULL, "select used from buffer where "
                              "idx = 0"), 65536);
    golden_close(&g);
}
END_TEST

START_TEST(test_golden_discard_policy)
{
    golden g;
    golden_open(&g, "discard_v2");
    sqlite3 *db = g.db;
    char policy[32];
    ck_q_text(db, policy, sizeof(policy), "select fill_policy from buffer "
              "where idx = 0");
    ck_assert_str_eq(policy, "DISCARD");
    ck_assert_int_eq(ck_q_int(db, -1, NULL, "select chunks_discarded from "
                              "buffer where idx = 0"), 214);
    golden_close(&g);
}
END_TEST

static Suite *golden_suite(void)
{
    Suite *s = suite_create("ins_golden");
    tck_loop_case(s, "stats_rows", test_golden_stats_rows, 0, NTRACES);
    tck_loop_case(s, "sequences", test_golden_sequences, 0, NTRACES);
    TCK_CASE(s, "loss_facts", test_golden_ring_loss_reasons,
             test_golden_discard_policy);
    return s;
}

TCK_MAIN(golden_suite)
