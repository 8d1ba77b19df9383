#!/usr/bin/env bash
# dptrain train --log-dir: the files of a run (settings.json, steps.jsonl, evals.jsonl, an event
# file) on 2 thread replicas and on 2 MPI ranks, the event file decoded by protobuf against the
# JSON lines (tb_events_check.py), a resumed run appending, and bad directories refused with
# exit 1 before anything is trained. Exit 77 (skipped) when everything else passed but
# /usr/bin/python3 lacks protobuf for the event file's check.
# Usage: log_dir_test.sh <dptrain> <scratch dir> <tb_events_check.py> [mpiexec]
set -uo pipefail
dptrain=$1 scratch=$2 check=$3 mpiexec=${4:-}
python=/usr/bin/python3
rm -rf "$scratch" && mkdir -p "$scratch"
export OPENBLAS_NUM_THREADS=1 POCL_MAX_PTHREAD_COUNT=1
failures=0 skipped=0
# shellcheck source=cli_lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/cli_lib.sh"

data="$scratch/data"
make_idx "$data" train 300
make_idx "$data" t10k 100
run() { "$dptrain" train --data "$data" --model mlp --global-batch 32 --quiet "$@"; }

# checks_json DIR STEPS REPLICAS: the files hold what the run did.
check_json() {
  local dir=$1 steps=$2 replicas=$3
  [ -s "$dir/settings.json" ] && [ -s "$dir/steps.jsonl" ] && [ -s "$dir/evals.jsonl" ] &&
    ls "$dir"/events.out.tfevents.* >/dev/null 2>&1 || { fail "$dir lacks a file: $(ls "$dir")"; return; }
  "$python" - "$dir" "$steps" "$replicas" <<'PY' || fail "$dir: the JSON files"
import json, sys
d, steps, replicas = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
s = json.load(open(d + "/settings.json"))
assert s["replicas"] == replicas and s["world_size"] == replicas, s
assert s["schedule"]["global_batch"] == 32 and s["optimizer"]["kind"] == "sgd", s
lines = [json.loads(l) for l in open(d + "/steps.jsonl")]
assert [l["step"] for l in lines] == list(range(1, steps + 1)), lines
keys = {"step", "epoch", "loss", "lr", "grad_norm", "samples_per_sec", "seconds",
        "compute_seconds", "exchange_seconds", "exposed_seconds", "skipped", "rolled_back"}
for l in lines:
    assert set(l) == keys, l
    assert l["loss"] > 0 and l["lr"] > 0 and l["samples_per_sec"] > 0, l
    assert l["skipped"] is False and l["rolled_back"] is False, l
evals = [json.loads(l) for l in open(d + "/evals.jsonl")]
assert evals and 0 <= evals[-1]["accuracy"] <= 1 and evals[-1]["step"] == steps, evals
PY
}

# 1. Two thread replicas, clipped (the step agrees on the gradient norm): the files.
run --replicas 2 --max-steps 6 --clip-norm 1 --log-dir "$scratch/threads" >/dev/null 2>"$scratch/err" ||
  fail "2 replicas with --log-dir: $(cat "$scratch/err")"
check_json "$scratch/threads" 6 2
grep -q '"grad_norm":[0-9]' "$scratch/threads/steps.jsonl" || fail "no gradient norm with --clip-norm"

# 2. A fresh run into a directory holding a log: refused, the log left as it was.
cp "$scratch/threads/steps.jsonl" "$scratch/steps.before"
run --max-steps 2 --log-dir "$scratch/threads" --save-weights "$scratch/w1.st" >"$scratch/out" 2>"$scratch/err"
rc=$?
[ $rc -eq 1 ] && grep -q "holds another run's log" "$scratch/err" && [ ! -e "$scratch/w1.st" ] &&
  ! grep -q "^epoch" "$scratch/out" && cmp -s "$scratch/steps.before" "$scratch/threads/steps.jsonl" ||
  fail "a second run into a used log directory: exit $rc, $(cat "$scratch/err")"

# 3. Bad directories: a regular file, a path under one, one that cannot be made. Exit 1, one
#    line naming the path, nothing trained or saved.
: >"$scratch/plain"
for bad in "$scratch/plain" "$scratch/plain/sub" /proc/dptrain-log-test/run; do
  run --max-steps 2 --log-dir "$bad" --save-weights "$scratch/w2.st" >"$scratch/out" 2>"$scratch/err"
  rc=$?
  [ $rc -eq 1 ] && grep -q "log directory $bad" "$scratch/err" && [ ! -e "$scratch/w2.st" ] &&
    ! grep -q "^epoch" "$scratch/out" || fail "--log-dir $bad: exit $rc, $(cat "$scratch/err")"
done
if [ "$(id -u)" -ne 0 ]; then # root writes anywhere
  mkdir -p "$scratch/readonly" && chmod 555 "$scratch/readonly"
  run --max-steps 2 --log-dir "$scratch/readonly/run" >/dev/null 2>"$scratch/err"
  rc=$?
  [ $rc -eq 1 ] && grep -q "readonly/run" "$scratch/err" || fail "a read-only parent: exit $rc"
  chmod 755 "$scratch/readonly"
fi

# 4. A resumed run appends its steps and starts a second event file.
run --max-steps 4 --checkpoint-dir "$scratch/ck" --checkpoint-every 2 --log-dir "$scratch/res" \
  >/dev/null 2>"$scratch/err" || fail "the run to resume: $(cat "$scratch/err")"
sleep 1
run --max-steps 6 --checkpoint-dir "$scratch/ck" --checkpoint-every 2 --resume \
  --log-dir "$scratch/res" >/dev/null 2>"$scratch/err" || fail "the resumed run: $(cat "$scratch/err")"
check_json "$scratch/res" 6 1
[ "$(ls "$scratch/res"/events.out.tfevents.* | wc -l)" -eq 2 ] || fail "resumed: not 2 event files"

# 5. Two MPI ranks (else the thread replicas' log): every record of the event file decoded.
dir="$scratch/threads"
if [ -n "$mpiexec" ]; then
  dir="$scratch/mpi"
  $mpiexec -np 2 "$dptrain" train --data "$data" --model mlp --global-batch 32 --quiet \
    --max-steps 6 --log-dir "$dir" >/dev/null 2>"$scratch/err" || fail "2 ranks: $(cat "$scratch/err")"
  check_json "$dir" 6 2
fi
"$python" "$check" "$dir" >"$scratch/check" 2>&1
rc=$?
if [ $rc -eq 77 ]; then
  skipped=1
  cat "$scratch/check"
elif [ $rc -ne 0 ]; then
  fail "the event file of $dir: $(cat "$scratch/check")"
fi

if [ $failures -ne 0 ]; then
  echo "$failures failure(s)" >&2
  exit 1
fi
[ $skipped -eq 0 ] || exit 77
echo "log_dir: all passed"
