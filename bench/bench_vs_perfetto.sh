#!/bin/sh
# bench/bench_vs_perfetto.sh - shmtraced and Perfetto's traced side by side,
# in one run, on the same workloads, with the same consumers
# (`make bench-vs-perfetto`; not part of make check).
#
# Both daemons run at once on private sockets (each idle while the other
# works). For every case (payload SIZE, PRODUCERS shmtrace-producer
# processes, stall policy) and every consumer (Perfetto's
# `perfetto --txt -c CFG` and `shmtrace record -c CFG`; CFG = one 128 MiB
# ring buffer, write_into_file, file_write_period_ms 100), RUNS rounds each
# record the case once through each service, alternating which goes first
# (bench_vs_run.sh, timed by hyperfine --runs 1). Then Perfetto's C SDK
# producer refgen (REFGEN_PERIOD_US=0, its drop policy) for REFGEN_MS
# through both services, twice: with the SMB each service picks, and with
# one named in the config for both; and dd / cat of each case's trace file
# (the page-cache ceiling for the same bytes) with the CPU that write()s of
# those bytes cost (bench_fwrite: the floor for a service that writes the
# file, reserving its space ahead as shmtraced does). Figures per cell,
# summed over the rounds:
#   MB/s      trace file bytes / wall time of the recording (hyperfine's
#             wall clock: CLOCK_MONOTONIC), consumer start to consumer exit
#   svc ns/p  the CPU time of the daemon's threads, per packet in the
#             trace: the sum over /proc/PID/task/*/schedstat (nanoseconds
#             on a CPU) of each thread's growth between a snapshot before
#             and one after the recording (a thread born meanwhile counts
#             from 0). /proc/PID/stat's utime + stime, which also count
#             threads that have exited, come in USER_HZ ticks (10 ms): a
#             64 B cell's recording costs ~50 ms of service CPU, so a tick
#             at each end moved its figure by up to 40%. The ticks still
#             check the sum: a recording whose two figures differ by more
#             than 2 ticks (a thread exited during it, and took its time
#             out of /proc/PID/task) uses the ticks, and says so below the
#             table
#   prod ns/p the producers' user + sys CPU (wait4 rusage, bench_cputime)
#             per packet
#   lost      packets written but not in the trace: gaps in each writer's
#             seq_value, and the packets missing before its first and after
#             its last packet in the trace (svc_tracecheck on every
#             recording; must be 0 with the stall policy). The run stops
#             only once every producer has written and flushed all of its
#             packets (bench_vs_run.sh), so none is still to come.
# and the ratio ours : traced, oriented so that > 1 means shmtraced is
# better (throughput ours/theirs, CPU theirs/ours). Below the table, cells
# whose recordings differ by 1.5x or more in service CPU per packet are
# listed with each recording's figure (the sums hide such a spread).
#
# The page cache is warmed before each recording and each ceiling copy (a
# file as large as the trace is written and deleted in the hyperfine
# prepare step, outside the timing). On a VM that hands free guest memory
# back to its host (free page reporting: this Firecracker machine's
# /sys/module/page_reporting reports freed pages at once, in passes),
# every page the kernel takes from memory already reported costs a host
# fault: a trace file written into such pages made the same recording run
# at 220 instead of 1240 MB/s, with 68% of the service's time in the page
# cache copy. Warming gives the recording pages freed a moment earlier.
# As many as the recording takes: its trace file plus the session's
# 128 MiB buffer (traced maps a fresh buffer every session, shmtraced
# for its first); for refgen, whose trace size depends on the service,
# 1.5 MB per millisecond of session, more than either service has
# written here. (With 512 MB warmed, shmtraced's 1.0-1.5 GB refgen
# traces spent up to 65% of the service's time in the page cache copy:
# 68-163 ns per 100 bytes against 49-69 with 2-3 GB, 2026-12-06.) A
# reporting pass between the warm-up and the recording still takes them,
# so this reduces the noise, it does not remove it (both services are
# exposed alike; BENCH_VS_RUNS > 1 averages it). The run prints how much
# memory the guest reported during it. BENCH_VS_WARM=0: no warm-up.
# How much the warm-up hides (2026-12-06, a micro outside the tree: 1 GiB
# in 1 MiB pwritev2() calls to ext4, system CPU by rusage): 1815-2956 ns
# per KiB into cold page cache (right after another file was deleted)
# against 188-219 warmed; with RWF_DONTCACHE (Linux 6.14+; each page is
# dropped once written back, so the next writes reuse it) 212-226 ns
# either way, but only ~2 GB/s of wall speed (writeback-bound) against
# 4.3-5.0 warmed. Neither service uses it; a user on such a VM pays the
# cold figure.
#
# Perfetto's binaries: $PERFETTO_BIN, else $top_srcdir/../shared/perfetto/bin.
# Without them only our figures and the ceilings are printed.
# Environment: BENCH_VS_MB (MB per recording for 1 KiB and larger payloads,
# default 256), BENCH_VS_SMALL_MB (for payloads < 1 KiB, default 64),
# BENCH_VS_RUNS (default 3), BENCH_VS_CASES (SIZE:PRODUCERS list, default
# "64:1 64:4 1024:1 1024:4 65536:1 65536:4"), BENCH_VS_CONSUMERS (default
# "perfetto shmtrace"), BENCH_VS_REFGEN_MS (default 2000, 0 skips refgen),
# BENCH_VS_WARM (default 1), BENCH_DIR (where the files go; default the
# build tree), BENCH_SHMTRACED_ARGS (options for shmtraced, e.g.
# --direct-io; BENCH_OTHER_ARGS for the other daemon: bench_services.sh).
#
# A/B of two builds of shmtraced (bench/ab_service.sh, `make bench-ab`):
# BENCH_VS_BASELINE=DAEMON runs DAEMON (another build's shmtraced) in
# traced's place, named BENCH_VS_BASELINE_NAME (default "base") in the
# output, with the same workloads, alternation and figures; the perfetto
# consumer and refgen run when Perfetto's binaries are there.
# Below the table (every run with RUNS > 1, A/B or not) each cell's median
# MB/s and service CPU per packet of each side over its recordings, and
# their ratio: one slow recording moves a sum, not a median, and a 5%
# change hides in the sums on a noisy host.
set -eu
: "${top_builddir:=.}"
: "${top_srcdir:=$top_builddir}"
export top_builddir
MB=${BENCH_VS_MB:-256}
SMALL_MB=${BENCH_VS_SMALL_MB:-64}
RUNS=${BENCH_VS_RUNS:-3}
CASES=${BENCH_VS_CASES-"64:1 64:4 1024:1 1024:4 65536:1 65536:4"}
CONSUMERS=${BENCH_VS_CONSUMERS:-"perfetto shmtrace"}
REFGEN_MS=${BENCH_VS_REFGEN_MS:-2000}
WARM=${BENCH_VS_WARM:-1}
here=$(cd "$(dirname "$0")" && pwd)
. "$here/bench_producer.sh"
PERFETTO_BIN=${PERFETTO_BIN:-$top_srcdir/../shared/perfetto/bin}
export PERFETTO_BIN
command -v hyperfine >/dev/null ||
    { echo "bench_vs_perfetto: hyperfine not found (apt-get install" \
        "hyperfine)" >&2; exit 1; }
