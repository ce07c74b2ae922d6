# tests/inspector.mk - Check tests of the inspector (inspector/, sql/).
#
# One program per module/behaviour; all link the same libins the tool uses.
# Test data (tests/data/) are the three reference traces recorded by the
# real Perfetto service, with trace processor's answers.

INS_CHECK_CPPFLAGS = $(AM_CPPFLAGS) -I$(top_srcdir)/inspector \
	-I$(top_srcdir)/tests
INS_CHECK_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS) $(SQLITE_CFLAGS) \
	$(PROTOBUF_C_CFLAGS)
INS_CHECK_LDADD = inspector/libins.la protos/libshmtrace_protos.la \
	$(CHECK_LIBS) $(SQLITE_LIBS) $(PROTOBUF_C_LIBS)

INS_CHECKS = tests/check_ins_golden tests/check_ins_detect \
	tests/check_ins_packet tests/check_ins_stats tests/check_ins_fuzz \
	tests/check_ins_large tests/check_ins_cli tests/check_ins_inflate \
	tests/check_ins_loss
check_PROGRAMS += $(INS_CHECKS)
TESTS += $(INS_CHECKS)
noinst_HEADERS += tests/check_ins_util.h

tests_check_ins_golden_SOURCES = tests/check_ins_golden.c
tests_check_ins_golden_CPPFLAGS = $(INS_CHECK_CPPFLAGS)
tests_check_ins_golden_CFLAGS = $(INS_CHECK_CFLAGS)
tests_check_ins_golden_LDADD = $(INS_CHECK_LDADD)

tests_check_ins_detect_SOURCES = tests/check_ins_detect.c
tests_check_ins_detect_CPPFLAGS = $(INS_CHECK_CPPFLAGS)
tests_check_ins_detect_CFLAGS = $(INS_CHECK_CFLAGS)
tests_check_ins_detect_LDADD = $(INS_CHECK_LDADD)

tests_check_ins_packet_SOURCES = tests/check_ins_packet.c
tests_check_ins_packet_CPPFLAGS = $(INS_CHECK_CPPFLAGS)
tests_check_ins_packet_CFLAGS = $(INS_CHECK_CFLAGS)
tests_check_ins_packet_LDADD = $(INS_CHECK_LDADD)

tests_check_ins_stats_SOURCES = tests/check_ins_stats.c
tests_check_ins_stats_CPPFLAGS = $(INS_CHECK_CPPFLAGS)
tests_check_ins_stats_CFLAGS = $(INS_CHECK_CFLAGS)
tests_check_ins_stats_LDADD = $(INS_CHECK_LDADD)

tests_check_ins_fuzz_SOURCES = tests/check_ins_fuzz.c
tests_check_ins_fuzz_CPPFLAGS = $(INS_CHECK_CPPFLAGS)
tests_check_ins_fuzz_CFLAGS = $(INS_CHECK_CFLAGS)
tests_check_ins_fuzz_LDADD = $(INS_CHECK_LDADD)

tests_check_ins_large_SOURCES = tests/check_ins_large.c
tests_check_ins_large_CPPFLAGS = $(INS_CHECK_CPPFLAGS)
tests_check_ins_large_CFLAGS = $(INS_CHECK_CFLAGS)
tests_check_ins_large_LDADD = $(INS_CHECK_LDADD)

tests_check_ins_inflate_SOURCES = tests/check_ins_inflate.c
tests_check_ins_inflate_CPPFLAGS = $(INS_CHECK_CPPFLAGS)
tests_check_ins_inflate_CFLAGS = $(INS_CHECK_CFLAGS)
tests_check_ins_inflate_LDADD = $(INS_CHECK_LDADD)

# Exact loss list (ins_loss.c), folded or not, and the canned loss queries
# on it (run from $(top_srcdir)/sql).
tests_check_ins_loss_SOURCES = tests/check_ins_loss.c
tests_check_ins_loss_CPPFLAGS = $(INS_CHECK_CPPFLAGS)
tests_check_ins_loss_CFLAGS = $(INS_CHECK_CFLAGS)
tests_check_ins_loss_LDADD = $(INS_CHECK_LDADD)

# The command line, run as a program (finds it via top_builddir).
tests_check_ins_cli_SOURCES = tests/check_ins_cli.c
tests_check_ins_cli_CPPFLAGS = $(INS_CHECK_CPPFLAGS)
tests_check_ins_cli_CFLAGS = $(INS_CHECK_CFLAGS)
tests_check_ins_cli_LDADD = $(INS_CHECK_LDADD)

INS_GOLDEN_FILES = tests/data/README.perfetto.md \
	tests/data/ok_v2.pftrace tests/data/ok_v2.stats.csv \
	tests/data/ok_v2.packets.csv tests/data/ok_v2.pbtxt \
	tests/data/ring_loss_v2.pftrace tests/data/ring_loss_v2.stats.csv \
	tests/data/ring_loss_v2.packets.csv tests/data/ring_loss_v2.pbtxt \
	tests/data/discard_v2.pftrace tests/data/discard_v2.stats.csv \
	tests/data/discard_v2.packets.csv tests/data/discard_v2.pbtxt \
	tests/data/make_compressed.py tests/data/compressed.pftrace \
	tests/data/inflate_text.zdyn tests/data/inflate_text.zfix \
	tests/data/inflate_text.zsto tests/data/inflate_text.gz \
	tests/data/bomb.zlib
EXTRA_DIST += $(INS_GOLDEN_FILES)

# --live against the real daemon, producer and `shmtrace record`
# (scripted; uses the service's tests/e2e_lib.sh; skips if not built).
dist_check_SCRIPTS += tests/check_ins_live.sh
TESTS += tests/check_ins_live.sh

# Exact loss columns (sequence.lost_packets, packet_loss) and the canned
# loss queries, on Perfetto's traces (unknown) and ours (exact).
dist_check_SCRIPTS += tests/ins_lost_packets.sh
TESTS += tests/ins_lost_packets.sh

# A loss list the service folds (thousands of writers), end to end:
# svc_manywriters is one producer with 8000 TraceWriters.
check_PROGRAMS += tests/svc_manywriters
tests_svc_manywriters_SOURCES = tests/svc_manywriters.c
tests_svc_manywriters_LDADD = libshm/libshm.la -lpthread
dist_check_SCRIPTS += tests/ins_lost_folded.sh
TESTS += tests/ins_lost_folded.sh
# ... and with 20000 writers of one uid, past a buffer's bound of sequences
# per uid: the refusals counted end to end.
dist_check_SCRIPTS += tests/e2e_seq_cap.sh
TESTS += tests/e2e_seq_cap.sh
