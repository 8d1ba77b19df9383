#!/usr/bin/env bash
# DLRM in PyTorch (tools/pytorch_reference.py's DLRM) against dptrain's dpt_model_spec_dlrm: for
# the dot and cat interactions (bags of 2 with sum and mean, empty slots, a bag with no id, and a
# bag of 1), tests/dlrm_dump builds a tiny DLRM, initializes it and writes its weights
# (dpt_model_save) and a fixed batch of records with dptrain's logits and loss. Torch reads the
# weights with a strict load_state_dict (every name and shape), recomputes the logits from the
# same records and checks them within 1e-5, and the BCE-with-logits loss sum within 1e-5
# relative. Skips (77) without /usr/bin/python3's torch.
# Usage: pytorch_dlrm_test.sh <dlrm_dump> <pytorch_reference.py> <scratch dir>
set -uo pipefail
dump=$1 reference=$2 scratch=$3
python=/usr/bin/python3
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
if ! "$python" -c 'import torch, numpy' 2>/dev/null; then
  echo "skipped: $python cannot import torch and numpy"
  exit 77
fi
rm -rf "$scratch" && mkdir -p "$scratch"
cases=("dot sum 2" "dot mean 2" "cat sum 2" "cat mean 2" "dot sum 1" "cat sum 1")
for c in "${cases[@]}"; do
  set -- $c
  tag="$1-$2-$3"
  "$dump" "$1" "$2" "$3" "$scratch/$tag.weights.safetensors" "$scratch/$tag.batch.safetensors" || {
    echo "FAIL: dlrm_dump $c"
    exit 1
  }
done
"$python" - "$reference" "$scratch" "${cases[@]}" <<'PY'
import json, os, sys
sys.path.insert(0, os.path.dirname(sys.argv[1]))
import torch
import pytorch_reference as ref
torch.set_num_threads(1)
d = sys.argv[2]
for case in sys.argv[3:]:
    tag = case.replace(" ", "-")
    weights, batch = f"{d}/{tag}.weights.safetensors", f"{d}/{tag}.batch.safetensors"
    opts = json.loads(ref.read_safetensors_metadata(batch)["dlrm"])
    model = ref.dlrm_from_options(opts)
    state = ref.read_safetensors(weights)
    want = {k: list(v.shape) for k, v in model.state_dict().items()}
    got = {k: list(v.shape) for k, v in state.items()}
    assert got == want, f"{tag}: names or shapes differ from DLRM's:\n{got}\n{want}"
    model.load_state_dict(state, strict=True)
    model.eval()
    b = ref.read_safetensors(batch)
    n = b["dense"].shape[0]
    ids = b["ids"].reshape(n, len(opts["table_rows"]), opts["bag"])
    with torch.no_grad():
        logits = model(b["dense"], ids)
        loss = torch.nn.functional.binary_cross_entropy_with_logits(
            logits.double(), b["labels"].double(), reduction="sum").item()
    diff = (logits - b["logits"]).abs().max().item()
    dloss = b["loss"].item()
    print(f"{tag}: {sum(v.numel() for v in state.values())} parameters, largest logit difference "
          f"{diff:.3g}, loss torch {loss:.6f} dptrain {dloss:.6f}")
    assert diff <= 1e-5, f"{tag}: logits differ by {diff}"
    assert abs(loss - dloss) <= 1e-5 * max(1.0, abs(loss)), f"{tag}: losses differ"
    assert logits.abs().max().item() > 1e-3, f"{tag}: degenerate logits"
print("pytorch dlrm test passed")
PY
