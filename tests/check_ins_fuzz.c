/*
 * check_ins_fuzz.c - fuzz-style robustness: real Perfetto traces, cut at
 * random places or with random bytes flipped, must never crash the
 * inspector (run under ASan/UBSan in CI), must end in OK or CORRUPT with an
 * offset, and must leave a sound database holding exactly the packets
 * decoded before the problem.
 *
 * Deterministic: a fixed-seed xorshift generator, so failures reproduce.
 */
#include "check_ins_util.h"
#include "tck_main.h"
#include "trng.h"

typedef struct blob {
    uint8_t *d;
    size_t n;
} blob;

static blob load(const char *name)
{
    char *path = ck_data(name);
    FILE *f = ck_fopen(path, "rb");
    blob b = {0};
    b.n = (size_t)ck_file_size(path);
    b.d = malloc(b.n);
    ck_assert_ptr_nonnull(b.d);
    ck_assert_uint_eq(fread(b.d, 1, b.n, f), b.n);
    fclose(f);
    free(path);
    return b;
}

static uint64_t rng_state;
static uint64_t rnd(void)
{
    return trng_next64(&rng_state);
}

static void write_file(const char *path, const uint8_t *d, size_t n)
{
    FILE *f = ck_fopen(path, "wb");
    if (n)
        ck_assert_uint_eq(fwrite(d, 1, n, f), n);
    fclose(f);
}

/* Offsets of every record start in the intact trace, plus the end. */
static uint64_t *record_starts(const char *dir, const blob *b, size_t *n)
{
    char *in = ck_path(dir, "intact.pftrace");
    char *db = ck_path(dir, "intact.db");
    write_file(in, b->d, b->n);
    ins_result res;
    ck_assert_int_eq(ck_inspect(in, db, &res), INS_EXIT_OK);
    sqlite3 *c = ck_db_open(db);
    sqlite3_stmt *st;
    ck_assert_int_eq(sqlite3_prepare_v2(c, "select file_offset from packet "
                                        "order by id", -1, &st, NULL),
                     SQLITE_OK);
    uint64_t *starts = malloc((res.packets + 1) * sizeof(*starts));
    ck_assert_ptr_nonnull(starts);
    size_t k = 0;
    while (sqlite3_step(st) == SQLITE_ROW)
        starts[k++] = (uint64_t)sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    sqlite3_close(c);
    ck_assert_uint_eq(k, res.packets);
    starts[k] = b->n;
    *n = k;
    free(in);
    free(db);
    return starts;
}

/* The database must be sound and agree with RES. */
static void check_db(const char *db, const ins_result *res)
{
    sqlite3 *c = ck_db_open(db);
    char ok[64];
    ck_q_text(c, ok, sizeof(ok), "pragma integrity_check");
    ck_assert_str_eq(ok, "ok");
    ck_assert_int_eq(ck_q_int(c, -1, NULL, "select count(*) from packet"),
                     (int64_t)res->packets);
    ck_assert_int_eq(ck_q_int(c, -1, NULL, "select value from trace_info "
                              "where key = 'packets'"), (int64_t)res->packets);
    ck_assert_int_eq(ck_q_int(c, -1, NULL, "select count(*) from stats where "
                              "name like 'traced_%%' and idx is null"), 15);
    char status[32];
    ck_q_text(c, status, sizeof(status), "select value from trace_info "
              "where key = 'status'");
    if (res->status == INS_EXIT_OK)
        ck_assert_str_eq(status, "complete");
    else
        ck_assert_str_ne(status, "complete");
    sqlite3_close(c);
}

static void truncation_run(const char *name, int cuts)
{
    char *dir = ck_tmpdir();
    blob b = load(name);
    size_t nrec;
    uint64_t *starts = record_starts(dir, &b, &nrec);
    char *in = ck_path(dir, "cut.pftrace");
    char *db = ck_path(dir, "cut.db");
    rng_state = 0x9e3779b97f4a7c15ull;
    for (int i = 0; i < cuts; i++) {
        /* Every 4th cut lands exactly on a record boundary. */
        size_t cut;
        if (i % 4 == 0)
            cut = (size_t)starts[1 + rnd() % nrec];
        else
            cut = 1 + (size_t)(rnd() % (b.n - 1));
        write_file(in, b.d, cut);
        size_t whole = 0; /* records entirely before the cut */
        while (whole < nrec && starts[whole + 1] <= cut)
            whole++;
        ins_result res;
        ins_exit st = ck_inspect(in, db, &res);
        ck_assert_uint_eq(res.packets, whole);
        if (whole < nrec && starts[whole] < cut) {
            ck_assert_msg(st == INS_EXIT_CORRUPT, "cut %zu: status %d", cut,
                          st);
            ck_assert_uint_eq(res.error_offset, starts[whole]);
            ck_assert_ptr_nonnull(strstr(res.message, "truncated"));
        } else {
            ck_assert_int_eq(st, INS_EXIT_OK);
        }
        ck_assert_uint_eq(res.bytes_decoded, whole ? starts[whole] : 0);
        check_db(db, &res);
    }
    free(starts);
    free(b.d);
    free(in);
    free(db);
    ck_rmdir(dir);
}

