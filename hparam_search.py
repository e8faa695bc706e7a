"""The paper's fine-tuning procedure: a grid of hyperparameters, random restarts, the
best on dev, mean and standard deviation (BERT paper, Section 4.1 and Appendix A.3).

Every fine-tuning runner hands its run here (`run`). With one value of
--learning_rate, --train_batch_size and --num_train_epochs and --restarts=1 that is
the runner's single run, unchanged. Otherwise it is a search: every configuration of
the grid times every restart is a trial, a normal fine-tuning run of its own in
`output_dir/trials/<name>/` (the runner's single-run path with those settings
replaced); restart k draws its data order, head initialisation and dropout from
--seed + k - 1, so restart 1 of every configuration sees the same draws. The trial
with the best dev score (the task's score, which also picks the best epoch) becomes
output_dir's model: its best/ checkpoint and its files but the training checkpoints
(model files, eval_results.txt, eval_history.json, run_config.json, a task's
evaluation files) are copied there, and --do_predict and --export_dir use it, so
output_dir works as any fine-tuned output_dir (--init_checkpoint, predicting later).
--select=best_mean takes the configuration with the best mean over its restarts, then
its best trial.

A search writes `search.json` (its grid) first, `search_trial.json` into each
finished trial and `search_results.json` / `search_results.md` (every trial, each
configuration's mean, std, min and max, the chosen trial) at the end. The same
command after a kill keeps the finished trials, resumes the interrupted one from its
checkpoint and runs the rest; another grid in the same output_dir is a usage error.
Trials run one after another.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import gc
import itertools
import os
import statistics
import time

import keras
import tensorflow as tf
from absl import app

from common import file_io
import model_flags
import runner_settings
from data_prep import input_pipeline
from modeling import finetuning

TRIALS_DIR = "trials"
SEARCH_FILE = "search.json"  # The grid of the search in output_dir.
TRIAL_FILE = "search_trial.json"  # In a finished trial's folder: its score and time.
RESULTS_JSON = "search_results.json"
RESULTS_MD = "search_results.md"
GRID_FLAGS = ("learning_rate", "train_batch_size", "num_train_epochs")
# What output_dir does not take of the chosen trial: its training checkpoints (the
# best model's best/ folder is taken) and its record of the search.
NOT_COPIED = ("checkpoint", "ckpt-*", TRIAL_FILE)


def EXPORT(*args, **kwargs):
    """What writes a fine-tuning run's export (the fine-tuning core, a floor below
    serving, takes it as an argument). serving is imported by the runs that export only:
    it loads tensorflow_text, about 0.4 s of every runner's start-up."""
    from serving import exports

    return exports.export_fine_tuned(*args, **kwargs)


def _values(value) -> tuple:
    return value if isinstance(value, tuple) else (value,)


@dataclasses.dataclass(frozen=True)
class Trial:
    """One fine-tuning run of a search: a configuration and a restart."""

    learning_rate: float
    train_batch_size: int
    num_train_epochs: float
    restart: int
    seed: int

    @property
    def configuration(self) -> tuple:
        return (self.learning_rate, self.train_batch_size, self.num_train_epochs)

    @property
    def name(self) -> str:
        return (
            f"lr{self.learning_rate:g}_bs{self.train_batch_size}_"
            f"ep{self.num_train_epochs:g}_r{self.restart}"
        )

    def describe(self) -> str:
        return (
            f"learning_rate={self.learning_rate:g} train_batch_size={self.train_batch_size} "
            f"num_train_epochs={self.num_train_epochs:g} restart={self.restart} "
            f"(seed {self.seed})"
        )


@dataclasses.dataclass(frozen=True)
class Grid:
    """The values of the grid flags, the restarts, the seed and the selection rule."""

    learning_rates: tuple
    train_batch_sizes: tuple
    num_train_epochs: tuple
    restarts: int = 1
    seed: int = input_pipeline.DEFAULT_SEED
    select: str = "best_trial"

    @classmethod
    def from_flags(cls, FLAGS) -> Grid:
        return cls(
            _values(FLAGS.learning_rate),
            _values(FLAGS.train_batch_size),
            _values(FLAGS.num_train_epochs),
            FLAGS.restarts,
            FLAGS.seed,
            FLAGS.select,
        )

    @property
    def is_search(self) -> bool:
        return len(self.trials()) > 1

    def trials(self) -> list[Trial]:
        """Configuration by configuration (in the flags' order), restart by restart."""
        return [
            Trial(lr, batch, epochs, restart, self.seed + restart - 1)
            for lr, batch, epochs in itertools.product(
                self.learning_rates, self.train_batch_sizes, self.num_train_epochs
            )
            for restart in range(1, self.restarts + 1)
        ]

    def record(self) -> dict:
        """What search.json keeps: what makes the trials (not --select)."""
        return {
            "learning_rate": list(self.learning_rates),
            "train_batch_size": list(self.train_batch_sizes),
            "num_train_epochs": list(self.num_train_epochs),
            "restarts": self.restarts,
            "seed": self.seed,
        }


