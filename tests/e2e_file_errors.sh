#!/bin/bash
# e2e_file_errors.sh - the trace file the service writes (write_into_file)
# cannot be written whole:
#   - shmtraced runs under a file size limit (RLIMIT_FSIZE: `ulimit -f`,
#     systemd's LimitFSIZE) and a session's file outgrows it. The write
#     fails with EFBIG: that session ends at once, and both the daemon's log
#     and `shmtrace record` say why ("File too large", the limit, what to
#     do) and how many bytes the file holds; record keeps the whole packets
#     (a well-formed trace, as many as it says) and exits 1. The daemon
#     lives on (SIGXFSZ used to kill it, and every user's sessions with
#     it): a session with max_file_size_bytes under the limit then ends
#     cleanly, and the daemon stops cleanly on SIGTERM;
#   - as root, where a tmpfs can be mounted: a file system that fills up
#     (ENOSPC, "No space left on device"), the same way.
. "${top_srcdir:-.}/tests/e2e_lib.sh"
e2e_need_tools "$SHMTRACED" "$TRACECHECK"
LIMIT_KB=1024

cfg() { # FILE [LINE]: 1 KiB packets into a file, for up to 20 s
    {
        echo 'buffers { size_kb: 8192 fill_policy: RING_BUFFER }'
        echo 'data_sources { config { name: "shmtrace.synthetic" } }'
        echo 'write_into_file: true'
        echo 'file_write_period_ms: 100'
        echo 'duration_ms: 20000'
        [ -n "${2:-}" ] && echo "$2"
        :
    } >"$1"
}

# failed_file NAME OUT CAUSE HINT: a record into OUT must end early (the
# session lasts 20 s), exit 1, name CAUSE and HINT, and leave OUT holding
# exactly the whole packets it reports.
failed_file() {
    local name=$1 out=$2 cause=$3 hint=$4 log="$E2E_DIR/$1.log" n got
    cfg "$E2E_DIR/$name.cfg"
    e2e_spawn "$name" "$CLI" record -c "$E2E_DIR/$name.cfg" -o "$out"
    e2e_wait_pid "$E2E_LAST_PID" 15 ||
        e2e_fail "$name: record still running 15 s after its file failed"
    [ "$E2E_RC" -eq 1 ] || e2e_fail "$name: record exited $E2E_RC, not 1"
    grep -q "ended with an error: writing the trace file failed with [1-9][0-9]* bytes in it ($cause)" "$log" ||
        e2e_fail "$name: no cause in record's error"
    grep -q "$hint" "$log" || e2e_fail "$name: no advice ($hint)"
    grep -q "session [0-9]*: writing the trace file failed with [1-9][0-9]* bytes in it ($cause)" \
        "$E2E_DIR/daemon.log" || e2e_fail "$name: nothing in the daemon's log"
    kill -0 "$DAEMON_PID" 2>/dev/null || e2e_fail "$name: the daemon died"
    n=$(sed -n 's/.* holds the \([0-9]*\) whole packets .*/\1/p' "$log")
    [ -n "$n" ] && [ "$n" -gt 0 ] || e2e_fail "$name: no packets kept"
    e2e_check "$out" >/dev/null
    got=$(e2e_value packets)
    [ "$got" = "$n" ] || e2e_fail "$name: the file holds $got packets, record said $n"
    [ "$(e2e_value lost_in_gaps)" = 0 ] || e2e_fail "$name: a gap in the file"
}

e2e_spawn daemon bash -c "ulimit -f $LIMIT_KB && exec \"\$0\"" "$SHMTRACED"
DAEMON_PID=$E2E_LAST_PID
e2e_wait_socket
e2e_spawn producer "$PRODUCER" -t 1 -r 20000 -S 1024 --policy stall
e2e_wait_registered 1

# --- past the daemon's file size limit ---------------------------------
failed_file big "$E2E_DIR/big.pftrace" "File too large" "RLIMIT_FSIZE"
size=$(stat -c %s "$E2E_DIR/big.pftrace")
[ "$size" -le $((LIMIT_KB * 1024)) ] ||
    e2e_fail "a $size-byte file past the $LIMIT_KB KiB limit"

# The same daemon serves the next session; one that stops under the limit
# (max_file_size_bytes, the advice given) ends cleanly, and the packets the
# limit kept out of the file are counted, not dropped unseen: record's
# summary says "lost X of Y ... not written: the file reached
# max_file_size_bytes", and Y - X is exactly what the file holds.
cfg "$E2E_DIR/capped.cfg" 'max_file_size_bytes: 300000'
e2e_spawn capped "$CLI" record -c "$E2E_DIR/capped.cfg" \
    -o "$E2E_DIR/capped.pftrace"
e2e_wait_ok "$E2E_LAST_PID" 15 "a session under the limit"
e2e_check "$E2E_DIR/capped.pftrace" >/dev/null
in_file=$(e2e_value test_packets)
[ "$in_file" -gt 0 ] || e2e_fail "capped: no packets"
line=$(grep "^shmtrace: lost " "$E2E_DIR/capped.log" | tr -d ,)
lost=$(echo "$line" | sed -n 's/^shmtrace: lost \([0-9]*\) of .*/\1/p')
of=$(echo "$line" | sed -n 's/^shmtrace: lost [0-9]* of \([0-9]*\) .*/\1/p')
kept_out=$(echo "$line" | sed -n 's/.*[ :]\([0-9]*\) not written: the file reached max_file_size_bytes.*/\1/p')
[ -n "$lost" ] && [ -n "$of" ] && [ -n "$kept_out" ] && [ "$kept_out" -gt 0 ] ||
    e2e_fail "capped: no count of the packets the limit kept out: $(cat "$E2E_DIR/capped.log")"
[ $((of - lost)) -eq "$in_file" ] ||
    e2e_fail "capped: $in_file packets in the file, but record says $lost lost of $of"
grep -q "a larger max_file_size_bytes" "$E2E_DIR/capped.log" ||
    e2e_fail "capped: no advice for the limit"
grep -q "session [0-9]*: the trace file reached max_file_size_bytes (300000); the session ended there, $kept_out packet(s) of its buffers not written" \
    "$E2E_DIR/daemon.log" || e2e_fail "capped: the daemon's log does not say what the limit kept out"
[ "$(grep -c "writing the trace file failed" "$E2E_DIR/daemon.log")" = 1 ] ||
    e2e_fail "the capped session's file was reported as failed"

# --- a full file system (root: a 512 KiB tmpfs) -------------------------
MNT="$E2E_DIR/small"
mkdir "$MNT"
if mount -t tmpfs -o size=512k tmpfs "$MNT" 2>/dev/null; then
    # on failure too: stop what holds the file open, unmount, clean up
    mnt_cleanup() {
        e2e_kill_all
        umount "$MNT" 2>/dev/null
        e2e_cleanup
    }
    trap mnt_cleanup EXIT
    failed_file full "$MNT/full.pftrace" "No space left on device" \
        "free space on its file system"
    # the ended session's file is closed once its consumer has gone
    e2e_until 200 0.05 "the service let go of the file on the full file \
system" umount "$MNT"
else
    echo "note: cannot mount a tmpfs here (not root): ENOSPC case skipped" >&2
fi

e2e_stop_daemon
echo "ok"
