#!/usr/bin/env bash
# A survivor's checkpoint: 2 ranks train with the full step and a checkpoint only every 100000
# steps; one rank is SIGKILLed (or SIGSTOPped: the other's deadline ends the job; or SIGKILLed
# without shared-memory channels: mpirun's SIGTERM ends the survivor's wait) mid-run. The
# surviving rank writes the last completed step itself (with 3 ranks, both survivors race to it):
# one file, no temporary left, at most one step behind the last step logged, valid (dptrain
# checkpoint info), and `--resume` from it ends on the uninterrupted run's param_hash. Every rank
# is gone within the deadline + 2 s. With the sharded step the survivor writes nothing and says
# why.
# Usage: survivor_test.sh <dptrain> <scratch dir> <mpiexec>
set -uo pipefail
dptrain=$1 scratch=$2 mpiexec=$3
[ -n "$mpiexec" ] || { echo "SKIP: no mpiexec"; exit 77; }
$mpiexec --version 2>/dev/null | grep -Eqi "open ?mpi|openrte" || { echo "SKIP: not Open MPI"; exit 77; }
rm -rf "$scratch" && mkdir -p "$scratch" || exit 1
# 5 s: a sanitizer build takes seconds in MPI_Init, which the deadline also bounds
export OPENBLAS_NUM_THREADS=1 DPT_COMM_TIMEOUT=5
[ "$(id -u)" -ne 0 ] || export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
failures=0
# shellcheck source=cli_lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/cli_lib.sh"

data=$scratch/data
make_idx "$data" train 320
steps=4000
args=(train --backend cpu --data "$data" --hidden 64 --global-batch 32 --epochs 100000
  --max-steps "$steps" --seed 5 --quiet --json --checkpoint-every 100000)
export DPT_COMM_SHM=${DPT_COMM_SHM:-1}
job() {
  $mpiexec -np "${NP:-2}" -x OPENBLAS_NUM_THREADS -x DPT_COMM_TIMEOUT -x DPT_COMM_SHM "$dptrain" \
    "${args[@]}" "$@"
}
now() { date +%s.%N; }

job --full-step >"$scratch/ref.json" 2>"$scratch/ref.err" ||
  fail "the uninterrupted run failed: $(tail -n 2 "$scratch/ref.err")"
ref=$(final_hash "$scratch/ref.json")
[ -n "$ref" ] || fail "no final param_hash in the uninterrupted run"

# The pid of rank R of the job training into DIR.
rank_pid() {
  local p
  for p in $(pgrep -f -- "--checkpoint-dir $1"); do
    tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$2" &&
      { echo "$p"; return; }
  done
}
last_step() { tail -n 1 "$1/log/steps.jsonl" 2>/dev/null | sed -n 's/^{"step":\([0-9]*\),.*/\1/p'; }

# faulted NAME SIGNAL RANK [OPTIONS...]: the job into $scratch/NAME, SIGNAL to rank RANK once it
# has logged 500 steps; sets rc, took (seconds from the signal to the job's end); returns 1
# when the job never got the signal.
faulted() {
  local name=$1 sig=$2 rank=$3 d=$scratch/$1 i=0 pid=""
  shift 3
  mkdir -p "$d"
  job "$@" --checkpoint-dir "$d/ck" --log-dir "$d/log" >"$d/out.json" 2>"$d/err" &
  local m=$!
  while [ $i -lt 1200 ] && kill -0 $m 2>/dev/null; do
    [ "$(last_step "$d")" -ge 500 ] 2>/dev/null && pid=$(rank_pid "$d/ck" "$rank") && [ -n "$pid" ] &&
      break
    sleep 0.05
    i=$((i + 1))
  done
  [ -n "$pid" ] || { fail "$name: the job did not train (or ended first)"; wait $m; return 1; }
  local t
  t=$(now)
  kill -"$sig" "$pid"
  wait $m
  rc=$?
  took=$(awk -v a="$t" -v b="$(now)" 'BEGIN { printf "%.2f", b - a }')
}

