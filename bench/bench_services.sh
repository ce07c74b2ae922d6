# bench/bench_services.sh - sourced by bench_vs_perfetto.sh and
# bench_vs_sdk.sh: each daemon on its own private sockets in $DIR.
#   sockets SERVICE        point PERFETTO_PRODUCER_SOCK_NAME and
#                          PERFETTO_CONSUMER_SOCK_NAME at that daemon's
#                          sockets ($DIR/SERVICE-p.sock, -c.sock)
#   start_service SERVICE  start shmtraced (the build tree's) or traced
#                          ($OTHER_DAEMON if set, else $PERFETTO_BIN's:
#                          bench_vs_perfetto.sh's baseline puts another
#                          build's shmtraced there) there, its output in
#                          $DIR/SERVICE.log, and wait up to 10 s for its
#                          consumer socket; its PID in service_pid. A
#                          daemon that does not come up: its log on stderr
#                          and exit 1, naming $BENCH_NAME.
#                          $BENCH_SHMTRACED_ARGS: options for shmtraced
#                          (e.g. --direct-io), $BENCH_OTHER_ARGS for the
#                          other daemon (word-split, both default empty).
sockets() {
    PERFETTO_PRODUCER_SOCK_NAME="$DIR/$1-p.sock"
    PERFETTO_CONSUMER_SOCK_NAME="$DIR/$1-c.sock"
    export PERFETTO_PRODUCER_SOCK_NAME PERFETTO_CONSUMER_SOCK_NAME
}
start_service() {
    sockets "$1"
    if [ "$1" = traced ]; then
        # shellcheck disable=SC2086
        "${OTHER_DAEMON:-$PERFETTO_BIN/traced}" ${BENCH_OTHER_ARGS:-} \
            >"$DIR/$1.log" 2>&1 &
    else
        # shellcheck disable=SC2086
        "$top_builddir/service/shmtraced" ${BENCH_SHMTRACED_ARGS:-} \
            >"$DIR/$1.log" 2>&1 &
    fi
    service_pid=$!
    tries=0
    while [ ! -S "$PERFETTO_CONSUMER_SOCK_NAME" ]; do
        tries=$((tries + 1))
        [ $tries -gt 500 ] && { cat "$DIR/$1.log" >&2
            echo "$BENCH_NAME: $1 did not start" >&2; exit 1; }
        sleep 0.02
    done
}
