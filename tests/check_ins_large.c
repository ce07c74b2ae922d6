/*
 * check_ins_large.c - a ~220 MB synthetic trace (made in a temp dir) is
 * inspected in a child process whose peak RSS (wait4 ru_maxrss) must stay
 * under a bound far below the trace size: streaming, not loading. The
 * trace has 120 000 ordinary 1 KiB packets on 8 sequences with periodic
 * loss flags, and one 96 MiB packet that must be streamed through the
 * 1 MiB window. Counts and derived stats are checked exactly.
 */
#include "check_ins_util.h"
#include "tck_main.h"

#include <sys/resource.h>
#include <sys/wait.h>

#define NSEQ 8
#define NPACKETS 120000
#define PAYLOAD 1000
#define HUGE_BYTES (96u << 20)
#define LOSS_EVERY 1000 /* every 1000th packet of a sequence is flagged */

/* Memory bound over the parent's baseline: reader window, scratch, the
 * SQLite page cache (8 MiB) and libraries. ASan keeps freed memory in
 * quarantine and adds redzones, so its builds get a wider bound (still
 * below the 96 MiB packet and the 220 MB trace). */
#if defined(__SANITIZE_ADDRESS__)
#define RSS_BOUND_KIB (160 * 1024)
#else
#define RSS_BOUND_KIB (32 * 1024)
#endif

static void write_huge_packet(FILE *f)
{
    /* TracePacket { trusted_packet_sequence_id: 20, for_testing {
     * str: <HUGE_BYTES 'x'> } } written without holding it in memory. */
    uint8_t inner_hdr[16], outer_hdr[16], rec_hdr[16];
    size_t ni = 0, no = 0, nr = 0;
    inner_hdr[ni++] = 0x0A;                                   /* str = 1 */
    ni += ck_put_varint(inner_hdr + ni, HUGE_BYTES);
    uint64_t test_event_len = ni + HUGE_BYTES;
    outer_hdr[no++] = 0x50;                                   /* seq id */
    outer_hdr[no++] = 20;
    outer_hdr[no++] = 0xA2;                                   /* field 900 */
    outer_hdr[no++] = 0x38;
    no += ck_put_varint(outer_hdr + no, test_event_len);
    uint64_t packet_len = no + test_event_len;
    rec_hdr[nr++] = 0x0A;
    nr += ck_put_varint(rec_hdr + nr, packet_len);
    ck_assert_uint_eq(fwrite(rec_hdr, 1, nr, f), nr);
    ck_assert_uint_eq(fwrite(outer_hdr, 1, no, f), no);
    ck_assert_uint_eq(fwrite(inner_hdr, 1, ni, f), ni);
    static uint8_t chunk[1 << 16];
    memset(chunk, 'x', sizeof(chunk));
    for (uint64_t left = HUGE_BYTES; left;) {
        size_t n = left < sizeof(chunk) ? (size_t)left : sizeof(chunk);
        ck_assert_uint_eq(fwrite(chunk, 1, n, f), n);
        left -= n;
    }
}

static void write_large_trace(const char *path)
{
    FILE *f = ck_fopen(path, "wb");
    static uint8_t payload[PAYLOAD];
    memset(payload, 'p', sizeof(payload));
    Perfetto__Protos__TestEvent ev = PERFETTO__PROTOS__TEST_EVENT__INIT;
    ev.str = (char *)"x";
    ev.has_counter = 1;
    for (int i = 0; i < NPACKETS; i++) {
        uint32_t seq = 2 + (uint32_t)(i % NSEQ);
        int nth = i / NSEQ; /* packet index within its sequence */
        tpkt p = PERFETTO__PROTOS__TRACE_PACKET__INIT;
        p.has_timestamp = 1;
        p.timestamp = 1000000 + (uint64_t)i;
        p.has_trusted_uid = 1;
        p.trusted_uid = 1000;
        p.has_trusted_packet_sequence_id = 1;
        p.trusted_packet_sequence_id = seq;
        p.has_trusted_pid = 1;
        p.trusted_pid = 100 + (int32_t)seq;
        if (nth > 0 && nth % LOSS_EVERY == 0) {
            p.has_previous_packet_dropped = 1;
            p.previous_packet_dropped = 65;
        }
        p.has_track_event = 1;
        p.track_event.len = sizeof(payload);
        p.track_event.data = payload;
        ev.counter = (uint64_t)i;
        p.for_testing = &ev;
        ck_write_packet(f, &p);
        if (i == NPACKETS / 2)
            write_huge_packet(f);
    }
    twriter w[NSEQ];
    twriter *wp[NSEQ];
    for (int s = 0; s < NSEQ; s++) {
        perfetto__protos__trace_stats__writer_stats__init(&w[s]);
        w[s].has_sequence_id = 1;
        w[s].sequence_id = 2 + (uint64_t)s;
        w[s].has_buffer = 1;
        w[s].buffer = (uint32_t)(s % 2);
        wp[s] = &w[s];
    }
    tstats st = PERFETTO__PROTOS__TRACE_STATS__INIT;
    st.n_writer_stats = NSEQ;
    st.writer_stats = wp;
    ck_write_stats_packet(f, 5000000, &st);
    ck_assert_int_eq(fclose(f), 0);
}