def _search_flag(FLAGS) -> str:
    """The flag that makes this command a search, as given."""
    for name in GRID_FLAGS:
        if isinstance(FLAGS[name].value, tuple):
            return f"--{name}={FLAGS[name].serialize().split('=', 1)[1]}"
    return f"--restarts={FLAGS.restarts}"


def check(FLAGS) -> Grid:
    """The grid of the command line, checked before anything runs: a search trains
    (--do_train), picks by the dev score (--do_eval, --evaluate_every_epoch), runs on
    this machine, and its output_dir holds no other grid's run."""
    grid = Grid.from_flags(FLAGS)
    output_dir = FLAGS.output_dir
    recorded = _read_record(output_dir)
    if not grid.is_search:
        if FLAGS.do_train and recorded is not None:
            raise app.UsageError(
                f"--output_dir={output_dir} holds a search ({SEARCH_FILE}: {recorded}); "
                f"this command trains one model: give it another --output_dir"
            )
        return grid
    flag = _search_flag(FLAGS)
    for needed, why in (
        ("do_train", "it trains a model per trial"),
        ("do_eval", "it chooses the trial by its dev score"),
        ("evaluate_every_epoch", "each trial keeps its best epoch by the dev score"),
    ):
        if not FLAGS[needed].value:
            raise app.UsageError(f"{flag} is a search: it needs --{needed} ({why})")
    if FLAGS.distribution_strategy == "multi_worker_mirrored":
        raise app.UsageError(
            f"{flag} is a search, which runs its trials one after another on this "
            f"machine: --distribution_strategy=multi_worker_mirrored is not supported"
        )
    if recorded is not None and recorded != grid.record():
        raise app.UsageError(
            f"--output_dir={output_dir} holds a search of another grid ({SEARCH_FILE}: "
            f"{recorded}): run the same command to resume it, or this grid in another "
            f"--output_dir"
        )
    if recorded is None and tf.io.gfile.exists(os.path.join(output_dir, "checkpoint")):
        raise app.UsageError(
            f"--output_dir={output_dir} holds a single run's training; a search "
            f"({flag}) needs an --output_dir of its own"
        )
    return grid


def _read_record(output_dir: str | None) -> dict | None:
    path = os.path.join(output_dir or "", SEARCH_FILE)
    return file_io.read_json_object(path) if output_dir and tf.io.gfile.exists(path) else None


# ---------------------------------------------------------------------------------
# The run.


def run(FLAGS, grid: Grid, task, settings, strategy, encoder, files) -> None:
    """The runner's fine-tuning run: one (`finetuning.run`, as always), or the search
    of `grid`. A run stopped by SIGTERM ends the program (runner_settings.run_training)."""
    if not grid.is_search:
        runner_settings.run_training(
            lambda: finetuning.run(task, settings, strategy, encoder, files, EXPORT),
            settings.output_dir,
        )
        return
    Search(FLAGS, grid, task, settings, strategy, files).run()


def trial_score(trial_dir: str) -> tuple[float, int]:
    """(score, step) of a finished trial's best model: its best evaluation (the first
    of equal ones, as `finetuning.BestCheckpoint` keeps it)."""
    history = file_io.read_json(os.path.join(trial_dir, finetuning.EVAL_HISTORY))
    best = max(history, key=lambda entry: entry["score"])
    return float(best["score"]), int(best["global_step"])


def summarize(scores: list[float]) -> dict:
    """mean, std (sample standard deviation; None for one value), min, max, n."""
    return {
        "mean": statistics.fmean(scores),
        "std": statistics.stdev(scores) if len(scores) > 1 else None,
        "min": min(scores),
        "max": max(scores),
        "n": len(scores),
    }


