"""``requests-retryafter run``: unmodified scripts and modules get the adapter on every session."""

from __future__ import annotations

import sys
import textwrap

import pytest
import requests

from requests_retryafter import _install, cli, open_store

ORIGINAL_INIT = requests.Session.__init__

LEGACY = """\
import sys
import requests

url = sys.argv[1]
r = requests.get(url + "/module-level")           # a Session made inside requests.api
print("module-level", r.status_code)
s = requests.Session()
print("adapter", type(s.get_adapter(url)).__name__)
print("status", s.get(url + "/session").status_code)
print("argv", sys.argv[2:])
print("name", __name__)
"""


@pytest.fixture(autouse=True)
def _clean(monkeypatch):
    for name in ("REQUESTS_RETRYAFTER_STORE", "REQUESTS_RETRYAFTER_MAX_ATTEMPTS"):
        monkeypatch.delenv(name, raising=False)
    yield
    _install.uninstall()
    assert requests.Session.__init__ is ORIGINAL_INIT


def write(path, text):
    path.write_text(textwrap.dedent(text))
    return str(path)


def test_script_runs_with_the_adapter_on_every_session(server, tmp_path, capsys):
    script = write(tmp_path / "legacy.py", LEGACY)
    saved_argv = sys.argv[:]
    assert cli.main(["run", script, server.url, "--flag", "-v"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out == [
        "module-level 200",
        "adapter _InstalledAdapter",
        "status 200",
        "argv ['--flag', '-v']",
        "name __main__",
    ]
    assert [r.path for r in server.requests] == ["/module-level", "/session"]
    assert sys.argv == saved_argv
    assert requests.Session.__init__ is ORIGINAL_INIT  # restored after the run


def test_verbose_prints_decisions(server, tmp_path, capsys):
    script = write(tmp_path / "job.py", LEGACY)
    server.respond(lambda seen: (200, {"Retry-After": "120"}))
    assert cli.main(["run", "-v", script, server.url]) == 0
    err = capsys.readouterr().err
    assert f"* {server.host}: ignore: Retry-After on a 200 ignored" in err


def test_store_keeps_what_the_script_taught(server, tmp_path, capsys):
    script = write(tmp_path / "job.py", LEGACY)
    spec = f"json://{tmp_path}/hosts.json"
    server.reply(
        200, {"RateLimit-Policy": '"default";q=60;w=60', "RateLimit": '"default";r=59;t=60'}
    )
    assert cli.main(["run", "--store", spec, script, server.url]) == 0
    with open_store(spec) as store:
        hosts = dict(store.items())
    assert server.host in hosts


def test_module_runs_like_python_dash_m(server, tmp_path, monkeypatch, capsys):
    pkg = tmp_path / "legacyjobs"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    write(pkg / "fetch.py", LEGACY)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    assert cli.main(["run", "-m", "legacyjobs.fetch", server.url, "x"]) == 0
    out = capsys.readouterr().out
    assert "adapter _InstalledAdapter" in out
    assert "argv ['x']" in out
    assert str(tmp_path) not in sys.path  # restored
    sys.modules.pop("legacyjobs.fetch", None)
    sys.modules.pop("legacyjobs", None)


def test_missing_module_is_a_usage_error(capsys):
    assert cli.main(["run", "-m", "no_such_module_here"]) == 2
    assert "run: No module named no_such_module_here" in capsys.readouterr().err


def test_missing_script_is_a_usage_error(tmp_path, capsys):
    assert cli.main(["run", str(tmp_path / "nope.py")]) == 2
    err = capsys.readouterr().err
    assert "cannot open file" in err
    assert "Traceback" not in err


@pytest.mark.parametrize(
    ("code", "status", "err"), [("0", 0, ""), ("4", 4, ""), ("'bad'", 1, "bad\n")]
)
def test_script_exit_status_is_passed_on(tmp_path, capsys, code, status, err):
    script = write(tmp_path / "exits.py", f"import sys\nsys.exit({code})\n")
    assert cli.main(["run", script]) == status
    assert capsys.readouterr().err == err


def test_script_exception_shows_the_scripts_traceback_only(tmp_path, capsys):
    script = write(
        tmp_path / "crash.py",
        """\
        def main():
            raise RuntimeError("the script's own bug")
        main()
        """,
    )
    assert cli.main(["run", script]) == 1
    err = capsys.readouterr().err
    assert err.startswith("Traceback (most recent call last):\n")
    assert "crash.py" in err
    assert "RuntimeError: the script's own bug" in err
    assert "runpy" not in err
    assert "cli.py" not in err


def test_broken_import_inside_a_module_is_the_scripts_error(tmp_path, monkeypatch, capsys):
    write(tmp_path / "brokenjob.py", "import no_such_dependency_xyz\n")
    monkeypatch.chdir(tmp_path)
    assert cli.main(["run", "-m", "brokenjob"]) == 1
    err = capsys.readouterr().err
    assert "ModuleNotFoundError: No module named 'no_such_dependency_xyz'" in err
    sys.modules.pop("brokenjob", None)


def test_bad_store_spec_is_a_usage_error(tmp_path, capsys):
    script = write(tmp_path / "job.py", "print('never')\n")
    assert cli.main(["run", "--store", "gopher://x", script]) == 2
    captured = capsys.readouterr()
    assert "bad store spec" in captured.err
    assert captured.out == ""
