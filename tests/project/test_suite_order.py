"""The suite's order (tests/conftest.py): the files it starts first exist, so that a
renamed slow file is not silently left to the end of the run."""

from tests.conftest import REPO_ROOT, SLOWEST_FILES


def test_the_slowest_files_listed_exist():
    missing = [path for path in SLOWEST_FILES if not (REPO_ROOT / path).is_file()]
    assert missing == [], f"tests/conftest.py SLOWEST_FILES names files that are gone: {missing}"
    assert len(set(SLOWEST_FILES)) == len(SLOWEST_FILES)
