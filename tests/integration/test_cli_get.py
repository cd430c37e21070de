"""``requests-retryafter get`` against a real local server, on the test's virtual clock."""

from __future__ import annotations

import functools
import json
import socket

import pytest

from requests_retryafter import HostState, RetryAfterAdapter, cli, open_store


@pytest.fixture(autouse=True)
def virtual_time(monkeypatch, clock):
    """Make the CLI's adapter run on the test's FakeClock and ignore the real environment."""
    monkeypatch.setattr(cli, "RetryAfterAdapter", functools.partial(RetryAfterAdapter, clock=clock))
    for name in list(__import__("os").environ):
        if name.startswith("REQUESTS_RETRYAFTER_"):
            monkeypatch.delenv(name)


def test_ok_prints_status_and_body(server, capsys):
    server.reply(200, {"Content-Type": "application/json"}, body=b'{"rows": 3}')
    assert cli.main(["get", server.url + "/records"]) == 0
    captured = capsys.readouterr()
    assert captured.out == '200 OK\n{"rows": 3}\n'
    # No decision to show: only the closing summary.
    assert captured.err == (
        "requests-retryafter: summary per host:\n"
        f"  {server.host}: 1 request, 0 refusals, 0 waits (0.0 s), 0 holds, 0 give-ups\n"
    )


def test_retry_is_shown_as_it_happens(server, clock, capsys):
    server.replies((429, {"Retry-After": "3"}), 200)
    assert cli.main(["get", server.url + "/records"]) == 0
    captured = capsys.readouterr()
    assert captured.out.startswith("200 OK\n")
    lines = captured.err.splitlines()
    assert lines[0] == (f"* {server.host}: 429 on attempt 1; sleeping 3.0 s: Retry-After 3 obeyed")
    # One line per retry: no "waiting 3.0 s before attempt 2" after it (read as 6 s).
    assert not any("waiting" in line for line in lines), lines
    assert server.count == 2
    assert server.times[1] - server.times[0] >= 3.0
    assert sum(clock.sleeps) >= 3.0


def test_verbose_shows_headers_without_secrets(server, capsys):
    server.reply(200, {"Content-Type": "text/plain", "Set-Cookie": "sid=abc"}, body=b"hi")
    code = cli.main(
        ["get", "-v", "-H", "Authorization: Bearer s3cret", server.url + "/a?token=t0k"]
    )
    assert code == 0
    err = capsys.readouterr().err
    assert "> GET /a?token=***" in err
    assert "> Authorization: ***" in err
    assert "< HTTP 200 OK" in err
    assert "< Set-Cookie: ***" in err
    assert "s3cret" not in err
    assert "t0k" not in err
    assert "sid=abc" not in err
    assert server.requests[0].headers["Authorization"] == "Bearer s3cret"


def test_long_and_binary_bodies_are_previewed(server, capsys):
    server.reply(200, {"Content-Type": "text/plain"}, body=b"x" * 50)
    assert cli.main(["get", "--preview", "10", server.url]) == 0
    assert capsys.readouterr().out == "200 OK\n" + "x" * 10 + "… (40 more characters)\n"
    server.reply(200, {"Content-Type": "image/png"}, body=b"\x89PNG....")
    assert cli.main(["get", server.url]) == 0
    assert capsys.readouterr().out == "200 OK\n[8 bytes of image/png]\n"


def test_http_error_status_exits_1(server, capsys):
    server.reply(404, body=b"no such thing")
    assert cli.main(["get", server.url + "/missing"]) == 1
    assert capsys.readouterr().out.startswith("404 Not Found\n")


def test_auth_answer_is_not_retried(server, capsys):
    server.reply(403, {"Retry-After": "5"})
    assert cli.main(["get", server.url]) == 1
    assert server.count == 1
    assert "authentication answer, never retried" in capsys.readouterr().err


def test_budget_used_up_is_a_message_and_exit_1(server, capsys, monkeypatch):
    monkeypatch.setenv("REQUESTS_RETRYAFTER_MAX_ATTEMPTS", "2")
    server.respond(lambda seen: (429, {"Retry-After": "2"}))
    assert cli.main(["get", server.url + "/x?token=secret"]) == 1
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err
    last = captured.err.splitlines()[-1]
    assert last.startswith(f"requests-retryafter: gave up: {server.host}: all 2 attempts used")
    assert "secret" not in captured.err
    assert server.count == 2


