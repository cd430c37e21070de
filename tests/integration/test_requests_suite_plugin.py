"""The ``retryafter_swap`` pytest plugin that ``.ci/requests-suite.sh`` runs requests' own test
suite under: every new ``requests.Session`` mounts a fresh ``RetryAfterAdapter``, and the
comparison of the two runs' JUnit XML reports tells outcomes apart test for test.

The plugin runs in a child pytest (as in CI), against the shared ``server`` on 127.0.0.1.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from types import ModuleType
from typing import Dict, List

SUITE_DIR = Path(__file__).resolve().parent.parent / "requests_suite"


def _load_compare() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "requests_suite_compare", SUITE_DIR / "compare.py"
    )
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


compare = _load_compare()

INNER_TESTS = """
import os

import requests
import requests.adapters

from requests_retryafter import MemoryStore, RetryAfterAdapter

URL = os.environ["SUITE_PLUGIN_URL"]
SWAPPED = os.environ["SUITE_PLUGIN_SWAPPED"] == "1"


def test_new_sessions_mount_the_expected_adapter():
    with requests.Session() as one, requests.Session() as two:
        for prefix in ("http://", "https://"):
            adapter = one.get_adapter(prefix + "example.invalid/")
            if SWAPPED:
                assert type(adapter) is RetryAfterAdapter
                assert isinstance(adapter.store, MemoryStore)
                assert adapter is not two.get_adapter(prefix + "example.invalid/")
            else:
                assert type(adapter) is requests.adapters.HTTPAdapter
        assert one.adapters["http://"] is not one.adapters["https://"]


def test_a_module_level_get_goes_through_it():
    response = requests.get(URL + "/data", timeout=5)
    assert response.status_code == 200
    expected = RetryAfterAdapter if SWAPPED else requests.adapters.HTTPAdapter
    assert type(response.connection) is expected


def test_adapters_a_test_builds_itself_are_left_alone():
    assert type(requests.adapters.HTTPAdapter()) is requests.adapters.HTTPAdapter


def test_our_variables_are_removed_only_under_the_plugin():
    present = "REQUESTS_RETRYAFTER_STORE" in os.environ
    assert present is not SWAPPED


def test_differs():
    assert not SWAPPED, "fails only with the adapter"
"""


def run_inner(tmp_path: Path, url: str, *, swapped: bool) -> subprocess.CompletedProcess[str]:
    """Run INNER_TESTS in a child pytest, with or without ``-p retryafter_swap``."""
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    (tmp_path / "test_inner.py").write_text(textwrap.dedent(INNER_TESTS))
    name = "swapped" if swapped else "plain"
    env: Dict[str, str] = {
        k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "REQUESTS_RETRYAFTER_"))
    }
    env.update(
        PYTHONPATH=os.pathsep.join([str(SUITE_DIR), env.get("PYTHONPATH", "")]),
        SUITE_PLUGIN_URL=url,
        SUITE_PLUGIN_SWAPPED="1" if swapped else "0",
        # Would send every session's adapter to a file, were it read.
        REQUESTS_RETRYAFTER_STORE=f"json://{tmp_path / 'never.json'}",
        REQUESTS_RETRYAFTER_MAX_SLEEP="1",
    )
    args: List[str] = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-rA"]
    if swapped:
        args += ["-p", "retryafter_swap"]
    args += [f"--junitxml={tmp_path / name}.xml", "test_inner.py"]
    return subprocess.run(
        args, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120, check=False
    )


def test_the_plugin_swaps_the_adapter_and_compare_tells_the_runs_apart(
    tmp_path: Path, server, capsys
) -> None:
    server.respond(lambda seen: 200)
    xml = {}
    for name in ("plain", "swapped"):
        where = tmp_path / name
        where.mkdir()
        done = run_inner(where, server.url, swapped=name == "swapped")
        xml[name] = str(where / f"{name}.xml")
        summary = "5 passed" if name == "plain" else "1 failed, 4 passed"
        assert summary in done.stdout, done.stdout + done.stderr
    assert "retryafter_swap: requests.Session() mounts https:// RetryAfterAdapter" in done.stdout
    assert not (tmp_path / "swapped" / "never.json").exists()
    assert server.count == 2

    assert compare.main([xml["plain"], xml["swapped"]]) == 1
    out = capsys.readouterr().out
    assert "with adapter: 5 tests: 1 failed, 4 passed" in out
    assert "1 test differs:" in out
    assert "passed   failed   test_inner::test_differs" in out
    assert "adapter: AssertionError: fails only with the adapter" in out

    # The reports the other way round, or twice the plain one: not a comparison of the swap.
    assert compare.main([xml["swapped"], xml["plain"]]) == 2
    assert compare.main([xml["plain"], xml["plain"]]) == 2
    assert "retryafter_swap" in capsys.readouterr().err


REPORT = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest">{props}
<testcase classname="t" name="ok" time="0.1"/>
<testcase classname="t" name="skip"><skipped type="pytest.skip" message="no"/></testcase>
<testcase classname="t" name="xf"><skipped type="pytest.xfail" message="known"/></testcase>
<testcase classname="t" name="bad" time="0.2"><failure message="boom">def f():
E   ValueError: boom
t.py:3: ValueError</failure></testcase>
<testcase classname="t" name="teardown"><error message="teardown">E   OSError: gone</error>
</testcase>
{extra}</testsuite></testsuites>
"""
MARK = '<properties><property name="requests_retryafter_adapter" value="RetryAfterAdapter"/>'


def test_compare_reads_every_outcome_and_the_worst_of_a_repeated_case(tmp_path: Path) -> None:
    path = tmp_path / "r.xml"
    twice = '<testcase classname="t" name="ok"><error message="in teardown"/></testcase>'
    path.write_text(REPORT.format(props=MARK + "</properties>", extra=twice))
    results, props = compare.read_report(str(path))
    assert props == {"requests_retryafter_adapter": "RetryAfterAdapter"}
    assert {k: v.outcome for k, v in results.items()} == {
        "t::ok": "error",
        "t::skip": "skipped",
        "t::xf": "xfailed",
        "t::bad": "failed",
        "t::teardown": "error",
    }
    assert results["t::bad"].detail == "ValueError: boom"
    assert results["t::ok"].detail == "in teardown"


def test_compare_counts_a_test_one_run_lacks_as_a_difference(tmp_path: Path, capsys) -> None:
    plain, swapped = tmp_path / "plain.xml", tmp_path / "swapped.xml"
    plain.write_text(REPORT.format(props="", extra=""))
    extra = '<testcase classname="t" name="new"/>'
    swapped.write_text(REPORT.format(props=MARK + "</properties>", extra=extra))
    assert compare.main([str(plain), str(swapped)]) == 1
    assert "missing  passed   t::new" in capsys.readouterr().out
    swapped.write_text(REPORT.format(props=MARK + "</properties>", extra=""))
    assert compare.main([str(plain), str(swapped)]) == 0
    assert "same outcome for every test" in capsys.readouterr().out
    assert compare.main([str(plain), str(tmp_path / "absent.xml")]) == 2
