# tests/ipc.mk - tests of the IPC layer, the producer client and the CLIs.

check_PROGRAMS += tests/check_ipc
TESTS += tests/check_ipc
tests_check_ipc_SOURCES = tests/check_ipc.c
tests_check_ipc_CPPFLAGS = $(AM_CPPFLAGS) $(IPC_CPPFLAGS)
tests_check_ipc_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS)
tests_check_ipc_LDADD = ipc/libshmtrace_ipc.la protos/libshmtrace_protos.la \
	$(PROTOBUF_C_LIBS) $(CHECK_LIBS)
$(tests_check_ipc_OBJECTS): $(PROTO_GEN_H)

check_PROGRAMS += tests/check_ipc_producer
TESTS += tests/check_ipc_producer
tests_check_ipc_producer_SOURCES = tests/check_ipc_producer.c
tests_check_ipc_producer_CPPFLAGS = $(AM_CPPFLAGS) $(IPC_CPPFLAGS)
tests_check_ipc_producer_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS)
tests_check_ipc_producer_LDADD = libshm/libshm.la ipc/libshmtrace_ipc.la \
	protos/libshmtrace_protos.la $(PROTOBUF_C_LIBS) $(CHECK_LIBS)
$(tests_check_ipc_producer_OBJECTS): $(PROTO_GEN_H)

check_PROGRAMS += tests/check_cli
TESTS += tests/check_cli
tests_check_cli_SOURCES = tests/check_cli.c
tests_check_cli_CPPFLAGS = $(AM_CPPFLAGS) $(IPC_CPPFLAGS) -I$(top_srcdir)/tools
tests_check_cli_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS)
tests_check_cli_LDADD = tools/libshmtrace_consumer.la ipc/libshmtrace_ipc.la \
	protos/libshmtrace_protos.la $(PROTOBUF_C_LIBS) $(CHECK_LIBS)
$(tests_check_cli_OBJECTS): $(PROTO_GEN_H)

check_PROGRAMS += tests/check_cli_out
TESTS += tests/check_cli_out
tests_check_cli_out_SOURCES = tests/check_cli_out.c
tests_check_cli_out_CPPFLAGS = $(AM_CPPFLAGS) $(IPC_CPPFLAGS) \
	-I$(top_srcdir)/tools
tests_check_cli_out_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS)
tests_check_cli_out_LDADD = tools/libshmtrace_consumer.la \
	ipc/libshmtrace_ipc.la protos/libshmtrace_protos.la $(PROTOBUF_C_LIBS) \
	$(CHECK_LIBS)
$(tests_check_cli_out_OBJECTS): $(PROTO_GEN_H)

# Scripted: CLI argument handling (no daemon) and a smoke test of
# record/clone/stats against the real daemon (uses tests/e2e_lib.sh).
ipc_cli_tests = tests/cli_args.sh tests/cli_smoke.sh tests/cli_files.sh \
	tests/cli_docs.sh tests/cli_demo.sh tests/cli_install.sh
dist_check_SCRIPTS += $(ipc_cli_tests)
TESTS += $(ipc_cli_tests)

# Socket trust rules with a real second uid (issue 10; SKIP unless root).
check_PROGRAMS += tests/check_ipc_sec
TESTS += tests/check_ipc_sec
tests_check_ipc_sec_SOURCES = tests/check_ipc_sec.c
tests_check_ipc_sec_CPPFLAGS = $(AM_CPPFLAGS) $(IPC_CPPFLAGS)
tests_check_ipc_sec_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS)
tests_check_ipc_sec_LDADD = ipc/libshmtrace_ipc.la protos/libshmtrace_protos.la \
	$(PROTOBUF_C_LIBS) $(CHECK_LIBS)
$(tests_check_ipc_sec_OBJECTS): $(PROTO_GEN_H)
