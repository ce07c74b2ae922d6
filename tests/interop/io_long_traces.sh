#!/bin/sh
# io_long_traces.sh - long traces (write_into_file: the service streams the
# buffers into the output file) from Perfetto's traced and from shmtraced,
# and the stats trace processor derives for them: a ring buffer too small
# for the write period loses data (long_trace_mode_bytes_overwritten, a
# data_loss stat equal to traced_buf_bytes_overwritten), a DISCARD buffer
# with write_into_file is flagged (config_write_into_file_discard), no
# flush_period_ms on a service of unknown version is an error
# (config_write_into_file_no_flush), and so is none from shmtraced only
# when its SystemInfo is turned off (it writes one, as traced does, which
# gives trace processor the same metadata keys). The inspector must give exactly trace
# processor's stats rows on every one of these traces (with trace processor
# present), and on its own the data_loss/error rows the config implies.
. "$top_srcdir/tests/interop/io_lib.sh"
e2e_need_tools "$IO_CHECK" "$INSPECT"
D=$E2E_DIR

# ins_stat DB NAME IDX: a stats value from the inspector's database.
ins_stat() {
    sqlite3 "$1" "select coalesce(sum(value), 0) from stats where name = '$2'
        and coalesce(idx, -1) = $3"
}
inspect() {
    rm -f "$2"
    "$INSPECT" -q "$1" -o "$2" >/dev/null 2>"$D/inspect.log" ||
        e2e_fail "shmtrace-inspect $1: $(cat "$D/inspect.log")"
}

# sysinfo_keys TRACE: the metadata keys trace processor takes from the
# SystemInfo packet, with a value.
SYSINFO_KEYS="name like 'system_%' or name in ('timezone_off_mins',
    'tracing_service_version')"
sysinfo_keys() {
    "$P_TP" -Q "select name from metadata where ($SYSINFO_KEYS) and
        coalesce(str_value, int_value) is not null order by name" "$1" \
        2>/dev/null | tail -n +2 | tr -d '"'
}
# tp_meta TRACE KEY: a metadata value, as trace processor reads it.
tp_meta() {
    "$P_TP" -Q "select coalesce(str_value, int_value) from metadata
        where name = '$2'" "$1" 2>/dev/null | tail -n +2 | tr -d '"'
}

long_cfg() { # FILE POLICY SYSINFO(true|false) FLUSH_MS
    cat >"$1" <<CFG
buffers { size_kb: 64 fill_policy: $2 }
data_sources { config { name: "track_event"
  track_event_config { enabled_categories: "refgen" } } }
data_sources { config { name: "dev.refgen.test_packets" } }
write_into_file: true
file_write_period_ms: 1000
duration_ms: 2500
builtin_data_sources { disable_system_info: $3 }
CFG
    [ "$4" -gt 0 ] && echo "flush_period_ms: $4" >>"$1"
}

# ---- Perfetto's traced, recorded by perfetto ----
io_start_traced
REFGEN_PERIOD_US=200 e2e_spawn refgen "$P_REFGEN"
REFGEN=$E2E_LAST_PID
io_wait_ds track_event dev.refgen.test_packets

long_cfg "$D/ring_nosys.pbtxt" RING_BUFFER true 0
io_perfetto_record "$D/ring_nosys.pbtxt" "$D/p_ring_nosys.pftrace"
inspect "$D/p_ring_nosys.pftrace" "$D/a.db"
ow=$(ins_stat "$D/a.db" traced_buf_bytes_overwritten 0)
[ "$ow" -gt 0 ] || e2e_fail "64 KiB ring read every 1 s did not wrap (refgen writes ~2 MB/s)"
[ "$(ins_stat "$D/a.db" long_trace_mode_bytes_overwritten 0)" = "$ow" ] ||
    e2e_fail "long_trace_mode_bytes_overwritten missing or wrong"
[ "$(ins_stat "$D/a.db" config_write_into_file_no_flush -1)" = 1 ] ||
    e2e_fail "config_write_into_file_no_flush missing"
io_stats_match "$D/p_ring_nosys.pftrace"

long_cfg "$D/ring_sys.pbtxt" RING_BUFFER false 0
io_perfetto_record "$D/ring_sys.pbtxt" "$D/p_ring_sys.pftrace"
io_stats_match "$D/p_ring_sys.pftrace"
io_have_tp && sysinfo_keys "$D/p_ring_sys.pftrace" >"$D/traced_keys.txt"

long_cfg "$D/discard.pbtxt" DISCARD true 200
io_perfetto_record "$D/discard.pbtxt" "$D/p_discard.pftrace"
inspect "$D/p_discard.pftrace" "$D/b.db"
[ "$(ins_stat "$D/b.db" config_write_into_file_discard 0)" = 1 ] ||
    e2e_fail "config_write_into_file_discard missing"