SERVICES="shmtraced"
# OTHER: how the output names the second service; OTHER_DAEMON: the
# program bench_services.sh starts for it
BASELINE=${BENCH_VS_BASELINE:-}
OTHER=traced
OTHER_DAEMON=$PERFETTO_BIN/traced
if [ -n "$BASELINE" ]; then
    [ -x "$BASELINE" ] || { echo "bench_vs_perfetto: BENCH_VS_BASELINE" \
        "$BASELINE is not an executable daemon" >&2; exit 2; }
    SERVICES="shmtraced traced"
    OTHER=${BENCH_VS_BASELINE_NAME:-base}
    OTHER_DAEMON=$BASELINE
    if [ ! -x "$PERFETTO_BIN/perfetto" ]; then
        echo "bench_vs_perfetto: no Perfetto binaries in $PERFETTO_BIN:" \
            "the shmtrace consumer only, no refgen"
        CONSUMERS=shmtrace
        REFGEN_MS=0
    fi
elif [ -x "$PERFETTO_BIN/traced" ] && [ -x "$PERFETTO_BIN/perfetto" ]; then
    SERVICES="shmtraced traced"
else
    echo "bench_vs_perfetto: no Perfetto binaries in $PERFETTO_BIN" \
        "(set PERFETTO_BIN): printing shmtraced and the ceilings only"
    CONSUMERS=shmtrace
    REFGEN_MS=0
