#!/usr/bin/env bash
# The BERT masked-language model in PyTorch (tools/pytorch_reference.py --model bert) on the
# sequences `dptrain tokenize --export` writes from a small generated text:
#   1. a tiny BERT (1 layer, hidden 32, 2 heads, ffn 64, sequences of 16) trained 2 steps in
#      torch and saved has exactly dpt_model_spec_bert's tensor names and shapes (the decoder's
#      weight tied to embed.tok.weight, stored once), and reads back with strict
#      load_state_dict to the same validation loss;
#   2. the same model trained 2 steps by
#      dptrain (--save-weights) loads strictly in torch, and torch's validation loss on the
#      export's val_inputs/val_labels is `dptrain eval`'s within 1e-3 relative.
# Skips (77) without /usr/bin/python3's torch and numpy.
# Usage: pytorch_bert_test.sh <dptrain> <pytorch_reference.py> <scratch dir>
set -uo pipefail
dptrain=$1 reference=$2 scratch=$3
python=/usr/bin/python3
export OPENBLAS_NUM_THREADS=1 POCL_MAX_PTHREAD_COUNT=1 OMP_NUM_THREADS=1
if ! "$python" -c 'import torch, numpy' 2>/dev/null; then
  echo "skipped: $python cannot import torch and numpy"
  exit 77
fi
rm -rf "$scratch" && mkdir -p "$scratch/text"
arch=(--layers 1 --hidden-size 32 --heads 2 --ffn 64)

# About 12 KB of English-like text: 120 documents of 2 to 4 sentences, "%" between them.
awk 'BEGIN {
  srand(11)
  n = split("the a one every no some old young quick slow small great good bad", det, " ")
  m = split("cat dog man woman king child house river tree ship road city bird fox horse",
    noun, " ")
  k = split("sees finds loves takes holds keeps leaves meets follows builds crosses", verb, " ")
  j = split("near over under beside behind before after with without", prep, " ")
  for (d = 0; d < 120; d++) {
    for (s = 0; s < 2 + int(rand() * 3); s++) {
      w = det[1 + int(rand() * n)]
      printf "%s%s %s %s %s %s %s %s.", (s ? " " : ""), toupper(substr(w, 1, 1)) substr(w, 2),
        noun[1 + int(rand() * m)], verb[1 + int(rand() * k)], det[1 + int(rand() * n)],
        noun[1 + int(rand() * m)], prep[1 + int(rand() * j)], noun[1 + int(rand() * m)]
    }
    printf "\n%%\n"
  }
}' >"$scratch/text/corpus.txt"
text="$scratch/text/corpus.txt"
vocab="$scratch/vocab.json"
seqs="$scratch/seqs.safetensors"
"$dptrain" tokenize --data "$text" --vocab-size 300 --out "$vocab" >"$scratch/tokenize.out" &&
  "$dptrain" tokenize --data "$text" --vocab "$vocab" --seq-len 16 --export "$seqs" --seed 0 \
    >>"$scratch/tokenize.out" || {
  echo "FAIL: dptrain tokenize"
  cat "$scratch/tokenize.out"
  exit 1
}
cat "$scratch/tokenize.out"

# 1. torch alone: 2 steps, saved, the names and shapes, read back strictly.
tw="$scratch/torch.safetensors"
"$python" "$reference" --model bert --text-data "$seqs" "${arch[@]}" --global-batch 8 \
  --max-steps 2 --save-weights "$tw" >"$scratch/torch_train.out" 2>&1 || {
  echo "FAIL: torch training"
  cat "$scratch/torch_train.out"
  exit 1
}
"$python" "$reference" --model bert --text-data "$seqs" "${arch[@]}" --load-weights "$tw" \
  --json >"$scratch/torch_load.json" || {
  echo "FAIL: torch could not load its own file strictly"
  exit 1
}
"$python" - "$reference" "$tw" "$scratch" <<'PY' || exit 1
import json, os, re, sys
sys.path.insert(0, os.path.dirname(sys.argv[1]))
import pytorch_reference as ref
tw, d = sys.argv[2], sys.argv[3]
t = ref.read_safetensors(tw)
V, H, F, P = 300, 32, 64, 16
want = {"embed.tok.weight": [V, H], "embed.pos.weight": [P, H], "embed.norm.weight": [H],
        "embed.norm.bias": [H], "blocks.0.attn.in_proj_weight": [3 * H, H],
        "blocks.0.attn.in_proj_bias": [3 * H], "blocks.0.attn.out_proj.weight": [H, H],
        "blocks.0.attn.out_proj.bias": [H], "blocks.0.norm1.weight": [H],
        "blocks.0.norm1.bias": [H], "blocks.0.ffn1.weight": [F, H], "blocks.0.ffn1.bias": [F],
        "blocks.0.ffn2.weight": [H, F], "blocks.0.ffn2.bias": [H], "blocks.0.norm2.weight": [H],
        "blocks.0.norm2.bias": [H], "mlm.dense.weight": [H, H], "mlm.dense.bias": [H],
        "mlm.norm.weight": [H], "mlm.norm.bias": [H], "mlm.decoder.bias": [V]}
got = {k: list(v.shape) for k, v in t.items()}
assert got == want, f"names or shapes differ from dpt_model_spec_bert's:\n{got}\n{want}"
assert all(str(v.dtype) == "torch.float32" for v in t.values())
out = open(f"{d}/torch_train.out").read()
trained = float(re.findall(r"validation loss ([0-9.]+)", out)[-1])
loaded = json.load(open(f"{d}/torch_load.json"))
print(f"torch: 2 steps, validation loss {trained:.4f}; read back {loaded}")
assert loaded["targets"] > 0, "no masked validation targets"
assert abs(loaded["loss"] - trained) <= 1e-4, "the file read back gives another loss"
PY

# 2. dptrain's BERT.
dw="$scratch/dptrain.safetensors"
"$dptrain" train --model bert --text "$text" --vocab "$vocab" --seq-len 16 "${arch[@]}" \
  --dropout 0.1 --global-batch 8 --max-steps 2 --seed 0 --backend cpu --quiet \
  --save-weights "$dw" >"$scratch/dpt_train.out" 2>&1
rc=$?
if [ $rc -ne 0 ]; then
  echo "FAIL: dptrain train --model bert exited $rc"
  cat "$scratch/dpt_train.out"
  exit 1
fi
"$dptrain" eval --weights "$dw" --text "$text" --vocab "$vocab" --backend cpu --json \
  >"$scratch/dpt_eval.json" 2>"$scratch/dpt_eval.err" || {
  echo "FAIL: dptrain eval"
  cat "$scratch/dpt_eval.err"
  exit 1
}
"$python" "$reference" --model bert --text-data "$seqs" "${arch[@]}" --load-weights "$dw" \
  --json >"$scratch/torch_dpt.json" || {
  echo "FAIL: torch could not load dptrain's BERT weights strictly"
  exit 1
}
"$python" - "$scratch" <<'PY'
import json, sys
d = sys.argv[1]
a = json.loads(open(f"{d}/dpt_eval.json").read().strip().splitlines()[-1])
b = json.load(open(f"{d}/torch_dpt.json"))
print(f"dptrain eval {a}\npytorch      {b}")
loss = a.get("loss", a.get("val_loss"))
assert loss is not None, "dptrain eval --json gives no loss"
rel = abs(loss - b["loss"]) / abs(b["loss"])
print(f"relative difference of the validation losses {rel:.3g}")
assert rel <= 1e-3, "validation losses differ"
PY
