/*
 * check_cli.c - unit tests of the consumer CLI's library: the text-format
 * TraceConfig parser (tp_parse) incl. bad input, and the trace-file writer
 * (cons_out_*: record framing, loss flag counting, trace_stats capture,
 * malformed packets), and record's config reading (rcfg_*: text/binary
 * detection, binary kept byte for byte, Perfetto's string escapes and
 * typed data-source configs).
 */
#include "config.h"

#include <check.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bstr.h"
#include "cli_parse.h"
#include "consumer_client.h"
#include "consumer_int.h"
#include "rec_config.h"
#include "textproto.h"
#include "trace.pb-c.h"
#include "tck_main.h"

typedef Perfetto__Protos__TraceConfig TraceConfig;
#define TC_DESC (&perfetto__protos__trace_config__descriptor)

static TraceConfig *parse_ok(const char *text)
{
    ProtobufCMessage *m = NULL;
    char err[256];
    int rc = tp_parse(text, TC_DESC, &m, err, sizeof err);
    ck_assert_msg(rc == 0, "parse failed: %s", err);
    return (TraceConfig *)m;
}

static void parse_bad(const char *text, const char *needle)
{
    ProtobufCMessage *m = NULL;
    char err[256];
    ck_assert_int_eq(tp_parse(text, TC_DESC, &m, err, sizeof err), -EINVAL);
    ck_assert_ptr_null(m);
    ck_assert_msg(strstr(err, needle), "error '%s' lacks '%s'", err, needle);
}

START_TEST(test_textproto_full_config)
{
    TraceConfig *c = parse_ok(
        "# a comment\n"
        "buffers { size_kb: 4096 fill_policy: DISCARD }\n"
        "buffers: { size_kb: 0x400, fill_policy: RING_BUFFER; }\n"
        "data_sources {\n"
        "  config { name: \"shmtrace.synthetic\" target_buffer: 1\n"
        "           for_testing { message_count: 10 message_size: 32 } }\n"
        "  producer_name_filter: [\"a\", 'b']\n"
        "}\n"
        "duration_ms: 1500\n"
        "write_into_file: true file_write_period_ms: 200\n"
        "max_file_size_bytes: 18446744073709551615\n"
        "unique_session_name: \"my\" \"session\"\n"
        "builtin_data_sources < primary_trace_clock: BUILTIN_CLOCK_BOOTTIME >\n"
        "write_flush_mode: 3\n");
    ck_assert_uint_eq(c->n_buffers, 2);
    ck_assert_uint_eq(c->buffers[0]->size_kb, 4096);
    ck_assert_int_eq(c->buffers[0]->fill_policy, 2);
    ck_assert_uint_eq(c->buffers[1]->size_kb, 1024);
    ck_assert_int_eq(c->buffers[1]->fill_policy, 1);
    ck_assert_uint_eq(c->n_data_sources, 1);
    ck_assert_str_eq(c->data_sources[0]->config->name, "shmtrace.synthetic");
    ck_assert(c->data_sources[0]->config->has_target_buffer);
    ck_assert_uint_eq(c->data_sources[0]->config->target_buffer, 1);
    ck_assert_uint_eq(c->data_sources[0]->config->for_testing->message_count,
                      10);
    ck_assert_uint_eq(c->data_sources[0]->n_producer_name_filter, 2);
    ck_assert_str_eq(c->data_sources[0]->producer_name_filter[1], "b");
    ck_assert(c->has_duration_ms);
    ck_assert_uint_eq(c->duration_ms, 1500);
    ck_assert(c->write_into_file);
    ck_assert_uint_eq(c->file_write_period_ms, 200);
    ck_assert_uint_eq(c->max_file_size_bytes, UINT64_MAX);
    ck_assert_str_eq(c->unique_session_name, "mysession");
    ck_assert_int_eq(c->builtin_data_sources->primary_trace_clock, 6);
    ck_assert_int_eq(c->write_flush_mode, 3);
    /* The result is a normal protobuf-c message: it packs, and a round
     * trip through the wire keeps the values. */
    size_t n = perfetto__protos__trace_config__get_packed_size(c);
    uint8_t *buf = malloc(n);
    perfetto__protos__trace_config__pack(c, buf);
    TraceConfig *d = perfetto__protos__trace_config__unpack(NULL, n, buf);
    ck_assert_ptr_nonnull(d);
    ck_assert_uint_eq(d->buffers[1]->size_kb, 1024);
    ck_assert_str_eq(d->unique_session_name, "mysession");
    perfetto__protos__trace_config__free_unpacked(d, NULL);
    free(buf);
    protobuf_c_message_free_unpacked(&c->base, NULL);
}
END_TEST

START_TEST(test_textproto_empty_and_escapes)
{
    TraceConfig *c = parse_ok("  \n# only a comment\n");
    ck_assert_uint_eq(c->n_buffers, 0);
    protobuf_c_message_free_unpacked(&c->base, NULL);
    c = parse_ok("unique_session_name: \"a\\tb\\x41\\\"\"");
    ck_assert_str_eq(c->unique_session_name, "a\tbA\"");
    protobuf_c_message_free_unpacked(&c->base, NULL);
}
END_TEST

START_TEST(test_textproto_perfetto_escapes_and_typed_configs)
{
    /* Perfetto's escapes: octal \NNN, \a \b \f \v \?; adjacent strings. */
    TraceConfig *c = parse_ok(
        "data_sources { config { name: \"d\"\n"
        "  legacy_config: \"caf\\303\\251 \\a\\b\\f\\v\\?\" \"!\"\n"
        "  track_event_config { enabled_categories: \"x\"\n"
        "                       disable_incremental_timestamps: true }\n"
        "  ftrace_config { ftrace_events: \"sched/sched_switch\"\n"
        "    print_filter { rules { atrace_msg { type: \"C\" } allow: true } }\n"
        "    ksyms_mem_policy: KSYMS_RETAIN }\n"
        "  for_testing { dummy_fields { field_bytes: \"\\000\\377\"\n"
        "                               field_sint32: 65 field_float: 0.5 } }\n"
        "} }\n");
    const Perfetto__Protos__DataSourceConfig *d = c->data_sources[0]->config;
    ck_assert_str_eq(d->legacy_config, "caf\303\251 \a\b\f\v?!");
    ck_assert_str_eq(d->track_event_config->enabled_categories[0], "x");
    ck_assert(d->track_event_config->disable_incremental_timestamps);
    ck_assert_uint_eq(d->ftrace_config->n_ftrace_events, 1);
    ck_assert(d->ftrace_config->print_filter->rules[0]->match_case ==
              PERFETTO__PROTOS__FTRACE_CONFIG__PRINT_FILTER__RULE__MATCH_ATRACE_MSG);
    ck_assert_int_eq(d->ftrace_config->ksyms_mem_policy, 2);
    const Perfetto__Protos__TestConfig__DummyFields *f =
        d->for_testing->dummy_fields;
    ck_assert_uint_eq(f->field_bytes.len, 2);
    ck_assert_uint_eq(f->field_bytes.data[0], 0);
    ck_assert_uint_eq(f->field_bytes.data[1], 0xff);
    ck_assert_int_eq(f->field_sint32, 65);
    protobuf_c_message_free_unpacked(&c->base, NULL);
    parse_bad("unique_session_name: \"\\400\"", "octal");
}
END_TEST

