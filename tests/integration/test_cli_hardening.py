"""Issue #9 in the command line, over real HTTP and real files: ``get`` prints no secret on any
path, ``report`` creates and changes nothing, and the library's warnings reach stderr."""

from __future__ import annotations

import functools
import json
import os
import socket
import textwrap

import pytest

from requests_retryafter import HostState, RetryAfterAdapter, cli, open_store

#: Every secret a test hands the CLI; none of them may appear in anything it prints.
SECRETS = {
    "user": "alice-user-7",
    "password": "pw-Hunter2-pw",
    "token": "tok-q-51ab",
    "key": "key-q-99cd",
    "fragment": "frag-access-66ef",
}

#: Auth-like request headers, each with its own secret value.
REQUEST_HEADERS = {
    "Authorization": "Bearer hdr-authz-01",
    "Proxy-Authorization": "Basic hdr-proxy-02",
    "X-Api-Key": "hdr-xapikey-03",
    "Api-Key": "hdr-apikey-04",
    "X-Auth-Token": "hdr-xauth-05",
    "X-Amz-Security-Token": "hdr-amz-06",
    "Cookie": "sid=hdr-cookie-07",
    "X-CSRF-Token": "hdr-csrf-08",
    "X-Client-Secret": "hdr-secret-09",
    "X-Session-Id": "hdr-session-10",
    "X-Hub-Signature": "hdr-sig-11",
    "Private-Token": "hdr-private-12",
    "X-Vendor-Credentials": "hdr-cred-13",
    "X-Custom": "Bearer hdr-custom-14",
}

#: Auth-like response headers, each with its own secret value.
RESPONSE_HEADERS = {
    "Set-Cookie": "sid=resp-cookie-21; HttpOnly",
    "X-Auth-Token": "resp-xauth-22",
    "X-Amz-Security-Token": "resp-amz-23",
    "WWW-Authenticate": 'Bearer realm="resp-realm-24"',
    "X-New-Api-Key": "resp-apikey-25",
    "Location": "http://carol:resp-locpw-26@elsewhere.example/next?token=resp-loctok-27",
    "Content-Type": "text/plain",
}


def all_secrets() -> list:
    values = [*SECRETS.values(), *REQUEST_HEADERS.values(), *RESPONSE_HEADERS.values()]
    return [v for v in values if v != "text/plain"] + [
        "hdr-cookie-07",
        "resp-cookie-21",
        "resp-realm-24",
        "resp-locpw-26",
        "resp-loctok-27",
        "hdr-authz-01",
        "hdr-proxy-02",
        "hdr-custom-14",
    ]


def secret_url(base: str, path: str = "/data") -> str:
    scheme, _, rest = base.partition("://")
    s = SECRETS
    return (
        f"{scheme}://{s['user']}:{s['password']}@{rest}{path}"
        f"?token={s['token']}&api_key={s['key']}&page=2#access_token={s['fragment']}"
    )


def header_args() -> list:
    args = []
    for name, value in REQUEST_HEADERS.items():
        args += ["-H", f"{name}: {value}"]
    return args


def assert_no_secret(captured, *, traceback: bool = False) -> None:
    printed = captured.out + captured.err
    leaked = [s for s in all_secrets() if s in printed]
    assert leaked == [], printed
    assert traceback or "Traceback" not in printed


@pytest.fixture(autouse=True)
def virtual_time(monkeypatch, clock):
    """The CLI's adapter on the test's FakeClock; no setting from the real environment."""
    monkeypatch.setattr(cli, "RetryAfterAdapter", functools.partial(RetryAfterAdapter, clock=clock))
    for name in list(os.environ):
        if name.startswith("REQUESTS_RETRYAFTER_"):
            monkeypatch.delenv(name)


# -- get: no secret on any path ----------------------------------------------------------------


def test_verbose_get_prints_no_secret(server, capsys):
    server.replies(
        (429, {"Retry-After": "2", **RESPONSE_HEADERS}),
        (200, RESPONSE_HEADERS),
    )
    assert cli.main(["get", "-v", *header_args(), secret_url(server.url)]) == 0
    captured = capsys.readouterr()
    assert_no_secret(captured)
    err = captured.err
    assert "> GET /data?token=***&api_key=***&page=***" in err
    assert f"> Host: {server.host}" in err
    for name in REQUEST_HEADERS:
        assert f"> {name}: ***" in err
    assert "> Accept: */*" in err
    for name in RESPONSE_HEADERS:
        if name not in ("Location", "Content-Type"):
            assert f"< {name}: ***" in err
    assert "< Location: http://***@elsewhere.example/next?token=***" in err
    assert captured.out.startswith("200 OK")
    # The secrets did go where they belong: to the server.
    seen = server.requests[-1]
    assert seen.headers["X-Api-Key"] == REQUEST_HEADERS["X-Api-Key"]
    assert SECRETS["token"] in seen.path


