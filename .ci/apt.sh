#!/usr/bin/env bash
# Sourced by the scripts that install a Debian package the tests or benchmarks need
# (.ci/redis.sh, .ci/nginx.sh, .ci/chromium.sh):
#
#     apt_install LABEL PACKAGE [PACKAGE ...]
#
# installs the first PACKAGE that installs (later ones are fallbacks), with apt-get, after
# `apt-get update`, as root or through sudo. Says why on stderr, prefixed with LABEL, and
# returns 1 when apt-get is missing, when it needs root and has none, or when nothing installs.
# It does not start any service the package brings.

apt_install() {
    local label="$1"
    shift
    if ! command -v apt-get >/dev/null 2>&1; then
        echo "$label: $1 is missing and apt-get is not available" >&2
        return 1
    fi
    local sudo=""
    if [ "$(id -u)" != "0" ]; then
        if command -v sudo >/dev/null 2>&1; then
            sudo="sudo"
        else
            echo "$label: $1 is missing; installing it needs root" >&2
            return 1
        fi
    fi
    echo "$label: installing $1 from Debian" >&2
    $sudo apt-get update -qq || return 1
    local package
    for package in "$@"; do
        if DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "$package" >/dev/null 2>&1
        then
            return 0
        fi
    done
    echo "$label: could not install $*" >&2
    return 1
}
