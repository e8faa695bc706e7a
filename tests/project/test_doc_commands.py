"""Every command of the documentation runs as copied.

Each ```bash block of README.md, ARCHITECTURE.md, CHANGELOG.md and docs/*.md is read as
bash reads it: backslash continuations, quotes, comments (a `#` starting a word runs to
the end of its line, and the newline after it ends the command unless a backslash
continues it), `;`, `&&`, `||`, `|`, redirections, and the variables the block assigns.
For every simple command:

- its program exists: a script of this repository (`python run_squad.py`,
  `bash run_demo.sh`), a module of it or an installed one (`python -m
  data_prep.create_pretraining_data`), an interpreter made by one of the set-up scripts
  (`.venv-bench/bin/python`), or a known tool (pip, git, docker...). A benchmark runs as
  a module (`python -m benchmarks.speed.bench_serving`), never as a script: its imports
  are absolute, from the repository's root. A "command" that starts with a flag is a
  continuation line whose previous line lost its backslash;
- the paths it reads exist in a fresh clone after `bash run_demo.sh`. The rule: a path
  whose first part is a file or folder of the repository (`sample_data/...`,
  `benchmarks/...`) must exist (a glob must match); one under `output/` must be made by
  run_demo.sh (its `$OUT/...`); `.venv/` and `.venv-bench/` are made by the set-up
  scripts; a path that a command of the same page writes (an `--output_*` or
  `--export_*` flag, `--work_dir`, a `>` redirection) counts as made. Everything else
  (`path/to/model`, `out/...`, `$CKPT`, absolute paths) is a placeholder of the user's;
- (slow) its flags are flags that program defines and their values parse: the absl
  command lines parse each documented command line with their own flag definitions
  (required flags, enums, numbers, booleans and their `--no` forms, positional
  arguments refused) in one subprocess that imports each program in turn; the
  benchmark scripts' flags are read from their `add_argument("--name"` and
  `DEFINE_*("name"` lines.
"""

from __future__ import annotations

import dataclasses
import glob
import json
import pathlib
import re
import subprocess
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parent.parent.parent
PAGES = sorted(
    [REPO / "README.md", REPO / "CHANGELOG.md", REPO / "ARCHITECTURE.md"]
    + list((REPO / "docs").glob("*.md"))
)
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
# Folders that a set-up script of the repository makes -> that script.
MADE_BY_SETUP = {".venv": "run_demo.sh", ".venv-bench": "benchmarks/setup_bench_env.sh"}
KNOWN_TOOLS = set(
    """pip pip3 git bash sh curl wget docker echo printf cat ls cd mkdir rm cp mv export set
    unset source . tensorboard saved_model_cli ruff pytest kill sleep wait wc head tail grep
    sed awk cut sort uniq diff cmp sha256sum du df find xargs tee gzip zstd bzip2 xz tar
    unzip gsutil nproc env time timeout true false test [ nvidia-smi seq""".split()
)
SHELL_KEYWORDS = {"for", "while", "until", "if", "elif", "case", "esac", "done", "fi"}
LEADING_KEYWORDS = {"do", "then", "else", "!", "time"}
PYTHON = re.compile(r"(\S*/)?python(3(\.\d+)?)?")
OUTPUT_FLAG = re.compile(r"(output|export|work_dir)")
HELP_FLAGS = {"help", "helpfull", "helpshort", "helpxml"}


@dataclasses.dataclass
class Command:
    page: str
    line: int  # Of the page, where the command starts.
    words: list[str]
    writes: list[str]  # Redirection targets.

    def where(self) -> str:
        return f"{self.page}:{self.line}: {' '.join(self.words)[:120]}"


def shell_blocks(page: pathlib.Path) -> list[tuple[int, str]]:
    """(line of the page where the block's text starts, text) of each bash block."""
    lines = page.read_text(encoding="utf-8").splitlines(keepends=True)
    blocks, start, fence = [], None, None
    for number, line in enumerate(lines, 1):
        stripped = line.strip()
        if start is None and re.fullmatch(r"```+\s*(bash|sh|shell)", stripped):
            start, fence = number + 1, re.match("`+", stripped).group()
        elif start is not None and stripped == fence:
            blocks.append((start, "".join(lines[start - 1 : number - 1])))
            start = None
    return blocks


