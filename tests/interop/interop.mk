# tests/interop/interop.mk - the interop suite: shmtrace against Perfetto's
# own binaries (traced, traced_probes, perfetto, refgen, the C SDK
# examples, trace_processor_shell). Each script finds them at $PERFETTO_BIN,
# else $(top_srcdir)/../shared/perfetto/bin, and SKIPs (exit 77) saying why
# when they are absent. See tests/interop/io_lib.sh.

# Content checker (schema-free wire walker) and config canonicalizer.
check_PROGRAMS += tests/interop/io_tracecheck tests/interop/io_cfgcanon
tests_interop_io_tracecheck_SOURCES = tests/interop/io_tracecheck.c
tests_interop_io_cfgcanon_SOURCES = tests/interop/io_cfgcanon.c
tests_interop_io_cfgcanon_CFLAGS = $(AM_CFLAGS) $(PROTOBUF_C_CFLAGS)
tests_interop_io_cfgcanon_LDADD = protos/libshmtrace_protos.la \
	$(PROTOBUF_C_LIBS)
$(tests_interop_io_cfgcanon_OBJECTS): $(PROTO_GEN_H)

# A producer on libshm's public API, linked as an application would.
check_PROGRAMS += tests/interop/io_libshm_producer
tests_interop_io_libshm_producer_SOURCES = tests/interop/io_libshm_producer.c
tests_interop_io_libshm_producer_LDADD = libshm/libshm.la -lpthread

interop_tests = tests/interop/io_perfetto_to_shmtraced.sh \
	tests/interop/io_shmtrace_to_traced.sh \
	tests/interop/io_record_vs_perfetto.sh \
	tests/interop/io_probes_to_shmtraced.sh \
	tests/interop/io_ftrace_analysis.sh \
	tests/interop/io_long_traces.sh \
	tests/interop/io_config_equal.sh \
	tests/interop/io_cli_conventions.sh
dist_check_SCRIPTS += $(interop_tests)
TESTS += $(interop_tests)
EXTRA_DIST += tests/interop/io_lib.sh tests/interop/configs

# Only the interop suite (e.g. PERFETTO_BIN=/other/build make check-interop).
.PHONY: check-interop
check-interop:
	$(MAKE) $(AM_MAKEFLAGS) check TESTS="$(interop_tests)"
