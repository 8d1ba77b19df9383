#!/usr/bin/env bash
# A chaos soak: seeded faults at random moments into a training job that `dptrain run` restarts
# from its checkpoints, and what came of them (docs/collectives.md, "Faults and recovery").
#
#   tools/chaos.sh [--faults N] [--seed S] [--cluster] [--kinds kill,stop,disk] [--deadline T]
#                  [--steps M] [--checkpoint-every K [--full-step]] [--dir DIR] [--dptrain PATH]
#                  [--mpirun "CMD"]
#
# The job: `dptrain run -- mpirun -np 2 dptrain train ... --checkpoint-dir D
# --checkpoint-every K --resume` (K: 1 by default) on a small MLP, on this machine or (--cluster,
# root) on 2 nodes of tools/cluster.sh. --full-step trains with the full step, whose surviving
# rank writes the last completed step when the job fails: a sparse K then still loses little. Each fault (kind, rank, moment drawn from --seed) lands 20 to 400
# steps after the job trains (again), on a random rank (--steps: 1500 a fault by default):
#   kill  SIGKILL of the rank; the job ends, `dptrain run` restarts it
#   stop  SIGSTOP of the rank; the other's deadline (DPT_COMM_TIMEOUT=T) ends the job
#   disk  the checkpoint directory's file system (a tmpfs the tool mounts, root) filled up and
#         kept full (space a pruned checkpoint frees is taken at once), so a checkpoint fails
#         and ends the job; the space is freed once it has ended
# It reports each fault and: faults injected, survived (trained again), hangs (a rank alive past
# T + 2 s after the fault), corrupt resumes (a restart that passed over a checkpoint or could not
# read one), restarts that failed before a step (and why), steps lost (the last step logged before the job ended minus the step resumed
# at), seconds from the fault to a new step (p50, p99), and whether the final param_hash is the
# uninterrupted run's (the same world size and placement). Exit 0 when every fault was
# survived with no hang, no corrupt resume and the same param_hash; 1 otherwise; 2 usage.
set -uo pipefail

faults=3 seed=1 cluster_mode=0 kinds=kill,stop,disk deadline=3 steps="" dir="" mpirun_cmd=""
every=1 full_step=()
src=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
dptrain=""
usage() { sed -n '5,7p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2; exit 2; }
die() { echo "chaos.sh: $*" >&2; exit 2; }
while [ $# -gt 0 ]; do
  case $1 in
    --faults) faults=${2:-}; shift 2 || usage ;;
    --seed) seed=${2:-}; shift 2 || usage ;;
    --cluster) cluster_mode=1; shift ;;
    --kinds) kinds=${2:-}; shift 2 || usage ;;
    --deadline) deadline=${2:-}; shift 2 || usage ;;
    --steps) steps=${2:-}; shift 2 || usage ;;
    --checkpoint-every) every=${2:-}; shift 2 || usage ;;
    --full-step) full_step=(--full-step); shift ;;
    --dir) dir=${2:-}; shift 2 || usage ;;
    --dptrain) dptrain=${2:-}; shift 2 || usage ;;
    --mpirun) mpirun_cmd=${2:-}; shift 2 || usage ;;
    -h | --help) usage ;;
    *) die "unknown option '$1'" ;;
  esac
done
[[ $faults =~ ^[0-9]+$ ]] && [ "$faults" -le 10000 ] || die "--faults must be 0..10000, not '$faults'"
[[ $seed =~ ^[0-9]+$ ]] || die "--seed must be a non-negative integer, not '$seed'"
[[ $deadline =~ ^[0-9]+$ ]] && [ "$deadline" -ge 1 ] || die "--deadline must be whole seconds >= 1"
[[ $every =~ ^[0-9]+$ ]] && [ "$every" -ge 1 ] && [ "$every" -le 1000000 ] ||
  die "--checkpoint-every must be 1..1000000, not '$every'"
if [ -n "$steps" ]; then
  [[ $steps =~ ^[0-9]+$ ]] && [ "$steps" -ge $((1000 * faults)) ] && [ "$steps" -ge 100 ] ||
    die "--steps must be at least 100 and 1000 a fault ($((1000 * faults)))"
fi
for k in ${kinds//,/ }; do
  case $k in kill | stop | disk) ;; *) die "--kinds: unknown kind '$k' (kill, stop, disk)" ;; esac
done
if [ -z "$dptrain" ]; then
  dptrain=$src/build/tools/dptrain
  [ -x "$dptrain" ] || dptrain=$(command -v dptrain) || die "no dptrain: give --dptrain PATH"
fi
[ -x "$dptrain" ] || die "--dptrain '$dptrain' is not an executable"
command -v mpirun >/dev/null || die "no mpirun"
[ "$(id -u)" -ne 0 ] || export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OPENBLAS_NUM_THREADS=1 DPT_COMM_TIMEOUT=$deadline