fi
export OTHER_DAEMON
REPORTED=/sys/module/page_reporting/parameters/reported_kib
reported0=$(cat "$REPORTED" 2>/dev/null || echo -)
# The host's speed now and at the end, and the CPU time the host took
# away during the run (steal, /proc/stat): printed with the table, so that
# runs can be compared. These VMs' memory speed moves from one boot to the
# next, and every figure with it, the ratios to traced too (more of
# traced's time is its own code, more of ours moving bytes): on
# 2026-12-07 the same code cost 325-402 ns of service CPU per 1 KiB packet
# in one session and 805-944 in the next, whose memcpy ran at 7-8 GB/s.
# The speed is bench_tb's baseline (memcpy of 4 KiB pieces into 64 MiB,
# per CPU-second; 0.4 s).
hostspeed() {
    if out=$("$top_builddir/bench/bench_tb" --quick --only memcpy \
            --no-warm 2>/dev/null); then
        echo "$out" | sed 's/^memcpy/memcpy of 4 KiB pieces into 64 MiB:/'
    else
        echo "(bench_tb failed)"
    fi
}
cpu_times() { # "steal total" of all CPUs, in ticks (/proc/stat)
    awk '$1 == "cpu" { t = 0; for (i = 2; i <= 9; i++) t += $i
        print $9, t; exit }' /proc/stat 2>/dev/null
}
hostspeed0=$(hostspeed)
cpu0=$(cpu_times)
DIR=$(mktemp -d "${BENCH_DIR:-$top_builddir}/bench-vs.XXXXXX")
DIR=$(cd "$DIR" && pwd)
pid_shmtraced=""
pid_traced=""
cleanup() {
    set +e
    for p in $pid_shmtraced $pid_traced; do
        kill -TERM "$p" 2>/dev/null && wait "$p" 2>/dev/null
    done
    [ "${BENCH_VS_KEEP:-0}" = 1 ] && echo "kept $DIR" >&2 || rm -rf "$DIR"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
hz=$(getconf CLK_TCK)
# warm_cmd MB: the prepare command that warms MB of page cache (above)
warm_cmd() {
    if [ "$WARM" = 1 ]; then
        echo "dd if=/dev/zero of=$DIR/warm bs=1M count=$1 status=none &&" \
            "rm -f $DIR/warm"
    else
        echo true
    fi
}

BENCH_NAME=bench_vs_perfetto
. "$here/bench_services.sh"
for svc in $SERVICES; do
    start_service "$svc"
    eval "pid_$svc=\$service_pid"
done
ticks() { # PID: utime + stime of that process, in USER_HZ ticks
    sed 's/.*) //' "/proc/$1/stat" | awk '{print $12 + $13}'
}
# threads PID: "TID NS" for each live thread of PID (schedstat's first
# field: nanoseconds it has run); a thread gone between the glob and the
# read is left out, and then shows as exited
threads() {
    for t in /proc/"$1"/task/*; do
        read -r ns _ <"$t/schedstat" 2>/dev/null && echo "${t##*/} $ns"
    done
}
# svc_ns BEFORE AFTER TICKS: nanoseconds the threads ran between the two
# snapshots; TICKS (the utime + stime growth) when a thread of BEFORE is
# gone from AFTER or the sum disagrees with TICKS by more than 2 ticks,
# then with " ticks" after the figure
svc_ns() {
    awk -v ticks="$3" -v hz="$hz" '
        NR == FNR { before[$1] = $2; next }
        { after[$1] = $2 }
        END {
            ok = 1
            for (t in before) if (!(t in after)) ok = 0
            for (t in after) s += after[t] - before[t]
            tick_ns = ticks * 1e9 / hz
            if (s - tick_ns > 2e9 / hz || tick_ns - s > 2e9 / hz) ok = 0
            if (ok) printf "%.0f\n", s
            else printf "%.0f ticks\n", tick_ns
        }' "$1" "$2"
}