def test_refused_connection_prints_no_secret(capsys):
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    code = cli.main(["get", "-v", *header_args(), secret_url(f"http://127.0.0.1:{port}")])
    assert code == 1
    captured = capsys.readouterr()
    assert_no_secret(captured)
    assert captured.err.splitlines()[-1].startswith(
        f"requests-retryafter: cannot reach 127.0.0.1:{port}: "
    )


@pytest.mark.parametrize(
    "url",
    [
        secret_url("ftp://files.example"),  # bad scheme
        secret_url("gopher://files.example"),
        secret_url("http://[::1"),  # invalid URL
        f"{SECRETS['user']}:{SECRETS['password']}@files.example/x?token={SECRETS['token']}",
        f"files.example/x?token={SECRETS['token']}#{SECRETS['fragment']}",  # no scheme
    ],
)
def test_bad_urls_print_no_secret(url, capsys):
    assert cli.main(["get", "-v", *header_args(), url]) == 2
    captured = capsys.readouterr()
    assert_no_secret(captured)
    assert "invalid URL" in captured.err
    assert f"Host: {SECRETS['user']}" not in captured.err


def test_a_host_with_a_space_prints_no_secret(capsys):
    # requests 2.33+ refuses the URL (exit 2); older ones (on Python 3.9) send it to a name
    # lookup that fails (exit 1). Either way no secret is shown.
    code = cli.main(["get", "-v", *header_args(), secret_url("http://exa mple.example")])
    assert code in (1, 2)
    captured = capsys.readouterr()
    assert_no_secret(captured)
    assert ("invalid URL" if code == 2 else "cannot reach") in captured.err
    assert f"Host: {SECRETS['user']}" not in captured.err


def test_url_without_scheme_never_echoes_its_userinfo_as_the_host(capsys):
    url = f"{SECRETS['user']}:{SECRETS['password']}@files.example/x"
    assert cli.main(["get", "-v", url]) == 2
    err = capsys.readouterr().err
    assert "> Host: files.example" in err
    assert SECRETS["password"] not in err
    assert SECRETS["user"] not in err


def test_bad_header_prints_no_secret(server, capsys):
    code = cli.main(["get", "-H", f"X-Api-Key {REQUEST_HEADERS['X-Api-Key']}", server.url])
    assert code == 2
    err = capsys.readouterr().err
    assert "bad header" in err
    assert REQUEST_HEADERS["X-Api-Key"] not in err


def test_invalid_header_value_prints_no_secret(server, capsys):
    code = cli.main(["get", "-H", "X-Api-Key: hdr-xapikey-03\u00e9\nx", server.url])
    captured = capsys.readouterr()
    assert code == 2, captured.err
    assert "hdr-xapikey-03" not in captured.err
    assert "Traceback" not in captured.err


def test_a_budget_used_up_prints_no_secret(server, capsys, monkeypatch):
    monkeypatch.setenv("REQUESTS_RETRYAFTER_MAX_ATTEMPTS", "2")
    server.respond(lambda seen: (429, {"Retry-After": "1", **RESPONSE_HEADERS}))
    assert cli.main(["get", "-v", *header_args(), secret_url(server.url)]) == 1
    captured = capsys.readouterr()
    assert_no_secret(captured)
    assert "gave up" in captured.err


def test_a_held_host_is_shown_in_iso_8601(server, clock, held_store_spec, capsys):
    spec = held_store_spec
    assert cli.main(["get", "--store", spec, secret_url(server.url)]) == 1
    captured = capsys.readouterr()
    assert_no_secret(captured)
    last = captured.err.splitlines()[-1]
    assert last == (
        f"requests-retryafter: {server.host} is held until 2023-11-14T23:13:20Z: asked for an hour"
    )
    assert str(int(clock.time() + 3600)) not in captured.err  # never a raw epoch


# -- report: reads only ------------------------------------------------------------------------


def _listing(folder) -> list:
    return sorted(os.listdir(folder))


@pytest.mark.parametrize("scheme", ["json", "sqlite", "shelve"])
def test_report_on_a_missing_path_fails_and_creates_nothing(scheme, tmp_path, capsys):
    folder = tmp_path / "state"
    folder.mkdir()
    path = folder / "hosts.typo"
    assert cli.main(["report", "--store", f"{scheme}://{path}"]) == 1
    err = capsys.readouterr().err
    assert str(path) in err
    assert "does not exist" in err
    assert _listing(folder) == []  # no store file, no lock file


def test_report_in_a_missing_directory_creates_no_directory(tmp_path, capsys):
    path = tmp_path / "nowhere" / "hosts.json"
    assert cli.main(["report", "--store", f"json://{path}"]) == 1
    assert str(path) in capsys.readouterr().err
    assert not (tmp_path / "nowhere").exists()


