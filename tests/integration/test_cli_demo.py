"""``requests-retryafter demo``: the real demo, small and on virtual time only."""

from __future__ import annotations

import json
import re
import socket
import sys
import time

import pytest

from requests_retryafter import cli, demo


def scenario_names():
    return [s.name for s in demo._demo_scenarios(10)]


def test_one_portal_per_retry_after_behaviour():
    behaviours = [s.behaviour for s in demo._demo_scenarios(10)]
    assert behaviours == list(demo.DEMO_BEHAVIOURS)


def test_quick_demo_shows_progress_then_what_was_learned(capsys):
    started = time.monotonic()
    assert (
        cli.main(["demo", "--quick", "--port-base", "0", "--progress", "plain", "--seed", "1"]) == 0
    )
    assert time.monotonic() - started < 20
    captured = capsys.readouterr()
    for name in scenario_names():
        # one final progress line per portal on stderr, one section per portal on stdout
        finals = [
            line
            for line in captured.err.splitlines()
            if re.match(rf"\[ *[0-9.]+s\] {name} +\[[#.]+\] ", line)
            and line.endswith(("  done", "  held"))
        ]
        assert len(finals) == 1, name
        assert f"\n{name} (127.0.0.1:" in captured.out
    assert captured.out.count("  category:  ") == len(scenario_names())
    assert captured.out.count("  evidence:  ") >= 1
    assert "  limit:     " in captured.out
    assert "  waits:     " in captured.out
    assert "obeyed" in captured.out  # the truthful portal's header was obeyed
    assert "ignore x" in captured.out  # and the Retry-After on 200s was ignored
    assert "Done in" in captured.err


def test_demo_without_rich(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "rich", None)  # import rich -> ImportError
    assert cli.main(["demo", "--quick", "--urls", "30", "--port-base", "0"]) == 0
    captured = capsys.readouterr()
    assert "What was learned" in captured.out
    assert "[####" in captured.err


def test_no_progress(capsys):
    assert (
        cli.main(["demo", "--urls", "20", "--speed", "0", "--port-base", "0", "--progress", "none"])
        == 0
    )
    captured = capsys.readouterr()
    assert "[" not in captured.err
    assert "What was learned" in captured.out


def test_store_keeps_what_was_learned_for_report(tmp_path, capsys):
    spec = f"json://{tmp_path}/demo.json"
    assert cli.main(["demo", "--quick", "--port-base", "0", "--plain", "--store", spec]) == 0
    out = capsys.readouterr().out
    assert f"requests-retryafter report --store {spec}" in out
    assert cli.main(["report", "--store", spec, "--json"]) == 0
    hosts = json.loads(capsys.readouterr().out)["hosts"]
    assert len(hosts) == len(demo.DEMO_BEHAVIOURS)
    assert all(h["host"].startswith("127.0.0.1:") for h in hosts)
    assert any(h["observations"] for h in hosts)


def free_port_run(count: int) -> int:
    """A port P such that P .. P+count-1 are free right now."""
    for base in range(41000, 60000, 97):
        sockets = []
        try:
            for port in range(base, base + count):
                sock = socket.socket()
                sockets.append(sock)
                sock.bind(("127.0.0.1", port))
        except OSError:
            continue
        finally:
            for sock in sockets:
                sock.close()
        return base
    pytest.skip("no run of free ports")


def test_second_run_continues_from_the_kept_store(tmp_path, capsys):
    spec = f"json://{tmp_path}/demo.json"
    base = free_port_run(len(demo.DEMO_BEHAVIOURS))
    argv = ["demo", "--quick", "--progress", "none", "--store", spec, "--port-base", str(base)]
    assert cli.main(argv) == 0
    capsys.readouterr()
    assert cli.main(["report", "--store", spec, "--json"]) == 0
    first = {h["host"]: h for h in json.loads(capsys.readouterr().out)["hosts"]}
    if sorted(first) != sorted(f"127.0.0.1:{base + i}" for i in range(len(first))):
        pytest.skip("a port was taken meanwhile")
    # The same hosts again: virtual time goes on from the last moment the store knew of.
    assert cli.main(argv) == 0
    capsys.readouterr()
    assert cli.main(["report", "--store", spec, "--json"]) == 0
    second = {h["host"]: h for h in json.loads(capsys.readouterr().out)["hosts"]}
    assert set(second) == set(first)
    for host, h in second.items():
        assert h["updated_at"] >= first[host]["updated_at"], host
    assert any(second[h]["updated_at"] > first[h]["updated_at"] for h in second)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["demo", "--urls", "0"], "--urls must be at least 1"),
        (["demo", "--speed", "-1"], "--speed cannot be negative"),
        (["demo", "--store", "gopher://x"], "bad store spec"),
    ],
)
def test_demo_usage_errors(argv, message, capsys):
    assert cli.main(argv) == 2
    assert message in capsys.readouterr().err


def test_busy_port_falls_back_to_a_free_one(capsys):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        argv = ["demo", "--urls", "15", "--speed", "0", "--progress", "none"]
        assert cli.main([*argv, "--port-base", str(port)]) == 0
    out = capsys.readouterr().out
    first = demo._demo_scenarios(10)[0].name
    assert f"\n{first} (127.0.0.1:" in out
    assert f"\n{first} (127.0.0.1:{port})" not in out


