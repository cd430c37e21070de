#!/usr/bin/env bash
# The real-time benchmarks of issue #10, once: benchmarks/bench_nginx.py (a real nginx
# limit_req, one client and 4 processes sharing Redis) and benchmarks/bench_limiters.py (the
# `limits` library behind a WSGI server). Installs what they need (nginx from Debian, `limits`
# into the venv, Redis via .ci/redis.sh when REQUESTS_RETRYAFTER_TEST_REDIS_URL is unset) and
# prints their tables. A missed target never fails this script; a benchmark that crashes does.
# Takes about 3 minutes.
set -euo pipefail
cd "$(dirname "$0")/.."
export PIP_DISABLE_PIP_VERSION_CHECK=1

VENV=${VENV:-.venv}
PY="$VENV/bin/python"
if [ ! -x "$PY" ]; then  # run on its own in a fresh clone (.ci/test makes the venv otherwise)
    "${PYTHON:-python3}" -m venv "$VENV"
    "$PY" -m pip install -q -e '.[redis]'
fi
"$PY" -m pip install -q 'limits>=3' 'redis>=4.5'

bash .ci/nginx.sh

if [ -z "${REQUESTS_RETRYAFTER_TEST_REDIS_URL:-}" ]; then
    # shellcheck source=.ci/redis.sh
    source .ci/redis.sh
    start_redis
    trap stop_redis EXIT
fi

echo "== bench: nginx limit_req (real time)"
"$PY" benchmarks/bench_nginx.py
echo "== bench: limiter libraries (real time)"
"$PY" benchmarks/bench_limiters.py
echo "== bench: done (targets are reported, not enforced)"