config() { # FILE DATA_SOURCE DURATION_MS [LINE]: LINE added to the config
    {
        echo 'buffers { size_kb: 131072 fill_policy: RING_BUFFER }'
        echo "data_sources { config { name: \"$2\" } }"
        echo 'write_into_file: true'
        echo 'file_write_period_ms: 100'
        [ "$3" -gt 0 ] && echo "duration_ms: $3"
        [ -n "${4:-}" ] && echo "$4"
        :
    } >"$1"
}

# run_cell CELL SERVICE CONSUMER: one recording; appends
# "wall_s bytes svc_ns prod_cpu_s packets lost" to $DIR/CELL.SERVICE.CONSUMER
run_cell() {
    cell=$1 svc=$2 cons=$3
    sockets "$svc"
    eval "dpid=\$pid_$svc"
    export CONSUMER=$cons
    export OUT="$DIR/$cell.$svc.$cons.pftrace" PCPU="$DIR/pcpu"
    : >"$PCPU"
    t0=$(ticks "$dpid")
    threads "$dpid" >"$DIR/threads0"
    hyperfine --runs 1 --style none \
        --prepare "rm -f $OUT $OUT.idle && $(warm_cmd "$WARM_MB")" \
        --export-json "$DIR/run.json" -n "$cell $svc $cons" \
        "sh $here/bench_vs_run.sh" >"$DIR/hyperfine.txt" 2>&1 ||
        { cat "$DIR/hyperfine.txt" "$OUT.log" >&2
          echo "bench_vs_perfetto: $cell through $svc with $cons failed" >&2
          exit 1; }
    sleep 0.2       # the session's teardown is the daemon's CPU too
    t1=$(ticks "$dpid")
    threads "$dpid" >"$DIR/threads1"
    read -r ns how <<NS
$(svc_ns "$DIR/threads0" "$DIR/threads1" $((t1 - t0)))
NS
    [ -n "$how" ] && echo "$cell through $svc with $cons: service CPU" \
        "from /proc/PID/stat ticks (a thread exited during the recording," \
        "or its threads' run times disagreed with the ticks)" \
        >>"$DIR/notes"
    wall=$(sed -n 's/.*"mean": *\([0-9.e+-]*\).*/\1/p' "$DIR/run.json" |
           head -n 1)
    # refgen's session lasts duration_ms; the 0.3 s before it is not ours
    [ "$WORKLOAD" = refgen ] && wall=$(awk -v m="$REFGEN_MS" \
        'BEGIN { print m / 1000 }')
    # a recording that stopped short (packets lost) waited for the file to
    # grow again before it was stopped: that wait is not the service's
    if [ -s "$OUT.idle" ]; then
        wall=$(awk -v w="$wall" -v i="$(cat "$OUT.idle")" \
            'BEGIN { print w - i }')
        echo "bench_vs_perfetto: $cell through $svc with $cons stopped" \
            "short of every packet; $(cat "$OUT.idle") s of waiting taken" \
            "off its wall time" >&2
    fi
    bytes=$(stat -c %s "$OUT")
    pcpu=$(awk '{ s += $1 } END { printf "%.6f", s / 1e6 }' "$PCPU")
    if [ "$WORKLOAD" = synthetic ]; then set -- --per-sequence "$COUNT"
    else set --; fi
    "$top_builddir/tests/svc_tracecheck" "$@" "$OUT" >"$DIR/check.txt" \
        2>&1 || true
    packets=$(sed -n 's/^test_packets=//p' "$DIR/check.txt")
    [ -n "$packets" ] || { cat "$DIR/check.txt" >&2
        echo "bench_vs_perfetto: unreadable trace ($cell $svc $cons)" >&2
        exit 1; }
    lost=$(sed -n 's/^lost_in_gaps=//p' "$DIR/check.txt")
    if [ "$WORKLOAD" = synthetic ]; then
        lead=$(sed -n 's/^lost_leading=//p' "$DIR/check.txt")
        lost=$((lost + lead))
        trail=$(sed -n 's/^lost_trailing=//p' "$DIR/check.txt")
        lost=$((lost + ${trail:-0}))
        [ "${trail:-0}" -gt 0 ] && echo "$cell through $svc with $cons:" \
            "$trail packet(s) after the last one in the trace (written" \
            "and flushed before the session stopped: lost)" >>"$DIR/notes"
    fi
    echo "$wall $bytes $ns $pcpu $packets $lost" \
        >>"$DIR/$cell.$svc.$cons"
    rm -f "$OUT.log"
}

