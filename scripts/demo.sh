#!/usr/bin/env bash
# scripts/demo.sh - the main job, run by `make demo` from the build tree.
#
# The whole pipeline in one go, on an embedded default:
#   1. start shmtraced on private sockets in a temporary directory;
#   2. start three synthetic producer processes (2 writer threads each);
#   3. record a few seconds into a small ring buffer read in long-trace mode,
#      so the producers outrun the reader and the ring wraps: there is loss
#      to find;
#   4. inspect the trace into SQLite;
#   5. print what was lost, where and why, with plain sqlite3 and sql/*.sql:
#      lost_packets.sql first (exact counts per writer, causes), then
#      data_loss.sql, loss_by_sequence.sql, buffer_usage.sql.
# Every process it starts is stopped on exit, whatever happens.
#
# At the end it says where the trace, the database and the logs are kept
# and how to open them (DEMO_KEEP=0 removes them instead).
#
# Knobs (environment): DEMO_SECONDS (3), DEMO_BUFFER (128k), DEMO_PRODUCERS
# (3), DEMO_RATE (packets/s per thread, 4000), DEMO_SIZE (payload bytes, 200),
# DEMO_KEEP (1: keep the output directory; 0: remove it at the end),
# DEMO_OUT (the output directory; default a new ${TMPDIR:-/tmp}/shmtrace-demo.*).
set -euo pipefail

: "${top_builddir:=.}"
: "${top_srcdir:=.}"
seconds=${DEMO_SECONDS:-3}
buffer=${DEMO_BUFFER:-128k}
nproducers=${DEMO_PRODUCERS:-3}
rate=${DEMO_RATE:-4000}
size=${DEMO_SIZE:-200}

daemon=$top_builddir/service/shmtraced
producer=$top_builddir/tools/shmtrace-producer
cli=$top_builddir/tools/shmtrace
inspect=$top_builddir/inspector/shmtrace-inspect
sqldir=$top_srcdir/sql
for prog in "$daemon" "$producer" "$cli" "$inspect"; do
  [ -x "$prog" ] || { echo "demo: $prog is not built (run make first)" >&2; exit 1; }
done
command -v sqlite3 >/dev/null || { echo "demo: sqlite3 not found (apt-get install sqlite3)" >&2; exit 1; }

if [ -n "${DEMO_OUT:-}" ]; then
  mkdir -p "$DEMO_OUT" && work=$(cd "$DEMO_OUT" && pwd)
else
  work=$(mktemp -d "${TMPDIR:-/tmp}/shmtrace-demo.XXXXXX")
fi
pids=()
finished=0
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  if [ "${DEMO_KEEP:-1}" = 0 ]; then
    rm -rf "$work"
  elif [ "$finished" = 0 ]; then
    echo "demo: stopped early; what there is (and the logs) is in $work" >&2
  fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

psock=$work/producer.sock
csock=$work/consumer.sock

echo "== 1. starting shmtraced (sockets in $work)"
"$daemon" --producer-socket "$psock" --consumer-socket "$csock" \
  2>"$work/shmtraced.log" &
pids+=($!)
for _ in $(seq 100); do [ -S "$csock" ] && [ -S "$psock" ] && break; sleep 0.05; done
[ -S "$csock" ] || { echo "demo: shmtraced did not start:" >&2; cat "$work/shmtraced.log" >&2; exit 1; }

echo "== 2. starting $nproducers producer processes x 2 threads, $rate packets/s each, $size-byte payloads"
for i in $(seq "$nproducers"); do
  "$producer" --socket "$psock" --producer-name "demo-producer-$i" \
    --threads 2 --size "$size" --rate "$rate" \
    2>"$work/producer-$i.log" &
  pids+=($!)
done
sleep 0.3

echo "== 3. recording ${seconds}s into a $buffer ring buffer (long-trace mode, read every 500 ms)"
"$cli" record --socket "$csock" --buffer-size "$buffer" --fill-policy ring \
  --duration "${seconds}s" --long --period 500 --quiet \
  -o "$work/demo.pftrace"

echo "== 4. inspecting the trace into SQLite"
"$inspect" --force --no-progress -o "$work/demo.db" "$work/demo.pftrace"

echo
echo "== 5. how many packets each writer lost, of how many, and why:  sqlite3 demo.db < sql/lost_packets.sql"
sqlite3 -header -column "$work/demo.db" < "$sqldir/lost_packets.sql"
echo
echo "== what was lost, where and when:  sqlite3 demo.db < sql/data_loss.sql"
sqlite3 -header -column "$work/demo.db" < "$sqldir/data_loss.sql"
echo
echo "== loss by sequence:  sqlite3 demo.db < sql/loss_by_sequence.sql"
sqlite3 -header -column "$work/demo.db" < "$sqldir/loss_by_sequence.sql"
echo
echo "== buffer usage:  sqlite3 demo.db < sql/buffer_usage.sql"
sqlite3 "$work/demo.db" < "$sqldir/buffer_usage.sql"
finished=1
sqlabs=$(cd "$sqldir" && pwd)
echo
if [ "${DEMO_KEEP:-1}" = 0 ]; then
  echo "demo: done (DEMO_KEEP=0: the trace and the database are removed)."
  exit 0
fi
cat <<EOF
== 6. kept in $work:
  demo.pftrace  the trace (Perfetto format). Open it in the Perfetto UI:
                https://ui.perfetto.dev -> "Open trace file" -> demo.pftrace
                (it stays on your machine: the UI runs in the browser)
  demo.db       the same trace in SQLite, for any query:
                sqlite3 $work/demo.db < $sqlabs/data_loss.sql
                sqlite3 $work/demo.db "select * from stats where value != 0"
  *.log         what shmtraced and each producer printed
Run again with DEMO_SECONDS, DEMO_BUFFER, DEMO_RATE... (see scripts/demo.sh);
DEMO_KEEP=0 removes the files at the end.
EOF