# -- issue 11: seeded, requeues, honest limits, a hint that works ------------------------------

PORT = re.compile(r"127\.0\.0\.1:\d+")


def quick_demo(capsys, *extra):
    argv = ["demo", "--quick", "--port-base", "0", "--progress", "none", *extra]
    assert cli.main(argv) == 0
    return capsys.readouterr().out


def test_demo_is_seeded_by_default(capsys):
    first, second = quick_demo(capsys), quick_demo(capsys)
    assert PORT.sub("HOST", first) == PORT.sub("HOST", second)
    assert cli.build_parser().parse_args(["demo"]).seed == 0


def test_another_seed_is_another_run(capsys):
    assert PORT.sub("HOST", quick_demo(capsys)) != PORT.sub(
        "HOST", quick_demo(capsys, "--seed", "7")
    )


def test_the_crawler_requeues_a_url_after_a_give_up(capsys, monkeypatch):
    # Three attempts a call (the operator's variable, which the demo's adapters read): calls
    # give up inside the first episodes, as a job's calls do with a tight budget. Every URL
    # of every portal is fetched in the end, give-ups notwithstanding.
    monkeypatch.setenv("REQUESTS_RETRYAFTER_MAX_ATTEMPTS", "3")
    out = quick_demo(capsys)
    sections = out.split("\n\n")
    requeued = [s for s in sections if "  requeued:  " in s]
    assert requeued, out
    for section in requeued:
        match = re.search(r"(\d+) calls? gave up .* put (\d+) URLs? back .* fetched (\d+)", section)
        assert match, section
        gave_up, back, fetched = map(int, match.groups())
        assert gave_up >= back >= fetched >= 1
        assert "  give up x " in section


def test_a_limit_above_the_enforced_one_is_marked_and_explained(capsys):
    out = quick_demo(capsys)
    marked = 0
    for line in out.splitlines():
        match = re.match(
            r"  limit:     ([\d.]+) requests/min "
            r"\(the portal enforces (\d+)(?:; documented [\d.]+)?\)",
            line,
        )
        if match:
            above = float(match.group(1)) > float(match.group(2)) + 0.05
            assert line.endswith(" *") == above, line
            marked += above
    # Whether a run reads a limit above the enforced one is the engine's doing (and it
    # improves): what the demo owes is the mark and the note wherever one does.
    assert out.count("* above the enforced limit:") == marked
    assert ("the portal's refusals stop any" in out) == bool(marked)


def test_the_note_on_a_limit_above_the_enforced_one_says_why() -> None:
    from requests_retryafter.state import LimitEstimate
    from requests_retryafter.testing import FixedWindow

    run = demo._HostRun(
        name="absent",
        description="",
        expected="absent",
        enforced=100.0,
        limiter=FixedWindow(100, 60),
        portal=None,
        clock=demo._DemoClock(0.0, 0.0),
        total=1,
    )
    limit = LimitEstimate(rate=100 / 41, window=41.0, burst=100)
    assert demo._limit_above(limit.rate, run.enforced)
    assert not demo._limit_above(100 / 60, run.enforced)
    note = "\n".join(demo._limit_note(limit, run, [100 / 41, 100 / 50]))
    assert "the window reads 41 s, not 60 s" in note
    assert "(so far 146 -> 120/min)" in note
    assert "the portal's refusals stop any excess" in note


def test_closing_hint_names_a_command_that_runs(capsys, monkeypatch, tmp_path):
    import os
    import subprocess

    out = quick_demo(capsys)
    hint = out.rstrip().splitlines()[-1].strip()
    command = hint.split(" report ")[0]
    assert hint.endswith("report --store json://demo-hosts.json")
    assert "demo --store json://demo-hosts.json --html report.html" in out
    # Typed as printed (from the directory it was printed in), the command runs.
    argv = command.split()
    result = subprocess.run(
        [*argv, "--version"], capture_output=True, text=True, cwd=os.getcwd(), check=False
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("requests-retryafter ")


def test_the_closing_hint_never_overwrites_the_page_the_demo_wrote(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    spec = f"json://{tmp_path}/demo.json"
    out = quick_demo(capsys, "--urls", "10", "--store", spec, "--html", "report.html")
    hints = [line.strip() for line in out.splitlines() if " report --store " in line]
    assert hints
    assert all(" --html report.html" not in h for h in hints), hints
    assert any(h.endswith(f"report --store {spec} --html hosts.html") for h in hints), hints
    assert (tmp_path / "report.html").is_file()


def test_the_demo_writes_its_report_with_the_waits_the_store_does_not_keep(tmp_path, capsys):
    page = tmp_path / "report.html"
    argv = ["demo", "--quick", "--port-base", "0", "--progress", "none", "--html", str(page)]
    assert cli.main(argv) == 0
    out = capsys.readouterr().out
    assert str(page) in out
    html = page.read_text(encoding="utf-8")
    section = html[html.index("Waits and give-ups") :]
    assert "retry after a refusal" in section  # the run's own decisions, with their reasons
    assert "obeyed" in section
    assert "<script" not in html
    # Each host is named as the terminal names it, and a stated documented limit is dashed.
    for portal in demo._demo_scenarios(10):
        assert f'class="note label">{portal.name}: ' in html, portal.name
    assert "documented 60.0</text>" in html
    assert "Dashed: the documented limit, 30.0/min." in html