# report CELL LABEL CONSUMER: one table row
report() {
    cell=$1 label=$2 cons=$3
    for svc in shmtraced traced; do
        f="$DIR/$cell.$svc.$cons"
        if [ -f "$f" ]; then
            awk '{ w += $1; b += $2; t += $3; p += $4; n += $5;
                               l += $6 }
                END { printf "%.1f %.0f %.0f %d\n", b / 1048576 / w,
                      t / n, 1e9 * p / n, l }' "$f"
        else
            echo "- - - -"
        fi
    done | tr '\n' ' ' | awk -v label="$label" -v cons="$cons" '
    function ratio(a, b) {
        return (a == "-" || b == "-" || a + 0 == 0 || b + 0 == 0) ? "   -" \
            : sprintf("%5.2fx", a / b)
    }
    { printf "%-14s %-9s %8s %8s %6s | %6s %6s %6s | %6s %6s %6s | %5s %5s\n",
        label, cons, $1, $5, ratio($1, $5), $2, $6, ratio($6, $2),
        $3, $7, ratio($7, $3), $4, $8 }'
}

export WORKLOAD=synthetic
export CFG="$DIR/synthetic.cfg"
config "$CFG" shmtrace.synthetic 0
# synthetic_case SIZE PRODUCERS: exports the case's SIZE, PRODUCERS, COUNT
# (packets per producer) and sets mb (MB recorded) and WARM_MB (the page
# cache to warm: mb MB of payload plus >= 30 bytes per packet, with room,
# and the 128 MiB buffer)
synthetic_case() {
    SIZE=$1 PRODUCERS=$2
    if [ "$SIZE" -lt 1024 ]; then mb=$SMALL_MB; else mb=$MB; fi
    COUNT=$((mb * 1048576 / PRODUCERS / SIZE))
    WARM_MB=$((mb + mb * 40 / SIZE + 16 + 128))
    export SIZE PRODUCERS COUNT
}

# The cold row: each daemon's first session, before any other (1 KiB x4,
# first consumer). A daemon's first ring is fresh memory the kernel must
# fault in and zero; later sessions of shmtraced reuse a cached ring
# (libbuf/tb_mem.c), traced maps a fresh buffer every session. Every
# other row runs on daemons that have had this session.
first_cons=${CONSUMERS%% *}
synthetic_case 1024 4
for svc in $SERVICES; do
    run_cell cold "$svc" "$first_cons"
done
rm -f "$DIR"/cold.*.pftrace
rows=""
for c in $CASES; do
    synthetic_case "${c%%:*}" "${c##*:}"
    cell="s${SIZE}p${PRODUCERS}"
    r=0
    while [ $r -lt "$RUNS" ]; do
        order=$SERVICES
        [ $((r % 2)) -eq 1 ] && order=$(echo "$SERVICES" |
            awk '{ for (i = NF; i > 0; i--) printf "%s ", $i }')
        for cons in $CONSUMERS; do
            for svc in $order; do
                run_cell "$cell" "$svc" "$cons"
            done
        done
        r=$((r + 1))
    done
    # the ceiling: dd and cat of the last shmtraced trace of the case
    src=$(ls "$DIR/$cell.shmtraced."*.pftrace | head -n 1)
    hyperfine --runs "$RUNS" --style none --export-json "$DIR/copy.json" \
        --prepare "rm -f $DIR/copy && $(warm_cmd "$WARM_MB")" \
        -n "dd bs=1M" "dd if=$src of=$DIR/copy bs=1M status=none" \
        -n "cat" "sh -c 'cat $src > $DIR/copy'" \
        -n "write()" "$top_builddir/bench/bench_fwrite $src $DIR/copy \
            $DIR/$cell.fwrite" >"$DIR/hyperfine.txt" 2>&1
    sed -n 's/.*"mean": *\([0-9.e+-]*\).*/\1/p' "$DIR/copy.json" |
        tr '\n' ' ' | awk -v b="$(stat -c %s "$src")" '{
        printf "%.1f %.1f\n", b / 1048576 / $1, b / 1048576 / $2 }' \
        >"$DIR/$cell.ceiling"
    rm -f "$DIR/copy" "$DIR/$cell".*.pftrace
    rows="$rows $cell:$SIZE:$PRODUCERS:$mb"
