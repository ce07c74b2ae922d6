# tests/e2e_sec_lib.sh - a second uid for the security end-to-end tests
# (sourced after tests/e2e_lib.sh).
#
# The attacks of issue 10 are performed for real by another user: commands
# run as SEC_UID (default 64000, a uid no account uses) through setpriv,
# which switches uid and gid and drops supplementary groups without needing
# a passwd entry. That needs root: as anyone else the tests SKIP (exit 77)
# and say why. Layout made by sec_setup:
#   $E2E_DIR          0755 so the second uid can reach the sockets in it
#   $ATT              owned by the second uid: where it may write
#   $VICTIM           root's, 0755: the second uid must never create,
#                     truncate or replace anything in it
#   $SHARED           1777 (like /tmp): both users can create names there

SEC_UID=${SEC_UID:-64000}
INSPECT="$top_builddir/inspector/shmtrace-inspect"

sec_need_root() {
    if [ "$(id -u)" != 0 ]; then
        echo "SKIP: these attacks need a second uid; only root can switch to" \
             "one (run make check as root, as CI does)" >&2
        exit 77
    fi
    if ! command -v setpriv >/dev/null 2>&1; then
        echo "SKIP: setpriv (util-linux) is needed to run commands as uid" \
             "$SEC_UID" >&2
        exit 77
    fi
    if getent passwd "$SEC_UID" >/dev/null 2>&1; then
        echo "SKIP: uid $SEC_UID belongs to an account here; set SEC_UID to" \
             "an unused uid" >&2
        exit 77
    fi
    # The second uid runs our programs from the build tree: a private
    # parent directory (e.g. a checkout under /root) would make every
    # attack fail for the wrong reason.
    if ! setpriv --reuid="$SEC_UID" --regid="$SEC_UID" --clear-groups -- \
            "$CLI" --version >/dev/null 2>&1; then
        echo "SKIP: uid $SEC_UID cannot run $CLI (a parent directory of the" \
             "build tree is not searchable by other users); build in a" \
             "directory others can reach to run these tests" >&2
        exit 77
    fi
}

# sec_as_user CMD...: run CMD as the second uid (environment kept).
# "${SEC_AS[@]}" CMD... does the same where the pid must be CMD's own
# (e2e_spawn: setpriv execs CMD in place).
SEC_AS=(setpriv --reuid="$SEC_UID" --regid="$SEC_UID" --clear-groups --)
sec_as_user() {
    "${SEC_AS[@]}" "$@"
}

sec_setup() {
    chmod 0755 "$E2E_DIR"
    ATT="$E2E_DIR/att"
    VICTIM="$E2E_DIR/victim"
    SHARED="$E2E_DIR/shared"
    mkdir -p "$ATT" "$VICTIM" "$SHARED" || e2e_fail "mkdir"
    chown "$SEC_UID:$SEC_UID" "$ATT"
    chmod 0755 "$VICTIM"
    chmod 1777 "$SHARED"
}

# sec_open_sockets: what an admin does to let other users in (mode 0666 on
# both sockets); the isolation must hold anyway.
sec_open_sockets() {
    chmod 0666 "$PERFETTO_PRODUCER_SOCK_NAME" "$PERFETTO_CONSUMER_SOCK_NAME" ||
        e2e_fail "chmod sockets"
}

# sec_value KEY FILE: a key=value of svc_consumer stats output.
sec_value() {
    sed -n "s/^$1=//p" "$2"
}
