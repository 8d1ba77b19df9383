#!/usr/bin/env bash
# dptrain eval on DLRM weights: a tiny DLRM trained on synthetic shards, its weights scored by
# eval give the training run's last validation AUC and logloss (within 1e-6); recall@k on a
# hand-made ranking set against hand-computed values; bad inputs (weights without a DLRM
# description, shards of another layout or larger tables, predict on DLRM weights) each one
# line and a non-zero exit.
# Usage: dlrm_eval_cli_test.sh <dptrain> <scratch dir>
set -uo pipefail
dptrain=$1 dir=$2
export OPENBLAS_NUM_THREADS=1
rm -rf "$dir" && mkdir -p "$dir" || exit 1
failures=0

# shellcheck source=cli_lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/cli_lib.sh"

# json_field KEY TEXT: the number after "KEY": in TEXT.
json_field() { grep -o "\"$1\": [-0-9.a-z]*" <<<"$2" | tail -1 | cut -d' ' -f2; }

# close A B: |A - B| <= 1e-6.
close() { awk -v a="$1" -v b="$2" 'BEGIN { d = a - b; exit !(a != "" && b != "" && d <= 1e-6 && d >= -1e-6) }'; }

# 1. A tiny DLRM on synthetic shards (2 dense, 3 tables of 100 rows): shards 0-1 train, 2
# validates. One replica, global batch 256: training scores the validation records in slices
# of 256, as eval's default --batch.
"$dptrain" data synth --out "$dir/s" --samples 6000 --shards 3 --rows 100 --tables 3 --dense 2 \
  >"$dir/synth.log" || { cat "$dir/synth.log"; exit 1; }
w="$dir/w.safetensors"
out=$("$dptrain" train --model dlrm --backend cpu --quiet --data "$dir/s/synth-0000[01].bin" \
  --val-data "$dir/s/synth-00002.bin" --global-batch 256 --epochs 4 --lr 0.01 --embedding-dim 4 \
  --bottom 8 --top 8 --save-weights "$w" --json 2>"$dir/err") || {
  cat "$dir/err"
  exit 1
}
final=$(grep '"final": true' <<<"$out")
t_auc=$(json_field test_auc "$final") t_ll=$(json_field test_logloss "$final")
t_acc=$(json_field test_accuracy "$final")
ev=$("$dptrain" eval --weights "$w" --data "$dir/s/synth-00002.bin" --backend cpu --json 2>&1)
e_auc=$(json_field auc "$ev") e_ll=$(json_field logloss "$ev") e_acc=$(json_field accuracy "$ev")
if close "$t_auc" "$e_auc" && close "$t_ll" "$e_ll" && close "$t_acc" "$e_acc" &&
  [ "$(json_field records "$ev")" = 2000 ]; then
  echo "ok: eval equals training's last validation: auc $e_auc, logloss $e_ll, accuracy $e_acc"
else
  fail "eval '$ev' against training's auc $t_auc logloss $t_ll accuracy $t_acc"
fi
# The text form holds the same AUC.
txt=$("$dptrain" eval --weights "$w" --data "$dir/s/synth-00002.bin" --backend cpu 2>&1)
grep -q "^auc $(printf '%.6f' "$e_auc")  logloss " <<<"$txt" || fail "text output: $txt"

# 2. recall@k on a hand-made ranking set. Training: for sources s0..s3, candidates a and b are
# always edges (label 1), c and d never (label 0), so the model scores a and b above c and d
# for every source. The ranking set (label as written, not as trained):
#   group s0: a 1, b 1, c 0        top 2 {a, b}: 2 of min(2, 2) = 1
#   group s1: a 0, b 0, c 1        top 2 {a, b}: 0 of 1 = 0
#   group s2: a 1, c 1, d 0, b 0   top 2 {a, b}: 1 of 2 = 0.5
#   group s3: a 0, c 0             no positive: not counted
# recall@2 = (1 + 0 + 0.5) / 3 = 0.5; recall@10 = 1 (every group fits in its top 10).
# Criteo-layout text: label, one dense count, source, candidate (hashed into 1000-id tables).
{
  for rep in $(seq 1 40); do
    for s in s0 s1 s2 s3; do
      printf '1\t1\t%s\ta\n1\t1\t%s\tb\n0\t1\t%s\tc\n0\t1\t%s\td\n' $s $s $s $s
    done
  done
} >"$dir/edges.txt"
printf '1\t1\ts0\ta\n1\t1\ts0\tb\n0\t1\ts0\tc\n0\t1\ts1\ta\n0\t1\ts1\tb\n1\t1\ts1\tc\n' \
  >"$dir/rank.txt"