static char *write_tmp(const void *data, size_t len)
{
    char *path = strdup("/tmp/check_cli_cfg.XXXXXX");
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(write(fd, data, len), (ssize_t)len);
    close(fd);
    return path;
}

START_TEST(test_rcfg_text_binary_detection)
{
    char err[512];
    rcfg rc;
    /* Text, detected. */
    static const char text[] = "buffers { size_kb: 64 }\nduration_ms: 5\n";
    char *tp = write_tmp(text, sizeof text - 1);
    ck_assert_int_eq(rcfg_load(&rc, tp, false, err, sizeof err), 0);
    ck_assert(rc.was_text);
    ck_assert_uint_eq(rc.cfg->buffers[0]->size_kb, 64);
    rcfg_free(&rc);
    /* UTF-8 text (a comment with non-ASCII letters): text. */
    static const char u8[] = "# caf\303\251 \342\202\254\nduration_ms: 9\n";
    char *up = write_tmp(u8, sizeof u8 - 1);
    ck_assert_int_eq(rcfg_load(&rc, up, false, err, sizeof err), 0);
    ck_assert(rc.was_text);
    ck_assert_uint_eq(rc.cfg->duration_ms, 9);
    rcfg_free(&rc);
    unlink(up);
    free(up);
    /* Binary: kept byte for byte, even with fields in an unusual order
     * (duration_ms 3 before buffers 1) that an encoder would reorder. */
    static const uint8_t bin[] = { 0x18, 0x05, 0x0a, 0x02, 0x08, 0x40 };
    char *bp = write_tmp(bin, sizeof bin);
    ck_assert_int_eq(rcfg_load(&rc, bp, false, err, sizeof err), 0);
    ck_assert(!rc.was_text);
    ck_assert_uint_eq(rc.cfg->duration_ms, 5);
    uint8_t *out = NULL;
    size_t n = 0;
    ck_assert_int_eq(rcfg_final(&rc, &out, &n), 0);
    ck_assert_uint_eq(n, sizeof bin);
    ck_assert_mem_eq(out, bin, n);
    free(out);
    /* A flag changed it: re-encoded, with the change. */
    rc.cfg->duration_ms = 7;
    rc.modified = true;
    ck_assert_int_eq(rcfg_final(&rc, &out, &n), 0);
    Perfetto__Protos__TraceConfig *back =
        perfetto__protos__trace_config__unpack(NULL, n, out);
    ck_assert_ptr_nonnull(back);
    ck_assert_uint_eq(back->duration_ms, 7);
    ck_assert_uint_eq(back->buffers[0]->size_kb, 64);
    perfetto__protos__trace_config__free_unpacked(back, NULL);
    free(out);
    rcfg_free(&rc);
    /* --txt on a binary file: a parse error naming the file. */
    ck_assert_int_lt(rcfg_load(&rc, bp, true, err, sizeof err), 0);
    ck_assert_ptr_nonnull(strstr(err, bp));
    /* Non-printable and not protobuf. */
    static const uint8_t junk[] = { 0x0a, 0xff, 0xff, 0x01 };
    char *jp = write_tmp(junk, sizeof junk);
    ck_assert_int_lt(rcfg_load(&rc, jp, false, err, sizeof err), 0);
    ck_assert_ptr_nonnull(strstr(err, "--txt"));
    /* Empty, missing. */
    char *ep = write_tmp("", 0);
    ck_assert_int_lt(rcfg_load(&rc, ep, false, err, sizeof err), 0);
    ck_assert_ptr_nonnull(strstr(err, "empty"));
    ck_assert_int_lt(rcfg_load(&rc, "/nonexistent/c.pb", false, err,
                               sizeof err), 0);
    ck_assert_ptr_nonnull(strstr(err, "/nonexistent/c.pb"));
    unlink(tp);
    unlink(bp);
    unlink(jp);
    unlink(ep);
    free(tp);
    free(bp);
    free(jp);
    free(ep);
}
END_TEST

START_TEST(test_textproto_errors)
{
    parse_bad("bogus: 1", "unknown field 'bogus'");
    parse_bad("duration_ms: -5", "must not be negative");
    parse_bad("duration_ms: 4294967296", "out of range");
    parse_bad("duration_ms: \"10\"", "expected a number");
    parse_bad("duration_ms: 10 duration_ms: 20", "set twice");
    parse_bad("buffers { size_kb: 1 fill_policy: SOMETIMES }",
              "unknown value SOMETIMES");
    parse_bad("buffers { size_kb: 1", "missing '}'");
    parse_bad("buffers size_kb: 1", "expected '{'");
    parse_bad("unique_session_name: \"abc", "unterminated string");
    parse_bad("unique_session_name: abc", "expected a quoted string");
    parse_bad("write_into_file: maybe", "expected true or false");
    parse_bad("\n\nduration_ms 5", "line 3");
    parse_bad("duration_ms: 0x", "bad number");
    /* deep nesting is bounded, not a stack overflow */
    static char deep[8192];
    deep[0] = 0;
    for (int i = 0; i < 100; i++)
        strcat(deep, "data_sources { config { for_testing { ");
    parse_bad(deep, "");
}
END_TEST

START_TEST(test_textproto_garbage_never_crashes)
{
    uint32_t x = 7;
    char buf[200];
    static const char alphabet[] = "{}<>[]:;,\"'#\\\n abc_019x-.";
    for (int round = 0; round < 3000; round++) {
        size_t n = 1 + round % (sizeof buf - 1);
        for (size_t i = 0; i < n; i++) {
            x = x * 1103515245u + 12345u;
            buf[i] = alphabet[(x >> 16) % (sizeof alphabet - 1)];
        }
        buf[n] = 0;
        ProtobufCMessage *m = NULL;
        char err[128];
        if (tp_parse(buf, TC_DESC, &m, err, sizeof err) == 0)
            protobuf_c_message_free_unpacked(m, NULL);
    }
}
END_TEST

/* ---- trace writer -------------------------------------------------- */

static char tmpl[64];

static int tmp_fd(void)
{
    snprintf(tmpl, sizeof tmpl, "/tmp/check_cli.XXXXXX");
    int fd = mkstemp(tmpl);
    ck_assert_int_ge(fd, 0);
    unlink(tmpl);
    return fd;
}

static size_t read_all(int fd, uint8_t *buf, size_t cap)
{
    ssize_t n = pread(fd, buf, cap, 0);
    ck_assert_int_ge(n, 0);
    return (size_t)n;
}

