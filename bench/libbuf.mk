# bench/libbuf.mk - libbuf throughput benchmark (not run by make check).

noinst_PROGRAMS += bench/bench_tb
bench_bench_tb_SOURCES = bench/bench_tb.c
bench_bench_tb_LDADD = libbuf/libbuf.la
