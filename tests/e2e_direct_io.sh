#!/bin/sh
# e2e_direct_io.sh - shmtraced --direct-io (service/svc_direct.c): a
# long-trace session (write_into_file, a pass every 100 ms) recorded
# through O_DIRECT writes is whole and
# exact (every packet of 2 x 20000 of 1000 bytes, the trace's last bytes,
# which go through the page cache at the end, included), and the daemon
# says nothing about falling back where the file system takes O_DIRECT
# (where it does not, it must say why, and the trace is still whole).
. "${top_srcdir:-.}/tests/e2e_lib.sh"
e2e_need_tools

COUNT=20000
e2e_spawn daemon "$SHMTRACED" --direct-io
DAEMON_PID=$E2E_LAST_PID
e2e_wait_socket
e2e_spawn producer "$PRODUCER" -t 2 -c $COUNT -S 1000 --policy stall
e2e_wait_registered 1
"$CLI" record -q --long -p 100 -o "$E2E_DIR/trace" -t 3s -b 64m \
    >"$E2E_DIR/cli.log" 2>&1 || e2e_fail "shmtrace record failed"
e2e_check "$E2E_DIR/trace" --require-stats --expect-sequences 2 \
    --complete $COUNT
size=$(stat -c %s "$E2E_DIR/trace")
[ "$size" -gt $((2 * COUNT * 1000)) ] || e2e_fail "trace too small: $size"

# Does this file system take direct writes? (dd's own probe)
if dd if=/dev/zero of="$E2E_DIR/probe" bs=4096 count=1 oflag=direct \
        2>/dev/null; then
    if grep -q -- "--direct-io" "$E2E_DIR/daemon.log"; then
        e2e_fail "the daemon fell back although $E2E_DIR takes O_DIRECT"
    fi
else
    grep -q -- "--direct-io: .*page cache" "$E2E_DIR/daemon.log" ||
        e2e_fail "no O_DIRECT here, and the daemon did not say so"
    echo "note: $E2E_DIR takes no O_DIRECT; the fallback was checked"
fi
e2e_stop_daemon
echo "ok"
