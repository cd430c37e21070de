#!/usr/bin/env bash
# Start a throw-away Redis server for the store tests, and stop it again.
#
# Meant to be sourced by .ci/run:
#
#     source .ci/redis.sh
#     start_redis
#     trap stop_redis EXIT
#
# start_redis installs redis-server from Debian when it is missing (needs root), starts it on
# a free port of 127.0.0.1 without persistence, waits until it answers PING and exports
# REQUESTS_RETRYAFTER_TEST_REDIS_URL=redis://127.0.0.1:PORT/0. stop_redis stops that server by
# the pid it wrote, and removes its directory. Run directly (bash .ci/redis.sh), it starts a
# server, pings it, stops it and reports, as a self-test.

REDIS_CI_WAIT_SECONDS="${REDIS_CI_WAIT_SECONDS:-10}"

_redis_ci_log() {
    echo "redis.sh: $*" >&2
}

_redis_ci_python() {
    local py
    for py in "${PYTHON:-}" python3 python; do
        if [ -n "$py" ] && command -v "$py" >/dev/null 2>&1; then
            echo "$py"
            return 0
        fi
    done
    return 1
}

_redis_ci_install() {
    if command -v redis-server >/dev/null 2>&1 && command -v redis-cli >/dev/null 2>&1; then
        return 0
    fi
    # shellcheck source=.ci/apt.sh
    source "$(dirname "${BASH_SOURCE[0]}")/apt.sh"
    apt_install redis.sh redis-server
}

_redis_ci_free_port() {
    local py
    py="$(_redis_ci_python)" || { _redis_ci_log "python is needed to pick a free port"; return 1; }
    "$py" -c 'import socket
s = socket.socket()
s.bind(("127.0.0.1", 0))
print(s.getsockname()[1])
s.close()'
}

start_redis() {
    if [ -n "${REDIS_CI_PIDFILE:-}" ] && [ -f "$REDIS_CI_PIDFILE" ]; then
        _redis_ci_log "already running (pid $(cat "$REDIS_CI_PIDFILE"))"
        return 0
    fi
    _redis_ci_install || return 1
    local port dir tries
    port="$(_redis_ci_free_port)" || return 1
    dir="$(mktemp -d -t redis-ci.XXXXXX)" || return 1
    REDIS_CI_DIR="$dir"
    REDIS_CI_PORT="$port"
    REDIS_CI_PIDFILE="$dir/redis.pid"
    if ! redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no \
        --daemonize yes --pidfile "$REDIS_CI_PIDFILE" --dir "$dir" \
        --logfile "$dir/redis.log"; then
        _redis_ci_log "redis-server failed to start"
        return 1
    fi
    tries=$((REDIS_CI_WAIT_SECONDS * 10))
    while [ "$tries" -gt 0 ]; do
        if [ "$(redis-cli -h 127.0.0.1 -p "$port" ping 2>/dev/null)" = "PONG" ]; then
            export REQUESTS_RETRYAFTER_TEST_REDIS_URL="redis://127.0.0.1:$port/0"
            export REDIS_CI_DIR REDIS_CI_PORT REDIS_CI_PIDFILE
            _redis_ci_log "redis-server running on 127.0.0.1:$port (pid $(cat "$REDIS_CI_PIDFILE" 2>/dev/null))"
            return 0
        fi
        sleep 0.1
        tries=$((tries - 1))
    done
    _redis_ci_log "redis-server did not answer PING within ${REDIS_CI_WAIT_SECONDS} s; its log:"
    cat "$dir/redis.log" >&2 2>/dev/null || true
    stop_redis
    return 1
}

stop_redis() {
    local pid tries
    if [ -n "${REDIS_CI_PIDFILE:-}" ] && [ -f "$REDIS_CI_PIDFILE" ]; then
        pid="$(cat "$REDIS_CI_PIDFILE")"
        if [ -n "$pid" ] && kill "$pid" 2>/dev/null; then
            tries=50
            while [ "$tries" -gt 0 ] && kill -0 "$pid" 2>/dev/null; do
                sleep 0.1
                tries=$((tries - 1))
            done
            if kill -0 "$pid" 2>/dev/null; then
                kill -9 "$pid" 2>/dev/null || true
            fi
        fi
        rm -f "$REDIS_CI_PIDFILE"
    fi
    if [ -n "${REDIS_CI_DIR:-}" ] && [ -d "$REDIS_CI_DIR" ]; then
        rm -rf "$REDIS_CI_DIR"
    fi
    unset REDIS_CI_PIDFILE REDIS_CI_DIR REDIS_CI_PORT REQUESTS_RETRYAFTER_TEST_REDIS_URL
}

# Run directly: a self-test.
if [ "${BASH_SOURCE[0]}" = "$0" ]; then
    set -u
    start_redis || exit 1
    trap stop_redis EXIT
    pong="$(redis-cli -h 127.0.0.1 -p "$REDIS_CI_PORT" ping)"
    echo "REQUESTS_RETRYAFTER_TEST_REDIS_URL=$REQUESTS_RETRYAFTER_TEST_REDIS_URL -> $pong"
    [ "$pong" = "PONG" ]
fi
