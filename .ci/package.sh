#!/usr/bin/env bash
# Packaging check: build the sdist and the wheel, check their metadata with twine, install the
# wheel (not the source tree) into a fresh virtual environment, and run the installed command
# line from there: `--help`, then one real request to a local server that answers 429 once.
#
#     bash .ci/package.sh        # uses .venv (made by .ci/test) to build
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}
PYTHON=${PYTHON:-python3}
if [ ! -x "$VENV/bin/python" ]; then
    "$PYTHON" -m venv "$VENV"
fi
"$VENV/bin/python" -m pip install -q build twine

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$VENV/bin/python" -m build -q --outdir "$work/dist" . >/dev/null
ls "$work/dist"
"$VENV/bin/python" -m twine check --strict "$work/dist"/*

"$VENV/bin/python" -m venv "$work/venv"
"$work/venv/bin/python" -m pip install -q "$work/dist"/*.whl
cd "$work"  # away from the source tree, so only the installed wheel can be imported
"$work/venv/bin/requests-retryafter" --help >/dev/null
"$work/venv/bin/python" - <<'PY'
import os
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import requests_retryafter

answers = [(429, {"Retry-After": "1"}), (200, {})]


class Handler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        status, headers = answers.pop(0) if answers else (200, {})
        body = b"ok\n"
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
threading.Thread(target=server.serve_forever, daemon=True).start()
url = f"http://127.0.0.1:{server.server_address[1]}/smoke"
assert "site-packages" in requests_retryafter.__file__, requests_retryafter.__file__
done = subprocess.run(
    [os.path.join(os.path.dirname(sys.executable), "requests-retryafter"), "get", "-v", url],
    capture_output=True,
    text=True,
    timeout=60,
)
server.shutdown()
print(done.stdout + done.stderr)
assert done.returncode == 0, done.returncode
assert "429" in done.stdout + done.stderr
print("package.sh: wheel", requests_retryafter.__version__, "installed and answered")
PY