def parse_block(text: str, page: str = "<block>", first_line: int = 1):
    """The simple commands of a bash block and the errors met reading it (an unclosed
    quote, a backslash followed by spaces at a line's end)."""
    commands, errors, variables = [], [], {}
    words, writes, word, line = [], [], None, first_line
    start_line, redirect = first_line, None
    i = 0

    def end_word():
        nonlocal word, redirect
        if word is not None:
            if redirect:
                writes.append(word) if redirect == ">" else None
                redirect = None
            else:
                words.append(word)
        word = None

    def end_command():
        nonlocal words, writes, start_line
        end_word()
        if words:
            body = list(words)
            while body and body[0] in LEADING_KEYWORDS:
                body.pop(0)
            assignments = 0
            while assignments < len(body) and re.match(r"[A-Za-z_]\w*=", body[assignments]):
                assignments += 1
            if assignments == len(body) or (body and body[0] == "export"):
                for item in body[1 if body and body[0] == "export" else 0 :]:
                    name, _, value = item.partition("=")
                    variables[name] = value
            if body:
                commands.append(Command(page, start_line, body, list(writes)))
        words, writes, start_line = [], [], line

    def expand(name: str, quoted: bool):
        """A variable the block assigned; unquoted, its value is split into words (a
        command substitution's output is not known here: one word, as a path is)."""
        nonlocal word
        if name not in variables:
            word = (word or "") + "$" + name
        elif quoted or variables[name].startswith("$("):
            word = (word or "") + variables[name]
        else:
            for index, part in enumerate(variables[name].split()):
                if index:
                    end_word()
                word = (word or "") + part

    for number, text_line in enumerate(text.split("\n"), first_line):
        if re.search(r"\\[ \t]+$", text_line):
            errors.append(
                f"{page}:{number}: a backslash followed by spaces ends this line: bash "
                "reads an escaped space, and the newline then ends the command"
            )
    variable = re.compile(r"\$(?:\{(\w+)\}|([A-Za-z_]\w*))")
    while i < len(text):
        char = text[i]
        if char == "\\" and i + 1 < len(text):
            if text[i + 1] == "\n":
                line += 1
            else:
                word = (word or "") + text[i + 1]
            i += 2
            continue
        if char == "'":
            close = text.find("'", i + 1)
            if close < 0:
                errors.append(f"{page}:{line}: a ' that is never closed")
                break
            word = (word or "") + text[i + 1 : close]
            line += text.count("\n", i, close)
            i = close + 1
            continue
        if char == '"':
            i += 1
            word = word or ""
            while i < len(text) and text[i] != '"':
                if text[i] == "\\" and i + 1 < len(text) and text[i + 1] in '"\\$`\n':
                    word += "" if text[i + 1] == "\n" else text[i + 1]
                    line += text[i + 1] == "\n"
                    i += 2
                    continue
                match = variable.match(text, i)
                if match:
                    expand(match.group(1) or match.group(2), quoted=True)
                    i = match.end()
                    continue
                line += text[i] == "\n"
                word += text[i]
                i += 1
            if i >= len(text):
                errors.append(f'{page}:{line}: a " that is never closed')
                break
            i += 1
            continue
        if char == "$" and text.startswith("$(", i):  # A command substitution: kept whole.
            depth, end = 0, i + 1
            while end < len(text):
                depth += {"(": 1, ")": -1}.get(text[end], 0)
                if depth == 0:
                    break
                end += 1
            word = (word or "") + text[i : end + 1]
            line += text.count("\n", i, end)
            i = end + 1
            continue
        if char == "$":
            match = variable.match(text, i)
            if match:
                expand(match.group(1) or match.group(2), quoted=False)
                i = match.end()
                continue
        if char == "#" and word is None:
            while i < len(text) and text[i] != "\n":
                i += 1
            continue
        if char in " \t":
            end_word()
        elif char == "\n":
            line += 1
            end_command()
        elif char in ";&|()":
            if char == "&" and i + 1 < len(text) and text[i + 1] == ">":
                end_word()
                redirect = ">"
                i += 2 + (i + 2 < len(text) and text[i + 2] == ">")
                continue
            end_command()
        elif char in "<>":
            if word is not None and word.isdigit():
                word = None  # A file descriptor: 2>...
            end_word()
            redirect = char
            i += 1
            while i < len(text) and text[i] == ">":
                i += 1
            if i < len(text) and text[i] == "&":  # 2>&1: the target is a descriptor.
                i += 1
                while i < len(text) and text[i].isdigit():
                    i += 1
                redirect = None
            continue
        else:
            word = (word or "") + char
        i += 1
    end_command()
    return commands, errors