done

# refgen twice: the config naming no SMB size (each service picks refgen's
# SMB: traced 256 KiB, shmtraced 1/64 of the session's buffers, 2 MiB here,
# service/svc_commit.c), then naming the same one for both (2 MiB of 4 KiB
# pages), so that the service's work and its sizing show apart.
REFGEN_SMB='producers { producer_name: "refgen" shm_size_kb: 2048'
REFGEN_SMB="$REFGEN_SMB page_size_kb: 4 }"
if [ "$REFGEN_MS" -gt 0 ]; then
    export WORKLOAD=refgen PRODUCERS=1 SIZE=64 COUNT=0
    WARM_MB=$((REFGEN_MS * 3 / 2 + 128))
    for cell in refgen refgensmb; do
        export CFG="$DIR/$cell.cfg"
        if [ $cell = refgen ]; then
            config "$CFG" dev.refgen.test_packets "$REFGEN_MS"
        else
            config "$CFG" dev.refgen.test_packets "$REFGEN_MS" "$REFGEN_SMB"
        fi
        r=0
        while [ $r -lt "$RUNS" ]; do
            order=$SERVICES
            [ $((r % 2)) -eq 1 ] && order="traced shmtraced"
            for cons in $CONSUMERS; do
                for svc in $order; do
                    run_cell $cell "$svc" "$cons"
                done
            done
            r=$((r + 1))
        done
        rm -f "$DIR"/$cell.*.pftrace
    done
fi

echo
if [ -n "$BASELINE" ]; then
    what="shmtraced (this tree) vs $OTHER ($BASELINE)"
else
    what="shmtraced vs Perfetto's traced"
fi
echo "$what, one run, $RUNS recordings per cell," \
    "alternating; load: $(uptime | sed 's/.*load/load/')"
[ -n "${BENCH_SHMTRACED_ARGS:-}" ] &&
    echo "shmtraced started as: shmtraced $BENCH_SHMTRACED_ARGS"
[ -n "${BENCH_OTHER_ARGS:-}" ] &&
    echo "$OTHER started with: $BENCH_OTHER_ARGS"
echo "ratio > 1: shmtraced better (MB/s ours/$OTHER; CPU $OTHER/ours)." \
    "Wall clock: hyperfine (CLOCK_MONOTONIC);"
# The mount's own type (stat -f names ext4 "ext2/ext3": one magic number).
fstype=$(findmnt -n -o FSTYPE -T "$DIR" 2>/dev/null) ||
    fstype=$(stat -f -c %T "$DIR")
echo "files in $DIR ($fstype);" \
    "service CPU: its threads' /proc/PID/task/*/schedstat (ns); producer" \
    "CPU: wait4 rusage (bench_cputime)."
# shmem THP: in "advise" mode libshm's SMBs of >= 2 MiB (4 MiB here) get
# huge pages (libshm/smb_shm.c), which moves the producers' and the
# service's CPU per packet; Debian's default is "never"
THP=/sys/kernel/mm/transparent_hugepage/shmem_enabled
[ -r "$THP" ] && echo "shmem THP: $(sed 's/.*\[\(.*\)\].*/\1/' "$THP")" \
    "($THP; \"advise\": 4 MiB SMBs on huge pages, libshm/smb_shm.c)"
