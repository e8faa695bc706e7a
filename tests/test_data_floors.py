"""The two lowest floors import nothing above them: data_prep imports no other package
of the project (nor a runner), evaluation imports only data_prep."""

import ast
import pathlib

import pytest

from tests.conftest import REPO_ROOT

# Top-level names of the project's packages and scripts.
PROJECT = {path.stem for path in REPO_ROOT.glob("*.py")} | {
    path.name for path in REPO_ROOT.iterdir()
    if (path / "__init__.py").is_file()} | {"serving"}
ALLOWED = {"data_prep": {"data_prep"}, "evaluation": {"data_prep", "evaluation"}}


def imported_project_packages(path: pathlib.Path) -> set[str]:
    """The project packages and scripts that a module imports, anywhere in it."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            names = [node.module]
        else:
            continue
        found |= {name.split(".")[0] for name in names} & PROJECT
    return found


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_no_import_runs_up_a_floor(package):
    modules = sorted((REPO_ROOT / package).glob("*.py"))
    assert modules
    wrong = {str(path.relative_to(REPO_ROOT)): sorted(
        imported_project_packages(path) - ALLOWED[package]) for path in modules}
    assert {module: names for module, names in wrong.items() if names} == {}
