"""The documentation agrees with the code: the configuration table lists every Policy field
with its environment variable and default, and the testing page's examples run."""

from __future__ import annotations

import ast
import dataclasses
import re
import runpy
import sys
from pathlib import Path
from typing import Dict, List, Tuple

import pytest

from requests_retryafter import Policy
from requests_retryafter.policy import ENV_PREFIX

DOCS = Path(__file__).resolve().parents[2] / "docs"
ROW = re.compile(
    r"^\|\s*`(?P<field>\w+)`\s*\|\s*`(?P<env>\w+)`\s*\|\s*`(?P<default>[^`]*)`\s*\|(?P<meaning>[^|]*)\|\s*$"
)


def policy_rows() -> List[Tuple[str, str, str, str]]:
    rows = []
    for line in (DOCS / "configuration.md").read_text(encoding="utf-8").splitlines():
        match = ROW.match(line)
        if match:
            rows.append((match["field"], match["env"], match["default"], match["meaning"].strip()))
    return rows


def test_every_policy_field_is_documented_once():
    documented = [row[0] for row in policy_rows()]
    fields = [f.name for f in dataclasses.fields(Policy)]
    assert sorted(documented) == sorted(fields)
    assert len(set(documented)) == len(documented)


@pytest.mark.parametrize("row", policy_rows(), ids=lambda row: row[0])
def test_row_matches_the_code(row):
    name, env, default, meaning = row
    field = {f.name: f for f in dataclasses.fields(Policy)}[name]
    assert env == Policy.env_var(name) == ENV_PREFIX + name.upper()
    value = ast.literal_eval(default)
    assert value == field.default
    assert type(value) is type(field.default), f"{name}: write {field.default!r}"
    assert meaning, f"{name} has no meaning"


def test_the_documented_variables_work():
    environ: Dict[str, str] = {}
    for name, env, default, _ in policy_rows():
        environ[env] = default.lower() if default in ("True", "False") else default
    assert Policy.from_env(environ) == Policy()


def test_store_variable_is_documented():
    text = (DOCS / "configuration.md").read_text(encoding="utf-8")
    assert re.search(r"^\| `REQUESTS_RETRYAFTER_STORE` \| `memory://` \|", text, re.M)


def _python_blocks(page: str) -> List[str]:
    text = (DOCS / page).read_text(encoding="utf-8")
    return re.findall(r"^```python\n(.*?)^```", text, flags=re.S | re.M)


def test_the_sphinx_configuration_puts_its_own_source_tree_first_from_any_directory(
    tmp_path, monkeypatch
):
    # The README's test command imports docs/conf.py from the repository's root (it collects
    # the docs' snippets), Sphinx from docs/: either way the path gets the repository, never
    # the working directory's parent (where a stray attr.py hid the attrs package).
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    runpy.run_path(str(DOCS / "conf.py"))
    assert Path(sys.path[0]).resolve() == DOCS.parent
