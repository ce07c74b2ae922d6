# tests/service.mk - Check tests of the tracing service core and the
# scripted end-to-end tests (real shmtraced, producers, consumer).

svc_test_cflags = $(AM_CFLAGS) $(CHECK_CFLAGS) $(PROTOBUF_C_CFLAGS) \
	-I$(top_srcdir)/service $(IPC_CPPFLAGS)
svc_test_ldadd = $(SVC_LIBS) $(CHECK_LIBS)

noinst_HEADERS += tests/svc_fixture.h tests/svc_daemon_fixture.h

check_PROGRAMS += tests/check_svc_packet tests/check_svc_session
tests_check_svc_packet_SOURCES = tests/check_svc_packet.c
tests_check_svc_packet_CFLAGS = $(svc_test_cflags)
tests_check_svc_packet_LDADD = $(svc_test_ldadd)
tests_check_svc_session_SOURCES = tests/check_svc_session.c
tests_check_svc_session_CFLAGS = $(svc_test_cflags)
tests_check_svc_session_LDADD = $(svc_test_ldadd)

check_PROGRAMS += tests/check_svc_ipc
tests_check_svc_ipc_SOURCES = tests/check_svc_ipc.c
tests_check_svc_ipc_CFLAGS = $(svc_test_cflags)
tests_check_svc_ipc_LDADD = $(svc_test_ldadd)

TESTS += tests/check_svc_packet tests/check_svc_session tests/check_svc_ipc

# The loss list when there is much of it (svc_loss.c): many loss reports,
# thousands of writers; one test reads a folded list back with the
# inspector's library, to check that its tables still add up.
check_PROGRAMS += tests/check_svc_loss
tests_check_svc_loss_SOURCES = tests/check_svc_loss.c
tests_check_svc_loss_CFLAGS = $(svc_test_cflags) $(SQLITE_CFLAGS) \
	-I$(top_srcdir)/inspector -I$(top_srcdir)/libbuf
tests_check_svc_loss_LDADD = inspector/libins.la $(svc_test_ldadd) \
	$(SQLITE_LIBS)
TESTS += tests/check_svc_loss

check_PROGRAMS += tests/check_svc_prealloc
tests_check_svc_prealloc_SOURCES = tests/check_svc_prealloc.c
tests_check_svc_prealloc_CFLAGS = $(svc_test_cflags)
tests_check_svc_prealloc_LDADD = $(svc_test_ldadd)
TESTS += tests/check_svc_prealloc

# Trace file checker used by the e2e scripts (and handy by hand).
check_PROGRAMS += tests/svc_tracecheck
tests_svc_tracecheck_SOURCES = tests/svc_tracecheck.c
tests_svc_tracecheck_CFLAGS = $(AM_CFLAGS) $(PROTOBUF_C_CFLAGS)
tests_svc_tracecheck_LDADD = protos/libshmtrace_protos.la $(PROTOBUF_C_LIBS)

# Scripted end-to-end tests: real shmtraced, real producer processes
# (tools/shmtrace-producer), real consumer (tools/shmtrace). Each uses
# private sockets in a temp dir and kills what it started (tests/e2e_lib.sh).
# Tests that need the tools exit 77 (skip) when they are not built.
svc_e2e_tests = tests/e2e_daemon.sh tests/e2e_basic.sh tests/e2e_ring.sh \
	tests/e2e_discard.sh tests/e2e_longtrace.sh tests/e2e_flush_scrape.sh \
	tests/e2e_kill.sh tests/e2e_garbage.sh tests/e2e_clone.sh \
	tests/e2e_sigterm.sh tests/e2e_sessions.sh tests/e2e_bigpackets.sh \
	tests/e2e_smb_full.sh tests/e2e_kill_midpacket.sh tests/e2e_loss_tp.sh \
	tests/e2e_file_errors.sh tests/e2e_direct_io.sh
dist_check_SCRIPTS += $(svc_e2e_tests)
EXTRA_DIST += tests/e2e_lib.sh
TESTS += $(svc_e2e_tests)

# A hostile producer (garbage SMB, lying CommitData) for e2e_garbage.sh.
check_PROGRAMS += tests/svc_evilproducer
tests_svc_evilproducer_SOURCES = tests/svc_evilproducer.c
tests_svc_evilproducer_CPPFLAGS = $(AM_CPPFLAGS) $(IPC_CPPFLAGS)
tests_svc_evilproducer_LDADD = ipc/libshmtrace_ipc.la \
	protos/libshmtrace_protos.la $(PROTOBUF_C_LIBS)

# A minimal consumer (record / clone / stats) for e2e tests and the bench.
check_PROGRAMS += tests/svc_consumer
tests_svc_consumer_SOURCES = tests/svc_consumer.c
tests_svc_consumer_CPPFLAGS = $(AM_CPPFLAGS) $(IPC_CPPFLAGS)
tests_svc_consumer_LDADD = ipc/libshmtrace_ipc.la \
	protos/libshmtrace_protos.la $(PROTOBUF_C_LIBS)

# Security (issue 10): isolation between users in the core, and the
# output-file rule; then the attacks, performed by a second uid (setpriv;
# SKIP unless root), and the legitimate paths next to them.
check_PROGRAMS += tests/check_svc_users
tests_check_svc_users_SOURCES = tests/check_svc_users.c
tests_check_svc_users_CFLAGS = $(svc_test_cflags)
tests_check_svc_users_LDADD = $(svc_test_ldadd)
TESTS += tests/check_svc_users
sec_e2e_tests = tests/e2e_sec_users.sh tests/e2e_sec_sockets.sh \
	tests/e2e_sec_limits.sh tests/e2e_sec_fuse.sh \
	tests/e2e_sec_outputs.sh
dist_check_SCRIPTS += $(sec_e2e_tests)
EXTRA_DIST += tests/e2e_sec_lib.sh
TESTS += $(sec_e2e_tests)

# Peer-chosen names in the daemon's log: escaped, cut, one line each
# (svc_log_str, and the producer and trigger lines that use it).
check_PROGRAMS += tests/check_svc_log
tests_check_svc_log_SOURCES = tests/check_svc_log.c
tests_check_svc_log_CFLAGS = $(svc_test_cflags)
tests_check_svc_log_LDADD = $(svc_test_ldadd)
TESTS += tests/check_svc_log
