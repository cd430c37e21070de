"""``benchmarks/bench_portals.py`` runs and reports what it says (a short run of one portal)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType
from typing import Iterator

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_portals.py"


@pytest.fixture(scope="module")
def bench() -> Iterator[ModuleType]:
    spec = importlib.util.spec_from_file_location("bench_portals", SCRIPT)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        del sys.modules[spec.name]


def test_a_quick_run_with_repeats_reports_every_run(bench, tmp_path, capsys):
    out = tmp_path / "out.json"
    argv = ["--quick", "--only", "fixed_truthful", "--seeds", "3", "--json", str(out)]
    assert bench.main(argv) == 0
    printed = capsys.readouterr().out
    assert "| fixed_truthful | urllib3 Retry |" in printed
    assert "Across 3 start phases and seeds" in printed
    document = json.loads(out.read_text(encoding="utf-8"))
    assert [r["client"] for r in document["runs"]] == [
        "urllib3 Retry",
        "adapter run 1",
        "adapter run 2",
    ]
    repeats = document["repeats"]["fixed_truthful"]
    assert len(repeats) == 2  # repetitions 1 and 2; 0 is the main table
    for first, second in repeats:
        assert first["ok"] == first["urls"] == 100
        assert second["ok"] == 100
        # a truthful fixed window: the second run is at the ideal rate, unrefused
        assert second["rate"] >= 0.95
        assert second["rejected"] == 0
    # each repetition starts further into a minute, so the ideal differs
    assert len({first["ideal_s"] for first, _ in repeats}) == 2


def test_seeds_must_be_positive(bench):
    with pytest.raises(SystemExit):
        bench.main(["--seeds", "0"])