START_TEST(test_out_records_and_flags)
{
    int fd = tmp_fd();
    cons_out o;
    ck_assert_int_eq(cons_out_init(&o, fd), 0);
    /* timestamp=5 */
    static const uint8_t p1[] = { 0x40, 0x05 };
    /* previous_packet_dropped (42) = 1: tag D0 02 */
    static const uint8_t p2[] = { 0x40, 0x06, 0xd0, 0x02, 0x01 };
    /* flag set then cleared (last one wins) */
    static const uint8_t p3[] = { 0xd0, 0x02, 0x01, 0xd0, 0x02, 0x00 };
    ck_assert_int_eq(cons_out_packet(p1, sizeof p1, &o), 0);
    ck_assert_int_eq(cons_out_packet(p2, sizeof p2, &o), 0);
    ck_assert_int_eq(cons_out_packet(p3, sizeof p3, &o), 0);
    /* a 200-byte packet needs a 2-byte varint length */
    uint8_t big[200];
    memset(big, 0, sizeof big);
    big[0] = 0x92; /* field 18, wt 2 */
    big[1] = 0x01;
    big[2] = 0xc4;  /* len 196 as a 2-byte varint: 2 + 2 + 196 = 200 */
    big[3] = 0x01;
    ck_assert_int_eq(cons_out_packet(big, sizeof big, &o), 0);
    ck_assert_int_eq(cons_out_flush(&o), 0);
    ck_assert_uint_eq(o.packets, 4);
    ck_assert_uint_eq(o.flagged_packets, 1);
    ck_assert_uint_eq(o.malformed, 0);
    uint8_t file[512];
    size_t n = read_all(fd, file, sizeof file);
    ck_assert_uint_eq(n, o.bytes);
    ck_assert_uint_eq(n, (2 + 2) + (2 + 5) + (2 + 6) + (3 + 200));
    ck_assert_uint_eq(file[0], 0x0a);
    ck_assert_uint_eq(file[1], 2);
    ck_assert_uint_eq(file[4], 0x0a);
    ck_assert_uint_eq(file[5], 5);
    size_t off = 4 + 7 + 8;
    ck_assert_uint_eq(file[off], 0x0a);
    ck_assert_uint_eq(file[off + 1], 0xc8); /* 200 = 0xc8 0x01 */
    ck_assert_uint_eq(file[off + 2], 0x01);
    cons_out_fini(&o);
    close(fd);
}
END_TEST

START_TEST(test_out_trace_stats_captured)
{
    int fd = tmp_fd();
    cons_out o;
    ck_assert_int_eq(cons_out_init(&o, fd), 0);
    Perfetto__Protos__TraceStats st = PERFETTO__PROTOS__TRACE_STATS__INIT;
    Perfetto__Protos__TraceStats__BufferStats bs =
        PERFETTO__PROTOS__TRACE_STATS__BUFFER_STATS__INIT;
    Perfetto__Protos__TraceStats__BufferStats *bsp = &bs;
    bs.has_chunks_overwritten = true;
    bs.chunks_overwritten = 3;
    bs.has_trace_writer_packet_loss = true;
    bs.trace_writer_packet_loss = 2;
    st.n_buffer_stats = 1;
    st.buffer_stats = &bsp;
    st.has_chunks_discarded = true;
    st.chunks_discarded = 4;
    Perfetto__Protos__TracePacket p = PERFETTO__PROTOS__TRACE_PACKET__INIT;
    p.trace_stats = &st;
    uint8_t buf[256];
    size_t n = perfetto__protos__trace_packet__pack(&p, buf);
    ck_assert_int_eq(cons_out_packet(buf, n, &o), 0);
    ck_assert_ptr_nonnull(o.last_stats);
    cons_losses l;
    cons_losses_from_stats(o.last_stats, &l);
    ck_assert_uint_eq(l.chunks_overwritten, 3);
    ck_assert_uint_eq(l.chunks_discarded, 4);
    ck_assert_uint_eq(l.trace_writer_packet_loss, 2);
    cons_losses_from_stats(NULL, &l);
    ck_assert_uint_eq(l.chunks_overwritten, 0);
    cons_out_fini(&o);
    close(fd);
}
END_TEST

START_TEST(test_out_malformed_packets_counted)
{
    int fd = tmp_fd();
    cons_out o;
    ck_assert_int_eq(cons_out_init(&o, fd), 0);
    static const uint8_t bad1[] = { 0x0a, 0x7f, 0x00 };        /* len past end */
    static const uint8_t bad2[] = { 0x40 };                    /* no value */
    static const uint8_t bad3[] = { 0x0f };                    /* wire type 7 */
    static const uint8_t bad4[] = { 0x40, 0xff, 0xff, 0xff, 0xff, 0xff,
                                    0xff, 0xff, 0xff, 0xff, 0xff, 0x01 };
    static const uint8_t bad5[] = { 0x9a, 0x02, 0x03, 0xff, 0xff, 0xff };
    ck_assert_int_eq(cons_out_packet(bad1, sizeof bad1, &o), 0);
    ck_assert_int_eq(cons_out_packet(bad2, sizeof bad2, &o), 0);
    ck_assert_int_eq(cons_out_packet(bad3, sizeof bad3, &o), 0);
    ck_assert_int_eq(cons_out_packet(bad4, sizeof bad4, &o), 0);
    /* trace_stats with garbage inside: written, stats not captured */
    ck_assert_int_eq(cons_out_packet(bad5, sizeof bad5, &o), 0);
    ck_assert_uint_eq(o.packets, 5);
    ck_assert_uint_eq(o.malformed, 4);
    ck_assert_ptr_null(o.last_stats);
    cons_out_fini(&o);
    close(fd);
}
END_TEST

START_TEST(test_out_write_error_reported)
{
    int p[2];
    ck_assert_int_eq(pipe(p), 0);
    close(p[0]); /* writes now fail with EPIPE */
    cons_out o;
    ck_assert_int_eq(cons_out_init(&o, p[1]), 0);
    static const uint8_t pk[] = { 0x40, 0x01 };
    cons_out_packet(pk, sizeof pk, &o);
    ck_assert_int_eq(cons_out_flush(&o), -EPIPE);
    ck_assert_int_eq(o.error, -EPIPE);
    cons_out_fini(&o);
    close(p[1]);
}
END_TEST

/* A packet of `len` bytes: field 18 with a 4-byte length, zeros; with
 * previous_packet_dropped = 1 at its end if flagged. */
static uint8_t *big_record(size_t len, bool flagged)
{
    uint8_t *p = calloc(1, len);
    uint32_t inner = (uint32_t)(len - 6 - (flagged ? 3 : 0));
    p[0] = 0x92;
    p[1] = 0x01;
    p[2] = (uint8_t)(0x80 | (inner & 0x7f));
    p[3] = (uint8_t)(0x80 | ((inner >> 7) & 0x7f));
    p[4] = (uint8_t)(0x80 | ((inner >> 14) & 0x7f));
    p[5] = (uint8_t)(inner >> 21);
    if (flagged)
        memcpy(p + len - 3, "\xd0\x02\x01", 3);
    return p;
}

