"""Tests of tests/helpers/file_order.py: the test files handed to the workers longest
first, and the table of their seconds measured again from a JUnit report."""

import json
import types

from tests.helpers import file_order

REPORT = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest" tests="5">
<testcase classname="tests.project.test_file_order" name="test_a" time="1.5" />
<testcase classname="tests.project.test_file_order" name="test_b[x]" time="2.25" />
<testcase classname="tests.project.test_floors.TestSomething" name="test_c" time="4.0" />
<testcase classname="tests.project.test_floors" name="test_d" time="0.5" />
<testcase classname="elsewhere.test_gone" name="test_e" time="9.0" />
</testsuite></testsuites>
"""


def _items(*node_ids):
    return [types.SimpleNamespace(nodeid=node_id) for node_id in node_ids]


def test_files_longest_first_each_files_tests_in_their_order():
    items = _items("t/a.py::one", "t/b.py::one", "t/a.py::two", "t/c.py::one", "t/b.py::two")
    seconds = {"t/a.py": 1.0, "t/b.py": 10.0}  # t/c.py: not measured -> the median, 5.5
    ordered = [item.nodeid for item in file_order.longest_first(items, seconds)]
    assert ordered == ["t/b.py::one", "t/b.py::two", "t/c.py::one", "t/a.py::one", "t/a.py::two"]
    # Without a table, the collection's order.
    assert file_order.longest_first(items, {}) == items


def test_seconds_per_file_of_a_junit_report(tmp_path):
    report = tmp_path / "report.xml"
    report.write_text(REPORT, encoding="utf-8")
    table = file_order.seconds_per_file(report)
    # Classes map to their file; a test of no file here is left out.
    assert table == {"tests/project/test_floors.py": 4.5, "tests/project/test_file_order.py": 3.8}
    assert list(table) == ["tests/project/test_floors.py", "tests/project/test_file_order.py"]


def test_the_command_writes_the_table_and_says_what_is_wrong(tmp_path, monkeypatch, capsys):
    table = tmp_path / "file_seconds.json"
    monkeypatch.setattr(file_order, "SECONDS_FILE", table)
    report = tmp_path / "report.xml"
    report.write_text(REPORT, encoding="utf-8")
    assert file_order.main([str(report)]) == 0
    assert json.loads(table.read_text()) == file_order.seconds_per_file(report)
    for text, said in [("<testsuites", "not a JUnit XML report"), ("<a/>", "no test of this")]:
        report.write_text(text, encoding="utf-8")
        assert file_order.main([str(report)]) == 1
        assert said in capsys.readouterr().err
    assert file_order.main([str(tmp_path / "missing.xml")]) == 1
    assert "missing.xml: not a JUnit XML report" in capsys.readouterr().err
    assert file_order.main([]) == 2
