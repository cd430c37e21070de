#!/usr/bin/env bash
# requests' own test suite, run twice: as is, and with RetryAfterAdapter mounted in place of
# the default adapter of every requests.Session (tests/requests_suite/retryafter_swap.py). Every
# test must have the same outcome in both runs (tests/requests_suite/compare.py prints a table
# of those that do not, and this script then exits 1).
#
# The suite is the tests/ of the sdist of the requests installed in the project's venv, run
# against that installed requests and urllib3 in a venv of its own (its test dependencies,
# pytest-httpbin's Flask among them, stay out of the project's venv). Needs only PyPI. The
# httpbin tests use local servers; the few tests that want the internet fail or pass the same
# way in both runs, and nothing can hang: a bound per test and one per run.
#
# Environment:
#   VENV                       the project's venv (default .venv): whose requests is tested
#   REQUESTS_SUITE_DIR         work directory, kept between runs (default build/requests-suite)
#   REQUESTS_SUITE_WORKERS     pytest-xdist workers per run (default 4; 0: no xdist)
#   REQUESTS_SUITE_TEST_TIMEOUT  seconds per test (default 90)
#   REQUESTS_SUITE_TIME_LIMIT  seconds per run; the two runs go at once (default 240)
#   REQUESTS_SUITE_SLOWEST     list the N tests whose time grew most with the adapter (default 5)
# Extra arguments go to pytest in both runs (e.g. --deselect ID, -k EXPR).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
export PIP_DISABLE_PIP_VERSION_CHECK=1

VENV=${VENV:-.venv}
WORK=${REQUESTS_SUITE_DIR:-build/requests-suite}
WORKERS=${REQUESTS_SUITE_WORKERS:-4}
TEST_TIMEOUT=${REQUESTS_SUITE_TEST_TIMEOUT:-90}
TIME_LIMIT=${REQUESTS_SUITE_TIME_LIMIT:-240}
mkdir -p "$WORK"
WORK=$(cd "$WORK" && pwd)
PLUGIN_DIR=$ROOT/tests/requests_suite

read -r REQUESTS_VERSION URLLIB3_VERSION PYVER < <("$VENV/bin/python" -c \
    'import sys, requests, urllib3; print(requests.__version__, urllib3.__version__, "%d.%d" % sys.version_info[:2])')
echo "== requests' own suite: requests $REQUESTS_VERSION, urllib3 $URLLIB3_VERSION, Python $PYVER"

# The sdist, unpacked: its tests/ and the files that configure pytest for them (not src/: the
# suite must import the installed requests).
SRC=$WORK/requests-$REQUESTS_VERSION
if [ ! -d "$SRC/tests" ]; then
    rm -rf "$WORK/dist" "$SRC"
    "$VENV/bin/python" -m pip download -q --no-deps --no-binary :all: \
        "requests==$REQUESTS_VERSION" -d "$WORK/dist"
    sdist=$(ls "$WORK"/dist/requests-"$REQUESTS_VERSION".tar.gz)
    members=()
    for member in tests pyproject.toml setup.cfg requirements-dev.txt; do
        if tar -tzf "$sdist" "requests-$REQUESTS_VERSION/$member" >/dev/null 2>&1; then
            members+=("requests-$REQUESTS_VERSION/$member")
        fi
    done
    tar -xzf "$sdist" -C "$WORK" "${members[@]}"
fi

# The suite's venv: the same requests and urllib3 as the project's, the suite's own test
# dependencies, and this project (editable, so the working tree is what runs).
SUITE_VENV=$WORK/venv-py$PYVER
mapfile -t DEPS < <("$VENV/bin/python" "$PLUGIN_DIR/deps.py" "$SRC")
WANT="requests[socks]==$REQUESTS_VERSION urllib3==$URLLIB3_VERSION ${DEPS[*]} -e $ROOT"
if [ ! -x "$SUITE_VENV/bin/python" ] || [ "$(cat "$SUITE_VENV/.requests-suite" 2>/dev/null)" != "$WANT" ]; then
    rm -rf "$SUITE_VENV"
    "$VENV/bin/python" -m venv "$SUITE_VENV"
    "$SUITE_VENV/bin/python" -m pip install -q \
        "requests[socks]==$REQUESTS_VERSION" "urllib3==$URLLIB3_VERSION" "${DEPS[@]}" -e "$ROOT"
    echo "$WANT" >"$SUITE_VENV/.requests-suite"
fi
PY=$SUITE_VENV/bin/python

xdist=()
if [ "$WORKERS" != 0 ]; then
    xdist=(-n "$WORKERS")
fi

# run NAME [pytest args...]: one run of the suite, its JUnit XML in $WORK/NAME.xml.
run() {
    local name=$1
    shift
    rm -rf "$WORK/$name.xml" "$WORK/tmp-$name"
    (
        cd "$SRC"
        # Nothing of ours configures either run but the plugin; no bytecode written into the
        # shared tests/ by two runs at once.
        for var in $(compgen -e); do
            case $var in REQUESTS_RETRYAFTER_*) unset "$var" ;; esac
        done
        PYTHONPATH=$PLUGIN_DIR PYTHONDONTWRITEBYTECODE=1 \
            timeout -k 10 "$TIME_LIMIT" "$PY" -m pytest tests -rfE -p no:cacheprovider \
            "${xdist[@]}" --timeout "$TEST_TIMEOUT" --basetemp "$WORK/tmp-$name" \
            --junitxml "$WORK/$name.xml" "$@" >"$WORK/$name.log" 2>&1
    )
}

echo "== running it twice at once: as is, and with -p retryafter_swap (at most ${TIME_LIMIT}s)"
start=$SECONDS
set +e
run plain "$@" &
plain_pid=$!
run swapped -p retryafter_swap "$@" &
swapped_pid=$!
wait "$plain_pid"
plain_rc=$?
wait "$swapped_pid"
swapped_rc=$?
set -e
echo "   done in $((SECONDS - start))s (pytest exit codes: as is $plain_rc, with adapter $swapped_rc)"

# pytest exits 1 when some tests fail, which both runs may do alike; anything else (the time
# limit, an internal or usage error, nothing collected) means a run did not finish.
for name in plain swapped; do
    rc_var=${name}_rc
    rc=${!rc_var}
    if [ "$rc" != 0 ] && [ "$rc" != 1 ]; then
        echo "the $name run did not complete (exit $rc; 124: over ${TIME_LIMIT}s); its log ends:" >&2
        tail -n 30 "$WORK/$name.log" >&2
        exit 2
    fi
done
grep -h '^retryafter_swap:' "$WORK/swapped.log" || true

"$VENV/bin/python" "$PLUGIN_DIR/compare.py" --slowest "${REQUESTS_SUITE_SLOWEST:-5}" \
    "$WORK/plain.xml" "$WORK/swapped.xml"