START_TEST(test_out_scan_file)
{
    int fd = tmp_fd();
    cons_out o;
    ck_assert_int_eq(cons_out_init(&o, fd), 0);
    static const uint8_t p1[] = { 0x40, 0x05 };
    static const uint8_t p2[] = { 0x40, 0x06, 0xd0, 0x02, 0x01 };
    /* a 3 MiB packet: larger than the scanner's first buffer */
    size_t big_len = 3u << 20;
    uint8_t *big = big_record(big_len, false);
    for (int i = 0; i < 1000; i++)
        cons_out_packet(i % 2 ? p2 : p1, i % 2 ? sizeof p2 : sizeof p1, &o);
    cons_out_packet(big, big_len, &o);
    cons_out_packet(p2, sizeof p2, &o);
    ck_assert_int_eq(cons_out_flush(&o), 0);
    uint64_t bytes = o.bytes;
    cons_out_fini(&o);
    free(big);
    cons_out s;
    /* Mostly small records: cons_out_scan_fd reads the file; the same
     * answers as cons_out_scan_fd_read. */
    for (int k = 0; k < 2; k++) {
        memset(&s, 0, sizeof s);
        ck_assert_int_eq(k ? cons_out_scan_fd_read(&s, fd)
                           : cons_out_scan_fd(&s, fd), 0);
        ck_assert_uint_eq(s.packets, 1002);
        ck_assert_uint_eq(s.flagged_packets, 501);
        ck_assert_uint_eq(s.malformed, 0);
        ck_assert_uint_eq(s.bytes, bytes);
        cons_out_fini(&s);
    }
    /* truncated: the last record lost its tail (both ways) */
    ck_assert_int_eq(ftruncate(fd, (off_t)bytes - 1), 0);
    for (int k = 0; k < 2; k++) {
        memset(&s, 0, sizeof s);
        ck_assert_int_eq(k ? cons_out_scan_fd_read(&s, fd)
                           : cons_out_scan_fd(&s, fd), -EBADMSG);
        ck_assert_uint_eq(s.packets, 1001);
        cons_out_fini(&s);
    }
    close(fd);
    /* not a trace: wrong record tag, overlong varint, absurd length */
    static const uint8_t junk1[] = { 0x12, 0x01, 0x00 };
    static const uint8_t junk2[] = { 0x0a, 0xff, 0xff, 0xff, 0xff, 0xff,
                                     0xff, 0xff, 0xff, 0xff, 0xff, 0x01 };
    static const uint8_t junk3[] = { 0x0a, 0xff, 0xff, 0xff, 0xff, 0x0f };
    const uint8_t *junks[] = { junk1, junk2, junk3 };
    size_t lens[] = { sizeof junk1, sizeof junk2, sizeof junk3 };
    for (int i = 0; i < 3; i++) {
        fd = tmp_fd();
        ck_assert_int_eq(write(fd, junks[i], lens[i]), (ssize_t)lens[i]);
        memset(&s, 0, sizeof s);
        ck_assert_int_eq(cons_out_scan_fd(&s, fd), -EBADMSG);
        ck_assert_uint_eq(s.packets, 0);
        cons_out_fini(&s);
        close(fd);
    }
    /* empty file: zero packets, no error */
    fd = tmp_fd();
    memset(&s, 0, sizeof s);
    ck_assert_int_eq(cons_out_scan_fd(&s, fd), 0);
    ck_assert_uint_eq(s.packets, 0);
    close(fd);
}
END_TEST

/* Ends o (written into fd), scans fd with cons_out_scan_fd and checks its
 * counts; closes fd. */
static void scan_and_check(cons_out *o, int fd, uint64_t packets,
                           uint64_t flagged, uint64_t malformed)
{
    ck_assert_int_eq(cons_out_flush(o), 0);
    cons_out_fini(o);
    cons_out s;
    memset(&s, 0, sizeof s);
    ck_assert_int_eq(cons_out_scan_fd(&s, fd), 0);
    ck_assert_uint_eq(s.packets, packets);
    ck_assert_uint_eq(s.flagged_packets, flagged);
    ck_assert_uint_eq(s.malformed, malformed);
    cons_out_fini(&s);
    close(fd);
}

/* Varints of every length 1-11 in a timestamp (field 8) before and after
 * previous_packet_dropped = 1, with and without 8 bytes after them (the
 * scan skips a value it does not need with one load when it can): a
 * varint of up to 10 bytes is skipped exactly, an 11-byte one makes the
 * packet malformed. */
START_TEST(test_out_scan_varint_lengths)
{
    int fd = tmp_fd();
    cons_out o;
    ck_assert_int_eq(cons_out_init(&o, fd), 0);
    uint64_t want_flagged = 0, want_malformed = 0, n = 0;
    for (int len = 1; len <= 11; len++) {
        for (int tail = 0; tail < 2; tail++) {
            uint8_t pk[64];
            size_t k = 0;
            pk[k++] = 0x40;
            for (int i = 0; i + 1 < len; i++)
                pk[k++] = 0xff;
            pk[k++] = 0x01;
            if (tail) {              /* then 42 = 1 and 8 more bytes */
                memcpy(pk + k, "\xd0\x02\x01\x41\x01\x02\x03\x04\x05\x06"
                               "\x07\x08", 12);
                k += 12;
            } else {                 /* 42 = 1 first, the varint last */
                memmove(pk + 3, pk, k);
                memcpy(pk, "\xd0\x02\x01", 3);
                k += 3;
            }
            cons_out_packet(pk, k, &o);
            n++;
            if (len <= 10)
                want_flagged++;
            else
                want_malformed++;
        }
    }
    scan_and_check(&o, fd, n, want_flagged, want_malformed);
}
END_TEST

/* The service's own count of its file replaces the scan only when it is
 * complete, of the file's size and consistent; otherwise nothing in o
 * changes (the caller scans). */
START_TEST(test_out_take_file_counts)
{
    Perfetto__Protos__TraceStats st = PERFETTO__PROTOS__TRACE_STATS__INIT;
    Perfetto__Protos__TraceStats__ShmtraceFileStats f =
        PERFETTO__PROTOS__TRACE_STATS__SHMTRACE_FILE_STATS__INIT;
    cons_out o;
    memset(&o, 0, sizeof o);
    o.packets = 7;                       /* as a follow left it */
    o.flagged_packets = 1;
    o.bytes = o.scanned = 70;
    ck_assert(!cons_out_take_file_counts(&o, NULL, 1000));
    ck_assert(!cons_out_take_file_counts(&o, &st, 1000));  /* traced */
    st.shmtrace_file = &f;
    f.packets = 90;
    f.bytes = 1000;
    f.flagged_packets = 3;
    ck_assert(!cons_out_take_file_counts(&o, &st, 1000));  /* running */
    f.complete = true;
    ck_assert(!cons_out_take_file_counts(&o, &st, 1001));  /* changed */
    ck_assert(!cons_out_take_file_counts(&o, &st, 999));
    f.flagged_packets = 91;                                /* nonsense */
    ck_assert(!cons_out_take_file_counts(&o, &st, 1000));
    f.flagged_packets = 3;
    f.packets = 501;                 /* more records than 2-byte ones fit */
    ck_assert(!cons_out_take_file_counts(&o, &st, 1000));
    ck_assert_uint_eq(o.packets, 7);
    ck_assert_uint_eq(o.flagged_packets, 1);
    ck_assert_uint_eq(o.bytes, 70);
    ck_assert_uint_eq(o.scanned, 70);
    f.packets = 90;
    ck_assert(cons_out_take_file_counts(&o, &st, 1000));
    ck_assert_uint_eq(o.packets, 90);
    ck_assert_uint_eq(o.flagged_packets, 3);
    ck_assert_uint_eq(o.bytes, 1000);
    ck_assert_uint_eq(o.scanned, 1000);
    ck_assert_uint_eq(o.malformed, 0);
}
END_TEST

