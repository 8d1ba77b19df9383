#!/usr/bin/env bash
# BERT in the Hugging Face layout, on JSON-lines text and a WordPiece vocabulary:
#   1. dptrain train --model bert (2 layers, hidden 32) on corpus.jsonl with vocab.txt, and
#      dptrain checkpoint export --format hf of its weights: config.json's keys, the tensor
#      names, vocab.txt; of its last checkpoint (with --vocab): the same model.safetensors;
#   2. round trip: train --init-weights DIR (sizes and vocabulary from DIR, lr 1e-30 for the
#      one step it must take) saved and exported again gives the same files, byte for byte;
#   3. tools/hf_bert_reference.py (BertForMaskedLM's structure in PyTorch) on the exported
#      directory gives dptrain predict's logits within 1e-5 on the validation sequences;
#   4. bad input: a JSON-lines line without the field, export without a vocabulary, a size
#      that contradicts config.json: a non-zero exit, the first line saying why (a usage
#      error then prints the usage).
# Parts 1, 2 and 4 need no torch; without /usr/bin/python3's torch and numpy, 3 is skipped and
# the test exits 77 after the others.
# Usage: hf_bert_test.sh <dptrain> <hf_bert_reference.py> <scratch dir>
set -uo pipefail
dptrain=$1 reference=$2 scratch=$3
python=/usr/bin/python3
export OPENBLAS_NUM_THREADS=1 POCL_MAX_PTHREAD_COUNT=1 OMP_NUM_THREADS=1
rm -rf "$scratch" && mkdir -p "$scratch"
cd "$scratch" || exit 1
fail() {
  echo "FAIL: $*"
  exit 1
}

# 120 documents of generated English, one JSON object per line (the text under "body"), and a
# WordPiece vocabulary laid out as BERT's ([PAD] 0, [unused0], [UNK], [CLS], [SEP], [MASK]).
awk 'BEGIN {
  srand(7)
  n = split("the a one every old young quick small great good bad", det, " ")
  m = split("cat dog man woman king child house river tree ship road city bird fox", noun, " ")
  k = split("sees finds loves takes holds keeps meets follows builds", verb, " ")
  for (d = 0; d < 120; d++) {
    printf "{\"id\": %d, \"body\": \"", d
    for (s = 0; s < 2 + int(rand() * 3); s++)
      printf "%s%s %s %s %s %ss.", (s ? " " : ""), toupper(substr(det[1 + int(rand() * n)], 1, 1)),
        noun[1 + int(rand() * m)], verb[1 + int(rand() * k)], det[1 + int(rand() * n)],
        noun[1 + int(rand() * m)]
    printf "\"}\n"
  }
}' >corpus.jsonl
{
  printf '%s\n' '[PAD]' '[unused0]' '[UNK]' '[CLS]' '[SEP]' '[MASK]' . '##s'
  printf '%s\n' the a one every old young quick small great good bad cat dog man woman king \
    child house river tree ship road city bird fox sees finds loves takes holds keeps meets \
    follows builds t o e g q s b y c h k '##he' '##ne' '##ld'
} >vocab.txt
arch=(--layers 2 --hidden-size 32 --heads 2 --ffn 64)
common=(--model bert --text corpus.jsonl --text-field body --seq-len 16 --backend cpu --quiet)

# 1. Train, export.
"$dptrain" train "${common[@]}" --vocab vocab.txt "${arch[@]}" --max-steps 20 --seed 1 \
  --checkpoint-dir ckpt --checkpoint-every 20 --save-weights w.safetensors >train.out 2>&1 ||
  { cat train.out; fail "dptrain train"; }
"$dptrain" checkpoint export w.safetensors --format hf --weights hf >export.out 2>&1 ||
  { cat export.out; fail "export --format hf"; }
cat export.out
cmp -s vocab.txt hf/vocab.txt || fail "hf/vocab.txt is not the training vocabulary"
# The checkpoint of the same (last) step exports to the same weights.
"$dptrain" checkpoint export ckpt --format hf --vocab vocab.txt --weights hf-ckpt >/dev/null ||
  fail "export --format hf of a checkpoint"
cmp hf/model.safetensors hf-ckpt/model.safetensors || fail "the checkpoint's export differs"
grep -q '"do_lower_case": true' hf/tokenizer_config.json || fail "tokenizer_config.json"
"$python" - <<'PY' || exit 1
import json, struct
c = json.load(open("hf/config.json"))
want = {"model_type": "bert", "architectures": ["BertForMaskedLM"], "vocab_size": 56,
        "hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2,
        "intermediate_size": 64, "max_position_embeddings": 16, "hidden_act": "gelu",
        "layer_norm_eps": 1e-12, "type_vocab_size": 2, "pad_token_id": 0}