def documented_commands() -> tuple[list[Command], list[str]]:
    commands, errors = [], []
    for page in PAGES:
        name = page.relative_to(REPO).as_posix()
        for first_line, text in shell_blocks(page):
            found, problems = parse_block(text, name, first_line)
            commands += found
            errors += problems
    return commands, errors


def split_python(words: list[str]) -> tuple[str, str, list[str]] | None:
    """(kind: "module", "script" or "other", what, its arguments) of a python command."""
    index = 1
    while index < len(words) and words[index] in {"-u", "-O", "-B", "-E", "-s", "-I"}:
        index += 1
    if index >= len(words) or words[index] in {"-", "-c", "-V", "--version"}:
        return "other", "", []
    if words[index] == "-m" and index + 1 < len(words):
        return "module", words[index + 1], words[index + 2 :]
    return "script", words[index], words[index + 1 :]


def module_exists(name: str) -> bool:
    parts = name.split(".")
    if (REPO.joinpath(*parts).with_suffix(".py")).exists():
        return True
    if (REPO.joinpath(*parts) / "__main__.py").exists():
        return True
    if (REPO / parts[0]).exists():
        return False  # A module of ours that is not there.
    import importlib.util

    return importlib.util.find_spec(parts[0]) is not None


def repository_roots() -> set[str]:
    """The top-level files and folders of a fresh clone."""
    try:
        listed = subprocess.run(
            ["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True
        ).stdout.split()
        if listed:
            return {path.split("/")[0] for path in listed}
    except (OSError, subprocess.CalledProcessError):
        pass
    ignored = {
        line.strip().strip("/")
        for line in (REPO / ".gitignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    }
    return {p.name for p in REPO.iterdir() if not p.name.startswith(".")} - ignored


def demo_outputs() -> set[str]:
    """What run_demo.sh makes under output/ (its `$OUT/...` paths)."""
    text = (REPO / "run_demo.sh").read_text()
    assert re.search(r"^OUT=output$", text, re.M), "run_demo.sh no longer writes to output/"
    return {"output/" + path.strip("/") for path in re.findall(r"\$OUT/([\w./-]*)", text)}


def relative(path: str) -> str:
    return path[2:] if path.startswith("./") else path


def under(path: str, folders: set[str]) -> bool:
    path = path.rstrip("/")
    return any(path == f or path.startswith(f + "/") or f.startswith(path + "/") for f in folders)


def path_candidates(arguments: list[str]) -> list[tuple[str, str]]:
    """(flag or "", path) of each argument that may name a file."""
    found = []
    for argument in arguments:
        flag, value = "", argument
        if argument.startswith("-"):
            if "=" not in argument:
                continue
            flag, value = argument.lstrip("-").split("=", 1)
        for part in value.split(","):
            if part and not part.startswith("-"):
                found.append((flag, part))
    return found


def arguments_of(command: Command) -> list[str]:
    words = command.words
    index = 0
    while index < len(words) and re.match(r"[A-Za-z_]\w*=", words[index]):
        index += 1
    return words[index:]


def check_command(command: Command, roots: set[str], made: set[str]) -> list[str]:
    """What is wrong with one command (program and the paths it reads)."""
    words = arguments_of(command)
    if not words:
        return []
    program, problems = words[0], []
    if program.startswith("-"):
        return [
            f"{command.where()}: starts with a flag, so bash runs it as a program of its "
            "own: the line before it does not end in a backslash (a comment there ends "
            "the command)"
        ]
    if program in SHELL_KEYWORDS or program.startswith("$"):
        return []
    reads = []
    if PYTHON.fullmatch(program):
        if "/" in program and not under(program, made):
            problems.append(f"{command.where()}: {program} does not exist")
        kind, what, arguments = split_python(words)
        if kind == "module" and not module_exists(what):
            problems.append(f"{command.where()}: no module {what} in the repository")
        elif kind == "script" and what.startswith("benchmarks/"):
            module = what.removesuffix(".py").replace("/", ".")
            problems.append(f"{command.where()}: run it as a module: python -m {module}")
        elif kind == "script" and not (REPO / what).is_file():
            problems.append(f"{command.where()}: {what} is not a script of the repository")
        reads = arguments
    elif program in {"bash", "sh"}:
        scripts = [w for w in words[1:] if not w.startswith("-")]
        if scripts and not (REPO / scripts[0]).is_file():
            problems.append(f"{command.where()}: {scripts[0]} is not a script of the repository")
        reads = words[2:]
    elif program in {".", "source"}:
        reads = words[1:2]
    elif "/" in program:
        if not ((REPO / program).is_file() or under(program, made)):
            problems.append(f"{command.where()}: {program} does not exist")
        reads = words[1:]
    elif program in KNOWN_TOOLS:
        reads = words[1:] if program in {"cat", "head", "tail", "wc"} else []
    else:
        problems.append(
            f"{command.where()}: {program} is neither a program of the repository nor a "
            "known tool (add it to KNOWN_TOOLS if it is one)"
        )
    for flag, path in path_candidates(reads):
        if OUTPUT_FLAG.search(flag) or "$" in path or "://" in path or path.startswith("/"):
            continue
        path = relative(path)
        first = path.split("/")[0]
        if first not in roots | {"output"} | set(MADE_BY_SETUP):
            continue  # A placeholder: path/to/model, out/..., the user's own files.
        if under(path, made):
            continue
        if glob.glob(str(REPO / path)) or glob.glob(str(REPO / path.split(":")[0])):
            continue
        what = f"--{flag}={path}" if flag else path
        problems.append(
            f"{command.where()}: {what} is neither in the repository nor made by "
            "run_demo.sh or by a command of the page"
        )
    return problems


def page_outputs(commands: list[Command]) -> dict[str, set[str]]:
    """Per page: the paths its commands write."""
    made: dict[str, set[str]] = {}
    for command in commands:
        paths = made.setdefault(command.page, set())
        paths.update(relative(w) for w in command.writes)
        for flag, path in path_candidates(arguments_of(command)[1:]):
            if OUTPUT_FLAG.search(flag):
                paths.add(relative(path))
    return made


def problems_of(commands: list[Command]) -> list[str]:
    roots = repository_roots()
    made = demo_outputs() | set(MADE_BY_SETUP)
    outputs = page_outputs(commands)
    problems = []
    for command in commands:
        problems += check_command(command, roots, made | outputs.get(command.page, set()))
    return problems


def test_the_pages_have_commands_to_check():
    commands, _ = documented_commands()
    programs = set()
    for command in commands:
        words = arguments_of(command)
        if words and PYTHON.fullmatch(words[0]):
            programs.add(split_python(words)[1])
    assert set(ABSL_PROGRAMS) <= programs, set(ABSL_PROGRAMS) - programs
    assert len(commands) > 50


def test_the_set_up_scripts_make_their_folders():
    for folder, script in MADE_BY_SETUP.items():
        assert f"-m venv {folder}" in (REPO / script).read_text(), (folder, script)


def test_every_documented_command_runs_as_copied():
    commands, errors = documented_commands()
    problems = errors + problems_of(commands)
    assert not problems, "\n".join(problems)


def test_every_command_is_in_a_bash_block():
    """A command line in an untagged or indented code block would escape the checks."""
    command = re.compile(r"\s*(\S*/)?python[\d.]* +(-m +\w|\S+\.py)|\s*(bash|sh) +\S+\.sh")
    outside = []
    for page in PAGES:
        fence = None
        for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
            if line.lstrip().startswith("```"):
                fence = None if fence is not None else line.strip()[3:]
            elif fence not in {"bash", "sh", "shell", "python"} and command.match(line):
                outside.append(f"{page.relative_to(REPO)}:{number}: {line.strip()}")
    assert not outside, "put these in ```bash blocks:\n" + "\n".join(outside)


def test_a_lost_backslash_is_caught():
    """The mistakes this test exists for, on blocks written to show them."""
    lost = (
        "python run_classifier.py --task_name=generic --data_dir=my_data \\\n"
        "  --label_column=sentiment   # --text_b_column=... for pairs\n"
        "  --init_checkpoint=path/to/model --output_dir=out/my_task\n"
    )
    commands, errors = parse_block(lost)
    assert not errors and len(commands) == 2
    assert commands[0].words[-1] == "--label_column=sentiment"
    (problem,) = problems_of(commands)
    assert "starts with a flag" in problem and "<block>:3" in problem
    spaced = "python run_squad.py --output_dir=out \\ \n  --do_train\n"
    commands, errors = parse_block(spaced)
    assert len(errors) == 1 and "backslash followed by spaces" in errors[0]
    assert any("starts with a flag" in p for p in problems_of(commands))
    # What stays one command: continuations, comments on their own lines, quotes.
    fine = (
        'CKPT=$(python -c "print(1)")\n'
        "X='--do_train --do_eval'   # flags\n"
        "python run_ner.py $X --data_dir=sample_data/sciner \\\n"
        '  --init_checkpoint="$CKPT" \\\n'
        "  --output_dir=out/ner && echo 'a # b\n"
        "c' > out/x.txt\n"
        "  # a comment line\n"
    )
    commands, errors = parse_block(fine)
    assert not errors
    assert commands.pop(0).words == ['CKPT=$(python -c "print(1)")']
    assert [c.words[0] for c in commands] == ["X=--do_train --do_eval", "python", "echo"]
    assert commands[1].words[2:5] == ["--do_train", "--do_eval", "--data_dir=sample_data/sciner"]
    assert commands[1].words[5] == '--init_checkpoint=$(python -c "print(1)")'
    assert commands[2].words == ["echo", "a # b\nc"] and commands[2].writes == ["out/x.txt"]
    assert not problems_of(commands)


def test_missing_programs_and_paths_are_caught():
    block = (
        "python run_clasifier.py --data_dir=sample_data/glue/MRPC\n"
        "python -m data_prep.no_such_module\n"
        "python run_ner.py --data_dir=sample_data/no_such_folder --output_dir=out/ner\n"
        "python run_ner.py --init_checkpoint=output/no_such_run --output_dir=out/ner\n"
        "python run_ner.py --data_dir=sample_data/sciner --init_checkpoint=output/ner\n"
        "bertify --do_train\n"
        "python benchmarks/speed/bench_serving.py --queries=3\n"
        "python -m benchmarks.speed.bench_servin --queries=3\n"
        "python -m benchmarks.speed.bench_serving --queries=3\n"
    )
    commands, _ = parse_block(block)
    problems = problems_of(commands)
    assert len(problems) == 7, problems
    for expected, problem in zip(
        [
            "run_clasifier.py",
            "no_such_module",
            "no_such_folder",
            "no_such_run",
            "bertify",
            "run it as a module: python -m benchmarks.speed.bench_serving",
            "no module benchmarks.speed.bench_servin",
        ],
        problems,
    ):
        assert expected in problem


def test_a_benchmark_has_the_flags_of_the_benchmark_modules_it_imports():
    compare_ner = REPO / "benchmarks" / "compare" / "compare_ner_hf.py"
    assert {"output_dir", "seeds", "batch_size"} <= benchmark_flags(compare_ner)
    assert "output_dir" not in benchmark_flags(REPO / "benchmarks" / "speed" / "bench_kernels.py")


# The absl programs parse the documented command lines with their own flags. A value
# holding a shell variable ($CKPT, $1) stands for any value: a flag that is not a
# string is given a value of its kind there.
_PARSE = """
import importlib, json, sys
from absl import app, flags
import common.cli
common.cli.run = lambda *args, **kwargs: None  # cli() marks the required flags, then runs.
app.define_help_flags()
FLAGS = flags.FLAGS
base = set(FLAGS)
HELP = {"help", "helpfull", "helpshort", "helpxml"}
jobs = json.loads(sys.stdin.read())
problems = []
for name, lines in jobs.items():
    module = importlib.import_module(name)
    if callable(getattr(module, "define_flags", None)):
        module.define_flags()  # The data_prep command lines define them in main.
    if callable(getattr(module, "cli", None)):
        module.cli()
    beam = set()
    if name == "data_prep.pretraining_pipeline":  # The rest goes to Beam's options.
        from apache_beam.options.pipeline_options import PipelineOptions
        beam = set(PipelineOptions([]).get_all_options())
    for where, arguments in lines:
        argv = [name]
        for argument in arguments:
            flag, _, value = argument.lstrip("-").partition("=")
            if argument.startswith("--") and "$" in value and flag in FLAGS:
                known = FLAGS[flag]
                if known.boolean:
                    argument = "--" + flag
                elif known.flag_type() not in ("string", "list", "multi_string"):
                    stand_in = getattr(known.parser, "enum_values", None) or ["1"]
                    argument = "--%s=%s" % (flag, stand_in[0])
            argv.append(argument)
        names = [a[2:].split("=", 1)[0] for a in argv[1:] if a.startswith("--")]
        try:
            if HELP & set(names):
                unknown = [n for n in names if n not in FLAGS and n[2:] not in FLAGS]
                if unknown:
                    raise flags.UnrecognizedFlagError(unknown[0])
                continue
            FLAGS.unparse_flags()
            rest = FLAGS(argv, known_only=bool(beam))[1:]
            for extra in rest:
                if extra.startswith("--") and extra[2:].split("=")[0] in beam:
                    continue
                problems.append("%s: %r is not a flag of %s" % (where, extra, name))
        except flags.Error as error:
            problems.append("%s: %s" % (where, str(error).replace(chr(10), " ")))
    for flag in set(FLAGS) - base:
        delattr(FLAGS, flag)
print(json.dumps(problems))
"""


def benchmark_flags(script: pathlib.Path) -> set[str]:
    """The flags a benchmark script defines, and those of the benchmark modules it imports
    at its top (`from benchmarks.compare import finetune_compare`)."""
    sources = [script]
    imports = r"^from (benchmarks(?:\.\w+)*) import (\w+)"
    for package, module in re.findall(imports, script.read_text(), re.M):
        folder = REPO.joinpath(*package.split("."))
        if (folder / f"{module}.py").exists():
            sources.append(folder / f"{module}.py")
    names = set()
    for source in sources:
        text = source.read_text()
        names |= set(re.findall(r"add_argument\(\s*\"--([\w-]+)\"", text))
        names |= set(re.findall(r"DEFINE_\w+\(\s*\"(\w+)\"", text))
    return {name.replace("-", "_") for name in names} | HELP_FLAGS


@pytest.mark.slow
def test_every_documented_flag_exists_and_parses():
    commands, _ = documented_commands()
    jobs, problems = {}, []
    for command in commands:
        words = arguments_of(command)
        if not words or not PYTHON.fullmatch(words[0]):
            continue
        kind, program, arguments = split_python(words)
        if program in ABSL_PROGRAMS:
            jobs.setdefault(ABSL_PROGRAMS[program], []).append([command.where(), arguments])
        elif kind == "module" and program.startswith("benchmarks."):
            script = REPO.joinpath(*program.split(".")).with_suffix(".py")
            if not script.is_file():
                continue  # The program check reports it.
            known = benchmark_flags(script)
            for argument in arguments:
                name = argument[2:].split("=", 1)[0]
                if argument.startswith("--") and name not in known and name[2:] not in known:
                    problems.append(f"{command.where()}: {program} has no flag --{name}")
    process = subprocess.run(
        [sys.executable, "-c", _PARSE],
        input=json.dumps(jobs),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert process.returncode == 0, process.stderr[-3000:]
    problems += json.loads(process.stdout.strip().splitlines()[-1])
    assert not problems, "\n".join(problems)