/* Tags, values and lengths of one and two bytes take the scan's short
 * path, the rest its loop: a 2-byte previous_packet_dropped tag with
 * 2-byte values (257, 256) and a 3-byte one (16384), a tag cut after its
 * first byte at the packet's end, a 3-byte (overlong) tag of field 42, a
 * zero flag, and a 2-byte length with no body behind it. */
START_TEST(test_out_scan_short_varints)
{
    static const struct {
        const char *bytes;
        size_t len;
        bool flagged, malformed;
    } cases[] = {
        { "\xd0\x02\x81\x02", 4, true, false },     /* 42 = 257 */
        { "\xd0\x02\x80\x02", 4, true, false },     /* 42 = 256 */
        { "\x40\x01\xd0", 3, false, true },          /* tag cut */
        { "\xd0", 1, false, true },                  /* tag cut, alone */
        { "\xd0\x82\x00\x01", 4, true, false },     /* 3-byte tag */
        { "\xd0\x02\x80\x80\x01", 5, true, false }, /* 42 = 16384 */
        { "\xd0\x02\x00", 3, false, false },         /* 42 = 0 */
        { "\x0a\x81\x01", 3, false, true },          /* length 129, no body */
    };
    int fd = tmp_fd();
    cons_out o;
    ck_assert_int_eq(cons_out_init(&o, fd), 0);
    uint64_t want_flagged = 0, want_malformed = 0;
    size_t n = sizeof cases / sizeof cases[0];
    for (size_t i = 0; i < n; i++) {
        cons_out_packet((const uint8_t *)cases[i].bytes, cases[i].len, &o);
        want_flagged += cases[i].flagged;
        want_malformed += cases[i].malformed;
    }
    scan_and_check(&o, fd, n, want_flagged, want_malformed);
}
END_TEST

/* Mostly large records: cons_out_scan_fd walks the file by its headers,
 * pread()ing a window at each; with windows of 4 KiB (the product's), 64
 * bytes (smaller than most field runs), 5000 bytes (records across
 * windows) and 1 MiB (many records in one), the same answers as
 * cons_out_scan_fd_read; truncated too. */
START_TEST(test_out_scan_file_sparse)
{
    int fd = tmp_fd();
    cons_out o;
    ck_assert_int_eq(cons_out_init(&o, fd), 0);
    static const uint8_t small[] = { 0x40, 0x06, 0xd0, 0x02, 0x01 };
    size_t want_flagged = 0, n = 0;
    for (int i = 0; i < 300; i++) {  /* the last is not flagged */
        size_t len = i == 150 ? (3u << 20) : 9000 + (size_t)i * 97;
        uint8_t *pk = big_record(len, i % 3 == 0);
        cons_out_packet(pk, len, &o);
        free(pk);
        want_flagged += i % 3 == 0;
        n++;
        if (i % 50 == 0) {
            cons_out_packet(small, sizeof small, &o);
            want_flagged++;
            n++;
        }
    }
    ck_assert_int_eq(cons_out_flush(&o), 0);
    uint64_t bytes = o.bytes;
    cons_out_fini(&o);
    static const size_t windows[] = { 4096, 64, 5000, 1u << 20 };
    for (int cut = 0; cut < 2; cut++) {
        if (cut)
            ck_assert_int_eq(ftruncate(fd, (off_t)bytes - 1), 0);
        for (int k = 0; k < 5; k++) {
            cons_out s;
            memset(&s, 0, sizeof s);
            int rc;
            if (k < 4) {
                cons__scan_window = windows[k];
                rc = cons_out_scan_fd(&s, fd);
            } else {
                rc = cons_out_scan_fd_read(&s, fd);
            }
            ck_assert_int_eq(rc, cut ? -EBADMSG : 0);
            ck_assert_uint_eq(s.packets, n - (size_t)cut);
            ck_assert_uint_eq(s.flagged_packets, want_flagged);
            ck_assert_uint_eq(s.malformed, 0);
            if (!cut)
                ck_assert_uint_eq(s.bytes, bytes);
            cons_out_fini(&s);
        }
    }
    cons__scan_window = 4096;
    close(fd);
}
END_TEST

/* Counts the scans that walk by headers (cons__scan_sparse_hook). */
static int sparse_calls;
static void count_sparse(int fd)
{
    (void)fd;
    sparse_calls++;
}

/* Packets larger than the header walk's window, of every kind of
 * top-level field: the walk by headers gives the answers the read() path
 * gives, and the ones expected: 42 counts when its last value is set,
 * TraceStats bodies larger than the window are read whole (the last one
 * kept), fixed-size fields are stepped over, and a bad wire type, a
 * length past the packet's end or a varint cut by it make the packet
 * malformed. */
/* A length-delimited field of `len` bytes of 'x'. */
static void bs_xfield(bstr *b, uint32_t field, size_t len)
{
    bs_tag(b, field, 2);
    bs_varint(b, len);
    for (size_t i = 0; i < len; i++)
        bs_put(b, "x", 1);
}

