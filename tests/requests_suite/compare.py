"""Compare two JUnit XML reports of one test suite, test for test.

    python compare.py PLAIN.xml SWAPPED.xml

Each test's outcome (``passed``, ``failed``, ``error``, ``skipped``, ``xfailed``, or
``missing`` when a run does not have it) must be the same in both reports. Prints a table of
the tests that differ, with the exception each failure's traceback ends with, and exits 1 if any
differ, 2 if a report cannot be read or the second run was not made under the
``retryafter_swap`` plugin (or the first was), 0 otherwise.

``--slowest N`` also lists the N tests whose time grew most between the runs.
"""

from __future__ import annotations

import argparse
import sys
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

__all__ = ["Result", "compare", "main", "read_report"]

PROPERTY = "requests_retryafter_adapter"  # retryafter_swap.PROPERTY, without importing pytest

#: When a test case holds several results (a failed call and a teardown error), the worst wins.
_RANK = {"passed": 0, "skipped": 1, "xfailed": 2, "failed": 3, "error": 4}


@dataclass(frozen=True)
class Result:
    """One test's outcome in one report, with the last line of its traceback (if any)."""

    outcome: str
    detail: str = ""
    time: float = 0.0


def _last_line(text: Optional[str], message: Optional[str], limit: int = 300) -> str:
    """The exception a traceback ends with: the first line of its last block of ``E`` lines
    (else its last line, else the message); at most ``limit`` characters."""
    lines = [line.strip() for line in (text or "").splitlines() if line.strip()]
    found = ""
    for before, line in zip(["", *lines], lines):
        if line.startswith("E ") and not before.startswith("E "):
            found = line[1:].strip()
    if not found:
        found = lines[-1] if lines else (message or "").strip()
    found = found.splitlines()[0] if found else ""
    return found if len(found) <= limit else found[: limit - 3] + "..."


def _case_result(case: ET.Element) -> Result:
    outcome, detail = "passed", ""
    for child in case:
        tag = child.tag
        if tag == "skipped":
            kind = "xfailed" if child.get("type") == "pytest.xfail" else "skipped"
        elif tag in ("failure", "error"):
            kind = "failed" if tag == "failure" else "error"
        else:
            continue
        if _RANK[kind] >= _RANK[outcome]:
            outcome = kind
            detail = _last_line(child.text, child.get("message"))
    return Result(outcome, detail, float(case.get("time") or 0.0))


def read_report(path: str) -> Tuple[Dict[str, Result], Dict[str, str]]:
    """Read a JUnit XML report: ``({test id: result}, {suite property: value})``.

    A test id is ``classname::name`` as pytest writes them. A test listed twice keeps its
    worst outcome.
    """
    root = ET.parse(path).getroot()  # our own pytest's report, not untrusted input
    results: Dict[str, Result] = {}
    properties: Dict[str, str] = {}
    for prop in root.iter("property"):
        properties[prop.get("name", "")] = prop.get("value", "")
    for case in root.iter("testcase"):
        test_id = f"{case.get('classname', '')}::{case.get('name', '')}"
        result = _case_result(case)
        seen = results.get(test_id)
        if seen is None or _RANK[result.outcome] > _RANK[seen.outcome]:
            results[test_id] = result
    return results, properties


def compare(
    plain: Dict[str, Result], swapped: Dict[str, Result]
) -> List[Tuple[str, Result, Result]]:
    """The tests whose outcome differs, sorted by id (``missing`` for a test one run lacks)."""
    missing = Result("missing")
    differ = []
    for test_id in sorted(set(plain) | set(swapped)):
        a, b = plain.get(test_id, missing), swapped.get(test_id, missing)
        if a.outcome != b.outcome:
            differ.append((test_id, a, b))
    return differ


def _counts(results: Dict[str, Result]) -> str:
    counts: Dict[str, int] = {}
    for result in results.values():
        counts[result.outcome] = counts.get(result.outcome, 0) + 1
    return ", ".join(f"{n} {outcome}" for outcome, n in sorted(counts.items()))


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Compare the reports named on the command line; see the module docstring."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("plain", help="JUnit XML of the run as is")
    parser.add_argument("swapped", help="JUnit XML of the run with -p retryafter_swap")
    parser.add_argument("--slowest", type=int, default=0, metavar="N")
    args = parser.parse_args(argv)
    try:
        plain, plain_props = read_report(args.plain)
        swapped, swapped_props = read_report(args.swapped)
    except (OSError, ET.ParseError) as exc:
        print(f"cannot read a report: {exc}", file=sys.stderr)
        return 2
    if PROPERTY in plain_props or PROPERTY not in swapped_props:
        print(
            f"the second report must come from a run with -p retryafter_swap and the first "
            f"without it (suite property {PROPERTY!r}: first {plain_props.get(PROPERTY)!r}, "
            f"second {swapped_props.get(PROPERTY)!r})",
            file=sys.stderr,
        )
        return 2
    print(f"as is:        {len(plain)} tests: {_counts(plain)}")
    print(f"with adapter: {len(swapped)} tests: {_counts(swapped)}")
    if args.slowest > 0:
        common = set(plain) & set(swapped)
        grown = sorted(common, key=lambda t: swapped[t].time - plain[t].time, reverse=True)
        print(f"\n{'as is':>8} {'adapter':>8}  slowest growth")
        for test_id in grown[: args.slowest]:
            print(f"{plain[test_id].time:7.2f}s {swapped[test_id].time:7.2f}s  {test_id}")
    differ = compare(plain, swapped)
    if not differ:
        print("same outcome for every test")
        return 0
    print(f"\n{len(differ)} test{' differs' if len(differ) == 1 else 's differ'}:")
    print(f"{'as is':<8} {'adapter':<8} test")
    for test_id, a, b in differ:
        print(f"{a.outcome:<8} {b.outcome:<8} {test_id}")
        for label, result in (("as is", a), ("adapter", b)):
            if result.detail:
                print(f"{'':17}{label}: {result.detail}")
    return 1


if __name__ == "__main__":
    sys.exit(main())