@pytest.mark.parametrize("scheme", ["json", "sqlite", "shelve"])
def test_report_reads_a_store_without_changing_it(scheme, tmp_path, capsys):
    path = tmp_path / f"hosts.{scheme}"
    spec = f"{scheme}://{path}"
    with open_store(spec) as store:
        store.set("a.example", HostState("a.example", updated_at=1_700_000_000.0))
    before = {
        name: (os.stat(tmp_path / name).st_mtime_ns, (tmp_path / name).read_bytes())
        for name in _listing(tmp_path)
    }
    assert cli.main(["report", "--store", spec, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["hosts"][0]["host"] == "a.example"
    after = {
        name: (os.stat(tmp_path / name).st_mtime_ns, (tmp_path / name).read_bytes())
        for name in _listing(tmp_path)
    }
    assert after == before


@pytest.mark.parametrize("scheme", ["json", "shelve", "sqlite"])
def test_report_refuses_a_file_that_is_not_a_store(scheme, tmp_path, capsys):
    path = tmp_path / "config.json"
    content = b'{"theme": "dark", "recent": ["a", "b"]}\n'
    path.write_bytes(content)
    code = cli.main(["report", "--store", f"{scheme}://{path}"])
    err = capsys.readouterr().err
    assert code == 1, err
    assert str(path) in err
    assert "no hosts" not in err
    assert path.read_bytes() == content
    assert _listing(tmp_path) == ["config.json"]  # nothing moved aside, no lock file


def test_report_refuses_a_character_device(capsys):
    if not os.path.exists(os.devnull):
        pytest.skip("no null device")
    before = os.stat(os.devnull)
    assert cli.main(["report", "--store", f"json://{os.devnull}"]) == 1
    assert os.devnull in capsys.readouterr().err
    after = os.stat(os.devnull)
    assert (after.st_mode, after.st_ino, after.st_rdev) == (
        before.st_mode,
        before.st_ino,
        before.st_rdev,
    )


# -- the library's warnings reach stderr ---------------------------------------------------


def test_library_warnings_under_run_reach_stderr_once(tmp_path, capsys):
    script = tmp_path / "job.py"
    script.write_text(
        textwrap.dedent(
            """
            import logging
            logging.getLogger("requests_retryafter.stores.jsonfile").warning(
                "JSON store %s: damaged, moved aside to %s", "/s/hosts.json", "/s/hosts.bad"
            )
            """
        ),
        encoding="utf-8",
    )
    assert cli.main(["run", str(script)]) == 0
    err = capsys.readouterr().err
    assert err.count("warning: JSON store /s/hosts.json: damaged, moved aside") == 1


def test_a_script_traceback_under_run_prints_no_secret(tmp_path, capsys):
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    script = tmp_path / "job.py"
    script.write_text(
        textwrap.dedent(
            f"""
            import requests
            requests.get({secret_url(f"http://127.0.0.1:{port}")!r}, timeout=5)
            """
        ),
        encoding="utf-8",
    )
    assert cli.main(["run", "-v", str(script)]) == 1
    captured = capsys.readouterr()
    assert_no_secret(captured, traceback=True)  # the script's own, as Python would print it
    assert "ConnectionError" in captured.err
    assert "token=***" in captured.err


def test_get_shows_each_decision_once(server, clock, held_store_spec, capsys):
    spec = held_store_spec
    assert cli.main(["get", "--store", spec, server.url]) == 1
    err = capsys.readouterr().err
    assert err.count("asked for an hour") == 2  # the decision as it happens, then the error
    assert "warning:" not in err


# -- a hostile server or store cannot drive the terminal --------------------------------------


def test_control_characters_from_the_server_are_escaped(server, capsys):
    server.reply(
        200,
        {"Content-Type": "text/plain", "X-Note": "a\x1b]0;owned\x07b"},
        body=b"line one\n\x1b[2Jline\ttwo\r\n",
    )
    assert cli.main(["get", "-v", server.url]) == 0
    captured = capsys.readouterr()
    assert "\x1b" not in captured.out + captured.err
    assert "\x07" not in captured.err
    assert "< X-Note: a\\x1b]0;owned\\x07b" in captured.err
    assert "line one\n\\x1b[2Jline\ttwo\\r\n" in captured.out


def test_control_characters_from_the_store_are_escaped_in_the_table(tmp_path, capsys):
    spec = f"json://{tmp_path}/hosts.json"
    with open_store(spec) as store:
        store.set("evil\x1b[2J.example", HostState("evil\x1b[2J.example"))
    assert cli.main(["report", "--store", spec]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out
    assert "evil\\x1b[2J.example" in out


@pytest.mark.parametrize("scheme", ["json", "sqlite"])
def test_report_refuses_to_write_its_page_over_the_store(scheme, tmp_path, capsys):
    path = tmp_path / "hosts.db"
    spec = f"{scheme}://{path}"
    with open_store(spec) as store:
        store.set("a.example", HostState("a.example"))
    before = path.read_bytes()
    assert cli.main(["report", "--store", spec, "--html", str(path)]) == 2
    assert "over the store itself" in capsys.readouterr().err
    assert path.read_bytes() == before
