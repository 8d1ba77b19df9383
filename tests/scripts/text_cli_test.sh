#!/usr/bin/env bash
# dptrain tokenize as a user meets it: a vocabulary learned from a small generated text, read
# back to encode, the same file twice from the same text, the sequences exported (--export),
# and one-line errors for bad input.
# Usage: text_cli_test.sh <dptrain> <scratch dir>
set -uo pipefail
dptrain=$1 scratch=$2
export OPENBLAS_NUM_THREADS=1 POCL_MAX_PTHREAD_COUNT=1
rm -rf "$scratch" && mkdir -p "$scratch"
failures=0
fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }

# 200 short fortunes, "%" between them, in two files of a directory (and an index to skip).
mkdir -p "$scratch/text"
for i in $(seq 1 200); do
  echo "Fortune $i: the lower the better, said the slowest of the newest walkers."
  [ $((i % 3)) -eq 0 ] && printf '\t\t-- Someone, %d\n' "$i"
  echo "%"
done >"$scratch/text/a"
printf 'one more\n%%\nand the last one\n' >"$scratch/text/b"
printf '\x00\x01\x02' >"$scratch/text/a.dat"

# 1. Learning a vocabulary: the report, the file.
out=$("$dptrain" tokenize --data "$scratch/text" --vocab-size 300 --out "$scratch/v.json" \
  --seq-len 32 2>"$scratch/err")
rc=$?
[ $rc -eq 0 ] || fail "tokenize exited $rc: $(cat "$scratch/err")"
grep -q "^corpus: 2 files, 202 documents, [0-9]* bytes$" <<<"$out" || fail "corpus line: $out"
grep -q "^vocabulary: 300 tokens (40 merges) learned in .*, saved to $scratch/v.json$" <<<"$out" ||
  fail "vocabulary line: $out"
grep -q "^tokens: [0-9]*, [0-9.]* bytes per token" <<<"$out" || fail "tokens line: $out"
grep -q "^sequences of 32 tokens: [0-9]* training, [0-9]* validation" <<<"$out" ||
  fail "sequences line: $out"
grep -q '"format": "dptrain-bpe"' "$scratch/v.json" || fail "v.json is no vocabulary"
[ ! -e "$scratch/v.json.tmp" ] || fail "temporary vocabulary file left behind"

# 2. The same text gives the same file.
"$dptrain" tokenize --data "$scratch/text" --vocab-size 300 --out "$scratch/v2.json" >/dev/null
cmp -s "$scratch/v.json" "$scratch/v2.json" || fail "two runs learned different vocabularies"

# 3. Read back: the same token count, and --encode shows ids and pieces that spell the text.
out2=$("$dptrain" tokenize --data "$scratch/text" --vocab "$scratch/v.json" --seq-len 32 \
  --encode "the lowest walkers" 2>"$scratch/err")
[ $? -eq 0 ] || fail "tokenize --vocab failed: $(cat "$scratch/err")"
[ "$(grep '^tokens:' <<<"$out2" | cut -d' ' -f2)" = "$(grep '^tokens:' <<<"$out" | cut -d' ' -f2)" ] ||
  fail "the vocabulary read back counts other tokens: $out2"
grep -q "^ids: [0-9 ]*$" <<<"$out2" || fail "no ids line: $out2"
spelled=$(grep '^pieces:' <<<"$out2" | sed 's/^pieces: //; s/" "//g; s/^"//; s/"$//')
[ "$spelled" = "the lowest walkers" ] || fail "pieces spell '$spelled'"

# 4. --export: int32 tensors train [N, 32], val_inputs and val_labels [M, 32] with the counts
# the report gives, the metadata, [CLS] first; the same seed gives the same file, another seed
# another validation masking.
out3=$("$dptrain" tokenize --data "$scratch/text" --vocab "$scratch/v.json" --seq-len 32 \
  --export "$scratch/seqs.safetensors" --seed 3 2>"$scratch/err")
[ $? -eq 0 ] || fail "tokenize --export failed: $(cat "$scratch/err")"
ntrain=$(sed -n 's/^sequences of 32 tokens: \([0-9]*\) training, .*/\1/p' <<<"$out3")
nval=$(sed -n 's/^sequences of 32 tokens: [0-9]* training, \([0-9]*\) validation.*/\1/p' <<<"$out3")
grep -q "^exported: $ntrain training and $nval validation sequences (masked with seed 3, epoch 0) to $scratch/seqs.safetensors$" \
  <<<"$out3" || fail "export line: $out3"
