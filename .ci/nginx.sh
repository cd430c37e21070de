#!/usr/bin/env bash
# Make sure nginx is installed, for benchmarks/bench_nginx.py (which starts its own nginx on
# free ports of 127.0.0.1 with a generated config in a temporary directory: no daemon, no
# system service).
#
# Meant to be sourced or run: `bash .ci/nginx.sh` installs nginx-light (or nginx) from Debian
# when `nginx` is missing and we are root (or have sudo), after `apt-get update`, and prints
# the binary's path and version. Exit 1 when nginx is missing and cannot be installed.

nginx_ci_binary() {
    local found
    found="$(command -v nginx 2>/dev/null || true)"
    if [ -z "$found" ] && [ -x /usr/sbin/nginx ]; then
        found=/usr/sbin/nginx
    fi
    [ -n "$found" ] && echo "$found"
}

install_nginx() {
    if nginx_ci_binary >/dev/null; then
        return 0
    fi
    # shellcheck source=.ci/apt.sh
    source "$(dirname "${BASH_SOURCE[0]}")/apt.sh"
    # The package's service is not started here: no init system runs in a CI container, and
    # the benchmark starts its own nginx.
    apt_install nginx.sh nginx-light nginx || return 1
    nginx_ci_binary >/dev/null
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
    set -u
    install_nginx || exit 1
    binary="$(nginx_ci_binary)"
    echo "nginx: $binary ($("$binary" -v 2>&1))"
fi
