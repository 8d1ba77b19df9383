#!/usr/bin/env bash
# Checkpoints through the dptrain command under mpirun: a run stopped by SIGTERM, or whose rank
# is SIGKILLed (with a checkpoint written every step), resumes to the parameters of the
# uninterrupted run; a corrupt newest checkpoint is passed over; a changed setting is refused;
# dptrain run relaunches a failed job from its checkpoint.
# Usage: resume_cli_test.sh <dptrain> <scratch dir> <mpiexec>
set -uo pipefail
dptrain=$1 scratch=$2 mpiexec=$3
[ -n "$mpiexec" ] || { echo "no mpiexec: skipped"; exit 77; }
rm -rf "$scratch" && mkdir -p "$scratch"
export OPENBLAS_NUM_THREADS=1 POCL_MAX_PTHREAD_COUNT=1
failures=0
# shellcheck source=cli_lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/cli_lib.sh"

data="$scratch/data"
make_idx "$data" train 320
make_idx "$data" t10k 40

# 400 epochs of 10 steps: a few seconds, time enough to interrupt.
common=(train --data "$data" --hidden 64 --epochs 400 --quiet --json)
args=("${common[@]}" --global-batch 32)
hash_of() { grep '"final"' "$1" | sed 's/.*"param_hash": "\([0-9a-f]*\)".*/\1/'; }
mpirun2() { $mpiexec -np 2 "$@"; }

mpirun2 "$dptrain" "${args[@]}" >"$scratch/ref.json" 2>"$scratch/ref.err" ||
  fail "the uninterrupted run failed: $(tail -n 2 "$scratch/ref.err")"
ref=$(hash_of "$scratch/ref.json")
[ -n "$ref" ] || fail "no final param_hash in the uninterrupted run"

# The pid of rank R of the job whose checkpoint directory is DIR (its environment says).
rank_pid() {
  local dir=$1 r=$2
  for p in $(pgrep -f -- "--checkpoint-dir $dir"); do
    tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$r" &&
      { echo "$p"; return; }
  done
}

# Rank R's pid once the job training into DIR has written its first checkpoint (so it is past
# its start-up and its signal handlers are in place); empty after 120 s without (a sanitizer
# build on a loaded host can take a minute to start).
training_pid() {
  local dir=$1 r=$2 i=0 pid=""
  # compgen lists names without opening them: ls fails when the run deletes an old checkpoint
  # between the glob and its stat
  while [ $i -lt 1200 ]; do
    if compgen -G "$dir/ckpt-*.safetensors" >/dev/null; then
      pid=$(rank_pid "$dir" "$r")
      [ -n "$pid" ] && break
    fi
    sleep 0.1
    i=$((i + 1))
  done
  echo "$pid"
}

# Starts the job with checkpoints into DIR (extra options after it) in the background; once it
# trains, sends rank R SIGNAL; then waits for the job: its status in rc, the seconds it took
# after the signal in took.
interrupt() {
  local dir=$1 r=$2 sig=$3
  shift 3
  mpirun2 "$dptrain" "${args[@]}" --checkpoint-dir "$dir" "$@" >"$dir.out" 2>"$dir.err" &
  local job=$! pid
  pid=$(training_pid "$dir" "$r")
  [ -n "$pid" ] && kill "-$sig" "$pid" || echo "no rank $r training into $dir" >&2
  local t0=$(date +%s.%N)
  wait $job; rc=$?
  took=$(echo "$(date +%s.%N) - $t0" | bc)
}

resume_hash() { # DIR: resumes the run to its end, prints the final param_hash
  mpirun2 "$dptrain" "${args[@]}" --checkpoint-dir "$1" --resume >"$1.resumed" 2>"$1.rerr"
  hash_of "$1.resumed"
}

# 1. SIGTERM to rank 1: every rank finishes the step, a checkpoint is written, exit status 75.
dir="$scratch/term"
interrupt "$dir" 1 TERM --checkpoint-every 50
[ $rc -eq 75 ] || fail "SIGTERM: exit status $rc, expected 75: $(tail -n 2 "$dir.err")"
grep -q "stopped on request: after step [0-9]* (request 15); resume from checkpoint $dir/ckpt-" \
  "$dir.err" || fail "SIGTERM: no line naming the checkpoint: $(tail -n 1 "$dir.err")"
