"""The documentation keeps its promises: the API reference names every public name, the
README's first commands stay as they are, and no Python snippet escapes being run."""

from __future__ import annotations

import re
from pathlib import Path
from typing import List, Tuple

import requests_retryafter

ROOT = Path(__file__).resolve().parents[2]

#: Pages whose Python snippets run with ``pytest --markdown-docs`` (cli.md and testing.md
#: join them once their snippets run).
RUN_PAGES = [
    "README.md",
    *(
        f"docs/{name}.md"
        for name in ("index", "tutorial", "how-it-works", "configuration", "stores", "api")
    ),
]

_DIRECTIVE = re.compile(
    r"^\.\. (?:auto)?(?:class|function|exception|data|type)::\s+(?:requests_retryafter\.)?(\S+)",
    re.M,
)


def _python_fences(text: str) -> List[Tuple[int, str]]:
    """``(line, info string)`` of every fence whose language is Python."""
    found = []
    for number, line in enumerate(text.splitlines(), 1):
        match = re.match(r"^```(py|python|python3)(\s.*)?$", line)
        if match:
            found.append((number, line[3:]))
    return found


def test_api_reference_documents_every_public_name() -> None:
    api = (ROOT / "docs" / "api.md").read_text(encoding="utf-8")
    documented = set(_DIRECTIVE.findall(api))
    missing = sorted(set(requests_retryafter.__all__) - documented)
    assert missing == [], f"docs/api.md does not document {missing}"


def test_readme_first_commands_are_the_two_that_work() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    first = readme.index("```sh")
    block = readme[first : readme.index("```", first + 5)]
    assert block.splitlines()[1:] == [
        "python3 -m venv .venv && .venv/bin/pip install -q -e '.[cli]' && "
        ".venv/bin/requests-retryafter demo",
        "bash .ci/test",
    ]


def test_a_snippet_not_run_says_why() -> None:
    # notest is for what cannot run (a fragment, a shell session); the reason goes in an
    # HTML comment just above the fence.
    for page in RUN_PAGES:
        lines = (ROOT / page).read_text(encoding="utf-8").splitlines()
        for number, info in _python_fences("\n".join(lines)):
            if "notest" in info.split():
                above = lines[number - 2] if number >= 2 else ""
                assert above.startswith("<!--"), f"{page}:{number}: notest without a reason"


def test_no_install_command_that_fails_from_a_clone() -> None:
    # The package is not on an index yet, and unquoted extras fail in zsh.
    for page in [*RUN_PAGES, "docs/cli.md", "docs/testing.md"]:
        text = (ROOT / page).read_text(encoding="utf-8")
        for line in text.splitlines():
            if line.lstrip().startswith(("pip install", "$ pip install")):
                assert "'" in line or "-e ." in line, f"{page}: {line.strip()}"
            assert not re.search(r"pip install [^'\s]*\[", line), f"{page}: unquoted extra: {line}"
