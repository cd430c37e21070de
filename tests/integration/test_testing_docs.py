"""docs/testing.md runs as written: every Python block, and every doctest block.

Until the docs are executed in CI by pytest-markdown-docs, this runs each ```python block of
the page as a test module of its own (so it must import all it uses), with the shipped pytest
plugin loaded, and checks that every test it defines passes; the ```{doctest} blocks run with
the same globals as Sphinx's doctest builder (docs/conf.py).
"""

from __future__ import annotations

import doctest
import re
import sys
from pathlib import Path
from typing import List

import pytest

pytest_plugins = ["pytester"]

PAGE = Path(__file__).resolve().parents[2] / "docs" / "testing.md"
PLUGIN = "requests_retryafter.pytest_plugin"
FENCE = re.compile(r"^```(\S*)\n(.*?)^```$", re.MULTILINE | re.DOTALL)


def blocks(kind: str) -> List[str]:
    return [body for info, body in FENCE.findall(PAGE.read_text("utf-8")) if info == kind]


def test_the_page_has_snippets() -> None:
    assert len(blocks("python")) >= 6
    assert len(blocks("{doctest}")) >= 2


def test_every_python_block_runs(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
    monkeypatch.delitem(sys.modules, PLUGIN, raising=False)
    files = {f"test_block_{i}": code for i, code in enumerate(blocks("python"))}
    pytester.makepyfile(**files)
    defined = sum(len(re.findall(r"^def test_", code, re.MULTILINE)) for code in files.values())
    assert defined >= 6
    result = pytester.runpytest("-p", PLUGIN, "-p", "no:cacheprovider", "-W", "error", "-rA")
    # A block's top-level code runs when it is collected: a NameError is a collection error.
    result.assert_outcomes(passed=defined)


@pytest.mark.parametrize("index", range(len(blocks("{doctest}"))))
def test_every_doctest_block_passes(index: int) -> None:
    text = blocks("{doctest}")[index]
    globs: dict = {}
    exec("from requests_retryafter import *", globs)  # docs/conf.py doctest_global_setup
    test = doctest.DocTestParser().get_doctest(text, globs, f"testing.md[{index}]", None, 0)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    runner.run(test)
    assert runner.summarize(verbose=False).failed == 0
