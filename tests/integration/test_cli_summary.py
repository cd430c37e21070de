"""``run`` and ``get`` end with a summary per host; a retry is one line in ``get``'s output."""

from __future__ import annotations

import functools
import textwrap

import pytest
import requests

from requests_retryafter import RetryAfterAdapter, _install, cli

ORIGINAL_INIT = requests.Session.__init__
RA = "Retry-After"


@pytest.fixture(autouse=True)
def _on_the_test_clock(monkeypatch, clock):
    """The CLI's adapters run on the test's FakeClock and ignore the real environment."""
    for name in list(__import__("os").environ):
        if name.startswith("REQUESTS_RETRYAFTER_"):
            monkeypatch.delenv(name)
    monkeypatch.setattr(cli, "RetryAfterAdapter", functools.partial(RetryAfterAdapter, clock=clock))
    monkeypatch.setattr(_install, "install", functools.partial(_install.install, clock=clock))
    yield
    _install.uninstall()
    assert requests.Session.__init__ is ORIGINAL_INIT


def summary_lines(err: str):
    lines = err.splitlines()
    start = lines.index("requests-retryafter: summary per host:")
    return lines[start + 1 :]


def test_run_ends_with_a_summary_per_host(server, clock, tmp_path, capsys):
    server.replies((429, {RA: "5"}), 200, 200)
    script = tmp_path / "job.py"
    script.write_text(
        textwrap.dedent(
            """\
            import sys, requests
            for path in ("/a", "/b"):
                print(requests.get(sys.argv[1] + path).status_code)
            """
        )
    )
    assert cli.main(["run", str(script), server.url]) == 0
    captured = capsys.readouterr()
    assert captured.out == "200\n200\n"
    assert summary_lines(captured.err) == [
        f"  {server.host}: 3 requests, 1 refusal, 1 wait (5.0 s), 0 holds, 0 give-ups"
    ]
    assert clock.sleeps == [pytest.approx(5.0)]


def test_run_summary_counts_give_ups_even_when_the_script_fails(server, tmp_path, capsys, clock):
    server.respond(lambda seen: (429, {RA: "1"}))
    script = tmp_path / "job.py"
    script.write_text("import sys, requests\nrequests.get(sys.argv[1] + '/x')\n")
    assert cli.main(["run", str(script), server.url]) == 1
    err = capsys.readouterr().err
    assert "RetryLimitExceeded" in err  # the script's own traceback
    # The default ten attempts, each refused: nine waits (the header's second, then, once
    # the host refused past it twice, own backoff), their total as slept.
    assert len(clock.sleeps) == 9
    assert summary_lines(err) == [
        f"  {server.host}: 10 requests, 10 refusals, 9 waits ({sum(clock.sleeps):.1f} s), "
        "0 holds, 1 give-up"
    ]


def test_run_without_requests_prints_no_summary(tmp_path, capsys):
    script = tmp_path / "quiet.py"
    script.write_text("print('nothing')\n")
    assert cli.main(["run", str(script)]) == 0
    assert "summary" not in capsys.readouterr().err


def test_get_verbose_shows_one_line_per_retry_then_the_summary(server, capsys):
    server.replies((429, {RA: "2"}), (503, {RA: "4"}), 200)
    assert cli.main(["get", "-v", server.url + "/x"]) == 0
    err = capsys.readouterr().err.splitlines()
    decisions = [line for line in err if line.startswith("* ")]
    assert decisions[:2] == [
        f"* {server.host}: 429 on attempt 1; sleeping 2.0 s: Retry-After 2 obeyed",
        f"* {server.host}: 503 on attempt 2; sleeping 4.0 s: Retry-After 4 obeyed",
    ]
    assert not any("waiting" in line for line in decisions)
    assert (
        err[-1] == f"  {server.host}: 3 requests, 2 refusals, 2 waits (6.0 s), 0 holds, 0 give-ups"
    )


def test_get_summary_on_a_give_up(server, capsys):
    server.respond(lambda seen: (429, {RA: "50"}))
    monkey_env = {"REQUESTS_RETRYAFTER_DEADLINE": "10"}
    with pytest.MonkeyPatch.context() as mp:
        for name, value in monkey_env.items():
            mp.setenv(name, value)
        assert cli.main(["get", server.url + "/x"]) == 1
    err = capsys.readouterr().err
    assert f"  {server.host}: 1 request, 1 refusal, 0 waits (0.0 s), 0 holds, 1 give-up" in err
    assert err.rstrip().splitlines()[-1].startswith("requests-retryafter: gave up:")