START_TEST(test_out_scan_sparse_fields)
{
    int fd = tmp_fd();
    cons_out o;
    ck_assert_int_eq(cons_out_init(&o, fd), 0);
    size_t n = 0;
    uint64_t want_flagged = 0, want_malformed = 0, last_discarded = 0;
    for (int i = 0; i < 120; i++) {
        bstr pk = {0};
        size_t body = 9000 + (size_t)i;
        switch (i % 7) {
        case 0: /* timestamp, body, 42 = 1 */
            bs_tag(&pk, 8, 0);
            bs_varint(&pk, 1700000000000000000ull + (uint64_t)i);
            bs_xfield(&pk, 900, body);
            bs_tag(&pk, 42, 0);
            bs_varint(&pk, 1);
            want_flagged++;
            break;
        case 1: /* 42 = 1, body, 42 = 0: the last one wins */
            bs_tag(&pk, 42, 0);
            bs_varint(&pk, 1);
            bs_xfield(&pk, 900, body);
            bs_tag(&pk, 42, 0);
            bs_varint(&pk, 0);
            break;
        case 2: /* fixed64, fixed32, body, 42 = 1 */
            bs_tag(&pk, 9, 1);
            bs_put(&pk, "\xff\xff\xff\xff\xff\xff\xff\xff", 8);
            bs_tag(&pk, 10, 5);
            bs_put(&pk, "\xff\xff\xff\xff", 4);
            bs_xfield(&pk, 900, body);
            bs_tag(&pk, 42, 0);
            bs_varint(&pk, 1);
            want_flagged++;
            break;
        case 3: { /* body, then a TraceStats of ~6000 bytes */
            bstr st = {0};
            bs_tag(&st, 8, 0);                  /* chunks_discarded */
            bs_varint(&st, 77 + (uint64_t)i);
            bs_xfield(&st, 5999, 6000 + (size_t)i);
            bs_xfield(&pk, 900, body);
            bs_tag(&pk, 35, 2);
            bs_varint(&pk, st.n);
            bs_put(&pk, st.d, st.n);
            free(st.d);
            last_discarded = 77 + (uint64_t)i;
            break;
        }
        case 4: /* body, then wire type 7 */
            bs_xfield(&pk, 900, body);
            bs_put(&pk, (const uint8_t[]){ 3 << 3 | 7 }, 1);
            want_malformed++;
            break;
        case 5: /* a body declared one byte longer than the packet */
            bs_xfield(&pk, 900, body);
            bs_tag(&pk, 42, 0);
            bs_varint(&pk, 1);
            pk.d[2] = (uint8_t)(pk.d[2] + 1);  /* its length's low byte */
            want_malformed++;
            break;
        default: /* body, 42 = 1, then a varint cut by the packet's end */
            bs_xfield(&pk, 900, body);
            bs_tag(&pk, 42, 0);
            bs_varint(&pk, 1);
            bs_put(&pk, (const uint8_t[]){ 8 << 3, 0xff }, 2);
            want_malformed++;
            break;
        }
        cons_out_packet(pk.d, pk.n, &o);
        free(pk.d);
        n++;
    }
    ck_assert_int_eq(cons_out_flush(&o), 0);
    uint64_t bytes = o.bytes;
    cons_out_fini(&o);
    static const size_t windows[] = { 4096, 64, 5000 };
    for (int k = 0; k < 4; k++) {
        cons_out s;
        memset(&s, 0, sizeof s);
        sparse_calls = 0;
        cons__scan_sparse_hook = count_sparse;
        if (k < 3) {
            cons__scan_window = windows[k];
            ck_assert_int_eq(cons_out_scan_fd(&s, fd), 0);
            ck_assert_int_eq(sparse_calls, 1);  /* by headers */
        } else {
            ck_assert_int_eq(cons_out_scan_fd_read(&s, fd), 0);
        }
        cons__scan_sparse_hook = NULL;
        ck_assert_uint_eq(s.packets, n);
        ck_assert_uint_eq(s.bytes, bytes);
        ck_assert_uint_eq(s.flagged_packets, want_flagged);
        ck_assert_uint_eq(s.malformed, want_malformed);
        ck_assert_ptr_nonnull(s.last_stats);
        ck_assert_uint_eq(s.last_stats->chunks_discarded, last_discarded);
        cons_out_fini(&s);
    }
    cons__scan_window = 4096;
    close(fd);
}
END_TEST

/* The walk by headers against the read() path on damaged files: a file of
 * large packets of every field kind, its bytes flipped at random or cut
 * short, 400 times (xorshift, fixed seed): with windows of 20, 64 and
 * 4096 bytes, the same return code, counts, position and last TraceStats
 * as cons_out_scan_fd_read (fuzz/fuzz_scan.c does the same unseeded). */
static uint64_t xs_state = 0x9e3779b97f4a7c15ull;
static uint64_t xs(void)
{
    xs_state ^= xs_state << 13;
    xs_state ^= xs_state >> 7;
    xs_state ^= xs_state << 17;
    return xs_state;
}

START_TEST(test_out_scan_sparse_mutated)
{
    bstr file = {0};
    for (int i = 0; i < 40; i++) {
        bstr pk = {0};
        int nf = 1 + (int)(xs() % 5);
        for (int f = 0; f < nf; f++) {
            switch (xs() % 6) {
            case 0:
                bs_tag(&pk, 42, 0);
                bs_varint(&pk, xs() % 2);
                break;
            case 4:
                bs_tag(&pk, 10, 5);
                bs_put(&pk, "\xa5\xa5\xa5\xa5", 4);
                break;
            case 1:
                bs_tag(&pk, 8, 0);
                bs_varint(&pk, xs());
                break;
            case 2:
                bs_tag(&pk, 9, 1);
                bs_put(&pk, "ZZZZZZZZ", 8);             /* 0x5a */
                break;
            case 3: {
                bstr st = {0};
                bs_tag(&st, 8, 0);
                bs_varint(&st, xs() % 1000);
                bs_xfield(&st, 5999, xs() % 500);
                bs_tag(&pk, 35, 2);
                bs_varint(&pk, st.n);
                bs_put(&pk, st.d, st.n);
                free(st.d);
                break;
            }
            default:
                bs_xfield(&pk, 900, 100 + xs() % 9000);
                break;
            }
        }
        bs_record(&file, &pk);
        free(pk.d);
    }
    size_t n = file.n;
    uint8_t *copy = malloc(n);
    for (int it = 0; it < 400; it++) {
        memcpy(copy, file.d, n);
        size_t len = n;
        int flips = (int)(xs() % 4);
        for (int f = 0; f < flips; f++)
            copy[xs() % n] = (uint8_t)xs();
        if (xs() % 3 == 0)
            len = (size_t)(xs() % n);
        int fd = tmp_fd();
        ck_assert_int_eq(pwrite(fd, copy, len, 0), (ssize_t)len);
        cons_out ref;
        memset(&ref, 0, sizeof ref);
        int ref_rc = cons_out_scan_fd_read(&ref, fd);
        static const size_t windows[] = { 20, 64, 4096 };
        for (int w = 0; w < 3; w++) {
            cons_out s;
            memset(&s, 0, sizeof s);
            int rc = cons__scan_fd_sparse(&s, fd, windows[w]);
            ck_assert_msg(rc == ref_rc && s.packets == ref.packets &&
                          s.bytes == ref.bytes &&
                          s.flagged_packets == ref.flagged_packets &&
                          s.malformed == ref.malformed &&
                          s.scanned == ref.scanned,
                          "iteration %d window %zu: rc %d/%d packets "
                          "%llu/%llu malformed %llu/%llu", it, windows[w],
                          rc, ref_rc, (unsigned long long)s.packets,
                          (unsigned long long)ref.packets,
                          (unsigned long long)s.malformed,
                          (unsigned long long)ref.malformed);
            ck_assert_int_eq(!s.last_stats, !ref.last_stats);
            if (s.last_stats)
                ck_assert_uint_eq(s.last_stats->chunks_discarded,
                                  ref.last_stats->chunks_discarded);
            cons_out_fini(&s);
        }
        cons_out_fini(&ref);
        close(fd);
    }
    free(copy);
    free(file.d);
}
END_TEST

/* Following a file being written: cons_out_scan_follow counts the whole
 * records there are, leaves a cut one for later, and the final
 * cons_out_scan_fd goes on from there (by mapping when the rest is large
 * records) to the same counts as one scan of the finished file; a file
 * cut under what was counted is -EIO. */