io_stats_match "$D/p_discard.pftrace"
io_stop "$REFGEN"
io_stop "$DAEMON_PID"

# ---- shmtraced: perfetto and shmtrace record, write_into_file ----
io_start_shmtraced
REFGEN_PERIOD_US=200 e2e_spawn refgen "$P_REFGEN"
REFGEN=$E2E_LAST_PID
io_wait_ds track_event dev.refgen.test_packets
long_cfg "$D/s_ring.pbtxt" RING_BUFFER true 200
io_perfetto_record "$D/s_ring.pbtxt" "$D/s_ring_perfetto.pftrace"
"$CLI" record -q -c "$D/s_ring.pbtxt" -o "$D/s_ring_shm.pftrace" \
    2>"$D/rec.log" || e2e_fail "shmtrace record (write_into_file) failed"
sed -e 's/size_kb: 64 /size_kb: 32768 /' "$D/s_ring.pbtxt" >"$D/s_big.pbtxt"
io_perfetto_record "$D/s_big.pbtxt" "$D/s_big.pftrace"
for t in s_ring_perfetto s_ring_shm s_big; do
    io_check "$D/$t.pftrace"
    io_expect test_writers -eq 2 "$t"
    io_no_error_stats "$D/$t.pftrace"
    io_stats_match "$D/$t.pftrace"
done
# SystemInfo, as traced writes it: no flush_period_ms is then no error,
# since the service says it flushes before its file writes (v54 and on),
# and trace processor has the machine's metadata: the same keys as from
# traced's trace above, with this machine's values. Without SystemInfo
# (disable_system_info), the error comes back, as with traced.
long_cfg "$D/s_noflush.pbtxt" RING_BUFFER false 0
io_perfetto_record "$D/s_noflush.pbtxt" "$D/s_noflush.pftrace"
io_no_error_stats "$D/s_noflush.pftrace"
io_stats_match "$D/s_noflush.pftrace"
inspect "$D/s_noflush.pftrace" "$D/e.db"
[ "$(sqlite3 "$D/e.db" "select value from trace_info
      where key = 'system_release'")" = "$(uname -r)" ] ||
    e2e_fail "inspector: trace_info.system_release is not uname -r"
sqlite3 "$D/e.db" "select value from trace_info
    where key = 'tracing_service_version'" | grep -q -- '-shmtraced-' ||
    e2e_fail "inspector: trace_info names no shmtraced service"
if io_have_tp; then
    sysinfo_keys "$D/s_noflush.pftrace" >"$D/shm_keys.txt"
    [ -s "$D/shm_keys.txt" ] || e2e_fail "no SystemInfo metadata from shmtraced"
    diff "$D/traced_keys.txt" "$D/shm_keys.txt" >&2 ||
        e2e_fail "SystemInfo: metadata keys differ (< traced, > shmtraced)"
    [ "$(tp_meta "$D/s_noflush.pftrace" system_release)" = "$(uname -r)" ] ||
        e2e_fail "SystemInfo: system_release is not uname -r"
    [ "$(tp_meta "$D/s_noflush.pftrace" system_machine)" = "$(uname -m)" ] ||
        e2e_fail "SystemInfo: system_machine is not uname -m"
    case "$(tp_meta "$D/s_noflush.pftrace" tracing_service_version)" in
    "Perfetto v"*-shmtraced-*) ;;
    *) e2e_fail "SystemInfo: tracing_service_version names no shmtraced" ;;
    esac
fi
long_cfg "$D/s_noflush_nosys.pbtxt" RING_BUFFER true 0
"$CLI" record -q -c "$D/s_noflush_nosys.pbtxt" \
    -o "$D/s_noflush_nosys.pftrace" 2>"$D/rec.log" ||
    e2e_fail "shmtrace record (no SystemInfo) failed"
inspect "$D/s_noflush_nosys.pftrace" "$D/d.db"
[ "$(ins_stat "$D/d.db" config_write_into_file_no_flush -1)" = 1 ] ||
    e2e_fail "no SystemInfo, no flush_period_ms: config_write_into_file_no_flush missing"
io_stats_match "$D/s_noflush_nosys.pftrace"

# A buffer large enough streams everything: no gap, nothing overwritten.
io_refgen_content "$D/s_big.pftrace" "shmtraced write_into_file"
inspect "$D/s_big.pftrace" "$D/c.db"
[ "$(ins_stat "$D/c.db" long_trace_mode_bytes_overwritten 0)" = 0 ] ||
    e2e_fail "a 32 MiB buffer overwrote data in 2.5 s"
io_stop "$REFGEN"
e2e_stop_daemon
echo "PASS: long traces (${IO_STATS_CHECKED:-0} traces' stats equal to" \
     "trace processor's)"