START_TEST(test_fuzz_truncation_discard)
{
    truncation_run("discard_v2.pftrace", 80);
}
END_TEST

START_TEST(test_fuzz_truncation_ring_loss)
{
    truncation_run("ring_loss_v2.pftrace", 12);
}
END_TEST

static void corruption_run(const char *name, int rounds, uint64_t seed)
{
    char *dir = ck_tmpdir();
    blob b = load(name);
    uint8_t *copy = malloc(b.n);
    ck_assert_ptr_nonnull(copy);
    char *in = ck_path(dir, "bad.pftrace");
    char *db = ck_path(dir, "bad.db");
    rng_state = seed;
    int ok = 0, corrupt = 0, refused = 0;
    for (int i = 0; i < rounds; i++) {
        memcpy(copy, b.d, b.n);
        int flips = 1 + (int)(rnd() % 8);
        for (int k = 0; k < flips; k++) {
            size_t at = (size_t)(rnd() % b.n);
            switch (rnd() % 3) {
            case 0: copy[at] ^= (uint8_t)(1u << (rnd() % 8)); break;
            case 1: copy[at] = (uint8_t)rnd(); break;
            default: copy[at] = 0xff; break; /* long varints */
            }
        }
        size_t len = b.n;
        if (rnd() % 4 == 0)
            len = 1 + (size_t)(rnd() % b.n);
        write_file(in, copy, len);
        ins_result res;
        ins_exit st = ck_inspect(in, db, &res);
        if (st == INS_EXIT_INPUT) {
            /* Only possible when the first bytes no longer look like a
             * trace: nothing written. */
            ck_assert_int_ne(res.format, INS_FORMAT_PROTO_TRACE);
            ck_assert_int_ne(access(db, F_OK), 0);
            refused++;
            continue;
        }
        ck_assert_msg(st == INS_EXIT_OK || st == INS_EXIT_CORRUPT,
                      "round %d: status %d: %s", i, st, res.message);
        if (st == INS_EXIT_CORRUPT) {
            corrupt++;
            ck_assert_uint_le(res.error_offset, len);
            ck_assert_uint_le(res.bytes_decoded, res.error_offset + 1);
            ck_assert_ptr_nonnull(strstr(res.message, "offset"));
        } else {
            ok++;
        }
        check_db(db, &res);
        unlink(db);
    }
    /* The corpus must actually exercise the error paths. */
    ck_assert_int_gt(corrupt, rounds / 4);
    (void)ok;
    (void)refused;
    free(copy);
    free(b.d);
    free(in);
    free(db);
    ck_rmdir(dir);
}

START_TEST(test_fuzz_corruption_discard)
{
    corruption_run("discard_v2.pftrace", 400, 0x1234567887654321ull);
}
END_TEST

START_TEST(test_fuzz_corruption_ok)
{
    corruption_run("ok_v2.pftrace", 12, 0xdeadbeefcafef00dull);
}
END_TEST

/* Corrupting compressed containers reaches the inflater and the decoder
 * of the packets inside them. */
START_TEST(test_fuzz_corruption_compressed)
{
    corruption_run("compressed.pftrace", 300, 0x0123456789abcdefull);
}
END_TEST

/* Garbage appended after a valid trace: the valid part is kept. */
START_TEST(test_fuzz_trailing_garbage)
{
    char *dir = ck_tmpdir();
    blob b = load("discard_v2.pftrace");
    size_t extra = 4096;
    uint8_t *buf = malloc(b.n + extra);
    ck_assert_ptr_nonnull(buf);
    memcpy(buf, b.d, b.n);
    rng_state = 42;
    for (size_t i = 0; i < extra; i++)
        buf[b.n + i] = (uint8_t)rnd();
    char *in = ck_path(dir, "g.pftrace");
    char *db = ck_path(dir, "g.db");
    write_file(in, buf, b.n + extra);
    ins_result res;
    ins_exit st = ck_inspect(in, db, &res);
    ck_assert_int_eq(st, INS_EXIT_CORRUPT);
    ck_assert_uint_ge(res.packets, 1625);
    ck_assert_uint_ge(res.error_offset, b.n);
    check_db(db, &res);
    /* The stats of the intact part are all there. */
    sqlite3 *c = ck_db_open(db);
    ck_assert_int_eq(ck_stat(c, "traced_buf_chunks_discarded", 0, -1), 214);
    sqlite3_close(c);
    free(buf);
    free(b.d);
    free(in);
    free(db);
    ck_rmdir(dir);
}
END_TEST

static Suite *fuzz_suite(void)
{
    Suite *s = suite_create("ins_fuzz");
    TCase *tc = TCK_CASE(s, "truncation", test_fuzz_truncation_discard,
                         test_fuzz_truncation_ring_loss);
    tcase_set_timeout(tc, 120);
    tc = TCK_CASE(s, "corruption", test_fuzz_corruption_discard,
                  test_fuzz_corruption_ok, test_fuzz_corruption_compressed,
                  test_fuzz_trailing_garbage);
    tcase_set_timeout(tc, 120);
    return s;
}

TCK_MAIN(fuzz_suite)
