# bench/bench_producer.sh - sourced by bench_vs_perfetto.sh and bench_e2e.sh:
# which shmtrace-producer program the recordings start.
#
# In the build tree tools/shmtrace-producer is a libtool wrapper script
# (bash, run before each start: 10-25 ms of wall time and ~10 ms of CPU
# per producer on the 2-core bench machine, counted in every recording);
# an installed shmtrace-producer is the program itself. So the benches run
# the real program, with the library path libtool would give it, both
# resolved once here: PRODUCER_BIN, PRODUCER_LIBPATH (exported). Without
# libtool (an installed tree): the program as it is.
PRODUCER_BIN=$top_builddir/tools/shmtrace-producer
PRODUCER_LIBPATH=${LD_LIBRARY_PATH:-}
if [ -x "$top_builddir/libtool" ]; then
    PRODUCER_BIN=$("$top_builddir/libtool" --mode=execute \
        sh -c 'printf %s "$1"' sh "$PRODUCER_BIN")
    PRODUCER_LIBPATH=$("$top_builddir/libtool" --mode=execute \
        sh -c 'printf %s "${LD_LIBRARY_PATH:-}"' sh \
        "$top_builddir/tools/shmtrace-producer")
fi
export PRODUCER_BIN PRODUCER_LIBPATH