[ "$WARM" = 1 ] && echo "page cache warmed before each recording and" \
    "copy (BENCH_VS_WARM=0: not; see the top of bench_vs_perfetto.sh)."
printf "%-14s %-9s %8s %8s %6s | %6s %6s %6s | %6s %6s %6s | %5s %5s\n" \
    "case" consumer "MB/s" "$OTHER" ratio "svc ns/p" "$OTHER" ratio \
    "prod ns/p" "$OTHER" ratio lost "$OTHER"
for row in $rows; do
    IFS=: read -r cell size p mb <<ROW
$row
ROW
    if [ "$size" -ge 1024 ]; then
        label="$((size / 1024)) KiB x$p"
    else
        label="$size B x$p"
    fi
    for cons in $CONSUMERS; do
        report "$cell" "$label" "$cons"
    done
done
report cold "1 KiB x4 cold" "$first_cons"
echo "(cold: each daemon's first session since it started; the other" \
    "rows follow it)"
if [ "$REFGEN_MS" -gt 0 ]; then
    for cons in $CONSUMERS; do
        report refgen "refgen (C SDK)" "$cons"
    done
    for cons in $CONSUMERS; do
        report refgensmb "refgen same SMB" "$cons"
    done
    echo "(refgen: Perfetto's C SDK, 2 threads, drop policy, ${REFGEN_MS} ms" \
        "per recording; lost = gaps in its seq_value, the SDK's own" \
        "SMB-full drops. Its SMB: each service's choice (traced 256 KiB," \
        "shmtraced 2 MiB: 1/64 of the buffers), then 2 MiB of 4 KiB pages" \
        "for both, named in the config)"
fi
# The sums above hide a cell whose recordings differ (in the 64 KiB cells
# of full runs one recording has cost 3-4x the others, cause not found):
# such cells are listed with each recording's service CPU per packet.
spread=""
for cell in cold $(for row in $rows; do echo "${row%%:*}"; done) refgen \
        refgensmb; do
    for svc in shmtraced traced; do
        for cons in $CONSUMERS; do
            f="$DIR/$cell.$svc.$cons"
            [ -f "$f" ] || continue
            name=$svc
            [ "$svc" = traced ] && name=$OTHER
            line=$(awk -v name="$cell $name $cons" '
                $5 > 0 { v[n++] = $3 / $5 }
                END {
                    if (n < 2) exit
                    lo = v[0]; hi = v[0]; s = ""
                    for (i = 0; i < n; i++) {
                        if (v[i] < lo) lo = v[i]
                        if (v[i] > hi) hi = v[i]
                        s = s (i ? " / " : "") sprintf("%.0f", v[i])
                    }
                    if (lo > 0 && hi >= 1.5 * lo)
                        printf "  %-28s %s ns (max/min %.1fx)\n", name, s,
                            hi / lo
                }' "$f")
            [ -n "$line" ] && spread="$spread$line
"
        done
    done
done
if [ -n "$spread" ]; then
    echo "cells whose recordings differ by 1.5x or more in service CPU per" \
        "packet (each recording, in order; the figures above sum them):"
    printf "%s" "$spread"
fi
[ -f "$DIR/notes" ] && cat "$DIR/notes"
# median FILE COLUMN: the median of one per-recording figure of a cell
# (1: MB/s, 2: service ns per packet)
median() {
    awk -v c="$2" '$5 > 0 { print (c == 1 ? $2 / 1048576 / $1 : $3 / $5) }' \
        "$1" | sort -g | awk '{ v[n++] = $1 } END {
        if (n == 0) print "-"
        else printf "%.1f\n", n % 2 ? v[(n - 1) / 2] \
                                       : (v[n / 2 - 1] + v[n / 2]) / 2 }'
}
# Printed in every run: with 3 recordings a cell's median ignores one
# slow recording, where its sum does not (2026-12-07: a 64 KiB cell's
# recordings of 91.8, 52.9 and 15.9 us per packet put it at 4.1x traced
# in the sums; its usual figure is about 16 us).
if [ "$RUNS" -gt 1 ]; then
    echo
    echo "medians of the recordings (the A/B figures; the sums above let" \
        "one slow recording move a cell)"
    printf "%-16s %-9s %8s %8s %6s | %8s %8s %6s\n" cell consumer "MB/s" \
        "$OTHER" ratio "svc ns/p" "$OTHER" ratio
    for cell in cold $(for row in $rows; do echo "${row%%:*}"; done) \
            refgen refgensmb; do
        for cons in $CONSUMERS; do
            a="$DIR/$cell.shmtraced.$cons" b="$DIR/$cell.traced.$cons"
            [ -f "$a" ] && [ -f "$b" ] || continue
            printf "%s %s %s %s %s %s\n" "$cell" "$cons" \
                "$(median "$a" 1)" "$(median "$b" 1)" \
                "$(median "$a" 2)" "$(median "$b" 2)" | awk '
            function ratio(x, y) {
                return (x == "-" || y == "-" || x + 0 == 0 || y + 0 == 0) \
                    ? "   -" : sprintf("%5.3fx", x / y)
            }
            { printf "%-16s %-9s %8s %8s %6s | %8s %8s %6s\n", $1, $2,
                $3, $4, ratio($3, $4), $5, $6, ratio($6, $5) }'
        done
    done
