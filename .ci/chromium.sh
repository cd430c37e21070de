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
# shellcheck source=.ci/apt.sh
source "$(dirname "$0")/apt.sh"
apt_install chromium.sh chromium || true