# survived NAME SIGNAL RANK [WHY]: the checks of a fault the other rank survives; WHY: a text its
# failure line holds.
survived() {
  local name=$1 d=$scratch/$1 why=${4:-}
  faulted "$1" "$2" "$3" --full-step || return
  [ -z "$why" ] || grep -q "$why" "$d/err" ||
    fail "$name: no line saying '$why': $(grep -v '^-' "$d/err" | head -5)"
  [ $rc -ne 0 ] || fail "$name: exit 0 after the fault"
  awk -v t="$took" -v d="$DPT_COMM_TIMEOUT" 'BEGIN { exit !(t <= d + 2) }' ||
    fail "$name: the job ended $took s after the fault, past the deadline + 2 s"
  local line files step logged
  line=$(grep "checkpoint of the last completed step written: " "$d/err")
  files=$(compgen -G "$d/ck/ckpt-*.safetensors" | wc -l)
  step=$(sed -n 's/.*(step \([0-9]*\), .*/\1/p' <<<"$line")
  logged=$(last_step "$d")
  [ "$(wc -l <<<"$line")" -eq 1 ] && [ -n "$step" ] ||
    { fail "$name: no survivor's line: $(grep -v '^-' "$d/err" | head -5)"; return; }
  [ "$files" -eq 1 ] && [ -f "$d/ck/ckpt-$(printf %012d "$step").safetensors" ] ||
    fail "$name: $files checkpoint files, expected the one of step $step"
  ! compgen -G "$d/ck/.ckpt-*" >/dev/null || fail "$name: a temporary file is left"
  [ $((logged - step)) -le 1 ] && [ "$step" -lt $steps ] ||
    fail "$name: checkpoint of step $step, last step logged $logged: more than 1 step lost"
  "$dptrain" checkpoint info "$d/ck" >"$d/info" 2>&1 || fail "$name: not valid: $(tail -1 "$d/info")"
  job --full-step --checkpoint-dir "$d/ck" --resume >"$d/resumed.json" 2>"$d/resumed.err" ||
    fail "$name: the resumed run failed: $(tail -n 2 "$d/resumed.err")"
  grep -q "resumed from $d/ck/ckpt-$(printf %012d "$step").safetensors: step $step," "$d/resumed.err" ||
    fail "$name: no resume line from step $step: $(grep resum "$d/resumed.err")"
  local got
  got=$(final_hash "$d/resumed.json")
  [ "$got" = "$ref" ] || fail "$name: resumed to param_hash '$got', the uninterrupted run's is $ref"
  echo "ok: $name: ended $took s after the fault; step $step written, $logged logged; resumed to $got"
}

survived kill1 KILL 1
survived kill0 KILL 0
survived stop0 STOP 0
# Over MPI's point-to-point (no shared-memory channels) the survivor learns nothing of the death:
# mpirun's SIGTERM ends its wait (the launcher's teardown, dpt_comm_note_teardown).
DPT_COMM_SHM=0 survived p2p KILL 1 "the launcher is ending the job (SIGTERM)"

# 3 ranks, rank 2 killed: both survivors write the same step (or find it written), one valid file.
d=$scratch/three
if NP=3 faulted three KILL 2 --full-step; then
  n=$(grep -c "rank [01]: \(checkpoint of the last completed step written\|the checkpoint of the last completed step exists\): " "$d/err")
  files=$(compgen -G "$d/ck/ckpt-*.safetensors" | wc -l)
  [ "$n" -eq 2 ] && [ "$files" -eq 1 ] && ! compgen -G "$d/ck/.ckpt-*" >/dev/null ||
    fail "three: $n survivors' lines (2 expected), $files files (1 expected): $(grep -v '^-' "$d/err" | head -4)"
  "$dptrain" checkpoint info "$d/ck" >"$d/info" 2>&1 || fail "three: not valid: $(tail -1 "$d/info")"
  echo "ok: three: $(grep -c 'written: ' "$d/err") written, $files file"
fi

# The sharded step: the survivor has 1/R of the optimizer state, writes nothing and says so.
faulted sharded KILL 1 && { [ $rc -ne 0 ] || fail "sharded: exit 0 after the fault"; }
grep -q "rank 0: no checkpoint of step [0-9]* from this rank: the sharded step" "$scratch/sharded/err" ||
  fail "sharded: no line saying why nothing was written: $(grep -v '^-' "$scratch/sharded/err" | head -3)"
! compgen -G "$scratch/sharded/ck/*ckpt-*" >/dev/null || fail "sharded: a checkpoint was written"
[ $failures -eq 0 ] && echo "ok: sharded: nothing written, the reason given"

echo "$failures failed"
[ $failures -eq 0 ]
