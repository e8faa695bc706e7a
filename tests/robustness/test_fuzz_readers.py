"""Property-based fuzzing of every reader of user files (tests/helpers/fuzz_targets.py).

Each reader reads the "ci" profile's examples (the same every run): damaged copies of
the bundled sample files and generated input. The contract: accepted (what is skipped
is counted), or a UserError naming the file; never another exception (IndexError,
KeyError, UnicodeDecodeError, JSONDecodeError, zlib.error, struct.error, TensorFlow's
DataLossError or InvalidArgumentError...), never a hang. A failure is shrunk to a
small case by hypothesis. `python -m benchmarks.robustness.fuzz_readers --examples=10000` runs
the same readers at scale (the table of docs/robustness.md).
"""

import pytest

from tests.helpers import fuzz_targets


@pytest.mark.parametrize("name", list(fuzz_targets.READERS))
def test_reader_accepts_or_names_the_file(name):
    reader = fuzz_targets.READERS[name]
    counts, _ = fuzz_targets.fuzz(reader)
    assert counts["other"] == 0
    # The cases reach both sides of the contract (a damaged feature cache is made
    # again, never refused).
    assert counts["accepted"] > 0
    assert counts["rejected"] > 0 or not reader.rejects