def select(trials: list[dict], rule: str) -> dict:
    """The chosen trial: the best score (`best_trial`), or the best of the
    configuration with the best mean (`best_mean`); the first of equals."""
    if rule == "best_mean":
        configurations = {}
        for trial in trials:
            configurations.setdefault(_configuration(trial), []).append(trial)
        best_config = max(
            configurations.values(), key=lambda group: statistics.fmean(t["score"] for t in group)
        )
        trials = best_config
    return max(trials, key=lambda trial: trial["score"])


def _configuration(trial: dict) -> tuple:
    return tuple(trial[name] for name in GRID_FLAGS)


def report(metric: str, rule: str, trials: list[dict], chosen: dict) -> dict:
    """search_results.json: the metric, the rule, every trial, every configuration's
    statistics and the chosen trial."""
    configurations = {}
    for trial in trials:
        configurations.setdefault(_configuration(trial), []).append(trial["score"])
    return {
        "metric": metric,
        "select": rule,
        "trials": trials,
        "configurations": [
            dict(zip(GRID_FLAGS, key), **summarize(scores))
            for key, scores in configurations.items()
        ],
        "best": {
            "output_dir": chosen["output_dir"],
            "score": chosen["score"],
            "trial": chosen["trial"],
        },
    }


def _number(value, digits: int = 4) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def report_markdown(results: dict) -> str:
    """search_results.md: the configurations and the trials as tables."""
    lines = [
        f"# Search: {len(results['trials'])} trials, chosen by {results['metric']} "
        f"({results['select']})",
        "",
        f"Chosen: `{results['best']['output_dir']}`, score {_number(results['best']['score'])}.",
        "",
        "| learning_rate | train_batch_size | num_train_epochs | mean | std | min | max | n |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for c in results["configurations"]:
        lines.append(
            f"| {c['learning_rate']:g} | {c['train_batch_size']} | {c['num_train_epochs']:g} "
            f"| {_number(c['mean'])} | {_number(c['std'])} | {_number(c['min'])} "
            f"| {_number(c['max'])} | {c['n']} |"
        )
    lines += [
        "",
        "| trial | learning_rate | train_batch_size | num_train_epochs | restart | seed "
        "| score | wall_s | output_dir |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for t in results["trials"]:
        chosen = " (chosen)" if t["output_dir"] == results["best"]["output_dir"] else ""
        lines.append(
            f"| {t['trial']}{chosen} | {t['learning_rate']:g} | {t['train_batch_size']} "
            f"| {t['num_train_epochs']:g} | {t['restart']} | {t['seed']} "
            f"| {_number(t['score'])} | {t['wall_s']:.0f} | `{t['output_dir']}` |"
        )
    return "\n".join(lines) + "\n"


class Search:
    """The trials of a grid one after another, the choice, output_dir's model and the
    report."""

    def __init__(self, FLAGS, grid: Grid, task, settings, strategy, files):
        self.FLAGS, self.grid, self.task = FLAGS, grid, task
        self.settings, self.strategy, self.files = settings, strategy, files
        self.output_dir = settings.output_dir
        self.progress = runner_settings.terminal()

    def run(self) -> None:
        file_io.write_json(os.path.join(self.output_dir, SEARCH_FILE), self.grid.record())
        trials = self.grid.trials()
        results, best = [], None
        for number, trial in enumerate(trials, 1):
            result = self.run_trial(trial, number, len(trials))
            results.append(result)
            if best is None or result["score"] > best["score"]:
                best = result
            self.progress.say(
                f"Trial {number}/{len(trials)}: {trial.describe()}: score "
                f"{result['score']:.4f} in {result['wall_s']:.0f} s{result.pop('earlier')} "
                f"(best so far {best['score']:.4f}, trial {best['trial']})"
            )
        chosen = select(results, self.grid.select)
        self.publish(chosen)
        results_path = os.path.join(self.output_dir, RESULTS_JSON)
        summary = report(self.metric, self.grid.select, results, chosen)
        file_io.write_text(os.path.join(self.output_dir, RESULTS_MD), report_markdown(summary))
        file_io.write_json(results_path, summary, sort_keys=False)
        self.progress.say(
            f"Search: trial {chosen['trial']} ({chosen['output_dir']}) chosen "
            f"({self.grid.select}), {self.metric} {chosen['score']:.4f}: it is "
            f"{self.output_dir}'s model ({results_path})"
        )

    @property
    def metric(self) -> str:
        return getattr(self.task, "score_name", "score")

    def trial_settings(self, trial: Trial, output_dir: str, **changes) -> finetuning.Settings:
        """The run's settings with the trial's values (and `changes`), recorded as its
        flags in its run_config.json."""
        values = dict(
            learning_rate=trial.learning_rate,
            train_batch_size=trial.train_batch_size,
            num_train_epochs=trial.num_train_epochs,
            seed=trial.seed,
            output_dir=output_dir,
            **changes,
        )
        flag_values = dict(self.settings.flag_values, **values)
        return dataclasses.replace(self.settings, flag_values=flag_values, **values)

    def fresh_encoder(self, seed: int):
        """A new encoder, as a single run with --seed=`seed` builds it (its dropout
        seeds drawn after keras.utils.set_random_seed)."""
        keras.backend.clear_session()
        gc.collect()
        keras.utils.set_random_seed(seed)
        return model_flags.build_encoder(self.FLAGS, self.strategy)[0]

    def run_trial(self, trial: Trial, number: int, count: int) -> dict:
        """Runs (or resumes) `trial` unless it finished earlier; its result."""
        relative = os.path.join(TRIALS_DIR, trial.name)
        trial_dir = os.path.join(self.output_dir, relative)
        done_path = os.path.join(trial_dir, TRIAL_FILE)
        earlier = ""
        if tf.io.gfile.exists(done_path):
            done = file_io.read_json_object(done_path)
            earlier = " (finished earlier)"
        else:
            self.progress.say(f"Trial {number}/{count}: {trial.describe()} in {trial_dir}")
            settings = self.trial_settings(trial, trial_dir, do_predict=False, export_dir=None)
            encoder = self.fresh_encoder(trial.seed)
            start = time.monotonic()
            runner_settings.run_training(
                lambda: finetuning.run(
                    self.task, settings, self.strategy, encoder, self.files, EXPORT
                ),
                trial_dir,
            )
            score, step = trial_score(trial_dir)
            done = {"score": score, "global_step": step, "wall_s": time.monotonic() - start}
            file_io.write_json(done_path, done)
        return dict(
            trial=number,
            learning_rate=trial.learning_rate,
            train_batch_size=trial.train_batch_size,
            num_train_epochs=trial.num_train_epochs,
            restart=trial.restart,
            seed=trial.seed,
            score=done["score"],
            global_step=done["global_step"],
            wall_s=round(done["wall_s"], 1),
            output_dir=relative,
            earlier=earlier,
        )

    def publish(self, chosen: dict) -> None:
        """Makes the chosen trial output_dir's model: its best/ checkpoint and files,
        then output_dir's predictions and export from it."""
        trial_dir = os.path.join(self.output_dir, chosen["output_dir"])
        with file_io.atomic_directory(os.path.join(self.output_dir, finetuning.BEST_DIR)) as temp:
            source = os.path.join(trial_dir, finetuning.BEST_DIR)
            for name in tf.io.gfile.listdir(source):
                if not file_io.is_temp_name(name):
                    tf.io.gfile.copy(
                        os.path.join(source, name), os.path.join(temp, name), overwrite=True
                    )
        trial = Trial(
            chosen["learning_rate"],
            chosen["train_batch_size"],
            chosen["num_train_epochs"],
            chosen["restart"],
            chosen["seed"],
        )
        if self.settings.do_predict or self.settings.export_dir:
            settings = self.trial_settings(trial, self.output_dir, do_train=False, do_eval=False)
            encoder = self.fresh_encoder(trial.seed)
            runner_settings.run_training(
                lambda: finetuning.run(
                    self.task, settings, self.strategy, encoder, self.files, EXPORT
                ),
                self.output_dir,
            )
        # Its model files, results and evaluation files, and the settings it ran with.
        for name in sorted(tf.io.gfile.listdir(trial_dir)):
            source = os.path.join(trial_dir, name)
            if (
                tf.io.gfile.isdir(source)
                or file_io.is_temp_name(name)
                or name.startswith(".")
                or any(fnmatch.fnmatch(name, pattern) for pattern in NOT_COPIED)
            ):
                continue
            with tf.io.gfile.GFile(source, "rb") as f:
                content = f.read()
            with file_io.atomic_open(os.path.join(self.output_dir, name), "wb") as f:
                f.write(content)