printf '1\t1\ts2\ta\n1\t1\ts2\tc\n0\t1\ts2\td\n0\t1\ts2\tb\n0\t1\ts3\ta\n0\t1\ts3\tc\n' \
  >>"$dir/rank.txt"
conv=(data convert --dense 1 --sparse 2 --table-size 1000)
"$dptrain" "${conv[@]}" --input "$dir/edges.txt" --out "$dir/g" --prefix train --shards 2 \
  >/dev/null && "$dptrain" "${conv[@]}" --input "$dir/rank.txt" --out "$dir/g" --prefix rank \
  >/dev/null || fail "convert failed"
wg="$dir/wg.safetensors"
"$dptrain" train --model dlrm --backend cpu --quiet --data "$dir/g/train-*.bin" \
  --global-batch 32 --epochs 10 --lr 0.01 --embedding-dim 4 --bottom 4 --top 8 \
  --save-weights "$wg" >"$dir/train2.log" 2>&1 || fail "training on the edges: $(cat "$dir/train2.log")"
for k in 2 10; do
  want=$([ $k = 2 ] && echo 0.5 || echo 1)
  ev=$("$dptrain" eval --weights "$wg" --data "$dir/g/rank-*.bin" --backend cpu --json \
    --recall-at $k 2>&1)
  got=$(json_field recall_at_k "$ev")
  if close "$got" "$want" && [ "$(json_field groups "$ev")" = 3 ] &&
    [ "$(json_field records "$ev")" = 12 ]; then
    echo "ok: recall@$k $got over 3 groups"
  else
    fail "recall@$k: want $want: $ev"
  fi
done
# --groups: k 10, in the text form.
txt=$("$dptrain" eval --weights "$wg" --data "$dir/g/rank-*.bin" --backend cpu --groups 2>&1)
grep -q "^recall@10 1.000000 over 3 groups" <<<"$txt" || fail "--groups text: $txt"

# 3. Bad inputs.
# Weights without a model description: a hand-written safetensors file of one tensor.
hdr='{"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}'
{
  printf "\\x$(printf %02x ${#hdr})\\x00\\x00\\x00\\x00\\x00\\x00\\x00"
  printf '%s' "$hdr"
  printf '\x00\x00\x80\x3f'
} >"$dir/plain.safetensors"
refused "weights without a DLRM" "holds no DLRM" eval --weights "$dir/plain.safetensors" \
  --data "$dir/s/synth-00002.bin"
refused "--groups without a DLRM" "holds no DLRM" eval --weights "$dir/plain.safetensors" \
  --groups --data "$dir/s/synth-00002.bin"
# Shards of another layout: 3 dense (the model takes 2), or 4 tables.
"$dptrain" data synth --out "$dir/l1" --samples 100 --shards 1 --rows 100 --tables 3 \
  --dense 3 >/dev/null || exit 1
refused "another layout" "hold records of 3 dense and 3 sparse features; the model in" eval \
  --weights "$w" --data "$dir/l1/synth-00000.bin" --backend cpu
"$dptrain" data synth --out "$dir/l2" --samples 100 --shards 1 --rows 100 --tables 4 \
  --dense 2 >/dev/null || exit 1
refused "another table count" "hold records of 2 dense and 4 sparse features" eval \
  --weights "$w" --data "$dir/l2/synth-00000.bin" --backend cpu
# Tables larger than the model's.
"$dptrain" data synth --out "$dir/l3" --samples 100 --shards 1 --rows 200 --tables 3 \
  --dense 2 >/dev/null || exit 1
refused "larger tables" "sparse feature 0 of 200 ids, beyond the 100 rows of the model's table emb_l.0" \
  eval --weights "$w" --data "$dir/l3/synth-00000.bin" --backend cpu
refused "no shard" "no shard file matches" eval --weights "$w" --data "$dir/none-*.bin" \
  --backend cpu
refused "predict on DLRM" "is a DLRM: dptrain eval scores it" predict --weights "$w" \
  --data "$dir/s/synth-00002.bin"

[ $failures -eq 0 ] && echo "all passed" && rm -rf "$dir"
[ $failures -eq 0 ]