START_TEST(test_out_scan_follow)
{
    /* The finished file: 100 small records, 301 large ones (6 MiB). */
    int src = tmp_fd();
    cons_out w;
    ck_assert_int_eq(cons_out_init(&w, src), 0);
    static const uint8_t small[] = { 0x40, 0x06, 0xd0, 0x02, 0x01 };
    for (int i = 0; i < 100; i++)
        cons_out_packet(small, sizeof small, &w);
    uint8_t *big = big_record(20000, true);
    for (int i = 0; i < 301; i++)
        cons_out_packet(big, 20000, &w);
    free(big);
    ck_assert_int_eq(cons_out_flush(&w), 0);
    size_t n = (size_t)w.bytes, rec = 1 + 3 + 20000;
    size_t first = 100 * (2 + sizeof small);
    cons_out_fini(&w);
    uint8_t *all = malloc(n);
    ck_assert_int_eq(pread(src, all, n, 0), (ssize_t)n);
    close(src);
    /* ... as a writer appends it */
    int fd = tmp_fd();
    cons_out f;
    memset(&f, 0, sizeof f);
    ck_assert_int_eq(pwrite(fd, all, first + rec - 5000, 0),
                     (ssize_t)(first + rec - 5000));
    ck_assert_int_eq(cons_out_scan_follow(&f, fd), 0); /* 101 is cut */
    ck_assert_uint_eq(f.packets, 100);
    ck_assert_uint_eq(f.flagged_packets, 100);
    ck_assert_uint_eq(f.scanned, first);
    ck_assert_int_eq(pwrite(fd, all + first + rec - 5000, 5000,
                            (off_t)(first + rec - 5000)), 5000);
    ck_assert_int_eq(cons_out_scan_follow(&f, fd), 0);
    ck_assert_uint_eq(f.packets, 101);
    ck_assert_int_eq(cons_out_scan_follow(&f, fd), 0); /* nothing new */
    ck_assert_uint_eq(f.packets, 101);
    ck_assert_uint_eq(f.scanned, first + rec);
    ck_assert_int_eq(pwrite(fd, all + first + rec, n - first - rec,
                            (off_t)(first + rec)),
                     (ssize_t)(n - first - rec));
    ck_assert_int_eq(cons_out_scan_fd(&f, fd), 0);     /* the rest */
    cons_out full;
    memset(&full, 0, sizeof full);
    ck_assert_int_eq(cons_out_scan_fd(&full, fd), 0);
    ck_assert_uint_eq(f.packets, 401);
    ck_assert_uint_eq(f.packets, full.packets);
    ck_assert_uint_eq(f.flagged_packets, full.flagged_packets);
    ck_assert_uint_eq(f.bytes, full.bytes);
    ck_assert_uint_eq(f.bytes, n);
    ck_assert_uint_eq(f.scanned, n);
    ck_assert_uint_eq(f.malformed, 0);
    cons_out_fini(&full);
    /* cut under what was counted */
    ck_assert_int_eq(ftruncate(fd, (off_t)first), 0);
    ck_assert_int_eq(cons_out_scan_fd(&f, fd), -EIO);
    cons_out_fini(&f);
    free(all);
    close(fd);
}
END_TEST

/* Following a file of large records walks it by its headers too
 * (cons__scan_sparse_hook says so), with windows of any size: each call
 * counts the whole records, leaves the cut last one for the next call,
 * and the counts end as one scan of the finished file gives. */
START_TEST(test_out_scan_follow_sparse)
{
    int src = tmp_fd();
    cons_out w;
    ck_assert_int_eq(cons_out_init(&w, src), 0);
    for (int i = 0; i < 300; i++) {    /* 6 MiB, every third flagged */
        uint8_t *big = big_record(20000 + (size_t)i, i % 3 == 0);
        cons_out_packet(big, 20000 + (size_t)i, &w);
        free(big);
    }
    ck_assert_int_eq(cons_out_flush(&w), 0);
    size_t n = (size_t)w.bytes;
    cons_out_fini(&w);
    uint8_t *all = malloc(n);
    ck_assert_int_eq(pread(src, all, n, 0), (ssize_t)n);
    cons_out full;
    memset(&full, 0, sizeof full);
    ck_assert_int_eq(cons_out_scan_fd(&full, src), 0);
    ck_assert_uint_eq(full.packets, 300);
    close(src);
    static const size_t windows[] = { 4096, 64, 5000 };
    for (int k = 0; k < 3; k++) {
        cons__scan_window = windows[k];
        int fd = tmp_fd();
        cons_out f;
        memset(&f, 0, sizeof f);
        cons__scan_sparse_hook = count_sparse;
        sparse_calls = 0;
        /* three appends, each cutting a record: 2 MiB, 4 MiB, the rest */
        size_t cuts[] = { 2u << 20, 4u << 20, n };
        size_t at = 0;
        for (int c = 0; c < 3; c++) {
            ck_assert_int_eq(pwrite(fd, all + at, cuts[c] - at, (off_t)at),
                             (ssize_t)(cuts[c] - at));
            at = cuts[c];
            ck_assert_int_eq(cons_out_scan_follow(&f, fd), 0);
            ck_assert_uint_le(f.scanned, at);
            ck_assert_uint_gt(f.scanned + 20300, at);  /* one cut at most */
        }
        ck_assert_int_eq(sparse_calls, 3);
        cons__scan_sparse_hook = NULL;
        ck_assert_uint_eq(f.scanned, n);
        ck_assert_int_eq(cons_out_scan_fd(&f, fd), 0);   /* nothing left */
        ck_assert_uint_eq(f.packets, full.packets);
        ck_assert_uint_eq(f.flagged_packets, full.flagged_packets);
        ck_assert_uint_eq(f.bytes, full.bytes);
        ck_assert_uint_eq(f.malformed, 0);
        cons_out_fini(&f);
        close(fd);
    }
    cons__scan_window = 4096;
    cons_out_fini(&full);
    free(all);
}
END_TEST

/* A file that shrinks while cons_out_scan_fd walks it (another process
 * truncates it): the first pread() that comes up short makes the scan
 * -EIO, with the records before the cut counted. */
static void truncate_to_half(int fd)
{
    struct stat st;
    ck_assert_int_eq(fstat(fd, &st), 0);
    /* inside record 255 */
    ck_assert_int_eq(ftruncate(fd, st.st_size / 2 / 4096 * 4096), 0);
}

START_TEST(test_out_scan_file_shrinks_while_walked)
{
    int fd = tmp_fd();
    cons_out o;
    ck_assert_int_eq(cons_out_init(&o, fd), 0);
    uint8_t *pk = big_record(16384, false);
    for (int i = 0; i < 512; i++)    /* 8 MiB of large records */
        cons_out_packet(pk, 16384, &o);
    free(pk);
    ck_assert_int_eq(cons_out_flush(&o), 0);
    cons_out_fini(&o);
    cons__scan_sparse_hook = truncate_to_half;
    cons_out s;
    memset(&s, 0, sizeof s);
    ck_assert_int_eq(cons_out_scan_fd(&s, fd), -EIO);
    cons__scan_sparse_hook = NULL;
    /* record 255, whose body was cut, may count: the walk skips bodies */
    ck_assert_uint_ge(s.packets, 255);
    ck_assert_uint_le(s.packets, 256);
    cons_out_fini(&s);
    /* What is left scans cleanly. */
    memset(&s, 0, sizeof s);
    ck_assert_int_eq(cons_out_scan_fd(&s, fd), -EBADMSG);  /* cut */
    ck_assert_uint_eq(s.packets, 255);
    ck_assert_uint_eq(s.malformed, 0);
    cons_out_fini(&s);
    close(fd);
}
END_TEST

