"""Floors: no import in the library runs up a floor, no import runs in a circle, and no
module of the project (library, scripts, benchmarks, tests) edits the import path.

Floors, bottom to top (ARCHITECTURE.md):
 -1 common/                     errors for people, file I/O, run control (locks, stop
                                signals, the resume record); imports no other package
  0 data_prep/                  tokenization, readers, features, records
  1 modeling/, evaluation/      side by side: each may import data_prep, not the other;
                                modeling/ takes only data from it (`MODELING_DATA`)
  2 serving/                    exports: may import the floors below
  3 the scripts at the top      runners, runner_flags.py, runner_settings.py, model_flags.py,
                                export_tfhub.py, extract_features.py
Every import counts, also one inside a function. Imports are read with `ast`, so
nothing is imported to check them.
"""

import ast
import pathlib

from tests.conftest import REPO_ROOT

FLOORS = {"common": -1, "data_prep": 0, "modeling": 1, "evaluation": 1, "serving": 2}
SCRIPTS = {p.stem for p in REPO_ROOT.glob("*.py")}
TOP = 3
# (importing module, imported module) -> why it is allowed for now. Remove an entry
# when its import is gone.
KNOWN_VIOLATIONS: dict = {}
# Benchmarks that still call a runner's main in-process (to be rebuilt on the library).
KNOWN_BENCHMARK_VIOLATIONS: dict = {}
# What modeling/ may import from data_prep/: data (records and their input pipeline,
# features and their records, a run's splits of features and the windows of long
# inputs, tokenization). Process control and errors live in common/.
MODELING_DATA = ("data_prep.records", "data_prep.input_pipeline", "data_prep.tokenization")
MODELING_DATA_PACKAGES = ("data_prep.text",)
MODELING_DATA_SUFFIXES = ("_features", "_records", "_splits", "_windows")


def _floor(module: str) -> int | None:
    """The floor of a project module name, None for third-party modules."""
    top = module.split(".")[0]
    if top in FLOORS:
        return FLOORS[top]
    return TOP if top in SCRIPTS else None


def _module_name(path: pathlib.Path, root: pathlib.Path = REPO_ROOT) -> str:
    """data_prep/squad/reader.py -> data_prep.squad.reader."""
    return ".".join(path.relative_to(root).with_suffix("").parts)


def _library_modules() -> dict[str, pathlib.Path]:
    """Every module of every package, sub-packages included."""
    return {
        _module_name(path): path
        for package in FLOORS
        for path in sorted((REPO_ROOT / package).rglob("*.py"))
    }


