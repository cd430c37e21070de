#!/usr/bin/env bash
# Make sure Debian's Chromium is installed, for the test that opens the HTML report in a real
# headless browser (driven by Playwright through executable_path; Playwright's own browser
# downloads do not work here). Installs it with apt-get when it is missing and we are root
# (or have sudo); otherwise says so and leaves it to the test to skip (or, in CI, to fail).
#
#     bash .ci/chromium.sh
set -uo pipefail

for name in chromium chromium-browser google-chrome; do
    if command -v "$name" >/dev/null 2>&1; then
        exit 0
    fi
done
if ! command -v apt-get >/dev/null 2>&1; then
    echo "chromium.sh: chromium is missing and apt-get is not available" >&2
    exit 0
fi
sudo=""
if [ "$(id -u)" != "0" ]; then
    if command -v sudo >/dev/null 2>&1; then
        sudo="sudo"
    else
        echo "chromium.sh: chromium is missing; installing it needs root" >&2
        exit 0
    fi
fi
echo "chromium.sh: installing chromium from Debian" >&2
$sudo apt-get update -qq \
    && DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq chromium >/dev/null \
    || echo "chromium.sh: could not install chromium" >&2
