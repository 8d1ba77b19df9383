#!/usr/bin/env bash
# dptrain run under failures: a job whose rank 0 dies once (DPT_FAULT_EXIT_AT_STEP with
# DPT_FAULT_ONCE_FILE) resumes and ends with the parameters of the uninterrupted run; a job that
# dies at the same step every time, and one that fails the same way every time, stop after two
# attempts without progress with a line per attempt (the trainer's failure record named); a host
# file that loses a line between attempts shrinks {ranks} from 2 to 1 and drops a host that does
# not resolve, and grows back with it; --min-ranks above the slots is refused, and stops the
# restarts when the file shrinks below it; a full checkpoint disk is named, and stops them too.
# Usage: run_cmd_test.sh <dptrain> <scratch dir> <mpiexec>
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

# 3 epochs of 10 steps, a checkpoint every 4: the fault after step 10 resumes from step 8.
args=(train --data "$data" --hidden 64 --epochs 3 --global-batch 32 --quiet --json --checkpoint-every 4)
hash_of() { grep '"final"' "$1" | sed 's/.*"param_hash": "\([0-9a-f]*\)".*/\1/'; }
run=("$dptrain" run --restart-delay 0)
line() { grep -c -- "$1" "$2"; } # the lines of FILE matching PATTERN

$mpiexec -np 2 "$dptrain" "${args[@]}" >"$scratch/ref.json" 2>"$scratch/ref.err" ||
  fail "the uninterrupted run failed: $(tail -n 2 "$scratch/ref.err")"
ref=$(hash_of "$scratch/ref.json")
[ -n "$ref" ] || fail "no final param_hash in the uninterrupted run"

# 1. Rank 0 of two exits with 137 after step 10, once: the attempt's line says so and the steps
# gained, the second attempt resumes at step 8 and ends as the uninterrupted run.
dir="$scratch/once"
DPT_FAULT_EXIT_AT_STEP=10 DPT_FAULT_ONCE_FILE="$dir.fired" "${run[@]}" -- $mpiexec -np 2 "$dptrain" \
  "${args[@]}" --checkpoint-dir "$dir" --resume >"$dir.out" 2>"$dir.err"
rc=$?
[ $rc -eq 0 ] || fail "killed once: exit $rc: $(grep 'dptrain run' "$dir.err")"
[ "$(line '^dptrain run: attempt 1: exited with status 137[,;].* resumed at step 0, +8 steps; restart 1 of 3$' "$dir.err")" = 1 ] &&
  [ "$(line '^dptrain run: attempt 2: finished$' "$dir.err")" = 1 ] ||
  fail "killed once: attempt lines: $(grep 'dptrain run' "$dir.err")"
grep -q "resumed from $dir/ckpt-000000000008.safetensors: step 8" "$dir.err" || fail "killed once: no resume at step 8"
[ "$(hash_of "$dir.out")" = "$ref" ] || fail "killed once: the resumed job's parameters differ from the uninterrupted run's"
echo "ok: killed once: $(grep -m1 'attempt 1' "$dir.err")"

# 2. The same fault every time (one process): +8 steps, then +0 twice; the job's status.
dir="$scratch/always"
DPT_FAULT_EXIT_AT_STEP=10 "${run[@]}" -- "$dptrain" "${args[@]}" --checkpoint-dir "$dir" --resume \
  >"$dir.out" 2>"$dir.err"
rc=$?
[ $rc -eq 137 ] && [ "$(grep -c '^dptrain run: attempt' "$dir.err")" = 3 ] &&
  grep -q '^dptrain run: attempt 1: exited with status 137, resumed at step 0, +8 steps; restart 1 of 3$' "$dir.err" &&
  grep -q '^dptrain run: attempt 2: exited with status 137, resumed at step 8, +0 steps; restart 2 of 3$' "$dir.err" &&
  grep -q '^dptrain run: attempt 3: exited with status 137, resumed at step 8, +0 steps$' "$dir.err" &&
  grep -q '^dptrain run: giving up: attempts 2 and 3 ended without a checkpoint newer than step 8 (no progress twice in a row)$' "$dir.err" ||
  fail "same step every time: exit $rc: $(grep 'dptrain run' "$dir.err")"
echo "ok: same step every time: $(grep 'giving up' "$dir.err")"

# 3. A failure the trainer records (a diverging run, two thread replicas): its rank and cause
# in each attempt's line, from the record, and no progress after two attempts.
dir="$scratch/diverge"
"${run[@]}" -- "$dptrain" "${args[@]}" --replicas 2 --lr 1e30 --checkpoint-dir "$dir" --resume \
  >"$dir.out" 2>"$dir.err"
rc=$?
[ $rc -eq 1 ] && [ "$(grep -c '^dptrain run: attempt' "$dir.err")" = 2 ] &&
  [ "$(line '^dptrain run: attempt [12]: exited with status 1, rank 0: non-finite values: the loss is not finite at step [0-9]* .*, resumed at step 0, +0 steps' "$dir.err")" = 2 ] &&
  grep -q '"disk_full":false' "$dir/failure.json" || fail "recorded failure: exit $rc: $(grep 'dptrain run' "$dir.err")"