fi
echo "host at the start: $hostspeed0 (bench_tb's baseline, per CPU-second)"
echo "host at the end:   $(hostspeed)"
cpu1=$(cpu_times)
if [ -n "$cpu0" ] && [ -n "$cpu1" ]; then
    echo "$cpu0 $cpu1" | awk '$4 > $2 {
        printf "steal: %.1f%% of the CPUs'"'"' time during this run",
            100 * ($3 - $1) / ($4 - $2)
        print " (the host ran something else on them)" }'
fi
if [ "$reported0" != - ]; then
    reported1=$(cat "$REPORTED")
    echo "free page reporting: the guest handed" \
        "$(((reported1 - reported0) / 1024)) MiB back to its host during" \
        "this run (each reused page then costs a host fault; see the top" \
        "of bench_vs_perfetto.sh)"
fi
echo
echo "page-cache ceiling, same bytes (the case's shmtraced trace), same run;"
echo "write() ns/p: CPU of write()s of 4 MiB putting those bytes in the page"
echo "cache, the space reserved 8 MiB ahead as shmtraced does (bench_fwrite,"
echo "rusage), per packet, least of $RUNS runs: a floor for a service that"
echo "writes the file itself; svc ns/p: shmtraced's, from the table above"
printf "%-14s %8s %8s %9s %9s %12s %9s %9s\n" case "dd MB/s" "cat MB/s" \
    "ours/dd" "ours/cat" "write() ns/p" "svc ns/p" "svc/write"
for row in $rows; do
    IFS=: read -r cell size p mb <<ROW
$row
ROW
    if [ "$size" -ge 1024 ]; then
        label="$((size / 1024)) KiB x$p"
    else
        label="$size B x$p"
    fi
    # ours: MB/s, bytes per packet and service ns per packet over every
    # recording of the case through shmtraced
    read -r ours bpp svc <<OURS
$(cat "$DIR/$cell.shmtraced."* | awk '{ w += $1; b += $2;
        t += $3; n += $5 } END { printf "%.1f %.3f %.0f", b / 1048576 / w,
        b / n, t / n }')
OURS
    # the floor: the least of the runs (the others met more of the noise
    # described at the top)
    floor=$(awk -v bpp="$bpp" '$3 > 0 { v = 1e9 * $2 / $3 * bpp
            if (!n++ || v < min) min = v }
        END { printf "%.0f", min }' "$DIR/$cell.fwrite")
    read -r dd cat <"$DIR/$cell.ceiling"
    awk -v l="$label" -v d="$dd" -v c="$cat" -v o="$ours" -v f="$floor" \
        -v s="$svc" 'BEGIN {
        printf "%-14s %8.1f %8.1f %8.2fx %8.2fx %12s %9s %8s\n", l, d, c,
            o / d, o / c, f, s, (f > 0 ? sprintf("%.2fx", s / f) : "-") }'
done
