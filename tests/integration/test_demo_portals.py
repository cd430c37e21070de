"""The package ships no benchmark fixtures (issue #11): the scenarios, the ideal-duration maths
and the expected verdicts live in benchmarks/scenarios.py, and the demo builds its own seven
portals from :mod:`requests_retryafter.testing`, so it runs where benchmarks/ is absent.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import textwrap

import requests
import scenarios  # benchmarks/scenarios.py, loaded by conftest.py

from requests_retryafter import cli, demo
from requests_retryafter.clock import FakeClock
from requests_retryafter.testing import RateLimitedServer

#: Names only the benchmarks have.
BENCHMARK_ONLY = ("standard_scenarios", "extra_scenarios", "ideal_duration", "steady_duration")


def test_the_package_has_no_simulator_module() -> None:
    assert importlib.util.find_spec("requests_retryafter.simulator") is None


def test_no_module_of_the_package_holds_scenarios_or_needs_benchmarks(tmp_path) -> None:
    # A fresh interpreter in isolated mode, away from the source tree: only the package (as
    # installed) can be imported, never benchmarks/.
    script = textwrap.dedent(
        f"""
        import importlib, pkgutil, sys
        import requests_retryafter
        names = [m.name for m in pkgutil.walk_packages(
            requests_retryafter.__path__, "requests_retryafter.")]
        skipped = []
        for name in names:
            try:
                importlib.import_module(name)
            except ImportError as exc:  # an optional extra not installed here
                skipped.append((name, exc.name))
        assert all(missing and not missing.startswith("requests_retryafter")
                   for _, missing in skipped), skipped
        assert "scenarios" not in sys.modules
        for name in names:
            module = sys.modules.get(name)
            for attr in {BENCHMARK_ONLY!r}:
                assert not hasattr(module, attr), (name, attr)
        print(len(names) - len(skipped))
        """
    )
    done = subprocess.run(
        [sys.executable, "-I", "-c", script],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert int(done.stdout) >= 10  # the package's modules were really imported


def test_the_demo_runs_where_benchmarks_are_absent(tmp_path) -> None:
    argv = [sys.executable, "-I", "-m", "requests_retryafter", "demo", "--urls", "10"]
    argv += ["--speed", "0", "--port-base", "0", "--progress", "none"]
    done = subprocess.run(
        argv, capture_output=True, text=True, cwd=tmp_path, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("  category:  ") == len(demo.DEMO_BEHAVIOURS)


def test_the_demo_portals_are_testing_servers() -> None:
    clock = FakeClock(start=1_700_000_000.0)
    for portal in demo._demo_scenarios(10):
        server = portal.build(clock)
        assert isinstance(server, RateLimitedServer)
        assert server.name == portal.name
        assert server.behaviour == portal.behaviour
        assert server.limiter is not portal.limiter  # a fresh copy for each run
        assert repr(server.limiter) == repr(portal.limiter)


def _limit(limiter: object) -> tuple:
    return tuple(getattr(limiter, attr, None) for attr in ("limit", "window", "rate", "burst"))


def test_the_demo_shows_the_portals_it_showed_from_the_standard_scenarios() -> None:
    # The seven portals keep the names, limits, headers, sizes and verdicts the demo had when it
    # took them from the benchmarks' standard set (the first of each behaviour).
    for urls in (10, 120, 300):
        standard = list(scenarios.standard_scenarios(urls=urls).values())
        for portal in demo._demo_scenarios(urls):
            same = next(s for s in standard if s.behaviour == portal.behaviour)
            assert portal.name == same.name
            assert portal.description == same.description
            assert type(portal.limiter).__name__ in (type(same.limiter).__name__, "TokenBucket")
            assert _limit(portal.limiter) == _limit(same.limiter), portal.name
            assert portal.expected == same.kind, portal.name
            assert portal.urls == same.urls, portal.name
            assert portal.random_range == same.random_range, portal.name


def test_a_portal_that_documents_a_limit_states_it_on_every_answer() -> None:
    clock = FakeClock(start=1_700_000_000.0)
    portals = {p.name: p for p in demo._demo_scenarios(10)}
    # DOMAIN.md's county portals: documented 60 vs enforced 40, 30 vs 12, none vs 100.
    assert portals["fixed_truthful"].documented == (60, 60)
    assert portals["always_zero"].documented == (30, 60)
    assert portals["absent"].documented is None
    for name, policy in (("fixed_truthful", "60;w=60"), ("absent", None)):
        with portals[name].build(clock) as server:
            for _ in range(2):
                response = requests.get(server.url, timeout=5)
                assert response.headers.get("RateLimit-Policy") == policy, name
        assert server.accepted == 2  # stating a limit is not enforcing it


def test_the_report_carries_the_documented_limit_not_the_enforced_one(tmp_path, capsys) -> None:
    spec = f"json://{tmp_path}/demo.json"
    argv = ["demo", "--urls", "20", "--speed", "0", "--port-base", "0", "--progress", "none"]
    assert cli.main([*argv, "--store", spec]) == 0
    out = capsys.readouterr().out
    assert "(the portal enforces 40; documented 60)" in out
    assert "(the portal enforces 12; documented 30)" in out
    hosts = {p.name: p for p in demo._demo_scenarios(20)}
    sections = {s.split(" (", 1)[0]: s for s in out.split("\n\n") if " (127.0.0.1:" in s}
    keys = {name: s.split(" (", 1)[1].split(")", 1)[0] for name, s in sections.items()}
    assert cli.main(["report", "--store", spec, "--json"]) == 0
    report = {h["host"]: h for h in json.loads(capsys.readouterr().out)["hosts"]}
    # (a host that never refused in so short a run may have left nothing in the store)
    documented = {n: report.get(keys[n], {}).get("documented_per_minute") for n in hosts}
    assert documented["fixed_truthful"] == 60.0
    assert documented["always_zero"] == 30.0
    assert documented["absent"] is None
    assert all(documented[n] is None for n in hosts if hosts[n].documented is None)