# 4. Shrink: the host file loses a line during attempt 1 (2 slots, then 1); a host that does not
# resolve is dropped, named, every attempt. The job sees {ranks} and {hostfile} filled.
hosts="$scratch/hosts" dir="$scratch/shrink"
printf '# two local slots\nlocalhost slots=1\n127.0.0.1 slots=1 max_slots=4\nno-such-host.invalid slots=4\n' >"$hosts"
job='echo "$1" >>"$0.ranks"; cat "$2" >>"$0.hosts"; sed -i "/^127/d" "$0"; shift 2; exec "$@"'
DPT_FAULT_EXIT_AT_STEP=10 DPT_FAULT_ONCE_FILE="$dir.fired" "${run[@]}" --hostfile "$hosts" --min-ranks 1 -- \
  sh -c "$job" "$hosts" '{ranks}' '{hostfile}' $mpiexec -np '{ranks}' "$dptrain" "${args[@]}" \
  --checkpoint-dir "$dir" --resume >"$dir.out" 2>"$dir.err"
rc=$?
[ $rc -eq 0 ] && [ "$(tr '\n' ' ' <"$hosts.ranks")" = "2 1 " ] &&
  [ "$(grep -c "dropped host 'no-such-host.invalid': it does not resolve" "$dir.err")" = 2 ] &&
  grep -q '^dptrain run: attempt 1 (2 ranks): exited with status 137[,;]' "$dir.err" &&
  grep -q "resumed from $dir/ckpt-000000000008.safetensors: step 8, .*saved by 2 replicas (the optimizer state is re-cut)" "$dir.err" &&
  [ "$(grep -c '"final"' "$dir.out")" = 1 ] &&
  [ "$(grep -vc '^localhost slots=1$' "$hosts.hosts")" = 1 ] && grep -q '^127.0.0.1 slots=1 max_slots=4$' "$hosts.hosts" ||
  fail "shrink: exit $rc, ranks '$(cat "$hosts.ranks" 2>/dev/null)', hosts '$(cat "$hosts.hosts" 2>/dev/null)': $(grep 'dptrain run' "$dir.err")"
echo "ok: shrink: attempts on $(tr '\n' ' ' <"$hosts.ranks")ranks"

# 5. --min-ranks: above the slots at the start, refused naming both; the file shrinking below it
# during the run stops the restarts with the job's status.
printf 'localhost slots=1\n127.0.0.1 slots=1\n' >"$hosts"
refused "min-ranks above the slots" "--min-ranks 3 is above the 2 slots of $hosts" run --hostfile "$hosts" --min-ranks 3 -- true
refused "min-ranks without a host file" "--min-ranks needs --hostfile" run --min-ranks 2 -- true
refused "placeholders without a host file" "{ranks} and {hostfile} need --hostfile" run -- echo '{ranks}'
"${run[@]}" --hostfile "$hosts" --min-ranks 2 -- sh -c 'sed -i "/^127/d" "$0"; exit 3' "$hosts" 2>"$scratch/min.err"
rc=$?
[ $rc -eq 3 ] && [ "$(grep -c '^dptrain run: attempt' "$scratch/min.err")" = 1 ] &&
  grep -q "^dptrain run: giving up: the host file $hosts lists 1 slot, fewer than --min-ranks 2$" "$scratch/min.err" ||
  fail "min-ranks during the run: exit $rc: $(cat "$scratch/min.err")"

# The file growing back between attempts grows {ranks} back: 2, then 1, then 2 again.
printf 'localhost slots=1\n127.0.0.1 slots=1\n' >"$hosts"
rm -f "$hosts.seen"
job='echo "$1" >>"$0.seen"; case $(wc -l <"$0.seen") in 1) sed -i "/^127/d" "$0"; exit 1 ;;
  2) echo "127.0.0.1 slots=1" >>"$0"; exit 1 ;; esac'
"${run[@]}" --hostfile "$hosts" -- sh -c "$job" "$hosts" '{ranks}' 2>"$scratch/grow.err"
rc=$?
[ $rc -eq 0 ] && [ "$(tr '\n' ' ' <"$hosts.seen")" = "2 1 2 " ] &&
  grep -q '^dptrain run: attempt 2 (1 rank): exited with status 1; restart 2 of 3$' "$scratch/grow.err" ||
  fail "grow back: exit $rc, ranks '$(cat "$hosts.seen" 2>/dev/null)': $(cat "$scratch/grow.err")"

# 6. A full disk (a 96 KiB tmpfs in a mount namespace of our own: two checkpoints fit, the third
# does not): each attempt's line names ENOSPC from the record, and the restarts stop. Skipped
# where user namespaces or tmpfs mounts are not allowed.
dir="$scratch/full"
mkdir -p "$dir"
if unshare -rm sh -c 'mount -t tmpfs -o size=96k tmpfs "$0"' "$dir" 2>/dev/null; then
  unshare -rm sh -c 'mount -t tmpfs -o size=96k tmpfs "$0" && exec "$@"' "$dir" "${run[@]}" -- \
    "$dptrain" "${args[@]}" --checkpoint-dir "$dir/ck" --resume >"$dir.out" 2>"$dir.err"
  rc=$?
  [ $rc -eq 1 ] && [ "$(grep -c '^dptrain run: attempt' "$dir.err")" = 3 ] &&
    [ "$(line '^dptrain run: attempt [123]: exited with status 1, rank 0: I/O error: checkpoint at step 12: .*No space left on device (the checkpoint disk is full), resumed at step [08], +[08] steps' "$dir.err")" = 3 ] &&
    grep -q '^dptrain run: giving up: attempts 2 and 3 ended without a checkpoint newer than step 8' "$dir.err" ||
    fail "full disk: exit $rc: $(grep 'dptrain run' "$dir.err")"
  [ $failures -gt 0 ] || echo "ok: full disk: $(grep -m1 'attempt 2' "$dir.err")"
else
  echo "full disk: skipped (no user namespace with a tmpfs mount here)"
fi

[ $failures -eq 0 ] && echo "run_cmd: all passed"
exit $((failures > 0))
