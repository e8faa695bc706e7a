"""The order in which the test workers take the test files: the longest first.

pytest-xdist's `--dist loadfile` hands out whole files, in the order of the collection
(with `--no-loadscope-reorder`; by default it orders them by their number of tests).
Handed out longest first, the last files to start are short ones, and the workers end
together. In the order of their number of tests, the last to start were files of one to
three long tests (a fine-tuning run shared by its tests, a search, an export): in one run
on 2 cores with three workers, one worker ran on alone for 50 s after the others had
ended; longest first, the three ended within a second of each other.

`file_seconds.json` (beside this file's folder) holds each file's seconds in one run of
the whole suite. A file it does not name (a new one) counts as the median file. The
order only decides when a file starts, never what it tests: a stale table costs time,
not correctness. To measure it again:

    bash run_tests.sh --junitxml=report.xml
    python -m tests.helpers.file_order report.xml
"""

from __future__ import annotations

import json
import os
import pathlib
import statistics
import sys
import xml.etree.ElementTree as ElementTree

TESTS = pathlib.Path(__file__).resolve().parent.parent
REPO = TESTS.parent
SECONDS_FILE = TESTS / "file_seconds.json"


def read_seconds(path: pathlib.Path = SECONDS_FILE) -> dict[str, float]:
    """{file relative to the repository, as in node ids: seconds}; {} without a table."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}


def longest_first(items: list, seconds: dict[str, float]) -> list:
    """`items` (pytest items) with their files in decreasing order of seconds; the
    tests of each file stay in the file's order, and files of equal seconds in the
    collection's."""
    default = statistics.median(seconds.values()) if seconds else 0.0
    return sorted(items, key=lambda item: -seconds.get(item.nodeid.split("::")[0], default))


def _file_of(classname: str) -> str | None:
    """The test file of a JUnit `classname` ("tests.runners.test_x" or
    "tests.runners.test_x.TestClass"), relative to the repository."""
    parts = classname.split(".")
    for end in range(len(parts), 0, -1):
        path = pathlib.Path(*parts[:end]).with_suffix(".py")
        if (REPO / path).is_file():
            return path.as_posix()
    return None


def seconds_per_file(report: pathlib.Path) -> dict[str, float]:
    """{file: seconds} of a JUnit XML report (pytest's `--junitxml`: each test's setup,
    call and teardown), largest first."""
    totals: dict[str, float] = {}
    for case in ElementTree.parse(report).iter("testcase"):
        name = _file_of(case.get("classname", ""))
        if name is not None:
            totals[name] = totals.get(name, 0.0) + float(case.get("time", 0.0))
    return {name: round(totals[name], 1) for name in sorted(totals, key=lambda n: -totals[n])}


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m tests.helpers.file_order REPORT.xml", file=sys.stderr)
        return 2
    report = pathlib.Path(argv[0])
    try:
        table = seconds_per_file(report)
    except (OSError, ElementTree.ParseError) as e:
        print(f"{report}: not a JUnit XML report of pytest ({e})", file=sys.stderr)
        return 1
    if not table:
        print(f"{report}: no test of this repository in it", file=sys.stderr)
        return 1
    temporary = SECONDS_FILE.with_name(SECONDS_FILE.name + ".tmp")  # Whole or not at all.
    temporary.write_text(json.dumps(table, indent=1) + "\n", encoding="utf-8")
    os.replace(temporary, SECONDS_FILE)
    print(f"Wrote the seconds of {len(table)} files to {SECONDS_FILE}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