bad = {k: (c.get(k), v) for k, v in want.items() if c.get(k) != v}
assert not bad, f"config.json differs: {bad}"
raw = open("hf/model.safetensors", "rb").read()
(n,) = struct.unpack("<Q", raw[:8])
names = {k: v["shape"] for k, v in json.loads(raw[8:8 + n]).items() if k != "__metadata__"}
for k in ["bert.embeddings.word_embeddings.weight", "bert.embeddings.position_embeddings.weight",
          "bert.embeddings.token_type_embeddings.weight", "bert.embeddings.LayerNorm.weight",
          "bert.encoder.layer.1.attention.self.query.weight",
          "bert.encoder.layer.1.attention.self.value.bias",
          "bert.encoder.layer.1.attention.output.dense.weight",
          "bert.encoder.layer.1.attention.output.LayerNorm.bias",
          "bert.encoder.layer.1.intermediate.dense.weight", "bert.encoder.layer.1.output.dense.bias",
          "bert.encoder.layer.1.output.LayerNorm.weight", "cls.predictions.transform.dense.weight",
          "cls.predictions.transform.LayerNorm.bias", "cls.predictions.bias",
          "cls.predictions.decoder.weight"]:
    assert k in names, f"no {k} in model.safetensors"
assert names["bert.encoder.layer.1.attention.self.query.weight"] == [32, 32]
assert names["bert.encoder.layer.1.intermediate.dense.weight"] == [64, 32]
assert names["bert.embeddings.token_type_embeddings.weight"] == [2, 32]
assert len(names) == 4 + 1 + 16 * 2 + 5 + 1, f"{len(names)} tensors"
print(f"config.json and {len(names)} tensors as BertForMaskedLM's")
PY

# 2. Round trip through --init-weights DIR (no --vocab, no sizes: both from DIR).
"$dptrain" train "${common[@]}" --init-weights hf --max-steps 1 --lr 1e-30 --weight-decay 0 \
  --save-weights w2.safetensors >train2.out 2>&1 || { cat train2.out; fail "--init-weights DIR"; }
"$dptrain" checkpoint export w2.safetensors --format hf --weights hf2 >/dev/null ||
  fail "second export"
for f in config.json model.safetensors vocab.txt tokenizer_config.json; do
  cmp "hf/$f" "hf2/$f" || fail "export -> import -> export changed $f"
done
echo "export -> --init-weights -> export: the same files"

# 4. Bad input, one line each.
expect_fail() { # <what> <needle> <command...>
  local what=$1 needle=$2
  shift 2
  "$@" >bad.out 2>bad.err && fail "$what succeeded"
  head -1 bad.err | grep -q -- "$needle" || { cat bad.err; fail "$what: no '$needle' first"; }
}
printf '{"body": "fine"}\n{"text": "no body"}\n' >bad.jsonl
expect_fail "a line without the field" 'bad.jsonl:2: no "body" field' \
  "$dptrain" tokenize --data bad.jsonl --text-field body --vocab vocab.txt
cp w.safetensors lone.safetensors
expect_fail "export without a vocabulary" "give it with --vocab" \
  "$dptrain" checkpoint export lone.safetensors --format hf --weights hf3
expect_fail "--layers against config.json" "config.json says 2" \
  "$dptrain" train "${common[@]}" --init-weights hf --layers 3 --max-steps 1
echo "bad input: refused, each saying why"

# 3. Logits against the PyTorch BertForMaskedLM.
if ! "$python" -c 'import torch, numpy' 2>/dev/null; then
  echo "skipped the logits: $python cannot import torch and numpy"
  exit 77
fi
"$dptrain" tokenize --data corpus.jsonl --text-field body --vocab vocab.txt --seq-len 16 \
  --export seqs.safetensors >/dev/null || fail "tokenize --export"
"$dptrain" predict --weights w.safetensors --data seqs.safetensors --output logits.safetensors \
  --backend cpu || fail "dptrain predict"
"$python" "$reference" hf --inputs seqs.safetensors --compare logits.safetensors --tol 1e-5 ||
  fail "the PyTorch BertForMaskedLM's logits differ from dptrain's"
echo "PASS"
