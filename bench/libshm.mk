# bench/libshm.mk - TraceWriter benchmark (not part of make check).
#   ./bench/bench_tw [--quick]

noinst_PROGRAMS += bench/bench_tw
bench_bench_tw_SOURCES = bench/bench_tw.c
bench_bench_tw_CFLAGS = $(AM_CFLAGS) -I$(top_srcdir)/libshm \
	-I$(top_srcdir)/service
bench_bench_tw_LDADD = $(SVC_LIBS)
