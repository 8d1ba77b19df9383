#!/usr/bin/env bash
# dptrain train --model bert and dptrain eval on its weights, as a user meets them: a tiny BERT
# trained on a small generated text, its vocabulary beside the weights, eval agreeing with the
# run's last validation, and one-line errors for bad input.
# Usage: bert_cli_test.sh <dptrain> <scratch dir>
set -uo pipefail
dptrain=$1 scratch=$2
export OPENBLAS_NUM_THREADS=1 POCL_MAX_PTHREAD_COUNT=1
rm -rf "$scratch" && mkdir -p "$scratch/text"
failures=0
fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }

# 400 short documents of a small lexicon, "%" between them.
words=(the cat sat on a mat and dog ran to his red ball in park sun)
x=7
for i in $(seq 1 400); do
  line=""
  for w in $(seq 1 $((5 + i % 7))); do
    x=$(((x * 1103515245 + 12345) % 2147483648))
    line+="${words[$((x / 65536 % 16))]} "
  done
  echo "$line."
  echo "%"
done >"$scratch/text/docs"
tiny=(--model bert --text "$scratch/text" --vocab-size 300 --seq-len 32 --layers 1
  --hidden-size 32 --heads 2 --ffn 64 --backend cpu --quiet)

# 1. Training: the text and model lines, the baseline once, validation metrics per epoch.
out=$("$dptrain" train "${tiny[@]}" --epochs 2 --lr 2e-3 --save-weights "$scratch/w.safetensors" \
  2>"$scratch/err")
rc=$?
[ $rc -eq 0 ] || fail "train exited $rc: $(cat "$scratch/err")"
grep -q "^text: $scratch/text: 1 files, 400 documents" <<<"$out" || fail "text line: $out"
grep -q "^sequences of 32 tokens: [0-9]* training, [0-9]* validation" <<<"$out" ||
  fail "sequences line: $out"
[ "$(grep -c '^unigram baseline: validation perplexity [0-9.]*$' <<<"$out")" = 1 ] ||
  fail "unigram line: $out"
grep -q "adamw lr 0.002 (linear)" <<<"$out" || fail "recipe line: $out"
[ "$(grep -c '^epoch .* val loss [0-9.]*  masked accuracy [0-9.]*  perplexity [0-9.]* (unigram [0-9.]*) .* tokens/s' <<<"$out")" = 2 ] ||
  fail "epoch lines: $out"
[ -s "$scratch/w.vocab.json" ] || fail "no vocabulary beside the weights"
last=$(grep '^epoch   2' <<<"$out" | sed 's/.*masked accuracy \([0-9.]*\)  perplexity \([0-9.]*\) .*/\1 \2/')

# 2. --json: the perplexity and tokens/s fields.
json=$("$dptrain" train "${tiny[@]}" --max-steps 3 --epochs 1 --json 2>"$scratch/err")
grep -q '"test_perplexity": [0-9.]*, "tokens_per_sec": [0-9.]*' <<<"$json" ||
  fail "json: $json $(cat "$scratch/err")"

# 3. eval: the vocabulary beside the weights, the same validation set and figures.
ev=$("$dptrain" eval --weights "$scratch/w.safetensors" --text "$scratch/text" --backend cpu \
  2>"$scratch/err")
[ $? -eq 0 ] || fail "eval failed: $(cat "$scratch/err")"
got=$(grep '^masked accuracy' <<<"$ev" | sed 's/masked accuracy \([0-9.]*\) .* perplexity \([0-9.]*\);.*/\1 \2/')
[ "$got" = "$last" ] || fail "eval gives '$got', the run's last epoch '$last': $ev"
grep -q "unigram baseline perplexity [0-9.]*$" <<<"$ev" || fail "eval baseline: $ev"
evj=$("$dptrain" eval --weights "$scratch/w.safetensors" --text "$scratch/text" --backend cpu \
  --json 2>"$scratch/err")
grep -q '^{"sequences": [0-9]*, "targets": [0-9]*, "correct": [0-9]*, "loss": [0-9.]*, "accuracy": [0-9.]*, "perplexity": [0-9.]*, "unigram_perplexity": [0-9.]*}$' <<<"$evj" ||
  fail "eval --json: $evj $(cat "$scratch/err")"

# 4. Bad input: one line, non-zero exit (usage errors 2, failures 1).
bad() { # bad NAME RC PATTERN -- COMMAND ARGS...
  local name=$1 want=$2 pattern=$3
  shift 4
  "$dptrain" "$@" >/dev/null 2>"$scratch/err"
  local got=$?
  [ $got -eq "$want" ] && grep -q -- "$pattern" "$scratch/err" ||
    fail "$name: exit $got (want $want): $(head -n 2 "$scratch/err")"
}
: >"$scratch/empty.txt"
printf 'good text\nthen \xff here\n' >"$scratch/latin.txt"
printf 'a few words only\n' >"$scratch/small.txt"
bad "empty text" 1 "^dptrain: invalid argument: $scratch/empty.txt: no text" -- \
  train --model bert --text "$scratch/empty.txt"
bad "not UTF-8" 1 "^dptrain: bad file format: $scratch/latin.txt: not UTF-8 text: invalid byte 0xff at byte offset 15$" -- \
  train --model bert --text "$scratch/latin.txt"
bad "too little text" 1 "less than one sequence of 128" -- \
  train --model bert --text "$scratch/small.txt"
bad "heads" 2 "^dptrain train: --heads 3 does not divide --hidden-size 32$" -- \
  train "${tiny[@]}" --heads 3
bad "--hidden with bert" 2 "^dptrain train: --hidden does not apply to --model bert" -- \
  train "${tiny[@]}" --hidden 512
bad "positions" 2 "^dptrain train: --seq-len 32 is beyond the position table (--max-positions 16)$" -- \
  train "${tiny[@]}" --max-positions 16
bad "eval positions" 1 "position_embedding) has 32 positions, the sequence has 64" -- \
  eval --weights "$scratch/w.safetensors" --text "$scratch/text" --seq-len 64
"$dptrain" tokenize --data "$scratch/text" --vocab-size 280 --out "$scratch/other.json" >/dev/null
bad "other vocabulary" 1 "other.json does not match the weights $scratch/w.safetensors: a vocabulary of 280 tokens" -- \
  eval --weights "$scratch/w.safetensors" --text "$scratch/text" --vocab "$scratch/other.json"
bad "normalization" 1 "a text dataset takes no normalization" -- \
  train "${tiny[@]}" --mean 0.5 --std 0.5 --max-steps 1
bad "text for images" 2 "^dptrain train: --text is for --model bert$" -- \
  train --text "$scratch/text"
bad "predict on bert" 1 "is a masked-language model" -- \
  predict --weights "$scratch/w.safetensors" --data "$scratch/text"

[ $failures -eq 0 ] && echo "bert cli: all passed"
exit $((failures > 0))
