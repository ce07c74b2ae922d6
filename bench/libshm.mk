# bench/libshm.mk - TraceWriter benchmark (not part of make check).
#   ./bench/bench_tw [--quick] [--large] [--size BYTES [--page BYTES]]

noinst_PROGRAMS += bench/bench_tw
bench_bench_tw_SOURCES = bench/bench_tw.c
bench_bench_tw_CFLAGS = $(AM_CFLAGS) -I$(top_srcdir)/libshm \
	-I$(top_srcdir)/service
bench_bench_tw_LDADD = $(SVC_LIBS)

# The libshm side of `make bench-vs-sdk` (bench/vs_perfetto.mk); its SDK
# twin bench/bench_packets_sdk.c is built by bench/bench_vs_sdk.sh.
noinst_PROGRAMS += bench/bench_packets
bench_bench_packets_SOURCES = bench/bench_packets.c bench/bench_packets.h
bench_bench_packets_LDADD = libshm/libshm.la
EXTRA_DIST += bench/bench_packets_sdk.c
