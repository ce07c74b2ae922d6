#!/bin/sh
# io_cli_conventions.sh - `shmtrace record` takes Perfetto's command-line
# conventions, against shmtraced with refgen: --txt, text detected without
# it, a binary config detected and sent byte for byte, `-c -` (text and
# binary on stdin), `-o -` (trace on stdout), --background (prints the PID
# of the process that goes on recording), a warning naming the registered
# data sources for an unknown one, and the config reaching the service as
# given (no experimental_mode added) plus only what flags set.
. "$top_srcdir/tests/interop/io_lib.sh"
e2e_need_tools "$SHMTRACED" "$IO_CHECK" "$IO_CANON"
D=$E2E_DIR

io_start_shmtraced
REFGEN_PERIOD_US=1000 e2e_spawn refgen "$P_REFGEN"
REFGEN=$E2E_LAST_PID
io_wait_ds track_event dev.refgen.test_packets

cat >"$D/cfg.pbtxt" <<CFG
buffers { size_kb: 8192 fill_policy: RING_BUFFER }
data_sources { config { name: "track_event"
  track_event_config { enabled_categories: "refgen" } } }
data_sources { config { name: "dev.refgen.test_packets" } }
duration_ms: 600
CFG
# canon TRACE NAME: the trace's config, canonical, facts in NAME.facts;
# and the trace is sound for trace processor and the inspector.
canon() {
    io_trace_ok "$1"
    io_check "$1" --dump-config "$D/$2.cfg"
    io_expect kind.33 -eq 1 "$2: trace_config packet"
    "$IO_CANON" --strip-uuid "$D/$2.cfg" "$D/$2.canon" >"$D/$2.facts" ||
        e2e_fail "$2: trace_config does not decode"
}
fact() { sed -n "s/^$2=//p" "$D/$1.facts"; }

# Text, with --txt and detected.
"$CLI" record -q --txt -c "$D/cfg.pbtxt" -o "$D/txt.pftrace" ||
    e2e_fail "--txt -c failed"
io_refgen_content "$D/txt.pftrace" "--txt"
canon "$D/txt.pftrace" txt
[ "$(fact txt buffers_with_experimental_mode)" = 0 ] ||
    e2e_fail "shmtrace record added experimental_mode to the config"
"$CLI" record -q -c "$D/cfg.pbtxt" -o "$D/det.pftrace" ||
    e2e_fail "text config without --txt failed"
canon "$D/det.pftrace" det
cmp -s "$D/txt.canon" "$D/det.canon" || e2e_fail "detected text != --txt"

# Binary: detected, byte for byte (the service echoes the same config).
cp "$D/txt.cfg" "$D/cfg.bin"
"$CLI" record -q -c "$D/cfg.bin" -o "$D/bin.pftrace" ||
    e2e_fail "binary config failed"
canon "$D/bin.pftrace" bin
cmp -s "$D/txt.canon" "$D/bin.canon" || e2e_fail "binary config changed"
io_refgen_content "$D/bin.pftrace" "binary config"
if "$CLI" record -q --txt -c "$D/cfg.bin" -o "$D/x.pftrace" 2>"$D/err.log"
then
    e2e_fail "--txt accepted a binary config"
fi
grep -q "cfg.bin" "$D/err.log" || e2e_fail "no error naming the config: $(cat "$D/err.log")"

# stdin, both forms; stdout.
"$CLI" record -q -c - -o "$D/stdin_txt.pftrace" <"$D/cfg.pbtxt" ||
    e2e_fail "-c - (text) failed"
io_refgen_content "$D/stdin_txt.pftrace" "-c - text"
io_trace_ok "$D/stdin_txt.pftrace"
"$CLI" record -q -c - -o - <"$D/cfg.bin" >"$D/stdout.pftrace" ||
    e2e_fail "-c - -o - (binary) failed"
io_refgen_content "$D/stdout.pftrace" "-o - binary stdin"
canon "$D/stdout.pftrace" stdout
cmp -s "$D/txt.canon" "$D/stdout.canon" || e2e_fail "stdin binary changed"

# Flags add exactly what they say.
"$CLI" record -q -c "$D/cfg.pbtxt" -t 300ms -b 4m -o "$D/flags.pftrace" ||
    e2e_fail "flags with -c failed"
canon "$D/flags.pftrace" flags
[ "$(fact flags duration_ms)" = 300 ] || e2e_fail "-t 300ms not applied"
[ "$(fact flags buffer0_size_kb)" = 4096 ] || e2e_fail "-b 4m not applied"
[ "$(fact flags buffers_with_experimental_mode)" = 0 ] ||
    e2e_fail "flags added experimental_mode"

# Unknown data source: a warning listing the registered ones.
sed 's/dev.refgen.test_packets/no.such.source/' "$D/cfg.pbtxt" >"$D/unk.pbtxt"
"$CLI" record -q -c "$D/unk.pbtxt" -o "$D/unk.pftrace" 2>"$D/unk.log" ||
    e2e_fail "unknown data source made record fail"
grep -q "no.such.source" "$D/unk.log" &&
    grep -q "registered:.*dev.refgen.test_packets" "$D/unk.log" ||
    e2e_fail "no warning naming the registered data sources: $(cat "$D/unk.log")"
grep -q "track_event'" "$D/unk.log" && e2e_fail "warned about a registered source"
io_trace_ok "$D/unk.pftrace"

# --background: prints the PID, returns at once, the child records.
pid=$("$CLI" record -q --background -c "$D/cfg.pbtxt" -o "$D/bg.pftrace") ||
    e2e_fail "--background failed"
case "$pid" in ''|*[!0-9]*) e2e_fail "--background printed '$pid', not a PID" ;; esac
E2E_PIDS="$E2E_PIDS $pid"
i=0
while kill -0 "$pid" 2>/dev/null; do
    i=$((i + 1))
    [ $i -gt 600 ] && e2e_fail "background recorder $pid did not finish"
    sleep 0.05
done
io_refgen_content "$D/bg.pftrace" "--background"
io_trace_ok "$D/bg.pftrace"

io_stop "$REFGEN"
e2e_stop_daemon
echo "PASS: Perfetto's command-line conventions in shmtrace record"
