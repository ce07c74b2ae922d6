# tests/features/features.mk - issue 12: triggers, incremental-state
# clearing, QueryServiceState, Detach/Attach, ChangeTraceConfig, clone into
# a file. Check tests drive the service core and the TraceWriter without
# Perfetto; the scripts drive shmtraced with Perfetto's own `perfetto`,
# `tracebox trigger_perfetto` and refgen (skipped, exit 77, without them:
# $PERFETTO_BIN, else $top_srcdir/../shared/perfetto/bin) and with our CLI.

check_PROGRAMS += tests/features/check_svc_trigger \
	tests/features/check_svc_attach tests/features/check_tw_incremental
tests_features_check_svc_trigger_SOURCES = \
	tests/features/check_svc_trigger.c tests/features/feat_svc_harness.h
tests_features_check_svc_trigger_CFLAGS = $(svc_test_cflags)
tests_features_check_svc_trigger_LDADD = $(svc_test_ldadd)
tests_features_check_svc_attach_SOURCES = \
	tests/features/check_svc_attach.c tests/features/feat_svc_harness.h
tests_features_check_svc_attach_CFLAGS = $(svc_test_cflags)
tests_features_check_svc_attach_LDADD = $(svc_test_ldadd)
tests_features_check_tw_incremental_SOURCES = \
	tests/features/check_tw_incremental.c
tests_features_check_tw_incremental_CFLAGS = $(libshm_test_cflags)
tests_features_check_tw_incremental_LDADD = $(libshm_test_ldadd)
check_PROGRAMS += tests/features/check_svc_ipc_ext
tests_features_check_svc_ipc_ext_SOURCES = tests/features/check_svc_ipc_ext.c
tests_features_check_svc_ipc_ext_CFLAGS = $(svc_test_cflags)
tests_features_check_svc_ipc_ext_LDADD = $(svc_test_ldadd)
TESTS += tests/features/check_svc_trigger tests/features/check_svc_attach \
	tests/features/check_tw_incremental tests/features/check_svc_ipc_ext

# Prints trigger packets and incremental-state flags of a trace.
check_PROGRAMS += tests/features/feat_tracedump
tests_features_feat_tracedump_SOURCES = tests/features/feat_tracedump.c
tests_features_feat_tracedump_CFLAGS = $(AM_CFLAGS) $(PROTOBUF_C_CFLAGS)
tests_features_feat_tracedump_LDADD = protos/libshmtrace_protos.la \
	$(PROTOBUF_C_LIBS)

feat_e2e_tests = tests/features/e2e_perfetto_triggers.sh \
	tests/features/e2e_perfetto_query.sh \
	tests/features/e2e_perfetto_detach.sh \
	tests/features/e2e_incremental.sh \
	tests/features/e2e_cli_features.sh
dist_check_SCRIPTS += $(feat_e2e_tests)
EXTRA_DIST += tests/features/feat_lib.sh
TESTS += $(feat_e2e_tests)
