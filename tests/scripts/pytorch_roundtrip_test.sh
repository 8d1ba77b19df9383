#!/usr/bin/env bash
# The PyTorch-layout round trip of a ResNet's weights and buffers: a tiny ResNet trained for 2
# steps by dptrain, its weights file read by tools/pytorch_reference.py into a PyTorch module
# with load_state_dict(strict=True), and PyTorch's eval-mode logits, loss and accuracy on the
# first 256 test images equal to dptrain's (within 1e-4). Skips (77) without /usr/bin/python3's
# torch and numpy or without Fashion-MNIST.
# Usage: pytorch_roundtrip_test.sh <dptrain> <pytorch_reference.py> <scratch dir>
set -uo pipefail
dptrain=$1 reference=$2 scratch=$3
data=${DPT_FASHION_MNIST:-/usr/share/datasets/fashion-mnist}
python=/usr/bin/python3
export OPENBLAS_NUM_THREADS=1
if ! "$python" -c 'import torch, numpy' 2>/dev/null; then
  echo "skipped: $python cannot import torch and numpy"
  exit 77
fi
if [ ! -e "$data/t10k-images-idx3-ubyte.gz" ] && [ ! -e "$data/t10k-images-idx3-ubyte" ]; then
  echo "skipped: no Fashion-MNIST in $data"
  exit 77
fi
rm -rf "$scratch" && mkdir -p "$scratch"
w="$scratch/resnet.safetensors"
"$dptrain" train --data "$data" --model resnet --depth 8 --global-batch 16 --max-steps 2 \
  --backend cpu --quiet --save-weights "$w" >"$scratch/train.out" || {
  echo "FAIL: dptrain train"
  exit 1
}
"$dptrain" eval --weights "$w" --data "$data" --backend cpu --limit 256 --json >"$scratch/dpt.json" &&
  "$dptrain" predict --weights "$w" --data "$data" --backend cpu --limit 256 --logits \
    --output "$scratch/dpt.csv" || {
  echo "FAIL: dptrain eval/predict"
  exit 1
}
"$python" "$reference" --data "$data" --model resnet --depth 8 --load-weights "$w" --limit 256 \
  --json --logits "$scratch/torch.csv" >"$scratch/torch.json" || {
  echo "FAIL: the PyTorch reference could not load or run the weights"
  exit 1
}
"$python" - "$scratch" <<'PY'
import csv, json, sys
d = sys.argv[1]
a, b = (json.load(open(f"{d}/{n}.json")) for n in ("dpt", "torch"))
rows = [list(csv.reader(open(f"{d}/{n}.csv")))[1:] for n in ("dpt", "torch")]
assert len(rows[0]) == len(rows[1]) == 256, (len(rows[0]), len(rows[1]))
worst = max(abs(float(x) - float(y)) for r, s in zip(*rows) for x, y in zip(r[1:], s[1:]))
print(f"dptrain {a}\npytorch {b}\nlargest logit difference {worst:.3g}")
assert worst <= 1e-4, "logits differ"
assert a["correct"] == b["correct"], "accuracies differ"
assert abs(a["loss"] - b["loss"]) <= 1e-4, "losses differ"
PY