st="$scratch/seqs.safetensors"
if [ -n "$ntrain" ] && [ "$ntrain" -gt 0 ] && [ -n "$nval" ] && [ "$nval" -gt 0 ]; then
  hlen=$(od -An -tu8 -N8 "$st" | tr -d ' ')
  header=$(head -c $((8 + hlen)) "$st" | tail -c +9)
  for want in "\"train\":{\"dtype\":\"I32\",\"shape\":\[$ntrain,32\]" \
    "\"val_inputs\":{\"dtype\":\"I32\",\"shape\":\[$nval,32\]" \
    "\"val_labels\":{\"dtype\":\"I32\",\"shape\":\[$nval,32\]" \
    '"vocab_size":"300"' '"seq_len":"32"' '"seed":"3"'; do
    grep -q "$want" <<<"$header" || fail "export header lacks $want: $header"
  done
  size=$(stat -c %s "$st")
  [ "$size" -eq $((8 + hlen + 4 * 32 * (ntrain + 2 * nval))) ] ||
    fail "export is $size bytes, not header + $ntrain + 2 x $nval sequences of 32 int32"
  [ "$(od -An -td4 -j $((8 + hlen)) -N4 "$st" | tr -d ' ')" = 1 ] ||
    fail "the first training sequence does not start with [CLS]"
else
  fail "no sequence counts in: $out3"
fi
"$dptrain" tokenize --data "$scratch/text" --vocab "$scratch/v.json" --seq-len 32 \
  --export "$scratch/seqs2.safetensors" --seed 3 >/dev/null 2>&1 &&
  cmp -s "$st" "$scratch/seqs2.safetensors" || fail "two exports with seed 3 differ"
"$dptrain" tokenize --data "$scratch/text" --vocab "$scratch/v.json" --seq-len 32 \
  --export "$scratch/seqs4.safetensors" --seed 4 >/dev/null 2>&1 &&
  ! cmp -s "$st" "$scratch/seqs4.safetensors" || fail "seeds 3 and 4 exported the same masking"
[ ! -e "$st.tmp" ] || fail "temporary export file left behind"

# 5. Bad input: one line naming the file or the value; usage errors exit 2, failures 1.
bad() { # bad NAME RC PATTERN -- ARGS...
  local name=$1 want=$2 pattern=$3
  shift 4
  "$dptrain" tokenize "$@" >/dev/null 2>"$scratch/err"
  local got=$?
  [ $got -eq "$want" ] && grep -q -- "$pattern" "$scratch/err" ||
    fail "$name: exit $got (want $want): $(head -n 2 "$scratch/err")"
}
bad "missing data" 1 "^dptrain tokenize: I/O error: $scratch/none: cannot open" -- \
  --data "$scratch/none" --out "$scratch/x.json"
[ "$(wc -l <"$scratch/err")" -eq 1 ] || fail "missing data: not one line: $(cat "$scratch/err")"
echo '{"format": "dptrain-bpe", "version": 9}' >"$scratch/bad.json"
bad "bad vocabulary" 1 "bad file format: $scratch/bad.json: \"version\" is 9" -- \
  --data "$scratch/text" --vocab "$scratch/bad.json"
bad "small vocabulary" 2 "^dptrain tokenize: bad value '10' for --vocab-size$" -- --vocab-size 10 \
  --out "$scratch/x.json"
bad "unknown option" 2 "unknown option '--bogus'" -- --bogus
bad "no output" 2 "--out (learn a vocabulary) or --vocab is needed" -- --data "$scratch/text"
bad "value missing" 2 "--seq-len needs a value" -- --out "$scratch/x.json" --seq-len
bad "bad seed" 2 "^dptrain tokenize: bad value 'x' for --seed$" -- --out "$scratch/x.json" --seed x
bad "export unwritable" 1 "$scratch/none/s.safetensors" -- --data "$scratch/text" --vocab \
  "$scratch/v.json" --export "$scratch/none/s.safetensors"
[ ! -e "$scratch/x.json" ] || fail "a failed run wrote a vocabulary"
"$dptrain" tokenize --help | grep -q -- "--vocab-size N" || fail "--help lacks --vocab-size"
"$dptrain" tokenize --help | grep -q -- "--export FILE" || fail "--help lacks --export"
"$dptrain" help | grep -q "^  tokenize " || fail "dptrain help does not list tokenize"

echo "text cli test: $failures failure(s)"
[ $failures -eq 0 ]
