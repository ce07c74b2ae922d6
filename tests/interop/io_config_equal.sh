#!/bin/sh
# io_config_equal.sh - every TraceConfig Perfetto accepts, shmtrace record
# accepts, and sends the same config: for each config in
# tests/interop/configs/ (together they use every typed data-source config
# of DataSourceConfig and most of TraceConfig), record once with
# `perfetto --txt -c` and once with `shmtrace record -c` against the same
# service (Perfetto's traced, then shmtraced), and compare the two traces' trace_config packets
# (canonical encoding; the uuid aside, and the three fields perfetto adds
# to every config checked then aside). Then the binary form: the config
# perfetto sent (from its trace) given to `shmtrace record -c` must come
# back from traced unchanged. config.proto must know every field traced
# echoes (no unknown field at any depth).
. "$top_srcdir/tests/interop/io_lib.sh"
e2e_need_tools "$IO_CHECK" "$IO_CANON"
D=$E2E_DIR
CFGS="$top_srcdir/tests/interop/configs"

# run_configs SVC: every config through the running service SVC.
run_configs() {
for cfg in "$CFGS"/*.pbtxt; do
    b=$(basename "$cfg" .pbtxt).$1
    io_perfetto_record "$cfg" "$D/$b.p.pftrace"
    "$CLI" record -q -c "$cfg" -o "$D/$b.s.pftrace" 2>"$D/$b.s.log" ||
        e2e_fail "$b: shmtrace record -c refused what perfetto took: $(cat "$D/$b.s.log")"
    io_check "$D/$b.p.pftrace" --dump-config "$D/$b.p.cfg"
    io_expect kind.33 -eq 1 "$b (perfetto): trace_config packet"
    io_check "$D/$b.s.pftrace" --dump-config "$D/$b.s.cfg"
    io_expect kind.33 -eq 1 "$b (shmtrace): trace_config packet"
    "$IO_CANON" --strip-uuid --strip-perfetto-cmd "$D/$b.p.cfg" \
        "$D/$b.p.canon" >"$D/$b.canon.out" ||
        e2e_fail "$b: perfetto's config: $(cat "$D/$b.canon.out")"
    grep -q '^unknown_fields=0$' "$D/$b.canon.out" ||
        e2e_fail "$b: config.proto misses fields traced echoed"
    "$IO_CANON" --strip-uuid "$D/$b.s.cfg" "$D/$b.s.canon" >/dev/null ||
        e2e_fail "$b: shmtrace's config does not decode"
    if ! cmp -s "$D/$b.p.canon" "$D/$b.s.canon"; then
        od -An -tx1 "$D/$b.p.canon" >"$D/p.hex"
        od -An -tx1 "$D/$b.s.canon" >"$D/s.hex"
        diff "$D/p.hex" "$D/s.hex" >&2
        e2e_fail "$b: trace_config differs (perfetto --txt -c vs shmtrace record -c)"
    fi
    # Binary: what perfetto sent, byte for byte through shmtrace record.
    "$CLI" record -q -c "$D/$b.p.cfg" -o "$D/$b.b.pftrace" 2>"$D/$b.b.log" ||
        e2e_fail "$b: shmtrace record -c BINARY failed: $(cat "$D/$b.b.log")"
    io_check "$D/$b.b.pftrace" --dump-config "$D/$b.b.cfg"
    "$IO_CANON" "$D/$b.p.cfg" "$D/$b.pf.canon" >/dev/null
    "$IO_CANON" "$D/$b.b.cfg" "$D/$b.bf.canon" >/dev/null
    cmp -s "$D/$b.pf.canon" "$D/$b.bf.canon" ||
        e2e_fail "$b: the binary config came back changed"
    for t in p s b; do
        io_trace_ok "$D/$b.$t.pftrace"
    done
    n=$((n + 1))
    echo "$b: same trace_config from perfetto --txt -c and shmtrace record -c" \
         "(text and binary)"
done
}
n=0
for svc in traced shmtraced; do
    if [ $svc = traced ]; then io_start_traced; else io_start_shmtraced; fi
    # refgen gives the configs naming its data sources something to record.
    REFGEN_PERIOD_US=2000 e2e_spawn refgen "$P_REFGEN"
    REFGEN=$E2E_LAST_PID
    io_wait_ds track_event dev.refgen.test_packets
    run_configs $svc
    io_stop "$REFGEN"
    io_stop "$DAEMON_PID"
    rm -f "$PERFETTO_PRODUCER_SOCK_NAME" "$PERFETTO_CONSUMER_SOCK_NAME"
done
[ $n -ge 20 ] || e2e_fail "only $n config runs checked"
echo "PASS: $n config runs (12 configs x 2 services), equal trace_config packets" \
     "(${IO_STATS_CHECKED:-0} traces' stats equal to trace processor's)"
