#!/usr/bin/env bash
# dptrain's command-line conventions: --opt=value and --opt value alike, "--" ending the options,
# abbreviations refused, --config FILE under the command line, bad config files refused in one
# line naming the key and the file, --print-config read back by --config unchanged, and the
# options kept in --log-dir's settings.json and in checkpoints.
# Usage: cli_options_test.sh <dptrain> <scratch dir>
set -uo pipefail
dptrain=$1 scratch=$2
python=/usr/bin/python3
rm -rf "$scratch" && mkdir -p "$scratch"
export OPENBLAS_NUM_THREADS=1 POCL_MAX_PTHREAD_COUNT=1
failures=0
# shellcheck source=cli_lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/cli_lib.sh"

# same_json NAME A B: A and B are the same JSON value (objects compared key by key).
same_json() {
  if "$python" -c 'import json, sys; sys.exit(json.loads(sys.argv[1]) != json.loads(sys.argv[2]))' \
    "$2" "$3"; then
    echo "ok: $1"
  else
    fail "$1: '$2' is not '$3'"
  fi
}

# 1. --opt=value and --opt value read alike; a flag is true.
eq=$("$dptrain" train --epochs=3 --lr=0.1 --hidden=8,4 --sync-bn --print-config)
sp=$("$dptrain" train --epochs 3 --lr 0.1 --hidden 8,4 --sync-bn --print-config)
[ "$eq" = "$sp" ] || fail "--opt=value printed '$eq', --opt value '$sp'"
same_json "--print-config" "$sp" '{"hidden": "8,4", "sync-bn": true, "epochs": 3, "lr": 0.1, "model": "mlp"}'
same_json "a value starting with '-'" "$("$dptrain" train --max-skipped=-1 --print-config)" \
  '{"max-skipped": -1, "model": "mlp"}'
same_json "another command" "$("$dptrain" tokenize --vocab-size=300 --print-config)" \
  '{"vocab-size": 300}'
same_json "a short option" "$("$dptrain" report "$scratch" -o "$scratch/r.html" --print-config)" \
  "{\"o\": \"$scratch/r.html\"}"
same_json "a short option's value attached" "$("$dptrain" report "$scratch" -o"$scratch/r.html" \
  --print-config)" "{\"o\": \"$scratch/r.html\"}"
refused "a short option without its value" "dptrain report: -o needs a value" report "$scratch" -o
refused "an unknown short option" "dptrain report: unknown option '-x'" report "$scratch" -x
refused "a flag given a value" "--quiet takes no value" train --quiet=1
refused "a value missing at the end" "dptrain train: --epochs needs a value" train --epochs

# 2. Names are exact: a prefix is refused, also when only one option starts with it.
refused "an unambiguous prefix" "unknown option '--epo' (names are not abbreviated: --epochs)" \
  train --epo 3
refused "a prefix of --epochs=" "unknown option '--epoch'" train --epoch=3
refused "an ambiguous prefix" "unknown option '--check' (names are not abbreviated)" train --check 3
refused "a single dash" "unknown option '-epochs'" train -epochs 3

# 3. "--" ends the options: what follows is an argument even when it starts with '-'.
refused "train takes no arguments" "unknown argument '--epochs'" train -- --epochs 3
err=$("$dptrain" checkpoint info -- -no-such-file 2>&1 >/dev/null)
rc=$?
[ $rc -eq 1 ] && [[ $err == *"-no-such-file"* ]] && [[ $err != *"unknown option"* ]] ||
  fail "checkpoint info -- -no-such-file: exit $rc: $err"
"$dptrain" run --max-restarts=0 -- sh -c 'exit 0' 2>/dev/null || fail "run -- sh -c 'exit 0' failed"
"$dptrain" run --restart-delay 0 --max-restarts 1 -- sh -c 'exit 3' 2>"$scratch/err"
rc=$?
[ $rc -eq 3 ] && grep -q "giving up after 1 restart" "$scratch/err" ||
  fail "run -- sh -c 'exit 3': exit $rc: $(cat "$scratch/err")"

# 4. --config: the file's options, the command line's over them.
cat >"$scratch/c.json" <<'EOF'
{"epochs": 2, "lr": 0.5, "model": "mlp", "hidden": "8", "global-batch": 40, "quiet": true,
 "no-shuffle": false, "backend": "cpu", "seed": 7}
EOF
same_json "--config under the command line" \
  "$("$dptrain" train --lr 0.25 --config "$scratch/c.json" --seed=9 --print-config)" \
  '{"model": "mlp", "hidden": 8, "backend": "cpu", "global-batch": 40, "epochs": 2,
    "seed": 9, "lr": 0.25, "quiet": true}'
# What --print-config prints, --config reads back to the same.
printf '{"model": "bert", "text": ["a", "b"], "layers": 2, "dropout": 0.05}' >"$scratch/b.json"
"$dptrain" train --config "$scratch/b.json" --clip-norm 1e-3 --mean 0.5 --std 0.25 --seed 7 \
  --print-config >"$scratch/p1.json" || fail "bert --print-config failed"
