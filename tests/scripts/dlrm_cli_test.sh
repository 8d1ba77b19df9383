#!/usr/bin/env bash
# dptrain train --model dlrm on `dptrain data synth` shards: bad input gives one line and a
# non-zero exit (no match, a corrupt shard, ids beyond a table, options
# that do not apply); a short run with 2 thread replicas reports the validation AUC and logloss
# per epoch (--json); 2 MPI ranks give the same parameters as 2 thread replicas, also with
# --sparse-tables (which reports fewer bytes for the tables than the dense exchange); a resume on
# other shards is refused; --node-shards (each rank its own files) equals the shared files.
# Usage: dlrm_cli_test.sh <dptrain> <scratch dir> [mpiexec]
set -uo pipefail
dptrain=$1 dir=$2 mpiexec=${3:-}
export OPENBLAS_NUM_THREADS=1
rm -rf "$dir" && mkdir -p "$dir" || exit 1
failures=0

# shellcheck source=cli_lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/cli_lib.sh"

# 24000 records in 6 shards: shards 0-3 train (16000), shards 4 and 5 validate (8000).
"$dptrain" data synth --out "$dir/s" --samples 24000 --shards 6 --rows 1000 --tables 4 \
  >"$dir/synth.log" || { cat "$dir/synth.log"; exit 1; }
train="$dir/s/synth-0000[0-3].bin" val="$dir/s/synth-0000[45].bin"
base=(train --model dlrm --backend cpu --quiet --data "$train" --val-data "$val")

refused "no match" "none-*.bin: no shard file matches" train --model dlrm --backend cpu \
  --data "$dir/none-*.bin"
refused "dlrm without --data" "--model dlrm needs --data" train --model dlrm
refused "--val-data without dlrm" "--val-data is for --model dlrm" train --val-data "$val"
refused "--keep-last with dlrm" "--keep-last does not apply" "${base[@]}" --keep-last
refused "--sparse-tables without dlrm" "--sparse-tables is for --model dlrm" train \
  --sparse-tables
refused "--sparse-dense-above without --sparse-tables" "needs --sparse-tables" "${base[@]}" \
  --sparse-dense-above 0.1
refused "--table-optimizer without --sparse-tables" "--table-optimizer needs --sparse-tables" \
  "${base[@]}" --table-optimizer rowwise-adagrad
refused "bad --table-optimizer" \
  "bad value 'adamw' for --table-optimizer (adam, rowwise-adam, rowwise-adagrad or sgd)" \
  "${base[@]}" --sparse-tables --table-optimizer adamw
refused "bad --interaction" "bad value 'sum' for --interaction" "${base[@]}" --interaction sum
refused "--grad-dtype with --sparse-tables" "does not combine with sparse_tables" "${base[@]}" \
  --replicas 2 --sparse-tables --grad-dtype bf16
# A payload byte flipped in a copy of shard 2: the rank that owns it names the file.
mkdir -p "$dir/bad" && cp "$dir"/s/synth-0000[0-3].bin "$dir/bad/"
printf '\x07' | dd of="$dir/bad/synth-00002.bin" bs=1 seek=300 conv=notrunc status=none
refused "corrupt shard" "synth-00002.bin: corrupt payload" train --model dlrm --backend cpu \
  --data "$dir/bad/*.bin"
# Validation shards with larger tables than the training shards': ids beyond the model's.
"$dptrain" data synth --out "$dir/big" --samples 2000 --shards 1 --rows 2000 --tables 4 \
  >/dev/null || exit 1
refused "ids beyond a table" "beyond the 1000 rows of the model's table emb_l.0" train \
  --model dlrm --backend cpu --data "$train" --val-data "$dir/big/synth-00000.bin"
# Validation records of the training width but another split of it (5 dense + 3 ids, not 4 + 4).
"$dptrain" data synth --out "$dir/split" --samples 1000 --shards 1 --rows 1000 --tables 3 \
  --dense 5 >/dev/null || exit 1
