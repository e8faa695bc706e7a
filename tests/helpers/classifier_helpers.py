"""Helpers shared by test_classifier_readers.py and test_classifier_features.py:
writing a data file, the MRPC header.
"""

MRPC_HEADER = "Quality\t#1 ID\t#2 ID\t#1 String\t#2 String"


def _write(directory, name, lines, bom=False):
    path = directory / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(("\ufeff" if bom else "") + "\n".join(lines) + "\n", encoding="utf-8")
    return path
