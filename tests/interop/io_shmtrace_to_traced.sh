#!/bin/sh
# io_shmtrace_to_traced.sh - our producers through Perfetto's traced,
# recorded by Perfetto's `perfetto`: shmtrace-producer (small packets, and
# 60 KB packets fragmented over many chunks) and io_libshm_producer (a
# program on libshm's public API: packets whose nested messages span chunk
# boundaries, so their sizes are patched after commit). Every packet must
# arrive: per writer seq_value exactly 0..COUNT-1 (svc_tracecheck
# --complete), the expected number of writers, and libshm's strings
# intact; each session also read by shmtrace record. Plus trace
# processor's view: no `error` stat, same stats as the
# inspector.
. "$top_srcdir/tests/interop/io_lib.sh"
e2e_need_tools "$IO_CHECK" "$IO_LIBSHM" "$TRACECHECK"

io_start_traced
e2e_spawn prod_small "$PRODUCER" -t 2 -S 64 -c 3000 --policy stall
e2e_spawn prod_big "$PRODUCER" -n shmtrace.big -N big-producer -t 1 \
    -S 60000 -c 150 --policy stall
e2e_spawn libshm "$IO_LIBSHM" 3 600
io_wait_ds shmtrace.synthetic shmtrace.big io.libshm

# Small packets + libshm's patched ones, one session; counts differ per
# producer, so one session per producer keeps --complete exact.
for ds in shmtrace.synthetic:3000:2 io.libshm:600:3 shmtrace.big:150:1; do
    name=${ds%%:*}; rest=${ds#*:}; count=${rest%%:*}; writers=${rest#*:}
    cat >"$E2E_DIR/$name.pbtxt" <<CFG
buffers { size_kb: 32768 fill_policy: RING_BUFFER }
data_sources { config { name: "$name" } }
duration_ms: 4000
CFG
    io_perfetto_record "$E2E_DIR/$name.pbtxt" "$E2E_DIR/$name.pftrace"
    e2e_check "$E2E_DIR/$name.pftrace" --complete "$count" \
        --expect-sequences "$writers" >/dev/null
    io_check "$E2E_DIR/$name.pftrace"
    io_expect test_packets -eq $((count * writers)) "$name via traced"
    io_expect test_gaps -eq 0 "$name via traced"
    io_no_error_stats "$E2E_DIR/$name.pftrace"
    io_no_loss "$E2E_DIR/$name.pftrace"
    io_stats_match "$E2E_DIR/$name.pftrace"
    echo "$name: $(io_value test_packets) packets from $writers writer(s)" \
         "through traced, all present"
    # The same session read by shmtrace record (traced's ReadBuffers
    # slices reassembled on our side, 60 KB packets included).
    "$CLI" record -q -c "$E2E_DIR/$name.pbtxt" -o "$E2E_DIR/$name.s.pftrace" \
        2>"$E2E_DIR/rec.log" || e2e_fail "shmtrace record: $(cat "$E2E_DIR/rec.log")"
    e2e_check "$E2E_DIR/$name.s.pftrace" --complete "$count" \
        --expect-sequences "$writers" >/dev/null
    io_trace_ok "$E2E_DIR/$name.s.pftrace"
done
# libshm's strings, letter by letter (its large packets were fragmented
# and patched on the way).
io_check "$E2E_DIR/io.libshm.pftrace" --str-pattern
io_expect test_bad_str -eq 0 "io_libshm_producer strings via traced"

io_stop "$DAEMON_PID"
echo "PASS: shmtrace-producer and a libshm producer through Perfetto's traced" \
     "(${IO_STATS_CHECKED:-0} traces' stats compared with trace processor)"