refused "validation layout" "the validation shards' records have 5 dense and 3 sparse" train \
  --model dlrm --backend cpu --data "$train" --val-data "$dir/split/synth-00000.bin"
# Three records over four shards: the fourth replica's shard is empty, refused before a step.
"$dptrain" data synth --out "$dir/few" --samples 3 --shards 4 --rows 1000 --tables 4 \
  >/dev/null || exit 1
refused "a replica without records" "replica 3's training shards hold no record" train \
  --model dlrm --backend cpu --data "$dir/few/*.bin" --replicas 4 --global-batch 4

# A short run: 2 thread replicas, 2 epochs of floor(16000 / 512) = 31 steps.
out=$("$dptrain" "${base[@]}" --replicas 2 --global-batch 512 --epochs 2 --json 2>"$dir/err")
rc=$?
if [ $rc -ne 0 ]; then
  fail "2 replicas: exit $rc: $(cat "$dir/err")"
else
  final=$(grep '"final": true' <<<"$out")
  epochs=$(grep -c '"epoch": ' <<<"$out")
  auc=$(grep -o '"test_auc": [0-9.]*' <<<"$final" | cut -d' ' -f2)
  steps=$(grep -o '"steps": [0-9]*' <<<"$final" | cut -d' ' -f2)
  if [ "$epochs" != 2 ] || [ "$steps" != 62 ] || [ -z "$auc" ] ||
    ! grep -q '"test_logloss": [0-9.]*' <<<"$final"; then
    fail "2 replicas: epochs $epochs, steps $steps, auc '$auc': $out"
  else
    echo "ok: 2 replicas: $steps steps, validation AUC $auc"
  fi
  hash=$(grep -o '"param_hash": "[0-9a-f]*"' <<<"$final")
fi

# 2 MPI ranks, one replica each, read the same shards as the 2 threads: the same parameters.
if [ -n "$mpiexec" ] && [ $rc -eq 0 ]; then
  out=$($mpiexec -np 2 "$dptrain" "${base[@]}" --global-batch 512 --epochs 2 --json 2>"$dir/err")
  got=$(grep '"final": true' <<<"$out" | grep -o '"param_hash": "[0-9a-f]*"' | sort -u)
  if [ "$got" != "$hash" ]; then
    fail "2 ranks: '$got', 2 threads: '$hash': $(tail -3 "$dir/err")"
  else
    echo "ok: 2 ranks equal 2 thread replicas ($hash)"
  fi
fi

# --node-shards: each rank's "node" holds its own files (rank 0 the shards 0 and 2, rank 1 the
# shards 1 and 3, which the shared pattern gives them): the same parameters as above. A node
# without files, or two ranks sharing one file, stop the job with one line.
if [ -n "$mpiexec" ] && [ -n "${hash:-}" ]; then
  mkdir -p "$dir/n0" "$dir/n1" "$dir/n2"
  cp "$dir"/s/synth-0000[02].bin "$dir/n0/" && cp "$dir"/s/synth-0000[13].bin "$dir/n1/"
  cp "$dir"/s/synth-00000.bin "$dir/n2/"
  # Rank r's pattern is the directory given with RANK replaced by its rank.
  per_rank() {
    local d=$1
    shift
    $mpiexec -np 2 sh -c 'r=${OMPI_COMM_WORLD_RANK:-${PMI_RANK:-0}}; p=$1; shift
      exec "$@" --data "$(printf %s "$p" | sed "s/RANK/$r/")"' sh "$d" "$dptrain" "$@"
  }
  nbase=(train --model dlrm --backend cpu --quiet --node-shards --global-batch 512 --epochs 2
    --json)
  out=$(per_rank "$dir/nRANK/*.bin" "${nbase[@]}" 2>"$dir/err")
  got=$(grep '"final": true' <<<"$out" | grep -o '"param_hash": "[0-9a-f]*"' | sort -u)
  # the validation set differs (none here), not the parameters
  if [ "$got" != "$hash" ]; then
    fail "--node-shards: '$got', shared files: '$hash': $(tail -3 "$dir/err")"
  else
    echo "ok: --node-shards on 2 ranks equal the shared files' run ($hash)"
  fi
  per_rank "$dir/nRANK/none-*.bin" "${nbase[@]}" >/dev/null 2>"$dir/err" &&
    fail "--node-shards with no files on the nodes succeeded"
  if grep -q "nRANK" "$dir/err" || ! grep -q "n0/none-\*.bin: no shard file matches" "$dir/err"; then
    fail "--node-shards, no files: $(head -4 "$dir/err")"
  else
    echo "ok: --node-shards, no files: $(grep -m1 "no shard file" "$dir/err")"
  fi
  if ! timeout 120 $mpiexec -np 2 "$dptrain" "${nbase[@]}" --data "$dir/n2/*.bin" >/dev/null \
    2>"$dir/err"; then
    fail "--node-shards, 2 ranks sharing 1 file (record ranges): $(head -4 "$dir/err")"
  else
    echo "ok: --node-shards, 2 ranks sharing 1 file: each trains on half its records"
  fi
