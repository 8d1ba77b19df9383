#!/usr/bin/env bash
# dptrain data images on a folder of 3 classes of PNG and JPEG files (tests/fixtures/
# image_folder_gen.c), some corrupt or truncated: the bad ones named on stderr and skipped (or the
# first one stops the conversion), the summary line, shapes, labels, class names and known
# pixels; then 2 ranks (or 2 thread replicas without MPI) train on it to the weights of one
# replica on the same global batch (within 1e-5, as the cluster test compares runs).
# Usage: images_cli_test.sh <dptrain> <image_folder_gen> <scratch dir> [mpiexec]
set -uo pipefail
dptrain=$1 gen=$2 scratch=$3 mpiexec=${4:-}
export OPENBLAS_NUM_THREADS=1
failures=0
source "$(dirname "${BASH_SOURCE[0]}")/cli_lib.sh"
rm -rf "$scratch"
mkdir -p "$scratch"
n=100
"$gen" make "$scratch/imgs" $n || { echo "FAIL: image_folder_gen make" >&2; exit 1; }

# 1. Converted: 3n + 8 images, the 5 bad ones named with their reason, 1 other file ignored.
out=$("$dptrain" data images "$scratch/imgs" --size 8 --out "$scratch/img.safetensors" \
  2>"$scratch/err")
[ $? -eq 0 ] || fail "conversion failed: $(cat "$scratch/err")"
want="converted $((3 * n + 8)) images of 3 classes (8x8, 3 channels) into $scratch/img.safetensors"
[[ $out == "$want"* ]] && [[ $out == *"; 5 skipped, 1 other files ignored" ]] ||
  fail "summary: '$out'"
[ "$(grep -c '(skipped)$' "$scratch/err")" -eq 5 ] || fail "not 5 skipped lines: $(cat "$scratch/err")"
for bad in "Banana/cut.png: truncated PNG" "apple/bad1.png: neither JPEG nor PNG" \
  "apple/empty.jpg: neither JPEG nor PNG (0 bytes)" "cherry/cut.jpg: truncated JPEG" \
  "cherry/flip.png: bad PNG"; do
  grep -q "^dptrain data images: $scratch/imgs/$bad" "$scratch/err" ||
    fail "no line for $bad: $(cat "$scratch/err")"
done
"$gen" check "$scratch/img.safetensors" $n || fail "the converted data set (above)"

# 2. --on-bad-image stop: the first bad file in order fails the conversion, nothing written.
# (DIR with a trailing '/': the paths named have one '/' there.)
"$dptrain" data images "$scratch/imgs/" --size 8 --out "$scratch/stop.safetensors" \
  --on-bad-image stop >/dev/null 2>"$scratch/err"
[ $? -eq 1 ] && [ "$(wc -l <"$scratch/err")" -eq 1 ] &&
  grep -q "$scratch/imgs/Banana/cut.png: truncated PNG" "$scratch/err" &&
  [ ! -e "$scratch/stop.safetensors" ] ||
  fail "--on-bad-image stop: $(cat "$scratch/err")"

# 3. Grayscale at 6x4: x [N, 1, 6, 4].
"$dptrain" data images "$scratch/imgs" --size 6x4 --channels 1 --out "$scratch/gray.safetensors" \
  >/dev/null 2>&1 || fail "--channels 1 --size 6x4 failed"
head -c 400 "$scratch/gray.safetensors" | grep -aq "\"shape\":\[$((3 * n + 8)),1,6,4\]" ||
  fail "--channels 1 --size 6x4: $(head -c 300 "$scratch/gray.safetensors")"

# 4. Bad input: one line, no crash.
refused "no such folder" "cannot open the folder" data images "$scratch/none" --size 8 \
  --out "$scratch/x.safetensors"
mkdir -p "$scratch/empty/a" "$scratch/flat"
refused "empty class" "empty/a: no .jpg, .jpeg or .png file" data images "$scratch/empty" \
  --size 8 --out "$scratch/x.safetensors"
refused "no class folder" "no class folder" data images "$scratch/flat" --size 8 \
  --out "$scratch/x.safetensors"
refused "size 0" "bad value '0' for --size" data images "$scratch/imgs" --size 0 --out x
refused "size 8x" "bad value '8x' for --size" data images "$scratch/imgs" --size 8x --out x
refused "channels 2" "bad value '2' for --channels" data images "$scratch/imgs" --size 8 \
  --channels 2 --out x
refused "no --out" "--out FILE is needed" data images "$scratch/imgs" --size 8

# 5. Training on it: R ranks (threads without MPI) against one replica, same global batch.
base=(train --data "$scratch/img.safetensors" --backend cpu --global-batch 32 --epochs 1
  --max-steps 6 --seed 5 --mean 0.5 --std 0.25 --json)
one=$("$dptrain" "${base[@]}" --save-weights "$scratch/w1.safetensors" 2>"$scratch/err")
[ $? -eq 0 ] || fail "1 replica: $(cat "$scratch/err")"
if [ -n "$mpiexec" ]; then
  two=$($mpiexec -np 2 "$dptrain" "${base[@]}" --save-weights "$scratch/w2.safetensors" \
    2>"$scratch/err")
else
  two=$("$dptrain" "${base[@]}" --replicas 2 --save-weights "$scratch/w2.safetensors" \
    2>"$scratch/err")
fi
[ $? -eq 0 ] || fail "2 replicas: $(cat "$scratch/err")"
# The largest difference between the two weight files (the same header), as floats.
h=$(od -A n -t u8 -N 8 "$scratch/w1.safetensors" | tr -d ' ')
diff=$(paste <(od -A n -v -t f4 -w4 -j $((8 + h)) "$scratch/w1.safetensors") \
  <(od -A n -v -t f4 -w4 -j $((8 + h)) "$scratch/w2.safetensors") |
  awk '{ d = $1 - $2; if (d < 0) d = -d; if (d > m) m = d; n++ }
       END { if (n == 0) print "none"; else printf "%.3g\n", m }')
h1=$(grep -o '"param_hash": "[0-9a-f]*"' <<<"$one" | tail -n 1)
h2=$(grep -o '"param_hash": "[0-9a-f]*"' <<<"$two" | sort -u | tail -n 1)
if awk -v d="$diff" 'BEGIN { exit !(d != "none" && d + 0 <= 1e-5) }'; then
  echo "ok: 2 replicas within 1e-5 of one (largest difference $diff; $h1, $h2)"
else
  fail "2 replicas against one: largest difference $diff ($h1, $h2)"
fi
grep -q '"steps": 6' <<<"$one" || fail "1 replica: not 6 steps: $one"

echo "$failures failed"
[ $failures -eq 0 ]