START_TEST(test_large_trace_bounded_memory)
{
    char *dir = ck_tmpdir();
    char *trace = ck_path(dir, "large.pftrace");
    char *db = ck_path(dir, "large.db");
    write_large_trace(trace);
    long size = ck_file_size(trace);
    ck_assert_int_gt(size, 200L * 1000 * 1000);

    struct rusage self;
    ck_assert_int_eq(getrusage(RUSAGE_SELF, &self), 0);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        ins_result res;
        ins_exit st = ck_inspect(trace, db, &res);
        _exit(st == INS_EXIT_OK ? 0 : 10 + (int)st);
    }
    int wstatus = 0;
    struct rusage child;
    ck_assert_int_eq(wait4(pid, &wstatus, 0, &child), pid);
    ck_assert(WIFEXITED(wstatus));
    ck_assert_int_eq(WEXITSTATUS(wstatus), 0);
    long grew = child.ru_maxrss - self.ru_maxrss;
    fprintf(stderr, "large trace: %ld bytes, child maxrss %ld KiB (parent "
            "%ld KiB, bound +%d KiB)\n", size, child.ru_maxrss,
            self.ru_maxrss, RSS_BOUND_KIB);
    ck_assert_msg(grew < RSS_BOUND_KIB, "inspecting %ld bytes took %ld KiB "
                  "more than the parent (bound %d KiB)", size, grew,
                  RSS_BOUND_KIB);

    sqlite3 *c = ck_db_open(db);
    ck_assert_int_eq(ck_q_int(c, -1, NULL, "select count(*) from packet"),
                     NPACKETS + 2);
    ck_assert_int_eq(ck_q_int(c, -1, NULL, "select size from packet where "
                              "seq_id = 20"),
                     /* seq id 2 + tag 2 + len 4 + str tag 1 + len 4 */
                     (int64_t)HUGE_BYTES + 13);
    ck_assert_int_eq(ck_q_int(c, -1, NULL, "select value from trace_info "
                              "where key = 'bytes_decoded'"), size);
    ck_assert_int_eq(ck_q_int(c, -1, NULL, "select sum(packets) from "
                              "sequence where seq_id between 2 and 9"),
                     NPACKETS);
    /* Each sequence has NPACKETS/NSEQ packets: flags at 1000, 2000, ... */
    int64_t per_seq = ((NPACKETS / NSEQ) - 1) / LOSS_EVERY;
    ck_assert_int_eq(ck_q_int(c, -1, NULL, "select loss_events from "
                              "sequence where seq_id = 2"), per_seq);
    ck_assert_int_eq(ck_stat(c, "traced_buf_sequence_packet_loss", 0, -1),
                     per_seq * NSEQ / 2);
    ck_assert_int_eq(ck_stat(c, "traced_buf_sequence_packet_loss", 1, -1),
                     per_seq * NSEQ / 2);
    ck_assert_int_eq(ck_stat(c, "traced_buf_data_loss_overwrite", 1, -1),
                     per_seq * NSEQ / 2);
    sqlite3_close(c);
    unlink(trace);
    free(trace);
    free(db);
    ck_rmdir(dir);
}
END_TEST

static Suite *large_suite(void)
{
    Suite *s = suite_create("ins_large");
    TCase *tc = TCK_CASE(s, "memory_bound", test_large_trace_bounded_memory);
    tcase_set_timeout(tc, 300);
    return s;
}

TCK_MAIN(large_suite)
