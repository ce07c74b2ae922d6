# bench/vs_perfetto.mk - shmtraced vs Perfetto's traced, side by side in one
# run (not in make check): `make bench-vs-perfetto`. Knobs in
# bench/bench_vs_perfetto.sh (BENCH_VS_MB, BENCH_VS_RUNS, BENCH_VS_CASES,
# PERFETTO_BIN, ...).

noinst_PROGRAMS += bench/bench_waitsize bench/bench_cputime bench/bench_fwrite
bench_bench_waitsize_SOURCES = bench/bench_waitsize.c
bench_bench_cputime_SOURCES = bench/bench_cputime.c
bench_bench_fwrite_SOURCES = bench/bench_fwrite.c service/svc_prealloc.c
bench_bench_fwrite_CPPFLAGS = $(AM_CPPFLAGS) -I$(top_srcdir)/service
EXTRA_DIST += bench/bench_vs_perfetto.sh bench/bench_vs_run.sh \
	bench/ab_service.sh \
	bench/bench_services.sh \
	bench/bench_vs_sdk.sh

# What the scripts are told: the trees, and Perfetto's binaries ($PERFETTO_BIN
# if set, else what configure found; empty: the scripts' own fallback).
BENCH_VS_ENV = top_builddir='$(top_builddir)' top_srcdir='$(top_srcdir)' \
	PERFETTO_BIN="$${PERFETTO_BIN:-$(PERFETTO_BIN_DEFAULT)}"

.PHONY: bench-vs-perfetto
bench-vs-perfetto: all $(check_PROGRAMS)
	$(BENCH_VS_ENV) \
		$(SHELL) $(top_srcdir)/bench/bench_vs_perfetto.sh
	$(BENCH_VS_ENV) \
		$(SHELL) $(top_srcdir)/bench/bench_vs_sdk.sh

# The producer's cost per small packet, libshm against Perfetto's C SDK
# (bench/bench_vs_sdk.sh; also run by bench-vs-perfetto).
.PHONY: bench-vs-sdk
bench-vs-sdk: all $(check_PROGRAMS)
	$(BENCH_VS_ENV) \
		$(SHELL) $(top_srcdir)/bench/bench_vs_sdk.sh

# This tree's shmtraced against another build of it (a git revision or a
# program), side by side in one run: `make bench-ab BASE=HEAD~1`
# (bench/ab_service.sh; its knobs are bench_vs_perfetto.sh's).
.PHONY: bench-ab
bench-ab: all $(check_PROGRAMS)
	$(BENCH_VS_ENV) \
		$(SHELL) $(top_srcdir)/bench/ab_service.sh '$(BASE)'
