# bench/libbuf.mk - libbuf throughput benchmark (not run by make check).

noinst_PROGRAMS += bench/bench_tb
bench_bench_tb_SOURCES = bench/bench_tb.c
bench_bench_tb_LDADD = libbuf/libbuf.la

# A/B of libbuf versions in one process (a developer's tool, built by the
# script on demand: bench/ab_libbuf.sh -w WORKLOAD HEAD .).
EXTRA_DIST += bench/ab_libbuf.sh bench/ab_libbuf.c
