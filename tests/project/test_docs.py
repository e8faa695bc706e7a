"""The documentation against the code: every relative link of README.md, CHANGELOG.md,
ARCHITECTURE.md and docs/*.md resolves (its #anchor too), and every flag that a command
line in their shell code blocks gives to a program of this repository exists on that
program.

The flags of the absl command lines are read from the programs themselves, all in one
subprocess that imports each in turn; those of the benchmark scripts from their
`add_argument("--name"` and `DEFINE_*("name"` lines (and those of the benchmark modules
they import).
"""

import json
import pathlib
import re
import shlex
import subprocess
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parent.parent.parent
PAGES = sorted(
    [REPO / "README.md", REPO / "CHANGELOG.md", REPO / "ARCHITECTURE.md"]
    + list((REPO / "docs").glob("*.md"))
)
# Pages that other work adds to docs/ and that the index already links.
EXPECTED_LATER = {
    "padding.md",
    "robustness.md",
    "paper_experiments.md",
    "own_task.md",
}
# The absl command lines: how they are named in a command line -> their module.
ABSL_PROGRAMS = {
    "run_pretraining.py": "run_pretraining",
    "run_classifier.py": "run_classifier",
    "run_squad.py": "run_squad",
    "run_ner.py": "run_ner",
    "extract_features.py": "extract_features",
    "export_tfhub.py": "export_tfhub",
    "convert_checkpoint.py": "convert_checkpoint",
    "data_prep.create_pretraining_data": "data_prep.create_pretraining_data",
    "data_prep.pretraining_pipeline": "data_prep.pretraining_pipeline",
}
_COLLECT = """
import importlib, json
from absl import app, flags
app.define_help_flags()
FLAGS = flags.FLAGS
base = set(FLAGS)
found = {}
for name in json.loads(%r):
    module = importlib.import_module(name)
    if hasattr(module, "define_flags"):  # The data_prep command lines define them in main.
        module.define_flags()
    names = set(FLAGS)
    if name == "data_prep.pretraining_pipeline":  # The rest goes to Beam's options.
        from apache_beam.options.pipeline_options import PipelineOptions
        names |= set(PipelineOptions([]).get_all_options())
    found[name] = sorted(names)
    for flag in set(FLAGS) - base:
        delattr(FLAGS, flag)
print(json.dumps(found))
"""


def github_anchor(heading: str) -> str:
    """The anchor GitHub gives a Markdown heading."""
    text = re.sub(r"[`*_]", "", heading.strip().lower())
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(page: pathlib.Path) -> set[str]:
    text = re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.S)
    return {github_anchor(m) for m in re.findall(r"^#+ (.+)$", text, re.M)}


def links(page: pathlib.Path) -> list[str]:
    text = re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.S)
    return re.findall(r"\]\(([^)\s]+)\)", text)


def shell_blocks(page: pathlib.Path) -> list[str]:
    text = page.read_text(encoding="utf-8")
    return re.findall(r"^```(?:bash|sh|shell)\n(.*?)^```", text, re.M | re.S)


def without_comments(block: str) -> str:
    """The block without its shell comments (a # after a blank, outside quotes); the
    newlines that end them stay."""
    out, quote, skipping, previous = [], None, False, "\n"
    for char in block:
        if skipping:
            skipping = char != "\n"
        elif quote:
            quote = None if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char == "#" and previous in " \t\n":
            skipping = True
            continue
        if not skipping:
            out.append(char)
        previous = char
    return "".join(out)


def commands(block: str) -> list[list[str]]:
    """The simple commands of a shell block: continuation lines joined, comments,
    quotes and redirections handled by shlex, split at newlines, `&&`, `||`, `;`, `|`."""
    lexer = shlex.shlex(
        without_comments(block).replace("\\\n", " "), posix=True, punctuation_chars=";&|<>\n"
    )
    lexer.whitespace = " \t"
    lexer.commenters = ""  # Gone already; shlex's would take the newline ending them.
    lexer.whitespace_split = True
    result, current = [], []
    for token in lexer:
        if token and set(token) <= set(";&|\n"):
            result, current = result + [current], []
        else:
            current.append(token)
    return [c for c in result + [current] if c]