own_dir=0
if [ -z "$dir" ]; then dir=$(mktemp -d /tmp/dptrain-chaos.XXXXXX) && own_dir=1 || exit 1; fi
mkdir -p "$dir" || exit 1
dir=$(cd "$dir" && pwd)
# What an earlier soak in DIR left (its checkpoints would be resumed).
rm -rf "${dir:?}"/{cal-log,ref-log,log,data,ckpt,ref-ckpt,cal-ckpt,*.json,*.err}
cluster=$src/tools/cluster.sh
mounted=0 cluster_up=0 job="" hog=""
cleanup() {
  [ -z "$hog" ] || { kill "$hog" 2>/dev/null; wait "$hog" 2>/dev/null; }
  # a soak cut short: `dptrain run` passes SIGTERM on to the job and does not restart it
  [ -z "$job" ] || ! kill -0 "$job" 2>/dev/null || { kill -TERM "$job"; wait "$job"; }
  [ $mounted = 0 ] || umount "$dir/disk" 2>/dev/null || umount -l "$dir/disk"
  [ $cluster_up = 0 ] || "$cluster" down
  [ $own_dir = 0 ] || rm -rf "$dir"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# The checkpoint directory: on a small tmpfs of its own where disk faults are asked for and a
# mount is allowed; else a plain directory, and no disk faults.
ck=$dir/ckpt
if [[ ,$kinds, == *,disk,* ]]; then
  mkdir -p "$dir/disk"
  if [ "$(id -u)" -eq 0 ] && mount -t tmpfs -o size=4m dptrain-chaos "$dir/disk" 2>/dev/null; then
    mounted=1 ck=$dir/disk/ckpt
  else
    echo "chaos.sh: cannot mount a tmpfs (root needed): no disk faults" >&2
    kinds=$(tr ',' '\n' <<<"$kinds" | grep -vx disk | paste -sd,)
  fi
fi
[ -n "$kinds" ] || die "no fault kind left to inject"
read -r -a kind_list <<<"${kinds//,/ }"

# The jobs run niced, so that their busy ranks do not starve the watch kept on them here.
read -r -a launch <<<"${mpirun_cmd:-mpirun --oversubscribe}"
launch=(nice -n 5 "${launch[@]}" -np 2 -x OPENBLAS_NUM_THREADS -x DPT_COMM_TIMEOUT)
if [ $cluster_mode = 1 ]; then
  [ "$(id -u)" -eq 0 ] || die "--cluster needs root (network namespaces)"
  export DPT_CLUSTER_PREFIX=${DPT_CLUSTER_PREFIX:-dptc-}
  export DPT_CLUSTER_SUBNET=${DPT_CLUSTER_SUBNET:-10.237.0} DPT_CLUSTER_STATE=$dir/cluster
  "$cluster" up 2 >"$dir/cluster.log" 2>&1 || { cat "$dir/cluster.log" >&2; exit 1; }
  cluster_up=1
  launch=(nice -n 5 "$cluster" run -np 2 --map-by node -x OPENBLAS_NUM_THREADS -x DPT_COMM_TIMEOUT --)
fi

# Data: 320 random 8x8 images, labels 0..9 (10 steps an epoch at the global batch 32).
be32() { printf "\\x$(printf %02x $(($1 >> 24 & 255)))\\x$(printf %02x $(($1 >> 16 & 255)))\\x$(printf %02x $(($1 >> 8 & 255)))\\x$(printf %02x $(($1 & 255)))"; }
mkdir -p "$dir/data"
{ be32 2051; be32 320; be32 8; be32 8; head -c $((320 * 64)) /dev/urandom; } >"$dir/data/train-images-idx3-ubyte"
{ be32 2049; be32 320; for ((i = 0; i < 320; ++i)); do printf "\\x0$((i % 10))"; done; } \
  >"$dir/data/train-labels-idx1-ubyte"
train=(train --backend cpu --data "$dir/data" --hidden 64 --global-batch 32 --epochs 100000
  --seed 5 --json --quiet --checkpoint-every "$every" "${full_step[@]}" --resume)

now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.2f", b - a }'; }
final_hash() { grep '"final": true' "$1" | tail -1 | grep -o '"param_hash": "[0-9a-f]*"' | cut -d'"' -f4; }
log=$dir/log/steps.jsonl
lines() { { wc -l <"$1"; } 2>/dev/null || echo 0; }
last_step() { tail -n 1 "$log" 2>/dev/null | sed -n 's/^{"step":\([0-9]*\),.*/\1/p'; }
# The pids of the job's ranks: dptrain processes of this checkpoint directory with an MPI rank.
rank_pids() {
  local p
  for p in $(pgrep -f -- "--checkpoint-dir $ck "); do
    [ "$(cat "/proc/$p/comm" 2>/dev/null)" = dptrain ] || continue
    tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | sed -n "s/^OMPI_COMM_WORLD_RANK=/$p /p"
  done
}
alive() { # PIDS...: whether one of them still runs (not gone, not a zombie)
  local p
  for p in "$@"; do
    [ -e "/proc/$p" ] && [ "$(awk '{ print $3 }' "/proc/$p/stat" 2>/dev/null)" != Z ] && return 0
  done
  return 1
}

# 1. The plan: each fault's kind, rank and moment, drawn from the seed.
RANDOM=$seed
kind_of=() rank_of=() gap_of=()
for ((i = 1; i <= faults; ++i)); do
  kind_of[i]=${kind_list[RANDOM % ${#kind_list[@]}]} rank_of[i]=$((RANDOM % 2))
  gap_of[i]=$((20 + RANDOM % 381))
done
side="$([ $cluster_mode = 1 ] && echo "2 nodes x 1 rank" || echo "2 ranks on this machine")"
# 2. Steps: 1500 a fault, more than its gap and the steps the job runs on before the fault lands.
[ -n "$steps" ] || steps=$((1000 + 1500 * faults))
ckbase=$(dirname "$ck")
train+=(--max-steps "$steps")
echo "chaos: $faults faults (${kinds}), seed $seed, $steps steps," \
  "deadline $deadline s, $side, a checkpoint every $every step(s)" \
  "$([ ${#full_step[@]} = 0 ] && echo "(sharded step)" || echo "(full step)")"

# 3. The uninterrupted run.
t0=$(now)
"${launch[@]}" "$dptrain" "${train[@]}" --checkpoint-dir "$ckbase/ref-ckpt" --log-dir "$dir/ref-log" \
  >"$dir/ref.json" 2>"$dir/ref.err" ||
  { echo "chaos.sh: the uninterrupted run failed:" >&2; tail -3 "$dir/ref.err" >&2; exit 1; }
rm -rf "$ckbase/ref-ckpt"
ref=$(final_hash "$dir/ref.json")
echo "uninterrupted: $steps steps in $(since "$t0") s, param_hash $ref"

# 4. The job under `dptrain run`, and the faults.
"$dptrain" run --max-restarts $((3 * faults + 3)) --restart-delay 0.5 -- "${launch[@]}" "$dptrain" \
  "${train[@]}" --checkpoint-dir "$ck" --log-dir "$dir/log" >"$dir/job.json" 2>"$dir/job.err" &
job=$!
base="" injected=0 survived=0 hangs=0 passed_over=0 bad_loads=0 failed_restarts=0 failed_starts=0 lost_all="" recover_all=""
for ((i = 1; i <= faults; ++i)); do
  kind=${kind_of[i]} rank=${rank_of[i]}
  # The ranks' pids once the job trains (found ahead: a search at the fault would delay it).
  declare -A pid_of=()
  while kill -0 $job 2>/dev/null && [ ${#pid_of[@]} -lt 2 ]; do
    pid_of=()
    [ -z "$(last_step)" ] || while read -r p r; do pid_of[$r]=$p; done < <(rank_pids)
    [ ${#pid_of[@]} -ge 2 ] || sleep 0.05
  done
  # Then the moment: GAP steps after it trained (again).
  [ -n "$base" ] || base=$(last_step)
  target=$((base + gap_of[i])) base=""
  while kill -0 $job 2>/dev/null && [ "$(last_step)" -lt $target ] 2>/dev/null; do sleep 0.01; done
  kill -0 $job 2>/dev/null || { echo "fault $i: the job ended before it"; break; }
  pids=("${pid_of[@]}")
  if ! alive "${pid_of[$rank]}"; then
    # the job failed by itself meanwhile (a start-up past the deadline): this fault once it trains
    echo "fault $i: rank $rank (pid ${pid_of[$rank]}) ended before the fault; waiting for the restart"
    while kill -0 $job 2>/dev/null && alive "${pids[@]}"; do sleep 0.05; done
    at_end=$(lines "$log")
    while kill -0 $job 2>/dev/null && [ "$(lines "$log")" -le "$at_end" ]; do sleep 0.05; done
    unset pid_of
    i=$((i - 1))
    continue
  fi
  err_at=$(lines "$dir/job.err")
  at_step=$(last_step)
  t_fault=$(now)
  case $kind in
    kill) kill -KILL "${pid_of[$rank]}" ;;
    stop) kill -STOP "${pid_of[$rank]}" ;;
    disk)
      # kept full: a fill once can land between a checkpoint's rename and the old one's prune,
      # whose freed space the next checkpoint then fits in, again and again
      dd if=/dev/zero of="$dir/disk/filler" bs=64k status=none 2>/dev/null
      while :; do cat /dev/zero >>"$dir/disk/filler" 2>/dev/null; done &
      hog=$!
      ;;
  esac
  injected=$((injected + 1))
  # The job ends: every rank gone within the deadline + 2 s, or a hang (then ended here).
  while alive "${pids[@]}" && awk -v g="$(since "$t_fault")" -v d="$deadline" 'BEGIN { exit !(g < d + 30) }'; do
    sleep 0.05
  done
  gone=$(since "$t_fault")
  hang=""
  if alive "${pids[@]}" || awk -v g="$gone" -v d="$deadline" 'BEGIN { exit !(g > d + 2) }'; then
    hangs=$((hangs + 1)) hang=" HANG"
    kill -KILL "${pids[@]}" 2>/dev/null
  fi
  [ -z "$hog" ] || { kill "$hog" 2>/dev/null; wait "$hog" 2>/dev/null; hog=""; }
  rm -f "$dir/disk/filler"
  ended_step=$(last_step)
  at_end=$(lines "$log")
  # Training again: a new step logged; the restart's lines say where it resumed.
  while kill -0 $job 2>/dev/null && [ "$(lines "$log")" -le "$at_end" ] &&
    awk -v g="$(since "$t_fault")" 'BEGIN { exit !(g < 180) }'; do
    sleep 0.05
  done
  if [ "$(lines "$log")" -gt "$at_end" ]; then
    back=$(since "$t_fault") base=$(last_step)
    survived=$((survived + 1))
    recover_all="$recover_all $back"
  else
    back="never"
  fi
  new=$(tail -n +$((err_at + 1)) "$dir/job.err")
  resumed=$(grep -o "resumed from [^ ]*: step [0-9]*" <<<"$new" | tail -1 | sed 's/.* //')
  po=$(grep -c "passing over checkpoint" <<<"$new")
  bad=$(grep -cE "^dptrain: (rank [0-9]+: )?bad file format" <<<"$new")
  restarts=$(grep -c "dptrain run: the job .*; restart" <<<"$new")
  passed_over=$((passed_over + po)) bad_loads=$((bad_loads + bad))
  [ "$restarts" -le 1 ] || failed_restarts=$((failed_restarts + restarts - 1))
  failed_starts=$((failed_starts + $(grep -c "MPI_Init_thread did not return" <<<"$new")))
  lost=$((${ended_step:-0} - ${resumed:-0}))
  [ "$back" = never ] || lost_all="$lost_all $lost"
  echo "fault $i: $kind rank $rank at step ${at_step:-0}:" \
    "job ended after $gone s$hang, last step ${ended_step:-none}, resumed at ${resumed:-0}" \
    "($lost lost), training again after $back s$([ "$po" = 0 ] || echo ", $po checkpoint(s) passed over")"
  unset pid_of
done
t_wait=$(now)
wait $job
rc=$?
final=$(final_hash "$dir/job.json")

# 5. The report.
pct() { # P VALUES...: the nearest-rank percentile
  local p=$1
  shift
  [ $# -gt 0 ] || { echo "-"; return; }
  printf '%s\n' "$@" | sort -g | awk -v p="$p" '{ a[NR] = $1 } END { k = int(p / 100 * NR + 0.999999); if (k < 1) k = 1; printf "%.1f", a[k] }'
}
read -r -a rec <<<"$recover_all"
read -r -a lst <<<"$lost_all"
corrupt=$((passed_over + bad_loads))
lost_mean=$(printf '%s\n' "${lst[@]}" | awk 'NF { s += $1; n++ } END { if (n) printf "%.1f", s / n; else print "-" }')
lost_max=$(printf '%s\n' "${lst[@]}" | sort -n | tail -1)
same=no
[ -n "$final" ] && [ "$final" = "$ref" ] && same=yes
echo "faults injected: $injected of $faults"
echo "survived (trained again): $survived"
echo "hangs (a rank alive past the deadline + 2 s): $hangs"
echo "corrupt resumes: $corrupt (checkpoints passed over: $passed_over, failed to load: $bad_loads)"
echo "restarts failing before a step: $failed_restarts (ranks' MPI start-up past the deadline: $failed_starts)"
echo "steps lost per fault: mean $lost_mean, max ${lost_max:--}"
echo "fault to training again: p50 $(pct 50 "${rec[@]}") s, p99 $(pct 99 "${rec[@]}") s"
echo "job: exit $rc after $(since "$t_wait") s more; final param_hash ${final:-none}," \
  "$([ $same = yes ] && echo "the uninterrupted run's" || echo "the uninterrupted run had $ref")"
echo "chaos: injected=$injected survived=$survived hangs=$hangs corrupt=$corrupt same_hash=$same"
[ "$injected" -eq "$faults" ] && [ "$survived" -eq "$injected" ] && [ $hangs -eq 0 ] &&
  [ $corrupt -eq 0 ] && [ $same = yes ] && [ $rc -eq 0 ]
