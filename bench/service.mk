# bench/service.mk - end-to-end benchmark of shmtraced (not in make check):
#   make bench-e2e            256 MB from 4 producer processes
#   BENCH_E2E_MB=1024 make bench-e2e    the 1 GiB run
# Driven by hyperfine; compares with dd/cat of the same bytes to the same
# disk in the same run (bench/bench_e2e.sh).

EXTRA_DIST += bench/bench_e2e.sh bench/bench_e2e_run.sh bench/bench_producer.sh

.PHONY: bench-e2e
bench-e2e: all $(check_PROGRAMS)
	top_builddir='$(top_builddir)' $(SHELL) $(top_srcdir)/bench/bench_e2e.sh