START_TEST(test_client_no_service)
{
    int err = 0;
    char path[64];
    snprintf(path, sizeof path, "/tmp/check_cli_nosuch_%d.sock",
             (int)getpid());
    ck_assert_ptr_null(cons_connect(path, &err));
    ck_assert_int_eq(err, -ENOENT);
    char msg[256], out[80];
    snprintf(out, sizeof out, "/tmp/check_cli_nosuch_%d.pftrace",
             (int)getpid());
    bool unreachable = false;
    ck_assert_int_lt(cons_clone_to_file(path, UINT64_MAX, NULL, out, NULL,
                                        &unreachable, msg, sizeof msg), 0);
    ck_assert(unreachable);                   /* exit 3, not 1 */
    ck_assert_ptr_nonnull(strstr(msg, "cannot connect"));
    ck_assert_ptr_nonnull(strstr(msg, path)); /* the socket is named */
    ck_assert_int_ne(access(out, F_OK), 0);   /* nothing left behind */
    /* An output it cannot create fails first, and is not "no service". */
    snprintf(out, sizeof out, "/tmp/check_cli_nosuch_%d/x.pftrace",
             (int)getpid());
    ck_assert_int_lt(cons_clone_to_file(path, UINT64_MAX, NULL, out, NULL,
                                        &unreachable, msg, sizeof msg), 0);
    ck_assert(!unreachable);
    ck_assert_ptr_null(strstr(msg, "cannot connect"));
}
END_TEST

/* How a session ended is a flag, not the service's words: a service error
 * that says "lost" is not a lost connection (shmtrace record then keeps
 * the partial file and says the service went away). */
START_TEST(test_client_end_by_disconnect)
{
    cons_client c;
    memset(&c, 0, sizeof c);
    c.enable_sent = true;
    Perfetto__Protos__EnableTracingResponse r =
        PERFETTO__PROTOS__ENABLE_TRACING_RESPONSE__INIT;
    r.error = "producer p: 3 packets lost";
    cons__on_enable_reply(NULL, 0, &r.base, false, &c);
    const char *why = NULL;
    ck_assert(cons_ended(&c, &why));
    ck_assert_str_eq(why, "producer p: 3 packets lost");
    ck_assert(!cons_ended_by_disconnect(&c));
    /* The call failed because the connection dropped. */
    cons__on_enable_reply(NULL, -ECONNRESET, NULL, false, &c);
    ck_assert(cons_ended(&c, &why));
    ck_assert(cons_ended_by_disconnect(&c));
    ck_assert_ptr_nonnull(strstr(why, "connection"));
    /* Refused outright: ended, not by a disconnect. */
    cons__on_enable_reply(NULL, -EINVAL, NULL, false, &c);
    ck_assert(!cons_ended_by_disconnect(&c));
    free(c.end_error);
}
END_TEST

START_TEST(test_parse_sizes_and_durations)
{
    uint32_t v = 7;
    ck_assert_int_eq(cli_parse_size_kb("64", &v), 0);
    ck_assert_uint_eq(v, 64);
    ck_assert_int_eq(cli_parse_size_kb("32m", &v), 0);
    ck_assert_uint_eq(v, 32768);
    ck_assert_int_eq(cli_parse_size_kb("1GB", &v), 0);
    ck_assert_uint_eq(v, 1048576);
    ck_assert_int_eq(cli_parse_size_kb("5k", &v), 0);
    ck_assert_uint_eq(v, 8); /* rounded up to a multiple of 4 KiB */
    ck_assert_int_eq(cli_parse_size_kb("1b", &v), 0);
    ck_assert_uint_eq(v, 4);
    v = 7;
    ck_assert_int_eq(cli_parse_size_kb("0", &v), -ERANGE);
    ck_assert_int_eq(cli_parse_size_kb("5000g", &v), -ERANGE);
    ck_assert_int_eq(cli_parse_size_kb("18446744073709551615g", &v),
                     -ERANGE);
    ck_assert_int_eq(cli_parse_size_kb("-4", &v), -EINVAL);
    ck_assert_int_eq(cli_parse_size_kb("4q", &v), -EINVAL);
    ck_assert_int_eq(cli_parse_size_kb("", &v), -EINVAL);
    ck_assert_uint_eq(v, 7); /* untouched on failure */
    ck_assert_int_eq(cli_parse_duration_ms("10", &v), 0);
    ck_assert_uint_eq(v, 10000);
    ck_assert_int_eq(cli_parse_duration_ms("250ms", &v), 0);
    ck_assert_uint_eq(v, 250);
    ck_assert_int_eq(cli_parse_duration_ms("2m", &v), 0);
    ck_assert_uint_eq(v, 120000);
    ck_assert_int_eq(cli_parse_duration_ms("1h", &v), 0);
    ck_assert_uint_eq(v, 3600000);
    ck_assert_int_eq(cli_parse_duration_ms("2000h", &v), -ERANGE);
    ck_assert_int_eq(cli_parse_duration_ms("99999999999999999999", &v),
                     -EINVAL);
    ck_assert_int_eq(cli_parse_duration_ms("5 s", &v), -EINVAL);
    ck_assert_int_eq(cli_parse_duration_ms("-1s", &v), -EINVAL);
    uint64_t u = 0;
    ck_assert_int_eq(cli_parse_u64("0x10", &u), 0);
    ck_assert_uint_eq(u, 16);
    ck_assert_int_eq(cli_parse_u64("18446744073709551615", &u), 0);
    ck_assert_uint_eq(u, UINT64_MAX);
    ck_assert_int_eq(cli_parse_u64("18446744073709551616", &u), -EINVAL);
    ck_assert_int_eq(cli_parse_u64("12abc", &u), -EINVAL);
    int err = 0;
    ck_assert_ptr_null(cli_read_file("/nonexistent/x.cfg", &err));
    ck_assert_int_eq(err, -ENOENT);
}
END_TEST

static Suite *cli_suite(void)
{
    Suite *s = suite_create("cli");
    TCK_CASE(s, "textproto", test_textproto_full_config,
             test_textproto_empty_and_escapes, test_textproto_errors,
             test_textproto_garbage_never_crashes,
             test_textproto_perfetto_escapes_and_typed_configs,
             test_rcfg_text_binary_detection);
    TCK_CASE(s, "parse", test_parse_sizes_and_durations);
    TCK_CASE(s, "out", test_out_records_and_flags,
             test_out_trace_stats_captured, test_out_malformed_packets_counted,
             test_out_write_error_reported, test_out_scan_file,
             test_out_scan_file_sparse, test_out_scan_sparse_fields,
             test_out_scan_sparse_mutated,
             test_out_scan_varint_lengths, test_out_scan_short_varints,
             test_out_take_file_counts,
             test_out_scan_follow, test_out_scan_follow_sparse,
             test_out_scan_file_shrinks_while_walked);
    TCK_CASE(s, "client", test_client_no_service);
    TCK_CASE(s, "client", test_client_end_by_disconnect);
    return s;
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    return tck_run(cli_suite());
}