def _imports(module: str, path: pathlib.Path, modules) -> set[str]:
    """Project modules that `module` imports: `from a import b` is a.b where that is a
    module, else a; a package stands for its `__init__`."""
    package = module.rsplit(".", 1)[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from the package of `module`
                base = ".".join([package] + ([base] if base else []))
            for alias in node.names:
                name = f"{base}.{alias.name}"
                found.add(name if name in modules or f"{name}.__init__" in modules else base)
    found = {f"{name}.__init__" if f"{name}.__init__" in modules else name for name in found}
    return {name for name in found if name in modules or name.split(".")[0] in SCRIPTS}


def _graph() -> dict[str, set[str]]:
    """Library module -> the project modules it imports."""
    modules = _library_modules()
    return {module: _imports(module, path, modules) for module, path in modules.items()}


def test_no_import_runs_up_a_floor():
    violations = set()
    for module, imported in _graph().items():
        own = module.split(".")[0]
        for name in imported:
            other = name.split(".")[0]
            if other == own:
                continue
            if _floor(name) >= FLOORS[own]:  # up, or across to a side-by-side package
                violations.add((module, name))
    new = sorted(violations - set(KNOWN_VIOLATIONS))
    assert not new, f"imports that run up (or across) a floor: {new}"


def test_benchmarks_import_the_library_never_a_runner():
    """Benchmarks (in every sub-folder) measure the library; a runner's flags and main
    are not an API."""
    modules = _library_modules()
    runners = {name for name in SCRIPTS}
    wrong = {}
    for path in sorted((REPO_ROOT / "benchmarks").rglob("*.py")):
        imported = {name.split(".")[0] for name in _imports(_module_name(path), path, modules)}
        if imported & runners:
            wrong[path.relative_to(REPO_ROOT).as_posix()] = sorted(imported & runners)
    assert wrong == KNOWN_BENCHMARK_VIOLATIONS


def _project_files() -> list[pathlib.Path]:
    """Every Python file of the project: the library, the scripts at the top,
    benchmarks and tests (conftest.py included); virtual environments and run outputs
    (hidden folders, runs/, output/) left out."""
    skipped = {"runs", "output", "__pycache__"}
    return [
        path
        for path in sorted(REPO_ROOT.rglob("*.py"))
        if not any(
            part.startswith(".") or part in skipped
            for part in path.relative_to(REPO_ROOT).parts[:-1]
        )
    ]


def _path_edits(source: str) -> list[int]:
    """Lines that edit the import path: any use of `sys.path` (insert, append, slice
    assignment, even a read that could be mutated), `from sys import path`, or
    `site.addsitedir`."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            if (node.value.id, node.attr) in {("sys", "path"), ("site", "addsitedir")}:
                lines.append(node.lineno)
        elif isinstance(node, ast.ImportFrom) and node.module in {"sys", "site"}:
            if {alias.name for alias in node.names} & {"path", "addsitedir"}:
                lines.append(node.lineno)
    return sorted(lines)


STARTS_PROGRAMS = REPO_ROOT / "tests" / "helpers" / "prewarmed.py"


def test_no_module_edits_the_import_path():
    """A package, not a path hack: the library is installed (`pip install -e .`), pytest
    puts the repository's root on the path (pytest.ini), and benchmarks run from the
    root as modules (`python -m benchmarks.speed.bench_serving`), so no module, test or
    benchmark touches `sys.path`; but the tests' prewarmed interpreter, which sets
    sys.path[0] for each program it starts, as `python` does (`STARTS_PROGRAMS`)."""
    files = [path for path in _project_files() if path != STARTS_PROGRAMS]
    assert REPO_ROOT / "tests" / "conftest.py" in files
    assert REPO_ROOT / "benchmarks" / "speed" / "bench_serving.py" in files
    edits = [
        f"{path.relative_to(REPO_ROOT).as_posix()}:{line}"
        for path in files
        for line in _path_edits(path.read_text(encoding="utf-8"))
    ]
    assert not edits, f"sys.path edited (use absolute imports from the root): {edits}"
    assert len(_path_edits(STARTS_PROGRAMS.read_text(encoding="utf-8"))) == 3


def test_the_path_check_sees_every_form():
    edits = (
        "import sys\nsys.path.insert(0, 'x')\n",
        "import sys\nsys.path[:0] = ['x']\n",
        "import sys\n\ndef f():\n    sys.path.append('x')\n",
        "from sys import path\npath.append('x')\n",
        "import site\nsite.addsitedir('x')\n",
    )
    assert [_path_edits(source) for source in edits] == [[2], [2], [4], [1], [2]]
    assert _path_edits("import sys\nprint(sys.argv, 'sys.path.insert(0, x)')\n") == []


def test_no_import_runs_in_a_circle():
    graph = _graph()
    state, path, circles = {}, [], []

    def visit(module):
        state[module] = "open"
        path.append(module)
        for name in sorted(graph.get(module, ())):
            if state.get(name) == "open":
                circles.append(path[path.index(name) :] + [name])
            elif name in graph and name not in state:
                visit(name)
        path.pop()
        state[module] = "done"

    for module in sorted(graph):
        if module not in state:
            visit(module)
    assert not circles, f"import circles: {circles}"


# The most lines a module of the library, or a script at the top, may have: what a
# reader holds at once.
MAX_MODULE_LINES = 600
# Scripts still over it, to be split: remove an entry when its module is short again.
KNOWN_LONG_MODULES: set = set()


def test_no_module_over_600_lines():
    paths = [path for package in FLOORS for path in (REPO_ROOT / package).rglob("*.py")]
    lengths = {
        path.relative_to(REPO_ROOT).as_posix(): len(path.read_text(encoding="utf-8").splitlines())
        for path in paths + sorted(REPO_ROOT.glob("*.py"))
    }
    long = {name: n for name, n in lengths.items() if n > MAX_MODULE_LINES}
    assert set(long) <= KNOWN_LONG_MODULES, long
    assert lengths["modeling/training.py"] > 0  # the checker reads the library


def test_the_checker_sees_what_it_checks():
    graph = _graph()
    assert "data_prep.context_windows" in graph["serving.windows"]
    assert "serving.savedmodel" in graph["serving.exports"]
    assert "data_prep.ner.tag_schemes" in graph["evaluation.conlleval"]
    assert _floor("run_classifier") == TOP and _floor("numpy") is None
    assert "common.errors" in graph["data_prep.records"]
    assert "common.file_io" in graph["data_prep.records"]


def test_the_model_config_needs_no_data_preparation():
    """BertConfig reads and writes its JSON through common/, not data_prep/."""
    graph = _graph()
    assert "common.file_io" in graph["modeling.config"]
    assert not {m for m in graph["modeling.config"] if m.startswith("data_prep")}


def _modeling_imports_beyond_data(graph) -> set[tuple[str, str]]:
    """(modeling module, data_prep module) for each import of modeling/ from data_prep/
    that is not data (`MODELING_DATA`)."""
    wrong = set()
    for module, imported in graph.items():
        if module.split(".")[0] != "modeling":
            continue
        for name in imported:
            base = name.removesuffix(".__init__")
            if base.split(".")[0] != "data_prep":
                continue
            if (
                base in MODELING_DATA
                or base.split(".")[:2] in [p.split(".") for p in MODELING_DATA_PACKAGES]
                or base.endswith(MODELING_DATA_SUFFIXES)
            ):
                continue
            wrong.add((module, name))
    return wrong


def test_modeling_takes_only_data_from_data_prep():
    """Locks, stop signals, resume records and error classes are not data: modeling/
    finds them in common/."""
    graph = _graph()
    assert not _modeling_imports_beyond_data(graph)
    assert "common.run_control" in graph["modeling.distribution"]
    assert "data_prep.text.tokenization" in graph["modeling.model_files"]


def test_the_data_rule_sees_what_it_checks():
    """A modeling module that imports data_prep's process control or damage checks is
    found; features, records and tokenization pass."""
    graph = {
        "modeling.a": {"data_prep.run_control", "data_prep.records", "common.errors"},
        "modeling.b": {"data_prep.damage", "data_prep.squad.squad_features"},
        "modeling.c": {"data_prep.text.__init__", "data_prep.pretraining.pretraining_records"},
        "serving.d": {"data_prep.run_control"},
    }
    assert _modeling_imports_beyond_data(graph) == {
        ("modeling.a", "data_prep.run_control"),
        ("modeling.b", "data_prep.damage"),
    }


def test_the_checker_reads_sub_packages(tmp_path):
    """A module moved into a sub-package is still checked, and an import of a
    sub-package counts as an import of its __init__."""
    package = tmp_path / "data_prep" / "inner"
    package.mkdir(parents=True)
    (tmp_path / "data_prep" / "__init__.py").write_text("")
    (package / "__init__.py").write_text("from modeling import config\n")
    (package / "leaf.py").write_text("from data_prep import inner\nimport serving.exports\n")
    (tmp_path / "modeling").mkdir()
    (tmp_path / "modeling" / "config.py").write_text("")
    (tmp_path / "serving").mkdir()
    (tmp_path / "serving" / "exports.py").write_text("")
    modules = {_module_name(path, tmp_path): path for path in sorted(tmp_path.rglob("*.py"))}
    assert "data_prep.inner.leaf" in modules
    leaf = _imports("data_prep.inner.leaf", package / "leaf.py", modules)
    assert leaf == {"data_prep.inner.__init__", "serving.exports"}
    init = _imports("data_prep.inner.__init__", package / "__init__.py", modules)
    assert init == {"modeling.config"}


def test_the_package_installs_every_top_level_module_and_the_bundled_data():
    """`pip install .` (not only the editable install the suite runs from) holds every
    top-level module the runners import, and the data files read at run time."""
    import tomllib

    settings = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text("utf-8"))["tool"]
    modules = set(settings["setuptools"]["py-modules"])
    assert modules == {path.stem for path in REPO_ROOT.glob("*.py")} - {"setup"}
    data = settings["setuptools"]["package-data"]
    for package, patterns in data.items():
        folder = REPO_ROOT / package.replace(".", "/")
        assert all(list(folder.glob(pattern)) for pattern in patterns), (package, patterns)
    for top in ("common", "modeling", "data_prep", "evaluation", "serving"):
        for path in (REPO_ROOT / top).rglob("*.json"):
            package = ".".join(path.parent.relative_to(REPO_ROOT).parts)
            assert path.name in data.get(package, []), f"{path.name} not in {package}'s data"