def test_held_host_is_a_message_and_exit_1(server, clock, held_store_spec, capsys):
    spec = held_store_spec
    assert cli.main(["get", "--store", spec, server.url]) == 1
    err = capsys.readouterr().err.splitlines()
    assert err[0] == f"* {server.host}: held until 2023-11-14T23:13:20Z: asked for an hour"
    assert err[-1] == (
        f"requests-retryafter: {server.host} is held until 2023-11-14T23:13:20Z: asked for an hour"
    )
    assert server.count == 0


def test_unreachable_host_is_a_message_and_exit_1(capsys):
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    assert cli.main(["get", f"http://127.0.0.1:{port}/x?token=secret"]) == 1
    err = capsys.readouterr().err
    assert err.splitlines()[-1].startswith(f"requests-retryafter: cannot reach 127.0.0.1:{port}: ")
    assert "own backoff" in err  # connection retries are shown as they happen
    assert "Traceback" not in err
    assert "secret" not in err


@pytest.mark.parametrize("url", ["not a url", "ftp://example.org/x", "http://"])
def test_invalid_url_is_a_usage_error(url, capsys):
    assert cli.main(["get", url]) == 2
    err = capsys.readouterr().err
    assert "invalid URL" in err
    assert "Traceback" not in err


def test_bad_header_is_a_usage_error(server, capsys):
    assert cli.main(["get", "-H", "no-colon", server.url]) == 2
    assert "bad header 'no-colon'" in capsys.readouterr().err


def test_bad_environment_variable_is_a_usage_error(server, capsys, monkeypatch):
    monkeypatch.setenv("REQUESTS_RETRYAFTER_MAX_ATTEMPTS", "lots")
    assert cli.main(["get", server.url]) == 2
    err = capsys.readouterr().err
    assert "REQUESTS_RETRYAFTER_MAX_ATTEMPTS" in err
    assert "Traceback" not in err


def test_what_was_learned_is_kept_in_the_store(server, tmp_path, capsys):
    spec = f"sqlite://{tmp_path}/hosts.db"
    server.replies((429, {"Retry-After": "2"}), 200)
    assert cli.main(["get", "--store", spec, server.url]) == 0
    with open_store(spec) as store:
        kept = store.get(server.host)
    assert kept is not None
    assert len(kept.observations) == 1
    assert kept.observations[0].header == 2.0


@pytest.mark.parametrize("scheme", ["json", "sqlite"])
def test_a_host_that_never_refused_is_in_the_store_the_run_named(
    server, clock, tmp_path, capsys, scheme
):
    spec = f"{scheme}://{tmp_path}/hosts.{scheme}"
    server.reply(200, body=b"fine")
    assert cli.main(["get", "--store", spec, server.url + "/records"]) == 0
    assert "cannot write" not in capsys.readouterr().err
    assert (tmp_path / f"hosts.{scheme}").is_file()  # the store exists after the run

    assert cli.main(["report", "--store", spec]) == 0
    table = capsys.readouterr().out.splitlines()
    assert len(table) == 2
    assert table[1].split()[:3] == [server.host, "unknown", "0"]  # seen, 0 rejections
    assert cli.main(["report", "--json", "--store", spec]) == 0
    (host,) = json.loads(capsys.readouterr().out)["hosts"]
    assert host["host"] == server.host
    assert host["observations"] == 0
    assert host["evidence"] == "no rejection observed yet"
    assert host["updated_at"] == clock.time()  # when it was seen, on the adapter's clock


def test_what_a_store_knew_of_a_host_is_not_replaced_by_a_calm_run(server, clock, tmp_path):
    spec = f"json://{tmp_path}/hosts.json"
    before = HostState(server.host, evidence="known before", updated_at=clock.time() - 600)
    with open_store(spec) as store:
        store.set(server.host, before)
    server.reply(200)
    assert cli.main(["get", "--store", spec, server.url]) == 0
    with open_store(spec) as store:
        assert store.get(server.host) == before


def test_every_host_of_a_redirect_chain_is_seen(server, tmp_path):
    spec = f"json://{tmp_path}/hosts.json"
    elsewhere = f"http://localhost:{server.port}/there"
    server.replies((302, {"Location": elsewhere}), 200)
    assert cli.main(["get", "--store", spec, server.url + "/here"]) == 0
    assert server.count == 2
    with open_store(spec) as store:
        assert sorted(host for host, _ in store.items()) == sorted(
            [server.host, f"localhost:{server.port}"]
        )


def test_an_unreachable_host_is_not_recorded_as_seen(tmp_path):
    spec = f"json://{tmp_path}/hosts.json"
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # closed when the block ends: nothing listens there
    assert cli.main(["get", "--store", spec, f"http://127.0.0.1:{port}/"]) == 1
    with open_store(spec) as store:
        assert list(store.items()) == []