fi

# One validation file on 2 ranks: split by record ranges, every record scored once: the same
# AUC as the same records in 2 files (one per rank).
if [ -n "$mpiexec" ]; then
  seq 1 2000 | awk '{ srand($1); printf "%d\t%d\t%d\t%d\t%d\tu%d\tv%d\tw%d\tx%d\n", rand() < 0.3,
    $1 % 17, $1 % 5, $1 % 3, $1 % 11, $1 % 97, $1 % 89, $1 % 7, $1 % 53 }' >"$dir/val.tsv"
  for k in 1 2; do
    "$dptrain" data convert --input "$dir/val.tsv" --out "$dir/v$k" --dense 4 --sparse 4 \
      --table-size 1000 --shards $k >/dev/null || fail "convert validation into $k shards"
  done
  vauc() {
    $mpiexec -np 2 "$dptrain" train --model dlrm --backend cpu --quiet --data "$train" \
      --val-data "$1" --global-batch 512 --epochs 1 --json 2>"$dir/err" |
      grep '"final": true' | grep -o '"test_auc": [0-9.]*' | sort -u
  }
  a1=$(vauc "$dir/v1/shard-*.bin") a2=$(vauc "$dir/v2/shard-*.bin")
  if [ -z "$a1" ] || [ "$a1" != "$a2" ]; then
    fail "one validation file on 2 ranks: '$a1', two files: '$a2': $(tail -3 "$dir/err")"
  else
    echo "ok: one validation file on 2 ranks scores every record once ($a1)"
  fi
fi

# --sparse-tables: the tables' rows exchanged as (id, row), 2 thread replicas then 2 MPI ranks
# (the same parameters); the rows are used while they send fewer bytes than the dense
# exchange (--sparse-dense-above 1): the bytes reported are fewer.
sparse=("${base[@]}" --sparse-tables --sparse-dense-above 1 --optimizer sgd --global-batch 512
  --epochs 1 --json)
out=$("$dptrain" "${sparse[@]}" --replicas 2 2>"$dir/err")
rc=$?
final=$(grep '"final": true' <<<"$out")
sent=$(grep -o '"sparse_sent_bytes": [0-9]*' <<<"$final" | cut -d' ' -f2)
dense=$(grep -o '"sparse_dense_bytes": [0-9]*' <<<"$final" | cut -d' ' -f2)
if [ $rc -ne 0 ] || [ -z "$sent" ] || [ -z "$dense" ] || [ "$sent" -ge "$dense" ] ||
  ! grep -q '"test_auc": [0-9.]*' <<<"$final"; then
  fail "--sparse-tables: exit $rc, sent '$sent', dense '$dense': $out $(cat "$dir/err")"