def program_and_flags(command: list[str]) -> tuple[str, list[str]] | None:
    """(the program as named, the flag names it is given) of a `python ...` command."""
    for index, token in enumerate(command):
        if re.fullmatch(r"(\S*/)?python(3(\.\d+)?)?", token):
            rest = command[index + 1 :]
            break
    else:
        return None
    if not rest or rest[0] == "-":
        return None
    if rest[0] == "-m":
        program, args = rest[1], rest[2:]
    else:
        program, args = rest[0], rest[1:]
    names = [a[2:].split("=", 1)[0] for a in args if a.startswith("--")]
    return program, names


def documented_commands() -> list[tuple[str, str, list[str]]]:
    """(page, program, flag names) of every command line in a shell block."""
    found = []
    for page in PAGES:
        for block in shell_blocks(page):
            for command in commands(block):
                parsed = program_and_flags(command)
                if parsed is not None:
                    found.append((page.relative_to(REPO).as_posix(), *parsed))
    return found


def benchmark_flags(script: pathlib.Path) -> set[str]:
    """The flags a benchmark script defines, and those of the benchmark modules it imports."""
    sources = [script]
    imports = r"^(?:from (benchmarks(?:\.\w+)*) import|import) (\w+)"
    for package, module in re.findall(imports, script.read_text(), re.M):
        # A sibling imported by name (the script's folder is on sys.path), or a module
        # of a benchmarks package.
        folder = REPO.joinpath(*package.split(".")) if package else script.parent
        if (folder / f"{module}.py").exists():
            sources.append(folder / f"{module}.py")
    names = set()
    for source in sources:
        text = source.read_text()
        names |= set(re.findall(r"add_argument\(\s*\"--([\w-]+)\"", text))
        names |= set(re.findall(r"DEFINE_\w+\(\s*\"(\w+)\"", text))
    return {name.replace("-", "_") for name in names} | {"help"}


def test_the_pages_have_shell_commands_to_check():
    programs = {program for _, program, _ in documented_commands()}
    assert set(ABSL_PROGRAMS) <= programs, set(ABSL_PROGRAMS) - programs


def test_every_relative_link_resolves():
    broken = []
    for page in PAGES:
        for link in links(page):
            if re.match(r"[a-z]+:", link):
                continue  # https:, mailto:
            path, _, anchor = link.partition("#")
            target = (page.parent / path).resolve() if path else page
            if not target.exists():
                if target.name in EXPECTED_LATER and target.parent == REPO / "docs":
                    continue
                broken.append(f"{page.name}: {link}")
            elif anchor and target.suffix == ".md" and anchor not in anchors(target):
                broken.append(f"{page.name}: {link} (no such heading)")
    assert not broken, broken


def test_pages_expected_later_are_linked_from_the_index():
    """EXPECTED_LATER may only excuse pages that the index links."""
    index = (REPO / "docs" / "index.md").read_text()
    for name in EXPECTED_LATER:
        assert f"]({name})" in index


@pytest.mark.slow
def test_every_documented_flag_exists():
    names = sorted(set(ABSL_PROGRAMS.values()))
    process = subprocess.run(
        [sys.executable, "-c", _COLLECT % json.dumps(names)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert process.returncode == 0, process.stderr[-3000:]
    absl_flags = json.loads(process.stdout.strip().splitlines()[-1])
    unknown = []
    for page, program, flag_names in documented_commands():
        if program in ABSL_PROGRAMS:
            known = set(absl_flags[ABSL_PROGRAMS[program]])
        elif program.startswith("benchmarks/") and program.endswith(".py"):
            script = REPO / program
            assert script.exists(), f"{page}: {program} does not exist"
            known = benchmark_flags(script)
        else:
            assert not (REPO / program).exists() or program.startswith("-"), (page, program)
            continue
        for name in flag_names:
            bool_name = name[2:] if name.startswith("no") else None
            if name not in known and bool_name not in known:
                unknown.append(f"{page}: {program} --{name}")
    assert not unknown, unknown