[ "$(resume_hash "$dir")" = "$ref" ] || fail "SIGTERM: the resumed run differs: $(tail -n 2 "$dir.rerr")"
grep -q "resumed from $dir/ckpt-" "$dir.rerr" || fail "SIGTERM: no resume line"

# 2. SIGKILL of rank 1 while rank 0 writes a checkpoint after every step (the kill may land
# during a write, or between two): the job ends within 10 s naming rank 1, the newest checkpoint
# left verifies, and resuming reproduces the run.
dir="$scratch/kill"
interrupt "$dir" 1 KILL --checkpoint-every 1
[ $rc -ne 0 ] || fail "SIGKILL: the job exited 0"
[ "$(echo "$took < 10" | bc)" = 1 ] || fail "SIGKILL: the job took $took s to end"
grep -q "rank 1" "$dir.err" || fail "SIGKILL: no message naming rank 1: $(tail -n 3 "$dir.err")"
"$dptrain" checkpoint info "$dir" >"$dir.info" 2>&1 || fail "SIGKILL: no valid checkpoint: $(cat "$dir.info")"
[ "$(resume_hash "$dir")" = "$ref" ] || fail "SIGKILL: the resumed run differs: $(tail -n 2 "$dir.rerr")"

# 3. A flipped byte in the newest checkpoint: passed over, naming it; the one before resumes.
dir="$scratch/flip"
interrupt "$dir" 0 TERM --checkpoint-every 50
newest=$(ls "$dir"/ckpt-*.safetensors | tail -n 1)
size=$(stat -c %s "$newest")
printf '\xff' | dd of="$newest" bs=1 seek=$((size - 3)) conv=notrunc status=none
[ "$(resume_hash "$dir")" = "$ref" ] || fail "flipped byte: the resumed run differs: $(tail -n 2 "$dir.rerr")"
grep -q "passing over checkpoint $newest: .*CRC32" "$dir.rerr" ||
  fail "flipped byte: no line naming the file and the check: $(grep -m1 passing "$dir.rerr")"

# 4. Another global batch is refused, naming it; another learning rate is allowed and said.
dir="$scratch/term"
mpirun2 "$dptrain" "${common[@]}" --global-batch 64 --checkpoint-dir "$dir" --resume >/dev/null 2>"$dir.bad"; rc=$?
[ $rc -eq 1 ] && grep -q "the global batch (global_batch) 32; this run has 64" "$dir.bad" ||
  fail "another global batch: exit $rc: $(tail -n 1 "$dir.bad")"
mpirun2 "$dptrain" "${args[@]}" --lr 0.01 --checkpoint-dir "$dir" --resume >/dev/null 2>"$dir.lr"; rc=$?
[ $rc -eq 0 ] && grep -q "the learning rate (optim.lr) changed since the checkpoint" "$dir.lr" ||
  fail "another lr: exit $rc: $(tail -n 1 "$dir.lr")"

# 5. dptrain run relaunches a job whose rank was killed, from its checkpoint, to the same end.
dir="$scratch/run"
"$dptrain" run --max-restarts 2 -- $mpiexec -np 2 "$dptrain" "${args[@]}" --checkpoint-dir "$dir" \
  --checkpoint-every 20 --resume >"$dir.out" 2>"$dir.err" &
job=$!
pid=$(training_pid "$dir" 1)
[ -n "$pid" ] && kill -KILL "$pid" || fail "dptrain run: no rank 1 training"
wait $job; rc=$?
[ $rc -eq 0 ] || fail "dptrain run: exit $rc: $(tail -n 2 "$dir.err")"
grep -q "restart 1 of 2" "$dir.err" || fail "dptrain run: no restart line: $(grep -m1 'dptrain run' "$dir.err")"
[ "$(hash_of "$dir.out")" = "$ref" ] || fail "dptrain run: the relaunched job's parameters differ"

[ $failures -eq 0 ] && echo "resume_cli: all passed"
exit $((failures > 0))