else
  echo "ok: --sparse-tables: $sent bytes sent for the tables in 31 steps (dense: $dense)"
  shash=$(grep -o '"param_hash": "[0-9a-f]*"' <<<"$final")
  if [ -n "$mpiexec" ]; then
    out=$($mpiexec -np 2 "$dptrain" "${sparse[@]}" 2>"$dir/err")
    got=$(grep '"final": true' <<<"$out" | grep -o '"param_hash": "[0-9a-f]*"' | sort -u)
    if [ "$got" != "$shash" ]; then
      fail "--sparse-tables, 2 ranks: '$got', 2 threads: '$shash': $(tail -3 "$dir/err")"
    else
      echo "ok: --sparse-tables: 2 ranks equal 2 thread replicas ($shash)"
    fi
    # ranks started with and without it stop at start-up, naming it
    if timeout 60 $mpiexec -np 1 "$dptrain" "${sparse[@]}" : -np 1 "$dptrain" "${base[@]}" \
      --optimizer sgd --global-batch 512 --epochs 1 >/dev/null 2>"$dir/err" ||
      ! grep -q "disagree on sparse table gradients (sparse_tables)" "$dir/err"; then
      fail "ranks with and without --sparse-tables: $(head -3 "$dir/err")"
    else
      echo "ok: ranks with and without --sparse-tables refused at start-up"
    fi
  fi
fi

# The tables' default is Adam with catch-up at --table-lr 0.001: naming both gives the same
# parameters; the other table optimizers and another --table-lr give others, and the loss falls.
ahash=$("$dptrain" "${sparse[@]}" --replicas 2 --table-optimizer adam --table-lr 0.001 \
  2>"$dir/err" | grep '"final": true' | grep -o '"param_hash": "[0-9a-f]*"')
[ -n "$ahash" ] && [ "$ahash" = "${shash:-}" ] ||
  fail "default table optimizer: '${shash:-}', adam at 0.001: '$ahash'"
for opt in "--table-optimizer sgd" "--table-optimizer rowwise-adagrad" \
  "--table-optimizer rowwise-adam" "--table-lr 0.003"; do
  # shellcheck disable=SC2086
  out=$("$dptrain" "${sparse[@]}" --replicas 2 $opt 2>"$dir/err")
  rc=$?
  ohash=$(grep '"final": true' <<<"$out" | grep -o '"param_hash": "[0-9a-f]*"')
  losses=$(grep -o '"train_loss": [0-9.]*' <<<"$out" | cut -d' ' -f2 | head -1)
  if [ $rc -ne 0 ] || [ -z "$ohash" ] || [ "$ohash" = "${shash:-}" ] ||
    ! awk -v l="$losses" 'BEGIN { exit !(l > 0 && l < 0.6931) }'; then
    fail "$opt: exit $rc, '$ohash' (default '${shash:-}'), loss '$losses': $(tail -3 "$dir/err")"
  else
    echo "ok: $opt: loss $losses, $ohash"
  fi
done
refused "--table-lr without --sparse-tables" "--table-lr needs --sparse-tables" "${base[@]}" \
  --table-lr 0.1
refused "bad --table-lr" "bad value '-1' for --table-lr" "${base[@]}" --sparse-tables \
  --table-lr -1

# A checkpoint on these shards; resuming it on other shards is refused.
"$dptrain" "${base[@]}" --global-batch 512 --epochs 1 --checkpoint-dir "$dir/ck" >/dev/null 2>&1 ||
  fail "checkpointed run failed"
refused "resume on other shards" "was saved with training samples 16000" train --model dlrm \
  --backend cpu --data "$dir/s/synth-0000[0-2].bin" --global-batch 512 --epochs 2 \
  --checkpoint-dir "$dir/ck" --resume

[ $failures -eq 0 ] && echo "all passed" && rm -rf "$dir"
[ $failures -eq 0 ]
