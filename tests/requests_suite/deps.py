"""Print, one a line, what requests' test suite needs installed to run, read from its sdist.

    python deps.py UNPACKED_SDIST_DIR

Takes the ``test`` dependency group of the sdist's ``pyproject.toml`` (requests 2.33+) when it
has one and this Python can read TOML, else ``requirements-dev.txt`` (older releases), and
leaves out what the caller pins itself (``requests``, the ``-e .`` line) or does not need
(``pytest-cov``, ``wheel``). Adds what ``.ci/requests-suite.sh`` uses on top: pytest-timeout
(a bound per test), pytest-xdist (the runs wait on sockets, not the CPU), pytest-mock and
PySocks (imported by some releases' tests without being listed).
"""

from __future__ import annotations

import importlib
import re
import sys
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

__all__ = ["main", "requirements"]

#: Left out: pinned by the caller, or not needed to run the tests.
_SKIP = frozenset({"requests", "pytest-cov", "wheel"})
#: Added when missing.
_EXTRA = ("pytest-timeout", "pytest-xdist", "pytest-mock", "PySocks")


def _name(requirement: str) -> str:
    match = re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*", requirement.strip())
    return re.sub(r"[-_.]+", "-", match.group(0)).lower() if match else ""


def _load_toml(path: Path) -> Optional[Dict[str, Any]]:
    for name in ("tomllib", "tomli"):  # tomli: Python < 3.11, if installed
        try:
            toml = importlib.import_module(name)
        except ImportError:
            continue
        with path.open("rb") as f:
            data: Dict[str, Any] = toml.load(f)
        return data
    return None


def requirements(sdist: Path) -> List[str]:
    """What the test suite in the unpacked sdist at ``sdist`` needs, as requirement strings."""
    found: List[str] = []
    pyproject = sdist / "pyproject.toml"
    data = _load_toml(pyproject) if pyproject.is_file() else None
    group = (data or {}).get("dependency-groups", {}).get("test")
    if isinstance(group, list):
        found = [item for item in group if isinstance(item, str)]
    else:
        dev = sdist / "requirements-dev.txt"
        if dev.is_file():
            for line in dev.read_text(encoding="utf-8").splitlines():
                line = line.split("#", 1)[0].strip()
                if line and not line.startswith("-"):
                    found.append(line)
    out: List[str] = []
    seen = set()
    for requirement in [*found, *_EXTRA]:
        name = _name(requirement)
        if name and name not in _SKIP and name not in seen:
            seen.add(name)
            out.append(requirement)
    return out


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Print the requirements of the sdist named on the command line."""
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    for requirement in requirements(Path(args[0])):
        print(requirement)
    return 0


if __name__ == "__main__":
    sys.exit(main())
