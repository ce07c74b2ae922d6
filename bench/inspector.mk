# bench/inspector.mk - inspector throughput benchmark (not part of make
# check): `make bench-inspector [BENCH_INS_MB=256]` runs hyperfine on
# shmtrace-inspect and on `cat FILE > /dev/null` (the ceiling) over a
# synthetic trace made by bench_ins_gen.

noinst_PROGRAMS += bench/bench_ins_gen
bench_bench_ins_gen_SOURCES = bench/bench_ins_gen.c
bench_bench_ins_gen_CFLAGS = $(AM_CFLAGS) $(PROTOBUF_C_CFLAGS)
bench_bench_ins_gen_LDADD = protos/libshmtrace_protos.la $(PROTOBUF_C_LIBS)
EXTRA_DIST += bench/bench_inspector.sh

BENCH_INS_MB = 256
.PHONY: bench-inspector
bench-inspector: bench/bench_ins_gen$(EXEEXT) inspector/shmtrace-inspect$(EXEEXT)
	top_builddir=$(top_builddir) $(SHELL) $(top_srcdir)/bench/bench_inspector.sh $(BENCH_INS_MB)