"$dptrain" train --config "$scratch/p1.json" --print-config >"$scratch/p2.json" ||
  fail "--config of --print-config's output failed"
cmp -s "$scratch/p1.json" "$scratch/p2.json" &&
  same_json "repeatable options as arrays" "$(cat "$scratch/p2.json")" \
    '{"model": "bert", "mean": 0.5, "std": 0.25, "text": ["a", "b"], "layers": 2,
      "dropout": 0.05, "seed": 7, "clip-norm": 0.001}' ||
  fail "--print-config read back: $(diff "$scratch/p1.json" "$scratch/p2.json")"
# A repeatable option on the command line replaces the file's list.
same_json "a repeatable option overridden" \
  "$("$dptrain" train --config "$scratch/p1.json" --text c --print-config |
    "$python" -c 'import json, sys; print(json.dumps(json.load(sys.stdin)["text"]))')" '["c"]'

# 5. Bad files: one line naming the file and the key, exit 2.
bad() { # bad NAME NEEDLE JSON [ARGS...]
  printf '%s' "$3" >"$scratch/bad.json"
  refused "$1" "$2" train --config "$scratch/bad.json" --data "$scratch/none" "${@:4}"
}
bad "an unknown key" "--config $scratch/bad.json: unknown option \"epoch\" (dptrain train takes no --epoch)" '{"epoch": 3}'
bad "a string for an integer" "--config $scratch/bad.json: \"epochs\" must be an integer" '{"epochs": "3"}'
bad "a real for an integer" "\"epochs\" must be an integer" '{"epochs": 2.5}'
bad "a number for a flag" "\"quiet\" must be true or false" '{"quiet": 1}'
bad "a number for a path" "\"data\" must be a string" '{"data": 3}'
bad "a list for a single value" "\"model\" must be a string or a number" '{"model": ["mlp"]}'
bad "a bad value" "--config $scratch/bad.json: bad value '0' for \"epochs\"" '{"epochs": 0}'
bad "a bad type overridden" "\"epochs\" must be an integer" '{"epochs": "x"}' --epochs 3
bad "not JSON" "--config $scratch/bad.json: " '{"epochs": 3,'
bad "not an object" "--config $scratch/bad.json: not a JSON object" '[1, 2]'
bad "a key twice" "duplicate object key" '{"epochs": 3, "epochs": 4}'
bad "--config in a config" "\"config\" is for the command line only" '{"config": "x.json"}'
refused "a missing file" "--config $scratch/none.json: unable to open" \
  train --config "$scratch/none.json"
refused "--config twice" "--config is given twice" train --config a --config b
refused "another command's key" "unknown option \"epochs\" (dptrain tokenize takes no --epochs)" \
  tokenize --config "$scratch/c.json"

# 6. A run from a config: its options in settings.json (with the model's name) and in the
# checkpoints.
data="$scratch/data"
make_idx "$data" train 200
make_idx "$data" t10k 40
printf '{"epochs": 2, "lr": 0.125, "hidden": "8", "global-batch": 40, "backend": "cpu"}' \
  >"$scratch/run.json"
"$dptrain" train --config "$scratch/run.json" --data "$data" --quiet --epochs 1 \
  --log-dir "$scratch/log" --checkpoint-dir "$scratch/ckpt" >"$scratch/out" 2>&1 ||
  fail "a run from --config: $(cat "$scratch/out")"
"$python" - "$scratch/log/settings.json" <<'PY' || fail "settings.json lacks the options"
import json, sys
s = json.load(open(sys.argv[1]))
o = s["options"]
assert o == {"hidden": 8, "data": o["data"], "quiet": True, "backend": "cpu", "log-dir": o["log-dir"],
             "global-batch": 40, "epochs": 1, "lr": 0.125, "checkpoint-dir": o["checkpoint-dir"],
             "model": "mlp"}, o
assert s["schedule"]["epochs"] == 1 and s["schedule"]["global_batch"] == 40, s["schedule"]
assert abs(s["optimizer"]["lr"] - 0.125) < 1e-9, s["optimizer"]
PY
"$dptrain" checkpoint info "$scratch/ckpt" --json >"$scratch/info.json" ||
  fail "checkpoint info: $(cat "$scratch/info.json")"
"$python" -c '
import json, sys
o = json.load(open(sys.argv[1]))["options"]
assert o["lr"] == 0.125 and o["epochs"] == 1 and o["model"] == "mlp", o' "$scratch/info.json" ||
  fail "the checkpoint lacks the options: $(cat "$scratch/info.json")"
"$dptrain" checkpoint info "$scratch/ckpt" | grep -q '^  lr: 0.125$' ||
  fail "checkpoint info does not print the options"

[ $failures -eq 0 ] || { echo "$failures failure(s)" >&2; exit 1; }
echo "cli_options: all passed"
